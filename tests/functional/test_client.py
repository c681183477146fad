"""What only the client straight to the table refuses, on moto (the behaviour every client shares is
tests/functional/test_scheduler.py's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from punctual.domain.model import Task
from punctual.errors import InvalidTaskError
from punctual.stores.dynamodb.codec import ITEM_HEADROOM_BYTES, MAX_ITEM_BYTES
from punctual.targets import LogAction


def test_a_task_whose_item_would_not_fit_dynamodb_is_invalid_and_not_stored(store: Any, dynamodb: Any) -> None:
    # Given a task built past the client's payload limit (as a caller of the store port could), whose item would
    # be larger than DynamoDB's 400 KB less the room its life cycle needs

    big = Task(
        task_id="too-big",
        due_at=datetime.now(UTC) + timedelta(minutes=5),
        action=LogAction(),
        payload="x" * (MAX_ITEM_BYTES - ITEM_HEADROOM_BYTES),
    )
    # When it is created  Then it is an InvalidTaskError naming the payload (not a botocore error), nothing stored
    with pytest.raises(InvalidTaskError, match="DynamoDB holds at most") as refused:
        store.client.create(big, int(datetime.now(UTC).timestamp() * 1000))
    assert refused.value.field == "payload"
    assert "Item" not in dynamodb.get_item(TableName=store.config.table_name, Key={"task_id": {"S": "too-big"}})
