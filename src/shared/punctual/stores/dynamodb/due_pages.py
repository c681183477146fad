"""Pages of the due index in due order for a person (:class:`DuePages`: the
:meth:`~punctual.stores.ports.ClientPort.due_page` and ``due_instants`` of the adapter, walked by
:mod:`punctual.domain.due_pages`). Loaded by the first such page, never by a handler's cold start: no handler lists
the index for a person."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from punctual.domain.due_pages import DuePosition, Entry, instant_buckets, still_listed, walk_due_page
from punctual.domain.keys import bucket_start, index_key
from punctual.domain.model import Task, TaskStatus
from punctual.stores.dynamodb.codec import schedule_id_of_key, to_av
from punctual.stores.dynamodb.table import DUE_INDEX, Table
from punctual.stores.dynamodb.tenants import readable_tasks


class DuePages:
    """Pages of the due index of ``table``, each task read from the base table (what
    :class:`~punctual.stores.dynamodb.tasks.TaskItems`, the adapter's ClientPort, answers them with)."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def first_bucket(self) -> int | None:
        """The oldest bucket that may hold an active task: the oldest of the poll groups' watermarks (one strongly
        consistent BatchGetItem); a group with none yet (no poll ran) is read from the index once
        (:meth:`~.table.Table.oldest_active_due`). None: the index holds no active task."""
        config = self.table.config
        keys = {config.watermark_key(group): group for group in range(config.poll_groups)}
        marks = {
            item["task_id"]["S"]: int(item["watermark_ms"]["N"])
            for item in self.table.batch_get(list(keys), consistent=True, projection="task_id, watermark_ms")
            if "watermark_ms" in item
        }
        starts = [
            marks[key] if key in marks else self.table.oldest_active_due(config.group_shards(group))
            for key, group in keys.items()
        ]
        known = [start for start in starts if start is not None]
        return min(known) if known else None

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
        """See :meth:`punctual.stores.ports.ClientPort.due_page`: each bucket's shards are queried in parallel, each
        with ``Limit`` what the page still needs, merged by (due, id), and the page's tasks read in one BatchGetItem."""
        low = due_from_ms if due_from_ms is not None else 0
        high = due_to_ms - 1
        if after is None:
            first = self.first_bucket()
            if first is None:
                return [], None, 0
            after = DuePosition(bucket_start(max(first, low))).text()

        def read_bucket(bucket_ms: int, position: DuePosition | None, needed: int) -> tuple[list[Entry], int]:
            shards = list(range(self.table.config.shard_count))
            parts = self.table.parallel(lambda s: self._shard(bucket_ms, s, (low, high), position, needed), shards)
            return sorted(e for entries, _ in parts for e in entries), sum(count for _, count in parts)

        entries, cursor, read = walk_due_page(low, max(high, now_ms), after, limit, read_bucket)
        found = {task.task_id: task for task in readable_tasks(self.table.items_of([t for _, t in entries]))}
        return still_listed(entries, found, statuses), cursor, read

    def due_instants(
        self, due_from_ms: int | None, due_to_ms: int, *, now_ms: int, limit: int, max_buckets: int
    ) -> tuple[list[int], bool]:
        """See :meth:`punctual.stores.ports.ClientPort.due_instants`: each bucket's shards queried in parallel, a
        bucket at a time, keys only (``due_ms``)."""
        low, high = due_from_ms if due_from_ms is not None else 0, due_to_ms - 1
        first = self.first_bucket()
        if first is None:
            return [], True
        buckets, complete = instant_buckets(max(first, bucket_start(low)), max(high, now_ms), max_buckets)
        dues: list[int] = []
        shards = range(self.table.config.shard_count)
        for bucket_ms in buckets:
            queries = [(bucket_ms, shard) for shard in shards]
            for part in self.table.parallel(lambda q: self._instants(q[0], q[1], low, high), queries):
                dues.extend(part)
            if len(dues) > limit:
                return dues[:limit], False
        return dues, complete

    def _instants(self, bucket_ms: int, shard: int, low: int, high: int) -> list[int]:
        """The due instants of one shard of one bucket in ``[low, high]`` (schedules' entries left out)."""
        dues: list[int] = []
        for page in self.table.client.get_paginator("query").paginate(
            TableName=self.table.name,
            IndexName=DUE_INDEX,
            KeyConditionExpression="due_bucket = :pk AND due_ms BETWEEN :low AND :high",
            ExpressionAttributeValues=to_av({":pk": index_key(bucket_ms, shard), ":low": low, ":high": high}),
            ProjectionExpression="task_id, due_ms",
        ):
            items = page.get("Items", [])
            dues.extend(int(raw["due_ms"]["N"]) for raw in items if schedule_id_of_key(raw["task_id"]["S"]) is None)
        return dues

    def _shard(
        self, bucket_ms: int, shard: int, dues: tuple[int, int], position: DuePosition | None, needed: int
    ) -> tuple[list[Entry], int]:
        """One shard's entries of one bucket due in ``dues`` (inclusive) after ``position``, sorted: at least the
        first ``needed`` (all when fewer), with every entry that shares the last one's due instant (so the merge
        of the shards is in order whatever order the index gives ties); and how many entries were read."""
        low = max(dues[0], position.due_ms) if position is not None and position.due_ms is not None else dues[0]
        kwargs: dict[str, Any] = {
            "TableName": self.table.name,
            "IndexName": DUE_INDEX,
            "KeyConditionExpression": "due_bucket = :pk AND due_ms BETWEEN :low AND :high",
            "ExpressionAttributeValues": to_av({":pk": index_key(bucket_ms, shard), ":low": low, ":high": dues[1]}),
            "ProjectionExpression": "task_id, due_ms",
            "Limit": needed + 1,  # one past what the page needs: it shows whether the last needed one has ties
        }
        got: list[Entry] = []
        read = 0
        while True:
            page = self.table.client.query(**kwargs)
            items = page.get("Items", [])
            read += len(items)
            for raw in items:
                entry = (int(raw["due_ms"]["N"]), raw["task_id"]["S"])
                if schedule_id_of_key(entry[1]) is None and (position is None or position.precedes(entry)):
                    got.append(entry)
            more = page.get("LastEvaluatedKey")
            last_due = int(items[-1]["due_ms"]["N"]) if items else None
            if not more or (len(got) >= needed and last_due is not None and last_due > sorted(got)[needed - 1][0]):
                return sorted(got), read
            kwargs["ExclusiveStartKey"] = more
