"""One invocation of the poller function (``punctual.polling.poller.run_tick``) on moto: the scheduled tick's fan-out
over the poll groups, the groups it finds late, a group's own poll, an event of another configuration, the deadline,
and the answer. Each tick runs at an explicit ``now``; a group's own poller runs only when the test runs it."""

from __future__ import annotations

from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.events import PollGroupEvent, PollReport
from punctual.domain.keys import from_ms
from punctual.domain.model import Task
from punctual.polling.poller import DEADLINE_MARGIN_MS, Poller, ScheduledTick, late_groups, run_tick
from punctual.stores.dynamodb.store import DynamoTaskStore
from punctual.targets import LogAction
from support import FIXED_NOW_MS, RecordingInvoker

TICK = ScheduledTick(id="e-1", time="2030-06-01T12:00:00+00:00")
PLENTY = 60_000  # ms of the invocation left: far from the deadline


def plenty() -> int:
    return PLENTY


@pytest.fixture
def invoker() -> RecordingInvoker:
    return RecordingInvoker()


def make_poller(dynamodb: Any, settings: Settings, invoker: RecordingInvoker, groups: int, due: int) -> Poller:
    """A poller of ``groups`` poll groups over the moto table, invoking executors through ``invoker``, with ``due``
    tasks (``t-00``, ...) due within its lead window."""
    grouped = settings.model_copy(update={"poll_groups": groups})
    store = DynamoTaskStore.from_settings(dynamodb, grouped)
    for i in range(due):
        task = Task(task_id=f"t-{i:02d}", due_at=from_ms(FIXED_NOW_MS + 1_000 + 100 * i), action=LogAction())
        assert store.create(task, FIXED_NOW_MS)[1]
    return Poller(store, invoker, grouped, poller_id="poller-test")


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
    assert report.group == 0 and not first.ignored
    assert first.answer() == report.model_dump()
    # When group 1's event runs
    second = run_tick(poller, started[0], now_ms, plenty, started.append)
    # Then it polls group 1 only, starts nothing, and between them every task went to an executor once
    assert [r.group for r in second.reports] == [1] and len(started) == 1
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
    assert tick.answer() == {"groups": [r.model_dump() for r in tick.reports]}
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
    assert [r.group for r in first.reports] == [0] and first.total("groups_late") == 0
    group_0 = set(dispatched(invoker))
    assert len(lost) == 1 and 0 < len(group_0) < 12
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
    assert [r.group for r in third.reports] == [0] and third.total("groups_late") == 0


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
    assert [r.group for r in tick.reports] == [0] and tick.total("groups_late") == 0


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
    assert [r.group for r in tick.reports] == [0] and polls_done == [0]
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
    assert [r.group for r in tick.reports] == [0] and tick.total("groups_late") == 0
