"""Recurring schedules: the model, and the pure decisions of the chain (which occurrences to create next).

A schedule is a definition (an expression of :mod:`punctual.domain.recurrence` in a time zone, and the action, payload
and policies every occurrence gets) plus a **cursor**: ``next_due_ms``, the first occurrence not yet created.
Each occurrence is an ordinary one-off task whose id is the schedule id and the occurrence's instant
(:func:`occurrence_id`), so it fires, retries, misfires, is redriven and listed like any task, and keeps its own
outcome. Occurrences are created ahead, up to ``now + ahead``, by one conditional transaction that also moves
the cursor (the store's ``advance_schedule``): the chain never forks (two creators of the same occurrences race
on the cursor, and an occurrence's id is its instant) and never breaks (the schedule stays in the due index until
it ends, so whoever looks for due work next creates the next occurrences, whatever became of the current one).

After downtime (nobody created occurrences while their instants passed, beyond the misfire grace) the
schedule's ``downtime_policy`` decides: ``"skip"`` creates none of them; ``"fire_latest"`` creates the latest
one only, to fire at once, flagged late. Never a storm of catch-up fires.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    ConfigDict,
    Field,
    JsonValue,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from punctual.domain.keys import from_ms, to_ms
from punctual.domain.model import (
    DEFAULT_MISFIRE_POLICY,
    SCHEDULE_ID,
    Action,
    ActionAndPayload,
    MisfirePolicy,
    Task,
    occurrence_id,
    utc_to_ms,
)
from punctual.domain.recurrence import At, Expression, occurrences_after, parse_expression, wall_to_ms, zone
from punctual.domain.retry import RetryPolicy
from punctual.domain.tenancy import check_tenant_part

SCHEDULE_ID_PATTERN = rf"^{SCHEDULE_ID}$"
MAX_CHUNK = 98  # occurrences made in one transaction with the cursor and the tenant's usage (DynamoDB takes 100)
TRANSACTION_BYTES = 3_500_000  # what a chunk's items may add up to (DynamoDB takes 4 MB a transaction)
MAX_DOWNTIME_WALK = 100_000  # occurrences missed during a downtime that a resume counts, one by one
ITEM_OVERHEAD_BYTES = 2_048  # an occurrence's item beyond its action and payload (ids, times, status, ...)
DowntimePolicy = Literal["skip", "fire_latest"]


class ScheduleState(StrEnum):
    """ACTIVE: occurrences are being created. PAUSED: none are (resume goes on from then). ENDED: the last one
    was created (end instant, maximum count, or an ``at`` that ran). DELETED: gone, its history kept."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    ENDED = "ENDED"
    DELETED = "DELETED"


class Schedule(ActionAndPayload):
    """A recurring schedule: what every occurrence runs, when occurrences fall, and where the chain stands.

    ``expression`` is ``at(...)``, ``rate(N unit)`` or ``cron(...)`` (see :mod:`punctual.domain.recurrence`), read in
    ``timezone`` (IANA). Occurrences fall at or after ``start_at`` (a rate counts from it; default: when the
    schedule was created), at or before ``end_at``, ``max_occurrences`` at most. ``action``, ``payload``,
    ``misfire_grace_ms``, ``misfire_policy`` and ``retry`` are given to each occurrence as a task.
    """

    model_config = ConfigDict(extra="forbid")

    schedule_id: Annotated[str, AfterValidator(check_tenant_part)] = Field(pattern=SCHEDULE_ID_PATTERN, strict=True)
    expression: str = Field(max_length=256)
    timezone: str = "UTC"
    start_at: AwareDatetime | None = None
    end_at: AwareDatetime | None = None
    max_occurrences: int | None = Field(None, ge=1, le=10_000_000)
    action: SerializeAsAny[Action]
    payload: JsonValue = None
    misfire_grace_ms: int = Field(60_000, ge=0, le=86_400_000, strict=True)
    misfire_policy: MisfirePolicy = DEFAULT_MISFIRE_POLICY
    retry: RetryPolicy | None = None
    downtime_policy: DowntimePolicy = "skip"
    # where the chain stands (written by the store)
    state: ScheduleState = ScheduleState.ACTIVE
    version: int = Field(1, ge=1)
    next_due_ms: int | None = None  # the first occurrence not created yet; None once ENDED
    created_count: int = Field(0, ge=0)
    skipped_count: int = Field(0, ge=0)
    cleanup: bool = False  # a change of it may have left older versions' occurrences PENDING (being cancelled)
    created_at: AwareDatetime | None = None
    updated_at: AwareDatetime | None = None

    @field_validator("expression")
    @classmethod
    def _parses(cls, value: str) -> str:
        parse_expression(value)  # ExpressionError is a ValueError: pydantic reports it on the field
        return value.strip()

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        zone(value)
        return value

    @field_validator("start_at", "end_at", "created_at", "updated_at")
    @classmethod
    def _utc_ms(cls, value: datetime | None) -> datetime | None:
        return utc_to_ms(value)

    @model_validator(mode="after")
    def _ordered(self) -> Schedule:
        if self.start_at is not None and self.end_at is not None and self.end_at < self.start_at:
            raise ValueError("end_at is before start_at")
        parsed = self.parsed
        if isinstance(parsed, At):
            try:
                wall_to_ms(parsed.local, zone(self.timezone))
            except OverflowError:
                raise ValueError(f"{self.expression} in {self.timezone} is past the year 9999 in UTC") from None
        return self

    @property
    def parsed(self) -> Expression:
        return parse_expression(self.expression)

    @property
    def anchor_ms(self) -> int:
        """Where a rate counts from: the start, else the creation."""
        start = self.start_at or self.created_at
        if start is None:
            raise ValueError("a schedule needs start_at or created_at to count a rate from")
        return to_ms(start)

    def definition(self) -> dict[str, Any]:
        """What the user asked for (compared for idempotent creation)."""
        return self.model_dump(mode="json", include=set(DEFINITION_FIELDS))

    def occurrence(self, due_ms: int, *, late: bool = False) -> Task:
        """The task of the occurrence at ``due_ms`` (``late``: a downtime catch-up, fired at once and flagged)."""
        return Task(
            task_id=occurrence_id(self.schedule_id, due_ms),
            due_at=from_ms(due_ms),
            action=self.action,
            payload=self.payload,
            misfire_grace_ms=self.misfire_grace_ms,
            misfire_policy="fire_late" if late else self.misfire_policy,
            retry=self.retry,
            schedule_id=self.schedule_id,
            schedule_version=self.version,
        )


DEFINITION_FIELDS = frozenset(
    {
        "schedule_id",
        "expression",
        "timezone",
        "start_at",
        "end_at",
        "max_occurrences",
        "action",
        "payload",
        "misfire_grace_ms",
        "misfire_policy",
        "retry",
        "downtime_policy",
    }
)


@dataclass(frozen=True, slots=True)
class Advance:
    """The next step of a chain: create ``occurrences`` (instants, increasing; ``late_ms`` among them is a downtime
    catch-up) and move the cursor to ``next_due_ms`` (None: the schedule ends), having skipped ``skipped``."""

    occurrences: list[int]
    next_due_ms: int | None
    skipped: int = 0
    late_ms: int | None = None


@dataclass(frozen=True, slots=True)
class AdvanceResult:
    """What a store's ``advance_schedule`` did. ``done``: the occurrences were created and the cursor moved.
    Otherwise ``blocked`` names occurrences whose id another task holds (an older version's, not cancelled), or,
    if empty, the schedule changed meanwhile (read it again)."""

    done: bool
    blocked: list[str] = field(default_factory=list)


def first_due_ms(schedule: Schedule, after_ms: int) -> int | None:
    """The schedule's first occurrence strictly after ``after_ms`` within its start and end, or None."""
    return next(instants_after(schedule, after_ms), None)


def instants_after(schedule: Schedule, after_ms: int) -> Iterator[int]:
    """The schedule's instants strictly after ``after_ms``, within its start and end (the count is not applied)."""
    start_ms = to_ms(schedule.start_at) if schedule.start_at else None
    end_ms = to_ms(schedule.end_at) if schedule.end_at else None
    after = after_ms if start_ms is None else max(after_ms, start_ms - 1)
    for instant in occurrences_after(schedule.parsed, zone(schedule.timezone), after, schedule.anchor_ms):
        if end_ms is not None and instant > end_ms:
            return
        yield instant


def chunk_size(schedule: Schedule) -> int:
    """How many occurrences one transaction may create: 98, fewer when the action and payload are large (the
    whole transaction must stay under DynamoDB's 4 MB)."""
    item = len(schedule.model_dump_json(include={"action", "payload"}).encode()) + ITEM_OVERHEAD_BYTES
    return max(1, min(MAX_CHUNK, TRANSACTION_BYTES // item))


def plan_advance(schedule: Schedule, now_ms: int, until_ms: int, limit: int = MAX_CHUNK) -> Advance | None:
    """What to create next from the cursor: the occurrences due up to ``until_ms`` (at most ``limit``, and no
    more than ``max_occurrences`` in all), after applying the downtime policy to those already past their grace
    at ``now_ms``. None when there is nothing to do yet (the cursor is beyond ``until_ms``) or the schedule is not
    ACTIVE."""
    cursor = schedule.next_due_ms
    if schedule.state is not ScheduleState.ACTIVE or cursor is None or cursor > until_ms:
        return None
    limit = min(limit, chunk_size(schedule))
    left = None if schedule.max_occurrences is None else schedule.max_occurrences - schedule.created_count
    missed_before = now_ms - schedule.misfire_grace_ms  # an occurrence due before this could only be MISSED
    skipped = 0
    late: int | None = None
    if cursor < missed_before:
        cursor, skipped, late = _after_downtime(schedule, cursor, missed_before)
    occurrences: list[int] = [] if late is None else [late]
    next_due: int | None = None
    for instant in instants_after(schedule, cursor - 1) if cursor is not None else ():
        if instant > until_ms or len(occurrences) >= limit or (left is not None and len(occurrences) >= left):
            next_due = instant
            break
        occurrences.append(instant)
    if left is not None and len(occurrences) >= left:
        occurrences, next_due = occurrences[:left], None
    return Advance(occurrences=occurrences, next_due_ms=next_due, skipped=skipped, late_ms=late)


def _after_downtime(schedule: Schedule, cursor: int, missed_before: int) -> tuple[int | None, int, int | None]:
    """From a cursor past its grace: the first occurrence still on time (None: the schedule ended meanwhile), how
    many were missed, and the latest missed one if the policy fires it. A downtime of more than 100,000
    occurrences is not walked: the count stops there and the latest missed one is not fired."""
    missed = 0
    latest: int | None = None
    for instant in instants_after(schedule, cursor - 1):
        if instant >= missed_before:
            resume: int | None = instant
            break
        missed += 1
        latest = instant
        if missed >= MAX_DOWNTIME_WALK:
            resume, latest = first_due_ms(schedule, missed_before - 1), None
            break
    else:
        resume = None
    if schedule.downtime_policy == "fire_latest" and latest is not None:
        return resume, missed - 1, latest
    return resume, missed, None
