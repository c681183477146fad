"""An item is read as what its key says: an item naming another tenant or schedule than its key's is no task, and a
schedule item is listed under the schedules' registry, which is no schedule's id, or is no schedule."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from punctual.domain.keys import from_ms
from punctual.domain.model import SCHEDULE_ID, Task
from punctual.domain.schedules import SCHEDULE_ID_PATTERN
from punctual.errors import UndecodableItemError
from punctual.stores.dynamodb.codec import (
    SCHEDULE_REGISTRY,
    candidate_of_item,
    item_to_task,
    new_task_item,
    schedule_key,
    to_av,
)
from punctual.stores.dynamodb.schedules import schedule_of_item
from punctual.targets import LogAction

DUE = 1_900_000_000_000


def _item(task_id: str, **extra: Any) -> dict[str, Any]:
    task = Task(task_id=task_id, due_at=from_ms(DUE), action=LogAction())
    return {**new_task_item(task, due_bucket="b#0", fast_path=0, created_ms=DUE - 1), **to_av(extra)}


def test_an_item_whose_tenant_attribute_is_its_keys_reads() -> None:
    assert item_to_task(_item("acme/t")).task_id == "acme/t"
    assert candidate_of_item(_item("acme/t")) is not None
    assert item_to_task(_item("acme/daily@20300101T000000.000Z", schedule_id="acme/daily")).schedule_id == (
        "acme/daily"
    )


@pytest.mark.parametrize(
    ("key", "extra"),
    [
        ("acme/t", {"tenant": "beta"}),  # another tenant's attribute on acme's key
        ("t", {"tenant": "beta"}),  # a tenant on an operator's key
        ("acme/t", {"schedule_id": "acme/daily"}),  # a task of its own naming a schedule
        ("acme/daily@20300101T000000.000Z", {"schedule_id": "beta/reports"}),  # another tenant's schedule
        ("acme/daily@20300101T000000.000Z", {"schedule_id": "acme/other"}),  # another schedule of the tenant's
    ],
)
def test_an_item_naming_another_than_its_key_is_no_task(key: str, extra: dict[str, Any]) -> None:
    item = _item(key, **extra)
    with pytest.raises(ValueError, match="key"):
        item_to_task(item)
    if "tenant" in extra:  # what a poll reads of it: refused as well
        with pytest.raises(ValueError, match="key"):
            candidate_of_item(item)


def _schedule_item(
    key: str, schedule_id: str, tenant: str | None = None, listed_as: str | None = None
) -> dict[str, Any]:
    definition = {
        "schedule_id": schedule_id,
        "expression": "rate(1 minute)",
        "timezone": "UTC",
        "action": {"kind": "log", "message": ""},
        "payload": None,
    }
    values: dict[str, Any] = {
        "task_id": key,
        "state": "ACTIVE",
        "version": 1,
        "definition": json.dumps(definition),
        "created_ms": DUE,
        "next_due_ms": DUE,
    }
    if tenant is not None:
        values["tenant"] = tenant
    if listed_as is not None:
        values["schedule_id"] = listed_as  # its entry in the schedule index
    return to_av(values)


def test_a_schedule_item_is_read_only_as_the_schedule_its_key_names() -> None:
    # Given acme's own schedule item  Then it reads
    assert schedule_of_item(_schedule_item("acme/#schedule#daily", "acme/daily", "acme")).schedule_id == "acme/daily"
    # And one keyed under acme whose definition names beta's schedule (or whose tenant is beta's) does not
    for item in (
        _schedule_item("acme/#schedule#evil", "beta/reports", "acme"),
        _schedule_item("acme/#schedule#daily", "acme/daily", "beta"),
        _schedule_item("#schedule#ops", "beta/ops"),
    ):
        with pytest.raises(UndecodableItemError):
            schedule_of_item(item)


def test_the_schedules_registry_is_no_schedules_id_and_no_occurrences_schedule() -> None:
    # Given the registry value every schedule item carries as its schedule_id
    # Then no schedule can be named by it, so a query of a schedule's occurrences never reaches the registry
    assert re.fullmatch(SCHEDULE_ID_PATTERN, SCHEDULE_REGISTRY) is None
    assert re.fullmatch(SCHEDULE_ID, SCHEDULE_REGISTRY) is None
    # And a task item that carries it (an item forged into the registry) is no task
    with pytest.raises(ValueError, match="key"):
        item_to_task(_item("acme/t", schedule_id=SCHEDULE_REGISTRY))
    with pytest.raises(ValueError, match="key"):
        item_to_task(_item("acme/daily@20300101T000000.000Z", schedule_id=SCHEDULE_REGISTRY))


@pytest.mark.parametrize("schedule_id", [None, SCHEDULE_REGISTRY])
def test_a_schedule_item_in_the_registry_or_written_before_it_reads(schedule_id: str | None) -> None:
    # Given acme's schedule item as a create writes it now, and as one wrote it before the registry (no schedule_id)
    item = _schedule_item(schedule_key("acme/daily"), "acme/daily", "acme", listed_as=schedule_id)
    # Then it reads as its schedule
    assert schedule_of_item(item).schedule_id == "acme/daily"


@pytest.mark.parametrize("schedule_id", ["acme/daily", "acme/other", "#schedule", "", "#schedules "])
def test_a_schedule_item_listed_anywhere_but_the_registry_is_no_schedule(schedule_id: str) -> None:
    # Given acme's schedule item whose schedule_id is not the registry's (among its own occurrences, say)
    item = _schedule_item(schedule_key("acme/daily"), "acme/daily", "acme", listed_as=schedule_id)
    # Then it does not read (it is left out of a list and counted, quarantined by a poll)
    with pytest.raises(UndecodableItemError, match="registry"):
        schedule_of_item(item)
