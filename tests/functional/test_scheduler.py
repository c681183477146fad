"""One suite for every :class:`~punctual.scheduling.protocol.Scheduler`: the same behaviour, asserted once, of the
client straight to the table (on moto) and of the client through the REST API (the local API server over the same
table, as a tenant)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.model import TaskStatus
from punctual.domain.schedules import ScheduleState
from punctual.errors import (
    InvalidRequestError,
    InvalidScheduleError,
    InvalidTaskError,
    ScheduleConflictError,
    ScheduleNotFoundError,
    TaskConflictError,
    TaskNotFoundError,
    TaskStateError,
)
from punctual.runtime.client import Client
from punctual.scheduling.api_client import ApiClient
from punctual.scheduling.protocol import Scheduler, ScheduleSpec
from punctual.targets import HttpAction, LogAction
from support import FakeClock, serving_api


@pytest.fixture(params=["client", "api"])
def scheduler(
    request: pytest.FixtureRequest, dynamodb: Any, settings: Settings, clock: FakeClock
) -> Iterator[Scheduler]:
    """A :class:`Client` on moto, or an :class:`ApiClient` on the local API server over it (as the tenant acme)."""
    if request.param == "client":
        direct: Scheduler = Client(settings, dynamodb=dynamodb, clock=clock)
        yield direct
        return

    with serving_api(dynamodb, settings, clock, {"token-acme": "acme"}) as server:
        api: Scheduler = ApiClient(server.url, token="token-acme")
        yield api


def log_action() -> dict[str, Any]:
    return {"kind": "log", "message": "tick"}


# -- tasks -------------------------------------------------------------------------------------------------------
def test_schedule_get_and_idempotent_retry(scheduler: Scheduler, now_ms: int) -> None:
    # Given a task scheduled with a client-chosen id
    due = from_ms(now_ms + 60_000)
    first = scheduler.schedule(due, HttpAction(url="https://example.com/hook"), {"video": "v-1"}, task_id="pub-v-1")
    # When the client retries the same call
    again = scheduler.schedule(due, HttpAction(url="https://example.com/hook"), {"video": "v-1"}, task_id="pub-v-1")
    # Then the one stored task comes back, PENDING
    assert again.task_id == first.task_id == "pub-v-1"
    stored = scheduler.get("pub-v-1")
    assert stored is not None
    assert stored.status is TaskStatus.PENDING
    assert stored.payload == {"video": "v-1"}
    # And the same id with other content is a conflict
    with pytest.raises(TaskConflictError):
        scheduler.schedule(due, HttpAction(url="https://example.com/hook"), {"video": "v-2"}, task_id="pub-v-1")


def test_invalid_task_is_not_stored(scheduler: Scheduler, now_ms: int) -> None:
    with pytest.raises(InvalidTaskError):
        scheduler.schedule(from_ms(now_ms - 3_600_000), LogAction(), task_id="too-late")
    assert scheduler.get("too-late") is None


def test_cancel_and_reschedule(scheduler: Scheduler, now_ms: int) -> None:
    # Given two scheduled tasks
    scheduler.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="a")
    scheduler.schedule(from_ms(now_ms + 120_000), LogAction(), task_id="b")
    # When one is cancelled and the other moved
    assert scheduler.cancel("a").status is TaskStatus.CANCELLED
    moved = scheduler.reschedule("b", from_ms(now_ms + 30_000))
    # Then the list by status shows it
    assert moved.due_ms == now_ms + 30_000
    assert [t.task_id for t in scheduler.list(TaskStatus.PENDING)] == ["b"]
    assert [t.task_id for t in scheduler.list(["CANCELLED"])] == ["a"]
    with pytest.raises(TaskStateError):
        scheduler.cancel("a")
    with pytest.raises(TaskNotFoundError):
        scheduler.reschedule("nobody", from_ms(now_ms + 1_000))
    # And a reschedule beyond the horizon is refused
    with pytest.raises(InvalidTaskError):
        scheduler.reschedule("b", from_ms(now_ms + 400 * 86_400_000))


def test_list_orders_by_due_time_and_filters(scheduler: Scheduler, now_ms: int) -> None:
    for i, offset in enumerate([30_000, 10_000, 20_000]):
        scheduler.schedule(from_ms(now_ms + offset), LogAction(), task_id=f"t-{i}")
    assert [t.task_id for t in scheduler.list()] == ["t-1", "t-2", "t-0"]
    assert [t.task_id for t in scheduler.list(due_from=from_ms(now_ms + 20_000))] == ["t-2", "t-0"]
    assert [t.task_id for t in scheduler.list(due_to=from_ms(now_ms + 20_000))] == ["t-1"]
    assert [t.task_id for t in scheduler.list(limit=1)] == ["t-1"]
    with pytest.raises(InvalidRequestError) as info:  # a bad filter of a read: no invalid task
        scheduler.list("NOT-A-STATUS")
    assert (info.value.field or "").startswith("status")
    assert not isinstance(info.value, InvalidTaskError)


def test_run_now_moves_a_task_to_now(scheduler: Scheduler, now_ms: int) -> None:
    scheduler.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="soon")
    assert scheduler.run_now("soon").due_ms == now_ms
    with pytest.raises(TaskNotFoundError):
        scheduler.run_now("nobody")


def test_schedule_many_reports_each_task_in_order(scheduler: Scheduler, now_ms: int) -> None:
    # Given three tasks, the second bad
    specs = [
        {"due_at": from_ms(now_ms + 60_000), "action": LogAction(), "task_id": "m-0"},
        {"due_at": from_ms(now_ms - 3_600_000), "action": LogAction(), "task_id": "m-1"},
        {"due_at": from_ms(now_ms + 61_000), "action": LogAction(), "task_id": "m-2"},
    ]
    # When they are scheduled at once, twice
    first = scheduler.schedule_many(specs)
    again = scheduler.schedule_many(specs)
    # Then each has its outcome, in order, and the bad one stored nothing
    assert [r.outcome for r in first] == ["created", "invalid", "created"]
    assert [r.outcome for r in again] == ["exists", "invalid", "exists"]
    assert first[1].field == "due_at"
    assert [t.task_id for t in scheduler.list()] == ["m-0", "m-2"]


# -- recurring schedules -----------------------------------------------------------------------------------------
def test_a_schedule_lives_through_its_calls(scheduler: Scheduler) -> None:
    # Given a schedule every 10 s
    created = scheduler.create_schedule("every-10s", "rate(10 seconds)", log_action(), {"n": 1}, max_occurrences=50)
    assert created.schedule_id == "every-10s"
    assert created.state is ScheduleState.ACTIVE
    # Then it is stored, listed, and its occurrences are made ahead
    stored = scheduler.get_schedule("every-10s")
    assert stored is not None
    assert stored.definition() == created.definition()
    assert [s.schedule_id for s in scheduler.list_schedules()] == ["every-10s"]
    made = scheduler.schedule_history("every-10s")
    assert made
    assert all(t.status is TaskStatus.PENDING for t in made)
    # When it is paused, resumed, changed and deleted  Then each call answers the schedule as it is now
    assert scheduler.pause_schedule("every-10s").state is ScheduleState.PAUSED
    assert scheduler.resume_schedule("every-10s").state is ScheduleState.ACTIVE
    assert scheduler.update_schedule("every-10s", payload={"n": 2}).payload == {"n": 2}
    assert scheduler.delete_schedule("every-10s").state is ScheduleState.DELETED
    assert scheduler.get_schedule("nobody") is None


def test_running_a_schedule_now_adds_one_occurrence_due_now_while_it_is_active_or_paused(
    scheduler: Scheduler, clock: FakeClock
) -> None:
    # Given an hourly schedule whose next occurrence is an hour away
    scheduler.create_schedule("hourly", "rate(1 hour)", log_action(), max_occurrences=5)
    before = {t.task_id for t in scheduler.schedule_history("hourly")}
    # When it is run now, active and then paused
    extra = scheduler.run_schedule_now("hourly")
    scheduler.pause_schedule("hourly")
    clock.advance(1.0)
    paused_extra = scheduler.run_schedule_now("hourly")
    # Then each is one more occurrence, due now, of the schedule; the ones made before are still there
    assert extra.schedule_id == "hourly"
    assert extra.due_ms == int(clock.wall_ms()) - 1_000
    assert paused_extra.due_ms == int(clock.wall_ms())
    history = {t.task_id for t in scheduler.schedule_history("hourly")}
    assert before | {extra.task_id, paused_extra.task_id} <= history
    # When it is deleted, or was never there  Then running it now is refused as not found, naming it as asked
    scheduler.delete_schedule("hourly")
    for missing in ("hourly", "nobody"):
        with pytest.raises(ScheduleNotFoundError) as refused:
            scheduler.run_schedule_now(missing)
        assert refused.value.key == missing


def test_creating_a_schedule_is_idempotent_on_an_equal_definition(scheduler: Scheduler) -> None:
    first = scheduler.create_schedule("daily", "cron(0 9 * * ? *)", log_action(), timezone="Europe/Paris")
    again = scheduler.submit_schedule(
        ScheduleSpec(schedule_id="daily", expression="cron(0 9 * * ? *)", action=log_action(), timezone="Europe/Paris")
    )
    assert again.definition() == first.definition()
    assert again.version == 1
    with pytest.raises(ScheduleConflictError):
        scheduler.create_schedule("daily", "cron(0 10 * * ? *)", log_action(), timezone="Europe/Paris")


def test_a_bad_schedule_is_refused_naming_its_field(scheduler: Scheduler) -> None:
    with pytest.raises(InvalidScheduleError) as caught:
        scheduler.create_schedule("bad", "rate(1 minute)", log_action(), timezone="Mars/Olympus")
    assert (caught.value.field or "").startswith("timezone")
    assert scheduler.list_schedules() == []
