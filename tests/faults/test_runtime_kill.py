"""Fault: the local runtime (``punctual up``, in a subprocess) is killed with SIGKILL under load, then restarted.

What a SIGKILL leaves: DynamoDB Local's data on disk (the server itself is killed with the runtime), busy
executor processes going on with the batch they hold, idle ones exiting. The restart stops the workers the state
file lists (the busy executors die there, holding ARMED tasks), starts DynamoDB Local again on the same data,
fences every executor whose heartbeat still runs
(their death is known: no lease is waited for) and polls at once. The executors that poll invokes take the
fenced executors' tasks over: only a task due up to an executor's fence (its crash window, which the takeover
writes on the task as ``taken_until_ms``) may be MISSED; every other task fires, once.

Two scenarios: 120 tasks with short leases and a 15 s lead; and the runtime's defaults with a burst of 2,000
due 8 s after the kill, the restart 1 s after it, each figure printed against its target.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fault_tools import (
    alive_until,
    all_takeover_marks,
    crash_windows,
    dead_for_good,
    judge,
    report_figures,
    takeover_marks,
)

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.model import TaskStatus
from punctual.runtime.client import Client
from punctual.targets import HttpAction, LogAction
from punctual_tools.local.dynamodb_local import find_project_root
from punctual_tools.local.stack import read_state
from punctual_tools.local.target import TargetServer
from punctual_tools.stats import summarize
from support import interrupt, now_ms, store_for, wait_until

pytestmark = pytest.mark.e2e
ROOT = find_project_root()
POLL_INTERVAL_S = 2
RUNTIME_ENV = {
    "PUNCTUAL_NTP_SERVER": "127.0.0.1:9",  # discard port: the probe fails locally
    "PUNCTUAL_LEAD_MS": "15000",
    "PUNCTUAL_EXECUTOR_LEASE_MS": "5000",
    "PUNCTUAL_HEARTBEAT_INTERVAL_MS": "1000",
    "PUNCTUAL_FAST_PATH_MARGIN_MS": "0",
    "PUNCTUAL_ARM_MARGIN_MS": "1000",
    "PUNCTUAL_ALLOWED_TARGETS": "127.0.0.1",  # the loopback receiver, allowed by configuration
}
GRACE_MS = 180_000  # the restart takes ~7-10 s on 2 idle cores, far longer on a loaded box: tasks due meanwhile
# fire late, within it (so that a MISSED task can only be a crash-window one)
MARKER = "FAULT_SUITE_HOME"
UP_GUARD_S = 240  # the longest a `punctual up` may take to say it is ready before the scenario gives up


class Runtime:
    """``punctual up`` in a subprocess on ``home``; every process it leaves behind is ended at :meth:`cleanup`."""

    def __init__(
        self, home: Path, table: str, env: dict[str, str] | None = None, poll_interval_s: int = POLL_INTERVAL_S
    ) -> None:
        self.home = home
        self.table = table
        self.env = RUNTIME_ENV if env is None else env
        self.poll_interval_s = poll_interval_s
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> dict[str, Any]:
        log = (self.home / f"up-{len(self.processes)}.log").open("wb")
        command = [
            sys.executable,
            "-m",
            "punctual_tools.cli",
            "--home",
            str(self.home),
            "up",
            "--port",
            "0",
            "--poll-interval",
            str(self.poll_interval_s),
            "--table",
            self.table,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCTUAL_")} | self.env
        env[MARKER] = str(self.home)  # inherited by everything it starts: how cleanup() finds them
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.processes.append(process)
        # (a guard, not a timing: up says it is ready when it is, or dies; a busy machine may take minutes)
        started = wait_until(
            lambda: (read_state(self.home) or {}).get("pid") == process.pid or process.poll() is not None,
            timeout=UP_GUARD_S,
        )
        state = read_state(self.home) or {}
        assert started, f"punctual up did not start:\n{self.log_tail()}"
        assert state.get("pid") == process.pid, f"punctual up did not start:\n{self.log_tail()}"
        return state

    def kill(self) -> None:
        """SIGKILL the runtime's main process (and reap it); its busy executors keep running."""
        process = self.processes[-1]
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def stop(self) -> None:
        """Ctrl-C: a clean stop."""
        interrupt(self.processes[-1])

    def log_tail(self, chars: int = 3_000) -> str:
        return "\n".join(p.read_text(errors="replace")[-chars:] for p in sorted(self.home.glob("up-*.log")))

    def cleanup(self) -> None:
        """End every process this scenario started: the runtimes, and, by pid, every process whose initial
        environment carries this scenario's marker (the runtimes' DynamoDB Local, forkserver and executor
        workers, which a SIGKILL orphans) or whose command line names its home."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        in_environ = f"{MARKER}={self.home}".encode()
        in_cmdline = str(self.home).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ, cmdline = (entry / "environ").read_bytes(), (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if in_environ in environ.split(b"\0") or in_cmdline in cmdline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(entry.name), signal.SIGKILL)


@pytest.fixture
def make_runtime(tmp_path: Path) -> Iterator[Callable[..., Runtime]]:
    made: list[Runtime] = []

    def make(env: dict[str, str] | None = None, poll_interval_s: int = POLL_INTERVAL_S) -> Runtime:
        rt = Runtime(tmp_path / f"home-{len(made)}", f"faults-kill-{uuid.uuid4().hex[:8]}", env, poll_interval_s)
        rt.home.mkdir()
        made.append(rt)
        return rt

    try:
        yield make
    finally:
        for rt in made:
            rt.cleanup()


@pytest.fixture
def runtime(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime()


def client_settings(state: dict[str, Any]) -> Settings:
    return Settings(
        endpoint_url=state["endpoint_url"],
        table_name=state["table_name"],
        shard_count=state["shard_count"],
        poll_interval_ms=POLL_INTERVAL_S * 1000,
        fast_path_margin_ms=0,
        ntp_server=None,
        allowed_targets="127.0.0.1",
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_local_runtime_killed_with_sigkill_under_load_and_restarted_loses_nothing_and_doubles_nothing(
    runtime: Runtime, target: TargetServer
) -> None:
    # Given the local runtime, and 120 tasks POSTing to the loopback target: 30 due before the kill, 30 from 1 s
    # to 13 s after it (dispatched and armed by then), 60 from 18 s after it (still PENDING at the kill)
    state = runtime.start()
    client = Client(client_settings(state))
    base = now_ms() + 2_000
    dues = (
        [base + 3_000 + 70 * i for i in range(30)]
        + [base + 8_000 + 400 * i for i in range(30)]
        + [base + 25_000 + 100 * i for i in range(60)]
    )
    ids = [f"kill-{i:03d}" for i in range(len(dues))]
    due = dict(zip(ids, dues, strict=True))
    action = HttpAction(url=target.url, timeout_s=5)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(
            pool.map(
                lambda i: client.schedule(from_ms(dues[i]), action, {"i": i}, task_id=ids[i], misfire_grace=GRACE_MS),
                range(len(ids)),
            )
        )

    # When the runtime is killed with SIGKILL, 7 s into the run, once its executors hold armed tasks (a loaded
    # machine may take longer to get there)
    time.sleep(max(0.0, (base + 7_000 - now_ms()) / 1000))
    old = store_for(client_settings(state))
    assert wait_until(
        lambda: any(t.status is TaskStatus.ARMED for t in old.client.get_many(ids).values()), timeout=60, interval=0.1
    ), f"no task was ever armed\n{runtime.log_tail()}"
    # ... (what the table held at that moment: read just before, DynamoDB Local ends with the runtime)
    at_kill = {task_id: t.status for task_id, t in old.client.get_many(ids).items()}
    runtime.kill()
    print(
        f"\nat the kill: {dict(Counter(s.value for s in at_kill.values()))}; {len(target.records())} fires seen so far"
    )
    # ... and started again on the same home, until every task is final (nothing waits for a lease: the
    # killed executors' heartbeats lapse within seconds and the restarted stack takes their tasks over)
    state = runtime.start()
    settings = client_settings(state)
    store = store_for(settings)

    def settled() -> bool:
        return now_ms() > dues[-1] + 3_000 and all(not t.status.is_active for t in store.client.get_many(ids).values())

    assert wait_until(settled, timeout=200, interval=0.5), (
        f"{Counter(t.status.value for t in store.client.get_many(ids).values())}\n{runtime.log_tail()}"
    )
    stored = store.client.get_many(ids)
    marks = {task_id: takeover_marks(settings, task_id) for task_id in ids}
    taken = {task_id: until for task_id, (owner, until) in marks.items() if owner is not None}
    assert all(until is not None for until in taken.values())
    window = {task_id for task_id, until in taken.items() if due[task_id] <= until}  # type: ignore[operator]

    # Then every task is final: MISSED only in a killed executor's crash window, SUCCEEDED otherwise
    missed = {task_id for task_id, t in stored.items() if t.status is TaskStatus.MISSED}
    outside = [(task_id, stored[task_id].detail) for task_id in sorted(missed - window)]
    assert not outside, f"MISSED outside the crash window: {outside[:5]}"
    assert {t.status for task_id, t in stored.items() if task_id not in missed} == {TaskStatus.SUCCEEDED}
    assert all("executor was lost" in (stored[task_id].detail or "") for task_id in missed)
    # ... each executor a task was taken from is marked taken over, its last alive instant the window's end
    for owner, until in {marks[task_id] for task_id in taken}:
        assert owner is not None
        assert dead_for_good(settings, owner)
        assert alive_until(settings, owner) == until
    # ... every task that was PENDING at the kill (but one a dying executor armed in its last moments, due in
    # its crash window), and every task taken over that was due after the window, fired once and SUCCEEDED
    fires = Counter(r.key for r in target.records())
    pending = [t for t, status in at_kill.items() if status is TaskStatus.PENDING and t not in window]
    assert pending, "nothing was pending at the kill: the scenario's timing went wrong"
    after_window = [task_id for task_id in taken if task_id not in window]
    assert after_window, "no task a killed executor held was due after its crash window: the timing went wrong"
    assert {
        task_id: (fires[f"{task_id}:0"], stored[task_id].status) for task_id in pending + after_window
    } == dict.fromkeys(pending + after_window, (1, TaskStatus.SUCCEEDED))
    print(
        f"taken over from killed executors: {len(taken)} ({len(after_window)} due after their crash window; "
        f"{len(window)} in it, of which "
        f"{len(missed)} MISSED and {sum(1 for t in missed if fires[f'{t}:0'])} had fired before their executor died)"
    )
    # ... and the checker agrees: nothing lost, nothing fired twice (no allowance: under "skip" a task that
    # may have fired is never fired again)
    verdict = judge("local runtime SIGKILLed under load, restarted", store, ids, target)
    assert len(verdict.matched) + len(verdict.explicitly_missed) == len(ids)
    runtime.stop()


# -- a burst of 2,000 due 8 s after a SIGKILL, the runtime restarted 1 s after it ---------------------------------
# The runtime's defaults (a 90 s lead, 20 s executor leases renewed every 5 s, the Lambda profile), with a poll
# every 5 s: the restart, not a lease, is when the killed executors' death is known.
BURST_ENV = {
    "PUNCTUAL_NTP_SERVER": "127.0.0.1:9",
    "PUNCTUAL_ALLOWED_TARGETS": "127.0.0.1",
}
BURST = 2_000
SPREAD_EVERY_MS = 100
BURST_POLL_S = 5


def drift_summary(drifts: list[float]) -> str:
    d = summarize(drifts)
    if not d.get("count"):
        return "n=0"
    return f"p50 {d['p50']:.1f}  p99 {d['p99']:.1f}  max {d['max']:.1f} ms (n={d['count']})"


@pytest.mark.slow
@pytest.mark.xfail(
    reason="known miss: under the Lambda-strict stand-in (single writes, store latency, fresh-interpreter cold "
    "starts) the recovery after a restart drains too slowly on 2 cores and some tasks end MISSED past their grace "
    "outside the crash windows (none lost, none doubled); punctual_tools.bench.leads's restart phase measures it",
    strict=False,
)
@pytest.mark.timeout(1800)
def test_a_burst_of_2000_due_8_s_after_a_sigkill_fires_on_time_after_a_restart_1_s_later(  # noqa: PLR0915 - one fault scenario told from Given to Then; its steps read in order
    make_runtime: Callable[..., Runtime], target: TargetServer
) -> None:
    started = time.monotonic()
    # Given the local runtime with its defaults (polling every 5 s), and, through the public client, tasks
    # POSTing to the loopback target: one every 100 ms from 50 s to 120 s ahead; a burst of 2,000 at one instant
    # 80 s ahead (the run's own figure for a burst, untouched by the crash), and another 100 s ahead (time to
    # write and arm them all, even on a slow machine)
    runtime = make_runtime(BURST_ENV, poll_interval_s=BURST_POLL_S)
    state = runtime.start()
    settings = client_settings(state)
    client = Client(settings)
    # (the leads follow this machine's write rate, measured on 100 log tasks due long after the run: a busy
    # machine may take minutes to write 4,700 tasks, and a task written past its grace is refused)
    probe_started = now_ms()
    client.schedule_many(
        {"due_at": from_ms(probe_started + 3_600_000), "action": LogAction(), "task_id": f"probe-{i:03d}"}
        for i in range(100)
    )
    write_s = (now_ms() - probe_started) / 1000 * (700 + 2 * BURST) / 100
    lead_ms = max(50_000, int(1.5 * write_s * 1000) + 10_000)
    t0 = now_ms()
    control_at, burst_at = t0 + lead_ms + 30_000, t0 + lead_ms + 50_000
    spread = [t0 + lead_ms + SPREAD_EVERY_MS * i for i in range(700)]
    due = (
        {f"spread-{i:04d}": d for i, d in enumerate(spread)}
        | {f"control-{i:04d}": control_at for i in range(BURST)}
        | {f"burst-{i:04d}": burst_at for i in range(BURST)}
    )
    action = HttpAction(url=target.url, timeout_s=10)
    results = client.schedule_many(
        {"due_at": from_ms(d), "action": action, "payload": {"id": task_id}, "task_id": task_id}
        for task_id, d in due.items()
    )
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    ids = list(due)
    written_s = (now_ms() - t0) / 1000
    store = store_for(settings)

    # When the runtime is killed with SIGKILL 8 s before the second burst, once its executors hold that burst
    # armed (a loaded machine may take longer to arm it: the kill then waits, and stays 8 s before the burst)
    burst_ids = [task_id for task_id in ids if task_id.startswith("burst-")]
    sample = burst_ids[::20]  # a light look (the store is busy arming): 100 of the burst
    armed_share = [0.0]

    def burst_armed() -> bool:
        armed_share[0] = sum(t.status is TaskStatus.ARMED for t in store.client.get_many(sample).values()) / len(sample)
        return armed_share[0] == 1.0

    wait_until(
        lambda: now_ms() >= burst_at - 9_000 or (now_ms() > control_at and burst_armed()),
        timeout=(burst_at - now_ms()) / 1000 + 60,
        interval=2.0,
    )
    time.sleep(max(0.0, (burst_at - 8_000 - now_ms()) / 1000))
    runtime.kill()
    killed_ms = now_ms()
    print(
        f"\nwritten in {written_s:.1f} s; killed {(burst_at - killed_ms) / 1000:.1f} s before the burst, "
        f"{armed_share[0]:.0%} of it armed (a sample of 100); {len(target.records())} fires seen so far"
    )
    # ... and started again on the same home 1 s later
    time.sleep(max(0.0, (killed_ms + 1_000 - now_ms()) / 1000))
    restart_ms = now_ms()
    state = runtime.start()
    up_ms = now_ms()
    settings = client_settings(state)
    store = store_for(settings)

    def settled() -> bool:
        return now_ms() > max(due.values()) + 3_000 and all(
            not t.status.is_active for t in store.client.get_many(ids).values()
        )

    # (recovering 4,700 tasks takes this machine several times what writing them took: the wait follows it)
    assert wait_until(settled, timeout=240 + 4 * write_s, interval=1.0), (
        f"{Counter(t.status.value for t in store.client.get_many(ids).values())}\n{runtime.log_tail()}"
    )

    # Then MISSED only in the killed executors' crash windows (each from its last heartbeat to the restart's
    # fence), nothing lost, nothing fired twice
    stored = store.client.get_many(ids)
    owners = {owner for task_id, (owner, _) in all_takeover_marks(settings).items() if task_id in due}
    windows = crash_windows(settings, due)
    assert all(dead_for_good(settings, owner) for owner in owners)
    verdict = judge(
        "local runtime SIGKILLed 8 s before a burst of 2,000, restarted 1 s later", store, ids, target, windows=windows
    )
    # ... and what the user sees, printed against the targets (measured, not asserted)
    first: dict[str, float] = {}
    for record in target.records():
        if record.key and record.key.endswith(":0"):
            first.setdefault(record.key[:-2], record.received_ms)

    def drifts(prefix: str, keep: Callable[[int], bool]) -> list[float]:
        return [first[t] - due[t] for t in ids if t.startswith(prefix) and t in first and keep(due[t])]

    after_kill = [task_id for task_id in ids if due[task_id] > killed_ms]
    arrived = sum(task_id in first for task_id in after_kill)
    share = arrived / len(after_kill)
    fence_ms = max((end for _, end in windows), default=None)
    print(
        f"kill at +{(killed_ms - t0) / 1000:.1f} s, restart begun +{(restart_ms - killed_ms) / 1000:.1f} s after "
        f"it, up after {(up_ms - restart_ms) / 1000:.1f} s, executors fenced at +"
        f"{'-' if fence_ms is None else f'{(fence_ms - killed_ms) / 1000:.1f}'} s; burst due "
        f"{(burst_at - killed_ms) / 1000:.1f} s after the kill"
    )
    print(
        f"crash windows: {len(windows)} executors, "
        f"{', '.join(f'{(end - start) / 1000:.1f} s' for start, end in sorted(windows))}; due in them "
        f"{len(verdict.due_in_window)}, MISSED {len(verdict.missed_in_window)} (outside them "
        f"{len(verdict.missed_outside_window)})"
    )
    print(
        f"due after the kill: {len(after_kill)}, arrived {arrived} = {share:.1%} (target >= 90%: "
        f"{'met' if share >= 0.9 else 'MISSED'})"
    )
    # the restart has caught up from the last task due after it that fired more than a second late
    late = [due[t] for t in ids if due[t] > up_ms and t in first and first[t] - due[t] > 1_000]
    caught_up_ms = max(late, default=up_ms)
    taken = [task_id for task_id in all_takeover_marks(settings) if task_id in due]
    print(
        f"the restart took over {len(taken)} tasks; tasks due after it fired late until "
        f"{(caught_up_ms - killed_ms) / 1000:.1f} s after the kill ({(caught_up_ms - up_ms) / 1000:.1f} s after the "
        f"restarted stack was up), on time after"
    )
    rows = [
        ("spread before the first burst", drifts("spread-", lambda d: d < control_at - 2_000)),
        ("spread due after the restart", drifts("spread-", lambda d: d > up_ms)),
        ("spread due after the takeover", drifts("spread-", lambda d: d > caught_up_ms)),
        (f"burst of {BURST} before the kill", drifts("control-", lambda _: True)),
        (f"burst of {BURST} after the restart", drifts("burst-", lambda _: True)),
    ]
    for name, values in rows:
        print(f"  {name:<34} {drift_summary(values)}")
    for name, before, after in (
        ("spread", rows[0][1], rows[1][1]),
        ("spread after the takeover", rows[0][1], rows[2][1]),
        ("burst", rows[3][1], rows[4][1]),
    ):
        p99_before, p99_after = summarize(before).get("p99"), summarize(after).get("p99")
        if p99_before and p99_after:
            print(
                f"  {name}: p99 after the restart / before = {p99_after / p99_before:.1f}x "
                f"({p99_after:.1f} ms against {p99_before:.1f} ms; target: within the run's own figure)"
            )
    statuses = Counter(t.status.value for t in stored.values())
    recorded_missed = [t for t, task in stored.items() if task.status is TaskStatus.MISSED]
    report_figures(
        "sigkill",
        {
            "tasks": len(ids),
            "burst": BURST,
            "burst_due_after_kill_s": round((burst_at - killed_ms) / 1000, 1),
            "restart_after_kill_s": round((restart_ms - killed_ms) / 1000, 1),
            "up_after_kill_s": round((up_ms - killed_ms) / 1000, 1),
            "fenced_after_kill_s": None if fence_ms is None else round((fence_ms - killed_ms) / 1000, 1),
            "crash_windows": len(windows),
            "due_in_windows": len(verdict.due_in_window),
            "missed_in_windows": len(verdict.missed_in_window),
            "missed_outside_windows": len(verdict.missed_outside_window),
            "due_after_kill": len(after_kill),
            "arrived_after_kill": arrived,
            "taken_over": len(taken),
            "late_until_after_up_s": round((caught_up_ms - up_ms) / 1000, 1),
            "p99_ms": {name: summarize(values).get("p99") for name, values in rows},
            "lost": len(verdict.lost),
            "unexplained_extra": len(verdict.unexplained),
        },
    )
    print(
        f"outcomes: {dict(statuses)} ({sum(t in first for t in recorded_missed)} of the MISSED arrived: fired by "
        f"an executor that died before recording; MISSED says 'may have fired'); run "
        f"{time.monotonic() - started:.1f} s"
    )
    assert not verdict.missed_outside_window
    runtime.stop()
