"""Quotas per tenant: what one tenant may hold and make Punctual do (:class:`~punctual.config.tenant_map.Quotas`, from
the tenant map). Past a quota a call fails with :class:`QuotaExceededError` naming it, and nothing is stored.

* **active tasks** (PENDING or ARMED, occurrences included) are admitted on every path that makes one active: a
  create (one task, or each of many), a redrive (FAILED back to PENDING), a schedule's first occurrences, and its
  later ones that the chain makes (when the client changes it, and at every poll). A reschedule or a run-now only
  moves a task that is active already: it adds nothing. The count is the store's ``tenant_active_sharded`` index
  (at most :data:`COUNT_TTL_S` old) plus what this process admitted since; a count read afresh adds what this process
  admitted and is still writing. One :class:`QuotaGuard` per process (the API's is shared by all its requests), so
  **creates from one process are exact**: each check-and-add is one step under the tenant's lock, and each create
  holds its admission (counted in a count read afresh too) until its write has landed. (The index itself lags
  its table by DynamoDB's propagation delay, typically well under a second: a count read afresh in that instant
  may miss a create that has just landed. The in-memory store and DynamoDB Local have no such delay.)
  **Across processes** each admits against its own count: at any moment a tenant holds at most its quota
  plus what the *other* processes admitted within the last :data:`COUNT_TTL_S` and the index's lag, and never
  more than the quota times the processes creating for it at once (each admits at most the quota against its own
  view). An exact count across processes would need a counter every task's end writes to, or blocks of admission
  handed back as tasks end: either puts a write on the executor's record of every task (or of every batch, per
  tenant) and needs a repair after a crash between the two writes, a cost on the fire path and a hot item at a
  million tasks a minute, for a quota that bounds a tenant's holding rather than meters it.
* **A schedule's later occurrences past the quota are held back**, not lost and not an error: the chain makes as
  many of a chunk as the tenant has room for (the first ones, in time order), logs the rest at WARNING with the
  quota, and leaves the schedule's cursor at the first one it did not make, so that the next poll tries again (the
  schedule stays in the due index). It resumes when the tenant has room; an occurrence whose grace passed while
  held is skipped, or fired late, as its ``downtime_policy`` says, and counted in the schedule's ``skipped_count``.
  One tenant over its quota never fails the poll for the others.
* **schedules** and **the fire rate a tenant's schedules add up to** are checked and taken in one conditional write
  with the schedule's own (:mod:`punctual.domain.quota`; the DynamoDB store keeps the tenant's usage in an item of
  its own, :mod:`punctual.stores.dynamodb.usage`): parallel creates, resumes and updates cannot pass them. A delete,
  a pause, an end, or an update that slows a schedule down gives back what it held in the same write.
* **retry attempts**: a task's retry policy may not ask for more; the executor never makes more, whatever an
  item says (:func:`punctual.domain.decisions.decide_outcome`'s ``max_attempts``).

Tasks without a tenant (the operator's) have no quota.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from punctual.config.tenant_map import Quotas
from punctual.domain.quota import ScheduleLimits, schedule_rate_per_s
from punctual.domain.retry import RetryPolicy
from punctual.domain.tenancy import split
from punctual.errors import QuotaExceededError
from punctual.stores.ports import ClientPort

COUNT_TTL_S = 5.0  # how long a tenant's count of active tasks is reused (plus this process's creates since)

__all__ = ["COUNT_TTL_S", "QuotaGuard", "TenantAdmission", "check_retry", "schedule_limits", "schedule_rate_per_s"]


def schedule_limits(quotas: Quotas | None) -> ScheduleLimits | None:
    """The schedule quotas a store checks, of a tenant with ``quotas`` (None: no tenant, no limits)."""
    return None if quotas is None else ScheduleLimits(quotas.schedules, quotas.schedule_rate_per_s)


def check_retry(retry: RetryPolicy | None, quotas: Quotas | None) -> None:
    """Refuse a retry policy asking for more attempts than the tenant's quota."""
    if quotas is not None and retry is not None and retry.max_attempts > quotas.retry_attempts:
        raise QuotaExceededError(
            "retry_attempts",
            quotas.retry_attempts,
            f"retry.max_attempts asks for {retry.max_attempts} attempts",
            field="retry.max_attempts",
        )


class QuotaGuard:
    """Admits active tasks against a tenant's ``active_tasks`` quota (one per process; thread-safe).

    Parameters
    ----------
    store : ClientPort
        Where active tasks are counted.
    monotonic : Callable[[], float]
        The clock of the count's cache (injected in tests).
    """

    def __init__(self, store: ClientPort, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._monotonic = monotonic
        self._lock = threading.Lock()  # guards _locks
        self._locks: dict[str, threading.Lock] = {}  # a tenant's: its count is read and changed under it
        self._counts: dict[str, tuple[int, float]] = {}  # tenant -> (active tasks, counted at)
        self._writing: dict[str, int] = {}  # tenant -> tasks admitted whose creation has not ended yet

    @contextlib.contextmanager
    def admitting(self, tenant: str, quotas: Quotas, count: int, *, partial: bool = False) -> Iterator[int]:
        """Room for ``count`` more active tasks of ``tenant`` while the caller makes them in the ``with`` block, or
        QuotaExceededError (``active_tasks``) before it; ``partial``: room for as many as there is (0 included),
        never an error. Yields how many were admitted. Admitted tasks are added to the cached count, and, until the
        block ends, to any count read afresh (the store cannot count a task not yet written)."""
        admitted = self._admit(tenant, quotas, count, writing=True, partial=partial)
        try:
            yield admitted
        finally:
            if admitted > 0:
                with self._tenant_lock(tenant):
                    self._writing[tenant] -= admitted

    def admit_tasks(self, tenant: str, quotas: Quotas, count: int) -> None:
        """Room for ``count`` more active tasks of ``tenant``, or QuotaExceededError (``active_tasks``). Admitted
        tasks are added to the cached count."""
        self._admit(tenant, quotas, count, writing=False, partial=False)

    def _admit(self, tenant: str, quotas: Quotas, count: int, *, writing: bool, partial: bool) -> int:
        if count <= 0:
            return 0
        with self._tenant_lock(tenant):  # one check-and-add at a time per tenant: threads never share a count
            active = self._active(tenant, fresh=False)
            if active + count > quotas.active_tasks:
                active = self._active(tenant, fresh=True)  # the cache may hold tasks that finished since
            admitted = min(count, max(0, quotas.active_tasks - active))
            if admitted < count and not partial:
                raise QuotaExceededError("active_tasks", quotas.active_tasks, f"{active} active tasks and {count} more")
            _, at = self._counts[tenant]
            self._counts[tenant] = (active + admitted, at)
            if writing:
                self._writing[tenant] = self._writing.get(tenant, 0) + admitted
            return admitted

    def _tenant_lock(self, tenant: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(tenant, threading.Lock())

    def _active(self, tenant: str, *, fresh: bool) -> int:
        """The tenant's count (caller holds its lock): the cached one while fresh, else read now."""
        now = self._monotonic()
        cached = self._counts.get(tenant)
        if cached is not None and not fresh and now - cached[1] < COUNT_TTL_S:
            return cached[0]
        active = self._store.count_active(tenant) + self._writing.get(tenant, 0)
        self._counts[tenant] = (active, now)
        return active


class TenantAdmission:
    """Admission of a task id's tenant (:meth:`QuotaGuard.admitting` with the quotas ``quotas_of(task_id)`` names):
    what the client, redrive and the chain call with an id, whoever its tenant. A task without a tenant, or whose
    tenant has no quotas, is admitted whole."""

    def __init__(self, guard: QuotaGuard, quotas_of: Callable[[str], Quotas | None]) -> None:
        self.guard = guard
        self._quotas_of = quotas_of

    def __call__(self, task_id: str, count: int, *, partial: bool = False) -> contextlib.AbstractContextManager[int]:
        """Room for ``count`` more active tasks of ``task_id``'s tenant (:meth:`QuotaGuard.admitting`)."""
        tenant = split(task_id)[0]
        quotas = None if tenant is None else self._quotas_of(task_id)
        if tenant is None or quotas is None:
            return contextlib.nullcontext(count)
        return self.guard.admitting(tenant, quotas, count, partial=partial)
