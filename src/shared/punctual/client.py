"""The client helper: schedule, inspect, cancel and reschedule tasks (one conditional write each)."""

from __future__ import annotations

import builtins
import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import ValidationError

from . import chain
from .actions import TargetRules, check_action
from .clock import Clock, SystemClock
from .decisions import misfire_decision
from .errors import (
    InvalidRequestError,
    InvalidScheduleError,
    InvalidTaskError,
    QuotaExceededError,
    ScheduleNotFoundError,
    ScheduleStateError,
    TaskConflictError,
    TaskNotFoundError,
    TaskStateError,
)
from .keys import from_ms, to_ms
from .model import DEFAULT_MISFIRE_POLICY, Action, Task, TaskStatus, canonical_json
from .quotas import QuotaGuard, check_retry
from .redrive import Selection, redrive_tasks
from .retry import RetryPolicy
from .schedules import (
    DEFINITION_FIELDS,
    Schedule,
    ScheduleState,
    first_due_ms,
    is_occurrence_id,
    plan_advance,
)
from .settings import Settings
from .store import Store
from .tenancy import split

_MISSING = object()
SCHEDULE_FIELDS = frozenset({"due_at", "action", "payload", "task_id", "misfire_grace", "misfire_policy", "retry"})


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    """What :meth:`Client.schedule_many` did with one task, in the order given.

    ``outcome`` is ``"created"``, ``"exists"`` (the same id with equal content was already stored: nothing
    written), ``"invalid"`` (bad input: nothing stored; ``field`` names it), ``"conflict"`` (the id exists with
    other content) or ``"error"`` (the write failed, e.g. throttled past its retries: safe to send again).
    """

    index: int
    task_id: str | None
    outcome: Literal["created", "exists", "invalid", "conflict", "error"]
    task: Task | None = None
    error: str | None = None
    field: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in ("created", "exists")


def _field_error(exc: ValidationError, invalid: type[InvalidRequestError]) -> InvalidRequestError:
    """The first field error of a task's or a schedule's validation, as an ``invalid`` error naming the field."""
    first = exc.errors()[0]
    return invalid(".".join(str(p) for p in first["loc"]) or None, first["msg"])


def _grace_ms(
    value: timedelta | int | None, default: int, invalid: type[InvalidRequestError] = InvalidTaskError
) -> int:
    if value is None:
        return default
    if isinstance(value, timedelta):
        return value // timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid("misfire_grace_ms", "give a timedelta or whole milliseconds")
    return value


def _check_action(action: Action, rules: TargetRules, invalid: type[InvalidRequestError]) -> None:
    """The target rules for ``action``, a refusal raised as ``invalid`` (of a task, or of a schedule)."""
    try:
        check_action(action, rules)
    except InvalidRequestError as exc:
        raise invalid(exc.field, exc.reason) from None


class Client:
    """Schedule tasks for Punctual to fire at an exact instant.

    Parameters
    ----------
    settings:
        Table name, endpoint, shard count and limits; defaults to ``Settings.from_env()``.
    dynamodb:
        A boto3 DynamoDB client to use (for example one bound to DynamoDB Local or moto).
    store:
        The task store to use instead (any :class:`~punctual.store.Store`); ``dynamodb`` is then unused.
    clock:
        Where "now" comes from (for the horizon check and the index bucket of late writes).

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

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        dynamodb: Any = None,
        clock: Clock | None = None,
        store: Store | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()
        self._clock = clock or SystemClock()
        if store is None:
            from .aws import build_store  # here: `import punctual` loads neither boto3 nor the DynamoDB adapter

            store = build_store(self.settings, dynamodb)
        self._store = store
        self._rules = TargetRules.from_settings(self.settings)
        self._quota = QuotaGuard(store)

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

    def build_task(
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
        """Validate a task without storing it (what :meth:`schedule` stores). Raises InvalidTaskError."""
        import uuid

        now_ms = self.now_ms() if now_ms is None else now_ms
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
                action=action,
                payload=payload,
                misfire_grace_ms=_grace_ms(misfire_grace, self.settings.default_misfire_grace_ms),
                misfire_policy=misfire_policy,
                retry=retry,
            )
        except ValidationError as exc:
            raise _field_error(exc, InvalidTaskError) from exc
        self._check_payload(task.payload, InvalidTaskError)
        self._check_due(task, now_ms)
        rules = self._rules.of(task.task_id)  # the tenant's own targets, secrets and quotas
        _check_action(task.action, rules, InvalidTaskError)
        check_retry(task.retry, rules.quotas)
        return task

    def _create(self, task: Task, now_ms: int) -> tuple[Task, bool]:
        """Store a built task, if its tenant has room for one more active task."""
        quotas = self._rules.of(task.task_id).quotas
        tenant = split(task.task_id)[0]
        if quotas is None or tenant is None:
            return self._store.create(task, now_ms)
        with self._quota.admitting(tenant, quotas, 1):
            return self._store.create(task, now_ms)

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
            How a failed action is tried again (:class:`~punctual.retry.RetryPolicy`, or a dict of its fields);
            None (the default) means no retry. After the last attempt the task is FAILED and, if a dead-letter
            queue is configured, a message goes to it.

        Idempotent on a client-supplied ``task_id``: scheduling the same id with the same content returns the
        existing task; with different content it raises :class:`~punctual.errors.TaskConflictError`.

        Raises
        ------
        InvalidTaskError
            Bad input (``.field`` names it); nothing is stored.
        TaskConflictError
            The id exists with other content.
        """
        now_ms = self.now_ms()
        task = self.build_task(
            due_at,
            action,
            payload,
            task_id=task_id,
            misfire_grace=misfire_grace,
            misfire_policy=misfire_policy,
            retry=retry,
            now_ms=now_ms,
        )
        stored, _created = self._create(task, now_ms)
        return stored

    def submit(self, task: Task) -> tuple[Task, bool]:
        """Store a task :meth:`build_task` made; returns the stored task and whether it was created now (False:
        an equal task was already stored). Raises as :meth:`schedule` does."""
        now_ms = self.now_ms()
        self._check_due(task, now_ms)  # it may have been built a while ago
        return self._create(task, now_ms)

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
        return schedule_each(tasks, self._schedule_one, threads, on_progress)

    def _schedule_one(self, index: int, spec: Mapping[str, Any]) -> ScheduleResult:
        task_id = _task_id_of(spec)
        problem = spec_problem(spec)
        if problem is not None:
            return ScheduleResult(index, task_id, "invalid", error=problem)
        now_ms = self.now_ms()
        try:
            task = self.build_task(
                spec["due_at"],
                spec["action"],
                spec.get("payload"),
                task_id=spec.get("task_id"),
                misfire_grace=spec.get("misfire_grace"),
                misfire_policy=spec.get("misfire_policy", DEFAULT_MISFIRE_POLICY),
                retry=spec.get("retry"),
                now_ms=now_ms,
            )
        except InvalidRequestError as exc:  # the task's, or a quota passed: nothing stored, the field named
            return ScheduleResult(index, task_id, "invalid", error=str(exc), field=exc.field)
        try:
            stored, created = self._create(task, now_ms)
        except QuotaExceededError as exc:
            return ScheduleResult(index, task.task_id, "invalid", error=str(exc), field=exc.field)
        except TaskConflictError as exc:
            return ScheduleResult(index, task.task_id, "conflict", task=exc.existing, error=str(exc))
        return ScheduleResult(index, task.task_id, "created" if created else "exists", task=stored)

    def to_item(self, task: Task, now_ms: int | None = None) -> dict[str, Any]:
        """The DynamoDB item of ``task`` (from :meth:`build_task`), for writing with plain boto3::

            client.put_item(TableName=table, Item=punctual_client.to_item(task),
                            ConditionExpression="attribute_not_exists(task_id)")

        The item is what :meth:`schedule` writes (its format is documented in :mod:`punctual.dynamodb.codec`),
        with its due-index key and fast-path flag computed for ``now_ms`` (now by default): write it soon."""
        from .dynamodb.store import DynamoTaskStore

        now = self.now_ms() if now_ms is None else now_ms
        store = (
            self._store
            if isinstance(self._store, DynamoTaskStore)
            else DynamoTaskStore.from_settings(None, self.settings)
        )
        return store.item_of(task, now)

    def get(self, task_id: str) -> Task | None:
        """The task as stored now, or None if there is no such task."""
        return self._store.get(task_id)

    def list(
        self,
        status: TaskStatus | str | list[TaskStatus | str] | None = None,
        due_from: datetime | None = None,
        due_to: datetime | None = None,
        limit: int | None = None,
    ) -> list[Task]:
        """Tasks with the given status(es) and ``due_from <= due_at < due_to``, in due order."""
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
            )
        )
        tasks.sort(key=lambda t: (t.due_at, t.task_id))
        return tasks if limit is None else tasks[:limit]

    def list_tenant_page(
        self,
        tenant: str,
        status: builtins.list[TaskStatus] | None = None,
        due_from: datetime | None = None,
        due_to: datetime | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> tuple[builtins.list[Task], str | None]:
        """One page of ``tenant``'s tasks (see :meth:`TaskStore.tenant_page <punctual.store.TaskStore.tenant_page>`):
        the tasks, and the id the next page starts after (None: the last page)."""
        return self._store.tenant_page(
            tenant,
            status,
            None if due_from is None else to_ms(due_from),
            None if due_to is None else to_ms(due_to),
            limit,
            after,
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
        task = self.build_task(
            due_at,
            current.action,
            current.payload,
            task_id=task_id,
            misfire_grace=current.misfire_grace_ms,
            misfire_policy=current.misfire_policy,
            retry=current.retry,
            now_ms=now_ms,
        )
        return self._store.reschedule(task_id, task.due_ms, now_ms)

    def _readable(self, task_id: str) -> None:
        """Raise UndecodableItemError before a change when the item under ``task_id`` is no readable task (one that
        names another tenant or schedule than its key): such an item is refused as it is, never changed."""
        self._store.get(task_id)

    def run_now(self, task_id: str) -> Task:
        """Fire a task that has not been armed yet now, instead of at its due time (a reschedule to now)."""
        return self.reschedule(task_id, from_ms(self.now_ms()))

    def redrive(self, task_id: str) -> Task:
        """Send a FAILED task again: PENDING, due now, attempt 0 (:func:`~punctual.redrive.redrive_tasks`). Raises
        TaskNotFoundError, or TaskStateError (with the task) when it is not FAILED or another change came first."""
        self._readable(task_id)
        report = redrive_tasks(self._store, Selection.of([task_id]), self.now_ms())
        for skipped in report.skipped:
            if skipped.task is None:
                raise TaskNotFoundError(task_id)
            raise TaskStateError(task_id, "redrive", f"it is {skipped.task.status}, not FAILED", task=skipped.task)
        redriven = self._store.get(task_id)
        if redriven is None:  # deleted since (its record expired)
            raise TaskNotFoundError(task_id)
        return redriven

    # -- recurring schedules -----------------------------------------------------------------------------------
    def _check_payload(self, payload: Any, invalid: type[InvalidRequestError]) -> None:
        try:
            size = len(canonical_json(payload).encode())
        except UnicodeEncodeError as exc:
            raise invalid("payload", f"not valid Unicode ({exc.reason})") from exc
        if size > self.settings.max_payload_bytes:
            raise invalid("payload", f"{size} bytes as JSON, more than the limit of {self.settings.max_payload_bytes}")

    def _valid_schedule(self, fields: dict[str, Any]) -> Schedule:
        try:
            schedule = Schedule.model_validate(fields)
        except ValidationError as exc:
            raise _field_error(exc, InvalidScheduleError) from exc
        self._check_payload(schedule.payload, InvalidScheduleError)
        rules = self._rules.of(schedule.schedule_id)
        _check_action(schedule.action, rules, InvalidScheduleError)
        check_retry(schedule.retry, rules.quotas)
        return schedule

    def _admit_schedule(self, schedule: Schedule) -> None:
        """Room among its tenant's quotas for ``schedule`` as it will be stored."""
        with self._admitting_schedule(schedule):
            pass

    @contextlib.contextmanager
    def _admitting_schedule(self, schedule: Schedule, occurrences: int = 0) -> Iterator[None]:
        """Room among its tenant's quotas for ``schedule`` as it will be stored, and for its first ``occurrences``
        while the ``with`` block creates them."""
        tenant = split(schedule.schedule_id)[0]
        quotas = self._rules.of(schedule.schedule_id).quotas
        if tenant is None or quotas is None:
            yield
            return
        self._quota.admit_schedule(tenant, quotas, schedule)
        with self._quota.admitting(tenant, quotas, occurrences):
            yield

    def _until_ms(self, now_ms: int) -> int:
        """How far ahead a schedule's occurrences are made: a poll's window and the time to the next poll."""
        return now_ms + self.settings.lead_ms + self.settings.schedule_ahead_ms

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
            :mod:`punctual.recurrence`, which also states the DST rules.
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
        now_ms = self.now_ms()
        schedule = self._valid_schedule(
            {
                "schedule_id": schedule_id,
                "expression": expression,
                "timezone": timezone,
                "start_at": start_at,
                "end_at": end_at,
                "max_occurrences": max_occurrences,
                "action": action,
                "payload": payload,
                "misfire_grace_ms": _grace_ms(
                    misfire_grace, self.settings.default_misfire_grace_ms, InvalidScheduleError
                ),
                "misfire_policy": misfire_policy,
                "retry": retry,
                "downtime_policy": downtime_policy,
                "created_at": from_ms(now_ms),
            }
        )
        first = first_due_ms(schedule, now_ms)
        if first is None:
            raise InvalidScheduleError(
                "expression", f"{expression!r} has no occurrence after now" + (" and before end_at" if end_at else "")
            )
        schedule = schedule.model_copy(update={"next_due_ms": first})
        step = plan_advance(schedule, now_ms, self._until_ms(now_ms))
        occurrences = [] if step is None else step.occurrences
        to_store = schedule.model_copy(
            update={
                "next_due_ms": first if step is None else step.next_due_ms,
                "state": ScheduleState.ENDED if step is not None and step.next_due_ms is None else ScheduleState.ACTIVE,
                "created_count": len(occurrences),
            }
        )
        existing = self._store.get_schedule(schedule_id)
        admission: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if existing is None or existing.definition() != to_store.definition():  # an equal one is answered as is
            admission = self._admitting_schedule(to_store, len(occurrences))
        with admission:
            stored, created = self._store.create_schedule(
                to_store, [schedule.occurrence(ms) for ms in occurrences], now_ms
            )
        if created:
            chain.extend(self._store, schedule_id, now_ms, self._until_ms(now_ms))
        return self._store.get_schedule(schedule_id) or stored

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        """The schedule as stored now, or None."""
        return self._store.get_schedule(schedule_id)

    def list_schedules(self, id_prefix: str | None = None) -> builtins.list[Schedule]:
        """Every schedule (deleted ones included, with their state), or those whose id starts with
        ``id_prefix``, by id."""
        return sorted(self._store.list_schedules(id_prefix), key=lambda s: s.schedule_id)

    def schedule_history(self, schedule_id: str, limit: int | None = None) -> builtins.list[Task]:
        """The schedule's occurrences (each a task with its own outcome), oldest first."""
        ids = self._store.schedule_occurrence_ids(schedule_id)
        tasks = self._store.get_many(ids[-limit:] if limit else ids)
        return sorted(tasks.values(), key=lambda t: t.task_id)

    def _schedule_or_raise(self, schedule_id: str) -> Schedule:
        schedule = self._store.get_schedule(schedule_id)
        if schedule is None or schedule.state is ScheduleState.DELETED:
            raise ScheduleNotFoundError(schedule_id)
        return schedule

    def pause_schedule(self, schedule_id: str) -> Schedule:
        """Stop making occurrences and cancel those made and not armed yet (an armed one still fires: its
        executor owns it). Pausing a paused schedule changes nothing."""
        now_ms = self.now_ms()
        schedule = self._schedule_or_raise(schedule_id)
        if schedule.state is ScheduleState.PAUSED and not schedule.cleanup:
            return schedule
        if schedule.state is not ScheduleState.ACTIVE and schedule.state is not ScheduleState.PAUSED:
            raise ScheduleStateError(schedule_id, "pause", f"it is {schedule.state}")
        changed = self._store.change_schedule(schedule, {"state": ScheduleState.PAUSED}, now_ms, cleanup=True)
        chain.cleanup(self._store, changed, now_ms, schedule, self._until_ms(now_ms))
        return self._schedule_or_raise(schedule_id)

    def resume_schedule(self, schedule_id: str) -> Schedule:
        """Make occurrences again from now on (those that fell while paused are not made)."""
        now_ms = self.now_ms()
        schedule = self._schedule_or_raise(schedule_id)
        if schedule.state is not ScheduleState.PAUSED:
            if schedule.state is ScheduleState.ACTIVE:
                return schedule
            raise ScheduleStateError(schedule_id, "resume", f"it is {schedule.state}")
        self._admit_schedule(schedule.model_copy(update={"state": ScheduleState.ACTIVE}))
        self._restart(schedule, {}, now_ms, cleanup=schedule.cleanup)
        return self._schedule_or_raise(schedule_id)

    def update_schedule(self, schedule_id: str, **changes: Any) -> Schedule:
        """Change what a schedule runs or when (any of :meth:`create_schedule`'s keyword arguments, and
        ``expression``, ``action``, ``payload``). Occurrences made by the old definition and not armed yet are
        cancelled; the new one runs from now on (an armed old occurrence still fires, and the new definition
        makes none at its instant). A paused schedule stays paused."""
        unknown = sorted(set(changes) - (DEFINITION_FIELDS - {"schedule_id"}) - {"misfire_grace"})
        if unknown:
            raise InvalidScheduleError(unknown[0], f"a schedule's {', '.join(unknown)} cannot be updated")
        if "misfire_grace" in changes:
            grace = changes.pop("misfire_grace")
            changes["misfire_grace_ms"] = _grace_ms(grace, self.settings.default_misfire_grace_ms, InvalidScheduleError)
        now_ms = self.now_ms()
        schedule = self._schedule_or_raise(schedule_id)
        self._admit_schedule(self._valid_schedule({**schedule.model_dump(), **changes}))
        if schedule.state is ScheduleState.PAUSED:
            # a pause's cleanup its caller did not finish stays pending (and is finished here)
            changed = self._store.change_schedule(schedule, changes, now_ms, cleanup=schedule.cleanup)
            if schedule.cleanup:
                chain.cleanup(self._store, changed, now_ms, schedule, self._until_ms(now_ms))
        else:
            self._restart(schedule, changes, now_ms, cleanup=True)
        return self._schedule_or_raise(schedule_id)

    def _restart(self, schedule: Schedule, changes: dict[str, Any], now_ms: int, *, cleanup: bool) -> None:
        """Write ``changes`` with the cursor at the first occurrence after now (ACTIVE, or ENDED if none is left),
        finish the cleanup, and make the occurrences ahead."""
        new = Schedule.model_validate({**schedule.model_dump(), **changes})
        first = first_due_ms(new, now_ms)
        spent = new.max_occurrences is not None and new.created_count >= new.max_occurrences
        active = first is not None and not spent
        changed = self._store.change_schedule(
            schedule,
            {
                **changes,
                "state": ScheduleState.ACTIVE if active else ScheduleState.ENDED,
                "next_due_ms": first if active else None,
            },
            now_ms,
            cleanup=cleanup,
        )
        if cleanup:
            chain.cleanup(self._store, changed, now_ms, schedule, self._until_ms(now_ms))
        chain.extend(self._store, schedule.schedule_id, now_ms, self._until_ms(now_ms))

    def delete_schedule(self, schedule_id: str) -> Schedule:
        """Delete a schedule: no more occurrences; those made and not armed yet are cancelled (an armed one still
        fires). Its history stays listable until the finished occurrences expire."""
        now_ms = self.now_ms()
        schedule = self._schedule_or_raise(schedule_id)
        changed = self._store.change_schedule(
            schedule, {"state": ScheduleState.DELETED, "next_due_ms": None}, now_ms, cleanup=True
        )
        chain.cleanup(self._store, changed, now_ms, schedule, self._until_ms(now_ms))
        return self._store.get_schedule(schedule_id) or changed


def spec_problem(spec: Any) -> str | None:
    """Why ``spec`` is not one task of :meth:`Client.schedule_many` (a mapping of its fields, ``due_at`` and
    ``action`` among them), or None."""
    unknown = sorted(set(spec) - SCHEDULE_FIELDS) if isinstance(spec, Mapping) else []
    if not isinstance(spec, Mapping) or unknown or "due_at" not in spec or "action" not in spec:
        why = f"unknown field(s) {', '.join(unknown)}" if unknown else "each task needs due_at and action"
        return f"invalid task: {why}"
    return None


def schedule_each(
    tasks: Iterable[Any],
    one: Callable[[int, Any], ScheduleResult],
    threads: int,
    on_progress: Callable[[int, int], None] | None,
) -> list[ScheduleResult]:
    """``one(index, spec)`` for each of ``tasks``, ``threads`` at a time, a result each in order (an exception is
    that task's ``"error"``: the others go on); ``on_progress(done, total)`` as each completes. What
    :meth:`Client.schedule_many` and the API client's run."""
    specs = list(tasks)
    total = len(specs)
    done = [0]
    lock = threading.Lock()

    def each(indexed: tuple[int, Any]) -> ScheduleResult:
        index, spec = indexed
        try:
            result = one(index, spec)
        except Exception as exc:  # noqa: BLE001 - reported for this task; the others go on
            result = ScheduleResult(index, _task_id_of(spec), "error", error=f"{type(exc).__name__}: {exc}")
        if on_progress is not None:
            with lock:
                done[0] += 1
                count = done[0]
            on_progress(count, total)
        return result

    if total <= 1:
        return [each(item) for item in enumerate(specs)]
    with ThreadPoolExecutor(max_workers=max(1, min(threads, total)), thread_name_prefix="schedule") as pool:
        return list(pool.map(each, enumerate(specs)))


def _task_id_of(spec: Any) -> str | None:
    task_id = spec.get("task_id") if isinstance(spec, Mapping) else None
    return task_id if isinstance(task_id, str) else None
