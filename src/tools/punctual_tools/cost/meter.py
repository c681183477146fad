"""The capacity meter: each DynamoDB request the code makes, priced in the capacity units DynamoDB bills.

:class:`CapacityMeter` hooks botocore's event system of the DynamoDB client the services use and turns each call
into a :class:`Call` with its write, index-write and read units; item sizes and index changes are read from a
second, uninstrumented client (never from moto's ``ConsumedCapacity``), and the table's keys and indexes from
``template.yaml`` (:class:`TableSpec`).

Capacity rules (DynamoDB developer guide, "DynamoDB read and write operations"; on-demand mode bills the same
units as request units):

* item size = sum over attributes of (UTF-8 length of the name + size of the value): strings and binaries
  their length, numbers ``ceil(significant digits / 2) + 1`` bytes, booleans and nulls 1, lists and maps
  3 + their elements (+ 1 byte each, and the names for maps);
* PutItem / UpdateItem / DeleteItem: ``ceil(max(size before, size after) / 1 KB)`` write units, at least 1; a
  write whose condition fails still costs ``ceil(size of the existing item / 1 KB)``, at least 1;
  TransactWriteItems: twice that for every item (a cancelled transaction: twice the existing sizes);
* a global secondary index costs a write when the write puts an entry in it, removes one, or changes a
  projected attribute (``ceil(entry size / 1 KB)``); a changed index key is a delete plus a put (2 writes);
  the projection is read from ``template.yaml``;
* GetItem / BatchGetItem: ``ceil(item size / 4 KB)`` read units per item (also for an item that does not
  exist), half for an eventually consistent read; a ProjectionExpression does not reduce it;
* Query / Scan: ``ceil(total size of the items evaluated / 4 KB)``, at least 1, half when eventually
  consistent (a GSI is always); the items evaluated are those the key condition matched, before any filter.
"""

from __future__ import annotations

import copy
import json
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from punctual.domain.model import ACTIVE_STATUSES
from punctual.stores.dynamodb.codec import item_size
from punctual.stores.dynamodb.executors import EXECUTOR_PREFIX
from punctual_tools.template import TABLE_RESOURCE, load_template

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

KB, FOUR_KB = 1024, 4096
WRITE_OPS = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"})
READ_OPS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})
ACTIVE = frozenset(status.value for status in ACTIVE_STATUSES)
HEARTBEAT, HEARTBEAT_CHECK = "heartbeat", "heartbeat check"


# == item sizes: punctual.stores.dynamodb.codec.item_size / value_size (the store refuses an item too large with it) ==
def _units(size: int, unit: int) -> int:
    return max(1, math.ceil(size / unit))


# == the table as the template defines it ==================================================================
@dataclass(frozen=True)
class IndexSpec:
    name: str
    keys: tuple[str, ...]
    projection: str  # KEYS_ONLY | INCLUDE | ALL
    non_key: tuple[str, ...] = ()

    def entry(self, item: dict[str, Any] | None, table_keys: tuple[str, ...]) -> dict[str, Any] | None:
        """The item's entry in this index (projected attributes), or None when the item is not in it."""
        if not item or any(k not in item for k in self.keys):
            return None
        if self.projection == "ALL":
            return dict(item)
        names = set(self.keys) | set(table_keys) | (set(self.non_key) if self.projection == "INCLUDE" else set())
        return {k: v for k, v in item.items() if k in names}


@dataclass(frozen=True)
class TableSpec:
    keys: tuple[str, ...]
    indexes: tuple[IndexSpec, ...]

    @classmethod
    def from_template(cls, template_path: str | None = None) -> TableSpec:
        props = load_template(template_path)["Resources"][TABLE_RESOURCE]["Properties"]
        indexes = tuple(
            IndexSpec(
                name=gsi["IndexName"],
                keys=tuple(k["AttributeName"] for k in gsi["KeySchema"]),
                projection=gsi.get("Projection", {}).get("ProjectionType", "KEYS_ONLY"),
                non_key=tuple(gsi.get("Projection", {}).get("NonKeyAttributes", [])),
            )
            for gsi in props.get("GlobalSecondaryIndexes", [])
        )
        return cls(keys=tuple(k["AttributeName"] for k in props["KeySchema"]), indexes=indexes)

    def key_of(self, item: dict[str, Any]) -> dict[str, Any]:
        return {k: item[k] for k in self.keys}

    def index_writes(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, int]:
        """Write units each index costs for one base-table change from ``before`` to ``after``."""
        out: dict[str, int] = {}
        for index in self.indexes:
            old, new = index.entry(before, self.keys), index.entry(after, self.keys)
            if old is None and new is None:
                units = 0
            elif old is None or new is None:
                units = _units(item_size(old or new), KB)
            elif any(old[k] != new[k] for k in index.keys):
                units = _units(item_size(old), KB) + _units(item_size(new), KB)  # delete + put
            elif old != new:
                units = _units(max(item_size(old), item_size(new)), KB)
            else:
                units = 0
            if units:
                out[index.name] = units
        return out


# == the meter =============================================================================================
@dataclass
class Call:
    """One DynamoDB request and the capacity DynamoDB bills for it."""

    op: str
    label: str
    tick: int | None
    ok: bool
    items: int
    wru: float = 0.0  # base table write units
    wru_index: float = 0.0  # global secondary index write units
    rru: float = 0.0
    sizes: list[int] = field(default_factory=list)  # item sizes after a write


def key_id(key: dict[str, Any]) -> str:
    """A hashable spelling of an item key (low-level form), as :attr:`CapacityMeter.items` is keyed."""
    return json.dumps(key, sort_keys=True)


_TOKEN = re.compile(r"[#:][A-Za-z0-9_]+")


def _key_condition_only(params: dict[str, Any]) -> dict[str, Any]:
    """A Query's arguments reduced to what selects the evaluated items: no filter, no projection."""
    out = {
        k: v
        for k, v in params.items()
        if k
        not in (
            "FilterExpression",
            "ProjectionExpression",
            "Select",
            "AttributesToGet",
            "QueryFilter",
            "ScanFilter",
            "ReturnConsumedCapacity",
            "ExpressionAttributeNames",
            "ExpressionAttributeValues",
        )
    }
    used = set(_TOKEN.findall(params.get("KeyConditionExpression", "")))
    names = {k: v for k, v in params.get("ExpressionAttributeNames", {}).items() if k in used}
    values = {k: v for k, v in params.get("ExpressionAttributeValues", {}).items() if k in used}
    if names:
        out["ExpressionAttributeNames"] = names
    if values:
        out["ExpressionAttributeValues"] = values
    return out


class CapacityMeter:
    """Counts the DynamoDB requests of ``client`` and the capacity units each costs.

    Parameters
    ----------
    client:
        The boto3 DynamoDB client the code under test uses (its events are hooked).
    raw:
        A second client on the same store, not hooked: item snapshots and re-runs of queries go through it.
    table_name, spec:
        The table counted, and its keys and indexes (from the template).
    label:
        ``label(before, after)`` names a write by the item and status change it made (``None``: the current
        phase).
    read_label:
        ``read_label(keys)`` names a read by the keys it asks for (``None``: the current phase).
    hold:
        ``hold(op, before_items)`` is called before each write is sent; it may block (the scenario holds
        outcome writes until simulated time reaches the task's due instant).
    """

    def __init__(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
        self,
        client: DynamoDBClient,
        raw: DynamoDBClient,
        table_name: str,
        spec: TableSpec,
        *,
        label: Callable[[dict[str, Any] | None, dict[str, Any] | None], str | None] | None = None,
        hold: Callable[[str, list[dict[str, Any] | None]], None] | None = None,
        read_label: Callable[[list[dict[str, Any]]], str | None] | None = None,
    ) -> None:
        self._client, self._raw, self.table, self.spec = client, raw, table_name, spec
        self._label = label or (lambda before, after: None)
        self._read_label = read_label or (lambda keys: None)
        self._hold = hold
        self.phase = "other"
        self.tick: int | None = None
        self.calls: list[Call] = []
        self.items: dict[str, dict[str, Any] | None] = {}  # last known state of each item written
        self._lock = threading.Lock()

    def __enter__(self) -> CapacityMeter:
        events = self._client.meta.events
        events.register("before-parameter-build.dynamodb", self._before, unique_id="punctual-cost-before")
        events.register("after-call.dynamodb", self._after, unique_id="punctual-cost-after")
        return self

    def __exit__(self, *exc: object) -> None:
        events = self._client.meta.events
        events.unregister("before-parameter-build.dynamodb", unique_id="punctual-cost-before")
        events.unregister("after-call.dynamodb", unique_id="punctual-cost-after")

    # -- item state ----------------------------------------------------------------------------------------
    def _fetch(self, key: dict[str, Any]) -> dict[str, Any] | None:
        return self._raw.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")

    def cached(self, key: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
        """(known, item): the item as last seen through the meter."""
        kid = key_id(key)
        with self._lock:
            return (True, self.items[kid]) if kid in self.items else (False, None)

    def item(self, key: dict[str, Any]) -> dict[str, Any] | None:
        """The item as last written through the meter (else read from the store)."""
        known, found = self.cached(key)
        if known:
            return found
        found = self._fetch(key)
        with self._lock:
            self.items.setdefault(key_id(key), found)
        return found

    def _remember(self, key: dict[str, Any], item: dict[str, Any] | None) -> None:
        with self._lock:
            self.items[key_id(key)] = item

    # -- hooks ---------------------------------------------------------------------------------------------
    def _write_keys(self, op: str, params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """(kind, key) of every item of this table a write request touches."""
        keys: list[tuple[str, dict[str, Any]]] = []
        if op in ("PutItem", "UpdateItem", "DeleteItem"):
            if params.get("TableName") == self.table:
                key = self.spec.key_of(params["Item"]) if op == "PutItem" else params["Key"]
                keys.append((op, key))
        elif op == "TransactWriteItems":
            for entry in params.get("TransactItems", []):
                ((kind, body),) = entry.items()
                if body.get("TableName") == self.table:
                    keys.append((kind, self.spec.key_of(body["Item"]) if kind == "Put" else body["Key"]))
        elif op == "BatchWriteItem":
            for request in params.get("RequestItems", {}).get(self.table, []):
                ((kind, body),) = request.items()
                keys.append((kind, self.spec.key_of(body["Item"]) if kind == "PutRequest" else body["Key"]))
        return keys

    def _create_only(self, op: str, params: dict[str, Any]) -> bool:
        """A PutItem conditioned on ``attribute_not_exists(<key>)``: if it succeeds there was no item before,
        and if it fails the item is unchanged (so its state can be read afterwards)."""
        condition = params.get("ConditionExpression", "") if op == "PutItem" else ""
        return any(f"attribute_not_exists({k})" in condition.replace(" ", "") for k in self.spec.keys)

    def _before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        op = model.name
        state: dict[str, Any] = {"op": op, "params": copy.deepcopy(params), "phase": self.phase, "tick": self.tick}
        if op in WRITE_OPS:
            keys = self._write_keys(op, params)
            state["keys"] = keys
            deferred = self._create_only(op, params)
            state["before"] = [self.cached(key) if deferred else (True, self.item(key)) for _, key in keys]
            if self._hold is not None:
                self._hold(op, [item for _, item in state["before"]])
                state["phase"], state["tick"] = self.phase, self.tick  # the write goes out now
        context["punctual_cost"] = state

    def _after(self, http_response: Any, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        state = context.get("punctual_cost")
        if state is None:
            return
        op, params = state["op"], state["params"]
        error = (parsed.get("Error") or {}).get("Code")
        ok = error is None and http_response.status_code < HTTPStatus.MULTIPLE_CHOICES
        if op in WRITE_OPS:
            call = self._count_write(state, ok, error, parsed)
        elif op in READ_OPS and ok:
            call = self._count_read(op, params, parsed, state)
        else:
            call = Call(op, state["phase"], state["tick"], ok, 0)
        with self._lock:
            self.calls.append(call)

    # -- writes --------------------------------------------------------------------------------------------
    def _images(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
        self,
        op: str,
        kind: str,
        key: dict[str, Any],
        known: bool,
        before: dict[str, Any] | None,
        *,
        ok: bool,
        params: dict[str, Any],
        parsed: dict[str, Any],
    ) -> tuple[Any, Any]:
        """(before, after) of one item of a write, from what the response already holds where it can
        (the put item, ALL_NEW attributes, the ALL_OLD item of a failed condition), else from the store."""
        single = op in ("PutItem", "UpdateItem", "DeleteItem")
        if not ok:
            if single and "Item" in parsed:  # ReturnValuesOnConditionCheckFailure=ALL_OLD: the unchanged item
                current = parsed["Item"]
            elif known:
                current = before
            else:
                current = self._fetch(key)
            self._remember(key, current)
            return current, current
        if not known:  # a create-only PutItem that succeeded: nothing was there
            before = None
        if kind == "ConditionCheck":
            return before, before
        if op == "PutItem":
            after: dict[str, Any] | None = params["Item"]
        elif op == "DeleteItem" or kind in ("Delete", "DeleteRequest"):
            after = None
        elif op == "UpdateItem" and params.get("ReturnValues") == "ALL_NEW" and "Attributes" in parsed:
            after = parsed["Attributes"]
        else:
            after = self._fetch(key)
        self._remember(key, after)
        return before, after

    def _count_write(self, state: dict[str, Any], ok: bool, error: str | None, parsed: dict[str, Any]) -> Call:
        op, keys, befores, params = state["op"], state["keys"], state["before"], state["params"]
        factor = 2 if op == "TransactWriteItems" else 1
        unprocessed: set[str] = set()
        if op == "BatchWriteItem":
            for request in parsed.get("UnprocessedItems", {}).get(self.table, []):
                ((kind, body),) = request.items()
                unprocessed.add(key_id(self.spec.key_of(body["Item"]) if kind == "PutRequest" else body["Key"]))
        conditional_failure = error in ("ConditionalCheckFailedException", "TransactionCanceledException")
        labels: list[str] = []
        call = Call(op, state["phase"], state["tick"], ok, len(keys))
        for (kind, key), (known, cached) in zip(keys, befores, strict=True):
            if key_id(key) in unprocessed or not (ok or conditional_failure):
                continue
            before, after = self._images(op, kind, key, known, cached, ok=ok, params=params, parsed=parsed)
            if ok:
                call.wru += factor * _units(max(item_size(before), item_size(after)), KB)
                call.wru_index += sum(self.spec.index_writes(before, after).values())
                call.sizes.append(item_size(after))
                name = self._label(before, after)
                if name:
                    labels.append(name)
            else:
                call.wru += factor * _units(item_size(before), KB)
        if labels and len(set(labels)) == 1:
            call.label = labels[0]
        return call

    # -- reads ---------------------------------------------------------------------------------------------
    def _count_read(self, op: str, params: dict[str, Any], parsed: dict[str, Any], state: dict[str, Any]) -> Call:
        call = Call(op, state["phase"], state["tick"], True, 0)
        if op == "GetItem":
            if params.get("TableName") == self.table:
                half = 1.0 if params.get("ConsistentRead") else 0.5
                call.items = 1
                call.rru = half * _units(item_size(self.item(params["Key"])), FOUR_KB)
                call.label = self._read_label([params["Key"]]) or call.label
        elif op == "BatchGetItem":
            request = params.get("RequestItems", {}).get(self.table)
            if request:
                call.label = self._read_label(request["Keys"]) or call.label
                half = 1.0 if request.get("ConsistentRead") else 0.5
                left = {key_id(k) for k in parsed.get("UnprocessedKeys", {}).get(self.table, {}).get("Keys", [])}
                for key in request["Keys"]:
                    if key_id(key) not in left:
                        call.items += 1
                        call.rru += half * _units(item_size(self.item(key)), FOUR_KB)
        elif op in ("Query", "Scan") and params.get("TableName") == self.table:
            half = 0.5 if params.get("IndexName") or not params.get("ConsistentRead") else 1.0
            rerun = getattr(self._raw, "query" if op == "Query" else "scan")(**_key_condition_only(params))
            call.items = len(rerun.get("Items", []))
            call.rru = half * _units(sum(item_size(i) for i in rerun.get("Items", [])), FOUR_KB)
        return call


def _is_heartbeat(item: dict[str, Any] | None) -> bool:
    task_id = (item or {}).get("task_id", {}).get("S")
    return isinstance(task_id, str) and task_id.startswith(EXECUTOR_PREFIX)


def status_label(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str | None:
    """The life-cycle step a write made, by the task status before and after it; an executor's heartbeat
    item (``#executor#<id>``) is ``"heartbeat"`` (None: not a task change)."""
    if _is_heartbeat(after) or _is_heartbeat(before):
        return HEARTBEAT
    old = (before or {}).get("status", {}).get("S")
    new = (after or {}).get("status", {}).get("S")
    if new is None or old == new:
        return None
    return _step(old, new)


def _step(old: str | None, new: str) -> str | None:
    """The life-cycle step of a task whose status went from ``old`` (None: a new item) to ``new``."""
    if old is None:
        return "schedule"
    if new == "ARMED":
        return "arm"
    if old == "ARMED" and new not in ACTIVE:
        return "record"
    if new == "MISSED":
        return "miss"
    return None


def heartbeat_read_label(keys: list[dict[str, Any]]) -> str | None:
    """``"heartbeat check"`` for a read of executors' heartbeat items only (the poller asking whether the
    owners of the ARMED tasks it found are alive); None otherwise."""
    if keys and all(_is_heartbeat(key) for key in keys):
        return HEARTBEAT_CHECK
    return None
