"""The fast path's record handling, the local stand-in for Lambda's event filter against the template's own filter
patterns, and the choice between the fast path and the next poll."""

from __future__ import annotations

import doctest
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.domain.model import TaskStatus
from punctual.polling import fastpath
from punctual.polling.fastpath import candidate_of_record, choose_path, matches
from punctual.stores.dynamodb.codec import candidate_of_item
from punctual_tools.template import stream_filter_patterns


def record(
    event_name: str = "INSERT", status: str = "PENDING", fast: str | None = "1", task_id: str = "t-1"
) -> dict[str, Any]:
    image: dict[str, Any] = {
        "task_id": {"S": task_id},
        "due_ms": {"N": "1795350000123"},
        "status": {"S": status},
        "misfire_grace_ms": {"N": "60000"},
    }
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
        (record(status="ARMED"), False),
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
    assert (candidate_of_record(rec, candidate_of_item) is not None) is passes


def test_a_record_becomes_the_candidate_its_image_describes() -> None:
    candidate = candidate_of_record(record(), candidate_of_item)
    assert candidate is not None
    assert (
        candidate.task_id,
        candidate.due_ms,
        candidate.status,
        candidate.lease_until_ms,
        candidate.misfire_grace_ms,
    ) == ("t-1", 1795350000123, TaskStatus.PENDING, None, 60_000)


def test_records_that_are_not_tasks_are_ignored() -> None:
    watermark = {
        "eventName": "MODIFY",
        "dynamodb": {"NewImage": {"task_id": {"S": "#poller-watermark"}, "watermark_ms": {"N": "1"}}},
    }
    assert candidate_of_record(watermark, candidate_of_item) is None
    assert candidate_of_record({"eventName": "INSERT"}, candidate_of_item) is None


def test_matches_checks_nested_keys_and_allowed_values() -> None:
    pattern = {"a": {"b": ["x", "y"]}, "c": ["z"]}
    assert matches(pattern, {"a": {"b": "y", "other": 1}, "c": "z"})
    assert not matches(pattern, {"a": {"b": "w"}, "c": "z"})
    assert not matches(pattern, {"a": {"b": "x"}})
    assert not matches(pattern, {"a": "not a mapping", "c": "z"})


def test_matches_refuses_filter_rules_it_does_not_implement() -> None:
    with pytest.raises(ValueError, match="not supported locally"):
        matches({"n": [{"numeric": [">", 1]}]}, {"n": 2})


# -- which path: the fast path, or the next poll -------------------------------------------------------------
def path_of(due_ms: int, now_ms: int, last: tuple[int | None, ...] = (0,)) -> str:
    """60 s polls, a 90 s lead and a 10 s margin (the defaults)."""
    return choose_path(due_ms, now_ms, last, interval_ms=60_000, lead_ms=90_000, margin_ms=10_000)


@pytest.mark.parametrize(
    ("due_ms", "now_ms", "last", "path"),
    [
        (69_999, 20_000, (0,), "fast path"),  # 1 ms short of the margin after the next poll (at 60 s)
        (70_000, 20_000, (0,), "poll"),  # exactly the margin after it
        (150_000, 20_000, (0,), "poll"),  # the next poll's reach (its start + the lead)
        (150_001, 20_000, (0,), "fast path"),  # past it
        (80_000, 50_000, (0,), "poll"),  # written exactly the margin before the next poll
        (80_000, 50_001, (0,), "fast path"),  # 1 ms later: an early poll could miss it
        (80_000, 70_000, (0,), "fast path"),  # the expected poll has not started: late, or under way
        (80_000, 20_000, (None,), "fast path"),  # no poll known
        (80_000, 20_000, (), "fast path"),
        (71_999, 20_000, (0, 2_000), "fast path"),  # two groups: the margin after the later next poll
        (72_000, 20_000, (0, 2_000), "poll"),
        (80_000, 20_000, (0, None), "fast path"),  # one group's last poll not known
    ],
)
def test_the_fast_path_leaves_to_the_next_poll_only_what_that_poll_dispatches_a_margin_ahead(
    due_ms: int, now_ms: int, last: tuple[int | None, ...], path: str
) -> None:
    assert path_of(due_ms, now_ms, last) == path


@settings(max_examples=500, deadline=None)
@given(
    last=st.lists(st.integers(0, 120_000), min_size=1, max_size=4),
    now=st.integers(0, 200_000),
    lead_after_now=st.integers(0, 200_000),
)
def test_every_task_left_to_the_poll_is_in_each_groups_next_poll_a_margin_before_it_is_due(
    last: list[int], now: int, lead_after_now: int
) -> None:
    # Given any last polls, any now and any due time after now  When the task is left to the poll
    due = now + lead_after_now
    if path_of(due, now, tuple(last)) != "poll":
        return
    # Then each group's next poll starts more than the margin after now, reaches the task, and starts at least the
    # margin before it is due
    for start in (t + 60_000 for t in last):
        assert start - now >= 10_000
        assert start + 10_000 <= due <= start + 90_000


def test_the_decisions_examples_hold() -> None:
    assert doctest.testmod(fastpath).failed == 0
