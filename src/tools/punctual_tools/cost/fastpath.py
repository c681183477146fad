"""The fast path, priced per task: every stream batch is one executor invocation, billed until its last task.

A task written due sooner than the poll interval + the fast-path margin (70 s by default) reaches the fast-path
Lambda through the table's stream, which hands the stream batch's tasks to :meth:`punctual.poller.Poller.dispatch`:
one executor invocation per batch of at most ``max_batch_size`` (the functional test checks this on the real
code). That executor is billed from its invocation until the batch's last task is due, and shares the wait only
with the tasks of its stream batch. Lambda reads each stream shard four times a second and the template sets no
batching window, so a stream batch holds what was written to a shard in about a quarter of a second.

:func:`fast_path_cost` prices one task of a stream batch of ``tasks_per_batch`` whose last task is due
``last_lead_s`` after the invocation; :func:`stream_batch_tasks` gives the mean batch at a monthly volume and
:func:`last_lead_s` the mean lead of a batch's last task. DynamoDB per task is the poll path's (the same
schedule, arm and record writes; the poll that reads a task still in the due index, as an upper bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from punctual.settings import Settings

from .coldstart import cold_starts_per_month, init_seconds
from .pricing import (
    DDB_RRU_USD,
    DDB_WRU_USD,
    INVOKE_LATENCY_S,
    LAMBDA_GB_S_ARM_USD,
    LAMBDA_REQUEST_USD,
    MONTH_S,
    POLLER_OVERHEAD_S,
    RECORD_TAIL_S,
    heartbeat_writes_per_tick,
    memory_mb,
)
from .scenario import Counts

STREAM_POLLS_PER_S = 4.0  # Lambda polls each DynamoDB stream shard four times a second
STREAM_SHARDS = 1  # assumed: a stream has a shard per table partition; more shards make smaller batches
BENCH_LEAD_S = 2.0  # the lead the benchmark's fast-path phase writes its tasks with
FASTPATH_INVOCATION_S = POLLER_OVERHEAD_S + INVOKE_LATENCY_S  # the fast-path function: handler + one async invoke


@dataclass(frozen=True)
class FastPathCost:
    """What one fast-path task costs, in dollars by item, in a stream batch of ``tasks_per_batch``."""

    tasks_per_batch: float
    executor_s: float  # one executor's billed life: invocation to the batch's last task + the record tail
    usd: dict[str, float]

    @property
    def per_million(self) -> float:
        return 1e6 * sum(self.usd.values())


def fast_path_window_s(settings: Settings | None = None) -> float:
    """How soon after its write a task must be due to take the fast path (poll interval + fast-path margin)."""
    s = settings or Settings(ntp_server=None)
    return (s.poll_interval_ms + s.fast_path_margin_ms) / 1000


def stream_batch_tasks(tasks_per_month: float, shards: int = STREAM_SHARDS) -> float:
    """Mean tasks a stream batch holds when ``tasks_per_month`` fast-path writes arrive at random over the month:
    a batch is what a shard received between two reads (``rate / 4 / shards`` on average, Poisson), and only a
    read that found something invokes."""
    expected = tasks_per_month / MONTH_S / (STREAM_POLLS_PER_S * shards)
    if expected < 1e-9:
        return 1.0
    return expected / -math.expm1(-expected)


def last_lead_s(tasks_per_batch: float, lead_s: float | None, window_s: float) -> float:
    """Mean lead of a batch's last task: ``lead_s`` when every task is written that far ahead; when leads are
    spread evenly over ``(0, window_s)`` (``lead_s`` None), the last of k is ``k / (k + 1)`` of the window."""
    if lead_s is not None:
        return lead_s
    return window_s * tasks_per_batch / (tasks_per_batch + 1)


def fast_path_cost(c: Counts, tasks_per_batch: float, lead_s: float, tasks_per_month: float,
                   executor_memory_mb: int | None = None, template_path: str | None = None) -> FastPathCost:
    """One fast-path task, in a stream batch of ``tasks_per_batch`` whose last task is due ``lead_s`` after the
    executor is invoked, at ``tasks_per_month`` fast-path tasks (for the environments their executors keep busy)."""
    exec_mb = executor_memory_mb or memory_mb("ExecutorFunction", 256, template_path)
    fast_mb = memory_mb("FastPathFunction", 256, template_path)
    k = tasks_per_batch
    life = lead_s + RECORD_TAIL_S
    beats = heartbeat_writes_per_tick(1, life, c.batch_requests)
    beat_wru = c.batch_wru / c.batch_requests if c.batch_requests else 1.0
    batches_per_s = tasks_per_month / MONTH_S / k
    environments = max(1.0, math.ceil(batches_per_s * life))  # executors waiting at once, on average
    colds = cold_starts_per_month(environments, MONTH_S)
    init_usd = colds * init_seconds(c.scenario.init.cpu_s, exec_mb) * exec_mb / 1024 * LAMBDA_GB_S_ARM_USD
    usd = {
        "DynamoDB": c.task_wru * DDB_WRU_USD + c.task_rru * DDB_RRU_USD,
        "heartbeats": beats * beat_wru * DDB_WRU_USD / k,
        "executor": (life * exec_mb / 1024 * LAMBDA_GB_S_ARM_USD + LAMBDA_REQUEST_USD) / k,
        "fast-path function": (FASTPATH_INVOCATION_S * fast_mb / 1024 * LAMBDA_GB_S_ARM_USD + LAMBDA_REQUEST_USD) / k,
        "INIT": init_usd / tasks_per_month if tasks_per_month > 0 else 0.0,
    }
    return FastPathCost(tasks_per_batch=k, executor_s=life, usd=usd)
