"""Many tasks at once: each a parallel conditional write, a result each in order (for ``Client.schedule_many``
and the API client's)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from punctual.domain.model import DEFAULT_MISFIRE_POLICY, Task
from punctual.errors import InvalidRequestError, QuotaExceededError, TaskConflictError

SCHEDULE_FIELDS = frozenset({"due_at", "action", "payload", "task_id", "misfire_grace", "misfire_policy", "retry"})
# What one call of the REST API's batch create (POST /v1/tasks:batch) takes at most (docs/rest-api.md). Bytes: the
# answer echoes each task, in JSON that may write a 4-byte character as a 12-byte escape pair, which the proxy
# response escapes again (14 bytes): 1 MiB of request stays under Lambda's 6 MB for a response, and for the
# request's event, whatever it holds. Tasks: 100 parallel conditional writes (each item at most 400 KB) take well
# under a second, far within API Gateway's 29 s for an answer.
BATCH_MAX_TASKS = 100
BATCH_MAX_BYTES = 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleResult:
    """What :meth:`Client.schedule_many` did with one task, in the order given.

    ``outcome`` is ``"created"``, ``"exists"`` (the same id with equal content was already stored: nothing
    written), ``"invalid"`` (bad input, or a tenant's quota passed: nothing stored; ``field`` names it, ``quota``
    the quota passed), ``"conflict"`` (the id exists with other content) or ``"error"`` (the write failed, e.g.
    throttled past its retries: safe to send again).
    """

    index: int
    task_id: str | None
    outcome: Literal["created", "exists", "invalid", "conflict", "error"]
    task: Task | None = None
    error: str | None = None
    field: str | None = None
    quota: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in ("created", "exists")


def schedule_one(
    now_ms: Callable[[], int],
    build: Callable[..., Task],
    create: Callable[[Task, int], tuple[Task, bool]],
    index: int,
    spec: Mapping[str, Any],
) -> ScheduleResult:
    """Build (``build``, as :meth:`Client.build_task <punctual.scheduling.client.Client.build_task>`) and store
    (``create``) one task of a :meth:`Client.schedule_many <punctual.scheduling.client.Client.schedule_many>` call; what
    went wrong is its result, never raised."""
    task_id = task_id_of(spec)
    problem = spec_problem(spec)
    if problem is not None:
        return ScheduleResult(index=index, task_id=task_id, outcome="invalid", error=problem)
    now = now_ms()
    try:
        task = build(
            spec["due_at"],
            spec["action"],
            spec.get("payload"),
            task_id=spec.get("task_id"),
            misfire_grace=spec.get("misfire_grace"),
            misfire_policy=spec.get("misfire_policy", DEFAULT_MISFIRE_POLICY),
            retry=spec.get("retry"),
            now_ms=now,
        )
    except InvalidRequestError as exc:  # the task's, or a quota passed: nothing stored, the field named
        return ScheduleResult(
            index=index, task_id=task_id, outcome="invalid", error=str(exc), field=exc.field, quota=quota_of(exc)
        )
    try:
        stored, created = create(task, now)
    except QuotaExceededError as exc:
        return ScheduleResult(
            index=index, task_id=task.task_id, outcome="invalid", error=str(exc), field=exc.field, quota=exc.quota
        )
    except TaskConflictError as exc:
        return ScheduleResult(index=index, task_id=task.task_id, outcome="conflict", task=exc.existing, error=str(exc))
    return ScheduleResult(index=index, task_id=task.task_id, outcome="created" if created else "exists", task=stored)


def quota_of(exc: InvalidRequestError) -> str | None:
    """The quota ``exc`` says was passed, or None for bad input."""
    return exc.quota if isinstance(exc, QuotaExceededError) else None


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
            result = ScheduleResult(
                index=index, task_id=task_id_of(spec), outcome="error", error=f"{type(exc).__name__}: {exc}"
            )
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


def task_id_of(spec: Any) -> str | None:
    """The id a task of :meth:`Client.schedule_many` names, if it names one."""
    task_id = spec.get("task_id") if isinstance(spec, Mapping) else None
    return task_id if isinstance(task_id, str) else None
