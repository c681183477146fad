"""Lambda's queue of async invocations for one function, locally: concurrency, throttling, retries, event age.

:class:`AsyncEventQueue` takes events (``put``, like ``InvocationType="Event"``: it returns at once) and runs each
through ``execute`` (one execution environment, see :mod:`punctual_tools.local.invoker`) in a thread of its own,
by the rules of :mod:`punctual_tools.local.lambda_rules`:

- **Concurrency**: at most ``concurrency`` executions at once. An event that finds none free is throttled: it
  waits 1 s, 2 s, 4 s, ... (at most 5 minutes) and tries again, for as long as its age allows; it never runs past
  the cap.
- **Retries**: an execution that failed (the handler raised, its process died, it timed out) is retried up to the
  function's ``MaximumRetryAttempts``, 1 minute and then 2 minutes later; then the event is dropped.
- **Event age**: counted from the event's first enqueue, through every throttle, run and retry: an event older
  than ``MaximumEventAgeInSeconds`` is dropped instead of run, and so is one whose next try would come after that
  age (a retry of an execution that ran to its timeout, say).
- **Stop**: :meth:`stop` drops what waits (its tasks stay PENDING: the next poll dispatches them again).

Every delay and the event age are in Lambda's seconds times ``time_scale`` (1.0: Lambda's own; tests shorten them).
The queue reads time from a :class:`QueueClock` (the monotonic clock; a test may pass its own).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from punctual_tools.local.lambda_rules import FunctionLimits, is_expired, retry_delay_s, throttle_backoff_s

log = logging.getLogger(__name__)

ResultCallback = Callable[[dict[str, Any], dict[str, Any]], None]


class InvokerStoppedError(RuntimeError):
    """The invoker is shutting down and accepts no more events."""


@dataclass(frozen=True)
class Outcome:
    """What one execution of an event ended with: a result, or an error (``Task timed out ...`` and the like)."""

    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


Execute = Callable[[dict[str, Any], str], Outcome]  # (the event, its request id: the same on every retry)


class QueueClock(Protocol):
    """What the queue reads time from and waits on."""

    def monotonic(self) -> float: ...

    def wait(self, stopped: threading.Event, seconds: float) -> bool:
        """Wait ``seconds``, or until ``stopped`` is set: whether it was."""
        ...


class MonotonicClock:
    """The monotonic clock, and real waits."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, stopped: threading.Event, seconds: float) -> bool:
        return stopped.wait(seconds)


@dataclass
class _Event:
    payload: dict[str, Any]
    queued_at: float  # its first enqueue: the event's age counts from here, whatever happens to it
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))  # Lambda keeps it when it retries
    attempts: int = 0
    retries: int = 0
    throttles: int = 0


class AsyncEventQueue:
    """Runs each event through ``execute`` by ``limits``' async rules, at most ``concurrency`` at once."""

    def __init__(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
        self,
        execute: Execute,
        limits: FunctionLimits,
        concurrency: int,
        time_scale: float = 1.0,
        on_result: ResultCallback | None = None,
        *,
        clock: QueueClock | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive, not {time_scale}")
        self._execute = execute
        self.limits = limits
        self.concurrency = concurrency
        self.time_scale = time_scale
        self._on_result = on_result
        self._clock = clock or MonotonicClock()
        self._lock = threading.Condition()
        self._stopped = threading.Event()
        self._running = 0
        self._in_flight = 0
        self.stats = {
            "invoked": 0,
            "completed": 0,
            "errors": 0,
            "retries": 0,
            "dropped": 0,
            "throttles": 0,
            "expired": 0,
        }

    def put(self, payload: dict[str, Any], *, duplicate: bool = False) -> None:
        """Queue one event; it runs in a thread of its own. A ``duplicate`` (the same event delivered again, as
        at-least-once delivery may) is not counted as invoked."""
        with self._lock:
            if self._stopped.is_set():
                raise InvokerStoppedError("the local invoker is stopping")
            if not duplicate:
                self.stats["invoked"] += 1
            self._in_flight += 1
        event = _Event(payload, queued_at=self._clock.monotonic())
        threading.Thread(target=self._deliver_and_count, args=(event,), daemon=True, name="invoke").start()

    def running(self) -> int:
        """Executions running now."""
        with self._lock:
            return self._running

    def in_flight(self) -> int:
        """Events not finished: running, waiting for a retry or backing off from a throttle."""
        with self._lock:
            return self._in_flight

    def wait_idle(self, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: self._in_flight == 0, timeout)

    def stop(self) -> None:
        """Accept no more events; what waits for a retry or a throttle is dropped at once."""
        with self._lock:
            self._stopped.set()
            self._lock.notify_all()

    # -- one event ---------------------------------------------------------------------------------------------
    def _age_s(self, event: _Event) -> float:
        """Seconds since the event was first queued (real seconds: Lambda's times ``time_scale``)."""
        return self._clock.monotonic() - event.queued_at

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _deliver_and_count(self, event: _Event) -> None:
        try:
            self._deliver(event)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._lock.notify_all()

    def _drop(self, event: _Event, why: str, *, expired: bool = False) -> None:
        with self._lock:
            self.stats["dropped"] += 1
            if expired:
                self.stats["expired"] += 1
        level = logging.INFO if self._stopped.is_set() else logging.ERROR
        log.log(
            level,
            "%s invocation dropped after %d attempt(s) and %d throttle(s): %s",
            self.limits.function,
            event.attempts,
            event.throttles,
            why,
        )

    def _young_enough(self, event: _Event, delay_s: float, why: str) -> bool:
        """Whether the event may wait ``delay_s`` for its next try: not if it would be too old by then (it is
        dropped now: it could never run)."""
        if is_expired((self._age_s(event) + delay_s) / self.time_scale, self.limits):
            self._drop(
                event,
                f"{why}; the next try would come after the maximum event age ({self.limits.max_event_age_s:g} s)",
                expired=True,
            )
            return False
        return True

    def _sleep(self, event: _Event, delay_s: float) -> bool:
        """Sleep ``delay_s``; False (and the event dropped) if the queue stops meanwhile."""
        if self._clock.wait(self._stopped, delay_s):
            self._drop(event, "the invoker stopped")
            return False
        return True

    def _acquire(self) -> bool:
        with self._lock:
            if self._running >= self.concurrency:
                return False
            self._running += 1
            return True

    def _release(self) -> None:
        with self._lock:
            self._running -= 1
            self._lock.notify_all()

    def _deliver(self, event: _Event) -> None:
        while not self._undeliverable(event):
            if not self._acquire():
                if not self._wait_out_throttle(event):
                    return
                continue
            outcome = self._attempt(event)
            if outcome is None:
                return
            if outcome.ok:
                self._count("completed")
                if self._on_result is not None:
                    self._on_result(event.payload, outcome.result or {})
                return
            if not self._wait_to_retry(event, outcome):
                return

    def _undeliverable(self, event: _Event) -> bool:
        """True (and the event dropped) once the queue has stopped or the event is past its maximum age."""
        if self._stopped.is_set():
            # Not delivered: its tasks stay PENDING, and the next poll dispatches them again.
            self._drop(event, "the invoker stopped")
            return True
        if is_expired(self._age_s(event) / self.time_scale, self.limits):
            self._drop(event, f"older than the maximum event age ({self.limits.max_event_age_s:g} s)", expired=True)
            return True
        return False

    def _wait_out_throttle(self, event: _Event) -> bool:
        """A throttled attempt: count it and back off; False (and the event dropped) if it cannot wait."""
        event.throttles += 1
        self._count("throttles")
        delay = throttle_backoff_s(event.throttles) * self.time_scale
        return self._young_enough(event, delay, "throttled") and self._sleep(event, delay)

    def _attempt(self, event: _Event) -> Outcome | None:
        """One attempt in the slot acquired for it, released after; None (and the event dropped) if the invoker
        stopped. An environment that could not run it is a failed attempt."""
        event.attempts += 1
        try:
            outcome = self._execute(event.payload, event.request_id)
        except InvokerStoppedError:
            self._release()
            self._drop(event, "the invoker stopped")
            return None
        except Exception as exc:  # noqa: BLE001 - an environment that could not run it: a failed attempt
            outcome = Outcome(error=f"{type(exc).__name__}: {exc}")
        self._release()
        return outcome

    def _wait_to_retry(self, event: _Event, outcome: Outcome) -> bool:
        """A failed attempt: count it and wait for the retry Lambda would make; False (and the event dropped)
        when its retries are spent, the queue stopped, or it would be too old to retry."""
        self._count("errors")
        if event.retries >= self.limits.max_retry_attempts or self._stopped.is_set():
            self._drop(event, str(outcome.error))
            return False
        delay = retry_delay_s(event.retries + 1) * self.time_scale
        if not self._young_enough(event, delay, str(outcome.error)):
            return False
        event.retries += 1
        self._count("retries")
        log.warning(
            "%s invocation failed (%s); retry %d in %.1f s",
            self.limits.function,
            outcome.error,
            event.retries,
            delay,
        )
        return self._sleep(event, delay)
