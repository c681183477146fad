"""``punctual verify``'s parts that speak AWS, on moto: the run's queue, a run fired by a stand-in executor, an
interrupted run's clean-up through the real client, the cost read from CloudWatch, a stack's outputs and
functions, and the local stack passing SQS's endpoint to its executors."""

from __future__ import annotations

import argparse
import io
import json
import threading
import time
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from punctual.config.settings import Settings
from punctual.domain.model import TaskStatus, occurrence_id
from punctual.domain.schedules import Schedule, instants_after
from punctual.runtime.client import Client
from punctual.scheduling.bulk import ScheduleResult
from punctual.targets import FireContext
from punctual.targets.aws import message_body
from punctual_tools.cli import build_parser
from punctual_tools.cost import pricing
from punctual_tools.local.stack import executor_env
from punctual_tools.template import ensure_table
from punctual_tools.verify.command import Clients, local_target, run_command
from punctual_tools.verify.metrics import collect_usage, format_cost, usage_queries
from punctual_tools.verify.plan import MixOptions
from punctual_tools.verify.queue import VerifyError, VerifyQueue
from punctual_tools.verify.run import VerifyRun
from punctual_tools.verify.stack import executor_allowlist, function_configs, settings_of, stack_outputs

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch.type_defs import DimensionTypeDef, MetricDatumTypeDef

REGION = "us-east-1"
QUEUE = "punctual-verify-test"
ARN = f"arn:aws:sqs:{REGION}:123456789012:{QUEUE}"
# A small mix with no short lead (the end-to-end test has those): about 1.5 s a run
SMALL = MixOptions(
    spread=4, over_s=0.4, burst=3, short_leads=0, occurrences=2, rate_ms=100, lead_in_s=1.0, wait_s=1.5, settle_s=0.2
)


@pytest.fixture
def sqs() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("sqs", region_name=REGION)


class StandInExecutor:
    """A scheduler whose tasks (and a schedule's occurrences) fire at their due instant to the SQS queue, as the
    executor's SQS action would: the same message body. ``drop`` never fires, ``twice`` fires twice."""

    def __init__(self, sqs: Any, drop: frozenset[str] = frozenset(), twice: frozenset[str] = frozenset()) -> None:
        self.sqs, self.drop, self.twice = sqs, drop, twice
        self.cancelled: list[str] = []
        self.deleted: list[str] = []
        self.timers: list[threading.Timer] = []

    def _fire_at(self, task_id: str, due_ms: int, payload: Any, queue_arn: str) -> None:
        if task_id in self.drop:
            return
        url = self.sqs.get_queue_url(QueueName=queue_arn.rsplit(":", 1)[1])["QueueUrl"]
        context = FireContext(task_id=task_id, occurrence=0, due_ms=due_ms, started_ms=due_ms, payload=payload)
        body = message_body(context)
        for _ in range(2 if task_id in self.twice else 1):
            timer = threading.Timer(
                _until(due_ms), self.sqs.send_message, kwargs={"QueueUrl": url, "MessageBody": body}
            )
            timer.start()
            self.timers.append(timer)

    def schedule_many(self, tasks: Any, *, threads: int = 16, on_progress: Any = None) -> list[ScheduleResult]:
        specs = list(tasks)
        for spec in specs:
            due = int(spec["due_at"].timestamp() * 1000)
            self._fire_at(spec["task_id"], due, spec["payload"], spec["action"].queue_arn)
        return [ScheduleResult(index=i, task_id=s["task_id"], outcome="created") for i, s in enumerate(specs)]

    def schedule(self, due_at: Any, action: Any, payload: Any = None, *, task_id: str | None = None) -> None:
        assert task_id is not None
        self._fire_at(task_id, int(due_at.timestamp() * 1000), payload, action.queue_arn)

    def create_schedule(
        self, schedule_id: str, expression: str, action: Any, payload: Any = None, **kw: Any
    ) -> Schedule:
        schedule = Schedule(schedule_id=schedule_id, expression=expression, action=action, payload=payload, **kw)
        start = int(kw["start_at"].timestamp() * 1000)
        for i, due in enumerate(instants_after(schedule, start - 1)):
            if i == kw["max_occurrences"]:
                break
            self._fire_at(occurrence_id(schedule_id, due), due, payload, action.queue_arn)
        return schedule

    def get(self, task_id: str) -> None:
        return None

    def cancel(self, task_id: str) -> None:
        self.cancelled.append(task_id)

    def delete_schedule(self, schedule_id: str) -> None:
        self.deleted.append(schedule_id)


def _until(due_ms: int) -> float:
    return max(0.0, due_ms / 1000 - time.time())


def test_a_run_whose_every_task_arrives_once_says_so_and_deletes_its_queue(sqs: Any) -> None:
    # Given a stand-in executor that fires each task once at its instant
    executor = StandInExecutor(sqs)
    run = VerifyRun(executor, VerifyQueue(sqs, QUEUE), [ARN], SMALL, "f1", epsilon_ms=1_000)  # type: ignore[arg-type]  # a stand-in scheduler: what a run calls only
    # When the run goes
    record = run.run()
    # Then every group arrived, once; the schedule and the queue are deleted and nothing needed cancelling
    assert record.result is not None, record.result
    assert record.result.every_task_once, record.result
    assert [(g.group, g.expected, g.arrived) for g in record.result.groups] == [
        ("spread", 4, 4),
        ("burst", 3, 3),
        ("short-lead", 0, 0),
        ("recurring", 2, 2),
    ]
    assert executor.deleted == ["verify-f1-recurring"]
    assert executor.cancelled == []
    assert record.cleanup[-1] == f"queue {QUEUE} deleted"
    assert sqs.list_queues().get("QueueUrls", []) == []


class LateWriter(StandInExecutor):
    """A stand-in whose writes end only after its fires are all sent and the run's wait is over (a slow store,
    or a busy machine): the reading starts past its deadline, with every message already in the queue."""

    def schedule_many(self, tasks: Any, *, threads: int = 16, on_progress: Any = None) -> list[ScheduleResult]:
        results = super().schedule_many(tasks, threads=threads, on_progress=on_progress)
        for timer in self.timers:
            timer.join()
        time.sleep(SMALL.wait_s + SMALL.settle_s)
        return results


def test_messages_sent_before_the_reading_starts_are_read_however_late_it_starts(sqs: Any) -> None:
    # Given an executor that fired everything while the writes were still going, past the run's wait
    executor = LateWriter(sqs)
    # When the run goes
    record = VerifyRun(executor, VerifyQueue(sqs, QUEUE), [ARN], SMALL, "f3", epsilon_ms=1_000).run()  # type: ignore[arg-type]  # a stand-in scheduler: what a run calls only
    # Then what the queue held is read: the spread and the burst arrived once each
    assert record.result is not None
    spread, burst = record.result.groups[:2]
    assert (spread.arrived, spread.duplicates, burst.arrived, burst.duplicates) == (4, 0, 3, 0)


def test_a_lost_task_and_a_twice_fired_one_fail_the_verdict_and_the_lost_one_is_cancelled(sqs: Any) -> None:
    # Given an executor that never fires one spread task and fires one burst task twice
    lost, doubled = "verify-f2-spread-00001", "verify-f2-burst-00000"
    executor = StandInExecutor(sqs, drop=frozenset({lost}), twice=frozenset({doubled}))
    # When the run goes
    record = VerifyRun(executor, VerifyQueue(sqs, QUEUE), [ARN], SMALL, "f2", epsilon_ms=1_000).run()  # type: ignore[arg-type]  # a stand-in scheduler: what a run calls only
    # Then the verdict fails, naming both; the lost task is cancelled, the queue deleted
    assert record.result is not None
    assert not record.result.every_task_once
    spread, burst = record.result.groups[:2]
    assert (spread.missing, spread.duplicates, burst.missing, burst.duplicates) == (1, 0, 0, 1)
    assert executor.cancelled == [lost]
    assert sqs.list_queues().get("QueueUrls", []) == []


def test_the_queue_must_be_new_and_on_the_allowlist(sqs: Any) -> None:
    # Given a queue of that name already: the run refuses it, and leaves it
    sqs.create_queue(QueueName=QUEUE)
    with pytest.raises(VerifyError, match="exists already"):
        VerifyQueue(sqs, QUEUE).create([ARN])
    assert len(sqs.list_queues()["QueueUrls"]) == 1
    # Given a name whose ARN is not allowed: made, found not allowed, deleted again
    other = VerifyQueue(sqs, "punctual-verify-other")
    with pytest.raises(VerifyError, match="not on the executors' allowlist"):
        other.create([ARN])
    assert [u.rsplit("/", 1)[1] for u in sqs.list_queues()["QueueUrls"]] == [QUEUE]


# -- an interrupted run, through the CLI and the real client ------------------------------------------------------
def test_ctrl_c_mid_run_cancels_the_tasks_deletes_the_schedule_and_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    with mock_aws():
        # Given a local stack's state file, its table (moto's) and the queue on the allowlist
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        ensure_table(dynamodb, "verify-tasks")
        state = {"endpoint_url": "http://127.0.0.1:9", "table_name": "verify-tasks", "shard_count": 2}
        (tmp_path / "stack.json").write_text(json.dumps({**state, "poll_interval_ms": 60_000}))
        monkeypatch.setenv("PUNCTUAL_ALLOWED_TARGET_ARNS", ARN)
        sqs = boto3.client("sqs", region_name=REGION)

        def interrupted(self: VerifyQueue, wait_s: float = 5) -> list[Any]:
            raise KeyboardInterrupt

        monkeypatch.setattr(VerifyQueue, "receive", interrupted)
        args = build_parser().parse_args(["verify", "--quick", "--short-leads", "0"])
        # When Ctrl-C comes while it reads the queue back
        code = run_command(args, tmp_path, Clients(sqs=sqs, dynamodb=dynamodb))
        out = capsys.readouterr().out
        # Then it exits 130, every task it wrote is CANCELLED, the schedule DELETED and the queue gone
        assert code == 130, out
        assert out.startswith("interrupted"), out
        client = Client(Settings(table_name="verify-tasks", shard_count=2), dynamodb=dynamodb)
        tasks = client.list()
        plain = [t for t in tasks if "@" not in t.task_id]
        quick = MixOptions.quick()
        assert len(plain) == quick.spread + quick.burst
        assert {t.status for t in tasks} == {TaskStatus.CANCELLED}
        (schedule,) = client.list_schedules()
        assert schedule.state.value == "DELETED"
        assert sqs.list_queues().get("QueueUrls", []) == []
        assert f"queue {QUEUE} deleted" in out


def test_the_local_stack_needs_a_running_stack_and_an_sqs_endpoint(tmp_path: Path, monkeypatch: Any) -> None:
    args = argparse.Namespace(sqs_endpoint=None)
    monkeypatch.delenv("AWS_ENDPOINT_URL_SQS", raising=False)
    with pytest.raises(VerifyError, match="no local stack runs"):
        local_target(args, tmp_path, Clients())
    (tmp_path / "stack.json").write_text(
        json.dumps(
            {"endpoint_url": "http://127.0.0.1:9", "table_name": "tasks", "shard_count": 1, "poll_interval_ms": 2_000}
        )
    )
    with pytest.raises(VerifyError, match="--sqs-endpoint"):
        local_target(args, tmp_path, Clients())
    target = local_target(argparse.Namespace(sqs_endpoint="http://127.0.0.1:9"), tmp_path, Clients())
    assert target.settings.poll_interval_ms == 2_000
    assert target.settings.table_name == "tasks"
    assert target.cost(0, 60_000) == ["cost (00:00-00:01 UTC): not available: a local stack has no CloudWatch"]


def test_the_local_stack_hands_boto3s_endpoint_variables_to_its_executors() -> None:
    environ = {
        "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:5000",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:6000",
        "HOME": "/x",
    }
    env = executor_env(Settings(table_name="tasks"), environ)
    assert env["AWS_ENDPOINT_URL_SQS"] == "http://127.0.0.1:5000"
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:6000"
    assert "HOME" not in env
    assert "AWS_ENDPOINT_URL_SQS" not in executor_env(Settings(table_name="tasks"), {})


# -- a deployed stack's parts: outputs, functions, CloudWatch -----------------------------------------------------
OUTPUTS = {
    "TasksTableName": "stack-Tasks",
    "Region": REGION,
    "ShardCount": "8",
    "LeadMs": "30000",
    "PollIntervalMs": "15000",
    "MisfireGraceMs": "60000",
    "PollerFunctionName": "stack-Poller",
    "ExecutorFunctionName": "stack-Executor",
    "FastPathFunctionName": "stack-FastPath",
}


def test_a_stacks_outputs_are_read_and_one_without_them_is_refused() -> None:
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    listed = [{"OutputKey": k, "OutputValue": v} for k, v in OUTPUTS.items()]
    with Stubber(cloudformation) as stub:
        stack = {"StackName": "s", "CreationTime": "2026-01-01T00:00:00Z", "StackStatus": "CREATE_COMPLETE"}
        stub.add_response("describe_stacks", {"Stacks": [{**stack, "Outputs": listed}]}, {"StackName": "s"})
        stub.add_response("describe_stacks", {"Stacks": [{**stack, "Outputs": listed[:3]}]}, {"StackName": "s"})
        stub.add_client_error("describe_stacks", "ValidationError", expected_params={"StackName": "gone"})
        assert stack_outputs(cloudformation, "s") == OUTPUTS
        settings = settings_of(OUTPUTS, allowlist="")
        assert (settings.lead_ms, settings.poll_interval_ms, settings.shard_count) == (30_000, 15_000, 8)
        with pytest.raises(VerifyError, match="has no output LeadMs"):
            stack_outputs(cloudformation, "s")
        with pytest.raises(VerifyError, match="cannot read the stack 'gone'"):
            stack_outputs(cloudformation, "gone")


def deploy_functions() -> Any:
    """The stack's three functions on moto, the executor with its allowlist."""
    role = boto3.client("iam", region_name=REGION).create_role(RoleName="r", AssumeRolePolicyDocument="{}")
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("app.py", "def handler(event, context):\n    return event\n")
    client = boto3.client("lambda", region_name=REGION)
    for name, memory in (("stack-Poller", 512), ("stack-Executor", 1024), ("stack-FastPath", 256)):
        client.create_function(
            FunctionName=name,
            Runtime="python3.11",
            Role=role["Role"]["Arn"],
            Handler="app.handler",
            Code={"ZipFile": code.getvalue()},
            MemorySize=memory,
            Architectures=["arm64"],
            Environment={"Variables": {"PUNCTUAL_ALLOWED_TARGET_ARNS": ARN if name == "stack-Executor" else ""}},
        )
    return client


def test_the_cost_comes_from_cloudwatch_and_each_functions_memory() -> None:
    with mock_aws():
        # Given the stack's functions, and CloudWatch holding two minutes of the run
        configs = function_configs(deploy_functions(), OUTPUTS)
        assert executor_allowlist(configs) == ARN
        assert {k: c["MemorySize"] for k, c in configs.items()} == {
            "PollerFunction": 512,
            "ExecutorFunction": 1024,
            "FastPathFunction": 256,
        }
        cloudwatch = boto3.client("cloudwatch", region_name=REGION)
        minute = int(time.time()) // 60 * 60 - 120
        at = [datetime.fromtimestamp(minute + 60 * i, UTC) for i in range(2)]

        def put(namespace: str, name: str, dimensions: dict[str, str], values: list[float]) -> None:
            dims: list[DimensionTypeDef] = [{"Name": k, "Value": v} for k, v in dimensions.items()]
            data: list[MetricDatumTypeDef] = [
                {"MetricName": name, "Dimensions": dims, "Timestamp": t, "Value": v}
                for t, v in zip(at, values, strict=True)
            ]
            cloudwatch.put_metric_data(Namespace=namespace, MetricData=data)

        put("AWS/Lambda", "Invocations", {"FunctionName": "stack-Executor"}, [3, 1])
        put("AWS/Lambda", "Duration", {"FunctionName": "stack-Executor"}, [6_000, 2_000])
        put("AWS/DynamoDB", "ConsumedWriteCapacityUnits", {"TableName": "stack-Tasks"}, [40, 10])
        dims = {"TableName": "stack-Tasks", "GlobalSecondaryIndexName": "due"}
        put("AWS/DynamoDB", "ConsumedWriteCapacityUnits", dims, [5, 0])
        functions = {logical: str(c["FunctionName"]) for logical, c in configs.items()}
        specs = usage_queries(functions, "stack-Tasks", ["due"])
        # When the run's usage is read (no wait)
        usage = collect_usage(cloudwatch, specs, configs, minute * 1000, (minute + 61) * 1000, wait_s=0)
        # Then the figures are CloudWatch's sums, the executor's duration at its 1 GB
        executor = next(f for f in usage.functions if f.logical_id == "ExecutorFunction")
        assert (executor.invocations, executor.gb_s) == (4, 8.0)
        assert usage.write_units == {"table": 50, "index:due": 5}
        text = "\n".join(format_cost(usage, minute * 1000, (minute + 61) * 1000))
        executor_usd = 8.0 * pricing.LAMBDA_GB_S_ARM_USD + 4 * pricing.LAMBDA_REQUEST_USD
        assert f"${executor_usd:.6f}" in text
        assert "not yet available" not in text
        # ... and a window CloudWatch has nothing for is said to be not available, with no figure
        later = (minute + 600) * 1000
        empty = collect_usage(cloudwatch, specs, configs, later, later + 60_000, wait_s=0)
        assert empty.empty
        assert "not available" in format_cost(empty, later, later + 60_000)[0]
