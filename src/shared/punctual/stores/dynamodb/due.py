"""The due index and the watermark: how a poll finds due work (:class:`DueIndex`).

``due_bucket`` is ``"<minute bucket>#<shard>"``; it is present only while the task is active (PENDING or
ARMED), which makes the ``due`` index sparse: it holds exactly the tasks that may still have to fire. The bucket
is the minute of ``max(due, now at write time)``, so a task written late (due in the past, or in a minute the
poller already swept) always lands at or after the poller's watermark. The index projects keys only: no arm or
record changes an indexed attribute, so none of them costs an index write; the poller reads status, lease and
owner of what it found from the base table (eventually consistent, 0.5 read unit a task).

Finding due work (:meth:`DueIndex.find_due`): every shard of every minute bucket from the watermark (the
oldest bucket that may still hold an active task) up to the end of the window. Overdue tasks are always
included: scheduled rules can be ~119 s apart and index writes lag, so the watermark (an item of its own,
``#poller-watermark``) stays at least ``overdue_safety_ms`` behind now and never passes a bucket in which an
active task was seen. With no watermark yet, one scan of the sparse index finds the oldest active task.

Each poll notes its start, ``polled_ms``, on its watermark item (:meth:`DueIndex.mark_polled`, read by
:meth:`DueIndex.last_polls`): the fast path reads it to tell whether the next poll dispatches a task in time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from botocore.exceptions import ClientError

from punctual.domain.keys import bucket_start, buckets_between, from_ms, index_key
from punctual.domain.model import Candidate, DueScan, TaskStatus
from punctual.errors import UndecodableItemError
from punctual.stores.dynamodb.codec import (
    candidate_of_item,
    number_of,
    schedule_id_of_key,
    text_of,
    to_av,
)
from punctual.stores.dynamodb.executors import Executors
from punctual.stores.dynamodb.table import DUE_INDEX, Table
from punctual.stores.dynamodb.tasks import TaskItems
from punctual.stores.dynamodb.writes import is_conditional_failure

log = logging.getLogger(__name__)

THROTTLING_CODES = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"})
# tenant too: an item whose tenant is not its key's is met as undecodable by the poll already (codec)
CANDIDATE_PROJECTION = "task_id, due_ms, #st, lease_until_ms, misfire_grace_ms, misfire_policy, armed_by, tenant"


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One entry of the keys-only due index: a task that was active when the index was last written."""

    task_id: str
    due_ms: int


def _armable(candidate: Candidate, now_ms: int, owners: dict[str, int | None]) -> bool:
    """Whether an executor may arm ``candidate`` now: PENDING; held under a lease that ended; or ARMED by an
    executor whose heartbeat ended before now (or that has none)."""
    if candidate.status is TaskStatus.PENDING or candidate.lease_ended_at(now_ms):
        return True
    if candidate.status is TaskStatus.ARMED and candidate.owner is not None:
        until = owners.get(candidate.owner)
        return until is None or until < now_ms
    return False


class DueIndex:
    """The due index of ``table`` and each poll group's watermark item. What it finds is read from the base
    table; an item that is no task is quarantined through ``tasks``; an owner's heartbeat is read through
    ``executors``."""

    def __init__(self, table: Table, tasks: TaskItems, executors: Executors) -> None:
        self.table = table
        self.config = table.config
        self.tasks = tasks
        self.executors = executors

    def group_shards(self, group: int) -> range:
        """The shards poll group ``group`` reads (of ``poll_groups`` equal ranges)."""
        return self.config.group_shards(group)

    def find_due(
        self,
        now_ms: int,
        until_ms: int,
        out_of_time: Callable[[], bool] | None = None,
        group: int = 0,
        on_found: Callable[[list[Candidate]], None] | None = None,
    ) -> DueScan:
        """Every armable task due at or before ``until_ms``, overdue included (see "Finding due work" in the
        module docstring), in poll group ``group``'s shards (every shard when there is one group): the due
        index from the group's watermark to ``until_ms``, each of its shards of every minute bucket, oldest
        bucket first, read in parallel a few buckets at a time; after each read, the status, lease and owner of
        each task it found, from the base table, and the heartbeats of the owners of ARMED ones, and
        ``on_found(armable)`` with that read's armable tasks (so the caller can dispatch them before the next
        read). The group's watermark moves forward to the oldest bucket in which an active task was seen, never
        closer to now than ``overdue_safety_ms``, and never past a bucket it did not read (when
        ``out_of_time()`` stopped it)."""
        shards = self.group_shards(group)
        safety_bucket = bucket_start(now_ms - self.config.overdue_safety_ms)
        watermark = self.get_watermark(group)
        if watermark is None:
            oldest = self.oldest_active_due(group)
            watermark = min(safety_bucket, oldest) if oldest is not None else safety_bucket
        buckets = buckets_between(watermark, until_ms)
        found_in: list[int] = []  # buckets in which an active task was seen
        first_unread: list[int] = []  # the first bucket not read, when time ran out
        left_unread = 0  # tasks the index named whose items stayed unprocessed (throttled): for the next poll
        seen: set[str] = set()
        armable: list[Candidate] = []
        schedules: list[str] = []
        undecodable = 0
        step = max(1, self.config.db_threads // len(shards))  # buckets read at once: one query per shard each
        for start in range(0, len(buckets), step):
            if out_of_time is not None and out_of_time():
                first_unread.append(buckets[start])
                break
            queries = [(b, shard) for b in buckets[start : start + step] for shard in shards]
            pages = self.table.parallel(lambda q: self._query_index_or_none(q[0], q[1], until_ms), queries)
            task_ids: list[str] = []
            for (bucket, _), page in zip(queries, pages, strict=True):
                if page is None:  # throttled past botocore's retries: not read, so the watermark stays before it
                    first_unread.append(bucket)
                    continue
                if page:
                    found_in.append(bucket)
                    # The index may briefly list a rescheduled task under its old and new key: each task is read
                    # once, from the base table, which also says whether it is still armable.
                    for entry in page:
                        if entry.task_id not in seen:
                            seen.add(entry.task_id)
                            task_ids.append(entry.task_id)
            schedule_of = {t: schedule_id_of_key(t) for t in task_ids}
            schedules.extend(s for s in schedule_of.values() if s is not None)
            found, bad, unread = self._candidates([t for t in task_ids if schedule_of[t] is None], now_ms)
            left_unread += unread
            undecodable += bad
            found = [c for c in found if c.due_ms <= until_ms]
            owners = self.executors.alive_until(
                {c.owner for c in found if c.status is TaskStatus.ARMED and c.owner}, consistent=False
            )
            ready = [c for c in found if _armable(c, now_ms, owners)]
            armable.extend(ready)
            if ready and on_found is not None:
                on_found(ready)
        # Safe whatever the caller did with what it was handed meanwhile: every active task seen is in a bucket at
        # or after the new watermark (a finished one needs no finding), and what was not read is after it too.
        new_watermark = min([safety_bucket, *found_in, *first_unread])
        self.advance_watermark(new_watermark, group)
        return DueScan(
            candidates=armable,
            watermark_ms=new_watermark,
            buckets=len(buckets),
            queries=len(buckets) * len(shards),
            recovered=sum(1 for c in armable if c.status is not TaskStatus.PENDING),
            undecodable=undecodable,
            complete=not first_unread and not left_unread,
            schedules=schedules,
        )

    def _query_index_or_none(self, bucket_ms: int, shard: int, until_ms: int) -> list[IndexEntry] | None:
        """:meth:`query_index`, or None when DynamoDB throttled it past botocore's own retries (a poll goes on
        with the other shards and buckets; the next one reads this one)."""
        try:
            return self.query_index(bucket_ms, shard, until_ms)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in THROTTLING_CODES:
                raise
            log.warning(
                "the due index's bucket %s shard %d was throttled: left for the next poll",
                from_ms(bucket_ms).isoformat(),
                shard,
            )
            return None

    def query_index(self, bucket_ms: int, shard: int, until_ms: int) -> list[IndexEntry]:
        """Entries of one shard of one minute bucket of the (keys-only) due index, due at or before
        ``until_ms``. The index is eventually consistent: an entry may be stale or not there yet."""
        entries: list[IndexEntry] = []
        for page in self.table.client.get_paginator("query").paginate(
            TableName=self.table.name,
            IndexName=DUE_INDEX,
            KeyConditionExpression="due_bucket = :pk AND due_ms <= :until",
            ExpressionAttributeValues=to_av({":pk": index_key(bucket_ms, shard), ":until": until_ms}),
            ProjectionExpression="task_id, due_ms",
        ):
            entries.extend(IndexEntry(raw["task_id"]["S"], int(raw["due_ms"]["N"])) for raw in page.get("Items", []))
        return entries

    def candidates(self, task_ids: list[str], now_ms: int = 0) -> list[Candidate]:
        """The still-active tasks among ``task_ids``, with status, lease and owner as the base table has them
        (BatchGetItem, eventually consistent: the arm's condition decides anyway). Finished or deleted tasks
        are left out, and so are items that are not tasks (see :meth:`_candidates`)."""
        return self._candidates(task_ids, now_ms)[0]

    def _candidates(self, task_ids: list[str], now_ms: int) -> tuple[list[Candidate], int, int]:
        """:meth:`candidates`, how many items could not be decoded, and how many stayed unread (throttled past
        every try: the next look reads them). Each item is decoded on its own: one that is not a task (a
        hand-written status, a missing due time) is recorded FAILED with a detail and leaves the due index
        (:meth:`TaskItems.quarantine`); the others go on."""
        found: list[Candidate] = []
        bad = 0
        items, unread = self.table.batch_get_read(task_ids, consistent=False, projection=CANDIDATE_PROJECTION)
        for item in items:
            try:
                candidate = candidate_of_item(item)
            except UndecodableItemError as exc:
                bad += 1
                self.tasks.quarantine(item, now_ms, f"undecodable item: {exc.reason}")
                continue
            if candidate is not None:
                found.append(candidate)
        return found, bad, len(unread)

    # -- watermarks and poll marks ---------------------------------------------------------------------
    def watermark_key(self, group: int = 0) -> str:
        """The item holding poll group ``group``'s watermark (:meth:`~.config.StoreConfig.watermark_key`)."""
        return self.config.watermark_key(group)

    def get_watermark(self, group: int = 0) -> int | None:
        """Bucket start before which the group's shards of the index hold no active task (as of its last poll),
        or None."""
        item = self.table.get_item(self.watermark_key(group))
        return None if item is None or "watermark_ms" not in item else int(item["watermark_ms"]["N"])

    def advance_watermark(self, watermark_ms: int, group: int = 0) -> bool:
        """Move the group's watermark forward (never back: a concurrent poller may have moved it further)."""
        return self._move_forward(group, "watermark_ms", watermark_ms)

    def mark_polled(self, now_ms: int, group: int = 0) -> bool:
        """Note on the group's watermark item that a poll of the group starts at ``now_ms`` (``polled_ms``), never
        moving it back; False when a later start is already noted."""
        return self._move_forward(group, "polled_ms", now_ms)

    def _move_forward(self, group: int, attribute: str, value_ms: int) -> bool:
        """Set ``attribute`` of the group's watermark item to ``value_ms`` unless it already holds as much or
        more; False then."""
        try:
            self.table.client.update_item(
                TableName=self.table.name,
                Key={"task_id": {"S": self.watermark_key(group)}},
                UpdateExpression=f"SET {attribute} = :v",
                ConditionExpression=f"attribute_not_exists({attribute}) OR {attribute} < :v",
                ExpressionAttributeValues={":v": {"N": str(value_ms)}},
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def last_polls(self) -> list[int | None]:
        """When the last poll of each group started (None: not known), from one strongly consistent BatchGetItem of
        the groups' watermark items; a key DynamoDB leaves unprocessed (throttled) counts as not known."""
        groups = range(self.config.poll_groups)
        keys = [{"task_id": {"S": self.watermark_key(group)}} for group in groups]
        response = self.table.client.batch_get_item(
            RequestItems={
                self.table.name: {"Keys": keys, "ConsistentRead": True, "ProjectionExpression": "task_id, polled_ms"}
            }
        )
        polled = {
            text_of(item, "task_id"): number_of(item, "polled_ms")
            for item in response.get("Responses", {}).get(self.table.name, [])
        }
        return [polled.get(self.watermark_key(group)) for group in groups]

    def oldest_active_due(self, group: int = 0) -> int | None:
        """The bucket before the earliest due time in the group's shards of the due index (a scan of the sparse
        index; used only once per group, when it has no watermark yet)."""
        return self.table.oldest_active_due(self.group_shards(group))
