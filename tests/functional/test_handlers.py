"""The Lambda handlers on moto, fed the event shapes Lambda delivers, with their stdout parsed.

The poller handler gets an EventBridge scheduled event; the executor handler gets exactly the payload the
poller passed to ``invoke_async``, with a Lambda-like context. Each test loads the handler modules afresh, by
path (as the local invoker does), inside ``mock_aws`` and with the environment Lambda would give them, so
that their module-scope settings and boto3 clients are built as at a cold start. What they print is
Powertools' output: JSON log lines and CloudWatch Embedded Metric Format (EMF) lines, parsed and checked
here. Tasks are due under a second ahead: the tests assert outcomes, never how late a fire was.
"""

from __future__ import annotations

import gc
import json
import logging
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.logging.filters import SuppressFilter
from pydantic import ValidationError

from punctual import Client, LogAction, Task, TaskStatus
from punctual.config.settings import Settings
from punctual.domain.model import ArmRequest
from punctual.runtime import metrics as names
from punctual.runtime.wiring import build_poller
from punctual.stores.dynamodb import DynamoStores
from punctual_tools.doubles import ACCOUNT, REGION, LambdaContext, scheduled_event
from punctual_tools.local.worker import lambda_environment, load_handler_in_a_thread, load_handler_module
from support import RecordingInvoker, arm

SRC = Path(__file__).resolve().parents[2] / "src"
POWERTOOLS_ATTRIBUTES = ("init", "powertools_handler", "powertools_buffer_config", "powertools_buffer_cache")


@dataclass
class Output:
    """One stretch of stdout, every line parsed as JSON: EMF blobs and log lines."""

    lines: list[dict[str, Any]]

    @classmethod
    def parse(cls, text: str) -> Output:
        return cls([json.loads(line) for line in text.splitlines() if line.strip()])

    @property
    def emf(self) -> list[dict[str, Any]]:
        return [line for line in self.lines if "_aws" in line]

    @property
    def logs(self) -> list[dict[str, Any]]:
        return [line for line in self.lines if "_aws" not in line]

    def metric(self, name: str) -> tuple[dict[str, Any], list[float]]:
        """The metric's definition and every value emitted for it (one blob holds at most 100 values)."""
        definitions: list[dict[str, Any]] = []
        values: list[float] = []
        for blob in self.emf:
            for directive in blob["_aws"]["CloudWatchMetrics"]:
                for definition in directive["Metrics"]:
                    if definition["Name"] == name:
                        definitions.append(definition)
                        value = blob[name]
                        values.extend(value if isinstance(value, list) else [value])
        assert definitions, f"no EMF metric {name}"
        assert all(d == definitions[0] for d in definitions)
        return definitions[0], values

    def metric_names(self) -> set[str]:
        return {d["Name"] for blob in self.emf for m in blob["_aws"]["CloudWatchMetrics"] for d in m["Metrics"]}

    def logs_about(self, task_id: str) -> list[dict[str, Any]]:
        return [line for line in self.logs if line.get("task_id") == task_id]


@dataclass
class Handlers:
    # the handler modules, loaded from their files: the tests read and replace their globals
    poller_app: Any
    executor_app: Any
    fastpath_app: Any
    invoker: RecordingInvoker
    client: Client
    dynamodb: Any
    capsys: pytest.CaptureFixture[str]

    def read(self) -> Output:
        return Output.parse(self.capsys.readouterr().out)

    def poll(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run the poller handler on a scheduled event; returns the event and the handler's answer."""
        event = scheduled_event()
        return event, self.poller_app.handler(event, LambdaContext("punctual-poller"))

    def task(self, task_id: str) -> Task:
        task = self.client.get(task_id)
        assert task is not None
        return task

    def status(self, task_id: str) -> TaskStatus:
        return self.task(task_id).status


ColdStart = Callable[[], Handlers]


def _forget_powertools_logging() -> None:
    """Undo what a handler module's Logger did to the process-wide "punctual" logger (its handler writes to
    the stdout of the test that loaded it) and to the root handlers."""
    punctual_logger = logging.getLogger("punctual")
    punctual_logger.handlers.clear()
    punctual_logger.setLevel(logging.NOTSET)
    punctual_logger.propagate = True
    for attribute in POWERTOOLS_ATTRIBUTES:
        punctual_logger.__dict__.pop(attribute, None)
    for handler in logging.root.handlers:
        for suppress in [f for f in handler.filters if isinstance(f, SuppressFilter)]:
            handler.removeFilter(suppress)
    # Metrics keep their data in class attributes, shared by every instance in the process.
    for shared in (Metrics._metrics, Metrics._dimensions, Metrics._metadata, Metrics._default_dimensions):
        shared.clear()


@pytest.fixture
def cold_start(
    dynamodb: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[ColdStart]:
    """Loads both handler modules afresh, inside moto, with a Lambda-like environment, and replaces the
    poller's invoker by a recording one. Called from the test itself: Powertools' Logger binds the stdout of
    the moment it is built, and capsys captures the test's call phase apart from its setup."""
    env = {
        **lambda_environment(settings.table_name, region=REGION, shard_count=settings.shard_count),
        "PUNCTUAL_DB_THREADS": str(settings.db_threads),
        "PUNCTUAL_WORKER_THREADS": str(settings.worker_threads),
        "POWERTOOLS_LOG_LEVEL": "DEBUG",  # per-task SUCCEEDED lines are DEBUG
    }
    for name in (
        "PUNCTUAL_ENDPOINT_URL",
        "PUNCTUAL_FIRE_LOG_PATH",
        "POWERTOOLS_DEV",
        "POWERTOOLS_METRICS_DISABLED",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    switch_interval = sys.getswitchinterval()

    def load() -> Handlers:
        _forget_powertools_logging()
        poller_app: Any = load_handler_module(str(SRC / "poller" / "app.py"))
        executor_app = load_handler_in_a_thread(SRC / "executor" / "app.py")
        fastpath_app: Any = load_handler_module(str(SRC / "fastpath" / "app.py"))
        invoker = RecordingInvoker()
        poller_app.poller = build_poller(poller_app.settings, invoker=invoker)
        fastpath_app.poller = build_poller(
            fastpath_app.settings, invoker=invoker, poller_id=fastpath_app.poller.poller_id
        )
        client = Client(poller_app.settings, dynamodb=dynamodb)
        handlers = Handlers(poller_app, executor_app, fastpath_app, invoker, client, dynamodb, capsys)
        handlers.read()  # the cold start's own lines
        return handlers

    try:
        yield load
    finally:
        gc.unfreeze()
        sys.setswitchinterval(switch_interval)
        _forget_powertools_logging()


def delivered(payload: dict[str, Any]) -> dict[str, Any]:
    """What Lambda hands the executor for the poller's ``invoke_async`` payload: the same, through JSON."""
    through: dict[str, Any] = json.loads(json.dumps(payload))
    return through


def schedule(handlers: Handlers, count: int, first_in_ms: int = 500) -> list[str]:
    """``count`` log tasks due ``first_in_ms`` from now, 20 ms apart, scheduled through the client."""
    start = datetime.now(UTC) + timedelta(milliseconds=first_in_ms)
    return [
        handlers.client.schedule(
            start + timedelta(milliseconds=20 * i),
            LogAction(message="handler test"),
            {"n": i},
            task_id=f"handler-task-{i}",
        ).task_id
        for i in range(count)
    ]


def assert_emf_envelope(output: Output) -> None:
    """Every EMF blob: namespace Punctual, dimension service = punctual, only metric names Punctual defines."""
    assert output.emf
    for blob in output.emf:
        (directive,) = blob["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == names.NAMESPACE == "Punctual"
        assert directive["Dimensions"] == [["service"]]
        assert blob["service"] == names.SERVICE
        assert {d["Name"] for d in directive["Metrics"]} <= set(names.ALL)


def test_poller_handler_dispatches_on_a_scheduled_event_and_emits_its_metrics(cold_start: ColdStart) -> None:
    # Given both functions at a cold start, and three tasks due within the poller's lead window
    handlers = cold_start()
    task_ids = schedule(handlers, 3)
    handlers.read()
    # When EventBridge's scheduled event reaches the poller handler
    event, answer = handlers.poll()
    output = handlers.read()
    # Then it hands all three to one executor invocation, writing nothing per task
    assert answer["dispatched"] == 3
    (payload,) = handlers.invoker.payloads
    assert sorted(t["task_id"] for t in payload["tasks"]) == task_ids
    assert all(handlers.status(t) is TaskStatus.PENDING for t in task_ids)
    # And its EMF blob holds one value of each poller metric, under the Punctual namespace
    assert_emf_envelope(output)
    zero = (
        names.TASKS_RECOVERED,
        names.TASKS_UNDISPATCHED,
        names.UNDECODABLE_ITEMS,
        names.INVOKE_FAILURES,
        names.TASKS_NOT_ARMED,
        names.POLL_GROUPS_LATE,
    )
    assert output.metric_names() == {names.TASKS_DISPATCHED, *zero}
    dispatched, values = output.metric(names.TASKS_DISPATCHED)
    assert dispatched == {"Name": "TasksDispatched", "Unit": "Count"}
    assert values == [3.0]
    for name in zero:
        assert output.metric(name)[1] == [0.0]
    # And its log lines (the package's "poll" line among them) are JSON with the event's id as correlation id
    (poll_line,) = [line for line in output.logs if line["message"].startswith("poll:")]
    assert poll_line["correlation_id"] == event["id"]
    assert poll_line["scheduled_time"] == event["time"].replace("Z", "+00:00")
    assert poll_line["service"] == "punctual"
    assert poll_line["function_name"] == "punctual-poller"
    assert all(line["correlation_id"] == event["id"] for line in output.logs)


def test_executor_handler_fires_the_batch_the_poller_sent(cold_start: ColdStart) -> None:
    # Given both functions at a cold start, three tasks dispatched by the poller handler, and the payload it
    # passed to invoke_async
    handlers = cold_start()
    task_ids = schedule(handlers, 3)
    handlers.poll()
    (payload,) = handlers.invoker.payloads
    handlers.read()
    # When Lambda delivers that payload to the executor handler
    context = LambdaContext("punctual-executor")
    answer = handlers.executor_app.handler(delivered(payload), context)
    output = handlers.read()
    # Then every task fired and is recorded SUCCEEDED
    assert (answer["armed"], answer["fired"], answer["succeeded"], answer["lost_arm"]) == (3, 3, 3, 0)
    for task_id in task_ids:
        task = handlers.task(task_id)
        assert task.status is TaskStatus.SUCCEEDED
        assert task.batch_id == payload["batch_id"]
    # And the EMF output holds FireDrift at high resolution, one value per fired task, and the counts
    assert_emf_envelope(output)
    assert output.metric_names() == {
        names.FIRE_DRIFT,
        names.TASKS_FIRED,
        names.TASKS_FIRED_LATE,
        names.TASKS_FAILED,
        names.TASKS_MISSED,
        names.ARM_CONFLICTS,
        names.TASKS_TAKEN_OVER,
        names.TASKS_FENCED,
    }
    drift, drift_values = output.metric(names.FIRE_DRIFT)
    assert drift == {"Name": "FireDrift", "Unit": "Milliseconds", "StorageResolution": 1}
    assert drift_values == pytest.approx(answer["drift_ms"])
    assert len(drift_values) == 3
    assert output.metric(names.TASKS_FIRED) == ({"Name": "TasksFired", "Unit": "Count"}, [3.0])
    for name in (
        names.TASKS_FAILED,
        names.TASKS_MISSED,
        names.ARM_CONFLICTS,
        names.TASKS_TAKEN_OVER,
        names.TASKS_FENCED,
    ):
        assert output.metric(name)[1] == [0.0]
    # And every log line is JSON carrying the batch id and the Lambda context
    batch_id = payload["batch_id"]
    assert output.logs
    assert all(line["batch_id"] == batch_id for line in output.logs)
    assert all(line["function_request_id"] == context.aws_request_id for line in output.logs)
    (done,) = [line for line in output.logs if line["message"] == "batch done"]
    assert done["correlation_id"] == batch_id
    assert done["report"]["fired"] == 3
    # And each task's outcome line carries its id as task id and correlation id
    for task_id in task_ids:
        about = output.logs_about(task_id)
        assert about, f"no log line about {task_id}"
        assert all(line["correlation_id"] == task_id for line in about)
        (outcome,) = [line for line in about if line.get("outcome")]
        assert (outcome["level"], outcome["outcome"]) == ("DEBUG", "SUCCEEDED")
    # And the log action wrote one "fired" line per task
    fired = [line for line in output.logs if line["message"].startswith("fired ")]
    assert sorted(line["fire"]["task_id"] for line in fired) == task_ids


def test_a_duplicate_delivery_fires_nothing_and_counts_arm_conflicts(cold_start: ColdStart) -> None:
    # Given both functions at a cold start, and a batch the executor handler has run once
    handlers = cold_start()
    task_ids = schedule(handlers, 3)
    handlers.poll()
    (payload,) = handlers.invoker.payloads
    assert handlers.executor_app.handler(delivered(payload), LambdaContext("punctual-executor"))["fired"] == 3
    fired_at = {t: handlers.task(t).fired_at for t in task_ids}
    handlers.read()
    # When Lambda delivers the same payload again (async invoke is at-least-once)
    again = handlers.executor_app.handler(delivered(payload), LambdaContext("punctual-executor"))
    output = handlers.read()
    # Then nothing is armed or fired, and the tasks keep their first outcome
    assert (again["armed"], again["fired"], again["lost_arm"]) == (0, 0, 3)
    for task_id in task_ids:
        task = handlers.task(task_id)
        assert task.status is TaskStatus.SUCCEEDED
        assert task.fired_at == fired_at[task_id]
    # And the metrics say so: ArmConflicts 3, TasksFired 0, no FireDrift value
    assert_emf_envelope(output)
    assert output.metric(names.ARM_CONFLICTS)[1] == [3.0]
    assert output.metric(names.TASKS_FIRED)[1] == [0.0]
    assert names.FIRE_DRIFT not in output.metric_names()
    # And each lost task has its own line, with its id as correlation id
    for task_id in task_ids:
        (line,) = output.logs_about(task_id)
        assert "not armed" in line["message"]
        assert (line["correlation_id"], line["batch_id"], line["level"]) == (task_id, payload["batch_id"], "INFO")


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_an_executor_event_without_tasks_is_rejected_before_anything_is_armed(cold_start: ColdStart) -> None:
    # Given both functions at a cold start, and a dispatched batch, delivered with its task list missing
    handlers = cold_start()
    task_ids = schedule(handlers, 2, first_in_ms=5_000)
    handlers.poll()
    (payload,) = handlers.invoker.payloads
    malformed = {key: value for key, value in delivered(payload).items() if key != "tasks"}
    handlers.read()
    # When it reaches the executor handler
    with pytest.raises(ValidationError) as raised:
        handlers.executor_app.handler(malformed, LambdaContext("punctual-executor"))
    # Then validation names the missing field, nothing is armed, and no metrics are emitted
    assert [error["loc"] for error in raised.value.errors()] == [("tasks",)]
    assert all(handlers.status(t) is TaskStatus.PENDING for t in task_ids)
    assert handlers.read().emf == []


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_the_poller_handler_rejects_an_event_that_is_not_a_scheduled_event(cold_start: ColdStart) -> None:
    # Given both functions at a cold start, and a task due soon
    handlers = cold_start()
    (task_id,) = schedule(handlers, 1, first_in_ms=5_000)
    # When the poller handler is invoked with something other than an EventBridge event
    with pytest.raises(ValidationError):
        handlers.poller_app.handler({"detail": {}}, LambdaContext("punctual-poller"))
    # Then it polls nothing
    assert handlers.invoker.payloads == []
    assert handlers.status(task_id) is TaskStatus.PENDING


class FailingInvoker:
    def invoke_async(self, payload: dict[str, Any]) -> None:
        raise RuntimeError("throttled")


def test_with_two_poll_groups_the_scheduled_poller_starts_the_other_group_and_each_dispatches_its_share(
    cold_start: ColdStart, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the functions at a cold start with two poll groups, and twelve tasks due within the lead window
    monkeypatch.setenv("PUNCTUAL_POLL_GROUPS", "2")
    handlers = cold_start()
    groups = RecordingInvoker()
    handlers.poller_app.group_invoker = groups
    task_ids = schedule(handlers, 12)
    handlers.read()
    # When EventBridge's scheduled event reaches the poller
    event, first = handlers.poll()
    # Then it starts group 1's poller with the event's id and time, and polls group 0 itself
    assert groups.payloads == [
        {"id": event["id"], "time": event["time"].replace("Z", "+00:00"), "poll_group": 1, "poll_groups": 2}
    ]
    assert first["group"] == 0
    # When group 1's invocation arrives (through JSON, as Lambda delivers it)
    second = handlers.poller_app.handler(json.loads(json.dumps(groups.payloads[0])), LambdaContext("punctual-poller"))
    # Then it polls group 1 only, and between them every task went to an executor exactly once
    assert second["group"] == 1
    dispatched = [t["task_id"] for p in handlers.invoker.payloads for t in p["tasks"]]
    assert sorted(dispatched) == sorted(task_ids)
    assert first["dispatched"] > 0
    assert second["dispatched"] > 0
    assert first["dispatched"] + second["dispatched"] == 12
    # And both invocations logged under the scheduled event's id, and counted what they dispatched
    output = handlers.read()
    assert all(line["correlation_id"] == event["id"] for line in output.logs)
    assert sorted(output.metric(names.TASKS_DISPATCHED)[1]) == sorted([first["dispatched"], second["dispatched"]])


def test_a_poll_group_that_cannot_be_started_is_polled_by_the_scheduled_poller(
    cold_start: ColdStart, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two poll groups, twelve tasks due, and starting another poller fails (throttled)
    monkeypatch.setenv("PUNCTUAL_POLL_GROUPS", "2")
    handlers = cold_start()
    handlers.poller_app.group_invoker = FailingInvoker()
    task_ids = schedule(handlers, 12)
    # When the scheduled event arrives
    _, answer = handlers.poll()
    # Then the scheduled poller polled both groups itself, and every task went to an executor once
    assert [r["group"] for r in answer["polls"]] == [0, 1]
    assert sorted(t["task_id"] for p in handlers.invoker.payloads for t in p["tasks"]) == sorted(task_ids)


def test_the_next_tick_counts_a_group_whose_poller_never_ran_and_tasks_sent_but_not_armed(
    cold_start: ColdStart, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two poll groups, twelve tasks due, and a scheduled tick whose invocation of group 1 was accepted (202)
    # but never ran, and whose executor invocations never ran either (throttled, then dropped)
    monkeypatch.setenv("PUNCTUAL_POLL_GROUPS", "2")
    handlers = cold_start()
    handlers.poller_app.group_invoker = RecordingInvoker()
    task_ids = schedule(handlers, 12, first_in_ms=30_000)
    _, first = handlers.poll()
    sent_first = first["dispatched"]
    assert 0 < sent_first < 12
    handlers.read()
    # When the next scheduled event arrives
    _, second = handlers.poll()
    output = handlers.read()
    # Then it polls group 1 itself and counts it late, and counts the tasks it sent that no executor armed
    assert [r["group"] for r in second["polls"]] == [0, 1]
    assert output.metric(names.POLL_GROUPS_LATE)[1] == [1.0]
    assert output.metric(names.TASKS_NOT_ARMED)[1] == [float(sent_first)]
    assert sorted({t["task_id"] for p in handlers.invoker.payloads for t in p["tasks"]}) == sorted(task_ids)
    # ... and warns about both
    warnings = [line["message"] for line in output.logs if line["level"] == "WARNING"]
    assert any("had not started since the tick before" in message for message in warnings), warnings
    assert any(f"{sent_first} tasks still PENDING" in message for message in warnings), warnings
    assert_emf_envelope(output)


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_a_poll_group_event_from_another_configuration_is_ignored(cold_start: ColdStart) -> None:
    # Given one poll group (the default), and a task due
    handlers = cold_start()
    schedule(handlers, 1)
    # When a group event sent under a two-group configuration arrives
    answer = handlers.poller_app.handler(
        {"id": "e-1", "time": "2026-11-23T00:00:00+00:00", "poll_group": 1, "poll_groups": 2},
        LambdaContext("punctual-poller"),
    )
    # Then it polls nothing (the next scheduled tick covers every group)
    assert answer == {"ignored": True}
    assert handlers.invoker.payloads == []


def stream_record(handlers: Handlers, event_name: str, task_id: str, sequence: int) -> dict[str, Any]:
    """A DynamoDB stream record as Lambda delivers it (NEW_IMAGE view), the image read from the table."""
    keys = {"task_id": {"S": task_id}}
    change: dict[str, Any] = {
        "ApproximateCreationDateTime": 1_700_000_000,
        "Keys": keys,
        "SequenceNumber": f"{sequence:021d}",
        "SizeBytes": 512,
        "StreamViewType": "NEW_IMAGE",
    }
    if event_name != "REMOVE":
        table = handlers.poller_app.settings.table_name
        change["NewImage"] = handlers.dynamodb.get_item(TableName=table, Key=keys)["Item"]
    return {
        "eventID": uuid.uuid4().hex,
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": REGION,
        "dynamodb": change,
        "eventSourceARN": f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/punctual-tasks/stream/2026-11-22T00:00:00.000",
    }


def test_fast_path_handler_dispatches_short_lead_inserts_and_ignores_the_rest(cold_start: ColdStart) -> None:
    # Given the functions at a cold start; a task already armed by an executor; then two tasks written 1 s
    # before due (flagged for the fast path) and one written an hour ahead (the poller's)
    handlers = cold_start()
    taken_task = handlers.client.schedule(
        datetime.now(UTC) + timedelta(seconds=1), LogAction(message="taken"), None, task_id="taken-task"
    )
    taken = taken_task.task_id
    store = DynamoStores.from_settings(handlers.dynamodb, handlers.poller_app.settings)
    now = int(datetime.now(UTC).timestamp() * 1000)
    assert store.firing.heartbeat("x-live", now, now + 600_000)
    assert arm(store, taken_task, "x-live", now) is not None
    near = schedule(handlers, 2, first_in_ms=1_000)
    far = handlers.client.schedule(
        datetime.now(UTC) + timedelta(hours=1), LogAction(message="far"), None, task_id="far-task"
    ).task_id
    handlers.invoker.payloads.clear()
    handlers.read()
    # When a stream batch arrives with their INSERTs, a MODIFY of the armed one and a REMOVE
    records = [stream_record(handlers, "INSERT", t, i) for i, t in enumerate([*near, far])]
    records += [stream_record(handlers, "MODIFY", taken, 10), stream_record(handlers, "REMOVE", "gone-task", 11)]
    answer = handlers.fastpath_app.handler({"Records": records}, LambdaContext("punctual-fastpath"))
    output = handlers.read()
    # Then only the two short-lead tasks are dispatched, by the fast path, to one executor
    assert (answer["records"], answer["candidates"], answer["dispatched"]) == (5, 2, 2)
    (payload,) = handlers.invoker.payloads
    assert sorted(t["task_id"] for t in payload["tasks"]) == near
    assert payload["dispatcher"] == handlers.fastpath_app.poller.poller_id
    assert handlers.status(far) is TaskStatus.PENDING
    # And the EMF blob counts them; every log line carries the first record's event id as correlation id
    assert_emf_envelope(output)
    assert output.metric(names.TASKS_DISPATCHED)[1] == [2.0]
    assert output.metric(names.INVOKE_FAILURES)[1] == [0.0]
    assert all(line["correlation_id"] == records[0]["eventID"] for line in output.logs)
    # And the same batch delivered again (Lambda retries a failed batch) dispatches them again: the second
    # executor to arm them loses at ARM, so each fires once
    again = handlers.fastpath_app.handler({"Records": records}, LambdaContext("punctual-fastpath"))
    assert again["dispatched"] == 2
    first, second = (delivered(p) for p in handlers.invoker.payloads)
    for executor_id in ("x-1", "x-2"):
        assert store.firing.heartbeat(executor_id, now, now + 600_000)
    requests = [
        [ArmRequest(task_id=t["task_id"], due_ms=t["due_ms"], lease_until_ms=t["due_ms"] + 60_000) for t in p["tasks"]]
        for p in (first, second)
    ]
    assert None not in store.firing.arm_many(requests[0], first["batch_id"], "x-1", now)
    assert store.firing.arm_many(requests[1], second["batch_id"], "x-2", now) == [None, None]
