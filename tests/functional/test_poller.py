"""The poller service on moto, with a recording invoker and explicit ``now`` values."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from punctual.config.cpu_share import QUOTA_PERIOD_MS
from punctual.config.settings import Settings
from punctual.domain.keys import BUCKET_MS, bucket_start, buckets_between, shard_of
from punctual.domain.model import Candidate, TaskStatus
from punctual.polling.poller import Poller, make_batches
from punctual.polling.sent import send_again
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.due import DueIndex
from support import RecordingInvoker, arm, read_task, with_part


def test_dispatches_everything_due_up_to_now_plus_lead_and_nothing_later(
    poller: Poller,
    invoker: RecordingInvoker,
    store: DynamoStores,
    tasks: Any,
    settings: Settings,
    now_ms: int,
) -> None:
    # Given tasks over several buckets and every shard, due from 25 s ago (the previous minute) to exactly now + lead
    lead = settings.lead_ms
    due_times = [
        now_ms - 25_000,
        now_ms,
        now_ms + 5_000,
        now_ms + 39_999,
        now_ms + 40_000,
        now_ms + 61_000,
        now_ms + lead - 1,
        now_ms + lead,
    ]
    inside = [tasks.create(due, f"in-{i:02d}-{j}").task_id for i, due in enumerate(due_times) for j in range(2)]
    # And tasks due later than the window: 1 ms past it, and minutes away
    later = [now_ms + lead + 1, now_ms + 5 * BUCKET_MS]
    outside = [tasks.create(due, f"out-{i}").task_id for i, due in enumerate(later)]
    assert {shard_of(t, settings.shard_count) for t in inside} == set(range(settings.shard_count))
    assert len(buckets_between(now_ms - 25_000, now_ms + lead)) == 3

    # When the poller runs
    report = poller.poll(now_ms)

    # Then every task in the window is handed to an executor, and no later one; the poller writes nothing
    assert report.dispatched == len(inside)
    assert report.recovered == 0
    assert report.window_end_ms == now_ms + lead
    assert report.queries == report.buckets * settings.shard_count
    assert sorted(invoker.task_ids) == sorted(inside)
    assert all(read_task(store, t).status is TaskStatus.PENDING for t in inside + outside)


def test_batch_payloads_validate_and_carry_what_the_arm_checks(
    poller: Poller, invoker: RecordingInvoker, store: DynamoStores, tasks: Any, now_ms: int
) -> None:
    # Given a few tasks due soon
    created = [tasks.create(now_ms + 1_000 * i) for i in range(5)]
    # When they are polled
    poller.poll(now_ms)
    # Then each payload is a BatchEvent whose tasks carry their due time (the ARM condition) and grace
    for event in invoker.events:
        assert event.dispatcher == "poller-test"
        for entry in event.tasks:
            stored = store.client.get(entry.task_id)
            assert stored is not None
            assert stored.status is TaskStatus.PENDING
            assert entry.due_ms == stored.due_ms
            assert entry.grace_ms == stored.misfire_grace_ms
    assert sorted(invoker.task_ids) == sorted(t.task_id for t in created)


def test_batches_are_cut_at_max_batch_size_in_due_order(
    store: DynamoStores, invoker: RecordingInvoker, tasks: Any, settings: Settings, now_ms: int
) -> None:
    # Given a batch size of 3 and 7 tasks due soon
    poller = poller_on(store, invoker, settings.model_copy(update={"max_batch_size": 3}))
    created = [tasks.create(now_ms + 30_000 - 1_000 * i) for i in range(7)]
    # When they are polled
    report = poller.poll(now_ms)
    # Then there are 3 batches of at most 3, each with its own id, cut in due order (they are sent in parallel)
    events = sorted(invoker.events, key=lambda e: e.tasks[0].due_ms)
    assert [len(e.tasks) for e in events] == [3, 3, 1]
    assert report.batches == 3
    assert len({e.batch_id for e in events}) == 3
    dues = [t.due_ms for e in events for t in e.tasks]
    assert dues == sorted(dues)
    assert sorted(invoker.task_ids) == sorted(t.task_id for t in created)


def test_make_batches() -> None:
    candidates = [
        Candidate(task_id=f"t{i}", due_ms=1_000 - i, status=TaskStatus.PENDING, lease_until_ms=None, misfire_grace_ms=0)
        for i in range(5)
    ]
    batches = make_batches(candidates, 2)
    assert [[c.task_id for c in b] for b in batches] == [["t4", "t3"], ["t2", "t1"], ["t0"]]
    assert make_batches([], 2) == []


def test_a_batch_holds_no_more_tasks_due_together_than_its_executor_can_fire_in_one_quota_period() -> None:
    # Given 5 tasks due at one instant, then 3 spread a second apart, and at most 2 fires a quota period
    burst = [
        Candidate(task_id=f"b{i}", due_ms=10_000, status=TaskStatus.PENDING, lease_until_ms=None, misfire_grace_ms=0)
        for i in range(5)
    ]
    spread = [
        Candidate(
            task_id=f"s{i}",
            due_ms=20_000 + 1_000 * i,
            status=TaskStatus.PENDING,
            lease_until_ms=None,
            misfire_grace_ms=0,
        )
        for i in range(3)
    ]

    # When they are cut into batches of up to 250
    batches = make_batches(burst + spread, 250, max_at_once=2)

    # Then the burst is shared among executors 2 at a time, and the spread tasks (never 2 within a period) join the
    # last of them
    assert [[c.task_id for c in b] for b in batches] == [["b0", "b1"], ["b2", "b3"], ["b4", "s0", "s1", "s2"]]
    # and a window's count starts again once the earlier tasks are a period behind
    step = QUOTA_PERIOD_MS * 3 // 5  # two tasks a period apart are never in the same window; one apart always are
    near = [
        Candidate(
            task_id=f"n{i}", due_ms=1_000 + step * i, status=TaskStatus.PENDING, lease_until_ms=None, misfire_grace_ms=0
        )
        for i in range(4)
    ]
    assert [len(b) for b in make_batches(near, 250, max_at_once=2)] == [4]
    # and with one fire a period, two lanes take turns: each task a period after its lane's previous one
    lanes = make_batches(near, 250, max_at_once=1)
    assert [[c.task_id for c in b] for b in lanes] == [["n0", "n2"], ["n1", "n3"]]
    # and without a limit (whole cores), only the batch size cuts
    assert [len(b) for b in make_batches(burst, 2, None)] == [2, 2, 1]


def test_tasks_spread_over_time_fill_whole_batches_in_lanes_whatever_their_rate() -> None:
    # Given 10,000 tasks due one a millisecond (20 in each 20 ms quota period) and at most 5 fires a period
    window = QUOTA_PERIOD_MS
    spread = [
        Candidate(
            task_id=f"t{i:05}",
            due_ms=1_000 + i * window // 20,
            status=TaskStatus.PENDING,
            lease_until_ms=None,
            misfire_grace_ms=0,
        )
        for i in range(10_000)
    ]

    # When they are cut into batches of up to 250
    batches = make_batches(spread, 250, max_at_once=5)

    # Then every batch is whole (the rate alone never shrinks them: a period's tasks go to interleaved lanes), and
    # none holds more than 5 tasks due within one period
    assert [len(b) for b in batches] == [250] * 40
    for batch in batches:
        dues = [c.due_ms for c in batch]
        assert dues == sorted(dues)
        assert max(sum(1 for d in dues[i:] if d < first + window) for i, first in enumerate(dues)) <= 5
    assert sorted(c.task_id for b in batches for c in b) == [c.task_id for c in spread]


def test_the_cut_for_the_quota_never_needs_more_executors_than_may_run_at_once() -> None:
    # Given 1,000 tasks due at one instant and at most 168 fires a quota period
    burst = [
        Candidate(task_id=f"b{i:04}", due_ms=10_000, status=TaskStatus.PENDING, lease_until_ms=None, misfire_grace_ms=0)
        for i in range(1_000)
    ]

    # When at most 5, 4 or 3 batches may run at once, or as many as the quota's cut needs
    def sizes(max_batches: int | None) -> list[int]:
        return [len(b) for b in make_batches(burst, 250, max_at_once=168, max_batches=max_batches)]

    # Then the cut shares the burst among as many executors as may run, each as small as that allows
    assert sizes(5) == [200] * 5
    assert sizes(4) == [250] * 4
    # and when even the batch size needs more, it alone cuts (throttling then waits for a free executor)
    assert sizes(3) == [250] * 4
    # and with room for the quota's cut, it stands
    assert sizes(6) == sizes(None) == [168] * 5 + [160]
    # and every task is in exactly one batch whatever the bound
    for bound in (1, 2, 5, 7, None):
        assert sorted(c.task_id for b in make_batches(burst, 250, 168, max_batches=bound) for c in b) == sorted(
            c.task_id for c in burst
        )


def test_half_the_executors_that_may_run_at_once_bound_a_dispatchs_cut_per_poll_group(settings: Settings) -> None:
    # Given the template's reservation of 100 executors, in one poll group and in two
    one = settings.model_copy(update={"executor_concurrency": 100, "poll_groups": 1})
    # Then one dispatch may cut bursts into 50 batches, and 25 in each of two groups; unbounded without a figure
    assert one.quota_cut_max_batches == 50
    assert settings.model_copy(update={"executor_concurrency": 100, "poll_groups": 2}).quota_cut_max_batches == 25
    assert settings.model_copy(update={"executor_concurrency": None}).quota_cut_max_batches is None
    assert settings.model_copy(update={"executor_concurrency": 1}).quota_cut_max_batches == 1


def test_the_fires_at_once_follow_the_executors_memory_and_the_cpu_a_fire_takes(settings: Settings) -> None:
    # Given the template's 256 MB executors, one of 1,769 MB, and none named (whole cores)
    small = settings.model_copy(update={"executor_memory_mb": 256, "fire_cpu_us": 60.0})
    large = settings.model_copy(update={"executor_memory_mb": 1769, "fire_cpu_us": 60.0})
    # Then a batch at 256 MB holds fewer tasks due together than a period's quota could fire at 60 us each
    period_us = QUOTA_PERIOD_MS * 1000
    assert small.max_fires_at_once is not None
    assert small.max_fires_at_once * 60.0 <= 256 / 1769 * period_us
    assert large.max_fires_at_once is not None
    assert large.max_fires_at_once > small.max_fires_at_once * 6
    assert settings.model_copy(update={"executor_memory_mb": None}).max_fires_at_once is None


def test_overdue_tasks_are_dispatched_however_late_and_the_executor_decides(
    poller: Poller, invoker: RecordingInvoker, store: DynamoStores, tasks: Any, now_ms: int
) -> None:
    # Given two tasks with a 60 s grace, written on time by a client long ago: one overdue by exactly its
    # grace, one by a millisecond more
    grace = 60_000
    at_edge = tasks.create(now_ms - grace, "at-edge", now_ms=now_ms - 10 * BUCKET_MS, misfire_grace_ms=grace)
    beyond = tasks.create(now_ms - grace - 1, "beyond", now_ms=now_ms - 10 * BUCKET_MS, misfire_grace_ms=grace)
    # When the poller finds them
    report = poller.poll(now_ms)
    # Then both go to an executor, with their grace (it fires the first and records the second MISSED); the
    # poller writes neither
    assert report.dispatched == 2
    assert sorted(invoker.task_ids) == ["at-edge", "beyond"]
    assert {t.task_id: t.grace_ms for e in invoker.events for t in e.tasks} == {"at-edge": grace, "beyond": grace}
    assert read_task(store, at_edge.task_id).status is TaskStatus.PENDING
    assert read_task(store, beyond.task_id).status is TaskStatus.PENDING


def test_a_second_poll_sends_nothing_an_executor_armed(
    poller: Poller, invoker: RecordingInvoker, store: DynamoStores, tasks: Any, now_ms: int
) -> None:
    # Given a poll that dispatched two tasks, which a live executor armed
    created = [tasks.create(now_ms + 5_000 + i) for i in range(2)]
    assert poller.poll(now_ms).dispatched == 2
    assert store.firing.heartbeat("x-live", now_ms, now_ms + 20_000)
    assert all(arm(store, t, "x-live", now_ms) for t in created)
    # When the next poll runs while the executor is alive
    report = poller.poll(now_ms + 1_000)
    # Then it sends nothing
    assert report.candidates == 0
    assert report.dispatched == 0
    assert report.batches == 0
    assert len(invoker.payloads) == 1


def test_a_task_still_pending_that_this_poller_sent_is_counted_and_sent_again_before_it_would_fire_late(
    poller: Poller,
    invoker: RecordingInvoker,
    store: DynamoStores,
    tasks: Any,
    now_ms: int,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a poll that dispatched a task due in 80 s whose invocation never ran (throttled in Lambda's queue, then
    # dropped: the invoke answered 202 all the same)
    task = tasks.create(now_ms + 80_000)
    soonest = settings.poll_interval_ms - settings.fast_path_margin_ms
    assert poller.poll(now_ms).dispatched == 1
    # When a tick comes early (20 s later), and one just short of a poll interval less the margin
    early = poller.poll(now_ms + 20_000)
    edge = poller.poll(now_ms + soonest - 1)
    # Then each counts the task as not armed, and holds it back (its executor may still be arming it: sending it
    # again would make two executors race at ARM)
    assert (early.candidates, early.not_armed, early.held_back, early.dispatched) == (1, 1, 1, 0)
    assert (edge.not_armed, edge.held_back, edge.dispatched) == (1, 1, 0)
    # ... and says how long ago it was sent
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "still PENDING" in r.message]
    assert warnings
    assert "20.0 to 20.0 s ago" in warnings[0]
    assert "0 sent again" in warnings[0]
    # ... while another poller (a new process: no memory of it) sends it at once, and counts nothing
    fresh = poller_on(store, invoker, settings).poll(now_ms + 1)
    assert (fresh.not_armed, fresh.dispatched) == (0, 1)
    # When the tick a poll interval (less the margin) after the first comes / Then the task, due before the next
    # poll could send it in time, is sent again now (an executor arms it once: a second delivery loses at ARM)
    report = poller.poll(now_ms + soonest)
    assert (report.not_armed, report.held_back, report.dispatched) == (1, 0, 1)
    assert invoker.task_ids == [task.task_id] * 3


@pytest.mark.parametrize("progress", [True, False])
def test_pending_tasks_due_soon_are_sent_again_only_if_their_batch_shows_no_progress(
    poller: Poller,
    invoker: RecordingInvoker,
    store: DynamoStores,
    tasks: Any,
    now_ms: int,
    settings: Settings,
    progress: bool,
) -> None:
    # Given a poll that sent three tasks due in 80 s in one batch, and a tick a poll interval (less the margin)
    # later, when they are due before the next poll could send them in time
    created = [tasks.create(now_ms + 80_000 + i) for i in range(3)]
    assert poller.poll(now_ms).batches == 1
    later = now_ms + settings.poll_interval_ms - settings.fast_path_margin_ms
    if progress:  # the batch's executor is alive and has armed one of them: it is still arming the others
        assert store.firing.heartbeat("x-arming", later, now_ms + 3_600_000)
        assert arm(store, created[0], "x-arming", later) is not None
    # When that tick polls
    report = poller.poll(later)
    # Then the two still PENDING are held back while their batch shows progress, and sent again when it shows none
    sent = 0 if progress else 3
    assert (report.not_armed, report.held_back, report.dispatched) == (3 - progress, 3 - progress - sent, sent)
    # ... and whatever the batch showed, a hold-back after they were sent they go again
    if progress:
        again = poller.poll(now_ms + settings.redispatch_hold_back_ms)
        assert (again.held_back, again.dispatched) == (0, 2)


def test_recovered_tasks_are_held_back_past_a_lease_while_their_batch_shows_progress(
    poller: Poller, invoker: RecordingInvoker, store: DynamoStores, tasks: Any, now_ms: int, settings: Settings
) -> None:
    # Given three tasks armed by an executor alive until T, then dead, and a poll at T + 1 that sent them in one
    # batch, whose executor has taken over one of them (and is alive)
    created = [tasks.create(now_ms + 60_000 + i) for i in range(3)]
    until = now_ms + 20_000
    assert store.firing.heartbeat("x-dead", now_ms, until)
    assert all(arm(store, t, "x-dead", now_ms) is not None for t in created)
    assert poller.poll(until + 1).batches == 1
    lease = settings.executor_lease_ms
    assert store.firing.heartbeat("x-taker", until + 2, until + 2 * lease + 5_000)
    assert arm(store, created[0], "x-taker", until + 2) is not None
    # When a poll comes a lease after they were sent / Then it holds back the other two: their taker is at work
    report = poller.poll(until + 1 + lease)
    assert (report.candidates, report.held_back, report.dispatched) == (2, 2, 0)
    assert len(invoker.events) == 1


@pytest.mark.parametrize(
    ("due_in_s", "sent_s_ago", "again"),
    [
        (70, 49.999, False),  # due before the next poll, but sent less than a poll interval (less the margin) ago
        (70, 50, True),  # ... sent that long ago: sent again, or it fires late
        (70.001, 50, False),  # the next poll sends it in time: held back
        (70.001, 89.999, False),
        (70.001, 90, True),  # the hold-back (a lead) has passed
        (-30, 10, False),  # overdue, but sent moments ago: its executor may be arming it
    ],
)
def test_a_pending_task_is_sent_again_after_the_hold_back_or_a_poll_interval_when_due_before_the_next_poll(
    settings: Settings, due_in_s: float, sent_s_ago: float, again: bool
) -> None:
    # Given the defaults: polls every 60 s, a fast-path margin of 10 s, a hold-back of a lead (90 s)
    assert (settings.poll_interval_ms, settings.fast_path_margin_ms, settings.redispatch_hold_back_ms) == (
        60_000,
        10_000,
        90_000,
    )
    now = 1_000_000
    # Then a task still PENDING is sent again exactly as the table says
    assert send_again(now + round(due_in_s * 1000), now - round(sent_s_ago * 1000), now, settings) is again


@pytest.mark.parametrize(("sent_ms_ago", "again"), [(999, False), (1_000, True)])
def test_with_a_poll_interval_shorter_than_the_margin_a_task_is_sent_again_no_sooner_than_half_an_interval(
    settings: Settings, sent_ms_ago: int, again: bool
) -> None:
    # Given polls every 2 s and a fast-path margin of 10 s (a local stack's short ticks), and a task due now
    quick = settings.model_copy(update={"poll_interval_ms": 2_000, "fast_path_margin_ms": 10_000})
    # Then it is sent again no sooner than half an interval after it was sent (not at once by a tick that comes
    # twice), though the margin is longer than the interval
    assert send_again(1_000_000, 1_000_000 - sent_ms_ago, 1_000_000, quick) is again


@pytest.mark.parametrize(("gap_ms", "remembered"), [(149_999, True), (150_000, False)])
def test_what_a_poller_sent_is_remembered_a_poll_interval_past_its_hold_back(
    store: DynamoStores,
    invoker: RecordingInvoker,
    tasks: Any,
    now_ms: int,
    settings: Settings,
    gap_ms: int,
    remembered: bool,
) -> None:
    # Given a poll that sent a task no executor armed, and no poll for a long while after (ticks lost)
    poller = poller_on(store, invoker, settings)
    tasks.create(now_ms + 60_000, misfire_grace_ms=3_600_000)
    assert poller.poll(now_ms).dispatched == 1
    # When the next poll comes a hold-back and a poll interval later, or a millisecond sooner
    assert settings.redispatch_hold_back_ms + settings.poll_interval_ms == 150_000
    report = poller.poll(now_ms + gap_ms)
    # Then it sends the task again either way, and counts it as not armed only while it remembers sending it
    assert (report.dispatched, report.not_armed) == (1, int(remembered))


def test_with_redispatch_after_zero_every_poll_sends_what_is_still_pending(
    store: DynamoStores, invoker: RecordingInvoker, tasks: Any, now_ms: int, settings: Settings
) -> None:
    # Given a poller that remembers nothing, and a task no executor armed
    poller = poller_on(store, invoker, settings.model_copy(update={"redispatch_after_ms": 0}))
    tasks.create(now_ms + 50_000)
    # When it polls twice, a millisecond apart / Then it sends the task both times (and, remembering nothing,
    # counts nothing as not armed)
    reports = [poller.poll(now_ms + i) for i in range(2)]
    assert [(r.dispatched, r.not_armed) for r in reports] == [(1, 0), (1, 0)]


def test_tasks_of_an_executor_whose_heartbeat_lapsed_are_recovered_one_ms_after_it_ends(
    poller: Poller, invoker: RecordingInvoker, store: DynamoStores, tasks: Any, now_ms: int
) -> None:
    # Given a task armed by an executor whose last heartbeat said it is alive until now + 20 s, then died
    task = tasks.create(now_ms + 60_000)
    alive_until = now_ms + 20_000
    assert store.firing.heartbeat("x-dead", now_ms, alive_until)
    assert arm(store, task, "x-dead", now_ms) is not None
    # When polls run at the end of its lease, and one millisecond later
    at_edge = poller.poll(alive_until)
    after = poller.poll(alive_until + 1)
    # Then at its last millisecond it still holds the task; one ms later the task is recovered
    assert (at_edge.dispatched, at_edge.recovered) == (0, 0)
    assert (after.dispatched, after.recovered) == (1, 1)
    assert invoker.task_ids == [task.task_id]
    assert read_task(store, task.task_id).status is TaskStatus.ARMED  # until an executor takes it over
    # ... sent marked held, so that the executor takes it over without an ARM that could only fail
    assert [t.held for e in invoker.events for t in e.tasks] == [True]


def test_a_recovered_task_sent_lately_is_held_back_for_a_lease_unless_its_holder_changed(
    poller: Poller, invoker: RecordingInvoker, store: DynamoStores, tasks: Any, now_ms: int, settings: Settings
) -> None:
    # Given a task armed by an executor alive until T, then dead, and a poll at T + 1 that sent it
    task = tasks.create(now_ms + 60_000)
    until = now_ms + 20_000
    assert store.firing.heartbeat("x-dead", now_ms, until)
    assert arm(store, task, "x-dead", now_ms) is not None
    assert poller.poll(until + 1).dispatched == 1
    lease = settings.executor_lease_ms
    # When polls come while it is still held by the same dead executor / Then they hold it back for a lease
    # (the executor it went to is taking it over), and send it again after
    later = poller.poll(until + lease)
    assert (later.dispatched, later.held_back) == (0, 1)
    assert poller.poll(until + 1 + lease).dispatched == 1
    # When the executor it went to took it over and died in turn / Then the next poll sends it at once
    taker_until = until + lease + 5_000
    assert store.firing.heartbeat("x-taker", until + lease + 2, taker_until)
    assert arm(store, task, "x-taker", until + lease + 2) is not None
    assert poller.poll(taker_until + 1).dispatched == 1
    assert invoker.task_ids == [task.task_id] * 3


def test_an_ended_task_lease_is_recovered_even_when_its_executor_looks_alive(
    poller: Poller, invoker: RecordingInvoker, store: DynamoStores, tasks: Any, now_ms: int
) -> None:
    # Given a task armed by a live executor, with its own (backstop) lease ending at now + 100 s
    task = tasks.create(now_ms + 10_000, misfire_grace_ms=3_600_000)
    lease = now_ms + 100_000
    assert store.firing.heartbeat("x-live", now_ms, now_ms + 10_000_000)
    assert arm(store, task, "x-live", now_ms, lease_until_ms=lease) is not None
    # Then the lease holds it at its last millisecond, and it is recovered one ms later
    assert poller.poll(lease).dispatched == 0
    report = poller.poll(lease + 1)
    assert (report.dispatched, report.recovered) == (1, 1)


def test_failing_invoker_leaves_tasks_pending_for_the_next_poll(
    poller: Poller, invoker: RecordingInvoker, store: DynamoStores, tasks: Any, now_ms: int
) -> None:
    # Given an invoker that refuses every invocation
    created = [tasks.create(now_ms + 5_000 + i).task_id for i in range(3)]
    invoker.failing = True
    # When the poller runs
    report = poller.poll(now_ms)
    # Then the failure is counted, nothing is sent, and the tasks stay PENDING
    assert report.invoke_failures == 1
    assert (report.batches, report.dispatched) == (0, 0)
    assert all(read_task(store, t).status is TaskStatus.PENDING for t in created)
    # And once the invoker works again, the next poll sends them
    invoker.failing = False
    report = poller.poll(now_ms + 1_000)
    assert (report.dispatched, report.invoke_failures) == (3, 0)
    assert sorted(invoker.task_ids) == sorted(created)


def test_a_tick_out_of_time_dispatches_nothing_more_and_leaves_the_rest_findable(
    store: DynamoStores, invoker: RecordingInvoker, tasks: Any, settings: Settings, now_ms: int
) -> None:
    # Given 7 tasks in batches of 2 (4 batches), found by a poll, and a time budget that allows 2 invocations
    # (each batch asks once before it is sent; the batches are sent in parallel, so which 2 go is not fixed)
    poller = poller_on(store, invoker, settings.model_copy(update={"max_batch_size": 2}))
    created = [tasks.create(now_ms + 10_000 + i).task_id for i in range(7)]
    found = store.dispatch.find_due(now_ms, now_ms + settings.lead_ms).candidates
    asked = {"n": 0}
    lock = threading.Lock()

    def out_of_time() -> bool:
        with lock:
            asked["n"] += 1
            return asked["n"] > 2

    # When it dispatches them
    report = poller.dispatch(found, out_of_time)
    # Then it sent exactly 2 batches and says how many tasks it left; nothing was written, so the next tick
    # (with time) finds and sends all 7
    assert (report.batches, report.invoke_failures) == (2, 0)
    assert report.dispatched + report.undispatched == 7
    assert report.dispatched in (3, 4)
    assert len(invoker.payloads) == 2
    follow = poller.poll(now_ms + 1_000)
    assert follow.dispatched == 7
    assert follow.complete
    assert set(invoker.task_ids) == set(created)


def test_a_tick_out_of_time_before_it_reads_reports_itself_incomplete(
    poller: Poller, invoker: RecordingInvoker, tasks: Any, now_ms: int
) -> None:
    # Given a task due soon, and a tick whose time is already up
    tasks.create(now_ms + 10_000)
    # When it polls / Then it reads and sends nothing, says so, and the next tick sends the task
    report = poller.poll(now_ms, lambda: True)
    assert (report.dispatched, report.complete) == (0, False)
    assert poller.poll(now_ms + 1_000).dispatched == 1


def test_watermark_stays_overdue_safety_behind_now(
    poller: Poller, store: DynamoStores, settings: Settings, now_ms: int
) -> None:
    # Given an empty table
    # When the poller runs twice, a few minutes apart
    for now in (now_ms, now_ms + 5 * BUCKET_MS):
        report = poller.poll(now)
        # Then the watermark is the bucket of now - overdue_safety, never closer to now
        assert report.watermark_ms == bucket_start(now - settings.overdue_safety_ms)
        assert report.watermark_ms <= now - settings.overdue_safety_ms
        assert store.dispatch.get_watermark() == report.watermark_ms


def test_watermark_does_not_pass_a_bucket_holding_an_active_task(
    poller: Poller, store: DynamoStores, tasks: Any, settings: Settings, now_ms: int
) -> None:
    # Given a task due 10 minutes ago with a long grace, written on time (so in its own, old bucket)
    old_due = now_ms - 10 * BUCKET_MS
    task = tasks.create(old_due, now_ms=old_due - 1_000, misfire_grace_ms=3_600_000)
    # When polls run while it is active, a minute apart
    for now in (now_ms, now_ms + 1_000, now_ms + 20_000):
        report = poller.poll(now)
        # Then the watermark stays at its bucket
        assert report.watermark_ms <= bucket_start(old_due)
        assert store.dispatch.get_watermark() == bucket_start(old_due)
    # And once it is finished, the watermark moves on to the safety margin
    store.client.cancel(task.task_id, now_ms + 21_000)
    later = now_ms + 2 * BUCKET_MS
    report = poller.poll(later)
    assert report.watermark_ms == bucket_start(later - settings.overdue_safety_ms)
    assert store.dispatch.get_watermark() == report.watermark_ms


def test_first_poll_without_watermark_reaches_the_oldest_active_task(
    poller: Poller, invoker: RecordingInvoker, store: DynamoStores, tasks: Any, now_ms: int
) -> None:
    # Given no watermark and a task due 30 minutes ago, written on time, with a 1 h grace
    task = tasks.create(now_ms - 30 * BUCKET_MS, now_ms=now_ms - 31 * BUCKET_MS, misfire_grace_ms=3_600_000)
    assert store.dispatch.get_watermark() is None
    # When the first poll runs
    report = poller.poll(now_ms)
    # Then it reaches back to that bucket and dispatches the task
    assert report.dispatched == 1
    assert invoker.task_ids == [task.task_id]
    assert report.buckets >= 30
    assert store.dispatch.get_watermark() is not None


def test_task_from_an_old_watermark_era_is_still_found(
    store: DynamoStores, invoker: RecordingInvoker, tasks: Any, settings: Settings, now_ms: int
) -> None:
    # Given a watermark left at an old bucket by an earlier poll
    old_watermark = bucket_start(now_ms - 10 * BUCKET_MS)
    assert store.dispatch.advance_watermark(old_watermark)
    # And tasks written back then: one due 5 minutes ago with a long grace, one with the default grace
    in_grace = tasks.create(now_ms - 5 * BUCKET_MS, now_ms=now_ms - 6 * BUCKET_MS, misfire_grace_ms=600_000)
    too_late = tasks.create(now_ms - 5 * BUCKET_MS + 1, now_ms=now_ms - 6 * BUCKET_MS)
    # When a fresh poller (a new cold start) runs now
    report = poller_on(store, invoker, settings).poll(now_ms)
    # Then it queries from the stored watermark and finds both (the executor fires one, misses the other)
    assert report.buckets == len(buckets_between(old_watermark, now_ms + settings.lead_ms))
    assert report.candidates == 2
    assert sorted(invoker.task_ids) == sorted([in_grace.task_id, too_late.task_id])


def test_task_written_late_after_the_watermark_moved_is_found(
    poller: Poller, invoker: RecordingInvoker, store: DynamoStores, tasks: Any, now_ms: int
) -> None:
    # Given a poll that moved the watermark up to the safety margin
    poller.poll(now_ms)
    # When a task due 30 s ago is written now (index writes lag; clients run late)
    task = tasks.create(now_ms - 30_000, now_ms=now_ms + 1_000)
    # Then the next poll finds it in the current bucket and dispatches it
    assert poller.poll(now_ms + 2_000).dispatched == 1
    assert invoker.task_ids == [task.task_id]


def test_cancelled_and_finished_tasks_are_not_dispatched(
    poller: Poller, invoker: RecordingInvoker, store: DynamoStores, tasks: Any, now_ms: int
) -> None:
    cancelled = tasks.create(now_ms + 5_000)
    kept = tasks.create(now_ms + 6_000)
    store.client.cancel(cancelled.task_id, now_ms)
    report = poller.poll(now_ms)
    assert report.candidates == 1
    assert invoker.task_ids == [kept.task_id]


class ReadsNoted(DueIndex):
    """The store's due index, noting each of its reads in ``log`` (shared with the invoker below)."""

    log: list[str]

    def query_index(self, bucket_ms: int, shard: int, until_ms: int) -> Any:
        self.log.append(f"read {bucket_ms}")
        return super().query_index(bucket_ms, shard, until_ms)


class InvokesNoted(RecordingInvoker):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def invoke_async(self, payload: dict[str, Any]) -> None:
        self.log.append("invoke " + ",".join(t["task_id"] for t in payload["tasks"]))
        super().invoke_async(payload)


def test_a_poll_dispatches_each_read_of_the_index_before_it_makes_the_next(
    dynamodb: Any, settings: Settings, tasks: Any, now_ms: int
) -> None:
    # Given a task due now and one at the window's end, in two buckets, which a poll reads one bucket at a time
    narrow = settings.model_copy(update={"db_threads": 1})
    log: list[str] = []
    store = with_part(DynamoStores.from_settings(dynamodb, narrow), ReadsNoted)
    noted = store.dispatch
    assert isinstance(noted, ReadsNoted)
    noted.log = log
    factory = type(tasks)(store)
    first = factory.create(now_ms, "first").task_id
    later = factory.create(now_ms + settings.lead_ms, "later").task_id
    later_bucket = bucket_start(now_ms + settings.lead_ms)
    assert later_bucket > bucket_start(now_ms)

    # When the poller polls
    report = poller_on(store, InvokesNoted(log), narrow, poller_id="p-stream").poll(now_ms)

    # Then the first was sent right after the read that found it, before the later bucket was read at all
    assert report.dispatched == 2
    assert log.index(f"invoke {first}") < log.index(f"read {later_bucket}") < log.index(f"invoke {later}"), log
