"""Races on the store's conditional writes, with real threads: part of the contract, run on every store whose
writes stay atomic under concurrency (DynamoDB Local; moto's server is not).

Each thread has a store (and connection) of its own, as separate pollers, executors and clients would. Every
write is given one fixed ``now`` that does not move, with leases far beyond it, so no lease can end during a
race however slow the machine: a second winner can only come from a broken condition. Only counts and states
are asserted, never how long anything took.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from contract_tools import ARMED_LEASE_MS, LEASE_MS, NOW, Backend, candidate, due_ids

from punctual.errors import TaskStateError
from punctual.keys import BUCKET_MS, from_ms
from punctual.model import LogAction, Task, TaskStatus
from punctual.store import TaskStore
from support import run_threads

CHUNK = 10  # tasks per claim_many / arm_many call of one racer
TIMEOUT_S = 120  # a hung racer fails the test instead of hanging it; no property depends on it


def make_tasks(store: TaskStore, prefix: str, count: int, due_ms: Callable[[int], int] = lambda i: NOW + 60_000 + i,
               ) -> list[Task]:
    """``count`` PENDING tasks created at NOW, the i-th due at ``due_ms(i)``."""
    created = [Task(task_id=f"{prefix}-{i:04d}", due_at=from_ms(due_ms(i)), action=LogAction(message=prefix),
                    payload={"i": i}) for i in range(count)]
    assert all(store.create(task, NOW)[1] for task in created)
    return created


def order_of(k: int, items: list[Task]) -> list[Task]:
    """The k-th racer's order: rotated by a step of its own, every other one reversed (so they meet mid-way)."""
    shift = k * 31 % len(items)
    order = items[shift:] + items[:shift]
    return order[::-1] if k % 2 else order


def chunks(items: list[Task]) -> list[list[Task]]:
    return [items[i : i + CHUNK] for i in range(0, len(items), CHUNK)]


def cancel_each(store: TaskStore, tasks: list[Task]) -> dict[str, TaskStatus | None]:
    """Cancel every task at NOW + 1: None where the cancel won, else the status carried by the refusal."""
    outcome: dict[str, TaskStatus | None] = {}
    for task in tasks:
        try:
            store.cancel(task.task_id, NOW + 1)
            outcome[task.task_id] = None
        except TaskStateError as exc:
            outcome[task.task_id] = exc.task.status
    return outcome


def claim_each(store: TaskStore, tasks: list[Task], batch_id: str, poller_id: str) -> dict[str, bool]:
    """Claim every task (by its due time as created) at NOW into ``batch_id``, last due first, a chunk at a
    time: whether each claim won."""
    won: dict[str, bool] = {}
    for part in chunks(tasks[::-1]):
        won.update(zip([t.task_id for t in part],
                       store.claim_many([(candidate(t), batch_id) for t in part], poller_id, NOW, LEASE_MS),
                       strict=True))
    return won


# -- claim ---------------------------------------------------------------------------------------------------------
def test_eight_claimers_racing_for_the_same_tasks_leave_exactly_one_winner_each(race_backend: Backend) -> None:
    # Given 60 PENDING tasks, and 8 claimers, each with its own store, batch and poller id, each going through
    # all of them in an order of its own, at one fixed instant (no lease can end during the race)
    tasks = make_tasks(race_backend.store, "race", 60)
    claimers = [race_backend.new_store() for _ in range(8)]

    def claim_all(k: int) -> dict[str, bool]:
        won: dict[str, bool] = {}
        for part in chunks(order_of(k, tasks)):
            flags = claimers[k].claim_many([(candidate(t), f"batch-{k}") for t in part], f"poller-{k}", NOW, LEASE_MS)
            won.update(zip([t.task_id for t in part], flags, strict=True))
        return won

    # When they all claim at once
    results = run_threads([lambda k=k: claim_all(k) for k in range(len(claimers))], timeout=TIMEOUT_S)

    # Then every task has exactly one winner
    winners: dict[str, list[int]] = {t.task_id: [] for t in tasks}
    for k, won in enumerate(results):
        assert set(won) == set(winners)
        for task_id, ok in won.items():
            if ok:
                winners[task_id].append(k)
    assert {task_id: ks for task_id, ks in winners.items() if len(ks) != 1} == {}
    # ... and the store agrees: CLAIMED by the winner's batch and poller, claimed once
    after = race_backend.store.get_many(list(winners))
    assert {task_id: (t.status, t.batch_id, t.claimed_by, t.attempt) for task_id, t in after.items()} == {
        task_id: (TaskStatus.CLAIMED, f"batch-{k}", f"poller-{k}", 1) for task_id, (k,) in winners.items()}


def test_concurrent_creates_of_the_same_task_store_it_once(race_backend: Backend) -> None:
    # Given 20 tasks, and 8 clients that all create each of them (the same id, the same content)
    tasks = [Task(task_id=f"same-{i:02d}", due_at=from_ms(NOW + 60_000 + i), action=LogAction(), payload={"i": i})
             for i in range(20)]
    clients = [race_backend.new_store() for _ in range(8)]

    def create_each(k: int) -> list[tuple[str, bool]]:
        return [(task.task_id, clients[k].create(task, NOW + k)[1]) for task in order_of(k, tasks)]

    # When they race
    results = run_threads([lambda k=k: create_each(k) for k in range(len(clients))], timeout=TIMEOUT_S)

    # Then each task was created exactly once (the others got the existing task back) and is PENDING
    created = Counter(task_id for flags in results for task_id, flag in flags if flag)
    assert created == Counter({t.task_id: 1 for t in tasks})
    after = race_backend.store.get_many([t.task_id for t in tasks])
    assert {t.status for t in after.values()} == {TaskStatus.PENDING}
    assert all(after[t.task_id].content_hash() == t.content_hash() for t in tasks)


# -- arm: a batch delivered to many executors at once ------------------------------------------------------------
def test_a_batch_armed_by_six_executors_at_once_is_armed_once_per_task(race_backend: Backend) -> None:
    # Given 40 tasks claimed into one batch, and that batch delivered to 6 executors at once (a duplicated
    # delivery), each with its own store
    store = race_backend.store
    tasks = make_tasks(store, "dup", 40)
    assert all(claim_each(store, tasks, "batch-1", "poller-1").values())
    executors = [race_backend.new_store() for _ in range(6)]

    def arm_all(k: int) -> dict[str, str | None]:
        armed: dict[str, str | None] = {}
        for part in chunks(order_of(k, tasks)):
            got = executors[k].arm_many([(t.task_id, NOW + ARMED_LEASE_MS) for t in part], "batch-1", f"exec-{k}")
            armed.update((t.task_id, a.armed_by if a else None) for t, a in zip(part, got, strict=True))
        return armed

    # When they all arm the batch
    results = run_threads([lambda k=k: arm_all(k) for k in range(len(executors))], timeout=TIMEOUT_S)

    # Then each task was armed by exactly one of them (and handed to that one as armed by it)
    winners: dict[str, list[int]] = {t.task_id: [] for t in tasks}
    for k, armed in enumerate(results):
        for task_id, by in armed.items():
            if by is not None:
                assert by == f"exec-{k}"
                winners[task_id].append(k)
    assert {task_id: ks for task_id, ks in winners.items() if len(ks) != 1} == {}
    # ... and the store names that executor
    after = store.get_many(list(winners))
    assert {task_id: (t.status, t.armed_by) for task_id, t in after.items()} == {
        task_id: (TaskStatus.ARMED, f"exec-{k}") for task_id, (k,) in winners.items()}


# -- cancel and reschedule against claim and arm -------------------------------------------------------------------
def test_cancel_racing_claim_leaves_every_task_cancelled_and_unarmable(race_backend: Backend) -> None:
    # Given 60 PENDING tasks, a canceller and a claimer with stores of their own
    tasks = make_tasks(race_backend.store, "cxl", 60)
    canceller, claimer, armer = (race_backend.new_store() for _ in range(3))

    # When one cancels every task while the other claims every task (in the opposite order)
    cancel_lost_to, claimed = run_threads(
        [lambda: cancel_each(canceller, tasks), lambda: claim_each(claimer, tasks, "batch-x", "poller-x")],
        timeout=TIMEOUT_S,
    )

    # Then every cancel won: a claim either lost to an earlier cancel or was overridden by a later one (a CLAIMED
    # task can still be cancelled; its executor then loses at ARM)
    assert {task_id: status for task_id, status in cancel_lost_to.items() if status is not None} == {}
    # ... so arming the claimed tasks afterwards fails for each of them
    won = [task_id for task_id, ok in claimed.items() if ok]
    assert [a for a in armer.arm_many([(t, NOW + ARMED_LEASE_MS) for t in won], "batch-x", "exec-late") if a] == []
    # ... and no task is both cancelled and claimed or armed; no look for due work finds any of them
    after = race_backend.store.get_many([t.task_id for t in tasks])
    assert {(t.status, t.batch_id, t.armed_by, t.lease_until) for t in after.values()} == {
        (TaskStatus.CANCELLED, None, None, None)}
    assert due_ids(race_backend.store, NOW + 90_000) == []


def test_cancel_racing_arm_has_exactly_one_winner_per_task(race_backend: Backend) -> None:
    # Given 60 tasks claimed into one batch, a canceller and an executor with stores of their own
    store = race_backend.store
    tasks = make_tasks(store, "arm", 60)
    assert all(claim_each(store, tasks, "batch-1", "poller-1").values())
    canceller, executor = race_backend.new_store(), race_backend.new_store()

    def arm_all() -> dict[str, bool]:
        armed: dict[str, bool] = {}
        for part in chunks(tasks[::-1]):
            got = executor.arm_many([(t.task_id, NOW + ARMED_LEASE_MS) for t in part], "batch-1", "exec-1")
            armed.update((t.task_id, a is not None) for t, a in zip(part, got, strict=True))
        return armed

    # When one cancels while the other arms (in the opposite order)
    cancel_lost_to, armed = run_threads([lambda: cancel_each(canceller, tasks), arm_all], timeout=TIMEOUT_S)

    # Then per task exactly one of them won; a cancel that lost was told the task is ARMED
    assert {t.task_id for t in tasks if (cancel_lost_to[t.task_id] is None) == armed[t.task_id]} == set()
    assert {cancel_lost_to[t.task_id] for t in tasks if armed[t.task_id]} <= {TaskStatus.ARMED}
    # ... and the store says who: ARMED by the executor, or CANCELLED - never both
    after = store.get_many([t.task_id for t in tasks])
    assert {task_id: (t.status, t.armed_by) for task_id, t in after.items()} == {
        t.task_id: (TaskStatus.ARMED, "exec-1") if armed[t.task_id] else (TaskStatus.CANCELLED, None) for t in tasks}


def test_reschedule_racing_claim_leaves_every_task_pending_at_its_new_time(race_backend: Backend) -> None:
    # Given 40 PENDING tasks, a client moving them and a claimer with stores of their own
    tasks = make_tasks(race_backend.store, "move", 40)
    mover, claimer, armer = (race_backend.new_store() for _ in range(3))
    moved_by_ms = 2 * BUCKET_MS

    def reschedule_all() -> None:
        for task in tasks:
            mover.reschedule(task.task_id, task.due_ms + moved_by_ms, NOW + 1)

    # When one moves every task while the other claims each at its old due time
    _, claimed = run_threads([reschedule_all, lambda: claim_each(claimer, tasks, "batch-old", "poller-z")],
                             timeout=TIMEOUT_S)

    # Then every task is PENDING at its new due time, without owner (a claim at the old time lost, or was undone)
    after = race_backend.store.get_many([t.task_id for t in tasks])
    assert {task_id: (t.status, t.due_ms, t.batch_id, t.lease_until) for task_id, t in after.items()} == {
        t.task_id: (TaskStatus.PENDING, t.due_ms + moved_by_ms, None, None) for t in tasks}
    # ... the old batch can arm none of them
    won = [task_id for task_id, ok in claimed.items() if ok]
    assert [a for a in armer.arm_many([(t, NOW + ARMED_LEASE_MS) for t in won], "batch-old", "exec-old") if a] == []
    # ... a look for due work finds each once, at its new time, and each can be claimed afresh there
    found = race_backend.store.find_due(NOW + 2, NOW + moved_by_ms + 90_000).candidates
    assert sorted(c.task_id for c in found) == sorted(t.task_id for t in tasks)
    assert all(c.due_ms == after[c.task_id].due_ms for c in found)
    assert armer.claim_many([(c, "batch-new") for c in found], "poller-z", NOW + 2, LEASE_MS) == [True] * len(found)
