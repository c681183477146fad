"""The client helper: schedule, inspect, cancel and reschedule tasks (one conditional write each)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import ValidationError

from .actions import TargetRules, check_action
from .clock import Clock, SystemClock
from .decisions import misfire_decision
from .errors import InvalidTaskError, TaskConflictError
from .keys import to_ms
from .model import DEFAULT_MISFIRE_POLICY, Action, Task, TaskStatus, canonical_json
from .retry import RetryPolicy
from .settings import Settings
from .store import TaskStore

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


def _field_error(exc: ValidationError) -> InvalidTaskError:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or None
    return InvalidTaskError(f"invalid {field or 'task'}: {first['msg']}", field=field)


def _grace_ms(value: timedelta | int | None, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, timedelta):
        return value // timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTaskError("invalid misfire_grace_ms: give a timedelta or whole milliseconds",
                               field="misfire_grace_ms")
    return value


class Client:
    """Schedule tasks for Punctual to fire at an exact instant.

    Parameters
    ----------
    settings:
        Table name, endpoint, shard count and limits; defaults to ``Settings.from_env()``.
    dynamodb:
        A boto3 DynamoDB client to use (for example one bound to DynamoDB Local or moto).
    store:
        The task store to use instead (any :class:`~punctual.store.TaskStore`); ``dynamodb`` is then unused.
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

    def __init__(self, settings: Settings | None = None, *, dynamodb: Any = None,
                 clock: Clock | None = None, store: TaskStore | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self._clock = clock or SystemClock()
        if store is None:
            from .runtime import build_store

            store = build_store(self.settings, dynamodb)
        self._store = store
        self._rules = TargetRules.from_settings(self.settings)

    def _now_ms(self) -> int:
        return int(self._clock.wall_ms())

    def _check_due(self, task: Task, now_ms: int) -> None:
        horizon = now_ms + self.settings.max_horizon_days * 86_400_000
        if task.due_ms > horizon:
            raise InvalidTaskError(
                f"invalid due_at: more than {self.settings.max_horizon_days} days ahead (the horizon)",
                field="due_at",
            )
        # The executor's own rule: a task that could only start past its grace under "skip" would be MISSED (a
        # "fire_late" task due in the past is accepted: it fires at once, flagged late).
        if misfire_decision(now_ms - task.due_ms, task.misfire_grace_ms, task.misfire_policy) == "miss":
            raise InvalidTaskError(
                f"invalid due_at: {(now_ms - task.due_ms) / 1000:.3f} s in the past, beyond the misfire grace of "
                f"{task.misfire_grace_ms} ms: it could only be recorded MISSED",
                field="due_at",
            )

    def build_task(self, due_at: datetime, action: Action | dict[str, Any], payload: Any = None, *,
                   task_id: str | None = None, misfire_grace: timedelta | int | None = None,
                   misfire_policy: str = DEFAULT_MISFIRE_POLICY, retry: RetryPolicy | dict[str, Any] | None = None,
                   now_ms: int | None = None) -> Task:
        """Validate a task without storing it (what :meth:`schedule` stores). Raises InvalidTaskError."""
        import uuid

        now_ms = self._now_ms() if now_ms is None else now_ms
        if not isinstance(due_at, datetime):
            raise InvalidTaskError("invalid due_at: must be a datetime", field="due_at")
        if due_at.tzinfo is None or due_at.utcoffset() is None:
            raise InvalidTaskError("invalid due_at: naive datetime; give a timezone (e.g. UTC)", field="due_at")
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
            raise _field_error(exc) from exc
        try:
            size = len(canonical_json(task.payload).encode())
        except UnicodeEncodeError as exc:
            raise InvalidTaskError(f"invalid payload: not valid Unicode ({exc.reason})", field="payload") from exc
        if size > self.settings.max_payload_bytes:
            raise InvalidTaskError(
                f"invalid payload: {size} bytes as JSON, more than the limit of {self.settings.max_payload_bytes}",
                field="payload",
            )
        self._check_due(task, now_ms)
        check_action(task.action, self._rules)
        return task

    def schedule(self, due_at: datetime, action: Action | dict[str, Any], payload: Any = None, *,
                 task_id: str | None = None, misfire_grace: timedelta | int | None = None,
                 misfire_policy: str = DEFAULT_MISFIRE_POLICY,
                 retry: RetryPolicy | dict[str, Any] | None = None) -> Task:
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
        now_ms = self._now_ms()
        task = self.build_task(due_at, action, payload, task_id=task_id, misfire_grace=misfire_grace,
                               misfire_policy=misfire_policy, retry=retry, now_ms=now_ms)
        stored, _created = self._store.create(task, now_ms)
        return stored

    def schedule_many(self, tasks: Iterable[Mapping[str, Any]], *, threads: int = 16,
                      on_progress: Callable[[int, int], None] | None = None) -> list[ScheduleResult]:
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
        specs = list(tasks)
        total = len(specs)
        done = [0]
        lock = threading.Lock()

        def one(indexed: tuple[int, Mapping[str, Any]]) -> ScheduleResult:
            index, spec = indexed
            try:
                result = self._schedule_one(index, spec)
            except Exception as exc:  # noqa: BLE001 - reported for this task; the others go on
                result = ScheduleResult(index, _task_id_of(spec), "error", error=f"{type(exc).__name__}: {exc}")
            if on_progress is not None:
                with lock:
                    done[0] += 1
                    count = done[0]
                on_progress(count, total)
            return result

        if total <= 1:
            return [one(item) for item in enumerate(specs)]
        with ThreadPoolExecutor(max_workers=max(1, min(threads, total)), thread_name_prefix="schedule") as pool:
            return list(pool.map(one, enumerate(specs)))

    def _schedule_one(self, index: int, spec: Mapping[str, Any]) -> ScheduleResult:
        task_id = _task_id_of(spec)
        unknown = sorted(set(spec) - SCHEDULE_FIELDS) if isinstance(spec, Mapping) else []
        if not isinstance(spec, Mapping) or unknown or "due_at" not in spec or "action" not in spec:
            why = (f"unknown field(s) {', '.join(unknown)}" if unknown else "each task needs due_at and action")
            return ScheduleResult(index, task_id, "invalid", error=f"invalid task: {why}")
        now_ms = self._now_ms()
        try:
            task = self.build_task(spec["due_at"], spec["action"], spec.get("payload"), task_id=spec.get("task_id"),
                                   misfire_grace=spec.get("misfire_grace"),
                                   misfire_policy=spec.get("misfire_policy", DEFAULT_MISFIRE_POLICY),
                                   retry=spec.get("retry"), now_ms=now_ms)
        except InvalidTaskError as exc:
            return ScheduleResult(index, task_id, "invalid", error=str(exc), field=exc.field)
        try:
            stored, created = self._store.create(task, now_ms)
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

        now = self._now_ms() if now_ms is None else now_ms
        store = self._store if isinstance(self._store, DynamoTaskStore) else DynamoTaskStore.from_settings(
            None, self.settings)
        return store.item_of(task, now)

    def get(self, task_id: str) -> Task | None:
        """The task as stored now, or None if there is no such task."""
        return self._store.get(task_id)

    def list(self, status: TaskStatus | str | list[TaskStatus | str] | None = None,
             due_from: datetime | None = None, due_to: datetime | None = None,
             limit: int | None = None) -> list[Task]:
        """Tasks with the given status(es) and ``due_from <= due_at < due_to``, in due order."""
        statuses = None
        if status is not None:
            raw = status if isinstance(status, list) else [status]
            try:
                statuses = [TaskStatus(s) for s in raw]
            except ValueError as exc:
                raise InvalidTaskError(f"invalid status: {exc}", field="status") from exc
        tasks = list(self._store.list_tasks(
            statuses,
            None if due_from is None else to_ms(due_from),
            None if due_to is None else to_ms(due_to),
        ))
        tasks.sort(key=lambda t: (t.due_at, t.task_id))
        return tasks if limit is None else tasks[:limit]

    def cancel(self, task_id: str) -> Task:
        """Cancel a task that has not been armed for firing yet.

        Race-safe against a concurrent arm: either the cancel wins and the task never fires, or the task
        was already armed by its executor and this raises :class:`~punctual.errors.TaskStateError`.
        """
        return self._store.cancel(task_id, self._now_ms())

    def reschedule(self, task_id: str, due_at: datetime) -> Task:
        """Move a task that has not been armed yet to ``due_at``. Race-safe like :meth:`cancel`."""
        now_ms = self._now_ms()
        current = self._store.get(task_id)
        if current is None:
            from .errors import TaskNotFoundError

            raise TaskNotFoundError(f"no task {task_id!r}")
        task = self.build_task(due_at, current.action, current.payload, task_id=task_id,
                               misfire_grace=current.misfire_grace_ms,
                               misfire_policy=current.misfire_policy, retry=current.retry, now_ms=now_ms)
        return self._store.reschedule(task_id, task.due_ms, now_ms)


def _task_id_of(spec: Any) -> str | None:
    task_id = spec.get("task_id") if isinstance(spec, Mapping) else None
    return task_id if isinstance(task_id, str) else None
