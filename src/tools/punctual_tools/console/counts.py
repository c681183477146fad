"""Counts too slow for a page, kept between pages (:class:`KeptCounts`): a tenant's active tasks are the entries of
its 32 keys of the sparse count index, every one read (seconds at 100,000 tasks on DynamoDB Local). A page asks
for the count and waits for it a short while; one that is not done yet shows "counting" and the page's live part
shows it when it is; one older than :attr:`KeptCounts.fresh_s` is shown with its age while it is counted again in
the background. One count of a key runs at a time, whoever asks."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

log = logging.getLogger(__name__)

FRESH_S = 30.0  # a count younger than this is shown as it is; an older one is counted again
PAGE_WAIT_S = 0.1  # how long a page waits for a count being made (a small table's is mostly done by then)


@dataclass(frozen=True, slots=True)
class Kept:
    """The last count of a key: ``value`` (None: none done yet), ``started`` (monotonic seconds: when the count
    began), ``error`` (the last attempt's, None when it held), and whether one is being made now."""

    value: int | None
    started: float
    error: str | None = None
    counting: bool = False

    def age_s(self, now: float) -> float:
        """How old the count is at ``now`` (monotonic seconds), from when it began."""
        return max(0.0, now - self.started)


class KeptCounts:
    """Counts by key, each made by a thread of its own when first asked for or when older than ``fresh_s``."""

    def __init__(self, fresh_s: float = FRESH_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.fresh_s = fresh_s
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._kept: dict[str, Kept] = {}
        self._running: dict[str, threading.Event] = {}

    def get(self, key: str, count: Callable[[], int], wait_s: float | None) -> Kept:
        """The count of ``key``, counted by ``count()`` when there is none, the last failed or it is stale, waiting
        for a count being made at most ``wait_s`` (None: until it is done)."""
        with self._lock:
            kept = self._kept.get(key)
            done = self._running.get(key)
            stale = kept is None or kept.error is not None or self.monotonic() - kept.started >= self.fresh_s
            if done is None and stale:
                done = threading.Event()
                self._running[key] = done
                thread = threading.Thread(target=self._count, args=(key, count, done), name=f"count {key}", daemon=True)
                thread.start()
        if done is not None:
            done.wait(wait_s)
        with self._lock:
            kept = self._kept.get(key)
            counting = key in self._running
        if kept is None:
            return Kept(value=None, started=self.monotonic(), counting=counting)
        return replace(kept, counting=counting)

    def forget(self) -> None:
        """Drop every count kept (one being made is kept when it is done): the next page asks for them afresh."""
        with self._lock:
            self._kept.clear()

    def settle(self) -> None:
        """Wait until no count is being made."""
        while True:
            with self._lock:
                running = list(self._running.values())
            if not running:
                return
            for done in running:
                done.wait()

    def _count(self, key: str, count: Callable[[], int], done: threading.Event) -> None:
        started = self.monotonic()
        value: int | None
        error: str | None = None
        try:
            value = count()
        except Exception as exc:  # a failed count is shown on the page and made again when next asked for
            log.exception("counting %s failed", key)
            with self._lock:
                previous = self._kept.get(key)
            value, error = (None if previous is None else previous.value), f"{type(exc).__name__}: {exc}"[:300]
            if previous is not None:  # the value shown is still the last one that held, as old as it is
                started = previous.started
        with self._lock:
            self._kept[key] = Kept(value=value, started=started, error=error)
            del self._running[key]
        done.set()
