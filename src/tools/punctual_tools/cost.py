"""What a task costs in AWS, from the requests the code really makes (counted on moto, not estimated).

Three parts:

* :class:`CapacityMeter` hooks botocore's event system of the DynamoDB client the services use and turns each
  call into the capacity units DynamoDB bills for it (on-demand rules, below), with the item sizes and index
  changes read from a second, uninstrumented client (never from moto's ``ConsumedCapacity``).
* :func:`run_scenario` schedules tasks through :class:`~punctual.client.Client`, runs the real poller every
  ``poll_interval`` of a simulated clock and every batch it hands over through the real executor, and counts
  everything per task and per poll tick.
* :func:`monthly_cost` prices the counts at a monthly volume (DynamoDB, Lambda, storage, observability),
  next to EventBridge Scheduler and Step Functions; :func:`render` writes the generated part of
  ``docs/cost.md``.

``python -m punctual_tools.cost`` prints the generated block; ``--write docs/cost.md`` replaces it in the doc.

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

import argparse
import copy
import json
import math
import re
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from punctual import metrics as metric_names
from punctual.dynamodb.schema import TABLE_RESOURCE, find_template, load_template

# -- prices: us-east-1, public price pages as of 2025 ----------------------------------------------------
PRICES_AS_OF = "us-east-1 list prices (AWS pricing pages, 2025; DynamoDB on-demand after the November 2024 cut)"
DDB_WRU_USD = 0.625 / 1e6  # per write request unit, on-demand, standard table class
DDB_RRU_USD = 0.125 / 1e6  # per read request unit
DDB_STORAGE_GB_MONTH_USD = 0.25  # standard table class (the first 25 GB a month are free: ignored)
DDB_PITR_GB_MONTH_USD = 0.20  # continuous backups (the template enables point-in-time recovery)
DDB_ITEM_OVERHEAD_BYTES = 100  # DynamoDB's per-item storage overhead
LAMBDA_GB_S_ARM_USD = 0.0000133334  # arm64, first 6 billion GB-s a month
LAMBDA_REQUEST_USD = 0.20 / 1e6
CW_LOGS_INGEST_GB_USD = 0.50
CW_CUSTOM_METRIC_MONTH_USD = 0.30  # first 10,000 metrics; EMF metrics are custom metrics
CW_DASHBOARD_MONTH_USD = 3.00
CW_ALARM_MONTH_USD = 0.10  # standard resolution; high resolution is 0.30
CW_ALARM_HIGH_RES_MONTH_USD = 0.30
XRAY_TRACE_USD = 5.00 / 1e6  # traces recorded (the first 100,000 a month are free: ignored)
EVENTBRIDGE_SCHEDULER_PER_INVOCATION_USD = 1.00 / 1e6
STEP_FUNCTIONS_PER_TRANSITION_USD = 25.0 / 1e6  # standard workflows ($0.025 per 1,000)
STEP_FUNCTIONS_TRANSITIONS = (3, 4)  # Wait + action Task (+ end) ... + a Choice/Pass: per task

# -- assumptions the counts cannot give (latencies in AWS, not on moto) -----------------------------------
DDB_LATENCY_S = 0.006  # one DynamoDB request from Lambda, same region
INVOKE_LATENCY_S = 0.025  # one async Lambda invoke call
POLLER_OVERHEAD_S = 0.05  # handler, logging and metrics flush per poll
RECORD_TAIL_S = 0.25  # executor: after the last fire, the settle gap (0.2 s) and the last record writes
AHEAD_DAYS = 1.0  # how long a task waits in the table before it is due (storage while pending)
MONTH_MS = 30 * 86_400_000
TARGET_USD_PER_MILLION = 5.0

SCENARIO_START_MS = 1_906_027_207_000  # 2030-05-26T12:00:07Z: poll ticks 7 s past the minute
KB, FOUR_KB = 1024, 4096
WRITE_OPS = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"})
READ_OPS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})
ACTIVE = frozenset({"PENDING", "CLAIMED", "ARMED"})
BEGIN_MARK = "<!-- BEGIN GENERATED BY `python -m punctual_tools.cost` (make cost): do not edit by hand -->"
END_MARK = "<!-- END GENERATED -->"


# == item sizes ============================================================================================
def _number_size(text: str) -> int:
    digits = text.lstrip("+-").lower().split("e")[0].replace(".", "").strip("0")
    return (max(len(digits), 1) + 1) // 2 + 1


def value_size(value: dict[str, Any]) -> int:
    """Bytes of one attribute value (low-level form, ``{"S": ...}``) by DynamoDB's sizing rules."""
    (kind, v), = value.items()
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
    """Bytes of an item: names plus values (0 for no item)."""
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(v) for name, v in item.items())


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


def _key_id(key: dict[str, Any]) -> str:
    return json.dumps(key, sort_keys=True)


_TOKEN = re.compile(r"[#:][A-Za-z0-9_]+")


def _key_condition_only(params: dict[str, Any]) -> dict[str, Any]:
    """A Query's arguments reduced to what selects the evaluated items: no filter, no projection."""
    out = {k: v for k, v in params.items()
           if k not in ("FilterExpression", "ProjectionExpression", "Select", "AttributesToGet", "QueryFilter",
                        "ScanFilter", "ReturnConsumedCapacity", "ExpressionAttributeNames",
                        "ExpressionAttributeValues")}
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
        ``label(before, after)`` names a write by the status change it made (``None``: the current phase).
    hold:
        ``hold(op, before_items)`` is called before each write is sent; it may block (the scenario holds
        outcome writes until simulated time reaches the task's due instant).
    """

    def __init__(self, client: Any, raw: Any, table_name: str, spec: TableSpec,
                 label: Callable[[dict[str, Any] | None, dict[str, Any] | None], str | None] | None = None,
                 hold: Callable[[str, list[dict[str, Any] | None]], None] | None = None) -> None:
        self._client, self._raw, self.table, self.spec = client, raw, table_name, spec
        self._label = label or (lambda before, after: None)
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
        kid = _key_id(key)
        with self._lock:
            return (True, self.items[kid]) if kid in self.items else (False, None)

    def item(self, key: dict[str, Any]) -> dict[str, Any] | None:
        """The item as last written through the meter (else read from the store)."""
        known, found = self.cached(key)
        if known:
            return found
        found = self._fetch(key)
        with self._lock:
            self.items.setdefault(_key_id(key), found)
        return found

    def _remember(self, key: dict[str, Any], item: dict[str, Any] | None) -> None:
        with self._lock:
            self.items[_key_id(key)] = item

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
                (kind, body), = entry.items()
                if body.get("TableName") == self.table:
                    keys.append((kind, self.spec.key_of(body["Item"]) if kind == "Put" else body["Key"]))
        elif op == "BatchWriteItem":
            for request in params.get("RequestItems", {}).get(self.table, []):
                (kind, body), = request.items()
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

    def _after(self, http_response: Any, parsed: dict[str, Any], model: Any, context: dict[str, Any],
               **_: Any) -> None:
        state = context.get("punctual_cost")
        if state is None:
            return
        op, params = state["op"], state["params"]
        error = (parsed.get("Error") or {}).get("Code")
        ok = error is None and http_response.status_code < 300
        if op in WRITE_OPS:
            call = self._count_write(state, ok, error, parsed)
        elif op in READ_OPS and ok:
            call = self._count_read(op, params, parsed, state)
        else:
            call = Call(op, state["phase"], state["tick"], ok, 0)
        with self._lock:
            self.calls.append(call)

    # -- writes --------------------------------------------------------------------------------------------
    def _images(self, op: str, kind: str, key: dict[str, Any], known: bool, before: dict[str, Any] | None,
                ok: bool, params: dict[str, Any], parsed: dict[str, Any]) -> tuple[Any, Any]:
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
                (kind, body), = request.items()
                unprocessed.add(_key_id(self.spec.key_of(body["Item"]) if kind == "PutRequest" else body["Key"]))
        conditional_failure = error in ("ConditionalCheckFailedException", "TransactionCanceledException")
        labels: list[str] = []
        call = Call(op, state["phase"], state["tick"], ok, len(keys))
        for (kind, key), (known, cached) in zip(keys, befores, strict=True):
            if _key_id(key) in unprocessed or not (ok or conditional_failure):
                continue
            before, after = self._images(op, kind, key, known, cached, ok, params, parsed)
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
        elif op == "BatchGetItem":
            request = params.get("RequestItems", {}).get(self.table)
            if request:
                half = 1.0 if request.get("ConsistentRead") else 0.5
                left = {_key_id(k) for k in parsed.get("UnprocessedKeys", {}).get(self.table, {}).get("Keys", [])}
                for key in request["Keys"]:
                    if _key_id(key) not in left:
                        call.items += 1
                        call.rru += half * _units(item_size(self.item(key)), FOUR_KB)
        elif op in ("Query", "Scan") and params.get("TableName") == self.table:
            half = 0.5 if params.get("IndexName") or not params.get("ConsistentRead") else 1.0
            rerun = getattr(self._raw, "query" if op == "Query" else "scan")(**_key_condition_only(params))
            call.items = len(rerun.get("Items", []))
            call.rru = half * _units(sum(item_size(i) for i in rerun.get("Items", [])), FOUR_KB)
        return call


def status_label(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str | None:
    """The life-cycle step a write made, by the task status before and after it (None: not a task change)."""
    old = (before or {}).get("status", {}).get("S")
    new = (after or {}).get("status", {}).get("S")
    if new is None or old == new:
        return None
    if old is None:
        return "schedule"
    if new == "CLAIMED":
        return "claim"
    if new == "ARMED":
        return "arm"
    if old == "ARMED" and new not in ACTIVE:
        return "record"
    if new == "MISSED":
        return "miss"
    return None


# == the scenario ==========================================================================================
class _ReplayClock:
    """The executor's clock: the machine's clocks, with the wall clock moved by ``shift_ms`` (set per batch)."""

    def __init__(self) -> None:
        self.shift_ms = 0.0

    def wall_ms(self) -> float:
        return time.time_ns() / 1_000_000 + self.shift_ms

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class _FixedClock:
    def __init__(self, wall_ms: float) -> None:
        self.now_ms = wall_ms

    def wall_ms(self) -> float:
        return self.now_ms

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))


class _MeasuredOffset:
    """An NTP probe that has measured a small offset (so drift is also recorded corrected, as in AWS)."""

    def current(self) -> Any:
        from punctual.clock import ClockOffset

        return ClockOffset(0.4, "stub")


class _RecordingInvoker:
    """Stands in for Lambda async invoke: one invocation per call, payload kept."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []

    def invoke_async(self, payload: dict[str, Any]) -> None:
        self.payloads.append(payload)


class _Target:
    """A local HTTP endpoint answering 200 to every POST (the tasks' action target)."""

    def __init__(self) -> None:
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 128  # a burst of fires must not meet a full listen backlog

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/publish"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class BatchRun:
    tick: int
    invoked_ms: int
    tasks: int
    first_due_ms: int
    last_due_ms: int
    payload_bytes: int


@dataclass
class Scenario:
    """What a scenario run counted."""

    tasks: int
    windows: int
    start_ms: int
    payload_bytes: int
    settings: dict[str, Any]
    calls: list[Call]
    ticks: int
    baseline_ticks: list[int]
    work_ticks: list[int]
    batches: list[BatchRun]
    outcomes: dict[str, int]
    final_item_bytes: float
    max_item_bytes: int
    poll_wall_s: list[float]
    logs: LogBytes = field(default_factory=lambda: LOG_BYTES_UNMEASURED)


class _Gate:
    """Holds outcome writes (writes to an ARMED task) until simulated time reaches the task's due instant."""

    def __init__(self, settle_ms: int) -> None:
        self.world_ms = 0
        self.settle_ms = settle_ms
        self.held: dict[int, set[str]] = {}
        self._cond = threading.Condition()

    def hold(self, op: str, befores: list[dict[str, Any] | None]) -> None:
        armed = [b for b in befores if b and b.get("status", {}).get("S") == "ARMED"]
        if not armed:
            return
        release_at = max(int(b["due_ms"]["N"]) for b in armed) + self.settle_ms
        ids = {b["task_id"]["S"] for b in armed}
        me = threading.get_ident()
        with self._cond:
            self.held[me] = ids
            self._cond.wait_for(lambda: self.world_ms >= release_at)
            del self.held[me]

    def advance(self, world_ms: int) -> None:
        with self._cond:
            self.world_ms = world_ms
            self._cond.notify_all()

    def held_ids(self) -> set[str]:
        with self._cond:
            return {t for ids in self.held.values() for t in ids}


def _recorded_or_held(task_ids: list[str], due_times: list[int], until_ms: int,
                      status: Callable[[str], str | None], held: set[str]) -> bool:
    """Every task due by ``until_ms`` has its outcome written, or its outcome write is held by the gate."""
    return all(status(t) not in ACTIVE or t in held
               for t, due in zip(task_ids, due_times, strict=False) if due <= until_ms)


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"scenario: timed out waiting for {what}")
        time.sleep(0.05)


def run_scenario(tasks: int = 300, windows: int = 1, payload_bytes: int = 200,
                 template_path: str | None = None, measure_logs: bool = True) -> Scenario:
    """Count what ``tasks`` one-off HTTP tasks cost, end to end, on moto.

    Timeline (simulated, poll interval ``I`` and lead ``L`` from the default settings): poll ticks every
    ``I``; tick 0 has no watermark yet (set-up, not counted); the client schedules every task just after it,
    due evenly over ``windows`` poll windows starting 3 ticks later (ticks 1-2 are empty: the fixed cost of a
    poll); the run goes on until two empty ticks follow the last task. After each tick every batch the poller
    handed over runs in an executor of its own (a Lambda container, reused when idle) and arms at once; its
    outcome writes are held until simulated time reaches the task's due instant (plus the recorder's settle
    gap), so the next ticks see the tasks still ARMED exactly as they would in AWS. The executor's clock is
    moved to the batch's last due instant, so a batch fires as one burst in real time; tasks carry a
    5-minute grace so that the burst's drift (up to one poll interval) still records SUCCEEDED.
    """
    import os

    import boto3
    from moto import mock_aws

    from punctual.client import Client
    from punctual.dynamodb.schema import ensure_table
    from punctual.executor import Executor
    from punctual.model import HttpAction
    from punctual.poller import Poller
    from punctual.recorder import SETTLE_S
    from punctual.runtime import build_store
    from punctual.settings import Settings

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "testing")
    table = "punctual-cost"
    settings = Settings(table_name=table, ntp_server=None, worker_threads=1)
    interval, lead = settings.poll_interval_ms, settings.lead_ms
    spec = TableSpec.from_template(template_path)
    t0 = SCENARIO_START_MS
    first_due = t0 + 3 * interval + (lead - interval)  # the first instant tick 3 is the first to reach
    span = windows * interval
    due_times = [first_due + int((i + 0.5) * span / tasks) for i in range(tasks)]
    last_tick = (due_times[-1] + int(SETTLE_S * 1000) - t0) // interval + 3
    gate = _Gate(settle_ms=int(SETTLE_S * 1000))
    log_level = str(load_template(template_path).get("Parameters", {}).get("LogLevel", {}).get("Default", "INFO"))
    log_measurement = _start_log_measurement(log_level) if measure_logs else None
    target = _Target()
    executors: list[tuple[Executor, _ReplayClock, list[bool]]] = []
    threads: list[threading.Thread] = []
    batches: list[BatchRun] = []
    poll_wall: list[float] = []
    try:
        with mock_aws():
            client = boto3.client("dynamodb", region_name=settings.region)
            raw = boto3.client("dynamodb", region_name=settings.region)
            ensure_table(raw, table)
            invoker = _RecordingInvoker()
            poller = Poller(build_store(settings, client), invoker, settings, poller_id="p-cost")
            clock = _FixedClock(t0)
            scheduler = Client(settings, dynamodb=client, clock=clock)
            action = HttpAction(url=target.url())
            with CapacityMeter(client, raw, table, spec, label=status_label, hold=gate.hold) as meter:

                def run_batch(entry: tuple[Executor, _ReplayClock, list[bool]], payload: dict[str, Any]) -> None:
                    from punctual.events import BatchEvent

                    executor, replay, busy = entry
                    event = BatchEvent.model_validate(payload)
                    replay.shift_ms = max(t.due_ms for t in event.tasks) + 1 - time.time_ns() / 1_000_000
                    try:
                        executor.run_batch(event)
                    finally:
                        busy[0] = False

                def container() -> tuple[Executor, _ReplayClock, list[bool]]:
                    for entry in executors:
                        if not entry[2][0]:
                            entry[2][0] = True
                            return entry
                    replay = _ReplayClock()
                    entry = (Executor(build_store(settings, client), settings, replay,
                                      _MeasuredOffset()),  # type: ignore[arg-type]
                             replay, [True])
                    executors.append(entry)
                    return entry

                key_ids: dict[str, str] = {}

                def status(task_id: str) -> str | None:
                    kid = key_ids.get(task_id) or key_ids.setdefault(task_id, _key_id({"task_id": {"S": task_id}}))
                    item = meter.items.get(kid)
                    return None if item is None else item.get("status", {}).get("S")

                task_ids: list[str] = []
                for tick in range(last_tick + 1):
                    now = t0 + tick * interval
                    gate.advance(now)
                    _wait(lambda now=now: _recorded_or_held(task_ids, due_times, now - gate.settle_ms, status,
                                                            gate.held_ids()), "outcomes due before the tick")
                    meter.phase, meter.tick = ("setup" if tick == 0 else "poll"), tick
                    started = time.perf_counter()
                    poller.poll(now)
                    poll_wall.append(time.perf_counter() - started)
                    meter.phase = "execute"
                    sent, invoker.payloads = invoker.payloads, []
                    for payload in sent:
                        dues = [t["due_ms"] for t in payload["tasks"]]
                        batches.append(BatchRun(tick, now, len(dues), min(dues), max(dues),
                                                len(json.dumps(payload).encode())))
                        thread = threading.Thread(target=run_batch, args=(container(), payload), daemon=True)
                        thread.start()
                        threads.append(thread)
                    claimed = [t["task_id"] for p in sent for t in p["tasks"]]
                    _wait(lambda claimed=claimed: all(status(t) != "CLAIMED" for t in claimed), "arming")
                    if tick == 0:  # schedule just after the first poll
                        meter.phase = "schedule"
                        clock.now_ms = now + 1_000
                        for i, due in enumerate(due_times):
                            payload = {"video": f"v-{i:06d}", "n": i, "note": ""}
                            pad = payload_bytes - len(json.dumps(payload, separators=(",", ":")))
                            payload["note"] = "x" * max(pad, 0)
                            task = scheduler.schedule(_from_ms(due), action, payload, task_id=f"cost-{i:06d}",
                                                      misfire_grace=300_000)
                            task_ids.append(task.task_id)
                gate.advance(2**62)
                for thread in threads:
                    thread.join(timeout=30)
                final = [meter.item({"task_id": {"S": t}}) for t in task_ids]
            for executor, _, _ in executors:
                executor.request_stop()
    finally:
        target.close()
        logs = LOG_BYTES_UNMEASURED if log_measurement is None else _finish_log_measurement(log_measurement)
    outcomes: dict[str, int] = defaultdict(int)
    for item in final:
        outcomes[(item or {}).get("status", {}).get("S", "GONE")] += 1
    sizes = [item_size(i) for i in final]
    baseline = [1, 2]
    return Scenario(
        tasks=tasks, windows=windows, start_ms=t0, payload_bytes=payload_bytes,
        settings={"shard_count": settings.shard_count, "lead_ms": lead, "poll_interval_ms": interval,
                  "max_batch_size": settings.max_batch_size, "retention_days": settings.retention_days,
                  "db_threads": settings.db_threads, "overdue_safety_ms": settings.overdue_safety_ms},
        calls=list(meter.calls), ticks=last_tick + 1, baseline_ticks=baseline,
        work_ticks=list(range(3, last_tick + 1)), batches=batches, outcomes=dict(outcomes),
        final_item_bytes=sum(sizes) / len(sizes), max_item_bytes=max(c for call in meter.calls for c in call.sizes),
        poll_wall_s=poll_wall, logs=logs,
    )


def _from_ms(ms: int) -> Any:
    from punctual.keys import from_ms

    return from_ms(ms)


# == turning counts into per-task and per-tick figures =====================================================
@dataclass(frozen=True)
class Row:
    step: str
    op: str
    requests: float
    wru: float
    wru_index: float
    rru: float


PHASE_ORDER = ("schedule", "poll", "claim", "arm", "record", "execute", "miss")


def _rows(calls: Iterable[Call], divide: float) -> list[Row]:
    acc: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for c in calls:
        a = acc[(c.label, c.op)]
        a[0] += 1
        a[1] += c.wru
        a[2] += c.wru_index
        a[3] += c.rru
    order = {p: i for i, p in enumerate(PHASE_ORDER)}
    return [Row(label, op, *(v / divide for v in values))
            for (label, op), values in sorted(acc.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1]))]


@dataclass(frozen=True)
class Counts:
    """Per task (variable) and per poll tick (fixed) figures of a scenario."""

    per_task: list[Row]
    per_tick: list[Row]
    scenario: Scenario

    @property
    def task_wru(self) -> float:
        return sum(r.wru + r.wru_index for r in self.per_task)

    @property
    def task_rru(self) -> float:
        return sum(r.rru for r in self.per_task)

    @property
    def tick_wru(self) -> float:
        return sum(r.wru + r.wru_index for r in self.per_tick)

    @property
    def tick_rru(self) -> float:
        return sum(r.rru for r in self.per_tick)

    @property
    def tick_requests(self) -> float:
        return sum(r.requests for r in self.per_tick)

    def task_requests(self, *steps: str) -> float:
        return sum(r.requests for r in self.per_task if not steps or r.step in steps)


def counts(s: Scenario) -> Counts:
    """Per-tick fixed cost = the mean of the empty ticks; per task = everything else, minus that fixed cost
    for every tick of the working span, divided by the number of tasks."""
    base = [c for c in s.calls if c.tick in s.baseline_ticks and c.label == "poll"]
    per_tick = _rows(base, len(s.baseline_ticks))
    work = [c for c in s.calls if c.label != "setup" and (c.tick is None or c.tick not in s.baseline_ticks)]
    rows = _rows(work, s.tasks)
    fixed = {(r.step, r.op): r for r in per_tick}
    n_work = len(s.work_ticks)
    out: list[Row] = []
    for r in rows:
        f = fixed.get((r.step, r.op))
        if f is not None:
            r = Row(r.step, r.op, *(max(0.0, v - n_work * fv / s.tasks) for v, fv in
                                    ((r.requests, f.requests), (r.wru, f.wru), (r.wru_index, f.wru_index),
                                     (r.rru, f.rru))))
        if r.requests > 1e-9 or r.wru or r.rru:
            out.append(r)
    return Counts(out, per_tick, s)


# == the monthly model =====================================================================================
def _template_param(name: str, default: float, template_path: str | None = None) -> float:
    params = load_template(template_path).get("Parameters", {})
    return float(params.get(name, {}).get("Default", default))


def _memory_mb(function: str, default: int, template_path: str | None = None) -> int:
    resources = load_template(template_path)["Resources"]
    value = resources.get(function, {}).get("Properties", {}).get("MemorySize", default)
    if isinstance(value, dict) and "Ref" in value:
        return int(_template_param(value["Ref"], default, template_path))
    return int(value)


def executor_seconds_per_tick(n: float, max_batch: int, lead_ms: int, interval_ms: int) -> tuple[float, float]:
    """(executor invocations, executor seconds) per poll tick holding ``n`` tasks due at random over the
    tick's window of due times. The poller cuts the window's tasks in due order into batches of at most
    ``max_batch``; each batch's executor lives from the tick to its last due instant (the k-th of n uniform
    instants falls at k / (n + 1) of the window on average) plus the record tail."""
    if n <= 0:
        return 0.0, 0.0
    head = (lead_ms - interval_ms) / 1000
    window = interval_ms / 1000
    if n < 1:  # a tick holds a task with probability 1 - e^-n; a lone task is due mid-window on average
        p = 1 - math.exp(-n)
        return p, p * (head + window / 2 + RECORD_TAIL_S)
    b = math.ceil(n / max_batch)
    seconds = sum(head + window * min(i * max_batch, n) / (n + 1) + RECORD_TAIL_S for i in range(1, b + 1))
    return float(b), seconds


@dataclass(frozen=True)
class Line:
    item: str
    usd: float  # per month
    kind: str  # "per task" | "fixed"
    in_target: bool = True


@dataclass(frozen=True)
class Month:
    tasks: float
    lines: list[Line]

    def usd(self, in_target: bool | None = True) -> float:
        return sum(x.usd for x in self.lines if in_target is None or x.in_target == in_target)

    def per_million(self, in_target: bool | None = True) -> float:
        return self.usd(in_target) / (self.tasks / 1e6)


# == CloudWatch Logs: what the handlers print, measured ====================================================
LAMBDA_PLATFORM_LOG_BYTES = 450  # START, END and REPORT lines of one invocation (text format, with X-Ray ids)
LOG_EVENT_OVERHEAD_BYTES = 26  # CloudWatch Logs counts 26 bytes per log event on top of the message
LOG_SAMPLE_TASKS = (1, 41)  # batch sizes the measurement runs; the difference gives the per-task bytes


@dataclass(frozen=True)
class LogBytes:
    """Bytes ingested by CloudWatch Logs (lines + 26 bytes each + Lambda's platform lines)."""

    per_poll: float
    per_batch: float
    per_task: float
    measured: bool


LOG_BYTES_UNMEASURED = LogBytes(per_poll=0.0, per_batch=0.0, per_task=0.0, measured=False)


def _lambda_context(function_name: str) -> Any:
    import uuid

    class Context:
        memory_limit_in_mb = 256
        function_version = "$LATEST"

        def __init__(self) -> None:
            self.function_name = function_name
            self.aws_request_id = str(uuid.uuid4())
            self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"

        def get_remaining_time_in_millis(self) -> int:
            return 300_000

    return Context()


def _scheduled_event() -> dict[str, Any]:
    import uuid
    from datetime import UTC, datetime

    minute = datetime.now(UTC).replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events",
            "account": "123456789012", "time": minute, "region": "us-east-1",
            "resources": ["arn:aws:events:us-east-1:123456789012:rule/punctual-poller-every-minute"], "detail": {}}


def _measure_logs_child() -> dict[str, float]:
    """Run the real poller and executor handlers (loaded by path, inside moto) on batches of 1 and 41 HTTP
    tasks due a moment ahead, and count the bytes they print (Powertools JSON lines and EMF blobs)."""
    import contextlib
    import io
    from datetime import UTC, datetime, timedelta

    import boto3
    from moto import mock_aws

    from punctual.client import Client
    from punctual.dynamodb.schema import ensure_table
    from punctual.model import HttpAction
    from punctual.runtime import build_poller

    from .local.worker import load_handler_module

    src = find_template().parent / "src"
    out = io.StringIO()
    invoker = _RecordingInvoker()
    target = _Target()

    def lines_bytes(text: str) -> int:
        return sum(len(line.encode()) + LOG_EVENT_OVERHEAD_BYTES for line in text.splitlines() if line.strip())

    def taken() -> int:
        text = out.getvalue()
        out.seek(0)
        out.truncate()
        return lines_bytes(text)

    try:
        with mock_aws(), contextlib.redirect_stdout(out):
            ensure_table(boto3.client("dynamodb", region_name="us-east-1"), "punctual-cost-logs")
            poller_app = load_handler_module(str(src / "poller" / "app.py"))
            loaded: list[Any] = []
            loader = threading.Thread(target=lambda: loaded.append(
                load_handler_module(str(src / "executor" / "app.py"))), name="cold-start")
            loader.start()
            loader.join()
            (executor_app,) = loaded
            poller_app.poller = build_poller(poller_app.settings, invoker=invoker)
            client = Client(poller_app.settings, dynamodb=boto3.client("dynamodb", region_name="us-east-1"))
            taken()
            poller_app.handler(_scheduled_event(), _lambda_context("punctual-poller"))
            empty_poll = taken()
            sizes: dict[int, tuple[int, int]] = {}
            for count in LOG_SAMPLE_TASKS:
                start = datetime.now(UTC) + timedelta(milliseconds=600)
                for i in range(count):
                    client.schedule(start + timedelta(milliseconds=5 * i), HttpAction(url=target.url()),
                                    {"video": f"v-{i:06d}", "note": "x" * 160}, task_id=f"logs-{count}-{i}")
                taken()
                poller_app.handler(_scheduled_event(), _lambda_context("punctual-poller"))
                poll = taken()
                (payload,) = invoker.payloads
                invoker.payloads.clear()
                answer = executor_app.handler(json.loads(json.dumps(payload)), _lambda_context("punctual-executor"))
                if answer["succeeded"] != count:  # a failed fire logs a line of its own: not the normal case
                    raise RuntimeError(f"log measurement: {answer}")
                sizes[count] = (poll, taken())
    finally:
        target.close()
    (small, (poll_s, exec_s)), (large, (poll_l, exec_l)) = sorted(sizes.items())
    per_task_exec = (exec_l - exec_s) / (large - small)
    per_task_poll = (poll_l - poll_s) / (large - small)
    return {"per_poll": empty_poll + LAMBDA_PLATFORM_LOG_BYTES,
            "per_batch": exec_s - small * per_task_exec + LAMBDA_PLATFORM_LOG_BYTES,
            "per_task": per_task_exec + per_task_poll}


def _start_log_measurement(level: str) -> Any:
    """The log measurement runs in a process of its own (the handlers' module-level set-up stays out of this
    one), meanwhile the scenario runs here."""
    import os
    import subprocess

    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "PUNCTUAL_TABLE_NAME": "punctual-cost-logs",
           "PUNCTUAL_NTP_SERVER": "off", "PUNCTUAL_WORKER_THREADS": "4", "PUNCTUAL_REGION": "us-east-1",
           "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": level,
           "POWERTOOLS_SERVICE_NAME": metric_names.SERVICE, "POWERTOOLS_METRICS_NAMESPACE": metric_names.NAMESPACE}
    for name in ("PUNCTUAL_ENDPOINT_URL", "PUNCTUAL_FIRE_LOG_PATH", "POWERTOOLS_DEV", "POWERTOOLS_METRICS_DISABLED",
                 "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(name, None)
    return subprocess.Popen([sys.executable, "-m", "punctual_tools.cost", "--measure-logs"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish_log_measurement(process: Any) -> LogBytes:
    try:
        stdout, stderr = process.communicate(timeout=60)
    except Exception:  # noqa: BLE001 - a measurement that does not finish is reported as not measured
        process.kill()
        return LOG_BYTES_UNMEASURED
    if process.returncode != 0:
        print(f"punctual_tools.cost: log measurement failed:\n{stderr[-2000:]}", file=sys.stderr)
        return LOG_BYTES_UNMEASURED
    values = json.loads(stdout.strip().splitlines()[-1])
    return LogBytes(measured=True, **values)


def monthly_cost(c: Counts, tasks_per_month: float, executor_memory_mb: int | None = None,
                 template_path: str | None = None) -> Month:
    s = c.scenario.settings
    interval, lead, max_batch = s["poll_interval_ms"], s["lead_ms"], s["max_batch_size"]
    ticks = MONTH_MS / interval
    n = tasks_per_month / ticks
    exec_mb = executor_memory_mb or _memory_mb("ExecutorFunction", 256, template_path)
    poll_mb = _memory_mb("PollerFunction", 512, template_path)
    invocations, seconds = executor_seconds_per_tick(n, max_batch, lead, interval)
    threads = s["db_threads"]
    poll_s = (POLLER_OVERHEAD_S + DDB_LATENCY_S * (2 + c.tick_requests / threads)
              + DDB_LATENCY_S * n * c.task_requests("poll", "claim") / threads + INVOKE_LATENCY_S * invocations)
    retention = _template_param("RetentionDays", s["retention_days"], template_path)
    stored_gb = tasks_per_month * (retention + AHEAD_DAYS) / 30 * (c.scenario.final_item_bytes
                                                                  + DDB_ITEM_OVERHEAD_BYTES) / 1e9
    logs = c.scenario.logs
    log_gb = (ticks * logs.per_poll + ticks * invocations * logs.per_batch + tasks_per_month * logs.per_task) / 1e9
    traces = ticks * (1 + invocations)  # X-Ray (Tracing: Active): a trace per invocation, all under 1 a second
    template = load_template(template_path)
    resources = template["Resources"].values()
    tracing = template.get("Globals", {}).get("Function", {}).get("Tracing") == "Active"
    alarms = [r for r in resources if r.get("Type") == "AWS::CloudWatch::Alarm"]
    high_res = sum(1 for a in alarms if int(a.get("Properties", {}).get("Period", 60) or 60) < 60)
    dashboards = sum(1 for r in resources if r.get("Type") == "AWS::CloudWatch::Dashboard")
    lines = [
        Line("DynamoDB writes, per task", tasks_per_month * c.task_wru * DDB_WRU_USD, "per task"),
        Line("DynamoDB reads, per task", tasks_per_month * c.task_rru * DDB_RRU_USD, "per task"),
        Line("DynamoDB poll (empty-tick reads and writes)",
             ticks * (c.tick_wru * DDB_WRU_USD + c.tick_rru * DDB_RRU_USD), "fixed"),
        Line(f"Lambda executor ({exec_mb} MB, awake until its last task)",
             ticks * seconds * exec_mb / 1024 * LAMBDA_GB_S_ARM_USD + ticks * invocations * LAMBDA_REQUEST_USD,
             "per task" if n >= max_batch else "fixed"),
        Line(f"Lambda poller ({poll_mb} MB, every {interval // 1000} s)",
             ticks * (poll_s * poll_mb / 1024 * LAMBDA_GB_S_ARM_USD + LAMBDA_REQUEST_USD), "fixed"),
        Line(f"DynamoDB storage + PITR ({retention:.0f} d retention + {AHEAD_DAYS:.0f} d ahead)",
             stored_gb * (DDB_STORAGE_GB_MONTH_USD + DDB_PITR_GB_MONTH_USD), "per task", in_target=False),
        Line("CloudWatch Logs ingestion" + ("" if logs.measured else " (not measured)"),
             log_gb * CW_LOGS_INGEST_GB_USD, "per task", in_target=False),
        Line("X-Ray traces (one per invocation)", traces * XRAY_TRACE_USD if tracing else 0.0, "fixed",
             in_target=False),
        Line(f"CloudWatch: {len(metric_names.ALL)} EMF metrics, {len(alarms)} alarms, {dashboards} dashboard(s)",
             len(metric_names.ALL) * CW_CUSTOM_METRIC_MONTH_USD + (len(alarms) - high_res) * CW_ALARM_MONTH_USD
             + high_res * CW_ALARM_HIGH_RES_MONTH_USD + dashboards * CW_DASHBOARD_MONTH_USD, "fixed",
             in_target=False),
    ]
    return Month(tasks_per_month, lines)


def measured_executor_seconds(s: Scenario) -> float:
    """Executor seconds the scenario's batches needed: from the tick that invoked each to its last due
    instant, plus the record tail."""
    return sum((b.last_due_ms - b.invoked_ms) / 1000 + RECORD_TAIL_S for b in s.batches)


def break_even(c: Counts, target: float = TARGET_USD_PER_MILLION, template_path: str | None = None) -> float | None:
    """The monthly volume from which the target's scope costs at most ``target`` per million tasks (None when
    no volume up to 10 billion a month does)."""
    def ok(volume: float) -> bool:
        return monthly_cost(c, volume, template_path=template_path).per_million(True) <= target

    low, high = 1e5, 1e10
    if not ok(high):
        return None
    if ok(low):
        return low
    for _ in range(60):
        mid = math.sqrt(low * high)
        low, high = (low, mid) if ok(mid) else (mid, high)
    return high


# == the report ============================================================================================
def _fmt(value: float, digits: int = 3) -> str:
    if value == 0:
        return "0"
    return f"{value:.{digits}f}"


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.995 or value == 0 else f"${value:.3f}"


def render(c: Counts, volumes: tuple[float, ...] = (1e6, 100e6), template_path: str | None = None) -> str:
    """The generated block of docs/cost.md (between the markers)."""
    s = c.scenario
    st = s.settings
    lines = [BEGIN_MARK, ""]
    per_tick_tasks = s.tasks / s.windows
    lines += [
        f"Scenario: {s.tasks} one-off `http` tasks with a {s.payload_bytes}-byte JSON payload, scheduled through "
        f"`punctual.Client`, due evenly over {s.windows} poll window{'s' if s.windows != 1 else ''} "
        f"(~{per_tick_tasks:.0f} tasks a tick); poller every {st['poll_interval_ms'] // 1000} s, lead "
        f"{st['lead_ms'] // 1000} s, {st['shard_count']} shards, batches of at most {st['max_batch_size']}. "
        f"Outcomes: {', '.join(f'{k} {v}' for k, v in sorted(s.outcomes.items()))}. Stored item after its "
        f"outcome: {s.final_item_bytes:.0f} bytes on average; largest item written: {s.max_item_bytes} bytes "
        f"(one write unit up to 1,024).",
        "",
        "**Per task** (requests and capacity units; the poll row is what tasks add to a poll beyond an empty one):",
        "",
        "| step | request | requests | write units | index write units | read units |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in c.per_task:
        lines.append(f"| {r.step} | {r.op} | {_fmt(r.requests)} | {_fmt(r.wru)} | {_fmt(r.wru_index)} | "
                     f"{_fmt(r.rru)} |")
    lines.append(f"| **total** | | **{_fmt(c.task_requests())}** | "
                 f"**{_fmt(sum(r.wru for r in c.per_task))}** | **{_fmt(sum(r.wru_index for r in c.per_task))}** | "
                 f"**{_fmt(c.task_rru)}** |")
    lines += [
        "",
        f"**Per poll tick, fixed** (an empty poll, mean of {len(s.baseline_ticks)} ticks; "
        f"{MONTH_MS // st['poll_interval_ms']:,} ticks a month):",
        "",
        "| step | request | requests | write units | index write units | read units |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in c.per_tick:
        lines.append(f"| {r.step} | {r.op} | {_fmt(r.requests, 2)} | {_fmt(r.wru, 2)} | {_fmt(r.wru_index, 2)} | "
                     f"{_fmt(r.rru, 2)} |")
    executor_s = measured_executor_seconds(s)
    n = per_tick_tasks
    inv, model_s = executor_seconds_per_tick(n, st["max_batch_size"], st["lead_ms"], st["poll_interval_ms"])
    lines += [
        "",
        f"**Lambda, counted:** {len(s.batches)} executor invocations for {s.tasks} tasks "
        f"(batches of {', '.join(str(b.tasks) for b in s.batches)}); "
        f"executors awake {executor_s / s.tasks:.3f} s a task "
        f"(invoke at the tick → last due instant of the batch + {RECORD_TAIL_S} s); the model below gives "
        f"{model_s / n:.3f} s a task at {n:.0f} tasks a tick ({inv:.0f} batch(es) a tick). "
        f"Largest executor payload {max(b.payload_bytes for b in s.batches):,} bytes.",
        "",
        "**$ per million tasks** (prices: " + PRICES_AS_OF + "):",
        "",
    ]
    months = [monthly_cost(c, v, template_path=template_path) for v in volumes]
    header = "| | " + " | ".join(f"{v / 1e6:,.0f} M tasks/month: $/month | $/M tasks" for v in volumes) + " |"
    lines += [header, "| --- |" + " ---: | ---: |" * len(volumes)]
    for i, line in enumerate(months[0].lines):
        cells = " | ".join(f"{_usd(m.lines[i].usd)} | {_usd(m.lines[i].usd / (m.tasks / 1e6))}" for m in months)
        mark = "" if line.in_target else " †"
        lines.append(f"| {line.item}{mark} | {cells} |")
    for label, scope in (("**Punctual: Lambda + DynamoDB + poller** (the target's scope)", True),
                         ("Punctual, everything above", None)):
        cells = " | ".join(f"{_usd(m.usd(scope))} | **{_usd(m.per_million(scope))}**" for m in months)
        lines.append(f"| {label} | {cells} |")
    lines.append("| EventBridge Scheduler (one invocation a task) | " + " | ".join(
        f"{_usd(m.tasks * EVENTBRIDGE_SCHEDULER_PER_INVOCATION_USD)} | "
        f"{_usd(1e6 * EVENTBRIDGE_SCHEDULER_PER_INVOCATION_USD)}" for m in months) + " |")
    lo, hi = (n * STEP_FUNCTIONS_PER_TRANSITION_USD for n in STEP_FUNCTIONS_TRANSITIONS)
    lines.append(f"| Step Functions standard ({'–'.join(map(str, STEP_FUNCTIONS_TRANSITIONS))} transitions a task) | "
                 + " | ".join(f"{_usd(m.tasks * lo)}–{_usd(m.tasks * hi)} | {_usd(1e6 * lo)}–{_usd(1e6 * hi)}"
                              for m in months) + " |")
    lines += ["", "† outside the target's scope (Lambda, DynamoDB requests and the poller).", ""]
    template_mb = _memory_mb("ExecutorFunction", 256, template_path)
    sweep = (1e6, 10e6, 100e6, 1e9)
    lines += [
        "**Target scope, $ per million tasks, by volume and executor memory** (the executor is the lever: it "
        "is billed while it waits for its tasks):",
        "",
        "| executor memory | " + " | ".join(f"{v / 1e6:,.0f} M/month" for v in sweep) + " |",
        "| --- |" + " ---: |" * len(sweep),
    ]
    for mb in sorted({128, template_mb, 1024}):
        mark = " (template default)" if mb == template_mb else ""
        lines.append(f"| {mb} MB{mark} | " + " | ".join(
            _usd(monthly_cost(c, v, executor_memory_mb=mb, template_path=template_path).per_million(True))
            for v in sweep) + " |")
    lines.append("")
    verdicts = []
    for m in months:
        got = m.per_million(True)
        if got <= TARGET_USD_PER_MILLION:
            verdicts.append(f"{m.tasks / 1e6:,.0f} M tasks/month: {_usd(got)} per million, **meets** the "
                            f"≤ ${TARGET_USD_PER_MILLION:.0f} target")
        else:
            verdicts.append(f"{m.tasks / 1e6:,.0f} M tasks/month: {_usd(got)} per million, **misses** the "
                            f"≤ ${TARGET_USD_PER_MILLION:.0f} target by {_usd(got - TARGET_USD_PER_MILLION)} "
                            f"({got / TARGET_USD_PER_MILLION:.1f}×)")
    even = break_even(c, template_path=template_path)
    lines.append("Target: " + "; ".join(verdicts) + ". " + (
        f"The target's scope reaches ${TARGET_USD_PER_MILLION:.0f} per million from about "
        f"{even / 1e6:,.0f} M tasks a month." if even else "No volume reaches it."))
    lines += ["", END_MARK]
    return "\n".join(lines)


def replace_block(doc: str, block: str) -> str:
    start, end = doc.index(BEGIN_MARK), doc.index(END_MARK) + len(END_MARK)
    return doc[:start] + block + doc[end:]


def extract_block(doc: str) -> str:
    return doc[doc.index(BEGIN_MARK): doc.index(END_MARK) + len(END_MARK)]


_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def blocks_match(a: str, b: str, rel: float = 0.03, abs_: float = 0.011, rel_measured: float = 0.15) -> list[str]:
    """Differences between two generated blocks beyond a small tolerance on every number (a rerun moves a few
    figures slightly: drift digits change item sizes by a byte). Rows marked † may move by ``rel_measured``:
    the log bytes they hold include drift values printed by the handlers, whose length depends on the
    machine's timing. Returns the mismatching lines."""
    bad: list[str] = []
    la, lb = a.splitlines(), b.splitlines()
    if len(la) != len(lb):
        return [f"{len(la)} lines vs {len(lb)} lines"]
    for x, y in zip(la, lb, strict=True):
        if _NUMBER.sub("#", x) != _NUMBER.sub("#", y):
            bad.append(f"{x!r} != {y!r}")
            continue
        tolerance = rel_measured if "†" in x else rel
        for p, q in zip(_NUMBER.findall(x), _NUMBER.findall(y), strict=True):
            u, v = float(p.replace(",", "")), float(q.replace(",", ""))
            if abs(u - v) > max(abs_, tolerance * max(abs(u), abs(v))):
                bad.append(f"{x!r} != {y!r}")
                break
    return bad


def doc_path() -> Path:
    return find_template().parent / "docs" / "cost.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m punctual_tools.cost", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--windows", type=int, default=1)
    parser.add_argument("--write", metavar="DOC", help="replace the generated block of DOC (docs/cost.md)")
    parser.add_argument("--measure-logs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure_logs:  # the child process of run_scenario
        print(json.dumps(_measure_logs_child()))
        return 0
    block = render(counts(run_scenario(tasks=args.tasks, windows=args.windows)))
    if args.write:
        path = Path(args.write)
        path.write_text(replace_block(path.read_text(encoding="utf-8"), block), encoding="utf-8")
        print(f"updated {path}")
    else:
        print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
