"""Schedule expressions and their occurrences (punctual.domain.recurrence): parsing, EventBridge's cron dialect, the
time-zone rules, and properties of the occurrence iterator against the cron library (croniter)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.domain.keys import from_ms, to_ms
from punctual.domain.recurrence import At, Cron, Rate, occurrences_after, parse_expression, wall_to_ms, zone
from punctual.errors import ExpressionError


def local_times(expression: str, tz: str, after: datetime, count: int, anchor: datetime | None = None) -> list[str]:
    """The first ``count`` occurrences after ``after`` as ISO local times of ``tz``."""
    zone_info = zone(tz)
    parsed = parse_expression(expression)
    instants = occurrences_after(parsed, zone_info, to_ms(after), to_ms(anchor or after))
    return [from_ms(ms).astimezone(zone_info).isoformat() for ms in islice(instants, count)]


# -- parsing ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rate(1 minute)", Rate(60_000)),
        ("rate(5 minutes)", Rate(300_000)),
        ("rate(500 milliseconds)", Rate(500)),
        ("rate(1 second)", Rate(1000)),
        ("RATE( 2 Hours )", Rate(7_200_000)),
        ("rate(1 day)", Rate(86_400_000)),
        ("at(2026-12-24T18:00:00)", At(datetime(2026, 12, 24, 18))),
        ("at(2026-12-24T18:00)", At(datetime(2026, 12, 24, 18))),
        ("at(2026-12-24T18:00:00.250)", At(datetime(2026, 12, 24, 18, 0, 0, 250_000))),
    ],
)
def test_rate_and_at_are_parsed(text: str, expected: object) -> None:
    assert parse_expression(text) == expected


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("cron(0 9 * * ? *)", "0 9 * * * 0 *"),
        ("cron(0 9 ? * 2-6 *)", "0 9 * * 1-5 0 *"),
        ("cron(0 9 ? * MON-FRI *)", "0 9 * * MON-FRI 0 *"),
        ("cron(0 9 ? * 6L *)", "0 9 * * L5 0 *"),
        ("cron(0 9 ? * 2#1 2027)", "0 9 * * 1#1 0 2027"),
        ("cron(0 9 ? * 1,7 *)", "0 9 * * 0,6 0 *"),
        ("cron(0 9 15W * ? *)", "0 9 15W * * 0 *"),
        ("cron(0 9 L * ? *)", "0 9 L * * 0 *"),
        ("cron(0/15 * * * ? *)", "0/15 * * * * 0 *"),
        ("0 9 * * 1-5", "0 9 * * 1-5"),
        ("cron(*/5 * * * *)", "*/5 * * * *"),
    ],
)
def test_cron_is_read_in_eventbridge_or_common_syntax(text: str, fields: str) -> None:
    parsed = parse_expression(text)
    assert isinstance(parsed, Cron)
    assert parsed.fields == fields


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is required"),
        ("every day", "six fields"),
        ("cron(0 9 * * * *)", "exactly one of day-of-month and day-of-week is '?'"),
        ("cron(0 9 ? * ? *)", "exactly one of day-of-month and day-of-week is '?'"),
        ("cron(0 9 ? * 0 *)", "day-of-week takes 1-7"),
        ("cron(0 9 ? * 8 *)", "day-of-week takes 1-7"),
        ("cron(0 9 ? * MON 1969)", "years run from 1970"),
        ("cron(0 9 ? * MON 20x6)", "the year field"),
        ("cron(61 * * * *)", "cron(61 * * * *)"),
        ("cron(0 25 * * ? *)", "cron(0 25 * * ? *)"),
        ("rate(1 week)", "unit one of"),
        ("rate(minute)", "unit one of"),
        ("rate(0 seconds)", "the shortest rate"),
        ("rate(99 milliseconds)", "the shortest rate"),
        ("rate(3651 days)", "the longest rate"),
        ("at(2026-12-24 18:00)", "yyyy-mm-ddThh:mm"),
        ("at(2026-12-24T18:00:00Z)", "no zone"),
        ("at(2026-02-30T18:00:00)", "yyyy-mm-ddThh:mm"),
        ("cron(" + "1," * 200 + "2 * * * *)", "at most 256 characters"),
    ],
)
def test_a_bad_expression_is_refused_with_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        parse_expression(text)
    assert says in str(caught.value)


@pytest.mark.parametrize("name", ["Mars/Olympus", "", " Europe/Paris", "../etc/passwd", "europe/paris!"])
def test_an_unknown_time_zone_is_refused(name: str) -> None:
    with pytest.raises(ExpressionError, match="unknown time zone"):
        zone(name)


# -- cron edge cases, checked by hand ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # 15W: 2027-05-15 is a Saturday, so the nearest weekday is Friday the 14th; 2027-08-15 a Sunday: Monday 16th
        (
            "cron(0 9 15W * ? 2027)",
            datetime(2027, 4, 20, tzinfo=UTC),
            [
                "2027-05-14T09:00:00+00:00",
                "2027-06-15T09:00:00+00:00",
                "2027-07-15T09:00:00+00:00",
                "2027-08-16T09:00:00+00:00",
            ],
        ),
        # L: the last day of each month, February of a leap year included
        (
            "cron(30 23 L * ? *)",
            datetime(2028, 1, 15, tzinfo=UTC),
            ["2028-01-31T23:30:00+00:00", "2028-02-29T23:30:00+00:00", "2028-03-31T23:30:00+00:00"],
        ),
        # 6L: the last Friday; 2#1: the first Monday
        (
            "cron(0 9 ? * 6L *)",
            datetime(2026, 1, 1, tzinfo=UTC),
            ["2026-01-30T09:00:00+00:00", "2026-02-27T09:00:00+00:00", "2026-03-27T09:00:00+00:00"],
        ),
        (
            "cron(0 9 ? * 2#1 *)",
            datetime(2026, 1, 1, tzinfo=UTC),
            ["2026-01-05T09:00:00+00:00", "2026-02-02T09:00:00+00:00", "2026-03-02T09:00:00+00:00"],
        ),
        # 2#5: a fifth Monday exists in some months only
        (
            "cron(0 9 ? * 2#5 *)",
            datetime(2026, 1, 1, tzinfo=UTC),
            ["2026-03-30T09:00:00+00:00", "2026-06-29T09:00:00+00:00", "2026-08-31T09:00:00+00:00"],
        ),
        # the year field ends the schedule
        (
            "cron(0 0 1 1 ? 2027-2028)",
            datetime(2026, 6, 1, tzinfo=UTC),
            ["2027-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"],
        ),
        # the common cron's OR of the two day fields: the 13th, and every Friday
        (
            "0 0 13 * 5",
            datetime(2026, 2, 1, tzinfo=UTC),
            ["2026-02-06T00:00:00+00:00", "2026-02-13T00:00:00+00:00", "2026-02-20T00:00:00+00:00"],
        ),
        # never: February 30th
        ("cron(0 0 30 2 ? *)", datetime(2026, 1, 1, tzinfo=UTC), []),
    ],
)
def test_cron_edge_cases(expression: str, after: datetime, expected: list[str]) -> None:
    assert local_times(expression, "UTC", after, len(expected) or 3) == expected


def test_rate_counts_from_its_anchor_in_elapsed_time() -> None:
    anchor = datetime(2026, 3, 29, 0, 0, 0, 250_000, tzinfo=UTC)
    # Given a rate anchored at .250 and asked from an instant between two of its occurrences
    got = local_times("rate(90 minutes)", "Europe/Paris", anchor + timedelta(minutes=1), 3, anchor=anchor)
    # Then it goes on from the anchor (01:00 in Paris), 90 minutes of elapsed time apart across the spring-forward
    # jump (02:00 -> 03:00): the first comes at 03:30 the new time, not 02:30
    assert got == [
        "2026-03-29T03:30:00.250000+02:00",
        "2026-03-29T05:00:00.250000+02:00",
        "2026-03-29T06:30:00.250000+02:00",
    ]
    # And asked before its anchor, its first occurrence is the anchor
    assert local_times("rate(1 second)", "UTC", anchor - timedelta(hours=1), 1, anchor=anchor) == [
        "2026-03-29T00:00:00.250000+00:00"
    ]


# -- time zones and DST: one behaviour each, several zones ------------------------------------------------------
@pytest.mark.parametrize(
    ("expression", "tz", "after", "expected"),
    [
        # Paris, spring forward (02:00 -> 03:00): 02:30 does not exist and runs at 03:30 the new time
        (
            "cron(30 2 * * ? *)",
            "Europe/Paris",
            datetime(2026, 3, 28, 12, tzinfo=UTC),
            ["2026-03-29T03:30:00+02:00", "2026-03-30T02:30:00+02:00"],
        ),
        # ... and a half-hourly cron neither doubles nor skips an instant across the gap
        (
            "cron(0/30 * * * ? *)",
            "Europe/Paris",
            datetime(2026, 3, 29, 0, 40, tzinfo=UTC),
            ["2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00", "2026-03-29T04:00:00+02:00"],
        ),
        # Paris, fall back (03:00 -> 02:00): 02:30 happens twice and runs once, the first time
        (
            "cron(30 2 * * ? *)",
            "Europe/Paris",
            datetime(2026, 10, 24, 12, tzinfo=UTC),
            ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
        ),
        (
            "cron(0/30 * * * ? *)",
            "Europe/Paris",
            datetime(2026, 10, 25, 0, 0, tzinfo=UTC),
            ["2026-10-25T02:30:00+02:00", "2026-10-25T03:00:00+01:00"],
        ),
        # New York, spring forward at 02:00 local
        (
            "30 2 * * *",
            "America/New_York",
            datetime(2026, 3, 7, 12, tzinfo=UTC),
            ["2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00"],
        ),
        # Lord Howe moves its clock by 30 minutes: 01:30-02:00 happens twice in April, not at all in October
        (
            "0/30 * * * *",
            "Australia/Lord_Howe",
            datetime(2026, 4, 4, 14, 0, tzinfo=UTC),
            ["2026-04-05T01:30:00+11:00", "2026-04-05T02:00:00+10:30", "2026-04-05T02:30:00+10:30"],
        ),
        (
            "45 2 * * *",
            "Australia/Lord_Howe",
            datetime(2026, 10, 3, 0, 0, tzinfo=UTC),
            ["2026-10-04T02:45:00+11:00", "2026-10-05T02:45:00+11:00"],
        ),
        # Kolkata: a 30-minute offset and no DST
        (
            "cron(* * * * ? *)",
            "Asia/Kolkata",
            datetime(2026, 11, 24, 3, 29, 30, tzinfo=UTC),
            ["2026-11-24T09:00:00+05:30", "2026-11-24T09:01:00+05:30"],
        ),
        # Sao Paulo changed its rules: it sprang forward at midnight in November 2018, and has had no DST since 2019
        (
            "0 0 * * *",
            "America/Sao_Paulo",
            datetime(2018, 11, 3, 12, tzinfo=UTC),
            ["2018-11-04T01:00:00-02:00", "2018-11-05T00:00:00-02:00"],
        ),
        (
            "0 0 * * *",
            "America/Sao_Paulo",
            datetime(2019, 11, 2, 12, tzinfo=UTC),
            ["2019-11-03T00:00:00-03:00", "2019-11-04T00:00:00-03:00"],
        ),
        # Apia skipped 30 December 2011 altogether (from UTC-10 to UTC+14): the day's noon does not exist
        (
            "0 12 * * *",
            "Pacific/Apia",
            datetime(2011, 12, 29, 0, tzinfo=UTC),
            ["2011-12-29T12:00:00-10:00", "2011-12-31T12:00:00+14:00"],
        ),
        # asked just after the jump, a time of the gap that runs later than that is not lost
        (
            "cron(15 2 * * ? *)",
            "Europe/Paris",
            datetime(2026, 3, 29, 1, 10, tzinfo=UTC),
            ["2026-03-29T03:15:00+02:00", "2026-03-30T02:15:00+02:00"],
        ),
        # a gap of 30 minutes: 02:15 runs at 02:45, after 02:40, which exists: both run, in the order they come
        (
            "15,40 2 * * *",
            "Australia/Lord_Howe",
            datetime(2026, 10, 3, 14, 0, tzinfo=UTC),
            ["2026-10-04T02:40:00+11:00", "2026-10-04T02:45:00+11:00", "2026-10-05T02:15:00+11:00"],
        ),
        # at(...) in the gap runs as if the clock had not jumped
        ("at(2026-03-29T02:15:00)", "Europe/Paris", datetime(2026, 1, 1, tzinfo=UTC), ["2026-03-29T03:15:00+02:00"]),
    ],
)
def test_a_missing_local_time_runs_a_gap_later_and_a_repeated_one_once(
    expression: str, tz: str, after: datetime, expected: list[str]
) -> None:
    assert local_times(expression, tz, after, len(expected)) == expected


# -- properties against the cron library -------------------------------------------------------------------------
# Each zone with instants near some of its clock changes, so that the properties meet them often
TRANSITIONS = {
    "UTC": [datetime(2026, 1, 1, tzinfo=UTC)],
    "Europe/Paris": [datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 10, 25, 1, tzinfo=UTC)],
    "America/New_York": [datetime(2026, 3, 8, 7, tzinfo=UTC), datetime(2026, 11, 1, 6, tzinfo=UTC)],
    "Australia/Lord_Howe": [datetime(2026, 4, 4, 15, tzinfo=UTC), datetime(2026, 10, 3, 15, 30, tzinfo=UTC)],
    "Asia/Kolkata": [datetime(2026, 3, 29, 1, tzinfo=UTC)],
    "America/Sao_Paulo": [datetime(2018, 11, 4, 3, tzinfo=UTC), datetime(2019, 2, 17, 2, tzinfo=UTC)],
    "Pacific/Apia": [datetime(2011, 12, 30, 10, tzinfo=UTC)],
    "America/St_Johns": [datetime(2026, 3, 8, 5, 30, tzinfo=UTC), datetime(2026, 11, 1, 4, 30, tzinfo=UTC)],
}
ZONES = sorted(TRANSITIONS)


def _term(low: int, high: int) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    return st.one_of(
        st.just("*"),
        value.map(str),
        st.tuples(value, value).map(lambda p: f"{min(p)}-{max(p)}"),
        st.tuples(value, st.integers(1, max(1, (high - low) // 2))).map(lambda p: f"{p[0]}/{p[1]}"),
        st.lists(value, min_size=2, max_size=4, unique=True).map(lambda v: ",".join(map(str, sorted(v)))),
    )


common_cron = st.tuples(_term(0, 59), _term(0, 23), _term(1, 28), _term(1, 12), _term(0, 6)).map(" ".join)


def near_a_change(tz: str) -> st.SearchStrategy[datetime]:
    """Instants anywhere in 30 years, or within three hours of one of ``tz``'s clock changes."""
    return st.one_of(
        st.datetimes(min_value=datetime(2005, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC)),
        st.tuples(st.sampled_from(TRANSITIONS[tz]), st.integers(-3 * 3600, 3 * 3600)).map(
            lambda p: p[0] + timedelta(seconds=p[1])
        ),
    )


zone_and_instant = st.sampled_from(ZONES).flatmap(lambda tz: st.tuples(st.just(tz), near_a_change(tz)))


def _oracle(fields: str, tz: str, after_ms: int, until_ms: int) -> list[int]:
    """Every instant in ``(after, until]`` the naive way: every matching wall time from a day before to a day
    after, each mapped with ``fold=0``, sorted, deduplicated."""
    zone_info = zone(tz)
    walls = croniter(fields, (from_ms(after_ms) - timedelta(days=1)).astimezone(zone_info).replace(tzinfo=None))
    found: set[int] = set()
    end = (from_ms(until_ms) + timedelta(days=1)).astimezone(zone_info).replace(tzinfo=None)
    while (wall := walls.get_next(datetime)) <= end:
        instant = wall_to_ms(wall, zone_info)
        if after_ms < instant <= until_ms:
            found.add(instant)
    return sorted(found)


@settings(max_examples=80, deadline=None)
@given(fields=common_cron, where=zone_and_instant)
def test_cron_occurrences_are_every_matching_wall_time_once_in_order(fields: str, where: tuple[str, datetime]) -> None:
    tz, after = where
    # Given a cron expression, a zone and an instant (often near a clock change)
    after_ms = to_ms(after)
    # When its next occurrences are taken
    got = list(islice(occurrences_after(parse_expression(fields), zone(tz), after_ms, after_ms), 40))
    # Then they increase strictly, and are exactly the instants of the matching wall times (read with fold=0) up
    # to the last of them: a time in a gap is moved, a repeated one taken once, none lost, none doubled
    assert got == sorted(set(got))
    if got:
        assert got == _oracle(fields, tz, after_ms, got[-1])


@settings(max_examples=100, deadline=None)
@given(fields=common_cron, after=near_a_change("UTC"))
def test_in_utc_the_occurrences_are_the_cron_librarys(fields: str, after: datetime) -> None:
    after_ms = to_ms(after)
    got = list(islice(occurrences_after(parse_expression(fields), zone("UTC"), after_ms, after_ms), 20))
    walls = croniter(fields, after.replace(tzinfo=None))
    assert got == [to_ms(walls.get_next(datetime).replace(tzinfo=UTC)) for _ in got]


def _to_eventbridge(fields: str) -> str | None:
    """The same schedule in EventBridge's six fields (day-of-week 1-7), or None when both day fields are
    restricted (EventBridge cannot say that)."""
    minute, hour, dom, month, dow = fields.split()
    if dom != "*" and dow != "*":
        return None
    if dow == "*":
        return f"cron({minute} {hour} {dom} {month} ? *)"
    if "/" in dow:
        start, step = dow.split("/")
        return f"cron({minute} {hour} ? {month} {int(start) + 1}/{step} *)" if start != "*" else None
    shifted = "".join(str(int(c) + 1) if c.isdigit() else c for c in dow)
    return f"cron({minute} {hour} ? {month} {shifted} *)"


@settings(max_examples=100, deadline=None)
@given(fields=common_cron, where=zone_and_instant)
def test_eventbridge_syntax_means_what_the_common_cron_means(fields: str, where: tuple[str, datetime]) -> None:
    tz, after = where
    eventbridge = _to_eventbridge(fields)
    if eventbridge is None:
        return
    after_ms = to_ms(after)
    common = list(islice(occurrences_after(parse_expression(fields), zone(tz), after_ms, after_ms), 10))
    assert list(islice(occurrences_after(parse_expression(eventbridge), zone(tz), after_ms, after_ms), 10)) == common


@settings(max_examples=100, deadline=None)
@given(every=st.integers(100, 10 * 86_400_000), anchor=st.integers(0, 2**42), delta=st.integers(-(2**36), 2**36))
def test_rate_occurrences_are_the_anchor_plus_whole_steps_after_the_instant(
    every: int, anchor: int, delta: int
) -> None:
    after = anchor + delta
    got = list(islice(occurrences_after(Rate(every), zone("UTC"), after, anchor), 3))
    assert all(ms > after and ms >= anchor and (ms - anchor) % every == 0 for ms in got)
    assert got[1] - got[0] == every
    assert got[2] - got[1] == every
    assert got[0] - every <= max(after, anchor - every)
