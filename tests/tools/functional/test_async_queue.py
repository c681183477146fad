"""Lambda's async queue, locally (``AsyncEventQueue``), driven by stand-in executions instead of worker processes.

Each stand-in blocks on an event the test sets, so that what is asserted is an order of things, never how long
they took: the queue's delays are Lambda's times a small scale, and only lower bounds of them are asserted. Where
exact times are the point (an event's age against its timeouts and retries), the queue runs on a clock the test
moves by hand, in Lambda's own seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from punctual_tools.local.async_queue import AsyncEventQueue, InvokerStoppedError, Outcome
from punctual_tools.local.lambda_rules import FunctionLimits, retries_after_timeouts
from support import wait_until

SCALE = 0.002  # Lambda's 1 and 2 minute retry delays become 0.12 s and 0.24 s; its 1 s backoff 2 ms


class StandIn:
    """An execution environment stand-in: records each start and end, fails or blocks as told."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.log: list[tuple[str, str]] = []
        self.starts: list[float] = []
        self.gates: dict[str, threading.Event] = {}
        self.running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def gate(self, name: str) -> threading.Event:
        return self.gates.setdefault(name, threading.Event())

    def __call__(self, payload: dict[str, Any], request_id: str) -> Outcome:
        name = payload["name"]
        with self._lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            self.log.append((name, "start"))
            self.starts.append(time.monotonic())
        try:
            if name in self.gates:
                assert self.gates[name].wait(30)
            return Outcome(error="RuntimeError: boom") if self.fail else Outcome(result={"name": name})
        finally:
            with self._lock:
                self.running -= 1
                self.log.append((name, "end"))


Made = list[tuple[AsyncEventQueue, StandIn]]


@pytest.fixture
def queues() -> Iterator[Made]:
    """Every queue a test makes is stopped at its end, its stand-ins let go."""
    made: Made = []
    yield made
    for queue, stand_in in made:
        queue.stop()
        for gate in stand_in.gates.values():
            gate.set()
        queue.wait_idle(10)


def make_queue(
    queues: Made, stand_in: StandIn, concurrency: int = 1, **limits: Any
) -> tuple[AsyncEventQueue, list[dict[str, Any]]]:
    results: list[dict[str, Any]] = []
    queue = AsyncEventQueue(
        stand_in,
        FunctionLimits("fn", **limits),
        concurrency,
        time_scale=SCALE,
        on_result=lambda _event, result: results.append(result),
    )
    queues.append((queue, stand_in))
    return queue, results


def test_with_concurrency_1_a_second_event_is_throttled_and_runs_after_the_first(
    queues: Made,
) -> None:
    # Given a queue of concurrency 1 whose first event runs until the test lets it finish
    stand_in = StandIn()
    first = stand_in.gate("first")
    queue, results = make_queue(queues, stand_in, concurrency=1)
    queue.put({"name": "first"})
    assert wait_until(lambda: stand_in.log == [("first", "start")], timeout=10)

    # When a second event arrives while the first runs
    queue.put({"name": "second"})

    # Then it is throttled (backed off, again and again) and does not start
    assert wait_until(lambda: queue.stats["throttles"] >= 3, timeout=10)
    assert stand_in.log == [("first", "start")]
    # ... and once the first ends, it runs: one at a time, never two at once
    first.set()
    assert queue.wait_idle(30)
    assert stand_in.log == [("first", "start"), ("first", "end"), ("second", "start"), ("second", "end")]
    assert stand_in.most_at_once == 1
    assert results == [{"name": "first"}, {"name": "second"}]
    assert {k: queue.stats[k] for k in ("invoked", "completed", "errors", "retries", "dropped")} == {
        "invoked": 2,
        "completed": 2,
        "errors": 0,
        "retries": 0,
        "dropped": 0,
    }


def test_no_more_than_the_concurrency_run_at_once(queues: Made) -> None:
    # Given a queue of concurrency 3 whose events all wait for one gate
    stand_in = StandIn()
    gates = [stand_in.gate(f"e{i}") for i in range(8)]
    queue, results = make_queue(queues, stand_in, concurrency=3)
    # When 8 events arrive at once
    for i in range(8):
        queue.put({"name": f"e{i}"})
    # Then 3 run and the rest are throttled, until they are let go one at a time
    assert wait_until(lambda: stand_in.running == 3 and queue.stats["throttles"] >= 5, timeout=10)
    for gate in gates:
        gate.set()
    assert queue.wait_idle(30)
    assert stand_in.most_at_once == 3
    assert len(results) == 8


def test_a_failed_event_is_retried_per_the_limits_then_dropped(queues: Made) -> None:
    # Given an execution that always fails, and a function retrying twice
    stand_in = StandIn(fail=True)
    queue, results = make_queue(queues, stand_in, max_retry_attempts=2)
    # When one event arrives
    queue.put({"name": "doomed"})
    assert queue.wait_idle(30)
    # Then it ran three times, the retries at least 1 and then 2 (scaled) minutes apart, and was dropped
    assert [name for name, phase in stand_in.log if phase == "start"] == ["doomed"] * 3
    first, second, third = stand_in.starts
    assert second - first >= 60 * SCALE
    assert third - second >= 120 * SCALE
    assert results == []
    assert {k: queue.stats[k] for k in ("errors", "retries", "dropped", "completed", "expired")} == {
        "errors": 3,
        "retries": 2,
        "dropped": 1,
        "completed": 0,
        "expired": 0,
    }


def test_a_function_without_retries_drops_a_failed_event_at_once(queues: Made) -> None:
    stand_in = StandIn(fail=True)
    queue, _results = make_queue(queues, stand_in, max_retry_attempts=0)
    queue.put({"name": "once"})
    assert queue.wait_idle(30)
    assert stand_in.log == [("once", "start"), ("once", "end")]
    assert (queue.stats["retries"], queue.stats["dropped"]) == (0, 1)


def test_a_throttled_event_older_than_the_maximum_age_is_dropped_unrun(queues: Made) -> None:
    # Given a queue of concurrency 1, busy with a first event, and a maximum event age of 100 s (0.2 s scaled)
    stand_in = StandIn()
    first = stand_in.gate("first")
    queue, results = make_queue(queues, stand_in, concurrency=1, max_event_age_s=100)
    queue.put({"name": "first"})
    assert wait_until(lambda: stand_in.log == [("first", "start")], timeout=10)
    # When a second event waits behind it for longer than its age allows
    queue.put({"name": "stale"})
    assert wait_until(lambda: queue.stats["expired"] == 1, timeout=30)
    first.set()
    assert queue.wait_idle(30)
    # Then it never ran: dropped as expired
    assert ("stale", "start") not in stand_in.log
    assert results == [{"name": "first"}]
    assert (queue.stats["dropped"], queue.stats["expired"], queue.stats["completed"]) == (1, 1, 1)


def test_a_retry_that_would_come_after_the_maximum_age_is_not_made(queues: Made) -> None:
    # Given a failing execution, retries allowed, but a maximum event age (30 s) shorter than the first retry's
    # delay (1 minute)
    stand_in = StandIn(fail=True)
    queue, _results = make_queue(queues, stand_in, max_retry_attempts=2, max_event_age_s=30)
    # When one event arrives  Then it runs once and is dropped as expired, without a retry
    queue.put({"name": "short-lived"})
    assert queue.wait_idle(30)
    assert stand_in.log == [("short-lived", "start"), ("short-lived", "end")]
    assert {k: queue.stats[k] for k in ("errors", "retries", "dropped", "expired")} == {
        "errors": 1,
        "retries": 0,
        "dropped": 1,
        "expired": 1,
    }


def test_stop_drops_what_waits_and_refuses_new_events(queues: Made) -> None:
    # Given a busy queue of concurrency 1 with an event throttled behind the running one
    stand_in = StandIn()
    first = stand_in.gate("first")
    queue, _results = make_queue(queues, stand_in, concurrency=1)
    queue.put({"name": "first"})
    assert wait_until(lambda: stand_in.running == 1, timeout=10)
    queue.put({"name": "waiting"})
    assert wait_until(lambda: queue.stats["throttles"] >= 1, timeout=10)
    # When the queue stops
    queue.stop()
    # Then a new event is refused, the waiting one is dropped unrun, and the running one finishes
    with pytest.raises(InvokerStoppedError):
        queue.put({"name": "late"})
    assert wait_until(lambda: queue.stats["dropped"] == 1, timeout=10)
    first.set()
    assert queue.wait_idle(30)
    assert ("waiting", "start") not in stand_in.log
    assert queue.stats["completed"] == 1


class ManualTime:
    """The queue's clock, moved by hand: a wait returns at once, having moved the clock on by its length."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wait(self, stopped: threading.Event, seconds: float) -> bool:
        self.now += seconds
        return stopped.is_set()


class RunsToItsTimeout:
    """An execution that runs until the function's timeout and is killed there, as the local invoker does."""

    def __init__(self, clock: ManualTime, timeout_s: float) -> None:
        self.clock, self.timeout_s = clock, timeout_s
        self.starts: list[float] = []

    def __call__(self, payload: dict[str, Any], request_id: str) -> Outcome:
        self.starts.append(self.clock.now)
        self.clock.now += self.timeout_s
        return Outcome(error=f"Task timed out after {self.timeout_s:.2f} seconds")


@pytest.mark.parametrize(
    ("age_s", "retries"),
    [
        (300, 0),  # the age is spent by the first attempt: the retry a minute later would be too old
        (359, 0),
        (360, 1),  # Timeout + 60 s: the first retry starts as the event reaches its age
        (779, 1),
        (780, 2),  # 2 x Timeout + 60 + 120 s: room for both retries
        (900, 2),
    ],
)
def test_an_invocation_killed_at_its_timeout_is_retried_only_while_its_age_allows(age_s: float, retries: int) -> None:
    # Given a function with a 300 s timeout, Lambda's 2 retries (1 and 2 minutes after a failure) and a maximum
    # event age, whose every execution runs to its timeout (the queue on a clock moved by hand, in Lambda's seconds)
    clock = ManualTime()
    limits = FunctionLimits("fn", timeout_s=300, max_retry_attempts=2, max_event_age_s=age_s)
    execution = RunsToItsTimeout(clock, limits.timeout_s)
    queue = AsyncEventQueue(execution, limits, 1, clock=clock)
    try:
        # When one event arrives
        queue.put({"name": "long"})
        assert queue.wait_idle(10)
    finally:
        queue.stop()
    # Then its age counted from its first enqueue through its runs: each retry came 1, then 2 minutes after the
    # attempt before it was killed, and only while the event was no older than its age
    assert execution.starts == [0.0, 360.0, 780.0][: retries + 1]
    assert {k: queue.stats[k] for k in ("errors", "retries", "dropped", "expired")} == {
        "errors": retries + 1,
        "retries": retries,
        "dropped": 1,
        "expired": int(retries < 2),
    }
    # ... as the rule the local runtime and the template's checks share says
    assert retries_after_timeouts(limits) == retries
