"""An executor's heartbeat: how it shows it is alive while it holds armed tasks, and how it knows to stop.

While a batch runs, the executor renews ``alive_until = now + lease`` in the store every ``interval`` (a small
write to an item of its own, never the tasks: cost does not grow with the batch). If it dies, its heartbeat
lapses; the next poll finds its unfired tasks ARMED by a dead owner and another executor takes them over
(:meth:`punctual.stores.ports.FiringPort.arm_many`), knowing that the dead one may have fired only what was due up to
its last ``alive_until``: tasks due later fire on time, once. A lease never reaches past the end of the
invocation running the executor (Lambda kills it then), and when death is known sooner (Lambda retries the
invocation, whose retry finds its earlier attempt by the invocation's request id; a local restart stops the
processes a killed stack left) the dead executor is fenced: alive until then at the latest, never renewed.

That holds because an executor fires only within its own lease: :attr:`Heartbeat.fence` is the monotonic
instant ``lease - safety`` after the start of its last successful renewal, and the executor checks it before
each fire (one comparison). A renewal that fails leaves the fence where it was, so an executor cut off from
the store stops firing before anyone may take over; one that finds itself taken over (a takeover marks it)
stops at once and for good.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from punctual.domain.clock import Clock
from punctual.stores.ports import FiringPort

log = logging.getLogger("punctual.executing.executor")

SAFETY_MS = 2_000  # the executor stops firing this long before its lease ends (clock skew, a slow write)
MAX_QUIET_WAIT_S = 1.0  # a renewal waits at most this long for a gap between fires


class Heartbeat:
    """Renews one executor's lease between :meth:`start` and :meth:`stop`, from a thread of its own.

    The thread is started here, by the thread that builds the executor, and lives as long as the process (a
    warm start reuses it): it inherits that thread's CPU priority, the default, so that a busy machine cannot
    starve a renewal (a lowered thread could wait past the lease, and the executor would stop firing).

    Parameters
    ----------
    store, clock:
        Where the lease is written, and the clock (wall for the lease, monotonic for the fence).
    lease_ms, interval_ms:
        How long a renewal keeps the executor alive, and how often it renews (several renewals per lease).
    seconds_to_next_fire:
        When given, a renewal waits (up to :data:`MAX_QUIET_WAIT_S`) until the next fire is at least
        ``quiet_s`` away, so that its write does not hold the interpreter as a fire is due.
    """

    def __init__(  # noqa: PLR0913  the heartbeat's store, clock and lease; its quiet-time options keyword-only
        self,
        store: FiringPort,
        clock: Clock,
        lease_ms: int,
        interval_ms: int,
        *,
        seconds_to_next_fire: Callable[[], float] | None = None,
        quiet_s: float = 0.025,
    ) -> None:
        if interval_ms * 2 > lease_ms - SAFETY_MS:
            raise ValueError(
                f"heartbeat interval {interval_ms} ms leaves no renewal to spare in a lease of "
                f"{lease_ms} ms (safety {SAFETY_MS} ms)"
            )
        self._store = store
        self._clock = clock
        self._lease_ms = lease_ms
        self._interval_s = interval_ms / 1000
        self._gap = seconds_to_next_fire
        self._quiet_s = quiet_s
        self.fence = float("-inf")  # no lease yet: fire nothing
        self.executor_id: str | None = None
        self.taken_over = False
        self._deadline_ms: float | None = None  # the current invocation's end
        self._invocation: str | None = None  # the current invocation's request id
        self._cv = threading.Condition()
        self._lease = 0  # counts leases taken; the renewing thread renews only the current one
        self._active = False
        self._closed = False
        self._failing = False  # the last renewal failed: further failures log a line, not a traceback
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def start(self, executor_id: str, deadline_ms: float | None = None, invocation: str | None = None) -> bool:
        """Take the first lease (synchronously) and have it renewed; False if the first write failed, and then
        nothing may be armed. ``deadline_ms``: when the invocation ends (Lambda kills it then), past which no
        lease reaches; ``invocation``: its request id, written with the lease (a retry of it fences this one)."""
        with self._cv:
            self.executor_id, self.taken_over = executor_id, False
            self._deadline_ms, self._invocation = deadline_ms, invocation
            self.fence = float("-inf")
            if not self.beat():
                return False
            self._lease += 1
            self._active = True
            self._cv.notify_all()
        return True

    def beat(self, retire: bool = False) -> bool:
        """One renewal (with ``retire``: alive until now, the batch is over). Never raises."""
        assert self.executor_id is not None
        mono, wall = self._clock.monotonic(), int(self._clock.wall_ms())
        until = wall if retire else wall + self._lease_ms
        if self._deadline_ms is not None:  # never alive past the invocation's end: it cannot be, and a takeover
            until = max(wall, min(until, int(self._deadline_ms)))  # need not wait for a lease that outlives it
        try:
            ok = self._store.heartbeat(self.executor_id, wall, until, self._invocation)
        except Exception as exc:  # the fence stays where it was: past it, this executor stops firing
            left = max(self.fence - self._clock.monotonic(), 0.0)
            if self._failing:  # the traceback was logged at the first failure of this run of failures
                log.error(
                    "executor %s: heartbeat failed again (%s); firing stops %.1f s from now unless one succeeds",
                    self.executor_id,
                    type(exc).__name__,
                    left,
                )
            else:
                log.exception(
                    "executor %s: heartbeat failed; firing stops %.1f s from now unless one succeeds",
                    self.executor_id,
                    left,
                )
            self._failing = True
            return False
        self._failing = False
        if not ok:
            self.taken_over = True
            self.fence = float("-inf")
            log.error("executor %s: taken over (presumed dead): it fires nothing more", self.executor_id)
            return False
        if not retire:
            self.fence = mono + (until - wall - SAFETY_MS) / 1000
        return True

    def stop(self) -> None:
        """Stop renewing and retire the lease (alive until now): what this executor still holds ARMED after a
        batch (fired but not recorded) may be taken over at once."""
        with self._cv:
            held, self._active = self._active, False
            self._cv.notify_all()
            self.fence = float("-inf")  # no fire from here on, before the lease is retired
            if held and not self.taken_over:
                self.beat(retire=True)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop (retiring a lease still held) and end the renewing thread: for a process that ends its
        executor before it exits (tests, a runtime shutting down)."""
        self.stop()
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        with self._cv:
            while True:
                while not self._active and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                lease = self._lease
                self._cv.wait(self._interval_s)  # woken early by stop(), close(), or by the next start()
                if not self._active or lease != self._lease:
                    continue
                self._cv.release()  # wait for a gap between fires without holding up start() or stop()
                try:
                    self._wait_for_quiet()
                finally:
                    self._cv.acquire()
                if self._active and lease == self._lease and not self.beat() and self.taken_over:
                    self._active = False

    def _wait_for_quiet(self) -> None:
        gap = self._gap
        if gap is None:
            return
        give_up = self._clock.monotonic() + MAX_QUIET_WAIT_S
        while self._clock.monotonic() < give_up:
            ahead = gap()
            if ahead >= self._quiet_s:
                return
            self._clock.sleep(min(max(ahead, 0.0) + self._quiet_s, 0.1))
