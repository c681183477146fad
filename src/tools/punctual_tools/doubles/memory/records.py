"""What the in-memory store keeps: a task with the fields of its life cycle, and an executor's heartbeat; and the
check of a tenant's schedule usage against its limits."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias

from punctual.domain.keys import from_ms
from punctual.domain.model import Candidate, Task, TaskStatus, utc_to_ms
from punctual.domain.quota import ScheduleLimits, change_of, held_by
from punctual.domain.schedules import Schedule
from punctual.domain.tenancy import prefix, split

# a tenant's schedule quotas, for a write that takes from them (None: no check)
Limits: TypeAlias = ScheduleLimits | None


def _at(ms: float | None) -> datetime | None:
    """A stored instant as a task field holds it (UTC, to the millisecond), or None."""
    return None if ms is None else utc_to_ms(from_ms(ms))


@dataclass
class TaskRecord:
    """One task as stored: what the client asked for (``task``; its ``due_at`` moves with a retry, a reschedule or
    a redrive), the hash of that content, and the fields of its life cycle."""

    task: Task
    content_hash: str
    created_ms: int
    status: TaskStatus = TaskStatus.PENDING
    attempt: int = 0
    lease_until_ms: int | None = None
    batch_id: str | None = None
    armed_by: str | None = None
    fired_ms: float | None = None
    finished_ms: int | None = None
    drift_ms: float | None = None
    drift_corrected_ms: float | None = None
    detail: str | None = None
    late: bool = False
    first_due_ms: int | None = None
    redriven_ms: int | None = None  # the instant of the last redrive: a retried redrive finds its own

    @classmethod
    def new(cls, task: Task, now_ms: int) -> TaskRecord:
        """A new PENDING task written at ``now_ms``: what the client asked for, nothing of a life cycle."""
        fresh = Task(
            task_id=task.task_id,
            due_at=task.due_at,
            action=task.action,
            payload=copy.deepcopy(task.payload),
            misfire_grace_ms=task.misfire_grace_ms,
            misfire_policy=task.misfire_policy,
            occurrence=task.occurrence,
            retry=task.retry,
            schedule_id=task.schedule_id,
            schedule_version=(task.schedule_version or 1) if task.schedule_id is not None else None,
        )
        return cls(fresh, task.content_hash(), now_ms)

    @property
    def due_ms(self) -> int:
        return self.task.due_ms

    def move(self, due_ms: int) -> None:
        self.task = self.task.model_copy(update={"due_at": from_ms(due_ms)})

    def held_by(self, executor_id: str) -> bool:
        return self.status is TaskStatus.ARMED and self.armed_by == executor_id

    def lease_ended(self, now_ms: int) -> bool:
        """Whether its lease ended before ``now_ms`` (at ``lease_until_ms`` it still holds)."""
        return self.lease_until_ms is not None and self.lease_until_ms < now_ms

    def read(self) -> Task:
        """The task as a read hands it out: a copy, with its life-cycle fields."""
        return self.task.model_copy(
            deep=True,
            update={
                "status": self.status,
                "attempt": self.attempt,
                "lease_until": _at(self.lease_until_ms),
                "batch_id": self.batch_id,
                "armed_by": self.armed_by,
                "created_at": _at(self.created_ms),
                "fired_at": _at(self.fired_ms),
                "finished_at": _at(self.finished_ms),
                "drift_ms": self.drift_ms,
                "drift_corrected_ms": self.drift_corrected_ms,
                "detail": self.detail,
                "late": self.late,
                "first_due_at": _at(self.first_due_ms),
            },
        )

    def candidate(self) -> Candidate:
        """The task as a look for due work hands it out."""
        return Candidate(
            task_id=self.task.task_id,
            due_ms=self.due_ms,
            status=self.status,
            lease_until_ms=self.lease_until_ms,
            misfire_grace_ms=self.task.misfire_grace_ms,
            misfire_policy=self.task.misfire_policy,
            owner=self.armed_by if self.status is TaskStatus.ARMED else None,
        )


@dataclass
class Heartbeat:
    """An executor's heartbeat: alive until when (None: never said), the invocation running it, and whether it
    can never renew again (taken over, or fenced)."""

    alive_until_ms: int | None = None
    invocation: str | None = None
    taken_over: bool = False
    fenced: bool = False

    def alive_at(self, now_ms: int) -> bool:
        return self.alive_until_ms is not None and self.alive_until_ms >= now_ms


def matching(
    tasks: Iterable[Task], statuses: Iterable[TaskStatus] | None, due_from_ms: int | None, due_to_ms: int | None
) -> list[Task]:
    """The tasks with one of ``statuses`` (any, when none is named) due in ``[due_from_ms, due_to_ms)``."""
    wanted = set(statuses or ())
    return [
        t
        for t in tasks
        if (not wanted or t.status in wanted)
        and (due_from_ms is None or t.due_ms >= due_from_ms)
        and (due_to_ms is None or t.due_ms < due_to_ms)
    ]


def check_usage(schedules: dict[str, Schedule], before: Schedule | None, after: Schedule, limits: Limits) -> None:
    """Raise QuotaExceededError when writing ``after`` over ``before`` takes the usage of its tenant's ``schedules``
    past ``limits`` (the caller holds the store's lock: the check and its write are one step)."""
    tenant = split(after.schedule_id)[0]
    if limits is not None and tenant is not None:
        held = held_by(s for key, s in schedules.items() if key.startswith(prefix(tenant)))
        limits.check(held, change_of(before, after))
