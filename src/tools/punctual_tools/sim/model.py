"""The discrete-event model (SimPy) of one run: ticks, pollers, dispatch, Lambda, executors, DynamoDB.

Time is in seconds; the first due instant of a scenario is 0. A tick at ``T`` dispatches the tasks due in
``(T + lead - interval, T + lead]`` (plus any its group could not reach before), one poller per poll group, each
reading its shards of every minute bucket in the window and then cutting and sending batches at its CPU's pace
(the measured CPU per task on its memory's share) until its deadline; what it could not reach waits for the next
tick. Each batch is an async event: it starts an executor when concurrency and an environment (warm, or new
within the scaling rate, paying a cold start) allow, or is throttled and retried until its maximum age. An
executor arms its tasks (base-table writes), fires them on its CPU share (:func:`.components.fire_times`), records
them (base table and the due index's key: back-pressure) and holds its concurrency until then.

The cut of a dispatch into batches is the poller's own (:func:`punctual.polling.poller.make_batches`), made on a
slice of at most :data:`CUT_SLICE` tasks and repeated over the rest (its sizes, in due order), so that a million
tasks a tick cost seconds, not minutes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import simpy

from punctual.config.cpu_share import fires_per_period
from punctual.domain.model import Candidate, TaskStatus
from punctual.polling.poller import INVOKE_THREADS, make_batches
from punctual.polling.tick import DEADLINE_MARGIN_MS
from punctual_tools.cost import pricing
from punctual_tools.cost.coldstart import init_seconds
from punctual_tools.sim.components import AsyncQueue, ScalingRate, WriteBucket, admit_write, cpu_share, fire_times
from punctual_tools.sim.params import INDEX_ITEM_BYTES, ITEM_WCU, Deployment, Platform
from punctual_tools.stats import nearest_rank

CUT_SLICE = 20_000  # tasks the poller's cut is made on; its batch sizes repeat over the rest of a dispatch
RECORD_TAIL_S = pricing.RECORD_TAIL_S  # after its last fire, an executor's settle gap and last record writes
HEARTBEAT_S = pricing.heartbeat_interval_ms() / 1000
BUCKET_S = 60.0  # the due index's minute buckets


@dataclass(frozen=True)
class Scenario:
    """Tasks due: ``rate`` a second for ``seconds``, or ``burst`` at the instant 0."""

    name: str
    rate: float = 0.0
    seconds: float = 0.0
    burst: int = 0

    @property
    def tasks(self) -> int:
        return self.burst or int(round(self.rate * self.seconds))

    def due_times(self) -> npt.NDArray[np.float64]:
        if self.burst:
            return np.zeros(self.burst)
        n = self.tasks
        return (np.arange(n, dtype=np.float64) + 0.5) / self.rate  # evenly spread


@dataclass
class Counters:
    invocations: int = 0
    cold_starts: int = 0
    concurrency: int = 0
    concurrency_peak: int = 0
    executor_gb_s: float = 0.0
    init_gb_s: float = 0.0
    poller_gb_s: float = 0.0
    poller_invocations: int = 0
    read_units: float = 0.0
    write_units: float = 0.0
    missed: int = 0
    fired: int = 0
    undispatched: int = 0
    poll_deadline_hits: int = 0
    start_ages: list[float] = field(default_factory=list)
    drifts: list[npt.NDArray[np.float64]] = field(default_factory=list)


def batch_sizes(due_ms: list[int], deployment: Deployment, fire_cpu_us: float, groups: int) -> list[int]:
    """The poller's cut of ``due_ms`` (in due order) into batch sizes: :func:`make_batches` on the first
    :data:`CUT_SLICE` tasks (with its bound on batches taken in proportion), its sizes repeated over the rest."""
    n = len(due_ms)
    if n == 0:
        return []
    share = min(n, CUT_SLICE) / n
    at_once = fires_per_period(deployment.executor_memory_mb, fire_cpu_us)
    max_batches = max(1, deployment.executor_concurrency // (2 * groups))
    head = [
        Candidate(task_id=f"t{i}", due_ms=due, status=TaskStatus.PENDING, lease_until_ms=None, misfire_grace_ms=60_000)
        for i, due in enumerate(due_ms[:CUT_SLICE])
    ]
    cut = make_batches(head, deployment.max_batch_size, at_once, max_batches=max(1, math.ceil(max_batches * share)))
    pattern = [len(b) for b in cut]
    sizes: list[int] = []
    left = n
    while left > 0:
        for size in pattern:
            take = min(size, left)
            sizes.append(take)
            left -= take
            if left == 0:
                break
    return sizes


class Simulation:
    """One run of a scenario on a platform with a deployment; :meth:`run` returns its :class:`Result` figures."""

    def __init__(self, platform: Platform, deployment: Deployment, scenario: Scenario, seed: int = 0) -> None:
        self.platform, self.deployment, self.scenario = platform, deployment, scenario
        self.rng = np.random.default_rng(seed)
        self.env = simpy.Environment(initial_time=-deployment.lead_s - 1)
        self.counters = Counters()
        d = deployment
        cap = d.executor_reserved or platform.account_concurrency
        self.concurrency = simpy.Container(self.env, capacity=cap, init=cap)
        self.warm = d.provisioned
        self.scaling = ScalingRate(platform.scaling_environments, platform.scaling_window_s)
        self.queue = AsyncQueue(max_age_s=d.max_event_age_s)
        self.table = WriteBucket(platform.table_wcu if d.table_warm_wcu is None else d.table_warm_wcu, d.table_bank_s)
        self.due_index = None if d.index_wcu is None else WriteBucket(d.index_wcu, d.table_bank_s)
        self.index_keys: dict[tuple[int, int], WriteBucket] = {}
        self.read_keys: dict[tuple[int, int], WriteBucket] = {}
        self.tenant_keys = [WriteBucket(platform.key_wcu) for _ in range(d.tenants)]
        m = platform.measured
        self.fire_cpu_s = m.fire_cpu_us / 1e6
        self.share = cpu_share(d.executor_memory_mb) if platform.cpu_quota else 1.0
        self.init_s = init_seconds(m.init_cpu_s, d.executor_memory_mb) if platform.cpu_quota else m.init_cpu_s
        self.poll_share = min(1.0, cpu_share(d.poller_memory_mb)) if platform.cpu_quota else 1.0
        self.due = scenario.due_times()
        self.shard = self.rng.integers(0, d.shard_count, size=self.due.size)
        self.base_drift_s = m.floor_p50_ms / 1000
        self._dispatched = np.zeros(self.due.size, dtype=bool)
        self._spans: list[tuple[float, float]] = []

    # -- DynamoDB -------------------------------------------------------------------------------------------
    def _index_key(self, due: float, shard: int) -> WriteBucket:
        key = (int(due // BUCKET_S), shard)
        if key not in self.index_keys:
            self.index_keys[key] = WriteBucket(self.platform.key_wcu)
        return self.index_keys[key]

    def _read_key(self, bucket: int, shard: int) -> WriteBucket:
        key = (bucket, shard)
        if key not in self.read_keys:
            self.read_keys[key] = WriteBucket(self.platform.key_rcu)
        return self.read_keys[key]

    # -- the poll -------------------------------------------------------------------------------------------
    def run(self) -> Result:
        d = self.deployment
        order = np.argsort(self.due, kind="stable")
        self.due, self.shard = self.due[order], self.shard[order]
        groups = [np.flatnonzero(self.shard % d.poll_groups == g) for g in range(d.poll_groups)]
        last_due = float(self.due.max()) if self.due.size else 0.0
        tick = -d.lead_s
        while tick + d.lead_s - d.poll_interval_s <= last_due + d.poll_interval_s:
            self.env.process(self._tick(tick, groups))
            tick += d.poll_interval_s
        if d.creates_ahead_s is not None:
            self.env.process(self._creates(d.creates_ahead_s, last_due))
        self.env.run()
        return self._result()

    def _creates(self, ahead_s: float, last_due: float) -> Any:
        """The clients' creates during the run, each ``ahead_s`` before its task is due, a second's worth at a
        time: the item's units on the table, one on the due index (billed with the creates made beforehand)."""
        d = self.deployment
        while self.env.now + ahead_s <= last_due:
            start = self.env.now + ahead_s
            n = int(np.searchsorted(self.due, start + 1.0) - np.searchsorted(self.due, start))
            if n:
                admit_write(self.env.now, n * d.item_wcu, [self.table])
                if self.due_index is not None:
                    self.due_index.admit(self.env.now, n * ITEM_WCU)
            yield self.env.timeout(1.0)

    def _tick(self, at: float, groups: list[npt.NDArray[np.int64]]) -> Any:
        yield self.env.timeout(max(0.0, at - self.env.now))
        for g, members in enumerate(groups):
            self.env.process(self._poll(at, g, members))

    def _poll(self, at: float, group: int, members: npt.NDArray[np.int64]) -> Any:
        """One group's poller at the tick ``at``: its reads, then its batches at its CPU's pace until its
        deadline; the tasks it could not reach are left to the next tick (counted if none is left)."""
        d, p = self.deployment, self.platform
        c = self.counters
        c.poller_invocations += 1
        horizon = at + d.lead_s
        window = members[(self.due[members] <= horizon) & ~self._dispatched[members]]
        # reads: every shard of the group in every minute bucket from the oldest undispatched task to the horizon
        first = float(self.due[window[0]]) if window.size else horizon
        buckets = range(int(first // BUCKET_S), int(horizon // BUCKET_S) + 1)
        shards = range(group, d.shard_count, d.poll_groups)
        queries = len(buckets) * len(shards)
        read_done = at + queries * p.store_latency_s / 8  # db_threads queries in flight
        units = max(0.5, window.size * INDEX_ITEM_BYTES / 4096 * 0.5)  # eventually consistent: half a unit a 4 KB
        c.read_units += units + queries * 0.5
        for b in buckets:
            for s in shards:
                read_done = max(read_done, self._read_key(b, s).admit(at, units / max(1, queries)))
        deadline = at + d.poller_timeout_s - DEADLINE_MARGIN_MS / 1000
        sizes = batch_sizes([int(x * 1000) for x in self.due[window]], d, p.measured.fire_cpu_us, d.poll_groups)
        per_task = p.measured.poll_cpu_us / 1e6 / self.poll_share
        sent_at = read_done
        offset = 0
        batches: list[tuple[float, npt.NDArray[np.int64]]] = []
        for size in sizes:
            sent_at += size * per_task + (p.invoke_latency_s / INVOKE_THREADS)
            if sent_at > deadline:
                c.poll_deadline_hits += 1
                break
            batches.append((sent_at, window[offset : offset + size]))
            self._spans.append((float(self.due[window[offset]]), float(self.due[window[offset + size - 1]])))
            offset += size
        self._dispatched[window[:offset]] = True
        end = min(sent_at, deadline + DEADLINE_MARGIN_MS / 1000)
        c.poller_gb_s += (end - at) * d.poller_memory_mb / 1024
        yield self.env.timeout(0)
        for sent, tasks in batches:
            self.env.process(self._invoke(sent, tasks))

    # -- Lambda ---------------------------------------------------------------------------------------------
    def _invoke(self, sent: float, tasks: npt.NDArray[np.int64]) -> Any:
        yield self.env.timeout(max(0.0, sent - self.env.now))
        attempt = 0
        while True:
            now = self.env.now
            if self.concurrency.level >= 1 and (self.warm > 0 or self.scaling.take(now)):
                cold = self.warm <= 0
                if not cold:
                    self.warm -= 1
                yield self.concurrency.get(1)
                self.queue.on_start(sent, now)
                self.counters.start_ages.append(now - sent)
                yield from self._execute(tasks, cold)
                return
            attempt += 1
            retry_at = self.queue.on_throttle(sent, now, attempt)
            if retry_at is None:
                self.counters.missed += int(tasks.size)
                return
            yield self.env.timeout(retry_at - now)

    def _execute(self, tasks: npt.NDArray[np.int64], cold: bool) -> Any:
        """An executor: INIT when new, arm, fire on its CPU, record; holds one concurrency until it ends."""
        c, d, p = self.counters, self.deployment, self.platform
        began = self.env.now
        c.invocations += 1
        in_use = int(self.concurrency.capacity - self.concurrency.level)
        c.concurrency_peak = max(c.concurrency_peak, in_use)
        if cold:
            c.cold_starts += 1
            c.init_gb_s += self.init_s * d.executor_memory_mb / 1024
            yield self.env.timeout(self.init_s)
        n = int(tasks.size)
        armed = admit_write(self.env.now + p.store_latency_s, n * d.item_wcu, [self.table])
        c.write_units += n * d.item_wcu
        due = self.due[tasks]
        share, period = self.share, (p.quota_period_s if p.cpu_quota else None)
        if p.shared_cores is not None:
            contenders = self._contenders(float(due[0]), float(due[-1]))
            if p.shared_cores / contenders < share:
                share, period = p.shared_cores / contenders, None
        fired = fire_times(due, armed, self.fire_cpu_s, share, period) + self.base_drift_s
        late = fired - due
        on_time = late <= d.misfire_grace_s
        c.missed += int(n - on_time.sum())
        c.fired += int(on_time.sum())
        c.drifts.append(late[on_time] * 1000)
        last = float(fired.max())
        yield self.env.timeout(max(0.0, last - self.env.now))
        # records: the base table, the due index's key of each task's bucket and shard, the tenant's index key
        done = last
        shards = self.shard[tasks]
        for s in np.unique(shards):
            count = int((shards == s).sum())
            keys = [self.table, self._index_key(float(due[0]), int(s))]
            if self.tenant_keys:
                keys.append(self.tenant_keys[int(s) % len(self.tenant_keys)])
            # the item write (its size's units) and one unit for each index entry it removes
            done = max(done, admit_write(last + p.store_latency_s, count * d.item_wcu, keys[:1]))
            index_keys = keys[1:] + ([self.due_index] if self.due_index is not None else [])
            done = max(done, admit_write(last + p.store_latency_s, count * ITEM_WCU, index_keys))
            c.write_units += count * (d.item_wcu + ITEM_WCU * (len(keys) - 1))
        beats = (done - began) / HEARTBEAT_S + 2
        c.write_units += beats
        end = max(done, last + RECORD_TAIL_S)
        yield self.env.timeout(max(0.0, end - self.env.now))
        c.executor_gb_s += (end - began) * d.executor_memory_mb / 1024
        self.warm += 1
        yield self.concurrency.put(1)

    def _contenders(self, first: float, last: float) -> int:
        """Local platform: how many executors fire while this one does (the batches dispatched so far whose due
        spans overlap its own, itself included)."""
        self._spans = [(a, b) for a, b in self._spans if b >= first - 1.0]
        return max(1, sum(1 for a, b in self._spans if a <= last and b >= first))

    # -- results --------------------------------------------------------------------------------------------
    def _result(self) -> Result:
        self.counters.undispatched = int((~self._dispatched).sum())
        return Result.from_run(self)


def percentiles_ms(values: npt.NDArray[np.float64]) -> dict[str, float | None]:
    """p50/p90/p99/max by nearest rank (the house's rule, :func:`punctual_tools.stats.nearest_rank`)."""
    n = int(values.size)
    if n == 0:
        return {"count": 0, "p50": None, "p90": None, "p99": None, "max": None}
    ranks = [nearest_rank(n, q) - 1 for q in (50, 90, 99)]
    part = np.partition(values, ranks)
    return {
        "count": n,
        "p50": round(float(part[ranks[0]]), 3),
        "p90": round(float(part[ranks[1]]), 3),
        "p99": round(float(part[ranks[2]]), 3),
        "max": round(float(values.max()), 3),
    }


@dataclass(frozen=True)
class Result:
    figures: dict[str, Any]

    @classmethod
    def from_run(cls, sim: Simulation) -> Result:
        c, d = sim.counters, sim.deployment
        drifts = np.concatenate(c.drifts) if c.drifts else np.zeros(0)
        ages = np.asarray(c.start_ages)
        busiest_key = max((max(k.busiest.values(), default=0.0) for k in sim.index_keys.values()), default=0.0)
        tasks = sim.scenario.tasks
        # creates are made ahead of the run: their base and due-index writes (and the tenant index's) are billed
        create_units = tasks * (d.item_wcu + ITEM_WCU * (1 + (1 if d.tenants else 0)))
        if d.capacity == "provisioned":  # the units auto scaling keeps for what was consumed, by the hour
            wru_usd = pricing.DDB_WCU_HOUR_USD / 3600 / d.utilization
            rru_usd = pricing.DDB_RCU_HOUR_USD / 3600 / d.utilization
        else:
            wru_usd, rru_usd = pricing.DDB_WRU_USD, pricing.DDB_RRU_USD
        usd = {
            "lambda_executor": c.executor_gb_s * pricing.LAMBDA_GB_S_ARM_USD
            + c.invocations * pricing.LAMBDA_REQUEST_USD,
            "lambda_init": c.init_gb_s * pricing.LAMBDA_GB_S_ARM_USD,
            "lambda_poller": c.poller_gb_s * pricing.LAMBDA_GB_S_ARM_USD
            + c.poller_invocations * pricing.LAMBDA_REQUEST_USD,
            "dynamodb_writes": (c.write_units + create_units) * wru_usd,
            "dynamodb_reads": c.read_units * rru_usd,
        }
        total = sum(usd.values())
        figures = {
            "platform": sim.platform.name,
            "deployment": d.label,
            "scenario": sim.scenario.name,
            "tasks": tasks,
            "fired": c.fired,
            "missed": c.missed,  # past their misfire grace, or their event dropped
            "undispatched": c.undispatched,
            "drift_ms": percentiles_ms(drifts),
            "lambda": {
                "invocations": c.invocations,
                "cold_starts": c.cold_starts,
                "throttles": sim.queue.throttles,
                "dropped": sim.queue.dropped,
                "concurrency_peak": c.concurrency_peak,
                "queue_age_s": {
                    "p50": round(float(np.median(ages)), 3) if ages.size else None,
                    "max": round(float(ages.max()), 3) if ages.size else None,
                },
                "poll_deadline_hits": c.poll_deadline_hits,
            },
            "dynamodb": {
                "table_throttled_units": round(sim.table.throttled_units),
                "index_throttled_units": round(
                    sum(k.throttled_units for k in sim.index_keys.values())
                    + (sim.due_index.throttled_units if sim.due_index is not None else 0.0)
                ),
                "tenant_throttled_units": round(sum(k.throttled_units for k in sim.tenant_keys)),
                "busiest_index_key_wcu_s": round(busiest_key),
                "read_units": round(c.read_units),
                "write_units": round(c.write_units + create_units),
            },
            "cost_usd": {k: round(v, 2) for k, v in usd.items()} | {"total": round(total, 2)},
            "usd_per_million": round(total / tasks * 1e6, 3) if tasks else None,
        }
        return cls(figures)


def simulate(platform: Platform, deployment: Deployment, scenario: Scenario, seed: int = 0) -> dict[str, Any]:
    """Run one scenario and return its figures."""
    return Simulation(platform, deployment, scenario, seed).run().figures
