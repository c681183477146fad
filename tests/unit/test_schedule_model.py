"""The Schedule model's own rules: how many occurrences one transaction may create (DynamoDB takes 4 MB a
transaction), and instants outside what a datetime holds are a field error, not an OverflowError."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from punctual.domain.keys import from_ms
from punctual.domain.schedules import MAX_CHUNK, TRANSACTION_BYTES, Schedule, chunk_size, plan_advance
from punctual.targets import LogAction

START_MS = 1_900_000_020_000


def schedule(payload: object = None, **fields: object) -> Schedule:
    return Schedule.model_validate(
        {
            "schedule_id": "s",
            "expression": "rate(1 second)",
            "action": LogAction(message="x"),
            "payload": payload,
            "start_at": from_ms(START_MS),
            "next_due_ms": START_MS,
            **fields,
        }
    )


def test_a_small_occurrence_is_made_99_at_a_time() -> None:
    assert chunk_size(schedule({"n": 1})) == MAX_CHUNK
    step = plan_advance(schedule({"n": 1}), START_MS, START_MS + 600_000)
    assert step is not None
    assert len(step.occurrences) == MAX_CHUNK


def test_a_large_payload_makes_fewer_a_transaction_so_that_it_stays_under_4_mb() -> None:
    big = schedule({"blob": "x" * 200_000})
    chunk = chunk_size(big)
    assert 1 < chunk < MAX_CHUNK
    assert chunk * 200_000 <= TRANSACTION_BYTES < (chunk + 1) * 202_100
    step = plan_advance(big, START_MS, START_MS + 600_000)
    assert step is not None
    assert len(step.occurrences) == chunk
    assert chunk_size(schedule({"blob": "x" * 380_000})) >= 1


def test_an_instant_past_the_year_9999_is_a_field_error() -> None:
    late = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-5)))  # past 9999 in UTC
    with pytest.raises(ValidationError, match="end_at"):
        schedule(end_at=late)
    assert schedule(end_at=datetime(2031, 1, 1, tzinfo=UTC)).end_at == datetime(2031, 1, 1, tzinfo=UTC)
