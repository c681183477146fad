"""Recurring schedules: the client's calls, the poller making the chain's next occurrences, pause / resume /
update / delete, the downtime policies, and crashes of an occurrence at each step of its life; on moto (both
write modes) and on the in-memory store, but for the two tests of what only DynamoDB does."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.model import ArmRequest, FireRecord, Outcome, TaskStatus, occurrence_id, split_occurrence_id
from punctual.domain.schedules import ScheduleState
from punctual.errors import (
    InvalidScheduleError,
    InvalidTaskError,
    ScheduleConflictError,
    ScheduleNotFoundError,
    UndecodableItemError,
)
from punctual.polling.poller import Poller
from punctual.runtime.wiring import poller_on
from punctual.scheduling.chain import extend
from punctual.scheduling.client import Client
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.codec import schedule_key
from punctual.stores.ports import Stores
from punctual.targets import LogAction
from punctual_tools.doubles import FakeClock, RecordingInvoker
from punctual_tools.doubles.memory import InMemoryStore

START_MS = 1_900_000_020_000  # 20 s into a minute
AHEAD_MS = 90_000 + 70_000  # the poll's lead and the schedule's ahead (a poll interval + the fast-path margin)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(wall_ms=START_MS)


@pytest.fixture(params=["single", "transaction", "memory"])
def store(request: pytest.FixtureRequest, settings: Settings) -> Stores:
    """The DynamoDB store on moto, once per write mode, and the in-memory store."""
    if request.param == "memory":
        return InMemoryStore.from_settings(settings)
    dynamodb = request.getfixturevalue("dynamodb")
    return DynamoStores.from_settings(dynamodb, settings.model_copy(update={"write_batch": request.param}))


DYNAMODB_ONLY = pytest.mark.parametrize("store", ["single", "transaction"], indirect=True)


@pytest.fixture
def client(store: Stores, settings: Settings, clock: FakeClock) -> Client:
    return Client(settings, store.client, store.schedules, clock=clock)


@pytest.fixture
def poller(store: Stores, settings: Settings) -> Poller:
    return poller_on(store, RecordingInvoker(), settings, poller_id="p-test")


def _instant(task_id: str) -> int:
    occurrence = split_occurrence_id(task_id)
    assert occurrence is not None, task_id
    return occurrence[1]


def instants(client: Client, schedule_id: str, status: TaskStatus | None = None) -> list[int]:
    """The instants of the schedule's occurrences (in the table), of one status if given."""
    return [_instant(t.task_id) for t in client.schedule_history(schedule_id) if status is None or t.status is status]


def log_action() -> dict[str, Any]:
    return {"kind": "log", "message": "tick"}


# -- creating ---------------------------------------------------------------------------------------------------
def test_a_schedule_is_stored_with_its_occurrences_ahead(client: Client, store: Stores) -> None:
    # Given a schedule every 10 s from now
    schedule = client.create_schedule("every-10s", "rate(10 seconds)", log_action(), {"n": 1})
    # Then its occurrences up to the poll's lead and the time to the next poll exist, each a PENDING task
    expected = list(range(START_MS + 10_000, START_MS + AHEAD_MS + 1, 10_000))
    assert instants(client, "every-10s") == expected
    task = store.client.get(occurrence_id("every-10s", expected[0]))
    assert task is not None
    assert task.status is TaskStatus.PENDING
    assert (task.schedule_id, task.schedule_version, task.payload) == ("every-10s", 1, {"n": 1})
    assert task.idempotency_key == f"every-10s@{from_ms(expected[0]).strftime('%Y%m%dT%H%M%S')}.000Z:0"
    # And the schedule's cursor is the first one not made yet
    assert schedule.state is ScheduleState.ACTIVE
    assert (schedule.next_due_ms, schedule.created_count, schedule.version) == (expected[-1] + 10_000, 16, 1)


def test_creating_is_idempotent_on_an_equal_definition(client: Client) -> None:
    first = client.create_schedule("daily", "cron(0 9 * * ? *)", log_action(), timezone="Europe/Paris")
    again = client.create_schedule("daily", "cron(0 9 * * ? *)", log_action(), timezone="Europe/Paris")
    assert again.definition() == first.definition()
    assert again.version == 1
    with pytest.raises(ScheduleConflictError):
        client.create_schedule("daily", "cron(0 10 * * ? *)", log_action(), timezone="Europe/Paris")


@pytest.mark.parametrize(
    ("kwargs", "field", "says"),
    [
        ({"expression": "cron(0 9 * * * *)"}, "expression", "exactly one of day-of-month and day-of-week"),
        ({"expression": "rate(1 fortnight)"}, "expression", "unit one of"),
        ({"expression": "cron(0 0 30 2 ? *)"}, "expression", "no occurrence after now"),
        ({"expression": "at(2020-01-01T00:00:00)"}, "expression", "no occurrence after now"),
        ({"timezone": "Mars/Olympus"}, "timezone", "unknown time zone"),
        ({"schedule_id": "has@at"}, "schedule_id", "pattern"),
        ({"action": {"kind": "http", "url": "http://169.254.169.254/latest"}}, "action", ""),
        ({"max_occurrences": 0}, "max_occurrences", ""),
    ],
)
def test_a_bad_schedule_is_refused_and_nothing_is_stored(
    client: Client, kwargs: dict[str, Any], field: str, says: str
) -> None:
    args = {"schedule_id": "bad", "expression": "rate(1 minute)", "action": log_action(), **kwargs}
    with pytest.raises(InvalidScheduleError) as caught:
        client.create_schedule(args.pop("schedule_id"), args.pop("expression"), args.pop("action"), **args)
    assert (caught.value.field or "").startswith(field)
    assert says in str(caught.value)
    assert client.list_schedules() == []
    assert client.list() == []


def test_a_task_of_its_own_cannot_take_an_occurrences_id(client: Client) -> None:
    with pytest.raises(InvalidTaskError, match="kept for the occurrences"):
        client.schedule(
            from_ms(START_MS + 60_000), LogAction(message="x"), task_id=occurrence_id("daily", START_MS + 60_000)
        )


# -- the chain ----------------------------------------------------------------------------------------------------
def test_each_poll_makes_the_next_occurrences_once(client: Client, store: Stores, settings: Settings) -> None:
    client.create_schedule("every-10s", "rate(10 seconds)", log_action())
    invoker = RecordingInvoker()
    always = settings.model_copy(update={"redispatch_after_ms": 0})  # no executor arms them: each poll sends all
    first_poller = poller_on(store, invoker, always, poller_id="p-first")
    other = poller_on(store, RecordingInvoker(), always, poller_id="p-other")
    for minute in range(1, 4):
        now = START_MS + minute * 60_000
        # When two pollers poll at the same instant
        first = first_poller.poll(now)
        second = other.poll(now)
        # Then the occurrences up to the new horizon exist, each once, and only one poller made them
        assert instants(client, "every-10s") == list(range(START_MS + 10_000, now + AHEAD_MS + 1, 10_000))
        assert (first.occurrences_created, second.occurrences_created) == (6, 0)
        # And the poll dispatched every occurrence due in its window (overdue ones included), each once
        sent = invoker.task_ids
        invoker.take()
        assert sorted(sent) == [
            occurrence_id("every-10s", ms) for ms in range(START_MS + 10_000, now + 90_000 + 1, 10_000)
        ]


def test_a_poll_dispatches_the_tasks_it_found_before_it_makes_any_occurrence(
    client: Client, store: Stores, settings: Settings
) -> None:
    # Given a one-off task due soon and a schedule whose chain nobody extended for five minutes
    client.create_schedule("every-10s", "rate(10 seconds)", log_action())
    client.schedule(from_ms(START_MS + 310_000), LogAction(message="one-off"), task_id="one-off")
    order: list[str] = []

    class Watching(RecordingInvoker):
        def invoke_async(self, payload: dict[str, Any]) -> None:
            order.extend(f"dispatch {t['task_id']}" for t in payload["tasks"])
            super().invoke_async(payload)

    advance = store.schedules.advance_schedule

    def watched_advance(*args: Any, **kwargs: Any) -> Any:
        order.append("make occurrences")
        return advance(*args, **kwargs)

    store.schedules.advance_schedule = watched_advance  # type: ignore[method-assign]
    # When a poll runs
    report = poller_on(store, Watching(), settings, poller_id="p-order").poll(START_MS + 300_000)
    # Then the task it found went out before the schedule's transaction (a schedule never delays a dispatch),
    # and the occurrences it made for its window went out after it, in the same poll
    assert report.occurrences_created > 0
    assert order.index("dispatch one-off") < order.index("make occurrences")
    made_now = [entry for entry in order[order.index("make occurrences") :] if entry.startswith("dispatch every-10s@")]
    assert made_now
    assert report.dispatched == order.count("dispatch one-off") + len(
        [entry for entry in order if entry.startswith("dispatch every-10s@")]
    )


@DYNAMODB_ONLY
def test_a_transaction_conflict_while_advancing_is_a_race_not_an_error(
    client: Client, store: DynamoStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a schedule, and DynamoDB cancelling the next transaction on it for a conflict with another writer
    # (TransactionConflict: no condition failed)
    client.create_schedule("busy", "rate(10 seconds)", log_action())
    made = len(instants(client, "busy"))
    transact = store.table.transact
    conflicts = [True]
    monkeypatch.setattr(
        store.table,
        "transact",
        lambda items: (
            ["None"] * (len(items) - 1) + ["TransactionConflict"] if conflicts and conflicts.pop() else transact(items)
        ),
    )
    # When a poll extends the chain
    report = extend(store.schedules, store.client, "busy", START_MS + 60_000, START_MS + 60_000 + AHEAD_MS)
    # Then the conflict was a race (read again, then made), not an error
    assert report.raced
    assert not conflicts
    assert len(instants(client, "busy")) == made + len(report.created) > made


@pytest.mark.parametrize("change", ["pause", "update", "delete"])
def test_a_change_cancels_occurrences_the_history_index_does_not_list_yet(
    client: Client, store: Stores, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    # Given a schedule whose occurrences a poll made a moment ago: the eventually consistent history index does
    # not list them yet
    client.create_schedule("fresh", "rate(10 seconds)", log_action())
    made = instants(client, "fresh", TaskStatus.PENDING)
    assert made
    monkeypatch.setattr(store.schedules, "schedule_occurrence_ids", lambda *args, **kwargs: [])
    # When the schedule is changed
    if change == "pause":
        client.pause_schedule("fresh")
    elif change == "update":
        client.update_schedule("fresh", expression="rate(7 seconds)")
    else:
        client.delete_schedule("fresh")
    monkeypatch.undo()
    # Then the older occurrences were found by their ids (computed from the definition as it was) and cancelled:
    # none of them is left to fire (an instant both rates share holds the new version's occurrence now)
    stored = store.client.get_many([occurrence_id("fresh", ms) for ms in made])
    assert len(stored) == len(made)
    assert all(
        t.status is TaskStatus.CANCELLED or (change == "update" and t.schedule_version == 2) for t in stored.values()
    )
    assert any(t.status is TaskStatus.CANCELLED for t in stored.values())


def test_updating_a_paused_schedule_finishes_a_cleanup_its_pause_left(client: Client, store: Stores) -> None:
    # Given a paused schedule whose pause died before it cancelled the older occurrences (cleanup pending)
    client.create_schedule("half-paused", "rate(10 seconds)", log_action())
    schedule = store.schedules.get_schedule("half-paused")
    assert schedule is not None
    store.schedules.change_schedule(schedule, {"state": ScheduleState.PAUSED}, START_MS + 1_000, cleanup=True)
    assert instants(client, "half-paused", TaskStatus.PENDING)
    # When it is updated while paused
    updated = client.update_schedule("half-paused", payload={"v": 2})
    # Then it stays paused, and the older occurrences are cancelled, not left to fire while it is paused
    assert updated.state is ScheduleState.PAUSED
    assert not updated.cleanup
    assert instants(client, "half-paused", TaskStatus.PENDING) == []


@pytest.mark.parametrize("step", ["pending", "armed", "fired, not recorded", "recorded"])
def test_a_crash_at_any_step_of_an_occurrence_leaves_exactly_one_next(
    client: Client, store: Stores, poller: Poller, step: str
) -> None:
    # Given a schedule every 30 s whose first occurrence is left at some step of its life by a crash
    client.create_schedule("half-minute", "rate(30 seconds)", log_action())
    first = occurrence_id("half-minute", START_MS + 30_000)
    if step != "pending":
        (armed,) = store.firing.arm_many(
            [ArmRequest(task_id=first, due_ms=START_MS + 30_000, lease_until_ms=START_MS + 200_000)],
            "b1",
            "e-dead",
            START_MS + 1_000,
        )
        assert armed is not None
    if step == "recorded":
        assert store.firing.record_many(
            "e-dead",
            [
                FireRecord(
                    task_id=first,
                    outcome=Outcome.SUCCEEDED,
                    fired_ms=START_MS + 30_000.4,
                    finished_ms=START_MS + 30_010,
                    drift_ms=0.4,
                    drift_corrected_ms=None,
                )
            ],
        ) == [True]
    # When the polls after it run
    for minute in range(1, 6):
        poller.poll(START_MS + minute * 60_000)
    # Then every later occurrence exists exactly once: none lost, none forked
    made = instants(client, "half-minute")
    assert made == sorted(set(made))
    assert made == list(range(START_MS + 30_000, START_MS + 5 * 60_000 + AHEAD_MS + 1, 30_000))


def test_an_occurrence_a_poll_makes_for_its_window_is_dispatched_by_that_poll(
    client: Client, store: Stores, clock: FakeClock
) -> None:
    # Given a schedule created long ago whose chain nobody extended (its next occurrence is due in 30 s)
    client.create_schedule("slow", "rate(10 minutes)", log_action())
    invoker = RecordingInvoker()
    schedule_poller = poller_on(store, invoker, client.settings, poller_id="p-x")
    now = START_MS + 600_000 - 30_000
    # When a poll finds it
    report = schedule_poller.poll(now)
    # Then it makes the occurrence and dispatches it at once (the index may not list it yet)
    assert report.occurrences_created >= 1
    assert occurrence_id("slow", START_MS + 600_000) in invoker.task_ids


# -- pause, resume, update, delete ------------------------------------------------------------------------------
def test_pause_cancels_what_is_not_armed_and_resume_goes_on_from_then(
    client: Client, store: Stores, clock: FakeClock, poller: Poller
) -> None:
    client.create_schedule("pulse", "rate(20 seconds)", log_action())
    armed_id = occurrence_id("pulse", START_MS + 20_000)
    assert (
        store.firing.arm_many(
            [ArmRequest(task_id=armed_id, due_ms=START_MS + 20_000, lease_until_ms=START_MS + 200_000)],
            "b1",
            "e-1",
            START_MS + 1_000,
        )[0]
        is not None
    )
    # When it is paused
    clock.advance(5)
    paused = client.pause_schedule("pulse")
    # Then the armed occurrence is left to fire, every other one is CANCELLED, and polls make no more
    assert paused.state is ScheduleState.PAUSED
    assert not paused.cleanup
    assert instants(client, "pulse", TaskStatus.ARMED) == [START_MS + 20_000]
    assert instants(client, "pulse", TaskStatus.PENDING) == []
    made = len(instants(client, "pulse"))
    assert poller.poll(START_MS + 120_000).occurrences_created == 0
    assert len(instants(client, "pulse")) == made
    # When it is resumed ten minutes later
    clock.advance(600)
    resumed = client.resume_schedule("pulse")
    now = int(clock.wall_ms())
    # Then the occurrences from then on are made (a CANCELLED instant of the old version may be made again),
    # none for the time it was paused
    assert resumed.state is ScheduleState.ACTIVE
    assert resumed.version == 3
    pending = instants(client, "pulse", TaskStatus.PENDING)
    assert pending
    assert min(pending) > now
    assert max(pending) <= now + AHEAD_MS
    assert all((ms - START_MS) % 20_000 == 0 for ms in pending)


def test_update_replaces_the_occurrences_not_armed(client: Client, store: Stores, clock: FakeClock) -> None:
    client.create_schedule("job", "rate(30 seconds)", log_action())
    armed_id = occurrence_id("job", START_MS + 30_000)
    assert (
        store.firing.arm_many(
            [ArmRequest(task_id=armed_id, due_ms=START_MS + 30_000, lease_until_ms=START_MS + 200_000)],
            "b1",
            "e-1",
            START_MS + 1_000,
        )[0]
        is not None
    )
    # When its rate changes to every 15 s (with the same anchor, so instants every 30 s are in both)
    updated = client.update_schedule("job", expression="rate(15 seconds)", payload={"v": 2})
    # Then the old PENDING ones are replaced by the new definition, the armed old one stays and fires as it was,
    # and no instant has two occurrences
    assert updated.version == 2
    history = client.schedule_history("job")
    assert Counter(t.task_id for t in history).most_common(1)[0][1] == 1
    pending = [t for t in history if t.status is TaskStatus.PENDING]
    assert pending
    assert all(t.schedule_version == 2 and t.payload == {"v": 2} for t in pending)
    assert [split_occurrence_id(t.task_id)[1] for t in pending] == [  # type: ignore[index]
        START_MS + 15_000,
        *range(START_MS + 45_000, START_MS + AHEAD_MS + 1, 15_000),
    ]
    armed = store.client.get(armed_id)
    assert armed is not None
    assert armed.status is TaskStatus.ARMED
    assert armed.schedule_version == 1


def test_a_deleted_schedules_id_is_refused_even_with_the_same_definition(client: Client) -> None:
    # Given a schedule that was deleted
    made = client.create_schedule("gone", "rate(10 seconds)", log_action(), start_at=from_ms(START_MS + 10_000))
    client.delete_schedule("gone")
    # When the same id is created again, even with the same definition
    with pytest.raises(ScheduleConflictError, match="was deleted"):
        client.create_schedule("gone", made.expression, log_action(), start_at=made.start_at)
    # Then the deleted one stays as it was: nothing is made for it
    stored = client.get_schedule("gone")
    assert stored is not None
    assert stored.state is ScheduleState.DELETED


def test_delete_stops_the_chain(client: Client, poller: Poller) -> None:
    client.create_schedule("gone", "rate(10 seconds)", log_action())
    deleted = client.delete_schedule("gone")
    assert deleted.state is ScheduleState.DELETED
    assert instants(client, "gone", TaskStatus.PENDING) == []
    assert poller.poll(START_MS + 60_000).occurrences_created == 0
    with pytest.raises(ScheduleNotFoundError):
        client.pause_schedule("gone")


def test_a_change_whose_caller_died_is_finished_by_the_next_poll(client: Client, store: Stores, poller: Poller) -> None:
    # Given a pause that was written but whose cleanup never ran (its caller died in between)
    client.create_schedule("orphan", "rate(10 seconds)", log_action())
    schedule = store.schedules.get_schedule("orphan")
    assert schedule is not None
    store.schedules.change_schedule(schedule, {"state": ScheduleState.PAUSED}, START_MS + 1_000, cleanup=True)
    assert instants(client, "orphan", TaskStatus.PENDING)
    # When the next poll runs
    poller.poll(START_MS + 2_000)
    # Then it cancelled the old version's PENDING occurrences and cleared the flag
    assert instants(client, "orphan", TaskStatus.PENDING) == []
    after = store.schedules.get_schedule("orphan")
    assert after is not None
    assert not after.cleanup
    assert after.state is ScheduleState.PAUSED


# -- ends and downtime ----------------------------------------------------------------------------------------------
def test_max_occurrences_and_end_at_end_the_schedule(client: Client, poller: Poller) -> None:
    capped = client.create_schedule("five", "rate(1 minute)", log_action(), max_occurrences=5)
    ended = client.create_schedule("until", "rate(1 minute)", log_action(), end_at=from_ms(START_MS + 150_000))
    for minute in range(1, 8):
        poller.poll(START_MS + minute * 60_000)
    assert len(instants(client, "five")) == 5
    assert capped.max_occurrences == 5
    assert instants(client, "until") == [START_MS + 60_000, START_MS + 120_000]
    assert ended.end_at is not None
    for schedule_id in ("five", "until"):
        schedule = client.get_schedule(schedule_id)
        assert schedule is not None
        assert schedule.state is ScheduleState.ENDED
        assert schedule.next_due_ms is None


@pytest.mark.parametrize("policy", ["skip", "fire_latest"])
def test_after_an_hour_of_downtime_no_storm(client: Client, store: Stores, policy: str) -> None:
    client.create_schedule("minutely", "rate(1 minute)", log_action(), downtime_policy=policy, misfire_grace=10_000)
    before = instants(client, "minutely")
    # When nothing runs for an hour, then the chain is extended
    now = START_MS + 3_600_000 + 5_000
    report = extend(store.schedules, store.client, "minutely", now, now + AHEAD_MS)
    # Then none of the instants missed is made, but under fire_latest the latest one, to fire at once, flagged
    made = [ms for ms in instants(client, "minutely") if ms not in before]
    late = [ms for ms in made if ms < now - 10_000]
    assert [ms for ms in made if ms >= now - 10_000] == list(range(START_MS + 3_600_000, now + AHEAD_MS + 1, 60_000))
    if policy == "skip":
        assert late == []
    else:
        assert late == [START_MS + 3_540_000]
        task = store.client.get(occurrence_id("minutely", late[0]))
        assert task is not None
        assert task.misfire_policy == "fire_late"
    schedule = client.get_schedule("minutely")
    assert schedule is not None
    assert report.skipped == schedule.skipped_count
    assert schedule.skipped_count == 59 - len(before) - len(late)  # instants 1..59 came before the resume


# -- a schedule item that cannot be read -------------------------------------------------------------------------
@DYNAMODB_ONLY
def test_a_schedule_item_that_cannot_be_read_is_taken_out_of_the_polls_and_the_others_go_on(
    client: Client, store: DynamoStores, poller: Poller, dynamodb: Any, settings: Settings
) -> None:
    # Given two schedules, one of whose items was then written by hand with a definition that is not JSON
    client.create_schedule("good", "rate(10 seconds)", log_action())
    client.create_schedule("bad", "rate(10 seconds)", log_action())
    key = {"task_id": {"S": schedule_key("bad")}}
    dynamodb.update_item(
        TableName=settings.table_name,
        Key=key,
        UpdateExpression="SET #d = :d",
        ExpressionAttributeNames={"#d": "definition"},
        ExpressionAttributeValues={":d": {"S": "{not json"}},
    )
    with pytest.raises(UndecodableItemError):
        store.schedules.get_schedule("bad")

    # When a poll meets both
    now = START_MS + 60_000
    first = poller.poll(now)

    # Then the good one is extended, and the bad one is counted, kept with a detail, and out of the due index
    assert first.schedules == 2
    assert first.undecodable == 1
    assert instants(client, "good")[-1] == now + AHEAD_MS - (now + AHEAD_MS - START_MS) % 10_000
    item = dynamodb.get_item(TableName=settings.table_name, Key=key, ConsistentRead=True)["Item"]
    assert "due_bucket" not in item
    assert "cannot be read: JSONDecodeError" in item["detail"]["S"]
    # And the next poll meets only the good one; listing shows the good one and skips the bad one
    second = poller.poll(now + 60_000)
    assert (second.schedules, second.undecodable) == (1, 0)
    assert [s.schedule_id for s in client.list_schedules()] == ["good"]
