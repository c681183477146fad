"""The decisions about an occurrence, as pure functions: whether it may still fire (misfire), and what a fire
comes to (outcome, retry, lateness). The client, the poller and the executor all ask here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from punctual.domain.keys import to_ms
from punctual.domain.model import FireRecord, Outcome, Task
from punctual.domain.retry import retry_delay_ms

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


@dataclass(frozen=True, slots=True)
class FireDecision:
    """What to do at fire time, and the note the record keeps (None: fire, nothing to say)."""

    action: Misfire
    note: str | None = None


LOST_EXECUTOR = "its executor was lost after arming it: it may have fired before recording"


def decide_before_fire(task: Task, due_ms: int, now_ms: float, taken_over_until_ms: int | None = None) -> FireDecision:
    """Whether ``task`` (due at ``due_ms``), reached at ``now_ms``, fires.

    A task taken over from a dead executor that was due while that executor may still have fired it
    (``due_ms <= taken_over_until_ms``: the crash window) is never fired twice under ``"skip"``: it is missed;
    under ``"fire_late"`` it fires again, with the same idempotency key, flagged late. Otherwise
    :func:`misfire_decision` decides.

    Examples
    --------
    >>> from punctual.targets import LogAction
    >>> from punctual.domain.model import Task
    >>> from punctual.domain.keys import from_ms
    >>> task = Task(task_id="t", due_at=from_ms(10_000), action=LogAction(), misfire_grace_ms=1_000)
    >>> decide_before_fire(task, 10_000, 10_500).action, decide_before_fire(task, 10_000, 11_001).action
    ('fire', 'miss')
    >>> decide_before_fire(task, 10_000, 10_001, taken_over_until_ms=10_000).action
    'miss'
    """
    late = now_ms - due_ms
    if taken_over_until_ms is not None and due_ms <= taken_over_until_ms:
        if task.misfire_policy == "fire_late":
            return FireDecision(
                "fire_late", f"{LOST_EXECUTOR}; fired again with the same idempotency key (policy fire_late)"
            )
        return FireDecision("miss", f"{LOST_EXECUTOR} (reached {late:.0f} ms after due)")
    action = misfire_decision(late, task.misfire_grace_ms, task.misfire_policy)
    if action == "miss":
        return FireDecision(action, f"would fire {late:.0f} ms late, past its grace of {task.misfire_grace_ms} ms")
    if action == "fire_late":
        return FireDecision(
            action, f"fired {late:.0f} ms late, past its grace of {task.misfire_grace_ms} ms (policy fire_late)"
        )
    return FireDecision(action)


def decide_outcome(  # noqa: PLR0913  the fire's facts, keyword-only past its instants
    task: Task,
    due_ms: int,
    started_ms: float,
    finished_ms: int,
    *,
    decision: FireDecision,
    error: str | None,
    offset_ms: float | None,
    max_attempts: int | None = None,
) -> FireRecord:
    """What an executor records for ``task`` (due at ``due_ms``) that it reached at ``started_ms``.

    ``decision`` is :func:`decide_before_fire`'s answer at ``started_ms`` (its note goes into the detail);
    ``error`` says how the action failed (None: it succeeded; ignored when the decision was to miss, as the
    action did not run). A failed action whose retry policy allows another attempt is a RETRY (with the backoff
    drawn now); past its last attempt it is FAILED. A fire past the grace under
    ``fire_late`` is flagged late. ``max_attempts`` caps the policy's attempts (the tenant's quota).
    """
    late = started_ms - due_ms
    if decision.action == "miss":
        return FireRecord(
            task_id=task.task_id,
            outcome=Outcome.MISSED,
            fired_ms=None,
            finished_ms=int(started_ms),
            drift_ms=None,
            drift_corrected_ms=None,
            detail=decision.note,
        )
    corrected = None if offset_ms is None else late + offset_ms
    outcome = Outcome.SUCCEEDED if error is None else Outcome.FAILED
    detail = error
    if decision.note is not None:
        detail = decision.note if detail is None else f"{decision.note}; {detail}"
    is_late = decision.action == "fire_late"
    if outcome is Outcome.FAILED and task.retry is not None:
        policy = task.retry
        if max_attempts is not None and policy.max_attempts > max_attempts:
            policy = policy.model_copy(update={"max_attempts": max(1, max_attempts)})
        first_due = due_ms if task.first_due_at is None else to_ms(task.first_due_at)
        delay = retry_delay_ms(policy, task.attempt, first_due, finished_ms)
        if delay is not None:
            detail = f"attempt {task.attempt} of {policy.max_attempts} failed, next in {delay} ms: {detail}"
            return FireRecord(
                task_id=task.task_id,
                outcome=Outcome.RETRY,
                fired_ms=started_ms,
                finished_ms=finished_ms,
                drift_ms=late,
                drift_corrected_ms=corrected,
                detail=detail[:DETAIL_LIMIT],
                late=is_late,
                retry_delay_ms=delay,
                first_due_ms=first_due,
            )
        detail = f"attempt {task.attempt} of {policy.max_attempts} failed, no retry left: {detail}"
    return FireRecord(
        task_id=task.task_id,
        outcome=outcome,
        fired_ms=started_ms,
        finished_ms=finished_ms,
        drift_ms=late,
        drift_corrected_ms=corrected,
        detail=None if detail is None else detail[:DETAIL_LIMIT],
        late=is_late,
    )
