"""Faults inside an executor: it dies after arming (with tasks due long after), it dies after firing but before
recording, or it starts only after the tasks' grace has passed.

An executor shows it is alive with a heartbeat (``alive_until = now + executor_lease_ms``, renewed every
``heartbeat_interval_ms``) and fires only within it. When it dies, the heartbeat lapses; the first poll after
its last ``alive_until`` (A) dispatches its ARMED tasks, and the executor that gets them takes them over.
Only the crash window may be lost: a task due at or before A may have fired, so it is MISSED under the misfire
policy "skip" and fired again with the same idempotency key under "fire_late"; a task due after A fires, once
(late only if it was due before the takeover). Polls run on an explicit clock (at A, and one ms after it);
executors run on the real clock with a 5 s executor lease (renewed every second), so that A comes within
seconds and a slow machine still renews in time.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fault_tools import (
    EPSILON_MS,
    SHORT_LEASE,
    DiesAfterArm,
    DiesAfterFire,
    NotesArmTime,
    alive_until,
    crash_window,
    dead_for_good,
    http_tasks,
    judge,
    report_figures,
    takeover_marks,
)

from punctual.config.settings import Settings
from punctual.domain.events import BatchEvent
from punctual.domain.model import Task, TaskStatus
from punctual.executing import executor as executor_module
from punctual.executing.executor import Executor
from punctual.runtime.wiring import poller_on
from punctual_tools.local.target import TargetServer
from support import RecordingInvoker, create_all, now_ms, one_batch, store_for, wait_until

pytestmark = pytest.mark.integration


def dispatch_one_batch(settings: Settings, tasks: list[Task], at_ms: int | None = None) -> BatchEvent:
    """One poll (at ``at_ms``, by default now); the single batch it dispatched, holding every task."""
    invoker = RecordingInvoker()
    report = poller_on(store_for(settings), invoker, settings).poll(now_ms() if at_ms is None else at_ms)
    assert report.dispatched == len(tasks)
    event = one_batch(invoker)
    return event


def wait_past(instant_ms: int) -> None:
    """Sleep until the wall clock is past ``instant_ms``."""
    assert wait_until(lambda: now_ms() > instant_ms, timeout=(instant_ms - now_ms()) / 1000 + 10, interval=0.02)


# -- 4. an executor dies after arming, holding tasks due over the next seconds --------------------------------
@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("policy", ["skip", "fire_late"])
def test_an_executor_dropped_after_arming_250_tasks_costs_only_its_crash_window(  # noqa: PLR0915 - one fault scenario told from Given to Then; its steps read in order
    policy: str,
    monkeypatch: pytest.MonkeyPatch,
    make_settings: Callable[..., Settings],
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 250 tasks due from 4 s to 44 s from now (Lambda's case is 80 s; the property is the same at any
    # length; 40 s leave room for a slow machine's arming before the 5 s lease ends and still keep tasks due
    # after it), dispatched in one batch; executor leases of 5 s
    settings = make_settings(**SHORT_LEASE, max_batch_size=250, db_threads=8)
    base = now_ms() + 4_000
    tasks = http_tasks(f"drop-{policy}", [base + 160 * i for i in range(250)], target.url, misfire_policy=policy)
    ids = [t.task_id for t in tasks]
    due = {t.task_id: t.due_ms for t in tasks}
    create_all(store_for(settings), tasks)
    event = dispatch_one_batch(settings, tasks)

    # When an executor arms them and is dropped right after (Lambda ends its environment): its heartbeat is
    # neither renewed nor retired, it fires nothing and writes nothing more
    # (armed in one part, as a batch with a long lead is: the executor fires nothing before the whole batch is
    # armed, and it dies then)
    monkeypatch.setattr(executor_module, "ARM_AHEAD_MS", -(2**62))
    dying = store_for(settings, DiesAfterArm)
    dead = make_executor(dying, settings)
    dying.firing.on_armed = dead.request_stop  # type: ignore[attr-defined]
    dead_report = dead.run_batch(event)
    assert (dead_report.armed, dead_report.fired, dead_report.released) == (len(tasks), 0, 0)
    assert {t.status for t in store_for(settings).client.get_many(ids).values()} == {TaskStatus.ARMED}
    last_alive = alive_until(settings, dead_report.executor_id)
    assert last_alive is not None
    window = sorted(task_id for task_id in ids if due[task_id] <= last_alive)
    assert 0 < len(window) < len(tasks), "the crash window should hold some of the tasks, not all"
    # ... polls (on a clock the scenario controls) run at its last alive instant and one ms after it
    invoker = RecordingInvoker()
    poller = poller_on(store_for(settings), invoker, settings)
    at_edge = poller.poll(last_alive)
    after = poller.poll(last_alive + 1)
    # ... and the executor the second poll invoked runs once that instant has passed (on the real clock)
    wait_past(last_alive + 1)
    taker_store = store_for(settings, NotesArmTime)
    taken_event = one_batch(invoker)
    taker = make_executor(taker_store, settings).run_batch(taken_event)
    detected = taker_store.firing.armed_at_ms  # type: ignore[attr-defined]
    assert detected is not None

    # Then at its last alive ms the dead executor still held every task; one ms later all were dispatched
    assert (at_edge.dispatched, at_edge.recovered) == (0, 0)
    assert (after.dispatched, after.recovered) == (len(tasks), len(tasks))
    # ... the new executor took every one over, and the dead one can never renew its heartbeat
    assert (taker.armed, taker.taken_over) == (len(tasks), len(tasks))
    assert dead_for_good(settings, dead_report.executor_id)
    assert takeover_marks(settings, ids[0]) == (dead_report.executor_id, last_alive)
    stored = store_for(settings).client.get_many(ids)
    if policy == "skip":
        # ... only the crash window (due at or before its last alive instant) is MISSED, saying why
        assert sorted(t for t, task in stored.items() if task.status is TaskStatus.MISSED) == window
        assert all("executor was lost" in (stored[t].detail or "") for t in window)
        assert taker.missed == len(window)
        assert taker.fired == len(tasks) - len(window)
    else:
        # ... the crash window fires again (it may have fired: same idempotency key), flagged late
        assert {t.status for t in stored.values()} == {TaskStatus.SUCCEEDED}
        assert sorted(t for t, task in stored.items() if task.late) == window
        assert all("fired again with the same idempotency key" in (stored[t].detail or "") for t in window)
    # ... every later task SUCCEEDED, fired once; those due after the takeover (+ ε) fired on time
    assert {stored[t].status for t in ids if due[t] > last_alive} == {TaskStatus.SUCCEEDED}
    keys = [f"{t}:0" for t in window] if policy == "fire_late" else []
    verdict = judge(
        f"executor dropped after arming 250 tasks, no retry: the lease path ({policy})",
        store_for(settings),
        ids,
        target,
        allowance=keys,
        windows=[crash_window(settings, dead_report.executor_id, due.values())],
    )
    assert len(verdict.explicitly_missed) == (len(window) if policy == "skip" else 0)
    on_time_from = detected + EPSILON_MS
    assert [key for key, _ in verdict.late if due[key.rsplit(":", 1)[0]] > on_time_from] == []
    report_figures(
        f"lease-{policy}",
        {
            "tasks": len(ids),
            "policy": policy,
            "due_in_window": len(window),
            "missed": len(verdict.explicitly_missed),
            "fired_again": len(keys),
            "taken_over_after_lapse_ms": detected - last_alive,
            "due_later": sum(1 for t in ids if due[t] > on_time_from),
            "late_after_takeover": len([key for key, _ in verdict.late if due[key.rsplit(":", 1)[0]] > on_time_from]),
            "lost": len(verdict.lost),
            "unexplained_extra": len(verdict.unexplained),
        },
    )
    print(
        f"crash window: {len(window)} tasks due up to {last_alive - base} ms after the first; taken over "
        f"{detected - last_alive} ms after it lapsed; {sum(1 for t in ids if due[t] > on_time_from)} due later"
    )


# -- 5. crash after fire, before record -----------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_tasks_fired_by_an_executor_that_died_before_recording_are_missed_after_its_lease_and_never_refired(
    make_settings: Callable[..., Settings],
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 30 tasks due in ~3 s, dispatched into one batch; executor leases of 5 s
    settings = make_settings(**SHORT_LEASE)
    due = now_ms() + 3_000
    tasks = http_tasks("crash-fire", [due + 10 * i for i in range(30)], target.url)
    ids = [t.task_id for t in tasks]
    keys = [f"{task_id}:0" for task_id in ids]
    create_all(store_for(settings), tasks)
    event = dispatch_one_batch(settings, tasks)

    # When an executor arms and fires them, and its process dies as it starts recording (no outcome, no more
    # heartbeat)
    report = make_executor(store_for(settings, DiesAfterFire), settings).run_batch(event)
    assert report.armed == len(tasks)
    assert report.not_recorded == len(tasks)
    assert target.wait_for_keys(keys, timeout=30)
    last_alive = alive_until(settings, report.executor_id)
    assert last_alive is not None
    assert last_alive > now_ms()
    # ... Lambda delivers the failed invocation again at once (at least once): a new executor gets the batch
    retry = make_executor(store_for(settings), settings).run_batch(event)
    # ... polls run at the dead executor's last alive instant and one ms after it, and the executor invoked by
    # the second runs once that instant has passed
    invoker = RecordingInvoker()
    poller = poller_on(store_for(settings), invoker, settings)
    at_edge = poller.poll(last_alive)
    after = poller.poll(last_alive + 1)
    wait_past(last_alive + 1)
    taker = make_executor(store_for(settings), settings).run_batch(one_batch(invoker))

    # Then the redelivery, while the dead one's heartbeat held, armed nothing and fired nothing
    assert (retry.armed, retry.fired, retry.lost_arm) == (0, 0, len(tasks))
    # ... the first poll after its heartbeat lapsed dispatched them; the taker recorded them MISSED (all due
    # before its last alive instant: the crash window), saying they may have fired, and fired none again
    assert (at_edge.dispatched, after.dispatched, after.recovered) == (0, len(tasks), len(tasks))
    assert (taker.taken_over, taker.fired, taker.missed) == (len(tasks), 0, len(tasks))
    stored = store_for(settings).client.get_many(ids)
    assert {t.status for t in stored.values()} == {TaskStatus.MISSED}
    assert all("may have fired" in (t.detail or "") for t in stored.values())
    # ... and the target saw each fire once: no extra allowed, none happened
    verdict = judge("crash after fire, before record", store_for(settings), ids, target)
    assert len(verdict.matched) == len(tasks)
    assert not verdict.extra


# -- 7. executor started after the grace ----------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_an_executor_that_starts_after_the_grace_records_its_tasks_missed_without_firing(
    settings: Settings,
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 20 tasks with a 1 s grace, due 5 s ago, dispatched on time (by a poll 6 s ago) into one batch
    now = now_ms()
    due = now - 5_000
    tasks = http_tasks("late-exec", [due + 10 * i for i in range(20)], target.url, grace_ms=1_000)
    ids = [t.task_id for t in tasks]
    create_all(store_for(settings), tasks, created_ms=due - 10_000)
    event = dispatch_one_batch(settings, tasks, at_ms=due - 1_000)

    # When the executor starts only now (a cold start stuck, the async queue backed up), past their grace
    report = make_executor(store_for(settings), settings).run_batch(event)

    # Then it armed them (from PENDING), fired none, and recorded each MISSED
    assert (report.armed, report.fired, report.missed) == (len(tasks), 0, len(tasks))
    stored = store_for(settings).client.get_many(ids)
    assert {t.status for t in stored.values()} == {TaskStatus.MISSED}
    verdict = judge("executor started after the grace", store_for(settings), ids, target)
    assert len(verdict.explicitly_missed) == len(tasks)
    assert verdict.fires == 0


# -- 4b. Lambda's retry of a dead executor's invocation -------------------------------------------------------
@pytest.mark.timeout(120)
def test_lambdas_retry_of_a_dead_executors_batch_takes_it_over_once_the_heartbeat_lapsed(
    monkeypatch: pytest.MonkeyPatch,
    make_settings: Callable[..., Settings],
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 40 tasks due from 4 s to 12 s from now, in one batch armed by an executor dropped right after
    settings = make_settings(**SHORT_LEASE)
    base = now_ms() + 4_000
    tasks = http_tasks("retry-takeover", [base + 200 * i for i in range(40)], target.url)
    ids = [t.task_id for t in tasks]
    due = {t.task_id: t.due_ms for t in tasks}
    create_all(store_for(settings), tasks)
    event = dispatch_one_batch(settings, tasks)
    monkeypatch.setattr(executor_module, "ARM_AHEAD_MS", -(2**62))  # one part: nothing fires before the executor dies
    dying = store_for(settings, DiesAfterArm)
    dead = make_executor(dying, settings)
    dying.firing.on_armed = dead.request_stop  # type: ignore[attr-defined]
    dead_id = dead.run_batch(event).executor_id
    last_alive = alive_until(settings, dead_id)
    assert last_alive is not None

    # When Lambda retries that invocation (the same event) after the dead one's heartbeat lapsed, with no
    # poll in between
    wait_past(last_alive + 1)
    report = make_executor(store_for(settings), settings).run_batch(event)

    # Then the retry took every task over: the crash window MISSED, every later task fired once
    window = sorted(t for t in ids if due[t] <= last_alive)
    assert (report.armed, report.taken_over, report.missed) == (len(tasks), len(tasks), len(window))
    stored = store_for(settings).client.get_many(ids)
    assert sorted(t for t, task in stored.items() if task.status is TaskStatus.MISSED) == window
    judge("Lambda's retry takes over a dead executor's batch", store_for(settings), ids, target)
