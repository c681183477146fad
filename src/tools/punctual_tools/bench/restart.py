"""The drift benchmark's restart phase: ``punctual up`` SIGKILLed with everything it started, as a crash, and
started again on the same home (DynamoDB Local's data stays on disk); see :mod:`leads` for the phase and its
targets. :func:`restart_figures` is its judgement of what the restart did, from the arrivals and the outcomes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.runtime.client import Client
from punctual.targets import HttpAction
from punctual_tools.bench.phase_parts import (
    active_tasks,
    checker_figures,
    lead_seconds,
    log,
    received_fires,
    store_latency,
    stored,
    write_paced,
)
from punctual_tools.checker import check, expected_from_tasks
from punctual_tools.crashes import crash_windows
from punctual_tools.local.cpu_quota import init_wait_figures
from punctual_tools.local.dynamodb_local import find_project_root
from punctual_tools.local.stack import client_settings, read_state

STEADY_AFTER_UP_MS = 10_000  # a restart's tasks due this long after it is up are judged as steady ones
KILL_TO_BURST_MS = 8_000
RESTART_AFTER_KILL_S = 1.0
WRITES_PER_DRAINED_TASK = 2  # a backlog task is armed or taken over, then its outcome is written
SampleT = TypeVar("SampleT", bound=tuple[Any, ...])


def invocations_between(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, int]:
    """The executors' invocations, throttles and cold starts between two states of one stack (its state file:
    ``invoker_stats`` and ``init_waits_ms``), and how many of those cold starts waited for a core, for how long.

    >>> before = {"invoker_stats": {"invoked": 0, "throttles": 0, "cold_starts": 16}, "init_waits_ms": [900.0]}
    >>> after = {"invoker_stats": {"invoked": 40, "throttles": 2, "cold_starts": 28}, "init_waits_ms": [900.0, 0, 300]}
    >>> invocations_between(before, after)
    {'invoked': 40, 'throttles': 2, 'cold_starts': 12, 'init_waits': 1, 'init_wait_ms_max': 300}
    """
    first, last = before.get("invoker_stats") or {}, after.get("invoker_stats") or {}
    counts = {k: int(last.get(k, 0)) - int(first.get(k, 0)) for k in ("invoked", "throttles", "cold_starts")}
    waits = list(after.get("init_waits_ms") or [])[len(before.get("init_waits_ms") or []) :]
    return counts | init_wait_figures(waits)


def restart_figures(
    due: Mapping[str, int], arrived: Mapping[str, float], missed: set[str], killed_ms: float, up_ms: float
) -> dict[str, Any]:
    """What a restart did with its tasks (``arrived``: each task's first arrival, epoch ms; ``missed``: those
    recorded MISSED). The backlog is every task due by the time the stack was up that had not arrived before the
    kill and was not recorded MISSED; it drains from up to its last arrival (a rate of None: it had drained
    before the stack was up). ``after_up`` is the drift of each task due 10 s or more after up."""
    backlog = [
        t for t, d in due.items() if d <= up_ms and t not in missed and not (t in arrived and arrived[t] < killed_ms)
    ]
    drained = [arrived[t] for t in backlog if t in arrived]
    drain_s = (max(drained) - up_ms) / 1000 if drained else None
    rate = round(len(drained) / drain_s, 1) if drain_s is not None and drain_s > 0 else None
    return {
        "backlog": len(backlog),
        "drained": len(drained),
        "drain_s": None if drain_s is None else round(drain_s, 3),
        "drain_rate_per_s": rate,
        "after_up": [arrived[t] - d for t, d in due.items() if d >= up_ms + STEADY_AFTER_UP_MS and t in arrived],
    }


IDLE, IOWAIT = 3, 4  # the fields of /proc/stat's cpu line (after its name) that count as idle


def cpu_ticks() -> tuple[int, int]:
    """The machine's CPU ticks so far, busy and in all (the first line of /proc/stat; iowait counts as idle)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[IDLE] + (fields[IOWAIT] if len(fields) > IOWAIT else 0)
    return sum(fields) - idle, sum(fields)


def busy_share(samples: list[tuple[float, int, int]], start_ms: float, end_ms: float) -> float | None:
    """How busy the machine's cores were (0..1) between the samples nearest ``start_ms`` and ``end_ms``
    (``samples``: epoch ms, busy ticks, all ticks, in time order); None without two distinct samples.

    >>> busy_share([(0, 0, 0), (1000, 150, 200), (2000, 350, 400)], 0, 2000)
    0.875
    """
    ends = window_ends(samples, start_ms, end_ms)
    if ends is None or ends[1][2] == ends[0][2]:
        return None
    first, last = ends
    return round((last[1] - first[1]) / (last[2] - first[2]), 3)


def window_ends(samples: Sequence[SampleT], start_ms: float, end_ms: float) -> tuple[SampleT, SampleT] | None:
    """The first and last of ``samples`` (each led by its epoch ms, in time order) between ``start_ms`` and
    ``end_ms``; None without two of them."""
    inside = [s for s in samples if start_ms <= s[0] <= end_ms]
    return (inside[0], inside[-1]) if inside[1:] else None


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def stack_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of the stack ``punctual up`` runs as ``pid``, by part: ``store`` (DynamoDB Local's
    JVM), ``stack`` (the up process's own threads: the poller, the fast path, the API) and ``executors`` (every
    other process below it, with the children each has reaped: the executors' workers and their INITs)."""
    parts = {"store": 0.0, "stack": 0.0, "executors": 0.0}
    for each in [pid, *descendants(pid)]:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{each}/cmdline").read_bytes()
        except OSError:
            continue
        own, reaped = int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
        if each == pid:
            parts["stack"] += own / CLOCK_TICKS
            parts["executors"] += reaped / CLOCK_TICKS  # (reaped: workers started by the up process itself)
        else:
            parts["store" if b"java" in command.split(b"\0", 1)[0] else "executors"] += (own + reaped) / CLOCK_TICKS
    return parts


def cpu_shares(
    samples: list[tuple[float, dict[str, float]]], start_ms: float, end_ms: float
) -> dict[str, float] | None:
    """Cores each part used on average (CPU seconds a second) between the samples nearest ``start_ms`` and
    ``end_ms`` (``samples``: epoch ms and :func:`stack_cpu`, in time order); None without two distinct samples.

    >>> cpu_shares([(0, {"store": 1.0}), (1000, {"store": 1.5}), (2000, {"store": 2.2})], 0, 2000)
    {'store': 0.6}
    """
    ends = window_ends(samples, start_ms, end_ms)
    if ends is None or ends[1][0] == ends[0][0]:
        return None
    (first_ms, first), (last_ms, last) = ends
    seconds = (last_ms - first_ms) / 1000
    return {k: round((last[k] - first.get(k, 0.0)) / seconds, 2) for k in last}


class CpuSampler:
    """From its start until :meth:`stop`, every ``every_s``: the machine's :func:`cpu_ticks` into ``busy`` and the
    stack's :func:`stack_cpu` by part into ``parts`` (each with its epoch ms), in a thread of its own, so that the
    samples go on while the phase writes."""

    def __init__(self, up: UpProcess, busy: list[tuple[float, int, int]], every_s: float = 0.5) -> None:
        self.up, self.busy, self.every_s = up, busy, every_s
        self.parts: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            now_ms = time.time() * 1000
            self.busy.append((now_ms, *cpu_ticks()))
            self.parts.append((now_ms, self.up.cpu()))
            if self._stop.wait(self.every_s):
                return


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), children before grandchildren."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


class UpProcess:
    """``punctual up`` in a process of its own on ``home``, SIGKILLed with everything it started as a crash."""

    def __init__(self, home: Path, poll_interval_s: float, profile: str) -> None:
        self.home = home
        self.poll_interval_s = poll_interval_s
        self.profile = profile
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout_s: float = 180.0) -> dict[str, Any]:
        """Start it and wait until it is up (its state file names it); returns the state."""
        self.home.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "punctual_tools.cli", "--home", str(self.home), "up", "--port", "0"]
        command += ["--api-port", "0", "--poll-interval", f"{self.poll_interval_s:g}", "--profile", self.profile]
        env = os.environ | {"PUNCTUAL_NTP_SERVER": "off", "PUNCTUAL_ALLOWED_TARGETS": "127.0.0.1"}
        with (self.home / f"up-{self.starts}.log").open("wb") as out:
            self.process = subprocess.Popen(
                command, cwd=find_project_root(), env=env, stdout=out, stderr=subprocess.STDOUT
            )
        self.starts += 1
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.process.poll() is None:
            state = read_state(self.home) or {}
            if state.get("pid") == self.process.pid:
                return state
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"punctual up did not come up; see {self.home}/up-{self.starts - 1}.log")

    def cpu(self) -> dict[str, float]:
        """:func:`stack_cpu` of the running process (nothing once it has ended)."""
        if self.process is None or self.process.poll() is not None:
            return {}
        return stack_cpu(self.process.pid)

    def kill(self) -> None:
        """SIGKILL the process and every process below it, as a crash of the machine's stack would: each is
        stopped first (so none forks a new one meanwhile), then killed."""
        if self.process is None:
            return
        tree = [self.process.pid, *descendants(self.process.pid)]
        for pid in tree:
            self._signal(pid, signal.SIGSTOP)
        tree += [pid for pid in descendants(self.process.pid) if pid not in tree]
        for pid in tree:
            self._signal(pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        """A clean stop (Ctrl-C), then a kill of whatever is left."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.kill()

    @staticmethod
    def _signal(pid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def client_of(state: Mapping[str, Any]) -> Client:
    return Client(Settings(**client_settings(state), ntp_server=None, allowed_targets="127.0.0.1"))


def restart_phase(  # noqa: PLR0915  one measurement in order: write, kill, restart, drain, judge; its figures come from it
    home: Path,
    url: str,
    received: Path,
    *,
    rate: float,
    seconds: float,
    burst: int,
    lead_rate: float,
    poll_interval_s: float,
    profile: str,
) -> dict[str, Any]:
    """The restart (see the module's docstring)."""
    up = UpProcess(home, poll_interval_s, profile)
    try:
        state = up.start()
        client = client_of(state)
        prefix = f"restart-{uuid.uuid4().hex[:6]}-"
        count = int(rate * seconds) + burst
        kill_ms = int(time.time() * 1000) + 30_000 + 40 * count  # room to write them all on a busy machine
        first = kill_ms - int(seconds * 250)
        due = {f"{prefix}s{i:05d}": first + int(i * 1000 / rate) for i in range(int(rate * seconds))}
        due |= {f"{prefix}b{i:05d}": kill_ms + KILL_TO_BURST_MS for i in range(burst)}
        action = HttpAction(url=url)
        writing = time.perf_counter()
        results = client.schedule_many({"due_at": from_ms(d), "action": action, "task_id": t} for t, d in due.items())
        writes_per_s = len(results) / max(time.perf_counter() - writing, 1e-3)
        write_errors = sum(not r.ok for r in results)
        due = {t: d for (t, d), r in zip(due.items(), results, strict=True) if r.ok}
        overrun_s = max(0.0, time.time() - (kill_ms - 15_000) / 1000)  # the spread's first due was 15 s earlier
        if overrun_s:
            log(f"restart: the writes ran {overrun_s:.1f} s past the plan: the kill comes late, the figures suffer")
        log(
            f"restart: {sum(r.ok for r in results)} webhooks scheduled; the kill in "
            f"{(kill_ms - time.time() * 1000) / 1000:.0f} s"
        )
        before = [f"{prefix}la{i:04d}" for i in range(int(lead_rate * (kill_ms - 500 - time.time() * 1000) / 1000))]
        written = write_paced(client, before, lead_rate, lead_seconds(len(before), 2.0, 4.0), None, action=action)
        due |= dict(zip(before, written["dues"], strict=False))
        time.sleep(max(0.0, (kill_ms - time.time() * 1000) / 1000))
        burst_ids = [t for t in due if t.startswith(f"{prefix}b")][::25]
        armed = sum(str(getattr(t.status, "value", "")) == "ARMED" for t in stored(client, burst_ids))
        up.kill()
        killed_ms = time.time() * 1000
        log(f"restart: the stack SIGKILLed ({armed} of {len(burst_ids)} sampled burst tasks ARMED); again in 1 s")
        time.sleep(RESTART_AFTER_KILL_S)
        restart_ms = time.time() * 1000
        busy = [(restart_ms, *cpu_ticks())]
        state = up.start()
        busy.append((time.time() * 1000, *cpu_ticks()))
        up_ms = time.time() * 1000
        sampler = CpuSampler(up, busy).start()
        client = client_of(state)
        log(f"restart: up {(up_ms - restart_ms) / 1000:.1f} s after it was started again")
        end_ms = first + seconds * 1000 - 4_000
        after = [f"{prefix}lb{i:04d}" for i in range(max(0, int(lead_rate * (end_ms - up_ms) / 1000)))]
        written = write_paced(client, after, lead_rate, lead_seconds(len(after), 2.0, 4.0, seed=2), None, action=action)
        due |= dict(zip(after, written["dues"], strict=False))
        deadline = time.time() + 240
        while time.time() < deadline and (
            time.time() * 1000 < max(due.values()) + 3_000 or active_tasks(client.settings)
        ):
            time.sleep(1.0)
        sampler.stop()
        invocations = invocations_between(state, read_state(home) or {})
        tasks = stored(client, list(due))
        windows = crash_windows(client.settings, due)
        verdict = check(expected_from_tasks(tasks), received_fires(received, prefix), windows=windows)
        up.stop()
    finally:
        up.kill()
    arrived: dict[str, float] = {}
    for fire in sorted(received_fires(received, prefix), key=lambda f: f.observed_ms):
        arrived.setdefault(fire.key.rsplit(":", 1)[0], fire.observed_ms)
    missed = {t.task_id for t in tasks if str(getattr(t.status, "value", "")) == "MISSED"}
    figures = restart_figures(due, arrived, missed, killed_ms, up_ms)
    drained_ms = up_ms + 1000 * (figures["drain_s"] or 0)
    fires = [{"task_id": t, "due_ms": due[t], "fired_ms": arrived[t]} for t in due if t in arrived]
    return {
        "scheduled": len(due),
        "fired": len(arrived),
        "duplicates": len(verdict.extra),
        "drift": figures.pop("after_up"),
        "fires": fires,
        "up_s": round((up_ms - restart_ms) / 1000, 2),
        "up_after_kill_s": round((up_ms - killed_ms) / 1000, 2),
        "burst": burst,
        "write_errors": write_errors,
        "plan_overrun_s": round(overrun_s, 1),
        "burst_armed_sampled": f"{armed} of {len(burst_ids)}",
        **figures,
        "checker": checker_figures(verdict),
        "store_latency": store_latency(state),
        # how busy the machine was while the stack came up, and from up until the backlog had drained
        "busy_starting": busy_share(busy, restart_ms, up_ms + 1),
        "busy_draining": busy_share(busy, up_ms, drained_ms + 1000),
        # the cores each part of the stack used from up until the backlog had drained
        "cores_draining": cpu_shares(sampler.parts, up_ms, drained_ms + 1000),
        # the executors' invocations from up to the end: a busy stack starts more executors, each a cold start
        "invocations": invocations,
        "cores": os.cpu_count(),
        # the drain's ceiling on this store: the client's writes a second in the same run, two writes a task
        # (its take-over or arming, and its outcome)
        "store_writes_per_s": round(writes_per_s, 1),
        "drain_ceiling_per_s": round(writes_per_s / WRITES_PER_DRAINED_TASK, 1),
    }
