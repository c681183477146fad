"""What the console shows and does, in its own words: the views its pages render and :class:`ConsoleSource`, the one
port they read and steer through.

Two implementations (:mod:`punctual_tools.console.source`): the operator's, over a store's ports (the local stack's
DynamoDB Local, or a deployed table with the operator's AWS credentials), which sees every tenant, the due index,
the executors and the per-minute figures; and a tenant's, through the REST API (SigV4 or a bearer token), which sees
only that tenant's tasks and schedules (``operator`` is False, and the operator's views answer None).

Every listing reads an index, never a scan: active tasks in due order from the ``due`` index, a tenant's tasks in
id order from the ``tenant`` index, a schedule's occurrences from the ``schedule`` index and every schedule from its
registry there, the dead letters from the dead-letter queue; a finished task of no tenant is found by its id
(docs/decisions.md says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from punctual.domain.model import Task, TaskStatus
from punctual.domain.schedules import Schedule

PAGE_SIZE = 50  # tasks on one page of the Tasks page


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskFilter:
    """What the Tasks page's form asks for. ``after`` is the page's cursor (opaque: what the last page answered).

    ``kind`` and ``retrying`` are read from each task, not from an index: a page so filtered reads index pages until
    it is full (a few at most) and says how many entries it read."""

    status: TaskStatus | None = None
    tenant: str | None = None
    due_from_ms: int | None = None
    due_to_ms: int | None = None
    kind: str | None = None  # an action kind: log, http, lambda, sqs, sns, eventbridge
    retrying: bool = False  # only tasks tried before (attempt 1 or more): active ones wait for their next try
    after: str | None = None
    limit: int = PAGE_SIZE

    def keeps(self, task: Task) -> bool:
        """Whether ``task`` passes what no index answers (its action kind, whether it was tried before)."""
        return (self.kind is None or task.action.kind == self.kind) and (not self.retrying or task.attempt > 0)

    @property
    def reads_tasks(self) -> bool:
        """Whether it filters what an index answers by what each task holds."""
        return self.kind is not None or self.retrying


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskPage:
    """One page of tasks, and how it was read."""

    tasks: list[Task]
    next_cursor: str | None  # None: the last page
    index: str  # the index that served it: "due", "tenant" (or "api" through the REST API)
    entries_read: int  # index entries read to fill it (a filter may leave some out)
    note: str | None = None  # what the page could not show and why (e.g. finished tasks of no tenant)


@dataclass(frozen=True, kw_only=True, slots=True)
class MinuteFigures:
    """One minute of the last hour: how many tasks were fired, MISSED and FAILED in it, and their drift."""

    minute_ms: int
    fired: int = 0
    missed: int = 0
    failed: int = 0
    drift_p50_ms: float | None = None
    drift_p99_ms: float | None = None
    drift_max_ms: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutorView:
    """An executor seen lately: its heartbeat item and the batches it reported."""

    executor_id: str
    state: str  # "alive", "lapsed" (its heartbeat ended), "fenced", "taken over"
    alive_until_ms: int | None
    beat_ms: int | None
    invocation: str | None
    batches: int  # batches it reported in the window read
    last_batch_ms: int | None
    holding: int = 0  # armed tasks it holds among those due soonest (a batch it has not reported yet)


@dataclass(frozen=True, kw_only=True, slots=True)
class NowView:
    """The Now page: the load ahead, the last hour, the executors."""

    now_ms: int
    due_per_second: list[int]  # tasks due in each second from now_ms on (index 0: [now, now + 1 s))
    overdue: int  # active tasks due before now_ms
    minutes: list[MinuteFigures]  # the last hour, oldest first, one a minute (empty minutes included)
    executors: list[ExecutorView] | None  # None: not known to this source (a tenant's view)
    notes: list[str] = field(default_factory=list)  # where a figure comes from, or why one is missing


@dataclass(frozen=True, kw_only=True, slots=True)
class TimelineEvent:
    """One step of a task's history, as its item tells it."""

    at_ms: int | None  # None: the step happened but its instant is not stored
    label: str  # created, due, armed, fired, finished...
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadLetter:
    """A FAILED task and its last error (the dead-letter queue's message, the task as stored now)."""

    task_id: str
    reason: str
    task: Task | None  # None: the task is gone (expired) or could not be read


@dataclass(frozen=True, kw_only=True, slots=True)
class RedriveOutcome:
    """What a redrive did to each task it was asked for."""

    redriven: list[str]
    skipped: dict[str, str]  # task id -> why not


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantUsage:
    """A tenant's use of its quotas (a limit None: none set). Its active tasks are a kept count
    (:mod:`punctual_tools.console.counts`): None until the first is done, ``counted_s_ago`` old, ``counting`` while
    one is being made, ``count_error`` when the last attempt failed."""

    tenant: str
    active_tasks: int | None
    counted_s_ago: float = 0.0
    counting: bool = False
    count_error: str | None = None
    active_tasks_limit: int | None
    schedules: int
    schedules_limit: int | None
    schedule_rate_per_s: float
    schedule_rate_limit: float | None


class ConsoleSource(Protocol):
    """Everything the console reads and changes. Changes raise the errors of :mod:`punctual.errors` (the API's)."""

    @property
    def label(self) -> str:
        """What the console is looking at, for the header: "local stack at …", "AWS table …", "tenant … via …"."""
        ...

    @property
    def operator(self) -> bool:
        """True: every tenant, the due index, executors and figures; False: one tenant through the REST API."""
        ...

    def now(self, now_ms: int, horizon_s: int = 300) -> NowView: ...

    def tasks(self, flt: TaskFilter, now_ms: int) -> TaskPage: ...

    def task(self, task_id: str) -> Task | None: ...

    def cancel(self, task_id: str) -> Task: ...

    def reschedule(self, task_id: str, due_ms: int) -> Task: ...

    def run_now(self, task_id: str) -> Task: ...

    def schedules(self) -> list[Schedule]: ...

    def schedule(self, schedule_id: str) -> Schedule | None: ...

    def occurrences(self, schedule_id: str, limit: int = 20) -> list[Task]:
        """The schedule's latest occurrences (the ``schedule`` index), newest first, each as stored (drift)."""
        ...

    def pause_schedule(self, schedule_id: str) -> Schedule: ...

    def resume_schedule(self, schedule_id: str) -> Schedule: ...

    def delete_schedule(self, schedule_id: str) -> Schedule: ...

    def run_schedule_now(self, schedule_id: str) -> Task: ...

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]: ...

    def redrive(self, task_ids: list[str]) -> RedriveOutcome: ...

    def tenants(self, wait_s: float | None = None) -> list[TenantUsage] | None:
        """Quota use per tenant (None: not the operator's view), waiting for the active-task counts being made at
        most ``wait_s`` (None: until they are done)."""
        ...
