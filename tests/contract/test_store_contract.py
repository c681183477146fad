"""The contract of the store port (:class:`punctual.store.TaskStore`), run on every implementation.

Each test talks to the store through the port's methods only, with an explicit ``now`` everywhere: the
life-cycle rules of the port's docstring, each transition allowed and refused, lease ends to the millisecond,
what the loser of a conditional write sees, idempotent create, retry and redrive, and what a look for due
work finds. A new implementation is done when it passes this suite (see ``contract_tools.STORE_KINDS``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from contract_tools import (
    ARMED_LEASE_MS,
    LEASE_MS,
    NOW,
    TaskFactory,
    arm,
    armed_task,
    candidate,
    claim,
    due_ids,
    miss,
    ms,
    record,
    stored,
    succeeded,
)
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings

from punctual.errors import TaskConflictError, TaskNotFoundError, TaskStateError
from punctual.keys import BUCKET_MS, from_ms
from punctual.model import FireRecord, LogAction, Task, TaskStatus
from punctual.retry import RetryPolicy
from punctual.store import TaskStore
from support import json_payloads

P, C, A = TaskStatus.PENDING, TaskStatus.CLAIMED, TaskStatus.ARMED
S, F, M, X = TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.MISSED, TaskStatus.CANCELLED


# -- create and read ---------------------------------------------------------------------------------------------
def test_create_stores_a_pending_task_and_get_reads_it(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a new task
    task = tasks.build(NOW + 10_000, "t-new", payload={"video": "v-1", "n": [1, 2.5, None]})
    # When it is created
    created_task, created = store.create(task, NOW)
    # Then it is stored PENDING, and get returns the same content, attempt 0, created at NOW
    assert created is True
    assert created_task.status is P
    got = stored(store, "t-new")
    assert got.status is P
    assert (got.due_at, got.payload, got.action) == (task.due_at, task.payload, task.action)
    assert got.content_hash() == task.content_hash()
    assert got.attempt == 0
    assert ms(got.created_at) == NOW
    assert (got.lease_until, got.batch_id, got.armed_by, got.finished_at) == (None, None, None, None)


def test_get_of_an_unknown_task_is_none(store: TaskStore) -> None:
    # Given an empty store / When an unknown id is read / Then there is nothing
    assert store.get("no-such-task") is None
    assert store.get_many(["no-such-task"]) == {}


def test_create_is_idempotent_on_equal_content(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a stored task
    task = tasks.build(NOW + 10_000, "t-same")
    store.create(task, NOW)
    # When the same content is created again (a client retry), a little later
    existing, created = store.create(task.model_copy(), NOW + 500)
    # Then the existing task is returned and nothing new was created
    assert created is False
    assert existing.task_id == "t-same"
    assert ms(existing.created_at) == NOW
    assert ms(stored(store, "t-same").created_at) == NOW


def test_create_with_different_content_conflicts(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a stored task
    task = tasks.build(NOW + 10_000, "t-conflict", payload={"a": 1})
    store.create(task, NOW)
    # When another task with that id but another payload, due time or grace is created
    for other in (
        task.model_copy(update={"payload": {"a": 2}}),
        tasks.build(NOW + 10_001, "t-conflict", payload={"a": 1}),
        task.model_copy(update={"misfire_grace_ms": 1}),
    ):
        with pytest.raises(TaskConflictError) as info:
            store.create(other, NOW)
        # Then the error carries the stored task, which is unchanged
        assert info.value.existing.payload == {"a": 1}
    assert stored(store, "t-conflict").payload == {"a": 1}


def test_create_after_reschedule_is_idempotent_on_the_new_content(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task moved to a new due time
    task = tasks.create(NOW + 10_000, "t-moved")
    moved = store.reschedule("t-moved", NOW + 20_000, NOW)
    # When the client creates it again with the new due time / with the old one
    # Then the first is the same task, the second a conflict
    assert store.create(task.model_copy(update={"due_at": moved.due_at}), NOW)[1] is False
    with pytest.raises(TaskConflictError):
        store.create(task, NOW)


@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=json_payloads)
def test_any_json_payload_round_trips_through_the_store(store: TaskStore, payload: Any) -> None:
    # Given a task with any JSON payload
    task = Task(task_id=f"p-{uuid.uuid4().hex}", due_at=from_ms(NOW + 10_000), action=LogAction(), payload=payload)
    # When it is created and read back
    store.create(task, NOW)
    again = stored(store, task.task_id)
    # Then the payload and the content hash are unchanged, and the same content creates nothing new
    assert again.payload == payload
    assert again.content_hash() == task.content_hash()
    assert store.create(task, NOW)[1] is False


def test_get_many_reads_every_existing_task(store: TaskStore, tasks: TaskFactory) -> None:
    # Given 25 tasks
    created = [tasks.create(NOW + 10_000 + i) for i in range(25)]
    # When they are read together with an unknown id, one of them twice
    found = store.get_many([t.task_id for t in created] + ["unknown-task", created[3].task_id])
    # Then every existing one is there, with its content, and nothing else
    assert set(found) == {t.task_id for t in created}
    assert all(found[t.task_id].due_ms == t.due_ms and found[t.task_id].payload == t.payload for t in created)
    assert store.get_many([]) == {}


def test_list_tasks_filters_by_status_and_due_range(store: TaskStore, tasks: TaskFactory) -> None:
    # Given three tasks, the middle one cancelled, and a look for due work (which may keep its own bookkeeping)
    a, b, c = (tasks.create(NOW + 1_000 * i) for i in (1, 2, 3))
    store.cancel(b.task_id, NOW)
    store.find_due(NOW, NOW + 90_000)
    # When tasks are listed / Then only tasks are listed, by status, by due range (from included, to excluded),
    # and at most ``limit`` of them
    assert sorted(t.task_id for t in store.list_tasks()) == sorted([a.task_id, b.task_id, c.task_id])
    assert {t.task_id for t in store.list_tasks([P])} == {a.task_id, c.task_id}
    assert {t.task_id for t in store.list_tasks([P, X])} == {a.task_id, b.task_id, c.task_id}
    assert {t.task_id for t in store.list_tasks(due_from_ms=b.due_ms, due_to_ms=c.due_ms)} == {b.task_id}
    assert {t.task_id for t in store.list_tasks([P], due_from_ms=b.due_ms)} == {c.task_id}
    assert len(list(store.list_tasks(limit=2))) == 2


# -- every life-cycle edge ---------------------------------------------------------------------------------------
AT = NOW + 100_000  # when the change under test is tried
STATES = ["PENDING", "CLAIMED", "CLAIMED, lease ended", "ARMED", "ARMED, lease ended",
          "SUCCEEDED", "FAILED", "MISSED", "CANCELLED"]


def put_in_every_state(store: TaskStore, tasks: TaskFactory) -> dict[str, Task]:
    """One new task (due NOW + 10 s) in each of STATES, as seen at AT: claimed into ``batch-1``, armed by
    ``exec-1``; finished ones by another executor (``exec-0``). Batched, so that the table stays quick."""
    t = {state: tasks.create(NOW + 10_000, task_id=f"t-{i}") for i, state in enumerate(STATES)}

    def claim_all(states: list[str], now_ms: int) -> None:
        assert store.claim_many([(candidate(t[s]), "batch-1") for s in states], "poller-1", now_ms, LEASE_MS) == [
            True] * len(states)

    claim_all(["CLAIMED"], AT - 1_000)  # lease until AT + 29 s
    claim_all(["CLAIMED, lease ended"], AT - LEASE_MS - 1)  # lease until AT - 1
    claim_all(["ARMED", "ARMED, lease ended", "SUCCEEDED", "FAILED"], NOW)
    leases = [(t["ARMED"].task_id, AT + ARMED_LEASE_MS), (t["ARMED, lease ended"].task_id, AT - 1)]
    assert None not in store.arm_many(leases, "batch-1", "exec-1")
    assert None not in store.arm_many([(t[s].task_id, AT) for s in ("SUCCEEDED", "FAILED")], "batch-1", "exec-0")
    assert store.record_many("exec-0", [succeeded(t["SUCCEEDED"]), succeeded(t["FAILED"], outcome=F)]) == [True] * 2
    assert miss(store, t["MISSED"], NOW)
    store.cancel(t["CANCELLED"].task_id, NOW)
    now = store.get_many([task.task_id for task in t.values()])
    return {state: now[task.task_id] for state, task in t.items()}


def _changed(change: Callable[[], Any]) -> bool:
    """Whether a cancel or reschedule went through; a refusal must carry the task as it was."""
    try:
        change()
    except TaskStateError as exc:
        assert isinstance(exc.task, Task)
        return False
    return True


def _retry(task: Task) -> FireRecord:
    return FireRecord(task.task_id, P, float(task.due_ms), AT, 0.0, None, "HTTP 500", retry_delay_ms=1_000,
                      retry_due_ms=AT + 1_000, first_due_ms=task.due_ms)


CHANGES: dict[str, tuple[Callable[[TaskStore, Task], bool], TaskStatus, set[str]]] = {
    # change: (how it is tried at AT, the status it leads to, the states it is allowed from)
    "claim": (lambda s, t: claim(s, t, AT, batch="batch-2", poller="poller-2"), C,
              {"PENDING", "CLAIMED, lease ended", "ARMED, lease ended"}),
    "miss": (lambda s, t: miss(s, t, AT), M, {"PENDING", "CLAIMED, lease ended", "ARMED, lease ended"}),
    "arm": (lambda s, t: arm(s, t.task_id, "batch-1", "exec-2", AT + ARMED_LEASE_MS) is not None, A,
            {"CLAIMED", "CLAIMED, lease ended"}),
    "record": (lambda s, t: record(s, "exec-1", succeeded(t, AT)), S, {"ARMED", "ARMED, lease ended"}),
    "retry": (lambda s, t: record(s, "exec-1", _retry(t)), P, {"ARMED", "ARMED, lease ended"}),
    "release": (lambda s, t: s.release(t.task_id, "exec-1"), P, {"ARMED", "ARMED, lease ended"}),
    "cancel": (lambda s, t: _changed(lambda: s.cancel(t.task_id, AT)), X,
               {"PENDING", "CLAIMED", "CLAIMED, lease ended", "ARMED, lease ended"}),
    "reschedule": (lambda s, t: _changed(lambda: s.reschedule(t.task_id, AT + 60_000, AT)), P,
                   {"PENDING", "CLAIMED", "CLAIMED, lease ended", "ARMED, lease ended"}),
    "redrive": (lambda s, t: s.redrive_many([t.task_id], AT) == [True], P, {"FAILED"}),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_each_change_is_allowed_exactly_from_the_states_the_life_cycle_says(
    store: TaskStore, tasks: TaskFactory, change: str
) -> None:
    # Given one task in each state of the life cycle (as seen at AT)
    before = put_in_every_state(store, tasks)
    assert {state: task.status.value for state, task in before.items()} == {s: s.partition(",")[0] for s in STATES}
    attempt, target, allowed = CHANGES[change]
    # When the change is tried on each of them at AT
    won = {state: attempt(store, task) for state, task in before.items()}
    after = store.get_many([task.task_id for task in before.values()])
    outcome = {state: (won[state], after[task.task_id].status) for state, task in before.items()}
    # Then it goes through exactly where allowed, to its target status; elsewhere the task is left as it was
    expected = {state: (True, target) if state in allowed else (False, task.status) for state, task in before.items()}
    assert outcome == expected


# -- claim and its lease -------------------------------------------------------------------------------------------
def test_a_claim_takes_the_task_for_its_lease_and_a_second_claimer_loses(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a PENDING task
    task = tasks.create(NOW + 10_000)
    # When two pollers claim it at the same instant
    first = claim(store, task, NOW, batch="batch-a", poller="poller-a")
    second = claim(store, task, NOW, batch="batch-b", poller="poller-b")
    # Then only the first owns it, for the lease, and the attempt count went up by one
    assert (first, second) == (True, False)
    got = stored(store, task.task_id)
    assert (got.status, got.batch_id, got.claimed_by, got.attempt) == (C, "batch-a", "poller-a", 1)
    assert ms(got.lease_until) == NOW + LEASE_MS


def test_a_claim_lease_ends_at_its_exact_millisecond(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a CLAIMED task whose lease ends at L
    task = tasks.create(NOW + 10_000)
    assert claim(store, task, NOW)
    lease_end = NOW + LEASE_MS
    held = stored(store, task.task_id)
    assert ms(held.lease_until) == lease_end
    assert candidate(held).claimable_at(lease_end) is False
    assert candidate(held).claimable_at(lease_end + 1) is True
    # When another poller claims or misses it at L / Then it is still owned
    assert claim(store, held, lease_end, batch="batch-2", poller="poller-2") is False
    assert miss(store, held, lease_end) is False
    # When it claims it at L + 1 / Then it takes it over: a new batch, a new lease, attempt 2
    assert claim(store, held, lease_end + 1, batch="batch-2", poller="poller-2") is True
    again = stored(store, task.task_id)
    assert (again.batch_id, again.claimed_by, again.attempt) == ("batch-2", "poller-2", 2)
    assert ms(again.lease_until) == lease_end + 1 + LEASE_MS
    # And the first batch can no longer arm it
    assert arm(store, task.task_id, batch="batch-1") is None


def test_a_claim_lease_that_ended_can_be_missed_at_the_next_millisecond(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a CLAIMED task whose lease ends at L (its executor never came)
    task = tasks.create(NOW + 10_000)
    assert claim(store, task, NOW)
    lease_end = NOW + LEASE_MS
    # When the poller finds it past its grace at L + 1 / Then it is MISSED
    assert miss(store, stored(store, task.task_id), lease_end + 1, "no executor armed it") is True
    assert stored(store, task.task_id).status is M


def test_an_armed_lease_ends_at_its_exact_millisecond(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task armed until L by an executor that then died
    lease_end = NOW + ARMED_LEASE_MS
    held = armed_task(store, tasks, lease_until_ms=lease_end)
    assert ms(held.lease_until) == lease_end
    # When a poller, a cancel or a reschedule comes at L / Then the executor still owns it
    assert claim(store, held, lease_end, batch="batch-2", poller="poller-2") is False
    assert miss(store, held, lease_end) is False
    with pytest.raises(TaskStateError):
        store.cancel(held.task_id, lease_end)
    with pytest.raises(TaskStateError):
        store.reschedule(held.task_id, lease_end + 60_000, lease_end)
    # When a poller comes at L + 1 / Then it takes it over
    assert claim(store, held, lease_end + 1, batch="batch-2", poller="poller-2") is True
    # And the old executor can no longer record it
    assert record(store, "exec-1", succeeded(held, lease_end + 2)) is False
    assert stored(store, held.task_id).status is C


def test_an_executor_can_still_record_after_its_lease_while_no_one_took_the_task_over(
    store: TaskStore, tasks: TaskFactory
) -> None:
    # Given a task armed until L, its executor late (nobody claimed the task after L)
    held = armed_task(store, tasks, lease_until_ms=NOW + 20_000)
    # When the executor records its outcome after L / Then it is written: the task was still its own
    assert record(store, "exec-1", succeeded(held, NOW + 25_000)) is True
    assert stored(store, held.task_id).status is S


def test_a_claim_requires_the_due_time_the_look_showed(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a candidate seen before the task was rescheduled
    task = tasks.create(NOW + 10_000)
    store.reschedule(task.task_id, NOW + 20_000, NOW)
    # When it is claimed or missed by its old due time / Then both lose, and the task is PENDING at its new time
    assert claim(store, task, NOW) is False
    assert miss(store, task, NOW) is False
    assert (stored(store, task.task_id).status, stored(store, task.task_id).due_ms) == (P, NOW + 20_000)


def test_claim_many_keeps_each_condition(store: TaskStore, tasks: TaskFactory) -> None:
    # Given 21 PENDING tasks, one claimed by another poller already and one cancelled
    created = [tasks.create(NOW + 10_000 + i) for i in range(21)]
    taken, cancelled = created[5], created[20]
    assert claim(store, taken, NOW, batch="other-batch")
    store.cancel(cancelled.task_id, NOW)
    # When all of them are claimed at once, into two batches
    won = store.claim_many([(candidate(t), f"batch-{i // 10}") for i, t in enumerate(created)], "poller-1", NOW,
                           LEASE_MS)
    # Then exactly the two whose condition fails lose, and every other claim is written with its own batch
    assert [i for i, ok in enumerate(won) if not ok] == [5, 20]
    after = store.get_many([t.task_id for t in created])
    assert (after[taken.task_id].batch_id, after[cancelled.task_id].status) == ("other-batch", X)
    assert {t.task_id: (after[t.task_id].status, after[t.task_id].batch_id, after[t.task_id].claimed_by)
            for i, t in enumerate(created) if i not in (5, 20)} == {
        t.task_id: (C, f"batch-{i // 10}", "poller-1") for i, t in enumerate(created) if i not in (5, 20)}


def test_claim_many_of_one_and_of_none(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a PENDING task
    task = tasks.create(NOW + 10_000)
    # When nothing is claimed / Then nothing is answered
    assert store.claim_many([], "poller-1", NOW, LEASE_MS) == []
    # When it is claimed, then by another batch, then by the same batch again (a retried request)
    assert store.claim_many([(candidate(task), "b")], "poller-1", NOW, LEASE_MS) == [True]
    assert store.claim_many([(candidate(task), "c")], "poller-2", NOW, LEASE_MS) == [False]
    assert store.claim_many([(candidate(task), "b")], "poller-1", NOW, LEASE_MS) == [True]
    # Then the first claim stands, counted once
    got = stored(store, task.task_id)
    assert (got.batch_id, got.claimed_by, got.attempt) == ("b", "poller-1", 1)


# -- arm -----------------------------------------------------------------------------------------------------------
def test_arm_requires_the_batch_that_claimed_the_task(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task claimed under batch-1
    task = tasks.create(NOW + 10_000, payload={"k": "v"})
    assert claim(store, task, NOW)
    # When an executor holding another batch id arms it / Then it loses
    assert arm(store, task.task_id, batch="batch-other") is None
    # When the executor of batch-1 arms it / Then it gets the whole task back, ARMED by it until its lease
    armed = arm(store, task.task_id, batch="batch-1", executor="exec-1", lease_until_ms=NOW + ARMED_LEASE_MS)
    assert armed is not None
    assert (armed.status, armed.armed_by, armed.batch_id, ms(armed.lease_until)) == (
        A, "exec-1", "batch-1", NOW + ARMED_LEASE_MS)
    assert (armed.payload, armed.action, armed.due_ms, armed.attempt) == (task.payload, task.action, task.due_ms, 1)
    # And arming it again by the same executor (a retried request) answers the same
    again = arm(store, task.task_id, batch="batch-1", executor="exec-1", lease_until_ms=NOW + ARMED_LEASE_MS)
    assert again is not None and again.armed_by == "exec-1"


def test_a_duplicate_delivery_loses_at_arm(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a batch armed by one executor
    task = armed_task(store, tasks, executor="exec-1")
    # When the same batch is delivered again to another executor
    second = arm(store, task.task_id, batch="batch-1", executor="exec-2")
    # Then the second arm loses and the first executor still owns the task
    assert second is None
    assert stored(store, task.task_id).armed_by == "exec-1"


def test_arm_many_answers_position_by_position(store: TaskStore, tasks: TaskFactory) -> None:
    # Given three tasks claimed under batch-1, one claimed under batch-2, and an unknown id
    mine = [tasks.create(NOW + 10_000 + i) for i in range(3)]
    other = tasks.create(NOW + 10_000)
    assert all(claim(store, t, NOW, batch="batch-1") for t in mine)
    assert claim(store, other, NOW, batch="batch-2")
    ids = [mine[0].task_id, other.task_id, mine[1].task_id, "unknown-task", mine[2].task_id]
    # When the executor of batch-1 arms them all
    armed = store.arm_many([(t, NOW + ARMED_LEASE_MS) for t in ids], "batch-1", "exec-1")
    # Then it gets its own tasks back, armed, and None for the others, position by position
    assert [a.task_id if a else None for a in armed] == [mine[0].task_id, None, mine[1].task_id, None, mine[2].task_id]
    assert all(a.status is A and a.armed_by == "exec-1" for a in armed if a is not None)
    assert stored(store, other.task_id).status is C
    # And a duplicate delivery arms nothing; nothing to arm answers nothing
    assert store.arm_many([(t.task_id, NOW + ARMED_LEASE_MS) for t in mine], "batch-1", "exec-2") == [None] * 3
    assert store.arm_many([], "batch-1", "exec-1") == []


# -- record ----------------------------------------------------------------------------------------------------------
def test_only_the_executor_that_armed_a_task_records_it(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1
    task = armed_task(store, tasks, executor="exec-1")
    fired = NOW + 10_000.25
    outcome = FireRecord(task.task_id, S, fired, NOW + 10_003, 0.25, 1.75, None)
    # When another executor records it / Then nothing is written
    assert record(store, "exec-2", outcome) is False
    assert stored(store, task.task_id).status is A
    # When exec-1 records it / Then the outcome and the fire's measures are stored, the lease gone
    assert record(store, "exec-1", outcome) is True
    done = stored(store, task.task_id)
    assert (done.status, done.drift_ms, done.drift_corrected_ms, done.late) == (S, 0.25, 1.75, False)
    assert (ms(done.fired_at), ms(done.finished_at), done.lease_until) == (NOW + 10_000, NOW + 10_003, None)
    # And the same record again by exec-1 (a retried request whose response was lost) counts as done, while
    # another executor still loses and another outcome is refused
    assert record(store, "exec-1", outcome) is True
    assert record(store, "exec-2", outcome) is False
    assert record(store, "exec-1", FireRecord(task.task_id, F, fired, NOW + 10_003, 0.25, 1.75, "boom")) is False
    assert stored(store, task.task_id).status is S


def test_a_failure_and_a_late_fire_are_recorded_with_their_details(store: TaskStore, tasks: TaskFactory) -> None:
    # Given two armed tasks
    failing, late = armed_task(store, tasks), armed_task(store, tasks, misfire_policy="fire_late")
    # When one is recorded FAILED with an error, the other SUCCEEDED but fired past its grace
    assert store.record_many("exec-1", [
        FireRecord(failing.task_id, F, NOW + 10_000.0, NOW + 10_100, 0.0, None, "HTTP 500"),
        FireRecord(late.task_id, S, NOW + 95_000.0, NOW + 95_010, 85_000.0, None, late=True),
    ]) == [True, True]
    # Then each keeps what was recorded
    assert (stored(store, failing.task_id).status, stored(store, failing.task_id).detail) == (F, "HTTP 500")
    assert (stored(store, late.task_id).late, stored(store, late.task_id).drift_ms) == (True, 85_000.0)


def test_record_many_writes_only_what_this_executor_owns(store: TaskStore, tasks: TaskFactory) -> None:
    # Given two tasks armed by exec-1 and one armed by exec-2
    created = [armed_task(store, tasks, executor="exec-2" if i == 1 else "exec-1") for i in range(3)]
    # When exec-1 records all three
    written = store.record_many("exec-1", [succeeded(t) for t in created])
    # Then its own two are written and the third is left to its owner
    assert written == [True, False, True]
    assert [stored(store, t.task_id).status for t in created] == [S, A, S]
    assert store.record_many("exec-1", []) == []


# -- retry -----------------------------------------------------------------------------------------------------------
def test_a_retry_puts_the_task_back_to_pending_at_its_next_try(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1 (first attempt), whose action failed at F
    task = armed_task(store, tasks, retry=RetryPolicy(max_attempts=3))
    failed_at = NOW + 10_005
    retry = FireRecord(task.task_id, P, NOW + 10_000.5, failed_at, 0.5, None, "HTTP 500",
                       retry_delay_ms=700, retry_due_ms=failed_at + 700, first_due_ms=task.due_ms)
    # When exec-1 records the retry
    assert record(store, "exec-1", retry) is True
    # Then the task is PENDING, due at the next try, with its first due, attempt and last error kept, no lease
    back = stored(store, task.task_id)
    assert (back.status, back.due_ms, back.first_due_at, back.attempt, back.detail) == (
        P, failed_at + 700, task.due_at, 1, "HTTP 500")
    assert (back.lease_until, back.batch_id) == (None, None)
    # ... what the client asked for is unchanged (creating it again is still the same task)
    assert store.create(tasks.build(task.due_ms, task.task_id, payload=task.payload,
                                    retry=RetryPolicy(max_attempts=3)), NOW)[1] is False
    # ... and a look for due work finds it at its new time
    assert due_ids(store, failed_at + 700, failed_at) == [task.task_id]
    # When it is claimed again / Then it is attempt 2, its first due still the original one
    assert claim(store, back, failed_at + 700, batch="batch-2")
    again = stored(store, task.task_id)
    assert (again.attempt, again.first_due_at) == (2, task.due_at)


def test_a_second_retry_keeps_the_first_due(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task retried once (first due = its original due), claimed and armed again by exec-2
    task = armed_task(store, tasks, retry=RetryPolicy(max_attempts=3))
    assert record(store, "exec-1", FireRecord(task.task_id, P, None, NOW + 10_010, None, None, "e1",
                                              retry_due_ms=NOW + 11_000, first_due_ms=task.due_ms))
    assert claim(store, stored(store, task.task_id), NOW + 11_000, batch="batch-2")
    assert arm(store, task.task_id, batch="batch-2", executor="exec-2") is not None
    # When exec-2 records a second retry naming (wrongly) another first due
    assert record(store, "exec-2", FireRecord(task.task_id, P, None, NOW + 11_010, None, None, "e2",
                                              retry_due_ms=NOW + 12_000, first_due_ms=NOW + 11_000))
    # Then the first due written by the first retry stands
    assert stored(store, task.task_id).first_due_at == task.due_at


def test_only_the_executor_that_armed_a_task_can_retry_it(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1
    task = armed_task(store, tasks, retry=RetryPolicy(max_attempts=3))
    retry = FireRecord(task.task_id, P, None, NOW + 10_010, None, None, "e", retry_due_ms=NOW + 11_000,
                       first_due_ms=task.due_ms)
    # When another executor writes the retry / Then it is refused and the task stays ARMED by exec-1
    assert store.record_many("exec-2", [retry]) == [False]
    assert (stored(store, task.task_id).status, stored(store, task.task_id).armed_by) == (A, "exec-1")


def test_the_same_retry_again_counts_as_done_and_another_does_not(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a retry written once (its response lost, say)
    task = armed_task(store, tasks, retry=RetryPolicy(max_attempts=3))
    retry = FireRecord(task.task_id, P, None, NOW + 10_010, None, None, "e", retry_due_ms=NOW + 11_000,
                       first_due_ms=task.due_ms)
    assert record(store, "exec-1", retry)
    # When the very same write comes again / Then it is recognised as done, not as a lost race
    assert record(store, "exec-1", retry)
    # But a different retry (another next try) is refused, as is an outcome
    other = FireRecord(task.task_id, P, None, NOW + 10_010, None, None, "e", retry_due_ms=NOW + 12_000,
                       first_due_ms=task.due_ms)
    assert record(store, "exec-1", other) is False
    assert record(store, "exec-1", succeeded(task)) is False
    assert stored(store, task.task_id).due_ms == NOW + 11_000


# -- release ---------------------------------------------------------------------------------------------------------
def test_release_hands_an_armed_task_back(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1
    task = armed_task(store, tasks, executor="exec-1")
    # When another executor releases it / Then nothing happens
    assert store.release(task.task_id, "exec-2") is False
    assert stored(store, task.task_id).status is A
    # When exec-1 releases it (a clean shutdown before the fire)
    assert store.release(task.task_id, "exec-1") is True
    # Then it is PENDING again, without owner or lease, found by a look for due work, and claimable at once
    back = stored(store, task.task_id)
    assert (back.status, back.batch_id, back.armed_by, back.lease_until) == (P, None, None, None)
    assert due_ids(store, task.due_ms) == [task.task_id]
    assert claim(store, back, NOW + 1, batch="batch-2") is True
    # And the batch it was armed for can no longer arm it
    assert arm(store, task.task_id, batch="batch-1") is None


# -- redrive ---------------------------------------------------------------------------------------------------------
def test_redrive_puts_a_failed_task_back_due_now_with_a_fresh_count(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task that failed on its third attempt of a retry policy
    task = tasks.create(NOW + 10_000, retry=RetryPolicy(max_attempts=3))
    for attempt in (1, 2, 3):
        current = stored(store, task.task_id)
        assert claim(store, current, current.due_ms, batch=f"batch-{attempt}")
        assert arm(store, task.task_id, batch=f"batch-{attempt}") is not None
        last, finished = attempt == 3, current.due_ms + 5
        assert record(store, "exec-1", FireRecord(
            task.task_id, F if last else P, float(current.due_ms), finished, 0.0, None, "HTTP 500",
            retry_due_ms=None if last else finished + 1_000, first_due_ms=task.due_ms))
    failed = stored(store, task.task_id)
    assert (failed.status, failed.attempt) == (F, 3)
    later = NOW + 3_600_000
    # When it is redriven an hour later
    assert store.redrive_many([task.task_id], later) == [True]
    # Then it is PENDING, due then, at attempt 0, without the marks of its failed run
    back = stored(store, task.task_id)
    assert (back.status, back.due_ms, back.attempt) == (P, later, 0)
    assert (back.finished_at, back.lease_until, back.batch_id, back.armed_by, back.first_due_at, back.late) == (
        None, None, None, None, None, False)
    # ... found by a look for due work, and claimed as attempt 1
    assert due_ids(store, later, later) == [task.task_id]
    assert claim(store, back, later, batch="batch-redriven")
    assert stored(store, task.task_id).attempt == 1


def test_redrive_of_anything_but_a_failed_task_changes_nothing(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a FAILED task, a PENDING one and a SUCCEEDED one
    failed, done = armed_task(store, tasks), armed_task(store, tasks)
    pending = tasks.create(NOW + 20_000)
    assert record(store, "exec-1", succeeded(failed, outcome=F, detail="boom"))
    assert record(store, "exec-1", succeeded(done))
    # When all of them and an unknown id are redriven
    # Then only the FAILED one is, answered position by position
    assert store.redrive_many([pending.task_id, failed.task_id, "nope", done.task_id], NOW + 60_000) == [
        False, True, False, False]
    assert [stored(store, t.task_id).status for t in (pending, failed, done)] == [P, P, S]
    # And a second redrive, later, is a no-op that leaves the first one's due time
    assert store.redrive_many([failed.task_id], NOW + 60_001) == [False]
    assert stored(store, failed.task_id).due_ms == NOW + 60_000
    assert store.redrive_many([], NOW) == []


# -- cancel and reschedule -------------------------------------------------------------------------------------------
def test_cancel_of_a_pending_task(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a PENDING task
    task = tasks.create(NOW + 10_000)
    # When it is cancelled
    cancelled = store.cancel(task.task_id, NOW + 1)
    # Then it is CANCELLED, finished then, and no look for due work finds it any more
    assert (cancelled.status, ms(cancelled.finished_at)) == (X, NOW + 1)
    assert stored(store, task.task_id).status is X
    assert due_ids(store, task.due_ms) == []


def test_cancel_of_a_claimed_task_makes_its_executor_lose_at_arm(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task claimed by a poller, its executor not yet armed
    task = tasks.create(NOW + 10_000)
    assert claim(store, task, NOW)
    # When the client cancels it
    assert store.cancel(task.task_id, NOW + 1).status is X
    # Then its executor loses at arm: it will never fire
    assert arm(store, task.task_id, batch="batch-1") is None
    assert stored(store, task.task_id).status is X


def test_cancel_of_an_armed_task_within_its_lease_is_refused_with_the_task(
    store: TaskStore, tasks: TaskFactory
) -> None:
    # Given a task armed until L
    lease_end = NOW + ARMED_LEASE_MS
    task = armed_task(store, tasks, executor="exec-1", lease_until_ms=lease_end)
    # When the client cancels it while the lease is live (up to and including L)
    for at in (NOW + 1, lease_end):
        with pytest.raises(TaskStateError) as info:
            store.cancel(task.task_id, at)
        # Then the error carries the task as it was: ARMED, owned by its executor
        assert (info.value.task.status, info.value.task.armed_by) == (A, "exec-1")
    # And one millisecond after the lease, the cancel wins (the executor is presumed dead)
    assert store.cancel(task.task_id, lease_end + 1).status is X


def test_cancel_of_a_finished_task_is_refused_with_the_task(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a cancelled task
    task = tasks.create(NOW + 10_000)
    store.cancel(task.task_id, NOW)
    # When it is cancelled or rescheduled again / Then it is refused, the error carrying the CANCELLED task
    with pytest.raises(TaskStateError) as info:
        store.cancel(task.task_id, NOW + 1)
    assert (info.value.task.status, ms(info.value.task.finished_at)) == (X, NOW)
    with pytest.raises(TaskStateError) as info:
        store.reschedule(task.task_id, NOW + 60_000, NOW + 1)
    assert info.value.task.status is X


def test_cancel_or_reschedule_of_an_unknown_task_is_not_found(store: TaskStore) -> None:
    # Given an empty store / When an unknown task is cancelled or rescheduled / Then it is not found
    with pytest.raises(TaskNotFoundError):
        store.cancel("nobody", NOW)
    with pytest.raises(TaskNotFoundError):
        store.reschedule("nobody", NOW + 1_000, NOW)
    assert store.get("nobody") is None


def test_reschedule_moves_the_due_time_and_the_old_batch_loses(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task claimed by batch-1
    task = tasks.create(NOW + 10_000)
    assert claim(store, task, NOW)
    new_due = NOW + 10 * BUCKET_MS + 123
    # When the client moves it ten minutes later
    moved = store.reschedule(task.task_id, new_due, NOW + 1)
    # Then it is PENDING again, due later, without owner, with the content of the moved task
    assert (moved.status, moved.due_ms, moved.batch_id, moved.lease_until) == (P, new_due, None, None)
    assert moved.content_hash() == task.model_copy(update={"due_at": moved.due_at}).content_hash()
    assert stored(store, task.task_id).due_ms == new_due
    # ... a look up to its old time no longer finds it, one up to its new time does
    assert due_ids(store, task.due_ms + BUCKET_MS) == []
    assert due_ids(store, new_due) == [task.task_id]
    # ... and the executor of the old batch loses at arm
    assert arm(store, task.task_id, batch="batch-1") is None


def test_reschedule_of_an_armed_task_within_its_lease_is_refused(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1
    task = armed_task(store, tasks)
    # When the client moves it / Then it is refused, with the task, and the due time is unchanged
    with pytest.raises(TaskStateError) as info:
        store.reschedule(task.task_id, NOW + 60_000, NOW + 1)
    assert (info.value.task.status, info.value.task.armed_by) == (A, "exec-1")
    assert stored(store, task.task_id).due_ms == task.due_ms


# -- miss ------------------------------------------------------------------------------------------------------------
def test_a_missed_task_is_finished_with_its_reason(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a PENDING task long overdue
    task = tasks.create(NOW - 5 * BUCKET_MS, now_ms=NOW - 6 * BUCKET_MS)
    # When the poller declares it missed
    assert miss(store, task, NOW, "found 300000 ms after due") is True
    # Then it is MISSED, finished then, with the reason, and no look for due work finds it any more
    missed = stored(store, task.task_id)
    assert (missed.status, missed.detail, ms(missed.finished_at)) == (M, "found 300000 ms after due", NOW)
    assert due_ids(store, NOW + 90_000) == []
    # And a second declaration (another poller) loses
    assert miss(store, task, NOW, "again") is False
    assert stored(store, task.task_id).detail == "found 300000 ms after due"


def test_mark_missed_many_answers_position_by_position(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a PENDING task, a claimed one (live lease) and a cancelled one
    pending, held, gone = (tasks.create(NOW - 100_000 + i, now_ms=NOW - 200_000) for i in range(3))
    assert claim(store, held, NOW)
    store.cancel(gone.task_id, NOW)
    # When all three are missed at once / Then only the claimable one is
    assert store.mark_missed_many([(candidate(t), "late") for t in (pending, held, gone)], NOW + 1) == [
        True, False, False]
    assert store.mark_missed_many([], NOW) == []


# -- finding due work ------------------------------------------------------------------------------------------------
def test_find_due_includes_overdue_tasks_however_old(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a task due 12 minutes ago and one due 2 minutes ago, both never claimed
    old = tasks.create(NOW - 12 * BUCKET_MS, now_ms=NOW - 13 * BUCKET_MS)
    recent = tasks.create(NOW - 2 * BUCKET_MS, now_ms=NOW - 3 * BUCKET_MS)
    # When the store is asked for what is due now, again, and again 5 minutes later
    first = store.find_due(NOW, NOW + 90_000)
    second = store.find_due(NOW + 1_000, NOW + 91_000)
    later = store.find_due(NOW + 5 * BUCKET_MS, NOW + 5 * BUCKET_MS + 90_000)
    # Then every look finds both (a look never leaves an active task behind), and says it looked back that far
    for scan in (first, second, later):
        assert sorted(c.task_id for c in scan.candidates) == sorted([old.task_id, recent.task_id])
        assert scan.watermark_ms <= old.due_ms


def test_find_due_finds_a_task_written_late_after_an_earlier_look(store: TaskStore, tasks: TaskFactory) -> None:
    # Given a look for due work that found nothing (and may have moved its bookkeeping up to now)
    assert due_ids(store, NOW + 90_000) == []
    assert due_ids(store, NOW + BUCKET_MS + 90_000, NOW + BUCKET_MS) == []
    # When a task due 5 minutes ago is written afterwards (a client's late schedule, a slow write)
    late = tasks.create(NOW - 5 * BUCKET_MS, now_ms=NOW + BUCKET_MS + 1)
    # Then the next look finds it
    assert due_ids(store, NOW + BUCKET_MS + 90_000, NOW + BUCKET_MS + 2) == [late.task_id]


def test_find_due_window_ends_at_until_included(store: TaskStore, tasks: TaskFactory) -> None:
    # Given tasks due at U - 1, U and U + 1
    until = NOW + 90_000
    before, at, after = (tasks.create(until + d) for d in (-1, 0, 1))
    # When the store is asked for what is due up to U / Then the first two are found, the third is not
    assert sorted(due_ids(store, until)) == sorted([before.task_id, at.task_id])
    assert after.task_id in due_ids(store, until + 1)


def test_find_due_leaves_finished_tasks_out(store: TaskStore, tasks: TaskFactory) -> None:
    # Given tasks due soon: one recorded, one failed, one missed, one cancelled, one PENDING
    done, failed = armed_task(store, tasks), armed_task(store, tasks)
    assert record(store, "exec-1", succeeded(done))
    assert record(store, "exec-1", succeeded(failed, outcome=F))
    missed, cancelled, pending = (tasks.create(NOW + 10_000 + i) for i in range(3))
    assert miss(store, missed, NOW)
    store.cancel(cancelled.task_id, NOW)
    # When the store is asked for what is due / Then only the active one is found
    assert due_ids(store, NOW + 90_000) == [pending.task_id]


def test_find_due_lists_each_active_task_once_with_its_status_and_lease(store: TaskStore, tasks: TaskFactory) -> None:
    # Given 40 tasks due over 4 minutes (several minutes and shards), one claimed, one armed, one rescheduled
    # within the window and one rescheduled out of it
    created = [tasks.create(NOW - BUCKET_MS + 6_007 * i, now_ms=NOW - 2 * BUCKET_MS) for i in range(40)]
    held, armed_one, moved_in, moved_out = created[3], created[4], created[5], created[6]
    assert claim(store, held, NOW)
    assert claim(store, armed_one, NOW, batch="batch-9")
    assert arm(store, armed_one.task_id, batch="batch-9", lease_until_ms=NOW + ARMED_LEASE_MS)
    store.reschedule(moved_in.task_id, NOW + 2 * BUCKET_MS, NOW)
    store.reschedule(moved_out.task_id, NOW + 60 * BUCKET_MS, NOW)
    until = NOW + 3 * BUCKET_MS
    # When the store is asked for what is due up to 3 minutes from now
    found = store.find_due(NOW, until).candidates
    # Then each task in the window is there once, as the store has it now
    ids = [c.task_id for c in found]
    assert len(ids) == len(set(ids))
    assert set(ids) == {t.task_id for t in created} - {moved_out.task_id}
    by_id = {c.task_id: c for c in found}
    assert (by_id[held.task_id].status, by_id[held.task_id].lease_until_ms) == (C, NOW + LEASE_MS)
    assert (by_id[armed_one.task_id].status, by_id[armed_one.task_id].lease_until_ms) == (A, NOW + ARMED_LEASE_MS)
    assert by_id[moved_in.task_id].due_ms == NOW + 2 * BUCKET_MS
    assert by_id[created[0].task_id] == candidate(stored(store, created[0].task_id))
    assert all(c.due_ms <= until for c in found)
