"""When a recurring schedule's occurrences fall: ``at(...)``, ``rate(N unit)`` and ``cron(...)`` expressions in a
time zone, as a strictly increasing run of UTC instants (epoch milliseconds). Pure: no I/O, no clock.

Expressions (EventBridge's forms, plus the common five-field cron and sub-second rates):

* ``at(2026-12-24T18:00:00)``: once, at that local time of the schedule's zone (seconds and milliseconds allowed).
* ``rate(N unit)``: every N milliseconds, seconds, minutes, hours or days (singular or plural), counted in
  elapsed time from the schedule's start, whatever the zone's clock does (a rate never moves with DST).
* ``cron(min hour day-of-month month day-of-week year)``: EventBridge's six fields; day-of-week 1-7 is
  SUN-SAT; one of the two day fields is ``?``; ``L`` (last day of the month, or ``6L`` the last Friday), ``W``
  (``15W``, the weekday nearest the 15th) and ``#`` (``2#1``, the first Monday).
* ``cron(min hour day-of-month month day-of-week)`` (or the five fields bare): the common cron; day-of-week
  0-7 with 0 and 7 Sunday; when both day fields are restricted a day matching either runs (as in Vixie cron).

Cron fields are matched by croniter (maintained by pallets-eco), on the zone's wall clock. Two rules decide
wall times that a clock change makes odd, the Python default (PEP 495, ``fold=0``):

* a local time that does not exist (the spring-forward gap) runs as if the clock had not jumped yet: 02:30 on
  a night the clock goes from 02:00 to 03:00 runs at 03:30 the new time;
* a local time that happens twice (the fall-back hour) runs once, at its first instant.

An occurrence is its instant: two wall times that land on one instant run once, and the run never goes back
in time. So a ``cron`` schedule every few minutes skips the repeated hour of a fall-back night (its times
already ran) and doubles nothing on a spring-forward night; use ``rate`` for a fixed elapsed interval.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from punctual.domain.keys import MAX_MS, from_ms, to_ms
from punctual.errors import ExpressionError

MIN_RATE_MS = 100  # each occurrence is a task (a create, an arm and a record): 10 a second at most per schedule
_UNIT_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
_WRAPPED = re.compile(r"^\s*(at|rate|cron)\s*\((.*)\)\s*$", re.IGNORECASE | re.DOTALL)
_RATE = re.compile(r"^\s*(\d{1,12})\s+([a-z]+?)s?\s*$", re.IGNORECASE)
_AT_FORMATS = ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_YEARS = (1970, 2199)
MAX_EXPRESSION_CHARS = 256
CRON_FIELDS = 5  # a common cron body: minutes hours day-of-month month day-of-week
EVENTBRIDGE_CRON_FIELDS = 6  # EventBridge's: the same and the year
LAST_EVENTBRIDGE_DAY = 7  # EventBridge's day-of-week runs 1-7 (SUN-SAT)
_SPAN = timedelta(hours=26)  # how far apart in time the offsets that bound one wall time are sampled


@dataclass(frozen=True, slots=True)
class At:
    """Once, at a local wall time (naive: it is read in the schedule's zone)."""

    local: datetime


@dataclass(frozen=True, slots=True)
class Rate:
    """Every ``every_ms`` of elapsed time from the schedule's anchor."""

    every_ms: int


@dataclass(frozen=True, slots=True)
class Cron:
    """Wall-clock times matching ``fields`` (croniter's syntax: min hour dom month dow [second year])."""

    fields: str
    text: str  # as the user wrote it


Expression = At | Rate | Cron


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``"UTC"``, ``"Europe/Paris"``, ``"Asia/Kolkata"``); ExpressionError for any other
    text (a zone's folder such as ``"America"`` is no zone: reading it is an OSError)."""
    try:
        return _zone(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError) as exc:
        raise ExpressionError(f"unknown time zone {name!r}: use an IANA name such as 'Europe/Paris' or 'UTC'") from exc


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    if not name or name != name.strip():
        raise ValueError(name)
    return ZoneInfo(name)


def parse_expression(text: str) -> Expression:
    """Parse ``at(...)``, ``rate(...)``, ``cron(...)`` or a bare five- or six-field cron line.

    Raises
    ------
    ExpressionError
        With what is wrong and the accepted forms.
    """
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("a schedule expression is required: at(...), rate(N unit) or cron(...)")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"a schedule expression is at most {MAX_EXPRESSION_CHARS} characters")
    wrapped = _WRAPPED.match(text)
    kind, body = (wrapped.group(1).lower(), wrapped.group(2)) if wrapped else ("cron", text)
    if kind == "at":
        return At(_parse_at(body))
    if kind == "rate":
        return Rate(_parse_rate(body))
    return Cron(_cron_fields(body), text.strip())


def _parse_at(body: str) -> datetime:
    value = body.strip()
    for fmt in _AT_FORMATS:
        try:
            parsed = datetime.strptime(value, fmt)
        except ValueError:
            continue
        return parsed.replace(microsecond=parsed.microsecond // 1000 * 1000)
    raise ExpressionError(
        f"at({value}): write a local date and time, yyyy-mm-ddThh:mm[:ss[.fff]], no zone "
        "(the schedule's time zone says where)"
    )


def _parse_rate(body: str) -> int:
    match = _RATE.match(body)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNIT_MS:
        raise ExpressionError(
            f"rate({body.strip()}): write rate(N unit), unit one of millisecond(s), second(s), "
            "minute(s), hour(s), day(s)"
        )
    every_ms = int(match.group(1)) * _UNIT_MS[unit]
    if every_ms < MIN_RATE_MS:
        raise ExpressionError(f"rate({body.strip()}): the shortest rate is {MIN_RATE_MS} milliseconds")
    if every_ms > 3650 * _UNIT_MS["day"]:
        raise ExpressionError(f"rate({body.strip()}): the longest rate is 3650 days")
    return every_ms


def _cron_fields(body: str) -> str:
    """croniter's fields for a five-field (common) or six-field (EventBridge) cron body, checked."""
    from croniter import croniter  # noqa: PLC0415  imported on first use: keeps the executor handler's cold start free of croniter
    from croniter.croniter import CroniterError  # noqa: PLC0415  imported on first use: keeps the executor handler's cold start free of croniter

    parts = body.split()
    if len(parts) == CRON_FIELDS:
        fields = " ".join(parts)
    elif len(parts) == EVENTBRIDGE_CRON_FIELDS:
        fields = _eventbridge_fields(parts)
    else:
        raise ExpressionError(
            f"cron({body.strip()}): write six fields (EventBridge: minutes hours day-of-month "
            "month day-of-week year) or five (minutes hours day-of-month month day-of-week)"
        )
    try:
        croniter(fields, datetime(2000, 1, 1))
    except (CroniterError, ValueError, KeyError, IndexError) as exc:
        raise ExpressionError(f"cron({body.strip()}): {exc}") from exc
    return fields


def _eventbridge_fields(parts: list[str]) -> str:
    minute, hour, dom, month, dow, year = (p.upper() for p in parts)
    if (dom == "?") == (dow == "?"):
        raise ExpressionError(
            f"cron({' '.join(parts)}): exactly one of day-of-month and day-of-week is '?' (EventBridge's rule)"
        )
    if year != "*" and not re.fullmatch(r"[0-9,\-/]+", year):
        raise ExpressionError(f"cron({' '.join(parts)}): the year field takes numbers, ranges, lists and steps")
    for number in re.findall(r"\d+", year if year != "*" else ""):
        if not _YEARS[0] <= int(number) <= _YEARS[1] and "/" not in year:
            raise ExpressionError(f"cron({' '.join(parts)}): years run from {_YEARS[0]} to {_YEARS[1]}")
    dom = "*" if dom == "?" else dom
    dow = "*" if dow == "?" else ",".join(_eventbridge_day(term, parts) for term in dow.split(","))
    return f"{minute} {hour} {dom} {month} {dow} 0 {year}"


def _eventbridge_day(term: str, parts: list[str]) -> str:  # noqa: PLR0911  one return per form a term takes
    """One term of EventBridge's day-of-week (1-7 = SUN-SAT) in croniter's (0-6 = SUN-SAT)."""

    def day(value: str) -> str:
        if value in _DAY_NAMES:
            return value
        if value.isdigit() and 1 <= int(value) <= LAST_EVENTBRIDGE_DAY:
            return str(int(value) - 1)
        raise ExpressionError(f"cron({' '.join(parts)}): day-of-week takes 1-7 (SUN-SAT) or SUN..SAT, not {value!r}")

    if term == "*":
        return term
    if term == "L":
        return "6"  # the last day of the week: Saturday
    if term.endswith("L"):
        return f"L{day(term[:-1])}"
    if "#" in term:
        value, nth = term.split("#", 1)
        return f"{day(value)}#{nth}"
    if "/" in term:
        value, step = term.split("/", 1)
        return f"{value if value == '*' else _eventbridge_day(value, parts)}/{step}"
    if "-" in term:
        first, last = term.split("-", 1)
        return f"{day(first)}-{day(last)}"
    return day(term)


# -- occurrences ---------------------------------------------------------------------------------------------
def wall_to_ms(local: datetime, tz: ZoneInfo) -> int:
    """The instant of a wall time in ``tz`` under the module's rules (``fold=0``: a time in the gap runs as if the
    clock had not jumped, a repeated time at its first instant)."""
    return to_ms(local.replace(tzinfo=tz, fold=0))


def occurrences_after(expression: Expression, tz: ZoneInfo, after_ms: int, anchor_ms: int) -> Iterator[int]:
    """The expression's instants strictly after ``after_ms``, increasing, each once, up to the end of the year 9999
    in UTC (:data:`~punctual.domain.keys.MAX_MS`: the run ends there). ``anchor_ms`` is where a ``rate`` counts
    from (the schedule's start); an instant before it never comes (a rate's first is the anchor)."""
    for instant in _occurrences_after(expression, tz, after_ms, anchor_ms):
        if instant > MAX_MS:
            return
        yield instant


def _occurrences_after(expression: Expression, tz: ZoneInfo, after_ms: int, anchor_ms: int) -> Iterator[int]:
    if after_ms >= MAX_MS:
        return
    if isinstance(expression, Rate):
        step = expression.every_ms
        k = max(0, (after_ms - anchor_ms) // step + 1)
        while True:
            yield anchor_ms + k * step
            k += 1
    elif isinstance(expression, At):
        try:
            instant = wall_to_ms(expression.local, tz)
        except OverflowError:  # a wall time past the year 9999 in UTC (or before the year 1): it never comes
            return
        if instant > after_ms:
            yield instant
    else:
        yield from _cron_instants(expression.fields, tz, after_ms)


def _offset_bounds(tz: ZoneInfo, around: datetime) -> tuple[timedelta, timedelta]:
    """The least and greatest UTC offsets ``tz`` has within a day or so of ``around`` (a UTC datetime)."""
    offsets = []
    for hours in (-26, -13, 0, 13, 26):
        try:
            offset = (around + timedelta(hours=hours)).astimezone(tz).utcoffset()
        except OverflowError:
            continue
        if offset is not None:
            offsets.append(offset)
    return (min(offsets), max(offsets)) if offsets else (timedelta(0), timedelta(0))


def _cron_instants(fields: str, tz: ZoneInfo, after_ms: int) -> Iterator[int]:
    """Wall times matching ``fields`` mapped to instants, sorted and deduplicated.

    The mapping from wall time to instant goes back by up to an hour at a spring-forward gap, so wall times are
    read from ``after + least offset`` (the earliest that can map after ``after``) and their instants held in a
    heap until no later wall time can map before them (a wall time ``w`` maps at or after ``w - greatest
    offset``)."""
    from croniter import croniter  # noqa: PLC0415  imported on first use: keeps the executor handler's cold start free of croniter
    from croniter.croniter import CroniterBadDateError  # noqa: PLC0415  imported on first use: keeps the executor handler's cold start free of croniter

    after = from_ms(after_ms)
    low, _ = _offset_bounds(tz, after)
    try:
        start = (after + low).replace(tzinfo=None)
    except OverflowError:
        if low > timedelta(0):
            return  # past the last wall time a datetime holds: nothing comes after
        start = datetime.min  # before the first one: every wall time comes after
    matcher = croniter(fields, start)
    pending: list[int] = []
    last = after_ms
    while True:
        try:
            wall = matcher.get_next(datetime)
            instant = wall_to_ms(wall, tz)
        except (CroniterBadDateError, OverflowError, ValueError):
            break  # no match in the years croniter looks ahead, or past the year 9999 (croniter: "year 10000 is out
            # of range", a ValueError; the fields were checked when parsed, so it can only be the calendar's end)
        if instant > last:
            heapq.heappush(pending, instant)
        _, high = _offset_bounds(tz, wall.replace(tzinfo=UTC))
        floor = to_ms((wall - high).replace(tzinfo=UTC))
        while pending and pending[0] <= floor:
            instant = heapq.heappop(pending)
            if instant > last:
                last = instant
                yield instant
    while pending:
        instant = heapq.heappop(pending)
        if instant > last:
            last = instant
            yield instant
