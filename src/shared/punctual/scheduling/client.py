"""The client helper: schedule, inspect, cancel and reschedule tasks (one conditional write each), many at once
(:mod:`punctual.scheduling.bulk`), and recurring schedules (:mod:`punctual.scheduling.schedule_client`)."""

from __future__ import annotations

import builtins
import contextlib
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from pydantic import ValidationError

from punctual.config.settings import Settings
from punctual.config.tenant_map import TenantMap
from punctual.domain.clock import Clock, SystemClock
from punctual.domain.decisions import misfire_decision
from punctual.domain.keys import from_ms, to_ms
from punctual.domain.model import DEFAULT_MISFIRE_POLICY, Action, Task, TaskStatus, Unreadable, is_occurrence_id
from punctual.domain.retry import RetryPolicy
from punctual.domain.schedules import Schedule, ScheduleState
from punctual.errors import (
    InvalidRequestError,
    InvalidTaskError,
    ScheduleNotFoundError,
    ScheduleStateError,
    TaskNotFoundError,
    TaskStateError,
)
from punctual.scheduling.bulk import ScheduleResult, schedule_each, schedule_one
from punctual.scheduling.protocol import (
    Scheduler,
    ScheduleSpec,
    TaskSpec,
    check_payload,
    check_target,
    field_error,
    grace_ms,
)
from punctual.scheduling.quotas import QuotaGuard, TenantAdmission, check_retry
from punctual.scheduling.redrive import Selection, redrive_tasks
from punctual.scheduling.schedule_client import ScheduleClient
from punctual.stores.ports import ClientPort, SchedulePort
from punctual.targets import TargetRules


class Client(Scheduler):
    """Schedule tasks for Punctual to fire at an exact instant.

    A :class:`~punctual.scheduling.protocol.Scheduler`. Recurring schedules are a
    :class:`~punctual.scheduling.schedule_client.ScheduleClient`'s over the same store, clock and rules (the
    ``*_schedule`` methods hand them to it); many tasks at once go through :mod:`punctual.scheduling.bulk`.

    This class works on the ports it is given; :class:`punctual.Client` (:class:`punctual.runtime.client.Client`)
    is the one on DynamoDB, built from settings, that users make.

    Parameters
    ----------
    settings:
        Shard count, limits and target rules.
    tasks, schedules:
        The store's ports for tasks and schedules (:class:`~punctual.stores.ports.ClientPort`,
        :class:`~punctual.stores.ports.SchedulePort`).
    clock:
        Where "now" comes from (for the horizon check and the index bucket of late writes).
    tenant_map:
        The tenants whose targets and quotas a tenant's task keeps to; defaults to the ``tenant_map`` setting's
        (the API hands in the map it read from Parameter Store).
    quota:
        The process's :class:`~punctual.scheduling.quotas.QuotaGuard` over ``tasks``, shared by the clients of one
        process so that their creates are admitted exactly together (the API's requests share one); a client of its
        own by default.

    Examples
    --------
    >>> from datetime import UTC, datetime, timedelta
    >>> from punctual import Client, HttpAction
    >>> client = Client()                                         # doctest: +SKIP
    >>> task = client.schedule(                                   # doctest: +SKIP
    ...     due_at=datetime.now(UTC) + timedelta(minutes=5),
    ...     action=HttpAction(url="https://example.com/hooks/publish"),
    ...     payload={"video": "v-123"},
    ...     task_id="publish-v-123",                              # idempotent on this id
    ... )
    >>> client.get("publish-v-123").status                       # doctest: +SKIP
    <TaskStatus.PENDING: 'PENDING'>
    >>> client.reschedule("publish-v-123", task.due_at + timedelta(minutes=1))  # doctest: +SKIP
    >>> client.cancel("publish-v-123")                           # doctest: +SKIP
    """

    def __init__(  # noqa: PLR0913  the ports and settings a service is given, the optional ones keyword-only
        self,
        settings: Settings,
        tasks: ClientPort,
        schedules: SchedulePort,
        *,
        clock: Clock | None = None,
        tenant_map: TenantMap | None = None,
        quota: QuotaGuard | None = None,
    ) -> None:
        self.settings = settings
        self._clock = clock or SystemClock()
        self._store = tasks
        self._rules = TargetRules.from_settings(self.settings, tenant_map)
        self._admit = TenantAdmission(quota or QuotaGuard(tasks), lambda task_id: self._rules.of(task_id).quotas)
        self._schedules = ScheduleClient(self.settings, tasks, schedules, self._clock, self._rules, self._admit)

    def now_ms(self) -> int:
        """Now, by the client's clock (epoch ms)."""
        return int(self._clock.wall_ms())

    def _check_due(self, task: Task, now_ms: int) -> None:
        horizon_ms = self.settings.max_horizon_days * 86_400_000
        if task.due_ms > now_ms + horizon_ms:
            raise InvalidTaskError("due_at", f"more than {self.settings.max_horizon_days} days ahead (the horizon)")
        # The executor's own rule: a task that could only start past its grace under "skip" would be MISSED (a
        # "fire_late" task due in the past is accepted: it fires at once, flagged late).
        if misfire_decision(now_ms - task.due_ms, task.misfire_grace_ms, task.misfire_policy) == "miss":
            raise InvalidTaskError(
                "due_at",
                f"{(now_ms - task.due_ms) / 1000:.3f} s in the past, beyond the misfire grace of "
                f"{task.misfire_grace_ms} ms: it could only be recorded MISSED",
            )
        if task.due_ms < now_ms - horizon_ms:  # fire_late too: a date that far back is a mistake, not a plan
            raise InvalidTaskError("due_at", f"more than {self.settings.max_horizon_days} days in the past")

    def build_task(  # noqa: PLR0913  schedule()'s arguments (a TaskSpec's fields), and when to check them
        self,
        due_at: datetime,
        action: Action | dict[str, Any],
        payload: Any = None,
        *,
        task_id: str | None = None,
        misfire_grace: timedelta | int | None = None,
        misfire_policy: str = DEFAULT_MISFIRE_POLICY,
        retry: RetryPolicy | dict[str, Any] | None = None,
        now_ms: int | None = None,
    ) -> Task:
        """Validate a task of :meth:`schedule`'s arguments without storing it (what :meth:`schedule` stores).
        Raises InvalidTaskError."""
        spec = TaskSpec(
            due_at=due_at,
            action=action,
            payload=payload,
            task_id=task_id,
            misfire_grace=misfire_grace,
            misfire_policy=misfire_policy,
            retry=retry,
        )
        return self.task_of(spec, self.now_ms() if now_ms is None else now_ms)

    def task_of(self, spec: TaskSpec, now_ms: int) -> Task:
        """The task ``spec`` defines, checked at ``now_ms`` as :meth:`schedule` checks it, not stored. Raises
        InvalidTaskError."""
        due_at, task_id = spec.due_at, spec.task_id
        if not isinstance(due_at, datetime):
            raise InvalidTaskError("due_at", "must be a datetime")
        if due_at.tzinfo is None or due_at.utcoffset() is None:
            raise InvalidTaskError("due_at", "naive datetime; give a timezone (e.g. UTC)")
        if isinstance(task_id, str) and is_occurrence_id(task_id):
            raise InvalidTaskError("task_id", f"{task_id!r}: '@' is kept for the occurrences of recurring schedules")
        try:
            task = Task(
                task_id=task_id if task_id is not None else uuid.uuid4().hex,
                due_at=due_at,
                action=spec.action,
                payload=spec.payload,
                misfire_grace_ms=grace_ms(spec.misfire_grace, self.settings.default_misfire_grace_ms),
                misfire_policy=spec.misfire_policy,
                retry=spec.retry,
            )
        except ValidationError as exc:
            raise field_error(exc, InvalidTaskError) from exc
        check_payload(task.payload, InvalidTaskError, self.settings)
        self._check_due(task, now_ms)
        rules = self._rules.of(task.task_id)  # the tenant's own targets, secrets and quotas
        check_target(task.action, rules, InvalidTaskError)
        check_retry(task.retry, rules.quotas)
        return task

    def create_built(self, task: Task, now_ms: int) -> tuple[Task, bool]:
        """Store a built task, if its tenant has room for one more active task."""
        with self._admit(task.task_id, 1):
            return self._store.create(task, now_ms)

    def submit_task(self, spec: TaskSpec) -> Task:
        """Store the task ``spec`` defines (:meth:`~punctual.scheduling.protocol.Scheduler.schedule`'s): checked as
        :meth:`build_task` checks it, then written if its tenant has room for one more active task."""
        now_ms = self.now_ms()
        stored, _created = self.create_built(self.task_of(spec, now_ms), now_ms)
        return stored

    def submit(self, task: Task) -> tuple[Task, bool]:
        """Store a task :meth:`build_task` made; returns the stored task and whether it was created now (False:
        an equal task was already stored). Raises as :meth:`schedule` does."""
        now_ms = self.now_ms()
        self._check_due(task, now_ms)  # it may have been built a while ago
        return self.create_built(task, now_ms)

    def schedule_many(
        self,
        tasks: Iterable[Mapping[str, Any]],
        *,
        threads: int = 16,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> list[ScheduleResult]:
        """Schedule many tasks at once: each a mapping of :meth:`schedule`'s arguments (``due_at``, ``action``,
        ``payload``, ``task_id``, ``misfire_grace``, ``misfire_policy``, ``retry``), written as parallel
        conditional writes. Returns one :class:`ScheduleResult` per task, in order: a bad task does not stop
        the others, and nothing is stored for it. Idempotent on ids, like :meth:`schedule`: sending the same
        list again reports ``"exists"`` for what was stored. ``on_progress(done, total)`` is called as writes
        complete (from worker threads).

        Examples
        --------
        >>> results = client.schedule_many(                          # doctest: +SKIP
        ...     {"due_at": nine_am, "action": HttpAction(url=hook), "payload": {"user": u}, "task_id": f"remind-{u}"}
        ...     for u in users)
        >>> [r for r in results if not r.ok]                         # doctest: +SKIP
        []
        """
        one = partial(schedule_one, self.now_ms, self.build_task, self.create_built)
        return schedule_each(tasks, one, threads, on_progress)

    def get(self, task_id: str) -> Task | None:
        """The task as stored now, or None if there is no such task."""
        return self._store.get(task_id)

    def list(
        self,
        status: TaskStatus | str | list[TaskStatus | str] | None = None,
        due_from: datetime | None = None,
        due_to: datetime | None = None,
        limit: int | None = None,
        unreadable: Unreadable | None = None,
    ) -> list[Task]:
        """Tasks with the given status(es) and ``due_from <= due_at < due_to``, in due order. An item that cannot be
        read as a task is left out, and counted in ``unreadable`` when one is given."""
        statuses = None
        if status is not None:
            raw = status if isinstance(status, builtins.list) else [status]
            try:
                statuses = [TaskStatus(s) for s in raw]
            except ValueError as exc:
                raise InvalidRequestError("status", str(exc)) from exc
        tasks = builtins.list(
            self._store.list_tasks(
                statuses,
                None if due_from is None else to_ms(due_from),
                None if due_to is None else to_ms(due_to),
                unreadable=unreadable,
            )
        )
        tasks.sort(key=lambda t: (t.due_at, t.task_id))
        return tasks if limit is None else tasks[:limit]

    def list_tenant_page(  # noqa: PLR0913, PLR0917  ClientPort.tenant_page's filters, in its order
        self,
        tenant: str,
        status: builtins.list[TaskStatus] | None = None,
        due_from: datetime | None = None,
        due_to: datetime | None = None,
        limit: int = 100,
        after: str | None = None,
        unreadable: Unreadable | None = None,
    ) -> tuple[builtins.list[Task], str | None]:
        """One page of ``tenant``'s tasks (see :meth:`~punctual.stores.ports.ClientPort.tenant_page`): the tasks,
        and the id the next page starts after (None: the last page); the items left out as unreadable are counted
        in ``unreadable``."""
        return self._store.tenant_page(
            tenant,
            status,
            None if due_from is None else to_ms(due_from),
            None if due_to is None else to_ms(due_to),
            limit,
            after,
            unreadable,
        )

    def cancel(self, task_id: str) -> Task:
        """Cancel a task that has not been armed for firing yet.

        Race-safe against a concurrent arm: either the cancel wins and the task never fires, or the task
        was already armed by its executor and this raises :class:`~punctual.errors.TaskStateError`.
        """
        self._readable(task_id)
        return self._store.cancel(task_id, self.now_ms())

    def reschedule(self, task_id: str, due_at: datetime) -> Task:
        """Move a task that has not been armed yet to ``due_at``. Race-safe like :meth:`cancel`."""
        now_ms = self.now_ms()
        current = self._store.get(task_id)
        if current is None:
            raise TaskNotFoundError(task_id)
        spec = TaskSpec(
            due_at=due_at,
            action=current.action,
            payload=current.payload,
            task_id=task_id,
            misfire_grace=current.misfire_grace_ms,
            misfire_policy=current.misfire_policy,
            retry=current.retry,
        )
        task = self.task_of(spec, now_ms)
        return self._store.reschedule(task_id, task.due_ms, now_ms)

    def _readable(self, task_id: str) -> None:
        """Raise UndecodableItemError before a change when the item under ``task_id`` is no readable task (one that
        names another tenant or schedule than its key): such an item is refused as it is, never changed."""
        self._store.get(task_id)

    def run_now(self, task_id: str) -> Task:
        """Fire a task that has not been armed yet now, instead of at its due time (a reschedule to now)."""
        return self.reschedule(task_id, from_ms(self.now_ms()))

    def redrive(self, task_id: str) -> Task:
        """Send a FAILED task again: PENDING, due now, attempt 0 (:func:`~punctual.scheduling.redrive.redrive_tasks`).
        Raises TaskNotFoundError, or TaskStateError (with the task) when it is not FAILED or another change came
        first; QuotaExceededError (``active_tasks``) when its tenant has no room for it, and it stays FAILED."""
        current = self._store.get(task_id)  # an unreadable item is refused here, never changed
        admission = self._admit(task_id, 1) if current is not None and current.status is TaskStatus.FAILED else None
        with admission or contextlib.nullcontext(0):
            report = redrive_tasks(self._store, Selection.of([task_id]), self.now_ms())
        for skipped in report.skipped:
            if skipped.task is None:
                raise TaskNotFoundError(task_id)
            raise TaskStateError(task_id, "redrive", f"it is {skipped.task.status}, not FAILED", task=skipped.task)
        redriven = self._store.get(task_id)
        if redriven is None:  # deleted since (its record expired)
            raise TaskNotFoundError(task_id)
        return redriven

    # -- recurring schedules: ScheduleClient's ------------------------------------------------------------------
    def submit_schedule(self, spec: ScheduleSpec) -> Schedule:
        """Store the recurring schedule ``spec`` defines (:meth:`ScheduleClient.create_schedule
        <punctual.scheduling.schedule_client.ScheduleClient.create_schedule>`)."""
        return self._schedules.create_schedule(spec)

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        """The schedule as stored now, or None."""
        return self._schedules.get_schedule(schedule_id)

    def list_schedules(
        self, id_prefix: str | None = None, unreadable: Unreadable | None = None
    ) -> builtins.list[Schedule]:
        """Every schedule (deleted ones included), or those whose id starts with ``id_prefix``, by id; one that
        cannot be read is left out, and counted in ``unreadable`` when one is given."""
        return self._schedules.list_schedules(id_prefix, unreadable)

    def schedule_history(
        self, schedule_id: str, limit: int | None = None, unreadable: Unreadable | None = None
    ) -> builtins.list[Task]:
        """The schedule's occurrences (each a task with its own outcome), oldest first; one that cannot be read is
        left out, and counted in ``unreadable`` when one is given."""
        return self._schedules.schedule_history(schedule_id, limit, unreadable)

    def pause_schedule(self, schedule_id: str) -> Schedule:
        """Stop making occurrences and cancel those not armed yet (:meth:`ScheduleClient.pause_schedule
        <punctual.scheduling.schedule_client.ScheduleClient.pause_schedule>`)."""
        return self._schedules.pause_schedule(schedule_id)

    def resume_schedule(self, schedule_id: str) -> Schedule:
        """Make occurrences again from now on (those that fell while paused are not made)."""
        return self._schedules.resume_schedule(schedule_id)

    def update_schedule(self, schedule_id: str, **changes: Any) -> Schedule:
        """Change what a schedule runs or when (:meth:`ScheduleClient.update_schedule
        <punctual.scheduling.schedule_client.ScheduleClient.update_schedule>`)."""
        return self._schedules.update_schedule(schedule_id, **changes)

    def delete_schedule(self, schedule_id: str) -> Schedule:
        """Delete a schedule: no more occurrences, those not armed yet cancelled (:meth:`ScheduleClient.delete_schedule
        <punctual.scheduling.schedule_client.ScheduleClient.delete_schedule>`)."""
        return self._schedules.delete_schedule(schedule_id)

    def run_schedule_now(self, schedule_id: str) -> Task:
        """One extra occurrence of an ACTIVE or PAUSED schedule, due now (:meth:`occur_now`)."""
        task, _created = self.occur_now(schedule_id)
        return task

    def occur_now(self, schedule_id: str) -> tuple[Task, bool]:
        """One extra occurrence of the schedule, due now; its next occurrences are unchanged. Returns it and whether
        it was created now (False: one of that instant was already stored). ScheduleNotFoundError for a schedule
        that is not there or DELETED, ScheduleStateError for one that is neither ACTIVE nor PAUSED."""
        schedule = self.get_schedule(schedule_id)
        if schedule is None or schedule.state is ScheduleState.DELETED:
            raise ScheduleNotFoundError(schedule_id)
        if schedule.state is not ScheduleState.ACTIVE and schedule.state is not ScheduleState.PAUSED:
            raise ScheduleStateError(schedule_id, "run", f"it is {schedule.state}")
        return self.submit(schedule.occurrence(self.now_ms()))
