"""The DynamoDB repository on moto: the conditional writes of the task life cycle, with exact lease edges."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings

from punctual.dynamodb.codec import item_to_task
from punctual.dynamodb.store import DynamoTaskStore
from punctual.errors import TaskConflictError, TaskNotFoundError, TaskStateError
from punctual.keys import BUCKET_MS, bucket_start, from_ms, index_key, shard_of
from punctual.model import FireRecord, LogAction, Task, TaskStatus
from support import candidate_of, due_candidates, json_payloads

LEASE_MS = 30_000


def due_ids(repo: DynamoTaskStore, task: Task, bucket_of_ms: int, until_ms: int) -> list[str]:
    shard = shard_of(task.task_id, repo.shard_count)
    return [c.task_id for c in due_candidates(repo, bucket_of_ms, shard, until_ms)]


def claimed(repo: DynamoTaskStore, task: Task, now_ms: int, batch: str = "batch-1") -> int:
    """Claim a PENDING task; returns its lease end."""
    assert repo.claim(candidate_of(task), batch, "poller-1", now_ms, LEASE_MS)
    return now_ms + LEASE_MS


# -- create / get -------------------------------------------------------------------------------------------
def test_create_stores_a_pending_task_and_get_reads_it(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a new task
    task = tasks.build(now_ms + 10_000, "t-new", payload={"video": "v-1", "n": [1, 2.5, None]})
    # When it is created
    stored, created = repo.create(task, now_ms)
    # Then it is stored PENDING, and get returns the same content
    assert created is True
    assert stored.status is TaskStatus.PENDING
    got = repo.get("t-new")
    assert got is not None
    assert got.status is TaskStatus.PENDING
    assert got.due_at == task.due_at
    assert got.payload == task.payload
    assert got.action == task.action
    assert got.content_hash() == task.content_hash()
    assert got.attempt == 0
    assert got.created_at is not None and got.created_at.timestamp() * 1000 == now_ms


def test_get_of_an_unknown_task_is_none(repo: DynamoTaskStore) -> None:
    assert repo.get("no-such-task") is None


def test_create_is_idempotent_on_equal_content(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a stored task
    task = tasks.build(now_ms + 10_000, "t-same")
    repo.create(task, now_ms)
    # When the same content is created again (a client retry), a little later
    existing, created = repo.create(task.model_copy(), now_ms + 500)
    # Then the existing task is returned and nothing new was created
    assert created is False
    assert existing.task_id == "t-same"
    assert existing.created_at is not None and existing.created_at.timestamp() * 1000 == now_ms


def test_create_with_different_content_conflicts(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a stored task
    task = tasks.build(now_ms + 10_000, "t-conflict", payload={"a": 1})
    repo.create(task, now_ms)
    # When another task with that id but another payload or due time is created
    for other in (
        task.model_copy(update={"payload": {"a": 2}}),
        tasks.build(now_ms + 10_001, "t-conflict", payload={"a": 1}),
    ):
        with pytest.raises(TaskConflictError) as info:
            repo.create(other, now_ms)
        # Then the error carries the stored task
        assert info.value.existing.payload == {"a": 1}
    assert repo.get("t-conflict").payload == {"a": 1}  # type: ignore[union-attr]


def test_create_due_in_the_past_lands_in_the_current_bucket(
    repo: DynamoTaskStore, tasks: Any, read_raw: Any, now_ms: int
) -> None:
    # Given a task due 5 minutes ago, written now
    task = tasks.create(now_ms - 5 * BUCKET_MS, "t-late")
    # Then its index key is the bucket of now (at or after any watermark), not of its due time
    shard = shard_of("t-late", repo.shard_count)
    assert read_raw("t-late")["due_bucket"]["S"] == index_key(now_ms, shard)
    assert due_ids(repo, task, now_ms, now_ms) == ["t-late"]
    assert due_ids(repo, task, task.due_ms, now_ms) == []


def test_create_due_in_the_future_lands_in_its_due_bucket(
    repo: DynamoTaskStore, tasks: Any, read_raw: Any, now_ms: int
) -> None:
    task = tasks.create(now_ms + 5 * BUCKET_MS, "t-future")
    assert read_raw("t-future")["due_bucket"]["S"] == index_key(task.due_ms, shard_of("t-future", repo.shard_count))


# -- claim and its lease --------------------------------------------------------------------------------------
def test_claim_pending_then_second_claim_loses(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a PENDING task
    task = tasks.create(now_ms + 10_000)
    # When two pollers claim it at the same instant
    first = repo.claim(candidate_of(task), "batch-a", "poller-a", now_ms, LEASE_MS)
    second = repo.claim(candidate_of(task), "batch-b", "poller-b", now_ms, LEASE_MS)
    # Then only the first owns it, for the lease
    assert (first, second) == (True, False)
    stored = repo.get(task.task_id)
    assert stored is not None
    assert stored.status is TaskStatus.CLAIMED
    assert stored.batch_id == "batch-a"
    assert stored.claimed_by == "poller-a"
    assert stored.attempt == 1
    assert stored.lease_until is not None and stored.lease_until.timestamp() * 1000 == now_ms + LEASE_MS


def test_claim_lease_edge_is_exact(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a CLAIMED task whose lease ends at L
    task = tasks.create(now_ms + 10_000)
    lease_end = claimed(repo, task, now_ms)
    stale = candidate_of(task, TaskStatus.CLAIMED, lease_end)
    # Then at L it is still owned, and at L + 1 it is claimable again
    assert stale.claimable_at(lease_end) is False
    assert repo.claim(stale, "batch-2", "poller-2", lease_end, LEASE_MS) is False
    assert stale.claimable_at(lease_end + 1) is True
    assert repo.claim(stale, "batch-2", "poller-2", lease_end + 1, LEASE_MS) is True
    again = repo.get(task.task_id)
    assert again is not None
    assert (again.batch_id, again.claimed_by, again.attempt) == ("batch-2", "poller-2", 2)


def test_armed_lease_edge_is_exact(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a task armed by an executor until L (which then died)
    task = tasks.create(now_ms + 10_000)
    claimed(repo, task, now_ms)
    lease_end = now_ms + 200_000
    assert repo.arm(task.task_id, "batch-1", "exec-1", lease_end) is not None
    stale = candidate_of(task, TaskStatus.ARMED, lease_end)
    # Then no poller can claim it at L, and one can at L + 1
    assert repo.claim(stale, "batch-2", "poller-2", lease_end, LEASE_MS) is False
    assert repo.claim(stale, "batch-2", "poller-2", lease_end + 1, LEASE_MS) is True
    # And the old executor can no longer record it
    assert repo.record("exec-1", FireRecord(task.task_id, TaskStatus.SUCCEEDED, 1.0, lease_end + 2, 0.5, None)) is False


def test_claim_requires_the_due_time_the_index_showed(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a candidate read from the index before the task was rescheduled
    task = tasks.create(now_ms + 10_000)
    old = candidate_of(task)
    repo.reschedule(task.task_id, now_ms + 20_000, now_ms)
    # Then the stale candidate cannot be claimed
    assert repo.claim(old, "batch-1", "poller-1", now_ms, LEASE_MS) is False


def test_claim_of_a_finished_task_loses(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    task = tasks.create(now_ms + 10_000)
    repo.cancel(task.task_id, now_ms)
    assert repo.claim(candidate_of(task), "batch-1", "poller-1", now_ms, LEASE_MS) is False


# -- arm and record -------------------------------------------------------------------------------------------
def test_arm_requires_the_matching_batch(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a task claimed under batch-1
    task = tasks.create(now_ms + 10_000)
    claimed(repo, task, now_ms)
    # When an executor holding another batch id tries to arm it, it loses
    assert repo.arm(task.task_id, "batch-other", "exec-1", now_ms + 200_000) is None
    # And the executor of batch-1 wins
    armed = repo.arm(task.task_id, "batch-1", "exec-1", now_ms + 200_000)
    assert armed is not None
    assert armed.status is TaskStatus.ARMED
    assert armed.armed_by == "exec-1"
    assert armed.lease_until is not None and armed.lease_until.timestamp() * 1000 == now_ms + 200_000


def test_arm_of_a_pending_task_loses(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    task = tasks.create(now_ms + 10_000)
    assert repo.arm(task.task_id, "batch-1", "exec-1", now_ms + 200_000) is None


def test_duplicate_delivery_loses_at_arm(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a batch armed by one executor
    task = tasks.create(now_ms + 10_000)
    claimed(repo, task, now_ms)
    assert repo.arm(task.task_id, "batch-1", "exec-1", now_ms + 200_000) is not None
    # When the same batch is delivered again to another executor
    second = repo.arm(task.task_id, "batch-1", "exec-2", now_ms + 200_000)
    # Then the second arm loses and the first executor still owns the task
    assert second is None
    assert repo.get(task.task_id).armed_by == "exec-1"  # type: ignore[union-attr]


def test_record_only_by_the_armed_executor(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a task armed by exec-1
    task = tasks.create(now_ms + 10_000)
    claimed(repo, task, now_ms)
    repo.arm(task.task_id, "batch-1", "exec-1", now_ms + 200_000)
    fired = now_ms + 10_000.25
    outcome = FireRecord(task.task_id, TaskStatus.SUCCEEDED, fired, now_ms + 10_003, 0.25, 1.75, None)
    # When another executor records it, nothing is written
    assert repo.record("exec-2", outcome) is False
    assert repo.get(task.task_id).status is TaskStatus.ARMED  # type: ignore[union-attr]
    # When exec-1 records it, the outcome and the fire details are stored
    assert repo.record("exec-1", outcome) is True
    done = repo.get(task.task_id)
    assert done is not None
    assert done.status is TaskStatus.SUCCEEDED
    assert done.drift_ms == 0.25
    assert done.drift_corrected_ms == 1.75
    assert done.fired_at is not None and done.fired_at.timestamp() * 1000 == now_ms + 10_000
    assert done.finished_at is not None and done.finished_at.timestamp() * 1000 == now_ms + 10_003
    assert done.lease_until is None
    # And a repeat of the same record by the same executor (a retried request whose response was lost) is
    # idempotent, while another executor still loses
    assert repo.record("exec-1", outcome) is True
    assert repo.record("exec-2", outcome) is False
    failed = FireRecord(task.task_id, TaskStatus.FAILED, fired, now_ms + 10_003, 0.25, 1.75, "boom")
    assert repo.record("exec-1", failed) is False


def test_record_removes_the_task_from_the_due_index(
    repo: DynamoTaskStore, tasks: Any, read_raw: Any, now_ms: int
) -> None:
    # Given an armed task that the index lists
    task = tasks.create(now_ms + 10_000)
    assert due_ids(repo, task, task.due_ms, task.due_ms) == [task.task_id]
    claimed(repo, task, now_ms)
    repo.arm(task.task_id, "batch-1", "exec-1", now_ms + 200_000)
    assert due_ids(repo, task, task.due_ms, task.due_ms) == [task.task_id]
    # When its outcome is recorded
    repo.record(
        "exec-1", FireRecord(task.task_id, TaskStatus.FAILED, now_ms + 10_000.0, now_ms + 10_100, 0.0, None, "HTTP 500")
    )
    # Then the index no longer lists it, and the base item keeps the outcome
    assert due_ids(repo, task, task.due_ms, task.due_ms + BUCKET_MS) == []
    item = read_raw(task.task_id)
    assert "due_bucket" not in item
    assert item["status"]["S"] == "FAILED"
    assert item["detail"]["S"] == "HTTP 500"


def test_finished_tasks_carry_a_ttl_of_the_retention(
    repo: DynamoTaskStore, tasks: Any, read_raw: Any, now_ms: int
) -> None:
    # Given a recorded, a cancelled and a missed task
    done, cancelled, missed = (tasks.create(now_ms + 10_000 + i) for i in range(3))
    claimed(repo, done, now_ms)
    repo.arm(done.task_id, "batch-1", "exec-1", now_ms + 200_000)
    repo.record("exec-1", FireRecord(done.task_id, TaskStatus.SUCCEEDED, now_ms + 10_000.0, now_ms + 10_050, 0.0, None))
    repo.cancel(cancelled.task_id, now_ms + 1)
    repo.mark_missed(candidate_of(missed), now_ms + 2, "late")
    # Then each carries expires_at = finished + retention, in epoch seconds (DynamoDB TTL's unit)
    retention_s = repo.retention_ms // 1000
    assert int(read_raw(done.task_id)["expires_at"]["N"]) == (now_ms + 10_050) // 1000 + retention_s
    assert int(read_raw(cancelled.task_id)["expires_at"]["N"]) == (now_ms + 1) // 1000 + retention_s
    assert int(read_raw(missed.task_id)["expires_at"]["N"]) == (now_ms + 2) // 1000 + retention_s
    # And an active task has none
    assert "expires_at" not in read_raw(tasks.create(now_ms + 20_000).task_id)


def test_fast_path_flag_marks_tasks_due_before_the_next_poll(
    repo: DynamoTaskStore, tasks: Any, read_raw: Any, now_ms: int
) -> None:
    # Given tasks due one ms before and exactly at the next poll's reach (poll interval + margin), written now
    inside = repo.create(tasks.build(now_ms + repo.fast_path_within_ms - 1), now_ms)[0]
    outside = repo.create(tasks.build(now_ms + repo.fast_path_within_ms), now_ms)[0]
    # Then only the one the poller may have swept past is flagged for the stream's fast path
    assert read_raw(inside.task_id)["fast_path"]["N"] == "1"
    assert read_raw(outside.task_id)["fast_path"]["N"] == "0"
    # When the far one is rescheduled to 2 s ahead, and the near one far away, the flags follow
    repo.reschedule(outside.task_id, now_ms + 2_000, now_ms)
    repo.reschedule(inside.task_id, now_ms + 10 * repo.fast_path_within_ms, now_ms)
    assert read_raw(outside.task_id)["fast_path"]["N"] == "1"
    assert read_raw(inside.task_id)["fast_path"]["N"] == "0"


def test_candidates_read_status_from_the_table_and_skip_finished(
    repo: DynamoTaskStore, tasks: Any, now_ms: int
) -> None:
    # Given a pending, a claimed and a cancelled task, and an id that does not exist
    pending, taken, gone = (tasks.create(now_ms + 10_000 + i) for i in range(3))
    lease = claimed(repo, taken, now_ms)
    repo.cancel(gone.task_id, now_ms)
    # When their candidates are read
    found = {c.task_id: c for c in repo.candidates([pending.task_id, taken.task_id, gone.task_id, "nope"])}
    # Then the active ones come with the table's status and lease; the finished and missing ones do not
    assert set(found) == {pending.task_id, taken.task_id}
    assert found[pending.task_id] == candidate_of(pending)
    assert found[taken.task_id] == candidate_of(taken, TaskStatus.CLAIMED, lease)


def test_query_index_lists_keys_of_one_shard_up_to_the_end(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given two tasks in the same minute and shard, one due after the window's end
    first = tasks.create(now_ms + 10_000)
    shard = shard_of(first.task_id, repo.shard_count)
    later_id = next(f"t-{i}" for i in range(1000) if shard_of(f"t-{i}", repo.shard_count) == shard)
    later = repo.create(tasks.build(now_ms + 20_000, later_id), now_ms)[0]
    # When the index is queried up to between them
    entries = repo.query_index(now_ms, shard, now_ms + 15_000)
    # Then only the first is listed, with its due time
    assert [(e.task_id, e.due_ms) for e in entries] == [(first.task_id, first.due_ms)]
    assert later.task_id in [e.task_id for e in repo.query_index(now_ms, shard, now_ms + 20_000)]


# -- many writes at once (one UpdateItem each, in parallel) --------------------------------------------------
def test_claim_many_keeps_each_condition(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given 101 pending tasks, of which one is already claimed by another poller and one is cancelled
    created = [tasks.create(now_ms + 10_000 + i) for i in range(101)]
    taken, cancelled = created[5], created[100]
    claimed(repo, taken, now_ms, batch="other-batch")
    repo.cancel(cancelled.task_id, now_ms)
    # When all of them are claimed at once
    pairs = [(candidate_of(t), f"batch-{i // 50}") for i, t in enumerate(created)]
    won = repo.claim_many(pairs, "poller-1", now_ms, LEASE_MS)
    # Then exactly the two whose condition fails lose, and every other claim is written with its batch id
    assert [i for i, ok in enumerate(won) if not ok] == [5, 100]
    stored_tasks = repo.get_many([t.task_id for t in created])
    for i, task in enumerate(created):
        stored = stored_tasks[task.task_id]
        if i == 5:
            assert stored.batch_id == "other-batch"
        elif i == 100:
            assert stored.status is TaskStatus.CANCELLED
        else:
            assert (stored.status, stored.batch_id, stored.claimed_by) == (
                TaskStatus.CLAIMED,
                f"batch-{i // 50}",
                "poller-1",
            )


def test_claim_many_of_one_and_of_none(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    task = tasks.create(now_ms + 10_000)
    assert repo.claim_many([], "poller-1", now_ms, LEASE_MS) == []
    assert repo.claim_many([(candidate_of(task), "b")], "poller-1", now_ms, LEASE_MS) == [True]
    # another batch loses; the same batch again (a retried request whose answer was lost) is idempotent
    assert repo.claim_many([(candidate_of(task), "c")], "poller-2", now_ms, LEASE_MS) == [False]
    assert repo.claim_many([(candidate_of(task), "b")], "poller-1", now_ms, LEASE_MS) == [True]


def test_arm_many_returns_the_armed_tasks_in_order(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given three tasks claimed under batch-1, one claimed under another batch, and an unknown id
    mine = [tasks.create(now_ms + 10_000 + i) for i in range(3)]
    other = tasks.create(now_ms + 10_000)
    for task in mine:
        claimed(repo, task, now_ms, batch="batch-1")
    claimed(repo, other, now_ms, batch="batch-2")
    ids = [mine[0].task_id, other.task_id, mine[1].task_id, "unknown-task", mine[2].task_id]
    # When the executor of batch-1 arms them all
    armed = repo.arm_many([(t, now_ms + 200_000) for t in ids], "batch-1", "exec-1")
    # Then it gets its own tasks back, armed, and None for the others, position by position
    assert [a.task_id if a else None for a in armed] == [mine[0].task_id, None, mine[1].task_id, None, mine[2].task_id]
    assert all(a.status is TaskStatus.ARMED and a.armed_by == "exec-1" for a in armed if a is not None)
    assert repo.get(other.task_id).status is TaskStatus.CLAIMED  # type: ignore[union-attr]
    # And a duplicate delivery arms nothing
    assert repo.arm_many([(t.task_id, now_ms + 200_000) for t in mine], "batch-1", "exec-2") == [None] * 3


def test_record_many_writes_only_what_this_executor_owns(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given two tasks armed by exec-1 and one armed by exec-2
    created = [tasks.create(now_ms + 10_000 + i) for i in range(3)]
    for i, task in enumerate(created):
        claimed(repo, task, now_ms)
        repo.arm(task.task_id, "batch-1", "exec-2" if i == 1 else "exec-1", now_ms + 200_000)
    records = [FireRecord(t.task_id, TaskStatus.SUCCEEDED, t.due_ms + 0.5, t.due_ms + 2, 0.5, None) for t in created]
    # When exec-1 records all three
    written = repo.record_many("exec-1", records)
    # Then its own two are written and the third is left to its owner
    assert written == [True, False, True]
    assert [repo.get(t.task_id).status for t in created] == [  # type: ignore[union-attr]
        TaskStatus.SUCCEEDED,
        TaskStatus.ARMED,
        TaskStatus.SUCCEEDED,
    ]
    assert repo.record_many("exec-1", []) == []


def test_get_many(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    created = [tasks.create(now_ms + 10_000 + i) for i in range(105)]
    found = repo.get_many([t.task_id for t in created] + ["unknown-task"])
    assert set(found) == {t.task_id for t in created}
    assert found[created[0].task_id].due_ms == created[0].due_ms
    assert repo.get_many([]) == {}


def test_release_hands_an_armed_task_back(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a task armed by exec-1
    task = tasks.create(now_ms + 10_000)
    claimed(repo, task, now_ms)
    repo.arm(task.task_id, "batch-1", "exec-1", now_ms + 200_000)
    # When another executor tries to release it, nothing happens
    assert repo.release(task.task_id, "exec-2") is False
    # When exec-1 releases it (a clean shutdown before the fire)
    assert repo.release(task.task_id, "exec-1") is True
    # Then it is PENDING again, without owner or lease, still in the index, and claimable at once
    back = repo.get(task.task_id)
    assert back is not None
    assert back.status is TaskStatus.PENDING
    assert (back.batch_id, back.armed_by, back.lease_until) == (None, None, None)
    assert due_ids(repo, task, task.due_ms, task.due_ms) == [task.task_id]
    assert repo.claim(candidate_of(task), "batch-2", "poller-1", now_ms + 1, LEASE_MS) is True
    # And the batch it was armed for can no longer arm it
    assert repo.arm(task.task_id, "batch-1", "exec-1", now_ms + 200_000) is None


# -- cancel and reschedule ----------------------------------------------------------------------------------
def test_cancel_pending(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    task = tasks.create(now_ms + 10_000)
    cancelled = repo.cancel(task.task_id, now_ms + 1)
    assert cancelled.status is TaskStatus.CANCELLED
    assert cancelled.finished_at is not None and cancelled.finished_at.timestamp() * 1000 == now_ms + 1
    assert due_ids(repo, task, task.due_ms, task.due_ms) == []


def test_cancel_claimed_then_arm_fails(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a task claimed by a poller, its executor not yet armed
    task = tasks.create(now_ms + 10_000)
    claimed(repo, task, now_ms)
    # When the client cancels it
    assert repo.cancel(task.task_id, now_ms + 1).status is TaskStatus.CANCELLED
    # Then its executor loses at arm: it will never fire
    assert repo.arm(task.task_id, "batch-1", "exec-1", now_ms + 200_000) is None
    assert repo.get(task.task_id).status is TaskStatus.CANCELLED  # type: ignore[union-attr]


def test_cancel_armed_within_its_lease_is_refused(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given a task armed until L
    task = tasks.create(now_ms + 10_000)
    claimed(repo, task, now_ms)
    lease_end = now_ms + 200_000
    repo.arm(task.task_id, "batch-1", "exec-1", lease_end)
    # When the client cancels it while the lease is live (up to and including L)
    for at in (now_ms + 1, lease_end):
        with pytest.raises(TaskStateError) as info:
            repo.cancel(task.task_id, at)
        # Then the error carries the task as it was: ARMED, owned by its executor
        assert info.value.task.status is TaskStatus.ARMED
        assert info.value.task.armed_by == "exec-1"
    # And one millisecond after the lease, the cancel wins (the executor is presumed dead)
    assert repo.cancel(task.task_id, lease_end + 1).status is TaskStatus.CANCELLED


def test_cancel_of_a_finished_task_is_refused(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    task = tasks.create(now_ms + 10_000)
    repo.cancel(task.task_id, now_ms)
    with pytest.raises(TaskStateError) as info:
        repo.cancel(task.task_id, now_ms + 1)
    assert info.value.task.status is TaskStatus.CANCELLED


def test_cancel_or_reschedule_of_an_unknown_task(repo: DynamoTaskStore, now_ms: int) -> None:
    with pytest.raises(TaskNotFoundError):
        repo.cancel("nobody", now_ms)
    with pytest.raises(TaskNotFoundError):
        repo.reschedule("nobody", now_ms + 1_000, now_ms)


def test_reschedule_moves_due_and_bucket_and_old_batch_loses(
    repo: DynamoTaskStore, tasks: Any, read_raw: Any, now_ms: int
) -> None:
    # Given a task claimed by batch-1
    task = tasks.create(now_ms + 10_000)
    claimed(repo, task, now_ms)
    new_due = now_ms + 10 * BUCKET_MS + 123
    # When the client moves it ten minutes later
    moved = repo.reschedule(task.task_id, new_due, now_ms + 1)
    # Then it is PENDING again, due later, in the bucket of its new due time, with a matching content hash
    assert moved.status is TaskStatus.PENDING
    assert moved.due_ms == new_due
    assert moved.batch_id is None and moved.lease_until is None
    item = read_raw(task.task_id)
    assert item["due_bucket"]["S"] == index_key(new_due, shard_of(task.task_id, repo.shard_count))
    assert item["content_hash"]["S"] == task.model_copy(update={"due_at": moved.due_at}).content_hash()
    assert due_ids(repo, task, task.due_ms, task.due_ms + BUCKET_MS) == []
    assert due_ids(repo, task, new_due, new_due) == [task.task_id]
    # And the executor of the old batch loses at arm
    assert repo.arm(task.task_id, "batch-1", "exec-1", now_ms + 200_000) is None


def test_reschedule_armed_within_lease_is_refused(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    task = tasks.create(now_ms + 10_000)
    claimed(repo, task, now_ms)
    repo.arm(task.task_id, "batch-1", "exec-1", now_ms + 200_000)
    with pytest.raises(TaskStateError):
        repo.reschedule(task.task_id, now_ms + 60_000, now_ms + 1)
    assert repo.get(task.task_id).due_ms == task.due_ms  # type: ignore[union-attr]


def test_create_after_reschedule_is_idempotent_on_the_new_content(
    repo: DynamoTaskStore, tasks: Any, now_ms: int
) -> None:
    task = tasks.create(now_ms + 10_000, "t-moved")
    moved = repo.reschedule("t-moved", now_ms + 20_000, now_ms)
    assert repo.create(task.model_copy(update={"due_at": moved.due_at}), now_ms)[1] is False
    with pytest.raises(TaskConflictError):
        repo.create(task, now_ms)


# -- missed, watermark, oldest --------------------------------------------------------------------------------
def test_mark_missed(repo: DynamoTaskStore, tasks: Any, read_raw: Any, now_ms: int) -> None:
    # Given a pending task long overdue
    task = tasks.create(now_ms - 5 * BUCKET_MS, now_ms=now_ms - 6 * BUCKET_MS)
    # When the poller declares it missed
    assert repo.mark_missed(candidate_of(task), now_ms, "found 300000 ms after due") is True
    # Then it is MISSED, out of the index, with the reason
    missed = repo.get(task.task_id)
    assert missed is not None
    assert missed.status is TaskStatus.MISSED
    assert missed.detail == "found 300000 ms after due"
    assert "due_bucket" not in read_raw(task.task_id)
    # And a second declaration (another poller) loses
    assert repo.mark_missed(candidate_of(task), now_ms, "again") is False


def test_mark_missed_respects_a_live_lease(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    task = tasks.create(now_ms + 10_000)
    lease_end = claimed(repo, task, now_ms)
    stale = candidate_of(task, TaskStatus.CLAIMED, lease_end)
    assert repo.mark_missed(stale, lease_end, "x") is False
    assert repo.mark_missed(stale, lease_end + 1, "x") is True


def test_watermark_only_moves_forward(repo: DynamoTaskStore, now_ms: int) -> None:
    # Given no watermark yet
    assert repo.get_watermark() is None
    start = bucket_start(now_ms)
    # When it is set, then moved back, then to the same value, then forward
    assert repo.advance_watermark(start) is True
    assert repo.advance_watermark(start - BUCKET_MS) is False
    assert repo.advance_watermark(start) is False
    assert repo.get_watermark() == start
    assert repo.advance_watermark(start + BUCKET_MS) is True
    # Then only the forward moves took effect
    assert repo.get_watermark() == start + BUCKET_MS


def test_watermark_item_is_not_a_task(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    repo.advance_watermark(bucket_start(now_ms))
    tasks.create(now_ms + 10_000, "t-listed")
    # The watermark shares the table but is never listed as a task
    assert [t.task_id for t in repo.list_tasks()] == ["t-listed"]
    assert repo.get_watermark() == bucket_start(now_ms)


def test_oldest_active_due(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    # Given an empty index
    assert repo.oldest_active_due() is None
    # When tasks are due at several times, and the oldest of them is finished
    done = tasks.create(now_ms - 9 * BUCKET_MS, now_ms=now_ms - 10 * BUCKET_MS)
    oldest_active = tasks.create(now_ms - 3 * BUCKET_MS + 7, now_ms=now_ms - 4 * BUCKET_MS)
    tasks.create(now_ms + 2 * BUCKET_MS)
    repo.cancel(done.task_id, now_ms)
    # Then it answers one bucket before the bucket of the oldest active due time
    assert repo.oldest_active_due() == bucket_start(oldest_active.due_ms) - BUCKET_MS


def test_scan_filters_by_status_and_due_range(repo: DynamoTaskStore, tasks: Any, now_ms: int) -> None:
    a = tasks.create(now_ms + 1_000)
    b = tasks.create(now_ms + 2_000)
    c = tasks.create(now_ms + 3_000)
    repo.cancel(b.task_id, now_ms)
    assert {t.task_id for t in repo.list_tasks([TaskStatus.PENDING])} == {a.task_id, c.task_id}
    assert {t.task_id for t in repo.list_tasks(due_from_ms=now_ms + 2_000, due_to_ms=now_ms + 3_000)} == {b.task_id}
    assert len(list(repo.list_tasks(limit=2))) == 2


# -- payload round trip through the store -------------------------------------------------------------------
@hypothesis_settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=json_payloads)
def test_any_json_payload_round_trips_through_the_table(
    repo: DynamoTaskStore, dynamodb: Any, now_ms: int, payload: Any
) -> None:
    # Given a task with any JSON payload, written by the repository
    task = Task(task_id=f"p-{uuid.uuid4().hex}", due_at=from_ms(now_ms + 10_000), action=LogAction(), payload=payload)
    repo.create(task, now_ms)
    # When the raw item is read back and turned into a task
    raw = dynamodb.get_item(TableName=repo.table_name, Key={"task_id": {"S": task.task_id}}, ConsistentRead=True)
    again = item_to_task(raw["Item"])
    # Then the payload and the content hash are unchanged
    assert again.payload == payload
    assert again.content_hash() == task.content_hash()
