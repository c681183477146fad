"""The sizing model: what a deployment needs to fire ``rate`` tasks a second, sustained, and what it costs.

One function per quantity, each used by ``punctual plan``, by the generated tables of docs/scale.md and
docs/cost.md (:mod:`.pages`) and by ``punctual_tools.bench.scale``'s AWS model, so that none of them computes it a
second way. Inputs: the template's defaults (:class:`Defaults`, read through one accessor per parameter), the CPU a
task takes a poll and an executor as ``make scale`` measured it (``docs/benchmarks/scale.json``), and the
per-task capacity units of :data:`TASK_UNITS`, which ``tests/tools/functional/test_plan_counts.py`` holds to what
the cost meter counts on moto. Prices and the executors' awake time come from :mod:`punctual_tools.cost.pricing`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from punctual.config.cpu_share import MB_PER_VCPU, QUOTA_PERIOD_MS, fires_per_period
from punctual.config.settings import Settings, least_lead_ms
from punctual.domain.model import Candidate, TaskStatus
from punctual.polling.poller import make_batches
from punctual_tools.cost.pricing import (
    DDB_RCU_HOUR_USD,
    DDB_RRU_USD,
    DDB_WCU_HOUR_USD,
    DDB_WRU_USD,
    LAMBDA_GB_S_ARM_USD,
    LAMBDA_GB_S_X86_USD,
    LAMBDA_REQUEST_USD,
    MONTH_S,
    POLLER_OVERHEAD_S,
    RECORD_TAIL_S,
    eventbridge_scheduler_usd,
    executor_seconds_per_tick,
    heartbeat_writes_per_tick,
    memory_mb,
    template_param,
)
from punctual_tools.template import find_template, load_template

# -- AWS's documented limits (sources: docs/scale.md, "Sources") ---------------------------------------------
PARTITION_WRITES_PER_S = 1_000  # a partition (and so one index key) takes at most this many write units a second
LAMBDA_CONCURRENCY_DEFAULT = 1_000  # concurrent executions per Region, by default
LAMBDA_UNRESERVED_MIN = 100  # Lambda keeps this much of the account's concurrency unreserved
LAMBDA_SCALE_STEP = 1_000  # new execution environments a function may get ...
LAMBDA_SCALE_STEP_S = 10.0  # ... every this many seconds (not adjustable)
DDB_TABLE_QUOTA_UNITS = 40_000  # on-demand read and write request units a second, per table and per index
DDB_NEW_TABLE_WRITES, DDB_NEW_TABLE_READS = 4_000, 12_000  # what a new on-demand table takes at once (warm)

# -- what the code writes and reads per task (held to the cost meter's counts on moto) -----------------------
TASK_ITEM_BYTES = 494  # a task's stored item after its outcome, less its payload (the cost scenario's `http` task)
TICK_BUCKETS = 6  # minute buckets a poll reads, each shard of each: from the watermark (3 min behind) to now + lead
BATCH_WRITES_COUNTED = 2.0  # heartbeat writes a batch makes in any case (its first beat and its retiring one)


@dataclass(frozen=True)
class TaskUnits:
    """Capacity units one task costs, by who made it: writes on the table per item write (create, arm, record;
    each ``ceil(item / 1 KB)`` units) and index writes (keys-only entries, one unit each)."""

    table_writes: int  # item writes: create, arm, record
    index_writes: int  # index entries put or removed over the task's life
    item_bytes: int  # its stored item after its outcome, less its payload (the cost scenario's `http` task)


TASK_UNITS = {
    # the client's PutItem: the due index's entry is put at create and removed at record
    "client": TaskUnits(table_writes=3, index_writes=2, item_bytes=TASK_ITEM_BYTES),
    # the REST API's: also in the tenant index (put once, kept) and in the active-task index (put at create,
    # removed at record), which this release keeps twice while a table moves from tenant_active to
    # tenant_active_sharded (docs/deploy.md, "Upgrades": one index created a release): 5 more index writes, 3 once
    # tenant_active is gone; and a tenant key and tenant_shard on the item
    "api": TaskUnits(table_writes=3, index_writes=7, item_bytes=TASK_ITEM_BYTES + 33),
}
POLL_READS_PER_SEEN = 0.5  # a poll reads each task it finds (BatchGetItem, eventually consistent, per 4 KB)

# -- the REST API's own requests (not counted on moto: the function's duration in AWS is assumed) ------------
API_GATEWAY_REQUEST_USD = 3.50 / 1e6  # REST API, the first 333 million requests a month
API_FUNCTION_MB = 512
API_BILLED_S = 0.030  # the API function's billed duration a call (assumed)

# -- DynamoDB provisioned capacity (its prices: punctual_tools.cost.pricing) ----------------------------------
CAPACITY_MODES = ("on-demand", "provisioned")
UTILIZATION_RANGE = (0.2, 0.9)  # the target utilizations DynamoDB auto scaling takes
# Reserved capacity: a commitment to a base of provisioned units, about 54 % (1 year) or 77 % (3 years) below the
# provisioned rate (Amazon DynamoDB pricing, "Reserved capacity"; partial upfront, bought in blocks of 100 units)
RESERVED_DISCOUNT = {"none": 0.0, "1y": 0.54, "3y": 0.77}
ARCHITECTURES = {"arm64": LAMBDA_GB_S_ARM_USD, "x86_64": LAMBDA_GB_S_X86_USD}
EXECUTOR_BATCH_MAX = 900  # ExecutorBatchSize's MaxValue: a batch's event within async invoke's 256 KB
API_BATCH_MAX = 100  # tasks a POST /v1/tasks:batch call takes (punctual.scheduling.bulk.BATCH_MAX_TASKS)
API_BATCH_BILLED_S_PER_TASK = 0.005  # the API function's billed time per task of a batch call (assumed)

# -- plan rules -----------------------------------------------------------------------------------------------
ARM_MARGIN_S = 5.0  # the last batch a tick invokes still arms before its first task is due
CONCURRENCY_HEADROOM = 1.1  # reservations: 10 % over what the model needs
POLLER_FULL_CORE_MB = MB_PER_VCPU  # raise the poller to one vCPU before splitting the poll
MINUTE_S = 60.0  # a poll interval under this: several polls a minute
ITEM_MOST_KB = 400  # DynamoDB's item limit
LAMBDA_LEAST_MB = 128  # Lambda's smallest memory size
POLLER_LEAST_MB = 256  # the least poller memory whose INIT stays within Lambda's 10 s (docs/cost.md, "Cold starts")
PAGE_RATES = (100.0, 1_000.0, 10_000.0, 1e6 / 60)  # the rates of the generated tables (the last: 1 M a minute)
# Template parameters this model sets; those the template does not declare are left out of the overrides.
POLLER_MEMORY_PARAMETER = "PollerMemorySize"
BATCH_SIZE_PARAMETER = "ExecutorBatchSize"


# == inputs ====================================================================================================
@dataclass(frozen=True)
class Defaults:
    """What the shipped template and Settings give, and the CPU figures ``make scale`` measured."""

    shard_count: int
    max_shards: int
    poll_groups: int
    max_poll_groups: int
    lead_s: float
    interval_s: float
    template_lead_s: float  # LeadMs's default (lead_s is the plan's, with its levers)
    batch_size: int
    template_batch_size: int  # ExecutorBatchSize's default (batch_size is the plan's)
    min_write_capacity: int  # provisioned: TableMinWriteCapacity's default (what each of the table and its
    min_read_capacity: int  # indexes keeps at least) and TableMinReadCapacity's
    max_write_capacity: int  # provisioned: TableMaxWriteCapacity's default (auto scaling's ceiling, each of
    max_read_capacity: int  # the table and its indexes) and TableMaxReadCapacity's
    indexes: int  # the table's global secondary indexes, each provisioned on its own
    executor_mb: int
    poller_mb: int
    poller_timeout_s: float
    fast_path_margin_s: float
    fire_cpu_us: float
    poll_us: float  # the poller's CPU per task dispatched (reads included)
    executor_us: float  # an executor's CPU per task (arm, heartbeat, fire, record)
    parameters: frozenset[str]  # the template's parameter names

    @property
    def max_executor_mb(self) -> int:
        return 10_240


@dataclass(frozen=True)
class Levers:
    """The choices that change what a task costs, each a template parameter or a way of calling: how often the
    poller polls within its minute and how far ahead it dispatches (``PollsPerMinute``, ``LeadMs``), the table's
    capacity mode (``TableBillingMode``, with auto scaling at ``utilization``; ``reserved`` capacity is a purchase,
    not a parameter), the functions' architecture, and how many tasks an API call carries (1, or up to 100 through
    ``POST /v1/tasks:batch``)."""

    polls_per_minute: int = 1
    lead_s: float | None = None  # None: the template's LeadMs
    capacity: str = "on-demand"
    utilization: float = 0.70  # auto scaling's target: consumed / provisioned
    reserved: str = "none"
    arch: str = "arm64"
    api_tasks_per_call: int = 1
    batch_size: int | None = None  # None: the template's ExecutorBatchSize

    def check(self) -> None:
        if self.polls_per_minute not in range(1, 7):
            raise ValueError(f"polls a minute must be 1 to 6, not {self.polls_per_minute!r}")
        if self.capacity not in CAPACITY_MODES:
            raise ValueError(f"the capacity mode must be one of {CAPACITY_MODES}, not {self.capacity!r}")
        least, most = UTILIZATION_RANGE
        if not least <= self.utilization <= most:
            raise ValueError(
                f"the target utilization must be {least} to {most} (auto scaling's range), not {self.utilization}"
            )
        if self.reserved not in RESERVED_DISCOUNT or (self.reserved != "none" and self.capacity != "provisioned"):
            raise ValueError(f"reserved capacity ({self.reserved!r}) needs provisioned capacity: none, 1y or 3y")
        if self.arch not in ARCHITECTURES:
            raise ValueError(f"the architecture must be one of {sorted(ARCHITECTURES)}, not {self.arch!r}")
        if self.batch_size is not None and not 1 <= self.batch_size <= EXECUTOR_BATCH_MAX:
            raise ValueError(f"a batch must hold 1 to {EXECUTOR_BATCH_MAX} tasks, not {self.batch_size!r}")
        if not 1 <= self.api_tasks_per_call <= API_BATCH_MAX:
            raise ValueError(f"tasks an API call carries must be 1 to {API_BATCH_MAX}, not {self.api_tasks_per_call}")

    def flags(self) -> list[str]:
        """The ``punctual plan`` flags that give these levers (none for the defaults).

        >>> Levers(polls_per_minute=6, lead_s=20, capacity="provisioned").flags()
        ['--polls-per-minute', '6', '--lead-ms', '20000', '--capacity', 'provisioned']
        """
        wanted = (
            ("--polls-per-minute", self.polls_per_minute, 1),
            ("--lead-ms", None if self.lead_s is None else round(self.lead_s * 1000), None),
            ("--batch-size", self.batch_size, None),
            ("--capacity", self.capacity, "on-demand"),
            ("--utilization", round(self.utilization * 100), 70),
            ("--reserved", self.reserved, "none"),
            ("--arch", self.arch, "arm64"),
            ("--api-batch", self.api_tasks_per_call, 1),
        )
        return [part for flag, value, default in wanted if value != default for part in (flag, str(value))]

    def apply(self, d: Defaults) -> Defaults:
        """The defaults with this poll cycle: the interval from the polls a minute, the lead if one is given (at
        least the interval plus the fast path's margin, as the settings require)."""
        interval = 60.0 / self.polls_per_minute
        lead = d.lead_s if self.lead_s is None else self.lead_s
        if lead * 1000 < least_lead_ms(round(interval * 1000), round(d.fast_path_margin_s * 1000)):
            raise ValueError(
                f"the lead ({lead:g} s) must be at least the poll interval ({interval:g} s) plus the fast path's "
                f"margin ({d.fast_path_margin_s:g} s)"
            )
        return replace(d, interval_s=interval, lead_s=lead, batch_size=self.batch_size or d.batch_size)


def measured_cpu(path: str | None = None) -> tuple[float, float]:
    """(poll µs, executor µs) of CPU per task, as ``make scale`` measured them (``docs/benchmarks/scale.json``)."""
    file = path or find_template().parent / "docs" / "benchmarks" / "scale.json"
    with open(file, encoding="utf-8") as handle:
        model = json.load(handle)["model"]
    return float(model["poll_us"]), float(model["executor_us"])


def parameter_range(name: str, template: dict[str, Any]) -> tuple[int, int]:
    """(MinValue, MaxValue) of a template parameter."""
    spec = template["Parameters"][name]
    return int(spec.get("MinValue", 0)), int(spec.get("MaxValue", 1 << 31))


@cache
def defaults(template_path: str | None = None, scale_json: str | None = None) -> Defaults:
    """The template's defaults (each through :func:`~punctual_tools.cost.pricing.template_param` or
    :func:`~punctual_tools.cost.pricing.memory_mb`) and the measured CPU per task."""
    template = load_template(template_path)
    fields = Settings.model_fields
    poll_us, executor_us = measured_cpu(scale_json)
    resources = template["Resources"]
    poller = resources["PollerFunction"]["Properties"]
    lead_s = template_param("LeadMs", fields["lead_ms"].default, template_path) / 1000
    batch_size = int(template_param(BATCH_SIZE_PARAMETER, fields["max_batch_size"].default, template_path))
    return Defaults(
        shard_count=int(template_param("ShardCount", 4, template_path)),
        max_shards=parameter_range("ShardCount", template)[1],
        poll_groups=int(template_param("PollGroups", 1, template_path)),
        max_poll_groups=parameter_range("PollGroups", template)[1],
        lead_s=lead_s,
        interval_s=fields["poll_interval_ms"].default / 1000,
        template_lead_s=lead_s,
        batch_size=batch_size,
        template_batch_size=batch_size,
        executor_mb=memory_mb("ExecutorFunction", 256, template_path),
        poller_mb=memory_mb("PollerFunction", 512, template_path),
        min_write_capacity=int(template_param("TableMinWriteCapacity", 5, template_path)),
        min_read_capacity=int(template_param("TableMinReadCapacity", 5, template_path)),
        max_write_capacity=int(template_param("TableMaxWriteCapacity", 4_000, template_path)),
        max_read_capacity=int(template_param("TableMaxReadCapacity", 4_000, template_path)),
        indexes=len(resources["TasksTable"]["Properties"].get("GlobalSecondaryIndexes", [])),
        poller_timeout_s=float(poller.get("Timeout", 55)),
        fast_path_margin_s=fields["fast_path_margin_ms"].default / 1000,
        fire_cpu_us=float(fields["fire_cpu_us"].default),
        poll_us=poll_us,
        executor_us=executor_us,
        parameters=frozenset(template.get("Parameters", {})),
    )


# == one function per quantity ===================================================================================
def power_of_two_at_least(x: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(x, 1.0))))


def shards_needed(rate: float, d: Defaults) -> int:
    """``ShardCount``: the due index takes a minute's creates and records on its S keys, at most 1,000 writes a
    second each (both at ``rate`` in the worst case); a power of two of twice that, never below the default."""
    need = 2 * rate / PARTITION_WRITES_PER_S
    return min(d.max_shards, max(d.shard_count, power_of_two_at_least(2 * need)))


def vcpu(memory: int) -> float:
    """The share of a vCPU ``memory`` MB buys (at most one for Python's one busy thread)."""
    return min(1.0, memory / MB_PER_VCPU)


def poll_budget_s(d: Defaults) -> float:
    """What a tick has to dispatch before the first task it is the first to see is due (lead − interval), never
    past its deadline, less an executor's start and arm."""
    return min(d.lead_s - d.interval_s, d.poller_timeout_s - 5) - ARM_MARGIN_S


def pollers_needed(rate: float, poller_mb: int, d: Defaults) -> float:
    """Pollers a tick needs: the CPU of dispatching a minute's tasks over the share of a vCPU one poller has,
    within :func:`poll_budget_s`."""
    return rate * d.interval_s * d.poll_us * 1e-6 / (vcpu(poller_mb) * poll_budget_s(d))


def poller_memory(rate: float, d: Defaults) -> int:
    """The poller's memory: the template's while one poller keeps up, else one full vCPU. A poller that polls
    several times a minute is billed for most of its minute: then the least memory that keeps up, never below
    :data:`POLLER_LEAST_MB`."""
    if d.interval_s < MINUTE_S and pollers_needed(rate, POLLER_LEAST_MB, d) <= 1:
        return min(d.poller_mb, POLLER_LEAST_MB)
    return d.poller_mb if pollers_needed(rate, d.poller_mb, d) <= 1 else max(d.poller_mb, POLLER_FULL_CORE_MB)


def poll_groups(pollers: float, shards: int) -> int:
    """The fewest poll groups that give at least ``pollers`` pollers and divide ``shards`` (a power of two)."""
    need = max(1, math.ceil(pollers))
    return next((g for g in range(need, shards + 1) if shards % g == 0), shards)


CUT_SLICE_TASKS = 100_000  # at most this many evenly spread tasks are cut to find a sustained rate's batch


def batch_tasks(rate: float, executor_mb: int, d: Defaults) -> int:
    """Tasks a batch holds at a sustained ``rate``, as the poller cuts them (:func:`make_batches`: no more of a
    batch due within one CPU-quota period than the executor's share of a core fires in it, in as many interleaved
    lanes as that needs): the largest batch it makes of tasks spread evenly at that rate, over enough of them to
    fill each lane twice."""
    at_once = fires_per_period(executor_mb, d.fire_cpu_us)
    lanes = max(1, math.ceil(rate * QUOTA_PERIOD_MS / 1000 / at_once))
    count = min(CUT_SLICE_TASKS, 2 * lanes * d.batch_size)
    step_ms = 1000 / rate
    due = [
        Candidate(
            task_id=f"t{i}", due_ms=int(i * step_ms), status=TaskStatus.PENDING, lease_until_ms=None, misfire_grace_ms=0
        )
        for i in range(count)
    ]
    return max(len(batch) for batch in make_batches(due, d.batch_size, at_once))


def full_batch_memory(rate: float, d: Defaults) -> int:
    """The least executor memory (MB) at which the poller does not cut a sustained ``rate``'s batches for the
    executors' CPU (they interleave in lanes instead, so this is the smallest memory unless a rate's spread
    cannot be)."""
    memory = 128
    while memory < d.max_executor_mb and batch_tasks(rate, memory, d) < d.batch_size:
        memory += 64
    return min(memory, d.max_executor_mb)


def executors_in_flight(rate: float, batch: int, d: Defaults) -> int:
    """Executors alive at the peak (just after a tick): ``rate × (lead + tail) / batch``."""
    return math.ceil(rate * (d.lead_s + RECORD_TAIL_S) / batch)


def executors_by_cpu(rate: float, executor_mb: int, d: Defaults) -> int:
    """Executors the tasks' CPU needs: ``rate × CPU per task`` over one executor's share of a vCPU."""
    return math.ceil(rate * d.executor_us * 1e-6 / vcpu(executor_mb))


def executor_concurrency(rate: float, batch: int, executors: int, d: Defaults) -> int:
    """The executor's reservation: the peak executors, and at least twice a tick's batches (the poller cuts a
    burst for the executors' CPU into no more than half of it), plus headroom, rounded up to tens."""
    tick_batches = math.ceil(rate * d.interval_s / batch)
    return 10 * math.ceil(max(executors, 2 * tick_batches) * CONCURRENCY_HEADROOM / 10)


def scale_up_s(executors: int) -> float:
    """Seconds Lambda takes to start ``executors`` new environments of one function from cold."""
    return math.ceil(executors / LAMBDA_SCALE_STEP) * LAMBDA_SCALE_STEP_S


def item_write_units(payload_bytes: float, made_by: str = "client") -> int:
    """Write units of one write of a task's item (the larger image, one unit a KB)."""
    return max(1, math.ceil((TASK_UNITS[made_by].item_bytes + payload_bytes) / 1024))


def item_read_units(payload_bytes: float, made_by: str = "client") -> float:
    """Read units of one eventually consistent read of a task's item (half a unit per 4 KB)."""
    return POLL_READS_PER_SEEN * max(1, math.ceil((TASK_UNITS[made_by].item_bytes + payload_bytes) / 4096))


def heartbeat_writes_per_task(rate: float, batch: int, d: Defaults) -> float:
    """Heartbeat writes a task carries: a tick's executors' writes over their life, per task."""
    n = rate * d.interval_s
    invocations, seconds = executor_seconds_per_tick(n, batch, int(d.lead_s * 1000), int(d.interval_s * 1000))
    return heartbeat_writes_per_tick(invocations, seconds, BATCH_WRITES_COUNTED) / n


@dataclass(frozen=True)
class Capacity:
    """Request units a second, on demand, at a sustained rate."""

    table_writes: float  # on the table: items and heartbeats
    index_writes: float  # on the indexes together
    due_index_writes: float  # on the due index alone (its partition keys: the shards)
    reads: float

    @property
    def writes(self) -> float:
        return self.table_writes + self.index_writes


def capacity(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    rate: float, payload_bytes: float, batch: int, shards: int, made_by: str, *, d: Defaults
) -> Capacity:
    """Write and read units a second at ``rate``: three item writes and the index entries of each task, the
    heartbeats, the poll's reads of each task it sees (lead / interval times) and of each shard and bucket."""
    units = TASK_UNITS[made_by]
    beats = heartbeat_writes_per_task(rate, batch, d)
    seen = d.lead_s / d.interval_s
    return Capacity(
        table_writes=rate * (units.table_writes * item_write_units(payload_bytes, made_by) + beats),
        index_writes=rate * units.index_writes,
        due_index_writes=rate * TASK_UNITS["client"].index_writes,
        reads=rate * seen * (item_read_units(payload_bytes, made_by) + POLL_READS_PER_SEEN / batch)
        + shards * TICK_BUCKETS * 0.5 / d.interval_s,
    )


@dataclass(frozen=True)
class Bill:
    """A month (30 days) at the rate sustained: each line in dollars."""

    tasks: float
    lines: dict[str, float]

    @property
    def usd(self) -> float:
        return sum(self.lines.values())

    @property
    def usd_per_million(self) -> float:
        return self.usd / (self.tasks / 1e6)


def dynamodb_usd(cap: Capacity, levers: Levers, d: Defaults) -> dict[str, float]:
    """A month of DynamoDB requests at ``cap``: on demand, per request unit; provisioned, the units auto scaling
    keeps (consumed / target utilization, each of the table and its ``d.indexes`` indexes at least the template's
    minimum), less the reserved capacity's discount."""
    if levers.capacity == "on-demand":
        return {
            "DynamoDB writes": cap.writes * MONTH_S * DDB_WRU_USD,
            "DynamoDB reads": cap.reads * MONTH_S * DDB_RRU_USD,
        }
    u, least_w, least_r = levers.utilization, d.min_write_capacity, d.min_read_capacity
    other_index_writes = cap.index_writes - cap.due_index_writes
    writes = (
        max(cap.table_writes / u, least_w)
        + max(cap.due_index_writes / u, least_w)
        + max(other_index_writes / u, least_w * (d.indexes - 1))
    )
    reads = max(cap.reads / u, least_r) + least_r * d.indexes  # the poll's reads are the table's; queries are tiny
    hours, paid = MONTH_S / 3600, 1 - RESERVED_DISCOUNT[levers.reserved]
    return {
        "DynamoDB writes": writes * hours * DDB_WCU_HOUR_USD * paid,
        "DynamoDB reads": reads * hours * DDB_RCU_HOUR_USD * paid,
    }


def poller_seconds_per_minute(rate: float, poller_mb: int, groups: int, d: Defaults) -> float:
    """The pollers' billed seconds a minute: a poll's work (every group's), and with several polls a minute the
    waits between them (each group's invocation lives from its first poll to the end of its last)."""
    polls = round(60 / d.interval_s)
    poll_s = groups * POLLER_OVERHEAD_S + rate * d.interval_s * d.poll_us * 1e-6 / vcpu(poller_mb)
    return groups * (polls - 1) * d.interval_s + poll_s  # the earlier polls run within the waits


def api_usd_per_task(levers: Levers) -> float:
    """API Gateway and the API function, per task: a call per ``api_tasks_per_call`` tasks (30 ms billed a call,
    and 5 ms a task of a batch call, assumed)."""
    k = levers.api_tasks_per_call
    call_s = API_BILLED_S + (k * API_BATCH_BILLED_S_PER_TASK if k > 1 else 0.0)
    per_call = API_GATEWAY_REQUEST_USD + LAMBDA_REQUEST_USD + call_s * API_FUNCTION_MB / 1024 * LAMBDA_GB_S_ARM_USD
    return per_call / k


def monthly_bill(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    rate: float,
    payload_bytes: float,
    executor_mb: int,
    poller_mb: int,
    groups: int,
    *,
    batch: int,
    shards: int,
    made_by: str,
    d: Defaults,
    levers: Levers | None = None,
) -> Bill:
    """Lambda (executors awake until their batch's last task, pollers, the API's function), DynamoDB (on demand, or
    provisioned with auto scaling) and, for tasks made through the REST API, API Gateway: the cost page's target
    scope, at ``rate`` for a month (``d``: the defaults with the levers' poll cycle applied)."""
    levers = levers or Levers()
    gb_s = ARCHITECTURES[levers.arch]
    cap = capacity(rate, payload_bytes, batch, shards, made_by, d=d)
    ticks = MONTH_S / d.interval_s
    tasks = rate * MONTH_S
    invocations, seconds = executor_seconds_per_tick(
        rate * d.interval_s, batch, int(d.lead_s * 1000), int(d.interval_s * 1000)
    )
    minutes = MONTH_S / 60
    lines = {
        **dynamodb_usd(cap, levers, d),
        "Lambda executors": ticks * (seconds * executor_mb / 1024 * gb_s + invocations * LAMBDA_REQUEST_USD),
        "Lambda pollers": minutes
        * (
            poller_seconds_per_minute(rate, poller_mb, groups, d) * poller_mb / 1024 * gb_s
            + groups * LAMBDA_REQUEST_USD
        ),
    }
    if made_by == "api":
        lines["API Gateway and the API function"] = tasks * api_usd_per_task(levers)
    return Bill(tasks, lines)


# == the plan =====================================================================================================
@dataclass(frozen=True)
class Plan:
    rate: float
    payload_kb: float
    executor_mb: int
    made_by: str
    shards: int
    pollers: float
    poller_mb: int
    poll_groups: int
    batch: int
    executors: int
    executors_in_flight: int
    executors_by_cpu: int
    executor_concurrency: int
    poller_concurrency: int
    account_concurrency: int
    scale_up_s: float
    invocations_per_s: float
    capacity: Capacity
    bill: Bill
    defaults: Defaults
    levers: Levers = Levers()

    def overrides(self) -> dict[str, int | str]:
        """The template parameters to set (those that differ from the default and the template declares)."""
        d, levers = self.defaults, self.levers
        provisioned = levers.capacity == "provisioned"
        wanted: dict[str, tuple[int | str, int | str]] = {
            "PollsPerMinute": (levers.polls_per_minute, 1),
            "LeadMs": (round(d.lead_s * 1000), round(d.template_lead_s * 1000)),
            "TableBillingMode": ("PROVISIONED" if provisioned else "PAY_PER_REQUEST", "PAY_PER_REQUEST"),
            "TableTargetUtilization": (round(levers.utilization * 100) if provisioned else 70, 70),
            "TableMaxWriteCapacity": (self.provisioned_ceiling("write"), d.max_write_capacity),
            "TableMaxReadCapacity": (self.provisioned_ceiling("read"), d.max_read_capacity),
            "ShardCount": (self.shards, d.shard_count),
            "PollGroups": (self.poll_groups, d.poll_groups),
            "ExecutorMemorySize": (self.executor_mb, d.executor_mb),
            "ExecutorReservedConcurrency": (self.executor_concurrency, 0),
            "PollerReservedConcurrency": (self.poller_concurrency, 0),
            POLLER_MEMORY_PARAMETER: (self.poller_mb, d.poller_mb),
            BATCH_SIZE_PARAMETER: (self.batch, d.template_batch_size),
        }
        return {name: value for name, (value, default) in wanted.items() if value != default and name in d.parameters}

    def provisioned_ceiling(self, kind: str) -> int:
        """Provisioned: auto scaling's ceiling for the table's ``kind`` units (write or read), the template's unless
        the table needs more at its target (with half again for a rise), up to DynamoDB's per-table quota."""
        d, levers = self.defaults, self.levers
        default = d.max_write_capacity if kind == "write" else d.max_read_capacity
        if levers.capacity != "provisioned":
            return default
        units = self.capacity.table_writes if kind == "write" else self.capacity.reads
        need = 1_000 * math.ceil(units / levers.utilization * 1.5 / 1_000)
        return max(default, min(DDB_TABLE_QUOTA_UNITS, need))

    def not_parameters(self) -> dict[str, int]:
        """What the plan needs that the template has no parameter for (a template edit)."""
        d = self.defaults
        wanted = {POLLER_MEMORY_PARAMETER: (self.poller_mb, d.poller_mb)}
        return {
            name: value for name, (value, default) in wanted.items() if value != default and name not in d.parameters
        }

    def quotas(self) -> list[dict[str, Any]]:
        """The account quotas to raise (and the one that cannot be)."""
        d = self.defaults
        out: list[dict[str, Any]] = []
        if self.account_concurrency > LAMBDA_CONCURRENCY_DEFAULT:
            out.append(
                {
                    "quota": "Lambda concurrent executions",
                    "default": LAMBDA_CONCURRENCY_DEFAULT,
                    "to": self.account_concurrency,
                }
            )
        head = d.lead_s - d.interval_s
        if self.scale_up_s > head:
            out.append(
                {
                    "quota": "Lambda scaling rate (1,000 environments per 10 s per function, not adjustable)",
                    "default": LAMBDA_SCALE_STEP,
                    "to": None,
                    "note": f"{self.executors:,} executors take {self.scale_up_s:g} s to start from cold, more than "
                    f"the {head:g} s a tick has: keep them warm (ExecutorProvisionedConcurrency)",
                }
            )
        for name, units in (
            ("DynamoDB table write units per second (on demand)", self.capacity.table_writes),
            ("DynamoDB table read units per second (on demand)", self.capacity.reads),
        ):
            if units > DDB_TABLE_QUOTA_UNITS:
                out.append(
                    {"quota": name, "default": DDB_TABLE_QUOTA_UNITS, "to": 10_000 * math.ceil(units * 1.2 / 10_000)}
                )
        if self.capacity.table_writes > DDB_NEW_TABLE_WRITES or self.capacity.reads > DDB_NEW_TABLE_READS:
            out.append(
                {
                    "quota": "DynamoDB warm throughput (table and indexes)",
                    "default": DDB_NEW_TABLE_WRITES,
                    "to": math.ceil(max(self.capacity.table_writes, self.capacity.index_writes)),
                    "note": "pre-warm a new table (WarmThroughput) or ramp up",
                }
            )
        return out

    def as_dict(self) -> dict[str, Any]:
        """The plan as one JSON object (``punctual plan --json``)."""
        c = self.capacity
        return {
            "rate_per_s": self.rate,
            "payload_kb": self.payload_kb,
            "executor_memory_mb": self.executor_mb,
            "made_by": self.made_by,
            "overrides": self.overrides(),
            "needs_template_edit": self.not_parameters(),
            "shards": self.shards,
            "poll_groups": self.poll_groups,
            "poller_memory_mb": self.poller_mb,
            "pollers": round(self.pollers, 3),
            "batch_size": self.batch,
            "executor_memory_for_full_batches_mb": full_batch_memory(self.rate, self.defaults),
            "executors": self.executors,
            "executors_in_flight": self.executors_in_flight,
            "executors_by_cpu": self.executors_by_cpu,
            "executor_invocations_per_s": round(self.invocations_per_s, 3),
            "executor_reserved_concurrency": self.executor_concurrency,
            "account_concurrency": self.account_concurrency,
            "scale_up_s": self.scale_up_s,
            "quotas": self.quotas(),
            "capacity": {
                "table_write_units_per_s": round(c.table_writes),
                "index_write_units_per_s": round(c.index_writes),
                "due_index_writes_per_shard_per_s": round(c.due_index_writes / self.shards),
                "write_units_per_s": round(c.writes),
                "read_units_per_s": round(c.reads),
            },
            "monthly": {
                "tasks": self.bill.tasks,
                "lines_usd": {k: round(v, 2) for k, v in self.bill.lines.items()},
                "usd": round(self.bill.usd, 2),
                "eventbridge_scheduler_usd": round(eventbridge_scheduler_usd(self.bill.tasks), 2),
            },
            "levers": {
                "polls_per_minute": self.levers.polls_per_minute,
                "lead_s": self.defaults.lead_s,
                "capacity": self.levers.capacity,
                "utilization": self.levers.utilization,
                "reserved": self.levers.reserved,
                "arch": self.levers.arch,
                "api_tasks_per_call": self.levers.api_tasks_per_call,
                "batch_size": self.defaults.batch_size,
            },
            "usd_per_million": round(self.bill.usd_per_million, 3),
        }


def make_plan(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    rate: float,
    payload_kb: float = 0.2,
    executor_mb: int | None = None,
    made_by: str = "client",
    *,
    d: Defaults | None = None,
    levers: Levers | None = None,
) -> Plan:
    """The plan for ``rate`` tasks due a second, sustained (``made_by``: ``client`` or ``api``), with ``levers``."""
    levers = levers or Levers()
    levers.check()
    d = levers.apply(d or defaults())
    if not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"the rate must be a number above 0, not {rate!r}")
    if not 0 <= payload_kb <= ITEM_MOST_KB:
        raise ValueError(f"the payload must be 0 to {ITEM_MOST_KB} KB (DynamoDB's item limit), not {payload_kb!r}")
    memory = d.executor_mb if executor_mb is None else executor_mb
    if not LAMBDA_LEAST_MB <= memory <= d.max_executor_mb:
        raise ValueError(f"the executor's memory must be {LAMBDA_LEAST_MB} to {d.max_executor_mb} MB, not {memory!r}")
    if made_by not in TASK_UNITS:
        raise ValueError(f"made_by must be one of {sorted(TASK_UNITS)}, not {made_by!r}")
    shards = shards_needed(rate, d)
    poller_mb = poller_memory(rate, d)
    pollers = pollers_needed(rate, poller_mb, d)
    groups = min(d.max_poll_groups, poll_groups(pollers, shards))
    batch = batch_tasks(rate, memory, d)
    in_flight = executors_in_flight(rate, batch, d)
    by_cpu = executors_by_cpu(rate, memory, d)
    executors = max(in_flight, by_cpu)
    reserved = executor_concurrency(rate, batch, executors, d)
    poller_reserved = groups + 1
    payload_bytes = payload_kb * 1024
    return Plan(
        rate=rate,
        payload_kb=payload_kb,
        executor_mb=memory,
        made_by=made_by,
        shards=shards,
        pollers=pollers,
        poller_mb=poller_mb,
        poll_groups=groups,
        batch=batch,
        executors=executors,
        executors_in_flight=in_flight,
        executors_by_cpu=by_cpu,
        executor_concurrency=reserved,
        poller_concurrency=poller_reserved,
        account_concurrency=reserved + poller_reserved + LAMBDA_UNRESERVED_MIN,
        scale_up_s=scale_up_s(executors),
        invocations_per_s=rate / batch,
        capacity=capacity(rate, payload_bytes, batch, shards, made_by, d=d),
        bill=monthly_bill(
            rate,
            payload_bytes,
            memory,
            poller_mb,
            groups,
            batch=batch,
            shards=shards,
            made_by=made_by,
            d=d,
            levers=levers,
        ),
        defaults=d,
        levers=levers,
    )
