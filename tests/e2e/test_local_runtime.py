"""The local runtime end to end: DynamoDB Local on disk, the poller loop, executors in worker processes.

What is asserted is what a user of ``punctual up`` / ``punctual demo`` relies on: every task fires exactly once
(counted in the fire log, where the log action writes one line per fire), a clean stop hands unfired tasks
back and a restart fires them, the CLI's JSON report, and the local invoker's Lambda-like retries. Lateness
is only asserted loosely, as "fired, not MISSED": timing figures belong to the benchmark.

Network: DynamoDB Local is only ever reached at 127.0.0.1, and the executors' NTP probe is pointed at a
closed loopback port (``PUNCTUAL_NTP_SERVER``), so no test sends anything off the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.model import TaskStatus
from punctual.errors import SettingsError
from punctual.runtime.client import Client
from punctual.targets import LogAction
from punctual_tools.demo import read_fires, run_demo
from punctual_tools.local.dynamodb_local import DynamoDBLocal, find_project_root, make_client
from punctual_tools.local.invoker import LocalInvoker
from punctual_tools.local.lambda_rules import FunctionLimits
from punctual_tools.local.stack import LocalStack, StackConfig, read_state, settings_env
from support import interrupt, now_ms, wait_until

ROOT = find_project_root()
LOOPBACK_NTP = "127.0.0.1:9"  # discard port: the NTP probe times out locally instead of asking time.aws.com
GRACE_MS = 300_000  # the tasks' default misfire grace: a slow machine makes fires late, never MISSED
TIME_SCALE = 0.004  # the local invoker's Lambda delays: its retries after 0.24 s and 0.48 s, not 1 and 2 minutes


@pytest.fixture(autouse=True)
def local_ntp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the executors' cold-start NTP probe on the loopback interface (see the module docstring)."""
    monkeypatch.setenv("PUNCTUAL_NTP_SERVER", LOOPBACK_NTP)


def statuses(client: Client, task_ids: list[str]) -> dict[str, TaskStatus | None]:
    out: dict[str, TaskStatus | None] = {}
    for task_id in task_ids:
        task = client.get(task_id)
        out[task_id] = None if task is None else task.status
    return out


# -- the demo workload ------------------------------------------------------------------------------------------
@pytest.mark.timeout(240)
def test_500_tasks_over_12_s_plus_a_burst_of_200_all_fire_exactly_once(tmp_path: Path, fresh_table_name: str) -> None:
    # Given the local stack on disk, polling every 3 s, allowed to reach the demo's loopback webhook receiver
    config = StackConfig(
        home=tmp_path,
        port=0,
        in_memory=False,
        poll_interval_s=3,
        settings_overrides={
            "table_name": fresh_table_name,
            "ntp_server": None,
            "default_misfire_grace_ms": GRACE_MS,
            "allowed_targets": "127.0.0.1",
        },
    )
    with LocalStack(config) as stack:
        assert stack.settings is not None
        assert stack.settings.endpoint_url is not None
        assert stack.settings.endpoint_url.startswith("http://127.0.0.1:")

        # When the demo schedules 500 log tasks spread over 12 s, a burst of 200 at one instant and 50 webhooks
        # spread between them, beside two recurring schedules (every 500 ms and every second, 24 + 12
        # occurrences), and waits
        report = run_demo(
            Client(stack.settings),
            stack.fire_log,
            tasks=500,
            over_s=12,
            burst=200,
            poll_interval_ms=stack.settings.poll_interval_ms,
            out=None,
            webhooks=50,
            recurring_ms=(500, 1000),
        )

        # Then all 786 fired, each exactly once, none late enough to be MISSED, none failed or lost
        assert {k: report[k] for k in ("scheduled", "fired", "duplicates", "lost", "missed", "failed")} == {
            "scheduled": 786,
            "fired": 786,
            "duplicates": 0,
            "lost": 0,
            "missed": 0,
            "failed": 0,
        }
        fires = Counter(f["task_id"] for f in read_fires(stack.fire_log, f"demo-{report['run_id']}-"))
        assert len(fires) == 736
        assert set(fires.values()) == {1}
        assert report["recurring_drift_ms"]["count"] == 36
        # ... the 50 webhooks were seen by the receiver (once each: duplicates above counts its fires too)
        assert report["webhook_drift_ms"]["count"] == 50
        # ... and the executors' invocations all completed (none retried, none dropped)
        assert stack.invoker is not None
        assert stack.invoker.wait_idle(60)
        assert stack.invoker.stats["dropped"] == 0
        assert stack.invoker.stats["errors"] == 0


# -- stop and restart -----------------------------------------------------------------------------------------
def stack_config(home: Path, table: str) -> StackConfig:
    return StackConfig(
        home=home,
        port=0,
        in_memory=False,
        poll_interval_s=2,
        prewarm=1,
        settings_overrides={"table_name": table, "ntp_server": None},
    )


@pytest.mark.timeout(240)
def test_a_clean_stop_hands_armed_tasks_back_and_a_restart_fires_them_once(
    tmp_path: Path, fresh_table_name: str
) -> None:
    # Given a running stack with 40 tasks due in about 40 s (far more than arming them and stopping take),
    # armed by an executor
    table = fresh_table_name
    prefix = f"restart-{uuid.uuid4().hex[:6]}-"
    ids = [f"{prefix}{i:03d}" for i in range(40)]
    with LocalStack(stack_config(tmp_path, table)) as stack:
        assert stack.settings is not None
        client = Client(stack.settings)
        due = now_ms() + 40_000
        for i, task_id in enumerate(ids):
            client.schedule(
                datetime.fromtimestamp((due + 10 * i) / 1000, UTC),
                LogAction(message="restart"),
                {"i": i},
                task_id=task_id,
            )
        armed = wait_until(lambda: set(statuses(client, ids).values()) == {TaskStatus.ARMED}, timeout=30)
        assert armed, f"not all armed: {Counter(statuses(client, ids).values())}"

        # When the stack stops cleanly (at the end of this block), before they are due
    assert now_ms() < due, "the stack took too long to stop: the tasks were already due"
    assert read_state(tmp_path) is None
    assert read_fires(tmp_path / "fires.jsonl", prefix) == []

    # Then the executor handed every task back: PENDING again, with no lease and no owner, on disk
    with DynamoDBLocal(data_dir=tmp_path / "dynamodb") as ddb:
        raw = make_client(ddb.endpoint_url)
        items = [raw.get_item(TableName=table, Key={"task_id": {"S": t}}, ConsistentRead=True)["Item"] for t in ids]
    assert {item["status"]["S"] for item in items} == {"PENDING"}
    assert not any("lease_until_ms" in item or "armed_by" in item or "batch_id" in item for item in items)
    assert all("due_bucket" in item for item in items)

    # When a new stack starts on the same home
    with LocalStack(stack_config(tmp_path, table)) as again:
        assert again.settings is not None
        client = Client(again.settings)
        done = wait_until(
            lambda: set(statuses(client, ids).values()) == {TaskStatus.SUCCEEDED}, timeout=120, interval=0.5
        )
        final = statuses(client, ids)

    # Then every task fired exactly once and ended SUCCEEDED (not MISSED)
    assert done, f"final states: {Counter(final.values())}"
    fires = Counter(f["task_id"] for f in read_fires(tmp_path / "fires.jsonl", prefix))
    assert fires == Counter(dict.fromkeys(ids, 1))


def test_a_bad_background_cpu_list_is_refused_naming_the_variable_before_anything_starts(tmp_path: Path) -> None:
    # Given a stack told to confine background work to "one"
    config = StackConfig(
        home=tmp_path, port=0, in_memory=True, prewarm=0, settings_overrides={"background_cpus": "one"}
    )
    # When it starts, Then it refuses with the variable named, and nothing was started
    with pytest.raises(SettingsError, match="PUNCTUAL_BACKGROUND_CPUS"):
        LocalStack(config).start()
    assert read_state(tmp_path) is None


@pytest.mark.timeout(90)
def test_an_api_port_in_use_is_refused_and_leaves_nothing_running(tmp_path: Path) -> None:
    # Given a loopback port another program listens on
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        stack = LocalStack(
            StackConfig(home=tmp_path, port=0, in_memory=True, prewarm=0, fast_path=False, api_port=port)
        )
        # When a stack is told to serve its API there  Then it refuses, naming the way out
        with pytest.raises(RuntimeError, match="--api-port"):
            stack.start()
    # And DynamoDB Local, started before, was stopped (its port refuses), and no state file says a stack runs
    assert stack.ddb is not None
    assert stack.ddb.pid is None
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", stack.ddb.port), timeout=2):
        pass
    assert read_state(tmp_path) is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")
@pytest.mark.timeout(90)
def test_dynamodb_local_runs_only_on_the_background_cpus(tmp_path: Path, fresh_table_name: str) -> None:
    # Given a stack with the default confinement (every usable CPU but the first)
    usable = sorted(os.sched_getaffinity(0))
    config = StackConfig(
        home=tmp_path,
        port=0,
        in_memory=True,
        poll_interval_s=60,
        prewarm=0,
        fast_path=False,
        settings_overrides={"table_name": fresh_table_name, "ntp_server": None},
    )
    with LocalStack(config) as stack:
        # Then DynamoDB Local (every thread of the JVM) may not run on the first CPU, which firing keeps
        assert stack.settings is not None
        assert stack.settings.background_cpus is not None
        assert stack.ddb is not None
        assert stack.ddb.pid is not None
        pid = stack.ddb.pid
        threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
        assert threads
        for tid in threads:
            with contextlib.suppress(ProcessLookupError):
                assert os.sched_getaffinity(tid) == set(usable[1:])


@pytest.mark.timeout(90)
def test_stack_settings_overrides_can_switch_the_ntp_probe_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_table_name: str
) -> None:
    # Given no NTP server in the environment, and a stack told to use none (no worker is started: no probe runs)
    monkeypatch.delenv("PUNCTUAL_NTP_SERVER", raising=False)
    config = StackConfig(
        home=tmp_path,
        port=0,
        in_memory=True,
        poll_interval_s=60,
        prewarm=0,
        settings_overrides={"table_name": fresh_table_name, "ntp_server": None},
    )

    # When it starts
    with LocalStack(config) as stack:
        assert stack.settings is not None

        # Then its settings, and the settings its executor workers would read from their environment, have none
        assert stack.settings.ntp_server is None
        assert Settings.from_env(env=settings_env(stack.settings)).ntp_server is None


# -- the CLI --------------------------------------------------------------------------------------------------
def _stop_cli(process: subprocess.Popen[str], home: Path) -> None:
    """After a timeout: Ctrl-C the CLI (it stops its stack), then end what it left, by pid."""
    interrupt(process)
    state = read_state(home) or {}
    for pid in [state.get("dynamodb_pid"), *state.get("worker_pids", [])]:
        if pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(240)
# Through the API in make test (the demo of test_500_tasks_... schedules straight to the table); both with --slow.
@pytest.mark.parametrize("via", [pytest.param("table", marks=pytest.mark.slow), "api"])
def test_cli_demo_json_reports_every_task_fired_once(tmp_path: Path, via: str) -> None:
    # Given no running stack in a fresh home
    home = tmp_path / "home"
    command = [
        str(ROOT / ".venv" / "bin" / "punctual"),
        "--home",
        str(home),
        "demo",
        "--tasks",
        "60",
        "--over",
        "5",
        "--burst",
        "40",
        "--webhooks",
        "20",
        "--recurring",
        "500",
        "--json",
        "--port",
        "0",
        "--quiet",
        *(["--api"] if via == "api" else []),
    ]
    env = {**os.environ, "PUNCTUAL_NTP_SERVER": LOOPBACK_NTP, "PUNCTUAL_DEFAULT_MISFIRE_GRACE_MS": str(GRACE_MS)}

    # When `punctual demo --json` runs (it starts a stack of its own, runs the demo, stops the stack)
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        _stop_cli(process, home)
        pytest.fail("punctual demo did not finish within 180 s")

    # Then it exits 0 and prints one JSON report: 130 fired (20 of them webhooks, which the stack it started
    # was allowed to send to the demo's loopback receiver, and 10 the occurrences of a schedule every 500 ms over
    # the 5 s, from 250 ms in), no duplicate, none lost
    assert process.returncode == 0, stderr[-3000:]
    report = json.loads(stdout)
    assert {"scheduled", "fired", "missed", "failed", "duplicates", "lost", "drift_ms"} <= set(report)
    assert set(report["drift_ms"]) >= {"p50", "p90", "p99", "max"}
    assert (report["scheduled"], report["fired"], report["duplicates"], report["lost"]) == (130, 130, 0, 0)
    assert report["via"] == ("table" if via == "table" else "api (tenant local)")
    assert report["recurring_drift_ms"]["count"] == 10
    assert report["webhook_drift_ms"]["count"] == 20
    assert (report["missed"], report["failed"]) == (0, 0)
    assert all(isinstance(report["drift_ms"][k], int | float) for k in ("p50", "p90", "p99", "max"))
    # ... and the stack it started is gone (no state file left behind)
    assert read_state(home) is None


# -- the local invoker ----------------------------------------------------------------------------------------
HANDLER = '''
import json
import os
import threading
from pathlib import Path

CALLS = Path({calls!r})
MODE = {mode!r}


class _Executor:
    """Like the real executor module global: SIGTERM in the worker calls request_stop()."""

    def __init__(self):
        self.stop = threading.Event()

    def request_stop(self):
        self.stop.set()


executor = _Executor()


def handler(event, context):
    calls = CALLS.read_text().splitlines() if CALLS.exists() else []
    with CALLS.open("a") as handle:
        handle.write(json.dumps({{"pid": os.getpid(), "event": event}}) + "\\n")
    first = not calls
    if MODE == "raise_first" and first:
        raise RuntimeError("first delivery fails")
    if MODE == "die_first" and first:
        os._exit(1)
    if MODE == "always_raise":
        raise RuntimeError("every delivery fails")
    if MODE == "slow":
        executor.stop.wait(4)  # an executor waiting for its tasks' due time, until asked to stop
    return {{"pid": os.getpid(), "call": len(calls) + 1}}
'''


class Results:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any], result: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append((event, result))


@pytest.fixture
def make_invoker(tmp_path: Path) -> Iterator[Callable[..., tuple[LocalInvoker, Results, Path]]]:
    """A LocalInvoker running a handler file written for the test; every one is shut down afterwards."""
    started: list[LocalInvoker] = []

    def make(mode: str, retries: int = 1, max_concurrency: int = 2) -> tuple[LocalInvoker, Results, Path]:
        calls = tmp_path / f"{mode}-calls.jsonl"
        handler = tmp_path / f"{mode}_handler.py"
        handler.write_text(HANDLER.format(calls=str(calls), mode=mode))
        results = Results()
        invoker = LocalInvoker(
            handler,
            {},
            log_file=tmp_path / f"{mode}-worker.log",
            limits=FunctionLimits("test", timeout_s=60, max_retry_attempts=retries),
            max_concurrency=max_concurrency,
            prewarm=1,
            time_scale=TIME_SCALE,
            on_result=results,
        )
        started.append(invoker)
        return invoker, results, calls

    yield make
    for invoker in started:
        invoker.shutdown(timeout=10)


def call_pids(calls: Path) -> list[int]:
    return [json.loads(line)["pid"] for line in calls.read_text().splitlines()]


@pytest.mark.timeout(60)
def test_local_invoker_retries_an_invocation_whose_handler_raised(make_invoker: Callable[..., Any]) -> None:
    # Given a handler that fails its first call and succeeds afterwards, behind an invoker retrying once
    invoker, results, calls = make_invoker("raise_first", retries=1)

    # When one event is invoked asynchronously
    invoker.invoke_async({"batch": "b-1"})
    assert invoker.wait_idle(30)

    # Then the handler ran twice, and the result of the retry was reported, once
    assert len(call_pids(calls)) == 2
    assert results.calls == [({"batch": "b-1"}, {"pid": call_pids(calls)[1], "call": 2})]
    assert {k: invoker.stats[k] for k in ("invoked", "completed", "errors", "retries", "dropped")} == {
        "invoked": 1,
        "completed": 1,
        "errors": 1,
        "retries": 1,
        "dropped": 0,
    }


@pytest.mark.timeout(60)
def test_local_invoker_retries_in_a_new_worker_when_the_worker_died(make_invoker: Callable[..., Any]) -> None:
    # Given a handler whose process dies (os._exit) on its first delivery
    invoker, results, calls = make_invoker("die_first", retries=1)

    # When one event is invoked
    invoker.invoke_async({"batch": "b-2"})
    assert invoker.wait_idle(30)

    # Then the retry ran in another worker process, which reported the result once
    first_pid, second_pid = call_pids(calls)
    assert first_pid != second_pid
    assert results.calls == [({"batch": "b-2"}, {"pid": second_pid, "call": 2})]
    assert invoker.stats["retries"] == 1
    assert invoker.stats["completed"] == 1
    assert invoker.stats["dropped"] == 0
    assert invoker.stats["cold_starts"] == 2


@pytest.mark.timeout(60)
def test_local_invoker_drops_an_invocation_after_its_last_retry(make_invoker: Callable[..., Any]) -> None:
    # Given a handler that always fails, behind an invoker retrying twice
    invoker, results, calls = make_invoker("always_raise", retries=2)

    # When one event is invoked
    invoker.invoke_async({"batch": "b-3"})
    assert invoker.wait_idle(30)

    # Then it was attempted three times, never reported as a result, and counted as dropped
    assert len(call_pids(calls)) == 3
    assert results.calls == []
    assert {k: invoker.stats[k] for k in ("errors", "retries", "dropped", "completed")} == {
        "errors": 3,
        "retries": 2,
        "dropped": 1,
        "completed": 0,
    }


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie - exited, not yet reaped - counts as ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


@pytest.mark.timeout(60)
def test_local_invoker_shutdown_ends_every_worker_even_with_an_invocation_waiting(
    make_invoker: Callable[..., Any],
) -> None:
    # Given an invoker with one execution environment, busy with a slow invocation, and a second one queued
    invoker, _results, calls = make_invoker("slow", retries=0, max_concurrency=1)
    invoker.invoke_async({"batch": "busy"})
    assert wait_until(lambda: calls.exists() and len(call_pids(calls)) == 1, timeout=20)
    invoker.invoke_async({"batch": "queued"})

    # When the invoker shuts down
    invoker.shutdown(timeout=10)

    # Then no worker process it started is still running
    pids = call_pids(calls)
    try:
        assert [pid for pid in pids if process_alive(pid)] == []
    finally:
        for pid in pids:  # the workers this test started, by pid
            if process_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


# -- recurring schedules ------------------------------------------------------------------------------------------
@pytest.mark.slow  # the demo above and the CLI demo (make test) run recurring schedules on the local stack too
@pytest.mark.timeout(240)
def test_recurring_schedules_fire_every_occurrence_once_on_the_local_stack(
    tmp_path: Path, fresh_table_name: str
) -> None:
    # Given the local stack polling every 2 s with a short lead, so that the poller (not the client) makes most of
    # each chain's occurrences
    config = StackConfig(
        home=tmp_path,
        port=0,
        in_memory=False,
        poll_interval_s=2,
        settings_overrides={
            "table_name": fresh_table_name,
            "ntp_server": None,
            "default_misfire_grace_ms": GRACE_MS,
            "lead_ms": 5_000,
            "fast_path_margin_ms": 1_000,
        },
    )
    with LocalStack(config) as stack:
        assert stack.settings is not None
        client = Client(stack.settings)
        start = datetime.fromtimestamp((now_ms() + 3_000) / 1000, UTC)
        # When a schedule every second and one every 500 ms run for 20 occurrences each
        made = {
            "every-second": client.create_schedule(
                "every-second", "rate(1 second)", LogAction(message="1s"), start_at=start, max_occurrences=20
            ),
            "half-second": client.create_schedule(
                "half-second", "rate(500 milliseconds)", LogAction(message=".5s"), start_at=start, max_occurrences=20
            ),
        }
        assert all(s.created_count < 20 for s in made.values())  # the rest is the poller's to make

        def fired(schedule_id: str) -> list[dict[str, Any]]:
            return read_fires(stack.fire_log, schedule_id + "@")

        assert wait_until(lambda: all(len(fired(s)) >= 20 for s in made), timeout=120, interval=0.5)
        # Then each occurrence fired exactly once, at its own instant, with its own key
        for schedule_id in made:
            entries = fired(schedule_id)
            step = 1000 if schedule_id == "every-second" else 500
            expected = [int(start.timestamp() * 1000) + step * k for k in range(20)]
            assert sorted(e["due_ms"] for e in entries) == expected
            assert Counter(e["key"] for e in entries).most_common(1)[0][1] == 1
            assert all(e["key"].startswith(f"{schedule_id}@") for e in entries)
            ended = client.get_schedule(schedule_id)
            assert ended is not None
            assert ended.state == "ENDED"
            assert ended.created_count == 20

            # (an outcome is recorded just after the fire: the executor's recorder settles before it writes)
            def all_succeeded(sid: str = schedule_id) -> bool:
                return {t.status for t in client.schedule_history(sid)} == {TaskStatus.SUCCEEDED}

            assert wait_until(all_succeeded, timeout=60, interval=0.5)
