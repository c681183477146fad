"""The executor's heartbeat on an explicit clock: the fence it keeps, renewals that fail, a takeover."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from punctual.executing.heartbeat import SAFETY_MS, Heartbeat
from support import FakeClock


class Beats:
    """A store that records heartbeats; it can fail or say the executor was taken over."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, int, int]] = []
        self.fail = False
        self.taken_over = False

    def heartbeat(self, executor_id: str, now_ms: int, alive_until_ms: int, invocation: str | None = None) -> bool:
        if self.fail:
            raise ConnectionError("store unreachable")
        self.writes.append((executor_id, now_ms, alive_until_ms))
        return not self.taken_over


MADE: list[Heartbeat] = []


@pytest.fixture(autouse=True)
def _close_heartbeats() -> Iterator[None]:
    """Each test's heartbeats are closed when it ends (a renewing thread would go on logging after it)."""
    yield
    while MADE:
        beat = MADE.pop()
        beat._store.fail = False  # type: ignore[attr-defined]
        beat.close()


def make(store: Beats, clock: FakeClock) -> Heartbeat:
    beat = Heartbeat(store, clock, lease_ms=20_000, interval_ms=5_000)  # type: ignore[arg-type]
    MADE.append(beat)
    return beat


def test_a_lease_sets_the_fence_safety_before_its_end_and_stop_retires_it() -> None:
    # Given a heartbeat on a stopped clock
    store, clock = Beats(), FakeClock()
    beat = make(store, clock)
    # When it starts
    assert beat.start("x-1")
    # Then it wrote alive_until = now + lease, and fires may go on until lease - safety from now
    assert store.writes == [("x-1", int(clock.wall_ms()), int(clock.wall_ms()) + 20_000)]
    assert beat.fence == pytest.approx(clock.monotonic() + (20_000 - SAFETY_MS) / 1000)
    # And stopping it retires the lease (alive until now) and closes the fence
    beat.stop()
    assert store.writes[-1] == ("x-1", int(clock.wall_ms()), int(clock.wall_ms()))
    assert beat.fence == float("-inf")


def test_a_failed_renewal_leaves_the_fence_where_it_was() -> None:
    # Given a running lease
    store, clock = Beats(), FakeClock()
    beat = make(store, clock)
    assert beat.start("x-1")
    fence = beat.fence
    # When, 5 s later, the store cannot be reached
    clock.advance(5)
    store.fail = True
    # Then the renewal fails without raising, and the fence does not move: firing stops when the lease ends
    assert beat.beat() is False
    assert beat.fence == fence
    assert not beat.taken_over
    # And a later renewal that succeeds moves it forward again
    store.fail = False
    clock.advance(1)
    assert beat.beat()
    assert beat.fence == pytest.approx(clock.monotonic() + (20_000 - SAFETY_MS) / 1000)
    beat.stop()


def test_a_taken_over_executor_stops_firing_for_good() -> None:
    # Given a running lease, then a takeover by another executor (the store refuses renewals from now on)
    store, clock = Beats(), FakeClock()
    beat = make(store, clock)
    assert beat.start("x-1")
    store.taken_over = True
    # When it renews
    assert beat.beat() is False
    # Then its fence is closed, and stopping it does not write a retirement over the takeover
    assert beat.taken_over
    assert beat.fence == float("-inf")
    writes = len(store.writes)
    beat.stop()
    assert len(store.writes) == writes


def test_a_first_lease_that_cannot_be_written_means_nothing_may_be_armed() -> None:
    store, clock = Beats(), FakeClock()
    store.fail = True
    beat = make(store, clock)
    assert beat.start("x-1") is False
    assert beat.fence == float("-inf")


def test_an_interval_that_leaves_no_renewal_to_spare_is_refused() -> None:
    with pytest.raises(ValueError, match="no renewal to spare"):
        Heartbeat(Beats(), FakeClock(), lease_ms=10_000, interval_ms=5_000)  # type: ignore[arg-type]


def test_a_second_stop_writes_nothing_and_close_ends_the_renewing_thread() -> None:
    # Given a lease that was started and stopped (retired once)
    store, clock = Beats(), FakeClock()
    beat = make(store, clock)
    assert beat.start("x-1")
    beat.stop()
    writes = len(store.writes)
    # When it is stopped again and closed (a runtime shutting down after its last batch)
    beat.stop()
    beat.close()
    # Then nothing more is written (no second retirement, which after a test's mock would reach real AWS)
    assert len(store.writes) == writes
    # And the renewing thread has ended: it does not wait out a renewal interval first
    assert not beat._thread.is_alive()


def test_closing_a_running_lease_retires_it_and_ends_the_thread() -> None:
    # Given a running lease
    store, clock = Beats(), FakeClock()
    beat = make(store, clock)
    assert beat.start("x-1")
    # When the heartbeat is closed
    beat.close()
    # Then the lease is retired (alive until now), firing is fenced off, and the thread has ended
    assert store.writes[-1] == ("x-1", int(clock.wall_ms()), int(clock.wall_ms()))
    assert beat.fence == float("-inf")
    assert not beat._thread.is_alive()


def test_repeated_failures_log_one_traceback_until_a_renewal_succeeds(caplog: pytest.LogCaptureFixture) -> None:
    # Given a running lease whose store becomes unreachable
    store, clock = Beats(), FakeClock()
    beat = make(store, clock)
    assert beat.start("x-1")
    store.fail = True
    # When three renewals fail, one succeeds, and another fails
    with caplog.at_level("ERROR", logger="punctual.executing.executor"):
        for _ in range(3):
            assert beat.beat() is False
        store.fail = False
        assert beat.beat()
        store.fail = True
        assert beat.beat() is False
    # Then a traceback is logged at the first failure of each run of failures, a line for the others
    with_trace = [r for r in caplog.records if r.exc_info]
    assert len(caplog.records) == 4
    assert len(with_trace) == 2
    assert "failed again (ConnectionError)" in caplog.records[1].getMessage()


def test_a_lease_never_reaches_past_the_invocations_end() -> None:
    # Given an invocation that Lambda ends 8 s from now (less than a lease of 20 s)
    store, clock = Beats(), FakeClock()
    beat = make(store, clock)
    deadline = clock.wall_ms() + 8_000
    # When the heartbeat starts, and renews 5 s later
    assert beat.start("x-1", deadline_ms=deadline, invocation="req-1")
    first = store.writes[-1]
    clock.advance(5)
    assert beat.beat()
    # Then each lease ends at the invocation's end, and the fence safety before it
    assert first[2] == store.writes[-1][2] == int(deadline)
    assert beat.fence == pytest.approx(clock.monotonic() + (deadline - clock.wall_ms() - SAFETY_MS) / 1000)
    beat.stop()
