"""The short-lead fast path: tasks written due before the next poll could dispatch them in time.

The store flags such a task (``fast_path = 1``) when it is created or rescheduled: due sooner than the poll interval
+ the fast-path margin, the soonest a task can be due that the next poll dispatches in time wherever in the poll's
cycle it was written. The table's stream (``NEW_IMAGE``) delivers the write; in AWS the event source mapping's filter
(in ``template.yaml``) lets only inserted or modified items that are PENDING and flagged reach the fast-path Lambda,
and locally :mod:`punctual_tools.local.stream` applies the same filter, read from the template. Either way the
records end here. Knowing when the last poll started (each poll notes it first, :meth:`Poller.last_polls`, one read
per stream batch), the fast path leaves to the next poll every task that poll dispatches in time
(:func:`choose_path`), and hands the others, each as a :class:`Candidate`, to :meth:`Poller.dispatch`, the very
batch-and-invoke step of a poll. When the last polls cannot be read, it dispatches them all.

The executors' ARM condition makes the fast path and the poller race-safe: whichever executor arms first owns the
task, and a stale record (the task has since been armed, rescheduled or cancelled) loses. If the fast path is down,
nothing is lost: the task is in the due index and the next poll finds it, late if it was due before that poll.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from punctual.domain.events import FastPathReport
from punctual.domain.model import Candidate, TaskStatus
from punctual.polling.poller import Poller

log = logging.getLogger(__name__)

FAST_PATH_EVENTS = ("INSERT", "MODIFY")
DispatchPath = Literal["fast path", "poll"]
# What a stream record's new image stands for: its candidate, None when the task is no longer active; raises
# UndecodableItemError (or KeyError, TypeError, ValueError) when it is not a task. The store's adapter decodes its
# own images (``punctual.stores.dynamodb.codec.candidate_of_item``): the wiring hands it in.
ImageDecoder = Callable[[dict[str, Any]], Candidate | None]


def choose_path(  # noqa: PLR0913  a task's instants; the poll's timing keyword-only
    due_ms: int, now_ms: int, last_polls_ms: Sequence[int | None], *, interval_ms: int, lead_ms: int, margin_ms: int
) -> DispatchPath:
    """Which path dispatches a task due at ``due_ms``, looked at ``now_ms``, when the last poll of each poll group
    started at ``last_polls_ms``: the next poll (expected a poll interval after the last) or the fast path, now.

    The poll, when it surely reads the task and dispatches it at least ``margin_ms`` (the fast-path margin: the time
    a poll needs to dispatch a task, and a poll that starts late) before it is due:

    * every group's last poll is known, and its next one is expected more than ``margin_ms`` after now (a poll
      that starts early, or an index entry still on its way, cannot miss the task);
    * the task is due at least ``margin_ms`` after the latest of the next polls;
    * and no later than the earliest next poll's reach (its start + the lead).

    Otherwise the fast path: that is also the answer when a last poll is not known. A later poll than expected
    finds the task overdue: late, never lost.

    Examples
    --------
    Polls every 60 s, a 90 s lead, a 10 s margin, the last poll started at 0 and now is 20 s:

    >>> def path(due_ms, now_ms=20_000, last=(0,)):
    ...     return choose_path(due_ms, now_ms, last, interval_ms=60_000, lead_ms=90_000, margin_ms=10_000)
    >>> path(69_999), path(70_000), path(150_000), path(150_001)
    ('fast path', 'poll', 'poll', 'fast path')

    Within the margin of the next poll, or not knowing the last one, the fast path takes every task:

    >>> path(80_000, now_ms=50_000), path(80_000, now_ms=50_001), path(80_000, last=(None,))
    ('poll', 'fast path', 'fast path')

    With two poll groups, the earliest and the latest next polls decide:

    >>> path(70_000, last=(0, 2_000)), path(72_000, last=(0, 2_000))
    ('fast path', 'poll')
    """
    if not last_polls_ms or any(last is None for last in last_polls_ms):
        return "fast path"
    known = [last for last in last_polls_ms if last is not None]
    earliest_next, latest_next = min(known) + interval_ms, max(known) + interval_ms
    if now_ms > earliest_next - margin_ms:
        return "fast path"
    if latest_next + margin_ms <= due_ms <= earliest_next + lead_ms:
        return "poll"
    return "fast path"


def candidate_of_record(record: Mapping[str, Any], decode: ImageDecoder) -> Candidate | None:
    """The candidate a stream record stands for (its image read by ``decode``), or None when it is not the fast
    path's (a REMOVE, a task no longer PENDING, one due after the next poll, or not a task at all). The filter in the
    template should already have dropped those; this check keeps the handler right if the filter is ever wider."""
    if record.get("eventName") not in FAST_PATH_EVENTS:
        return None
    image = (record.get("dynamodb") or {}).get("NewImage") or {}
    try:
        if image["status"]["S"] != TaskStatus.PENDING.value or image.get("fast_path", {}).get("N") != "1":
            return None
        return decode(image)
    except (KeyError, TypeError, ValueError):
        return None  # the watermark item, or something that is not a task


def dispatch_stream_records(
    poller: Poller, records: Iterable[Mapping[str, Any]], now_ms: int | None = None, *, decode: ImageDecoder
) -> FastPathReport:
    """Dispatch the fast-path tasks among ``records`` (a stream batch, oldest first, each image read by ``decode``),
    looked at ``now_ms`` (the wall clock by default): those the next poll does not dispatch in time
    (:func:`choose_path`, after one read of the last polls' starts), or all of them when those cannot be read."""
    records = list(records)
    latest: dict[str, Candidate] = {}
    for record in records:  # a task written twice in one batch: its latest image wins
        candidate = candidate_of_record(record, decode)
        if candidate is not None:
            latest[candidate.task_id] = candidate
    candidates = list(latest.values())
    last_polls: list[int | None] = []
    if candidates:
        try:
            last_polls = poller.last_polls()
        except Exception:  # not knowing when the next poll comes, the fast path dispatches them all
            log.exception("reading when the last polls started failed: dispatching every candidate")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    s = poller.settings
    mine = [
        c
        for c in candidates
        if choose_path(
            c.due_ms,
            now,
            last_polls,
            interval_ms=s.poll_interval_ms,
            lead_ms=s.lead_ms,
            margin_ms=s.fast_path_margin_ms,
        )
        == "fast path"
    ]
    done = poller.dispatch(mine)
    return FastPathReport(
        records=len(records),
        candidates=len(candidates),
        left_to_poll=len(candidates) - len(mine),
        polls_known=bool(last_polls) and None not in last_polls,
        **done.model_dump(),
    )


def matches(pattern: Mapping[str, Any], event: Any) -> bool:
    """Whether ``event`` matches an event-filter ``pattern`` (the subset of Lambda's filter syntax the
    template uses: nested keys, and lists of allowed exact values)."""
    if not isinstance(event, Mapping):
        return False
    for key, expected in pattern.items():
        if key not in event:
            return False
        value = event[key]
        if isinstance(expected, Mapping):
            if not matches(expected, value):
                return False
        elif isinstance(expected, list):
            if any(isinstance(e, Mapping) for e in expected):
                raise ValueError(f"filter rule {expected!r} for {key!r} is not supported locally")
            if value not in expected:
                return False
        else:
            raise ValueError(f"filter value for {key!r} must be a list or an object, not {expected!r}")
    return True
