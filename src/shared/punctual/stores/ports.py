"""The store ports, named for their users and in the domain's words. Services import these Protocols, never an
implementation, and each takes the ports it uses:

* :class:`DispatchPort`: what the poller and the fast path need: find due work, note a poll's start, read the last;
* :class:`FiringPort`: what the executor needs: heartbeats and fences, arm, record, release, and reading what it holds;
* :class:`ClientPort`: what the client, the API, redrive, quotas and the schedules' chain need of tasks: create, read,
  list, page and count a tenant's, page the due index, cancel, reschedule, redrive;
* :class:`SchedulePort`: recurring schedules, their cursor and their changes (the client and the poller's chain).

:class:`Stores` is the record of one store's ports, each its own part, that the wiring builds and hands out.
Two implementations: :class:`punctual.stores.dynamodb.DynamoStores` (AWS, DynamoDB Local, moto), each port a part of
the adapter, and the in-memory double of the tooling, ``punctual_tools.doubles.memory.InMemoryStore`` (one object,
every port, for tests that need a store but not DynamoDB). An implementation is done when it passes the contract
suites (``tests/contract``), which pin every rule below.

Life-cycle rules every implementation keeps (each change is atomic and conditional on the task's state):

* **create** stores a PENDING task; the same id with equal content is a no-op, with other content a conflict.
* **find due**: the poller and the fast path only read; they write nothing per task. What they find is
  PENDING, or ARMED by an executor found dead (its heartbeat lapsed), or held under a per-task lease that ended.
* **arm** (executor): a task still due when the dispatcher saw it becomes ARMED by this executor, from PENDING;
  ``attempt`` goes up by one. Arming a task ARMED by another executor
  is a **takeover**, allowed only when that executor's heartbeat has lapsed (checked in the same atomic write)
  or the task's own lease ended: the new owner learns until when the old one may have fired it. Two pollers, a
  duplicate delivery, the fast path racing a poll: all but one arm lose.
* **heartbeat**: an executor holding armed tasks renews its liveness (``alive_until``) while it runs; once
  taken over it can never renew (so it can never fire a task taken from it: it fires only within its lease).
* **record**: ARMED by this executor becomes its outcome (SUCCEEDED, FAILED, MISSED), or PENDING again due at
  the next try (a retry). **release**: ARMED by this executor goes back to PENDING (a stop before firing).
* **schedules** (recurring): a schedule and its first occurrences are stored together; **advance** creates
  the next occurrences and moves the schedule's cursor in one atomic write, conditional on the cursor and the
  version read (two callers never both create, an occurrence's id is its instant); a **change** (pause,
  resume, update, delete) is conditional on the version read and raises it by one. An ACTIVE schedule is in
  the due index from ``schedule_ahead`` before its cursor (a look for due work names it among its
  ``schedules``), one whose change left a cleanup pending from the change on; others are not.
* **schedule usage**: a tenant's schedules hold its ``schedules`` and ``schedule_rate_per_s`` quotas
  (:mod:`punctual.domain.quota`); every write that changes what a schedule holds (create, change, an advance that
  ends it) changes the tenant's usage in the same atomic step. A write given ``limits`` that would take the usage
  past them raises QuotaExceededError and writes nothing; a write that only releases never fails for it.
* **redrive**: FAILED becomes PENDING, due now, attempt 0. **cancel** / **reschedule**: only while PENDING,
  or ARMED with an expired lease.

A lease (a task's ``lease_until``, an executor's ``alive_until``) still holds at its instant and has ended one
millisecond later. A task is found in the due index under the minute of its due time or, if written later than
that, of when it was written; each poll group keeps a watermark before which its share holds no active task.

A write whose response was lost and that is retried counts as done when the task already shows it (the same
owner and target state): callers get the same answer as for the first attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from punctual.domain.model import Armed, ArmRequest, Candidate, DueScan, FireRecord, Task, TaskStatus, Unreadable
from punctual.domain.quota import ScheduleLimits
from punctual.domain.schedules import Advance, AdvanceResult, Schedule


class DispatchPort(Protocol):
    """What the poller and the fast path need: due work, each poll's start noted and read back."""

    def find_due(
        self,
        now_ms: int,
        until_ms: int,
        out_of_time: Callable[[], bool] | None = None,
        group: int = 0,
        on_found: Callable[[list[Candidate]], None] | None = None,
    ) -> DueScan:
        """The armable tasks due at or before ``until_ms``, overdue ones included however old, each once, among
        poll group ``group``'s share of the tasks (all of them with one group; the groups' shares are disjoint
        and together cover every task). When ``out_of_time()`` turns true it stops early: what it did not reach
        is found by the next call. ``on_found(part)`` is handed each part of the result as soon as it is known
        (each task in one part), before the rest is read. It also names the schedules the due index holds up to
        ``until_ms`` (:class:`SchedulePort`), whose next occurrences are due to be made."""
        ...

    def mark_polled(self, now_ms: int, group: int = 0) -> bool:
        """Note that a poll of group ``group`` starts at ``now_ms``, before it reads anything (never moving the noted
        start back: False when a later one is noted)."""
        ...

    def last_polls(self) -> list[int | None]:
        """When the last poll of each group started, as :meth:`mark_polled` noted it, one entry a group (None: not
        known), read consistently: the fast path reads it to tell when the next poll comes."""
        ...


class FiringPort(Protocol):
    """What the executor needs: its heartbeat and fences, arming, recording, releasing, and reading the
    tasks it holds. Every ``*_many`` call answers per item, in the order given."""

    def heartbeat(self, executor_id: str, now_ms: int, alive_until_ms: int, invocation: str | None = None) -> bool:
        """Renew ``executor_id``'s liveness to ``alive_until_ms`` (noting the ``invocation`` running it): False once
        it has been taken over from or fenced."""
        ...

    def fence(self, executor_id: str, now_ms: int, invocation: str | None = None) -> bool:
        """An executor known to be dead is alive until now at the latest and can never renew (with
        ``invocation``: only if it ran that invocation). False when there was no live heartbeat to fence."""
        ...

    def fence_live_executors(self, now_ms: int) -> list[str]:
        """Fence every executor whose heartbeat is alive (all are known dead: a local restart); which."""
        ...

    def arm_many(
        self, requests: list[ArmRequest], batch_id: str, executor_id: str, now_ms: int, invocation: str | None = None
    ) -> list[Armed | None]:
        """ARM each request for ``executor_id`` (taking over from dead executors): the armed task, or None where
        another owner holds it, it changed (cancelled, rescheduled, done) or it cannot be read."""
        ...

    def get_many(self, task_ids: list[str], unreadable: Unreadable | None = None) -> dict[str, Task]:
        """The tasks that exist among ``task_ids`` (strongly consistent); one that cannot be read is left out and
        counted in ``unreadable``."""
        ...

    def record_many(self, executor_id: str, records: list[FireRecord]) -> list[bool]:
        """RECORD each outcome (a RETRY is due again at its ``retry_due_ms``): False where this executor no
        longer owns the task."""
        ...

    def release(self, task_id: str, executor_id: str) -> bool:
        """RELEASE a task this executor armed and will not fire (ARMED → PENDING)."""
        ...


class ClientPort(Protocol):
    """Tasks for the client and the API, redrive, quotas and the schedules' chain. Every ``*_many`` call answers per
    item, in the order given."""

    def create(self, task: Task, now_ms: int) -> tuple[Task, bool]:
        """Store a new PENDING task; returns it and whether it was created now (False: an equal task existed).
        Raises :class:`~punctual.errors.TaskConflictError` when the id exists with other content."""
        ...

    def get(self, task_id: str) -> Task | None:
        """The task as stored now (a strongly consistent read), or None."""
        ...

    def get_many(self, task_ids: list[str], unreadable: Unreadable | None = None) -> dict[str, Task]:
        """The tasks that exist among ``task_ids`` (strongly consistent); one that cannot be read is left out and
        counted in ``unreadable``."""
        ...

    def list_tasks(
        self,
        statuses: Iterable[TaskStatus] | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        limit: int | None = None,
        unreadable: Unreadable | None = None,
    ) -> Iterator[Task]:
        """Tasks with one of ``statuses`` and ``due_from_ms <= due < due_to_ms`` (admin use, not the hot path); an
        item that cannot be read is left out and counted in ``unreadable``."""
        ...

    def tenant_page(  # noqa: PLR0913, PLR0917  a page's filters, as list_tasks names them, and where it starts
        self,
        tenant: str,
        statuses: Iterable[TaskStatus] | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        limit: int = 100,
        after: str | None = None,
        unreadable: Unreadable | None = None,
    ) -> tuple[list[Task], str | None]:
        """One page of a tenant's tasks (ids ``"<tenant>/..."``) in id order, from after the id ``after``: those
        among the next ``limit`` of its items that match the filters (so a page may hold fewer, even none), and
        the id the next page starts after (None: no more). Reads only the tenant's items; one that cannot be read
        is left out and counted in ``unreadable``."""
        ...

    def due_page(  # noqa: PLR0913  a page's due range and cursor, and the page's keyword-only reading
        self,
        due_from_ms: int | None,
        due_to_ms: int,
        after: str | None,
        limit: int,
        *,
        now_ms: int,
        statuses: Iterable[TaskStatus] | None = None,
    ) -> tuple[list[Task], str | None, int]:
        """One page of the active tasks due in ``[due_from_ms, due_to_ms)``, read from the due index (never a scan):
        in the order of :mod:`punctual.domain.due_pages` (by minute bucket, then due and id: a task written after
        its due minute comes with the minute it was written in), from the cursor ``after`` or else from the oldest
        bucket that may hold an active task (the watermark; ``due_from_ms``'s if later) through the bucket of
        ``max(due_to_ms - 1, now_ms)``; each task as stored now (strongly consistent). The index is eventually
        consistent: a task it lists that is no longer one of ``statuses`` (default PENDING and ARMED), or no longer
        due when the entry says, is left out (so a page may hold fewer than ``limit``, even none). Returns the tasks,
        the next page's cursor (None: no more) and how many index entries were read. A page reads at most
        ``limit`` entries a shard of each bucket (more only when entries share a due instant) and at most an hour
        of buckets; the cursor goes on from where it stopped."""
        ...

    def due_instants(
        self, due_from_ms: int | None, due_to_ms: int, *, now_ms: int, limit: int, max_buckets: int
    ) -> tuple[list[int], bool]:
        """The due instants of the due index's entries due in ``[due_from_ms, due_to_ms)`` (keys only: no task is
        read, so a finished task the index still lists a moment is counted), at most ``limit`` of them, read from the
        buckets :meth:`due_page` would read, the latest ``max_buckets`` of them at most; and whether that was all of
        them (False: ``limit`` or ``max_buckets`` cut the read short)."""
        ...

    def count_active(self, tenant: str) -> int:
        """How many of ``tenant``'s tasks (occurrences included) are PENDING or ARMED, as the store's index saw
        them a moment ago (eventually consistent: a task created or finished just now may not be counted yet)."""
        ...

    def cancel(self, task_id: str, now_ms: int) -> Task:
        """CANCEL; raises TaskNotFoundError, or TaskStateError (with the task as it was) when armed or done."""
        ...

    def reschedule(self, task_id: str, due_ms: int, now_ms: int) -> Task:
        """Move a changeable task to ``due_ms``; it is PENDING again. Errors as for :meth:`cancel`."""
        ...

    def redrive_many(self, task_ids: list[str], now_ms: int) -> list[bool]:
        """REDRIVE each FAILED task: PENDING, due now, attempt 0. False for a task that is not FAILED."""
        ...


class SchedulePort(Protocol):
    """Recurring schedules (:mod:`punctual.domain.schedules`, :mod:`punctual.scheduling.chain`): a schedule's
    occurrences are tasks of the :class:`ClientPort` beside it, created with the schedule's writes in one atomic
    step."""

    def create_schedule(
        self, schedule: Schedule, occurrences: list[Task], now_ms: int, limits: ScheduleLimits | None = None
    ) -> tuple[Schedule, bool]:
        """Store a new schedule with its first occurrences (at most 98), atomically; idempotent on an equal
        definition (False: it existed). Raises ScheduleConflictError for another definition, and
        QuotaExceededError when the schedule takes its tenant's usage past ``limits`` (nothing is stored)."""
        ...

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        """The schedule as stored now (strongly consistent), or None."""
        ...

    def list_schedules(self, id_prefix: str | None = None, unreadable: Unreadable | None = None) -> Iterator[Schedule]:
        """Every schedule, or those whose id starts with ``id_prefix`` (a tenant's: ``"<tenant>/"``); one that
        cannot be read is left out and counted in ``unreadable``."""
        ...

    def quarantine_schedule(self, schedule_id: str, detail: str, now_ms: int) -> bool:
        """Take a schedule item that cannot be read out of the due index, keeping ``detail``; never raises."""
        ...

    def advance_schedule(
        self, schedule: Schedule, step: Advance, occurrences: list[Task], now_ms: int
    ) -> AdvanceResult:
        """Create ``occurrences`` and move the cursor to ``step.next_due_ms``, atomically, if the schedule is still
        as read (version, cursor, ACTIVE)."""
        ...

    def change_schedule(
        self,
        schedule: Schedule,
        changes: dict[str, Any],
        now_ms: int,
        *,
        cleanup: bool,
        limits: ScheduleLimits | None = None,
    ) -> Schedule:
        """Write ``changes`` one version up, if the schedule is still at the version read; QuotaExceededError
        when they take its tenant's usage past ``limits`` (nothing is written)."""
        ...

    def finish_cleanup(self, schedule: Schedule, now_ms: int) -> bool:
        """Clear the cleanup flag of ``schedule`` (at the version read)."""
        ...

    def schedule_occurrence_ids(
        self, schedule_id: str, from_ms_: int | None = None, limit: int | None = None
    ) -> list[str]:
        """The schedule's occurrences' ids in due order (eventually consistent)."""
        ...


class Stores(Protocol):
    """One store's ports, each its own part: what the wiring builds and hands to each service the ports it uses."""

    @property
    def dispatch(self) -> DispatchPort: ...

    @property
    def firing(self) -> FiringPort: ...

    @property
    def client(self) -> ClientPort: ...

    @property
    def schedules(self) -> SchedulePort: ...
