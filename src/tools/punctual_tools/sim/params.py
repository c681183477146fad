"""The simulation's parameters: each one **measured** (read from the benchmark JSON under docs/benchmarks/, or the
runtime's own constants) or **cited** (AWS documentation, named in :data:`SOURCES`), and the platform they describe.

:func:`aws_platform` is Lambda and DynamoDB in a Region; :func:`local_platform` is the local stack on this machine
(two cores shared by everything, DynamoDB Local's measured ceiling, the local invoker's cap), used to calibrate the
same model against what the local benchmarks measured. :class:`Deployment` holds what a template parameter or a plan
sets (shards, poll groups, reservations, memory sizes, the table's warm throughput).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from punctual.config.cpu_share import MB_PER_VCPU, QUOTA_PERIOD_MS
from punctual.config.settings import Settings
from punctual_tools.local.lambda_rules import read_function_limits
from punctual_tools.template import load_template

BENCH_DIR = Path(__file__).resolve().parents[4] / "docs" / "benchmarks"

# == cited: AWS's documented rules (the page names each source again) =====================================
SOURCES = {
    "scaling": (
        "Lambda scaling behavior: 1,000 execution environments every 10 s per function, refilled continuously, "
        "unused rate not accumulated",
        "https://docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html",
    ),
    "async": (
        "Lambda async invocation: a throttled event goes back to the queue, retried from 1 s, the interval doubling "
        "to 5 min, until MaximumEventAgeInSeconds; then discarded",
        "https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html",
    ),
    "event_age": (
        "MaximumEventAgeInSeconds: the longest an event is kept in the async queue (up to 6 h)",
        "https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-configuring.html",
    ),
    "partition": (
        "DynamoDB: a partition serves at most 1,000 write units and 3,000 read units a second; new on-demand "
        "tables sustain 4,000 writes and 12,000 reads a second, then twice the previous peak",
        "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/on-demand-capacity-mode.html",
    ),
    "gsi": (
        "GSI back-pressure: when an index cannot take a write, DynamoDB throttles the base table's write",
        "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/gsi-throttling.html",
    ),
    "cpu_period": (
        "Lambda's CPU share is MemorySize / 1769 of a vCPU, enforced in periods of about 20 ms "
        "(punctual.config.cpu_share)",
        "https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html",
    ),
}

SCALING_ENVIRONMENTS = 1_000  # new execution environments per function ...
SCALING_WINDOW_S = 10.0  # ... every 10 s, refilled continuously, never more than 1,000 at hand
ASYNC_RETRY_FIRST_S = 1.0  # a throttled async event is retried after 1 s, the interval doubling ...
ASYNC_RETRY_MAX_S = 300.0  # ... to at most 5 minutes
PARTITION_WCU = 1_000  # write units a second, one partition (one index key lives on one)
PARTITION_RCU = 3_000  # read units a second, one partition
ON_DEMAND_INITIAL_WCU = 4_000  # a new on-demand table, at once
ACCOUNT_CONCURRENCY_DEFAULT = 1_000  # the default account quota of concurrent executions in a Region
UNRESERVED_KEPT = 100  # Lambda keeps this much of the account's quota unreserved

# == assumed: latencies in AWS, the same as the cost model's ===============================================
DDB_LATENCY_S = 0.006  # one DynamoDB request from Lambda, same region (punctual_tools.cost.pricing)
INVOKE_LATENCY_S = 0.025  # one async invoke call
SDK_BACKOFF_S = 0.025  # boto3's first retry delay for a throttled DynamoDB request (legacy mode: 25 ms, doubling)
ITEM_WCU = 1  # a task item of at most 1 KB: one write unit a write
INDEX_ITEM_BYTES = 200  # what the due index projects of a task (for the poller's read units)


def _read(name: str, bench_dir: Path | None = None) -> dict[str, Any]:
    path = (bench_dir or BENCH_DIR) / name
    return dict(json.loads(path.read_text()))


@dataclass(frozen=True)
class Measured:
    """Figures the benchmarks measured on this machine, with where each comes from."""

    poll_cpu_us: float  # the poller's CPU per task found and dispatched, on a whole core (scale.json model.poll_us)
    fire_cpu_us: float  # an executor's CPU per fire (fit on the local burst: drift-local.json system/burst)
    init_cpu_s: float  # an executor INIT's CPU (scale.json invoker init_ms_p50 at 256 MB, times its share)
    store_tasks_per_s: float  # DynamoDB Local's ceiling: create + arm + record a second (scale.json store_ceiling)
    floor_p50_ms: float  # the bare dispatcher's wake-up drift, median (drift-local.json floor/steady)
    floor_p99_ms: float  # ... and its 99th percentile
    local_invoker_cap: int = 48  # the local invoker's executors at once (scale.json executors line)
    origin: dict[str, str] = field(default_factory=dict)


def fit_fire_cpu_us(burst: dict[str, Any], cores: float) -> float:
    """The CPU one fire takes, from a burst the local stack fired on whole cores: its executors (one a batch, all
    due at the same instant) share ``cores``, so the last of ``count`` fires starts after ``count / cores`` fires'
    CPU."""
    return float(burst["max"]) * 1000 * cores / float(burst["count"])


def load_measured(bench_dir: Path | None = None) -> Measured:
    """The measured figures from docs/benchmarks (scale.json, drift-local.json)."""
    scale = _read("scale.json", bench_dir)
    drift = _read("drift-local.json", bench_dir)
    init_ms = float(scale["invoker"]["init_ms_p50"])
    init_memory = int(scale["model"]["executor_mb"])
    floor = drift["floors"]["floor/steady"]
    return Measured(
        poll_cpu_us=float(scale["model"]["poll_us"]),
        fire_cpu_us=fit_fire_cpu_us(drift["phases"]["system/burst"], LOCAL_CORES),
        init_cpu_s=init_ms / 1000 * init_memory / MB_PER_VCPU,
        store_tasks_per_s=float(scale["store_ceiling"]["tasks_per_s"]),
        floor_p50_ms=float(floor["p50"]),
        floor_p99_ms=float(floor["p99"]),
        origin={
            "poll_cpu_us": "docs/benchmarks/scale.json model.poll_us",
            "fire_cpu_us": "docs/benchmarks/drift-local.json phases['system/burst'] (max drift x cores / tasks)",
            "init_cpu_s": "docs/benchmarks/scale.json invoker.init_ms_p50 x 256 / 1769",
            "store_tasks_per_s": "docs/benchmarks/scale.json store_ceiling.tasks_per_s",
            "floor_ms": "docs/benchmarks/drift-local.json floors['floor/steady']",
        },
    )


LOCAL_CORES = 2.0  # this machine: every process of the local stack shares two cores


@dataclass(frozen=True)
class Platform:
    """Where the model runs: AWS (each environment its own CPU share) or the local stack (``shared_cores``)."""

    name: str
    measured: Measured
    shared_cores: float | None  # None: no CPU shared between environments (Lambda); else the cores all share
    cpu_quota: bool  # each executor on MemorySize / 1769 of a core, in 20 ms periods
    scaling_environments: float  # new environments per window ...
    scaling_window_s: float  # ... per this many seconds
    account_concurrency: int
    table_wcu: float  # the base table's write units a second (on-demand: its warm throughput)
    key_wcu: float  # one index key's write units a second (a partition)
    key_rcu: float
    store_latency_s: float
    invoke_latency_s: float
    quota_period_s: float = QUOTA_PERIOD_MS / 1000


def aws_platform(measured: Measured | None = None, account_concurrency: int = ACCOUNT_CONCURRENCY_DEFAULT) -> Platform:
    return Platform(
        name="aws",
        measured=measured or load_measured(),
        shared_cores=None,
        cpu_quota=True,
        scaling_environments=SCALING_ENVIRONMENTS,
        scaling_window_s=SCALING_WINDOW_S,
        account_concurrency=account_concurrency,
        table_wcu=ON_DEMAND_INITIAL_WCU,
        key_wcu=PARTITION_WCU,
        key_rcu=PARTITION_RCU,
        store_latency_s=DDB_LATENCY_S,
        invoke_latency_s=INVOKE_LATENCY_S,
    )


def local_platform(measured: Measured | None = None, cpu_quota: bool = False) -> Platform:
    """The local stack: two cores shared by every executor, DynamoDB Local as one store of its measured ceiling
    (three writes a task: its create, arm and record), the local invoker's cap, no scaling rate."""
    m = measured or load_measured()
    return Platform(
        name="local" if not cpu_quota else "local-lambda-profile",
        measured=m,
        shared_cores=LOCAL_CORES,
        cpu_quota=cpu_quota,
        scaling_environments=1e9,
        scaling_window_s=1.0,
        account_concurrency=m.local_invoker_cap,
        table_wcu=m.store_tasks_per_s * 3,
        key_wcu=m.store_tasks_per_s * 3,
        key_rcu=1e9,
        store_latency_s=0.001,
        invoke_latency_s=0.002,
    )


def _param(params: dict[str, Any], name: str) -> Any:
    return params[name]["Default"]


@dataclass(frozen=True)
class Deployment:
    """What the template's parameters (or a plan's overrides) set; the defaults are the template's."""

    shard_count: int
    poll_groups: int
    lead_s: float
    poll_interval_s: float
    misfire_grace_s: float
    executor_memory_mb: int
    poller_memory_mb: int
    executor_reserved: int  # 0: unreserved (the account's pool, cut by unreserved_concurrency in the poller)
    unreserved_concurrency: int
    provisioned: int
    max_batch_size: int
    max_event_age_s: float
    poller_timeout_s: float
    table_warm_wcu: float | None = None  # None: a new on-demand table's; provisioned: the units provisioned
    capacity: str = "on-demand"  # or "provisioned": the table's and due index's units fixed, with burst capacity
    utilization: float = 0.7  # provisioned: auto scaling's target (what the consumed units are billed over)
    table_bank_s: float = 1.0  # seconds of unused units the table keeps (provisioned: 300, burst capacity)
    index_wcu: float | None = None  # provisioned: the due index's units (None: only its partitions limit it)
    item_wcu: int = ITEM_WCU  # write units of one item write (2 for a 1 KB payload)
    creates_ahead_s: float | None = None  # None: tasks are made before the run; else this long before they are due
    tenants: int = 0  # tasks made through the API: spread over this many tenants' tenant-index keys (0: none)
    label: str = "template defaults"

    @property
    def executor_concurrency(self) -> int:
        """What the poller is told may run at once (PUNCTUAL_EXECUTOR_CONCURRENCY)."""
        return self.executor_reserved or self.unreserved_concurrency

    def overridden(self, label: str, **changes: Any) -> Deployment:
        return replace(self, label=label, **changes)


def template_deployment(template_path: str | None = None) -> Deployment:
    """The template's defaults, read from template.yaml and the Settings defaults it does not set."""
    template = load_template(template_path)
    params = template["Parameters"]
    resources = template["Resources"]
    poller = read_function_limits("PollerFunction", template_path)
    executor_age = resources["ExecutorFunction"]["Properties"]["EventInvokeConfig"]["MaximumEventAgeInSeconds"]
    reserved = str(_param(params, "ExecutorReservedConcurrency") or "0")
    fields = Settings.model_fields
    return Deployment(
        shard_count=int(_param(params, "ShardCount")),
        poll_groups=int(_param(params, "PollGroups")),
        lead_s=int(_param(params, "LeadMs")) / 1000,
        poll_interval_s=int(fields["poll_interval_ms"].default) / 1000,
        misfire_grace_s=int(_param(params, "MisfireGraceMs")) / 1000,
        executor_memory_mb=int(_param(params, "ExecutorMemorySize")),
        poller_memory_mb=poller.memory_mb,
        executor_reserved=int(reserved),
        unreserved_concurrency=int(_param(params, "UnreservedExecutorConcurrency")),
        provisioned=int(_param(params, "ExecutorProvisionedConcurrency")),
        max_batch_size=int(_param(params, "ExecutorBatchSize")),
        max_event_age_s=float(executor_age),
        poller_timeout_s=poller.timeout_s,
    )
