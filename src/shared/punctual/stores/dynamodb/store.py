"""The DynamoDB implementation of the store ports (:class:`punctual.stores.ports.TaskStore` and
:class:`punctual.stores.ports.ScheduleStore`): the only package that speaks DynamoDB. :class:`DynamoTaskStore` holds
the parts, each of one concern, and answers each port call through one of them:

* :mod:`.writes`: the kinds of conditional write, the conditions that guard the task life cycle (its diagram is
  drawn there), and how many writes are sent at once (single UpdateItems or transactions);
* :mod:`.tasks`: task items: create, read, cancel, reschedule, record, release, redrive, quarantine;
* :mod:`.executors`: heartbeats, fences, and the arms and takeovers by which an executor owns its tasks;
* :mod:`.due`: the sparse ``due`` index, the candidates it names, and each poll group's watermark;
* :mod:`.tenants`: a tenant's keys, pages and active count, from the tenant indexes;
* :mod:`.schedules`: recurring schedules and their chain of occurrences;
* :mod:`.usage`: what a tenant's schedules hold of its schedule quotas, written with them.

They share one :class:`~punctual.stores.dynamodb.table.Table` (the client, the thread pool, reads by key) and one
:class:`~punctual.stores.dynamodb.config.StoreConfig`, derived from :class:`~punctual.config.settings.Settings`. Items
are encoded by :mod:`.codec`; the table and its indexes are defined in ``template.yaml`` (:mod:`.schema`).

A task written due sooner than the next poll can dispatch it (``due_ms - now < poll interval + margin``)
carries ``fast_path = 1``: the table stream hands it to the fast path, which dispatches it like the poller
does unless the next poll does so in time (:meth:`DynamoTaskStore.last_polls`). The ARM condition makes the
two race-safe; the poller still finds the task in the index if the fast path does not dispatch it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from punctual.config.settings import Settings
from punctual.domain.model import Armed, ArmRequest, Candidate, DueScan, FireRecord, Task, TaskStatus, Unreadable
from punctual.domain.quota import ScheduleLimits
from punctual.domain.schedules import Advance, AdvanceResult, Schedule
from punctual.stores.dynamodb.config import StoreConfig
from punctual.stores.dynamodb.due import DueIndex
from punctual.stores.dynamodb.executors import Executors
from punctual.stores.dynamodb.schedules import ScheduleItems
from punctual.stores.dynamodb.table import Table
from punctual.stores.dynamodb.tasks import TaskItems
from punctual.stores.dynamodb.tenants import TenantItems
from punctual.stores.dynamodb.writes import Writes

__all__ = ["DynamoTaskStore", "StoreConfig"]


class DynamoTaskStore:
    """Tasks and schedules in DynamoDB, through the parts it holds.

    Parameters
    ----------
    client:
        A boto3 DynamoDB *client* (low level), for AWS, DynamoDB Local or moto alike.
    config:
        What the adapter is configured with (:meth:`from_settings` derives it from the settings).
    """

    def __init__(self, client: Any, config: StoreConfig) -> None:
        self.config = config
        self.table = Table(client, config)
        self.writes = Writes(self.table)
        self.tasks = TaskItems(self.table, self.writes)
        self.executors = Executors(self.table, self.writes, self.tasks)
        self.due = DueIndex(self.table, self.tasks, self.executors)
        self.tenants = TenantItems(self.table)
        self.schedules = ScheduleItems(self.table, self.tasks, self.tenants)

    @classmethod
    def from_settings(cls, client: Any, settings: Settings) -> DynamoTaskStore:
        """The store on ``client`` configured by ``settings``."""
        return cls(client, StoreConfig.from_settings(settings))

    # -- client (TaskStore) ------------------------------------------------------------------------------
    def create(self, task: Task, now_ms: int) -> tuple[Task, bool]:
        return self.tasks.create(task, now_ms)

    def item_of(self, task: Task, now_ms: int) -> dict[str, Any]:
        """The raw item CREATE puts for ``task`` written at ``now_ms`` (:meth:`TaskItems.item_of`)."""
        return self.tasks.item_of(task, now_ms)

    def get(self, task_id: str) -> Task | None:
        return self.tasks.get(task_id)

    def get_many(self, task_ids: list[str], unreadable: Unreadable | None = None) -> dict[str, Task]:
        return self.tasks.get_many(task_ids, unreadable)

    def list_tasks(
        self,
        statuses: Iterable[TaskStatus] | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        limit: int | None = None,
        unreadable: Unreadable | None = None,
    ) -> Iterator[Task]:
        return self.tasks.list_tasks(statuses, due_from_ms, due_to_ms, limit, unreadable)

    def tenant_page(
        self,
        tenant: str,
        statuses: Iterable[TaskStatus] | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        limit: int = 100,
        after: str | None = None,
        unreadable: Unreadable | None = None,
    ) -> tuple[list[Task], str | None]:
        return self.tenants.tenant_page(tenant, statuses, due_from_ms, due_to_ms, limit, after, unreadable)

    def count_active(self, tenant: str) -> int:
        return self.tenants.count_active(tenant)

    def cancel(self, task_id: str, now_ms: int) -> Task:
        return self.tasks.cancel(task_id, now_ms)

    def reschedule(self, task_id: str, due_ms: int, now_ms: int) -> Task:
        return self.tasks.reschedule(task_id, due_ms, now_ms)

    # -- poller and fast path (TaskStore) ----------------------------------------------------------------
    def find_due(
        self,
        now_ms: int,
        until_ms: int,
        out_of_time: Callable[[], bool] | None = None,
        group: int = 0,
        on_found: Callable[[list[Candidate]], None] | None = None,
    ) -> DueScan:
        return self.due.find_due(now_ms, until_ms, out_of_time, group, on_found)

    def mark_polled(self, now_ms: int, group: int = 0) -> bool:
        return self.due.mark_polled(now_ms, group)

    def last_polls(self) -> list[int | None]:
        return self.due.last_polls()

    # -- executor (TaskStore) ----------------------------------------------------------------------------
    def heartbeat(self, executor_id: str, now_ms: int, alive_until_ms: int, invocation: str | None = None) -> bool:
        return self.executors.heartbeat(executor_id, now_ms, alive_until_ms, invocation)

    def fence(self, executor_id: str, now_ms: int, invocation: str | None = None) -> bool:
        return self.executors.fence(executor_id, now_ms, invocation)

    def fence_live_executors(self, now_ms: int) -> list[str]:
        return self.executors.fence_live_executors(now_ms)

    def arm_many(
        self, requests: list[ArmRequest], batch_id: str, executor_id: str, now_ms: int, invocation: str | None = None
    ) -> list[Armed | None]:
        return self.executors.arm_many(requests, batch_id, executor_id, now_ms, invocation)

    def record(self, executor_id: str, record: FireRecord) -> bool:
        """RECORD one outcome (:meth:`TaskItems.record`)."""
        return self.tasks.record(executor_id, record)

    def record_many(self, executor_id: str, records: list[FireRecord]) -> list[bool]:
        return self.tasks.record_many(executor_id, records)

    def release(self, task_id: str, executor_id: str) -> bool:
        return self.tasks.release(task_id, executor_id)

    # -- redrive (TaskStore) -----------------------------------------------------------------------------
    def redrive_many(self, task_ids: list[str], now_ms: int) -> list[bool]:
        return self.tasks.redrive_many(task_ids, now_ms)

    # -- schedules (ScheduleStore) -----------------------------------------------------------------------
    def create_schedule(
        self, schedule: Schedule, occurrences: list[Task], now_ms: int, limits: ScheduleLimits | None = None
    ) -> tuple[Schedule, bool]:
        return self.schedules.create_schedule(schedule, occurrences, now_ms, limits)

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        return self.schedules.get_schedule(schedule_id)

    def list_schedules(self, id_prefix: str | None = None, unreadable: Unreadable | None = None) -> Iterator[Schedule]:
        return self.schedules.list_schedules(id_prefix, unreadable)

    def quarantine_schedule(self, schedule_id: str, detail: str, now_ms: int) -> bool:
        return self.schedules.quarantine_schedule(schedule_id, detail, now_ms)

    def advance_schedule(
        self, schedule: Schedule, step: Advance, occurrences: list[Task], now_ms: int
    ) -> AdvanceResult:
        return self.schedules.advance_schedule(schedule, step, occurrences, now_ms)

    def change_schedule(
        self,
        schedule: Schedule,
        changes: dict[str, Any],
        now_ms: int,
        *,
        cleanup: bool,
        limits: ScheduleLimits | None = None,
    ) -> Schedule:
        return self.schedules.change_schedule(schedule, changes, now_ms, cleanup=cleanup, limits=limits)

    def finish_cleanup(self, schedule: Schedule, now_ms: int) -> bool:
        return self.schedules.finish_cleanup(schedule, now_ms)

    def schedule_occurrence_ids(
        self, schedule_id: str, from_ms_: int | None = None, limit: int | None = None
    ) -> list[str]:
        return self.schedules.schedule_occurrence_ids(schedule_id, from_ms_, limit)
