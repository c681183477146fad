"""What every Punctual client does: :class:`Scheduler`, which :class:`~punctual.scheduling.client.Client` (straight
to the table) and :class:`~punctual.scheduling.api_client.ApiClient` (through the REST API) implement with the same
arguments and answers; :class:`TaskSpec` and :class:`ScheduleSpec`, a task and a recurring schedule as a client
takes them; and what the direct client checks of them before it writes one (the field a validation names, the
misfire grace, the target rules of the tenant, the payload's size)."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic import ValidationError

from punctual.config.settings import Settings
from punctual.domain.model import DEFAULT_MISFIRE_POLICY, Action, Task, TaskStatus, Unreadable, canonical_json
from punctual.domain.retry import RetryPolicy
from punctual.domain.schedules import Schedule
from punctual.errors import InvalidRequestError, InvalidTaskError
from punctual.scheduling.bulk import ScheduleResult
from punctual.targets import TargetRules, check_action


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskSpec:
    """A task to store: ``action`` with ``payload`` at ``due_at`` (:meth:`Scheduler.schedule` states each field),
    as the caller asked for it, before any check. The direct client builds a
    :class:`~punctual.domain.model.Task` of it; the API client sends it as a request body."""

    due_at: datetime
    action: Action | dict[str, Any]
    payload: Any = None
    task_id: str | None = None
    misfire_grace: timedelta | int | None = None
    misfire_policy: str = DEFAULT_MISFIRE_POLICY
    retry: RetryPolicy | dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleSpec:
    """A recurring schedule to store: ``action`` with ``payload`` at every occurrence of ``expression``
    (:meth:`Scheduler.create_schedule` states each field)."""

    schedule_id: str
    expression: str
    action: Action | dict[str, Any]
    payload: Any = None
    timezone: str = "UTC"
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_occurrences: int | None = None
    misfire_grace: timedelta | int | None = None
    misfire_policy: str = DEFAULT_MISFIRE_POLICY
    retry: RetryPolicy | dict[str, Any] | None = None
    downtime_policy: str = "skip"


class Scheduler(Protocol):
    """Schedule, inspect and change tasks and recurring schedules, whichever way the client reaches Punctual.

    A client implements it by subclassing it (mypy then checks each method against this one); it inherits
    :meth:`schedule` and :meth:`create_schedule`, which hand their :class:`TaskSpec` and :class:`ScheduleSpec` to
    the client's :meth:`submit_task` and :meth:`submit_schedule`: a client writes only how it submits.
    """

    # -- tasks -------------------------------------------------------------------------------------------------
    def schedule(  # noqa: PLR0913  the public signature: a keyword per field of the spec it fills
        self,
        due_at: datetime,
        action: Action | dict[str, Any],
        payload: Any = None,
        *,
        task_id: str | None = None,
        misfire_grace: timedelta | int | None = None,
        misfire_policy: str = DEFAULT_MISFIRE_POLICY,
        retry: RetryPolicy | dict[str, Any] | None = None,
    ) -> Task:
        """Store a task to fire ``action`` with ``payload`` at ``due_at`` (timezone-aware, ms precision).

        Parameters
        ----------
        due_at:
            When to fire (timezone-aware; kept to the millisecond).
        action, payload:
            What to run, and the JSON value it is given.
        task_id:
            Your id for the task (idempotency key of the schedule call); a random one if omitted.
        misfire_grace:
            How late the task may still start (default ``Settings.default_misfire_grace_ms``, 60 s).
        misfire_policy:
            What happens past the grace: ``"skip"`` (the default) records the task MISSED without firing it;
            ``"fire_late"`` fires it anyway, as soon as it can, and flags the record ``late``.
        retry:
            How a failed action is tried again (:class:`~punctual.domain.retry.RetryPolicy`, or a dict of its fields);
            None (the default) means no retry. After the last attempt the task is FAILED and, if a dead-letter
            queue is configured, a message goes to it.

        Idempotent on a client-supplied ``task_id``: scheduling the same id with the same content returns the
        existing task; with different content it raises :class:`~punctual.errors.TaskConflictError`. The
        arguments become a :class:`TaskSpec`, which the client's :meth:`submit_task` stores.

        Raises
        ------
        InvalidTaskError
            Bad input (``.field`` names it); nothing is stored.
        TaskConflictError
            The id exists with other content.
        """
        return self.submit_task(
            TaskSpec(
                due_at=due_at,
                action=action,
                payload=payload,
                task_id=task_id,
                misfire_grace=misfire_grace,
                misfire_policy=misfire_policy,
                retry=retry,
            )
        )

    def submit_task(self, spec: TaskSpec) -> Task:
        """Store the task ``spec`` defines (what :meth:`schedule` does with its arguments)."""
        ...

    def schedule_many(
        self,
        tasks: Iterable[Mapping[str, Any]],
        *,
        threads: int = 16,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> builtins.list[ScheduleResult]:
        """Schedule many tasks at once, a result per task in order
        (:meth:`Client.schedule_many <punctual.scheduling.client.Client.schedule_many>`)."""
        ...

    def get(self, task_id: str) -> Task | None:
        """The task as stored now, or None."""
        ...

    def list(
        self,
        status: TaskStatus | str | builtins.list[TaskStatus | str] | None = None,
        due_from: datetime | None = None,
        due_to: datetime | None = None,
        limit: int | None = None,
        unreadable: Unreadable | None = None,
    ) -> builtins.list[Task]:
        """Tasks with the given status(es) and ``due_from <= due_at < due_to``, in due order; the items that cannot
        be read are left out, and counted in ``unreadable``."""
        ...

    def cancel(self, task_id: str) -> Task:
        """Cancel a task not armed yet."""
        ...

    def reschedule(self, task_id: str, due_at: datetime) -> Task:
        """Move a task not armed yet to ``due_at``."""
        ...

    def run_now(self, task_id: str) -> Task:
        """Fire a task not armed yet now."""
        ...

    def redrive(self, task_id: str) -> Task:
        """Send a FAILED task again: PENDING, due now."""
        ...

    # -- recurring schedules -----------------------------------------------------------------------------------
    def create_schedule(  # noqa: PLR0913  the public signature: a keyword per field of the spec it fills
        self,
        schedule_id: str,
        expression: str,
        action: Action | dict[str, Any],
        payload: Any = None,
        *,
        timezone: str = "UTC",
        start_at: datetime | None = None,
        end_at: datetime | None = None,
        max_occurrences: int | None = None,
        misfire_grace: timedelta | int | None = None,
        misfire_policy: str = DEFAULT_MISFIRE_POLICY,
        retry: RetryPolicy | dict[str, Any] | None = None,
        downtime_policy: str = "skip",
    ) -> Schedule:
        """Store a recurring schedule: ``action`` with ``payload`` at every occurrence of ``expression``.

        Parameters
        ----------
        schedule_id:
            Your id for it (idempotent: the same id with the same definition returns the stored schedule).
        expression:
            ``at(2026-12-24T18:00:00)``, ``rate(5 minutes)`` / ``rate(500 milliseconds)``, or
            ``cron(0 9 ? * MON-FRI *)`` (EventBridge's six fields) / ``0 9 * * 1-5`` (the common five): see
            :mod:`punctual.domain.recurrence`, which also states the DST rules.
        timezone:
            IANA zone the expression's wall times are read in (``Europe/Paris``); a rate ignores it.
        start_at, end_at, max_occurrences:
            Occurrences fall at or after ``start_at`` (a rate counts from it; default now), at or before
            ``end_at``, and at most ``max_occurrences`` of them are made.
        misfire_grace, misfire_policy, retry:
            As for :meth:`schedule`, for each occurrence.
        downtime_policy:
            Occurrences whose grace passed while nothing ran (the stack stopped, a region outage): ``"skip"``
            them (default), or ``"fire_latest"``: fire the latest of them once, flagged late.

        Each occurrence is a task with id ``<schedule_id>@<UTC instant>`` (its idempotency key), listed by
        :meth:`schedule_history`.

        Raises
        ------
        InvalidScheduleError
            Bad input (``.field`` names it), or an expression with no occurrence to come; nothing is stored.
        QuotaExceededError
            The schedule would pass one of its tenant's quotas; nothing is stored.
        ScheduleConflictError
            The id exists with another definition, or belonged to a schedule that was deleted.

        Examples
        --------
        >>> client.create_schedule("report", "cron(0 9 ? * MON-FRI *)", {"kind": "log", "message": "report"},
        ...                        timezone="Europe/Paris")              # doctest: +SKIP
        """
        return self.submit_schedule(
            ScheduleSpec(
                schedule_id=schedule_id,
                expression=expression,
                action=action,
                payload=payload,
                timezone=timezone,
                start_at=start_at,
                end_at=end_at,
                max_occurrences=max_occurrences,
                misfire_grace=misfire_grace,
                misfire_policy=misfire_policy,
                retry=retry,
                downtime_policy=downtime_policy,
            )
        )

    def submit_schedule(self, spec: ScheduleSpec) -> Schedule:
        """Store the recurring schedule ``spec`` defines (what :meth:`create_schedule` does with its arguments)."""
        ...

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        """The schedule as stored now, or None."""
        ...

    def list_schedules(self, *, unreadable: Unreadable | None = None) -> builtins.list[Schedule]:
        """Every schedule, by id; one that cannot be read is left out, and counted in ``unreadable``."""
        ...

    def schedule_history(
        self, schedule_id: str, limit: int | None = None, unreadable: Unreadable | None = None
    ) -> builtins.list[Task]:
        """The schedule's occurrences, oldest first (the last ``limit``)."""
        ...

    def pause_schedule(self, schedule_id: str) -> Schedule:
        """Stop making occurrences, and cancel those not armed yet."""
        ...

    def resume_schedule(self, schedule_id: str) -> Schedule:
        """Make occurrences again from now on."""
        ...

    def update_schedule(self, schedule_id: str, **changes: Any) -> Schedule:
        """Change what a schedule runs or when."""
        ...

    def delete_schedule(self, schedule_id: str) -> Schedule:
        """No more occurrences; those not armed yet cancelled."""
        ...

    def run_schedule_now(self, schedule_id: str) -> Task:
        """One extra occurrence of an ACTIVE or PAUSED schedule, due now (its next ones unchanged)."""
        ...


# -- what a client checks of a spec before it writes a task or a schedule of it ------------------------------------
def field_error(exc: ValidationError, invalid: type[InvalidRequestError]) -> InvalidRequestError:
    """The first field error of a task's or a schedule's validation, as an ``invalid`` error naming the field."""
    first = exc.errors()[0]
    return invalid(".".join(str(p) for p in first["loc"]) or None, first["msg"])


def grace_ms(value: timedelta | int | None, default: int, invalid: type[InvalidRequestError] = InvalidTaskError) -> int:
    """A misfire grace given as a timedelta or whole milliseconds, in ms (``default`` when None)."""
    if value is None:
        return default
    if isinstance(value, timedelta):
        return value // timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid("misfire_grace_ms", "give a timedelta or whole milliseconds")
    return value


def check_target(action: Action, rules: TargetRules, invalid: type[InvalidRequestError]) -> None:
    """The target rules for ``action``, a refusal raised as ``invalid`` (of a task, or of a schedule)."""
    try:
        check_action(action, rules)
    except InvalidRequestError as exc:
        raise invalid(exc.field, exc.reason) from None


def check_payload(payload: Any, invalid: type[InvalidRequestError], settings: Settings) -> None:
    """Refuse (``invalid``) a payload that is no valid Unicode or, as JSON, over ``settings.max_payload_bytes``."""
    try:
        size = len(canonical_json(payload).encode())
    except UnicodeEncodeError as exc:
        raise invalid("payload", f"not valid Unicode ({exc.reason})") from exc
    if size > settings.max_payload_bytes:
        raise invalid("payload", f"{size} bytes as JSON, more than the limit of {settings.max_payload_bytes}")
