"""What the DynamoDB adapter is configured with: :class:`StoreConfig`, derived from
:class:`~punctual.config.settings.Settings` by :meth:`StoreConfig.from_settings`. Settings validates every field (that
``poll_groups`` divides ``shard_count``, that ``write_batch`` is one of its two ways); the adapter takes what it is
given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from punctual.config.settings import Settings
from punctual.domain.keys import index_key, shard_of

WATERMARK_KEY = "#poller-watermark"  # not a valid task id, so it can never collide with a task


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """The adapter's share of the settings.

    Attributes
    ----------
    table_name:
        The Tasks table (defined in ``template.yaml``).
    shard_count:
        Shards per minute bucket of the due index.
    poll_groups:
        Groups the due index's shards are split into, one poller each.
    fast_path_within_ms:
        A task written due sooner than this (the poll interval + a margin) carries ``fast_path = 1``.
    retention_ms:
        Finished tasks get ``expires_at`` = finish + this; DynamoDB's TTL deletes them afterwards.
    db_threads:
        Parallel requests for the many-item writes and reads.
    write_batch:
        "single" (UpdateItem each) or "transaction" (TransactWriteItems of up to 100): see :mod:`.writes`.
    overdue_safety_ms:
        A look for due work never moves its watermark closer to now than this.
    schedule_ahead_ms:
        A recurring schedule waits in the due index from this long before its next occurrence.
    """

    table_name: str
    shard_count: int
    poll_groups: int
    fast_path_within_ms: int
    retention_ms: int
    db_threads: int
    write_batch: Literal["single", "transaction"]
    overdue_safety_ms: int
    schedule_ahead_ms: int

    @classmethod
    def from_settings(cls, settings: Settings) -> StoreConfig:
        """What the adapter needs of ``settings``."""
        return cls(
            table_name=settings.table_name,
            shard_count=settings.shard_count,
            poll_groups=settings.poll_groups,
            fast_path_within_ms=settings.poll_interval_ms + settings.fast_path_margin_ms,
            retention_ms=settings.retention_days * 86_400_000,
            db_threads=settings.db_threads,
            write_batch=settings.write_batch,
            overdue_safety_ms=settings.overdue_safety_ms,
            schedule_ahead_ms=settings.schedule_ahead_ms,
        )

    def group_shards(self, group: int) -> range:
        """The shards poll group ``group`` reads (of ``poll_groups`` equal ranges)."""
        if not 0 <= group < self.poll_groups:
            raise ValueError(f"poll group {group} is not one of 0..{self.poll_groups - 1}")
        size = self.shard_count // self.poll_groups
        return range(group * size, (group + 1) * size)

    def watermark_key(self, group: int = 0) -> str:
        """The item holding poll group ``group``'s watermark: one per group (a group must not move another's past a
        bucket it has not read); with one group, the single key ``#poller-watermark``."""
        self.group_shards(group)
        groups = self.poll_groups
        return WATERMARK_KEY if groups == 1 else f"{WATERMARK_KEY}#{group}/{groups}"

    def index_key(self, key: str, due_ms: int, now_ms: int) -> str:
        """The due-index key of an item keyed ``key``, due at ``due_ms``, written at ``now_ms``: the minute of
        ``max(due, now)`` and the key's shard."""
        return index_key(max(due_ms, now_ms), shard_of(key, self.shard_count))

    def fast_path(self, due_ms: int, now_ms: int) -> int:
        """1 when an item written at ``now_ms`` is due sooner than the next poll can dispatch it, else 0."""
        return 1 if due_ms - now_ms < self.fast_path_within_ms else 0

    def expires_at(self, finished_ms: int) -> int:
        """The TTL (epoch seconds) of an item finished at ``finished_ms``."""
        return (finished_ms + self.retention_ms) // 1000
