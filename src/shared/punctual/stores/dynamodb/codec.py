"""Item encoding and decoding: a task as DynamoDB holds it (attribute values), in one place.

Used by the store for every read and write, and by the fast path for the table stream's images (a stream
image has the same attribute-value form as an item).

Item layout (one item per task, base key ``task_id``)::

    task_id S | due_ms N | due_at S (ISO) | due_bucket S (only while active) | status S
    action S (JSON) | payload S (JSON) | content_hash S | misfire_grace_ms N | misfire_policy S | occurrence N
    attempt N | late BOOL (fired past its grace under the fire_late policy)
    retry S (JSON RetryPolicy, only when set) | first_due_ms N (the occurrence's due before a retry moved it)
    redriven_ms N (when ``punctual redrive`` last put it back from FAILED)
    lease_until_ms N | batch_id S | armed_by S
    created_ms N | fired_ms N | finished_ms N | drift_ms N | drift_corrected_ms N | detail S
    fast_path N (1: written due before the next poll) | expires_at N (epoch s; TTL, set when finished)
    change_token S (the last cancel or reschedule: lets a retried request recognise its own change)
    schedule_id S | schedule_version N (a recurring schedule's occurrence; the "schedule" index lists them)
    tenant S (a tenant's task, keyed "<tenant>/<id>"; the "tenant" index lists them: punctual.domain.tenancy)
    tenant_shard S ("<tenant>#<shard>", a tenant's task only: with due_bucket, its entry in the tenant_active_sharded
    index, which the active-task quota counts)

An item is read as what its key says: one whose ``tenant`` names another tenant than its key's, or whose
``schedule_id`` is not the schedule its key names, is no task (undecodable: quarantined, counted, never acted on).

A recurring schedule is an item of its own, keyed ``#schedule#<schedule id>`` (:func:`schedule_key`; its layout is in
:mod:`.schedules`); it has a ``state``, never a ``status``, so nothing that reads tasks takes it for one. Its
``schedule_id`` is :data:`SCHEDULE_REGISTRY`, which is no schedule's id: every schedule's entry in the ``schedule``
index is in one partition of its own, which lists them all, and which no schedule's history meets.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeVar

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from punctual.domain.keys import from_ms, tenant_active_key
from punctual.domain.model import (
    ACTIVE_STATUSES,
    DEFAULT_MISFIRE_POLICY,
    MISFIRE_POLICIES,
    Action,
    Candidate,
    Task,
    TaskStatus,
    canonical_json,
    split_occurrence_id,
)
from punctual.domain.tenancy import SEPARATOR, split
from punctual.errors import UndecodableItemError

_ser = TypeSerializer()
_deser = TypeDeserializer()
T = TypeVar("T")


def _num(value: float | int) -> Decimal:
    return Decimal(str(round(value, 3))) if isinstance(value, float) else Decimal(value)


def to_av(values: dict[str, Any]) -> dict[str, Any]:
    """Plain values (numbers, strings, booleans) as attribute values; floats kept to the microsecond."""
    return {
        k: _ser.serialize(_num(v) if isinstance(v, int | float) and not isinstance(v, bool) else v)
        for k, v in values.items()
    }


def from_av(item: dict[str, Any]) -> dict[str, Any]:
    """Attribute values as plain values (numbers come back as Decimal)."""
    return {k: _deser.deserialize(v) for k, v in item.items()}


def text_of(item: dict[str, Any] | None, name: str) -> str | None:
    """A string attribute of a raw item, or None."""
    value = (item or {}).get(name)
    return None if value is None else value.get("S")


def number_of(item: dict[str, Any] | None, name: str) -> int | None:
    """An integral number attribute of a raw item, or None."""
    value = (item or {}).get(name)
    return None if value is None or "N" not in value else _integral(value["N"])


def _integral(text: str) -> int:
    """A number attribute's text as an int: ``int`` first (fast), the Decimal reading for anything else ("1.5"
    is 1, "1e3" is 1000); raises for text that is not a number."""
    try:
        return int(text)
    except ValueError:
        return int(Decimal(text))


MAX_ITEM_BYTES = 400 * 1024  # DynamoDB's limit on one item
ITEM_HEADROOM_BYTES = 8 * 1024  # what the life cycle adds to an item (lease, owner, fire record, detail)


def _number_size(text: str) -> int:
    digits = text.lstrip("+-").lower().split("e")[0].replace(".", "").strip("0")
    return (max(len(digits), 1) + 1) // 2 + 1


def value_size(value: dict[str, Any]) -> int:  # noqa: PLR0911  one return per attribute type, as DynamoDB sizes it
    """Bytes of one attribute value (low-level form, ``{"S": ...}``) by DynamoDB's sizing rules."""
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return _number_size(v)
    if kind == "B":
        return len(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in v)
    if kind == "NS":
        return sum(_number_size(n) for n in v)
    if kind == "BS":
        return sum(len(b) for b in v)
    if kind == "L":
        return 3 + sum(1 + value_size(e) for e in v)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(e) for k, e in v.items())
    raise ValueError(f"unknown attribute type {kind!r}")


def item_size(item: dict[str, Any] | None) -> int:
    """Bytes of an item by DynamoDB's sizing rules: names plus values (0 for no item). The store refuses a task
    whose item would not fit; the cost meter (``punctual_tools.cost``) prices write and read units with it."""
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(v) for name, v in item.items())


def _ms_dt(value: Any) -> Any:
    return None if value is None else from_ms(float(value))


def encode_action(action: Action) -> str:
    return canonical_json(action.stored_fields())


def new_task_item(task: Task, *, due_bucket: str, fast_path: int, created_ms: int) -> dict[str, Any]:
    """The raw item of a new PENDING task (what CREATE puts)."""
    values: dict[str, Any] = {
        "task_id": task.task_id,
        "due_ms": task.due_ms,
        "due_at": task.due_at.isoformat(timespec="milliseconds"),
        "due_bucket": due_bucket,
        "status": TaskStatus.PENDING.value,
        "action": encode_action(task.action),
        "payload": canonical_json(task.payload),
        "content_hash": task.content_hash(),
        "misfire_grace_ms": task.misfire_grace_ms,
        "misfire_policy": task.misfire_policy,
        "occurrence": task.occurrence,
        "attempt": 0,
        "created_ms": created_ms,
        "fast_path": fast_path,
    }
    if task.retry is not None:
        values["retry"] = canonical_json(task.retry.model_dump(mode="json"))
    if task.schedule_id is not None:
        values["schedule_id"] = task.schedule_id
        values["schedule_version"] = task.schedule_version or 1
    tenant_shard = tenant_shard_of(task.task_id)
    if tenant_shard is not None:
        values["tenant"] = split(task.task_id)[0]  # the tenant index (written once, here: no later write changes it)
        # the tenant_active_sharded index while due_bucket is there too (an outcome removes due_bucket)
        values["tenant_shard"] = tenant_shard
    return to_av(values)


def tenant_shard_of(task_id: str) -> str | None:
    """The ``tenant_shard`` of a task's item: its key's tenant's key in the tenant_active_sharded index (None for a
    task of no tenant). What a create writes, and what ``punctual backfill-tenant-shards`` sets on an older item."""
    tenant = split(task_id)[0]
    return None if tenant is None else tenant_active_key(tenant, task_id)


SCHEDULE_PREFIX = "#schedule#"  # a schedule item's key: not a valid task id, so it never collides with one


# Every schedule item's schedule_id: the partition of the schedule index that lists all schedules. No schedule's id
# (SCHEDULE_ID_PATTERN starts with a letter or a digit), so a query of a schedule's occurrences never meets it.
SCHEDULE_REGISTRY = "#schedules"


def schedule_key(schedule_id: str) -> str:
    """The key of a schedule's item: ``#schedule#<id>``, a tenant's ``<tenant>/#schedule#<id>``."""
    tenant, name = split(schedule_id)
    return SCHEDULE_PREFIX + name if tenant is None else f"{tenant}{SEPARATOR}{SCHEDULE_PREFIX}{name}"


def schedule_id_of_key(key: str) -> str | None:
    """The schedule id of a schedule item's key; None for any other key (task ids never hold a ``#``)."""
    head, marker, name = key.partition(SCHEDULE_PREFIX)
    if not marker:
        return None
    return name if not head else head + name  # head is "<tenant>/"


def check_owner(key: str, tenant: Any) -> None:
    """Refuse (ValueError) an item whose ``tenant`` attribute names another tenant than its key: what an item says
    of its owner never overrides the key (the only part IAM confines)."""
    if tenant is not None and tenant != split(key)[0]:
        raise ValueError(f"its tenant attribute {str(tenant)[:64]!r} is not its key's tenant")


def check_registry(schedule_id: Any) -> None:
    """Refuse (ValueError) a schedule item whose ``schedule_id`` is not :data:`SCHEDULE_REGISTRY` (none: written before
    the registry, until its next change or the backfill stamps it): an item listed under a schedule's occurrences
    or anywhere else than the registry is not read as a schedule."""
    if schedule_id is not None and schedule_id != SCHEDULE_REGISTRY:
        raise ValueError(f"its schedule_id {str(schedule_id)[:64]!r} is not the schedules' registry")


def check_schedule_of_occurrence(task_id: str, schedule_id: Any) -> None:
    """Refuse (ValueError) an item whose ``schedule_id`` is not the schedule its key names (an occurrence's key is
    ``<schedule id>@<instant>Z``; a task of its own names none)."""
    named = split_occurrence_id(task_id)
    if schedule_id is not None and (named is None or named[0] != schedule_id):
        raise ValueError(f"its schedule_id {str(schedule_id)[:64]!r} is not the schedule its key names")


def decode(item: dict[str, Any], what: str, read: Callable[[dict[str, Any]], T]) -> T:
    """``read(item)``, or :class:`~punctual.errors.UndecodableItemError` naming the item's key, whatever made reading
    it fail: an item is anyone's writing (a tenant's direct role, a hand, another version), so any exception its
    decoding raises says only that this item is not a ``what`` (decoding does no I/O: nothing else can be at
    fault). Every reader of items decodes through here, so that one bad item is skipped, counted or quarantined
    on its own and never fails a list or a poll."""
    try:
        return read(item)
    except UndecodableItemError:
        raise
    except Exception as exc:
        raise UndecodableItemError(key_of(item), what, exc) from exc


def key_of(item: dict[str, Any] | None) -> str:
    """An item's key as text, whatever the item holds (``"?"`` when it has none)."""
    value = (item or {}).get("task_id")
    key = value.get("S") if isinstance(value, dict) else None
    return key if isinstance(key, str) else "?"


def item_to_task(item: dict[str, Any]) -> Task:
    """Turn a raw (attribute-value) item into a :class:`Task`; :class:`~punctual.errors.UndecodableItemError` (a
    ValueError) naming it if it is not one, or if what it says of its tenant or schedule is not what its key
    says."""
    return decode(item, "task", _item_to_task)


def _item_to_task(item: dict[str, Any]) -> Task:
    v = from_av(item)
    check_owner(v["task_id"], v.get("tenant"))
    check_schedule_of_occurrence(v["task_id"], v.get("schedule_id"))
    return Task(
        task_id=v["task_id"],
        due_at=from_ms(int(v["due_ms"])),
        action=json.loads(v["action"]),
        payload=json.loads(v["payload"]) if "payload" in v else None,
        misfire_grace_ms=int(v.get("misfire_grace_ms", 0)),
        misfire_policy=v.get("misfire_policy", DEFAULT_MISFIRE_POLICY),  # items older than the policy: skip
        occurrence=int(v.get("occurrence", 0)),
        status=TaskStatus(v["status"]),
        attempt=int(v.get("attempt", 0)),
        lease_until=_ms_dt(v.get("lease_until_ms")),
        batch_id=v.get("batch_id"),
        armed_by=v.get("armed_by"),
        created_at=_ms_dt(v.get("created_ms")),
        fired_at=_ms_dt(v.get("fired_ms")),
        finished_at=_ms_dt(v.get("finished_ms")),
        drift_ms=float(v["drift_ms"]) if "drift_ms" in v else None,
        drift_corrected_ms=float(v["drift_corrected_ms"]) if "drift_corrected_ms" in v else None,
        detail=v.get("detail"),
        late=bool(v.get("late", False)),
        retry=json.loads(v["retry"]) if "retry" in v else None,
        first_due_at=_ms_dt(v.get("first_due_ms")),
        schedule_id=v.get("schedule_id"),
        schedule_version=int(v["schedule_version"]) if "schedule_version" in v else None,
    )


def _text(item: dict[str, Any], name: str) -> str:
    value = item[name]["S"]
    if not isinstance(value, str):
        raise TypeError(f"{name} is not a string")
    return value


def _int(item: dict[str, Any], name: str) -> int:
    return _integral(item[name]["N"])


def candidate_of_item(item: dict[str, Any]) -> Candidate | None:
    """The :class:`Candidate` a raw item (or stream image) stands for, or None when the task is no longer active.
    Raises :class:`~punctual.errors.UndecodableItemError` when the item is not a task (an attribute missing or of
    another type, an unknown status or misfire policy, ...: see :func:`decode`).

    Reads the few attributes it needs straight from the attribute values (it runs once per task a poll finds;
    the general :func:`from_av` costs several times as much)."""
    return decode(item, "task", _candidate_of_item)


def _candidate_of_item(item: dict[str, Any]) -> Candidate | None:
    status = TaskStatus(_text(item, "status"))
    if status not in ACTIVE_STATUSES:
        return None
    policy = _text(item, "misfire_policy") if "misfire_policy" in item else DEFAULT_MISFIRE_POLICY
    if policy not in MISFIRE_POLICIES:
        raise ValueError(f"unknown misfire policy {policy!r}")
    task_id = _text(item, "task_id")
    if "tenant" in item:
        check_owner(task_id, _text(item, "tenant"))
    return Candidate(
        task_id=task_id,
        due_ms=_int(item, "due_ms"),
        status=status,
        lease_until_ms=_int(item, "lease_until_ms") if "lease_until_ms" in item else None,
        misfire_grace_ms=_int(item, "misfire_grace_ms") if "misfire_grace_ms" in item else 0,
        misfire_policy=policy,
        owner=_text(item, "armed_by") if status is TaskStatus.ARMED and "armed_by" in item else None,
    )
