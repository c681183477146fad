"""The executor's decisions as pure functions: misfire, the crash window of a taken-over task, outcomes."""

from __future__ import annotations

import pytest

from punctual.domain.decisions import LOST_EXECUTOR, decide_before_fire, decide_outcome
from punctual.domain.keys import from_ms
from punctual.domain.model import Outcome, Task
from punctual.domain.retry import RetryPolicy
from punctual.targets import LogAction

DUE = 1_900_000_000_000


def task(policy: str = "skip", grace_ms: int = 1_000, **fields: object) -> Task:
    return Task(
        task_id="t", due_at=from_ms(DUE), action=LogAction(), misfire_grace_ms=grace_ms, misfire_policy=policy, **fields
    )


@pytest.mark.parametrize(
    ("policy", "now", "taken_until", "action"),
    [
        ("skip", DUE, None, "fire"),
        ("skip", DUE + 1_000, None, "fire"),  # at the grace edge it still fires
        ("skip", DUE + 1_001, None, "miss"),  # one ms past it, the policy applies
        ("fire_late", DUE + 1_001, None, "fire_late"),
        # taken over from a dead executor: due at or before its last lease is the crash window
        ("skip", DUE + 10, DUE, "miss"),
        ("skip", DUE + 10, DUE + 5_000, "miss"),
        ("fire_late", DUE + 10, DUE, "fire_late"),
        # ... due after it: the dead executor cannot have fired it, so it fires as any other
        ("skip", DUE, DUE - 1, "fire"),
        ("skip", DUE + 1_001, DUE - 1, "miss"),  # (past its grace all the same)
    ],
)
def test_decide_before_fire(policy: str, now: int, taken_until: int | None, action: str) -> None:
    assert decide_before_fire(task(policy), DUE, now, taken_until).action == action


def test_the_crash_window_says_why_in_the_record() -> None:
    # Given a task taken over from an executor that may have fired it
    decision = decide_before_fire(task("skip"), DUE, DUE + 7, taken_over_until_ms=DUE + 100)
    # When the executor records it
    record = decide_outcome(task("skip"), DUE, DUE + 7, DUE + 8, decision=decision, error=None, offset_ms=None)
    # Then it is MISSED, not fired, and the detail names the lost executor
    assert record.outcome is Outcome.MISSED
    assert record.fired_ms is None
    assert record.detail is not None
    assert LOST_EXECUTOR in record.detail


def test_a_fire_late_refire_in_the_crash_window_is_flagged_late_with_its_reason() -> None:
    decision = decide_before_fire(task("fire_late"), DUE, DUE + 7, taken_over_until_ms=DUE)
    record = decide_outcome(task("fire_late"), DUE, DUE + 7, DUE + 8, decision=decision, error=None, offset_ms=1.5)
    assert record.outcome is Outcome.SUCCEEDED
    assert record.late
    assert record.detail is not None
    assert "fired again with the same idempotency key" in record.detail
    assert record.drift_ms == 7
    assert record.drift_corrected_ms == 8.5


def test_a_failure_with_attempts_left_is_a_retry_and_the_last_one_is_failed() -> None:
    retry = RetryPolicy(max_attempts=2)
    first = decide_outcome(
        task(retry=retry, attempt=1),
        DUE,
        DUE + 1,
        DUE + 5,
        decision=decide_before_fire(task(), DUE, DUE + 1),
        error="HTTP 500",
        offset_ms=None,
    )
    last = decide_outcome(
        task(retry=retry, attempt=2),
        DUE,
        DUE + 1,
        DUE + 5,
        decision=decide_before_fire(task(), DUE, DUE + 1),
        error="HTTP 500",
        offset_ms=None,
    )
    assert first.outcome is Outcome.RETRY
    assert first.retry_delay_ms is not None
    assert first.detail is not None
    assert first.detail.startswith("attempt 1 of 2 failed, next in")
    assert last.outcome is Outcome.FAILED
    assert last.retry_delay_ms is None
    assert last.detail == "attempt 2 of 2 failed, no retry left: HTTP 500"
