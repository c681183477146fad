"""Deployed-stack suite: tasks scheduled against a stack deployed from template.yaml fire, each once.

Runs only when ``AWS_SAM_STACK_NAME`` names a deployed stack (its region from ``AWS_REGION`` /
``AWS_DEFAULT_REGION`` or the profile), with credentials allowed to read the stack's outputs and to write
and read its Tasks table. Otherwise every test here is skipped. See docs/deploy.md::

    AWS_SAM_STACK_NAME=punctual AWS_REGION=eu-west-1 .venv/bin/python -m pytest -q -s -m aws tests/aws

The tests assert correctness only (each task SUCCEEDED; on the queue, every task once) and print the drift
(p50 / p99 / max): a timing figure is reported, not judged, as the benchmark does. The queue test is
``punctual verify --quick`` (:mod:`punctual_tools.verify`); it needs a ``punctual-verify*`` queue ARN on the
stack's ``ActionTargetArns`` and is skipped, saying so, without one.
Each run leaves its tasks in the table, finished; DynamoDB TTL deletes them after RetentionDays.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from punctual import Client, LogAction, Task, TaskStatus
from punctual.errors import PunctualError
from punctual_tools.cli import build_parser
from punctual_tools.stats import summarize
from punctual_tools.verify.command import run_command
from punctual_tools.verify.queue import allowed_queue_arns
from punctual_tools.verify.stack import executor_allowlist, function_configs, settings_of

STACK = os.environ.get("AWS_SAM_STACK_NAME", "")
pytestmark = [
    pytest.mark.aws,
    pytest.mark.skipif(not STACK, reason="set AWS_SAM_STACK_NAME to a deployed stack to run the deployed suite"),
]

FINISHED = {TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.MISSED, TaskStatus.CANCELLED}


@pytest.fixture(scope="module")
def outputs() -> dict[str, str]:
    """The stack's outputs, by key."""

    stack = boto3.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


@pytest.fixture(scope="module")
def client(outputs: dict[str, str]) -> Client:
    """A client configured like the stack's functions (table, region, shards, lead, poll interval, default grace)."""
    return Client(settings_of(outputs, allowlist=""))


@pytest.fixture
def scheduled(client: Client) -> Iterator[list[Task]]:
    """Tasks a test schedules; any still unfinished at the end are cancelled."""
    tasks: list[Task] = []
    yield tasks
    for task in tasks:
        current = client.get(task.task_id)
        if current is not None and current.status not in FINISHED:
            with contextlib.suppress(PunctualError):
                client.cancel(task.task_id)


def _schedule(client: Client, scheduled: list[Task], count: int, ahead: timedelta, spacing: timedelta) -> None:
    run = uuid.uuid4().hex[:8]
    first = datetime.now(UTC) + ahead
    for i in range(count):
        scheduled.append(
            client.schedule(
                due_at=first + i * spacing,
                action=LogAction(message=f"deployed-suite {run} #{i}"),
                payload={"run": run, "i": i},
                task_id=f"deployed-{run}-{i}",
            )
        )


def _wait_finished(client: Client, tasks: list[Task], grace_s: float = 90.0) -> list[Task]:
    """The tasks once all are finished, or as they are ``grace_s`` after the last one was due."""
    deadline = max(t.due_at for t in tasks).timestamp() + grace_s
    while True:
        current = [client.get(t.task_id) for t in tasks]
        if all(c is not None and c.status in FINISHED for c in current) or time.time() > deadline:
            return [c for c in current if c is not None]
        time.sleep(2.0)


def _assert_fired(finished: list[Task], expected: int) -> None:
    """Each task SUCCEEDED, fired; the drift printed, not judged."""
    report = [(t.task_id, t.status.value, t.drift_ms, t.armed_by, t.detail) for t in finished]
    drift = summarize([t.drift_ms for t in finished if t.drift_ms is not None])
    print("deployed suite:", *report, sep="\n  ")  # the figures, for the record
    figures = f"p50 {drift['p50']}  p99 {drift['p99']}  max {drift['max']}  (n={drift['count']})"
    print(f"  drift ms (fired_at - due): {figures}")
    assert len(finished) == expected
    assert all(t.status is TaskStatus.SUCCEEDED and t.fired_at is not None for t in finished), report


def test_tasks_scheduled_ahead_fire(client: Client, scheduled: list[Task]) -> None:
    # Given a few log tasks due 40 s beyond the stack's lead window (a poll finds and dispatches them)
    ahead = timedelta(milliseconds=client.settings.lead_ms + 40_000)
    _schedule(client, scheduled, count=5, ahead=ahead, spacing=timedelta(milliseconds=750))
    # When they are due  Then each ends SUCCEEDED (its drift printed)
    _assert_fired(_wait_finished(client, scheduled), expected=5)


def test_a_task_due_before_the_next_poll_takes_the_fast_path(client: Client, scheduled: list[Task]) -> None:
    # Given a task due 10 s from now (the poller may not run before it is due: the stream's fast path must
    # dispatch it, or it fires late or MISSED)
    _schedule(client, scheduled, count=1, ahead=timedelta(seconds=10), spacing=timedelta(0))
    # When it is due  Then it ends SUCCEEDED (its drift printed)
    _assert_fired(_wait_finished(client, scheduled), expected=1)


def test_a_quick_verify_run_finds_every_task_once_on_its_queue(
    outputs: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the stack's executors allowed to send to a punctual-verify* queue

    configs = function_configs(boto3.client("lambda", region_name=outputs["Region"]), outputs)
    if not allowed_queue_arns(executor_allowlist(configs), outputs["Region"]):
        pytest.skip("the stack's ActionTargetArns holds no punctual-verify* SQS queue: deploy with one")
    # When punctual verify --quick runs against it (spread, burst, short leads, a schedule; to its own queue)
    args = build_parser().parse_args(
        ["verify", "--stack", STACK, "--region", outputs["Region"], "--quick", "--metrics-wait", "0"]
    )
    code = run_command(args, tmp_path)
    out = capsys.readouterr().out
    with capsys.disabled():
        print(out)  # drift by group, the checker's verdict, the cost: for the record
    # Then every task arrived on the queue once, and the queue is deleted
    assert code == 0, out
    assert "verdict: every task once" in out
    assert re.search(r"cleanup: .*queue punctual-verify\S* deleted", out), out


def test_the_stack_outputs_what_docs_deploy_md_promises(outputs: dict[str, Any]) -> None:
    for key in (
        "TasksTableName",
        "Region",
        "ShardCount",
        "LeadMs",
        "MisfireGraceMs",
        "PollerFunctionName",
        "ExecutorFunctionName",
        "FastPathFunctionName",
        "TaskDeadLetterQueueUrl",
        "ExecutorFailureQueueUrl",
        "DashboardUrl",
    ):
        assert outputs.get(key), key
