"""punctual.targets.http.warm_plan: which webhooks of a batch share a warm-up (fires to one host due together)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from punctual.targets.http import TOGETHER_S, warm_plan


def test_a_burst_is_one_run() -> None:
    assert warm_plan([5.0] * 250) == [(5.0, 250)]


def test_fires_due_apart_are_runs_of_their_own() -> None:
    assert warm_plan([7.0, 5.0, 6.0]) == [(5.0, 1), (6.0, 1), (7.0, 1)]


def test_a_run_holds_the_fires_due_within_its_window_of_its_first() -> None:
    # 5.00, 5.03 and 5.05 are within TOGETHER_S (50 ms) of 5.00; 5.08 is not, although it is 30 ms after 5.05
    assert TOGETHER_S == 0.05
    assert warm_plan([5.0, 5.03, 5.05, 5.08]) == [(5.0, 3), (5.08, 1)]


def test_no_fires_no_runs() -> None:
    assert warm_plan([]) == []


@given(st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=300))
def test_every_fire_is_in_exactly_one_run_and_runs_are_apart(delays: list[float]) -> None:
    runs = warm_plan(delays)
    assert sum(count for _, count in runs) == len(delays)
    firsts = [first for first, _ in runs]
    assert firsts == sorted(firsts)
    assert all(b - a > TOGETHER_S for a, b in zip(firsts, firsts[1:], strict=False))
    for first, count in runs:  # each run: the fires from its first up to TOGETHER_S after it
        assert count == sum(1 for d in delays if d >= first and d - first <= TOGETHER_S)
