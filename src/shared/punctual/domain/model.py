"""The task model: what to run (an action), when (``due_at``), with what (a JSON payload).

Actions are a tagged union keyed on ``kind``: each kind is a plugin (:mod:`punctual.targets`) whose model
registers here through :func:`register_action_model`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, Literal, get_args

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializeAsAny,
    field_validator,
)

from punctual.domain.keys import from_ms, to_ms
from punctual.domain.retry import RetryPolicy
from punctual.domain.tenancy import TENANT, check_tenant_part, is_tenant, split

# A task's own id, or a schedule's occurrence: "<schedule id>@<yyyymmddThhmmss.fffZ>" (punctual.domain.schedules);
# either may start with its tenant, "<tenant>/" (punctual.domain.tenancy). The *_NAME patterns are the tenant-free ids
# (what the API takes).
OWN_TASK_NAME = r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}"
SCHEDULE_NAME = r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,99}"
SCHEDULE_ID = rf"(?:{TENANT}/)?{SCHEDULE_NAME}"
OCCURRENCE_INSTANT = r"\d{8}T\d{6}\.\d{3}"  # the instant in an occurrence's id, before its "Z"
TASK_NAME = rf"(?:{OWN_TASK_NAME}|{SCHEDULE_NAME}@{OCCURRENCE_INSTANT}Z)"
TASK_ID_PATTERN = rf"^(?:{TENANT}/)?{TASK_NAME}$"
_TASK_ID_RE = re.compile(TASK_ID_PATTERN)
_HEADER_NAME_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_OCCURRENCE_RE = re.compile(rf"^(?P<schedule>{SCHEDULE_ID})@(?P<at>{OCCURRENCE_INSTANT})Z$")


class TaskStatus(StrEnum):
    """Where a task is in its life. PENDING and ARMED are active (the task is in the due index); the rest are final."""

    PENDING = "PENDING"
    ARMED = "ARMED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    MISSED = "MISSED"
    CANCELLED = "CANCELLED"

    @property
    def is_active(self) -> bool:
        return self in ACTIVE_STATUSES


ACTIVE_STATUSES = frozenset({TaskStatus.PENDING, TaskStatus.ARMED})


class Outcome(StrEnum):
    """What a fire (or an executor's decision not to fire) comes to, as its :class:`FireRecord` says: the action
    SUCCEEDED or FAILED; the task was MISSED (not fired: past its grace, or in a dead executor's crash window);
    or the action failed and its retry policy allows another try: RETRY."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    MISSED = "MISSED"
    RETRY = "RETRY"


_STATUS_AFTER = {
    Outcome.SUCCEEDED: TaskStatus.SUCCEEDED,
    Outcome.FAILED: TaskStatus.FAILED,
    Outcome.MISSED: TaskStatus.MISSED,
    Outcome.RETRY: TaskStatus.PENDING,
}


def status_after(outcome: Outcome) -> TaskStatus:
    """The status a task takes when ``outcome`` is recorded: a retry puts it back to PENDING (due at its next
    try); every other outcome is final, under its own name.

    Examples
    --------
    >>> status_after(Outcome.RETRY), status_after(Outcome.MISSED)
    (<TaskStatus.PENDING: 'PENDING'>, <TaskStatus.MISSED: 'MISSED'>)
    """
    return _STATUS_AFTER[outcome]


class Action(BaseModel):
    """Base of every action kind. Subclasses set ``kind`` to a ``Literal`` and register themselves."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: str

    # Fields a kind added after tasks of it were first stored: left out of the content hash while they hold
    # their default, so that a task stored before they existed keeps its hash.
    late_fields: ClassVar[frozenset[str]] = frozenset()

    @property
    def timeout_seconds(self) -> float:
        """Longest the action may run; kinds with a network call override it with a field."""
        return float(getattr(self, "timeout_s", 0.0))

    def stored_fields(self) -> dict[str, Any]:
        """The action as stored and hashed: its JSON fields, the late ones left out at their default (see
        :attr:`late_fields`)."""
        fields = self.model_dump(mode="json")
        for name in self.late_fields:
            if getattr(self, name) == type(self).model_fields[name].get_default(call_default_factory=True):
                fields.pop(name, None)
        return fields


_ACTION_MODELS: dict[str, type[Action]] = {}


def register_action_model(model: type[Action]) -> type[Action]:
    """Make a new action kind known to the task model (usable as a class decorator)."""
    kind = model.model_fields["kind"].default
    if not isinstance(kind, str) or not kind:
        raise TypeError("an action model needs a string default for 'kind'")
    _ACTION_MODELS[kind] = model
    return model


def known_action_kinds() -> list[str]:
    return sorted(_ACTION_MODELS)


def action_models() -> list[type[Action]]:
    """The model of every registered action kind, by kind."""
    return [_ACTION_MODELS[kind] for kind in known_action_kinds()]


def parse_action(value: Any) -> Action:
    """Validate an action given as a model or a mapping with a ``kind``."""
    if isinstance(value, Action):
        return value
    if not isinstance(value, dict):
        raise ValueError("action must be an object with a 'kind'")
    kind = value.get("kind")
    model = _ACTION_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ValueError(f"unknown action kind {kind!r}; known kinds: {', '.join(known_action_kinds())}")
    return model.model_validate(value)


def canonical_json(value: Any) -> str:
    """Compact, key-sorted JSON: the stored form of payloads and actions, and what hashes are taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


MisfirePolicy = Literal["skip", "fire_late"]
"""What happens to an occurrence that can only start later than its misfire grace: ``"skip"`` (the default)
records it MISSED without firing; ``"fire_late"`` fires it anyway and flags the record ``late``."""

DEFAULT_MISFIRE_POLICY: MisfirePolicy = "skip"
MISFIRE_POLICIES: frozenset[str] = frozenset(get_args(MisfirePolicy))


def truncate_to_ms(moment: datetime) -> datetime:
    return from_ms(to_ms(moment))


def utc_to_ms(value: datetime | None) -> datetime | None:
    """An instant field as stored: truncated to the millisecond, in UTC (a field error outside years 1-9999)."""
    if value is None:
        return None
    try:
        return truncate_to_ms(value).astimezone(UTC)
    except OverflowError as exc:  # pydantic turns ValueError, not OverflowError, into a field error
        raise ValueError("must fall within the years 1 to 9999 in UTC") from exc


class ActionAndPayload(BaseModel):
    """The validators of what a task runs (``action``, ``payload``), shared by :class:`Task` and the recurring
    schedule that makes tasks (:class:`punctual.domain.schedules.Schedule`); each declares the fields itself."""

    @field_validator("action", mode="before", check_fields=False)
    @classmethod
    def _parse_action(cls, value: Any) -> Action:
        return parse_action(value)

    @field_validator("payload", check_fields=False)
    @classmethod
    def _finite_json(cls, value: Any) -> Any:
        """NaN and infinities are not JSON: refuse them rather than store a payload no target can parse."""
        try:
            json.dumps(value, allow_nan=False)
        except ValueError as exc:
            raise ValueError("payload must be JSON: NaN and Infinity are not allowed") from exc
        return value


class Task(ActionAndPayload):
    """One task: an action to start at ``due_at``, with its life-cycle fields.

    Times are timezone-aware UTC datetimes with millisecond precision; naive datetimes are rejected.

    ``misfire_policy`` says what happens when the task can only start later than ``misfire_grace_ms`` after
    ``due_at``: ``"skip"`` (the default) records it MISSED; ``"fire_late"`` fires it and sets ``late``.
    ``retry`` (None: no retry) says how often and when a failed action is tried again (:mod:`punctual.domain.retry`);
    a retry moves ``due_at`` to the next try and keeps the original in ``first_due_at``.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    task_id: str = Field(pattern=TASK_ID_PATTERN, strict=True)
    due_at: AwareDatetime
    action: SerializeAsAny[Action]
    payload: JsonValue = None
    misfire_grace_ms: int = Field(60_000, ge=0, le=86_400_000, strict=True)
    misfire_policy: MisfirePolicy = DEFAULT_MISFIRE_POLICY
    occurrence: int = Field(0, ge=0)
    status: TaskStatus = TaskStatus.PENDING
    attempt: int = Field(0, ge=0)
    lease_until: AwareDatetime | None = None
    batch_id: str | None = None
    armed_by: str | None = None
    created_at: AwareDatetime | None = None
    fired_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    drift_ms: float | None = Field(None, allow_inf_nan=False)
    drift_corrected_ms: float | None = Field(None, allow_inf_nan=False)
    detail: str | None = None
    late: bool = False
    retry: RetryPolicy | None = None
    first_due_at: AwareDatetime | None = None  # the occurrence's due before a retry moved ``due_at``
    schedule_id: str | None = None  # set on a recurring schedule's occurrence (punctual.domain.schedules)
    schedule_version: int | None = None  # the version of the schedule that created it

    @field_validator("due_at", "lease_until", "created_at", "fired_at", "finished_at", "first_due_at")
    @classmethod
    def _utc_ms(cls, value: datetime | None) -> datetime | None:
        return utc_to_ms(value)

    @field_validator("task_id")
    @classmethod
    def _tenant_name(cls, value: str) -> str:
        return check_tenant_part(value)

    @property
    def due_ms(self) -> int:
        return to_ms(self.due_at)

    @property
    def idempotency_key(self) -> str:
        """What a target uses to drop a duplicate fire: task id and occurrence."""
        return f"{self.task_id}:{self.occurrence}"

    def content_hash(self) -> str:
        """Hash of what the client asked for (when, what, with what): equal hashes mean the same task."""
        content = {
            "due_ms": self.due_ms,
            "action": self.action.stored_fields(),
            "payload": self.payload,
            "misfire_grace_ms": self.misfire_grace_ms,
        }
        # Fields added later enter the hash only when they differ from their default, so that the hash of a
        # task stored before they existed (which reads back with the default) is unchanged.
        if self.misfire_policy != DEFAULT_MISFIRE_POLICY:
            content["misfire_policy"] = self.misfire_policy
        if self.retry is not None:
            content["retry"] = self.retry.model_dump(mode="json")
        if self.schedule_id is not None:
            content["schedule"] = [self.schedule_id, self.schedule_version]
        return hashlib.sha256(canonical_json(content).encode()).hexdigest()


def is_valid_task_id(task_id: str) -> bool:
    return _TASK_ID_RE.fullmatch(task_id) is not None and is_tenant(split(task_id)[0] or "0")


# -- what the store hands the services, and what they hand back ------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """A task a look for due work found that an executor may arm: PENDING, or ARMED by an executor found dead
    (``owner``), or held under a lease that ended. The due index may lag: the arm's condition decides."""

    task_id: str
    due_ms: int
    status: TaskStatus
    lease_until_ms: int | None
    misfire_grace_ms: int
    misfire_policy: str = DEFAULT_MISFIRE_POLICY
    owner: str | None = None  # the executor that armed it, when ARMED

    def lease_ended_at(self, now_ms: int) -> bool:
        """Whether a per-task lease ended before ``now_ms`` (at ``lease_until_ms`` it is still held; one
        millisecond later it is not)."""
        return self.lease_until_ms is not None and self.lease_until_ms < now_ms


@dataclass(frozen=True, kw_only=True, slots=True)
class ArmRequest:
    """What an executor asks the store to arm: the task as the dispatcher saw it (its due time must still
    match), and the task's armed lease (a backstop: past it the task is armable again whatever its owner).
    ``held``: the dispatcher found it ARMED by an executor it found dead, so the store tries the TAKEOVER
    first (an ARM of it would only fail) and the ARM only if that finds nothing to take.

    Not the batch's :class:`~punctual.domain.events.BatchTask` with one lease for the call: each task's lease
    outlives its own latest fire (its due time, or now if late, plus its own grace, plus the longest action),
    so two tasks of one arm call hold different leases. The wire record carries what the dispatcher found
    (grace, policy); this one what the store writes."""

    task_id: str
    due_ms: int
    lease_until_ms: int
    held: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Armed:
    """A task this executor now owns, as its dispatcher holds it until the fire. ``taken_over_until_ms`` is set
    when it was taken over from an executor found dead: that executor may have fired it if it was due at or
    before this instant (its last lease). ``due_ms`` is the task's, read once here: the dispatcher and the fire
    read it, never the task's ``due_at`` again."""

    task: Task
    taken_over_until_ms: int | None = None
    due_ms: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "due_ms", self.task.due_ms)  # frozen: set once, as the dataclass sets fields


@dataclass(frozen=True, kw_only=True, slots=True)
class DueScan:
    """What one look for due work found: the armable tasks due up to its end (overdue included), and how far
    back it looked (``watermark_ms``: before it, no active task was seen) over how many index reads.
    ``recovered`` counts the candidates taken from a dead executor or an ended lease; ``undecodable`` the
    items that were not tasks (recorded FAILED, or skipped); ``complete`` is False when time ran out first."""

    candidates: list[Candidate]
    watermark_ms: int
    buckets: int = 0
    queries: int = 0
    recovered: int = 0
    undecodable: int = 0
    complete: bool = True
    schedules: list[str] = field(default_factory=list)  # recurring schedules whose next occurrences are due to be made


@dataclass(kw_only=True, slots=True)
class Unreadable:
    """The items a listing left out because they could not be read (:class:`~punctual.errors.UndecodableItemError`):
    their keys where known, and how many. A caller that wants to know hands one to a listing, which adds to it;
    each item left out is also logged once, with its key, by whoever read it."""

    keys: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, key: str | None, count: int = 1) -> None:
        """Count ``count`` items left out (``key``: the one item's key, when known)."""
        if key is not None:
            self.keys.append(key)
        self.count += count


@dataclass(frozen=True, kw_only=True, slots=True)
class FireRecord:
    """What an executor writes after a fire (or after deciding not to fire): its :class:`Outcome`, which sets
    the task's status (:func:`status_after`), and what the fire measured."""

    task_id: str
    outcome: Outcome
    fired_ms: float | None
    finished_ms: int
    drift_ms: float | None
    drift_corrected_ms: float | None
    detail: str | None = None
    late: bool = False  # fired past its grace (misfire policy fire_late)
    # A RETRY: the delay the executor drew, and the instant of the next try (set when the record is written:
    # now + delay), with the occurrence's first due (kept for the retry policy's max age).
    retry_delay_ms: int | None = None
    retry_due_ms: int | None = None
    first_due_ms: int | None = None


# -- the ids of a schedule's occurrences ---------------------------------------------------------------------
def occurrence_id(schedule_id: str, due_ms: int) -> str:
    """The task id of a schedule's occurrence: ``<schedule id>@<UTC instant, yyyymmddThhmmss.fffZ>``. The ``@``
    never appears in the id of a task scheduled on its own, so no task can take an occurrence's place."""
    return f"{schedule_id}@{from_ms(due_ms).strftime('%Y%m%dT%H%M%S')}.{due_ms % 1000:03d}Z"


def split_occurrence_id(task_id: str) -> tuple[str, int] | None:
    """The schedule id and instant of an occurrence's task id, or None for a task of its own."""
    match = _OCCURRENCE_RE.fullmatch(task_id)
    if match is None:
        return None
    at = datetime.strptime(match.group("at"), "%Y%m%dT%H%M%S.%f").replace(tzinfo=UTC)
    return match.group("schedule"), to_ms(at)


def is_occurrence_id(task_id: str) -> bool:
    """Whether ``task_id`` has the form of an occurrence's (ids of tasks scheduled on their own never do)."""
    return "@" in task_id
