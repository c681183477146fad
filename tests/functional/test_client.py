"""The client helper over the real repository on moto, with an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.model import Task, TaskStatus
from punctual.errors import InvalidRequestError, InvalidTaskError, TaskConflictError, TaskNotFoundError, TaskStateError
from punctual.runtime.client import Client
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import HttpAction, LogAction
from support import FakeClock


@pytest.fixture
def clock(now_ms: int) -> FakeClock:
    return FakeClock(wall_ms=now_ms)


@pytest.fixture
def client(dynamodb: Any, settings: Settings, clock: FakeClock) -> Client:
    return Client(settings, dynamodb=dynamodb, clock=clock)


def test_schedule_get_and_idempotent_retry(client: Client, now_ms: int) -> None:
    # Given a task scheduled with a client-chosen id
    due = from_ms(now_ms + 60_000)
    first = client.schedule(due, HttpAction(url="https://example.com/hook"), {"video": "v-1"}, task_id="pub-v-1")
    # When the client retries the same call
    again = client.schedule(due, HttpAction(url="https://example.com/hook"), {"video": "v-1"}, task_id="pub-v-1")
    # Then the one stored task comes back, PENDING
    assert again.task_id == first.task_id == "pub-v-1"
    stored = client.get("pub-v-1")
    assert stored is not None and stored.status is TaskStatus.PENDING
    assert stored.payload == {"video": "v-1"}
    # And the same id with other content is a conflict
    with pytest.raises(TaskConflictError):
        client.schedule(due, HttpAction(url="https://example.com/hook"), {"video": "v-2"}, task_id="pub-v-1")


def test_invalid_task_is_not_stored(client: Client, store: DynamoStores, now_ms: int) -> None:
    with pytest.raises(InvalidTaskError):
        client.schedule(from_ms(now_ms - 3_600_000), LogAction(), task_id="too-late")
    assert store.client.get("too-late") is None


def test_cancel_and_reschedule(client: Client, clock: FakeClock, now_ms: int) -> None:
    # Given two scheduled tasks
    client.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="a")
    client.schedule(from_ms(now_ms + 120_000), LogAction(), task_id="b")
    # When one is cancelled and the other moved
    assert client.cancel("a").status is TaskStatus.CANCELLED
    moved = client.reschedule("b", from_ms(now_ms + 30_000))
    # Then the list by status shows it
    assert moved.due_ms == now_ms + 30_000
    assert [t.task_id for t in client.list(TaskStatus.PENDING)] == ["b"]
    assert [t.task_id for t in client.list(["CANCELLED"])] == ["a"]
    with pytest.raises(TaskStateError):
        client.cancel("a")
    with pytest.raises(TaskNotFoundError):
        client.reschedule("nobody", from_ms(now_ms + 1_000))
    # And a reschedule beyond the horizon is refused
    with pytest.raises(InvalidTaskError):
        client.reschedule("b", from_ms(now_ms + 400 * 86_400_000))


def test_list_orders_by_due_time_and_filters(client: Client, now_ms: int) -> None:
    for i, offset in enumerate([30_000, 10_000, 20_000]):
        client.schedule(from_ms(now_ms + offset), LogAction(), task_id=f"t-{i}")
    assert [t.task_id for t in client.list()] == ["t-1", "t-2", "t-0"]
    assert [t.task_id for t in client.list(due_from=from_ms(now_ms + 20_000))] == ["t-2", "t-0"]
    assert [t.task_id for t in client.list(due_to=from_ms(now_ms + 20_000))] == ["t-1"]
    assert [t.task_id for t in client.list(limit=1)] == ["t-1"]
    with pytest.raises(InvalidRequestError) as info:  # a bad filter of a read: no invalid task
        client.list("NOT-A-STATUS")
    assert info.value.field == "status" and not isinstance(info.value, InvalidTaskError)


def test_a_task_whose_item_would_not_fit_dynamodb_is_invalid_and_not_stored(store: Any, dynamodb: Any) -> None:
    # Given a task built past the client's payload limit (as a caller of the store port could), whose item would
    # be larger than DynamoDB's 400 KB less the room its life cycle needs
    from punctual.stores.dynamodb.codec import ITEM_HEADROOM_BYTES, MAX_ITEM_BYTES

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
