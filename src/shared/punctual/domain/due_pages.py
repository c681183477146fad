"""Pages of the due index in due order (:func:`walk_due_page`): how a store lists its active tasks for a person, a
page at a time, at a cost bounded by the page and not by the table.

The index lists a task under the minute of ``max(due, written at)`` (:mod:`punctual.domain.keys`), so the order is
by minute bucket, then by ``(due, task id)`` within a bucket: a task written after its due minute comes with the
bucket it was written in, after tasks due before it in earlier buckets. A page walks the buckets from the oldest that
may hold an active task, reads each bucket up to what the page still needs, and stops when the page is full, when the
last bucket is read, or after :data:`BUCKETS_PER_PAGE` buckets (an hour of empty minutes): then its cursor says
where the next page goes on. The cursor (:class:`DuePosition`) is opaque text to its callers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from punctual.domain.keys import BUCKET_MS, bucket_start
from punctual.domain.model import ACTIVE_STATUSES, Task, TaskStatus
from punctual.errors import InvalidRequestError

BUCKETS_PER_PAGE = 60  # minute buckets one page walks at most (each a query of every shard)

Entry = tuple[int, str]  # an index entry: (due_ms, task id), in the order a page lists them


@dataclass(frozen=True, slots=True)
class DuePosition:
    """Where a page of the due index goes on: in the minute bucket ``bucket_ms``, after the entry ``(due_ms,
    task_id)`` (with ``due_ms`` None: from the bucket's first entry)."""

    bucket_ms: int
    due_ms: int | None = None
    task_id: str = ""

    def text(self) -> str:
        """The cursor's text: ``"<bucket>"`` or ``"<bucket>/<due>/<task id>"``."""
        return str(self.bucket_ms) if self.due_ms is None else f"{self.bucket_ms}/{self.due_ms}/{self.task_id}"

    @classmethod
    def parse(cls, text: str) -> DuePosition:
        """The position a cursor's text names; InvalidRequestError when it names none."""
        bucket, _, rest = text.partition("/")
        due, _, task_id = rest.partition("/")
        try:
            position = cls(int(bucket), int(due) if rest else None, task_id)
        except ValueError:
            raise InvalidRequestError("after", f"{text!r} is not a cursor of the due index") from None
        if position.bucket_ms != bucket_start(position.bucket_ms) or (rest and not task_id):
            raise InvalidRequestError("after", f"{text!r} is not a cursor of the due index")
        return position

    def precedes(self, entry: Entry) -> bool:
        """Whether ``entry`` (of this position's bucket) comes after this position."""
        return self.due_ms is None or entry > (self.due_ms, self.task_id)


# (bucket, position in it or None, entries still needed) -> that bucket's entries after the position in page order,
# at least the first ``needed`` of them (all when it holds fewer), and how many index entries were read
BucketReader = Callable[[int, DuePosition | None, int], tuple[list[Entry], int]]


def walk_due_page(
    first_bucket_ms: int, last_bucket_ms: int, after: str | None, limit: int, read_bucket: BucketReader
) -> tuple[list[Entry], str | None, int]:
    """Up to ``limit`` entries of the due index in page order, from the bucket of ``first_bucket_ms`` (or from the
    cursor ``after``) through the bucket of ``last_bucket_ms``; the cursor of the next page (None: none); and how many
    index entries were read. Reads at most :data:`BUCKETS_PER_PAGE` buckets."""
    if limit < 1:
        raise InvalidRequestError("limit", f"a page holds at least one task, not {limit}")
    position = DuePosition.parse(after) if after is not None else DuePosition(bucket_start(first_bucket_ms))
    bucket = position.bucket_ms
    last = bucket_start(last_bucket_ms)
    entries: list[Entry] = []
    read = walked = 0
    while bucket <= last and walked < BUCKETS_PER_PAGE:
        needed = limit - len(entries)
        got, count = read_bucket(bucket, position if position.bucket_ms == bucket else None, needed)
        read += count
        walked += 1
        entries.extend(got[:needed])
        if len(entries) == limit:
            due_ms, task_id = entries[-1]
            return entries, DuePosition(bucket, due_ms, task_id).text(), read
        bucket += BUCKET_MS
    return entries, DuePosition(bucket).text() if bucket <= last else None, read


def still_listed(entries: list[Entry], found: dict[str, Task], statuses: Iterable[TaskStatus] | None) -> list[Task]:
    """The page's tasks as read from the base table, in the page's order: those still one of ``statuses`` (default
    PENDING and ARMED) and still due when their entry says (the index is eventually consistent: a task rescheduled
    a moment ago is listed under its new due instant, once)."""
    wanted = frozenset(statuses) if statuses is not None else ACTIVE_STATUSES
    return [
        task
        for due_ms, task_id in entries
        if (task := found.get(task_id)) is not None and task.status in wanted and task.due_ms == due_ms
    ]


def instant_buckets(first_bucket_ms: int, last_bucket_ms: int, max_buckets: int) -> tuple[list[int], bool]:
    """The buckets a count of due instants reads: from the bucket of ``first_bucket_ms`` through that of
    ``last_bucket_ms``, the latest ``max_buckets`` of them at most; and whether that is all of them."""
    first, last = bucket_start(first_bucket_ms), bucket_start(last_bucket_ms)
    start = max(first, last - (max_buckets - 1) * BUCKET_MS)
    return list(range(start, last + 1, BUCKET_MS)), start == first or first > last
