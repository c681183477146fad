"""How much of a core this process may use: the CPU quota an executor fires under.

Lambda gives a function ``MemorySize / 1769`` of a vCPU and says so in ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE``; the
local runtime gives each executor worker that share as a CFS quota of a cgroup of its own. Below one core,
what the executor spins is taken from the quota its fires need
(:meth:`punctual.executing.dispatcher.FireTiming.for_cpu_share`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

MB_PER_VCPU = 1769  # Lambda: a function with 1,769 MB has the equivalent of one vCPU, less a share of it
# The period in which Lambda enforces a function's CPU quota. AWS does not document it; measured on deployed
# functions it is about 20 ms: a function that spends its share early in a period is paused until the period
# ends, about 20 ms after the invocation began ("the throttling interval is actually 20 ms":
# https://github.com/pwrdrvr/lambda-dispatch/issues/246; https://github.com/pwrdrvr/lambda-throttling charts the
# pauses at each memory size). The local runtime
# uses the same period, not the kernel's default of 100 ms, which would let a burst spend five times as much CPU
# before its first pause.
QUOTA_PERIOD_MS = 20
FIRE_BUDGET = 0.7  # the share of a period's quota the fires due in it may plan on (the rest: the spin, the GIL)


def cgroup_cpu_share(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> float | None:
    """The smallest CFS quota (in cores) of this process's cgroup and its ancestors, v1 (``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us``) or v2 (``cpu.max``); ``None`` when none is set or none can be read."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    shares: list[float] = []
    for line in lines:
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "cpu" in controllers.split(","):
            hierarchy = Path(root) / controllers
            shares += _walk(hierarchy if hierarchy.is_dir() else Path(root) / "cpu", path, _v1_share)
        elif controllers == "" and line.startswith("0:"):
            shares += _walk(Path(root), path, _v2_share)
            shares += _walk(Path(root) / "unified", path, _v2_share)
    return min(shares, default=None)


def _walk(base: Path, path: str, read: Callable[[Path], float | None]) -> list[float]:
    """The quotas (in cores) read by ``read`` in the group at ``path`` under ``base`` and in its ancestors."""
    found = []
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        share = read(base.joinpath(*parts[:depth]))
        if share is not None:
            found.append(share)
    return found


def _v1_share(group: Path) -> float | None:
    try:
        quota = int((group / "cpu.cfs_quota_us").read_text())
        period = int((group / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v2_share(group: Path) -> float | None:
    try:
        quota, period = (group / "cpu.max").read_text().split()[:2]
        return int(quota) / int(period) if quota != "max" and int(period) > 0 else None
    except (OSError, ValueError):
        return None


def detect_cpu_share(
    env: Mapping[str, str] | None = None, proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup"
) -> float | None:
    """This process's share of a core: in a Lambda function, the share its memory size buys
    (``AWS_LAMBDA_FUNCTION_MEMORY_SIZE`` / 1769, which Lambda's runtime sets and the local runtime too); elsewhere
    its cgroup's CPU quota when it has one; ``None``: no quota is known (whole cores).

    The memory size comes first: an executor reads its share once, in its INIT, when a cgroup's quota is still the
    INIT's CPU (a whole core or more locally; unthrottled in AWS), not the share it fires under."""
    memory = (os.environ if env is None else env).get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "")
    if memory.isdigit() and int(memory) > 0:
        return int(memory) / MB_PER_VCPU
    return cgroup_cpu_share(proc_cgroup, root)


def fires_per_period(
    memory_mb: int, fire_cpu_us: float, budget: float = FIRE_BUDGET, period_ms: int = QUOTA_PERIOD_MS
) -> int:
    """How many fires due within one quota period an executor of ``memory_mb`` can start before its quota for
    that period runs out, at ``fire_cpu_us`` of CPU a fire and ``budget`` of the quota (at least 1). A fire
    past the quota waits for the next period: the rest of the period, up to 17 ms at 256 MB.

    >>> fires_per_period(256, 60.0)
    33
    >>> fires_per_period(1769, 60.0)
    233
    >>> fires_per_period(128, 10_000.0)
    1
    """
    quota_us = period_ms * 1000 * memory_mb / MB_PER_VCPU
    return max(1, int(budget * quota_us / fire_cpu_us))
