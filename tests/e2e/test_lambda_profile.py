"""The local runtime's Lambda profile on real worker processes: CPU quota, timeout, frozen idle workers,
throttling, and the stack's state file.

Each invoker test drives ``LocalInvoker`` with a tiny handler written for it; what is asserted is what the
kernel says of a worker (its cgroup's quota, its state in ``/proc/<pid>/stat``) and the order of calls, never
how long something took: Lambda's async delays are shortened by a time scale, and only their lower bounds are
asserted. Those rules themselves are the functional tier's (``tests/tools/functional/test_async_queue.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from punctual_tools.local.cpu_quota import PERIOD_US, group_of, quota_us
from punctual_tools.local.invoker import LocalInvoker, Profile
from punctual_tools.local.lambda_rules import EXECUTOR_FUNCTION, FunctionLimits, read_function_limits
from punctual_tools.local.stack import LocalStack, StackConfig
from punctual_tools.template import load_template
from support import wait_until

SCALE = 0.01  # Lambda's retries after 0.6 s and 1.2 s instead of 1 and 2 minutes; its throttle backoff from 10 ms

HANDLER = """
import json
import os
import threading
import time
from pathlib import Path

CALLS = Path({calls!r})
TICKS = Path({ticks!r})
RELEASE = Path({release!r})


def _tick():  # a background thread, like the executor's heartbeat: it runs only while the process does
    while True:
        with TICKS.open("a") as handle:
            handle.write("t\\n")
        time.sleep(0.01)


threading.Thread(target=_tick, daemon=True).start()


def _log(event, phase):
    with CALLS.open("a") as handle:
        handle.write(json.dumps({{"pid": os.getpid(), "name": event["name"], "phase": phase,
                                  "at": time.monotonic()}}) + "\\n")


def ticks():
    return len(TICKS.read_text().splitlines()) if TICKS.exists() else 0


def handler(event, context):
    _log(event, "start")
    mode = event.get("mode")
    if mode == "hang":
        time.sleep(3600)
    if mode == "gate":
        while not RELEASE.exists():
            time.sleep(0.01)
    if mode == "tick":  # the background thread runs while an invocation does
        seen = ticks()
        while ticks() < seen + 3:
            time.sleep(0.01)
    _log(event, "end")
    return {{"pid": os.getpid(), "name": event["name"], "memory_mb": context.memory_limit_in_mb}}
"""


class Run:
    """One invoker and what its handler wrote."""

    def __init__(self, invoker: LocalInvoker, home: Path) -> None:
        self.invoker = invoker
        self.home = home
        self.results: list[dict[str, Any]] = []

    def calls(self) -> list[dict[str, Any]]:
        path = self.home / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def ticks(self) -> int:
        path = self.home / "ticks"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def release(self) -> None:
        (self.home / "release").touch()


@pytest.fixture
def run_invoker(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    """An invoker of the test's handler; every one is shut down afterwards, and any worker left is ended."""
    made: list[Run] = []

    def make(limits: FunctionLimits, *, profile: Profile = "lambda", max_concurrency: int = 4, prewarm: int = 0) -> Run:
        home = tmp_path / f"run-{len(made)}"
        home.mkdir()
        handler = home / "handler.py"
        handler.write_text(
            HANDLER.format(calls=str(home / "calls.jsonl"), ticks=str(home / "ticks"), release=str(home / "release"))
        )
        results: list[dict[str, Any]] = []
        invoker = LocalInvoker(
            handler,
            {},
            log_file=home / "worker.log",
            limits=limits,
            profile=profile,
            max_concurrency=max_concurrency,
            prewarm=prewarm,
            time_scale=SCALE,
            on_result=lambda _event, result: results.append(result),
        )
        run = Run(invoker, home)
        run.results = results
        made.append(run)
        return run

    yield make
    for run in made:
        run.release()
        run.invoker.shutdown(timeout=10)
        for pid in {call["pid"] for call in run.calls()}:  # the workers this test started, by pid
            if process_state(pid) not in (None, "Z"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)


def process_state(pid: int) -> str | None:
    """The state letter in ``/proc/<pid>/stat`` (R, S, T for stopped, Z...), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def assert_frozen(run: Run, pid: int) -> None:
    """``pid`` is stopped (state T), and the background thread of its handler module adds no tick meanwhile."""
    assert wait_until(lambda: process_state(pid) == "T", timeout=20)
    frozen_ticks = run.ticks()
    time.sleep(0.3)  # ticks every 10 ms when it runs
    assert run.ticks() == frozen_ticks
    assert process_state(pid) == "T"


@pytest.mark.timeout(60)
def test_a_worker_runs_in_a_cgroup_with_the_cpu_quota_of_the_templates_memory_size(
    run_invoker: Callable[..., Run],
) -> None:
    # Given an invoker of a function with the executor's limits from template.yaml (ExecutorMemorySize)
    limits = read_function_limits(EXECUTOR_FUNCTION)
    run = run_invoker(limits)
    if not run.invoker.cpu_quota.applied:
        pytest.skip(f"no CPU quota can be set here: {run.invoker.cpu_quota.detail}")

    # When one event is invoked
    run.invoker.invoke_async({"name": "one"})
    assert run.invoker.wait_idle(30)

    # Then the worker's cgroup gives it the memory size's share of a core: quota / period = MB / 1769
    (result,) = run.results
    assert result["memory_mb"] == limits.memory_mb
    group = group_of(result["pid"])
    assert group is not None
    assert group.name.startswith("w")
    assert group.parent.name == f"punctual-{os.getpid()}"
    if (group / "cpu.max").exists():
        quota, period = map(int, (group / "cpu.max").read_text().split())
    else:
        quota = int((group / "cpu.cfs_quota_us").read_text())
        period = int((group / "cpu.cfs_period_us").read_text())
    assert (quota, period) == (quota_us(limits.memory_mb), PERIOD_US)
    assert quota / period == pytest.approx(limits.memory_mb / 1769, abs=1e-4)

    # And once the invoker has shut down, its groups are gone
    run.invoker.shutdown(timeout=10)
    assert not group.exists()
    assert not group.parent.exists()


@pytest.mark.timeout(90)
def test_an_invocation_past_its_timeout_is_killed_retried_and_dropped_after_the_last_retry(
    run_invoker: Callable[..., Run],
) -> None:
    # Given a function with a 1 s timeout and 2 retries, whose handler never returns
    run = run_invoker(FunctionLimits("hangs", timeout_s=1, max_retry_attempts=2))

    # When one event is invoked
    run.invoker.invoke_async({"name": "hang", "mode": "hang"})
    assert run.invoker.wait_idle(60)

    # Then it ran three times, each in a new worker (the one that timed out was killed), each retry at least
    # the timeout and then Lambda's (scaled) 1 and 2 minutes after the previous start
    starts = [c for c in run.calls() if c["phase"] == "start"]
    assert len(starts) == 3
    assert len({c["pid"] for c in starts}) == 3
    assert starts[1]["at"] - starts[0]["at"] >= 1 + 60 * SCALE
    assert starts[2]["at"] - starts[1]["at"] >= 1 + 120 * SCALE
    assert all(process_state(c["pid"]) in (None, "Z") for c in starts)
    # ... and was dropped, never completed
    assert run.results == []
    stats = run.invoker.stats
    assert {k: stats[k] for k in ("timeouts", "errors", "retries", "dropped", "completed")} == {
        "timeouts": 3,
        "errors": 3,
        "retries": 2,
        "dropped": 1,
        "completed": 0,
    }


@pytest.mark.timeout(60)
def test_an_idle_worker_is_frozen_and_runs_again_for_the_next_invocation(run_invoker: Callable[..., Run]) -> None:
    # Given an invoker with one warm worker whose handler module runs a background thread (a heartbeat)
    run = run_invoker(FunctionLimits("freezes", timeout_s=30), prewarm=1)
    assert wait_until(lambda: len(run.invoker.worker_pids()) == 1, timeout=10)
    (pid,) = run.invoker.worker_pids()

    # Then once its cold start is over it is stopped, and its background thread does not run
    assert_frozen(run, pid)

    # When an invocation comes  Then it runs in that worker, and its background thread runs meanwhile
    run.invoker.invoke_async({"name": "first", "mode": "tick"})
    assert wait_until(lambda: len(run.results) == 1, timeout=20)
    assert run.results[0]["pid"] == pid

    # And between invocations it is stopped again; the next one runs in it as well
    assert_frozen(run, pid)
    run.invoker.invoke_async({"name": "second", "mode": "tick"})
    assert wait_until(lambda: len(run.results) == 2, timeout=20)
    assert run.results[1]["pid"] == pid
    assert run.invoker.stats["cold_starts"] == 1

    # And at shutdown the stopped worker is continued and ends
    assert wait_until(lambda: process_state(pid) == "T", timeout=10)
    run.invoker.shutdown(timeout=10)
    assert process_state(pid) in (None, "Z")


@pytest.mark.timeout(60)
def test_under_the_local_profile_an_idle_worker_is_not_frozen_and_has_no_quota(
    run_invoker: Callable[..., Run],
) -> None:
    # Given an invoker under the local profile (whole cores, never frozen)
    run = run_invoker(FunctionLimits("local", timeout_s=30), profile="local")
    assert not run.invoker.cpu_quota.applied
    # When one event has run
    run.invoker.invoke_async({"name": "one"})
    assert wait_until(lambda: len(run.results) == 1, timeout=20)
    pid = run.results[0]["pid"]
    # Then its worker keeps running between invocations (its background thread ticks), outside any group of ours
    seen = run.ticks()
    assert wait_until(lambda: run.ticks() > seen + 3, timeout=10)
    assert process_state(pid) != "T"
    group = group_of(pid)
    assert group is None or not group.name.startswith("w")


@pytest.mark.timeout(60)
def test_with_concurrency_1_a_second_invocation_is_throttled_and_runs_after_the_first(
    run_invoker: Callable[..., Run],
) -> None:
    # Given a function that may run once at a time, busy with a first invocation held until the test lets go
    run = run_invoker(FunctionLimits("one-at-a-time", timeout_s=30, reserved_concurrency=1))
    assert run.invoker.concurrency == 1
    run.invoker.invoke_async({"name": "first", "mode": "gate"})
    assert wait_until(lambda: len(run.calls()) == 1, timeout=20)

    # When a second invocation arrives
    run.invoker.invoke_async({"name": "second"})

    # Then it is throttled, again and again, and does not start while the first runs
    assert wait_until(lambda: run.invoker.stats["throttles"] >= 3, timeout=20)
    assert [(c["name"], c["phase"]) for c in run.calls()] == [("first", "start")]
    # ... and runs once the first is over: never two at once
    run.release()
    assert run.invoker.wait_idle(30)
    assert [(c["name"], c["phase"]) for c in run.calls()] == [
        ("first", "start"),
        ("first", "end"),
        ("second", "start"),
        ("second", "end"),
    ]
    assert [r["name"] for r in run.results] == ["first", "second"]


@pytest.mark.timeout(120)
def test_the_state_file_appears_once_the_api_listens_and_says_the_profile(
    tmp_path: Path, fresh_table_name: str
) -> None:
    # Given a stack starting in a thread (with a warm worker, whose start used to write the state file early)
    config = StackConfig(
        home=tmp_path,
        port=0,
        in_memory=True,
        prewarm=1,
        fast_path=False,
        api_port=0,
        settings_overrides={"table_name": fresh_table_name, "ntp_server": None},
    )
    stack = LocalStack(config)
    started = threading.Thread(target=stack.start, daemon=True)
    started.start()
    try:
        # When a client waits for the state file
        state_file = tmp_path / "stack.json"
        assert wait_until(state_file.exists, timeout=90, interval=0.005)
        state = json.loads(state_file.read_text())

        # Then, the moment it is there, it names an API that answers
        assert state["api_url"]
        with pytest.raises(urllib.error.HTTPError) as refused:  # no token: the API itself says 401
            urllib.request.urlopen(f"{state['api_url']}/v1/tasks", timeout=10)
        assert refused.value.code == 401
        # ... and says under which profile the executors run, with what CPU quota and limits
        assert state["profile"] == "lambda"
        assert set(state["cpu_quota"]) == {"applied", "detail"}
        assert state["executor_limits"]["memory_mb"] == read_function_limits(EXECUTOR_FUNCTION).memory_mb
        # ... and that the functions write as in AWS, with the store as far away as DynamoDB is from Lambda
        assert state["write_batch"] == "single"
        assert state["store_latency"]["name"] == "dynamodb-in-region"
        assert any("store latency" in line and "dynamodb-in-region" in line for line in stack.describe_limits())
        # ... and that a burst is cut for as many executors as the template's default lets run at once (unreserved:
        # the share of the account's pool they may take), not for what this machine could run
        told = int(load_template()["Parameters"]["UnreservedExecutorConcurrency"]["Default"])
        assert told < config.max_concurrency
        assert stack.settings is not None
        assert stack.settings.executor_concurrency == told
        assert any(f"bursts cut for {told} executors" in line for line in stack.describe_limits())
    finally:
        started.join(60)
        stack.stop()


@pytest.mark.timeout(120)
def test_a_stack_given_an_executor_memory_size_gives_its_workers_that_sizes_cpu_quota(
    tmp_path: Path, fresh_table_name: str
) -> None:
    # Given a stack told to run the executor at 512 MB (as a deployment with ExecutorMemorySize=512)
    config = StackConfig(
        home=tmp_path,
        port=0,
        in_memory=True,
        prewarm=0,
        fast_path=False,
        api=False,
        executor_memory_mb=512,
        settings_overrides={"table_name": fresh_table_name, "ntp_server": None},
    )
    # When it starts
    with LocalStack(config) as stack:
        assert stack.limits is not None
        assert stack.invoker is not None
        state = json.loads((tmp_path / "stack.json").read_text())
        # Then its executor has that memory, the rest of its limits from the template, and that size's quota
        template = read_function_limits(EXECUTOR_FUNCTION)
        assert (stack.limits.memory_mb, stack.limits.timeout_s) == (512, template.timeout_s)
        assert state["executor_limits"]["memory_mb"] == 512
        if stack.invoker.cpu_quota.applied:
            assert f"{PERIOD_US * 512 // 1769} us of CPU every {PERIOD_US} us" in stack.invoker.cpu_quota.detail
