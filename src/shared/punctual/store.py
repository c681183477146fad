"""The store port: what the poller, the fast path, the executor, the client and redrive need of a task store,
in the domain's words. Services import this Protocol, never an implementation.

The one implementation today is :class:`punctual.dynamodb.DynamoTaskStore` (AWS, DynamoDB Local, moto). A new
one is done when it passes the contract suite (``tests/contract``), which pins every rule below.

Life-cycle rules every implementation keeps (each change is atomic and conditional on the task's state):

* **create** stores a PENDING task; the same id with equal content is a no-op, with other content a conflict.
* **claim** (poller or fast path): PENDING, or CLAIMED/ARMED whose lease ended (``lease_until_ms < now``), and
  still due when the claimer saw it, becomes CLAIMED by a batch for a lease; ``attempt`` goes up by one.
* **miss**: a claimable task past its misfire grace becomes MISSED without firing.
* **arm** (executor): CLAIMED by exactly this batch becomes ARMED by this executor (a duplicate delivery, a
  re-claim, a cancel or a reschedule makes it lose).
* **record**: ARMED by this executor becomes its outcome (SUCCEEDED, FAILED, MISSED), or PENDING again due at
  the next try (a retry). **release**: ARMED by this executor goes back to PENDING (a stop before firing).
* **redrive**: FAILED becomes PENDING, due now, attempt 0. **cancel** / **reschedule**: only while PENDING,
  CLAIMED, or ARMED with an expired lease.

A write whose response was lost and that is retried counts as done when the task already shows it (the same
owner and target state): callers get the same answer as for the first attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from .model import Candidate, DueScan, FireRecord, Task, TaskStatus


class TaskStore(Protocol):
    """Tasks and their life cycle. Every ``*_many`` call answers per item, in the order given."""

    # -- client ------------------------------------------------------------------------------------------
    def create(self, task: Task, now_ms: int) -> tuple[Task, bool]:
        """Store a new PENDING task; returns it and whether it was created now (False: an equal task existed).
        Raises :class:`~punctual.errors.TaskConflictError` when the id exists with other content."""
        ...

    def get(self, task_id: str) -> Task | None:
        """The task as stored now (a strongly consistent read), or None."""
        ...

    def get_many(self, task_ids: list[str]) -> dict[str, Task]:
        """The tasks that exist among ``task_ids`` (strongly consistent)."""
        ...

    def list_tasks(self, statuses: Iterable[TaskStatus] | None = None, due_from_ms: int | None = None,
                   due_to_ms: int | None = None, limit: int | None = None) -> Iterator[Task]:
        """Tasks with one of ``statuses`` and ``due_from_ms <= due < due_to_ms`` (admin use, not the hot path)."""
        ...

    def cancel(self, task_id: str, now_ms: int) -> Task:
        """CANCEL; raises TaskNotFoundError, or TaskStateError (with the task as it was) when armed or done."""
        ...

    def reschedule(self, task_id: str, due_ms: int, now_ms: int) -> Task:
        """Move a changeable task to ``due_ms``; it is PENDING again. Errors as for :meth:`cancel`."""
        ...

    # -- poller and fast path ----------------------------------------------------------------------------
    def find_due(self, now_ms: int, until_ms: int) -> DueScan:
        """The active tasks due at or before ``until_ms``, overdue ones included however old, each once."""
        ...

    def claim_many(self, claims: list[tuple[Candidate, str]], poller_id: str, now_ms: int,
                   lease_ms: int) -> list[bool]:
        """CLAIM each ``(candidate, batch_id)`` for ``lease_ms``: whether this claimer now owns it."""
        ...

    def mark_missed_many(self, missed: list[tuple[Candidate, str]], now_ms: int) -> list[bool]:
        """MISS each claimable ``(candidate, detail)``: whether it is now MISSED by this call."""
        ...

    # -- executor ----------------------------------------------------------------------------------------
    def arm_many(self, leases: list[tuple[str, int]], batch_id: str, executor_id: str) -> list[Task | None]:
        """ARM each ``(task_id, lease_until_ms)`` claimed by ``batch_id``: the armed task, or None if it lost."""
        ...

    def record_many(self, executor_id: str, records: list[FireRecord]) -> list[bool]:
        """RECORD each outcome (a record with ``retry_due_ms`` set is a RETRY): False where this executor no
        longer owns the task."""
        ...

    def release(self, task_id: str, executor_id: str) -> bool:
        """RELEASE a task this executor armed and will not fire (ARMED → PENDING)."""
        ...

    # -- redrive -----------------------------------------------------------------------------------------
    def redrive_many(self, task_ids: list[str], now_ms: int) -> list[bool]:
        """REDRIVE each FAILED task: PENDING, due now, attempt 0. False for a task that is not FAILED."""
        ...
