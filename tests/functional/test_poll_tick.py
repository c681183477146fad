"""One invocation of the poller function (``punctual.polling.poller.run_tick``) on moto: the scheduled tick's fan-out
over the poll groups, a group's own poll, an event of another configuration, the deadline, and the answer."""

from __future__ import annotations

from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.events import PollGroupEvent
from punctual.domain.keys import from_ms
from punctual.domain.model import Task
from punctual.polling.poller import DEADLINE_MARGIN_MS, Poller, ScheduledTick, run_tick
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
    # Given two poll groups, twelve tasks due, and starting another poller fails (throttled)
    poller = make_poller(dynamodb, settings, invoker, groups=2, due=12)

    def throttled(event: PollGroupEvent) -> None:
        raise RuntimeError("throttled")

    # When the scheduled tick runs
    tick = run_tick(poller, TICK, now_ms, plenty, throttled)
    # Then it polled both groups itself, answers both reports, and the totals add them up
    assert [r.group for r in tick.reports] == [0, 1]
    assert tick.answer() == {"groups": [r.model_dump() for r in tick.reports]}
    assert dispatched(invoker) == task_ids(12)
    assert tick.total("dispatched") == 12 == sum(r.dispatched for r in tick.reports)


@pytest.mark.parametrize(
    "event",
    [
        PollGroupEvent(id="e-1", time=TICK.time, poll_group=1, poll_groups=2),  # sent under two groups
        PollGroupEvent(id="e-1", time=TICK.time, poll_group=3, poll_groups=1),  # no such group
    ],
)
def test_a_group_event_of_another_configuration_is_ignored(
    dynamodb: Any, settings: Settings, invoker: RecordingInvoker, now_ms: int, event: PollGroupEvent
) -> None:
    # Given one poll group and a task due
    poller = make_poller(dynamodb, settings, invoker, groups=1, due=1)
    # When a group event that does not fit it arrives
    tick = run_tick(poller, event, now_ms, plenty, lambda e: None)
    # Then nothing is polled or dispatched, and the answer says it was ignored
    assert tick.ignored and tick.reports == () and tick.total("dispatched") == 0
    assert tick.answer() == {"ignored": True}
    assert invoker.payloads == []


@pytest.mark.parametrize(("left_ms", "sends"), [(DEADLINE_MARGIN_MS, True), (DEADLINE_MARGIN_MS - 1, False)])
def test_a_tick_dispatches_until_its_deadline_margin_is_reached(
    dynamodb: Any,
    settings: Settings,
    invoker: RecordingInvoker,
    now_ms: int,
    left_ms: int,
    sends: bool,
) -> None:
    # Given one poll group and three tasks due
    poller = make_poller(dynamodb, settings, invoker, groups=1, due=3)
    # When the tick runs with exactly the margin left, or one ms less
    tick = run_tick(poller, TICK, now_ms, lambda: left_ms, lambda e: None)
    # Then it dispatches everything at the margin; past it nothing, and its report says it is incomplete
    (report,) = tick.reports
    assert dispatched(invoker) == (task_ids(3) if sends else [])
    assert report.complete is sends
