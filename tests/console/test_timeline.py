"""A task's timeline from its item's fields: every step its item tells of, in the order of its life, with "no
instant" where the item keeps the fact but not the moment."""

from __future__ import annotations

from datetime import timedelta

from punctual.domain.keys import from_ms, to_ms
from punctual.domain.model import Task, TaskStatus
from punctual.domain.retry import RetryPolicy
from punctual.targets import LogAction
from punctual_tools.console.model import TimelineEvent
from punctual_tools.console.timeline import timeline

DUE_MS = 1_900_000_000_000
CREATED_MS = DUE_MS - 60_000


def task(**fields: object) -> Task:
    base: dict[str, object] = {
        "task_id": "acme/t-1",
        "due_at": from_ms(DUE_MS),
        "action": LogAction(),
        "created_at": from_ms(CREATED_MS),
    }
    return Task.model_validate({**base, **fields})


def test_a_pending_task_is_created_and_due_with_the_key_it_will_fire_with() -> None:
    assert timeline(task()) == [
        TimelineEvent(at_ms=CREATED_MS, label="created"),
        TimelineEvent(at_ms=DUE_MS, label="due", detail="try 1; fires with idempotency key acme/t-1:0"),
    ]


def test_an_armed_task_names_its_batch_executor_and_lease_without_instants() -> None:
    events = timeline(
        task(status=TaskStatus.ARMED, attempt=1, batch_id="b-9", armed_by="ex-2", lease_until=from_ms(DUE_MS + 70_000))
    )
    assert [e.label for e in events] == ["created", "due", "dispatched", "armed"]
    assert events[1].detail == "try 1; fires with idempotency key acme/t-1:0"
    assert events[2] == TimelineEvent(at_ms=None, label="dispatched", detail="in batch b-9")
    assert events[3] == TimelineEvent(
        at_ms=None, label="armed", detail="by executor ex-2, lease until 2030-03-17T17:47:50.000+00:00"
    )


def test_a_task_that_failed_after_retries_tells_each_step_and_the_targets_answer() -> None:
    # Given a task first due at DUE_MS, retried, and failed on its third try 5 s later, fired 12.5 ms late
    retry_due = from_ms(DUE_MS + 5_000)
    fired = retry_due + timedelta(microseconds=12_500)
    events = timeline(
        task(
            due_at=retry_due,
            first_due_at=from_ms(DUE_MS),
            status=TaskStatus.FAILED,
            attempt=3,
            retry=RetryPolicy(max_attempts=3),
            batch_id="b-1",
            armed_by="ex-1",
            fired_at=fired,
            finished_at=fired + timedelta(milliseconds=40),
            drift_ms=12.5,
            drift_corrected_ms=11.0,
            detail="HTTP 503 from https://hooks.example",
            occurrence=2,
        )
    )
    assert [(e.label, e.at_ms) for e in events] == [
        ("created", CREATED_MS),
        ("first due", DUE_MS),
        ("retry due", DUE_MS + 5_000),
        ("dispatched", None),
        ("armed", None),
        ("fired", to_ms(fired)),
        ("finished", to_ms(fired) + 40),
    ]
    assert events[2].detail == "try 3"
    assert events[5].detail == ("drift 12.5 ms; 11.0 ms by the NTP-corrected clock; idempotency key acme/t-1:2")
    assert events[6].detail == "FAILED: HTTP 503 from https://hooks.example"


def test_a_task_waiting_for_a_retry_is_due_for_its_next_try() -> None:
    events = timeline(task(first_due_at=from_ms(DUE_MS - 1_000), attempt=1))
    assert events[-1] == TimelineEvent(
        at_ms=DUE_MS, label="retry due", detail="try 2; fires with idempotency key acme/t-1:0"
    )


def test_steps_whose_instant_is_not_stored_have_none() -> None:
    # Given an item without its creation instant, cancelled before it fired, and one MISSED without a finish instant
    cancelled = timeline(task(created_at=None, status=TaskStatus.CANCELLED, finished_at=from_ms(DUE_MS - 10)))
    assert cancelled[0] == TimelineEvent(at_ms=None, label="created")
    assert cancelled[-1] == TimelineEvent(at_ms=DUE_MS - 10, label="finished", detail="CANCELLED")
    missed = timeline(task(status=TaskStatus.MISSED, attempt=1, detail="past its grace"))
    assert missed[-1] == TimelineEvent(at_ms=None, label="finished", detail="MISSED: past its grace")


def test_a_late_fire_and_a_schedules_occurrence_say_so() -> None:
    events = timeline(
        task(
            task_id="acme/daily@20300317T174640.000Z",
            schedule_id="acme/daily",
            schedule_version=3,
            status=TaskStatus.SUCCEEDED,
            attempt=1,
            fired_at=from_ms(DUE_MS + 90_000),
            finished_at=from_ms(DUE_MS + 90_010),
            drift_ms=90_000.0,
            late=True,
        )
    )
    assert events[0].detail == "occurrence of schedule acme/daily (version 3)"
    assert events[2].detail == (
        "drift 90,000.0 ms; late: past its grace, fired under fire_late; "
        "idempotency key acme/daily@20300317T174640.000Z:0"
    )
    assert events[-1].detail == "SUCCEEDED"
