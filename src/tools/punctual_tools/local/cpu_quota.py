"""The CPU a Lambda's memory size buys, for a local worker process: a cgroup with a CPU quota of its own.

Lambda gives a function ``MemorySize / 1769`` of a vCPU (1,769 MB buys one). Locally each executor worker runs in
a cgroup of its own whose CFS quota is that share of one core: ``20000 * MB / 1769`` µs of CPU every 20,000 µs
(rounded down: never more than Lambda gives), the period in which Lambda enforces it
(:data:`punctual.config.cpu_share.QUOTA_PERIOD_MS`). The groups live under ``<this process's group>/punctual-<pid>/``:

- **cgroup v1**: the ``cpu`` controller's hierarchy (``/sys/fs/cgroup/cpu`` on most systems):
  ``cpu.cfs_period_us`` and ``cpu.cfs_quota_us``. A process with real-time threads cannot join a v1 group whose
  ``cpu.rt_runtime_us`` is 0 (a new group's), so the workers confined here fire at normal priority.
- **cgroup v2** (``/sys/fs/cgroup``, or ``/sys/fs/cgroup/unified`` beside v1): ``cpu.max`` (``"quota period"``),
  once the ``cpu`` controller is enabled for the children (``cgroup.subtree_control``) of this process's group and
  of ``punctual-<pid>``.

:meth:`CpuGroups.open` finds one that can be written (root, or a delegated subtree) and says why when none can;
the worker joins its group itself (:func:`join`) before it loads the handler. A new execution environment's group
starts with the CPU of its INIT (:func:`init_quota_us`: a whole core at least, see below) and is set to the memory
size's share (:meth:`CpuGroups.set_quota`) once the environment is ready. Groups are removed when their
worker has ended, and ``punctual-<pid>`` when its process stops; those of a process that no longer runs (a
stack that was killed) are removed when the next stack starts (:func:`remove_stale_groups`, whatever its profile)
and at the next :meth:`CpuGroups.open`, after their processes are ended.

**INIT's CPU.** AWS documents the INIT phase's 10 s limit, not its CPU. Measured in public, an on-demand
function's INIT runs unthrottled, on up to two vCPUs whatever its memory size, and one started for provisioned
concurrency does not. The local model takes the lower bound of that: one whole core (or the memory size's share,
when it buys more) until the environment is ready or :data:`~punctual_tools.local.invoker.INIT_LIMIT_S` has passed.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from punctual.config.cpu_share import MB_PER_VCPU, QUOTA_PERIOD_MS

log = logging.getLogger(__name__)

PERIOD_US = QUOTA_PERIOD_MS * 1000
MIN_QUOTA_US = 1_000  # the kernel's smallest CFS quota
GROUP_PREFIX = "punctual-"
V2 = 2  # the unified hierarchy (cgroup v2), against the v1 cpu controller's
_names = itertools.count(1)


def quota_us(memory_mb: int) -> int:
    """The CFS quota (µs every :data:`PERIOD_US`) of a function with ``memory_mb`` MB."""
    return max(MIN_QUOTA_US, PERIOD_US * memory_mb // MB_PER_VCPU)


def init_quota_us(memory_mb: int) -> int:
    """The CFS quota of an on-demand environment's INIT: one whole core, or the memory size's share if more."""
    return max(PERIOD_US, quota_us(memory_mb))


def init_slot_count() -> int:
    """INITs that run at once under the Lambda profile (each on a core): the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class InitSlot:
    """One of the INIT slots taken from ``slots``: given back once, however many times :meth:`release` is called."""

    def __init__(self, slots: threading.BoundedSemaphore) -> None:
        self._slots: threading.BoundedSemaphore | None = slots
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            slots, self._slots = self._slots, None
        if slots is not None:
            slots.release()


INIT_WAIT_COUNTED_MS = 1.0  # a wait for an INIT slot that counts as one (a free slot takes microseconds)


def init_wait_figures(waits_ms: list[float]) -> dict[str, int]:
    """How many INITs waited for a slot (a core) and the longest wait (ms): time Lambda would not have spent."""
    return {
        "init_waits": sum(1 for w in waits_ms if w >= INIT_WAIT_COUNTED_MS),
        "init_wait_ms_max": round(max(waits_ms, default=0)),
    }


@dataclass(frozen=True)
class CpuQuotaStatus:
    """Whether workers get the CPU quota their memory size buys, and how (or why not)."""

    applied: bool
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {"applied": self.applied, "detail": self.detail}


@dataclass(frozen=True)
class _Mount:
    version: Literal[1, 2]
    mount_point: Path
    root: str  # the hierarchy's path mounted there


MOUNT_POINT, SUPER_OPTIONS = 4, 2  # in a mountinfo line: before its " - ", and after it


def _mounts(mountinfo: str) -> list[_Mount]:
    found = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if not sep or len(fields) <= MOUNT_POINT or len(after) <= SUPER_OPTIONS:
            continue
        fstype, options = after[0], after[SUPER_OPTIONS].split(",")
        mount_point = Path(fields[MOUNT_POINT].replace("\\040", " "))
        if fstype == "cgroup" and "cpu" in options:
            found.append(_Mount(1, mount_point, fields[3]))
        elif fstype == "cgroup2":
            found.append(_Mount(2, mount_point, fields[3]))
    return found


def _own_path(proc_cgroup: str, version: Literal[1, 2]) -> str | None:
    """This process's group in the v1 ``cpu`` hierarchy or in the v2 one, from ``/proc/self/cgroup``."""
    for line in proc_cgroup.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if version == V2 and number == "0" and controllers == "":
            return path
        if version == 1 and "cpu" in controllers.split(","):
            return path
    return None


def _group_dir(mount: _Mount, path: str) -> Path:
    relative = path[len(mount.root) :] if mount.root != "/" and path.startswith(mount.root) else path
    return mount.mount_point / relative.lstrip("/")


def _write(path: Path, value: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(value)


def _rmdir(group: Path) -> None:
    """Remove a group (in cgroupfs its control files go with it)."""
    group.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def join(group: str, pid: int | None = None) -> None:
    """Move process ``pid`` (this one by default), with all its threads, into ``group``."""
    _write(Path(group) / "cgroup.procs", str(pid or os.getpid()))


def group_of(pid: int, mountinfo_path: str = "/proc/self/mountinfo") -> Path | None:
    """The folder of the cpu-controller group process ``pid`` is in (v1 first, as :meth:`CpuGroups.open`)."""
    try:
        mountinfo = Path(mountinfo_path).read_text()
        proc_cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for mount in sorted(_mounts(mountinfo), key=lambda m: m.version):
        path = _own_path(proc_cgroup, mount.version)
        if path is not None:
            return _group_dir(mount, path)
    return None


class CpuGroups:
    """The cgroups of one process's workers, each with its own CPU quota, under ``punctual-<pid>``."""

    def __init__(self, version: Literal[1, 2], parent: Path) -> None:
        self.version = version
        self.parent = parent

    @classmethod
    def open(
        cls,
        mountinfo_path: str = "/proc/self/mountinfo",
        cgroup_path: str = "/proc/self/cgroup",
        pid: int | None = None,
    ) -> tuple[CpuGroups | None, str]:
        """The groups of this process (created if need be), or ``None`` and why the CPU quota cannot be set.
        Groups left by processes that no longer run are removed first."""
        pid = pid or os.getpid()
        try:
            mounts = _mounts(Path(mountinfo_path).read_text())
            proc_cgroup = Path(cgroup_path).read_text()
        except OSError as exc:
            return None, f"cannot read the cgroup mounts ({exc.strerror or exc})"
        reasons = []
        for mount in sorted(mounts, key=lambda m: m.version):  # v1's cpu hierarchy, when there is one, holds the cpu
            own = _own_path(proc_cgroup, mount.version)
            if own is None:
                continue
            base = _group_dir(mount, own)
            try:
                _remove_stale(base)
                groups = cls._make(mount.version, base, pid)
            except OSError as exc:
                reasons.append(f"cgroup v{mount.version} at {base}: {exc.strerror or exc}")
                continue
            except ValueError as exc:
                reasons.append(f"cgroup v{mount.version} at {base}: {exc}")
                continue
            return groups, f"cgroup v{mount.version} at {groups.parent}"
        if not reasons:
            reasons.append("no cgroup hierarchy with a cpu controller is mounted")
        return None, "; ".join(reasons)

    @classmethod
    def _make(cls, version: Literal[1, 2], base: Path, pid: int) -> CpuGroups:
        if version == 1:
            if not (base / "cpu.cfs_quota_us").exists():
                raise ValueError("no cpu.cfs_quota_us (the kernel has no CFS bandwidth control)")
        else:
            if "cpu" not in (base / "cgroup.controllers").read_text().split():
                raise ValueError("the cpu controller is not available to this group (cgroup.controllers)")
            if "cpu" not in (base / "cgroup.subtree_control").read_text().split():
                _write(base / "cgroup.subtree_control", "+cpu")
        parent = base / f"{GROUP_PREFIX}{pid}"
        parent.mkdir(exist_ok=True)
        if version == V2:
            _write(parent / "cgroup.subtree_control", "+cpu")
        groups = cls(version, parent)
        probe = groups.create(256)  # a quota it cannot set is found now, not at the first worker
        groups.remove(probe)
        return groups

    def create(self, memory_mb: int, quota: int | None = None) -> Path:
        """A new group for one worker, with the CPU quota ``memory_mb`` buys (or ``quota`` µs a period)."""
        group = self.parent / f"w{next(_names)}"
        group.mkdir()
        try:
            self.set_quota(group, quota_us(memory_mb) if quota is None else quota)
        except BaseException:
            self.remove(group)
            raise
        return group

    def set_quota(self, group: Path, quota: int) -> None:
        """Give ``group`` ``quota`` µs of CPU every :data:`PERIOD_US` (its processes stay in it)."""
        if self.version == 1:
            _write(group / "cpu.cfs_period_us", str(PERIOD_US))
            _write(group / "cpu.cfs_quota_us", str(quota))
            got = (group / "cpu.cfs_quota_us").read_text().strip()
        else:
            _write(group / "cpu.max", f"{quota} {PERIOD_US}")
            got = (group / "cpu.max").read_text().split()[0]
        if got != str(quota):
            raise ValueError(f"the quota reads {got}, not {quota}")

    def remove(self, group: Path) -> None:
        """Remove a worker's group once its process has ended."""
        _remove_group(group)

    def close(self) -> None:
        """Remove ``punctual-<pid>`` if no group is left in it (another invoker of this process may hold one)."""
        with contextlib.suppress(OSError):
            _rmdir(self.parent)


def _remove_group(group: Path, wait_s: float = 2.0) -> None:
    """Remove an empty group (a few tries: the kernel may take a moment to let go of a process that ended)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            _rmdir(group)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                log.warning("cannot remove the cgroup %s: %s", group, exc.strerror or exc)
                return
            time.sleep(0.05)


def remove_stale_groups(mountinfo_path: str = "/proc/self/mountinfo", cgroup_path: str = "/proc/self/cgroup") -> None:
    """Remove the groups (and end the processes left in them) of every stack that no longer runs, in each
    hierarchy this process's group is in: what a killed stack left, whatever profile the next one runs under."""
    try:
        mounts = _mounts(Path(mountinfo_path).read_text())
        proc_cgroup = Path(cgroup_path).read_text()
    except OSError:
        return
    for mount in mounts:
        own = _own_path(proc_cgroup, mount.version)
        if own is not None:
            with contextlib.suppress(OSError):
                _remove_stale(_group_dir(mount, own))


def _remove_stale(base: Path) -> None:
    """End the processes left in the groups of a process that no longer runs, and remove the groups."""
    for parent in base.glob(f"{GROUP_PREFIX}*"):
        owner = parent.name[len(GROUP_PREFIX) :]
        if not parent.is_dir() or not owner.isdigit() or _alive(int(owner)):
            continue
        for group in [*(p for p in parent.iterdir() if p.is_dir()), parent]:
            with contextlib.suppress(OSError):
                pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
                for pid in pids:
                    log.warning("ending process %d left in %s by a stack that did not stop", pid, group)
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)  # a stopped (frozen) process ends too
            _remove_group(group)
