"""Functional-tier fixtures: the real repository on moto, with the table built from template.yaml."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from punctual.config.settings import Settings
from punctual.domain.clock import OffsetProbe, SystemClock
from punctual.domain.keys import from_ms
from punctual.domain.model import Task
from punctual.executing.executor import Executor
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.schema import ensure_table
from punctual.targets import LogAction
from support import FIXED_NOW_MS, moto_one_request_at_a_time

TABLE = "punctual-tasks-test"
SHARDS = 4


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    """A low-level DynamoDB client inside moto, with the Tasks table created from template.yaml; each request is
    atomic, as DynamoDB's are (an executor writes from several threads)."""
    with mock_aws(), moto_one_request_at_a_time():
        client = boto3.client("dynamodb", region_name="us-east-1")
        assert ensure_table(client, TABLE) is True
        yield client


@pytest.fixture
def settings() -> Settings:
    # Loopback receivers are allowed as the local runtime allows them: by configuration.
    return Settings(
        table_name=TABLE,
        shard_count=SHARDS,
        ntp_server=None,
        db_threads=4,
        worker_threads=8,
        allowed_targets="127.0.0.1",
    )


@pytest.fixture(params=["single", "transaction"])
def store(request: pytest.FixtureRequest, dynamodb: Any, settings: Settings) -> DynamoStores:
    """The repository, once per way of writing many items at once (``Settings.write_batch``)."""
    return DynamoStores.from_settings(dynamodb, settings.model_copy(update={"write_batch": request.param}))


class TaskFactory:
    """Builds tasks with sensible defaults and stores them through the repository."""

    def __init__(self, store: DynamoStores) -> None:
        self.store = store
        self._n = 0

    def build(self, due_ms: int, task_id: str | None = None, **fields: Any) -> Task:
        self._n += 1
        fields.setdefault("action", LogAction(message="test"))
        fields.setdefault("payload", {"n": self._n})
        return Task(task_id=task_id or f"task-{self._n:04d}", due_at=from_ms(due_ms), **fields)

    def create(self, due_ms: int, task_id: str | None = None, now_ms: int = FIXED_NOW_MS, **fields: Any) -> Task:
        stored, created = self.store.client.create(self.build(due_ms, task_id, **fields), now_ms)
        assert created
        return stored


@pytest.fixture
def tasks(store: DynamoStores) -> TaskFactory:
    return TaskFactory(store)


def raw_item(client: Any, task_id: str) -> dict[str, Any]:
    """The stored item as DynamoDB holds it (attribute values), read consistently."""
    return client.get_item(TableName=TABLE, Key={"task_id": {"S": task_id}}, ConsistentRead=True)["Item"]


@pytest.fixture
def read_raw(dynamodb: Any) -> Any:
    return lambda task_id: raw_item(dynamodb, task_id)


@pytest.fixture
def now_ms() -> int:
    """The fixed "now" of tests that pass explicit times (20 s into a minute, in 2030)."""
    return FIXED_NOW_MS


@pytest.fixture
def executor(store: DynamoStores, settings: Settings) -> Executor:
    """An executor on the real clock, its NTP probe off."""
    return Executor(store.firing, settings, SystemClock(), OffsetProbe(None, 0.5))
