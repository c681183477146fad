"""One invocation of the poller function: its sub-polls, a poll interval apart, each a poll of its groups.

:func:`run_tick` is one invocation: the scheduled tick fans out over the poll groups (one invocation of the function
per other group, :class:`~punctual.domain.events.PollGroupEvent`), a group's invocation polls its group, and both stop
dispatching ``DEADLINE_MARGIN_MS`` before the invocation's deadline. The schedule comes once a minute
(``SCHEDULE_PERIOD_MS``, EventBridge's shortest rate); with a shorter poll interval, each invocation polls
:func:`sub_polls` times within its minute, so that executors are invoked a shorter lead before their tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from punctual.config.settings import Settings
from punctual.domain.clock import Clock, SystemClock
from punctual.domain.events import PollGroupEvent, PollReport
from punctual.polling.poller import Poller

log = logging.getLogger(__name__)

# A poll stops dispatching this long before its invocation's deadline: what still runs then is an index read or an
# executor's invocation in flight, tens of ms each. With six polls a minute the last starts 50 s into the poller's
# 55 s timeout, and keeps 3 s to dispatch.
DEADLINE_MARGIN_MS = 2_000
SCHEDULE_PERIOD_MS = 60_000  # the poller's schedule, rate(1 minute): the sub-polls of one invocation share it


@dataclass(frozen=True, slots=True)
class ScheduledTick:
    """The scheduled rule's event, as a tick needs it: its ``id`` (the logs' correlation id) and ``time``."""

    id: str
    time: str


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one invocation of the poller did: the reports of the polls it made, in order, every group's of a sub-poll
    before the next sub-poll's (none: it ignored its event)."""

    reports: tuple[PollReport, ...]

    @property
    def ignored(self) -> bool:
        return not self.reports

    def total(self, field: str) -> int:
        """The sum of ``field`` (a count of :class:`~punctual.domain.events.PollReport`) over the polls made."""
        return sum(int(getattr(report, field)) for report in self.reports)

    def answer(self) -> dict[str, Any]:
        """The function's answer: the one poll's report, ``{"polls": [...]}`` for several, ``{"ignored": True}``."""
        if self.ignored:
            return {"ignored": True}
        if len(self.reports) == 1:
            return self.reports[0].model_dump()
        return {"polls": [report.model_dump() for report in self.reports]}


def sub_polls(settings: Settings) -> int:
    """How many times one invocation of the poller polls: as many poll intervals as fit in the schedule's minute (at
    least one; a poll interval longer than the minute is the local runtime's, which polls on its own clock).

    Examples
    --------
    >>> [sub_polls(Settings(poll_interval_ms=ms)) for ms in (60_000, 30_000, 10_000, 120_000)]
    [1, 2, 6, 1]
    """
    return max(1, SCHEDULE_PERIOD_MS // settings.poll_interval_ms)


def run_tick(  # noqa: PLR0913  the invocation's poller, trigger, instant, time left and fan-out; a test's clock
    poller: Poller,
    trigger: ScheduledTick | PollGroupEvent,
    now_ms: int,
    remaining_ms: Callable[[], int],
    start_group: Callable[[PollGroupEvent], None],
    *,
    clock: Clock | None = None,
) -> TickReport:
    """One invocation of the poller function at ``now_ms``: :func:`sub_polls` polls of its groups, a poll interval
    apart.

    The first sub-poll runs at once; sub-poll ``k`` at ``now_ms + k x poll_interval_ms``, measured from the
    invocation's start on the monotonic clock (a sub-poll that ends after the next one's instant is followed at once,
    not a whole interval later). Each sub-poll polls the groups the first one did: a scheduled tick fans out only in
    its first sub-poll (and polls there the groups it finds late), a group's invocation loops its own group. The loop
    stops early when the next sub-poll's instant leaves less than ``DEADLINE_MARGIN_MS`` of the invocation: what that
    sub-poll would have dispatched, the next invocation's first sub-poll finds (every poll reaches back to overdue
    tasks).

    Parameters
    ----------
    poller:
        The poller service.
    trigger:
        The scheduled event (poll every group: each other group's poller is started with ``start_group``, see
        :meth:`Poller.poll_all_groups`), or a group's event from such a tick (poll that group; an event sent
        under another number of groups is ignored: the next scheduled tick covers every group).
    now_ms:
        The invocation's start, the first sub-poll's instant.
    remaining_ms:
        How long the invocation may still run; dispatching stops once less than ``DEADLINE_MARGIN_MS`` is left
        (what is left is found by the next poll).
    start_group:
        Starts the poller of one other group (in AWS: an async invoke of this function with the event).
    clock:
        Sleeps between sub-polls and measures them (the system's clocks by default).
    """
    clock = clock or SystemClock()
    started = clock.monotonic()

    def out_of_time() -> bool:
        return remaining_ms() < DEADLINE_MARGIN_MS

    groups = poller.settings.poll_groups
    if isinstance(trigger, PollGroupEvent):
        if trigger.poll_groups != groups or trigger.poll_group >= groups:
            log.warning(
                "poll group %d of %d ignored: this function polls %d groups",
                trigger.poll_group,
                trigger.poll_groups,
                groups,
            )
            return TickReport(())
        reports = [poller.poll(now_ms, out_of_time, group=trigger.poll_group)]
    else:
        scheduled: ScheduledTick = trigger

        def start(group: int) -> None:
            start_group(PollGroupEvent(id=scheduled.id, time=scheduled.time, poll_group=group, poll_groups=groups))

        reports = poller.poll_all_groups(now_ms, start, out_of_time)
    own = [report.group for report in reports]
    interval_ms = poller.settings.poll_interval_ms
    for k in range(1, sub_polls(poller.settings)):
        wait_ms = k * interval_ms - (clock.monotonic() - started) * 1000
        if remaining_ms() - max(wait_ms, 0) < DEADLINE_MARGIN_MS:
            log.warning(
                "sub-poll %d of %d not made: it would start within %d ms of the invocation's deadline; the next "
                "invocation's first poll finds its tasks",
                k + 1,
                sub_polls(poller.settings),
                DEADLINE_MARGIN_MS,
            )
            break
        clock.sleep(wait_ms / 1000)
        at_ms = now_ms + round((clock.monotonic() - started) * 1000)
        reports.extend(poller.poll(at_ms, out_of_time, group=group) for group in own)
    return TickReport(tuple(reports))
