"""The firing engine: one dispatcher thread over a heap of deadlines, and a pool of worker threads.

The dispatcher sleeps until shortly before the earliest deadline, waits on the monotonic clock for the rest
(:class:`FireTiming`: how much of that wait is spun), then hands every item that is due to an idle worker. One
sleeping thread per task does not scale: its error grows with the threads, while one heap thread's stays at the
floor (docs/decisions.md, "Arm ahead, fire from one heap thread"). Nothing but the hand-off happens between
wake-up and fire: callers do their database work before ``add`` and after the fire callback.

A hand-off wakes one thread, and only one that has an entry to fire: the dispatcher gives the entry to an idle
worker and releases that worker's own lock. Entries due while a woken worker has not started yet wait in a
backlog, and that worker, as it starts, passes the next of them to one more idle worker: a burst brings
workers in one after another, as a shared queue does, without a crowd of threads woken at once fighting for
the interpreter lock. (A shared ``queue.SimpleQueue`` also wakes the next idle getter after every entry
taken, and at the end of a burst, or at every lone fire, that getter finds nothing: seen with ``perf sched``
as a second wake-up and an interpreter-lock ping-pong at every fire, the second thread queued behind the one
spinning to the instant.)

While a fire is about to start (from the dispatcher's spin to the end of the fire callback), the interpreter's
switch interval is short (:data:`FIRE_SWITCH_INTERVAL_S`, see :class:`FireWindows`): another thread of the
process that holds the interpreter lock then (arming a batch, recording outcomes) gives it back within that
interval, not the ordinary one.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from punctual.domain.clock import Clock, SystemClock
from punctual.executing.priority import raise_current_thread

T = TypeVar("T")
log = logging.getLogger(__name__)
_STOP = object()
FIRE_SWITCH_INTERVAL_S = 0.0001
QUOTA_SPIN_S = 0.0002  # under a CPU quota, a fire spins this long before its deadline; it sleeps until then


@dataclass(frozen=True, slots=True)
class FireTiming:
    """How the dispatcher waits for a deadline: where it stops sleeping, and how much of the rest it spins.

    Attributes
    ----------
    spin_s:
        The dispatcher stops sleeping this long before it hands a lone item over, and spins meanwhile.
    handoff_s:
        A lone item (nothing else due within this long) is handed to its worker this early, and the worker
        waits for the deadline: waking a thread can take a scheduler slice on a busy machine, and this hides
        it. Items due together are handed over one by one at their deadlines.
    fire_spin_s:
        How long a thread spins before a deadline it waits for after the hand-off (the worker, for a lone item;
        the dispatcher, between items due together); before that it sleeps. ``None``: the whole hand-off.
    """

    spin_s: float = 0.001
    handoff_s: float = 0.004
    fire_spin_s: float | None = None

    @classmethod
    def for_cpu_share(cls, cpu_share: float | None) -> FireTiming:
        """The timing for a process that may use ``cpu_share`` of a core (``None``: no quota).

        On whole cores a lone fire spins ``spin_s + handoff_s`` (5 ms): nothing is as punctual as a thread
        already running at the instant. Under a quota of less than a core (Lambda below 1,769 MB) what it spins
        is taken from the quota, and once the quota of a period (100 ms) is spent the whole process is stopped
        until the next one: spinning 5 ms a fire, 0.145 of a core is spent by about 30 fires a second, and every
        fire after that waits for the next period. There the dispatcher and the worker sleep to
        :data:`QUOTA_SPIN_S` before the deadline and spin only that."""
        if cpu_share is None or cpu_share >= 1.0:
            return cls()
        return cls(spin_s=0.0, fire_spin_s=QUOTA_SPIN_S)

    @property
    def final_spin_s(self) -> float:
        """What a thread spins before a deadline it waits for after the hand-off."""
        return self.handoff_s if self.fire_spin_s is None else min(self.fire_spin_s, self.handoff_s)


def wait_for_deadline(clock: Clock, deadline: float, spin_s: float) -> None:
    """Return at the monotonic instant ``deadline``, never before: sleep until ``spin_s`` before it, then spin."""
    ahead = deadline - spin_s - clock.monotonic()
    if ahead > 0:
        clock.sleep(ahead)
    while clock.monotonic() < deadline:
        pass


class FireWindows:
    """Counts the fires of this process that are about to start; while there is one, the interpreter's switch
    interval is ``interval_s``, and the interval it had before comes back once there is none.

    A thread waiting for the interpreter lock asks its holder to let go after the switch interval. A firing
    thread that finds the lock held by another thread (a batch being armed, outcomes being written) waits that
    long: with the ordinary 1 ms (the executor's ``switch_interval_s``), about that much late, at up to ~10% of
    fires while an executor arms while it fires. Short all the time, the interval would cost every thread many
    more switches; short only in the few milliseconds around a fire, it costs little."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._count = 0
        self._saved = interval_s
        self._lock = threading.Lock()

    def enter(self, count: int = 1) -> None:
        with self._lock:
            if self._count == 0:
                self._saved = sys.getswitchinterval()
                sys.setswitchinterval(min(self._saved, self.interval_s))
            self._count += count

    def leave(self, count: int = 1) -> None:
        with self._lock:
            self._count -= count
            if self._count == 0:
                sys.setswitchinterval(self._saved)

    @property
    def open(self) -> int:
        """Fires about to start now (0: the ordinary interval is in force)."""
        return self._count


FIRE_WINDOWS = FireWindows(FIRE_SWITCH_INTERVAL_S)  # one per process: the switch interval is the interpreter's


class _Worker:
    """A worker thread's hand-off slot: ``wake`` is held while the worker has nothing to do; the dispatcher
    sets ``entry`` and releases ``wake``."""

    __slots__ = ("entry", "wake")

    def __init__(self) -> None:
        self.entry: object = None
        self.wake = threading.Lock()
        self.wake.acquire()


class Dispatcher(Generic[T]):
    """Fire ``fire(item)`` in a worker thread at each item's monotonic deadline.

    Parameters
    ----------
    fire:
        Called in a worker thread as soon as the item is due; it should note the time first.
    workers:
        Worker threads, all started up front (a burst must not pay for thread creation).
    timing:
        Where it stops sleeping before a deadline and how much it spins (:meth:`FireTiming.for_cpu_share`).
    """

    def __init__(
        self,
        fire: Callable[[T], None],
        workers: int = 32,
        clock: Clock | None = None,
        name: str = "dispatcher",
        timing: FireTiming | None = None,
    ) -> None:
        self._fire = fire
        self._clock = clock or SystemClock()
        self.timing = timing or FireTiming()
        self._heap: list[tuple[float, int, T]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._slots = [_Worker() for _ in range(workers)]
        self._idle_workers = list(self._slots)  # a stack: the worker that finished last is handed the next entry
        self._backlog: deque[object] = deque()  # entries due while every worker was busy, in order
        self._hand_lock = threading.Lock()
        self._waking = 0  # workers handed an entry that have not started yet
        self._pending = 0  # added but not yet finished by a worker
        self._handing = 0  # taken from the heap at a fire instant and not yet handed on (the dispatcher's own)
        self._idle = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._dispatch, name=name, daemon=True)
        self._workers = [
            threading.Thread(target=self._work, args=(slot,), name=f"{name}-worker-{i}", daemon=True)
            for i, slot in enumerate(self._slots)
        ]
        for worker in self._workers:
            worker.start()
        self._thread.start()

    def add(self, deadline: float, item: T) -> None:
        """Schedule ``item`` for the monotonic instant ``deadline`` (a past deadline fires at once)."""
        with self._idle:
            self._pending += 1
        with self._cond:
            heapq.heappush(self._heap, (deadline, next(self._seq), item))
            self._cond.notify()

    def seconds_to_next_fire(self) -> float:
        """Seconds until the earliest queued deadline (``inf`` when nothing is queued); 0 while fires of an
        instant are still being handed on or wait for a worker (a burst is firing)."""
        if self._handing or self._backlog:
            return 0.0
        try:
            deadline = self._heap[0][0]  # read without the lock: the heap may empty meanwhile
        except IndexError:
            return float("inf")
        return deadline - self._clock.monotonic()

    def busy_until(self, min_gap_s: float) -> float:
        """The monotonic instant of the last queued deadline before the first gap of at least ``min_gap_s``
        between fires (now, if the next fire is at least that far away): a caller that wants a quiet moment
        sleeps until then instead of waking after every fire."""
        now = self._clock.monotonic()
        with self._cond:  # the dispatcher takes this lock at the fire instant: copy, sort outside it
            deadlines = [entry[0] for entry in self._heap]
        deadlines.sort()
        # fires of an instant still being handed on: not quiet before they have (at least a gap from now)
        previous = now + min_gap_s if self._handing or self._backlog else now
        for deadline in deadlines:
            if deadline - previous >= min_gap_s:
                return previous
            previous = max(previous, deadline)
        return previous

    def cancel_pending(self) -> list[T]:
        """Take back every item that has not been handed to a worker yet (for a clean shutdown)."""
        with self._cond:
            items = [entry[2] for entry in sorted(self._heap)]
            self._heap.clear()
        with self._idle:
            self._pending -= len(items)
            if self._pending == 0:
                self._idle.notify_all()
        return items

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every added item has been fired and its callback returned."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        """Stop the threads after the queued items have fired."""
        self.wait_idle()
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
        for _ in self._workers:
            self._hand(_STOP)
        for worker in self._workers:
            worker.join()

    def __enter__(self) -> Dispatcher[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _dispatch(self) -> None:
        raise_current_thread()  # real-time where the runtime asks for it and the system allows it (locally)
        clock, heap, cond, timing = self._clock, self._heap, self._cond, self.timing
        lead, handoff, fire_spin = timing.spin_s + timing.handoff_s, timing.handoff_s, timing.final_spin_s
        put, windows = self._hand, FIRE_WINDOWS
        while True:
            with cond:
                while not heap:
                    if self._closing:
                        return
                    cond.wait()
                deadline = heap[0][0]
                remaining = deadline - clock.monotonic()
                if remaining > lead:
                    cond.wait(remaining - lead)  # an earlier item may arrive: look again
                    continue
            windows.enter()  # this spin's; each entry handed on holds one more until its fire callback returns
            wait_for_deadline(clock, deadline - handoff, timing.spin_s)
            with cond:
                due = []
                while heap and heap[0][0] <= deadline + handoff:
                    due.append(heapq.heappop(heap))
            windows.enter(len(due))
            windows.leave()
            self._handing = len(due)
            if len(due) == 1:
                # A lone item goes to its worker ``handoff_s`` early and the worker waits for the deadline:
                # waking a thread can take a scheduler slice on a busy machine, and this hides it.
                put((due[0][2], due[0][0]))
                self._handing = 0
                continue
            for item_deadline, _, item in due:  # several at (nearly) one instant: each at its deadline
                wait_for_deadline(clock, item_deadline, fire_spin)
                put((item, None))
                self._handing -= 1

    def _hand(self, entry: object) -> None:
        """Give ``entry`` to the idle worker that finished last, waking only it; to the backlog while a woken
        worker has not started yet (it passes the backlog on, :meth:`_started`) or every worker is busy (a
        worker empties the backlog before it goes idle)."""
        with self._hand_lock:
            if self._waking or self._backlog or not self._idle_workers:
                self._backlog.append(entry)
                return
            slot = self._idle_workers.pop()
            self._waking += 1
        slot.entry = entry
        slot.wake.release()

    def _started(self) -> None:
        """A woken worker has started: hand the backlog's next entry to one more idle worker, if any.

        Invariant (under ``_hand_lock``): a non-empty backlog means a woken worker has yet to start, or no
        worker is idle; so a waiting entry never waits while a worker sleeps."""
        with self._hand_lock:
            self._waking -= 1
            if not (self._backlog and self._idle_workers):
                return
            slot = self._idle_workers.pop()
            slot.entry = self._backlog.popleft()
            self._waking += 1
        slot.wake.release()

    def _next_or_idle(self, slot: _Worker) -> object:
        """The backlog's next entry, or ``None`` once ``slot`` is back among the idle workers."""
        with self._hand_lock:
            if self._backlog:
                return self._backlog.popleft()
            self._idle_workers.append(slot)
            return None

    def _work(self, slot: _Worker) -> None:
        raise_current_thread()
        fire, clock, fire_spin = self._fire, self._clock, self.timing.final_spin_s
        while True:
            slot.wake.acquire()
            entry, slot.entry = slot.entry, None
            self._started()
            while entry is not None:
                if entry is _STOP:
                    return
                item, deadline = cast("tuple[T, float | None]", entry)
                if deadline is not None:
                    wait_for_deadline(clock, deadline, fire_spin)
                try:
                    fire(item)
                except Exception:  # one failing callback must not take a worker out of the pool
                    log.exception("fire callback failed")
                finally:
                    FIRE_WINDOWS.leave()
                    with self._idle:
                        self._pending -= 1
                        if self._pending == 0:
                            self._idle.notify_all()
                entry = self._next_or_idle(slot)
