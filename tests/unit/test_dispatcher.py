"""The heap dispatcher, on the real monotonic clock.

Only orders, counts and the "never early" rule are asserted: the dispatcher spins until each deadline, so an
item can never fire before it, whatever the machine's load. How *late* it fires is a benchmark's business.
Where a test needs every item queued before the first deadline (an order, a time left, a wait that must not
be over yet), the dispatcher's clock is held still meanwhile (:class:`HeldClock`), so that a slow machine
cannot reach a deadline before the test is ready.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import pytest

from punctual.domain.clock import SystemClock
from punctual.executing.dispatcher import (
    FIRE_SWITCH_INTERVAL_S,
    FIRE_WINDOWS,
    QUOTA_SPIN_S,
    Dispatcher,
    FireTiming,
    FireWindows,
    wait_for_deadline,
)
from support import wait_until


class HeldClock(SystemClock):
    """The real clocks, except that :meth:`monotonic` stands still from :meth:`hold` until :meth:`release`: a
    dispatcher on it cannot reach a deadline after the held instant, however slowly the test runs meanwhile.
    Released, it is the real monotonic clock again (never behind the held value)."""

    def __init__(self) -> None:
        self._held: float | None = None

    def hold(self) -> float:
        """Stop the monotonic clock now; returns the instant it stands at."""
        self._held = time.monotonic()
        return self._held

    def release(self) -> None:
        self._held = None

    def monotonic(self) -> float:
        held = self._held
        return time.monotonic() if held is None else held


class Recorder:
    """A fire callback that notes which item fired and when (monotonic seconds, read first)."""

    def __init__(self) -> None:
        self.fired: list[tuple[str, float]] = []
        self._lock = threading.Lock()

    def __call__(self, item: str) -> None:
        now = time.monotonic()
        with self._lock:
            self.fired.append((item, now))

    @property
    def order(self) -> list[str]:
        return [item for item, _ in self.fired]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def clock() -> HeldClock:
    return HeldClock()


@pytest.fixture
def single(recorder: Recorder, clock: HeldClock) -> Iterator[Dispatcher[str]]:
    """One worker: fires run one after the other, in the order the dispatcher hands them over."""
    dispatcher: Dispatcher[str] = Dispatcher(recorder, workers=1, clock=clock, name="test-dispatcher")
    yield dispatcher
    dispatcher.close()


def test_every_item_fires_exactly_once(recorder: Recorder) -> None:
    # Given 200 items over the next 0.2 s, some sharing a deadline, and 8 workers
    dispatcher: Dispatcher[str] = Dispatcher(recorder, workers=8)
    start = time.monotonic()
    deadlines = {f"item-{i}": start + 0.05 + (i % 20) * 0.01 for i in range(200)}
    # When they are added and the dispatcher is closed
    for item, deadline in deadlines.items():
        dispatcher.add(deadline, item)
    dispatcher.close()
    # Then each fired once, and none before its deadline
    assert sorted(recorder.order) == sorted(deadlines)
    for item, fired in recorder.fired:
        assert fired >= deadlines[item]


def test_distinct_deadlines_fire_in_deadline_order(
    single: Dispatcher[str], recorder: Recorder, clock: HeldClock
) -> None:
    # Given items added in shuffled order, deadlines 20 ms apart, all queued before the first deadline
    start = clock.hold() + 0.05
    offsets = {"d": 3, "a": 0, "e": 4, "c": 2, "b": 1}
    for item, k in offsets.items():
        single.add(start + k * 0.02, item)
    # When time runs on and they have all fired
    clock.release()
    assert single.wait_idle(timeout=30)
    # Then they fired by deadline, each at or after it
    assert recorder.order == ["a", "b", "c", "d", "e"]
    for item, fired in recorder.fired:
        assert fired >= start + offsets[item] * 0.02


def test_past_deadlines_fire_immediately(single: Dispatcher[str], recorder: Recorder, clock: HeldClock) -> None:
    # Given one item due in 0.5 s and one already 1 s overdue, the clock held before the later one's deadline
    now = clock.hold()
    single.add(now + 0.5, "later")
    single.add(now - 1.0, "overdue")
    # When we wait for the first fire
    assert wait_until(lambda: bool(recorder.fired), timeout=30, interval=0.005)
    # Then the overdue item has fired, without waiting for the later one's deadline
    assert recorder.order == ["overdue"]
    # And the later one fires once its deadline is reached
    clock.release()
    assert single.wait_idle(timeout=30)
    assert recorder.order == ["overdue", "later"]
    assert recorder.fired[1][1] >= now + 0.5


def test_item_added_later_with_earlier_deadline_fires_first(
    single: Dispatcher[str], recorder: Recorder, clock: HeldClock
) -> None:
    # Given an item queued for +0.6 s, with the dispatcher already sleeping towards it (the clock held before
    # any deadline, so that the newcomer arrives in time however slow the machine)
    now = clock.hold()
    single.add(now + 0.6, "queued-first")
    time.sleep(0.05)
    # When an item due sooner is added, and time runs on
    single.add(now + 0.2, "added-later")
    clock.release()
    assert single.wait_idle(timeout=30)
    # Then the newcomer fires first, and neither fires early
    assert recorder.order == ["added-later", "queued-first"]
    fired = dict(recorder.fired)
    assert fired["added-later"] >= now + 0.2
    assert fired["queued-first"] >= now + 0.6


def test_seconds_to_next_fire(single: Dispatcher[str], recorder: Recorder, clock: HeldClock) -> None:
    # Given an empty dispatcher
    assert single.seconds_to_next_fire() == float("inf")
    # When items are queued for +1.5 s and +1 s (the clock held meanwhile)
    before = clock.hold()
    single.add(before + 1.5, "far")
    single.add(before + 1.0, "near")
    # Then it tells the time to the earliest one
    assert single.seconds_to_next_fire() == pytest.approx(1.0)
    assert recorder.fired == []
    # And after both fired, nothing is queued again
    clock.release()
    assert single.wait_idle(timeout=30)
    assert single.seconds_to_next_fire() == float("inf")


def test_busy_until_names_the_last_fire_before_the_first_quiet_gap(single: Dispatcher[str], clock: HeldClock) -> None:
    # Given an empty dispatcher: quiet now (the clock held, so that "now" is one instant)
    before = clock.hold()
    assert single.busy_until(0.025) == before
    # When fires are queued 10 ms apart from +5 s to +5.03 s, then one at +12 s
    for i in range(4):
        single.add(before + 5 + i * 0.01, f"close-{i}")
    single.add(before + 12, "after-a-gap")
    # Then the first gap of 5.5 s starts after the fire at +5.03 s (the first fire is nearer than 5.5 s)
    assert single.busy_until(5.5) == pytest.approx(before + 5.03)
    # And a gap of 4.9 s starts now (the first fire is 5 s away)
    assert single.busy_until(4.9) == before
    # And with no gap as long as asked for, it is the last queued fire
    assert single.busy_until(10) == pytest.approx(before + 12)
    single.cancel_pending()


def test_wait_idle_times_out_while_items_are_pending(
    single: Dispatcher[str], recorder: Recorder, clock: HeldClock
) -> None:
    # Given an item due in 0.3 s, the clock held before its deadline
    single.add(clock.hold() + 0.3, "x")
    # Then waiting while it cannot be due is not enough, and waiting once time runs on is
    assert single.wait_idle(timeout=0.01) is False
    clock.release()
    assert single.wait_idle(timeout=30) is True
    assert recorder.order == ["x"]
    # And an idle dispatcher answers at once
    assert single.wait_idle(timeout=0) is True


def test_wait_idle_waits_for_the_callback_to_return() -> None:
    # Given a callback that takes 0.2 s
    done: list[str] = []

    def slow(item: str) -> None:
        time.sleep(0.2)
        done.append(item)

    with Dispatcher(slow, workers=2) as dispatcher:
        dispatcher.add(time.monotonic(), "a")
        dispatcher.add(time.monotonic(), "b")
        # When wait_idle returns True, both callbacks have finished
        assert dispatcher.wait_idle(timeout=10)
        assert sorted(done) == ["a", "b"]


def test_close_fires_what_is_queued_then_stops_the_threads(recorder: Recorder) -> None:
    # Given items still queued
    dispatcher: Dispatcher[str] = Dispatcher(recorder, workers=3, name="closing")
    now = time.monotonic()
    for i in range(5):
        dispatcher.add(now + 0.05 * i, f"i{i}")
    # When the dispatcher is closed
    dispatcher.close()
    # Then everything fired first, and no thread of it is left
    assert len(recorder.fired) == 5
    assert not [t for t in threading.enumerate() if t.name.startswith("closing")]


def test_close_of_an_empty_dispatcher_returns(recorder: Recorder) -> None:
    dispatcher: Dispatcher[str] = Dispatcher(recorder, workers=2, name="empty")
    dispatcher.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("empty")]


def test_a_failing_callback_does_not_stop_later_fires() -> None:
    # Regression: an exception from fire() used to end the worker thread, so later items never fired.
    # Given one worker and a callback that fails on its first item
    fired: list[str] = []

    def fire(item: str) -> None:
        if item == "boom":
            raise RuntimeError("boom")
        fired.append(item)

    dispatcher: Dispatcher[str] = Dispatcher(fire, workers=1, name="failing")
    now = time.monotonic()
    dispatcher.add(now, "boom")
    dispatcher.add(now + 0.05, "after")
    # Then the next item still fires
    assert dispatcher.wait_idle(timeout=30)
    assert fired == ["after"]
    dispatcher.close()


def test_cancel_pending_takes_back_what_has_not_fired(recorder: Recorder) -> None:
    # Given one item already fired and three queued far ahead
    dispatcher: Dispatcher[str] = Dispatcher(recorder, workers=2, name="cancelling")
    now = time.monotonic()
    dispatcher.add(now, "now")
    assert dispatcher.wait_idle(timeout=10)
    for item, delay in (("c", 30.0), ("a", 10.0), ("b", 20.0)):
        dispatcher.add(now + delay, item)
    # When the pending items are taken back (a clean shutdown)
    taken = dispatcher.cancel_pending()
    # Then they come back in deadline order, none of them fires, and the dispatcher is idle and closes at once
    assert taken == ["a", "b", "c"]
    assert dispatcher.seconds_to_next_fire() == float("inf")
    assert dispatcher.wait_idle(timeout=0) is True
    dispatcher.close()
    assert recorder.order == ["now"]
    assert dispatcher.cancel_pending() == []


def test_fires_one_after_another_are_all_handed_to_the_same_worker() -> None:
    # Given 8 workers and items added one at a time, each only once the previous one has fired
    threads: list[int] = []
    dispatcher: Dispatcher[str] = Dispatcher(
        lambda item: threads.append(threading.get_ident()), workers=8, name="one-wake"
    )
    try:
        for i in range(12):
            dispatcher.add(time.monotonic(), f"item-{i}")
            assert dispatcher.wait_idle(timeout=30)
    finally:
        dispatcher.close()
    # Then every fire ran in one thread: a hand-off goes to the worker that finished last, and wakes no other
    # (a shared queue passes its lock from waiter to waiter, so its fires rotate through the pool)
    assert len(threads) == 12
    assert len(set(threads)) == 1


def test_items_due_while_every_worker_is_busy_wait_for_a_worker_and_then_fire() -> None:
    # Given 2 workers held inside their first fires, and 6 more items due meanwhile
    release = threading.Event()
    fired: list[str] = []
    lock = threading.Lock()

    def fire(item: str) -> None:
        with lock:
            fired.append(item)
        if item.startswith("hold"):
            release.wait(30)

    dispatcher: Dispatcher[str] = Dispatcher(fire, workers=2, name="backlog")
    try:
        now = time.monotonic()
        dispatcher.add(now, "hold-0")
        dispatcher.add(now, "hold-1")
        assert wait_until(lambda: len(fired) == 2, timeout=30)
        for i in range(6):
            dispatcher.add(now, f"late-{i}")
        # When the two held fires are still running, nothing else has fired; once they return, all of it fires
        assert not dispatcher.wait_idle(timeout=0.2)
        assert sorted(fired) == ["hold-0", "hold-1"]
        release.set()
        assert dispatcher.wait_idle(timeout=30)
    finally:
        release.set()
        dispatcher.close()
    # Then every item fired exactly once
    assert sorted(fired) == sorted(["hold-0", "hold-1"] + [f"late-{i}" for i in range(6)])


def test_items_due_together_reach_the_idle_workers_while_one_fire_is_still_running() -> None:
    # Given 4 workers, one of them held inside a fire
    release = threading.Event()
    fired: list[str] = []
    lock = threading.Lock()

    def fire(item: str) -> None:
        with lock:
            fired.append(item)
        if item == "held":
            release.wait(30)

    dispatcher: Dispatcher[str] = Dispatcher(fire, workers=4, name="chain")
    try:
        dispatcher.add(time.monotonic(), "held")
        assert wait_until(lambda: fired == ["held"], timeout=30)
        # When three items fall due together (each woken worker passes the next waiting item to another)
        now = time.monotonic()
        for i in range(3):
            dispatcher.add(now, f"together-{i}")
        # Then all three fire while the held fire still runs: none waits for a busy worker while one sleeps
        assert wait_until(lambda: len(fired) == 4, timeout=30)
        assert sorted(fired[1:]) == ["together-0", "together-1", "together-2"]
    finally:
        release.set()
        dispatcher.close()


def test_the_switch_interval_is_short_while_a_fire_is_about_to_start() -> None:
    # Given the process's ordinary switch interval, longer than the one used around fires
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.004)
    seen: list[float] = []
    try:
        # When items fire, alone and several at one instant
        with Dispatcher[str](lambda _: seen.append(sys.getswitchinterval()), workers=4) as dispatcher:
            start = time.monotonic()
            dispatcher.add(start + 0.02, "alone")
            for i in range(3):
                dispatcher.add(start + 0.05, f"together-{i}")
            assert dispatcher.wait_idle(timeout=30)
            # Then each fire ran with the short interval, and the ordinary one is back once they are done
            assert seen == [pytest.approx(FIRE_SWITCH_INTERVAL_S)] * 4
            assert FIRE_WINDOWS.open == 0
            assert sys.getswitchinterval() == 0.004
    finally:
        sys.setswitchinterval(before)


def test_fire_windows_nest_and_restore_the_interval_the_process_had() -> None:
    before = sys.getswitchinterval()
    windows = FireWindows(0.0002)
    try:
        sys.setswitchinterval(0.003)
        windows.enter()
        windows.enter(2)
        assert sys.getswitchinterval() == pytest.approx(0.0002)
        windows.leave(2)
        assert sys.getswitchinterval() == pytest.approx(0.0002)
        assert windows.open == 1
        windows.leave()
        assert sys.getswitchinterval() == pytest.approx(0.003)
        assert windows.open == 0
    finally:
        sys.setswitchinterval(before)


@pytest.mark.parametrize(
    ("cpu_share", "expected"),
    [
        (None, FireTiming()),
        (1.0, FireTiming()),
        (2.5, FireTiming()),
        (0.999, FireTiming(spin_s=0.0, fire_spin_s=QUOTA_SPIN_S)),
        (256 / 1769, FireTiming(spin_s=0.0, fire_spin_s=QUOTA_SPIN_S)),
    ],
)
def test_a_process_spins_milliseconds_before_a_fire_only_with_a_core_to_itself(
    cpu_share: float | None, expected: FireTiming
) -> None:
    assert FireTiming.for_cpu_share(cpu_share) == expected


def test_the_final_spin_is_the_whole_hand_off_unless_set_and_never_longer() -> None:
    assert FireTiming().final_spin_s == FireTiming().handoff_s
    assert FireTiming(fire_spin_s=0.0002).final_spin_s == 0.0002
    assert FireTiming(handoff_s=0.001, fire_spin_s=0.5).final_spin_s == 0.001


def test_wait_for_deadline_sleeps_most_of_the_way_and_never_returns_before_the_deadline() -> None:
    clock = SystemClock()
    before = time.thread_time()
    for ahead_s in (0.0, 0.0001, 0.003, 0.02):
        deadline = time.monotonic() + ahead_s
        wait_for_deadline(clock, deadline, 0.0002)
        assert time.monotonic() >= deadline
    # spinning 0.2 ms of each wait: far less CPU than the 23 ms waited (a loose bound: a busy machine adds little)
    assert time.thread_time() - before < 0.015


def test_under_a_cpu_quota_every_item_fires_once_and_never_before_its_deadline(recorder: Recorder) -> None:
    # Given a dispatcher timed for a small CPU share (it sleeps where it would spin)
    with Dispatcher(recorder, workers=4, timing=FireTiming.for_cpu_share(0.145)) as dispatcher:
        start = time.monotonic()
        # When items are due alone and several at one instant
        deadlines = {"alone-0": start + 0.02, "alone-1": start + 0.06}
        deadlines |= {f"together-{i}": start + 0.04 for i in range(5)}
        for item, deadline in deadlines.items():
            dispatcher.add(deadline, item)
        assert dispatcher.wait_idle(timeout=30)
    # Then each fired once, none before its deadline
    assert sorted(recorder.order) == sorted(deadlines)
    assert all(fired >= deadlines[item] for item, fired in recorder.fired)


def test_fires_of_an_instant_still_waiting_for_a_worker_leave_no_quiet_gap() -> None:
    # Given one worker held inside the first of 5 fires due at one instant (the other 4 wait for it)
    release = threading.Event()
    fired: list[str] = []

    def fire(item: str) -> None:
        fired.append(item)
        if item == "0":
            release.wait(30)

    dispatcher: Dispatcher[str] = Dispatcher(fire, workers=1, name="burst")
    try:
        now = time.monotonic()
        for i in range(5):
            dispatcher.add(now, str(i))
        assert wait_until(lambda: fired == ["0"], timeout=30)
        # When the recorder or the heartbeat asks how far the next fire is, though the heap is empty
        # Then the answer is now, and the first quiet moment is at least a gap away
        assert wait_until(lambda: not dispatcher._heap, timeout=30)
        assert dispatcher.seconds_to_next_fire() == 0.0
        assert dispatcher.busy_until(0.5) >= time.monotonic() + 0.4
        release.set()
        assert dispatcher.wait_idle(timeout=30)
        # and once they have all fired, nothing is queued
        assert dispatcher.seconds_to_next_fire() == float("inf")
    finally:
        release.set()
        dispatcher.close()
    assert sorted(fired) == ["0", "1", "2", "3", "4"]
