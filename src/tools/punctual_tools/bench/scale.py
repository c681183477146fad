"""Scale benchmark: CPU per task of the real poller and executor, the AWS model built from it, and the local
stack's sustained rate and 20,000-task burst.

    .venv/bin/python -m punctual_tools.bench.scale [--sizes 1000,10000,100000] [--rates 250,500,1000]
        [--burst 20000] [--json]

1. **CPU per task** at each size (tasks due in one poll window), measured with ``time.process_time()`` of this
   process only (DynamoDB Local runs in its own JVM; the benchmark's own set-up is outside the measurement):
   - a poll: ``Poller.poll`` (find_due: index queries, BatchGetItem of status; cut batches; invoke) with an
     invoker that records the payloads; with HTTP stubbed, also with a real Lambda client (botocore invoke);
   - an executor: ``Executor.run_batch`` over those batches one after another, as one warm Lambda would
     (arm + heartbeat + fire a log action + record), up to ``--single-limit`` / ``--transaction-limit`` tasks
     (``--db-executor-limit`` on DynamoDB Local): its cost is per batch, it does not grow with the window;
   on **stubs** (a botocore ``before-send`` hook answers canned responses from an in-memory copy of the items,
   so only our CPU is measured; the hook's own CPU is measured and taken off) and on **DynamoDB Local**
   (items written with BatchWriteItem of the items ``Client.to_item`` makes, not through the client: faster).
2. **The model** at the template's memory sizes (1,769 MB = 1 vCPU): tasks a tick can dispatch before its
   timeout, executors and write units at 1k/s and 10k/s, and 1M tasks due in one minute (pollers by shard
   group), from the stubbed figures (AWS's write mode, "single"), the arithmetic printed.
3. **The local stack** (2 cores): rates tried in order, with a rung at the target's share of the store's ceiling
   measured first (tasks due per second, each written ``--sustain-lead`` s ahead by a writer that schedules at
   the same rate while they fire, pipelined on 8 threads) until one fails:
   every task fired once, p99 <= 10 ms, and the writes kept up (each within 2 s of its slot); each rate's p99 is also
   shown as a ratio to a floor/steady at that rate. Then ``--burst`` tasks due at one instant, far enough ahead
   for the write rate the sustained phases achieved, against the floor burst of this run. The floors stand on
   the executors' footing (their profile's CPU quota and priority; a floor process per batch of the burst, as
   the stack's poller cuts it) and run after the stack stops.

Drift pictures of the local phases go to the run's directory. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import platform
import re
import resource
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from botocore.awsrequest import AWSResponse

from punctual.config.clients import aws_client, dynamodb_client
from punctual.config.settings import Settings
from punctual.domain.clock import SystemClock
from punctual.domain.events import BatchEvent, BatchTask
from punctual.domain.keys import bucket_start, from_ms, next_tick
from punctual.domain.model import ArmRequest, Candidate, FireRecord, Outcome, Task, TaskStatus
from punctual.executing.executor import Executor
from punctual.polling.invoker import LambdaInvoker
from punctual.polling.poller import make_batches
from punctual.runtime.client import Client
from punctual.runtime.ntp import offset_probe
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import FireLog, LogAction
from punctual_tools.bench.bench import (
    measure_floor_burst,
    measure_floor_steady,
    wait_for_fires,
    wait_until_idle,
)
from punctual_tools.bench.floors import FloorRunner
from punctual_tools.bench.pages import cpu_cell, git_commit, publish_scale
from punctual_tools.bench.phase_parts import drift_of
from punctual_tools.drift import PlotsUnavailableError, read_fire_log, save_cdf, save_pictures, series_of
from punctual_tools.local.dynamodb_local import DynamoDBLocal
from punctual_tools.local.lambda_rules import EXECUTOR_FUNCTION, read_function_limits
from punctual_tools.local.stack import LocalStack, StackConfig
from punctual_tools.plan import model as plan_model
from punctual_tools.settings import LocalSettings
from punctual_tools.stats import summarize
from punctual_tools.template import ensure_table, load_template

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import WriteRequestOutputTypeDef, WriteRequestTypeDef
    from mypy_boto3_lambda import LambdaClient

ACTION = LogAction(message="scale")
GRACE_MS = 86_400_000  # the CPU runs fire every task, however late a sequential executor reaches it
P99_TARGET_MS = 10.0
CEILING_SHARE_TARGET = 0.8  # the local sustained rate, as a share of DynamoDB Local's own ceiling in the same run
MAX_WRITE_LAG_S = 2.0
ITEM_PAGE_BYTES = 1024 * 1024  # DynamoDB's query page

log_lock = threading.Lock()


def log(message: str) -> None:
    with log_lock:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def make_tasks(prefix: str, count: int, first_due_ms: int, span_ms: int) -> list[Task]:
    return [
        Task(
            task_id=f"{prefix}{i:07d}",
            due_at=from_ms(first_due_ms + span_ms * i // max(count, 1)),
            action=ACTION,
            misfire_grace_ms=GRACE_MS,
        )
        for i in range(count)
    ]


# -- measuring -------------------------------------------------------------------------------------------
class CpuMeter:
    """CPU seconds of this process (every thread), wall seconds, and user/system split, over a ``with`` block."""

    def __enter__(self) -> CpuMeter:
        self._usage = resource.getrusage(resource.RUSAGE_SELF)
        self._cpu, self._wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu_s = time.process_time() - self._cpu
        self.wall_s = time.perf_counter() - self._wall
        self.user_s = usage.ru_utime - self._usage.ru_utime
        self.sys_s = usage.ru_stime - self._usage.ru_stime


_ASSIGNMENT = re.compile(r"([#\w]+) = (:\w+)")


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


class StubDynamoDB:
    """A botocore ``before-send`` hook that answers DynamoDB calls from an in-memory copy of the items, without
    HTTP: just enough of Query (keys-only index, 1 MB pages), BatchGetItem (projection), UpdateItem (ARM, RECORD,
    heartbeat; conditions are not evaluated: every write wins), TransactWriteItems, GetItem and PutItem for the
    poller and the executor. ``cpu_s`` is the hook's own CPU (request parsing, response building), which the
    measurement takes off: what is left is botocore's and ours, as against real DynamoDB."""

    def __init__(self, items: dict[str, dict[str, Any]], index: dict[str, list[tuple[int, str]]]) -> None:
        self.items = items
        self.index = index
        self.cpu_s = 0.0
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        started = time.thread_time()
        operation = request.headers["X-Amz-Target"]
        operation = (operation.decode() if isinstance(operation, bytes) else operation).split(".")[-1]
        body = json.loads(request.body or b"{}")
        answer = getattr(self, "_" + operation)(body)
        headers: Any = {"x-amzn-requestid": "stub"}  # botocore wraps any mapping (its stubs ask for HTTPHeaders)
        response = AWSResponse(request.url, 200, headers, _Raw(json.dumps(answer).encode()))
        with self._lock:
            self.cpu_s += time.thread_time() - started
            self.calls[operation] = self.calls.get(operation, 0) + 1
        return response

    def _GetItem(self, body: dict[str, Any]) -> dict[str, Any]:
        item = self.items.get(body["Key"]["task_id"]["S"])
        return {"Item": item} if item is not None else {}

    def _PutItem(self, body: dict[str, Any]) -> dict[str, Any]:
        self.items[body["Item"]["task_id"]["S"]] = body["Item"]
        return {}

    def _apply(self, update: dict[str, Any]) -> dict[str, Any]:
        """The plain ``name = :value`` assignments of the update's SET clause (status, owner, outcome...)."""
        key = update["Key"]["task_id"]["S"]
        values = update.get("ExpressionAttributeValues", {})
        names = update.get("ExpressionAttributeNames", {})
        item = self.items.setdefault(key, {"task_id": {"S": key}})
        for name, value in _ASSIGNMENT.findall(update.get("UpdateExpression", "")):
            if value in values:
                item[names.get(name, name)] = values[value]
        return item

    def _UpdateItem(self, body: dict[str, Any]) -> dict[str, Any]:
        item = self._apply(body)
        return {"Attributes": item} if body.get("ReturnValues") == "ALL_NEW" else {}

    def _TransactWriteItems(self, body: dict[str, Any]) -> dict[str, Any]:
        for entry in body["TransactItems"]:
            if "Update" in entry:
                self._apply(entry["Update"])
        return {}

    def _BatchGetItem(self, body: dict[str, Any]) -> dict[str, Any]:
        responses: dict[str, list[dict[str, Any]]] = {}
        for table, request in body["RequestItems"].items():
            names = request.get("ExpressionAttributeNames", {})
            projection = (
                [names.get(p.strip(), p.strip()) for p in request["ProjectionExpression"].split(",")]
                if "ProjectionExpression" in request
                else None
            )
            found = []
            for key in request["Keys"]:
                item = self.items.get(key["task_id"]["S"])
                if item is not None:
                    found.append(item if projection is None else {k: item[k] for k in projection if k in item})
            responses[table] = found
        return {"Responses": responses, "UnprocessedKeys": {}}

    def _Query(self, body: dict[str, Any]) -> dict[str, Any]:
        values = body["ExpressionAttributeValues"]
        pk, until = values[":pk"]["S"], int(values[":until"]["N"])
        entries = self.index.get(pk, [])
        start = 0
        if "ExclusiveStartKey" in body:
            last = (int(body["ExclusiveStartKey"]["due_ms"]["N"]), body["ExclusiveStartKey"]["task_id"]["S"])
            start = next((i + 1 for i, e in enumerate(entries) if e == last), len(entries))
        page, size = [], 0
        for due, task_id in entries[start:]:
            if due > until or size >= ITEM_PAGE_BYTES:
                break
            page.append({"task_id": {"S": task_id}, "due_ms": {"N": str(due)}})
            size += len(task_id) + len(pk) + 40  # keys-only: task id, index key, due time, names
        answer: dict[str, Any] = {"Items": page, "Count": len(page), "ScannedCount": len(page)}
        if page and start + len(page) < len(entries) and size >= ITEM_PAGE_BYTES:
            last_due, last_id = entries[start + len(page) - 1]
            answer["LastEvaluatedKey"] = {
                "task_id": {"S": last_id},
                "due_bucket": {"S": pk},
                "due_ms": {"N": str(last_due)},
            }
        return answer

    def _Scan(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"Items": [], "Count": 0, "ScannedCount": 0}


class StubLambda:
    """``before-send`` for Lambda: every async invoke is accepted (202)."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.invokes = 0

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        started = time.thread_time()
        headers: Any = {"x-amzn-requestid": "stub"}  # botocore wraps any mapping (its stubs ask for HTTPHeaders)
        response = AWSResponse(request.url, 202, headers, _Raw(b""))
        self.cpu_s += time.thread_time() - started
        self.invokes += 1
        return response


class RecordingInvoker:
    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def invoke_async(self, payload: dict[str, Any]) -> None:
        with self._lock:
            self.payloads.append(payload)


@overload
def _client(service: Literal["dynamodb"], endpoint: str | None) -> DynamoDBClient: ...
@overload
def _client(service: Literal["lambda"], endpoint: str | None) -> LambdaClient: ...
def _client(service: str, endpoint: str | None) -> Any:
    """The client the Lambda functions build (the same configuration), aimed at ``endpoint``."""
    if service == "dynamodb":
        return dynamodb_client(endpoint, "us-east-1")
    return aws_client(service, endpoint, "us-east-1")


# -- 1. CPU per task -------------------------------------------------------------------------------------
def cpu_run(  # noqa: PLR0915  one measurement in order: write, warm up, meter the poll, then the executors
    backend: str, count: int, settings: Settings, work: Path, endpoint: str | None, *, limits: dict[str, int]
) -> dict[str, Any]:
    """One size on one backend: write ``count`` tasks due in one window, measure a poll, then the executors.

    Everything is warmed first, as in a warm Lambda (botocore loads an operation's model on its first call, thread
    pools start on first use): each executor runs one small batch of its own, and one poll runs unmeasured (a
    poll writes nothing per task, so the measured poll finds the same tasks again)."""
    prefix = f"cpu-{uuid.uuid4().hex[:6]}-"
    table = f"scale-{backend}-{count}-{uuid.uuid4().hex[:4]}"
    settings = settings.model_copy(update={"table_name": table})
    client = _client("dynamodb", endpoint or "http://stub.invalid")
    now = int(time.time() * 1000)
    span_ms = min(20_000, max(2_000, count // 5))
    first_due = now + 5_000 + (count // 1000) * 40  # writing takes time: the first due stays ahead of the poll
    tasks = make_tasks(prefix, count, first_due, span_ms)
    warm = {mode: make_tasks(f"warm-{mode}-{prefix}", 50, now - 1_000, 0) for mode in limits}
    writer = Client(settings, dynamodb=client)
    items = [writer.to_item(task, now) for task in tasks]
    warm_items = [writer.to_item(task, now) for group in warm.values() for task in group]
    stub: StubDynamoDB | None = None
    setup = time.perf_counter()
    if backend == "stub":
        index: dict[str, list[tuple[int, str]]] = {}
        for item in [*items, *warm_items]:
            index.setdefault(item["due_bucket"]["S"], []).append((int(item["due_ms"]["N"]), item["task_id"]["S"]))
        for entries in index.values():
            entries.sort()
        stub = StubDynamoDB({i["task_id"]["S"]: dict(i) for i in [*items, *warm_items]}, index)
        # a before-send handler may return the response, which botocore then gives instead of sending (the
        # stubs type every handler as returning None)
        client.meta.events.register("before-send.dynamodb", stub)  # type: ignore[arg-type]
    else:
        ensure_table(client, table)
        batch_write(client, table, [*items, *warm_items])
    write_s = time.perf_counter() - setup
    store = DynamoStores.from_settings(client, settings)
    store.dispatch.advance_watermark(
        bucket_start(now - settings.overdue_safety_ms)
    )  # the steady state: not a first poll
    result: dict[str, Any] = {"backend": backend, "tasks": count, "setup_s": round(write_s, 1)}

    executors = {}
    FireLog.configure(str(work / "cpu-warm-up.jsonl"))
    for mode, group in warm.items():
        mode_store = DynamoStores.from_settings(client, settings.model_copy(update={"write_batch": mode}))
        executors[mode] = Executor(mode_store.firing, settings, SystemClock(), offset_probe(None, 0.1))
        executors[mode].run_batch(
            BatchEvent(
                batch_id=uuid.uuid4().hex,
                dispatcher="warm-up",
                tasks=[BatchTask(task_id=t.task_id, due_ms=t.due_ms, grace_ms=GRACE_MS) for t in group],
            )
        )
    FireLog.configure(None)

    invoker = RecordingInvoker()
    poller = poller_on(store, invoker, settings)
    with CpuMeter() as meter:
        poller.poll(int(time.time() * 1000))
    result["poll_first"] = _figures(meter, 0.0, count)
    invoker.payloads.clear()
    stub_before = stub.cpu_s if stub else 0.0
    with CpuMeter() as meter:
        report = poller.poll(int(time.time() * 1000))
    hook = (stub.cpu_s - stub_before) if stub else 0.0
    result["poll"] = _figures(
        meter, hook, report.dispatched, extra={"batches": report.batches, "queries": report.queries}
    )
    if report.dispatched != count:
        log(f"  poll dispatched {report.dispatched} of {count}")
    log(
        f"{backend} {count}: poll {result['poll']['cpu_us_per_task']:.1f} us/task "
        f"({meter.cpu_s:.2f} s CPU, {meter.wall_s:.2f} s wall, {report.batches} batches; first poll of the "
        f"process {result['poll_first']['cpu_us_per_task']:.1f})"
    )
    if stub is not None:  # the same poll, invoking through botocore's Lambda client (HTTP stubbed)
        lam = _client("lambda", "http://stub.invalid")
        lam_stub = StubLambda()
        lam.meta.events.register("before-send.lambda", lam_stub)  # type: ignore[arg-type]  # as the stub above
        lam_poller = poller_on(store, LambdaInvoker(lam, "punctual-executor"), settings)
        lam_poller.dispatch([])
        LambdaInvoker(lam, "warm-up").invoke_async({})  # the invoke operation's model, loaded once
        stub_before, lam_before = stub.cpu_s, lam_stub.cpu_s
        with CpuMeter() as meter:
            lam_report = lam_poller.poll(int(time.time() * 1000))
        hook = stub.cpu_s - stub_before + lam_stub.cpu_s - lam_before
        result["poll_lambda_invoke"] = _figures(meter, hook, lam_report.dispatched)
        log(f"{backend} {count}: poll with Lambda invoke {result['poll_lambda_invoke']['cpu_us_per_task']:.1f} us/task")

    events = [BatchEvent.model_validate(p) for p in invoker.payloads]
    modes = list(limits)
    for mode in modes:
        if count > limits[mode]:
            result[f"executor_{mode}"] = {"skipped": f"over the {mode} executors' limit of {limits[mode]} tasks"}
            continue
        result[f"executor_{mode}"] = run_executors(
            backend, mode, executors[mode], events, stub, work=work, prefix=prefix
        )
        if mode != modes[-1]:  # the next mode arms the same tasks again: put them back
            reset_tasks(backend, client, table, items, stub)
    return result


def reset_tasks(
    backend: str, client: DynamoDBClient, table: str, items: list[dict[str, Any]], stub: StubDynamoDB | None
) -> None:
    if stub is not None:
        stub.items.update({i["task_id"]["S"]: dict(i) for i in items})
    else:
        batch_write(client, table, items)


def run_executors(
    backend: str,
    mode: str,
    executor: Executor,
    events: list[BatchEvent],
    stub: StubDynamoDB | None,
    *,
    work: Path,
    prefix: str,
) -> dict[str, Any]:
    """The batches one after another through one Executor (a warm Lambda) whose store writes in ``mode``."""
    fire_log = work / f"cpu-{prefix}{mode}.jsonl"
    FireLog.configure(str(fire_log))
    tasks = sum(len(e.tasks) for e in events)
    stub_before = stub.cpu_s if stub else 0.0
    armed = fired = 0
    with CpuMeter() as meter:
        for event in events:
            report = executor.run_batch(event)
            armed += report.armed
            fired += report.fired
    hook = (stub.cpu_s - stub_before) if stub else 0.0
    FireLog.configure(None)
    logged = series_of("x", read_fire_log(fire_log, prefix))
    figures = _figures(
        meter,
        hook,
        tasks,
        extra={
            "armed": armed,
            "fired": fired,
            "logged": len(logged.fires),
            "duplicates": logged.duplicates,
            "batches": len(events),
        },
    )
    log(
        f"{backend} {tasks}: executor ({mode}) {figures['cpu_us_per_task']:.1f} us/task "
        f"({meter.cpu_s:.2f} s CPU, {meter.wall_s:.1f} s wall; armed {armed}, fired {fired})"
    )
    return figures


def _figures(meter: CpuMeter, hook_s: float, tasks: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    cpu = max(meter.cpu_s - hook_s, 0.0)
    return {
        "tasks": tasks,
        "cpu_s": round(cpu, 3),
        "stub_cpu_s": round(hook_s, 3),
        "wall_s": round(meter.wall_s, 2),
        "user_s": round(meter.user_s, 3),
        "sys_s": round(meter.sys_s, 3),
        "cpu_us_per_task": round(cpu / tasks * 1e6, 1) if tasks else None,
        **(extra or {}),
    }


def batch_write(client: DynamoDBClient, table: str, items: list[dict[str, Any]], threads: int = 4) -> None:
    """Items written with BatchWriteItem, 25 a request (unprocessed ones retried): set-up, not measured."""

    def write(chunk: list[dict[str, Any]]) -> None:
        requests: Sequence[WriteRequestTypeDef | WriteRequestOutputTypeDef] = [
            {"PutRequest": {"Item": item}} for item in chunk
        ]
        for _ in range(20):
            left = client.batch_write_item(RequestItems={table: requests}).get("UnprocessedItems", {}).get(table)
            if not left:
                return
            requests = left
            time.sleep(0.05)
        raise RuntimeError("BatchWriteItem left items unprocessed")

    chunks = [items[i : i + 25] for i in range(0, len(items), 25)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(write, chunks))


# -- 2. the model ----------------------------------------------------------------------------------------
def build_model(
    poll_us: float, executor_us: float, template: dict[str, Any], settings: Settings, item_bytes: int
) -> tuple[list[str], dict[str, Any]]:
    """The figures a deployment needs, from measured CPU per task (µs): ``punctual plan``'s model
    (:mod:`punctual_tools.plan.model`) at the measured figures. Returns the printed lines and the dict."""
    d = dataclasses.replace(plan_model.defaults(), poll_us=poll_us, executor_us=executor_us)
    poller_mb, executor_mb = d.poller_mb, d.executor_mb
    budget = plan_model.poll_budget_s(d)
    lines = [
        f"memory (template.yaml): poller {poller_mb} MB = {plan_model.vcpu(poller_mb):.3f} vCPU, executor "
        f"{executor_mb} MB = {plan_model.vcpu(executor_mb):.3f} vCPU (1,769 MB = 1 vCPU); poller timeout "
        f"{d.poller_timeout_s:g} s; batch {d.batch_size}, lead {d.lead_s:g} s",
        f"measured (HTTP stubbed, AWS's write mode 'single'): poll {poll_us:.1f} us/task, executor "
        f"{executor_us:.1f} us/task (arm + heartbeat + fire + record)",
    ]
    model: dict[str, Any] = {
        "poller_mb": poller_mb,
        "executor_mb": executor_mb,
        "poll_us": poll_us,
        "executor_us": executor_us,
    }
    per_tick = budget * plan_model.vcpu(poller_mb) / (poll_us * 1e-6)
    per_tick_1vcpu = budget / (poll_us * 1e-6)
    lines.append(
        f"tasks one tick dispatches before the first it is the first to see is due: {budget:g} s x "
        f"{plan_model.vcpu(poller_mb):.3f} vCPU / {poll_us:.1f} us = {per_tick:,.0f} (at 1,769 MB: "
        f"{per_tick_1vcpu:,.0f})"
    )
    model["tasks_per_tick"] = round(per_tick)
    model["tasks_per_tick_1vcpu"] = round(per_tick_1vcpu)
    payload_kb = max(0, item_bytes - plan_model.TASK_ITEM_BYTES) / 1024
    model["rates"] = {}
    for rate in (1_000, 10_000):
        p = plan_model.make_plan(rate, payload_kb, d=d)
        share = plan_model.pollers_needed(rate, poller_mb, d)
        lines.append(
            f"{rate:,}/s: executors = max(in flight {p.executors_in_flight:,} (batches of {p.batch}), by CPU "
            f"{p.executors_by_cpu:,}) = {p.executors:,}; write units/s {p.capacity.writes:,.0f}, read units/s "
            f"{p.capacity.reads:,.0f}; shards {p.shards}; one {poller_mb} MB poller needs {share:.0%} of its budget: "
            f"poll groups {p.poll_groups} at {p.poller_mb} MB (punctual plan --rate {rate})"
        )
        model["rates"][str(rate)] = {
            "executors": p.executors,
            "executors_in_flight": p.executors_in_flight,
            "executors_by_cpu": p.executors_by_cpu,
            "wcu_per_s": round(p.capacity.writes),
            "rcu_per_s": round(p.capacity.reads),
            "shards": p.shards,
            "poll_tick_share": round(share, 3),
            "pollers": p.poll_groups,
        }
    million = 1_000_000
    per_s = million / d.interval_s
    shards = plan_model.shards_needed(per_s, d)
    pollers = plan_model.pollers_needed(per_s, poller_mb, d)
    pollers_1vcpu = plan_model.pollers_needed(per_s, plan_model.POLLER_FULL_CORE_MB, d)
    groups = plan_model.poll_groups(pollers, shards)
    groups_1vcpu = plan_model.poll_groups(pollers_1vcpu, shards)
    executors = plan_model.executors_in_flight(per_s, d.batch_size, d)
    lines.append(
        f"1M due in one minute: poll CPU {million:,} x {poll_us:.1f} us = {million * poll_us * 1e-6:.1f} s within "
        f"{budget:g} s -> {math.ceil(pollers)} pollers at {poller_mb} MB ({math.ceil(pollers_1vcpu)} at 1,769 MB): "
        f"poll groups {groups} ({groups_1vcpu} at 1,769 MB) of {shards} shards; {executors:,} executors in flight "
        "at whole batches"
    )
    model["million_in_a_minute"] = {
        "budget_s": budget,
        "poll_cpu_s": round(million * poll_us * 1e-6, 1),
        "pollers": math.ceil(pollers),
        "pollers_1vcpu": math.ceil(pollers_1vcpu),
        "poll_groups": groups,
        "poll_groups_1vcpu": groups_1vcpu,
        "shards": shards,
        "executors": executors,
        "feasible": math.ceil(pollers) <= shards,
    }
    return lines, model


# -- 3. the local stack ----------------------------------------------------------------------------------
def write_paced(
    stack: LocalStack, tasks: list[Task], write_after_s: list[float], writer: str, threads: int = 8
) -> dict[str, Any]:
    """Write each task ``write_after_s`` seconds after the clients are ready: every 100 ms the tasks of that slot
    are handed to ``threads`` writers (pipelined: a slow write never delays the next slot's start). Returns the
    errors, how late the latest write finished after its slot began, and the rate the writes achieved."""
    assert stack.settings is not None
    table = stack.settings.table_name
    client = Client(stack.settings)
    raw = _client("dynamodb", stack.settings.endpoint_url)
    raw.describe_table(TableName=table)  # botocore loads its model before the clock starts
    errors: list[str] = []
    lags: list[float] = []
    lock = threading.Lock()
    chunks: dict[int, list[Task]] = {}
    for task, after in zip(tasks, write_after_s, strict=True):
        chunks.setdefault(int(after * 10), []).append(task)

    def write(slot_at: float, part: list[Task]) -> None:
        try:
            if writer == "schedule_many":
                results = client.schedule_many(
                    [{"task_id": t.task_id, "due_at": t.due_at, "action": ACTION} for t in part], threads=4
                )
                failed = [r.error or "" for r in results if not r.ok]
            else:
                now = int(time.time() * 1000)
                batch_write(raw, table, [client.to_item(t, now) for t in part], threads=1)
                failed = []
        except Exception as exc:  # noqa: BLE001 - counted and reported
            failed = [repr(exc)]
        with lock:
            errors.extend(failed)
            lags.append(time.time() - slot_at)

    origin = time.time()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for slot in sorted(chunks):
            slot_at = origin + slot / 10
            delay = slot_at - time.time()
            if delay > 0:
                time.sleep(delay)
            chunk = chunks[slot]
            for i in range(0, len(chunk), 25):  # one BatchWriteItem each
                pool.submit(write, slot_at, chunk[i : i + 25])
    elapsed = time.time() - origin
    return {
        "write_errors": len(errors),
        "max_write_lag_s": round(max(lags, default=0.0), 2),
        "write_rate_per_s": round(len(tasks) / elapsed, 1) if elapsed > 0 else None,
    }


def store_ceiling(stack: LocalStack, count: int) -> dict[str, Any]:
    """The throughput floor of the local phases: how many items a second this DynamoDB Local takes for each of a
    task's three writes when it does nothing else - create (BatchWriteItem of ``Client.to_item`` items, as the
    writer), arm and record (through the store, in the stack's own write mode: single conditional writes under
    the Lambda profile, as on AWS, transactions of 100 under the local one; four batches of 1,000 at once) - on a
    table of its own, and the tasks/s those imply (each task needs all three)."""
    assert stack.settings is not None
    settings = stack.settings.model_copy(update={"table_name": f"ceiling-{uuid.uuid4().hex[:6]}"})
    raw = _client("dynamodb", settings.endpoint_url or "")
    ensure_table(raw, settings.table_name)
    now = int(time.time() * 1000)
    tasks = make_tasks("ceiling-", count, now + 3_600_000, 60_000)
    items = [Client(settings, dynamodb=raw).to_item(t, now) for t in tasks]
    store = DynamoStores.from_settings(raw, settings)
    store.firing.heartbeat("ceiling", now, now + 7_200_000)
    chunks = [tasks[i : i + 1_000] for i in range(0, count, 1_000)]

    def timed(work: Any) -> float:
        began = time.perf_counter()
        work()
        return count / (time.perf_counter() - began)

    def arm(chunk: list[Task]) -> None:
        store.firing.arm_many(
            [ArmRequest(task_id=t.task_id, due_ms=t.due_ms, lease_until_ms=now + 7_200_000) for t in chunk],
            "ceiling",
            "ceiling",
            now,
        )

    def record(chunk: list[Task]) -> None:
        store.firing.record_many(
            "ceiling",
            [
                FireRecord(
                    task_id=t.task_id,
                    outcome=Outcome.SUCCEEDED,
                    fired_ms=t.due_ms,
                    finished_ms=t.due_ms + 1,
                    drift_ms=0.0,
                    drift_corrected_ms=0.0,
                )
                for t in chunk
            ],
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        rates = {
            "create": timed(lambda: batch_write(raw, settings.table_name, items, threads=8)),
            "arm": timed(lambda: list(pool.map(arm, chunks))),
            "record": timed(lambda: list(pool.map(record, chunks))),
        }
    raw.delete_table(TableName=settings.table_name)
    tasks_per_s = 1 / sum(1 / r for r in rates.values())
    log(
        f"store ceiling ({count} items): create {rates['create']:.0f}/s, arm {rates['arm']:.0f}/s, record "
        f"{rates['record']:.0f}/s -> at most {tasks_per_s:.0f} tasks/s with nothing else running"
    )
    return {
        "items": count,
        "write_batch": settings.write_batch,
        **{f"{k}_per_s": round(v, 1) for k, v in rates.items()},
        "tasks_per_s": round(tasks_per_s, 1),
    }


def sustained(stack: LocalStack, rate: int, seconds: float, lead_s: float, writer: str) -> dict[str, Any]:
    prefix = f"rate{rate}-{uuid.uuid4().hex[:6]}-"
    total = int(rate * seconds)
    start = time.time() + 3.0  # the writer's clients are ready by then
    write_at = [start + i / rate for i in range(total)]
    tasks = [
        Task(task_id=f"{prefix}{i:07d}", due_at=from_ms(int((at + lead_s) * 1000)), action=ACTION)
        for i, at in enumerate(write_at)
    ]
    log(f"sustained {rate}/s: writing {total} tasks over {seconds:g} s ({writer}), each due {lead_s:g} s later")
    while time.time() < start - 2.0:
        time.sleep(0.05)
    written = write_paced(stack, tasks, [at - start + 2.0 for at in write_at], writer)
    last_due = (write_at[-1] + lead_s) * 1000
    fires = wait_for_fires(stack.fire_log, prefix, [t.task_id for t in tasks], last_due + 30_000)
    drifts, fired, dup = drift_of(fires)
    p99 = summarize(drifts)["p99"]
    # The clients kept up if every write finished within 2 s of its slot (each task is due 30 s after it): a
    # rate over the whole phase would also count the last writes' latency against the writer.
    kept_up = written["max_write_lag_s"] <= MAX_WRITE_LAG_S
    ok = (
        fired == total
        and dup == 0
        and written["write_errors"] == 0
        and kept_up
        and p99 is not None
        and p99 <= P99_TARGET_MS
    )
    return {
        "rate": rate,
        "scheduled": total,
        "fired": fired,
        "duplicates": dup,
        **written,
        **summarize(drifts),
        "writes_kept_up": kept_up,
        "ok": ok,
        "fires": fires,
    }


def burst(stack: LocalStack, count: int, writer: str, write_rate: float) -> dict[str, Any]:
    """``count`` tasks due at one instant, written first: the instant is set from the write rate the sustained
    phases achieved (DynamoDB Local may write only a few hundred items a second), with a margin, so that every
    task is written and dispatched before it is due."""
    assert stack.settings is not None
    prefix = f"burst-{uuid.uuid4().hex[:6]}-"
    write_s = count / max(write_rate, 50.0) * 1.5 + 5
    due = (
        next_tick(int((time.time() + write_s) * 1000), stack.settings.poll_interval_ms)
        + stack.settings.lead_ms
        - stack.settings.poll_interval_ms
        + 2_000
    )
    tasks = [Task(task_id=f"{prefix}{i:06d}", due_at=from_ms(due), action=ACTION) for i in range(count)]
    log(
        f"burst: writing {count} tasks due at one instant, {(due / 1000 - time.time()):.0f} s ahead ({writer}; "
        f"{write_rate:.0f} writes/s expected)"
    )
    now = time.time()
    written = write_paced(stack, tasks, [0.0] * count, writer)
    log(f"burst: written in {time.time() - now:.1f} s; the instant is {(due / 1000 - time.time()):.0f} s ahead")
    fires = wait_for_fires(stack.fire_log, prefix, [t.task_id for t in tasks], due + 90_000)
    drifts, fired, dup = drift_of(fires)
    outcomes = settled_statuses(stack, [t.task_id for t in tasks])
    log(f"burst: outcomes {', '.join(f'{k} {v}' for k, v in outcomes.items())}")
    return {
        "scheduled": count,
        "fired": fired,
        "duplicates": dup,
        **written,
        **summarize(drifts),
        "outcomes": outcomes,
        "fires": fires,
    }


ACTIVE_STATUSES = ("PENDING", "ARMED")


def settled_statuses(
    stack: LocalStack, task_ids: list[str], poll_s: float = 5.0, still_polls: int = 3, limit_s: float = 300.0
) -> dict[str, int]:
    """:func:`stored_statuses` once no task is active any more (an executor records after it fires, and marks a
    task MISSED when it reaches it past its grace), or once the counts have not moved for ``still_polls`` reads
    ``poll_s`` apart, or after ``limit_s``: what is active then is reported as such."""
    began, last, still = time.monotonic(), None, 0
    while True:
        counts = stored_statuses(stack, task_ids)
        if not any(counts.get(s) for s in ACTIVE_STATUSES) or time.monotonic() - began > limit_s:
            return counts
        still = still + 1 if counts == last else 0
        if still >= still_polls:
            return counts
        last = counts
        time.sleep(poll_s)


def stored_statuses(stack: LocalStack, task_ids: list[str]) -> dict[str, int]:
    """How many of ``task_ids`` the store holds in each status (read 100 at a time): what a burst's tasks that did
    not fire in time became (MISSED past their grace, or still PENDING or ARMED)."""
    assert stack.settings is not None
    store = DynamoStores.from_settings(_client("dynamodb", stack.settings.endpoint_url or ""), stack.settings)
    counts: Counter[str] = Counter()
    for first in range(0, len(task_ids), 100):
        part = task_ids[first : first + 100]
        found = store.client.get_many(part)
        counts.update(task.status.name for task in found.values())
        counts["absent"] += len(part) - len(found)
    return {status: n for status, n in sorted(counts.items()) if n}


# -- main ------------------------------------------------------------------------------------------------
def make_parser() -> argparse.ArgumentParser:
    """The options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000", help="tasks in one window, comma-separated")
    parser.add_argument("--backends", default="stub,dynamodb-local")
    parser.add_argument(
        "--single-limit",
        type=int,
        default=10_000,
        help="run the executors writing single UpdateItems (AWS's mode) up to this many tasks: an "
        "executor works per batch, so its cost per task does not grow with the window",
    )
    parser.add_argument(
        "--transaction-limit",
        type=int,
        default=10_000,
        help="the same for executors writing transactions (the local runtime's mode)",
    )
    parser.add_argument(
        "--db-executor-limit",
        type=int,
        default=1_000,
        help="on DynamoDB Local, run the executors (both modes) only up to this many tasks: arming "
        "and recording run at background CPU priority, which takes minutes of wall time on a busy machine",
    )
    parser.add_argument(
        "--rates",
        default="",
        help="sustained rates to try, in order, stopping at the first that fails (tasks/s; default: "
        f"{', '.join(f'{s:g}' for s in LADDER_SHARES)} and {CEILING_SHARE_TARGET:g} times the store's ceiling "
        "measured in the run)",
    )
    parser.add_argument(
        "--local-lead",
        type=int,
        default=Settings().lead_ms // 1000,
        help="the local stack's lead (s; default the product's: a burst of N needs about N / the "
        "store's arm rate seconds of it)",
    )
    parser.add_argument(
        "--ceiling-items",
        type=int,
        default=5_000,
        help="items written, armed and recorded to measure the store's ceiling",
    )
    parser.add_argument("--rate-seconds", type=float, default=25)
    parser.add_argument("--sustain-lead", type=float, default=30, help="seconds between writing and due")
    parser.add_argument("--burst", type=int, default=20_000)
    parser.add_argument(
        "--writer",
        choices=("batch_write", "schedule_many"),
        default="batch_write",
        help="how the local phases write tasks: BatchWriteItem of Client.to_item items (the "
        "documented item, 25 a request) or Client.schedule_many (a conditional put each)",
    )
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--no-cpu", dest="cpu", action="store_false")
    parser.add_argument("--no-local", dest="local", action="store_false")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="(the last line is always one JSON object)")
    parser.add_argument(
        "--publish",
        action="store_true",
        help="keep the report as docs/benchmarks/scale.json and write docs/benchmarks/scale.md from it",
    )
    return parser


def set_up(args: argparse.Namespace) -> tuple[Path, Settings, dict[str, Any]]:
    """Logging, the run's directory, the settings of the measured parts, and the report's first fields."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname).1s %(name)s: %(message)s")
    work = args.out or Path(tempfile.mkdtemp(prefix="punctual-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    log(f"run directory {work}; load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    # redispatch_after_ms=0: the measured poll is the process's second over the same tasks, as a warm Lambda's
    # next tick (60 s later, past any hold-back) would be.
    settings = Settings(ntp_server=None, write_batch="single", redispatch_after_ms=0)
    out: dict[str, Any] = {
        "machine": f"{platform.node()} ({os.cpu_count()} cores)",
        "commit": git_commit(),
        "run_dir": str(work),
        "load_avg_before": load_before,
        "cpu": [],
    }
    return work, settings, out


def measure_cpu(args: argparse.Namespace, settings: Settings, work: Path, sizes: list[int]) -> list[dict[str, Any]]:
    """1. CPU per task: each backend at each size (DynamoDB Local started for its own rows)."""
    rows: list[dict[str, Any]] = []
    for backend in args.backends.split(","):
        ddb = None
        endpoint = None
        if backend == "dynamodb-local":
            ddb = DynamoDBLocal(in_memory=True, port=0, log_path=work / "dynamodb-local.log")
            endpoint = ddb.start()
        try:
            for count in sizes:
                t0 = time.perf_counter()
                limits = {"single": args.single_limit, "transaction": args.transaction_limit}
                if backend == "dynamodb-local":
                    limits = {mode: min(limit, args.db_executor_limit) for mode, limit in limits.items()}
                rows.append(cpu_run(backend, count, settings, work, endpoint, limits=limits))
                rows[-1]["elapsed_s"] = round(time.perf_counter() - t0, 1)
                log(f"{backend} {count}: {rows[-1]['elapsed_s']:.0f} s in all")
        finally:
            if ddb is not None:
                ddb.stop()
    return rows


def model_from_stubbed(rows: list[dict[str, Any]], settings: Settings, template: Any) -> dict[str, Any] | None:
    """2. The AWS model from the largest stubbed size (None without a stubbed row), its arithmetic printed."""
    stubbed = [r for r in rows if r["backend"] == "stub"]
    if not stubbed:
        return None
    largest = max(stubbed, key=lambda r: r["tasks"])
    poll_us = largest["poll"]["cpu_us_per_task"]
    ran = [r for r in stubbed if "cpu_us_per_task" in r.get("executor_single", {})]
    executor_us = max(ran, key=lambda r: r["tasks"])["executor_single"]["cpu_us_per_task"] if ran else 0.0
    item = Client(settings).to_item(make_tasks("x-", 1, int(time.time() * 1000), 0)[0])
    item_bytes = sum(len(k) + len(json.dumps(v)) for k, v in item.items())
    lines, model = build_model(poll_us, executor_us, template, settings, item_bytes)
    print("\nModel (AWS, from the stubbed figures; arithmetic shown):")
    for line in lines:
        print("  " + line)
    return model


def finish(out: dict[str, Any], args: argparse.Namespace, started: float) -> None:
    """The run's time and load, the page with ``--publish``, and the report as the last line."""
    load_before = out["load_avg_before"]
    out["elapsed_s"] = round(time.perf_counter() - started, 1)
    out["load_avg_after"] = os.getloadavg()
    print(
        f"\nscale benchmark: {out['elapsed_s']:.0f} s in all; load average before {load_before[0]:.2f}, after "
        f"{out['load_avg_after'][0]:.2f}"
    )
    if args.publish:
        print(f"page: {publish_scale(out)}")
    print(json.dumps(out))


def main() -> int:
    args = make_parser().parse_args()
    work, settings, out = set_up(args)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    template = load_template()
    started = time.perf_counter()
    if args.cpu:
        out["cpu"] = measure_cpu(args, settings, work, sizes)
        print_cpu(out["cpu"])
        model = model_from_stubbed(out["cpu"], settings, template)
        if model is not None:
            out["model"] = model
        out["poll_cpu_us_per_task"] = (out.get("model") or {}).get("poll_us")
    if args.local:  # 3. the local stack
        out.update(run_local(args, work))
    finish(out, args, started)
    return 0


def print_cpu(rows: list[dict[str, Any]]) -> None:
    print("\nCPU per task (this process only; us/task, stub hooks' own CPU taken off; wall time in parentheses)")
    print(f"{'backend':<16}{'tasks':>8}{'poll':>16}{'poll+Lambda':>16}{'exec single':>18}{'exec transact':>18}")
    cell = cpu_cell

    for r in rows:
        print(
            f"{r['backend']:<16}{r['tasks']:>8}{cell(r.get('poll')):>16}{cell(r.get('poll_lambda_invoke')):>16}"
            f"{cell(r.get('executor_single')):>18}{cell(r.get('executor_transaction')):>18}"
        )


def burst_cut(settings: Settings, count: int) -> list[int]:
    """How the poller of ``settings`` cuts ``count`` tasks due at one instant: the sizes of its batches (one
    executor each), bound by the executors' concurrency as the stack's executors are."""
    due = [
        Candidate(task_id=f"t{i}", due_ms=0, status=TaskStatus.PENDING, lease_until_ms=None, misfire_grace_ms=60_000)
        for i in range(count)
    ]
    batches = make_batches(
        due, settings.max_batch_size, settings.max_fires_at_once, max_batches=settings.quota_cut_max_batches
    )
    return [len(batch) for batch in batches]


LADDER_SHARES = (0.25, 0.5, 1.0, 1.25)  # the rungs, as shares of the store's ceiling, when no rates are given


def ladder(rates: list[int], ceiling_tasks_per_s: float, share: float = CEILING_SHARE_TARGET) -> list[int]:
    """The sustained rates to try, in order: the given ones (none: :data:`LADDER_SHARES` of the store's ceiling
    measured in this run) and the target's own rung (``share`` of that ceiling, rounded up), so that the verdict
    does not hang on where the given steps fall, nor on a first step above what this store takes.

    >>> ladder([100, 200, 300], 159.0)
    [100, 128, 200, 300]
    >>> ladder([], 60.0)
    [15, 30, 48, 60, 75]
    >>> ladder([100, 200], 0.0)
    [100, 200]
    """
    target = math.ceil(share * ceiling_tasks_per_s)
    if target <= 0:
        return list(rates)
    given = rates or [max(1, round(s * ceiling_tasks_per_s)) for s in LADDER_SHARES]
    return sorted({*given, target})


def run_local(args: argparse.Namespace, work: Path) -> dict[str, Any]:  # noqa: PLR0915  one run in order: ceiling, rates, burst, floors, and the table of what they measured
    """The sustained-rate search and the burst on the local stack, with their floors on the executors' footing:
    the same CPU quota and priority, a floor process per batch as the stack's poller cuts the burst."""
    rates = [int(r) for r in args.rates.split(",") if r]
    # No task of these phases is due within a poll interval of its writing: the stream fast path is off (locally
    # its reader would parse every write's stream record in this process). A short lead and big batches keep
    # the number of executor processes in flight small: rate x lead / batch.
    # The lead leaves the executors time to arm a 20,000 burst (DynamoDB Local arms several hundred a second
    # here) before it is due.
    overrides = {"ntp_server": None, "lead_ms": args.local_lead * 1000, "max_batch_size": 2_000}
    config = StackConfig(
        home=work / "stack",
        port=0,
        poll_interval_s=5,
        prewarm=16,
        max_concurrency=48,
        fast_path=False,
        settings_overrides=overrides,
    )
    phases: list[dict[str, Any]] = []
    result: dict[str, Any] = {"local_settings": {**overrides, "poll_interval_s": 5, "writer": args.writer}}
    with LocalStack(config, on_batch=lambda r: None) as stack:
        settings = stack.settings
        assert settings is not None
        result["executors"] = stack.describe_limits()

        result["store_ceiling"] = ceiling = store_ceiling(stack, args.ceiling_items)
        rates = ladder(rates, ceiling["tasks_per_s"])
        log(
            f"rates to try: {', '.join(map(str, rates))}/s (with the target's rung, "
            f"{CEILING_SHARE_TARGET:g}x the ceiling)"
        )
        best = 0
        for rate in rates:
            wait = wait_until_idle(stack, args.settle)
            phase = {**sustained(stack, rate, args.rate_seconds, args.sustain_lead, args.writer), **wait}
            phases.append(phase)
            log(
                f"sustained {rate}/s: fired {phase['fired']} of {phase['scheduled']}, dup {phase['duplicates']}, "
                f"p99 {phase['p99']} ms, writes {phase['write_rate_per_s']}/s (lag up to {phase['max_write_lag_s']} s)"
                f" -> {'OK' if phase['ok'] else 'FAILED'}"
            )
            if not phase["ok"]:
                break
            best = rate
        wait = wait_until_idle(stack, args.settle)
        # The burst is written as fast as the store takes it: its instant follows the create rate measured above.
        burst_phase = {**burst(stack, args.burst, args.writer, ceiling["create_per_s"]), **wait}
        # What the store alone needs to arm the burst, at the arm rate measured above, against the time its tasks
        # have from the poll that dispatches them (a lead before the instant) to the end of their grace.
        burst_phase["store_arm_s"] = round(args.burst / ceiling["arm_per_s"], 1) if ceiling["arm_per_s"] else None
        burst_phase["window_s"] = (settings.lead_ms + settings.default_misfire_grace_ms) / 1000
        result["invoker"] = dict(stack.invoker.stats) if stack.invoker else {}
    # The floors, with the stack down: no database, the same footing as the stack's executors.
    tried = [p["rate"] for p in phases]
    floors, f_burst, footing = measure_floors(settings, tried, args, work / "floor.jsonl")
    result.update(
        {
            "floor_footing": footing,
            "floor_steady": {str(r): s for r, s in floors.items()},
            "floor_burst": f_burst,
        }
    )
    floor_p99 = f_burst["p99"]
    burst_p99 = burst_phase["p99"]
    ratio = burst_p99 / floor_p99 if burst_p99 is not None and floor_p99 else None
    print(
        f"\nLocal stack (2 cores; poll every 5 s, lead {args.local_lead} s, batches of 2,000, fast path off; "
        f"writer {args.writer})"
    )
    print(
        f"store ceiling (DynamoDB Local alone, {ceiling['items']} items): create {ceiling['create_per_s']}/s, "
        f"arm {ceiling['arm_per_s']}/s, record {ceiling['record_per_s']}/s -> at most {ceiling['tasks_per_s']} "
        "tasks/s (three writes a task)"
    )
    print(footing["line"])
    print(f"{'phase':<18}{'count':>8}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>10}")
    for name, s in [
        *((f"floor/steady {r}/s", s) for r, s in floors.items()),
        (f"floor/burst ({f_burst['processes']} floor processes)", f_burst),
    ]:
        print(f"{name:<18}{s['count']:>8}{_ms(s['p50'])}{_ms(s['p90'])}{_ms(s['p99'])}{_ms(s['max'], 10)}")
    for p in [*phases, {**burst_phase, "rate": None}]:
        name = f"sustained {p['rate']}/s" if p["rate"] else f"burst {args.burst}"
        floor = (f_burst if p["rate"] is None else floors[p["rate"]])["p99"]
        ratio_text = "-" if p["p99"] is None or not floor else f"{p['p99'] / floor:.1f}x"
        print(
            f"{name:<18}{p['count']:>8}{_ms(p['p50'])}{_ms(p['p90'])}{_ms(p['p99'])}{_ms(p['max'], 10)}  "
            f"p99 = {ratio_text} its floor; scheduled {p['scheduled']}, fired {p['fired']}, dup {p['duplicates']}, "
            f"write errors {p['write_errors']}, writes {p['write_rate_per_s']}/s "
            f"(lag up to {p['max_write_lag_s']} s), idle wait {p['idle_wait_s']} s"
        )
    share = best / ceiling["tasks_per_s"] if ceiling["tasks_per_s"] else 0.0
    print(
        f"highest sustained rate with every task fired once and p99 <= {P99_TARGET_MS:g} ms: {best}/s "
        f"= {share:.2f}x the store's ceiling measured in this run ({ceiling['tasks_per_s']} tasks/s, three writes "
        f"a task); target >= {CEILING_SHARE_TARGET:g}x: {'MET' if share >= CEILING_SHARE_TARGET else 'MISSED'} "
        f"(the rate ladder's steps bound the share from below). The store's ceiling, not Punctual, bounds the "
        "local rate: AWS's rates are the model's, from the CPU per task above"
    )
    print(
        f"burst {args.burst}: p99 {_ms(burst_p99).strip()} ms = "
        f"{'-' if ratio is None else f'{ratio:.2f}x'} floor/burst ({_ms(floor_p99).strip()} ms)"
    )
    pictures = []
    try:
        series = [series_of(f"sustained {p['rate']} per s", p["fires"]) for p in phases]
        series.append(series_of(f"burst {args.burst}", burst_phase["fires"]))
        series.insert(0, series_of("floor-burst", read_fire_log(work / "floor.jsonl", "floor-burst-")))
        pictures = [str(path) for s in series for path in save_pictures(s, work / "pictures")]
        pictures.append(str(save_cdf(series, work / "pictures" / "all-phases-cdf.png", title="scale: drift CDF")))
        print("drift pictures:\n" + "\n".join(f"  {p}" for p in pictures))
    except PlotsUnavailableError as exc:
        log(f"no drift pictures: {exc}")
    strip = ("fires",)
    result.update(
        {
            "sustained_rate_per_s": best,
            "sustained_share_of_ceiling": round(share, 3),
            "sustained_share_target": CEILING_SHARE_TARGET,
            "sustained": [{k: v for k, v in p.items() if k not in strip} for p in phases],
            "burst": {
                **{k: v for k, v in burst_phase.items() if k not in strip},
                "p99_ms": burst_p99,
                "floor_p99_ms": floor_p99,
                "vs_floor": ratio,
            },
            "pictures": pictures,
        }
    )
    return result


def measure_floors(
    settings: LocalSettings, rates: list[int], args: argparse.Namespace, fire_log: Path
) -> tuple[dict[int, dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """floor/steady at each rate (one floor process) and floor/burst (a floor process per batch, as the poller of
    ``settings`` cuts the burst), on the executors' footing: their profile's CPU quota and priority. Each as its
    drift's summary (the burst's with its process count), and the footing."""
    memory_mb = settings.executor_memory_mb or read_function_limits(EXECUTOR_FUNCTION).memory_mb
    runner = FloorRunner(settings.profile, memory_mb)
    try:
        log(runner.footing.line())
        floors = {}
        for rate in rates:
            log(f"floor/steady at {rate}/s for 10 s, one floor process")
            floors[rate] = summarize(measure_floor_steady(runner, rate, 10, fire_log)["drift"])
            time.sleep(args.settle)
        shares = burst_cut(settings, args.burst)
        log(f"floor/burst: {args.burst} at one instant, {len(shares)} floor processes (the poller's cut)")
        fired = measure_floor_burst(runner, shares, fire_log)
        burst = {**summarize(fired["drift"]), "processes": fired["processes"]}
    finally:
        runner.close()
    return floors, burst, {**runner.footing.as_dict(), "line": runner.footing.line()}


def _ms(value: float | None, width: int = 9) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.3f}"


if __name__ == "__main__":
    sys.exit(main())
