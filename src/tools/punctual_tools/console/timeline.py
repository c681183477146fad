"""A task's history, told from its item's fields alone (:func:`timeline`): the task page's timeline.

The item keeps the instants of some steps (created, due, fired, finished) and only the facts of others (the batch
that dispatched it, the executor that armed it and its lease): those steps are events without an instant
(``at_ms`` None), which the page shows as "not stored". Steps are in the order of the task's life, not sorted by
instant.
"""

from __future__ import annotations

from datetime import datetime

from punctual.domain.keys import to_ms
from punctual.domain.model import Task, TaskStatus
from punctual_tools.console.model import TimelineEvent


def timeline(task: Task) -> list[TimelineEvent]:
    """The steps of ``task``'s life its item tells of, in the order they happened."""
    events = [TimelineEvent(at_ms=_ms(task.created_at), label="created", detail=_created_detail(task))]
    events.extend(_due(task))
    events.extend(_armed(task))
    if task.fired_at is not None:
        events.append(TimelineEvent(at_ms=_ms(task.fired_at), label="fired", detail=_fired_detail(task)))
    if not task.status.is_active:
        detail = f"{task.status}: {task.detail}" if task.detail else str(task.status)
        events.append(TimelineEvent(at_ms=_ms(task.finished_at), label="finished", detail=detail))
    return events


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else to_ms(moment)


def _created_detail(task: Task) -> str:
    if task.schedule_id is None:
        return ""
    return f"occurrence of schedule {task.schedule_id} (version {task.schedule_version})"


def _tries(task: Task) -> int:
    """Which try the current due instant is for: ``attempt`` counts arms, so a task not armed at it (PENDING) waits
    for try ``attempt + 1``."""
    return task.attempt + 1 if task.status is TaskStatus.PENDING else max(task.attempt, 1)


def _due(task: Task) -> list[TimelineEvent]:
    """The first due instant and, when retries moved it, the current try's."""
    fire_key = "" if task.fired_at is not None else f"; fires with idempotency key {task.idempotency_key}"
    if task.first_due_at is None or task.first_due_at == task.due_at:
        return [TimelineEvent(at_ms=task.due_ms, label="due", detail=f"try {_tries(task)}{fire_key}")]
    return [
        TimelineEvent(at_ms=_ms(task.first_due_at), label="first due", detail="try 1"),
        TimelineEvent(at_ms=task.due_ms, label="retry due", detail=f"try {_tries(task)}{fire_key}"),
    ]


def _armed(task: Task) -> list[TimelineEvent]:
    """The dispatch and the arm, when the item names a batch or an executor (their instants are not stored)."""
    events = []
    if task.batch_id is not None:
        events.append(TimelineEvent(at_ms=None, label="dispatched", detail=f"in batch {task.batch_id}"))
    if task.armed_by is not None:
        lease = (
            "" if task.lease_until is None else f", lease until {task.lease_until.isoformat(timespec='milliseconds')}"
        )
        events.append(TimelineEvent(at_ms=None, label="armed", detail=f"by executor {task.armed_by}{lease}"))
    return events


def _fired_detail(task: Task) -> str:
    parts = []
    if task.drift_ms is not None:
        parts.append(f"drift {task.drift_ms:,.1f} ms")
    if task.drift_corrected_ms is not None:
        parts.append(f"{task.drift_corrected_ms:,.1f} ms by the NTP-corrected clock")
    if task.late:
        parts.append("late: past its grace, fired under fire_late")
    parts.append(f"idempotency key {task.idempotency_key}")
    return "; ".join(parts)
