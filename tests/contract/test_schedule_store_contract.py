"""The contract of the schedule port (:class:`punctual.stores.ports.SchedulePort`, ``store.schedules``), run on every
implementation.

Each test talks to the store through the ports' methods only, with an explicit ``now`` everywhere: a schedule
stored with its first occurrences or not at all, idempotent creation, the cursor's move conditional on the cursor
and the version read, an older version's occurrence blocking a newer one's until it is cancelled, a change
conditional on the version read, the cleanup flag, when a schedule is in the due index, every schedule listed (or
those of an id prefix) in id order, and the occurrences' ids in due order, never a schedule's. The chain's
decisions (which occurrences to make) are :mod:`punctual.scheduling.chain`'s, tested with the client in
``tests/functional/test_schedules.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from contract_tools import NOW, TaskFactory

from punctual.domain.keys import BUCKET_MS, from_ms
from punctual.domain.model import TaskStatus, occurrence_id
from punctual.domain.schedules import Advance, AdvanceResult, Schedule, ScheduleState
from punctual.errors import ScheduleConflictError, ScheduleNotFoundError, ScheduleStateError
from punctual.stores.ports import Stores
from punctual.targets import LogAction

SECOND = 1_000


def every_10s(schedule_id: str = "pulse", next_due_ms: int = NOW + 10 * SECOND, **fields: Any) -> Schedule:
    """A schedule every 10 s from NOW (unless ``fields`` name another expression), its cursor at ``next_due_ms``."""
    fields.setdefault("action", LogAction(message="tick"))
    fields.setdefault("expression", "rate(10 seconds)")
    return Schedule(schedule_id=schedule_id, start_at=from_ms(NOW), next_due_ms=next_due_ms, **fields)


def stored_schedule(store: Stores, schedule_id: str = "pulse") -> Schedule:
    """The schedule as stored now; it must exist."""
    schedule = store.schedules.get_schedule(schedule_id)
    assert schedule is not None, schedule_id
    return schedule


def due_schedules(store: Stores, now_ms: int, until_ms: int) -> list[str]:
    """The schedules a look for due work at ``now_ms`` names up to ``until_ms``."""
    return store.dispatch.find_due(now_ms, until_ms).schedules


# -- create and read ---------------------------------------------------------------------------------------------
def test_a_schedule_is_stored_with_its_first_occurrences(store: Stores) -> None:
    # Given a schedule whose first two occurrences are made with it
    schedule = every_10s(next_due_ms=NOW + 30 * SECOND, created_count=2, payload={"n": 1})
    first = [schedule.occurrence(NOW + 10 * SECOND), schedule.occurrence(NOW + 20 * SECOND)]
    # When it is created
    created, is_new = store.schedules.create_schedule(schedule, first, NOW)
    # Then it is stored as given, created and updated at NOW, ACTIVE at version 1
    assert is_new is True
    assert created.created_at == from_ms(NOW)
    got = stored_schedule(store)
    assert got.definition() == schedule.definition()
    assert (got.state, got.version, got.next_due_ms, got.created_count, got.cleanup) == (
        ScheduleState.ACTIVE,
        1,
        NOW + 30 * SECOND,
        2,
        False,
    )
    assert (got.created_at, got.updated_at) == (from_ms(NOW), from_ms(NOW))
    # ... and its occurrences are PENDING tasks of version 1, listed in due order
    ids = [t.task_id for t in first]
    occurrences = store.client.get_many(ids)
    assert [(t.status, t.schedule_id, t.schedule_version, t.payload) for t in occurrences.values()] == [
        (TaskStatus.PENDING, "pulse", 1, {"n": 1})
    ] * 2
    assert [occurrences[i].due_ms for i in ids] == [NOW + 10 * SECOND, NOW + 20 * SECOND]
    assert store.schedules.schedule_occurrence_ids("pulse") == ids


def test_an_unknown_schedule_reads_as_none(store: Stores) -> None:
    # Given an empty store / When a schedule is read or listed / Then there is none
    assert store.schedules.get_schedule("nobody") is None
    assert list(store.schedules.list_schedules()) == []
    assert store.schedules.schedule_occurrence_ids("nobody") == []


def test_creating_again_is_idempotent_on_an_equal_definition_and_conflicts_otherwise(store: Stores) -> None:
    # Given a stored schedule
    schedule = every_10s()
    store.schedules.create_schedule(schedule, [], NOW)
    # When the same definition is created again, with an occurrence this time
    late = schedule.occurrence(NOW + 10 * SECOND)
    existing, is_new = store.schedules.create_schedule(schedule.model_copy(), [late], NOW + 500)
    # Then the stored one is returned and nothing is written
    assert is_new is False
    assert existing.definition() == schedule.definition()
    assert existing.version == 1
    assert existing.created_at == from_ms(NOW)
    assert store.client.get(late.task_id) is None
    # When another definition is created under its id / Then it conflicts, the error carrying the stored one
    with pytest.raises(ScheduleConflictError) as info:
        store.schedules.create_schedule(every_10s(expression="rate(1 minute)"), [], NOW)
    assert info.value.existing.expression == "rate(10 seconds)"
    assert stored_schedule(store).expression == "rate(10 seconds)"


def test_a_deleted_schedules_id_cannot_be_used_again(store: Stores) -> None:
    # Given a schedule that was deleted
    schedule = every_10s()
    store.schedules.create_schedule(schedule, [], NOW)
    store.schedules.change_schedule(stored_schedule(store), {"state": ScheduleState.DELETED}, NOW + 1, cleanup=False)
    # When the same definition is created again / Then it is refused, and the deleted one stays as it was
    with pytest.raises(ScheduleConflictError, match="was deleted"):
        store.schedules.create_schedule(schedule, [], NOW + 2)
    assert stored_schedule(store).state is ScheduleState.DELETED


def test_a_schedule_whose_first_occurrence_is_taken_is_not_stored(store: Stores) -> None:
    # Given a live task that holds the id of the schedule's first occurrence
    schedule = every_10s(next_due_ms=NOW + 20 * SECOND)
    first = schedule.occurrence(NOW + 10 * SECOND)
    store.client.create(first, NOW)
    # When the schedule is created with it / Then nothing is stored, and the task is as it was
    with pytest.raises(ScheduleStateError):
        store.schedules.create_schedule(schedule, [first], NOW + 1)
    assert store.schedules.get_schedule("pulse") is None
    assert store.client.get(first.task_id) is not None


LISTED = ("acme/b", "b", "acme-2/a", "acme/a", "ac-dc", "a", "ab", "beta/a")  # tenants' and of none, out of order


def listed(store: Stores, id_prefix: str | None = None) -> list[str]:
    """The ids of the schedules a list names (of those whose id starts with ``id_prefix``), in its order."""
    return [s.schedule_id for s in store.schedules.list_schedules(id_prefix)]


def test_every_schedule_is_listed_in_id_order_whatever_its_tenant_or_state(store: Stores) -> None:
    # Given schedules of tenants and of none, created out of order, one of them paused and one deleted
    for schedule_id in LISTED:
        store.schedules.create_schedule(every_10s(schedule_id, NOW + 3_600_000), [], NOW)
    store.schedules.change_schedule(
        stored_schedule(store, "b"), {"state": ScheduleState.PAUSED}, NOW + 1, cleanup=False
    )
    deleted = {"state": ScheduleState.DELETED}
    store.schedules.change_schedule(stored_schedule(store, "acme/a"), deleted, NOW + 1, cleanup=False)
    # When every schedule is listed / Then each is listed once, by id, with its state
    assert listed(store) == sorted(LISTED)
    states = {s.schedule_id: s.state for s in store.schedules.list_schedules()}
    assert (states["b"], states["acme/a"], states["a"]) == (
        ScheduleState.PAUSED,
        ScheduleState.DELETED,
        ScheduleState.ACTIVE,
    )


BY_PREFIX = {
    "acme/": ["acme/a", "acme/b"],  # a tenant's: not acme-2's, whose name starts like it
    "acme/b": ["acme/b"],
    "acme": ["acme-2/a", "acme/a", "acme/b"],  # no tenant named: every id that starts so
    "a": ["a", "ab", "ac-dc", "acme-2/a", "acme/a", "acme/b"],
    "ab": ["ab"],
    "b": ["b", "beta/a"],
    "beta/": ["beta/a"],
    "c": [],
    "gamma/": [],
}


def test_schedules_are_listed_by_the_prefix_of_their_id(store: Stores) -> None:
    # Given schedules of tenants and of none
    for schedule_id in LISTED:
        store.schedules.create_schedule(every_10s(schedule_id, NOW + 3_600_000), [], NOW)
    # When those whose id starts with each prefix are listed / Then exactly they are, by id
    assert {id_prefix: listed(store, id_prefix) for id_prefix in BY_PREFIX} == BY_PREFIX


def test_a_schedules_history_holds_its_occurrences_and_never_a_schedule(store: Stores, tasks: TaskFactory) -> None:
    # Given schedules with occurrences (acme's among them), schedules without, and a task of its own
    made: dict[str, list[str]] = {}
    for schedule_id in ("pulse", "acme/pulse", "acme/p"):
        schedule = every_10s(schedule_id, NOW + 30 * SECOND)
        first = [schedule.occurrence(NOW + i * 10 * SECOND) for i in (1, 2)]
        store.schedules.create_schedule(schedule, first, NOW)
        made[schedule_id] = [t.task_id for t in first]
    for schedule_id in ("pulse-2", "acme/pulse-2", "schedules"):
        store.schedules.create_schedule(every_10s(schedule_id, NOW + 3_600_000), [], NOW)
    tasks.create(NOW + 10 * SECOND, "acme/pulse-3")
    # When each schedule's occurrences are listed / Then they are its own occurrences only, no schedule among them
    for schedule_id, ids in made.items():
        assert store.schedules.schedule_occurrence_ids(schedule_id) == ids
    for schedule_id in ("pulse-2", "acme/pulse-2", "schedules"):
        assert store.schedules.schedule_occurrence_ids(schedule_id) == []
    # And the list of schedules holds the schedules only, no occurrence and no task
    assert listed(store) == sorted([*made, "pulse-2", "acme/pulse-2", "schedules"])


# -- advance -------------------------------------------------------------------------------------------------------
def test_advance_creates_the_occurrences_and_moves_the_cursor_once(store: Stores) -> None:
    # Given a schedule whose cursor is at its first instant, read by two pollers
    store.schedules.create_schedule(every_10s(), [], NOW)
    read, other = stored_schedule(store), stored_schedule(store)
    step = Advance([NOW + 10 * SECOND, NOW + 20 * SECOND], next_due_ms=NOW + 30 * SECOND, skipped=1)
    # When the first advances it
    result = store.schedules.advance_schedule(read, step, [read.occurrence(ms) for ms in step.occurrences], NOW + 1)
    # Then the occurrences exist and the cursor moved, the counts with it, the version unchanged
    assert result == AdvanceResult(done=True)
    after = stored_schedule(store)
    assert (after.next_due_ms, after.created_count, after.skipped_count, after.version, after.state) == (
        NOW + 30 * SECOND,
        2,
        1,
        1,
        ScheduleState.ACTIVE,
    )
    ids = [occurrence_id("pulse", ms) for ms in step.occurrences]
    assert {t.status for t in store.client.get_many(ids).values()} == {TaskStatus.PENDING}
    # When the second advances it from what it read / Then it loses the race: nothing blocked, nothing written
    again = store.schedules.advance_schedule(other, step, [other.occurrence(ms) for ms in step.occurrences], NOW + 2)
    assert again == AdvanceResult(done=False, blocked=[])
    assert stored_schedule(store).created_count == 2
    assert store.schedules.schedule_occurrence_ids("pulse") == ids


def test_an_advance_is_refused_once_the_schedule_changed(store: Stores) -> None:
    # Given a schedule read, then changed (one version up)
    store.schedules.create_schedule(every_10s(), [], NOW)
    read = stored_schedule(store)
    store.schedules.change_schedule(read, {"payload": {"v": 2}}, NOW + 1, cleanup=False)
    # When it is advanced from the read / Then nothing is created, and the cursor stays
    step = Advance([NOW + 10 * SECOND], next_due_ms=NOW + 20 * SECOND)
    assert store.schedules.advance_schedule(read, step, [read.occurrence(NOW + 10 * SECOND)], NOW + 2) == AdvanceResult(
        done=False, blocked=[]
    )
    assert store.schedules.schedule_occurrence_ids("pulse") == []
    assert stored_schedule(store).next_due_ms == NOW + 10 * SECOND


def test_an_older_versions_live_occurrence_blocks_an_advance_until_it_is_cancelled(store: Stores) -> None:
    # Given a schedule with its first occurrence made by version 1, then updated to version 2 with its cursor
    # back on that instant
    schedule = every_10s(next_due_ms=NOW + 20 * SECOND)
    old = schedule.occurrence(NOW + 10 * SECOND)
    store.schedules.create_schedule(schedule, [old], NOW)
    updated = store.schedules.change_schedule(
        stored_schedule(store), {"payload": {"v": 2}, "next_due_ms": NOW + 10 * SECOND}, NOW + 1, cleanup=True
    )
    step = Advance([NOW + 10 * SECOND], next_due_ms=NOW + 20 * SECOND)
    # When version 2 advances / Then the old occurrence, still PENDING, blocks it, named
    assert store.schedules.advance_schedule(
        updated, step, [updated.occurrence(NOW + 10 * SECOND)], NOW + 2
    ) == AdvanceResult(done=False, blocked=[old.task_id])
    # When the old occurrence is cancelled and version 2 advances again
    store.client.cancel(old.task_id, NOW + 3)
    read = stored_schedule(store)
    result = store.schedules.advance_schedule(read, step, [read.occurrence(NOW + 10 * SECOND)], NOW + 4)
    # Then the instant holds version 2's occurrence, PENDING
    assert result == AdvanceResult(done=True)
    new = store.client.get(old.task_id)
    assert new is not None
    assert (new.status, new.schedule_version, new.payload) == (TaskStatus.PENDING, 2, {"v": 2})


def test_an_advance_to_no_next_instant_ends_the_schedule(store: Stores) -> None:
    # Given a schedule due for its last occurrence, which a look for due work names
    store.schedules.create_schedule(every_10s(max_occurrences=1), [], NOW)
    assert due_schedules(store, NOW, NOW + 90 * SECOND) == ["pulse"]
    read = stored_schedule(store)
    # When it is advanced with no next instant
    step = Advance([NOW + 10 * SECOND], next_due_ms=None)
    assert store.schedules.advance_schedule(read, step, [read.occurrence(NOW + 10 * SECOND)], NOW + 1).done
    # Then it is ENDED, without a cursor, and no look names it any more
    after = stored_schedule(store)
    assert (after.state, after.next_due_ms, after.created_count) == (ScheduleState.ENDED, None, 1)
    assert due_schedules(store, NOW + 2, NOW + 90 * SECOND) == []
    # ... and an advance from the read it ended from changes nothing
    assert not store.schedules.advance_schedule(read, step, [], NOW + 3).done


# -- the due index ---------------------------------------------------------------------------------------------------
def test_an_active_schedule_is_found_due_ahead_of_its_cursor(store: Stores, tasks: TaskFactory) -> None:
    # Given a schedule due in a minute, one due in ten, a paused one due in a minute, and a task
    store.schedules.create_schedule(every_10s("soon", NOW + BUCKET_MS), [], NOW)
    store.schedules.create_schedule(every_10s("later", NOW + 10 * BUCKET_MS), [], NOW)
    store.schedules.create_schedule(every_10s("paused", NOW + BUCKET_MS, state=ScheduleState.PAUSED), [], NOW)
    task = tasks.create(NOW + 10 * SECOND)
    # When due work is looked for up to 90 s from now
    scan = store.dispatch.find_due(NOW, NOW + 90 * SECOND)
    # Then the schedule due soon is named (its next occurrences are to be made), apart from the tasks found
    assert (scan.schedules, [c.task_id for c in scan.candidates]) == (["soon"], [task.task_id])
    # ... and the later one only by a look that reaches its cursor
    assert "later" not in due_schedules(store, NOW + 1, NOW + 5 * BUCKET_MS)
    assert sorted(due_schedules(store, NOW + 2, NOW + 10 * BUCKET_MS)) == ["later", "soon"]


# -- changes -------------------------------------------------------------------------------------------------------
def test_a_change_raises_the_version_and_is_refused_on_a_stale_read(store: Stores) -> None:
    # Given a schedule that made two occurrences, read at version 1
    schedule = every_10s(next_due_ms=NOW + 30 * SECOND, created_count=2)
    store.schedules.create_schedule(schedule, [schedule.occurrence(NOW + i * 10 * SECOND) for i in (1, 2)], NOW)
    read = stored_schedule(store)
    # When it is paused, with a cleanup to do
    paused = store.schedules.change_schedule(read, {"state": ScheduleState.PAUSED}, NOW + 1, cleanup=True)
    # Then it is PAUSED at version 2, the cleanup pending, its counts and creation kept
    assert (paused.state, paused.version, paused.cleanup, paused.updated_at) == (
        ScheduleState.PAUSED,
        2,
        True,
        from_ms(NOW + 1),
    )
    after = stored_schedule(store)
    assert (after.state, after.version, after.cleanup, after.created_count, after.created_at) == (
        ScheduleState.PAUSED,
        2,
        True,
        2,
        from_ms(NOW),
    )
    # When it is changed again from the old read / Then it is refused, and stays as it is
    with pytest.raises(ScheduleStateError):
        store.schedules.change_schedule(read, {"payload": {"v": 3}}, NOW + 2, cleanup=False)
    assert stored_schedule(store).version == 2
    # And a schedule that does not exist cannot be changed
    with pytest.raises(ScheduleNotFoundError):
        store.schedules.change_schedule(every_10s("nobody"), {"state": ScheduleState.PAUSED}, NOW + 3, cleanup=False)


def test_a_pending_cleanup_keeps_the_schedule_due_until_it_is_finished(store: Stores) -> None:
    # Given a schedule paused with a cleanup to do (its caller may die before it is done)
    store.schedules.create_schedule(every_10s(next_due_ms=NOW + 10 * BUCKET_MS), [], NOW)
    read = stored_schedule(store)
    paused = store.schedules.change_schedule(read, {"state": ScheduleState.PAUSED}, NOW + 1, cleanup=True)
    # Then a look for due work names it now, paused as it is (the next poll finishes the cleanup)
    assert due_schedules(store, NOW + 2, NOW + 90 * SECOND) == ["pulse"]
    # When the cleanup is finished from the old read / Then that is refused: the flag stays
    assert store.schedules.finish_cleanup(read, NOW + 3) is False
    assert stored_schedule(store).cleanup is True
    # When it is finished from the paused schedule / Then the flag is cleared and no look names it any more
    assert store.schedules.finish_cleanup(paused, NOW + 4) is True
    after = stored_schedule(store)
    assert (after.cleanup, after.state, after.version) == (False, ScheduleState.PAUSED, 2)
    assert due_schedules(store, NOW + 5, NOW + 90 * SECOND) == []


def test_a_resumed_schedule_is_found_due_again(store: Stores) -> None:
    # Given a paused schedule, out of the due index
    store.schedules.create_schedule(every_10s(next_due_ms=NOW + BUCKET_MS, state=ScheduleState.PAUSED), [], NOW)
    assert due_schedules(store, NOW, NOW + 90 * SECOND) == []
    # When it is resumed / Then a look names it again
    store.schedules.change_schedule(stored_schedule(store), {"state": ScheduleState.ACTIVE}, NOW + 1, cleanup=False)
    assert due_schedules(store, NOW + 2, NOW + 90 * SECOND) == ["pulse"]


def test_a_quarantined_schedule_leaves_the_due_index(store: Stores) -> None:
    # Given a schedule due soon, which a look names
    store.schedules.create_schedule(every_10s(next_due_ms=NOW + BUCKET_MS), [], NOW)
    assert due_schedules(store, NOW, NOW + 90 * SECOND) == ["pulse"]
    # When it is quarantined / Then no look names it any more, and a second quarantine finds nothing to take
    assert store.schedules.quarantine_schedule("pulse", "cannot be read", NOW + 1) is True
    assert due_schedules(store, NOW + 2, NOW + 90 * SECOND) == []
    assert store.schedules.quarantine_schedule("pulse", "cannot be read", NOW + 3) is False
    assert store.schedules.quarantine_schedule("nobody", "cannot be read", NOW + 3) is False


# -- occurrences ---------------------------------------------------------------------------------------------------
def test_a_schedules_occurrence_ids_are_listed_in_due_order(store: Stores, tasks: TaskFactory) -> None:
    # Given a schedule with three occurrences, another whose id starts like it with one, and a task of its own
    schedule = every_10s(next_due_ms=NOW + 40 * SECOND)
    made = [schedule.occurrence(NOW + i * 10 * SECOND) for i in (3, 1, 2)]
    store.schedules.create_schedule(schedule, made, NOW)
    other = every_10s("pulse-2", NOW + 20 * SECOND)
    store.schedules.create_schedule(other, [other.occurrence(NOW + 10 * SECOND)], NOW)
    tasks.create(NOW + 10 * SECOND, "pulse")
    ids = [occurrence_id("pulse", NOW + i * 10 * SECOND) for i in (1, 2, 3)]
    # When its occurrences are listed: all, from an instant on, the first two / Then only its own, in due order
    assert store.schedules.schedule_occurrence_ids("pulse") == ids
    assert store.schedules.schedule_occurrence_ids("pulse", from_ms_=NOW + 20 * SECOND) == ids[1:]
    assert store.schedules.schedule_occurrence_ids("pulse", limit=2) == ids[:2]
