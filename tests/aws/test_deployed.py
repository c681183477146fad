"""Deployed-stack suite: schedule tasks against a stack deployed from template.yaml and check they fire on time.

Runs only when ``AWS_SAM_STACK_NAME`` names a deployed stack (its region from ``AWS_REGION`` /
``AWS_DEFAULT_REGION`` or the profile), with credentials allowed to read the stack's outputs and to write
and read its Tasks table. Otherwise every test here is skipped. See docs/deploy.md::

    AWS_SAM_STACK_NAME=punctual AWS_REGION=eu-west-1 .venv/bin/python -m pytest -q -m aws tests/aws

``PUNCTUAL_AWS_MAX_DRIFT_MS`` (default 500) bounds the drift the tests accept: a Lambda at the template's
default 256 MB gets a fraction of a vCPU, and this suite is a smoke test of the deployment, not the benchmark.
Each run leaves its tasks in the table, finished; DynamoDB TTL deletes them after RetentionDays.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from punctual import Client, LogAction, Settings, Task, TaskStatus
from punctual.errors import PunctualError

STACK = os.environ.get("AWS_SAM_STACK_NAME", "")
pytestmark = [
    pytest.mark.aws,
    pytest.mark.skipif(not STACK, reason="set AWS_SAM_STACK_NAME to a deployed stack to run the deployed suite"),
]

MAX_DRIFT_MS = float(os.environ.get("PUNCTUAL_AWS_MAX_DRIFT_MS", "500"))
FINISHED = {TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.MISSED, TaskStatus.CANCELLED}


@pytest.fixture(scope="module")
def outputs() -> dict[str, str]:
    """The stack's outputs, by key."""
    import boto3

    stack = boto3.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


@pytest.fixture(scope="module")
def client(outputs: dict[str, str]) -> Client:
    """A client configured like the stack's functions (table, region, shards, lead, default grace)."""
    settings = Settings(
        table_name=outputs["TasksTableName"],
        region=outputs["Region"],
        shard_count=int(outputs["ShardCount"]),
        lead_ms=int(outputs["LeadMs"]),
        default_misfire_grace_ms=int(outputs["MisfireGraceMs"]),
    )
    return Client(settings)


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


def _assert_fired_on_time(finished: list[Task], expected: int) -> None:
    report = [(t.task_id, t.status.value, t.drift_ms, t.armed_by, t.detail) for t in finished]
    print("deployed suite:", *report, sep="\n  ")  # the figures, for the record
    assert len(finished) == expected
    assert all(t.status is TaskStatus.SUCCEEDED for t in finished), report
    assert all(t.drift_ms is not None and abs(t.drift_ms) <= MAX_DRIFT_MS for t in finished), report


def test_tasks_scheduled_ahead_fire_on_time(client: Client, scheduled: list[Task]) -> None:
    # Given a few log tasks due ~100 s from now (beyond the lead window: the poller claims them)
    _schedule(client, scheduled, count=5, ahead=timedelta(seconds=100), spacing=timedelta(milliseconds=750))
    # When they are due  Then each ends SUCCEEDED with a small drift
    _assert_fired_on_time(_wait_finished(client, scheduled), expected=5)


def test_a_task_due_before_the_next_poll_takes_the_fast_path(client: Client, scheduled: list[Task]) -> None:
    # Given a task due 10 s from now (the poller may not run before it is due: the stream's fast path must
    # dispatch it, or it fires late or MISSED)
    _schedule(client, scheduled, count=1, ahead=timedelta(seconds=10), spacing=timedelta(0))
    # When it is due  Then it ends SUCCEEDED with a small drift
    _assert_fired_on_time(_wait_finished(client, scheduled), expected=1)


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
