"""The API's operations for one tenant: every id it is given is qualified with the tenant before the client sees
it, and every id it answers is stripped of it (:mod:`punctual.domain.tenancy`). Another tenant's task or schedule is
therefore out of reach by construction: whatever a caller names, the store is asked for the caller's own."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from punctual.api.views import (
    MAX_PAGE,
    History,
    ScheduleIn,
    ScheduleList,
    ScheduleOut,
    ScheduleUpdate,
    TaskIn,
    TaskOut,
    TaskPage,
    TaskResult,
    TaskResults,
    decode_token,
    encode_token,
    problem,
    validation_problem,
)
from punctual.domain.model import Task, TaskStatus, Unreadable
from punctual.domain.schedules import Schedule, ScheduleState
from punctual.domain.tenancy import prefix, qualify, split
from punctual.errors import (
    InvalidRequestError,
    PunctualError,
    RequestTooLargeError,
    ScheduleNotFoundError,
    TaskNotFoundError,
)
from punctual.scheduling.bulk import (
    BATCH_MAX_BYTES,
    BATCH_MAX_TASKS,
    ScheduleResult,
    schedule_each,
    schedule_one,
)
from punctual.scheduling.client import Client

log = logging.getLogger("punctual.api")
T = TypeVar("T")
BATCH_THREADS = 16  # a batch's conditional writes in flight (the DynamoDB client pools 64 connections)
PAGE_BYTES = 4_000_000  # a page's JSON at most: Lambda answers 6 MB at most, API Gateway 10 MB


class TenantService:
    """What one tenant may do, through a :class:`~punctual.scheduling.client.Client` (its checks and its store)."""

    def __init__(self, client: Client, tenant: str) -> None:
        self.client = client
        self.tenant = tenant
        self._prefix = prefix(tenant)

    def _own(self, name: str) -> str:
        return qualify(self.tenant, name)

    def _scrubbed(self, call: Callable[[], T]) -> T:
        """Run ``call``; a domain error's message and facts name ids without the tenant (the caller's own words)."""
        try:
            return call()
        except PunctualError as exc:
            exc.args = tuple(a.replace(self._prefix, "") if isinstance(a, str) else a for a in exc.args)
            vars(exc).update({k: v.replace(self._prefix, "") for k, v in vars(exc).items() if isinstance(v, str)})
            raise

    def _task(self, task: Task) -> TaskOut:
        return TaskOut.of(task, self.tenant)

    def _schedule(self, schedule: Schedule) -> ScheduleOut:
        return ScheduleOut.of(schedule, self.tenant)

    # -- tasks ---------------------------------------------------------------------------------------------------
    def _spec(self, body: TaskIn) -> dict[str, Any]:
        """``body``'s arguments of :meth:`Client.build_task <punctual.scheduling.client.Client.build_task>` (a task of
        :meth:`Client.schedule_many <punctual.scheduling.client.Client.schedule_many>` too), its id the tenant's."""
        return {
            "due_at": body.due_at,
            "action": body.action,
            "payload": body.payload,
            "task_id": self._own(body.task_id or uuid.uuid4().hex),
            "misfire_grace": body.misfire_grace_ms,
            "misfire_policy": body.misfire_policy,
            "retry": body.retry,
        }

    def create_task(self, body: TaskIn) -> tuple[TaskOut, bool]:
        spec = self._spec(body)

        def create() -> tuple[Task, bool]:
            return self.client.submit(self.client.build_task(**spec))

        stored, created = self._scrubbed(create)
        return self._task(stored), created

    def create_tasks(self, items: Sequence[Any], size: int) -> TaskResults:
        """Each of ``items`` (a ``POST /v1/tasks`` body, not validated yet; ``size`` bytes of JSON in all) checked and
        stored as :meth:`Client.schedule_many <punctual.scheduling.client.Client.schedule_many>` does (the same
        checks, each task admitted against the tenant's quota, one conditional write each, in parallel): an outcome
        each, in order, whatever became of the others. RequestTooLargeError past the batch's limits."""
        if len(items) > BATCH_MAX_TASKS:
            raise RequestTooLargeError("tasks", f"{len(items)} tasks, more than {BATCH_MAX_TASKS} in one call")
        if size > BATCH_MAX_BYTES:
            raise RequestTooLargeError("tasks", f"{size} bytes, more than {BATCH_MAX_BYTES} in one call")
        results: list[TaskResult | None] = [None] * len(items)
        specs: list[tuple[int, dict[str, Any]]] = []
        for index, item in enumerate(items):
            try:
                body = TaskIn.model_validate(item)
            except ValidationError as exc:
                name = item.get("task_id") if isinstance(item, dict) else None
                results[index] = TaskResult(
                    index=index,
                    task_id=name if isinstance(name, str) else None,
                    outcome="invalid",
                    status=422,
                    problem=validation_problem(exc.errors(), f"tasks[{index}]"),
                )
                continue
            specs.append((index, self._spec(body)))
        for result in schedule_each(specs, self._create_one, BATCH_THREADS, None):
            results[result.index] = self._result_of(result)
        return TaskResults(results=[r for r in results if r is not None])

    def _create_one(self, _: int, indexed: tuple[int, dict[str, Any]]) -> ScheduleResult:
        index, spec = indexed
        try:
            return schedule_one(self.client.now_ms, self.client.build_task, self.client.create_built, index, spec)
        except Exception as exc:  # this task's outcome, the log has the cause; the others go on
            log.exception("creating task %s of a batch failed", spec["task_id"])
            return ScheduleResult(
                index=index,
                task_id=spec["task_id"],
                outcome="error",
                error=f"internal error ({type(exc).__name__}); the task may be sent again",
            )

    def _result_of(self, result: ScheduleResult) -> TaskResult:
        """A batch's answer for one task: what ``POST /v1/tasks`` would have answered it, in the tenant's words."""
        name = None if result.task_id is None else result.task_id.removeprefix(self._prefix)
        detail = (result.error or "").replace(self._prefix, "")
        field = f"tasks[{result.index}]" if result.field is None else f"tasks[{result.index}].{result.field}"
        if result.outcome in ("created", "exists") and result.task is not None:
            status = 201 if result.outcome == "created" else 200
            return TaskResult(
                index=result.index, task_id=name, outcome=result.outcome, status=status, task=self._task(result.task)
            )
        if result.outcome == "conflict":
            said = problem(409, detail, kind="conflict")
            return TaskResult(index=result.index, task_id=name, outcome="conflict", status=409, problem=said)
        if result.outcome == "invalid" and result.quota is not None:
            said = problem(429, detail, field, kind="quota", quota=result.quota)
            return TaskResult(index=result.index, task_id=name, outcome="over_quota", status=429, problem=said)
        if result.outcome == "invalid":
            said = problem(422, detail, field, kind="invalid")
            return TaskResult(index=result.index, task_id=name, outcome="invalid", status=422, problem=said)
        said = problem(500, detail or "internal error; the task may be sent again")
        return TaskResult(index=result.index, task_id=name, outcome="error", status=500, problem=said)

    def get_task(self, name: str) -> TaskOut:
        task = self.client.get(self._own(name))
        if task is None:
            raise TaskNotFoundError(name)
        return self._task(task)

    def list_tasks(
        self,
        status: list[TaskStatus] | None,
        due_from: datetime | None,
        due_to: datetime | None,
        limit: int,
        next_token: str | None,
    ) -> TaskPage:
        after = None
        if next_token is not None:
            try:
                after = decode_token(next_token)
            except ValueError as exc:
                raise InvalidRequestError("next_token", str(exc)) from exc
            if not after.startswith(self._prefix):
                raise InvalidRequestError("next_token", "not a page token this API gave")
        statuses = sorted(set(status)) if status else None  # a status named twice is one filter
        unreadable = Unreadable()
        tasks, more = self.client.list_tenant_page(
            self.tenant, statuses, due_from, due_to, max(1, min(limit, MAX_PAGE)), after, unreadable
        )
        views, cut = self._within_budget(tasks)
        if cut:
            more = tasks[len(views) - 1].task_id  # the next page goes on after the last task this one holds
        return TaskPage(tasks=views, next_token=encode_token(more) if more else None, unreadable=unreadable.count)

    def _within_budget(self, tasks: list[Task]) -> tuple[list[TaskOut], bool]:
        """The views of ``tasks`` (the caller's own only) up to :data:`PAGE_BYTES` of JSON (Lambda answers at
        most 6 MB; a payload may hold 256 KB), and whether some were left out for that."""
        views: list[TaskOut] = []
        size = 0
        for task in tasks:
            if split(task.task_id)[0] != self.tenant:
                continue  # never another's (a forged attribute can put another tenant's item in an index)
            view = self._task(task)
            size += len(view.model_dump_json())
            if views and size > PAGE_BYTES:
                return views, True
            views.append(view)
        return views, False

    def cancel_task(self, name: str) -> TaskOut:
        return self._task(self._scrubbed(lambda: self.client.cancel(self._own(name))))

    def reschedule_task(self, name: str, due_at: datetime) -> TaskOut:
        return self._task(self._scrubbed(lambda: self.client.reschedule(self._own(name), due_at)))

    def run_task_now(self, name: str) -> TaskOut:
        return self._task(self._scrubbed(lambda: self.client.run_now(self._own(name))))

    def redrive_task(self, name: str) -> TaskOut:
        return self._task(self._scrubbed(lambda: self.client.redrive(self._own(name))))

    # -- schedules -----------------------------------------------------------------------------------------------
    def create_schedule(self, body: ScheduleIn) -> tuple[ScheduleOut, bool]:
        existed = self.client.get_schedule(self._own(body.schedule_id)) is not None
        fields = body.model_dump(exclude={"schedule_id", "expression", "action", "payload", "misfire_grace_ms"})
        stored = self._scrubbed(
            lambda: self.client.create_schedule(
                self._own(body.schedule_id),
                body.expression,
                body.action,
                body.payload,
                misfire_grace=body.misfire_grace_ms,
                **fields,
            )
        )
        return self._schedule(stored), not existed

    def _live_schedule(self, name: str) -> Schedule:
        schedule = self.client.get_schedule(self._own(name))
        if schedule is None or schedule.state is ScheduleState.DELETED:
            raise ScheduleNotFoundError(name)
        return schedule

    def get_schedule(self, name: str) -> ScheduleOut:
        return self._schedule(self._live_schedule(name))

    def list_schedules(self) -> ScheduleList:
        unreadable = Unreadable()
        schedules = self.client.list_schedules(id_prefix=self._prefix, unreadable=unreadable)
        return ScheduleList(
            schedules=[self._schedule(s) for s in schedules if s.state is not ScheduleState.DELETED],
            unreadable=unreadable.count,
        )

    def pause_schedule(self, name: str) -> ScheduleOut:
        return self._schedule(self._scrubbed(lambda: self.client.pause_schedule(self._own(name))))

    def resume_schedule(self, name: str) -> ScheduleOut:
        return self._schedule(self._scrubbed(lambda: self.client.resume_schedule(self._own(name))))

    def update_schedule(self, name: str, body: ScheduleUpdate) -> ScheduleOut:
        changes = body.model_dump(exclude_unset=True)
        if "action" in changes:
            changes["action"] = body.action
        if "misfire_grace_ms" in changes:
            changes["misfire_grace"] = changes.pop("misfire_grace_ms")
        return self._schedule(self._scrubbed(lambda: self.client.update_schedule(self._own(name), **changes)))

    def delete_schedule(self, name: str) -> ScheduleOut:
        return self._schedule(self._scrubbed(lambda: self.client.delete_schedule(self._own(name))))

    def schedule_history(self, name: str, limit: int) -> History:
        """The newest ``limit`` occurrences, oldest first (fewer when they would pass :data:`PAGE_BYTES`)."""
        self._live_schedule(name)
        unreadable = Unreadable()
        tasks = self.client.schedule_history(self._own(name), max(1, min(limit, MAX_PAGE)), unreadable)
        newest_first, _ = self._within_budget(tasks[::-1])
        return History(occurrences=newest_first[::-1], unreadable=unreadable.count)

    def run_schedule_now(self, name: str) -> tuple[TaskOut, bool]:
        """One extra occurrence of the schedule, due now (its next ones are unchanged)."""
        stored, created = self._scrubbed(lambda: self.client.occur_now(self._own(name)))
        return self._task(stored), created
