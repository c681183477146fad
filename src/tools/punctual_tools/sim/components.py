"""The simulation's mechanisms, each a small piece with its rule stated where it is applied.

- :class:`ScalingRate`: Lambda's per-function scaling rate (new environments a window, refilled continuously,
  never more than one window's worth at hand).
- :class:`AsyncQueue`: an async event's fate: run, retried after a throttle (1 s, doubling to 5 min), or dropped
  once older than ``MaximumEventAgeInSeconds``.
- :class:`WriteBucket`: a DynamoDB partition (or a table's warm throughput) as a token bucket of write units a
  second holding at most one second's worth; a write past it is throttled and retried (the SDK's backoff) until
  the bucket admits it. :func:`admit_write` takes a write through the base table and an index key at once: a
  throttled index write throttles the base write (GSI back-pressure).
- :func:`fire_times`: when an executor starts each fire of a batch, on its CPU share in quota periods (a fire
  past the period's quota waits for the next period) or on a share of cores it contends for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from punctual.config.cpu_share import MB_PER_VCPU


class ScalingRate:
    """New execution environments of one function: ``per_window`` every ``window_s``, refilled continuously, and
    never more than ``per_window`` at hand (Lambda does not bank an unused rate)."""

    def __init__(self, per_window: float, window_s: float) -> None:
        self.capacity = per_window
        self.rate = per_window / window_s
        self.tokens = per_window
        self.at: float | None = None  # when the tokens were last counted (None: full, never used)

    def _refill(self, now: float) -> None:
        if self.at is not None:
            self.tokens = min(self.capacity, self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now

    def take(self, now: float) -> bool:
        """Whether a new environment may be created at ``now`` (and, if so, one is taken)."""
        self._refill(now)
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    def next_at(self, now: float) -> float:
        """When the next new environment may be created."""
        self._refill(now)
        return now if self.tokens >= 1 else now + (1 - self.tokens) / self.rate


@dataclass
class AsyncQueue:
    """Lambda's async event queue for one function: an event that cannot start (no concurrency, no environment
    and no scaling rate left) is throttled and retried after 1 s, then 2, 4, … up to 5 min; an event whose age
    would pass ``max_age_s`` is dropped."""

    max_age_s: float
    first_retry_s: float = 1.0
    max_retry_s: float = 300.0
    throttles: int = 0
    dropped: int = 0
    oldest_age_s: float = 0.0

    def retry_delay(self, attempt: int) -> float:
        """The wait before retry ``attempt`` (1, 2, …) of a throttled event."""
        return float(min(self.max_retry_s, self.first_retry_s * 2 ** (attempt - 1)))

    def on_throttle(self, sent_at: float, now: float, attempt: int) -> float | None:
        """Count a throttle at ``now`` of an event sent at ``sent_at``: when to retry it, or None when that retry
        would be past the event's maximum age (the event is dropped)."""
        self.throttles += 1
        retry_at = now + self.retry_delay(attempt)
        if retry_at - sent_at > self.max_age_s:
            self.dropped += 1
            self.oldest_age_s = max(self.oldest_age_s, now - sent_at)
            return None
        return retry_at

    def on_start(self, sent_at: float, now: float) -> None:
        self.oldest_age_s = max(self.oldest_age_s, now - sent_at)


@dataclass
class WriteBucket:
    """Write units a second one partition (or a table's throughput) takes: a token bucket of ``rate`` holding at
    most ``bank_s`` seconds' worth (one; a provisioned table's burst capacity keeps up to 300 s of unused units).
    A write it cannot take at once is throttled; the SDK retries it until taken (a fluid queue: the write completes
    when the bucket has admitted all of it)."""

    rate: float
    bank_s: float = 1.0  # seconds of unused rate it keeps (provisioned capacity's burst capacity: 300)
    free_at: float = -math.inf  # the virtual time at which the bucket has taken everything offered so far
    throttled_units: float = 0.0
    units: float = 0.0
    busiest: dict[int, float] = field(default_factory=dict)  # write units taken, by second

    def admit(self, now: float, units: float) -> float:
        """Offer ``units`` at ``now``: when the last unit is taken (``now`` if the bucket had room)."""
        start = max(self.free_at, now - self.bank_s)  # at most bank_s seconds' tokens banked
        done = start + units / self.rate
        self.free_at = done
        self.units += units
        room = max(0.0, now - start) * self.rate
        self.throttled_units += max(0.0, units - room)
        second = int(now)
        self.busiest[second] = self.busiest.get(second, 0.0) + units
        return max(now, done)


def admit_write(now: float, units: float, buckets: Sequence[WriteBucket]) -> float:
    """A write of ``units`` to the base table that also writes index keys (``buckets``: the table's and each index
    key's): it completes when the slowest of them admits it, since a throttled index write throttles the base
    write (GSI back-pressure)."""
    return max((b.admit(now, units) for b in buckets), default=now)


def cpu_share(memory_mb: int) -> float:
    """The share of a core Lambda gives ``memory_mb`` (MemorySize / 1769, at most whole cores above)."""
    return memory_mb / MB_PER_VCPU


def fire_times(
    due_s: npt.NDArray[np.float64],
    start_s: float,
    fire_cpu_s: float,
    share: float,
    period_s: float | None,
) -> npt.NDArray[np.float64]:
    """When each fire of a batch starts: the executor, ready at ``start_s``, fires its tasks in due order, each
    needing ``fire_cpu_s`` of CPU. With ``period_s`` it runs at full speed until its quota for the period
    (``share`` × ``period_s``) is spent, then waits for the next period (Lambda's CPU quota); without, it runs
    at ``share`` of a core throughout (cores shared with others). A fire starts once its CPU is done and not
    before its due instant.

    The recursion ``cpu_i = max(A(due_i), cpu_{i-1}) + c``, in the executor's cumulative CPU time ``A(t)``, is
    solved at once with a running maximum.
    """
    if due_s.size == 0:
        return due_s
    c = fire_cpu_s
    ready = np.maximum(due_s, start_s)
    if period_s is None:
        cumulative = ready * share  # CPU time the executor has had by each instant
    else:
        quota = share * period_s
        periods = np.floor(ready / period_s)
        cumulative = periods * quota + np.minimum(ready - periods * period_s, quota)
    index = np.arange(due_s.size, dtype=np.float64)
    cpu_done = np.maximum.accumulate(cumulative - index * c) + (index + 1) * c
    if period_s is None:
        wall = cpu_done / share
    else:
        quota = share * period_s
        whole = np.floor(cpu_done / quota - 1e-12)
        wall = whole * period_s + (cpu_done - whole * quota)
    return np.asarray(np.maximum(wall, ready), dtype=np.float64)
