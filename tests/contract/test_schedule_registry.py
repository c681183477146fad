"""The schedules' registry on DynamoDB: every schedule item carries ``schedule_id`` = ``SCHEDULE_REGISTRY``, one
partition of the keys-only ``schedule`` index, from which every schedule is listed (a Query and a BatchGetItem,
never a Scan); a schedule item written before the registry (no ``schedule_id``) joins it at its next change or
advance, or by the backfill; no schedule's history meets the registry, and an item listed elsewhere is no schedule.

Not part of the port's contract (the in-memory store has no index): runs on every DynamoDB kind of
``contract_tools.STORE_KINDS`` (moto and DynamoDB Local, both write modes).
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from contract_tools import NOW, DynamoBackend, TaskFactory

from punctual.domain.keys import from_ms
from punctual.domain.model import Task, Unreadable
from punctual.domain.schedules import Advance, Schedule, ScheduleState
from punctual.errors import UndecodableItemError
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.backfill import BackfillCounts, backfill_schedule_registry
from punctual.stores.dynamodb.codec import SCHEDULE_REGISTRY, schedule_key, to_av
from punctual.stores.dynamodb.table import SCHEDULE_INDEX
from punctual.targets import LogAction
from punctual_tools.iam.recorder import watch_client

HOUR = 3_600_000


@pytest.fixture
def backend(dynamo_backend: DynamoBackend) -> DynamoBackend:
    return dynamo_backend


@pytest.fixture
def tasks(dynamo_backend: DynamoBackend) -> TaskFactory:
    return TaskFactory(dynamo_backend.store)


def hourly(schedule_id: str, next_due_ms: int = NOW + HOUR) -> Schedule:
    """A schedule every hour from NOW + an hour, its cursor at ``next_due_ms``."""
    return Schedule(
        schedule_id=schedule_id,
        expression="rate(1 hour)",
        start_at=from_ms(NOW + HOUR),
        next_due_ms=next_due_ms,
        action=LogAction(message="tick"),
    )


def create(backend: DynamoBackend, *schedule_ids: str, occurrences: bool = False) -> None:
    """Store each schedule (with its first occurrence, if asked)."""
    for schedule_id in schedule_ids:
        schedule = hourly(schedule_id, next_due_ms=NOW + 2 * HOUR) if occurrences else hourly(schedule_id)
        first: list[Task] = [schedule.occurrence(NOW + HOUR)] if occurrences else []
        backend.store.schedules.create_schedule(schedule, first, NOW)


def listed(backend: DynamoBackend, id_prefix: str | None = None, unreadable: Unreadable | None = None) -> list[str]:
    return [s.schedule_id for s in backend.store.schedules.list_schedules(id_prefix, unreadable)]


def stored(backend: DynamoBackend, schedule_id: str) -> Schedule:
    schedule = backend.store.schedules.get_schedule(schedule_id)
    assert schedule is not None, schedule_id
    return schedule


def registry_keys(backend: DynamoBackend) -> list[str]:
    """The keys the registry partition of the schedule index holds, as DynamoDB answers them."""
    answer = backend.client.query(
        TableName=backend.table_name,
        IndexName=SCHEDULE_INDEX,
        KeyConditionExpression="schedule_id = :r",
        ExpressionAttributeValues=to_av({":r": SCHEDULE_REGISTRY}),
    )
    return [item["task_id"]["S"] for item in answer["Items"]]


def written_before_the_registry(backend: DynamoBackend, schedule_id: str) -> None:
    """Make the schedule's item as a version before the registry wrote it: no schedule_id."""
    backend.client.update_item(
        TableName=backend.table_name,
        Key={"task_id": {"S": schedule_key(schedule_id)}},
        UpdateExpression="REMOVE schedule_id",
    )


def set_schedule_id(backend: DynamoBackend, key: str, value: str) -> None:
    backend.client.update_item(
        TableName=backend.table_name,
        Key={"task_id": {"S": key}},
        UpdateExpression="SET schedule_id = :s",
        ExpressionAttributeValues=to_av({":s": value}),
    )


# -- the registry ----------------------------------------------------------------------------------------------------
def test_a_schedule_enters_the_registry_when_created_and_stays_there(backend: DynamoBackend) -> None:
    # Given schedules of a tenant and of none, with an occurrence each
    create(backend, "pulse", "acme/pulse", occurrences=True)
    # Then each item carries the registry value, and the registry holds both schedules, no occurrence
    assert {backend.raw_item(schedule_key(s))["schedule_id"]["S"] for s in ("pulse", "acme/pulse")} == {
        SCHEDULE_REGISTRY
    }
    assert sorted(registry_keys(backend)) == sorted([schedule_key("pulse"), schedule_key("acme/pulse")])
    # When one is advanced, changed and cleaned up, the other ended by its advance
    schedules = backend.store.schedules
    read = stored(backend, "pulse")
    step = Advance([NOW + 2 * HOUR], next_due_ms=NOW + 3 * HOUR)
    assert schedules.advance_schedule(read, step, [read.occurrence(NOW + 2 * HOUR)], NOW + 1).done
    paused = schedules.change_schedule(stored(backend, "pulse"), {"state": ScheduleState.PAUSED}, NOW + 2, cleanup=True)
    assert schedules.finish_cleanup(paused, NOW + 3)
    other = stored(backend, "acme/pulse")
    assert schedules.advance_schedule(other, Advance([NOW + 2 * HOUR], next_due_ms=None), [], NOW + 4).done
    # Then both are still in the registry, once, and listed with their states
    assert sorted(registry_keys(backend)) == sorted([schedule_key("pulse"), schedule_key("acme/pulse")])
    assert [(s.schedule_id, s.state) for s in schedules.list_schedules()] == [
        ("acme/pulse", ScheduleState.ENDED),
        ("pulse", ScheduleState.PAUSED),
    ]


def test_every_schedule_is_listed_from_indexes_never_by_a_scan(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given schedules of tenants and of none with their occurrences, and tasks
    create(backend, "pulse", "acme/pulse", "acme-2/daily", occurrences=True)
    for i in range(3):
        tasks.create(NOW + 10_000, f"acme/t-{i}")
    # And a store on a client of its own whose operations are watched
    meta = backend.client.meta
    client = boto3.session.Session().client(
        "dynamodb",
        endpoint_url=meta.endpoint_url,
        region_name=meta.region_name,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    calls: list[str] = []
    watch_client(client, lambda call: calls.append(call.operation))
    store = DynamoStores.on(client, backend.dynamo.config)
    try:
        # When every schedule, those of a prefix of no tenant and a tenant's are listed
        lists = [[s.schedule_id for s in store.schedules.list_schedules(p)] for p in (None, "acme", "acme/")]
    finally:
        store.table.close()
    # Then each list is right, made of index queries and reads by key, and nothing scanned the table
    assert lists == [["acme-2/daily", "acme/pulse", "pulse"], ["acme-2/daily", "acme/pulse"], ["acme/pulse"]]
    assert "Scan" not in calls
    assert set(calls) == {"Query", "BatchGetItem"}


# -- an item written before the registry -------------------------------------------------------------------------
def test_a_schedule_written_before_the_registry_joins_it_at_its_next_change_or_advance(backend: DynamoBackend) -> None:
    # Given three schedules whose items were written before the registry, and one written since
    create(backend, "changed", "acme/advanced", "untouched", "new")
    for schedule_id in ("changed", "acme/advanced", "untouched"):
        written_before_the_registry(backend, schedule_id)
    # Then the list of every schedule misses them (a tenant's is still listed from its index), and each reads
    assert listed(backend) == ["new"]
    assert listed(backend, "acme/") == ["acme/advanced"]
    assert stored(backend, "untouched").state is ScheduleState.ACTIVE
    # When one is changed and one advanced
    schedules = backend.store.schedules
    schedules.change_schedule(stored(backend, "changed"), {"payload": {"v": 2}}, NOW + 1, cleanup=False)
    read = stored(backend, "acme/advanced")
    step = Advance([NOW + HOUR], next_due_ms=NOW + 2 * HOUR)
    assert schedules.advance_schedule(read, step, [read.occurrence(NOW + HOUR)], NOW + 2).done
    # Then both are listed again; the untouched one waits for the backfill
    assert listed(backend) == ["acme/advanced", "changed", "new"]
    assert backend.raw_item(schedule_key("changed"))["schedule_id"]["S"] == SCHEDULE_REGISTRY


def test_the_backfill_puts_the_schedules_written_before_the_registry_in_it(
    backend: DynamoBackend, tasks: TaskFactory
) -> None:
    # Given schedules written before the registry (one paused: it is never advanced), one written since, occurrences
    # and tasks
    create(backend, "old", "acme/old", "new", occurrences=True)
    create(backend, "acme/paused")
    schedules = backend.store.schedules
    schedules.change_schedule(stored(backend, "acme/paused"), {"state": ScheduleState.PAUSED}, NOW + 1, cleanup=False)
    for schedule_id in ("old", "acme/old", "acme/paused"):
        written_before_the_registry(backend, schedule_id)
    tasks.create(NOW + 10_000, "acme/t-1")
    before = {key: backend.raw_item(key) for key in (schedule_key("new"), "acme/t-1")}
    assert listed(backend) == ["new"]
    # When a dry run goes first / Then it finds the three and writes nothing
    found = backfill_schedule_registry(backend.dynamo.table, segments=2, dry_run=True)
    assert (found.found, found.updated, found.errors) == (3, 0, 0)
    assert listed(backend) == ["new"]
    # When the backfill runs
    counts = backfill_schedule_registry(backend.dynamo.table, segments=3)
    # Then every schedule is listed, the three stamped with the registry value, and the rest as it was
    items = backend.client.scan(TableName=backend.table_name, Select="COUNT")[
        "Count"
    ]  # 4 schedules, 3 occurrences, a task
    assert counts == BackfillCounts(scanned=items, found=3, updated=3, skipped=0, errors=0)
    assert listed(backend) == ["acme/old", "acme/paused", "new", "old"]
    assert stored(backend, "acme/paused").state is ScheduleState.PAUSED
    assert {key: backend.raw_item(key) for key in before} == before
    # And a second run stamps nothing
    again = backfill_schedule_registry(backend.dynamo.table)
    assert again == BackfillCounts(scanned=items, found=0, updated=0, skipped=0, errors=0)


def test_a_schedule_stamped_while_the_backfill_runs_is_skipped(backend: DynamoBackend) -> None:
    # Given a schedule written before the registry, stamped by a change just before the backfill's update
    create(backend, "old")
    written_before_the_registry(backend, "old")
    client = backend.client

    class ChangedFirst:
        def update_item(self, **request: Any) -> Any:
            set_schedule_id(backend, request["Key"]["task_id"]["S"], SCHEDULE_REGISTRY)
            return client.update_item(**request)

        def __getattr__(self, name: str) -> Any:
            return getattr(client, name)

    table = backend.dynamo.table
    racing = type(table)(ChangedFirst(), table.config)  # type: ignore[arg-type]  # a stand-in for the calls made here
    # When the backfill runs / Then the schedule is skipped (its condition failed), and is listed
    counts = backfill_schedule_registry(racing, segments=1)
    assert (counts.found, counts.updated, counts.skipped, counts.errors) == (1, 0, 1, 0)
    assert listed(backend) == ["old"]


# -- what the registry is not ------------------------------------------------------------------------------------
def test_no_history_meets_the_registry(backend: DynamoBackend) -> None:
    # Given schedules with occurrences, all in the registry
    create(backend, "pulse", "acme/pulse", "schedules", occurrences=True)
    # When the occurrences of each are listed, and of the registry's value as if it were a schedule's id
    schedules = backend.store.schedules
    # Then each holds its occurrence alone, and the registry's value names none (its entries hold no "@")
    for schedule_id in ("pulse", "acme/pulse", "schedules"):
        assert schedules.schedule_occurrence_ids(schedule_id) == [
            stored(backend, schedule_id).occurrence(NOW + HOUR).task_id
        ]
    assert schedules.schedule_occurrence_ids(SCHEDULE_REGISTRY) == []


def test_a_schedule_item_listed_outside_the_registry_is_no_schedule(backend: DynamoBackend) -> None:
    # Given acme's schedules, one of them moved by hand among its own occurrences in the schedule index
    create(backend, "acme/daily", "acme/good", occurrences=True)
    set_schedule_id(backend, schedule_key("acme/daily"), "acme/daily")
    # Then it is no schedule: it does not read, a tenant's list leaves it out and counts it, the list of every
    # schedule does not hold it, and its history holds its occurrence only
    schedules = backend.store.schedules
    with pytest.raises(UndecodableItemError):
        schedules.get_schedule("acme/daily")
    unreadable = Unreadable()
    assert listed(backend, "acme/", unreadable) == ["acme/good"]
    assert unreadable.keys == [schedule_key("acme/daily")]
    assert listed(backend) == ["acme/good"]
    assert schedules.schedule_occurrence_ids("acme/daily") == [hourly("acme/daily").occurrence(NOW + HOUR).task_id]


def test_an_item_that_forges_the_registry_value_is_no_schedule(backend: DynamoBackend, tasks: TaskFactory) -> None:
    # Given a schedule, and a task whose item was given the registry value (as a tenant's direct role may write it)
    create(backend, "acme/daily")
    tasks.create(NOW + 10_000, "acme/t-1")
    set_schedule_id(backend, "acme/t-1", SCHEDULE_REGISTRY)
    # When every schedule is listed / Then the schedule alone is, and nothing is counted unreadable
    unreadable = Unreadable()
    assert listed(backend, unreadable=unreadable) == ["acme/daily"]
    assert unreadable.count == 0
    # And the task is no task either: an item naming a schedule its key does not name is not read as one
    with pytest.raises(UndecodableItemError):
        backend.store.client.get("acme/t-1")
