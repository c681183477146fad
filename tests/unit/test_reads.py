"""The fast read parser gives exactly what botocore's own parser gives, or leaves the response to botocore."""

from __future__ import annotations

import base64
import json
from typing import Any

import botocore.session
import pytest
from botocore.parsers import create_parser
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.stores.dynamodb.reads import FAST_OPERATIONS, parse_fast

_MODEL = botocore.session.get_session().get_service_model("dynamodb")


def response(body: bytes, status: int = 200) -> dict[str, Any]:
    return {"status_code": status, "headers": {"x-amzn-requestid": "r-1"}, "body": body}


def both_ways(operation: str, body: bytes, status: int = 200) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """(botocore's parse, the parse with the fast handler in front, whether the handler took the body)."""
    shape = _MODEL.operation_model(operation).output_shape
    assert shape is not None
    slow = create_parser("json").parse(response(body, status), shape)
    fast_response = response(body, status)
    customized: dict[str, Any] = {}
    parse_fast(response_dict=fast_response, customized_response_dict=customized)
    fast = create_parser("json").parse(fast_response, shape)
    fast.update(customized)
    return slow, fast, fast_response["body"] != body


SCALARS = st.one_of(
    st.fixed_dictionaries({"S": st.text()}),
    st.fixed_dictionaries({"N": st.integers().map(str)}),
    st.fixed_dictionaries({"BOOL": st.booleans()}),
    st.fixed_dictionaries({"NULL": st.just(True)}),
    st.fixed_dictionaries({"SS": st.lists(st.text(), min_size=1, max_size=3)}),
    st.fixed_dictionaries({"NS": st.lists(st.integers().map(str), min_size=1, max_size=3)}),
    st.fixed_dictionaries({"B": st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode())}),
    st.fixed_dictionaries(
        {"BS": st.lists(st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode()), min_size=1, max_size=2)}
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.fixed_dictionaries({"M": st.dictionaries(st.text(max_size=5), inner, max_size=3)}),
        st.fixed_dictionaries({"L": st.lists(inner, max_size=3)}),
    ),
    max_leaves=8,
)
ITEMS = st.dictionaries(st.text(min_size=1, max_size=8), VALUES, min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(items=st.lists(ITEMS, max_size=4), spaced=st.booleans(), last_key=st.none() | ITEMS)
def test_a_query_parses_as_botocore_parses_it(
    items: list[dict[str, Any]], spaced: bool, last_key: dict[str, Any] | None
) -> None:
    body_dict: dict[str, Any] = {
        "Items": items,
        "Count": len(items),
        "ScannedCount": len(items),
        "ConsumedCapacity": {"TableName": "t", "CapacityUnits": 0.5},
    }
    if last_key is not None:
        body_dict["LastEvaluatedKey"] = last_key
    body = json.dumps(body_dict, separators=(", ", ": ") if spaced else (",", ":")).encode()
    slow, fast, taken = both_ways("Query", body)
    assert fast == slow
    keys = keys_named(body_dict)
    if keys & {"B", "BS"}:
        assert not taken  # binary values (or an attribute named B or BS) always go to botocore
    elif not any(key.endswith(('"B', '"BS')) for key in keys):  # such a key's JSON, \"B":, reads as a binary key's
        assert taken


def test_an_attribute_whose_name_ends_in_a_quoted_b_goes_to_botocore_and_parses_the_same() -> None:
    body = json.dumps({"Items": [], "Count": 0, "ScannedCount": 0, "LastEvaluatedKey": {'"B': {"M": {}}}}).encode()
    slow, fast, taken = both_ways("Query", body)
    assert fast == slow
    assert not taken


def keys_named(value: Any) -> set[str]:
    """Every object key anywhere in a decoded JSON value."""
    if isinstance(value, dict):
        return set(value).union(*(keys_named(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(keys_named(v) for v in value))
    return set()


def test_a_batch_get_with_unprocessed_keys_parses_as_botocore_parses_it() -> None:
    body = json.dumps(
        {
            "Responses": {
                "Tasks": [
                    {"task_id": {"S": "a-ü"}, "due_ms": {"N": "1700000000000"}, "status": {"S": "PENDING"}},
                    {"task_id": {"S": "b"}, "n": {"NULL": True}, "m": {"M": {"x": {"L": [{"N": "1"}]}}}},
                ]
            },
            "UnprocessedKeys": {
                "Tasks": {"Keys": [{"task_id": {"S": "c"}}], "ProjectionExpression": "task_id", "ConsistentRead": False}
            },
        }
    ).encode()
    slow, fast, taken = both_ways("BatchGetItem", body)
    assert taken
    assert fast == slow
    assert fast["Responses"]["Tasks"][0]["task_id"] == {"S": "a-ü"}


def test_binary_values_are_left_to_botocore_which_decodes_them() -> None:
    body = json.dumps({"Item": {"task_id": {"S": "a"}, "blob": {"B": base64.b64encode(b"\x00\x01").decode()}}}).encode()
    slow, fast, taken = both_ways("GetItem", body)
    assert not taken
    assert fast == slow
    assert fast["Item"]["blob"] == {"B": b"\x00\x01"}


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, b'{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"no table"}'),
        (200, b"[1, 2]"),
        (200, b"not json"),
        (200, b""),
    ],
)
def test_errors_and_odd_bodies_are_left_to_botocore(status: int, body: bytes) -> None:
    shape = _MODEL.operation_model("GetItem").output_shape
    fast_response = response(body, status)
    customized: dict[str, Any] = {}
    parse_fast(response_dict=fast_response, customized_response_dict=customized)
    assert fast_response["body"] == body
    assert customized == {}
    assert shape is not None


def test_every_fast_operation_is_a_dynamodb_read() -> None:
    for operation in FAST_OPERATIONS:
        assert _MODEL.operation_model(operation).name == operation
