"""The in-memory store's due index, kept as the ports describe it (:mod:`punctual.stores.ports`).

An entry (an active task, or a schedule waiting for its next occurrences) is listed under the minute of
``max(due, written at)``, in the shard of its id; a poll group owns a range of the shards and keeps its own
watermark (before it, the group's share holds no active entry) and the start of its last poll.
"""

from __future__ import annotations

from collections.abc import Iterator

from punctual.domain.keys import BUCKET_MS, bucket_start, shard_of

Key = tuple[bool, str]  # an entry: (a schedule?, its id); a schedule may have a task's id


class DueIndex:
    """Entries by minute, each with its due instant; the groups' watermarks and poll starts. Not locked: the
    store that holds it is."""

    def __init__(self, shard_count: int, poll_groups: int) -> None:
        self.shard_count = shard_count
        self.poll_groups = poll_groups
        self._minutes: dict[int, dict[Key, int]] = {}  # minute -> entry -> its due
        self._placed: dict[Key, int] = {}  # entry -> its minute
        self.watermarks: dict[int, int] = {}
        self.polled: dict[int, int] = {}

    def place(self, key: Key, due_ms: int | None, now_ms: int) -> None:
        """List ``key`` due at ``due_ms``, under the minute of ``max(due_ms, now_ms)``; None: take it out."""
        minute = self._placed.pop(key, None)
        if minute is not None:
            del self._minutes[minute][key]
            if not self._minutes[minute]:
                del self._minutes[minute]
        if due_ms is not None:
            minute = bucket_start(max(due_ms, now_ms))
            self._placed[key] = minute
            self._minutes.setdefault(minute, {})[key] = due_ms

    def holds(self, key: Key) -> bool:
        return key in self._placed

    def __iter__(self) -> Iterator[Key]:
        return iter(self._placed)

    def group_shards(self, group: int) -> range:
        """The shards poll group ``group`` reads (consecutive ranges that together cover every shard)."""
        if not 0 <= group < self.poll_groups:
            raise ValueError(f"poll group {group} is not one of 0..{self.poll_groups - 1}")
        return range(group * self.shard_count // self.poll_groups, (group + 1) * self.shard_count // self.poll_groups)

    def entries(self, minute: int, until_ms: int, shards: range) -> list[tuple[int, Key]]:
        """The entries of ``shards`` listed under ``minute`` due at or before ``until_ms``, in due order."""
        listed = self._minutes.get(minute, {})
        return sorted((due, key) for key, due in listed.items() if due <= until_ms and self._in(key, shards))

    def start(self, group: int, safety_ms: int) -> int:
        """Where a look of ``group`` starts: its watermark; without one, the minute before its oldest entry's, or
        ``safety_ms``'s minute if that is older or there is no entry."""
        if group in self.watermarks:
            return self.watermarks[group]
        shards = self.group_shards(group)
        dues = [due for listed in self._minutes.values() for k, due in listed.items() if self._in(k, shards)]
        safety = bucket_start(safety_ms)
        return safety if not dues else min(safety, bucket_start(min(dues)) - BUCKET_MS)

    def first_bucket(self) -> int | None:
        """The oldest bucket that may hold an active entry: the oldest group watermark, a group without one read
        from its entries (the minute before its oldest); None when no group has either."""
        starts: list[int] = []
        for group in range(self.poll_groups):
            shards = self.group_shards(group)
            dues = [due for listed in self._minutes.values() for k, due in listed.items() if self._in(k, shards)]
            if group in self.watermarks:
                starts.append(self.watermarks[group])
            elif dues:
                starts.append(bucket_start(min(dues)) - BUCKET_MS)
        return min(starts) if starts else None

    def tasks_listed(self, minute: int, low_ms: int, high_ms: int) -> list[tuple[int, str]]:
        """The tasks (not schedules) listed under ``minute`` due in ``[low_ms, high_ms]``, by (due, id)."""
        listed = self._minutes.get(minute, {})
        return sorted((due, key[1]) for key, due in listed.items() if not key[0] and low_ms <= due <= high_ms)

    def _in(self, key: Key, shards: range) -> bool:
        return shard_of(key[1], self.shard_count) in shards


def forward(marks: dict[int, int], group: int, value_ms: int) -> bool:
    """Move ``marks[group]`` forward to ``value_ms`` (never back, nor to what it already holds)."""
    if group in marks and marks[group] >= value_ms:
        return False
    marks[group] = value_ms
    return True
