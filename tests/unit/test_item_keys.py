"""An item is read as what its key says: an item naming another tenant or schedule than its key's is no task."""

from __future__ import annotations

import json
from typing import Any

import pytest

from punctual.domain.keys import from_ms
from punctual.domain.model import Task
from punctual.errors import UndecodableItemError
from punctual.stores.dynamodb.codec import candidate_of_item, item_to_task, new_task_item, to_av
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


def _schedule_item(key: str, schedule_id: str, tenant: str | None = None) -> dict[str, Any]:
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
