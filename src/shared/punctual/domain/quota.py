"""What a tenant's schedules hold of its schedule quotas, and when a change passes them: the rules both stores
keep when they write a schedule and its tenant's usage in one atomic step (:mod:`punctual.stores.ports`).

A schedule not deleted holds one of the tenant's ``schedules``; an ACTIVE one also holds its fire rate (a
``rate(...)`` its own, a ``cron(...)`` one a minute, its finest step; an ``at(...)`` none) of the tenant's
``schedule_rate_per_s``. Rates are kept as whole billionths of a fire a second, so that a store adds them exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from punctual.domain.recurrence import At, Rate, parse_expression
from punctual.domain.schedules import Schedule, ScheduleState
from punctual.errors import QuotaExceededError

CRON_STEP_S = 60.0  # a cron expression's finest step: a minute
RATE_UNITS = 1_000_000_000  # a fire a second, in the units a usage counts rates in
RATE_SLACK = 1_000  # units a total may pass the quota by: the rounding of each rate to a unit, a millionth of a fire


def schedule_rate_per_s(expression: str) -> float:
    """The most fires per second ``expression`` makes: a rate's own, a minute's for a cron, none for an ``at``."""
    parsed = parse_expression(expression)
    if isinstance(parsed, Rate):
        return 1000.0 / parsed.every_ms
    if isinstance(parsed, At):
        return 0.0
    return 1.0 / CRON_STEP_S


def rate_units(rate_per_s: float) -> int:
    """``rate_per_s`` in whole units (:data:`RATE_UNITS` to a fire a second)."""
    return round(rate_per_s * RATE_UNITS)


@dataclass(frozen=True, slots=True)
class ScheduleUsage:
    """What schedules hold of their tenant's quotas: how many are not deleted, and the fire rate of the ACTIVE
    ones (in :data:`RATE_UNITS`). Also the change a write makes to it (a difference may be negative)."""

    schedules: int = 0
    rate: int = 0

    def __add__(self, other: ScheduleUsage) -> ScheduleUsage:
        return ScheduleUsage(self.schedules + other.schedules, self.rate + other.rate)

    def __sub__(self, other: ScheduleUsage) -> ScheduleUsage:
        return ScheduleUsage(self.schedules - other.schedules, self.rate - other.rate)

    @property
    def zero(self) -> bool:
        return self.schedules == 0 and self.rate == 0

    @property
    def rate_per_s(self) -> float:
        return self.rate / RATE_UNITS


def usage_of(schedule: Schedule | None) -> ScheduleUsage:
    """What ``schedule`` holds (nothing when None or DELETED; no rate unless ACTIVE)."""
    if schedule is None or schedule.state is ScheduleState.DELETED:
        return ScheduleUsage()
    if schedule.state is not ScheduleState.ACTIVE:
        return ScheduleUsage(schedules=1)
    return ScheduleUsage(schedules=1, rate=rate_units(schedule_rate_per_s(schedule.expression)))


def held_by(schedules: Iterable[Schedule]) -> ScheduleUsage:
    """What ``schedules`` hold together."""
    return sum((usage_of(s) for s in schedules), ScheduleUsage())


def change_of(before: Schedule | None, after: Schedule | None) -> ScheduleUsage:
    """What writing ``after`` over ``before`` adds to its tenant's usage."""
    return usage_of(after) - usage_of(before)


@dataclass(frozen=True, slots=True)
class ScheduleLimits:
    """A tenant's schedule quotas, as a store checks them: ``schedules`` not deleted and ``rate_per_s`` for the ACTIVE
    ones together."""

    schedules: int
    rate_per_s: float

    @property
    def rate(self) -> int:
        """The most rate units the tenant's ACTIVE schedules may hold (the quota, plus the rounding slack)."""
        return rate_units(self.rate_per_s) + RATE_SLACK

    def passed(self, usage: ScheduleUsage, change: ScheduleUsage) -> str | None:
        """The quota ``change`` takes ``usage`` past (``schedules`` or ``schedule_rate_per_s``), or None. A change that
        adds nothing to a quota never passes it, however far over it the tenant already is."""
        after = usage + change
        if change.schedules > 0 and after.schedules > self.schedules:
            return "schedules"
        if change.rate > 0 and after.rate > self.rate:
            return "schedule_rate_per_s"
        return None

    def refusal(self, quota: str, usage: ScheduleUsage, change: ScheduleUsage) -> QuotaExceededError:
        """The error of a write whose ``change`` takes ``usage`` past ``quota``."""
        if quota == "schedules":
            return QuotaExceededError("schedules", self.schedules, f"{usage.schedules} schedules and one more")
        return QuotaExceededError(
            "schedule_rate_per_s",
            self.rate_per_s,
            f"active schedules firing {usage.rate_per_s:g} times a second and this one adding {change.rate_per_s:g}",
            field="expression",
        )

    def check(self, usage: ScheduleUsage, change: ScheduleUsage) -> None:
        """Raise :meth:`refusal` when ``change`` takes ``usage`` past a quota."""
        quota = self.passed(usage, change)
        if quota is not None:
            raise self.refusal(quota, usage, change)
