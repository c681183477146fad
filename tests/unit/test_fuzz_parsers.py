"""Hypothesis over every parser of user input and of stored items: whatever goes in, out comes a value or the
project's own error for that input, never anything else (an OSError, an OverflowError, a RecursionError, a bare
ValueError...).

* time zones (:func:`punctual.domain.recurrence.zone`): a zone or ExpressionError;
* schedule expressions (``at``, ``rate``, ``cron``): an expression or ExpressionError; and the instants of any
  valid one, from any instant up to the year 9999, in any zone: increasing, within the year 9999 in UTC;
* a schedule's fields together (the model): a schedule or pydantic's ValidationError;
* the REST API's query instants, page tokens and JSON bodies: a value, or InvalidRequestError / ValueError /
  the JSON decoding error the API answers 400 for;
* stored items (:mod:`punctual.stores.dynamodb.codec`): a task, a candidate or a schedule, or
  UndecodableItemError naming the item, whatever the attribute values hold.
"""

from __future__ import annotations

import contextlib
import json
import string
from datetime import UTC, datetime
from itertools import islice
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as fuzz_settings
from hypothesis import strategies as st
from pydantic import ValidationError

from punctual.api.resolver import parse_body
from punctual.api.routes.tasks import instant
from punctual.api.views import decode_token
from punctual.domain.keys import MAX_MS, from_ms, to_ms
from punctual.domain.model import Task
from punctual.domain.recurrence import Cron, occurrences_after, parse_expression, zone
from punctual.domain.schedules import Schedule, first_due_ms
from punctual.errors import ExpressionError, InvalidRequestError, UndecodableItemError
from punctual.stores.dynamodb.codec import candidate_of_item, item_to_task, new_task_item, to_av
from punctual.stores.dynamodb.schedules import schedule_of_item
from punctual.targets import LogAction

fuzz = fuzz_settings(max_examples=200, deadline=None)
DUE = 1_900_000_000_000

# -- strategies -------------------------------------------------------------------------------------------------
ZONE_NAMES = ["UTC", "Europe/Paris", "America/Los_Angeles", "Pacific/Kiritimati", "Pacific/Pago_Pago", "Asia/Kolkata"]
FOLDERS = ["America", "Europe", "Etc", "America/Argentina", "right", "posix", "Asia", "."]
zone_texts = (
    st.sampled_from(ZONE_NAMES + FOLDERS)
    | st.sampled_from(FOLDERS).map(lambda f: f + "/")
    | st.sampled_from(["..", "../etc/passwd", "/etc/localtime", "zone.tab", "tzdata.zi", "iso3166.tab", "__init__"])
    | st.text(string.ascii_letters + "/_-+.0123456789", max_size=40)
    | st.text(max_size=300)
)
CRON_FIELD = st.text("0123456789*?/,-LW#", min_size=1, max_size=6) | st.sampled_from(
    ["MON-FRI", "SUN", "JAN", "L", "6L", "15W", "2#1", "*/5", "9999", "1970-2199", "0/1"]
)
expressions = (
    st.lists(CRON_FIELD, min_size=5, max_size=6).map(lambda fields: f"cron({' '.join(fields)})")
    | st.lists(CRON_FIELD, min_size=5, max_size=5).map(" ".join)
    | st.builds(
        lambda n, unit: f"rate({n} {unit})",
        st.integers(min_value=0, max_value=10**13),
        st.sampled_from(["millisecond", "seconds", "minute", "hours", "day", "days", "weeks", ""]),
    )
    | st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59)).map(
        lambda d: f"at({d.isoformat(timespec='seconds')})"
    )
    | st.text(max_size=300)
)
VALID_EXPRESSIONS = [
    "cron(0 9 ? * MON-FRI *)",
    "cron(59 23 31 12 ? *)",
    "cron(0/1 * * * ? *)",
    "cron(0 0 L * ? *)",
    "cron(0 0 ? * 6L *)",
    "cron(0 12 15W * ? *)",
    "cron(0 0 ? * 2#1 *)",
    "cron(0 0 29 2 ? *)",
    "*/5 * * * *",
    "30 2 * * 0",
    "rate(100 milliseconds)",
    "rate(1 day)",
    "rate(3650 days)",
    "at(9999-12-31T23:59:59)",
    "at(2026-03-29T02:30:00)",
]
instants = st.integers(min_value=to_ms(datetime(1970, 1, 1, tzinfo=UTC)), max_value=MAX_MS)
near_the_end = st.integers(min_value=MAX_MS - 3 * 86_400_000, max_value=MAX_MS)

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=10)
    | st.integers(min_value=1, max_value=20_000).map(lambda n: _Raw("9" * n))  # an integer of n digits
)


class _Raw:
    """A JSON number written as its text (json.dumps would refuse one of more digits than Python converts)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _json_text(value: Any) -> str:
    if isinstance(value, _Raw):
        return value.text
    if isinstance(value, list):
        return "[" + ",".join(_json_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_json_text(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


nested_json = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)
bodies = nested_json.map(_json_text) | st.text(max_size=50) | st.integers(1, 5_000).map(lambda n: "[" * n + "]" * n)

# attribute values as DynamoDB holds them (and a few it would not: a decoder must not trust the wire either)
numbers = (
    st.integers().map(str)
    | st.decimals(min_value=-(10**20), max_value=10**20, allow_nan=False, allow_infinity=False).map(str)
    | st.sampled_from(["1e400", "-0", "1e-130", "Infinity", "NaN", "x"])
)
attribute_values = st.recursive(
    st.builds(lambda s: {"S": s}, st.text(max_size=20) | st.sampled_from(["PENDING", "ARMED", "{}", "[]", "null"]))
    | st.builds(lambda n: {"N": n}, numbers)
    | st.builds(lambda b: {"BOOL": b}, st.booleans())
    | st.just({"NULL": True})
    | st.builds(lambda b: {"B": b}, st.binary(max_size=8))
    | st.builds(lambda ss: {"SS": ss}, st.lists(st.text(max_size=5), min_size=1, max_size=3, unique=True)),
    lambda children: (
        st.builds(lambda items: {"L": items}, st.lists(children, max_size=3))
        | st.builds(lambda m: {"M": m}, st.dictionaries(st.text(max_size=5), children, max_size=3))
    ),
    max_leaves=8,
)
TASK_FIELDS = [
    "task_id",
    "due_ms",
    "status",
    "action",
    "payload",
    "misfire_grace_ms",
    "misfire_policy",
    "occurrence",
    "attempt",
    "lease_until_ms",
    "armed_by",
    "created_ms",
    "fired_ms",
    "drift_ms",
    "retry",
    "tenant",
    "schedule_id",
    "schedule_version",
    "first_due_ms",
    "late",
    "detail",
]
SCHEDULE_FIELDS = [
    "task_id",
    "state",
    "version",
    "definition",
    "next_due_ms",
    "created_count",
    "skipped_count",
    "created_ms",
    "updated_ms",
    "cleanup",
    "tenant",
]
definitions = st.fixed_dictionaries(
    {},
    optional={
        "timezone": zone_texts,
        "expression": expressions,
        "start_at": st.sampled_from(["9999-12-31T23:59:59Z", "0001-01-01T00:00:00+01:00", "x", ""]),
        "max_occurrences": st.integers() | st.just(10**300),
        "action": st.sampled_from([{"kind": "nope"}, {}, [], "x", None]),
        "payload": st.sampled_from([float("inf"), "x" * 10, None]),
    },
)


def _task_item() -> dict[str, Any]:
    task = Task(task_id="acme/t", due_at=from_ms(DUE), action=LogAction())
    return new_task_item(task, due_bucket="b#0", fast_path=0, created_ms=DUE - 1)


def _schedule_item() -> dict[str, Any]:
    definition = {"schedule_id": "acme/daily", "expression": "rate(1 hour)", "action": {"kind": "log"}}
    fields = {
        "state": "ACTIVE",
        "version": 1,
        "definition": json.dumps(definition),
        "created_ms": DUE,
        "tenant": "acme",
    }
    return to_av({"task_id": "acme/#schedule#daily", **fields})


# -- time zones and expressions -----------------------------------------------------------------------------------
@fuzz
@given(zone_texts)
def test_a_zone_name_is_a_zone_or_an_expression_error(name: str) -> None:
    with contextlib.suppress(ExpressionError):
        assert zone(name).key == name


def test_a_folder_of_the_zone_database_is_no_zone() -> None:
    for folder in FOLDERS:
        with pytest.raises(ExpressionError, match="unknown time zone"):
            zone(folder)


@fuzz
@given(expressions)
def test_an_expression_is_parsed_or_an_expression_error(text: str) -> None:
    with contextlib.suppress(ExpressionError):
        parse_expression(text)


@fuzz
@given(st.sampled_from(VALID_EXPRESSIONS), st.sampled_from(ZONE_NAMES), instants | near_the_end, instants)
def test_the_instants_of_an_expression_increase_and_end_with_the_year_9999(
    text: str, name: str, after_ms: int, anchor_ms: int
) -> None:
    found = list(islice(occurrences_after(parse_expression(text), zone(name), after_ms, anchor_ms), 3))
    assert all(after_ms < ms <= MAX_MS for ms in found), found
    assert found == sorted(set(found))


@fuzz_settings(max_examples=40, deadline=None)
@given(st.sampled_from([e for e in VALID_EXPRESSIONS if isinstance(parse_expression(e), Cron)]), near_the_end)
def test_a_cron_expression_near_the_year_9999_ends_without_an_error(text: str, after_ms: int) -> None:
    for name in ZONE_NAMES:
        found = list(islice(occurrences_after(parse_expression(text), zone(name), after_ms, 0), 500))
        assert all(after_ms < ms <= MAX_MS for ms in found)


@fuzz
@given(definitions, near_the_end | instants)
def test_a_schedule_validates_or_is_a_validation_error(definition: dict[str, Any], after_ms: int) -> None:
    fields = {"schedule_id": "s", "expression": "rate(1 hour)", "action": {"kind": "log"}, **definition}
    try:
        schedule = Schedule.model_validate({**fields, "created_at": from_ms(DUE)})
    except ValidationError:
        return
    first = first_due_ms(schedule, after_ms)
    assert first is None or after_ms < first <= MAX_MS


# -- the REST API's own parsers -----------------------------------------------------------------------------------
@fuzz
@given(st.text(max_size=40) | st.datetimes(timezones=st.timezones()).map(datetime.isoformat))
def test_a_query_instant_is_an_instant_or_an_invalid_request(text: str) -> None:
    try:
        moment = instant(text, "due_from")
    except InvalidRequestError as exc:
        assert exc.field == "due_from"  # noqa: PT017 - the fuzzed input may be refused or taken: a refusal is checked where it is caught
        return
    assert moment is not None
    assert to_ms(moment) <= MAX_MS


@fuzz
@given(st.text(max_size=700))
def test_a_page_token_is_an_id_or_a_value_error(token: str) -> None:
    try:
        assert decode_token(token)
    except ValueError as exc:
        assert str(exc) == "not a page token this API gave"  # noqa: PT017 - the fuzzed input may be refused or taken: a refusal is checked where it is caught


@fuzz
@given(bodies)
def test_a_body_is_json_or_the_decoding_error_the_api_answers_400_for(text: str) -> None:
    with contextlib.suppress(json.JSONDecodeError, RecursionError):  # both a 400 naming the body (tests/functional)
        parse_body(text)


def test_an_integer_of_5000_digits_is_a_decoding_error_that_says_so() -> None:
    with pytest.raises(json.JSONDecodeError, match="digits"):
        parse_body('{"payload": ' + "7" * 5_000 + "}")


# -- stored items -----------------------------------------------------------------------------------------------
@fuzz
@given(
    st.dictionaries(st.sampled_from(TASK_FIELDS), attribute_values, max_size=4), st.sets(st.sampled_from(TASK_FIELDS))
)
def test_a_task_item_is_a_task_or_an_undecodable_item_error(changes: dict[str, Any], removed: set[str]) -> None:
    item = {k: v for k, v in {**_task_item(), **changes}.items() if k not in removed}
    for decode in (item_to_task, candidate_of_item):
        try:
            decode(item)
        except UndecodableItemError as exc:
            assert exc.key == item.get("task_id", {}).get("S", "?") or exc.key == "?"  # noqa: PT017 - the fuzzed input may be refused or taken: a refusal is checked where it is caught


@fuzz
@given(
    st.dictionaries(st.sampled_from(SCHEDULE_FIELDS), attribute_values, max_size=3),
    definitions,
    st.sets(st.sampled_from(SCHEDULE_FIELDS)),
)
def test_a_schedule_item_is_a_schedule_or_an_undecodable_item_error(
    changes: dict[str, Any], definition: dict[str, Any], removed: set[str]
) -> None:
    item = _schedule_item()
    written = {**json.loads(item["definition"]["S"]), **definition}
    item = {**item, "definition": {"S": json.dumps(written)}, **changes}
    with contextlib.suppress(UndecodableItemError):
        schedule_of_item({k: v for k, v in item.items() if k not in removed})


def test_a_schedule_item_with_a_folder_for_a_zone_is_undecodable_naming_its_key() -> None:
    item = _schedule_item()
    definition = {**json.loads(item["definition"]["S"]), "timezone": "America"}
    with pytest.raises(UndecodableItemError) as refused:
        schedule_of_item({**item, "definition": {"S": json.dumps(definition)}})
    assert refused.value.key == "acme/#schedule#daily"
