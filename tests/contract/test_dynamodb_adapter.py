"""The DynamoDB adapter (:class:`punctual.stores.dynamodb.DynamoStores`) beyond the port's contract: how it lays
items out (the sparse due index, its minute buckets, the fast-path flag, the TTL, the heartbeat items), the
watermark behind ``find_due``, items that are not tasks (quarantined), writes split over several requests, a
takeover whose owner renews mid-way, and a retried write whose first response was lost.

Not part of the contract: another implementation of the port has none of this. Runs on every DynamoDB kind
of ``contract_tools.STORE_KINDS`` (moto and DynamoDB Local, both write modes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from contract_tools import (
    ALIVE_MS,
    ARMED_LEASE_MS,
    NOW,
    DynamoBackend,
    TaskFactory,
    alive,
    arm,
    armed_task,
    candidate,
    due_ids,
    record,
    stored,
    succeeded,
)

import punctual.stores.dynamodb.table as table_module
import punctual.stores.dynamodb.writes as writes_module
from punctual.config.settings import Settings
from punctual.domain.keys import BUCKET_MS, bucket_start, index_key, shard_of
from punctual.domain.model import ArmRequest, FireRecord, Outcome, Task, TaskStatus
from punctual.domain.retry import RetryPolicy
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.codec import to_av
from punctual.stores.dynamodb.executors import EXECUTOR_PREFIX
from support import retry_record


@pytest.fixture
def backend(dynamo_backend: DynamoBackend) -> DynamoBackend:
    return dynamo_backend


@pytest.fixture
def tasks(dynamo_backend: DynamoBackend) -> TaskFactory:
    return TaskFactory(dynamo_backend.store)


def index_ids(backend: DynamoBackend, task: Task, bucket_of_ms: int, until_ms: int) -> list[str]:
    """What the due index lists for the task's shard in the minute of ``bucket_of_ms``, up to ``until_ms``."""
    store = backend.dynamo
    return [
        e.task_id
        for e in store.dispatch.query_index(bucket_of_ms, shard_of(task.task_id, store.config.shard_count), until_ms)
    ]


def bucket_of(backend: DynamoBackend, task_id: str, at_ms: int) -> str:
    return index_key(at_ms, shard_of(task_id, backend.dynamo.config.shard_count))


# -- item layout -------------------------------------------------------------------------------------------------
def test_a_task_written_due_in_the_past_lands_in_the_bucket_of_now(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given a task due 5 minutes ago, written now
    task = tasks.create(NOW - 5 * BUCKET_MS, "t-late")
    # Then its index key is the minute of now (at or after any watermark), not that of its due time
    assert backend.raw_item("t-late")["due_bucket"]["S"] == bucket_of(backend, "t-late", NOW)
    assert index_ids(backend, task, NOW, NOW) == ["t-late"]
    assert index_ids(backend, task, task.due_ms, NOW) == []


def test_a_task_written_due_in_the_future_lands_in_its_due_bucket(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given a task due in 5 minutes / Then its index key is the minute it is due in
    task = tasks.create(NOW + 5 * BUCKET_MS, "t-future")
    assert backend.raw_item("t-future")["due_bucket"]["S"] == bucket_of(backend, "t-future", task.due_ms)


def test_the_fast_path_flag_marks_tasks_due_before_the_next_poll(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given tasks due one ms before and exactly at the next poll's reach (poll interval + margin), written now
    reach = backend.dynamo.config.fast_path_within_ms
    inside = tasks.create(NOW + reach - 1)
    outside = tasks.create(NOW + reach)
    # Then only the one the poller may have swept past is flagged for the stream's fast path
    assert backend.raw_item(inside.task_id)["fast_path"]["N"] == "1"
    assert backend.raw_item(outside.task_id)["fast_path"]["N"] == "0"
    # When the far one is moved to 2 s ahead, and the near one far away / Then the flags follow
    backend.store.client.reschedule(outside.task_id, NOW + 2_000, NOW)
    backend.store.client.reschedule(inside.task_id, NOW + 10 * reach, NOW)
    assert backend.raw_item(outside.task_id)["fast_path"]["N"] == "1"
    assert backend.raw_item(inside.task_id)["fast_path"]["N"] == "0"


def test_finished_tasks_carry_a_ttl_of_the_retention(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given a recorded, a cancelled and a missed task
    done, missed = armed_task(backend.store, tasks), armed_task(backend.store, tasks)
    assert record(backend.store, "exec-1", succeeded(done, NOW + 10_050))
    cancelled = tasks.create(NOW + 10_001)
    backend.store.client.cancel(cancelled.task_id, NOW + 1)
    assert record(backend.store, "exec-1", succeeded(missed, NOW + 2, outcome=Outcome.MISSED, detail="late"))
    # Then each has left the due index, and carries expires_at = finished + retention, in epoch seconds (the
    # unit of DynamoDB's TTL)
    assert [name for name in (done, cancelled, missed) if "due_bucket" in backend.raw_item(name.task_id)] == []
    retention_s = backend.dynamo.config.retention_ms // 1000
    assert int(backend.raw_item(done.task_id)["expires_at"]["N"]) == (NOW + 10_050) // 1000 + retention_s
    assert int(backend.raw_item(cancelled.task_id)["expires_at"]["N"]) == (NOW + 1) // 1000 + retention_s
    assert int(backend.raw_item(missed.task_id)["expires_at"]["N"]) == (NOW + 2) // 1000 + retention_s
    # And an active task has none
    assert "expires_at" not in backend.raw_item(tasks.create(NOW + 20_000).task_id)


def test_a_recorded_task_leaves_the_due_index(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given an armed task, which the index still lists
    task = tasks.create(NOW + 10_000)
    assert index_ids(backend, task, task.due_ms, task.due_ms) == [task.task_id]
    assert arm(backend.store, task, "exec-1", NOW) is not None
    assert index_ids(backend, task, task.due_ms, task.due_ms) == [task.task_id]
    # When its outcome is recorded
    assert record(
        backend.store,
        "exec-1",
        FireRecord(
            task_id=task.task_id,
            outcome=Outcome.FAILED,
            fired_ms=NOW + 10_000.0,
            finished_ms=NOW + 10_100,
            drift_ms=0.0,
            drift_corrected_ms=None,
            detail="HTTP 500",
        ),
    )
    # Then the index no longer lists it, and the item keeps the outcome
    assert index_ids(backend, task, task.due_ms, task.due_ms + BUCKET_MS) == []
    item = backend.raw_item(task.task_id)
    assert "due_bucket" not in item
    assert "lease_until_ms" not in item
    assert (item["status"]["S"], item["detail"]["S"]) == ("FAILED", "HTTP 500")


def test_a_retry_puts_the_task_back_in_the_index_at_its_next_try(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1 whose action failed at F
    task = armed_task(backend.store, tasks, retry=RetryPolicy(max_attempts=3))
    failed_at = NOW + 10_005
    # When the retry is recorded, due 700 ms later
    assert record(
        backend.store,
        "exec-1",
        retry_record(task, failed_at, "HTTP 500", retry_due_ms=failed_at + 700),
    )
    # Then it is back in the due index under that instant's minute, flagged for the fast path, its hash kept
    raw = backend.raw_item(task.task_id)
    assert raw["due_bucket"]["S"] == bucket_of(backend, task.task_id, failed_at + 700)
    assert raw["fast_path"] == {"N": "1"}
    assert raw["content_hash"]["S"] == task.content_hash()


def test_reschedule_moves_the_index_key_and_the_content_hash(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given a PENDING task
    task = tasks.create(NOW + 10_000)
    new_due = NOW + 10 * BUCKET_MS + 123
    # When it is moved ten minutes later
    moved = backend.store.client.reschedule(task.task_id, new_due, NOW + 1)
    # Then its index key is the minute of its new due time, and its hash that of the moved task
    item = backend.raw_item(task.task_id)
    assert item["due_bucket"]["S"] == bucket_of(backend, task.task_id, new_due)
    assert item["content_hash"]["S"] == task.model_copy(update={"due_at": moved.due_at}).content_hash()
    assert "batch_id" not in item
    assert "lease_until_ms" not in item
    assert index_ids(backend, task, task.due_ms, task.due_ms + BUCKET_MS) == []
    assert index_ids(backend, task, new_due, new_due) == [task.task_id]


# -- reading the index ---------------------------------------------------------------------------------------------
def test_candidates_read_status_from_the_table_and_skip_finished(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given a pending, an armed and a cancelled task, and an id that does not exist
    pending, gone = (tasks.create(NOW + 10_000 + i) for i in range(2))
    taken = armed_task(backend.store, tasks, "exec-1")
    backend.store.client.cancel(gone.task_id, NOW)
    # When their candidates are read
    found = {
        c.task_id: c for c in backend.dynamo.dispatch.candidates([pending.task_id, taken.task_id, gone.task_id, "nope"])
    }
    # Then the active ones come with the table's status, lease and owner; the finished and missing ones do not
    assert set(found) == {pending.task_id, taken.task_id}
    assert found[pending.task_id] == candidate(pending)
    assert found[taken.task_id] == candidate(stored(backend.store, taken.task_id))
    assert (found[taken.task_id].lease_until_ms, found[taken.task_id].owner) == (NOW + ARMED_LEASE_MS, "exec-1")


def test_query_index_lists_the_keys_of_one_shard_up_to_the_end(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given two tasks in the same minute and shard, one due after the window's end
    store = backend.dynamo
    first = tasks.create(NOW + 10_000)
    shard = shard_of(first.task_id, store.config.shard_count)
    later_id = next(f"t-{i}" for i in range(1000) if shard_of(f"t-{i}", store.config.shard_count) == shard)
    later = tasks.create(NOW + 20_000, later_id)
    # When the index is queried up to between them / Then only the first is listed, with its due time
    assert [(e.task_id, e.due_ms) for e in store.dispatch.query_index(NOW, shard, NOW + 15_000)] == [
        (first.task_id, first.due_ms)
    ]
    assert later.task_id in [e.task_id for e in store.dispatch.query_index(NOW, shard, NOW + 20_000)]


def test_the_watermark_only_moves_forward(backend: DynamoBackend) -> None:
    # Given no watermark yet
    store = backend.dynamo
    assert store.dispatch.get_watermark() is None
    start = bucket_start(NOW)
    # When it is set, then moved back, then to the same value, then forward
    assert store.dispatch.advance_watermark(start) is True
    assert store.dispatch.advance_watermark(start - BUCKET_MS) is False
    assert store.dispatch.advance_watermark(start) is False
    assert store.dispatch.get_watermark() == start
    assert store.dispatch.advance_watermark(start + BUCKET_MS) is True
    # Then only the forward moves took effect
    assert store.dispatch.get_watermark() == start + BUCKET_MS


def test_the_watermark_and_heartbeat_items_are_not_tasks(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given a watermark, an executor's heartbeat and a task in the same table
    backend.dynamo.dispatch.advance_watermark(bucket_start(NOW))
    alive(backend.store, "exec-1", NOW + 20_000)
    tasks.create(NOW + 10_000, "t-listed")
    # Then only the task is listed or found due, and the watermark and the heartbeat are still there
    assert [t.task_id for t in backend.store.client.list_tasks()] == ["t-listed"]
    assert due_ids(backend.store, NOW + 90_000) == ["t-listed"]
    assert backend.dynamo.dispatch.get_watermark() == bucket_start(NOW)
    heartbeat = backend.raw_item(EXECUTOR_PREFIX + "exec-1")
    assert (heartbeat["alive_until_ms"]["N"], heartbeat["beat_ms"]["N"]) == (str(NOW + 20_000), str(NOW))
    assert "due_bucket" not in heartbeat


def test_find_due_moves_the_watermark_no_closer_than_its_safety_and_never_past_an_active_task(
    backend: DynamoBackend, tasks: TaskFactory
) -> None:
    # Given an active task due 10 minutes ago
    store = backend.dynamo
    old = tasks.create(NOW - 10 * BUCKET_MS, now_ms=NOW - 11 * BUCKET_MS)
    # When due work is looked for now / Then the watermark stops at the old task's minute
    assert (
        store.dispatch.find_due(NOW, NOW + 90_000).watermark_ms
        == bucket_start(old.due_ms)
        == store.dispatch.get_watermark()
    )
    # When the old task is finished and due work is looked for again / Then the watermark moves on, but stays
    # at least the overdue safety behind now
    store.client.cancel(old.task_id, NOW)
    assert store.dispatch.find_due(NOW, NOW + 90_000).watermark_ms == bucket_start(NOW - store.config.overdue_safety_ms)
    assert store.dispatch.get_watermark() == bucket_start(NOW - store.config.overdue_safety_ms)


def test_oldest_active_due(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given an empty index
    store = backend.dynamo
    assert store.dispatch.oldest_active_due() is None
    # When tasks are due at several times, and the oldest of them is finished
    done = tasks.create(NOW - 9 * BUCKET_MS, now_ms=NOW - 10 * BUCKET_MS)
    oldest_active = tasks.create(NOW - 3 * BUCKET_MS + 7, now_ms=NOW - 4 * BUCKET_MS)
    tasks.create(NOW + 2 * BUCKET_MS)
    backend.store.client.cancel(done.task_id, NOW)
    # Then it answers one minute before the minute of the oldest active due time
    assert store.dispatch.oldest_active_due() == bucket_start(oldest_active.due_ms) - BUCKET_MS


def test_poll_groups_split_the_shards_each_with_its_own_watermark(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given the same table seen by a store split into two poll groups, 40 tasks due within the minute and one
    # task 10 minutes overdue (in whichever group its id falls)
    store = backend.dynamo
    assert store.config.shard_count % 2 == 0
    grouped = DynamoStores.on(backend.client, replace(store.config, poll_groups=2))
    due_soon = [tasks.create(NOW + 1_000 + i, f"g-{i}") for i in range(40)]
    old = tasks.create(NOW - 10 * BUCKET_MS, "g-old", now_ms=NOW - 11 * BUCKET_MS)
    old_group = 0 if shard_of(old.task_id, store.config.shard_count) in grouped.dispatch.group_shards(0) else 1
    # When each group looks for due work
    found = {
        g: sorted(c.task_id for c in grouped.dispatch.find_due(NOW, NOW + 90_000, group=g).candidates) for g in (0, 1)
    }
    # Then each finds exactly the tasks of its shards: together every task, none twice
    for g in (0, 1):
        assert found[g]
        assert all(shard_of(t, store.config.shard_count) in grouped.dispatch.group_shards(g) for t in found[g])
    assert sorted(found[0] + found[1]) == sorted([t.task_id for t in due_soon] + [old.task_id])
    # And each group keeps its own watermark: the old task holds back only its own group's
    marks = {g: grouped.dispatch.get_watermark(g) for g in (0, 1)}
    assert marks[old_group] == bucket_start(old.due_ms)
    assert marks[1 - old_group] == bucket_start(NOW - store.config.overdue_safety_ms)
    assert store.dispatch.get_watermark() is None  # the ungrouped store's watermark item is another item
    assert (
        len({grouped.dispatch.watermark_key(0), grouped.dispatch.watermark_key(1), store.dispatch.watermark_key()}) == 3
    )
    # And a group that does not exist, or a group count that does not divide the shards, is refused
    with pytest.raises(ValueError, match="poll group 2"):
        grouped.dispatch.find_due(NOW, NOW + 90_000, group=2)
    with pytest.raises(ValueError, match="must divide"):
        Settings(table_name=backend.table_name, shard_count=store.config.shard_count, poll_groups=3)


def test_find_due_out_of_time_never_moves_the_watermark_past_the_first_bucket_it_did_not_read(
    backend: DynamoBackend, tasks: TaskFactory
) -> None:
    # Given a watermark 10 minutes back, and a task due 5 minutes ago (written in time: in its own minute)
    store = backend.dynamo
    start = bucket_start(NOW - 10 * BUCKET_MS)
    assert store.dispatch.advance_watermark(start)
    old = tasks.create(NOW - 5 * BUCKET_MS, now_ms=NOW - 6 * BUCKET_MS)
    step = max(
        1, store.config.db_threads // store.config.shard_count
    )  # minutes read at once, before out_of_time is asked again
    assert start + step * BUCKET_MS < bucket_start(old.due_ms)
    asked: list[int] = []

    def out_of_time_after_one_step() -> bool:
        asked.append(1)
        return len(asked) > 1

    # When a look runs out of time after its first step
    stopped = store.dispatch.find_due(NOW, NOW + 90_000, out_of_time=out_of_time_after_one_step)
    # Then it did not reach the task, and its watermark stops at the first minute it did not read
    assert (stopped.candidates, stopped.complete) == ([], False)
    assert stopped.watermark_ms == start + step * BUCKET_MS == store.dispatch.get_watermark()
    # And the next look finds the task, the watermark then at the task's minute
    full = store.dispatch.find_due(NOW, NOW + 90_000)
    assert ([c.task_id for c in full.candidates], full.complete) == ([old.task_id], True)
    assert full.watermark_ms == bucket_start(old.due_ms) == store.dispatch.get_watermark()


# -- items written by others: items that are not tasks ----------------------------------------------------------
def test_items_that_are_not_tasks_are_failed_and_the_rest_goes_on(
    backend: DynamoBackend, tasks: TaskFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two tasks, and five items written by hand in the due index: one with status "pending", one with a
    # status that is a number, one with an unknown misfire policy, one with an unknown action kind, and one that
    # loses its due_ms once the index has listed it (the index lags the table)
    dynamo, store = backend.dynamo, backend.store
    good = [tasks.create(NOW + 10_000 + i, f"good-{i}") for i in range(2)]

    def put(task_id: str, **changes: Any) -> None:
        item = {**dynamo.client.item_of(tasks.build(NOW + 10_005, task_id), NOW), **to_av(changes)}
        backend.client.put_item(TableName=backend.table_name, Item=item)

    put("bad-status", status="pending")
    put("bad-type", status=7)
    put("bad-policy", misfire_policy="whenever")
    put("bad-action", action='{"kind":"carrier-pigeon"}')
    put("bad-due")
    query_index = dynamo.dispatch.query_index

    def index_lagging_the_table(bucket_ms: int, shard: int, until_ms: int) -> list[Any]:
        entries = query_index(bucket_ms, shard, until_ms)
        if any(e.task_id == "bad-due" for e in entries):
            backend.client.update_item(
                TableName=backend.table_name, Key={"task_id": {"S": "bad-due"}}, UpdateExpression="REMOVE due_ms"
            )
        return entries

    monkeypatch.setattr(dynamo.dispatch, "query_index", index_lagging_the_table)
    ids = ["bad-status", "bad-type", "bad-policy", "bad-action", "bad-due", *(t.task_id for t in good)]
    # When due work is looked for
    scan = store.dispatch.find_due(NOW, NOW + 90_000)
    # Then the tasks are found (the action is read only when armed), the two unreadable items are counted and
    # recorded FAILED with what is wrong, out of the due index
    assert (sorted(c.task_id for c in scan.candidates), scan.undecodable) == (["bad-action", "good-0", "good-1"], 4)
    for task_id, why in (
        ("bad-status", "ValueError"),
        ("bad-type", "KeyError"),
        ("bad-policy", "ValueError"),
        ("bad-due", "KeyError"),
    ):
        item = backend.raw_item(task_id)
        assert (item["status"]["S"], "due_bucket" in item) == ("FAILED", False)
        assert item["detail"]["S"].startswith(f"undecodable item: {why}")
    # When an executor arms what was found, and the item already FAILED
    alive(store, "exec-1", NOW + ALIVE_MS)
    armed = store.firing.arm_many(
        [
            ArmRequest(
                task_id=t,
                due_ms=NOW + 10_000 + i if t.startswith("good") else NOW + 10_005,
                lease_until_ms=NOW + ARMED_LEASE_MS,
            )
            for t, i in (("good-0", 0), ("bad-action", 0), ("bad-status", 0), ("good-1", 1))
        ],
        "batch-1",
        "exec-1",
        NOW,
    )
    # Then it gets the tasks; the one with the unknown action is recorded FAILED at once, with what is wrong
    assert [a.task.task_id if a else None for a in armed] == ["good-0", None, None, "good-1"]
    bad_action = backend.raw_item("bad-action")
    assert (bad_action["status"]["S"], "due_bucket" in bad_action) == ("FAILED", False)
    assert "carrier-pigeon" in bad_action["detail"]["S"]
    # ... reads skip what they cannot read (the FAILED items with a bad status now read as tasks; the unknown
    # policy still cannot be read)
    readable = ["bad-status", "bad-type", "good-0", "good-1"]
    assert sorted(store.client.get_many(ids)) == readable
    assert sorted(t.task_id for t in store.client.list_tasks()) == readable
    assert stored(store, "bad-status").detail.startswith("undecodable item: ValueError")  # type: ignore[union-attr]
    # ... and the next look meets none of them again
    again = store.dispatch.find_due(NOW + 1, NOW + 90_000)
    assert (again.candidates, again.undecodable) == ([], 0)


# -- a takeover and the owner's heartbeat --------------------------------------------------------------------------
def test_a_takeover_loses_when_the_owner_renews_between_its_read_and_its_write(
    backend: DynamoBackend, tasks: TaskFactory
) -> None:
    # Given a task armed by exec-1, alive until T, and exec-1 renewing (late, on a client of its own) just
    # after exec-2 read its heartbeat and before exec-2's takeover is written
    until = NOW + 20_000
    task = armed_task(backend.store, tasks, "exec-1", alive_until_ms=until)
    owner = backend.new_store()
    renewed: list[bool] = []

    def renew(**_: Any) -> None:
        if not renewed:
            renewed.append(owner.firing.heartbeat("exec-1", until + 1, until + 20_000))

    event = "before-call.dynamodb.TransactWriteItems"
    backend.client.meta.events.register(event, renew)
    try:
        # When exec-2 arms the task at T + 1
        taken = arm(backend.store, task, "exec-2", until + 1)
    finally:
        backend.client.meta.events.unregister(event, renew)
    # Then the takeover lost to the renewal: exec-1 still holds the task, and its heartbeat still renews
    assert (renewed, taken) == ([True], None)
    assert stored(backend.store, task.task_id).armed_by == "exec-1"
    assert backend.store.firing.heartbeat("exec-1", until + 2, until + 30_000) is True


# -- many items in several requests --------------------------------------------------------------------------------
def test_many_writes_keep_each_condition_across_requests(
    backend: DynamoBackend, tasks: TaskFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given requests of at most 10 items (100 in DynamoDB: smaller here, to cross the limit with few tasks),
    # and 21 PENDING tasks of which the 6th is armed by a live executor and the last cancelled
    monkeypatch.setattr(writes_module, "TRANSACTION_LIMIT", 10)
    monkeypatch.setattr(table_module, "BATCH_GET_LIMIT", 10)
    store = backend.store
    created = [tasks.create(NOW + 10_000 + i) for i in range(21)]
    alive(store, "exec-2", NOW + ALIVE_MS)
    assert arm(store, created[5], "exec-2", NOW, batch_id="other-batch") is not None
    store.client.cancel(created[20].task_id, NOW)
    # When exec-1 arms all of them at once
    armed = store.firing.arm_many(
        [ArmRequest(task_id=t.task_id, due_ms=t.due_ms, lease_until_ms=NOW + ARMED_LEASE_MS) for t in created],
        "batch-0",
        "exec-1",
        NOW,
    )
    # Then exactly the two whose condition fails lose, and every other arm is written and read back whole
    assert [i for i, a in enumerate(armed) if a is None] == [5, 20]
    assert [(a.task.task_id, a.task.payload) for a in armed if a] == [
        (t.task_id, t.payload) for i, t in enumerate(created) if i not in (5, 20)
    ]
    after = store.client.get_many([t.task_id for t in created] + ["unknown"])
    assert len(after) == 21
    assert [(after[t.task_id].armed_by, after[t.task_id].batch_id) for t in created[:20]] == [
        ("exec-2", "other-batch") if i == 5 else ("exec-1", "batch-0") for i in range(20)
    ]
    # And recording them in several requests answers position by position too
    assert store.firing.record_many("exec-1", [succeeded(t) for t in created]) == [i not in (5, 20) for i in range(21)]


# -- a write whose response was lost -----------------------------------------------------------------------------
@contextlib.contextmanager
def responses_lost(client: Any, operation: str, times: int = 1) -> Iterator[list[int]]:
    """The next ``times`` successful responses to ``operation`` are lost on the way back: the write was applied,
    and botocore (which sees no answer) sends the very same request again. Yields the attempts whose response
    was dropped."""
    dropped: list[int] = []

    def lose(response: Any = None, attempts: int = 0, **_: Any) -> int | None:
        if response is not None and response[0].status_code == 200 and len(dropped) < times:
            dropped.append(attempts)
            return 0  # "retry after 0 s", as botocore's own handler answers for a lost connection
        return None

    event = f"needs-retry.dynamodb.{operation}"
    client.meta.events.register_first(event, lose)
    try:
        yield dropped
    finally:
        client.meta.events.unregister(event, lose)


def test_a_retried_arm_record_retry_and_redrive_count_as_done(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given a task at each step of its life, and every UpdateItem response lost once, the write applied
    store = backend.store
    task = tasks.create(NOW + 10_000, retry=RetryPolicy(max_attempts=2))
    alive(store, "exec-1", NOW + ALIVE_MS)
    retry = retry_record(task, NOW + 10_010, "e", retry_due_ms=NOW + 11_000)

    def armed_as_attempt(attempt: int, now_ms: int) -> bool:
        armed = arm(store, stored(store, task.task_id), "exec-1", now_ms)
        return armed is not None and armed.task.attempt == attempt == stored(store, task.task_id).attempt

    steps: list[tuple[str, Callable[[], object]]] = [
        ("arm", lambda: armed_as_attempt(1, NOW)),
        ("retry", lambda: record(store, "exec-1", retry)),
        ("arm again", lambda: armed_as_attempt(2, NOW + 11_000)),
        ("record", lambda: record(store, "exec-1", succeeded(task, outcome=Outcome.FAILED))),
        ("redrive", lambda: store.client.redrive_many([task.task_id], NOW + 60_000) == [True]),
    ]
    for name, step in steps:
        # When the step's write is sent again after its response was lost
        with responses_lost(backend.client, "UpdateItem") as dropped:
            answered = step()
        # Then it was applied once and the retry recognises it as done: the caller hears it won
        assert (name, dropped, answered) == (name, [1], True)
    final = stored(store, task.task_id)
    assert (final.status, final.attempt, final.due_ms) == (TaskStatus.PENDING, 0, NOW + 60_000)


def _skip_where_tokens_are_ignored(backend: DynamoBackend) -> None:
    if backend.kind is None or backend.kind.name.startswith("moto"):
        pytest.skip("moto ignores TransactWriteItems' ClientRequestToken (DynamoDB and DynamoDB Local honour it)")


def test_a_retried_transaction_counts_as_done(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given the transaction write mode, and the response to a transaction of three arms lost, the write applied
    if backend.dynamo.config.write_batch != "transaction":
        pytest.skip("only the transaction write mode sends TransactWriteItems for arms")
    _skip_where_tokens_are_ignored(backend)
    created = [tasks.create(NOW + 10_000 + i) for i in range(3)]
    alive(backend.store, "exec-1", NOW + ALIVE_MS)
    # When botocore sends it again (with the same ClientRequestToken)
    with responses_lost(backend.client, "TransactWriteItems") as dropped:
        armed = backend.store.firing.arm_many(
            [ArmRequest(task_id=t.task_id, due_ms=t.due_ms, lease_until_ms=NOW + ARMED_LEASE_MS) for t in created],
            "batch-1",
            "exec-1",
            NOW,
        )
    # Then DynamoDB answers the retry as the first attempt: every arm won, each counted once
    assert (dropped, [a.task.task_id if a else None for a in armed]) == ([1], [t.task_id for t in created])
    assert {
        (t.status, t.armed_by, t.attempt) for t in backend.store.client.get_many([t.task_id for t in created]).values()
    } == {(TaskStatus.ARMED, "exec-1", 1)}


def test_a_retried_takeover_counts_as_done(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1, alive until T, and the response to exec-2's takeover at T + 1 lost, the
    # write applied (the task's and the heartbeat's)
    _skip_where_tokens_are_ignored(backend)
    until = NOW + 20_000
    task = armed_task(backend.store, tasks, "exec-1", alive_until_ms=until)
    # When botocore sends the takeover again (with the same ClientRequestToken)
    with responses_lost(backend.client, "TransactWriteItems") as dropped:
        taken = arm(backend.store, task, "exec-2", until + 1)
    # Then exec-2 hears it took the task over, counted once, and exec-1 is marked taken over
    assert dropped == [1]
    assert taken is not None
    assert (taken.task.armed_by, taken.task.attempt, taken.taken_over_until_ms) == (
        "exec-2",
        2,
        until,
    )
    assert backend.store.firing.heartbeat("exec-1", until + 2, until + 20_000) is False


def test_a_retried_cancel_counts_as_done(backend: DynamoBackend, tasks: TaskFactory) -> None:
    """A client whose cancel went through but whose response was lost hears that it cancelled the task (the
    retry finds CANCELLED at the cancel's own instant), not that the task cannot be cancelled."""
    # Given a PENDING task, and the response to its cancel lost, the write applied
    task = tasks.create(NOW + 10_000)
    # When botocore sends the cancel again / Then the client hears that it cancelled the task
    with responses_lost(backend.client, "UpdateItem") as dropped:
        assert backend.store.client.cancel(task.task_id, NOW).status is TaskStatus.CANCELLED
    assert dropped == [1]


def test_a_retried_reschedule_counts_as_done(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given a PENDING task, and the response to its reschedule lost, the write applied
    task = tasks.create(NOW + 10_000)
    # When botocore sends the reschedule again / Then the client gets the moved task, not a refusal
    with responses_lost(backend.client, "UpdateItem") as dropped:
        moved = backend.store.client.reschedule(task.task_id, NOW + 20_000, NOW)
    assert dropped == [1]
    assert (moved.status, moved.due_ms) == (TaskStatus.PENDING, NOW + 20_000)
