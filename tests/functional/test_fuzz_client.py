"""Hypothesis against ``punctual.Client`` over the real repository on moto (table from template.yaml).

* Bad input: ``schedule`` raises ``InvalidTaskError`` whose ``.field`` names the argument, and the table holds
  exactly what it held before (a consistent scan count), nothing under the task's id.
* Good input: what ``schedule`` returns is what ``get`` reads back, with the content that was asked for.
* Idempotency: the same id with equal content (however it is written) returns the stored task and stores
  nothing new; with other content it raises ``TaskConflictError`` and leaves the stored item byte for byte.

The fixtures are function-scoped (one moto table per test function, shared by its examples), hence the
suppressed health check; the good-input properties empty the table before each example.
"""

from __future__ import annotations

import math
import string
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given
from hypothesis import settings as fuzz_settings
from hypothesis import strategies as st

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms, to_ms
from punctual.domain.model import Task, TaskStatus, canonical_json, known_action_kinds
from punctual.errors import InvalidTaskError, TaskConflictError
from punctual.network.addresses import public_address_problem
from punctual.runtime.client import Client
from punctual.targets import HttpAction, LogAction
from support import (
    FIXED_NOW_MS,
    FakeClock,
    Opaque,
    clean_text,
    json_payloads,
    path_segments,
    reorder_keys,
    task_ids,
    zones,
)

fuzz = fuzz_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

DAY_MS = 86_400_000


@pytest.fixture
def client(dynamodb: Any, settings: Settings, now_ms: int) -> Client:
    # The strategies below are built at import time from NOW_MS and the default limits; the fixtures must agree.
    assert now_ms == NOW_MS
    assert (settings.max_horizon_days, settings.max_payload_bytes) == (DEFAULTS.max_horizon_days, MAX_PAYLOAD)
    assert settings.default_misfire_grace_ms == DEFAULTS.default_misfire_grace_ms
    return Client(settings, dynamodb=dynamodb, clock=FakeClock(wall_ms=now_ms))


def stored_count(dynamodb: Any, settings: Settings) -> int:
    """How many items the table holds, read consistently."""
    return int(dynamodb.scan(TableName=settings.table_name, Select="COUNT", ConsistentRead=True)["Count"])


def empty_table(dynamodb: Any, settings: Settings) -> None:
    for page in dynamodb.get_paginator("scan").paginate(
        TableName=settings.table_name, ProjectionExpression="task_id", ConsistentRead=True
    ):
        for item in page["Items"]:
            dynamodb.delete_item(TableName=settings.table_name, Key={"task_id": item["task_id"]})


# -- strategies --------------------------------------------------------------------------------------------
# NOW_MS is the functional tier's fixed "now" (its conftest's now_ms); the settings there keep the default
# horizon (366 days), payload limit (256 KiB) and misfire grace (60 s). Zones, task ids, clean text, JSON
# payloads and path segments are tests/support.py's, shared with tests/unit/test_fuzz_model.py.
NOW_MS = FIXED_NOW_MS
DEFAULTS = Settings()
HORIZON_MS = DEFAULTS.max_horizon_days * DAY_MS
MAX_PAYLOAD = DEFAULTS.max_payload_bytes

# Targets the client's default rules accept: names, and public addresses (test_netpolicy.py has the others).
hosts = st.from_regex(r"\A[a-z0-9](?:[a-z0-9-]{0,10}[a-z0-9])?\Z").map(
    lambda label: f"{label}.example"
) | st.ip_addresses(v=4).filter(lambda ip: public_address_problem(ip) is None).map(str)
http_urls = st.builds(
    lambda scheme, host, path: f"{scheme}://{host}/{'/'.join(path)}",
    st.just("https"),
    hosts,
    st.lists(path_segments, max_size=3),
)
action_models = st.builds(
    HttpAction,
    url=http_urls,
    headers=st.dictionaries(
        st.from_regex(r"\AX-[A-Za-z0-9-]{1,12}\Z"),
        st.text(string.ascii_letters + string.digits + " -_.", max_size=12),
        max_size=3,
    ),
    timeout_s=st.floats(min_value=0, max_value=60, exclude_min=True, allow_nan=False),
) | st.builds(LogAction, message=st.text(st.characters(exclude_categories=["Cs"]), max_size=300))
action_inputs = action_models | action_models.map(lambda action: action.model_dump(mode="json"))
# Grace as whole milliseconds, or as a timedelta of whole seconds: a timedelta with a millisecond part can
# lose a millisecond on the way in (tests/unit/test_fuzz_model.py::test_a_timedelta_grace_keeps_every_millisecond).
graces = (
    st.none()
    | st.integers(min_value=0, max_value=86_400_000)
    | st.integers(0, 86_400).map(lambda s: timedelta(seconds=s))
)


def grace_ms_of(grace: int | timedelta | None) -> int:
    if grace is None:
        return DEFAULTS.default_misfire_grace_ms
    return grace if isinstance(grace, int) else int(grace.total_seconds()) * 1000


@st.composite
def good_inputs(draw: st.DrawFn) -> dict[str, Any]:
    """Arguments of a schedule call that must be accepted: due in [now - grace, now + horizon]."""
    grace = draw(graces)
    due_ms = draw(st.integers(min_value=NOW_MS - grace_ms_of(grace), max_value=NOW_MS + HORIZON_MS))
    due_at = (from_ms(due_ms) + timedelta(microseconds=draw(st.integers(0, 999)))).astimezone(draw(zones))
    return {
        "task_id": draw(task_ids),
        "due_at": due_at,
        "action": draw(action_inputs),
        "payload": draw(json_payloads),
        "misfire_grace": grace,
    }


not_json = (
    st.sets(st.integers(), max_size=3)
    | st.binary(max_size=5)
    | st.tuples(st.integers())
    | st.complex_numbers(allow_nan=False, allow_infinity=False)
    | st.datetimes()
    | st.builds(Opaque)
)


def bad(field: str, strategy: st.SearchStrategy[Any], argument: str | None = None) -> st.SearchStrategy[Any]:
    """(the field the error must name, the schedule arguments that carry the bad value)."""
    return strategy.map(lambda value: (field, {argument or field: value}))


def bad_action(field: str, values: st.SearchStrategy[Any], build: Any) -> st.SearchStrategy[Any]:
    """(the field, schedule arguments whose action mapping ``build(value)`` carries the bad value)."""
    return values.map(lambda value: (field, {"action": build(value)}))


def is_valid_id(task_id: str) -> bool:
    """Whether the model takes ``task_id`` (model.is_valid_task_id disagrees on a trailing newline)."""
    try:
        Task(task_id=task_id, due_at=from_ms(NOW_MS), action=LogAction())
    except ValueError:
        return False
    return True


bad_inputs = st.one_of(
    # due_at: naive, not a datetime, beyond the horizon, further in the past than the grace
    bad("due_at", st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 1, 1))),
    bad(
        "due_at",
        st.none() | st.integers() | st.floats() | st.text(max_size=25) | st.dates() | st.just("2030-06-01T12:00:00Z"),
    ),
    bad(
        "due_at",
        st.integers(min_value=NOW_MS + HORIZON_MS + 1, max_value=to_ms(datetime(9998, 1, 1, tzinfo=UTC))).map(from_ms),
    ),
    bad(
        "due_at",
        st.integers(
            min_value=to_ms(datetime(2, 1, 1, tzinfo=UTC)), max_value=NOW_MS - DEFAULTS.default_misfire_grace_ms - 1
        ).map(from_ms),
    ),
    # payload: over the limit (counted in UTF-8 bytes), not JSON, not valid Unicode
    bad(
        "payload",
        st.builds(
            lambda extra, char: char * ((MAX_PAYLOAD - 2) // len(char.encode()) + extra),
            st.integers(1, 2_000),
            st.sampled_from(["x", "é", "€", "😀"]),
        ),
    ),
    bad(
        "payload",
        not_json
        | st.lists(not_json, min_size=1, max_size=2)
        | st.dictionaries(st.text(max_size=3), not_json, min_size=1, max_size=2),
    ),
    bad(
        "payload",
        st.builds(lambda text, surrogate: {"k": text + surrogate}, clean_text, st.sampled_from(["\ud800", "\udfff"])),
    ),
    # action: unknown kinds, malformed URLs, not an action at all, wrong field types
    bad("action", st.text(max_size=20).filter(lambda k: k not in known_action_kinds()).map(lambda k: {"kind": k})),
    bad_action(
        "action.url",
        st.one_of(
            st.builds(lambda host: f"{host}/x", hosts),  # no scheme
            st.sampled_from(
                [
                    "ftp://example.com/x",
                    "javascript:alert(1)",
                    "file:///etc/passwd",
                    "mailto:a@b.example",
                    "http://",
                    "https://:443/x",
                    "http://exa mple.example/",
                    "http://a.example:70000/",
                ]
            ),
            st.integers() | st.none(),
        ),
        lambda url: {"kind": "http", "url": url},
    ),
    bad("action", st.none() | st.integers() | st.text(max_size=10) | st.lists(st.integers(), max_size=2)),
    bad_action(
        "action.message",
        st.integers() | st.text(min_size=1_001, max_size=1_100) | st.lists(st.text(max_size=3), max_size=2),
        lambda message: {"kind": "log", "message": message},
    ),
    bad_action(
        "action.timeout_s",
        st.sampled_from([0, -1, 61, math.nan, math.inf, "soon"]),
        lambda timeout: {"kind": "http", "url": "https://example.com/", "timeout_s": timeout},
    ),
    # task_id: breaks the pattern, or is not text
    bad("task_id", st.text(max_size=140).filter(lambda task_id: not is_valid_id(task_id))),
    bad("task_id", st.integers() | st.floats(allow_nan=False) | st.lists(st.integers(), max_size=2)),
    # misfire grace out of range
    bad("misfire_grace_ms", st.integers(max_value=-1) | st.integers(min_value=86_400_001), "misfire_grace"),
)


# -- bad input: refused, naming the field, nothing stored -----------------------------------------------------
@fuzz
@given(bad_inputs)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(
    client: Client, dynamodb: Any, settings: Settings, case: tuple[str, dict[str, Any]]
) -> None:
    field, arguments = case
    # Given a table that holds one task already
    if stored_count(dynamodb, settings) == 0:
        client.schedule(from_ms(NOW_MS + 60_000), LogAction(), task_id="already-there")
    before = stored_count(dynamodb, settings)
    call: dict[str, Any] = {
        "due_at": from_ms(NOW_MS + 10_000),
        "action": LogAction(),
        "task_id": "fuzz-bad",
        **arguments,
    }

    # When a schedule call carries one bad argument
    with pytest.raises(InvalidTaskError) as info:
        client.schedule(**call)

    # Then the error names the field it is about (a nested location starts with it) in its message too
    error = info.value
    assert error.field is not None
    assert error.field == field or error.field.startswith(field + "."), (error.field, field)
    assert str(error).startswith(f"invalid {error.field}")
    # And nothing was stored
    assert stored_count(dynamodb, settings) == before
    assert client.get("fuzz-bad") is None


@pytest.mark.parametrize("payload", [math.nan, [math.inf], {"x": -math.inf}], ids=["nan", "inf", "minus-inf"])
def test_a_non_finite_payload_is_refused_and_not_stored(
    client: Client, dynamodb: Any, settings: Settings, payload: Any
) -> None:
    # When a task with a non-JSON number in its payload is scheduled
    with pytest.raises(InvalidTaskError) as info:
        client.schedule(from_ms(NOW_MS + 10_000), LogAction(), payload, task_id="not-json")
    # Then it is refused at payload, and nothing is stored
    assert info.value.field == "payload"
    assert stored_count(dynamodb, settings) == 0


# -- good input: schedule then get -----------------------------------------------------------------------------
@fuzz
@given(good_inputs())
def test_a_scheduled_task_reads_back_equal(
    client: Client, dynamodb: Any, settings: Settings, arguments: dict[str, Any]
) -> None:
    # Given an empty table
    empty_table(dynamodb, settings)
    expected = client.build_task(now_ms=NOW_MS, **arguments)

    # When a valid task is scheduled and read back
    scheduled = client.schedule(**arguments)
    stored = client.get(arguments["task_id"])

    # Then the stored task is the one schedule returned, PENDING, holding exactly what was asked for
    assert stored == scheduled
    assert stored is not None
    assert stored.status is TaskStatus.PENDING
    assert stored.task_id == arguments["task_id"]
    assert stored.due_ms == to_ms(arguments["due_at"])
    assert stored.due_at.utcoffset() == timedelta(0)
    assert stored.action == expected.action
    assert stored.payload == arguments["payload"]
    assert canonical_json(stored.payload) == canonical_json(arguments["payload"])
    assert stored.misfire_grace_ms == grace_ms_of(arguments["misfire_grace"])
    assert stored.content_hash() == expected.content_hash()
    assert stored_count(dynamodb, settings) == 1


# -- idempotency -------------------------------------------------------------------------------------------------
@fuzz
@given(good_inputs(), zones, st.integers(0, 999), st.booleans())
def test_the_same_id_with_equal_content_returns_the_stored_task(
    client: Client,
    dynamodb: Any,
    settings: Settings,
    read_raw: Any,
    arguments: dict[str, Any],
    zone: Any,
    micros: int,
    action_as_mapping: bool,
) -> None:
    # Given a scheduled task
    empty_table(dynamodb, settings)
    first = client.schedule(**arguments)
    raw_before = read_raw(first.task_id)

    # When the same id is scheduled again with equal content written differently: the same millisecond in
    # another zone, the action as a mapping (or a model), the payload's keys in another order
    action = arguments["action"]
    if action_as_mapping and not isinstance(action, dict):
        action = action.model_dump(mode="json")
    retry = {
        **arguments,
        "due_at": (from_ms(first.due_ms) + timedelta(microseconds=micros)).astimezone(zone),
        "action": action,
        "payload": reorder_keys(arguments["payload"]),
    }
    again = client.schedule(**retry)

    # Then the stored task comes back, and the table still holds that one item, unchanged
    assert again == first
    assert client.get(first.task_id) == first
    assert read_raw(first.task_id) == raw_before
    assert stored_count(dynamodb, settings) == 1


def changed(arguments: dict[str, Any], stored: Task, what: str) -> dict[str, Any]:
    """The same schedule call with one piece of content changed."""
    if what == "due_at":
        step = -1 if stored.due_ms + 1 > NOW_MS + HORIZON_MS else 1
        return {**arguments, "due_at": from_ms(stored.due_ms + step)}
    if what == "payload":
        return {**arguments, "payload": {"changed": arguments["payload"]}}
    if what == "action":
        other = (
            LogAction(message="other")
            if isinstance(stored.action, HttpAction)
            else HttpAction(url="https://example.com/other")
        )
        return {**arguments, "action": other}
    grace = stored.misfire_grace_ms
    return {**arguments, "misfire_grace": grace + 1 if grace < 86_400_000 else grace - 1}


@fuzz
@given(good_inputs(), st.sampled_from(["due_at", "payload", "action", "misfire_grace"]))
def test_the_same_id_with_other_content_is_a_conflict_and_changes_nothing(
    client: Client, dynamodb: Any, settings: Settings, read_raw: Any, arguments: dict[str, Any], what: str
) -> None:
    # Given a scheduled task
    empty_table(dynamodb, settings)
    first = client.schedule(**arguments)
    raw_before = read_raw(first.task_id)
    other = changed(arguments, first, what)
    # (a grace one ms shorter could leave a past due time outside it: that is bad input, not a conflict)
    assume(first.due_ms >= NOW_MS - grace_ms_of(other["misfire_grace"]))

    # When the same id is scheduled with other content
    with pytest.raises(TaskConflictError) as info:
        client.schedule(**other)

    # Then the error carries the stored task, and the stored item is untouched, byte for byte
    assert info.value.existing == first
    assert client.get(first.task_id) == first
    assert read_raw(first.task_id) == raw_before
    assert stored_count(dynamodb, settings) == 1


def test_a_grace_given_as_timedelta_or_as_ms_is_the_same_content(client: Client, now_ms: int) -> None:
    # Given a task scheduled with a grace of 1,001 ms given as a timedelta
    due = from_ms(now_ms + 60_000)
    first = client.schedule(due, LogAction(), task_id="grace-1001", misfire_grace=timedelta(milliseconds=1001))
    # When the same call is retried with the grace in milliseconds
    again = client.schedule(due, LogAction(), task_id="grace-1001", misfire_grace=1001)
    # Then it is the same task
    assert again == first
    assert first.misfire_grace_ms == 1001
