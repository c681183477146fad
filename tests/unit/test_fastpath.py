"""The fast path's record handling and the local stand-in for Lambda's event filter, against the template's
own filter patterns."""

from __future__ import annotations

from typing import Any

import pytest

from punctual.dynamodb.schema import stream_filter_patterns
from punctual.fastpath import candidate_of_record, matches
from punctual.model import TaskStatus


def record(event_name: str = "INSERT", status: str = "PENDING", fast: str | None = "1",
           task_id: str = "t-1") -> dict[str, Any]:
    image: dict[str, Any] = {"task_id": {"S": task_id}, "due_ms": {"N": "1795350000123"}, "status": {"S": status},
                             "misfire_grace_ms": {"N": "60000"}}
    if fast is not None:
        image["fast_path"] = {"N": fast}
    change: dict[str, Any] = {"Keys": {"task_id": {"S": task_id}}, "StreamViewType": "NEW_IMAGE"}
    if event_name != "REMOVE":
        change["NewImage"] = image
    return {"eventName": event_name, "eventSource": "aws:dynamodb", "dynamodb": change}


@pytest.mark.parametrize(
    ("rec", "passes"),
    [
        (record(), True),
        (record("MODIFY"), True),  # a reschedule, or a task handed back at shutdown
        (record("REMOVE"), False),
        (record(status="CLAIMED"), False),
        (record("MODIFY", status="SUCCEEDED"), False),
        (record(fast="0"), False),  # due after the next poll: the poller's
        (record(fast=None), False),
    ],
)
def test_the_templates_filter_lets_through_only_pending_short_lead_writes(rec: dict[str, Any], passes: bool) -> None:
    # Given the filter patterns the template gives the stream's event source mapping
    patterns = stream_filter_patterns()
    # Then a record passes exactly when the handler would take it as a candidate
    assert any(matches(p, rec) for p in patterns) is passes
    assert (candidate_of_record(rec) is not None) is passes


def test_a_record_becomes_the_candidate_its_image_describes() -> None:
    candidate = candidate_of_record(record())
    assert candidate is not None
    assert (candidate.task_id, candidate.due_ms, candidate.status, candidate.lease_until_ms,
            candidate.misfire_grace_ms) == ("t-1", 1795350000123, TaskStatus.PENDING, None, 60_000)


def test_records_that_are_not_tasks_are_ignored() -> None:
    watermark = {"eventName": "MODIFY", "dynamodb": {"NewImage": {"task_id": {"S": "#poller-watermark"},
                                                                  "watermark_ms": {"N": "1"}}}}
    assert candidate_of_record(watermark) is None
    assert candidate_of_record({"eventName": "INSERT"}) is None


def test_matches_checks_nested_keys_and_allowed_values() -> None:
    pattern = {"a": {"b": ["x", "y"]}, "c": ["z"]}
    assert matches(pattern, {"a": {"b": "y", "other": 1}, "c": "z"})
    assert not matches(pattern, {"a": {"b": "w"}, "c": "z"})
    assert not matches(pattern, {"a": {"b": "x"}})
    assert not matches(pattern, {"a": "not a mapping", "c": "z"})


def test_matches_refuses_filter_rules_it_does_not_implement() -> None:
    with pytest.raises(ValueError, match="not supported locally"):
        matches({"n": [{"numeric": [">", 1]}]}, {"n": 2})
