"""The operator source's Tasks pages on DynamoDB Local: active tasks in due order from the due index, paged by an
opaque cursor with no task twice and none lost, the filters (status, due range, action kind, retried, tenant),
the note for a finished status of no tenant, and no Scan for any listing (the Schedules list's too)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from punctual.domain.keys import bucket_start
from punctual.domain.model import TaskStatus
from punctual.domain.retry import RetryPolicy
from punctual.errors import InvalidRequestError
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import HttpAction, LogAction
from punctual_tools.console.model import ConsoleSource, TaskFilter, TaskPage
from punctual_tools.console.source import DEFAULT_AHEAD_NOTE, FINISHED_NOTE, OperatorSource
from punctual_tools.iam.recorder import watch_client
from support import TaskFactory, arm, make_failed, retry_record

pytestmark = pytest.mark.integration  # on the session's DynamoDB Local


def all_pages(operator: ConsoleSource, flt: TaskFilter, now: int) -> list[TaskPage]:
    """Every page of a listing, each asked for with the cursor the last one answered."""
    pages = [operator.tasks(flt, now)]
    while pages[-1].next_cursor is not None:
        assert len(pages) < 100, "the pages never ended"
        pages.append(operator.tasks(TaskFilter(**{**_fields(flt), "after": pages[-1].next_cursor}), now))
    return pages


def _fields(flt: TaskFilter) -> dict[str, Any]:
    return {name: getattr(flt, name) for name in TaskFilter.__dataclass_fields__}


@pytest.fixture
def calls(operator: OperatorSource) -> list[str]:
    """The names of the DynamoDB operations the source's client sends, from now on."""
    assert isinstance(operator.stores, DynamoStores)
    names: list[str] = []
    watch_client(operator.stores.table.client, lambda call: names.append(call.operation))
    return names


def test_active_tasks_come_in_due_order_a_page_at_a_time(
    operator: OperatorSource, tasks: TaskFactory, now: int
) -> None:
    # Given 11 active tasks over three minutes (three due at one instant), one of them acme's, and a finished one
    dues = [now + 1_000 * i for i in (5, 70, 70, 70, 3, 130, 61, 62, 125, 9, 64)]
    created = [tasks.create(due, now_ms=now) for due in dues]
    created.append(tasks.create(now + 4_000, "acme/t-1", now_ms=now))
    done = tasks.create(now + 6_000, now_ms=now)
    operator.cancel(done.task_id)
    # When the operator pages through them, 4 a page
    pages = all_pages(operator, TaskFilter(limit=4), now)
    # Then each active task came once, by minute then due then id, from the due index, each page at most 4
    seen = [t.task_id for page in pages for t in page.tasks]
    expected = sorted(created, key=lambda t: (bucket_start(t.due_ms), t.due_ms, t.task_id))
    assert seen == [t.task_id for t in expected]
    assert all(page.index == "due" and len(page.tasks) <= 4 for page in pages)
    assert all(page.entries_read >= len(page.tasks) for page in pages)
    assert pages[0].note == DEFAULT_AHEAD_NOTE


def test_tasks_due_later_than_an_hour_are_listed_for_a_due_range(
    operator: OperatorSource, tasks: TaskFactory, now: int
) -> None:
    # Given a task due in a minute and one due in two hours
    soon = tasks.create(now + 60_000, now_ms=now)
    later = tasks.create(now + 7_200_000, now_ms=now)
    # When the default listing is read, then one from 90 minutes ahead to three hours
    default = all_pages(operator, TaskFilter(), now)
    ranged = all_pages(operator, TaskFilter(due_from_ms=now + 5_400_000, due_to_ms=now + 10_800_000), now)
    # Then the first holds the one due within the hour, the second the later one, and no note
    assert [t.task_id for page in default for t in page.tasks] == [soon.task_id]
    assert [t.task_id for page in ranged for t in page.tasks] == [later.task_id]
    assert ranged[0].note is None


def test_the_due_range_and_status_narrow_the_due_index_pages(
    operator: OperatorSource, stores: DynamoStores, tasks: TaskFactory, now: int
) -> None:
    # Given tasks due each 10 s over a minute, one of them ARMED
    created = [tasks.create(now + 10_000 * i, now_ms=now) for i in range(6)]
    stores.firing.heartbeat("exec-1", now, now + 600_000)
    assert arm(stores, created[1], "exec-1", now) is not None
    # When the operator asks for a due range, then for the ARMED ones only
    in_range = operator.tasks(TaskFilter(due_from_ms=created[2].due_ms, due_to_ms=created[5].due_ms), now)
    armed = operator.tasks(TaskFilter(status=TaskStatus.ARMED), now)
    # Then the range holds the tasks due in it (its end left out), and the status the armed one
    assert [t.task_id for t in in_range.tasks] == [t.task_id for t in created[2:5]]
    assert [(t.task_id, t.status) for t in armed.tasks] == [(created[1].task_id, TaskStatus.ARMED)]


def test_a_finished_status_of_no_tenant_answers_a_note_and_per_tenant_the_tenant_index(
    operator: OperatorSource, stores: DynamoStores, tasks: TaskFactory, now: int
) -> None:
    # Given a FAILED task of acme's, an active one of acme's and one of beta's
    failed = make_failed(stores, tasks, "acme/broken", now)
    active = tasks.create(now + 5_000, "acme/fine", now_ms=now)
    tasks.create(now + 5_000, "beta/other", now_ms=now)
    # When FAILED tasks are asked for without a tenant, then with acme
    nowhere = operator.tasks(TaskFilter(status=TaskStatus.FAILED), now)
    acme_failed = operator.tasks(TaskFilter(status=TaskStatus.FAILED, tenant="acme"), now)
    acme_all = operator.tasks(TaskFilter(tenant="acme"), now)
    # Then the first is an empty page saying where finished tasks are; the others read acme's tenant index only
    assert (nowhere.tasks, nowhere.next_cursor, nowhere.note) == ([], None, FINISHED_NOTE)
    assert [t.task_id for t in acme_failed.tasks] == [failed.task_id]
    assert acme_failed.index == "tenant"
    assert [t.task_id for t in acme_all.tasks] == sorted([failed.task_id, active.task_id])


def test_an_action_kind_reads_on_to_fill_its_page(operator: OperatorSource, tasks: TaskFactory, now: int) -> None:
    # Given six log tasks due first, then three http tasks
    for i in range(6):
        tasks.create(now + 1_000 + i, now_ms=now, action=LogAction(message="x"))
    http = [
        tasks.create(now + 2_000 + i, now_ms=now, action=HttpAction(url="https://example.com/hook")) for i in range(3)
    ]
    # When the http ones are asked for, 2 a page
    pages = all_pages(operator, TaskFilter(kind="http", limit=2), now)
    # Then the first page is full though the first index pages held log tasks only, and every http task came once
    assert [t.task_id for t in pages[0].tasks] == [t.task_id for t in http[:2]]
    assert [t.task_id for page in pages for t in page.tasks] == [t.task_id for t in http]
    assert pages[0].entries_read >= 6


def test_the_retries_are_the_active_tasks_tried_before(
    operator: OperatorSource, stores: DynamoStores, tasks: TaskFactory, now: int
) -> None:
    # Given five tasks never tried, due first, then two whose first try failed, each waiting for its next
    for i in range(5):
        tasks.create(now + 1_000 + i, now_ms=now)
    retried = []
    for i in range(2):
        task = tasks.create(now + 2_000 + i, now_ms=now, retry=RetryPolicy(max_attempts=3))
        assert arm(stores, task, "exec-1", now) is not None
        failed_at = task.due_ms + 10
        record = retry_record(task, failed_at, "HTTP 500", retry_due_ms=failed_at + 1_000 + i)
        assert stores.firing.record_many("exec-1", [record]) == [True]
        retried.append(task.task_id)
    # When the retried ones are asked for, 1 a page  Then each comes once, in due order, PENDING at attempt 1
    pages = all_pages(operator, TaskFilter(retrying=True, limit=1), now)
    listed = [t for page in pages for t in page.tasks]
    assert [t.task_id for t in listed] == retried
    assert {(t.status, t.attempt) for t in listed} == {(TaskStatus.PENDING, 1)}


def test_a_tenant_pages_through_its_own_tasks_by_id(operator: OperatorSource, tasks: TaskFactory, now: int) -> None:
    mine = [tasks.create(now + 5_000, f"acme/t-{i}", now_ms=now) for i in range(5)]
    tasks.create(now + 5_000, "beta/t-0", now_ms=now)
    pages = all_pages(operator, TaskFilter(tenant="acme", limit=2), now)
    assert [t.task_id for page in pages for t in page.tasks] == [t.task_id for t in mine]


def test_no_listing_scans_the_table(
    operator: OperatorSource, stores: DynamoStores, tasks: TaskFactory, now: int, calls: list[str]
) -> None:
    # Given tasks, schedules of a tenant and of none, and a poll's watermark (as a running stack has)
    for i in range(5):
        tasks.create(now + 1_000 * i, f"acme/t-{i}", now_ms=now)
    for schedule_id in ("acme/daily", "hourly"):
        operator.client.create_schedule(schedule_id, "rate(1 hour)", LogAction(message="tick"))
    stores.dispatch.find_due(now, now)
    calls.clear()
    # When every listing the Tasks, Now, Tenants and Schedules pages make is read
    reads: list[Callable[[], object]] = [
        lambda: all_pages(operator, TaskFilter(limit=2), now),
        lambda: operator.tasks(TaskFilter(status=TaskStatus.PENDING, kind="log"), now),
        lambda: operator.tasks(TaskFilter(tenant="acme", limit=2), now),
        lambda: operator.now(now, 120),
        operator.tenants,
    ]
    for read in reads:
        read()
    before = len(calls)
    schedules = operator.schedules()
    # Then they queried indexes and read items by key, and never scanned
    assert calls
    assert "Scan" not in calls
    assert set(calls) <= {"Query", "BatchGetItem", "GetItem"}
    # ... the Schedules list too, which holds every schedule (the registry in the schedule index, then their items)
    assert [s.schedule_id for s in schedules] == ["acme/daily", "hourly"]
    assert set(calls[before:]) == {"Query", "BatchGetItem"}


@pytest.mark.parametrize(
    ("flt", "field"),
    [
        (TaskFilter(limit=0), "limit"),
        (TaskFilter(tenant="not a tenant"), "tenant"),
        (TaskFilter(tenant="acme", after="beta/t-1"), "after"),
        (TaskFilter(after="yesterday"), "after"),
    ],
)
def test_a_filter_no_index_can_answer_is_refused_naming_its_field(
    operator: OperatorSource, now: int, flt: TaskFilter, field: str
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        operator.tasks(flt, now)
    assert refused.value.field == field
