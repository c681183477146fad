"""Faults around the poller: two pollers at once (60 tasks with executors, and 10k tasks), an invocation lost
after dispatch, a poller killed mid-dispatch, a tick that hits its deadline (while dispatching, and while
reading), scheduled rules ~119 s apart, and a due index that lags behind the table.

The poller writes nothing per task: it reads the due index and dispatches what is armable (PENDING, or held by
an executor whose heartbeat lapsed); executors arm from PENDING, and of two dispatches of one task all but one
lose at ARM. So whatever a poll did not get to an executor is still PENDING, and the next poll sends it.

Polls run with an explicit ``now_ms`` (simulated where the scenario needs time to pass), and a tick's deadline
on a budget the scenario spends (:class:`fault_tools.TickBudget`); executors run on the real clock, on tasks
whose due times are placed so that they are due in real time when the executor runs.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import pytest
from fault_tools import (
    DroppingInvoker,
    InlineInvoker,
    KillsPollerAfter,
    LaggingIndex,
    PollerKilled,
    SlowIndex,
    SlowInvoker,
    TickBudget,
    http_tasks,
    judge,
    put_all,
)

from punctual.config.settings import Settings
from punctual.domain.events import BatchEvent
from punctual.domain.keys import bucket_start
from punctual.domain.model import ArmRequest, TaskStatus
from punctual.executing.executor import Executor
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import LogAction
from punctual_tools.checker import Fire
from punctual_tools.local.dynamodb_local import make_client
from punctual_tools.local.target import TargetServer
from punctual_tools.template import ensure_table
from support import (
    FIXED_NOW_MS,
    RecordingInvoker,
    create_all,
    make_tasks,
    now_ms,
    run_threads,
    running_dynamodb_local,
    store_for,
    wait_until,
)

pytestmark = pytest.mark.integration
SHARDS = 4


def run_all(make_executor: Callable[..., Executor], settings: Settings, invokers: list[RecordingInvoker]) -> None:
    """Run every collected batch, each on its own executor, all at once."""
    events = [event for invoker in invokers for event in invoker.events]
    executors = [make_executor(store_for(settings), settings) for _ in events]
    if events:
        run_threads([partial(x.run_batch, e) for x, e in zip(executors, events, strict=True)])


def armed_or_done(settings: Settings, task_ids: list[str], timeout: float = 20) -> bool:
    """Wait until no task among ``task_ids`` is PENDING any more (their executors armed them)."""
    store = store_for(settings)
    return wait_until(
        lambda: all(t.status is not TaskStatus.PENDING for t in store.client.get_many(task_ids).values()),
        timeout=timeout,
        interval=0.05,
    )


# -- 2. two pollers at the same instant -----------------------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("write_batch", ["single", "transaction"])
def test_two_pollers_at_the_same_instant_and_a_third_while_executors_hold_the_tasks_fire_each_task_once(
    write_batch: str,
    make_settings: Callable[..., Settings],
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 60 tasks due in ~5 s, and small batches
    settings = make_settings(write_batch=write_batch, max_batch_size=20)
    store = store_for(settings)
    due = now_ms() + 5_000
    tasks = http_tasks(f"two-{write_batch}", [due + 11 * i for i in range(60)], target.url)
    ids = [t.task_id for t in tasks]
    create_all(store, tasks)
    invokers = [RecordingInvoker() for _ in range(2)]
    pollers = [poller_on(store_for(settings), inv, settings, poller_id=f"poller-{k}") for k, inv in enumerate(invokers)]

    # When two pollers poll the same instant at once (EventBridge fired the rule twice) ...
    at = now_ms()
    reports = run_threads([partial(p.poll, at) for p in pollers])
    # ... every batch of both goes to an executor of its own, all at once ...
    executors = InlineInvoker(lambda: make_executor(store_for(settings), settings))
    for payload in (p for inv in invokers for p in inv.payloads):
        executors.invoke_async(payload)
    # ... and a third poller polls while those executors hold the tasks (their heartbeats live)
    assert armed_or_done(settings, ids)
    third_invoker = RecordingInvoker()
    third = poller_on(store_for(settings), third_invoker, settings, poller_id="poller-2").poll(now_ms())
    executors.join()

    # Then both pollers dispatched every task (they write nothing, so neither stops the other) ...
    assert [r.dispatched for r in reports] == [len(tasks), len(tasks)]
    for invoker in invokers:
        assert sorted(invoker.task_ids) == sorted(ids)
    # ... each task was armed by exactly one executor (its other dispatch lost at ARM); the third sent nothing
    assert sum(r.armed for r in executors.reports) == len(tasks)
    assert sum(r.lost_arm for r in executors.reports) == len(tasks)
    assert third.dispatched == 0
    assert not third_invoker.payloads
    assert {t.attempt for t in store.client.get_many(ids).values()} == {1}
    # ... and each fired once
    judge(f"two pollers at one instant + a third while armed ({write_batch})", store, ids, target)


@pytest.fixture
def own_ddb_local() -> Iterator[str]:
    """A DynamoDB Local of this test's own (stopped afterwards): 10k tasks leave the session's one busy for
    seconds after the test (its JVM collecting), which made the next real-time scenarios fire late."""
    with running_dynamodb_local() as endpoint:
        yield endpoint


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_pollers_at_one_instant_over_10k_tasks_get_each_task_armed_exactly_once(own_ddb_local: str) -> None:
    # Given 10,000 tasks due within the window of one fixed instant (written then), batches of 250
    settings = Settings(
        endpoint_url=own_ddb_local,
        table_name="ten-k",
        ntp_server=None,
        shard_count=SHARDS,
        allowed_targets="127.0.0.1",
        write_batch="transaction",
        db_threads=4,
        max_batch_size=250,
    )
    ensure_table(make_client(own_ddb_local), settings.table_name)
    at = FIXED_NOW_MS
    tasks = make_tasks("ten-k", [at + 5_000 + 8 * i for i in range(10_000)], LogAction(message="10k"))
    ids = [t.task_id for t in tasks]
    put_all(settings, tasks, created_ms=at)
    invokers = [RecordingInvoker(), RecordingInvoker()]
    pollers = [poller_on(store_for(settings), inv, settings, poller_id=f"poller-{k}") for k, inv in enumerate(invokers)]

    # When two pollers poll that instant at once ...
    reports = run_threads([partial(p.poll, at) for p in pollers], timeout=240)
    # ... and stand-in executors run all 80 batches, 8 at a time, each batch of one poller alongside the
    # same tasks' batch of the other. A stand-in does what the executor does before firing (a heartbeat, then
    # the store's arm_many) and "fires" what it armed: a fire observed at the due instant, for the checker.
    # Nothing fires or records for real (DynamoDB Local on 2 cores arms ~500 items/s: the scenario stays
    # about a minute); the property is the arm's exclusivity.
    events = [e for pair in zip(invokers[0].events, invokers[1].events, strict=True) for e in pair]
    local = threading.local()

    def stand_in_executor(event: BatchEvent) -> tuple[str, list[str], list[Fire]]:
        if not hasattr(local, "store"):
            local.store = store_for(settings)
        store: DynamoStores = local.store
        executor_id = f"x-{event.batch_id[:12]}"
        assert store.firing.heartbeat(executor_id, at, at + 600_000)
        requests = [
            ArmRequest(task_id=t.task_id, due_ms=t.due_ms, lease_until_ms=t.due_ms + 3_600_000) for t in event.tasks
        ]
        armed = [a.task for a in store.firing.arm_many(requests, event.batch_id, executor_id, at) if a is not None]
        return executor_id, [t.task_id for t in armed], [Fire(t.idempotency_key, float(t.due_ms)) for t in armed]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(stand_in_executor, events))

    # Then both pollers dispatched every task, each in exactly one of their batches
    assert [r.dispatched for r in reports] == [len(tasks), len(tasks)]
    for invoker in invokers:
        assert Counter(invoker.task_ids) == Counter(ids)
    # ... every task was armed by exactly one executor, and the table names it (armed once: attempt 1)
    winners: dict[str, list[str]] = {}
    for executor_id, armed_ids, _ in results:
        for task_id in armed_ids:
            winners.setdefault(task_id, []).append(executor_id)
    assert {t: w for t, w in winners.items() if len(w) != 1} == {}
    assert set(winners) == set(ids)
    stored = store_for(settings).client.get_many(ids)
    assert {(t.status, t.attempt) for t in stored.values()} == {(TaskStatus.ARMED, 1)}
    assert all(stored[t].armed_by == w[0] for t, w in winners.items())
    # ... and the checker agrees: every task "fired" once, none twice
    fires = [f for _, _, part in results for f in part]
    judge("two pollers at one instant over 10k tasks (arm exclusivity)", store_for(settings), ids, fires)


# -- 3. an invocation lost after dispatch ---------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_batch_whose_invocation_was_lost_is_dispatched_again_by_the_next_poll_and_fires_once(
    settings: Settings,
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 40 tasks due in ~4 s
    store = store_for(settings)
    due = now_ms() + 4_000
    tasks = http_tasks("lost-invoke", [due + 13 * i for i in range(40)], target.url)
    ids = [t.task_id for t in tasks]
    create_all(store, tasks)

    # When a poll dispatches them and the invocation is lost (the poller died after invoking, or the event
    # never reached an executor) ...
    t0 = now_ms()
    first = poller_on(store, DroppingInvoker(), settings).poll(t0)
    # ... and the next poll runs (any later tick: nothing has to expire first)
    invoker = RecordingInvoker()
    again = poller_on(store_for(settings), invoker, settings).poll(t0 + 1)
    run_all(make_executor, settings, [invoker])

    # Then the first left every task as it was (PENDING), the next sent every one again ...
    assert first.dispatched == len(tasks)
    assert (again.dispatched, again.recovered) == (len(tasks), 0)
    stored = store.client.get_many(ids)
    assert {t.status for t in stored.values()} == {TaskStatus.SUCCEEDED}
    assert {t.attempt for t in stored.values()} == {1}  # armed once
    # ... and each fired once
    judge("invocation lost after dispatch: the next poll dispatched again", store, ids, target)


# -- 3b. a poller killed mid-dispatch -------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_poller_killed_mid_dispatch_loses_nothing_and_the_next_tick_sends_the_rest(
    make_settings: Callable[..., Settings],
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 200 tasks due in ~6 s, in batches of 20 (10 invocations)
    settings = make_settings(max_batch_size=20)
    due = now_ms() + 6_000
    tasks = http_tasks("killed-poller", [due + 7 * i for i in range(200)], target.url)
    ids = [t.task_id for t in tasks]
    create_all(store_for(settings), tasks)

    # When the poller's process dies after 5 of its 10 invocations (those 5 reach executors at once) ...
    dying = KillsPollerAfter(lambda: make_executor(store_for(settings), settings), accepted=5)
    with pytest.raises(PollerKilled):
        poller_on(store_for(settings), dying, settings).poll(now_ms())
    sent = dying.task_ids
    assert armed_or_done(settings, sent)  # their executors armed them
    # ... and the next tick runs
    follow = InlineInvoker(lambda: make_executor(store_for(settings), settings))
    report = poller_on(store_for(settings), follow, settings).poll(now_ms())
    dying.join()
    follow.join()

    # Then the dead poller sent what its 5 invocations held (at most a batch each: on a busy machine, less time
    # left before the first instant cuts smaller batches) and sent no more; the next tick sent exactly the rest
    # (what no executor holds)
    assert dying.accepted == 0
    assert dying.refused >= 1
    assert 0 < len(sent) <= 5 * 20
    assert (report.dispatched, report.complete) == (len(ids) - len(sent), True)
    assert sorted(sent + follow.task_ids) == sorted(ids)
    # ... and every task fired once
    judge("poller killed mid-dispatch; the next tick sent the rest", store_for(settings), ids, target)


# -- 3c. a tick that hits its deadline ------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_tick_that_hits_its_deadline_while_dispatching_stops_and_the_next_tick_sends_the_rest(
    make_settings: Callable[..., Settings],
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 200 tasks due in ~6 s, in batches of 20 (10 invocations), and a tick with 4 s left, each
    # invocation taking 1 s of it (on a clock the scenario moves)
    settings = make_settings(max_batch_size=20)
    due = now_ms() + 6_000
    tasks = http_tasks("deadline", [due + 7 * i for i in range(200)], target.url)
    ids = [t.task_id for t in tasks]
    create_all(store_for(settings), tasks)
    budget = TickBudget(4.0)
    executors = InlineInvoker(lambda: make_executor(store_for(settings), settings))

    # When the tick runs (invocations go 8 at a time, each checking the deadline first) ...
    first = poller_on(store_for(settings), SlowInvoker(executors, budget, 1.0), settings).poll(
        now_ms(), budget.out_of_time
    )
    sent = executors.task_ids
    assert armed_or_done(settings, sent)
    # ... and the next tick runs with time to spare
    follow = InlineInvoker(lambda: make_executor(store_for(settings), settings))
    second = poller_on(store_for(settings), follow, settings).poll(now_ms(), TickBudget(60).out_of_time)
    executors.join()
    follow.join()

    # Then the first stopped at its deadline, saying what it left; the next sent exactly that
    assert not first.complete
    assert first.undispatched > 0
    assert first.dispatched + first.undispatched == len(tasks)
    assert first.dispatched == len(sent)
    assert budget.used_s <= 8.0  # at most one round of parallel invocations past the budget
    assert (second.dispatched, second.complete) == (first.undispatched, True)
    assert sorted(sent + follow.task_ids) == sorted(ids)
    print(f"\nfirst tick sent {first.dispatched}, left {first.undispatched}; the next sent {second.dispatched}")
    judge("tick out of time while dispatching; the next tick sent the rest", store_for(settings), ids, target)


@pytest.mark.timeout(120)
def test_a_tick_that_hits_its_deadline_while_reading_leaves_everything_findable(
    make_settings: Callable[..., Settings],
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 10 tasks overdue by 150 s (a 10 min grace) and 30 due in ~4 s, all written before the oldest was
    # due; a tick with 8 s left, each index query taking 1 s of it (4 shards: a minute bucket costs 4 s)
    settings = make_settings()
    now = now_ms()
    overdue = http_tasks("read-deadline-old", [now - 150_000 + 10 * i for i in range(10)], target.url, grace_ms=600_000)
    upcoming = http_tasks("read-deadline-new", [now + 4_000 + 10 * i for i in range(30)], target.url)
    tasks = overdue + upcoming
    ids = [t.task_id for t in tasks]
    create_all(store_for(settings), tasks, created_ms=now - 160_000)
    budget = TickBudget(8.0)
    slow = store_for(settings, SlowIndex)
    slow.dispatch.budget = budget  # type: ignore[attr-defined]
    invoker = InlineInvoker(lambda: make_executor(store_for(settings), settings))

    # When the tick runs out of time part way through the minute buckets it has to read ...
    first = poller_on(slow, invoker, settings).poll(now_ms(), budget.out_of_time)
    # ... and the next tick runs with time to spare
    second = poller_on(store_for(settings), invoker, settings).poll(now_ms())
    invoker.join()

    # Then the first read only some buckets, dispatched nothing (its time was up), and did not move the
    # watermark past what it did not read; the next found and sent everything
    assert not first.complete
    assert first.dispatched == 0
    assert first.undispatched == first.candidates
    assert first.candidates < len(tasks)
    assert second.watermark_ms <= bucket_start(overdue[0].due_ms)
    assert (second.dispatched, second.complete) == (len(tasks), True)
    print(f"\nfirst tick read {budget.used_s:.0f} queries of {first.queries} and found {first.candidates}")
    verdict = judge("tick out of time while reading; the next tick found everything", store_for(settings), ids, target)
    assert len(verdict.matched) == len(tasks)
    assert not verdict.past_grace


# -- 6. a ~119 s gap between polls ----------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_tasks_due_in_a_119_s_gap_between_polls_fire_late_within_grace_or_are_missed_explicitly(
    settings: Settings,
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given polls 119 s apart: the first (simulated) at t1 = now - 119 s, the next at t2 = now. The first
    # reaches up to t1 + lead (90 s) = now - 29 s; tasks due after that and before t2 fall in the gap.
    t2 = now_ms()
    t1 = t2 - 119_000
    assert t1 + settings.lead_ms == t2 - 29_000
    gap_ok = http_tasks("gap-ok", [t2 - 25_000 + 1_000 * i for i in range(12)], target.url)  # grace 60 s
    gap_tight_late = http_tasks(
        "gap-tight", [t2 - 6_000 + 200 * i for i in range(10)], target.url, grace_ms=15_000
    )  # 4-6 s overdue at t2: within a 15 s grace
    gap_tight_missed = http_tasks(
        "gap-missed", [t2 - 28_000 + 1_000 * i for i in range(10)], target.url, grace_ms=15_000
    )  # 19-28 s overdue at t2: past a 15 s grace
    ahead = http_tasks("gap-ahead", [t2 + 2_500 + 10 * i for i in range(10)], target.url)
    tasks = gap_ok + gap_tight_late + gap_tight_missed + ahead
    store = store_for(settings)
    create_all(store, tasks, created_ms=t1 - 5_000)  # all written before the first poll
    invoker = RecordingInvoker()
    poller = poller_on(store, invoker, settings)

    # When the first poll runs at t1 and the next 119 s later, at t2 (= now: the executors run on the real clock)
    first = poller.poll(t1)
    second = poller.poll(t2)
    run_all(make_executor, settings, [invoker])

    # Then the first poll found nothing of the gap, the second reached back and dispatched everything; the
    # executors fired what was within its grace and recorded the rest MISSED
    assert first.dispatched == 0
    assert second.watermark_ms <= bucket_start(t1)
    assert second.dispatched == len(tasks)
    stored = store.client.get_many([t.task_id for t in tasks])
    assert {stored[t.task_id].status for t in gap_tight_missed} == {TaskStatus.MISSED}
    assert {stored[t.task_id].status for t in gap_ok + gap_tight_late + ahead} == {TaskStatus.SUCCEEDED}
    # ... and the target agrees: gap tasks fired late but within their grace, the rest explicitly MISSED
    verdict = judge("119 s between polls", store, [t.task_id for t in tasks], target)
    assert set(verdict.explicitly_missed) == {f"{t.task_id}:0" for t in gap_tight_missed}
    assert {key for key, _ in verdict.late} >= {f"{t.task_id}:0" for t in gap_ok + gap_tight_late}
    assert not verdict.past_grace


# -- 8. the due index lags ------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_task_whose_index_entry_lags_is_found_by_the_next_poll_and_fires_once(
    settings: Settings,
    target: TargetServer,
    make_executor: Callable[..., Executor],
) -> None:
    # Given 20 tasks due in ~3 s and 10 written overdue (due 8 s ago, a 90 s grace), none of them in the due
    # index yet (GSI writes lag), and 10 more that are
    now = now_ms()
    fresh = http_tasks("lag-fresh", [now + 3_000 + 10 * i for i in range(20)], target.url)
    overdue = http_tasks("lag-overdue", [now - 8_000 + 10 * i for i in range(10)], target.url, grace_ms=90_000)
    visible = http_tasks("lag-visible", [now + 3_000 + 10 * i for i in range(10)], target.url)
    tasks = fresh + overdue + visible
    store = store_for(settings, LaggingIndex)
    lagging = store.dispatch
    assert isinstance(lagging, LaggingIndex)
    create_all(store, tasks, created_ms=now)
    lagging.hidden = frozenset(t.task_id for t in fresh + overdue)
    invoker = InlineInvoker(lambda: make_executor(store_for(settings), settings))  # executors start at once
    poller = poller_on(store, invoker, settings)

    # When a poll runs while the index lags, and the next (once it has caught up) while the first batch's
    # executor holds its tasks
    first = poller.poll(now)
    lagging.hidden = frozenset()
    assert armed_or_done(settings, [t.task_id for t in visible], timeout=60)
    second = poller.poll(now_ms())
    invoker.join()

    # Then the first poll took only what it could see; the watermark stayed back and the next found the rest
    # (and left alone what a live executor held)
    assert first.dispatched == len(visible)
    assert second.watermark_ms <= bucket_start(now)
    assert second.dispatched == len(fresh) + len(overdue)
    verdict = judge("due index lagging for one poll", store, [t.task_id for t in tasks], target)
    assert len(verdict.matched) == len(tasks)
