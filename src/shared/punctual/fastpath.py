"""The short-lead fast path: tasks written due before the next poll could dispatch them in time.

The store flags such a task (``fast_path = 1``) when it is created or rescheduled. The table's stream
(``NEW_IMAGE``) delivers the write; in AWS the event source mapping's filter (in ``template.yaml``) lets only
inserted or modified items that are PENDING and flagged reach the fast-path Lambda, and locally
:mod:`punctual_tools.local.stream` applies the same filter, read from the template. Either way the records end
here: each becomes a :class:`Candidate` and goes through :meth:`Poller.dispatch`, the very batch-and-invoke
step of a poll. The executors' ARM condition makes the fast path and the poller race-safe: whichever executor
arms first owns the task, and a stale record (the task has since been armed, rescheduled or cancelled) loses.
If the fast path is down, nothing is lost: the task is in the due index and the next poll finds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .dynamodb.codec import candidate_of_item
from .events import FastPathReport
from .model import Candidate, TaskStatus
from .poller import Poller

FAST_PATH_EVENTS = ("INSERT", "MODIFY")


def candidate_of_record(record: Mapping[str, Any]) -> Candidate | None:
    """The candidate a stream record stands for, or None when it is not the fast path's (a REMOVE, a task no
    longer PENDING, one due after the next poll, or not a task at all). The filter in the template should
    already have dropped those; this check keeps the handler right if the filter is ever wider."""
    if record.get("eventName") not in FAST_PATH_EVENTS:
        return None
    image = (record.get("dynamodb") or {}).get("NewImage") or {}
    try:
        if image["status"]["S"] != TaskStatus.PENDING.value or image.get("fast_path", {}).get("N") != "1":
            return None
        return candidate_of_item(image)
    except (KeyError, TypeError, ValueError):
        return None  # the watermark item, or something that is not a task


def dispatch_stream_records(poller: Poller, records: Iterable[Mapping[str, Any]]) -> FastPathReport:
    """Dispatch the fast-path tasks among ``records`` (a stream batch, oldest first)."""
    records = list(records)
    latest: dict[str, Candidate] = {}
    for record in records:  # a task written twice in one batch: its latest image wins
        candidate = candidate_of_record(record)
        if candidate is not None:
            latest[candidate.task_id] = candidate
    done = poller.dispatch(list(latest.values()))
    return FastPathReport(records=len(records), candidates=len(latest), **done.model_dump())


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
