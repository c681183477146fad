"""The operator's source on AWS, built by ``aws_source`` from the ``PUNCTUAL_*`` settings, on moto (its DynamoDB,
SQS and CloudWatch): the tenants of the tenant map, the due index's pages, the dead-letter queue, the figures from
CloudWatch, and the executors holding armed tasks (no batch log on AWS), said so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from punctual.config.settings import Settings
from punctual.stores.dynamodb import DynamoStores
from punctual_tools.console.model import TaskFilter
from punctual_tools.console.source import OperatorSource, aws_source
from punctual_tools.template import ensure_table
from support import TaskFactory, arm, make_failed, now_ms

TABLE = "punctual-console-aws"
TENANT_MAP = json.dumps({"principals": {"arn:aws:iam::123456789012:role/Acme": "acme"}, "tenants": {"beta": {}}})


@pytest.fixture
def aws() -> Iterator[tuple[Settings, Any]]:
    """Settings naming a moto table and dead-letter queue, and moto's CloudWatch."""
    with mock_aws():
        ensure_table(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
        queue_url = boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="punctual-dlq")["QueueUrl"]
        settings = Settings(
            table_name=TABLE, shard_count=4, tenant_map=TENANT_MAP, dead_letter_queue_url=queue_url, ntp_server=None
        )
        yield settings, boto3.client("cloudwatch", region_name="us-east-1")


@pytest.fixture
def source(aws: tuple[Settings, Any]) -> Iterator[OperatorSource]:
    settings, cloudwatch = aws
    built = aws_source(settings, cloudwatch)
    yield built
    assert isinstance(built.stores, DynamoStores)
    built.stores.table.close()


def test_an_aws_source_lists_tasks_dead_letters_and_the_tenants_of_its_map(source: OperatorSource) -> None:
    # Given tasks of acme's, one of them FAILED and dead-lettered
    now = now_ms()
    tasks = TaskFactory(source.stores)
    pending = [tasks.create(now + 1_000 * (i + 1), f"acme/t-{i}", now_ms=now) for i in range(3)]
    failed = make_failed(source.stores, tasks, "acme/broken", now)
    assert source.dead_letter_queue is not None
    source.dead_letter_queue.send(failed, "boom")
    # When the operator reads the Tasks, Dead letters and Tenants pages
    page = source.tasks(TaskFilter(), now)
    letters = source.dead_letters()
    usage = {u.tenant: u.active_tasks for u in source.tenants()}
    # Then the due index lists the active ones, the queue its letter (still there), the map its two tenants
    assert [t.task_id for t in page.tasks] == [t.task_id for t in pending]
    assert [(letter.task_id, letter.reason) for letter in letters] == [("acme/broken", "boom")]
    assert [letter.task_id for letter in source.dead_letter_queue.receive()] == ["acme/broken"]
    assert usage == {"acme": 3, "beta": 0}
    assert "AWS table" in source.label


def test_an_aws_now_page_has_cloudwatchs_figures_and_the_executors_holding_armed_tasks(
    aws: tuple[Settings, Any], source: OperatorSource
) -> None:
    # Given an executor alive on AWS that armed a task due in 30 s (no batch log there)
    settings, _ = aws
    stores = DynamoStores.from_settings(boto3.client("dynamodb", region_name=settings.region), settings)
    now = now_ms()
    stores.firing.heartbeat("x-lambda", now - 500, now + 60_000, invocation="aws-request-1")
    assert arm(stores, TaskFactory(stores).create(now + 30_000, "armed", now_ms=now), "x-lambda", now) is not None
    # When the Now page is read
    view = source.now(now, 60)
    # Then CloudWatch's hour is there, and the executor with the task it holds, its heartbeat read
    assert len(view.minutes) == 60
    assert view.executors is not None
    assert [(e.executor_id, e.state, e.holding, e.invocation) for e in view.executors] == [
        ("x-lambda", "alive", 1, "aws-request-1")
    ]
    notes = " ".join(view.notes)
    assert "CloudWatch" in notes
    assert "no batch log on AWS" in notes
