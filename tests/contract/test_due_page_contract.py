"""The contract of :meth:`~punctual.stores.ports.ClientPort.due_page`, run on every implementation: pages of the
active tasks in the due index's order (by minute bucket, then due and id), each task once, none lost over all pages,
the due range and status filters, what the eventually consistent index may still list (finished and rescheduled
tasks) left out, and the walk over empty minutes bounded a page; and, on the DynamoDB adapter, that a page reads
what it lists and no Scan."""

from __future__ import annotations

from typing import Any

import pytest
from contract_tools import NOW, SHARDS, DynamoBackend, TaskFactory, alive, arm

from punctual.domain.due_pages import BUCKETS_PER_PAGE
from punctual.domain.keys import BUCKET_MS, bucket_start
from punctual.domain.model import Task, TaskStatus
from punctual.domain.schedules import Schedule
from punctual.errors import InvalidRequestError
from punctual.stores.ports import Stores
from punctual.targets.log import LogAction

# The due range's end when a test wants every task: past the latest one any test makes (two hours ahead), and no
# further: a walk to the range's end reads each empty minute's shards, a page of minutes at a time
FAR_MS = NOW + 3 * BUCKETS_PER_PAGE * BUCKET_MS


def every_page(store: Stores, limit: int, **filters: Any) -> tuple[list[Task], int]:
    """The tasks of every page of the due index, ``limit`` a page, in order; and how many pages were read."""
    due_from = filters.pop("due_from_ms", None)
    due_to = filters.pop("due_to_ms", FAR_MS)
    seen: list[Task] = []
    after: str | None = None
    for pages in range(1, 200):
        page, after, read = store.client.due_page(due_from, due_to, after, limit, now_ms=NOW, **filters)
        assert len(page) <= limit
        assert read >= len(page)
        seen.extend(page)
        if after is None:
            return seen, pages
    raise AssertionError("the pages never ended")


def page_order(task: Task, written_ms: int = NOW) -> tuple[int, int, str]:
    """Where the due index lists a task written at ``written_ms``: its bucket, then its due and id."""
    return bucket_start(max(task.due_ms, written_ms)), task.due_ms, task.task_id


def test_pages_list_each_active_task_once_in_the_index_order(store: Stores, tasks: TaskFactory) -> None:
    # Given tasks over three minutes, four of them due at the same instant, one written late (due 5 minutes before
    # NOW, so listed under NOW's minute), a cancelled one, a rescheduled one, and a schedule (an index entry that
    # is not a task)
    dues = [NOW + 1_000, NOW + 61_000, NOW + 61_000, NOW + 61_000, NOW + 61_000, NOW + 125_000, NOW + 30_000]
    created = [tasks.create(due) for due in dues]
    late = tasks.create(NOW - 300_000)
    cancelled = tasks.create(NOW + 2_000)
    store.client.cancel(cancelled.task_id, NOW)
    moved = store.client.reschedule(created[0].task_id, NOW + 150_000, NOW)
    schedule = Schedule(schedule_id="hourly", expression="rate(1 hour)", action=LogAction(), next_due_ms=NOW + 90_000)
    store.schedules.create_schedule(schedule, [], NOW)
    expected = sorted([moved, *created[1:], late], key=page_order)
    # When every page is read, 3 tasks a page
    seen, pages = every_page(store, 3)
    # Then each active task came once, in the index's order (the late one first: its minute is NOW's), as stored
    assert [t.task_id for t in seen] == [t.task_id for t in expected]
    assert seen[0].task_id == late.task_id
    assert all(t.status is TaskStatus.PENDING for t in seen)
    assert pages >= 3
    # And one page of them all says the same
    assert [t.task_id for t in store.client.due_page(None, FAR_MS, None, 100, now_ms=NOW)[0]] == [
        t.task_id for t in expected
    ]


def test_the_due_range_and_the_statuses_filter_a_page(store: Stores, tasks: TaskFactory) -> None:
    # Given tasks due each 20 s over two minutes, one of them ARMED
    created = [tasks.create(NOW + 20_000 * i) for i in range(6)]
    alive(store, "exec-1", NOW + 600_000)
    armed = arm(store, created[2], "exec-1", NOW)
    assert armed is not None
    # When a page is asked for a due range (from included, to excluded), then for ARMED tasks only
    in_range, _, _ = store.client.due_page(created[1].due_ms, created[4].due_ms, None, 50, now_ms=NOW)
    only_armed, _, _ = store.client.due_page(None, FAR_MS, None, 50, now_ms=NOW, statuses=[TaskStatus.ARMED])
    # Then the range holds exactly the tasks due in it, and the status filter the armed one
    assert [t.task_id for t in in_range] == [t.task_id for t in created[1:4]]
    assert [(t.task_id, t.status) for t in only_armed] == [(armed.task.task_id, TaskStatus.ARMED)]


def test_an_empty_index_answers_no_page(store: Stores) -> None:
    assert store.client.due_page(None, FAR_MS, None, 10, now_ms=NOW) == ([], None, 0)


def test_a_page_walks_at_most_an_hour_of_empty_minutes_and_says_where_to_go_on(
    store: Stores, tasks: TaskFactory
) -> None:
    # Given a task due now and one due two hours later, nothing between
    soon, later = tasks.create(NOW + 1_000), tasks.create(NOW + 2 * BUCKETS_PER_PAGE * BUCKET_MS)
    # When the first page is read
    first, cursor, _ = store.client.due_page(None, FAR_MS, None, 10, now_ms=NOW)
    # Then it stops after an hour of minutes with the first task and a cursor to go on
    assert [t.task_id for t in first] == [soon.task_id]
    assert cursor is not None
    # And the pages after it reach the later task, each page bounded the same way
    seen, pages = every_page(store, 10)
    assert [t.task_id for t in seen] == [soon.task_id, later.task_id]
    assert pages >= 3


def test_a_cursor_that_is_not_one_is_refused(store: Stores, tasks: TaskFactory) -> None:
    tasks.create(NOW + 1_000)
    for bad in ("yesterday", "12345", f"{bucket_start(NOW)}/1/"):
        with pytest.raises(InvalidRequestError):
            store.client.due_page(None, FAR_MS, bad, 10, now_ms=NOW)


# -- the DynamoDB adapter ---------------------------------------------------------------------------------------
def test_a_page_reads_a_bounded_share_of_a_full_minute_and_no_scan(dynamo_backend: DynamoBackend) -> None:
    # Given 40 tasks due in one minute, and a poll's watermark (no listing needs a scan then)
    store = dynamo_backend.dynamo
    tasks = TaskFactory(store)
    created = [tasks.create(NOW + 1_000 + 100 * i) for i in range(40)]
    store.dispatch.find_due(NOW, NOW)
    calls: list[str] = []
    dynamo_backend.client.meta.events.register(
        "before-call.dynamodb", lambda model, **_: calls.append(model.name), unique_id="count-due-page-calls"
    )
    try:
        # When two pages of 5 are read
        page, cursor, read = store.client.due_page(None, FAR_MS, None, 5, now_ms=NOW)
        second, _, _ = store.client.due_page(None, FAR_MS, cursor, 5, now_ms=NOW)
    finally:
        dynamo_backend.client.meta.events.unregister("before-call.dynamodb", unique_id="count-due-page-calls")
    # Then they hold the first ten in due order, the first page having read at most 6 entries a shard (one past
    # what it needs, which shows no task shares the last one's due instant)
    assert [t.task_id for t in page + second] == [t.task_id for t in created[:10]]
    assert read <= (5 + 1) * SHARDS
    # And no call was a Scan: Query, BatchGetItem and the watermarks' read only
    assert calls
    assert set(calls) <= {"Query", "BatchGetItem"}


def test_due_instants_count_the_index_keys_in_a_range(store: Stores, tasks: TaskFactory) -> None:
    # Given tasks due 1 s, 1.5 s and 70 s ahead, one due 30 s ago (written late, under NOW's minute), one due 5
    # minutes ago written then (under its own minute), a cancelled one, and a schedule's entry
    for due in (NOW + 1_000, NOW + 1_500, NOW + 70_000, NOW - 30_000):
        tasks.create(due)
    tasks.create(NOW - 300_000, now_ms=NOW - 300_000)
    store.client.cancel(tasks.create(NOW + 2_000).task_id, NOW)
    schedule = Schedule(schedule_id="hourly", expression="rate(1 hour)", action=LogAction(), next_due_ms=NOW + 30_000)
    store.schedules.create_schedule(schedule, [], NOW)
    # When the instants due in the next minute are read, then those overdue
    ahead, ahead_whole = store.client.due_instants(NOW, NOW + 60_000, now_ms=NOW, limit=100, max_buckets=5)
    overdue, overdue_whole = store.client.due_instants(None, NOW, now_ms=NOW, limit=100, max_buckets=60)
    # Then each counts its own tasks (the index's keys: no schedule, nothing finished), all of them
    assert (sorted(ahead), ahead_whole) == ([NOW + 1_000, NOW + 1_500], True)
    assert (sorted(overdue), overdue_whole) == ([NOW - 300_000, NOW - 30_000], True)
    # And a read cut short by its limit or its buckets says so, keeping the latest buckets
    assert store.client.due_instants(None, NOW, now_ms=NOW, limit=1, max_buckets=60)[1] is False
    latest, whole = store.client.due_instants(None, NOW, now_ms=NOW, limit=100, max_buckets=1)
    assert (latest, whole) == ([NOW - 30_000], False)


def test_due_instants_of_an_empty_index(store: Stores) -> None:
    assert store.client.due_instants(None, NOW, now_ms=NOW, limit=10, max_buckets=5) == ([], True)
