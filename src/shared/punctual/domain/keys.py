"""Time-bucket and shard maths for the sparse ``due`` and ``tenant_active_sharded`` indexes, and the poller's window
tiling.

All instants are integers of milliseconds since the Unix epoch (UTC).
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta

BUCKET_MS = 60_000
# The keys a tenant's active tasks are spread over in the tenant_active_sharded index ("<tenant>#<k>"), so that no
# tenant's creates and outcomes write one index key (DynamoDB takes about 1,000 writes a second a key, and a task
# writes its entry twice: in at its create, out at its outcome): 32 keys take one tenant to about 16,000 tasks a
# second. A count reads every key. Fixed: an entry written under a key beyond a lowered count would never be counted.
TENANT_ACTIVE_SHARDS = 32


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last instant a datetime holds


def to_ms(moment: datetime) -> int:
    """Milliseconds since the epoch of a timezone-aware datetime (sub-millisecond part dropped)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("datetime must be timezone-aware")
    delta = moment.astimezone(UTC) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(ms: int | float) -> datetime:
    """The UTC datetime of an epoch-millisecond instant (exact: integer arithmetic, no float seconds)."""
    return EPOCH + timedelta(milliseconds=ms)


def bucket_start(ms: int) -> int:
    """Start of the minute bucket holding ``ms``."""
    return ms - ms % BUCKET_MS


def shard_of(task_id: str, shard_count: int) -> int:
    """Stable shard of a task id (CRC-32, the same in every process and language)."""
    return zlib.crc32(task_id.encode()) % shard_count


def tenant_active_key(tenant: str, task_id: str) -> str:
    """Partition key of a tenant's task in the tenant_active_sharded index: ``"<tenant>#<shard of its id>"``."""
    return _tenant_active_key(tenant, shard_of(task_id, TENANT_ACTIVE_SHARDS))


def tenant_active_keys(tenant: str) -> list[str]:
    """Every partition key a tenant's active tasks may be under (what its count reads)."""
    return [_tenant_active_key(tenant, shard) for shard in range(TENANT_ACTIVE_SHARDS)]


def _tenant_active_key(tenant: str, shard: int) -> str:
    return f"{tenant}#{shard}"


def index_key(bucket_ms: int, shard: int) -> str:
    """Partition key of the due index: ``"<minute bucket, ISO UTC>#<shard>"``."""
    return f"{from_ms(bucket_start(bucket_ms)).strftime('%Y-%m-%dT%H:%M')}#{shard}"


def buckets_between(first_ms: int, last_ms: int) -> list[int]:
    """Every bucket start from the bucket of ``first_ms`` to the bucket of ``last_ms``, inclusive."""
    start, stop = bucket_start(first_ms), bucket_start(last_ms)
    return list(range(start, stop + 1, BUCKET_MS)) if start <= stop else []


def poll_tick(now_ms: int, interval_ms: int) -> int:
    """The scheduled tick a poll running at ``now_ms`` belongs to (ticks are multiples of the interval)."""
    return now_ms - now_ms % interval_ms


def poll_window(now_ms: int, interval_ms: int, lead_ms: int) -> tuple[int, int]:
    """The half-open window ``(start, end]`` of due times that this tick is first responsible for.

    The poller dispatches everything due up to ``end`` (overdue included); the window says which instants are
    *new* to this tick. Consecutive ticks tile the time line: every instant falls in exactly one window.
    """
    end = poll_tick(now_ms, interval_ms) + lead_ms
    return end - interval_ms, end


def next_tick(now_ms: int, interval_ms: int) -> int:
    """The first tick strictly after ``now_ms``."""
    return poll_tick(now_ms, interval_ms) + interval_ms
