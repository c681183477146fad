"""The task model: validation, normalisation of times, the action union, the content hash, and the status an
outcome sets."""

from __future__ import annotations

import doctest
import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError, create_model

from punctual.domain import model
from punctual.domain.model import (
    Action,
    Outcome,
    Task,
    TaskStatus,
    canonical_json,
    is_valid_task_id,
    known_action_kinds,
    parse_action,
    register_action_model,
    status_after,
)
from punctual.targets import HttpAction, LogAction

# No per-example deadline: a busy machine must not fail a property for taking its time.
relaxed = settings(deadline=None)

DUE = datetime(2030, 6, 1, 12, 0, 0, tzinfo=UTC)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=25,
)


def make_task(**changes: Any) -> Task:
    fields: dict[str, Any] = {"task_id": "t-1", "due_at": DUE, "action": {"kind": "log"}, "payload": {"a": 1}}
    fields.update(changes)
    return Task(**fields)


# -- times --------------------------------------------------------------------------------------------------
def test_naive_due_at_is_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        make_task(due_at=datetime(2030, 6, 1, 12, 0, 0))
    assert info.value.errors()[0]["loc"] == ("due_at",)


def test_due_at_is_truncated_to_the_millisecond() -> None:
    # Given a due time with 123,999 microseconds
    task = make_task(due_at=DUE.replace(microsecond=123_999))
    # Then it is stored as 123 ms, truncated
    assert task.due_at == DUE.replace(microsecond=123_000)
    assert task.due_ms % 1000 == 123


def test_due_at_in_another_timezone_is_converted_to_utc() -> None:
    # Given 14:00 at UTC+02:00
    task = make_task(due_at=datetime(2030, 6, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))))
    # Then the task holds 12:00 UTC
    assert task.due_at == DUE
    assert task.due_at.utcoffset() == timedelta(0)


def test_other_times_are_normalised_too() -> None:
    task = make_task(fired_at=datetime(2030, 6, 1, 14, 0, 0, 999, tzinfo=timezone(timedelta(hours=2))))
    assert task.fired_at == DUE
    assert task.lease_until is None


# -- task id, action ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "task_id",
    [
        "",
        "-leading-dash",
        "has space",
        "x" * 129,
        "two/slash/es",
        "Upper/tenant",
        "/no-tenant",
        "acme/",
        "t" * 41 + "/long-tenant",
        "#poller-watermark",
        "acme/#schedule#x",
    ],
)
def test_bad_task_ids_are_rejected(task_id: str) -> None:
    assert not is_valid_task_id(task_id)
    with pytest.raises(ValidationError):
        make_task(task_id=task_id)


@pytest.mark.parametrize(
    "task_id",
    [
        "a",
        "publish-v-123",
        "A.b_c:d-e",
        "x" * 128,
        "acme/publish-v-123",
        "t" * 40 + "/" + "x" * 128,
        "acme/daily@20261124T090000.000Z",
    ],
)
def test_good_task_ids_are_accepted(task_id: str) -> None:
    assert is_valid_task_id(task_id)
    assert make_task(task_id=task_id).task_id == task_id


def test_unknown_action_kind_names_the_known_kinds() -> None:
    with pytest.raises(ValidationError) as info:
        make_task(action={"kind": "carrier-pigeon"})
    message = str(info.value)
    assert "carrier-pigeon" in message
    for kind in ("http", "log"):
        assert kind in message
    with pytest.raises(ValueError, match="known kinds: .*http.*log"):
        parse_action({"kind": "carrier-pigeon"})


@pytest.mark.parametrize("value", [None, "log", ["log"], {"no": "kind"}])
def test_an_action_must_be_an_object_with_a_kind(value: Any) -> None:
    with pytest.raises(ValidationError):
        make_task(action=value)


def test_action_given_as_a_mapping_becomes_its_model() -> None:
    task = make_task(action={"kind": "http", "url": "https://example.com/hook", "timeout_s": 2})
    assert isinstance(task.action, HttpAction)
    assert str(task.action.url) == "https://example.com/hook"
    assert task.action.timeout_seconds == 2.0
    assert LogAction().timeout_seconds == 0.0


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "not a url", "example.com/hook"])
def test_http_action_url_must_be_http_or_https(url: str) -> None:
    with pytest.raises(ValidationError):
        HttpAction(url=url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/x", "https://example.com/hooks/publish?x=1"])
def test_http_action_accepts_http_and_https(url: str) -> None:
    assert HttpAction(url=url).url.scheme in ("http", "https")


def test_action_rejects_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        make_task(action={"kind": "log", "mesage": "typo"})


def test_register_action_model_makes_a_new_kind_parseable() -> None:
    # Given a new action kind, unknown so far
    kind = f"test-kind-{uuid.uuid4().hex[:8]}"
    assert kind not in known_action_kinds()

    pigeon = create_model("Pigeon", __base__=Action, kind=(Literal[kind], kind), loft=(str, ...))

    # When it is registered
    register_action_model(pigeon)

    # Then a task can carry it, and it survives a dump / validate round trip
    task = make_task(action={"kind": kind, "loft": "north"})
    assert isinstance(task.action, pigeon)
    assert kind in known_action_kinds()
    again = Task.model_validate(task.model_dump(mode="json"))
    assert again.action == task.action


def test_register_action_model_needs_a_kind_default() -> None:
    class NoKind(Action):
        pass

    with pytest.raises(TypeError, match="needs a string default for 'kind'"):
        register_action_model(NoKind)


# -- content hash and idempotency key -----------------------------------------------------------------------
def test_content_hash_is_equal_for_equal_content() -> None:
    # Given the same content, built twice, with different life-cycle fields
    a = make_task()
    eastern = DUE.astimezone(timezone(timedelta(hours=-5)))
    b = make_task(status=TaskStatus.ARMED, attempt=3, batch_id="b", due_at=eastern)
    # Then their hashes agree
    assert a.content_hash() == b.content_hash()


def test_content_hash_ignores_payload_key_order_and_sub_ms() -> None:
    a = make_task(payload={"a": 1, "b": [1, 2]})
    b = make_task(payload={"b": [1, 2], "a": 1}, due_at=DUE.replace(microsecond=999))
    assert a.content_hash() == b.content_hash()


@pytest.mark.parametrize(
    "change",
    [
        {"due_at": DUE + timedelta(milliseconds=1)},
        {"payload": {"a": 2}},
        {"payload": None},
        {"action": {"kind": "log", "message": "other"}},
        {"action": {"kind": "http", "url": "https://example.com/"}},
        {"misfire_grace_ms": 1},
    ],
)
def test_content_hash_differs_when_content_differs(change: dict[str, Any]) -> None:
    assert make_task(**change).content_hash() != make_task().content_hash()


def test_idempotency_key_is_task_id_and_occurrence() -> None:
    assert make_task().idempotency_key == "t-1:0"
    assert make_task(task_id="publish-v-123", occurrence=7).idempotency_key == "publish-v-123:7"


def test_statuses() -> None:
    assert {s for s in TaskStatus if s.is_active} == {TaskStatus.PENDING, TaskStatus.ARMED}


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (Outcome.SUCCEEDED, TaskStatus.SUCCEEDED),
        (Outcome.FAILED, TaskStatus.FAILED),
        (Outcome.MISSED, TaskStatus.MISSED),
        (Outcome.RETRY, TaskStatus.PENDING),
    ],
)
def test_each_outcome_sets_one_status(outcome: Outcome, status: TaskStatus) -> None:
    assert status_after(outcome) is status


def test_only_a_retry_leaves_the_task_active() -> None:
    assert {o for o in Outcome if status_after(o).is_active} == {Outcome.RETRY}


def test_the_models_examples_hold() -> None:
    assert doctest.testmod(model).failed == 0


def test_the_domains_records_are_keyword_only() -> None:
    # Given each record the store and the services hand each other, built with its first field by position
    task = Task(task_id="t-1", due_at=DUE, action=LogAction())
    records: list[tuple[Any, tuple[Any, ...]]] = [
        (model.Candidate, ("t-1", 1, TaskStatus.PENDING, None, 0)),
        (model.ArmRequest, ("t-1", 1, 2)),
        (model.Armed, (task,)),
        (model.DueScan, ([], 0)),
        (model.Unreadable, ([],)),
        (model.FireRecord, ("t-1", Outcome.SUCCEEDED, 1.0, 2, 0.0, None)),
    ]
    # Then none takes a field by position
    for record, positional in records:
        with pytest.raises(TypeError, match="positional"):
            record(*positional)


def test_an_armed_task_carries_its_due_instant_read_once() -> None:
    # Given a task due at DUE, armed (and taken over from an executor that may have fired it until DUE)
    task = Task(task_id="t-1", due_at=DUE, action=LogAction())
    armed = model.Armed(task=task, taken_over_until_ms=task.due_ms)
    # Then the record holds the task's due instant in ms, as the dispatcher reads it
    assert (armed.due_ms, armed.taken_over_until_ms) == (task.due_ms, task.due_ms)


# -- round trips --------------------------------------------------------------------------------------------
@relaxed
@given(json_values)
def test_payload_round_trips_through_model_dump_and_validate(payload: Any) -> None:
    # Given a task carrying any JSON payload
    task = make_task(payload=payload)
    # When it is dumped as JSON data and validated again
    again = Task.model_validate(task.model_dump(mode="json"))
    # Then nothing changed, and neither did its hash
    assert again == task
    assert again.content_hash() == task.content_hash()


@relaxed
@given(json_values)
def test_payload_round_trips_through_its_stored_form(payload: Any) -> None:
    # The repository stores payloads as canonical JSON text and parses them back with json.loads.
    assert json.loads(canonical_json(payload)) == payload
