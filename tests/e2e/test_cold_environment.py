"""A cold start under the Lambda profile: a fresh interpreter whose INIT runs on a whole core, then on the memory
size's share.

The handler written for each test reports, as it loads (the INIT), who started its process, how much CPU the
process had used by then, and the CPU quota of its cgroup; what is asserted is what the kernel says (cgroup files,
process CPU times) and the order of events, never how long something took.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from punctual_tools.local import invoker as invoker_module
from punctual_tools.local.cpu_quota import PERIOD_US, group_of, init_quota_us, init_slot_count, quota_us
from punctual_tools.local.invoker import LocalInvoker, Profile
from punctual_tools.local.lambda_rules import FunctionLimits
from support import wait_until

MEMORY_MB = 256

HANDLER = """
import json
import os
import multiprocessing
import os
import sys
import time
from pathlib import Path

from punctual_tools.local.cpu_quota import group_of

STARTED = time.monotonic()
Path({home!r}, f"start-{{os.getpid()}}").touch()


def quota():
    group = group_of(os.getpid())
    for name in ("cpu.max", "cpu.cfs_quota_us"):
        if group is not None and (group / name).exists():
            return (group / name).read_text().split()[0]
    return None


LOADING = {{
    "ppid": os.getppid(),
    "multiprocessing_child": multiprocessing.parent_process() is not None,
    "command": Path("/proc/self/cmdline").read_text().replace("\\0", " "),
    "cpu_s": time.process_time(),
    "quota": quota(),
}}
Path({loading!r}).write_text(json.dumps(LOADING))
while not Path({release!r}).exists():  # held until the test lets go
    time.sleep(0.01)
Path({home!r}, f"init-{{os.getpid()}}.json").write_text(json.dumps([STARTED, time.monotonic()]))


def handler(event, context):
    return {{**LOADING, "pid": os.getpid(), "quota_now": quota()}}
"""


class Run:
    def __init__(self, invoker: LocalInvoker, home: Path, results: list[dict[str, Any]]) -> None:
        self.invoker = invoker
        self.home = home
        self.results = results

    def loading(self) -> dict[str, Any] | None:
        path = self.home / "loading.json"
        return json.loads(path.read_text()) if path.exists() and path.read_text() else None

    def release(self) -> None:
        (self.home / "release").touch()


@pytest.fixture
def run_invoker(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    """An invoker of the test's handler (256 MB, no warm worker); shut down afterwards."""
    made: list[Run] = []

    def make(profile: Profile = "lambda", *, held: bool = False) -> Run:
        home = tmp_path / f"run-{len(made)}"
        home.mkdir()
        handler = home / "handler.py"
        handler.write_text(
            HANDLER.format(home=str(home), loading=str(home / "loading.json"), release=str(home / "release"))
        )
        results: list[dict[str, Any]] = []
        invoker = LocalInvoker(
            handler,
            {},
            log_file=home / "worker.log",
            limits=FunctionLimits("cold", memory_mb=MEMORY_MB, timeout_s=60),
            profile=profile,
            prewarm=0,
            on_result=lambda _event, result: results.append(result),
        )
        run = Run(invoker, home, results)
        if not held:
            run.release()
        made.append(run)
        return run

    yield make
    for run in made:
        run.release()
        run.invoker.shutdown(timeout=10)


def group_quota(pid: int) -> str | None:
    group = group_of(pid)
    for name in ("cpu.max", "cpu.cfs_quota_us"):
        if group is not None and (group / name).exists():
            return (group / name).read_text().split()[0]
    return None


@pytest.mark.timeout(180)
def test_a_cold_environment_is_a_fresh_interpreter_whose_init_runs_on_a_whole_core(
    run_invoker: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an invoker under the Lambda profile (INIT's CPU held until ready, however busy this machine is), and
    # one under the local profile
    monkeypatch.setattr(invoker_module, "INIT_LIMIT_S", 3600.0)
    cold, forked = run_invoker("lambda"), run_invoker("local")

    # When each runs one event, in a new environment
    for run in (cold, forked):
        run.invoker.invoke_async({"name": "one"})
        assert run.invoker.wait_idle(120), (run.home / "worker.log").read_text()
    (fresh,), (fork,) = cold.results, forked.results

    # Then the cold one is an interpreter the invoker started itself, not a child of a pre-loaded server ...
    assert fresh["ppid"] == os.getpid()
    assert not fresh["multiprocessing_child"]
    assert "punctual_tools.local.environment" in fresh["command"]
    assert fork["multiprocessing_child"]
    # ... which imported the libraries itself: it had used more CPU by the time its handler loaded than a fork has
    assert fresh["cpu_s"] > fork["cpu_s"]
    # And one cold start, whose INIT was kept
    stats = cold.invoker.stats
    assert stats["cold_starts"] == 1
    assert len(cold.invoker.init_durations_ms) == 1
    assert cold.invoker.init_durations_ms[0] > 0
    assert stats["init_ms_max"] == round(cold.invoker.init_durations_ms[0])

    # And where a CPU quota can be set: INIT ran on a whole core, the invocation on 256 MB's share
    if not cold.invoker.cpu_quota.applied:
        pytest.skip(f"no CPU quota can be set here: {cold.invoker.cpu_quota.detail}")
    assert fresh["quota"] == str(init_quota_us(MEMORY_MB)) == str(PERIOD_US)
    assert fresh["quota_now"] == str(quota_us(MEMORY_MB))
    assert group_quota(fresh["pid"]) == str(quota_us(MEMORY_MB))


@pytest.mark.timeout(180)
def test_inits_cpu_ends_at_the_init_limit_while_the_handler_still_loads(
    run_invoker: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an INIT limit shorter than a cold start here, and a handler whose load is held until the test lets go
    monkeypatch.setattr(invoker_module, "INIT_LIMIT_S", 0.5)
    run = run_invoker("lambda", held=True)
    if not run.invoker.cpu_quota.applied:
        pytest.skip(f"no CPU quota can be set here: {run.invoker.cpu_quota.detail}")

    # When an event starts an environment, and its handler is loading
    run.invoker.invoke_async({"name": "one"})
    assert wait_until(lambda: run.loading() is not None, timeout=120), (run.home / "worker.log").read_text()
    (pid,) = run.invoker.worker_pids()

    # Then past the limit the group has the memory size's share, though the INIT is not over
    assert wait_until(lambda: group_quota(pid) == str(quota_us(MEMORY_MB)), timeout=60)
    assert run.results == []
    # ... and once it is, the invocation runs in that environment
    run.release()
    assert run.invoker.wait_idle(120)
    assert [r["pid"] for r in run.results] == [pid]


@pytest.mark.timeout(300)
def test_no_more_inits_run_at_once_than_there_are_cores_and_the_wait_for_one_is_kept(
    run_invoker: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an invoker under the Lambda profile whose handlers' loads are held until the test lets go (no INIT
    # limit to end them first), and one more event at once than this process has cores
    monkeypatch.setattr(invoker_module, "INIT_LIMIT_S", 3600.0)
    run = run_invoker("lambda", held=True)
    cores = init_slot_count()
    for i in range(cores + 1):
        run.invoker.invoke_async({"name": f"event-{i}"})

    # When as many INITs as there are cores have begun, every event is being invoked, and twice the time those
    # took to begin has passed again
    began = time.monotonic()
    assert wait_until(lambda: len(list(run.home.glob("start-*"))) >= cores, timeout=120)
    assert wait_until(lambda: run.invoker.in_flight() == cores + 1, timeout=60)
    time.sleep(2 * (time.monotonic() - began))
    # Then the last has not begun its INIT: it waits for a core
    assert len(list(run.home.glob("start-*"))) == cores
    # ... and once the loads go on, it runs too
    run.release()
    assert run.invoker.wait_idle(180), (run.home / "worker.log").read_text()

    # And every event ran, each in an environment of its own (none was idle), no more INITs overlapped than there
    # are cores, and the last one's wait for a core was kept
    assert len(run.results) == cores + 1
    spans = [json.loads(p.read_text()) for p in run.home.glob("init-*.json")]
    assert len(spans) == cores + 1
    overlap = max(sum(1 for start, end in spans if start <= instant < end) for instant, _ in spans)
    assert overlap <= cores
    stats = run.invoker.stats
    assert stats["cold_starts"] == cores + 1
    assert stats["init_waits"] >= 1
    assert stats["init_wait_ms_max"] == round(max(run.invoker.init_waits_ms)) > 0
