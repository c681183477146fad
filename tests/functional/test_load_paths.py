"""What only AWS's load exercises, on moto: unprocessed keys and throttled reads never fail a poll, a failed
record write is tried again while the lease lasts, an http action's retries end before its invocation does."""

from __future__ import annotations

import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from punctual.config.settings import Settings
from punctual.domain.backoff import backoff_s
from punctual.domain.clock import SystemClock
from punctual.domain.model import TaskStatus
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.executors import Executors
from punctual.stores.dynamodb.table import BATCH_GET_ATTEMPTS
from punctual.targets import FireContext, HttpAction
from punctual.targets.http import INVOCATION_MARGIN_MS, RETRY_DELAYS_S, _may_retry
from support import RecordingInvoker, executor_on, read_task, with_part


class Throttling:
    """A DynamoDB client whose BatchGetItem leaves every key unprocessed ``unprocessed`` times, and whose due-index
    queries are throttled for the first ``throttled_queries`` calls (as botocore raises it past its retries)."""

    def __init__(self, client: Any, unprocessed: int = 0, throttled_queries: int = 0) -> None:
        self._client = client
        self.unprocessed = unprocessed
        self.throttled_queries = throttled_queries
        self.batch_gets = 0

    def batch_get_item(self, **kwargs: Any) -> dict[str, Any]:
        self.batch_gets += 1
        if self.unprocessed > 0:
            self.unprocessed -= 1
            ((table, request),) = kwargs["RequestItems"].items()
            return {"Responses": {table: []}, "UnprocessedKeys": {table: request}}
        return dict(self._client.batch_get_item(**kwargs))

    def query(self, **kwargs: Any) -> dict[str, Any]:
        if kwargs.get("IndexName") == "due" and self.throttled_queries > 0:
            self.throttled_queries -= 1
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}}, "Query")
        return dict(self._client.query(**kwargs))

    def get_paginator(self, name: str) -> Any:
        store_client = self

        class Paginator:
            def paginate(self, **kwargs: Any) -> Any:
                yield store_client.query(**kwargs)

        return Paginator() if name == "query" else self._client.get_paginator(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def _store(client: Any, settings: Settings, sleeps: list[float]) -> DynamoStores:
    store = DynamoStores.from_settings(client, settings)
    store.table.sleep = sleeps.append  # the test's clock: no real wait
    return store


def test_unprocessed_keys_are_read_again_after_growing_waits(
    dynamodb: Any, settings: Settings, tasks: Any, now_ms: int
) -> None:
    # Given two due tasks and a table that leaves every key unprocessed three times
    for i in range(2):
        tasks.create(now_ms + 10_000 + i, now_ms=now_ms)
    sleeps: list[float] = []
    throttling = Throttling(dynamodb, unprocessed=3)
    invoker = RecordingInvoker()
    # When a poll runs
    report = poller_on(_store(throttling, settings, sleeps), invoker, settings).poll(now_ms)
    # Then the keys were asked for again after three waits, each drawn below its growing cap, and both dispatched
    assert len(sleeps) == 3
    assert all(0 <= s <= backoff_s(i, draw=lambda: 1.0) for i, s in enumerate(sleeps))
    assert report.dispatched == 2
    assert report.complete


def test_keys_unprocessed_on_every_try_leave_the_poll_whole_and_the_tasks_for_the_next(
    dynamodb: Any, settings: Settings, tasks: Any, now_ms: int
) -> None:
    # Given a due task and a table that leaves its key unprocessed on every try of this poll
    created = tasks.create(now_ms + 10_000, now_ms=now_ms)
    throttling = Throttling(dynamodb, unprocessed=BATCH_GET_ATTEMPTS)
    invoker = RecordingInvoker()
    poller = poller_on(_store(throttling, settings, []), invoker, settings)
    # When the poll runs  Then it does not fail, sends nothing, and keeps the watermark before the task
    report = poller.poll(now_ms)
    assert report.dispatched == 0
    assert invoker.events == []
    assert not report.complete  # it says it left something unread
    assert report.watermark_ms <= created.due_ms
    # And the next poll, unthrottled, sends it
    assert poller.poll(now_ms + 1_000).dispatched == 1


def test_a_throttled_index_read_leaves_the_poll_whole_and_its_bucket_unread(
    dynamodb: Any, settings: Settings, tasks: Any, now_ms: int
) -> None:
    # Given due tasks in every shard, and the first index read of the poll throttled
    for i in range(8):
        tasks.create(now_ms + 10_000 + i, now_ms=now_ms)
    throttling = Throttling(dynamodb, throttled_queries=1)
    invoker = RecordingInvoker()
    poller = poller_on(_store(throttling, settings, []), invoker, settings)
    # When a poll runs  Then it does not fail; it is incomplete; the next one sends what it missed
    report = poller.poll(now_ms)
    assert not report.complete
    sent = {t.task_id for event in invoker.events for t in event.tasks}
    poller.poll(now_ms + 1_000)
    sent |= {t.task_id for event in invoker.events for t in event.tasks}
    assert len(sent) == 8


class FailingRecords(Executors):
    """record_many fails (as a throttled or timed-out call raises) its first ``failures`` times."""

    failures = 0

    def record_many(self, executor_id: str, records: list[Any]) -> list[bool]:
        if self.failures > 0:
            self.failures -= 1
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow"}}, "UpdateItem")
        return super().record_many(executor_id, records)


def test_a_record_write_failing_three_times_is_written_the_fourth(
    dynamodb: Any, settings: Settings, tasks: Any
) -> None:
    # Given a task due now and a store whose record write fails three times
    store = with_part(DynamoStores.from_settings(dynamodb, settings), FailingRecords)
    store.firing.failures = 3  # type: ignore[attr-defined]
    clock = SystemClock()
    now = int(clock.wall_ms())
    task = tasks.create(now + 300, now_ms=now)
    invoker = RecordingInvoker()
    poller_on(store, invoker, settings).poll(now)
    executor = executor_on(store, settings, clock)
    try:
        # When the executor fires it
        report = executor.run_batch(invoker.events[0])
    finally:
        executor.close()
    # Then its outcome is recorded after the retries: SUCCEEDED, not left ARMED for a poll to call MISSED
    assert report.succeeded == 1
    assert report.not_recorded == 0
    assert read_task(store, task.task_id).status is TaskStatus.SUCCEEDED
    assert store.firing.failures == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("deadline_in_ms", "allowed"),
    [
        (None, True),  # no invocation deadline known: the grace alone decides
        (RETRY_DELAYS_S[0] * 1000 + 10_000 + INVOCATION_MARGIN_MS + 5_000, True),  # room for the retry and its record
        (RETRY_DELAYS_S[0] * 1000 + 10_000 + INVOCATION_MARGIN_MS - 5_000, False),  # the retry would outlive the margin
    ],
)
def test_an_http_retry_ends_before_its_invocation_does(deadline_in_ms: float | None, allowed: bool) -> None:
    # Given a fire well within its grace, an action with a 10 s timeout, and the invocation's end
    now = time.time() * 1000
    context = FireContext(
        "t",
        0,
        int(now),
        now,
        None,
        latest_start_ms=now + 600_000,
        deadline_ms=None if deadline_in_ms is None else now + deadline_in_ms,
    )
    # Then a retry is allowed only when it would end a margin before the invocation does
    assert _may_retry(0, 3, context, HttpAction(url="https://example.com/", timeout_s=10).timeout_s) is allowed
