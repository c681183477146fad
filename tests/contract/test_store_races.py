"""Races on the store's conditional writes, with real threads: part of the contract, run on every store whose
writes stay atomic under concurrency (DynamoDB Local; moto's server is not).

Each thread has a store (and connection) of its own, as separate executors and clients would. Every write is
given one fixed ``now`` that does not move, with heartbeats and leases far beyond it, so no lease can end during
a race however slow the machine: a second winner can only come from a broken condition. Only counts and states
are asserted, never how long anything took.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from contract_tools import ALIVE_MS, ARMED_LEASE_MS, NOW, Backend, alive, due_ids

from punctual.domain.keys import BUCKET_MS, from_ms
from punctual.domain.model import Armed, ArmRequest, Task, TaskStatus
from punctual.errors import TaskStateError
from punctual.stores.ports import Stores
from punctual.targets import LogAction
from support import run_threads

CHUNK = 10  # tasks per arm_many call of one racer
TIMEOUT_S = 120  # a hung racer fails the test instead of hanging it; no property depends on it


def make_tasks(
    store: Stores,
    prefix: str,
    count: int,
    due_ms: Callable[[int], int] = lambda i: NOW + 60_000 + i,
) -> list[Task]:
    """``count`` PENDING tasks created at NOW, the i-th due at ``due_ms(i)``."""
    created = [
        Task(task_id=f"{prefix}-{i:04d}", due_at=from_ms(due_ms(i)), action=LogAction(message=prefix), payload={"i": i})
        for i in range(count)
    ]
    assert all(store.client.create(task, NOW)[1] for task in created)
    return created


def order_of(k: int, items: list[Task]) -> list[Task]:
    """The k-th racer's order: rotated by a step of its own, every other one reversed (so they meet mid-way)."""
    shift = k * 31 % len(items)
    order = items[shift:] + items[:shift]
    return order[::-1] if k % 2 else order


def arm_each(store: Stores, tasks: list[Task], executor: str, now_ms: int) -> dict[str, Armed | None]:
    """ARM every task (by its due time as created) for ``executor`` at ``now_ms``, a chunk at a time, in the
    order given: what each arm gave."""
    armed: dict[str, Armed | None] = {}
    for start in range(0, len(tasks), CHUNK):
        part = tasks[start : start + CHUNK]
        got = store.firing.arm_many(
            [ArmRequest(task_id=t.task_id, due_ms=t.due_ms, lease_until_ms=now_ms + ARMED_LEASE_MS) for t in part],
            f"batch-{executor}",
            executor,
            now_ms,
        )
        armed.update(zip([t.task_id for t in part], got, strict=True))
    return armed


def one_winner_each(tasks: list[Task], results: list[dict[str, Armed | None]]) -> dict[str, int]:
    """The racer that won each task; fails unless every task has exactly one, handed the task armed by it."""
    winners: dict[str, list[int]] = {t.task_id: [] for t in tasks}
    for k, armed in enumerate(results):
        assert set(armed) == set(winners)
        for task_id, got in armed.items():
            if got is not None:
                assert got.task.armed_by == f"exec-{k}"
                winners[task_id].append(k)
    assert {task_id: ks for task_id, ks in winners.items() if len(ks) != 1} == {}
    return {task_id: ks[0] for task_id, ks in winners.items()}


def cancel_each(store: Stores, tasks: list[Task], now_ms: int) -> dict[str, TaskStatus | None]:
    """Cancel every task at ``now_ms``: None where the cancel won, else the status carried by the refusal."""
    outcome: dict[str, TaskStatus | None] = {}
    for task in tasks:
        try:
            store.client.cancel(task.task_id, now_ms)
            outcome[task.task_id] = None
        except TaskStateError as exc:
            outcome[task.task_id] = exc.task.status
    return outcome


# -- arm: one batch dispatched to many executors at once ---------------------------------------------------------
def test_six_executors_arming_one_batch_at_once_arm_each_task_once(race_backend: Backend) -> None:
    # Given 60 PENDING tasks dispatched to 6 live executors at once (two pollers, a duplicate delivery, the
    # fast path racing a poll), each with its own store, going through them in an order of its own
    tasks = make_tasks(race_backend.store, "dup", 60)
    executors = [race_backend.new_store() for _ in range(6)]
    for k, executor in enumerate(executors):
        alive(executor, f"exec-{k}", NOW + ALIVE_MS)

    # When they all arm at one fixed instant
    results = run_threads(
        [partial(arm_each, executors[k], order_of(k, tasks), f"exec-{k}", NOW) for k in range(len(executors))],
        timeout=TIMEOUT_S,
    )

    # Then each task was armed by exactly one of them, none taken over
    winners = one_winner_each(tasks, results)
    assert {a.taken_over_until_ms for armed in results for a in armed.values() if a is not None} == {None}
    # ... and the store names that executor, the task armed once
    after = race_backend.store.client.get_many(list(winners))
    assert {task_id: (t.status, t.armed_by, t.attempt) for task_id, t in after.items()} == {
        task_id: (TaskStatus.ARMED, f"exec-{k}", 1) for task_id, k in winners.items()
    }


def test_six_executors_taking_over_from_one_dead_owner_at_once_take_each_task_once(race_backend: Backend) -> None:
    # Given 60 tasks armed by an executor alive until T (it then died), and 6 live executors with stores of
    # their own, to which its tasks were dispatched again
    store = race_backend.store
    until = NOW + 10_000
    tasks = make_tasks(store, "dead", 60)
    alive(store, "exec-dead", until)
    assert None not in arm_each(store, tasks, "exec-dead", NOW).values()
    takers = [race_backend.new_store() for _ in range(6)]
    for k, taker in enumerate(takers):
        alive(taker, f"exec-{k}", NOW + ALIVE_MS)

    # When they all arm them at one fixed instant, T + 1
    results = run_threads(
        [partial(arm_each, takers[k], order_of(k, tasks), f"exec-{k}", until + 1) for k in range(len(takers))],
        timeout=TIMEOUT_S,
    )

    # Then each task was taken over by exactly one of them, each told the dead owner lived until T
    winners = one_winner_each(tasks, results)
    assert {a.taken_over_until_ms for armed in results for a in armed.values() if a is not None} == {until}
    # ... the store names the new owner, the task armed twice in all; the dead owner can never renew
    after = store.client.get_many(list(winners))
    assert {task_id: (t.status, t.armed_by, t.attempt) for task_id, t in after.items()} == {
        task_id: (TaskStatus.ARMED, f"exec-{k}", 2) for task_id, k in winners.items()
    }
    assert store.firing.heartbeat("exec-dead", until + 2, until + 20_000) is False


@pytest.mark.parametrize("death", ["fenced", "lapsed"])
def test_six_executors_taking_over_their_own_share_of_one_dead_owners_tasks_at_once_take_them_all(
    race_backend: Backend, death: str
) -> None:
    # Given 60 tasks armed by one executor that died (fenced, as a restarted stack knows; or its heartbeat lapsed
    # at T), its tasks dispatched again in 6 batches of 10 (a catch-up poll cuts them so), each to an executor
    store = race_backend.store
    until = NOW + 10_000
    tasks = make_tasks(store, f"share-{death}", 60)
    alive(store, "exec-dead", until)
    assert None not in arm_each(store, tasks, "exec-dead", NOW).values()
    if death == "fenced":
        assert store.firing.fence("exec-dead", until)
    takers = [race_backend.new_store() for _ in range(6)]
    for k, taker in enumerate(takers):
        alive(taker, f"exec-{k}", NOW + ALIVE_MS)

    # When each takes over its own share at one fixed instant, T + 1 (with no other racer for its tasks)
    shares = [tasks[k * CHUNK : (k + 1) * CHUNK] for k in range(len(takers))]
    results = run_threads(
        [partial(arm_each, takers[k], shares[k], f"exec-{k}", until + 1) for k in range(len(takers))],
        timeout=TIMEOUT_S,
    )

    # Then every task was taken, by the executor it went to: none is left with the dead owner for a later poll
    # (taking over from one owner at once must not make the executors conflict on its heartbeat)
    assert {task_id for armed in results for task_id, got in armed.items() if got is None} == set()
    after = store.client.get_many([t.task_id for t in tasks])
    assert {task_id: t.armed_by for task_id, t in after.items()} == {
        t.task_id: f"exec-{k}" for k, share in enumerate(shares) for t in share
    }
    assert store.firing.heartbeat("exec-dead", until + 2, until + 20_000) is False


def test_concurrent_creates_of_the_same_task_store_it_once(race_backend: Backend) -> None:
    # Given 20 tasks, and 8 clients that all create each of them (the same id, the same content)
    tasks = [
        Task(task_id=f"same-{i:02d}", due_at=from_ms(NOW + 60_000 + i), action=LogAction(), payload={"i": i})
        for i in range(20)
    ]
    clients = [race_backend.new_store() for _ in range(8)]

    def create_each(k: int) -> list[tuple[str, bool]]:
        return [(task.task_id, clients[k].client.create(task, NOW + k)[1]) for task in order_of(k, tasks)]

    # When they race
    results = run_threads([partial(create_each, k) for k in range(len(clients))], timeout=TIMEOUT_S)

    # Then each task was created exactly once (the others got the existing task back) and is PENDING
    created = Counter(task_id for flags in results for task_id, flag in flags if flag)
    assert created == Counter({t.task_id: 1 for t in tasks})
    after = race_backend.store.client.get_many([t.task_id for t in tasks])
    assert {t.status for t in after.values()} == {TaskStatus.PENDING}
    assert all(after[t.task_id].content_hash() == t.content_hash() for t in tasks)


# -- cancel and reschedule against arm -----------------------------------------------------------------------------
def test_cancel_racing_arm_has_exactly_one_winner_per_task(race_backend: Backend) -> None:
    # Given 60 PENDING tasks dispatched to a live executor, and a client cancelling them, with stores of their own
    store = race_backend.store
    tasks = make_tasks(store, "arm", 60)
    canceller, executor = race_backend.new_store(), race_backend.new_store()
    alive(executor, "exec-0", NOW + ALIVE_MS)

    # When one cancels while the other arms (in the opposite order)
    outcomes: list[dict[str, Any]] = run_threads(
        [lambda: cancel_each(canceller, tasks, NOW + 1), lambda: arm_each(executor, tasks[::-1], "exec-0", NOW + 1)],
        timeout=TIMEOUT_S,
    )
    cancel_lost_to, armed = outcomes

    # Then per task exactly one of them won; a cancel that lost was told the task is ARMED
    assert {t.task_id for t in tasks if (cancel_lost_to[t.task_id] is None) == (armed[t.task_id] is not None)} == set()
    assert {cancel_lost_to[t.task_id] for t in tasks if armed[t.task_id]} <= {TaskStatus.ARMED}
    # ... and the store says who: ARMED by the executor, or CANCELLED - never both; no look finds a cancelled one
    after = store.client.get_many([t.task_id for t in tasks])
    assert {task_id: (t.status, t.armed_by) for task_id, t in after.items()} == {
        t.task_id: (TaskStatus.ARMED, "exec-0") if armed[t.task_id] else (TaskStatus.CANCELLED, None) for t in tasks
    }
    assert set(due_ids(store, NOW + 90_000, NOW + 2)) == set()


def test_reschedule_racing_arm_has_exactly_one_winner_per_task(race_backend: Backend) -> None:
    # Given 40 PENDING tasks dispatched to a live executor at their due time, and a client moving each of them
    # two minutes later, with stores of their own
    store = race_backend.store
    tasks = make_tasks(store, "move", 40)
    mover, executor = race_backend.new_store(), race_backend.new_store()
    alive(executor, "exec-0", NOW + ALIVE_MS)
    moved_by_ms = 2 * BUCKET_MS

    def reschedule_each() -> dict[str, bool]:
        moved: dict[str, bool] = {}
        for task in tasks:
            try:
                moved[task.task_id] = mover.client.reschedule(
                    task.task_id, task.due_ms + moved_by_ms, NOW + 1
                ).status is (TaskStatus.PENDING)
            except TaskStateError:
                moved[task.task_id] = False
        return moved

    # When one moves every task while the other arms each by its old due time (in the opposite order)
    outcomes: list[dict[str, Any]] = run_threads(
        [reschedule_each, lambda: arm_each(executor, tasks[::-1], "exec-0", NOW + 1)], timeout=TIMEOUT_S
    )
    moved, armed = outcomes

    # Then per task exactly one of them won: ARMED at its old due time, or PENDING at its new one
    assert {t.task_id for t in tasks if moved[t.task_id] == (armed[t.task_id] is not None)} == set()
    after = store.client.get_many([t.task_id for t in tasks])
    assert {task_id: (t.status, t.due_ms) for task_id, t in after.items()} == {
        t.task_id: (TaskStatus.ARMED, t.due_ms) if armed[t.task_id] else (TaskStatus.PENDING, t.due_ms + moved_by_ms)
        for t in tasks
    }
    # ... and a look for due work finds the moved ones once each, at their new time
    found = store.dispatch.find_due(NOW + 2, NOW + moved_by_ms + 90_000).candidates
    assert sorted(c.task_id for c in found) == sorted(t.task_id for t in tasks if moved[t.task_id])
    assert all(c.due_ms == after[c.task_id].due_ms for c in found)
