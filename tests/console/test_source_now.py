"""The operator source's Now page on DynamoDB Local: tasks due each second ahead and the overdue count from the due
index's keys, the last hour's figures from the stack's batch log, and the executors from their heartbeat items."""

from __future__ import annotations

from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.keys import BUCKET_MS, bucket_start
from punctual.stores.dynamodb import DynamoStores
from punctual_tools.console.figures import BatchLog
from punctual_tools.console.source import OperatorSource, stores_source
from support import TaskFactory, arm

pytestmark = pytest.mark.integration  # on the session's DynamoDB Local


def test_the_load_ahead_and_the_overdue_come_from_the_due_index(
    operator: OperatorSource, tasks: TaskFactory, now: int
) -> None:
    # Given tasks due 0.5 s, 1.2 s (two), 299.9 s and 301 s ahead, one due 10 s ago written now (listed under now's
    # minute), one due 90 s ago written 100 s ago (under its own minute), and one cancelled
    for ahead in (500, 1_200, 1_200, 299_900, 301_000):
        tasks.create(now + ahead, now_ms=now)
    tasks.create(now - 10_000, now_ms=now)
    tasks.create(now - 90_000, now_ms=now - 100_000)
    gone = tasks.create(now + 2_500, now_ms=now)
    operator.cancel(gone.task_id)
    # When the Now page is read for the next 300 seconds
    view = operator.now(now, 300)
    # Then each second counts the tasks due in it (the one past the horizon and the cancelled one left out), and
    # the two overdue ones are counted
    assert len(view.due_per_second) == 300
    assert (view.due_per_second[0], view.due_per_second[1], view.due_per_second[299]) == (1, 2, 1)
    assert sum(view.due_per_second) == 4
    assert view.overdue == 2


def test_the_last_hour_comes_from_the_batch_log_a_minute_each(
    operator: OperatorSource, batch_log: BatchLog, now: int
) -> None:
    # Given batches that ended in this minute (drifts 1..100 ms), two minutes ago, and two hours ago
    this_minute, two_ago = bucket_start(now), bucket_start(now) - 2 * BUCKET_MS
    batch_log.append({"executor_id": "x-1", "fired": 60, "failed": 1, "drift_ms": list(range(1, 61))}, this_minute)
    batch_log.append({"executor_id": "x-2", "fired": 40, "missed": 2, "drift_ms": list(range(61, 101))}, now)
    batch_log.append({"executor_id": "x-1", "fired": 1, "drift_ms": [7.5]}, two_ago + 59_999)
    batch_log.append({"executor_id": "x-9", "fired": 5, "drift_ms": [1_000.0]}, now - 7_200_000)
    # When the Now page is read
    minutes = operator.now(now).minutes
    # Then it holds the hour's 60 minutes, oldest first, ending with this one
    assert [m.minute_ms for m in minutes] == [this_minute - (59 - i) * BUCKET_MS for i in range(60)]
    last, earlier = minutes[-1], minutes[-3]
    # And this minute's counts and drift (nearest-rank p50 and p99 of 1..100, and its max) add its two batches
    assert (last.fired, last.missed, last.failed) == (100, 2, 1)
    assert (last.drift_p50_ms, last.drift_p99_ms, last.drift_max_ms) == (50, 99, 100)
    assert (earlier.fired, earlier.drift_p50_ms, earlier.drift_max_ms) == (1, 7.5, 7.5)
    # And a minute with no batch is there, empty; the batch two hours old counts nowhere
    assert (minutes[-2].fired, minutes[-2].drift_p50_ms) == (0, None)
    assert sum(m.fired for m in minutes) == 101


def test_the_executors_are_those_of_recent_batches_with_their_heartbeats(
    operator: OperatorSource, stores: DynamoStores, batch_log: BatchLog, now: int
) -> None:
    # Given executors that reported batches lately: one alive, one fenced, one whose heartbeat lapsed, one with no
    # heartbeat item; and one whose last batch is 20 minutes old
    stores.firing.heartbeat("x-alive", now - 1_000, now + 30_000, invocation="req-1")
    stores.firing.heartbeat("x-fenced", now - 1_000, now + 30_000)
    stores.firing.fence("x-fenced", now)
    stores.firing.heartbeat("x-lapsed", now - 60_000, now - 1)
    for executor, ended in [("x-alive", now - 5_000), ("x-alive", now - 2_000), ("x-fenced", now - 3_000)]:
        batch_log.append({"executor_id": executor, "fired": 1}, ended)
    batch_log.append({"executor_id": "x-lapsed", "fired": 1}, now - 60_000)
    batch_log.append({"executor_id": "x-none", "fired": 1}, now - 90_000)
    batch_log.append({"executor_id": "x-old", "fired": 1}, now - 1_200_000)
    # When the Now page is read
    executors = operator.now(now).executors
    # Then each recent one is there, the latest first, with its state, heartbeat and batch count
    assert executors is not None
    shown = {e.executor_id: e for e in executors}
    assert [e.executor_id for e in executors] == ["x-alive", "x-fenced", "x-lapsed", "x-none"]
    assert (shown["x-alive"].state, shown["x-alive"].batches, shown["x-alive"].invocation) == ("alive", 2, "req-1")
    assert (shown["x-alive"].alive_until_ms, shown["x-alive"].last_batch_ms) == (now + 30_000, now - 2_000)
    assert shown["x-fenced"].state == "fenced"
    assert shown["x-lapsed"].state == "lapsed"
    assert (shown["x-none"].state, shown["x-none"].alive_until_ms) == ("lapsed", None)


def test_an_executor_holding_armed_tasks_is_shown_before_it_reports_its_batch(
    operator: OperatorSource, stores: DynamoStores, tasks: TaskFactory, batch_log: BatchLog, now: int
) -> None:
    # Given an executor alive that armed two tasks due in 30 s and has reported no batch yet, a pending task beside
    # them, and another executor that reported a batch a minute ago
    stores.firing.heartbeat("x-running", now - 500, now + 60_000, invocation="req-running")
    for n in range(2):
        assert arm(stores, tasks.create(now + 30_000, f"armed-{n}", now_ms=now), "x-running", now) is not None
    tasks.create(now + 30_000, "pending", now_ms=now)
    batch_log.append({"executor_id": "x-done", "fired": 3}, now - 60_000)
    # When the Now page is read
    executors = operator.now(now).executors
    # Then the running one comes first, alive, holding its two tasks with no batch reported; the other after it
    assert executors is not None
    assert [(e.executor_id, e.state, e.holding, e.batches) for e in executors] == [
        ("x-running", "alive", 2, 0),
        ("x-done", "lapsed", 0, 1),
    ]
    assert executors[0].invocation == "req-running"


def test_the_notes_say_where_the_figures_come_from(operator: OperatorSource, now: int) -> None:
    notes = " ".join(operator.now(now).notes)
    assert "due index" in notes
    assert "batch log" in notes
    assert "heartbeat" in notes


def test_a_source_over_a_table_alone_has_no_figures_and_says_so(
    ddb_local_client: Any, settings: Settings, tasks: TaskFactory, now: int
) -> None:
    # Given a table with a task due in 2 s and no stack (no batch log)
    tasks.create(now + 2_000, now_ms=now)
    operator = stores_source(settings, ddb_local_client, tenants=("acme",))
    try:
        # When its Now page is read
        view = operator.now(now, 10)
    finally:
        assert isinstance(operator.stores, DynamoStores)
        operator.stores.table.close()
    # Then the load ahead is there, the hour's minutes empty, no executors, and the notes say why
    assert view.due_per_second[2] == 1
    assert (len(view.minutes), sum(m.fired for m in view.minutes), view.executors) == (60, 0, None)
    assert "no batch log" in " ".join(view.notes)
