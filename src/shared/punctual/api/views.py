"""What the API takes and gives: its request and response bodies (the OpenAPI document's schemas).

Ids are tenant-free here (:mod:`punctual.domain.tenancy`): the API qualifies them with the caller's tenant and strips it
from what it answers. A view holds what a caller may see of a task; the executor's bookkeeping (leases, owners,
batches) stays inside.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from http import HTTPStatus
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue, WithJsonSchema

from punctual import targets  # noqa: F401 - registers every action kind before the union below is built
from punctual.domain.keys import from_ms
from punctual.domain.model import (
    OWN_TASK_NAME,
    SCHEDULE_NAME,
    TASK_NAME,
    Action,
    MisfirePolicy,
    Task,
    TaskStatus,
    action_models,
)
from punctual.domain.retry import RetryPolicy
from punctual.domain.schedules import DowntimePolicy, Schedule, ScheduleState
from punctual.domain.tenancy import unqualify
from punctual.scheduling.bulk import BATCH_MAX_BYTES, BATCH_MAX_TASKS

if TYPE_CHECKING:
    AnyAction = Action
else:  # one schema per action kind, told apart by "kind"
    AnyAction = Annotated[Union[tuple(action_models())], Field(discriminator="kind")]  # noqa: UP007

TaskName = Annotated[str, Field(pattern=rf"^{TASK_NAME}$", examples=["invoice-42"])]
ScheduleName = Annotated[str, Field(pattern=rf"^{SCHEDULE_NAME}$", examples=["daily-report"])]
MAX_PAGE = 1_000
MAX_TOKEN_CHARS = 300  # the longest task id a page token may name: longer is no token this API gave


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskIn(_In):
    """A task to schedule. ``task_id`` makes the call idempotent: the same id with the same content answers
    200 with the stored task, with other content 409; without one a random id is given."""

    task_id: str | None = Field(None, pattern=rf"^{OWN_TASK_NAME}$", examples=["invoice-42"])
    due_at: AwareDatetime = Field(examples=["2026-12-01T09:00:00.000Z"])
    action: AnyAction
    payload: JsonValue = None
    misfire_grace_ms: int | None = Field(None, ge=0, le=86_400_000, description="default 60000")
    misfire_policy: MisfirePolicy = "skip"
    retry: RetryPolicy | None = None


class TasksIn(_In):
    """Many tasks to schedule in one call: each as the body of ``POST /v1/tasks``, checked on its own (a bad one is
    its own result, the others go on)."""

    # Each item is read as JSON here and validated as a TaskIn by the API, one by one; the document says TaskIn
    tasks: list[Annotated[JsonValue, WithJsonSchema({"$ref": "#/components/schemas/TaskIn"})]] = Field(
        description=f"at most {BATCH_MAX_TASKS} tasks, and {BATCH_MAX_BYTES} bytes of JSON in all (else 413)",
        json_schema_extra={"maxItems": BATCH_MAX_TASKS},
    )


class RescheduleIn(_In):
    due_at: AwareDatetime


class TaskOut(BaseModel):
    """A task as its tenant sees it."""

    task_id: str
    due_at: datetime
    action: AnyAction
    payload: JsonValue = None
    misfire_grace_ms: int
    misfire_policy: MisfirePolicy
    retry: RetryPolicy | None = None
    status: TaskStatus
    occurrence: int
    attempt: int
    created_at: datetime | None = None
    fired_at: datetime | None = None
    finished_at: datetime | None = None
    drift_ms: float | None = None
    detail: str | None = None
    late: bool = False
    first_due_at: datetime | None = None
    schedule_id: str | None = None

    @classmethod
    def of(cls, task: Task, tenant: str) -> TaskOut:
        fields = task.model_dump(include=set(cls.model_fields) - {"task_id", "schedule_id", "action"})
        return cls(
            **fields,
            action=task.action,
            task_id=unqualify(tenant, task.task_id) or task.task_id,
            schedule_id=None if task.schedule_id is None else unqualify(tenant, task.schedule_id),
        )


UnreadableCount = Annotated[
    int,
    Field(ge=0, description="how many stored items the answer left out because they cannot be read (each is logged)"),
]


class TaskPage(BaseModel):
    """A page of tasks. ``next_token`` (absent on the last page) asks for the next one; a page may hold fewer
    than ``limit`` tasks, even none, and still not be the last. ``unreadable`` counts the items of the page that
    were left out because they cannot be read as tasks."""

    tasks: list[TaskOut]
    next_token: str | None = None
    unreadable: UnreadableCount = 0


class ScheduleIn(_In):
    """A recurring schedule: ``action`` with ``payload`` at every occurrence of ``expression`` (``at(...)``,
    ``rate(N unit)``, ``cron(...)`` of six fields or the common five), read in ``timezone``."""

    schedule_id: str = Field(pattern=rf"^{SCHEDULE_NAME}$", examples=["daily-report"])
    expression: str = Field(max_length=256, examples=["cron(0 9 ? * MON-FRI *)", "rate(5 minutes)"])
    timezone: str = Field("UTC", max_length=64, examples=["Europe/Paris"])
    start_at: AwareDatetime | None = None
    end_at: AwareDatetime | None = None
    max_occurrences: int | None = Field(None, ge=1, le=10_000_000)
    action: AnyAction
    payload: JsonValue = None
    misfire_grace_ms: int | None = Field(None, ge=0, le=86_400_000, description="default 60000")
    misfire_policy: MisfirePolicy = "skip"
    retry: RetryPolicy | None = None
    downtime_policy: DowntimePolicy = "skip"


class ScheduleUpdate(_In):
    """What to change of a schedule (the fields given; the others stay)."""

    expression: str | None = Field(None, max_length=256)
    timezone: str | None = Field(None, max_length=64)
    start_at: AwareDatetime | None = None
    end_at: AwareDatetime | None = None
    max_occurrences: int | None = Field(None, ge=1, le=10_000_000)
    action: AnyAction | None = None
    payload: JsonValue = None
    misfire_grace_ms: int | None = Field(None, ge=0, le=86_400_000)
    misfire_policy: MisfirePolicy | None = None
    retry: RetryPolicy | None = None
    downtime_policy: DowntimePolicy | None = None


class ScheduleOut(BaseModel):
    """A schedule as its tenant sees it, with where its chain stands."""

    schedule_id: str
    expression: str
    timezone: str
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_occurrences: int | None = None
    action: AnyAction
    payload: JsonValue = None
    misfire_grace_ms: int
    misfire_policy: MisfirePolicy
    retry: RetryPolicy | None = None
    downtime_policy: DowntimePolicy
    state: ScheduleState
    version: int
    next_due_at: datetime | None = None
    created_count: int
    skipped_count: int
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def of(cls, schedule: Schedule, tenant: str) -> ScheduleOut:
        fields = schedule.model_dump(include=set(cls.model_fields) - {"schedule_id", "action", "next_due_at"})
        return cls(
            **fields,
            action=schedule.action,
            schedule_id=unqualify(tenant, schedule.schedule_id) or schedule.schedule_id,
            next_due_at=None if schedule.next_due_ms is None else from_ms(schedule.next_due_ms),
        )


class ScheduleList(BaseModel):
    """The tenant's schedules; ``unreadable`` counts the items left out because they cannot be read as schedules."""

    schedules: list[ScheduleOut]
    unreadable: UnreadableCount = 0


class History(BaseModel):
    """A schedule's occurrences, oldest first; ``unreadable`` counts those left out because they cannot be read."""

    occurrences: list[TaskOut]
    unreadable: UnreadableCount = 0


class FieldProblem(BaseModel):
    field: str | None = None
    message: str


class Problem(BaseModel):
    """An error, as RFC 9457 problem details: ``field`` names the input that was wrong, when one was; ``quota`` the
    tenant's quota a call would have passed (429, type ``/problems/quota``)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    field: str | None = None
    errors: list[FieldProblem] | None = None
    quota: str | None = None


class TaskResult(BaseModel):
    """What became of one task of a batch: ``outcome`` ``created``, ``exists`` (an equal task was already stored
    under its id: nothing written), ``conflict`` (its id holds another task), ``invalid``, ``over_quota`` (a quota
    of the tenant passed: nothing stored) or ``error`` (not stored, may be sent again); ``status`` what
    ``POST /v1/tasks`` would have answered it; ``task`` as stored, or ``problem`` as that call's would be, its
    ``field`` named under ``tasks[i]``."""

    index: int
    task_id: str | None = None
    outcome: Literal["created", "exists", "conflict", "invalid", "over_quota", "error"]
    status: int
    task: TaskOut | None = None
    problem: Problem | None = None


class TaskResults(BaseModel):
    """A batch's outcomes: one per task, in the order given."""

    results: list[TaskResult]


def problem(  # noqa: PLR0913  a problem document's optional members, keyword-only past the field
    status: int,
    detail: str,
    field: str | None = None,
    *,
    errors: Sequence[Mapping[str, Any]] | None = None,
    kind: str | None = None,
    quota: str | None = None,
) -> Problem:
    """A problem; ``kind`` says which one (``/problems/<kind>``: invalid, not-found, conflict, state, forbidden,
    quota), so that a client need not read ``detail``; ``quota`` names the quota passed."""
    return Problem(
        type=f"/problems/{kind}" if kind else "about:blank",
        title=HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        field=field,
        errors=None if errors is None else [FieldProblem.model_validate(e) for e in errors],
        quota=quota,
    )


def field_of(loc: Sequence[Any], under: str | None = None) -> str | None:
    """The field a validation error's ``loc`` names (without a leading ``body``, ``query`` or ``path``), under
    ``under`` (``tasks[2]``: ``tasks[2].due_at``)."""
    parts = [str(p) for p in loc[1:]] if loc and loc[0] in ("body", "query", "path") else [str(p) for p in loc]
    field = ".".join(parts) or None
    if under is None:
        return field
    return under if field is None else f"{under}.{field}"


def validation_problem(errors: Iterable[Mapping[str, Any]], under: str | None = None) -> Problem:
    """The 422 problem of pydantic's ``errors``: each field named (under ``under``), the first in ``detail``."""
    found = [{"field": field_of(e.get("loc", ()), under), "message": str(e.get("msg", "invalid"))} for e in errors]
    first = found[0] if found else {"field": under, "message": "invalid request"}
    return problem(
        422, f"invalid {first['field'] or 'request'}: {first['message']}", first["field"], errors=found, kind="invalid"
    )


def encode_token(task_id: str) -> str:
    return base64.urlsafe_b64encode(task_id.encode()).decode().rstrip("=")


def decode_token(token: str) -> str:
    """The task id a page token names; ValueError for a token this API did not give."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise ValueError("not a page token this API gave") from exc
    if not raw or len(raw) > MAX_TOKEN_CHARS:
        raise ValueError("not a page token this API gave")
    return raw
