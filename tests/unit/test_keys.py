"""Bucket maths of the due index and the tiling of the poller's windows (pure functions, no clock)."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.domain.keys import (
    BUCKET_MS,
    bucket_start,
    buckets_between,
    from_ms,
    index_key,
    next_tick,
    poll_tick,
    poll_window,
    shard_of,
    to_ms,
)

# No per-example deadline: a busy machine must not fail a property for taking its time.
relaxed = settings(deadline=None)

# Instants up to the year 2200: far beyond any due time the client accepts (its horizon is at most 10 years).
MAX_MS = to_ms(datetime(2200, 1, 1, tzinfo=UTC))
instants = st.integers(min_value=0, max_value=MAX_MS)
offsets = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59).map(lambda m: timedelta(minutes=m))
aware = st.builds(
    lambda naive, offset: naive.replace(tzinfo=timezone(offset)),
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2199, 12, 31)),
    offsets,
)


# -- to_ms / from_ms ----------------------------------------------------------------------------------------
def test_to_ms_of_the_epoch_is_zero_and_from_ms_is_utc() -> None:
    # Given the epoch / When converted both ways / Then 0 and a UTC datetime
    assert to_ms(datetime(1970, 1, 1, tzinfo=UTC)) == 0
    assert from_ms(0) == datetime(1970, 1, 1, tzinfo=UTC)
    assert from_ms(0).utcoffset() == timedelta(0)


def test_to_ms_drops_the_sub_millisecond_part() -> None:
    # Given an instant with 999 microseconds beyond a whole millisecond
    moment = datetime(2024, 3, 5, 7, 8, 9, 123_999, tzinfo=UTC)
    # When / Then: truncated, not rounded
    assert to_ms(moment) == to_ms(datetime(2024, 3, 5, 7, 8, 9, 123_000, tzinfo=UTC))
    assert to_ms(moment) % 1000 == 123


def test_to_ms_converts_a_non_utc_timezone() -> None:
    # Given the same instant written in UTC and in UTC+02:00
    utc = datetime(2024, 3, 5, 7, 8, 9, 500_000, tzinfo=UTC)
    plus_two = datetime(2024, 3, 5, 9, 8, 9, 500_000, tzinfo=timezone(timedelta(hours=2)))
    # Then both give the same epoch milliseconds
    assert to_ms(plus_two) == to_ms(utc)


def test_to_ms_rejects_a_naive_datetime() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        to_ms(datetime(2024, 3, 5, 7, 8, 9))


@relaxed
@given(instants)
def test_from_ms_then_to_ms_is_the_identity(ms: int) -> None:
    assert to_ms(from_ms(ms)) == ms


@relaxed
@given(aware)
def test_to_ms_then_from_ms_keeps_the_instant_at_ms_precision(moment: datetime) -> None:
    # When a datetime in any offset goes to ms and back
    back = from_ms(to_ms(moment))
    # Then it is the same instant, in UTC, truncated to the millisecond
    utc = moment.astimezone(UTC)
    expected = utc.replace(microsecond=utc.microsecond // 1000 * 1000)
    assert back == expected
    assert back.tzinfo == UTC


def test_from_ms_is_exact_far_in_the_future() -> None:
    # Regression: from_ms once went through float seconds and lost a millisecond past the year ~2242.
    ms = 44_853_605_609_755  # in the year 3391
    assert to_ms(from_ms(ms)) == ms


@relaxed
@given(st.integers(min_value=0, max_value=to_ms(datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC))))
def test_from_ms_is_exact_for_every_representable_instant(ms: int) -> None:
    assert to_ms(from_ms(ms)) == ms


def test_from_ms_keeps_a_fraction_of_a_millisecond() -> None:
    # Executors hand fire times as float ms; the datetime keeps the microseconds
    assert from_ms(1_500.25) == datetime(1970, 1, 1, 0, 0, 1, 500_250, tzinfo=UTC)


# -- buckets and shards -------------------------------------------------------------------------------------
def test_bucket_start_is_the_start_of_the_minute() -> None:
    minute = to_ms(datetime(2024, 3, 5, 7, 8, tzinfo=UTC))
    assert bucket_start(minute) == minute
    assert bucket_start(minute + 1) == minute
    assert bucket_start(minute + BUCKET_MS - 1) == minute
    assert bucket_start(minute + BUCKET_MS) == minute + BUCKET_MS


@relaxed
@given(instants)
def test_bucket_start_holds_the_instant(ms: int) -> None:
    start = bucket_start(ms)
    assert start % BUCKET_MS == 0
    assert start <= ms < start + BUCKET_MS


def test_index_key_format() -> None:
    # Given the last millisecond of 07:08 UTC and shard 3
    ms = to_ms(datetime(2024, 3, 5, 7, 8, 59, 999_000, tzinfo=UTC))
    # Then the key names the minute bucket (ISO, UTC) and the shard
    assert index_key(ms, 3) == "2024-03-05T07:08#3"
    assert index_key(ms + 1, 0) == "2024-03-05T07:09#0"
    assert index_key(0, 12) == "1970-01-01T00:00#12"


@relaxed
@given(instants, st.integers(min_value=0, max_value=255))
def test_index_key_is_the_same_for_every_instant_of_a_bucket(ms: int, shard: int) -> None:
    key = index_key(ms, shard)
    assert key == index_key(bucket_start(ms), shard)
    assert key == f"{from_ms(bucket_start(ms)).strftime('%Y-%m-%dT%H:%M')}#{shard}"
    assert datetime.strptime(key.split("#")[0], "%Y-%m-%dT%H:%M").replace(tzinfo=UTC) == from_ms(bucket_start(ms))


def test_shard_of_is_crc32_and_stable() -> None:
    # crc32(b"abc") = 0x352441C2 = 891568578: the same in every process, every run and every language
    assert zlib.crc32(b"abc") == 891_568_578
    assert shard_of("abc", 4) == 891_568_578 % 4 == 2
    assert shard_of("abc", 1) == 0


@relaxed
@given(st.text(min_size=1, max_size=128), st.integers(min_value=1, max_value=256))
def test_shard_of_is_in_range_and_deterministic(task_id: str, shard_count: int) -> None:
    shard = shard_of(task_id, shard_count)
    assert 0 <= shard < shard_count
    assert shard_of(task_id, shard_count) == shard


def test_buckets_between_is_inclusive() -> None:
    assert buckets_between(0, 0) == [0]
    assert buckets_between(59_999, 60_000) == [0, 60_000]
    assert buckets_between(1, 3 * BUCKET_MS + 5) == [0, BUCKET_MS, 2 * BUCKET_MS, 3 * BUCKET_MS]


def test_buckets_between_is_empty_when_first_is_after_last() -> None:
    assert buckets_between(2 * BUCKET_MS, BUCKET_MS - 1) == []
    # Two instants of one bucket, in reverse order, are still that one bucket
    assert buckets_between(BUCKET_MS - 1, 1) == [0]


@relaxed
@given(instants, st.integers(min_value=0, max_value=30 * BUCKET_MS))
def test_buckets_between_covers_every_instant_of_the_range(first: int, span: int) -> None:
    last = first + span
    buckets = buckets_between(first, last)
    assert buckets[0] == bucket_start(first)
    assert buckets[-1] == bucket_start(last)
    assert all(b - a == BUCKET_MS for a, b in zip(buckets, buckets[1:], strict=False))


# -- poll windows -------------------------------------------------------------------------------------------
intervals = st.integers(min_value=1_000, max_value=600_000)
leads = st.integers(min_value=5_000, max_value=600_000)


def test_poll_window_for_default_settings() -> None:
    # Given a rate(1 minute) poller with a 90 s lead, at its tick and 59.999 s later
    tick = 10 * 60_000
    # Then the window it is first responsible for is (tick + 30 s, tick + 90 s]
    assert poll_window(tick, 60_000, 90_000) == (tick + 30_000, tick + 90_000)
    assert poll_window(tick + 59_999, 60_000, 90_000) == (tick + 30_000, tick + 90_000)
    assert poll_window(tick + 60_000, 60_000, 90_000) == (tick + 90_000, tick + 150_000)


@relaxed
@given(instants, intervals)
def test_poll_tick_and_next_tick(now: int, interval: int) -> None:
    tick = poll_tick(now, interval)
    assert tick % interval == 0
    assert tick <= now < tick + interval
    assert next_tick(now, interval) == tick + interval > now


@relaxed
@given(st.integers(min_value=-(10**12), max_value=MAX_MS), intervals, leads)
def test_every_instant_lies_in_exactly_one_poll_window(x: int, interval: int, lead: int) -> None:
    # Given ticks k * interval, each responsible for the window (start, end] = poll_window(tick)
    k0 = (x - lead) // interval
    neighbours = range(k0 - 3, k0 + 4)
    # When we ask which of the ticks around x hold it
    holders = [k for k in neighbours if _contains(poll_window(k * interval, interval, lead), x)]
    # Then exactly one does (the windows tile the time line: no gap, no overlap)
    assert len(holders) == 1


@relaxed
@given(instants, intervals, leads)
def test_consecutive_poll_windows_are_adjacent(now: int, interval: int, lead: int) -> None:
    start, end = poll_window(now, interval, lead)
    assert end - start == interval
    assert end == poll_tick(now, interval) + lead
    next_start, _ = poll_window(next_tick(now, interval), interval, lead)
    assert next_start == end


def _contains(window: tuple[int, int], x: int) -> bool:
    start, end = window
    return start < x <= end
