"""Counts kept between pages (:mod:`punctual_tools.console.counts`): made once whoever asks, waited for as long as a
page is told to, shown with their age, made again in the background when stale or failed. Every wait here is on the
count's own events: a count released by the test is waited for until done (``wait_s=None``)."""

from __future__ import annotations

import threading

from punctual_tools.console.counts import KeptCounts


class Clock:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class HeldCount:
    """A count that answers ``value`` once released (at once when made released), counting its calls."""

    def __init__(self, value: int, *, released: bool = True) -> None:
        self.value = value
        self.calls = 0
        self.release = threading.Event()
        self.started = threading.Event()
        self.fail: Exception | None = None
        if released:
            self.release.set()

    def __call__(self) -> int:
        self.calls += 1
        self.started.set()
        self.release.wait()
        if self.fail is not None:
            raise self.fail
        return self.value


def test_a_count_is_made_once_and_kept_while_fresh() -> None:
    # Given kept counts on a still clock
    clock = Clock()
    counts = KeptCounts(fresh_s=30.0, monotonic=clock)
    count = HeldCount(7)
    # When it is asked for, waiting until done, and again 29 s later
    first = counts.get("acme", count, None)
    clock.now += 29.0
    again = counts.get("acme", count, 0.0)
    # Then it was counted once, and the second answer is the same count, 29 s old
    assert (first.value, first.counting, first.error) == (7, False, None)
    assert count.calls == 1
    assert again.value == 7
    assert again.age_s(clock()) == 29.0


def test_a_slow_count_shows_as_counting_and_is_made_once_whoever_asks() -> None:
    # Given a count that has not answered yet
    counts = KeptCounts(fresh_s=30.0, monotonic=Clock())
    count = HeldCount(12, released=False)
    # When two pages ask for it without waiting
    first = counts.get("acme", count, 0.0)
    count.started.wait()
    second = counts.get("acme", count, 0.0)
    # Then both show it being counted, with no value, and one count runs
    assert (first.value, first.counting) == (None, True)
    assert (second.value, second.counting) == (None, True)
    # When it answers  Then the next page shows it, and still one count was made
    count.release.set()
    done = counts.get("acme", count, None)
    assert (done.value, done.counting) == (12, False)
    assert count.calls == 1


def test_a_stale_count_is_shown_with_its_age_while_it_is_counted_again() -> None:
    # Given a count made, and then 31 s passing with the next count held
    clock = Clock()
    counts = KeptCounts(fresh_s=30.0, monotonic=clock)
    count = HeldCount(5)
    counts.get("acme", count, None)
    clock.now += 31.0
    count.release.clear()
    count.value = 6
    # When a page asks without waiting
    stale = counts.get("acme", count, 0.0)
    # Then it shows the old count, 31 s old, being counted again
    assert (stale.value, stale.counting) == (5, True)
    assert stale.age_s(clock()) == 31.0
    # When the count answers  Then the new one is shown, counted just now
    count.release.set()
    fresh = counts.get("acme", count, None)
    assert (fresh.value, fresh.counting, fresh.age_s(clock())) == (6, False, 0.0)
    assert count.calls == 2


def test_a_failed_count_keeps_the_last_value_says_why_and_is_made_again_when_next_asked_for() -> None:
    # Given a count made, and then one that fails
    clock = Clock()
    counts = KeptCounts(fresh_s=30.0, monotonic=clock)
    count = HeldCount(3)
    counts.get("acme", count, None)
    clock.now += 40.0
    count.fail = RuntimeError("throttled")
    # When a page asks and waits  Then it shows the last count, as old as it is, and the failure
    failed = counts.get("acme", count, None)
    assert (failed.value, failed.error) == (3, "RuntimeError: throttled")
    assert failed.age_s(clock()) == 40.0
    # When the store answers again  Then the very next page counts again, at once
    count.fail = None
    count.value = 4
    again = counts.get("acme", count, None)
    assert (again.value, again.error, count.calls) == (4, None, 3)


def test_each_key_has_a_count_of_its_own() -> None:
    counts = KeptCounts(monotonic=Clock())
    assert counts.get("acme", HeldCount(1), None).value == 1
    assert counts.get("beta", HeldCount(2), None).value == 2


def test_a_forgotten_count_is_made_again_and_settle_waits_for_the_one_being_made() -> None:
    # Given a count kept, then forgotten, and its next one held
    counts = KeptCounts(fresh_s=30.0, monotonic=Clock())
    count = HeldCount(8)
    counts.get("acme", count, None)
    counts.forget()
    count.release.clear()
    # When a page asks without waiting  Then there is no value, and a count is being made
    asked = counts.get("acme", count, 0.0)
    assert (asked.value, asked.counting, count.calls) == (None, True, 2)
    # When it is released and the counts settle  Then none is being made and the count is kept
    waiter = threading.Thread(target=counts.settle)
    waiter.start()
    count.release.set()
    waiter.join()
    assert counts.get("acme", count, 0.0).value == 8
    assert count.calls == 2
