"""Death known, fenced at once: Lambda's retry of a crashed invocation takes its earlier attempt's tasks over at
once (not after a lease and a poll), a duplicate of another invocation does not, and a local restart fences
every executor the killed stack left."""

from __future__ import annotations

from typing import Any

from punctual.config.settings import Settings
from punctual.domain.clock import SystemClock
from punctual.domain.events import BatchEvent, BatchTask
from punctual.domain.model import TaskStatus
from punctual.stores.dynamodb import DynamoStores
from support import arm, executor_on, read_task


def _armed_by_a_crashed_attempt(
    store: DynamoStores,
    tasks: Any,
    settings: Settings,
    invocation: str,
) -> tuple[BatchEvent, list[str]]:
    """Three tasks due 1-2 s from now, armed by an executor of ``invocation`` that has since died, its lease
    still 20 s ahead (as a process killed by Lambda leaves it)."""
    now = int(SystemClock().wall_ms())
    created = [tasks.create(now + 1_000 + 500 * i, now_ms=now) for i in range(3)]
    assert store.firing.heartbeat("x-dead", now, now + settings.executor_lease_ms, invocation)
    for task in created:
        assert arm(store, task, "x-dead", now, batch_id="b-1") is not None
    event = BatchEvent(
        batch_id="b-1",
        dispatcher="p-1",
        tasks=[
            BatchTask(task_id=t.task_id, due_ms=t.due_ms, grace_ms=t.misfire_grace_ms, misfire_policy=t.misfire_policy)
            for t in created
        ],
    )
    return event, [t.task_id for t in created]


def test_lambdas_retry_of_the_same_invocation_fences_its_earlier_attempt_and_fires_on_time(
    store: DynamoStores, tasks: Any, settings: Settings
) -> None:
    # Given a batch armed by an attempt of invocation req-1 that crashed, its lease 20 s ahead
    event, ids = _armed_by_a_crashed_attempt(store, tasks, settings, "req-1")
    executor = executor_on(store, settings)
    try:
        # When Lambda retries req-1 at once
        report = executor.run_batch(event, invocation="req-1")
    finally:
        executor.close()
    # Then the retry fenced the earlier attempt and took every task over: all due after now, all fired on time
    assert (report.taken_over, report.succeeded, report.missed) == (3, 3, 0)
    assert all(read_task(store, task_id).status is TaskStatus.SUCCEEDED for task_id in ids)
    # And the earlier attempt can never renew
    assert (
        store.firing.heartbeat("x-dead", int(SystemClock().wall_ms()), int(SystemClock().wall_ms()) + 20_000) is False
    )


def test_a_delivery_of_another_invocation_does_not_fence_a_live_owner(
    store: DynamoStores, tasks: Any, settings: Settings
) -> None:
    # Given a batch armed by a live executor of invocation req-1
    event, ids = _armed_by_a_crashed_attempt(store, tasks, settings, "req-1")
    executor = executor_on(store, settings)
    try:
        # When another invocation (req-2) delivers the same batch
        report = executor.run_batch(event, invocation="req-2")
    finally:
        executor.close()
    # Then it loses every task at ARM: nothing fenced, nothing taken, nothing fired by it
    assert (report.armed, report.lost_arm, report.taken_over, report.fired) == (0, 3, 0, 0)
    assert all(read_task(store, task_id).armed_by == "x-dead" for task_id in ids)
    now = int(SystemClock().wall_ms())
    assert store.firing.heartbeat("x-dead", now, now + 20_000, "req-1")


def test_a_restart_fences_every_executor_still_alive_and_only_those(store: DynamoStores) -> None:
    # Given two executors alive until 20 s from now and one whose lease has ended
    now = int(SystemClock().wall_ms())
    for executor_id, until in (("x-a", now + 20_000), ("x-b", now + 20_000), ("x-old", now - 1)):
        assert store.firing.heartbeat(executor_id, now - 5_000, until)
    # When a restart fences what the killed stack left
    fenced = store.firing.fence_live_executors(now)
    # Then the two live ones are fenced (they can never renew), the lapsed one is left as it is
    assert sorted(fenced) == ["x-a", "x-b"]
    assert store.firing.heartbeat("x-a", now, now + 20_000) is False
    assert store.firing.heartbeat("x-b", now, now + 20_000) is False
    assert store.firing.heartbeat("x-old", now, now + 20_000)
