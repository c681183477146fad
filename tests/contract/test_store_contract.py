"""The contract of the task ports, run on every implementation: :class:`~punctual.stores.ports.ClientPort`,
:class:`~punctual.stores.ports.FiringPort` and :class:`~punctual.stores.ports.DispatchPort`, each reached as its
part of the store's record (``store.client``, ``store.firing``, ``store.dispatch``; the schedule port's contract is
``test_schedule_store_contract.py``).

Each test talks to the store through the ports' methods only, with an explicit ``now`` everywhere: the
life-cycle rules of the port's docstring, each transition allowed and refused, the ends of an executor's
heartbeat and of a task's lease to the millisecond (a takeover at the next one, never before), fences, what
the loser of a conditional write sees, idempotent create, retry and redrive, what a look for due work finds and
hands over as it goes, and a tenant's count of active tasks. A new
implementation is done when it passes this suite (see ``contract_tools.STORE_KINDS``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from contract_tools import (
    ALIVE_MS,
    ARMED_LEASE_MS,
    NOW,
    TaskFactory,
    alive,
    arm,
    armed_task,
    candidate,
    due_ids,
    ms,
    record,
    stored,
    succeeded,
)
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings

from punctual.domain.keys import BUCKET_MS, from_ms
from punctual.domain.model import ArmRequest, FireRecord, Outcome, Task, TaskStatus
from punctual.domain.retry import RetryPolicy
from punctual.domain.schedules import Schedule
from punctual.errors import TaskConflictError, TaskNotFoundError, TaskStateError
from punctual.stores.ports import Stores
from punctual.targets import LogAction
from support import json_payloads, retry_record

P, A = TaskStatus.PENDING, TaskStatus.ARMED
S, F, M, X = TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.MISSED, TaskStatus.CANCELLED


# -- create and read ---------------------------------------------------------------------------------------------
def test_create_stores_a_pending_task_and_get_reads_it(store: Stores, tasks: TaskFactory) -> None:
    # Given a new task
    task = tasks.build(NOW + 10_000, "t-new", payload={"video": "v-1", "n": [1, 2.5, None]})
    # When it is created
    created_task, created = store.client.create(task, NOW)
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


def test_get_of_an_unknown_task_is_none(store: Stores) -> None:
    # Given an empty store / When an unknown id is read / Then there is nothing
    assert store.client.get("no-such-task") is None
    assert store.client.get_many(["no-such-task"]) == {}


def test_create_is_idempotent_on_equal_content(store: Stores, tasks: TaskFactory) -> None:
    # Given a stored task
    task = tasks.build(NOW + 10_000, "t-same")
    store.client.create(task, NOW)
    # When the same content is created again (a client retry), a little later
    existing, created = store.client.create(task.model_copy(), NOW + 500)
    # Then the existing task is returned and nothing new was created
    assert created is False
    assert existing.task_id == "t-same"
    assert ms(existing.created_at) == NOW
    assert ms(stored(store, "t-same").created_at) == NOW


def test_create_with_different_content_conflicts(store: Stores, tasks: TaskFactory) -> None:
    # Given a stored task
    task = tasks.build(NOW + 10_000, "t-conflict", payload={"a": 1})
    store.client.create(task, NOW)
    # When another task with that id but another payload, due time or grace is created
    for other in (
        task.model_copy(update={"payload": {"a": 2}}),
        tasks.build(NOW + 10_001, "t-conflict", payload={"a": 1}),
        task.model_copy(update={"misfire_grace_ms": 1}),
    ):
        with pytest.raises(TaskConflictError) as info:
            store.client.create(other, NOW)
        # Then the error carries the stored task, which is unchanged
        assert info.value.existing.payload == {"a": 1}
    assert stored(store, "t-conflict").payload == {"a": 1}


def test_create_after_reschedule_is_idempotent_on_the_new_content(store: Stores, tasks: TaskFactory) -> None:
    # Given a task moved to a new due time
    task = tasks.create(NOW + 10_000, "t-moved")
    moved = store.client.reschedule("t-moved", NOW + 20_000, NOW)
    # When the client creates it again with the new due time / with the old one
    # Then the first is the same task, the second a conflict
    assert store.client.create(task.model_copy(update={"due_at": moved.due_at}), NOW)[1] is False
    with pytest.raises(TaskConflictError):
        store.client.create(task, NOW)


@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=json_payloads)
def test_any_json_payload_round_trips_through_the_store(store: Stores, payload: Any) -> None:
    # Given a task with any JSON payload
    task = Task(task_id=f"p-{uuid.uuid4().hex}", due_at=from_ms(NOW + 10_000), action=LogAction(), payload=payload)
    # When it is created and read back
    store.client.create(task, NOW)
    again = stored(store, task.task_id)
    # Then the payload and the content hash are unchanged, and the same content creates nothing new
    assert again.payload == payload
    assert again.content_hash() == task.content_hash()
    assert store.client.create(task, NOW)[1] is False


def test_get_many_reads_every_existing_task(store: Stores, tasks: TaskFactory) -> None:
    # Given 25 tasks
    created = [tasks.create(NOW + 10_000 + i) for i in range(25)]
    # When they are read together with an unknown id, one of them twice
    found = store.client.get_many([t.task_id for t in created] + ["unknown-task", created[3].task_id])
    # Then every existing one is there, with its content, and nothing else
    assert set(found) == {t.task_id for t in created}
    assert all(found[t.task_id].due_ms == t.due_ms and found[t.task_id].payload == t.payload for t in created)
    assert store.client.get_many([]) == {}


def test_list_tasks_filters_by_status_and_due_range(store: Stores, tasks: TaskFactory) -> None:
    # Given three tasks, the middle one cancelled, a heartbeat and a look for due work (the store may keep
    # bookkeeping of its own for both)
    a, b, c = (tasks.create(NOW + 1_000 * i) for i in (1, 2, 3))
    store.client.cancel(b.task_id, NOW)
    alive(store, "exec-1", NOW + ALIVE_MS)
    store.dispatch.find_due(NOW, NOW + 90_000)
    # When tasks are listed / Then only tasks are listed, by status, by due range (from included, to excluded),
    # and at most ``limit`` of them
    assert sorted(t.task_id for t in store.client.list_tasks()) == sorted([a.task_id, b.task_id, c.task_id])
    assert {t.task_id for t in store.client.list_tasks([P])} == {a.task_id, c.task_id}
    assert {t.task_id for t in store.client.list_tasks([P, X])} == {a.task_id, b.task_id, c.task_id}
    assert {t.task_id for t in store.client.list_tasks(due_from_ms=b.due_ms, due_to_ms=c.due_ms)} == {b.task_id}
    assert {t.task_id for t in store.client.list_tasks([P], due_from_ms=b.due_ms)} == {c.task_id}
    assert len(list(store.client.list_tasks(limit=2))) == 2


def test_a_tenants_pages_hold_its_own_tasks_once_each(store: Stores, tasks: TaskFactory) -> None:
    # Given 7 tasks of tenant acme (one cancelled), 2 of acme-2 (a tenant whose name starts like it), 2 of no
    # tenant, and a schedule of acme's (its item is not a task)
    acme = [tasks.create(NOW + 1_000 * i, task_id=f"acme/t-{i}") for i in range(7)]
    store.client.cancel(acme[3].task_id, NOW)
    for i in range(2):
        tasks.create(NOW + 1_000, task_id=f"acme-2/t-{i}")
        tasks.create(NOW + 1_000, task_id=f"t-{i}")
    schedule = Schedule(schedule_id="acme/daily", expression="rate(1 hour)", action=LogAction(), next_due_ms=NOW)
    store.schedules.create_schedule(schedule, [], NOW)
    # When acme's tasks are read 3 ids a page, until no page follows
    seen: list[str] = []
    after = None
    for _ in range(10):
        page, after = store.client.tenant_page("acme", limit=3, after=after)
        assert len(page) <= 3
        seen.extend(t.task_id for t in page)
        if after is None:
            break
    # Then each of acme's tasks came once, in id order, and nothing else
    assert seen == sorted(t.task_id for t in acme)
    # And the filters hold within a page: status, and due range (from included, to excluded)
    assert {t.task_id for t in store.client.tenant_page("acme", [X], limit=100)[0]} == {acme[3].task_id}
    in_range = store.client.tenant_page("acme", [P], due_from_ms=acme[1].due_ms, due_to_ms=acme[4].due_ms, limit=100)[0]
    assert {t.task_id for t in in_range} == {acme[1].task_id, acme[2].task_id}
    assert store.client.tenant_page("nobody", limit=100) == ([], None)


# -- every life-cycle edge ---------------------------------------------------------------------------------------
AT = NOW + 100_000  # when the change under test is tried
STATES = ["PENDING", "ARMED", "ARMED, owner dead", "ARMED, lease ended", "SUCCEEDED", "FAILED", "MISSED", "CANCELLED"]


def put_in_every_state(store: Stores, tasks: TaskFactory) -> dict[str, Task]:
    """One new task (due NOW + 10 s) in each of STATES, as seen at AT, armed at NOW: by ``exec-1`` (alive past
    AT; the lease of "lease ended" ends at AT - 1) or by ``exec-dead`` (alive until AT - 1); finished ones by
    ``exec-0``. Batched, so that the table stays quick."""
    t = {state: tasks.create(NOW + 10_000, task_id=f"t-{i}") for i, state in enumerate(STATES)}

    def arm_all(executor: str, alive_until_ms: int, leases: dict[str, int]) -> None:
        alive(store, executor, alive_until_ms)
        requests = [
            ArmRequest(task_id=t[s].task_id, due_ms=t[s].due_ms, lease_until_ms=lease) for s, lease in leases.items()
        ]
        assert None not in store.firing.arm_many(requests, "batch-1", executor, NOW)

    arm_all("exec-1", AT + ALIVE_MS, {"ARMED": AT + ARMED_LEASE_MS, "ARMED, lease ended": AT - 1})
    arm_all("exec-dead", AT - 1, {"ARMED, owner dead": AT + ARMED_LEASE_MS})
    arm_all("exec-0", AT + ALIVE_MS, {s: AT for s in ("SUCCEEDED", "FAILED", "MISSED")})
    assert (
        store.firing.record_many(
            "exec-0",
            [
                succeeded(t["SUCCEEDED"]),
                succeeded(t["FAILED"], outcome=Outcome.FAILED),
                succeeded(t["MISSED"], outcome=Outcome.MISSED),
            ],
        )
        == [True] * 3
    )
    store.client.cancel(t["CANCELLED"].task_id, NOW)
    now = store.client.get_many([task.task_id for task in t.values()])
    return {state: now[task.task_id] for state, task in t.items()}


def _changed(change: Callable[[], Any]) -> bool:
    """Whether a cancel or reschedule went through; a refusal must carry the task as it was."""
    try:
        change()
    except TaskStateError as exc:
        assert isinstance(exc.task, Task)  # noqa: PT017 - either outcome is this helper's answer; a refusal is checked here
        return False
    return True


def _retry(task: Task) -> FireRecord:
    return retry_record(
        task, AT, "HTTP 500", retry_due_ms=AT + 1_000, fired_ms=float(task.due_ms), drift_ms=0.0, retry_delay_ms=1_000
    )


def _holder(task: Task) -> str:
    """Who records or releases: the executor that holds the task ARMED (alive or not), else one that never did."""
    return task.armed_by if task.status is A and task.armed_by else "exec-1"


HELD = {"ARMED", "ARMED, owner dead", "ARMED, lease ended"}
CHANGES: dict[str, tuple[Callable[[Stores, Task], bool], TaskStatus, set[str]]] = {
    # change: (how it is tried at AT, the status it leads to, the states it is allowed from)
    "arm": (
        lambda s, t: arm(s, t, "exec-2", AT, lease_until_ms=AT + ARMED_LEASE_MS) is not None,
        A,
        {"PENDING", "ARMED, owner dead", "ARMED, lease ended"},
    ),
    "record": (lambda s, t: record(s, _holder(t), succeeded(t, AT)), S, HELD),
    "retry": (lambda s, t: record(s, _holder(t), _retry(t)), P, HELD),
    "release": (lambda s, t: s.firing.release(t.task_id, _holder(t)), P, HELD),
    "cancel": (lambda s, t: _changed(lambda: s.client.cancel(t.task_id, AT)), X, {"PENDING", "ARMED, lease ended"}),
    "reschedule": (
        lambda s, t: _changed(lambda: s.client.reschedule(t.task_id, AT + 60_000, AT)),
        P,
        {"PENDING", "ARMED, lease ended"},
    ),
    "redrive": (lambda s, t: s.client.redrive_many([t.task_id], AT) == [True], P, {"FAILED"}),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_each_change_is_allowed_exactly_from_the_states_the_life_cycle_says(
    store: Stores, tasks: TaskFactory, change: str
) -> None:
    # Given one task in each state of the life cycle (as seen at AT)
    before = put_in_every_state(store, tasks)
    assert {state: task.status.value for state, task in before.items()} == {s: s.partition(",")[0] for s in STATES}
    attempt, target, allowed = CHANGES[change]
    # When the change is tried on each of them at AT
    won = {state: attempt(store, task) for state, task in before.items()}
    after = store.client.get_many([task.task_id for task in before.values()])
    outcome = {state: (won[state], after[task.task_id].status) for state, task in before.items()}
    # Then it goes through exactly where allowed, to its target status; elsewhere the task is left as it was
    expected = {state: (True, target) if state in allowed else (False, task.status) for state, task in before.items()}
    assert outcome == expected


# -- arm -----------------------------------------------------------------------------------------------------------
def test_arm_takes_a_pending_task_and_a_retried_arm_answers_the_same(store: Stores, tasks: TaskFactory) -> None:
    # Given a PENDING task
    task = tasks.create(NOW + 10_000, payload={"k": "v"})
    alive(store, "exec-1", NOW + ALIVE_MS)
    # When exec-1 arms it / Then it gets the whole task back, ARMED by it until its lease, attempt 1, not taken over
    armed = arm(store, task, "exec-1", NOW, lease_until_ms=NOW + ARMED_LEASE_MS, batch_id="batch-1")
    assert armed is not None
    assert armed.taken_over_until_ms is None
    got = armed.task
    assert (got.status, got.armed_by, got.batch_id, ms(got.lease_until), got.attempt) == (
        A,
        "exec-1",
        "batch-1",
        NOW + ARMED_LEASE_MS,
        1,
    )
    assert (got.payload, got.action, got.due_ms) == (task.payload, task.action, task.due_ms)
    # When exec-1 arms it again (a retried request) / Then it answers the same, counted once
    again = arm(store, task, "exec-1", NOW + 1, lease_until_ms=NOW + ARMED_LEASE_MS, batch_id="batch-1")
    assert again is not None
    assert (again.task.armed_by, again.task.attempt, again.taken_over_until_ms) == (
        "exec-1",
        1,
        None,
    )


def test_arm_of_a_task_due_at_another_time_loses(store: Stores, tasks: TaskFactory) -> None:
    # Given a PENDING task due at D
    task = tasks.create(NOW + 10_000)
    # When it is armed as due one ms later (a stale look) / Then the arm loses
    assert store.firing.arm_many(
        [ArmRequest(task_id=task.task_id, due_ms=task.due_ms + 1, lease_until_ms=NOW + ARMED_LEASE_MS)],
        "b",
        "exec-1",
        NOW,
    ) == [None]
    # When it is rescheduled after a look saw it, and armed by the due time that look showed / Then it loses
    store.client.reschedule(task.task_id, NOW + 20_000, NOW)
    assert arm(store, task, "exec-1", NOW + 1) is None
    assert (stored(store, task.task_id).status, stored(store, task.task_id).due_ms) == (P, NOW + 20_000)


def test_two_executors_arming_one_task_leave_one_winner(store: Stores, tasks: TaskFactory) -> None:
    # Given a PENDING task, and two live executors to which it was dispatched (two pollers, a duplicate delivery)
    task = tasks.create(NOW + 10_000)
    alive(store, "exec-1", NOW + ALIVE_MS)
    alive(store, "exec-2", NOW + ALIVE_MS)
    # When both arm it at the same instant
    first, second = arm(store, task, "exec-1", NOW), arm(store, task, "exec-2", NOW)
    # Then only the first owns it, armed once
    assert first is not None
    assert second is None
    got = stored(store, task.task_id)
    assert (got.status, got.armed_by, got.attempt) == (A, "exec-1", 1)


def test_arm_many_answers_position_by_position(store: Stores, tasks: TaskFactory) -> None:
    # Given two PENDING tasks, one held by a live executor, one by a dead one (alive until NOW), one cancelled
    mine = [tasks.create(NOW + 10_000 + i) for i in range(2)]
    held = armed_task(store, tasks, "exec-2")
    dead = armed_task(store, tasks, "exec-dead", alive_until_ms=NOW)
    gone = tasks.create(NOW + 10_000)
    store.client.cancel(gone.task_id, NOW)
    order = [mine[0], held, dead, gone, mine[1]]
    requests = [ArmRequest(task_id=t.task_id, due_ms=t.due_ms, lease_until_ms=NOW + ARMED_LEASE_MS) for t in order]
    requests.insert(4, ArmRequest(task_id="unknown-task", due_ms=NOW + 10_000, lease_until_ms=NOW + ARMED_LEASE_MS))
    # When exec-1 arms them all at NOW + 1
    armed = store.firing.arm_many(requests, "batch-1", "exec-1", NOW + 1)
    # Then it gets the PENDING ones and the dead executor's, armed by it, and None for the others, in order
    assert [(a.task.task_id, a.taken_over_until_ms) if a else None for a in armed] == [
        (mine[0].task_id, None),
        None,
        (dead.task_id, NOW),
        None,
        None,
        (mine[1].task_id, None),
    ]
    assert all(a.task.status is A and a.task.armed_by == "exec-1" for a in armed if a is not None)
    assert stored(store, held.task_id).armed_by == "exec-2"
    # And nothing to arm answers nothing
    assert store.firing.arm_many([], "batch-1", "exec-1", NOW) == []


# -- heartbeat and takeover ------------------------------------------------------------------------------------------
def test_a_heartbeat_keeps_its_executor_alive_until_the_instant_it_names(store: Stores, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1, alive until T
    until = NOW + 20_000
    task = armed_task(store, tasks, "exec-1", alive_until_ms=until)
    # When exec-1 renews before T, to T + 15 s
    assert store.firing.heartbeat("exec-1", until - 5_000, until + 15_000) is True
    # Then past T the task is still its own: no look for due work finds it, another executor's arm loses
    assert due_ids(store, NOW + 90_000, until + 1) == []
    assert arm(store, task, "exec-2", until + 1) is None
    # When it retires (alive until now: its batch is over) at R / Then at R it still holds it, at R + 1 not
    retired = until + 2
    assert store.firing.heartbeat("exec-1", retired, retired) is True
    assert due_ids(store, NOW + 90_000, retired) == []
    assert due_ids(store, NOW + 90_000, retired + 1) == [task.task_id]


def test_an_owner_alive_until_t_is_taken_over_at_t_plus_1_and_not_before(store: Stores, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1, alive until T (it then died), and exec-2 alive
    until = NOW + 20_000
    task = armed_task(store, tasks, "exec-1", alive_until_ms=until)
    alive(store, "exec-2", NOW + ALIVE_MS)
    # When a look for due work and exec-2 come at T / Then exec-1 still holds it
    assert due_ids(store, NOW + 90_000, until) == []
    assert arm(store, task, "exec-2", until) is None
    # When they come at T + 1 / Then the look finds it, recovered, ARMED by exec-1
    scan = store.dispatch.find_due(until + 1, NOW + 90_000)
    assert (scan.candidates, scan.recovered) == ([candidate(stored(store, task.task_id))], 1)
    assert (scan.candidates[0].status, scan.candidates[0].owner) == (A, "exec-1")
    # ... an arm by another due time still loses; exec-2 takes it over, told exec-1 may have fired it up to T
    assert store.firing.arm_many(
        [ArmRequest(task_id=task.task_id, due_ms=task.due_ms + 1, lease_until_ms=until + ARMED_LEASE_MS)],
        "batch-2",
        "exec-2",
        until + 1,
    ) == [None]
    taken = arm(store, task, "exec-2", until + 1, lease_until_ms=until + ARMED_LEASE_MS, batch_id="batch-2")
    assert taken is not None
    assert taken.taken_over_until_ms == until
    assert (
        taken.task.status,
        taken.task.armed_by,
        taken.task.batch_id,
        taken.task.attempt,
        ms(taken.task.lease_until),
    ) == (A, "exec-2", "batch-2", 2, until + ARMED_LEASE_MS)
    # And exec-1 can no longer record it, nor ever renew; a third executor loses to exec-2, which is alive
    assert record(store, "exec-1", succeeded(task, until + 2)) is False
    assert store.firing.heartbeat("exec-1", until + 2, until + 20_000) is False
    assert store.firing.heartbeat("exec-1", until + 3, until + 3) is False
    assert arm(store, task, "exec-3", until + 2) is None
    assert (stored(store, task.task_id).armed_by, store.firing.heartbeat("exec-2", until + 2, NOW + ALIVE_MS)) == (
        "exec-2",
        True,
    )


def test_a_request_marked_held_is_taken_over_and_one_that_is_pending_after_all_is_armed(
    store: Stores, tasks: TaskFactory
) -> None:
    # Given a task armed by exec-1, alive until T (it then died), and a PENDING task; exec-2 alive
    until = NOW + 20_000
    held = armed_task(store, tasks, "exec-1", alive_until_ms=until)
    pending = tasks.create(NOW + 30_000)
    alive(store, "exec-2", NOW + ALIVE_MS)
    # When exec-2 arms both at T + 1 as held (what a dispatcher that found them ARMED by a dead executor sends)
    lease = until + ARMED_LEASE_MS
    requests = [
        ArmRequest(task_id=held.task_id, due_ms=held.due_ms, lease_until_ms=lease, held=True),
        ArmRequest(task_id=pending.task_id, due_ms=pending.due_ms, lease_until_ms=lease, held=True),
    ]
    got = store.firing.arm_many(requests, "batch-2", "exec-2", until + 1)
    # Then the held one is taken over (exec-1 may have fired it up to T), the pending one armed as usual
    assert [a is not None for a in got] == [True, True]
    assert got[0] is not None
    assert got[0].taken_over_until_ms == until
    assert got[0].task.armed_by == "exec-2"
    assert got[1] is not None
    assert got[1].taken_over_until_ms is None
    assert got[1].task.armed_by == "exec-2"
    # ... and a held request for a task whose owner is alive loses, as an arm does
    other = armed_task(store, tasks, "exec-3", alive_until_ms=NOW + ALIVE_MS)
    assert store.firing.arm_many(
        [ArmRequest(task_id=other.task_id, due_ms=other.due_ms, lease_until_ms=lease, held=True)],
        "batch-3",
        "exec-2",
        until + 1,
    ) == [None]
    assert stored(store, other.task_id).armed_by == "exec-3"


def test_an_owner_that_renewed_after_it_was_found_dead_is_not_taken_over(store: Stores, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1, alive until T, which a look for due work at T + 1 found (exec-1 looked dead)
    until = NOW + 20_000
    task = armed_task(store, tasks, "exec-1", alive_until_ms=until)
    assert due_ids(store, NOW + 90_000, until + 1) == [task.task_id]
    # When exec-1 renews (late, but before anyone took over) and exec-2 then arms the task
    assert store.firing.heartbeat("exec-1", until + 1, until + 20_000) is True
    # Then the arm loses: exec-1 still holds the task and may go on renewing
    assert arm(store, task, "exec-2", until + 1) is None
    assert stored(store, task.task_id).armed_by == "exec-1"
    assert store.firing.heartbeat("exec-1", until + 2, until + 30_000) is True


def test_an_owner_without_a_heartbeat_is_dead(store: Stores, tasks: TaskFactory) -> None:
    # Given a task armed by an executor that never wrote a heartbeat
    task = tasks.create(NOW + 10_000)
    assert arm(store, task, "exec-ghost", NOW) is not None
    # When a look for due work and exec-2 come one ms later / Then it is found, recovered, and taken over; as
    # nothing says until when the ghost lived, it may have fired anything due up to the takeover
    scan = store.dispatch.find_due(NOW + 1, NOW + 90_000)
    assert ([c.task_id for c in scan.candidates], scan.recovered) == ([task.task_id], 1)
    taken = arm(store, task, "exec-2", NOW + 1)
    assert taken is not None
    assert (taken.task.armed_by, taken.taken_over_until_ms) == ("exec-2", NOW + 1)
    # And the ghost can never start a heartbeat afterwards
    assert store.firing.heartbeat("exec-ghost", NOW + 2, NOW + 20_000) is False


def test_a_task_whose_own_lease_ended_is_taken_even_from_a_live_owner(store: Stores, tasks: TaskFactory) -> None:
    # Given a task armed until L by exec-1, which stays alive throughout
    lease_end = NOW + 30_000
    task = armed_task(store, tasks, "exec-1", lease_until_ms=lease_end)
    # When a look for due work and exec-2 come at L / Then exec-1 still holds it
    assert due_ids(store, NOW + 90_000, lease_end) == []
    assert arm(store, task, "exec-2", lease_end) is None
    # When they come at L + 1 / Then it is found, recovered, and exec-2 takes it, told the old lease was L
    scan = store.dispatch.find_due(lease_end + 1, NOW + 90_000)
    assert ([c.task_id for c in scan.candidates], scan.recovered) == ([task.task_id], 1)
    taken = arm(store, task, "exec-2", lease_end + 1)
    assert taken is not None
    assert (taken.task.armed_by, taken.taken_over_until_ms) == ("exec-2", lease_end)
    # And exec-1 is not marked dead (it renews), but the task is no longer its own
    assert store.firing.heartbeat("exec-1", lease_end + 2, NOW + ALIVE_MS) is True
    assert record(store, "exec-1", succeeded(task, lease_end + 2)) is False


def test_a_fenced_executor_is_dead_at_once_and_never_renews(store: Stores, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1, whose heartbeat holds for an hour, and which is then known to be dead
    task = armed_task(store, tasks, "exec-1")
    # When it is fenced at F
    fenced_at = NOW + 1_000
    assert store.firing.fence("exec-1", fenced_at) is True
    # Then it was alive until F - 1 at the latest: a look at F finds its task, and exec-2 takes it over
    assert due_ids(store, NOW + 90_000, fenced_at) == [task.task_id]
    taken = arm(store, task, "exec-2", fenced_at)
    assert taken is not None
    assert (taken.task.armed_by, taken.taken_over_until_ms) == ("exec-2", fenced_at - 1)
    # ... it can never renew, and a second fence (or one of an executor never seen) finds nothing to fence
    assert store.firing.heartbeat("exec-1", fenced_at + 1, NOW + ALIVE_MS) is False
    assert store.firing.fence("exec-1", fenced_at + 1) is False
    assert store.firing.fence("exec-never", fenced_at + 1) is False


def test_a_fence_naming_an_invocation_fences_only_the_executor_that_ran_it(store: Stores) -> None:
    # Given an executor alive, running invocation req-1
    assert store.firing.heartbeat("exec-1", NOW, NOW + ALIVE_MS, invocation="req-1") is True
    # When a fence names another invocation / Then nothing is fenced; naming its own, it is
    assert store.firing.fence("exec-1", NOW + 1, invocation="req-2") is False
    assert store.firing.heartbeat("exec-1", NOW + 2, NOW + ALIVE_MS, invocation="req-1") is True
    assert store.firing.fence("exec-1", NOW + 3, invocation="req-1") is True
    assert store.firing.heartbeat("exec-1", NOW + 4, NOW + ALIVE_MS, invocation="req-1") is False


def test_fence_live_executors_fences_exactly_the_live_ones(store: Stores) -> None:
    # Given two executors alive at T, one alive until T exactly, and one that died before T
    at = NOW + 10_000
    for executor, until in (("exec-a", NOW + ALIVE_MS), ("exec-b", NOW + ALIVE_MS), ("exec-c", at), ("exec-d", at - 1)):
        alive(store, executor, until)
    # When every live executor is fenced at T (a restart that stopped them all)
    fenced = store.firing.fence_live_executors(at)
    # Then the three alive at T are, and none of them renews; the one already dead is left as it was
    assert sorted(fenced) == ["exec-a", "exec-b", "exec-c"]
    assert [store.firing.heartbeat(e, at + 1, NOW + ALIVE_MS) for e in ("exec-a", "exec-b", "exec-c")] == [False] * 3
    assert store.firing.fence_live_executors(at + 1) == []


def test_an_arm_by_a_retried_invocation_takes_over_from_its_earlier_attempt_at_once(
    store: Stores, tasks: TaskFactory
) -> None:
    # Given a task armed by exec-1, alive for an hour, running invocation req-1 (which Lambda then retried)
    task = tasks.create(NOW + 10_000)
    assert store.firing.heartbeat("exec-1", NOW, NOW + ALIVE_MS, invocation="req-1") is True
    assert arm(store, task, "exec-1", NOW) is not None
    request = [ArmRequest(task_id=task.task_id, due_ms=task.due_ms, lease_until_ms=NOW + ARMED_LEASE_MS)]
    alive(store, "exec-2", NOW + ALIVE_MS)
    # When exec-2 arms it for another invocation / Then it loses: exec-1 is alive
    assert store.firing.arm_many(request, "batch-2", "exec-2", NOW + 1, invocation="req-9") == [None]
    # When exec-2 arms it for the retry of req-1 / Then exec-1 is fenced and its task taken over at once
    (taken,) = store.firing.arm_many(request, "batch-2", "exec-2", NOW + 2, invocation="req-1")
    assert taken is not None
    assert (taken.task.armed_by, taken.taken_over_until_ms) == ("exec-2", NOW + 1)
    assert store.firing.heartbeat("exec-1", NOW + 3, NOW + ALIVE_MS, invocation="req-1") is False


# -- record ----------------------------------------------------------------------------------------------------------
def test_only_the_executor_that_armed_a_task_records_it(store: Stores, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1
    task = armed_task(store, tasks, "exec-1")
    fired = NOW + 10_000.25
    outcome = FireRecord(
        task_id=task.task_id,
        outcome=Outcome.SUCCEEDED,
        fired_ms=fired,
        finished_ms=NOW + 10_003,
        drift_ms=0.25,
        drift_corrected_ms=1.75,
        detail=None,
    )
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
    assert (
        record(
            store,
            "exec-1",
            FireRecord(
                task_id=task.task_id,
                outcome=Outcome.FAILED,
                fired_ms=fired,
                finished_ms=NOW + 10_003,
                drift_ms=0.25,
                drift_corrected_ms=1.75,
                detail="boom",
            ),
        )
        is False
    )
    assert stored(store, task.task_id).status is S


def test_an_executor_past_its_leases_still_records_while_no_one_took_the_task_over(
    store: Stores, tasks: TaskFactory
) -> None:
    # Given a task armed until L by exec-1, alive until L too, late (nobody took the task over after L)
    lease_end = NOW + 20_000
    held = armed_task(store, tasks, "exec-1", lease_until_ms=lease_end, alive_until_ms=lease_end)
    # When the executor records its outcome after L / Then it is written: the task was still its own
    assert record(store, "exec-1", succeeded(held, lease_end + 5_000)) is True
    assert stored(store, held.task_id).status is S


def test_a_failure_a_miss_and_a_late_fire_are_recorded_with_their_details(store: Stores, tasks: TaskFactory) -> None:
    # Given three armed tasks
    failing, missed = armed_task(store, tasks), armed_task(store, tasks)
    late = armed_task(store, tasks, misfire_policy="fire_late")
    # When one is recorded FAILED with an error, one MISSED, one SUCCEEDED but fired past its grace
    assert store.firing.record_many(
        "exec-1",
        [
            FireRecord(
                task_id=failing.task_id,
                outcome=Outcome.FAILED,
                fired_ms=NOW + 10_000.0,
                finished_ms=NOW + 10_100,
                drift_ms=0.0,
                drift_corrected_ms=None,
                detail="HTTP 500",
            ),
            FireRecord(
                task_id=missed.task_id,
                outcome=Outcome.MISSED,
                fired_ms=None,
                finished_ms=NOW + 75_000,
                drift_ms=None,
                drift_corrected_ms=None,
                detail="would fire 65000 ms late",
            ),
            FireRecord(
                task_id=late.task_id,
                outcome=Outcome.SUCCEEDED,
                fired_ms=NOW + 95_000.0,
                finished_ms=NOW + 95_010,
                drift_ms=85_000.0,
                drift_corrected_ms=None,
                late=True,
            ),
        ],
    ) == [True, True, True]
    # Then each keeps what was recorded, and no look for due work finds any of them
    assert (stored(store, failing.task_id).status, stored(store, failing.task_id).detail) == (F, "HTTP 500")
    assert (stored(store, missed.task_id).status, stored(store, missed.task_id).fired_at) == (M, None)
    assert (stored(store, late.task_id).late, stored(store, late.task_id).drift_ms) == (True, 85_000.0)
    assert due_ids(store, NOW + 90_000) == []


def test_record_many_writes_only_what_this_executor_owns(store: Stores, tasks: TaskFactory) -> None:
    # Given two tasks armed by exec-1 and one armed by exec-2
    created = [armed_task(store, tasks, "exec-2" if i == 1 else "exec-1") for i in range(3)]
    # When exec-1 records all three
    written = store.firing.record_many("exec-1", [succeeded(t) for t in created])
    # Then its own two are written and the third is left to its owner
    assert written == [True, False, True]
    assert [stored(store, t.task_id).status for t in created] == [S, A, S]
    assert store.firing.record_many("exec-1", []) == []


# -- retry -----------------------------------------------------------------------------------------------------------
def test_a_retry_puts_the_task_back_to_pending_at_its_next_try(store: Stores, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1 (first attempt), whose action failed at F
    task = armed_task(store, tasks, retry=RetryPolicy(max_attempts=3))
    failed_at = NOW + 10_005
    retry = retry_record(
        task,
        failed_at,
        "HTTP 500",
        retry_due_ms=failed_at + 700,
        fired_ms=NOW + 10_000.5,
        drift_ms=0.5,
        retry_delay_ms=700,
    )
    # When exec-1 records the retry
    assert record(store, "exec-1", retry) is True
    # Then the task is PENDING, due at the next try, with its first due, attempt and last error kept, no lease
    back = stored(store, task.task_id)
    assert (back.status, back.due_ms, back.first_due_at, back.attempt, back.detail) == (
        P,
        failed_at + 700,
        task.due_at,
        1,
        "HTTP 500",
    )
    assert (back.lease_until, back.batch_id) == (None, None)
    # ... what the client asked for is unchanged (creating it again is still the same task)
    assert (
        store.client.create(
            tasks.build(task.due_ms, task.task_id, payload=task.payload, retry=RetryPolicy(max_attempts=3)), NOW
        )[1]
        is False
    )
    # ... and a look for due work finds it at its new time
    assert due_ids(store, failed_at + 700, failed_at) == [task.task_id]
    # When it is armed again at its new time / Then it is attempt 2, its first due still the original one
    again = arm(store, back, "exec-1", failed_at + 700)
    assert again is not None
    assert (again.task.attempt, again.task.first_due_at) == (2, task.due_at)


def test_a_second_retry_keeps_the_first_due(store: Stores, tasks: TaskFactory) -> None:
    # Given a task retried once (first due = its original due), armed again by exec-2
    task = armed_task(store, tasks, retry=RetryPolicy(max_attempts=3))
    assert record(
        store,
        "exec-1",
        retry_record(task, NOW + 10_010, "e1", retry_due_ms=NOW + 11_000),
    )
    assert arm(store, stored(store, task.task_id), "exec-2", NOW + 11_000) is not None
    # When exec-2 records a second retry naming (wrongly) another first due
    assert record(
        store,
        "exec-2",
        retry_record(task, NOW + 11_010, "e2", retry_due_ms=NOW + 12_000, first_due_ms=NOW + 11_000),
    )
    # Then the first due written by the first retry stands
    assert stored(store, task.task_id).first_due_at == task.due_at


def test_only_the_executor_that_armed_a_task_can_retry_it(store: Stores, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1
    task = armed_task(store, tasks, retry=RetryPolicy(max_attempts=3))
    retry = retry_record(task, NOW + 10_010, "e", retry_due_ms=NOW + 11_000)
    # When another executor writes the retry / Then it is refused and the task stays ARMED by exec-1
    assert store.firing.record_many("exec-2", [retry]) == [False]
    assert (stored(store, task.task_id).status, stored(store, task.task_id).armed_by) == (A, "exec-1")


def test_the_same_retry_again_counts_as_done_and_another_does_not(store: Stores, tasks: TaskFactory) -> None:
    # Given a retry written once (its response lost, say)
    task = armed_task(store, tasks, retry=RetryPolicy(max_attempts=3))
    retry = retry_record(task, NOW + 10_010, "e", retry_due_ms=NOW + 11_000)
    assert record(store, "exec-1", retry)
    # When the very same write comes again / Then it is recognised as done, not as a lost race
    assert record(store, "exec-1", retry)
    # But a different retry (another next try) is refused, as is an outcome
    other = retry_record(task, NOW + 10_010, "e", retry_due_ms=NOW + 12_000)
    assert record(store, "exec-1", other) is False
    assert record(store, "exec-1", succeeded(task)) is False
    assert stored(store, task.task_id).due_ms == NOW + 11_000


# -- release ---------------------------------------------------------------------------------------------------------
def test_release_hands_an_armed_task_back(store: Stores, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1, alive
    task = armed_task(store, tasks, "exec-1")
    # When another executor releases it / Then nothing happens
    assert store.firing.release(task.task_id, "exec-2") is False
    assert stored(store, task.task_id).status is A
    # When exec-1 releases it (a stop before the fire)
    assert store.firing.release(task.task_id, "exec-1") is True
    # Then it is PENDING again, without owner or lease, found by a look for due work, and armable at once
    back = stored(store, task.task_id)
    assert (back.status, back.batch_id, back.armed_by, back.lease_until) == (P, None, None, None)
    assert due_ids(store, task.due_ms, NOW + 1) == [task.task_id]
    again = arm(store, back, "exec-2", NOW + 1)
    assert again is not None
    assert (again.task.armed_by, again.taken_over_until_ms) == ("exec-2", None)


# -- redrive ---------------------------------------------------------------------------------------------------------
def test_redrive_puts_a_failed_task_back_due_now_with_a_fresh_count(store: Stores, tasks: TaskFactory) -> None:
    # Given a task that failed on its third attempt of a retry policy
    task = tasks.create(NOW + 10_000, retry=RetryPolicy(max_attempts=3))
    for attempt in (1, 2, 3):
        current = stored(store, task.task_id)
        assert arm(store, current, "exec-1", current.due_ms, batch_id=f"batch-{attempt}") is not None
        last, finished = attempt == 3, current.due_ms + 5
        assert record(
            store,
            "exec-1",
            FireRecord(
                task_id=task.task_id,
                outcome=Outcome.FAILED if last else Outcome.RETRY,
                fired_ms=float(current.due_ms),
                finished_ms=finished,
                drift_ms=0.0,
                drift_corrected_ms=None,
                detail="HTTP 500",
                retry_due_ms=None if last else finished + 1_000,
                first_due_ms=task.due_ms,
            ),
        )
    failed = stored(store, task.task_id)
    assert (failed.status, failed.attempt) == (F, 3)
    later = NOW + 3_600_000
    # When it is redriven an hour later
    assert store.client.redrive_many([task.task_id], later) == [True]
    # Then it is PENDING, due then, at attempt 0, without the marks of its failed run
    back = stored(store, task.task_id)
    assert (back.status, back.due_ms, back.attempt) == (P, later, 0)
    assert (back.finished_at, back.lease_until, back.batch_id, back.armed_by, back.first_due_at, back.late) == (
        None,
        None,
        None,
        None,
        None,
        False,
    )
    # ... found by a look for due work, and armed as attempt 1
    assert due_ids(store, later, later) == [task.task_id]
    again = arm(store, back, "exec-2", later)
    assert again is not None
    assert again.task.attempt == 1


def test_redrive_of_anything_but_a_failed_task_changes_nothing(store: Stores, tasks: TaskFactory) -> None:
    # Given a FAILED task, a PENDING one and a SUCCEEDED one
    failed, done = armed_task(store, tasks), armed_task(store, tasks)
    pending = tasks.create(NOW + 20_000)
    assert record(store, "exec-1", succeeded(failed, outcome=Outcome.FAILED, detail="boom"))
    assert record(store, "exec-1", succeeded(done))
    # When all of them and an unknown id are redriven
    # Then only the FAILED one is, answered position by position
    assert store.client.redrive_many([pending.task_id, failed.task_id, "nope", done.task_id], NOW + 60_000) == [
        False,
        True,
        False,
        False,
    ]
    assert [stored(store, t.task_id).status for t in (pending, failed, done)] == [P, P, S]
    # And a second redrive, later, is a no-op that leaves the first one's due time
    assert store.client.redrive_many([failed.task_id], NOW + 60_001) == [False]
    assert stored(store, failed.task_id).due_ms == NOW + 60_000
    assert store.client.redrive_many([], NOW) == []


# -- cancel and reschedule -------------------------------------------------------------------------------------------
def test_cancel_of_a_pending_task_makes_the_arm_that_was_coming_lose(store: Stores, tasks: TaskFactory) -> None:
    # Given a PENDING task, dispatched to an executor that has not armed it yet
    task = tasks.create(NOW + 10_000)
    # When it is cancelled
    cancelled = store.client.cancel(task.task_id, NOW + 1)
    # Then it is CANCELLED, finished then, and no look for due work finds it any more
    assert (cancelled.status, ms(cancelled.finished_at)) == (X, NOW + 1)
    assert stored(store, task.task_id).status is X
    assert due_ids(store, task.due_ms) == []
    # ... and the executor loses at arm: it will never fire
    assert arm(store, task, "exec-1", NOW + 2) is None
    assert stored(store, task.task_id).status is X


def test_cancel_of_an_armed_task_within_its_lease_is_refused_with_the_task(store: Stores, tasks: TaskFactory) -> None:
    # Given a task armed until L by an executor found dead long before (its task lease decides a cancel)
    lease_end = NOW + ARMED_LEASE_MS
    task = armed_task(store, tasks, "exec-1", lease_until_ms=lease_end, alive_until_ms=NOW + 1)
    # When the client cancels it while the lease is live (up to and including L)
    for at in (NOW + 2, lease_end):
        with pytest.raises(TaskStateError) as info:
            store.client.cancel(task.task_id, at)
        # Then the error carries the task as it was: ARMED, owned by its executor
        assert (info.value.task.status, info.value.task.armed_by) == (A, "exec-1")
    # And one millisecond after the lease, the cancel wins
    assert store.client.cancel(task.task_id, lease_end + 1).status is X


def test_cancel_of_a_finished_task_is_refused_with_the_task(store: Stores, tasks: TaskFactory) -> None:
    # Given a cancelled task
    task = tasks.create(NOW + 10_000)
    store.client.cancel(task.task_id, NOW)
    # When it is cancelled or rescheduled again / Then it is refused, the error carrying the CANCELLED task
    with pytest.raises(TaskStateError) as info:
        store.client.cancel(task.task_id, NOW + 1)
    assert (info.value.task.status, ms(info.value.task.finished_at)) == (X, NOW)
    with pytest.raises(TaskStateError) as info:
        store.client.reschedule(task.task_id, NOW + 60_000, NOW + 1)
    assert info.value.task.status is X


def test_cancel_or_reschedule_of_an_unknown_task_is_not_found(store: Stores) -> None:
    # Given an empty store / When an unknown task is cancelled or rescheduled / Then it is not found
    with pytest.raises(TaskNotFoundError):
        store.client.cancel("nobody", NOW)
    with pytest.raises(TaskNotFoundError):
        store.client.reschedule("nobody", NOW + 1_000, NOW)
    assert store.client.get("nobody") is None


def test_reschedule_moves_the_due_time_and_an_arm_by_the_old_one_loses(store: Stores, tasks: TaskFactory) -> None:
    # Given a PENDING task, dispatched at its due time
    task = tasks.create(NOW + 10_000)
    new_due = NOW + 10 * BUCKET_MS + 123
    # When the client moves it ten minutes later
    moved = store.client.reschedule(task.task_id, new_due, NOW + 1)
    # Then it is PENDING again, due later, without owner, with the content of the moved task
    assert (moved.status, moved.due_ms, moved.batch_id, moved.lease_until) == (P, new_due, None, None)
    assert moved.content_hash() == task.model_copy(update={"due_at": moved.due_at}).content_hash()
    assert stored(store, task.task_id).due_ms == new_due
    # ... a look up to its old time no longer finds it, one up to its new time does
    assert due_ids(store, task.due_ms + BUCKET_MS) == []
    assert due_ids(store, new_due) == [task.task_id]
    # ... and the executor it was dispatched to by the old due time loses at arm
    assert arm(store, task, "exec-1", NOW + 2) is None


def test_reschedule_of_an_armed_task_within_its_lease_is_refused(store: Stores, tasks: TaskFactory) -> None:
    # Given a task armed by exec-1
    task = armed_task(store, tasks)
    # When the client moves it / Then it is refused, with the task, and the due time is unchanged
    with pytest.raises(TaskStateError) as info:
        store.client.reschedule(task.task_id, NOW + 60_000, NOW + 1)
    assert (info.value.task.status, info.value.task.armed_by) == (A, "exec-1")
    assert stored(store, task.task_id).due_ms == task.due_ms


# -- finding due work ------------------------------------------------------------------------------------------------
def test_find_due_includes_overdue_tasks_however_old(store: Stores, tasks: TaskFactory) -> None:
    # Given a task due 12 minutes ago and one due 2 minutes ago, both never armed
    old = tasks.create(NOW - 12 * BUCKET_MS, now_ms=NOW - 13 * BUCKET_MS)
    recent = tasks.create(NOW - 2 * BUCKET_MS, now_ms=NOW - 3 * BUCKET_MS)
    # When the store is asked for what is due now, again, and again 5 minutes later
    first = store.dispatch.find_due(NOW, NOW + 90_000)
    second = store.dispatch.find_due(NOW + 1_000, NOW + 91_000)
    later = store.dispatch.find_due(NOW + 5 * BUCKET_MS, NOW + 5 * BUCKET_MS + 90_000)
    # Then every look finds both (a look never leaves an active task behind), and says it looked back that far
    for scan in (first, second, later):
        assert sorted(c.task_id for c in scan.candidates) == sorted([old.task_id, recent.task_id])
        assert scan.watermark_ms <= old.due_ms
        assert (scan.recovered, scan.undecodable, scan.complete) == (0, 0, True)


def test_find_due_finds_a_task_written_late_after_an_earlier_look(store: Stores, tasks: TaskFactory) -> None:
    # Given a look for due work that found nothing (and may have moved its bookkeeping up to now)
    assert due_ids(store, NOW + 90_000) == []
    assert due_ids(store, NOW + BUCKET_MS + 90_000, NOW + BUCKET_MS) == []
    # When a task due 5 minutes ago is written afterwards (a client's late schedule, a slow write)
    late = tasks.create(NOW - 5 * BUCKET_MS, now_ms=NOW + BUCKET_MS + 1)
    # Then the next look finds it
    assert due_ids(store, NOW + BUCKET_MS + 90_000, NOW + BUCKET_MS + 2) == [late.task_id]


def test_find_due_window_ends_at_until_included(store: Stores, tasks: TaskFactory) -> None:
    # Given tasks due at U - 1, U and U + 1
    until = NOW + 90_000
    before, at, after = (tasks.create(until + d) for d in (-1, 0, 1))
    # When the store is asked for what is due up to U / Then the first two are found, the third is not
    assert sorted(due_ids(store, until)) == sorted([before.task_id, at.task_id])
    assert after.task_id in due_ids(store, until + 1)


def test_find_due_leaves_finished_tasks_out(store: Stores, tasks: TaskFactory) -> None:
    # Given tasks due soon, armed by an executor that is gone: one recorded, one failed, one missed; and one
    # cancelled and one PENDING
    done, failed, missed = (armed_task(store, tasks, alive_until_ms=NOW) for _ in range(3))
    assert (
        store.firing.record_many(
            "exec-1",
            [succeeded(done), succeeded(failed, outcome=Outcome.FAILED), succeeded(missed, outcome=Outcome.MISSED)],
        )
        == [True] * 3
    )
    cancelled, pending = (tasks.create(NOW + 10_000 + i) for i in range(2))
    store.client.cancel(cancelled.task_id, NOW)
    # When the store is asked for what is due / Then only the active one is found
    assert due_ids(store, NOW + 90_000, NOW + 1) == [pending.task_id]


def test_find_due_recovers_from_the_dead_and_leaves_the_live_owners_tasks_out(
    store: Stores, tasks: TaskFactory
) -> None:
    # Given at T: a PENDING task; one armed by an executor alive until T - 1; one armed by an executor alive
    # throughout whose task lease ended at T - 1; and one armed by an executor alive until T
    at = NOW + 30_000
    pending = tasks.create(NOW + 10_000)
    dead_owners = armed_task(store, tasks, "exec-dead", alive_until_ms=at - 1)
    lease_ended = armed_task(store, tasks, "exec-1", lease_until_ms=at - 1)
    live = armed_task(store, tasks, "exec-live", alive_until_ms=at)
    # When due work is looked for at T
    scan = store.dispatch.find_due(at, NOW + 90_000)
    # Then the first three are found, the two armed ones counted as recovered, each as the store has it
    assert sorted(scan.candidates, key=lambda c: c.task_id) == sorted(
        (candidate(stored(store, t.task_id)) for t in (pending, dead_owners, lease_ended)), key=lambda c: c.task_id
    )
    assert (scan.recovered, scan.undecodable, scan.complete) == (2, 0, True)
    # ... and the live executor's task one millisecond later
    assert live.task_id in due_ids(store, NOW + 90_000, at + 1)


def test_find_due_lists_each_active_task_once_with_its_status_and_lease(store: Stores, tasks: TaskFactory) -> None:
    # Given 40 tasks due over 4 minutes (several minutes and shards), one armed by an executor found dead, one
    # armed by a live one, one rescheduled within the window and one rescheduled out of it
    created = [tasks.create(NOW - BUCKET_MS + 6_007 * i, now_ms=NOW - 2 * BUCKET_MS) for i in range(40)]
    dead_ones, live_ones, moved_in, moved_out = created[3], created[4], created[5], created[6]
    alive(store, "exec-dead", NOW - 1)
    alive(store, "exec-live", NOW + ALIVE_MS)
    assert arm(store, dead_ones, "exec-dead", NOW - 2, lease_until_ms=NOW + ARMED_LEASE_MS) is not None
    assert arm(store, live_ones, "exec-live", NOW - 2, lease_until_ms=NOW + ARMED_LEASE_MS) is not None
    store.client.reschedule(moved_in.task_id, NOW + 2 * BUCKET_MS, NOW)
    store.client.reschedule(moved_out.task_id, NOW + 60 * BUCKET_MS, NOW)
    until = NOW + 3 * BUCKET_MS
    # When the store is asked for what is due up to 3 minutes from now
    scan = store.dispatch.find_due(NOW, until)
    # Then each armable task in the window is there once, as the store has it now
    ids = [c.task_id for c in scan.candidates]
    assert len(ids) == len(set(ids))
    assert set(ids) == {t.task_id for t in created} - {moved_out.task_id, live_ones.task_id}
    by_id = {c.task_id: c for c in scan.candidates}
    assert (
        by_id[dead_ones.task_id].status,
        by_id[dead_ones.task_id].lease_until_ms,
        by_id[dead_ones.task_id].owner,
    ) == (A, NOW + ARMED_LEASE_MS, "exec-dead")
    assert by_id[moved_in.task_id].due_ms == NOW + 2 * BUCKET_MS
    assert by_id[created[0].task_id] == candidate(stored(store, created[0].task_id))
    assert all(c.due_ms <= until for c in scan.candidates)
    assert scan.recovered == 1


def test_find_due_out_of_time_stops_early_and_the_next_call_finds_the_rest(store: Stores, tasks: TaskFactory) -> None:
    # Given 8 PENDING tasks due over the last 8 minutes (written before each was due)
    created = [tasks.create(NOW - k * BUCKET_MS, now_ms=NOW - 9 * BUCKET_MS) for k in range(1, 9)]
    everything = {t.task_id for t in created}
    asked: list[int] = []

    def out_of_time_after_one_look() -> bool:
        asked.append(1)
        return len(asked) > 1

    # When a look runs out of time at once / Then it is incomplete and has found nothing
    stopped = store.dispatch.find_due(NOW, NOW + 90_000, out_of_time=lambda: True)
    assert (stopped.candidates, stopped.complete) == ([], False)
    # When one runs out of time after its first step / Then it is incomplete and found only some of them
    partial = store.dispatch.find_due(NOW, NOW + 90_000, out_of_time=out_of_time_after_one_look)
    assert partial.complete is False
    assert {c.task_id for c in partial.candidates} < everything
    # And the next look, with time enough, finds every one of them
    full = store.dispatch.find_due(NOW, NOW + 90_000, out_of_time=lambda: False)
    assert ({c.task_id for c in full.candidates}, full.complete) == (everything, True)


def test_find_due_hands_each_part_to_on_found_before_it_returns(store: Stores, tasks: TaskFactory) -> None:
    # Given 10 PENDING tasks due over the last three minutes and the next one
    created = [tasks.create(NOW - 3 * BUCKET_MS + 27_011 * i, now_ms=NOW - 4 * BUCKET_MS) for i in range(10)]
    parts: list[list[str]] = []
    # When due work is looked for, noting each part handed over
    scan = store.dispatch.find_due(NOW, NOW + 90_000, on_found=lambda part: parts.append([c.task_id for c in part]))
    # Then the parts hold exactly what the look found, each task once, and no part is empty
    handed = [task_id for part in parts for task_id in part]
    assert sorted(handed) == sorted(c.task_id for c in scan.candidates) == sorted(t.task_id for t in created)
    assert len(handed) == len(set(handed))
    assert all(parts)


def test_count_active_counts_a_tenants_pending_and_armed_tasks(store: Stores, tasks: TaskFactory) -> None:
    # Given acme's tasks: two PENDING, one ARMED, one cancelled, one recorded; beta's one; and acme's schedule
    for i in range(2):
        tasks.create(NOW + 10_000 + i, f"acme/pending-{i}")
    armed_task(store, tasks, task_id="acme/armed")
    done = armed_task(store, tasks, task_id="acme/done")
    assert record(store, "exec-1", succeeded(done))
    store.client.cancel(tasks.create(NOW + 10_000, "acme/cancelled").task_id, NOW)
    tasks.create(NOW + 10_000, "beta/pending")
    schedule = Schedule(schedule_id="acme/daily", expression="rate(1 hour)", action=LogAction(), next_due_ms=NOW)
    store.schedules.create_schedule(schedule, [], NOW)
    # When each tenant's active tasks are counted / Then only its PENDING and ARMED tasks count
    assert (
        store.client.count_active("acme"),
        store.client.count_active("beta"),
        store.client.count_active("gamma"),
    ) == (3, 1, 0)


# -- the poll's start, for the fast path --------------------------------------------------------------------------
def test_a_polls_noted_start_is_read_back_and_never_moves_back(store: Stores, tasks: TaskFactory) -> None:
    # Given a store where no poll has started yet, and a due task  Then no start is known
    assert store.dispatch.last_polls() == [None]
    tasks.create(NOW + 1_000, "t-due")
    # When a poll notes its start, then an earlier start is noted
    assert store.dispatch.mark_polled(NOW) is True
    assert store.dispatch.mark_polled(NOW - 1) is False
    # Then the later start is read back, and finding due work is not changed by it
    assert store.dispatch.last_polls() == [NOW]
    assert [c.task_id for c in store.dispatch.find_due(NOW, NOW + 90_000).candidates] == ["t-due"]
    assert store.dispatch.last_polls() == [NOW]
    assert store.dispatch.mark_polled(NOW + 60_000) is True
    assert store.dispatch.last_polls() == [NOW + 60_000]
