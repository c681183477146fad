"""The decisions about an occurrence, as pure functions: whether it may still fire (misfire), and what a fire
comes to (outcome, retry, lateness). The client, the poller and the executor all ask here.
"""

from __future__ import annotations

from typing import Literal

from .keys import to_ms
from .model import FireRecord, Task, TaskStatus
from .retry import retry_delay_ms

Misfire = Literal["fire", "fire_late", "miss"]
DETAIL_LIMIT = 1_000  # characters of a detail kept on the task


def misfire_decision(late_ms: float, grace_ms: int, policy: str) -> Misfire:
    """What to do with an occurrence that would start ``late_ms`` after its due instant.

    Within the grace (``late_ms <= grace_ms``, the edge included) it fires; one past it, its policy applies:
    ``"skip"`` misses it, ``"fire_late"`` fires it flagged late.

    Examples
    --------
    >>> misfire_decision(1_000, 1_000, "skip"), misfire_decision(1_001, 1_000, "skip")
    ('fire', 'miss')
    >>> misfire_decision(1_001, 1_000, "fire_late")
    'fire_late'
    """
    if late_ms <= grace_ms:
        return "fire"
    return "fire_late" if policy == "fire_late" else "miss"


def decide_before_fire(task: Task, due_ms: int, now_ms: float) -> Misfire:
    """:func:`misfire_decision` for ``task`` due at ``due_ms`` and reached at ``now_ms``."""
    return misfire_decision(now_ms - due_ms, task.misfire_grace_ms, task.misfire_policy)


def decide_outcome(task: Task, due_ms: int, started_ms: float, finished_ms: int, *, decision: Misfire,
                   error: str | None, offset_ms: float | None) -> FireRecord:
    """What an executor records for ``task`` (due at ``due_ms``) that it reached at ``started_ms``.

    ``decision`` is :func:`decide_before_fire`'s answer at ``started_ms``; ``error`` says how the action failed
    (None: it succeeded; ignored when the decision was to miss, as the action did not run). A failed action
    whose retry policy allows another attempt becomes a retry (outcome PENDING with the backoff drawn now);
    past its last attempt it is FAILED. A fire past the grace under ``fire_late`` is flagged late.
    """
    late = started_ms - due_ms
    if decision == "miss":
        return FireRecord(task.task_id, TaskStatus.MISSED, None, int(started_ms), None, None,
                          f"would fire {late:.0f} ms late, past its grace of {task.misfire_grace_ms} ms")
    corrected = None if offset_ms is None else late + offset_ms
    outcome = TaskStatus.SUCCEEDED if error is None else TaskStatus.FAILED
    detail = error
    if decision == "fire_late":
        note = f"fired {late:.0f} ms late, past its grace of {task.misfire_grace_ms} ms (policy fire_late)"
        detail = note if detail is None else f"{note}; {detail}"
    is_late = decision == "fire_late"
    if outcome is TaskStatus.FAILED and task.retry is not None:
        first_due = due_ms if task.first_due_at is None else to_ms(task.first_due_at)
        delay = retry_delay_ms(task.retry, task.attempt, first_due, finished_ms)
        if delay is not None:
            detail = f"attempt {task.attempt} of {task.retry.max_attempts} failed, next in {delay} ms: {detail}"
            return FireRecord(task.task_id, TaskStatus.PENDING, started_ms, finished_ms, late, corrected,
                              detail[:DETAIL_LIMIT], late=is_late, retry_delay_ms=delay, first_due_ms=first_due)
        detail = f"attempt {task.attempt} of {task.retry.max_attempts} failed, no retry left: {detail}"
    return FireRecord(task.task_id, outcome, started_ms, finished_ms, late, corrected,
                      None if detail is None else detail[:DETAIL_LIMIT], late=is_late)
