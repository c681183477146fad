"""One invocation of the poller function (``punctual.polling.tick.run_tick``) on moto: the scheduled tick's fan-out
over the poll groups, the groups it finds late, a group's own poll, an event of another configuration, the deadline,
the sub-polls of a poll interval shorter than the schedule's minute (on a fake clock), and the answer. Each tick runs
at an explicit ``now``; a group's own poller runs only when the test runs it."""

from __future__ import annotations

from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.events import PollGroupEvent, PollReport
from punctual.domain.keys import from_ms
from punctual.domain.model import Task
from punctual.polling.poller import Poller, late_groups
from punctual.polling.tick import DEADLINE_MARGIN_MS, SCHEDULE_PERIOD_MS, ScheduledTick, run_tick
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import LogAction
from punctual_tools.doubles import FakeClock
from support import FIXED_NOW_MS, RecordingInvoker

TICK = ScheduledTick(id="e-1", time="2030-06-01T12:00:00+00:00")
PLENTY = 60_000  # ms of the invocation left: far from the deadline


def plenty() -> int:
    return PLENTY


def make_poller(dynamodb: Any, settings: Settings, invoker: RecordingInvoker, groups: int, due: int) -> Poller:
    """A poller of ``groups`` poll groups over the moto table, invoking executors through ``invoker``, with ``due``
    tasks (``t-00``, ...) due within its lead window."""
    grouped = settings.model_copy(update={"poll_groups": groups})
    store = DynamoStores.from_settings(dynamodb, grouped)
    for i in range(due):
        task = Task(task_id=f"t-{i:02d}", due_at=from_ms(FIXED_NOW_MS + 1_000 + 100 * i), action=LogAction())
        assert store.client.create(task, FIXED_NOW_MS)[1]
    return poller_on(store, invoker, grouped, poller_id="poller-test")


def task_ids(count: int) -> list[str]:
    return [f"t-{i:02d}" for i in range(count)]


def dispatched(invoker: RecordingInvoker) -> list[str]:
    return sorted(t["task_id"] for payload in invoker.payloads for t in payload["tasks"])


def test_the_scheduled_tick_starts_each_other_group_then_polls_group_0(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int
) -> None:
    # Given two poll groups and twelve tasks due within the lead window
    poller = make_poller(dynamodb, settings, invoker, groups=2, due=12)
    started: list[PollGroupEvent] = []
    # When the scheduled tick runs
    first = run_tick(poller, TICK, now_ms, plenty, started.append)
    # Then it started group 1 with the event's id and time, and polled group 0 only; its answer is that report
    assert started == [PollGroupEvent(id="e-1", time=TICK.time, poll_group=1, poll_groups=2)]
    (report,) = first.reports
    assert report.group == 0
    assert not first.ignored
    assert first.answer() == report.model_dump()
    # When group 1's event runs
    second = run_tick(poller, started[0], now_ms, plenty, started.append)
    # Then it polls group 1 only, starts nothing, and between them every task went to an executor once
    assert [r.group for r in second.reports] == [1]
    assert len(started) == 1
    assert dispatched(invoker) == task_ids(12)
    assert first.total("dispatched") + second.total("dispatched") == 12


def test_a_group_that_cannot_be_started_is_polled_by_the_scheduled_tick(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int
) -> None:
    # Given two poll groups, twelve tasks due, and starting another poller fails (the Invoke call itself refused)
    poller = make_poller(dynamodb, settings, invoker, groups=2, due=12)

    def refused(event: PollGroupEvent) -> None:
        raise RuntimeError("TooManyRequestsException")

    # When the scheduled tick runs
    tick = run_tick(poller, TICK, now_ms, plenty, refused)
    # Then it polled both groups itself, counts the group as late, answers both reports, and the totals add them up
    assert [r.group for r in tick.reports] == [0, 1]
    assert tick.total("groups_late") == 1
    assert tick.answer() == {"polls": [r.model_dump() for r in tick.reports]}
    assert dispatched(invoker) == task_ids(12)
    assert tick.total("dispatched") == 12 == sum(r.dispatched for r in tick.reports)


@pytest.mark.parametrize(
    ("last_polls", "previous_tick", "late"),
    [
        ([60_000, 60_040, 60_000], 60_000, []),  # both started by the tick before (at or after its start)
        ([60_000, 59_999, 61_000], 60_000, [1]),  # group 1's last poll started a millisecond before that tick
        ([60_000, None, 0], 60_000, [1, 2]),  # never started, or only long ago
        ([None, None, None], None, []),  # no tick before: a new stack, whose groups were only just started
        ([None, 5, None], None, []),
    ],
)
def test_a_group_is_late_when_its_last_poll_started_before_the_tick_before(
    last_polls: list[int | None], previous_tick: int | None, late: list[int]
) -> None:
    assert late_groups(last_polls, previous_tick) == late


INTERVAL = 60_000


def test_a_group_whose_poller_never_ran_since_the_tick_before_is_polled_by_the_next_tick(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int
) -> None:
    # Given two poll groups, twelve tasks due, and a first tick (on a new stack) whose invocation of group 1's
    # poller was accepted (202) and then never ran: throttled in Lambda's queue, then dropped
    poller = make_poller(dynamodb, settings, invoker, groups=2, due=12)
    lost: list[PollGroupEvent] = []
    first = run_tick(poller, TICK, now_ms, plenty, lost.append)
    # Then that first tick polled group 0 only, finding nothing late (no tick before it)
    assert [r.group for r in first.reports] == [0]
    assert first.total("groups_late") == 0
    group_0 = set(dispatched(invoker))
    assert len(lost) == 1
    assert 0 < len(group_0) < 12
    # When the next tick runs, and group 1's invocation is lost again
    second = run_tick(poller, TICK, now_ms + INTERVAL, plenty, lost.append)
    # Then it finds group 1 late (its last poll started before the tick before: never), polls it itself after
    # group 0, and counts it; every task went to an executor
    assert [r.group for r in second.reports] == [0, 1]
    assert second.total("groups_late") == 1 == second.reports[0].groups_late
    assert set(dispatched(invoker)) == set(task_ids(12))
    # When a third tick runs (group 1's invocation lost once more)
    third = run_tick(poller, TICK, now_ms + 2 * INTERVAL, plenty, lost.append)
    # Then group 1 is not late for it: the tick before polled it, at that tick's start
    assert [r.group for r in third.reports] == [0]
    assert third.total("groups_late") == 0


def test_a_group_whose_poller_ran_since_the_tick_before_is_left_to_it(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int
) -> None:
    # Given two poll groups and a tick whose invocation of group 1 ran, 40 ms after the tick started
    poller = make_poller(dynamodb, settings, invoker, groups=2, due=12)
    started: list[PollGroupEvent] = []
    run_tick(poller, TICK, now_ms, plenty, started.append)
    run_tick(poller, started[0], now_ms + 40, plenty, started.append)
    # When the next tick runs  Then it polls group 0 only: group 1 is not late
    tick = run_tick(poller, TICK, now_ms + INTERVAL, plenty, started.append)
    assert [r.group for r in tick.reports] == [0]
    assert tick.total("groups_late") == 0


def test_a_late_group_whose_own_poller_starts_during_group_0s_poll_is_counted_but_not_polled_twice(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int
) -> None:
    # Given two poll groups, and a first tick whose invocation of group 1 never ran
    poller = make_poller(dynamodb, settings, invoker, groups=2, due=12)
    run_tick(poller, TICK, now_ms, plenty, lambda event: None)
    later = now_ms + INTERVAL

    # When the next tick's invocation of group 1 runs at once (before group 0's poll ends)
    def runs_at_once(event: PollGroupEvent) -> None:
        run_tick(poller, event, later + 5, plenty, lambda e: None)

    tick = run_tick(poller, TICK, later, plenty, runs_at_once)
    # Then the tick counts group 1 late (it had not started since the tick before) but leaves it to its own poller
    assert [r.group for r in tick.reports] == [0]
    assert tick.total("groups_late") == 1


def test_a_late_group_is_not_polled_once_the_tick_is_out_of_time(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two poll groups, a first tick whose invocation of group 1 never ran, and a next tick whose time runs
    # out as soon as group 0's poll has ended
    poller = make_poller(dynamodb, settings, invoker, groups=2, due=12)
    run_tick(poller, TICK, now_ms, plenty, lambda event: None)
    group_0 = dispatched(invoker)
    polls_done: list[int] = []
    poll = poller.poll

    def noted_poll(*args: Any, **kwargs: Any) -> PollReport:
        report = poll(*args, **kwargs)
        polls_done.append(report.group)
        return report

    monkeypatch.setattr(poller, "poll", noted_poll)
    # When it runs
    tick = run_tick(
        poller, TICK, now_ms + INTERVAL, lambda: DEADLINE_MARGIN_MS - 1 if polls_done else PLENTY, lambda e: None
    )
    # Then it counts group 1 late but does not poll it: its tasks stay PENDING for the next tick to find
    assert [r.group for r in tick.reports] == [0]
    assert polls_done == [0]
    assert tick.total("groups_late") == 1
    assert sorted(set(dispatched(invoker))) == sorted(group_0)


def test_when_the_last_polls_cannot_be_read_no_group_is_found_late_and_group_0_is_polled(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two poll groups, a first tick whose invocation of group 1 never ran, and a store that cannot say when
    # each group last polled (throttled)
    poller = make_poller(dynamodb, settings, invoker, groups=2, due=12)
    run_tick(poller, TICK, now_ms, plenty, lambda event: None)

    def throttled() -> list[int | None]:
        raise RuntimeError("ProvisionedThroughputExceededException")

    monkeypatch.setattr(poller, "last_polls", throttled)
    started: list[PollGroupEvent] = []
    # When the next tick runs
    tick = run_tick(poller, TICK, now_ms + INTERVAL, plenty, started.append)
    # Then it still starts group 1 and polls group 0, and finds no group late (the tick after looks again)
    assert [e.poll_group for e in started] == [1]
    assert [r.group for r in tick.reports] == [0]
    assert tick.total("groups_late") == 0


# -- sub-polls: a poll interval shorter than the schedule's minute ---------------------------------------------------
SUB_INTERVAL = 10_000  # six polls a minute
TIMEOUT_MS = 55_000  # the poller's Timeout in template.yaml


class Invocation:
    """A poller invocation on a fake clock: it started at ``now_ms`` with ``timeout_ms`` to run, and each poll takes
    ``poll_s`` of it."""

    def __init__(self, poller: Poller, now_ms: int, timeout_ms: int = TIMEOUT_MS, poll_s: float = 1.5) -> None:
        self.clock = FakeClock(wall_ms=now_ms)
        self.started = self.clock.monotonic()
        self.timeout_ms = timeout_ms
        self.polled_at: list[tuple[int, int]] = []  # (ms since the invocation's start, group) of each poll
        poll = poller.poll

        def timed_poll(at_ms: int, out_of_time: Any = None, group: int = 0) -> PollReport:
            self.polled_at.append((self.elapsed_ms(), group))
            report = poll(at_ms, out_of_time, group=group)
            self.clock.advance(poll_s)
            return report

        poller.poll = timed_poll  # type: ignore[method-assign, assignment]  # the poller's poll, timed

    def elapsed_ms(self) -> int:
        return round((self.clock.monotonic() - self.started) * 1000)

    def remaining_ms(self) -> int:
        return self.timeout_ms - self.elapsed_ms()


def sub_poller(dynamodb: Any, settings: Settings, invoker: RecordingInvoker, groups: int = 1) -> Poller:
    """A poller polling six times a minute with a 20 s lead, and a task due every 10 s from 5 s after ``now``."""
    six = settings.model_copy(update={"poll_interval_ms": SUB_INTERVAL, "lead_ms": 20_000, "poll_groups": groups})
    store = DynamoStores.from_settings(dynamodb, six)
    for i in range(9):
        task = Task(task_id=f"t-{i:02d}", due_at=from_ms(FIXED_NOW_MS + 5_000 + 10_000 * i), action=LogAction())
        assert store.client.create(task, FIXED_NOW_MS)[1]
    return poller_on(store, invoker, six, poller_id="poller-test")


def test_an_invocation_polls_once_a_poll_interval_from_its_start_and_sums_its_polls(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int
) -> None:
    # Given a poller polling every 10 s (20 s lead), a task due every 10 s, and polls that take 1.5 s each
    poller = sub_poller(dynamodb, settings, invoker)
    invocation = Invocation(poller, now_ms)
    # When the scheduled tick's invocation runs
    tick = run_tick(poller, TICK, now_ms, invocation.remaining_ms, lambda e: None, clock=invocation.clock)
    # Then it polled six times, at 0, 10, ..., 50 s from its start (not 11.5 s apart), each at its own now
    assert invocation.polled_at == [(k * SUB_INTERVAL, 0) for k in range(6)]
    assert [r.now_ms for r in tick.reports] == [now_ms + k * SUB_INTERVAL for k in range(6)]
    # And every task due up to the last poll's reach (50 s + 20 s) went to an executor, the first two from the
    # first poll (no executor arms them here: one still PENDING a poll later and due before the next is sent again)
    assert sorted(set(dispatched(invoker))) == task_ids(7)
    assert sorted(t["task_id"] for t in invoker.payloads[0]["tasks"]) == task_ids(2)
    # And the invocation's counts are the sums of its polls'
    assert tick.total("dispatched") == len(dispatched(invoker)) == sum(r.dispatched for r in tick.reports)
    assert tick.total("candidates") == sum(r.candidates for r in tick.reports) > 7
    assert tick.answer() == {"polls": [r.model_dump() for r in tick.reports]}


def test_a_poll_that_overruns_its_interval_is_followed_at_once_and_the_loop_stops_before_the_deadline(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int, caplog: pytest.LogCaptureFixture
) -> None:
    # Given polls every 10 s that take 12 s each (a poll that cannot keep up)
    poller = sub_poller(dynamodb, settings, invoker)
    invocation = Invocation(poller, now_ms, poll_s=12)
    # When the invocation runs
    tick = run_tick(poller, TICK, now_ms, invocation.remaining_ms, lambda e: None, clock=invocation.clock)
    # Then each poll follows the one before at once; the fifth ends at 60 s, past the deadline margin, so the
    # sixth is not made
    assert [at for at, _ in invocation.polled_at] == [0, 12_000, 24_000, 36_000, 48_000]
    assert len(tick.reports) == 5
    assert "sub-poll 6 of 6 not made" in caplog.text


@pytest.mark.parametrize(
    ("timeout_ms", "polls"), [(50_000 + DEADLINE_MARGIN_MS, 6), (50_000 + DEADLINE_MARGIN_MS - 1, 5)]
)
def test_a_sub_poll_is_made_only_when_its_instant_leaves_the_deadline_margin(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int, timeout_ms: int, polls: int
) -> None:
    # Given an invocation whose last sub-poll (at 50 s) leaves exactly the deadline margin, or a millisecond less
    poller = sub_poller(dynamodb, settings, invoker)
    invocation = Invocation(poller, now_ms, timeout_ms=timeout_ms)
    # When it runs  Then it makes that sub-poll only when the margin is left at its instant
    tick = run_tick(poller, TICK, now_ms, invocation.remaining_ms, lambda e: None, clock=invocation.clock)
    assert len(tick.reports) == polls


def test_the_scheduled_tick_fans_out_once_and_each_invocation_loops_its_own_groups(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int
) -> None:
    # Given two poll groups polled every 10 s
    poller = sub_poller(dynamodb, settings, invoker, groups=2)
    started: list[PollGroupEvent] = []
    scheduled = Invocation(poller, now_ms)
    # When the scheduled tick's invocation runs
    tick = run_tick(poller, TICK, now_ms, scheduled.remaining_ms, started.append, clock=scheduled.clock)
    # Then it started group 1's poller once, and polled group 0 six times
    assert [e.poll_group for e in started] == [1]
    assert scheduled.polled_at == [(k * SUB_INTERVAL, 0) for k in range(6)]
    assert len(tick.reports) == 6
    # When group 1's invocation runs  Then it polls group 1 six times, starting nothing
    group = Invocation(poller, now_ms + 40)
    own = run_tick(poller, started[0], now_ms + 40, group.remaining_ms, started.append, clock=group.clock)
    assert group.polled_at == [(k * SUB_INTERVAL, 1) for k in range(6)]
    assert len(started) == 1
    assert [r.group for r in own.reports] == [1] * 6
    # And between them every task due within the last polls' reach went to an executor
    assert sorted(set(dispatched(invoker))) == task_ids(7)


def test_a_late_group_polled_by_the_scheduled_tick_is_polled_at_each_of_its_sub_polls(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int
) -> None:
    # Given two poll groups polled every 10 s, a first invocation whose group 1 poller never ran
    poller = sub_poller(dynamodb, settings, invoker, groups=2)
    first = Invocation(poller, now_ms)
    run_tick(poller, TICK, now_ms, first.remaining_ms, lambda e: None, clock=first.clock)
    # When the next tick's invocation runs, group 1's poller lost again
    later = now_ms + SCHEDULE_PERIOD_MS
    second = Invocation(poller, later)
    tick = run_tick(poller, TICK, later, second.remaining_ms, lambda e: None, clock=second.clock)
    # Then it polls group 1 too, after group 0, at each sub-poll, and counts it late once
    assert [r.group for r in tick.reports] == [0, 1] * 6
    assert tick.total("groups_late") == 1
