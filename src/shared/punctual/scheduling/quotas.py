"""Quotas per tenant: what one tenant may hold and make Punctual do (:class:`~punctual.config.tenant_map.Quotas`, from
the tenant map), checked when a task or schedule is created or changed. Past a quota the call fails with
:class:`QuotaExceededError` naming it, and nothing is stored.

* **active tasks**: counted from the store's ``tenant_active`` index (PENDING and ARMED only), a count at most
  :data:`COUNT_TTL_S` old plus what this process created since; a count read afresh adds what this process
  admitted and is still writing. The count is eventually consistent and each
  process keeps its own, so callers creating at once in many processes may pass the quota by what they create
  within that window: it bounds a tenant's holding, it is no exact meter.
* **schedules** and **the fire rate a tenant's schedules add up to**: read from the tenant's schedules when one is
  created, changed or resumed (a ``rate(...)`` counts its own rate, a ``cron(...)`` one a minute, its finest
  step; an ``at(...)`` none).
* **retry attempts**: a task's retry policy may not ask for more; the executor never makes more, whatever an
  item says (:func:`punctual.domain.decisions.decide_outcome`'s ``max_attempts``).

Tasks without a tenant (the operator's) have no quota.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from punctual.config.tenant_map import Quotas
from punctual.domain.recurrence import At, Rate, parse_expression
from punctual.domain.retry import RetryPolicy
from punctual.domain.schedules import Schedule, ScheduleState
from punctual.domain.tenancy import prefix
from punctual.errors import QuotaExceededError
from punctual.stores.ports import Store

COUNT_TTL_S = 5.0  # how long a tenant's count of active tasks is reused (plus this process's creates since)
CRON_STEP_S = 60.0  # a cron expression's finest step: a minute


def schedule_rate_per_s(expression: str) -> float:
    """The most fires per second ``expression`` makes: a rate's own, a minute's for a cron, none for an ``at``."""
    parsed = parse_expression(expression)
    if isinstance(parsed, Rate):
        return 1000.0 / parsed.every_ms
    if isinstance(parsed, At):
        return 0.0
    return 1.0 / CRON_STEP_S


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
    """Checks creates against a tenant's quotas (one per client; thread-safe).

    Parameters
    ----------
    store : Store
        Where active tasks are counted and a tenant's schedules read.
    monotonic : Callable[[], float]
        The clock of the count's cache (injected in tests).
    """

    def __init__(self, store: Store, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._monotonic = monotonic
        self._lock = threading.Lock()  # guards _locks
        self._locks: dict[str, threading.Lock] = {}  # a tenant's: its count is read and changed under it
        self._counts: dict[str, tuple[int, float]] = {}  # tenant -> (active tasks, counted at)
        self._writing: dict[str, int] = {}  # tenant -> tasks admitted whose creation has not ended yet

    @contextlib.contextmanager
    def admitting(self, tenant: str, quotas: Quotas, count: int) -> Iterator[None]:
        """Room for ``count`` more active tasks of ``tenant`` while the caller creates them in the ``with`` block,
        or QuotaExceededError (``active_tasks``) before it. Admitted tasks are added to the cached count, and,
        until the block ends, to any count read afresh (the store cannot count a task not yet written)."""
        self.admit_tasks(tenant, quotas, count, writing=True)
        try:
            yield
        finally:
            if count > 0:
                with self._tenant_lock(tenant):
                    self._writing[tenant] -= count

    def admit_tasks(self, tenant: str, quotas: Quotas, count: int, *, writing: bool = False) -> None:
        """Room for ``count`` more active tasks of ``tenant``, or QuotaExceededError (``active_tasks``). Admitted
        tasks are added to the cached count; ``writing``: also to counts read afresh, until :meth:`admitting`
        ends."""
        if count <= 0:
            return
        with self._tenant_lock(tenant):  # one check-and-add at a time per tenant: threads never share a count
            active = self._active(tenant, fresh=False)
            if active + count > quotas.active_tasks:
                active = self._active(tenant, fresh=True)  # the cache may hold tasks that finished since
            if active + count > quotas.active_tasks:
                raise QuotaExceededError("active_tasks", quotas.active_tasks, f"{active} active tasks and {count} more")
            _, at = self._counts[tenant]
            self._counts[tenant] = (active + count, at)
            if writing:
                self._writing[tenant] = self._writing.get(tenant, 0) + count

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

    def admit_schedule(self, tenant: str, quotas: Quotas, schedule: Schedule) -> None:
        """Room for ``schedule`` (new, or changed: it replaces the stored one of its id) among ``tenant``'s: the
        number of schedules not deleted (``schedules``) and, if it is to run, the fire rate of the active ones
        (``schedule_rate_per_s``). QuotaExceededError names the quota passed."""
        others = [
            s
            for s in self._store.list_schedules(prefix(tenant))
            if s.schedule_id != schedule.schedule_id and s.state is not ScheduleState.DELETED
        ]
        if len(others) + 1 > quotas.schedules:
            raise QuotaExceededError("schedules", quotas.schedules, f"{len(others)} schedules and one more")
        if schedule.state is not ScheduleState.ACTIVE:
            return
        rate = total_rate(s.expression for s in others if s.state is ScheduleState.ACTIVE)
        mine = schedule_rate_per_s(schedule.expression)
        if rate + mine > quotas.schedule_rate_per_s + 1e-9:
            raise QuotaExceededError(
                "schedule_rate_per_s",
                quotas.schedule_rate_per_s,
                f"active schedules firing {rate:g} times a second and {schedule.expression} adding {mine:g}",
                field="expression",
            )


def total_rate(expressions: Iterable[str]) -> float:
    """The fires per second ``expressions`` add up to at most."""
    return sum(schedule_rate_per_s(expression) for expression in expressions)
