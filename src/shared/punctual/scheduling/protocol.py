"""What every Punctual client does: :class:`Scheduler`, which :class:`~punctual.scheduling.client.Client` (straight
to the table) and :class:`~punctual.scheduling.api_client.ApiClient` (through the REST API) implement with the same
arguments and answers, and :class:`ScheduleSpec`, a recurring schedule's definition as a client takes it."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from punctual.domain.model import DEFAULT_MISFIRE_POLICY, Action, Task, TaskStatus, Unreadable
from punctual.domain.retry import RetryPolicy
from punctual.domain.schedules import Schedule
from punctual.scheduling.bulk import ScheduleResult


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
    :meth:`create_schedule`, which hands its :class:`ScheduleSpec` to the client's :meth:`submit_schedule`.
    """

    # -- tasks -------------------------------------------------------------------------------------------------
    def schedule(
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
        """Store a task to fire ``action`` with ``payload`` at ``due_at``
        (:meth:`Client.schedule <punctual.scheduling.client.Client.schedule>`)."""
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
    def create_schedule(
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
            As for :meth:`Client.schedule <punctual.scheduling.client.Client.schedule>`, for each occurrence.
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
