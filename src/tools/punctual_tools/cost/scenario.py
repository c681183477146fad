"""The scenario: a run of the real code on moto, schedule → poll → execute, counted by the meter.

:func:`run_scenario` schedules tasks through :class:`~punctual.scheduling.client.Client`, runs the real poller every
``poll_interval`` of a simulated clock and every batch it hands over through the real executor, and keeps every
request the :class:`~punctual_tools.cost.meter.CapacityMeter` counted; :func:`counts` turns them into figures
per task and per poll tick. Meanwhile a child process measures the bytes the real handlers log
(:class:`LogBytes`), and after it fresh processes time the executor's INIT
(:class:`~punctual_tools.cost.coldstart.InitTime`). The stand-ins (HTTP target, recording invoker, clocks) are
those of :mod:`punctual_tools.doubles`, which the tests use too.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import punctual.runtime.metrics as metric_names
from punctual.domain.events import BatchEvent
from punctual.domain.keys import from_ms
from punctual.stores.dynamodb.codec import SCHEDULE_PREFIX, item_size
from punctual_tools.cost.coldstart import INIT_UNMEASURED, InitTime, measure_executor_init
from punctual_tools.cost.meter import (
    ACTIVE,
    HEARTBEAT,
    Call,
    CapacityMeter,
    TableSpec,
    heartbeat_read_label,
    key_id,
    status_label,
)
from punctual_tools.doubles import (
    FakeClock,
    FixedOffset,
    LambdaContext,
    RecordingInvoker,
    ShiftedClock,
    StubTarget,
    scheduled_event,
    serving,
)
from punctual_tools.local.receiver import receiving
from punctual_tools.template import find_template, load_template

if TYPE_CHECKING:
    from punctual.config.settings import Settings
    from punctual.executing.executor import Executor
    from punctual.runtime.client import Client
    from punctual.targets import HttpAction

    _Container = tuple[Executor, ShiftedClock, list[bool]]  # an executor, its clock and whether it is busy

SCENARIO_START_MS = 1_906_027_207_000  # 2030-05-26T12:00:07Z: poll ticks 7 s past the minute
NEGLIGIBLE = 1e-9  # a row left with fewer requests a task than this counted none
TARGET_PATH = "/hooks/publish"  # the tasks' action URL path (its length is part of every item's size)


# == what a run counts ====================================================================================
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
# How long the log measurement (a child process running the handlers) may take: generous, since on a busy machine it
# shares the cores with the counted run beside it (60 s was too short with both cores loaded twice over)
LOG_MEASUREMENT_TIMEOUT_S = 600


@dataclass
class BatchRun:
    """One executor invocation of the run: the tick that invoked it and the batch it was handed."""

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
    init: InitTime = INIT_UNMEASURED


# == the run ==============================================================================================
class _Gate:
    """Holds outcome writes (writes to an ARMED task) until simulated time reaches the task's due instant."""

    def __init__(self, settle_ms: int) -> None:
        self.world_ms = 0
        self.settle_ms = settle_ms
        self.held: dict[int, tuple[int, set[str]]] = {}  # by thread: (release instant, task ids)
        self._cond = threading.Condition()

    def hold(self, op: str, befores: list[dict[str, Any] | None]) -> None:
        armed = [b for b in befores if b and b.get("status", {}).get("S") == "ARMED"]
        if not armed:
            return
        release_at = max(int(b["due_ms"]["N"]) for b in armed) + self.settle_ms
        ids = {b["task_id"]["S"] for b in armed}
        me = threading.get_ident()
        with self._cond:
            self.held[me] = (release_at, ids)
            self._cond.wait_for(lambda: self.world_ms >= release_at)
            del self.held[me]

    def advance(self, world_ms: int) -> None:
        with self._cond:
            self.world_ms = world_ms
            self._cond.notify_all()

    def held_ids(self) -> set[str]:
        """Tasks whose outcome write is held still (a released write is not: it may not have ended yet)."""
        with self._cond:
            return {t for release_at, ids in self.held.values() if release_at > self.world_ms for t in ids}


class _DeferredRecords:
    """An executor's store (its firing port) whose outcome writes are each made in a thread of their own and not
    waited for.

    The gate holds an outcome write until simulated time reaches its task's due instant. Waited for, a held
    write would hold what the recorder writes after it: a batch fires as one burst, its webhooks end in any
    order, so a chunk of outcomes mixes due instants, and a held write of a late task (or a pool thread it
    takes) would keep an earlier task's outcome from ever being written. Not waited for, each outcome is
    written as soon as its own instant is reached (the scenario's writes all succeed: each executor owns what
    it records). The executor retires its lease (a heartbeat "alive until now") only once they are all written,
    as it does when it waits for them: a poll never finds a live executor's tasks ARMED by a retired one.
    """

    def __init__(self, store: Any) -> None:
        self._store = store
        self._writers: list[threading.Thread] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def record_many(self, executor_id: str, records: list[Any]) -> list[bool]:
        for record in records:
            writer = threading.Thread(target=self._store.record_many, args=(executor_id, [record]), daemon=True)
            writer.start()
            self._writers.append(writer)
        return [True] * len(records)

    def heartbeat(self, executor_id: str, now_ms: int, alive_until_ms: int, invocation: str | None = None) -> bool:
        if alive_until_ms <= now_ms:  # retiring: after this batch's outcomes are written
            self.join()
        return bool(self._store.heartbeat(executor_id, now_ms, alive_until_ms, invocation))

    def join(self) -> None:
        for writer in self._writers:
            writer.join()


@contextlib.contextmanager
def _ending(gate: _Gate, executors: list[tuple[Any, ShiftedClock, list[bool]]]) -> Iterator[None]:
    """However the run ends (inside its moto mock): no write is left held, and every executor is closed (a
    thread waiting on the gate, or a heartbeat renewing, would outlive the run)."""
    try:
        yield
    finally:
        gate.advance(2**62)
        for executor, _, _ in executors:
            executor.close()


def _recorded_or_held(
    task_ids: list[str],
    due_times: list[int],
    until_ms: int,
    status: Callable[[str], str | None],
    held_ids: Callable[[], set[str]],
) -> bool:
    """Every task due by ``until_ms`` has its outcome written, or its outcome write is held by the gate."""
    held = held_ids()
    return all(
        status(t) not in ACTIVE or t in held for t, due in zip(task_ids, due_times, strict=False) if due <= until_ms
    )


def _armed_or_done(task_ids: list[str], status: Callable[[str], str | None]) -> bool:
    """No task of ``task_ids`` is still PENDING (its executor armed it, or it is finished)."""
    return all(status(t) != "PENDING" for t in task_ids)


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 180.0) -> None:
    """Until ``condition()``; a bound, not a timing: a busy machine arms and records slowly."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"scenario: timed out waiting for {what}")
        time.sleep(0.05)


def run_scenario(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    tasks: int = 300,
    *,
    windows: int = 1,
    payload_bytes: int = 200,
    template_path: str | None = None,
    measure_logs: bool = True,
    measure_init: bool = True,
    tenant: str | None = None,
    poll_interval_ms: int | None = None,
    lead_ms: int | None = None,
) -> Scenario:
    """Count what ``tasks`` one-off HTTP tasks cost, end to end, on moto (``tenant``: the tasks are that
    tenant's, keyed ``<tenant>/<id>`` as the REST API makes them, and so in its tenant indexes).

    Timeline (simulated, poll interval ``I`` and lead ``L`` from the default settings): poll ticks every
    ``I``; tick 0 has no watermark yet (set-up, not counted); the client schedules every task just after it,
    due evenly over ``windows`` poll windows starting 3 ticks later (ticks 1-2 are empty: the fixed cost of a
    poll); the run goes on until two empty ticks follow the last task. After each tick every batch the poller
    handed over runs in an executor of its own (a Lambda container, reused when idle) and arms at once; its
    outcome writes are held until simulated time reaches the task's due instant (plus the recorder's settle
    gap), so the next ticks see the tasks still ARMED exactly as they would in AWS. The executor's clock is
    moved to the batch's last due instant, so a batch fires as one burst in real time; tasks carry a
    5-minute grace so that the burst's drift (up to one poll interval) still records SUCCEEDED. ``poll_interval_ms``
    and ``lead_ms`` replace the settings' poll cycle (a poller that polls several times a minute). After the run,
    ``measure_init`` loads the executor's handler in fresh processes to time its INIT
    (:func:`~punctual_tools.cost.coldstart.measure_executor_init`).
    """

    from moto import mock_aws

    from punctual.executing.recorder import SETTLE_S
    from punctual.runtime.client import Client
    from punctual.runtime.wiring import poller_on
    from punctual.stores.dynamodb import build_stores
    from punctual.targets import HttpAction

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "testing")
    settings = _scenario_settings(tenant, poll_interval_ms=poll_interval_ms, lead_ms=lead_ms)
    table = settings.table_name
    interval, lead = settings.poll_interval_ms, settings.lead_ms
    spec = TableSpec.from_template(template_path)
    t0 = SCENARIO_START_MS
    due_times = _due_times(tasks, windows, interval=interval, lead=lead)
    last_tick = (due_times[-1] + int(SETTLE_S * 1000) - t0) // interval + 3
    gate = _Gate(settle_ms=int(SETTLE_S * 1000))
    log_measurement = _start_log_measurement(_log_level(template_path)) if measure_logs else None
    batches = _Batches(settings)
    poll_wall: list[float] = []
    try:
        # the target answers from a process of its own: in this one, a burst's outcome writes (a thread each,
        # on moto) would keep a target's threads from answering within the action's timeout on a busy machine
        with (
            tempfile.TemporaryDirectory() as received,
            receiving(Path(received) / "received.jsonl") as port,
            mock_aws(),
            _ending(gate, batches.executors),
        ):
            client, raw = _table_clients(settings)
            invoker = RecordingInvoker()
            poller = poller_on(build_stores(settings, client), invoker, settings, poller_id="p-cost")
            scheduler = Client(settings, dynamodb=client, clock=FakeClock(t0 + 1_000))  # schedules after tick 0
            action = HttpAction(url=f"http://127.0.0.1:{port}{TARGET_PATH}")
            with CapacityMeter(
                client, raw, table, spec, label=status_label, hold=gate.hold, read_label=heartbeat_read_label
            ) as meter:
                status = _status_reader(meter)
                task_ids: list[str] = []
                for tick in range(last_tick + 1):
                    now = t0 + tick * interval
                    gate.advance(now)
                    _wait(
                        partial(_recorded_or_held, task_ids, due_times, now - gate.settle_ms, status, gate.held_ids),
                        "outcomes due before the tick",
                    )
                    meter.phase, meter.tick = ("setup" if tick == 0 else "poll"), tick
                    poll_wall.append(_timed(poller.poll, now))
                    meter.phase = "execute"
                    dispatched = batches.start(tick, now, invoker.take(), client)
                    _wait(partial(_armed_or_done, dispatched, status), "arming")
                    if tick == 0:  # schedule just after the first poll
                        meter.phase = "schedule"
                        task_ids += _schedule_tasks(scheduler, action, due_times, payload_bytes, tenant)
                gate.advance(2**62)
                batches.join(timeout_s=30)  # each batch ends once its outcomes are written (its retiring heartbeat)
                final = [meter.item({"task_id": {"S": t}}) for t in task_ids]
    finally:
        logs = LOG_BYTES_UNMEASURED if log_measurement is None else _finish_log_measurement(log_measurement)
    init = measure_executor_init() if measure_init else INIT_UNMEASURED
    outcomes = _count_outcomes(final)
    sizes = [item_size(i) for i in final]
    return Scenario(
        tasks=tasks,
        windows=windows,
        start_ms=t0,
        payload_bytes=payload_bytes,
        settings={
            "shard_count": settings.shard_count,
            "lead_ms": lead,
            "poll_interval_ms": interval,
            "max_batch_size": settings.max_batch_size,
            "retention_days": settings.retention_days,
            "db_threads": settings.db_threads,
            "overdue_safety_ms": settings.overdue_safety_ms,
        },
        calls=list(meter.calls),
        ticks=last_tick + 1,
        baseline_ticks=[1, 2],
        work_ticks=list(range(3, last_tick + 1)),
        batches=batches.runs,
        outcomes=outcomes,
        final_item_bytes=sum(sizes) / len(sizes),
        max_item_bytes=max(c for call in meter.calls for c in call.sizes),
        poll_wall_s=poll_wall,
        logs=logs,
        init=init,
    )


def _scenario_settings(tenant: str | None, *, poll_interval_ms: int | None, lead_ms: int | None) -> Settings:
    """The scenario's settings. An executor's lease outlives the simulated ticks its outcome writes are held for
    (its heartbeat runs on real time, while the scenario's ticks are simulated): no executor looks dead to a
    later tick. Heartbeat writes are then one at the start and one at the end of each batch; pricing adds the
    renewals a batch makes in AWS over its life (see pricing.heartbeat_writes_per_tick)."""
    from punctual.config.settings import Settings

    return Settings(
        table_name="punctual-cost",
        ntp_server=None,
        worker_threads=1,
        executor_lease_ms=600_000,
        heartbeat_interval_ms=120_000,
        allowed_targets="127.0.0.1",
        **{k: v for k, v in (("poll_interval_ms", poll_interval_ms), ("lead_ms", lead_ms)) if v is not None},
        # a tenant's tasks keep to its own targets: the loopback stub target
        tenant_map=json.dumps({"tenants": {tenant: {"targets": ["127.0.0.1"]}}}) if tenant else "",
    )  # the loopback stub target


def _due_times(tasks: int, windows: int, *, interval: int, lead: int) -> list[int]:
    """``tasks`` due instants, evenly over ``windows`` poll windows from the first instant tick 3 reaches."""
    first_due = SCENARIO_START_MS + 3 * interval + (lead - interval)  # the first instant tick 3 is the first to reach
    span = windows * interval
    return [first_due + int((i + 0.5) * span / tasks) for i in range(tasks)]


def _log_level(template_path: str | None) -> str:
    """The functions' log level, as the template's ``LogLevel`` parameter defaults it."""
    return str(load_template(template_path).get("Parameters", {}).get("LogLevel", {}).get("Default", "INFO"))


def _table_clients(settings: Settings) -> tuple[Any, Any]:
    """Two DynamoDB clients (inside the moto mock), the runtime's and the meter's raw one, and the table made."""
    import boto3

    from punctual_tools.template import ensure_table

    client = boto3.client("dynamodb", region_name=settings.region)
    raw = boto3.client("dynamodb", region_name=settings.region)
    ensure_table(raw, settings.table_name)
    return client, raw


def _status_reader(meter: CapacityMeter) -> Callable[[str], str | None]:
    """A task's status as the meter last saw its item (None: no item)."""
    key_ids: dict[str, str] = {}

    def status(task_id: str) -> str | None:
        kid = key_ids.get(task_id) or key_ids.setdefault(task_id, key_id({"task_id": {"S": task_id}}))
        item = meter.items.get(kid)
        return None if item is None else item.get("status", {}).get("S")

    return status


def _timed(poll: Callable[[int], Any], now: int) -> float:
    """The wall time of one poll at ``now``, in seconds."""
    started = time.perf_counter()
    poll(now)
    return time.perf_counter() - started


@dataclass
class _Batches:
    """The batches the poller handed over, each run in a thread of its own by an executor's container."""

    settings: Settings
    executors: list[_Container] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    runs: list[BatchRun] = field(default_factory=list)

    def start(self, tick: int, now: int, sent: list[dict[str, Any]], client: Any) -> list[str]:
        """Start a batch for each payload ``sent`` at ``tick``: the ids of the tasks dispatched."""
        for payload in sent:
            self.runs.append(_batch_run(tick, now, payload))
            container = _take_container(self.executors, self.settings, client)
            thread = threading.Thread(target=_run_batch, args=(container, payload), daemon=True)
            thread.start()
            self.threads.append(thread)
        return [t["task_id"] for p in sent for t in p["tasks"]]

    def join(self, *, timeout_s: float) -> None:
        for thread in self.threads:
            thread.join(timeout=timeout_s)


def _batch_run(tick: int, now: int, payload: dict[str, Any]) -> BatchRun:
    """What one batch the poller handed over at ``tick`` holds."""
    dues = [t["due_ms"] for t in payload["tasks"]]
    return BatchRun(tick, now, len(dues), min(dues), max(dues), len(json.dumps(payload).encode()))


def _take_container(executors: list[_Container], settings: Settings, client: Any) -> _Container:
    """An idle executor's container, marked busy, or a new one (a Lambda container, reused when idle)."""
    from punctual.executing.executor import Executor
    from punctual.stores.dynamodb import build_stores
    from punctual.stores.ports import FiringPort

    for entry in executors:
        if not entry[2][0]:
            entry[2][0] = True
            return entry
    replay = ShiftedClock()
    store = _DeferredRecords(build_stores(settings, client).firing)
    # a measured NTP offset, so that drift is also recorded corrected, as in AWS
    entry = (Executor(cast("FiringPort", store), settings, replay, FixedOffset(0.4)), replay, [True])
    executors.append(entry)
    return entry


def _run_batch(entry: _Container, payload: dict[str, Any]) -> None:
    """Run one batch in its container, its clock moved to the batch's last due instant; the container is idle
    after."""
    executor, replay, busy = entry
    event = BatchEvent.model_validate(payload)
    replay.shift_ms = max(t.due_ms for t in event.tasks) + 1 - time.time_ns() / 1_000_000
    try:
        executor.run_batch(event)
    finally:
        busy[0] = False


def _schedule_tasks(
    scheduler: Client, action: HttpAction, due_times: list[int], payload_bytes: int, tenant: str | None
) -> list[str]:
    """Schedule a task at each due time, its JSON payload padded to ``payload_bytes``: their ids."""
    task_ids = []
    for i, due in enumerate(due_times):
        payload = {"video": f"v-{i:06d}", "n": i, "note": ""}
        pad = payload_bytes - len(json.dumps(payload, separators=(",", ":")))
        payload["note"] = "x" * max(pad, 0)
        task = scheduler.schedule(
            from_ms(due),
            action,
            payload,
            task_id=f"{tenant}/cost-{i:06d}" if tenant else f"cost-{i:06d}",
            misfire_grace=300_000,
        )
        task_ids.append(task.task_id)
    return task_ids


def _count_outcomes(final: list[dict[str, Any] | None]) -> dict[str, int]:
    """How many of the final items have each status (``GONE``: no item)."""
    outcomes: dict[str, int] = defaultdict(int)
    for item in final:
        outcomes[(item or {}).get("status", {}).get("S", "GONE")] += 1
    return dict(outcomes)


# == turning counts into per-task and per-tick figures =====================================================
@dataclass(frozen=True)
class Row:
    step: str
    op: str
    requests: float
    wru: float
    wru_index: float
    rru: float


PHASE_ORDER = ("schedule", "poll", "heartbeat check", "arm", "heartbeat", "record", "execute", "miss")


def _rows(calls: Iterable[Call], divide: float) -> list[Row]:
    acc: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for c in calls:
        a = acc[(c.label, c.op)]
        a[0] += 1
        a[1] += c.wru
        a[2] += c.wru_index
        a[3] += c.rru
    order = {p: i for i, p in enumerate(PHASE_ORDER)}
    return [
        Row(label, op, *(v / divide for v in values))
        for (label, op), values in sorted(acc.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1]))
    ]


@dataclass(frozen=True)
class Counts:
    """Per task (variable), per poll tick (fixed) and per executor batch (heartbeat writes) figures of a
    scenario."""

    per_task: list[Row]
    per_tick: list[Row]
    per_batch: list[Row]
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

    @property
    def batch_wru(self) -> float:
        return sum(r.wru + r.wru_index for r in self.per_batch)

    @property
    def batch_requests(self) -> float:
        return sum(r.requests for r in self.per_batch)


def counts(s: Scenario) -> Counts:
    """Per-tick fixed cost = the mean of the empty ticks; per batch = the heartbeat writes, divided by the
    number of executor invocations; per task = everything else, minus that fixed cost for every tick of the
    working span, divided by the number of tasks."""
    base = [c for c in s.calls if c.tick in s.baseline_ticks and c.label == "poll"]
    per_tick = _rows(base, len(s.baseline_ticks))
    per_batch = _rows([c for c in s.calls if c.label == HEARTBEAT], max(len(s.batches), 1))
    work = [
        c for c in s.calls if c.label not in ("setup", HEARTBEAT) and (c.tick is None or c.tick not in s.baseline_ticks)
    ]
    rows = _rows(work, s.tasks)
    fixed = {(r.step, r.op): r for r in per_tick}
    n_work = len(s.work_ticks)
    out: list[Row] = []
    for row in rows:
        r, f = row, fixed.get((row.step, row.op))
        if f is not None:
            r = Row(
                r.step,
                r.op,
                *(
                    max(0.0, v - n_work * fv / s.tasks)
                    for v, fv in ((r.requests, f.requests), (r.wru, f.wru), (r.wru_index, f.wru_index), (r.rru, f.rru))
                ),
            )
        if r.requests > NEGLIGIBLE or r.wru or r.rru:
            out.append(r)
    return Counts(out, per_tick, per_batch, s)


# == recurring schedules: what making an occurrence costs ==================================================
MAKE = "make occurrence"
RECURRING_RATES_MS = (250, 60_000)  # the doc's schedules: 240 occurrences a poll (99 + 99 + 42), and one
SCHEDULE_READ = "read schedule"
MOST_RECURRING_TICKS = 10  # a poll by then has made the schedule's occurrences, or none will


@dataclass(frozen=True)
class Recurring:
    """What making a recurring schedule's occurrences cost on moto: ``rows`` per occurrence made (the poller's
    consistent read of the schedule and the transaction that writes the occurrences and moves the cursor, a
    chunk of at most 99 at a time), for a schedule of ``rate_ms`` that makes ``per_tick`` occurrences a poll."""

    rate_ms: int
    per_tick: float
    occurrences: int
    rows: list[Row]

    @property
    def wru(self) -> float:
        return sum(r.wru + r.wru_index for r in self.rows)

    @property
    def rru(self) -> float:
        return sum(r.rru for r in self.rows)

    @property
    def requests(self) -> float:
        return sum(r.requests for r in self.rows)


def _schedule_label(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str | None:
    label = status_label(before, after)
    return MAKE if label == "schedule" else label


def _schedule_read_label(keys: list[dict[str, Any]]) -> str | None:
    if keys and all(k.get("task_id", {}).get("S", "").startswith(SCHEDULE_PREFIX) for k in keys):
        return SCHEDULE_READ
    return heartbeat_read_label(keys)


def run_recurring(rate_ms: int, ticks: int = 1, template_path: str | None = None) -> Recurring:
    """Count what the real poller spends making the occurrences of one ``rate(rate_ms)`` schedule over
    ``ticks`` polls (after the one that first finds it), on moto, and divide by the occurrences it made.

    Only the schedule's own requests are counted (its item's reads and the transactions): the poll's queries
    are the fixed cost of a tick, and an occurrence, once made, is armed, fired and recorded as a one-off task
    is (the same item with two more small attributes, within the same write unit)."""

    import boto3
    from moto import mock_aws

    from punctual.config.settings import Settings
    from punctual.runtime.client import Client
    from punctual.runtime.wiring import poller_on
    from punctual.stores.dynamodb import build_stores
    from punctual.targets import HttpAction
    from punctual_tools.template import ensure_table

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "testing")
    table = "punctual-cost-recurring"
    settings = Settings(table_name=table, ntp_server=None, allowed_targets="127.0.0.1")
    interval = settings.poll_interval_ms
    spec = TableSpec.from_template(template_path)
    t0 = SCENARIO_START_MS
    with mock_aws():
        client = boto3.client("dynamodb", region_name=settings.region)
        raw = boto3.client("dynamodb", region_name=settings.region)
        ensure_table(raw, table)
        poller = poller_on(build_stores(settings, client), RecordingInvoker(), settings, poller_id="p-cost")
        scheduler = Client(settings, dynamodb=client, clock=FakeClock(t0 + 1_000))
        start = t0 + 3 * interval + settings.lead_ms  # beyond what creating the schedule makes at once
        scheduler.create_schedule(
            "cost-recurring",
            f"rate({rate_ms} milliseconds)",
            HttpAction(url=f"https://hooks.example.com{TARGET_PATH}"),
            {"n": 0},
            start_at=from_ms(start),
        )
        with CapacityMeter(client, raw, table, spec, label=_schedule_label, read_label=_schedule_read_label) as meter:
            first, tick = 0, 0
            while not first or tick < first + ticks:  # (moto copies the whole table for each transaction: few ticks)
                tick += 1
                meter.phase, meter.tick = "poll", tick
                made = poller.poll(t0 + tick * interval).occurrences_created
                if made and not first:
                    first = tick  # the tick that first reaches the schedule: counted from the next one
                if tick > MOST_RECURRING_TICKS:
                    raise RuntimeError("run_recurring: no poll made the schedule's occurrences")
        counted = [
            c
            for c in meter.calls
            if c.tick is not None and first < c.tick <= first + ticks and c.label in (MAKE, SCHEDULE_READ)
        ]
        made_ids = [c for c in counted if c.label == MAKE]
        occurrences = sum(len(c.sizes) for c in made_ids) - len(made_ids)  # each transaction also moves the cursor
    return Recurring(rate_ms, occurrences / ticks, occurrences, _rows(counted, max(occurrences, 1)))


# == CloudWatch Logs: what the handlers print, measured ====================================================
def measure_handler_logs() -> dict[str, float]:
    """Run the real poller and executor handlers (loaded by path, inside moto) on batches of 1 and 41 HTTP
    tasks due a moment ahead, and count the bytes they print (Powertools JSON lines and EMF blobs)."""

    import boto3
    from moto import mock_aws

    from punctual.runtime.client import Client
    from punctual.runtime.wiring import build_poller
    from punctual.targets import HttpAction
    from punctual_tools.local.worker import load_handler_in_a_thread, load_handler_module
    from punctual_tools.template import ensure_table

    src = find_template().parent / "src"
    out = io.StringIO()
    invoker = RecordingInvoker()

    def context(function_name: str) -> LambdaContext:  # a fresh request id for each invocation
        return LambdaContext(function_name, memory_limit_in_mb=256)

    def lines_bytes(text: str) -> int:
        return sum(len(line.encode()) + LOG_EVENT_OVERHEAD_BYTES for line in text.splitlines() if line.strip())

    def taken() -> int:
        text = out.getvalue()
        out.seek(0)
        out.truncate()
        return lines_bytes(text)

    with serving(StubTarget(status=200)) as target, mock_aws(), contextlib.redirect_stdout(out):
        ensure_table(boto3.client("dynamodb", region_name="us-east-1"), "punctual-cost-logs")
        poller_app: Any = load_handler_module(str(src / "poller" / "app.py"))
        executor_app: Any = load_handler_in_a_thread(src / "executor" / "app.py")
        poller_app.poller = build_poller(poller_app.settings, invoker=invoker)
        client = Client(poller_app.settings, dynamodb=boto3.client("dynamodb", region_name="us-east-1"))
        taken()
        poller_app.handler(scheduled_event(), context("punctual-poller"))
        empty_poll = taken()
        sizes: dict[int, tuple[int, int]] = {}
        for count in LOG_SAMPLE_TASKS:
            start = datetime.now(UTC) + timedelta(milliseconds=600)
            for i in range(count):
                client.schedule(
                    start + timedelta(milliseconds=5 * i),
                    HttpAction(url=target.url(TARGET_PATH)),
                    {"video": f"v-{i:06d}", "note": "x" * 160},
                    task_id=f"logs-{count}-{i}",
                )
            taken()
            poller_app.handler(scheduled_event(), context("punctual-poller"))
            poll = taken()
            (payload,) = invoker.take()
            answer = executor_app.handler(json.loads(json.dumps(payload)), context("punctual-executor"))
            if answer["succeeded"] != count:  # a failed fire logs a line of its own: not the normal case
                raise RuntimeError(f"log measurement: {answer}")
            sizes[count] = (poll, taken())
    (small, (poll_s, exec_s)), (large, (poll_l, exec_l)) = sorted(sizes.items())
    per_task_exec = (exec_l - exec_s) / (large - small)
    per_task_poll = (poll_l - poll_s) / (large - small)
    return {
        "per_poll": empty_poll + LAMBDA_PLATFORM_LOG_BYTES,
        "per_batch": exec_s - small * per_task_exec + LAMBDA_PLATFORM_LOG_BYTES,
        "per_task": per_task_exec + per_task_poll,
    }


def _start_log_measurement(level: str) -> Any:
    """The log measurement runs in a process of its own (the handlers' module-level set-up stays out of this
    one), meanwhile the scenario runs here."""

    env = {
        **os.environ,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "PUNCTUAL_TABLE_NAME": "punctual-cost-logs",
        "PUNCTUAL_NTP_SERVER": "off",
        "PUNCTUAL_WORKER_THREADS": "4",
        "PUNCTUAL_REGION": "us-east-1",
        "PUNCTUAL_ALLOWED_TARGETS": "127.0.0.1",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": level,
        "POWERTOOLS_SERVICE_NAME": metric_names.SERVICE,
        "POWERTOOLS_METRICS_NAMESPACE": metric_names.NAMESPACE,
    }
    for name in (
        "PUNCTUAL_ENDPOINT_URL",
        "PUNCTUAL_FIRE_LOG_PATH",
        "POWERTOOLS_DEV",
        "POWERTOOLS_METRICS_DISABLED",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
    ):
        env.pop(name, None)
    return subprocess.Popen(
        [sys.executable, "-m", "punctual_tools.cost", "--measure-logs"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish_log_measurement(process: Any) -> LogBytes:
    try:
        stdout, stderr = process.communicate(timeout=LOG_MEASUREMENT_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - a measurement that does not finish is reported as not measured
        process.kill()
        return LOG_BYTES_UNMEASURED
    if process.returncode != 0:
        print(f"punctual_tools.cost: log measurement failed:\n{stderr[-2000:]}", file=sys.stderr)
        return LOG_BYTES_UNMEASURED
    values = json.loads(stdout.strip().splitlines()[-1])
    return LogBytes(measured=True, **values)
