"""Every store port in memory (:mod:`punctual.stores.ports`): tasks, schedules, heartbeats and the due index in
dictionaries, every call under one lock, so each conditional write is atomic however many threads share the store.
Reads hand out copies; all it holds is readable. The rules are the ports' (:mod:`punctual.stores.ports`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from punctual.config.settings import Settings
from punctual.domain.due_pages import DuePosition, Entry, instant_buckets, still_listed, walk_due_page
from punctual.domain.keys import bucket_start, buckets_between, from_ms
from punctual.domain.model import (
    Armed,
    ArmRequest,
    Candidate,
    DueScan,
    FireRecord,
    Outcome,
    Task,
    TaskStatus,
    Unreadable,
    occurrence_id,
    status_after,
)
from punctual.domain.schedules import Advance, AdvanceResult, Schedule, ScheduleState
from punctual.domain.tenancy import prefix
from punctual.errors import (
    ScheduleConflictError,
    ScheduleNotFoundError,
    ScheduleStateError,
    TaskConflictError,
    TaskNotFoundError,
    TaskStateError,
)
from punctual.stores.ports import ClientPort, DispatchPort, FiringPort, SchedulePort
from punctual_tools.doubles.memory.index import DueIndex, forward
from punctual_tools.doubles.memory.records import Heartbeat, Limits, TaskRecord, check_usage, matching

log = logging.getLogger(__name__)

PENDING, ARMED, FAILED = TaskStatus.PENDING, TaskStatus.ARMED, TaskStatus.FAILED


class InMemoryStore(DispatchPort, FiringPort, ClientPort, SchedulePort):
    """Tasks, schedules, heartbeats and the due index in dictionaries, under one lock (every port, checked as such).
    It is its own record of ports too (:class:`~punctual.stores.ports.Stores`): ``dispatch``, ``firing``,
    ``client`` and ``schedules`` are the store itself.

    ``shard_count`` shards a minute of the due index; ``poll_groups`` split them into ranges, one poller each;
    ``overdue_safety_ms`` is how close to now a group's watermark may come; an ACTIVE schedule is found due
    ``schedule_ahead_ms`` before its cursor. :meth:`from_settings` takes them from validated settings.
    """

    def __init__(
        self,
        shard_count: int = 4,
        *,
        poll_groups: int = 1,
        overdue_safety_ms: int = 180_000,
        schedule_ahead_ms: int = 70_000,
    ) -> None:
        self.shard_count = shard_count
        self.poll_groups = poll_groups
        self.overdue_safety_ms = overdue_safety_ms
        self.schedule_ahead_ms = schedule_ahead_ms
        self._lock = threading.RLock()
        self._tasks: dict[str, TaskRecord] = {}
        self._schedules: dict[str, Schedule] = {}
        self._beats: dict[str, Heartbeat] = {}
        self._index = DueIndex(shard_count, poll_groups)

    @classmethod
    def from_settings(cls, settings: Settings) -> InMemoryStore:
        return cls(
            settings.shard_count,
            poll_groups=settings.poll_groups,
            overdue_safety_ms=settings.overdue_safety_ms,
            schedule_ahead_ms=settings.schedule_ahead_ms,
        )

    # -- the record of ports (punctual.stores.ports.Stores) --------------------------------------------------
    @property
    def dispatch(self) -> InMemoryStore:
        return self

    @property
    def firing(self) -> InMemoryStore:
        return self

    @property
    def client(self) -> InMemoryStore:
        return self

    @property
    def schedules(self) -> InMemoryStore:
        return self

    # -- the due index -----------------------------------------------------------------------------------------
    def _place(self, task_id: str, due_ms: int | None, now_ms: int) -> None:
        self._index.place((False, task_id), due_ms, now_ms)

    def _place_schedule(self, schedule: Schedule, now_ms: int, cleanup: bool = False) -> None:
        """An ACTIVE schedule is due ``schedule_ahead_ms`` before its cursor; one with a cleanup pending, now."""
        due = None
        if cleanup:
            due = now_ms
        elif schedule.state is ScheduleState.ACTIVE and schedule.next_due_ms is not None:
            due = schedule.next_due_ms - self.schedule_ahead_ms
        self._index.place((True, schedule.schedule_id), due, now_ms)

    def group_shards(self, group: int) -> range:
        """The shards poll group ``group`` reads."""
        return self._index.group_shards(group)

    # -- client side -------------------------------------------------------------------------------------------
    def create(self, task: Task, now_ms: int) -> tuple[Task, bool]:
        with self._lock:
            item = self._tasks.get(task.task_id)
            if item is None:
                return self._put(task, now_ms).read(), True
            existing = item.read()
            if item.content_hash == task.content_hash():
                return existing, False
            raise TaskConflictError(task.task_id, existing)

    def _put(self, task: Task, now_ms: int) -> TaskRecord:
        """CREATE's write (an occurrence's too, with its schedule's): a new PENDING task, in the due index."""
        item = self._tasks[task.task_id] = TaskRecord.new(task, now_ms)
        self._place(task.task_id, item.due_ms, now_ms)
        return item

    def get(self, task_id: str) -> Task | None:
        with self._lock:
            item = self._tasks.get(task_id)
            return None if item is None else item.read()

    def get_many(self, task_ids: list[str], unreadable: Unreadable | None = None) -> dict[str, Task]:
        with self._lock:
            return {t: self._tasks[t].read() for t in dict.fromkeys(task_ids) if t in self._tasks}

    def list_tasks(
        self,
        statuses: Iterable[TaskStatus] | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        limit: int | None = None,
        unreadable: Unreadable | None = None,
    ) -> Iterator[Task]:
        with self._lock:
            found = matching([self._tasks[t].read() for t in sorted(self._tasks)], statuses, due_from_ms, due_to_ms)
        yield from found[:limit] if limit is not None else found

    def tenant_page(  # noqa: PLR0913, PLR0917  ClientPort.tenant_page's signature
        self,
        tenant: str,
        statuses: Iterable[TaskStatus] | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        limit: int = 100,
        after: str | None = None,
        unreadable: Unreadable | None = None,
    ) -> tuple[list[Task], str | None]:
        with self._lock:
            ids = sorted(t for t in self._tasks if t.startswith(prefix(tenant)) and (after is None or t > after))
            page = [self._tasks[t].read() for t in ids[:limit]]
        return matching(page, statuses, due_from_ms, due_to_ms), ids[limit - 1] if len(ids) > limit else None

    def due_page(  # noqa: PLR0913  ClientPort.due_page's signature
        self,
        due_from_ms: int | None,
        due_to_ms: int,
        after: str | None,
        limit: int,
        *,
        now_ms: int,
        statuses: Iterable[TaskStatus] | None = None,
    ) -> tuple[list[Task], str | None, int]:
        low, high = due_from_ms if due_from_ms is not None else 0, due_to_ms - 1
        if after is None:
            with self._lock:
                first = self._index.first_bucket()
            if first is None:
                return [], None, 0
            after = DuePosition(bucket_start(max(first, low))).text()

        def read_bucket(minute: int, position: DuePosition | None, needed: int) -> tuple[list[Entry], int]:
            with self._lock:
                listed = self._index.tasks_listed(minute, low, high)
            return [e for e in listed if position is None or position.precedes(e)], len(listed)

        entries, cursor, read = walk_due_page(low, max(high, now_ms), after, limit, read_bucket)
        found = self.get_many([task_id for _, task_id in entries])
        return still_listed(entries, found, statuses), cursor, read

    def due_instants(
        self, due_from_ms: int | None, due_to_ms: int, *, now_ms: int, limit: int, max_buckets: int
    ) -> tuple[list[int], bool]:
        low, high = due_from_ms if due_from_ms is not None else 0, due_to_ms - 1
        with self._lock:
            first = self._index.first_bucket()
            if first is None:
                return [], True
            buckets, complete = instant_buckets(max(first, bucket_start(low)), max(high, now_ms), max_buckets)
            dues = [due for minute in buckets for due, _ in self._index.tasks_listed(minute, low, high)]
        return (dues[:limit], False) if len(dues) > limit else (dues, complete)

    def count_active(self, tenant: str) -> int:
        with self._lock:
            return sum(1 for is_schedule, key in self._index if not is_schedule and key.startswith(prefix(tenant)))

    def _changeable(self, task_id: str, now_ms: int, change: str) -> TaskRecord:
        """The task a CANCEL or RESCHEDULE may change at ``now_ms`` (PENDING, or ARMED past its lease), or the
        error saying why not."""
        item = self._tasks.get(task_id)
        if item is None:
            raise TaskNotFoundError(task_id)
        if item.status is PENDING or (item.status is ARMED and item.lease_ended(now_ms)):
            return item
        task = item.read()
        why = "it is armed and about to fire" if task.status is ARMED else f"it is {task.status}"
        raise TaskStateError(task_id, change, why, task=task)

    def cancel(self, task_id: str, now_ms: int) -> Task:
        with self._lock:
            item = self._changeable(task_id, now_ms, "cancel")
            item.status, item.finished_ms, item.lease_until_ms, item.batch_id = TaskStatus.CANCELLED, now_ms, None, None
            self._place(task_id, None, now_ms)
            return item.read()

    def reschedule(self, task_id: str, due_ms: int, now_ms: int) -> Task:
        with self._lock:
            item = self._changeable(task_id, now_ms, "reschedule")
            item.move(due_ms)
            item.content_hash = item.task.content_hash()
            item.status, item.lease_until_ms, item.batch_id, item.armed_by = PENDING, None, None, None
            self._place(task_id, due_ms, now_ms)
            return item.read()

    # -- poller and fast path ----------------------------------------------------------------------------------
    def find_due(
        self,
        now_ms: int,
        until_ms: int,
        out_of_time: Callable[[], bool] | None = None,
        group: int = 0,
        on_found: Callable[[list[Candidate]], None] | None = None,
    ) -> DueScan:
        """The group's share of the due index, a minute at a time from its watermark to ``until_ms``; ``on_found``
        is called outside the lock, after each minute that held armable tasks."""
        shards = self.group_shards(group)
        safety = bucket_start(now_ms - self.overdue_safety_ms)
        with self._lock:
            minutes = buckets_between(self._index.start(group, now_ms - self.overdue_safety_ms), until_ms)
        found_in: list[int] = []
        first_unread: list[int] = []
        armable: list[Candidate] = []
        schedules: list[str] = []
        for minute in minutes:
            if out_of_time is not None and out_of_time():
                first_unread.append(minute)
                break
            with self._lock:
                entries = self._index.entries(minute, until_ms, shards)
                schedules.extend(key[1] for _, key in entries if key[0])
                found = (self._tasks[key[1]] for _, key in entries if not key[0])
                ready = [record.candidate() for record in found if self._armable(record, now_ms)]
            if entries:
                found_in.append(minute)
            armable.extend(ready)
            if ready and on_found is not None:
                on_found(ready)
        watermark = min([safety, *found_in, *first_unread])
        with self._lock:
            forward(self._index.watermarks, group, watermark)
        return DueScan(
            candidates=armable,
            watermark_ms=watermark,
            buckets=len(minutes),
            queries=len(minutes) * len(shards),
            recovered=sum(1 for c in armable if c.status is not PENDING),
            complete=not first_unread,
            schedules=schedules,
        )

    def _armable(self, item: TaskRecord, now_ms: int) -> bool:
        """PENDING; or ARMED under a lease that ended, or by an executor whose heartbeat ended (or that has none)."""
        if item.status is PENDING or item.lease_ended(now_ms):
            return True
        beat = self._beats.get(item.armed_by or "")
        return item.status is ARMED and item.armed_by is not None and (beat is None or not beat.alive_at(now_ms))

    def mark_polled(self, now_ms: int, group: int = 0) -> bool:
        self.group_shards(group)
        with self._lock:
            return forward(self._index.polled, group, now_ms)

    def last_polls(self) -> list[int | None]:
        with self._lock:
            return [self._index.polled.get(group) for group in range(self.poll_groups)]

    # -- executor ----------------------------------------------------------------------------------------------
    def heartbeat(self, executor_id: str, now_ms: int, alive_until_ms: int, invocation: str | None = None) -> bool:
        with self._lock:
            beat = self._beats.setdefault(executor_id, Heartbeat())
            if beat.taken_over or beat.fenced:
                return False
            beat.alive_until_ms = alive_until_ms
            beat.invocation = invocation if invocation is not None else beat.invocation
            return True

    def fence(self, executor_id: str, now_ms: int, invocation: str | None = None) -> bool:
        with self._lock:
            beat = self._beats.get(executor_id)
            if beat is None or not beat.alive_at(now_ms) or beat.taken_over:
                return False
            if invocation is not None and beat.invocation != invocation:
                return False
            beat.alive_until_ms, beat.fenced = now_ms - 1, True
        log.warning("executor %s: fenced (known dead): its tasks are taken over from now", executor_id)
        return True

    def fence_live_executors(self, now_ms: int) -> list[str]:
        with self._lock:
            return [e for e, beat in list(self._beats.items()) if beat.alive_at(now_ms) and self.fence(e, now_ms)]

    def arm_many(
        self, requests: list[ArmRequest], batch_id: str, executor_id: str, now_ms: int, invocation: str | None = None
    ) -> list[Armed | None]:
        with self._lock:
            return [self._arm(r, batch_id, executor_id, now_ms, invocation) for r in requests]

    def _arm(
        self, request: ArmRequest, batch_id: str, executor_id: str, now_ms: int, invocation: str | None
    ) -> Armed | None:
        """ARM one request (a ``held`` one is taken over first), else TAKEOVER it."""
        item = self._tasks.get(request.task_id)
        if item is None:
            return None
        if request.held and (
            taken := self._take_over(
                item, request, batch_id=batch_id, executor_id=executor_id, now_ms=now_ms, invocation=invocation
            )
        ):
            return taken
        if item.status is PENDING and item.due_ms == request.due_ms:
            item.status, item.armed_by, item.lease_until_ms = ARMED, executor_id, request.lease_until_ms
            item.batch_id, item.attempt = batch_id, item.attempt + 1
            return Armed(task=item.read())
        if item.held_by(executor_id):
            return Armed(task=item.read())  # a retried arm finds its own change
        return (
            None
            if request.held
            else self._take_over(
                item, request, batch_id=batch_id, executor_id=executor_id, now_ms=now_ms, invocation=invocation
            )
        )

    def _take_over(  # noqa: PLR0913  past the item and its request, the parameters are keyword-only: each named where given
        self,
        item: TaskRecord,
        request: ArmRequest,
        *,
        batch_id: str,
        executor_id: str,
        now_ms: int,
        invocation: str | None,
    ) -> Armed | None:
        """TAKEOVER a task another executor holds ARMED (at the requested due time) if that executor is dead (it is
        marked taken over: it can never renew) or the task's lease ended; an owner that ran this same
        ``invocation`` is fenced first. The taken task says until when its old owner may have fired it."""
        owner = item.armed_by
        if item.status is not ARMED or not owner or owner == executor_id or item.due_ms != request.due_ms:
            return None
        beat = self._beats.get(owner)
        until = None if beat is None else beat.alive_until_ms
        if invocation is not None and (until or 0) >= now_ms and self.fence(owner, now_ms, invocation):
            until = now_ms - 1
        if until is None or until < now_ms:
            bound = now_ms if until is None else until
            self._beats.setdefault(owner, Heartbeat()).taken_over = True
        elif item.lease_until_ms is not None and item.lease_ended(now_ms):
            bound = item.lease_until_ms
        else:
            return None
        item.armed_by, item.lease_until_ms, item.batch_id = executor_id, request.lease_until_ms, batch_id
        item.attempt += 1
        return Armed(task=item.read(), taken_over_until_ms=bound)

    def record_many(self, executor_id: str, records: list[FireRecord]) -> list[bool]:
        with self._lock:
            return [self._record(executor_id, r) for r in records]

    def _record(self, executor_id: str, record: FireRecord) -> bool:
        """RECORD if this executor holds the task ARMED: the status its outcome sets (a RETRY puts it back to
        PENDING, due at ``retry_due_ms``); a retried write that finds its own change counts as done."""
        item = self._tasks.get(record.task_id)
        if item is None:
            return False
        retry_due = record.retry_due_ms
        if record.outcome is Outcome.RETRY and retry_due is None:
            raise ValueError(f"task {record.task_id}: a RETRY record needs the instant of its next try")
        status = status_after(record.outcome)
        if not item.held_by(executor_id):
            if record.outcome is Outcome.RETRY:
                return item.status is PENDING and item.armed_by == executor_id and item.due_ms == retry_due
            return item.status is status and item.armed_by == executor_id
        for name in ("fired_ms", "drift_ms", "drift_corrected_ms", "detail"):
            if getattr(record, name) is not None:
                setattr(item, name, getattr(record, name))
        item.lease_until_ms = None
        if record.outcome is not Outcome.RETRY or retry_due is None:
            item.status, item.finished_ms, item.late = status, record.finished_ms, item.late or record.late
            self._place(record.task_id, None, record.finished_ms)
            return True
        item.status, item.batch_id = PENDING, None
        if item.first_due_ms is None:
            item.first_due_ms = record.first_due_ms if record.first_due_ms is not None else retry_due
        item.move(retry_due)
        self._place(record.task_id, retry_due, record.finished_ms)
        return True

    def release(self, task_id: str, executor_id: str) -> bool:
        with self._lock:
            item = self._tasks.get(task_id)
            if item is None or not item.held_by(executor_id):
                return False
            item.status, item.lease_until_ms, item.batch_id, item.armed_by = PENDING, None, None, None
            return True

    # -- redrive -----------------------------------------------------------------------------------------------
    def redrive_many(self, task_ids: list[str], now_ms: int) -> list[bool]:
        with self._lock:
            return [self._redrive(t, now_ms) for t in task_ids]

    def _redrive(self, task_id: str, now_ms: int) -> bool:
        item = self._tasks.get(task_id)
        if item is None or item.status is not FAILED:  # a retried redrive finds its own change
            return item is not None and item.status is PENDING and item.redriven_ms == now_ms
        item.status, item.attempt, item.redriven_ms, item.late = PENDING, 0, now_ms, False
        item.finished_ms = item.lease_until_ms = item.first_due_ms = None
        item.batch_id = item.armed_by = None
        item.move(now_ms)
        self._place(task_id, now_ms, now_ms)
        return True

    # -- recurring schedules -----------------------------------------------------------------------------------
    def _taken(self, task: Task, version: int) -> bool:
        """Whether an occurrence's id is held: by any task but one an older version made that was CANCELLED."""
        item = self._tasks.get(task.task_id)
        if item is None:
            return False
        older = item.task.schedule_version is not None and item.task.schedule_version < version
        return not (item.status is TaskStatus.CANCELLED and older)

    def create_schedule(
        self, schedule: Schedule, occurrences: list[Task], now_ms: int, limits: Limits = None
    ) -> tuple[Schedule, bool]:
        schedule_id = schedule.schedule_id
        with self._lock:
            existing = self._schedules.get(schedule_id)
            if existing is None:
                check_usage(self._schedules, None, schedule, limits)
                if any(self._taken(t, schedule.version) for t in occurrences):
                    raise ScheduleStateError(schedule_id, "create", "an occurrence's id is taken; nothing was stored")
                at = from_ms(now_ms)
                stored = schedule.model_copy(deep=True, update={"created_at": at, "updated_at": at, "cleanup": False})
                self._schedules[schedule_id] = stored
                self._place_schedule(stored, now_ms)
                for task in occurrences:
                    self._put(task, now_ms)
                return stored.model_copy(deep=True), True
            found = existing.model_copy(deep=True)
        if found.state is ScheduleState.DELETED:
            raise ScheduleConflictError(schedule_id, found, deleted=True)
        if found.definition() == schedule.definition():
            return found, False
        raise ScheduleConflictError(schedule_id, found)

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        with self._lock:
            schedule = self._schedules.get(schedule_id)
            return None if schedule is None else schedule.model_copy(deep=True)

    def list_schedules(self, id_prefix: str | None = None, unreadable: Unreadable | None = None) -> Iterator[Schedule]:
        with self._lock:
            ids = [s for s in sorted(self._schedules) if id_prefix is None or s.startswith(id_prefix)]
            found = [self._schedules[s].model_copy(deep=True) for s in ids]
        yield from found

    def quarantine_schedule(self, schedule_id: str, detail: str, now_ms: int) -> bool:
        with self._lock:
            if not self._index.holds((True, schedule_id)):
                return False
            self._index.place((True, schedule_id), None, now_ms)
        log.error(
            "schedule %s: %s; taken out of the due index", schedule_id, detail, extra={"schedule_id": schedule_id}
        )
        return True

    def advance_schedule(
        self, schedule: Schedule, step: Advance, occurrences: list[Task], now_ms: int
    ) -> AdvanceResult:
        with self._lock:
            stored = self._schedules.get(schedule.schedule_id)
            if (
                stored is None
                or schedule.next_due_ms is None
                or (stored.version, stored.next_due_ms, stored.state)
                != (schedule.version, schedule.next_due_ms, ScheduleState.ACTIVE)
            ):
                return AdvanceResult(done=False)
            blocked = [t.task_id for t in occurrences if self._taken(t, schedule.version)]
            if blocked:
                return AdvanceResult(done=False, blocked=blocked)
            moved = stored.model_copy(
                update={
                    "next_due_ms": step.next_due_ms,
                    "state": ScheduleState.ENDED if step.next_due_ms is None else stored.state,
                    "created_count": stored.created_count + len(occurrences),
                    "skipped_count": stored.skipped_count + step.skipped,
                    "updated_at": from_ms(now_ms),
                }
            )
            self._schedules[schedule.schedule_id] = moved
            if not schedule.cleanup:  # while a cleanup is pending, the schedule stays due now
                self._place_schedule(moved, now_ms)
            for task in occurrences:
                self._put(task, now_ms)
            return AdvanceResult(done=True)

    def change_schedule(
        self, schedule: Schedule, changes: dict[str, Any], now_ms: int, *, cleanup: bool, limits: Limits = None
    ) -> Schedule:
        changed = Schedule.model_validate({**schedule.model_dump(), **changes, "version": schedule.version + 1})
        with self._lock:
            stored = self._schedules.get(schedule.schedule_id)
            if stored is None:
                raise ScheduleNotFoundError(schedule.schedule_id)
            if stored.version != schedule.version:
                raise ScheduleStateError(schedule.schedule_id, "change", "it changed meanwhile; read it again")
            check_usage(self._schedules, stored, changed, limits)
            kept = {k: getattr(stored, k) for k in ("created_count", "skipped_count", "created_at")}
            at = {"updated_at": from_ms(now_ms), "cleanup": cleanup}
            self._schedules[schedule.schedule_id] = changed.model_copy(deep=True, update={**kept, **at})
            self._place_schedule(changed, now_ms, cleanup=cleanup)
        return changed.model_copy(deep=True, update=at)

    def finish_cleanup(self, schedule: Schedule, now_ms: int) -> bool:
        with self._lock:
            stored = self._schedules.get(schedule.schedule_id)
            if stored is None or stored.version != schedule.version:
                return False
            self._schedules[schedule.schedule_id] = stored.model_copy(update={"cleanup": False})
            self._place_schedule(schedule, now_ms)
            return True

    def schedule_occurrence_ids(
        self, schedule_id: str, from_ms_: int | None = None, limit: int | None = None
    ) -> list[str]:
        low = occurrence_id(schedule_id, max(0, from_ms_)) if from_ms_ is not None else f"{schedule_id}@"
        with self._lock:
            ids = sorted(
                t
                for t, item in self._tasks.items()
                if item.task.schedule_id == schedule_id and low <= t <= f"{schedule_id}@~"
            )
        return ids[:limit] if limit is not None else ids
