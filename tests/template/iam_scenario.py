"""Every path of every function on moto, with each function's AWS calls recorded under its name.

The handler modules are loaded as Lambda loads them (by path, at a cold start), with the environment the
template gives each function in a deployment of fake names (:func:`punctual_tools.iam.policies.function_environment`),
inside a :class:`~punctual_tools.iam.CallRecorder` naming the function: every client a handler builds, at its cold
start or later in any thread, records under that name. What Lambda itself does with a function's role is played
by the scenario under that function's name too: the event source mapping's reads of the table stream (the fast
path's). The scenario's own setup (the table, the targets, the tasks it arranges) uses clients that record nothing.

Paths: the poller's scheduled tick and a poll group it fans out to (the first poll's scan for the watermark,
dispatch, a schedule's next occurrences, a change's pending cleanup); the fast path from the stream; the executor
on every batch the poller sent (arm, takeover of a dead executor's tasks, heartbeats, every action kind with secret
references, a failure to the dead-letter queue, a miss); and every route of the REST API (redrive included: only
the API function redrives; ``punctual redrive`` runs with the operator's credentials).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from aws_lambda_powertools import Metrics
from moto import mock_aws

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.model import ArmRequest, Task, TaskStatus
from punctual.domain.schedules import ScheduleState
from punctual.polling.fastpath import matches
from punctual.runtime.client import Client
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import EventBridgeAction, HttpAction, LambdaAction, LogAction, SnsAction, SqsAction
from punctual_tools.doubles import ACCOUNT, REGION, LambdaContext, StubTarget, scheduled_event, serving
from punctual_tools.iam import AwsCall, CallRecorder, Stack
from punctual_tools.iam.calls import function_arn
from punctual_tools.iam.policies import function_environment
from punctual_tools.local.api_server import proxy_event
from punctual_tools.local.worker import load_handler_in_a_thread
from punctual_tools.template import ensure_table, stream_filter_patterns
from support import read_task, record_failed

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
FUNCTIONS = {
    "PollerFunction": "poller",
    "ExecutorFunction": "executor",
    "FastPathFunction": "fastpath",
    "ApiFunction": "api",
}
TABLE = "punctual-iam"
NAMES = {
    "TasksTable": TABLE,
    "PollerFunction": "punctual-poller",
    "ExecutorFunction": "punctual-executor",
    "FastPathFunction": "punctual-fastpath",
    "ApiFunction": "punctual-api",
    "TaskDeadLetterQueue": "punctual-dead-letters",
    "ExecutorFailureQueue": "punctual-executor-failures",
}
TENANT_ROLE = f"arn:aws:iam::{ACCOUNT}:role/AcmeScheduler"
TOKEN = "s3cr3t-token"
SIGNING_SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # 24 bytes, base64
# Every action kind's target (moto's): AWS kinds act on these ARNs, which ActionTargetArns grants.
TARGETS = {
    "lambda": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:punctual-target",
    "sqs": f"arn:aws:sqs:{REGION}:{ACCOUNT}:punctual-target-queue",
    "sns": f"arn:aws:sns:{REGION}:{ACCOUNT}:punctual-target-topic",
    "eventbridge": f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/punctual-bus",
}
LEAD_S = 2.5  # how far ahead the arranged tasks are due: time for the poll, the stream and the arming
# What the test itself sets, besides the template's variables: no NTP, no traces, small pools.
TEST_ENV = {
    "AWS_DEFAULT_REGION": REGION,
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "PUNCTUAL_NTP_SERVER": "off",
    "PUNCTUAL_DB_THREADS": "4",
    "PUNCTUAL_WORKER_THREADS": "8",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_DISABLED": "true",
}


def stack() -> Stack:
    """The deployment the scenario stands for: PollGroups 2 (the fan-out), the targets allowlisted, the loopback
    HTTP target allowed, one tenant."""
    tenant_map = {"principals": {TENANT_ROLE: "acme"}, "tenants": {"acme": {"targets": ["127.0.0.1"]}}}
    return Stack(
        account=ACCOUNT,
        region=REGION,
        names=NAMES,
        parameters={
            "PollGroups": "2",
            "ShardCount": "4",
            "ActionTargetArns": ",".join(TARGETS.values()),
            "AllowedTargets": "127.0.0.1",
            "TenantMap": json.dumps(tenant_map),
        },
    )


@dataclass
class Outcome:
    """What the scenario did, to show that each path was taken."""

    recorder: CallRecorder
    api_answers: list[tuple[str, str, int]] = field(default_factory=list)  # (verb, path, status)
    statuses: dict[str, TaskStatus] = field(default_factory=dict)  # arranged task -> its status at the end
    poll_reports: list[dict[str, Any]] = field(default_factory=list)
    executor_reports: list[dict[str, Any]] = field(default_factory=list)
    fast_path_reports: list[dict[str, Any]] = field(default_factory=list)
    http_requests: list[dict[str, str]] = field(default_factory=list)
    dead_letters: int = 0

    def calls(self, function: str) -> list[AwsCall]:
        return self.recorder.of(function)


class _Target(StubTarget):
    """The http kind's target: 200 on /ok (keeping each request's headers), 500 elsewhere."""

    def __init__(self) -> None:
        super().__init__(500)
        self.seen: list[dict[str, str]] = []

    def answer(self, path: str, headers: Any, body: bytes) -> int:
        with self.lock:
            self.seen.append({k.lower(): v for k, v in headers.items()})
        return 200 if path == "/ok" else 500


def _forget_powertools() -> None:
    """Undo what the handler modules' Logger and Metrics did to process-wide state."""
    for name in ("punctual", ""):
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if type(h).__module__.startswith("aws_lambda_powertools")]:
            logger.removeHandler(handler)
    punctual_logger = logging.getLogger("punctual")
    punctual_logger.handlers.clear()
    punctual_logger.setLevel(logging.NOTSET)
    punctual_logger.propagate = True
    for attribute in ("init", "powertools_handler", "powertools_buffer_config", "powertools_buffer_cache"):
        punctual_logger.__dict__.pop(attribute, None)
    for shared in (Metrics._metrics, Metrics._dimensions, Metrics._metadata, Metrics._default_dimensions):
        shared.clear()


class Scenario:
    def __init__(self, template: dict[str, Any], recorder: CallRecorder, mp: pytest.MonkeyPatch) -> None:
        self.template = template
        self.recorder = recorder
        self.mp = mp
        self.stack = stack()
        self.outcome = Outcome(recorder)
        self._set: set[str] = set()

    # -- setup (records nothing) ------------------------------------------------------------------------------
    def arrange(self, target: _Target) -> None:
        self.dynamodb = boto3.client("dynamodb", region_name=REGION)
        assert ensure_table(self.dynamodb, TABLE)
        self.stream_arn = self.dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        sqs = boto3.client("sqs", region_name=REGION)
        self.dead_letter_url = sqs.create_queue(QueueName=NAMES["TaskDeadLetterQueue"])["QueueUrl"]
        sqs.create_queue(QueueName=TARGETS["sqs"].rsplit(":", 1)[1])
        boto3.client("sns", region_name=REGION).create_topic(Name=TARGETS["sns"].rsplit(":", 1)[1])
        boto3.client("events", region_name=REGION).create_event_bus(Name=TARGETS["eventbridge"].rsplit("/", 1)[1])
        boto3.client("ssm", region_name=REGION).put_parameter(Name="/punctual/token", Value=TOKEN, Type="SecureString")
        boto3.client("secretsmanager", region_name=REGION).create_secret(
            Name="punctual/targets/signing", SecretString=SIGNING_SECRET
        )
        self.settings = Settings(
            table_name=TABLE,
            region=REGION,
            shard_count=4,
            poll_groups=2,
            ntp_server=None,
            allowed_targets="127.0.0.1",
            allowed_target_arns=",".join(TARGETS.values()),
        )
        self.store = DynamoStores.from_settings(self.dynamodb, self.settings)
        client = Client(self.settings, dynamodb=self.dynamodb)
        now = datetime.now(UTC)
        due = now + timedelta(seconds=LEAD_S)
        http = HttpAction(
            url=target.url("/ok"),
            secret_headers={"Authorization": "ssm:/punctual/token"},
            signing_secret="secretsmanager:punctual/targets/signing",
        )
        actions = {
            "http": http,
            "log": LogAction(message="iam"),
            "lambda": LambdaAction(function_arn=TARGETS["lambda"]),
            "sqs": SqsAction(queue_arn=TARGETS["sqs"]),
            "sns": SnsAction(topic_arn=TARGETS["sns"]),
            "eventbridge": EventBridgeAction(event_bus_arn=TARGETS["eventbridge"]),
            "failing": HttpAction(url=target.url("/fail")),
        }
        self.arranged = [
            client.schedule(due, action, {"kind": kind}, task_id=f"kind-{kind}").task_id
            for kind, action in actions.items()
        ]
        # A task past its grace (MISSED), and two tasks a dead executor armed (taken over)
        now_ms = int(now.timestamp() * 1000)
        late = Task(task_id="late", due_at=from_ms(now_ms - 120_000), action=LogAction(), misfire_grace_ms=1_000)
        assert self.store.client.create(late, now_ms - 180_000)[1]
        dead = [
            Task(task_id=f"orphan-{i}", due_at=from_ms(int(due.timestamp() * 1000)), action=LogAction())
            for i in range(2)
        ]
        assert self.store.firing.heartbeat("x-dead", now_ms - 60_000, now_ms - 1_000)
        for task in dead:
            assert self.store.client.create(task, now_ms - 60_000)[1]
            lease = task.due_ms + 3_600_000
            assert (
                self.store.firing.arm_many(
                    [ArmRequest(task_id=task.task_id, due_ms=task.due_ms, lease_until_ms=lease)],
                    "b",
                    "x-dead",
                    now_ms - 60_000,
                )[0]
                is not None
            )
        self.arranged += ["late", *(t.task_id for t in dead)]
        # A tenant's schedule whose next occurrence the poll makes, admitted against the tenant's active tasks (due
        # past its window, so not dispatched: a client that looks only seconds ahead made none), and one whose
        # change left its cleanup to the poll
        near = Client(self.settings.model_copy(update={"lead_ms": 5_000}), dynamodb=self.dynamodb)
        near.create_schedule("acme/pulse", "rate(1 minute)", LogAction(), start_at=now + timedelta(seconds=100))
        changed = client.create_schedule("changed", "rate(1 minute)", LogAction(), start_at=now + timedelta(days=1))
        stored = self.store.schedules.get_schedule(changed.schedule_id)
        assert stored is not None
        self.store.schedules.change_schedule(
            stored, {"state": ScheduleState.PAUSED, "next_due_ms": None}, now_ms, cleanup=True
        )
        self.schedules = ["acme/pulse", "changed"]

    # -- functions ------------------------------------------------------------------------------------------------
    def environment(self, function: str) -> None:
        """The function's environment, as the template gives it in this deployment (and the test's own)."""
        for name in self._set:
            self.mp.delenv(name, raising=False)
        variables = {**function_environment(self.template, function, self.stack), **TEST_ENV}
        for name, value in variables.items():
            self.mp.setenv(name, value)
        self._set = set(variables)

    def load(self, function: str) -> ModuleType:
        """The function's handler module at a cold start, in a short-lived thread (the executor lowers the
        priority of the thread that loads it), its clients recording as the function's."""
        self.environment(function)
        with self.recorder.acting_as(function):
            return load_handler_in_a_thread(SRC / FUNCTIONS[function] / "app.py")

    def run(self, function: str, handler: Callable[..., Any], event: dict[str, Any]) -> Any:
        with self.recorder.acting_as(function):
            # through JSON, as Lambda delivers it (a stream record's creation time an epoch number)
            delivered = json.loads(json.dumps(event, default=lambda value: value.timestamp()))
            return handler(delivered, LambdaContext(NAMES[function]))

    def _invokes_since(self, count: int) -> list[AwsCall]:
        return [c for c in self.recorder.calls[count:] if (c.service, c.operation) == ("lambda", "Invoke")]

    def poll(self) -> list[dict[str, Any]]:
        """The scheduled tick (which invokes the other poll group), then that group; the executor batches sent."""
        app = self.load("PollerFunction")
        seen = len(self.recorder.calls)
        self.outcome.poll_reports.append(self.run("PollerFunction", app.handler, scheduled_event()))
        groups = [
            json.loads(c.params["Payload"])
            for c in self._invokes_since(seen)
            if _invoked(c).endswith(f":function:{NAMES['PollerFunction']}")
        ]
        assert groups, "the tick invoked no other poll group"
        for event in groups:
            self.outcome.poll_reports.append(self.run("PollerFunction", app.handler, event))
        return [
            json.loads(c.params["Payload"])
            for c in self._invokes_since(seen)
            if f":function:{NAMES['ExecutorFunction']}" in _invoked(c)
        ]

    def fast_path(self) -> None:
        """The event source mapping's reads of the stream (with the fast path's role), its filter, the handler."""
        app = self.load("FastPathFunction")
        with self.recorder.acting_as("FastPathFunction"):
            # botocore's account endpoint for DynamoDB Streams is not one moto serves: the regional one
            streams = boto3.client(
                "dynamodbstreams", region_name=REGION, endpoint_url=f"https://streams.dynamodb.{REGION}.amazonaws.com"
            )
            records: list[Any] = []
            for shard in streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]["Shards"]:
                iterator = streams.get_shard_iterator(
                    StreamArn=self.stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
                records.extend(streams.get_records(ShardIterator=iterator, Limit=1000)["Records"])
        patterns = stream_filter_patterns()
        wanted = [r for r in records if any(matches(p, r) for p in patterns)]
        assert wanted, "no stream record passed the fast path's filter"
        self.outcome.fast_path_reports.append(self.run("FastPathFunction", app.handler, {"Records": wanted}))

    def execute(self, batches: list[dict[str, Any]]) -> None:
        app = self.load("ExecutorFunction")
        try:
            for batch in batches:
                self.outcome.executor_reports.append(self.run("ExecutorFunction", app.handler, batch))
        finally:
            app.executor.close()

    def api(self) -> None:
        app = self.load("ApiFunction")
        later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        log = {"kind": "log"}

        def call(verb: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
            event = proxy_event(
                verb,
                path,
                {"Content-Type": "application/json"},
                None if body is None else json.dumps(body).encode(),
                None,
            )
            event["requestContext"]["authorizer"] = None
            event["requestContext"]["identity"]["userArn"] = (
                f"arn:aws:sts::{ACCOUNT}:assumed-role/AcmeScheduler/{uuid.uuid4().hex[:8]}"
            )
            answer = self.run("ApiFunction", app.handler, event)
            self.outcome.api_answers.append((verb, path, answer["statusCode"]))
            result: dict[str, Any] = json.loads(answer["body"] or "{}")
            return result

        for name in ("t1", "t2", "t3", "failed"):
            call("POST", "/v1/tasks", {"task_id": name, "due_at": later, "action": log})
        batch = call(
            "POST", "/v1/tasks:batch", {"tasks": [{"task_id": f"b{i}", "due_at": later, "action": log} for i in (1, 2)]}
        )
        assert [r["outcome"] for r in batch["results"]] == ["created", "created"], batch  # each task's own writes
        self._fail("acme/failed")
        call("GET", "/v1/tasks")
        call("GET", "/v1/tasks/t1")
        call("POST", "/v1/tasks/t1/cancel")
        call("POST", "/v1/tasks/t2/reschedule", {"due_at": (datetime.now(UTC) + timedelta(hours=2)).isoformat()})
        call("POST", "/v1/tasks/t3/run-now")
        call("POST", "/v1/tasks/failed/redrive")
        call("POST", "/v1/schedules", {"schedule_id": "daily", "expression": "rate(1 hour)", "action": log})
        call("GET", "/v1/schedules")
        call("GET", "/v1/schedules/daily")
        call("PATCH", "/v1/schedules/daily", {"expression": "rate(2 hours)"})
        call("POST", "/v1/schedules/daily/pause")
        call("POST", "/v1/schedules/daily/resume")
        call("POST", "/v1/schedules/daily/run-now")
        call("GET", "/v1/schedules/daily/history")
        call("DELETE", "/v1/schedules/daily")

    def _fail(self, task_id: str) -> None:
        """Make a task FAILED as an executor would (arm, record the failure), with the scenario's own client."""
        task = read_task(self.store, task_id)
        record_failed(self.store, task, "x-1", task.due_ms - 1_000)

    def finish(self, target: _Target) -> Outcome:
        for task_id in self.arranged:
            task = self.store.client.get(task_id)
            assert task is not None, task_id
            self.outcome.statuses[task_id] = task.status
        self.outcome.http_requests = list(target.seen)
        sqs = boto3.client("sqs", region_name=REGION)
        attributes = sqs.get_queue_attributes(QueueUrl=self.dead_letter_url, AttributeNames=["All"])["Attributes"]
        self.outcome.dead_letters = int(attributes["ApproximateNumberOfMessages"])
        return self.outcome


def _invoked(call: AwsCall) -> str:
    """The ARN of the function a Lambda invoke names (by name, alias or ARN)."""
    return function_arn(call.params["FunctionName"], call.region, call.params.get("Qualifier"))


@contextlib.contextmanager
def run_scenario(template: dict[str, Any]) -> Iterator[Outcome]:
    """Run every function's paths on moto (see the module's docstring); the outcome, while moto still holds it."""
    switch_interval = sys.getswitchinterval()
    _forget_powertools()
    try:
        with (
            pytest.MonkeyPatch.context() as mp,
            mock_aws(config={"lambda": {"use_docker": False}}),
            CallRecorder() as recorder,
            serving(_Target()) as target,
        ):
            for name in (
                "PUNCTUAL_ENDPOINT_URL",
                "PUNCTUAL_FIRE_LOG_PATH",
                "POWERTOOLS_DEV",
                "AWS_SESSION_TOKEN",
                "AWS_PROFILE",
            ):
                mp.delenv(name, raising=False)
            scenario = Scenario(template, recorder, mp)
            scenario.arrange(target)
            batches = scenario.poll()
            scenario.fast_path()
            scenario.execute(batches)
            scenario.api()
            yield scenario.finish(target)
    finally:
        gc.unfreeze()
        sys.setswitchinterval(switch_interval)
        _forget_powertools()


def route_pattern(path: str) -> re.Pattern[str]:
    """A regular expression of the paths an openapi.json route answers (``{x}``: one path segment)."""
    return re.compile(
        "".join("[^/]+" if part.startswith("{") else re.escape(part) for part in re.split(r"(\{[^}]+\})", path)) + "$"
    )
