"""Fault: the local runtime (``punctual up``, in a subprocess) is killed with SIGKILL under load, then restarted.

What a SIGKILL leaves: DynamoDB Local (on disk) keeps running, busy executor processes go on with the batch
they hold, idle ones exit. The restart stops what the state file lists (DynamoDB Local and the workers: the
busy executors die there, holding ARMED tasks), starts on the same data, and its poller finds every task still
PENDING at once, and the killed executors' ARMED tasks as soon as their heartbeats lapse (5 s executor leases
here). The executor that gets those takes them over: only a task due at or before the dead executor's last
``alive_until`` (its crash window, which the takeover writes on the task as ``taken_until_ms``) may be MISSED;
every other task fires, once.

Settings for a bounded run (environment of both ``punctual up``): poll every 2 s, a 15 s lead (so that the
executors hold tasks due up to 13 s after the kill, most of them past their crash window, while the last 60
tasks are still PENDING), executor leases of 5 s renewed every second, no fast path for tasks due more than 2 s
ahead; NTP on a closed loopback port.
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fault_tools import alive_until, judge, takeover_marks, was_taken_over

from punctual.actions import HttpAction
from punctual.client import Client
from punctual.keys import from_ms
from punctual.model import TaskStatus
from punctual.settings import Settings
from punctual_tools.local.dynamodb_local import find_project_root
from punctual_tools.local.stack import read_state
from punctual_tools.local.target import TargetServer
from support import interrupt, now_ms, repo_for, wait_until

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


class Runtime:
    """``punctual up`` in a subprocess on ``home``; every process it leaves behind is ended at :meth:`cleanup`."""

    def __init__(self, home: Path, table: str) -> None:
        self.home = home
        self.table = table
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> dict[str, Any]:
        log = (self.home / f"up-{len(self.processes)}.log").open("wb")
        command = [sys.executable, "-m", "punctual_tools.cli", "--home", str(self.home), "up", "--port", "0",
                   "--poll-interval", str(POLL_INTERVAL_S), "--table", self.table]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCTUAL_")} | RUNTIME_ENV
        env[MARKER] = str(self.home)  # inherited by everything it starts: how cleanup() finds them
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.processes.append(process)
        started = wait_until(lambda: (read_state(self.home) or {}).get("pid") == process.pid
                             or process.poll() is not None, timeout=60)
        state = read_state(self.home) or {}
        assert started and state.get("pid") == process.pid, f"punctual up did not start:\n{self.log_tail()}"
        return state

    def kill(self) -> None:
        """SIGKILL the runtime's main process (and reap it); what it started keeps running."""
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
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    rt = Runtime(tmp_path / "home", f"faults-kill-{uuid.uuid4().hex[:8]}")
    rt.home.mkdir()
    try:
        yield rt
    finally:
        rt.cleanup()


def client_settings(state: dict[str, Any]) -> Settings:
    return Settings(endpoint_url=state["endpoint_url"], table_name=state["table_name"],
                    shard_count=state["shard_count"], poll_interval_ms=POLL_INTERVAL_S * 1000, fast_path_margin_ms=0,
                    ntp_server=None, allowed_targets="127.0.0.1")


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_the_local_runtime_killed_with_sigkill_under_load_and_restarted_loses_nothing_and_doubles_nothing(
    runtime: Runtime, target: TargetServer
) -> None:
    # Given the local runtime, and 120 tasks POSTing to the loopback target: 30 due before the kill, 30 from 1 s
    # to 13 s after it (dispatched and armed by then), 60 from 18 s after it (still PENDING at the kill)
    state = runtime.start()
    client = Client(client_settings(state))
    base = now_ms() + 2_000
    dues = ([base + 3_000 + 70 * i for i in range(30)] + [base + 8_000 + 400 * i for i in range(30)]
            + [base + 25_000 + 100 * i for i in range(60)])
    ids = [f"kill-{i:03d}" for i in range(len(dues))]
    due = dict(zip(ids, dues, strict=True))
    action = HttpAction(url=target.url, timeout_s=5)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: client.schedule(from_ms(dues[i]), action, {"i": i}, task_id=ids[i],
                                                misfire_grace=GRACE_MS), range(len(ids))))

    # When the runtime is killed with SIGKILL, 7 s into the run, once its executors hold armed tasks (a loaded
    # machine may take longer to get there)
    time.sleep(max(0.0, (base + 7_000 - now_ms()) / 1000))
    old = repo_for(client_settings(state))
    assert wait_until(lambda: any(t.status is TaskStatus.ARMED for t in old.get_many(ids).values()), timeout=60,
                      interval=0.1), f"no task was ever armed\n{runtime.log_tail()}"
    runtime.kill()
    # ... (what the table held at that moment, read from the DynamoDB Local the kill left running)
    at_kill = {task_id: t.status for task_id, t in repo_for(client_settings(state)).get_many(ids).items()}
    print(f"\nat the kill: {dict(Counter(s.value for s in at_kill.values()))}; "
          f"{len(target.records())} fires seen so far")
    # ... and started again on the same home, until every task is final (nothing waits for a lease: the
    # killed executors' heartbeats lapse within seconds and the restarted stack takes their tasks over)
    state = runtime.start()
    settings = client_settings(state)
    repo = repo_for(settings)

    def settled() -> bool:
        return now_ms() > dues[-1] + 3_000 and all(not t.status.is_active for t in repo.get_many(ids).values())

    assert wait_until(settled, timeout=200, interval=0.5), \
        f"{Counter(t.status.value for t in repo.get_many(ids).values())}\n{runtime.log_tail()}"
    stored = repo.get_many(ids)
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
        assert owner is not None and was_taken_over(settings, owner) and alive_until(settings, owner) == until
    # ... every task that was PENDING at the kill, and every task taken over that was due after the window,
    # fired once and SUCCEEDED
    fires = Counter(r.key for r in target.records())
    pending = [task_id for task_id, status in at_kill.items() if status is TaskStatus.PENDING]
    assert pending, "nothing was pending at the kill: the scenario's timing went wrong"
    after_window = [task_id for task_id in taken if task_id not in window]
    assert after_window, "no task a killed executor held was due after its crash window: the timing went wrong"
    assert {task_id: (fires[f"{task_id}:0"], stored[task_id].status) for task_id in pending + after_window} == \
        dict.fromkeys(pending + after_window, (1, TaskStatus.SUCCEEDED))
    print(f"taken over from killed executors: {len(taken)} ({len(after_window)} due after their crash window; "
          f"{len(window)} in it, of which "
          f"{len(missed)} MISSED and {sum(1 for t in missed if fires[f'{t}:0'])} had fired before their executor died)")
    # ... and the checker agrees: nothing lost, nothing fired twice (no allowance: under "skip" a task that
    # may have fired is never fired again)
    verdict = judge("local runtime SIGKILLed under load, restarted", repo, ids, target)
    assert len(verdict.matched) + len(verdict.explicitly_missed) == len(ids)
    runtime.stop()
