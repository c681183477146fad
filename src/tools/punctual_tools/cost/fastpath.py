"""The fast path, priced per task: it keeps what the next poll would not dispatch in time, and every stream batch
of kept tasks is one executor invocation, billed until its last task.

A task written due sooner than the poll interval + the fast-path margin (70 s by default) reaches the fast-path
Lambda through the table's stream. It reads when the last polls started (one strongly consistent BatchGetItem a
stream batch, a read unit per poll group) and keeps only the tasks :func:`punctual.polling.fastpath.choose_path` gives
it: those due before the next poll can dispatch them the margin ahead, or all of them within the margin of the next
poll. It hands those to :meth:`punctual.polling.poller.Poller.dispatch`: one executor invocation per batch of at most
``max_batch_size`` (the functional test checks this on the real code). That executor is billed from its invocation
until the batch's last task is due, and shares the wait only with the kept tasks of its stream batch. Lambda reads
each stream shard four times a second and the template sets no batching window, so a stream batch holds what was
written to a shard in about a quarter of a second. A task left to the poll costs what one more task costs on the
poll path, plus its share of the fast-path function's look at it.

:func:`kept_share` runs the real decision over every phase of the poll cycle and every lead to tell which share of
the short-lead tasks the fast path keeps, and over what leads they spread; :func:`fast_path_cost` prices one kept
task of a stream batch of ``tasks_per_batch`` whose last task is due ``last_lead_s`` after the invocation and
:func:`left_to_poll_cost` one left to the poll; :func:`stream_batch_tasks` gives the mean batch at a monthly
volume and :func:`last_lead_s` the mean lead of a batch's last task. DynamoDB per task is the poll path's (the same
schedule, arm and record writes; the poll that reads a task still in the due index, as an upper bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from punctual.config.settings import Settings
from punctual.polling.fastpath import choose_path
from punctual_tools.cost.coldstart import cold_starts_per_month, init_seconds
from punctual_tools.cost.pricing import (
    DDB_LATENCY_S,
    DDB_RRU_USD,
    DDB_WRU_USD,
    INVOKE_LATENCY_S,
    LAMBDA_GB_S_ARM_USD,
    LAMBDA_REQUEST_USD,
    MONTH_S,
    POLLER_OVERHEAD_S,
    RECORD_TAIL_S,
    heartbeat_writes_per_tick,
    marginal_per_million,
    memory_mb,
)
from punctual_tools.cost.scenario import Counts

STREAM_POLLS_PER_S = 4.0  # Lambda polls each DynamoDB stream shard four times a second
STREAM_SHARDS = 1  # assumed: a stream has a shard per table partition; more shards make smaller batches
BENCH_LEAD_S = 2.0  # the lead the benchmark's fast-path phase writes its tasks with
# the fast-path function: handler, the read of the last polls' starts, one async invoke
FASTPATH_INVOCATION_S = POLLER_OVERHEAD_S + DDB_LATENCY_S + INVOKE_LATENCY_S
POLL_STARTS_RRU = 1.0  # that read: one strongly consistent item under 4 KB a poll group (the default: one)
PHASE_STEP_MS = 250  # the grid over which kept_share runs the decision


@dataclass(frozen=True)
class KeptShare:
    """What the fast path keeps of short-lead tasks written at a random phase of the poll cycle."""

    kept: float  # share of the tasks it keeps (the rest it leaves to the next poll)
    reach_s: float  # the kept tasks' leads spread over 0..reach_s (the mean reach, weighted by kept tasks)


@dataclass(frozen=True)
class FastPathCost:
    """What one fast-path task costs, in dollars by item, in a stream batch of ``tasks_per_batch``."""

    tasks_per_batch: float
    executor_s: float  # one executor's billed life: invocation to the batch's last task + the record tail
    usd: dict[str, float]

    @property
    def per_million(self) -> float:
        return 1e6 * sum(self.usd.values())


NEGLIGIBLE = 1e-9  # a mean this small is none: the limit of x / (1 - e^-x) at 0 is 1


def fast_path_window_s(settings: Settings | None = None) -> float:
    """How soon after its write a task must be due to take the fast path (poll interval + fast-path margin)."""
    s = settings or Settings(ntp_server=None)
    return (s.poll_interval_ms + s.fast_path_margin_ms) / 1000


def kept_share(
    settings: Settings | None = None, lead_s: float | None = None, step_ms: int = PHASE_STEP_MS
) -> KeptShare:
    """Run :func:`punctual.polling.fastpath.choose_path` over every phase of the poll cycle (the last poll started 0 to
    one interval before the write, one poll group) and every lead: every task written ``lead_s`` ahead, or (None) leads
    spread evenly over the fast-path window. The share the fast path keeps, and the mean of the largest lead it
    keeps at each phase, weighted by how many it keeps there (the kept tasks' leads spread from 0 to it)."""
    s = settings or Settings(ntp_server=None)
    window_ms = s.poll_interval_ms + s.fast_path_margin_ms
    leads = [int(lead_s * 1000)] if lead_s is not None else list(range(step_ms // 2, window_ms, step_ms))
    kept = total = 0
    weighted_reach = 0.0
    for since_poll in range(step_ms // 2, s.poll_interval_ms, step_ms):
        now = s.poll_interval_ms * 10
        mine = [
            lead
            for lead in leads
            if choose_path(
                now + lead,
                now,
                [now - since_poll],
                interval_ms=s.poll_interval_ms,
                lead_ms=s.lead_ms,
                margin_ms=s.fast_path_margin_ms,
            )
            == "fast path"
        ]
        total += len(leads)
        kept += len(mine)
        if mine:
            weighted_reach += len(mine) * (max(mine) + step_ms / 2) / 1000
    return KeptShare(kept=kept / total, reach_s=weighted_reach / kept if kept else 0.0)


def stream_batch_tasks(tasks_per_month: float, shards: int = STREAM_SHARDS) -> float:
    """Mean tasks a stream batch holds when ``tasks_per_month`` fast-path writes arrive at random over the month:
    a batch is what a shard received between two reads (``rate / 4 / shards`` on average, Poisson), and only a
    read that found something invokes."""
    expected = tasks_per_month / MONTH_S / (STREAM_POLLS_PER_S * shards)
    if expected < NEGLIGIBLE:
        return 1.0
    return expected / -math.expm1(-expected)


def last_lead_s(tasks_per_batch: float, lead_s: float | None, window_s: float) -> float:
    """Mean lead of a batch's last task: ``lead_s`` when every task is written that far ahead; when leads are
    spread evenly over ``(0, window_s)`` (``lead_s`` None), the last of k is ``k / (k + 1)`` of the window."""
    if lead_s is not None:
        return lead_s
    return window_s * tasks_per_batch / (tasks_per_batch + 1)


def fast_path_cost(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    c: Counts,
    tasks_per_batch: float,
    lead_s: float,
    tasks_per_month: float,
    *,
    executor_memory_mb: int | None = None,
    template_path: str | None = None,
) -> FastPathCost:
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
        "fast-path function": _fast_path_function_usd(fast_mb) / k,
        "INIT": init_usd / tasks_per_month if tasks_per_month > 0 else 0.0,
    }
    return FastPathCost(tasks_per_batch=k, executor_s=life, usd=usd)


def _fast_path_function_usd(memory: int) -> float:
    """One invocation of the fast-path function: its duration, its request, its read of the last polls' starts."""
    return (
        FASTPATH_INVOCATION_S * memory / 1024 * LAMBDA_GB_S_ARM_USD + LAMBDA_REQUEST_USD + POLL_STARTS_RRU * DDB_RRU_USD
    )


def left_to_poll_cost(
    c: Counts, records_per_batch: float, tasks_per_month: float, template_path: str | None = None
) -> float:
    """Dollars for one short-lead task the fast path leaves to the poll, in a stream batch of
    ``records_per_batch`` such records: one more task on the poll path at ``tasks_per_month`` (its executors are
    awake anyway), and its share of the fast-path function's invocation that looked at it."""
    fast_mb = memory_mb("FastPathFunction", 256, template_path)
    return (
        marginal_per_million(c, tasks_per_month, template_path=template_path) / 1e6
        + _fast_path_function_usd(fast_mb) / records_per_batch
    )
