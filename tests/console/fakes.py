"""A console source over in-memory lists (:class:`FakeSource`), and a small demo of them (:func:`demo_source`).

Its changes really change its lists, and it refuses them with the errors of :mod:`punctual.errors` the real sources
raise, with their messages: a missing task or schedule, a task no longer changeable, a schedule in a state that does
not allow the change. ``calls`` records each call by name, so that a test can count what a page read.

Also what the tier's fixtures hand its tests: the console's :data:`TOKEN`, and :class:`BrowserConsole` (a console
served and opened in a browser page).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from playwright.sync_api import Page

from punctual.domain.keys import bucket_start, from_ms, to_ms
from punctual.domain.model import Task, TaskStatus
from punctual.domain.schedules import Schedule, ScheduleState, first_due_ms
from punctual.domain.tenancy import split
from punctual.errors import (
    InvalidRequestError,
    ScheduleNotFoundError,
    ScheduleStateError,
    TaskNotFoundError,
    TaskStateError,
)
from punctual.scheduling.redrive import SkipReason
from punctual.targets import HttpAction, LogAction
from punctual_tools.console.model import (
    PAGE_SIZE,
    DeadLetter,
    ExecutorView,
    MinuteFigures,
    NowView,
    RedriveOutcome,
    TaskFilter,
    TaskPage,
    TenantUsage,
)
from punctual_tools.stats import percentile
from support import FIXED_NOW_MS

TOKEN = "console-token-for-tests"
MINUTE_MS = 60_000
HOUR_MINUTES = 60


@dataclass
class BrowserConsole:
    """A console served and opened in a browser page: ``url`` is its address; ``problems`` what the page reported
    (console errors, uncaught errors)."""

    page: Page
    url: str
    problems: list[str] = field(default_factory=list)

    def open(self, path: str) -> Page:
        self.page.goto(self.url + path)
        return self.page


@dataclass
class FakeSource:
    """Every task, schedule, executor and tenant in lists; ``now_ms`` is its clock (the app's too, in the tests)."""

    now_ms: int = FIXED_NOW_MS
    tasks_by_id: dict[str, Task] = field(default_factory=dict)
    schedules_by_id: dict[str, Schedule] = field(default_factory=dict)
    executors: list[ExecutorView] | None = field(default_factory=list)
    usages: list[TenantUsage] | None = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    is_operator: bool = True
    calls: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return "fake source <in memory>"

    @property
    def operator(self) -> bool:
        return self.is_operator

    def clock(self) -> int:
        return self.now_ms

    def status_of(self, task_id: str) -> TaskStatus:
        """The status the task holds now."""
        return self.tasks_by_id[task_id].status

    def add(self, *tasks: Task) -> None:
        for task in tasks:
            self.tasks_by_id[task.task_id] = task

    # -- reading ----------------------------------------------------------------------------------------------
    def now(self, now_ms: int, horizon_s: int = 300) -> NowView:
        self.calls.append("now")
        active = [t for t in self.tasks_by_id.values() if t.status.is_active]
        due = [0] * horizon_s
        for task in active:
            second = (task.due_ms - now_ms) // 1000
            if 0 <= second < horizon_s:
                due[second] += 1
        return NowView(
            now_ms=now_ms,
            due_per_second=due,
            overdue=sum(1 for t in active if t.due_ms < now_ms),
            minutes=self._minutes(now_ms),
            executors=self.executors if self.is_operator else None,
            notes=list(self.notes),
        )

    def _minutes(self, now_ms: int) -> list[MinuteFigures]:
        """The last hour's minutes, oldest first, from the finished tasks' instants."""
        first = bucket_start(now_ms) - (HOUR_MINUTES - 1) * MINUTE_MS
        minutes = []
        for minute_ms in range(first, first + HOUR_MINUTES * MINUTE_MS, MINUTE_MS):
            done = [
                t
                for t in self.tasks_by_id.values()
                if t.finished_at and bucket_start(to_ms(t.finished_at)) == minute_ms
            ]
            drifts = sorted(t.drift_ms for t in done if t.drift_ms is not None)
            minutes.append(
                MinuteFigures(
                    minute_ms=minute_ms,
                    fired=sum(1 for t in done if t.fired_at is not None),
                    missed=sum(1 for t in done if t.status is TaskStatus.MISSED),
                    failed=sum(1 for t in done if t.status is TaskStatus.FAILED),
                    drift_p50_ms=percentile(drifts, 50),
                    drift_p99_ms=percentile(drifts, 99),
                    drift_max_ms=max(drifts, default=None),
                )
            )
        return minutes

    def tasks(self, flt: TaskFilter, now_ms: int) -> TaskPage:
        self.calls.append("tasks")
        chosen = sorted((t for t in self.tasks_by_id.values() if _matches(t, flt)), key=lambda t: (t.due_ms, t.task_id))
        ids = [t.task_id for t in chosen]
        start = ids.index(flt.after) + 1 if flt.after in ids else 0
        page = chosen[start : start + flt.limit]
        more = start + flt.limit < len(chosen)
        return TaskPage(
            tasks=page,
            next_cursor=page[-1].task_id if more and page else None,
            index="tenant" if flt.tenant else "due",
            entries_read=len(page),
            note=None
            if flt.tenant or flt.status is None or flt.status.is_active
            else "finished tasks of no tenant are found by id",
        )

    def task(self, task_id: str) -> Task | None:
        self.calls.append("task")
        return self.tasks_by_id.get(task_id)

    def schedules(self) -> list[Schedule]:
        self.calls.append("schedules")
        return sorted(self.schedules_by_id.values(), key=lambda s: s.schedule_id)

    def schedule(self, schedule_id: str) -> Schedule | None:
        self.calls.append("schedule")
        return self.schedules_by_id.get(schedule_id)

    def occurrences(self, schedule_id: str, limit: int = 20) -> list[Task]:
        self.calls.append("occurrences")
        mine = [t for t in self.tasks_by_id.values() if t.schedule_id == schedule_id]
        return sorted(mine, key=lambda t: t.due_ms, reverse=True)[:limit]

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        self.calls.append("dead_letters")
        failed = sorted(
            (t for t in self.tasks_by_id.values() if t.status is TaskStatus.FAILED), key=lambda t: t.task_id
        )
        return [DeadLetter(task_id=t.task_id, reason=t.detail or "", task=t) for t in failed[:limit]]

    def tenants(self, wait_s: float | None = None) -> list[TenantUsage] | None:
        self.calls.append("tenants")
        return self.usages if self.is_operator else None

    # -- changes --------------------------------------------------------------------------------------------
    def _changeable(self, task_id: str, operation: str) -> Task:
        task = self.tasks_by_id.get(task_id)
        if task is None:
            raise TaskNotFoundError(task_id)
        if task.status is not TaskStatus.PENDING:
            why = "it is armed and about to fire" if task.status is TaskStatus.ARMED else f"it is {task.status}"
            raise TaskStateError(task_id, operation, why, task=task)
        return task

    def cancel(self, task_id: str) -> Task:
        self.calls.append("cancel")
        task = self._changeable(task_id, "cancel")
        changed = task.model_copy(update={"status": TaskStatus.CANCELLED, "finished_at": from_ms(self.now_ms)})
        self.tasks_by_id[task_id] = changed
        return changed

    def reschedule(self, task_id: str, due_ms: int) -> Task:
        self.calls.append("reschedule")
        task = self._changeable(task_id, "reschedule")
        if due_ms < self.now_ms - task.misfire_grace_ms:
            raise InvalidRequestError("due_at", "is further in the past than the task's misfire grace")
        changed = task.model_copy(update={"due_at": from_ms(due_ms)})
        self.tasks_by_id[task_id] = changed
        return changed

    def run_now(self, task_id: str) -> Task:
        return self.reschedule(task_id, self.now_ms)

    def _schedule(self, schedule_id: str) -> Schedule:
        schedule = self.schedules_by_id.get(schedule_id)
        if schedule is None or schedule.state is ScheduleState.DELETED:
            raise ScheduleNotFoundError(schedule_id)
        return schedule

    def _set_state(self, schedule: Schedule, state: ScheduleState) -> Schedule:
        changed = schedule.model_copy(update={"state": state, "version": schedule.version + 1})
        self.schedules_by_id[schedule.schedule_id] = changed
        return changed

    def pause_schedule(self, schedule_id: str) -> Schedule:
        self.calls.append("pause_schedule")
        schedule = self._schedule(schedule_id)
        if schedule.state not in {ScheduleState.ACTIVE, ScheduleState.PAUSED}:
            raise ScheduleStateError(schedule_id, "pause", f"it is {schedule.state}")
        return self._set_state(schedule, ScheduleState.PAUSED)

    def resume_schedule(self, schedule_id: str) -> Schedule:
        self.calls.append("resume_schedule")
        schedule = self._schedule(schedule_id)
        if schedule.state not in {ScheduleState.ACTIVE, ScheduleState.PAUSED}:
            raise ScheduleStateError(schedule_id, "resume", f"it is {schedule.state}")
        return self._set_state(schedule, ScheduleState.ACTIVE)

    def delete_schedule(self, schedule_id: str) -> Schedule:
        self.calls.append("delete_schedule")
        return self._set_state(self._schedule(schedule_id), ScheduleState.DELETED)

    def run_schedule_now(self, schedule_id: str) -> Task:
        self.calls.append("run_schedule_now")
        occurrence = self._schedule(schedule_id).occurrence(self.now_ms)
        self.add(occurrence)
        return occurrence

    def redrive(self, task_ids: list[str]) -> RedriveOutcome:
        self.calls.append("redrive")
        redriven, skipped = [], {}
        for task_id in task_ids:
            task = self.tasks_by_id.get(task_id)
            if task is None or task.status is not TaskStatus.FAILED:
                skipped[task_id] = str(SkipReason.NOT_FOUND if task is None else SkipReason.NOT_FAILED)
                continue
            update = {"status": TaskStatus.PENDING, "attempt": 0, "due_at": from_ms(self.now_ms), "finished_at": None}
            self.tasks_by_id[task_id] = task.model_copy(update=update)
            redriven.append(task_id)
        return RedriveOutcome(redriven=redriven, skipped=skipped)


def _matches(task: Task, flt: TaskFilter) -> bool:
    return (
        (flt.status is None or task.status is flt.status)
        and (flt.tenant is None or split(task.task_id)[0] == flt.tenant)
        and (flt.due_from_ms is None or task.due_ms >= flt.due_from_ms)
        and (flt.due_to_ms is None or task.due_ms < flt.due_to_ms)
        and (flt.kind is None or task.action.kind == flt.kind)
    )


# -- a demo of each page's content ------------------------------------------------------------------------------
PENDING_COUNT = PAGE_SIZE + 10  # acme's PENDING tasks: more than one page


def demo_source(now_ms: int = FIXED_NOW_MS) -> FakeSource:
    """A source holding a page and more of PENDING tasks, one ARMED, a few finished (fired with drift, MISSED,
    FAILED with their errors), a schedule with occurrences, two executors and two tenants' usage."""
    source = FakeSource(now_ms=now_ms, notes=["figures of the fake source"])
    created = from_ms(now_ms - 30 * MINUTE_MS)
    log = LogAction(message="hello")
    for i in range(PENDING_COUNT):
        source.add(_task(f"acme/pending-{i:03d}", now_ms + 5_000 + 1_000 * i, created, payload={"n": i}))
    source.add(
        _task("beta/hook-1", now_ms + 20_000, created, action=HttpAction(url="https://example.com/hook")),
        _task(
            "acme/armed-1",
            now_ms + 2_000,
            created,
            status=TaskStatus.ARMED,
            attempt=1,
            armed_by="executor-a",
            batch_id="batch-7",
            lease_until=from_ms(now_ms + 70_000),
        ),
    )
    for i in range(3):
        due = now_ms - (10 + i) * MINUTE_MS
        source.add(_finished(f"acme/done-{i}", due, TaskStatus.SUCCEEDED, drift=2.5 + i))
        source.add(_finished(f"acme/failed-{i}", due, TaskStatus.FAILED, drift=4.0, detail=f"HTTP 500 from target {i}"))
    source.add(
        _finished("acme/missed-0", now_ms - 5 * MINUTE_MS, TaskStatus.MISSED, drift=None, detail="past its grace")
    )
    schedule = Schedule(
        schedule_id="acme/daily",
        expression="cron(0 9 * * ? *)",
        timezone="Europe/Paris",
        action=log,
        created_at=created,
    )
    source.schedules_by_id[schedule.schedule_id] = schedule.model_copy(
        update={"next_due_ms": first_due_ms(schedule, now_ms)}
    )
    occurrence = schedule.occurrence(now_ms - 20 * MINUTE_MS)
    source.add(
        occurrence.model_copy(
            update={
                "status": TaskStatus.SUCCEEDED,
                "fired_at": occurrence.due_at + timedelta(milliseconds=3),
                "finished_at": occurrence.due_at + timedelta(milliseconds=9),
                "drift_ms": 3.0,
            }
        )
    )
    source.executors = [
        ExecutorView(
            executor_id="executor-a",
            state="alive",
            alive_until_ms=now_ms + 30_000,
            beat_ms=now_ms - 1_000,
            invocation="inv-1",
            batches=4,
            last_batch_ms=now_ms - 2_000,
        )
    ]
    source.usages = [
        TenantUsage(
            tenant="acme",
            active_tasks=PENDING_COUNT + 1,
            active_tasks_limit=1_000,
            schedules=1,
            schedules_limit=10,
            schedule_rate_per_s=0.5,
            schedule_rate_limit=2.0,
        ),
        TenantUsage(
            tenant="beta",
            active_tasks=1,
            active_tasks_limit=None,
            schedules=0,
            schedules_limit=None,
            schedule_rate_per_s=0.0,
            schedule_rate_limit=None,
        ),
    ]
    return source


def _task(task_id: str, due_ms: int, created: object, **fields: object) -> Task:
    fields.setdefault("action", LogAction(message="hello"))
    return Task.model_validate({"task_id": task_id, "due_at": from_ms(due_ms), "created_at": created, **fields})


def _finished(task_id: str, due_ms: int, status: TaskStatus, *, drift: float | None, detail: str | None = None) -> Task:
    due = from_ms(due_ms)
    fired = None if drift is None else due + timedelta(milliseconds=drift)
    return Task(
        task_id=task_id,
        due_at=due,
        action=LogAction(message="hello"),
        status=status,
        attempt=1,
        created_at=due - timedelta(minutes=5),
        fired_at=fired,
        finished_at=(fired or due) + timedelta(milliseconds=20),
        drift_ms=drift,
        detail=detail,
        armed_by="executor-a",
        batch_id="batch-3",
    )
