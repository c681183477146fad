"""The retry policy and its backoff: exponential caps, full jitter, attempts and age limits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from punctual.domain.retry import RetryPolicy, backoff_cap_ms, retry_delay_ms

policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 100),
    backoff_ms=st.integers(0, 86_400_000),
    max_backoff_ms=st.integers(0, 86_400_000),
    max_age_ms=st.none() | st.integers(0, 366 * 86_400_000),
)
draws = st.floats(0.0, 1.0, exclude_max=True)


def test_the_default_policy_never_retries() -> None:
    # Given the default policy / When the first attempt fails / Then there is no retry
    assert retry_delay_ms(RetryPolicy(), 1, 0, 0) is None
    assert retry_delay_ms(None, 1, 0, 0) is None


def test_caps_double_from_the_base_up_to_the_maximum() -> None:
    # Given base 100 ms and a maximum of 1 s
    policy = RetryPolicy(max_attempts=10, backoff_ms=100, max_backoff_ms=1_000)
    # Then the caps after attempts 1, 2, 3, ... are 100, 200, 400, 800, then 1000 for ever
    assert [backoff_cap_ms(policy, n) for n in range(1, 8)] == [100, 200, 400, 800, 1_000, 1_000, 1_000]
    assert backoff_cap_ms(policy, 10_000) == 1_000


def test_full_jitter_spans_zero_to_the_cap() -> None:
    # Given a cap of 400 ms after the third attempt
    policy = RetryPolicy(max_attempts=10, backoff_ms=100, max_backoff_ms=1_000)
    # When the draw is at either end of [0, 1)
    low = retry_delay_ms(policy, 3, 0, 0, rand=lambda: 0.0)
    high = retry_delay_ms(policy, 3, 0, 0, rand=lambda: 0.999_999_9)
    # Then the delay is 0 and the cap itself
    assert (low, high) == (0, 400)


def test_last_attempt_is_exact() -> None:
    # Given three attempts in all
    policy = RetryPolicy(max_attempts=3, backoff_ms=10)
    # Then attempts 1 and 2 are retried, attempt 3 is the last
    assert retry_delay_ms(policy, 2, 0, 0) is not None
    assert retry_delay_ms(policy, 3, 0, 0) is None


def test_max_age_edge_is_exact() -> None:
    # Given a maximum age of 60 s from the first due instant (at 1_000)
    policy = RetryPolicy(max_attempts=5, backoff_ms=10, max_age_ms=60_000)
    # Then a failure exactly 60 s after it is retried; one ms later it is not
    assert retry_delay_ms(policy, 1, 1_000, 61_000) is not None
    assert retry_delay_ms(policy, 1, 1_000, 61_001) is None


def test_a_bad_policy_is_refused() -> None:
    with pytest.raises(ValidationError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValidationError):
        RetryPolicy(backoff_ms=-1)
    with pytest.raises(ValidationError):
        RetryPolicy(surprise=1)  # type: ignore[call-arg]


@given(policies, st.integers(1, 200), draws)
def test_delay_is_within_zero_and_the_cap(policy: RetryPolicy, attempt: int, draw: float) -> None:
    # Given any policy, attempt and draw, within the age limit
    delay = retry_delay_ms(policy, attempt, 0, 0, rand=lambda: draw)
    # Then a delay, if any, lies in [0, min(max_backoff, base * 2^(attempt-1))]
    if delay is not None:
        assert 0 <= delay <= min(policy.max_backoff_ms, policy.backoff_ms * 2 ** (attempt - 1))


@given(policies, st.integers(1, 200), st.integers(0, 10**12), st.integers(0, 10**12), draws)
def test_never_retries_past_max_attempts_or_max_age(
    policy: RetryPolicy, attempt: int, first_due: int, now: int, draw: float
) -> None:
    # When attempt `attempt` fails at `now`
    delay = retry_delay_ms(policy, attempt, first_due, now, rand=lambda: draw)
    # Then there is a retry exactly when attempts remain and the occurrence is not too old
    too_old = policy.max_age_ms is not None and now - first_due > policy.max_age_ms
    assert (delay is not None) == (attempt < policy.max_attempts and not too_old)
