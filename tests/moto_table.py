"""The Tasks table on moto and the settings that name it: the fixtures the runtime's functional tier and the
tooling's (``tests/tools/functional``) share; each tier's conftest.py imports them (``tests/`` is on ``sys.path``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from punctual.config.settings import Settings
from punctual_tools.template import ensure_table
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


@pytest.fixture
def now_ms() -> int:
    """The fixed "now" of tests that pass explicit times (20 s into a minute, in 2030)."""
    return FIXED_NOW_MS


def raw_item(client: Any, task_id: str) -> dict[str, Any]:
    """The stored item as DynamoDB holds it (attribute values), read consistently."""
    answer = client.get_item(TableName=TABLE, Key={"task_id": {"S": task_id}}, ConsistentRead=True)
    item: dict[str, Any] = answer["Item"]
    return item


@pytest.fixture
def read_raw(dynamodb: Any) -> Any:
    return lambda task_id: raw_item(dynamodb, task_id)
