"""One-off backfills of index keys on items written before the code wrote them: ``tenant_shard`` on tenant tasks
(:func:`backfill_tenant_shards`), the schedules' registry as ``schedule_id`` on schedules
(:func:`backfill_schedule_registry`).

Each is a parallel Scan of the whole table with a conditional UpdateItem of each item it finds, run with the
operator's credentials:

* :func:`backfill_tenant_shards` (``punctual backfill-tenant-shards``): the key of the ``tenant_active_sharded``
  index on tenant tasks written before the index existed, which a tenant's active count misses until they end.
  The Scan finds every active tenant task (``tenant`` and ``due_bucket``) without ``tenant_shard``, and the update
  sets the key a create writes (:func:`~punctual.stores.dynamodb.codec.tenant_shard_of`)::

      BACKFILL    attribute_exists(due_bucket) AND attribute_not_exists(tenant_shard) AND tenant = :tenant

  A task that ended (its outcome removed ``due_bucket``) or was keyed meanwhile is left alone.
* :func:`backfill_schedule_registry` (``punctual backfill-schedule-registry``): the schedule index's registry value
  (:data:`~punctual.stores.dynamodb.codec.SCHEDULE_REGISTRY`) as the ``schedule_id`` of schedule items written
  before the registry, which the list of every schedule misses until a change or an advance stamps them (a paused,
  ended or deleted schedule is never advanced). The Scan finds every schedule item without ``schedule_id``::

      REGISTER    attribute_exists(task_id) AND attribute_not_exists(schedule_id)

  A schedule stamped meanwhile (by a change or an advance) is left alone. Each stamp is one write to the registry's
  index partition, which takes about 1,000 a second: each segment updates one item at a time, so a few segments
  stay below it; more segments over a table of little else but schedules may pass it, and a stamp throttled past
  botocore's retries is an error, which the next run does again.

A failed condition is counted as skipped, never an error. So each is safe while the stack runs, and a second run
updates nothing. Each reads every item once: about table size / 4 KB / 2 read units (eventually consistent), and
one write unit a KB of each item it updates, plus its new index entry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from punctual.domain.tenancy import split
from punctual.stores.dynamodb.codec import SCHEDULE_PREFIX, SCHEDULE_REGISTRY, tenant_shard_of, to_av
from punctual.stores.dynamodb.table import Table
from punctual.stores.dynamodb.writes import is_conditional_failure

log = logging.getLogger(__name__)

# What the Scan keeps: tenant tasks still active and without the index key (a schedule's item is no task)
UNKEYED = (
    "attribute_exists(tenant) AND attribute_exists(due_bucket) AND attribute_not_exists(tenant_shard)"
    " AND NOT contains(task_id, :schedule_prefix)"
)
BACKFILLABLE = "attribute_exists(due_bucket) AND attribute_not_exists(tenant_shard) AND tenant = :tenant"
# What the registry's Scan keeps, and the condition of its stamp: schedule items without schedule_id
UNREGISTERED = "contains(task_id, :schedule_prefix) AND attribute_not_exists(schedule_id)"
REGISTRABLE = "attribute_exists(task_id) AND attribute_not_exists(schedule_id)"


@dataclass(frozen=True, slots=True)
class BackfillCounts:
    """How far a backfill has got: ``scanned`` items read, ``found`` of them items without the key, ``updated``
    keyed (with a dry run: none), ``skipped`` left alone (ended or keyed meanwhile, or a task whose ``tenant`` is
    not its key's), ``errors`` requests that failed (an update, or a segment's Scan, which then stops)."""

    scanned: int = 0
    found: int = 0
    updated: int = 0
    skipped: int = 0
    errors: int = 0


def backfill_tenant_shards(
    table: Table,
    *,
    segments: int = 4,
    dry_run: bool = False,
    progress: Callable[[BackfillCounts], None] | None = None,
) -> BackfillCounts:
    """Set ``tenant_shard`` on every active tenant task of ``table`` without it (see the module docstring), the
    table scanned in ``segments`` parallel segments (on the table's pool: ``db_threads`` at once); with ``dry_run``
    only count them. ``progress`` is called with the counts after each page, from the segment's thread (one call at
    a time). Returns the final counts: a run with no errors has keyed every task it found that is still active."""
    return _backfill(
        table,
        UNKEYED,
        lambda item: _key_item(table, item, dry_run),
        segments=segments,
        progress=progress,
    )


def backfill_schedule_registry(
    table: Table,
    *,
    segments: int = 4,
    dry_run: bool = False,
    progress: Callable[[BackfillCounts], None] | None = None,
) -> BackfillCounts:
    """Set ``schedule_id`` to the registry's value on every schedule item of ``table`` without it (see the module
    docstring), scanned and reported as :func:`backfill_tenant_shards` does. Returns the final counts: a run with no
    errors has put every schedule in the registry, so that the list of every schedule holds them all."""
    return _backfill(
        table,
        UNREGISTERED,
        lambda item: _register_item(table, item, dry_run),
        segments=segments,
        progress=progress,
    )


def _backfill(
    table: Table,
    keeps: str,
    update: Callable[[dict[str, Any]], str],
    *,
    segments: int,
    progress: Callable[[BackfillCounts], None] | None,
) -> BackfillCounts:
    """The items the filter ``keeps``, each handed to ``update`` (its outcome: ``"updated"``, ``"skipped"``,
    ``"error"`` or ``"found"``), over a Scan of ``table`` in ``segments`` parallel segments."""
    state = _Progress(progress)

    def run_segment(segment: int) -> None:
        kwargs: dict[str, Any] = {
            "TableName": table.name,
            "Segment": segment,
            "TotalSegments": segments,
            "FilterExpression": keeps,
            "ProjectionExpression": "task_id, tenant",
            "ExpressionAttributeValues": to_av({":schedule_prefix": SCHEDULE_PREFIX}),
        }
        try:
            for page in table.client.get_paginator("scan").paginate(**kwargs):
                items = page.get("Items", [])
                outcomes = [update(item) for item in items]
                state.add(
                    scanned=int(page.get("ScannedCount", 0)),
                    found=len(items),
                    updated=outcomes.count("updated"),
                    skipped=outcomes.count("skipped"),
                    errors=outcomes.count("error"),
                )
        except (ClientError, BotoCoreError) as exc:
            log.error("backfill: segment %d of %d stopped: its Scan failed: %s", segment, segments, exc)
            state.add(errors=1)

    table.parallel(run_segment, list(range(segments)))
    return state.counts


def _key_item(table: Table, item: dict[str, Any], dry_run: bool) -> str:
    """Key one item the Scan found: ``"updated"``, ``"skipped"``, ``"error"``, or ``"found"`` (a dry run)."""
    task_id = item["task_id"]["S"]
    tenant_shard = tenant_shard_of(task_id)
    tenant = split(task_id)[0]
    if tenant_shard is None or item.get("tenant") != {"S": tenant}:
        return "skipped"  # an item whose tenant is not its key's is no task of that tenant (nothing reads it as one)
    if dry_run:
        return "found"
    return _update(
        table,
        task_id,
        UpdateExpression="SET tenant_shard = :shard",
        ConditionExpression=BACKFILLABLE,
        ExpressionAttributeValues=to_av({":shard": tenant_shard, ":tenant": tenant}),
    )


def _register_item(table: Table, item: dict[str, Any], dry_run: bool) -> str:
    """Put one schedule item the Scan found in the registry: ``"updated"``, ``"skipped"``, ``"error"``, or
    ``"found"`` (a dry run)."""
    if dry_run:
        return "found"
    return _update(
        table,
        item["task_id"]["S"],
        UpdateExpression="SET schedule_id = :registry",
        ConditionExpression=REGISTRABLE,
        ExpressionAttributeValues=to_av({":registry": SCHEDULE_REGISTRY}),
    )


def _update(table: Table, key: str, **request: Any) -> str:
    """One conditional UpdateItem of the item keyed ``key``: ``"updated"``, ``"skipped"`` (its condition failed: the
    item changed meanwhile) or ``"error"`` (logged)."""
    try:
        table.client.update_item(TableName=table.name, Key={"task_id": {"S": key}}, **request)
    except (ClientError, BotoCoreError) as exc:
        if isinstance(exc, ClientError) and is_conditional_failure(exc):
            return "skipped"
        log.error("backfill: item %s: %s", key, exc, extra={"task_id": key})
        return "error"
    return "updated"


class _Progress:
    """The counts, added to from every segment's thread, and the progress callback, called one at a time."""

    def __init__(self, report: Callable[[BackfillCounts], None] | None) -> None:
        self.counts = BackfillCounts()
        self._report = report
        self._lock = threading.Lock()

    def add(self, **more: int) -> None:
        with self._lock:
            now = self.counts
            self.counts = replace(now, **{name: getattr(now, name) + n for name, n in more.items()})
            if self._report is not None:
                self._report(self.counts)
