"""Pricing: the counts of a scenario run at a monthly volume, in dollars, next to the alternatives.

:func:`monthly_cost` prices DynamoDB (per task and per poll tick), the executor and poller Lambdas (their
invocations and their INIT phases), storage and observability at a volume, reading memory sizes, retention,
alarms and the dashboard from ``template.yaml``; :func:`executor_seconds_per_tick` models how long executors are
awake (billed while they wait for their batch's last due instant) and :func:`measured_executor_seconds` gives the
same from a run, to check the model; :func:`heartbeat_writes_per_tick` adds the heartbeat renewals an executor
makes over that life; :func:`break_even` finds the volume from which the target is met;
:func:`eventbridge_scheduler_usd` prices the same volume on EventBridge Scheduler, free tier included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import punctual.runtime.metrics as metric_names
from punctual.config.settings import Settings
from punctual.polling.poller import INVOKE_THREADS
from punctual_tools.cost.coldstart import (
    ENVIRONMENT_LIFETIME_S,
    cold_starts_per_month,
    executor_environments,
    init_seconds,
)
from punctual_tools.cost.scenario import Counts, Scenario
from punctual_tools.template import load_template

# == prices: us-east-1 list prices; each one's source is named in docs/cost.md, "Prices and their sources" ====
PRICES_AS_OF = (
    "us-east-1 list prices from the AWS pricing pages, DynamoDB on-demand after the November 2024 cut; "
    'sources under "Prices and their sources"'
)
DDB_WRU_USD = 0.625 / 1e6  # per write request unit, on-demand, standard table class
DDB_RRU_USD = 0.125 / 1e6  # per read request unit
DDB_WCU_HOUR_USD = 0.00065  # per write capacity unit-hour, provisioned (auto scaling bills what it provisions)
DDB_RCU_HOUR_USD = 0.00013  # per read capacity unit-hour, provisioned
DDB_STORAGE_GB_MONTH_USD = 0.25  # standard table class (the first 25 GB a month are free: ignored)
DDB_PITR_GB_MONTH_USD = 0.20  # continuous backups (the template enables point-in-time recovery)
DDB_ITEM_OVERHEAD_BYTES = 100  # DynamoDB's per-item storage overhead
LAMBDA_GB_S_ARM_USD = 0.0000133334  # arm64, first 6 billion GB-s a month
LAMBDA_GB_S_X86_USD = 0.0000166667  # x86_64, first 6 billion GB-s a month (what arm64 saves: 20 %)
LAMBDA_REQUEST_USD = 0.20 / 1e6
LAMBDA_PROVISIONED_GB_S_ARM_USD = 0.0000033334  # arm64, per GB-s an environment is configured (provisioned)
LAMBDA_PROVISIONED_RUN_GB_S_ARM_USD = 0.0000077778  # arm64, per GB-s run in a provisioned environment
LAMBDA_FREE_GB_S = 400_000  # Lambda's monthly free tier, account-wide: GB-seconds ...
LAMBDA_FREE_REQUESTS = 1e6  # ... and requests
CW_LOGS_INGEST_GB_USD = 0.50
CW_CUSTOM_METRIC_MONTH_USD = 0.30  # first 10,000 metrics; EMF metrics are custom metrics
CW_DASHBOARD_MONTH_USD = 3.00
CW_ALARM_MONTH_USD = 0.10  # standard resolution; high resolution is 0.30
CW_ALARM_HIGH_RES_MONTH_USD = 0.30
XRAY_TRACE_USD = 5.00 / 1e6  # traces recorded (the first 100,000 a month are free: ignored)
EVENTBRIDGE_SCHEDULER_PER_INVOCATION_USD = 1.00 / 1e6
EVENTBRIDGE_SCHEDULER_FREE_INVOCATIONS = 14e6  # a month, free (AWS price list, "ScheduledInvocation")
STEP_FUNCTIONS_PER_TRANSITION_USD = 25.0 / 1e6  # standard workflows ($0.025 per 1,000)
STEP_FUNCTIONS_TRANSITIONS = (3, 4)  # Wait + action Task (+ end) ... + a Choice/Pass: per task

# -- assumptions the counts cannot give (latencies in AWS, not on moto) -----------------------------------
DDB_LATENCY_S = 0.006  # one DynamoDB request from Lambda, same region
INVOKE_LATENCY_S = 0.025  # one async Lambda invoke call (the poller has INVOKE_THREADS in flight at once)
POLLER_OVERHEAD_S = 0.05  # handler, logging and metrics flush per poll
RECORD_TAIL_S = 0.25  # executor: after the last fire, the settle gap (0.2 s) and the last record writes
AHEAD_DAYS = 1.0  # how long a task waits in the table before it is due (storage while pending)
MONTH_MS = 30 * 86_400_000
MONTH_S = MONTH_MS / 1000
TARGET_USD_PER_MILLION = 5.0


# == the monthly model =====================================================================================
def template_param(name: str, default: float, template_path: str | None = None) -> float:
    """The default of the template's parameter ``name`` (``default`` when the template declares none)."""
    params = load_template(template_path).get("Parameters", {})
    return float(params.get(name, {}).get("Default", default))


def memory_mb(function: str, default: int, template_path: str | None = None) -> int:
    """The memory size of ``function`` in the template (its parameter's default when it is a Ref)."""
    resources = load_template(template_path)["Resources"]
    value = resources.get(function, {}).get("Properties", {}).get("MemorySize", default)
    if isinstance(value, dict) and "Ref" in value:
        return int(template_param(value["Ref"], default, template_path))
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


def heartbeat_interval_ms() -> int:
    """How often an executor renews its heartbeat in AWS: the Settings default (the template sets none)."""
    return int(Settings.model_fields["heartbeat_interval_ms"].default)


def heartbeat_writes_per_tick(
    invocations: float, seconds: float, counted_per_batch: float, interval_ms: int | None = None
) -> float:
    """Heartbeat writes of a tick's executors: what a batch writes in any case (counted by the run: the first
    beat, before it arms, and the retiring one at its end), plus one renewal every ``interval_ms`` (the
    Settings default) over the executors' ``seconds`` of life (from the tick to the last record)."""
    interval = interval_ms or heartbeat_interval_ms()
    return invocations * counted_per_batch + seconds * 1000 / interval


@dataclass(frozen=True)
class Line:
    item: str
    usd: float  # per month
    kind: str  # "per task" | "fixed"
    in_target: bool = True
    timing: bool = False  # follows a time measured on the machine that ran the model (the INIT's CPU)


@dataclass(frozen=True)
class Month:
    tasks: float
    lines: list[Line]
    lambda_gb_s: float = 0.0  # the executors' and poller's GB-seconds (INIT included) ...
    lambda_requests: float = 0.0  # ... and invocations: what Lambda's free tier would cover
    cold_starts: float = 0.0  # new executor and poller environments a month

    def usd(self, in_target: bool | None = True) -> float:
        return sum(x.usd for x in self.lines if in_target is None or x.in_target == in_target)

    def per_million(self, in_target: bool | None = True) -> float:
        return self.usd(in_target) / (self.tasks / 1e6)

    def lambda_free_tier_usd(self) -> float:
        """What Lambda's monthly free tier takes off, if nothing else in the account uses it."""
        return (
            min(self.lambda_gb_s, LAMBDA_FREE_GB_S) * LAMBDA_GB_S_ARM_USD
            + min(self.lambda_requests, LAMBDA_FREE_REQUESTS) * LAMBDA_REQUEST_USD
        )


def eventbridge_scheduler_usd(tasks_per_month: float) -> float:
    """EventBridge Scheduler, one invocation a task: the first 14 million invocations a month are free."""
    return max(0.0, tasks_per_month - EVENTBRIDGE_SCHEDULER_FREE_INVOCATIONS) * EVENTBRIDGE_SCHEDULER_PER_INVOCATION_USD


def poll_path_cold_starts(n: float, max_batch: int, lead_ms: int, interval_ms: int) -> tuple[float, float]:
    """(executor environments in use, new executor environments a month) at ``n`` tasks a tick: each environment
    is re-created every :data:`~.coldstart.ENVIRONMENT_LIFETIME_S`; below one task a tick every invocation is
    taken as a cold start (the environment idles between ticks)."""
    if n <= 0:
        return 0.0, 0.0
    ticks = MONTH_MS / interval_ms
    if n < 1:
        return 1.0, ticks * (1 - math.exp(-n))
    environments = executor_environments(n, max_batch, lead_ms, interval_ms, RECORD_TAIL_S)
    return environments, cold_starts_per_month(environments, MONTH_S)


def monthly_cost(
    c: Counts, tasks_per_month: float, executor_memory_mb: int | None = None, template_path: str | None = None
) -> Month:
    s = c.scenario.settings
    interval, lead, max_batch = s["poll_interval_ms"], s["lead_ms"], s["max_batch_size"]
    ticks = MONTH_MS / interval
    n = tasks_per_month / ticks
    exec_mb = executor_memory_mb or memory_mb("ExecutorFunction", 256, template_path)
    poll_mb = memory_mb("PollerFunction", 512, template_path)
    invocations, seconds = executor_seconds_per_tick(n, max_batch, lead, interval)
    threads = s["db_threads"]
    invoke_rounds = invocations if invocations <= 1 else math.ceil(invocations / INVOKE_THREADS)
    poll_s = (
        POLLER_OVERHEAD_S
        + DDB_LATENCY_S * (2 + c.tick_requests / threads)
        + DDB_LATENCY_S * n * c.task_requests("poll", "heartbeat check") / threads
        + INVOKE_LATENCY_S * invoke_rounds
    )
    beats = heartbeat_writes_per_tick(invocations, seconds, c.batch_requests)
    beat_wru = c.batch_wru / c.batch_requests if c.batch_requests else 1.0
    interval_s = heartbeat_interval_ms() / 1000
    retention = template_param("RetentionDays", s["retention_days"], template_path)
    stored_gb = (
        tasks_per_month * (retention + AHEAD_DAYS) / 30 * (c.scenario.final_item_bytes + DDB_ITEM_OVERHEAD_BYTES) / 1e9
    )
    logs = c.scenario.logs
    log_gb = (ticks * logs.per_poll + ticks * invocations * logs.per_batch + tasks_per_month * logs.per_task) / 1e9
    traces = ticks * (1 + invocations)  # X-Ray (Tracing: Active): a trace per invocation, all under 1 a second
    template = load_template(template_path)
    resources = template["Resources"].values()
    tracing = template.get("Globals", {}).get("Function", {}).get("Tracing") == "Active"
    alarms = [r for r in resources if r.get("Type") == "AWS::CloudWatch::Alarm"]
    minute = 60  # an alarm whose period is under a minute is a high-resolution one
    high_res = sum(1 for a in alarms if int(a.get("Properties", {}).get("Period", minute) or minute) < minute)
    dashboards = sum(1 for r in resources if r.get("Type") == "AWS::CloudWatch::Dashboard")
    cpu_s = c.scenario.init.cpu_s
    _, executor_colds = poll_path_cold_starts(n, max_batch, lead, interval)
    poller_colds = cold_starts_per_month(1, MONTH_S)
    init_gb_s = (
        executor_colds * init_seconds(cpu_s, exec_mb) * exec_mb + poller_colds * init_seconds(cpu_s, poll_mb) * poll_mb
    ) / 1024
    executor_gb_s = ticks * seconds * exec_mb / 1024
    poller_gb_s = ticks * poll_s * poll_mb / 1024
    lines = [
        Line("DynamoDB writes, per task", tasks_per_month * c.task_wru * DDB_WRU_USD, "per task"),
        Line("DynamoDB reads, per task", tasks_per_month * c.task_rru * DDB_RRU_USD, "per task"),
        Line(
            "DynamoDB poll (empty-tick reads and writes)",
            ticks * (c.tick_wru * DDB_WRU_USD + c.tick_rru * DDB_RRU_USD),
            "fixed",
        ),
        Line(
            f"DynamoDB heartbeats (per executor: first, last, one every {interval_s:g} s)",
            ticks * beats * beat_wru * DDB_WRU_USD,
            "per task" if n >= max_batch else "fixed",
        ),
        Line(
            f"Lambda executor ({exec_mb} MB, awake until its last task)",
            executor_gb_s * LAMBDA_GB_S_ARM_USD + ticks * invocations * LAMBDA_REQUEST_USD,
            "per task" if n >= max_batch else "fixed",
        ),
        Line(
            f"Lambda poller ({poll_mb} MB, every {interval // 1000} s)",
            poller_gb_s * LAMBDA_GB_S_ARM_USD + ticks * LAMBDA_REQUEST_USD,
            "fixed",
        ),
        Line(
            f"Lambda INIT (cold starts: each environment new every {ENVIRONMENT_LIFETIME_S / 3600:g} h)",
            init_gb_s * LAMBDA_GB_S_ARM_USD,
            "fixed",
            timing=True,
        ),
        Line(
            f"DynamoDB storage + PITR ({retention:.0f} d retention + {AHEAD_DAYS:.0f} d ahead)",
            stored_gb * (DDB_STORAGE_GB_MONTH_USD + DDB_PITR_GB_MONTH_USD),
            "per task",
            in_target=False,
        ),
        Line(
            "CloudWatch Logs ingestion" + ("" if logs.measured else " (not measured)"),
            log_gb * CW_LOGS_INGEST_GB_USD,
            "per task",
            in_target=False,
        ),
        Line(
            "X-Ray traces (one per invocation)", traces * XRAY_TRACE_USD if tracing else 0.0, "fixed", in_target=False
        ),
        Line(
            f"CloudWatch: {len(metric_names.ALL)} EMF metrics, {len(alarms)} alarms, {dashboards} dashboard(s)",
            len(metric_names.ALL) * CW_CUSTOM_METRIC_MONTH_USD
            + (len(alarms) - high_res) * CW_ALARM_MONTH_USD
            + high_res * CW_ALARM_HIGH_RES_MONTH_USD
            + dashboards * CW_DASHBOARD_MONTH_USD,
            "fixed",
            in_target=False,
        ),
    ]
    return Month(
        tasks_per_month,
        lines,
        lambda_gb_s=executor_gb_s + poller_gb_s + init_gb_s,
        lambda_requests=ticks * (invocations + 1),
        cold_starts=executor_colds + poller_colds,
    )


def marginal_per_million(
    c: Counts,
    tasks_per_month: float,
    executor_memory_mb: int | None = None,
    template_path: str | None = None,
    step: float = 0.05,
) -> float:
    """What one more million tasks a month adds to the target's scope at ``tasks_per_month`` (a central
    difference over ±``step`` of the volume): at low volume the executors are awake anyway, so a task added to
    the poll path costs little more than its DynamoDB writes."""

    def usd(volume: float) -> float:
        return monthly_cost(c, volume, executor_memory_mb, template_path).usd(True)

    delta = step * tasks_per_month
    return (usd(tasks_per_month + delta) - usd(tasks_per_month - delta)) / (2 * delta) * 1e6


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


def standby_usd_per_month(environments: int, memory: int) -> float:
    """What ``environments`` executor environments kept initialised (provisioned concurrency) cost a 30-day month
    at ``memory`` MB, before the work they run."""
    return environments * memory / 1024 * (MONTH_MS / 1000) * LAMBDA_PROVISIONED_GB_S_ARM_USD
