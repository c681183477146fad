"""What a schedule holds of its tenant's schedule quotas, and when a change passes them (punctual.domain.quota)."""

from __future__ import annotations

import pytest

from punctual.domain.quota import RATE_UNITS, ScheduleLimits, ScheduleUsage, change_of, usage_of
from punctual.domain.schedules import Schedule, ScheduleState
from punctual.errors import QuotaExceededError
from punctual.targets import LogAction


def schedule(expression: str = "rate(10 seconds)", state: ScheduleState = ScheduleState.ACTIVE) -> Schedule:
    return Schedule(schedule_id="acme/s", expression=expression, action=LogAction(), state=state)


@pytest.mark.parametrize(
    ("state", "held"),
    [
        (ScheduleState.ACTIVE, ScheduleUsage(1, RATE_UNITS // 10)),
        (ScheduleState.PAUSED, ScheduleUsage(1, 0)),
        (ScheduleState.ENDED, ScheduleUsage(1, 0)),
        (ScheduleState.DELETED, ScheduleUsage(0, 0)),
    ],
)
def test_a_schedule_holds_a_place_unless_deleted_and_its_rate_only_while_active(
    state: ScheduleState, held: ScheduleUsage
) -> None:
    assert usage_of(schedule(state=state)) == held


def test_a_change_is_what_the_new_state_holds_minus_the_old() -> None:
    assert change_of(None, schedule()) == ScheduleUsage(1, RATE_UNITS // 10)
    assert change_of(schedule(), schedule(state=ScheduleState.PAUSED)) == ScheduleUsage(0, -(RATE_UNITS // 10))
    assert change_of(schedule(), schedule("rate(5 seconds)")) == ScheduleUsage(0, RATE_UNITS // 10)
    assert change_of(schedule(), schedule(state=ScheduleState.DELETED)) == ScheduleUsage(-1, -(RATE_UNITS // 10))


def test_a_change_passes_a_quota_only_by_adding_to_it() -> None:
    # Given a tenant allowed 2 schedules and 1 fire a second, holding 2 schedules firing 1 a second
    limits = ScheduleLimits(schedules=2, rate_per_s=1.0)
    full = ScheduleUsage(2, RATE_UNITS)
    # Then one more schedule passes "schedules", a faster one "schedule_rate_per_s"
    assert limits.passed(full, ScheduleUsage(1, 0)) == "schedules"
    assert limits.passed(full, ScheduleUsage(0, 1_000_000)) == "schedule_rate_per_s"
    # And giving back never passes, even over the quota (a quota lowered below what is held)
    assert limits.passed(ScheduleUsage(5, 3 * RATE_UNITS), ScheduleUsage(-1, -RATE_UNITS)) is None
    # And rates that add up to the quota exactly fit, whatever their rounding (three schedules every 3 s)
    third = usage_of(schedule("rate(3 seconds)"))
    assert limits.passed(ScheduleUsage(0, 2 * third.rate), ScheduleUsage(0, third.rate)) is None
    # And the error names the quota and the field
    with pytest.raises(QuotaExceededError) as refused:
        limits.check(full, ScheduleUsage(0, 1_000_000))
    assert refused.value.quota == "schedule_rate_per_s"
    assert refused.value.field == "expression"
