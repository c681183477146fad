"""A tenant's items in the Tasks table (:class:`TenantItems`): its keys in id order from the keys-only
``tenant`` index, a page of its tasks, and the count of its active ones from the sparse ``tenant_active_sharded``
index (one count query a key the tenant's entries are spread over). Every read is bounded by the tenant's key
prefix (:mod:`punctual.domain.tenancy`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from punctual.domain.keys import tenant_active_keys
from punctual.domain.model import Task, TaskStatus, Unreadable
from punctual.domain.tenancy import prefix
from punctual.errors import UndecodableItemError
from punctual.stores.dynamodb.codec import SCHEDULE_PREFIX, item_to_task, schedule_id_of_key, to_av
from punctual.stores.dynamodb.table import TENANT_ACTIVE_INDEX, TENANT_INDEX, Table

log = logging.getLogger(__name__)


def readable_tasks(items: Iterable[dict[str, Any]], unreadable: Unreadable | None = None) -> Iterator[Task]:
    """The tasks of ``items``, each decoded on its own: one that is not a task is logged once, with its key,
    skipped, and counted in ``unreadable``."""
    for item in items:
        try:
            yield item_to_task(item)
        except UndecodableItemError as exc:
            log.warning("%s; skipped", exc, extra={"task_id": exc.key})
            if unreadable is not None:
                unreadable.add(exc.key)


class TenantItems:
    """Tenants' items in ``table``."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def tenant_keys(
        self, tenant: str, begins: str | None = None, after: str | None = None, limit: int | None = None
    ) -> tuple[list[str], str | None]:
        """Ids of ``tenant``'s items (starting with ``begins``, if given) in id order, from after the id
        ``after``, ``limit`` at most, from the keys-only tenant index (eventually consistent); and the last id
        read when more may follow (None: the end)."""
        # The key's prefix bounds the read as well as the tenant attribute does: an item whose tenant attribute
        # was forged (keyed under another tenant) is never read, and a page never ends on one.
        begins = begins if begins is not None and begins.startswith(prefix(tenant)) else prefix(tenant)
        condition = "tenant = :t AND begins_with(task_id, :b)"
        values = {":t": tenant, ":b": begins}
        kwargs: dict[str, Any] = {
            "TableName": self.table.name,
            "IndexName": TENANT_INDEX,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": to_av(values),
        }
        if after is not None:
            kwargs["ExclusiveStartKey"] = {"tenant": {"S": tenant}, "task_id": {"S": after}}
        ids: list[str] = []
        while True:
            if limit is not None:
                kwargs["Limit"] = limit - len(ids)
            page = self.table.client.query(**kwargs)
            ids.extend(item["task_id"]["S"] for item in page.get("Items", []))
            more = page.get("LastEvaluatedKey")
            if not more:
                return ids, None
            if limit is not None and len(ids) >= limit:
                return ids, ids[-1]
            kwargs["ExclusiveStartKey"] = more

    def count_active(self, tenant: str) -> int:
        """How many of ``tenant``'s tasks are PENDING or ARMED: the sum of a COUNT query of each of the tenant's keys
        in the sparse ``tenant_active_sharded`` index (only tasks carrying tenant_shard and due_bucket are in it),
        in parallel. Reads a keys-only entry per active task (about 40 to a read unit), and at least half a read
        unit a key."""
        return sum(self.table.parallel(lambda key: self._count_key(tenant, key), tenant_active_keys(tenant)))

    def _count_key(self, tenant: str, key: str) -> int:
        """The entries of the tenant's index key ``key`` whose task id is the tenant's (an item's attributes
        cannot count against another tenant) and not a schedule's."""
        kwargs: dict[str, Any] = {
            "TableName": self.table.name,
            "IndexName": TENANT_ACTIVE_INDEX,
            "Select": "COUNT",
            "KeyConditionExpression": "tenant_shard = :k",
            "FilterExpression": "begins_with(task_id, :p) AND NOT contains(task_id, :s)",
            "ExpressionAttributeValues": to_av({":k": key, ":p": prefix(tenant), ":s": SCHEDULE_PREFIX}),
        }
        count = 0
        while True:
            page = self.table.client.query(**kwargs)
            count += int(page.get("Count", 0))
            more = page.get("LastEvaluatedKey")
            if not more:
                return count
            kwargs["ExclusiveStartKey"] = more

    def tenant_page(  # noqa: PLR0913, PLR0917  the signature of its port, ClientPort.tenant_page
        self,
        tenant: str,
        statuses: Iterable[TaskStatus] | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        limit: int = 100,
        after: str | None = None,
        unreadable: Unreadable | None = None,
    ) -> tuple[list[Task], str | None]:
        """One page of ``tenant``'s tasks, in id order from after the id ``after``: of the next ``limit`` ids in
        the tenant index, the tasks with one of ``statuses`` due in ``[due_from_ms, due_to_ms)``; and where the
        next page starts (None: this was the last). A query of the tenant's own index: the page costs what it
        reads, however large the table. An item that cannot be decoded is left out and counted in ``unreadable``."""
        keys, more = self.tenant_keys(tenant, after=after, limit=limit)
        wanted = set(statuses or ())
        tasks = [
            task
            for task in readable_tasks(
                self.table.items_of([k for k in keys if schedule_id_of_key(k) is None]), unreadable
            )
            if (not wanted or task.status in wanted)
            and (due_from_ms is None or task.due_ms >= due_from_ms)
            and (due_to_ms is None or task.due_ms < due_to_ms)
        ]
        return tasks, more
