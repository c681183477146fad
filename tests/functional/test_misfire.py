"""The misfire policy on moto: "skip" (the default) records an occurrence MISSED past its grace, "fire_late"
fires it and flags it late - in the poller (explicit ``now``), the fast path and the executor (real clock)."""

from __future__ import annotations

from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.clock import SystemClock
from punctual.domain.decisions import misfire_decision
from punctual.domain.events import BatchEvent, BatchTask
from punctual.domain.keys import BUCKET_MS, from_ms, shard_of
from punctual.domain.model import Task, TaskStatus
from punctual.errors import InvalidTaskError
from punctual.polling.fastpath import candidate_of_record
from punctual.runtime.client import Client
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.codec import candidate_of_item
from punctual.targets import LogAction
from support import FakeClock, RecordingInvoker, due_candidates, executor_on, read_task


@pytest.mark.parametrize(
    ("late_ms", "policy", "decision"),
    [
        (0, "skip", "fire"),
        (1_000, "skip", "fire"),  # exactly at the grace: still on time
        (1_000, "fire_late", "fire"),
        (1_001, "skip", "miss"),  # one ms past it: the policy applies
        (1_001, "fire_late", "fire_late"),
        (1_000.5, "skip", "miss"),  # the executor measures late in fractions of a ms
    ],
)
def test_misfire_decision_edges(late_ms: float, policy: str, decision: str) -> None:
    # Given a grace of 1 s / When an occurrence would start late_ms after due / Then:
    assert misfire_decision(late_ms, 1_000, policy) == decision


def test_policy_is_stored_defaults_to_skip_and_is_part_of_the_content(
    store: DynamoStores, tasks: Any, read_raw: Any, now_ms: int
) -> None:
    # Given a task with the default policy and one with fire_late
    default = tasks.create(now_ms + 5_000, "default")
    late = tasks.create(now_ms + 5_000, "late", misfire_policy="fire_late")
    # Then both are stored with their policy, and read back with it
    assert read_raw(default.task_id)["misfire_policy"] == {"S": "skip"}
    assert read_task(store, late.task_id).misfire_policy == "fire_late"
    assert read_task(store, default.task_id).misfire_policy == "skip"
    # And the policy is part of the task's content: same id, other policy is a conflict, but the default
    # leaves the hash of a task stored before the policy existed unchanged
    assert default.content_hash() != default.model_copy(update={"misfire_policy": "fire_late"}).content_hash()
    assert (
        Task(task_id="x", due_at=default.due_at, action=LogAction()).content_hash()
        == Task(task_id="x", due_at=default.due_at, action=LogAction(), misfire_policy="skip").content_hash()
    )


def test_an_item_written_before_the_policy_existed_reads_as_skip(
    store: DynamoStores, tasks: Any, dynamodb: Any, now_ms: int
) -> None:
    # Given a stored task whose item has no misfire_policy attribute (an older writer)
    task = tasks.create(now_ms + 5_000, "old")
    dynamodb.update_item(
        TableName=store.config.table_name, Key={"task_id": {"S": "old"}}, UpdateExpression="REMOVE misfire_policy"
    )
    # When it is read, and found as a candidate
    found = store.dispatch.candidates([task.task_id])
    # Then it is a "skip" task
    assert read_task(store, "old").misfire_policy == "skip"
    assert found[0].misfire_policy == "skip"


@pytest.mark.parametrize("policy", ["skip", "fire_late"])
def test_poller_dispatches_overdue_tasks_with_their_policy(
    store: DynamoStores, tasks: Any, settings: Settings, now_ms: int, policy: str
) -> None:
    # Given two tasks with a 60 s grace and this policy, written on time long ago: one overdue by exactly its
    # grace, one by a millisecond more
    grace = 60_000
    written = now_ms - 10 * BUCKET_MS
    at_edge = tasks.create(now_ms - grace, "at-edge", now_ms=written, misfire_grace_ms=grace, misfire_policy=policy)
    beyond = tasks.create(now_ms - grace - 1, "beyond", now_ms=written, misfire_grace_ms=grace, misfire_policy=policy)
    invoker = RecordingInvoker()
    # When the poller finds them
    report = poller_on(store, invoker, settings, poller_id="p").poll(now_ms)
    # Then both go to an executor, each with its grace and (when not the default) its policy: the executor
    # applies the policy (see the executor test below); the poller writes nothing
    assert report.dispatched == 2
    assert sorted(invoker.task_ids) == sorted([at_edge.task_id, beyond.task_id])
    assert read_task(store, beyond.task_id).status is TaskStatus.PENDING
    assert {t.misfire_policy for e in invoker.events for t in e.tasks} == {policy}


def test_fast_path_reads_the_policy_from_the_stream_image() -> None:
    # Given a stream record of a fire_late task, and one of a task written before the policy existed
    image = {
        "task_id": {"S": "t1"},
        "due_ms": {"N": "1000"},
        "status": {"S": "PENDING"},
        "fast_path": {"N": "1"},
        "misfire_grace_ms": {"N": "0"},
        "misfire_policy": {"S": "fire_late"},
    }
    old = {k: v for k, v in image.items() if k != "misfire_policy"}
    # When they become candidates
    late = candidate_of_record({"eventName": "INSERT", "dynamodb": {"NewImage": image}}, candidate_of_item)
    skip = candidate_of_record({"eventName": "INSERT", "dynamodb": {"NewImage": old}}, candidate_of_item)
    # Then each carries its policy
    assert late is not None
    assert late.misfire_policy == "fire_late"
    assert skip is not None
    assert skip.misfire_policy == "skip"


@pytest.mark.parametrize("policy", ["skip", "fire_late"])
def test_executor_applies_the_policy_to_a_task_it_can_only_start_past_its_grace(
    store: DynamoStores, tasks: Any, settings: Settings, policy: str
) -> None:
    # Given a task with no grace, due 5 s ago, dispatched on time (its executor came late)
    clock = SystemClock()
    executor = executor_on(store, settings, clock)
    now = int(clock.wall_ms())
    due = now - 5_000
    task = tasks.create(due, now_ms=due - 1_000, misfire_grace_ms=0, misfire_policy=policy)
    assert any(
        c.task_id == task.task_id
        for c in due_candidates(store, due, shard_of(task.task_id, store.config.shard_count), now)
    )
    event = BatchEvent(
        batch_id="late-batch", tasks=[BatchTask(task_id=task.task_id, due_ms=due, grace_ms=0, misfire_policy=policy)]
    )
    # When the executor runs it
    report = executor.run_batch(event)
    done = read_task(store, task.task_id)
    if policy == "skip":
        # Then (skip) it is not fired but recorded MISSED
        assert (report.fired, report.missed, report.late) == (0, 1, 0)
        assert done.status is TaskStatus.MISSED
        assert done.fired_at is None
        assert not done.late
    else:
        # Then (fire_late) it fires at once, and its record is flagged late and says how late
        assert (report.fired, report.succeeded, report.missed, report.late) == (1, 1, 0, 1)
        assert done.status is TaskStatus.SUCCEEDED
        assert done.late is True
        assert done.fired_at is not None
        assert done.drift_ms is not None
        assert done.drift_ms >= 5_000
        assert done.detail is not None
        assert "ms late, past its grace of 0 ms (policy fire_late)" in done.detail


def test_client_schedules_with_a_policy_and_accepts_a_past_due_fire_late_task(
    dynamodb: Any, settings: Settings, now_ms: int
) -> None:
    # Given a client
    client = Client(settings, dynamodb=dynamodb, clock=FakeClock(wall_ms=now_ms))

    # When it schedules a fire_late task due 10 min ago (past a 1 s grace)
    task = client.schedule(
        from_ms(now_ms - 600_000), LogAction(), task_id="late-one", misfire_grace=1_000, misfire_policy="fire_late"
    )
    # Then it is stored PENDING with its policy, while a skip task that late is refused
    assert client.get("late-one") is not None
    assert task.misfire_policy == "fire_late"
    with pytest.raises(InvalidTaskError):
        client.schedule(from_ms(now_ms - 600_000), LogAction(), task_id="skip-one", misfire_grace=1_000)
    # And an unknown policy is refused naming the field
    with pytest.raises(InvalidTaskError) as err:
        client.schedule(from_ms(now_ms + 1_000), LogAction(), misfire_policy="later")
    assert err.value.field == "misfire_policy"
