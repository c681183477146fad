"""What the drift benchmark's phases share (:mod:`bench`, :mod:`leads`, :mod:`memory`): the run's log line, a
floor's figures, drift from fire-log-like entries, a paced client, the webhook receiver's arrivals, the floor
firing webhooks, the waits between phases and the table's row."""

from __future__ import annotations

import random
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from punctual.config.clients import make_dynamodb_client
from punctual.config.settings import Settings
from punctual.domain.keys import from_ms, next_tick
from punctual.domain.model import Action
from punctual.runtime.client import Client
from punctual.stores.dynamodb.table import DUE_INDEX
from punctual_tools.bench.cpu_use import CpuUse, cpu_summary, delta, sample_all
from punctual_tools.bench.floors import ACTION, FloorJob, FloorRun, FloorRunner, merged, steady_offsets
from punctual_tools.checker import Fire, Verdict
from punctual_tools.local.cpu_quota import init_wait_figures
from punctual_tools.local.receiver import read_received
from punctual_tools.local.stack import LocalStack
from punctual_tools.stats import summarize

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def floor_result(fires: list[dict[str, Any]], cpu: CpuUse, processes: int, policy: str = "normal") -> dict[str, Any]:
    """A floor's figures: its fires (what the table and the pictures show), their drifts, the CPU it used, and
    the scheduling policy its firing threads got."""
    return {"fires": fires, "drift": drift_of(fires)[0], "floor_cpu": cpu, "processes": processes, "policy": policy}


def policy_of(runs: list[FloorRun]) -> str:
    """The firing threads' policy of floor processes (``mixed`` if they differ)."""
    policies = {run.policy for run in runs}
    return policies.pop() if len(policies) == 1 else "mixed"


def drift_of(fires: list[dict[str, Any]]) -> tuple[list[float], int, int]:
    """Drift of the first fire of each task, the number of distinct tasks fired and of duplicate fires."""
    first: dict[str, dict[str, Any]] = {}
    for fire in fires:
        first.setdefault(fire["task_id"], fire)
    return [f["fired_ms"] - f["due_ms"] for f in first.values()], len(first), len(fires) - len(first)


PROBE_WRITES = 100  # tasks a phase writes (and cancels) to measure how fast the client can write now


def store_write_probe(client: Client, threads: int = 8) -> float:
    """How many writes a second the store takes from ``client`` now: :data:`PROBE_WRITES` tasks written far ahead
    with ``threads`` threads, then cancelled (on DynamoDB Local the store's CPU, not the distance, sets it)."""
    ids = [f"probe-{uuid.uuid4().hex[:10]}" for _ in range(PROBE_WRITES)]
    far = from_ms(int(time.time() * 1000) + 3_600_000)
    started = time.time()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda t: client.schedule(far, ACTION, None, task_id=t), ids))
    per_s = PROBE_WRITES / max(time.time() - started, 1e-6)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(client.cancel, ids))
    return per_s


def store_ceiling(writes_per_s: float, writes_per_task: int, demand_per_s: float | None) -> dict[str, Any]:
    """A phase's load against what the store here carries: the probe's writes a second, the tasks a second that
    makes at ``writes_per_task`` writes each during the run, and the tasks a second the phase asks for (None for
    a burst at one instant)."""
    return {
        "store_writes_per_s": round(writes_per_s, 1),
        "store_ceiling_per_s": round(writes_per_s / writes_per_task, 1),
        "demand_per_s": demand_per_s,
    }


def first_due_after_writes(client: Client, count: int, interval_ms: int, threads: int = 8) -> int:
    """The first due instant (epoch ms, on a poll tick, 15 s after one) for ``count`` tasks that are about to be
    written with ``threads`` threads: past the time they take to write at the rate a probe measures now
    (:func:`store_write_probe`), with half as much again to spare, so that a slow or busy machine cannot leave the
    first ones due before they are written."""
    per_write_s = 1 / max(store_write_probe(client, threads), 1e-6)
    write_ms = int(1.5 * count * per_write_s * 1000)
    log(f"write rate now {1 / per_write_s:.0f}/s: {count} tasks take about {write_ms / 1500:.0f} s")
    return next_tick(int(time.time() * 1000) + write_ms + 5_000, interval_ms) + 15_000


def write_paced(
    client: Client,
    task_ids: list[str],
    rate: float,
    lead_s: float | Sequence[float],
    start: float | None = None,
    *,
    action: Action = ACTION,
) -> dict[str, Any]:
    """A client scheduling ``task_ids`` at ``rate`` a second from ``start`` (epoch s; default in 0.5 s), each due
    ``lead_s`` after its write starts (one lead for all, or one a task; even when the writer runs behind: a late
    write with a nominal due would measure the writer's lag, not the scheduler; the lag is reported), firing
    ``action``. Paced writes block on DynamoDB Local's latency: 32 threads keep the rate."""
    errors: list[str] = []
    lags: list[float] = []
    dues: list[int] = []
    start = start if start is not None else time.time() + 0.5

    def write(i: int) -> None:
        at = start + i / rate
        delay = at - time.time()
        if delay > 0:
            time.sleep(delay)
        written = max(at, time.time())
        lags.append(written - at)
        due_ms = int((written + (lead_s if isinstance(lead_s, int | float) else lead_s[i])) * 1000)
        dues.append(due_ms)
        try:
            client.schedule(from_ms(due_ms), action, None, task_id=task_ids[i])
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors.append(repr(exc))

    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(write, range(len(task_ids))))
    write_rate = len(task_ids) / max(time.time() - start, 1e-3)
    log(f"written ({len(errors)} errors, {write_rate:.0f} writes/s, lag up to {max(lags, default=0):.1f} s)")
    return {
        "errors": errors,
        "dues": dues,
        "write_rate_per_s": round(write_rate, 1),
        "max_write_lag_s": round(max(lags, default=0), 2),
    }


def after_a_poll(stack: LocalStack) -> None:
    """Wait until the stack's next poll has ended: what is written now is found whole by the poll after it (a
    poll that ran while a burst was being written would find part of it, and cut it into more batches)."""
    assert stack.settings is not None
    polls = len(stack.polls)
    deadline = time.monotonic() + 3 * stack.settings.poll_interval_ms / 1000
    while len(stack.polls) == polls and time.monotonic() < deadline:
        time.sleep(0.05)


def wait_quiet(stack: LocalStack, quiet_s: float = 1.0, timeout_s: float = 120.0) -> float:
    """Until the executors' worker processes use no CPU for ``quiet_s`` (the warm ones have ended their cold
    start): a phase's CPU is then its own. Returns the seconds waited."""
    assert stack.invoker is not None
    started = time.monotonic()
    before = sample_all(stack.invoker.worker_pids())
    while time.monotonic() - started < timeout_s:
        time.sleep(quiet_s)
        after = sample_all(stack.invoker.worker_pids())
        if after.keys() == before.keys() and all(u.cpu_s == before[pid].cpu_s for pid, u in after.items()):
            break
        before = after
    return time.monotonic() - started


def arrivals(received: Path, prefix: str) -> list[dict[str, Any]]:
    """What the receiver got for ``prefix``, as fire-log-like entries: ``fired_ms`` is the arrival."""
    return [
        {"task_id": r["task_id"], "due_ms": r["due_ms"], "fired_ms": r["received_ms"]}
        for r in read_received(received)
        if str(r.get("task_id") or "").startswith(prefix)
    ]


def wait_for_arrivals(
    received: Path, prefix: str, count: int, until_ms: float, last_due_ms: float | None = None
) -> list[dict[str, Any]]:
    """The arrivals of ``prefix``, once ``count`` are in (or at ``until_ms``). Nothing is read before the
    phase's last due instant has passed: reading the receiver's whole file every half second takes CPU that the
    receiver and the stack would otherwise have (the floors are not read until they have ended either; see
    docs/decisions.md, "The drift benchmark leaves the cores to what it measures")."""
    if last_due_ms is not None:
        time.sleep(max(0.0, (last_due_ms - time.time() * 1000) / 1000 + 1.0))
    while time.time() * 1000 < until_ms and len({a["task_id"] for a in arrivals(received, prefix)}) < count:
        time.sleep(0.5)
    time.sleep(1.0)  # a late duplicate shows too
    return arrivals(received, prefix)


def floor_webhook(runner: FloorRunner, url: str, rate: float, seconds: float, received: Path) -> dict[str, Any]:
    """floor/webhook: a floor process firing the same webhook with the same engine (no database, no stack) at
    ``rate``; drift = arrival at the receiver - due."""
    prefix = f"floor-webhook-{uuid.uuid4().hex[:6]}-"  # the receiver's file may hold an earlier floor's
    runs = runner.run([FloorJob(prefix, steady_offsets(rate, seconds), str(received.with_suffix(".floor-log")), url)])
    fires = wait_for_arrivals(received, prefix, len(runs[0].fires), time.time() * 1000 + 10_000)
    return floor_result(fires, merged(runs)[1], processes=1, policy=policy_of(runs))


def active_tasks(settings: Settings) -> int:
    """Tasks still in the (sparse) due index: PENDING or ARMED, i.e. not yet recorded."""
    client: DynamoDBClient = make_dynamodb_client(settings)
    count, start = 0, None
    while True:
        following: dict[str, Any] = {"ExclusiveStartKey": start} if start else {}
        page = client.scan(TableName=settings.table_name, IndexName=DUE_INDEX, Select="COUNT", **following)
        count += page["Count"]
        start = page.get("LastEvaluatedKey")
        if not start:
            return count


def wait_until_idle(stack: LocalStack, settle_s: float, timeout_s: float = 300.0) -> dict[str, Any]:
    """Until no executor invocation is in flight and no task is active, then ``settle_s`` of rest: the previous
    phase's backlog (executors still recording, retries, the stream) cannot spill into the next phase."""
    assert stack.invoker is not None
    assert stack.settings is not None
    started = time.monotonic()
    deadline = started + timeout_s
    active = in_flight = -1
    while time.monotonic() < deadline:
        in_flight = stack.invoker.in_flight()
        active = active_tasks(stack.settings) if in_flight == 0 else -1
        if in_flight == 0 and active == 0:
            break
        time.sleep(0.5)
    idle_s = time.monotonic() - started
    idle = in_flight == 0 and active == 0
    time.sleep(settle_s)
    log(
        f"idle wait: {idle_s:.1f} s until {'idle' if idle else f'the timeout (in flight {in_flight}, active {active})'}"
        f", then {settle_s:g} s of settle time"
    )
    return {"idle_wait_s": round(idle_s, 2), "idle": idle, "settle_s": settle_s}


def row(name: str, drifts: list[float], extra: str = "") -> str:
    s = summarize(drifts)

    def f(v: float | None) -> str:
        return f"{'-':>11}" if v is None else f"{v:11.3f}"  # wide enough for seconds of lateness

    return f"{name:<20}{s['count']:>7}{f(s['p50'])}{f(s['p90'])}{f(s['p99'])}{f(s['max'])}  {extra}"


INVOCATION_COUNTS = ("invoked", "throttles", "retries", "dropped", "cold_starts", "timeouts")


def executor_cpu(stack: LocalStack, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()``'s result, with the CPU the executors' worker processes used meanwhile and their throttling, and
    what became of the executor invocations meanwhile (:data:`INVOCATION_COUNTS`: Lambda's throttles, each
    backed off 1 s, 2 s, 4 s, ... before it is tried again; and the cold starts that waited for a core)."""
    invoker = stack.invoker
    assert invoker is not None
    before, counts, waits = sample_all(invoker.worker_pids()), invoker.stats, len(invoker.init_waits_ms)
    result = run()
    after, counts_after = sample_all(invoker.worker_pids()), invoker.stats
    if "floor_cpu" not in result:
        result["cpu"] = cpu_summary(delta(before, after).values())
        result["invocations"] = {
            **{name: counts_after.get(name, 0) - counts.get(name, 0) for name in INVOCATION_COUNTS},
            **init_wait_figures(invoker.init_waits_ms[waits:]),
        }
    return result


# -- the checker, the receiver, the table ------------------------------------------------------------------
def lead_seconds(count: int, low_s: float, high_s: float, seed: int = 1) -> list[float]:
    """``count`` leads drawn uniformly from ``[low_s, high_s]`` (seeded: each run writes the same plan)."""
    draw = random.Random(seed)
    return [round(draw.uniform(low_s, high_s), 3) for _ in range(count)]


def checker_figures(verdict: Verdict) -> dict[str, int]:
    """The checker's counts a phase reports."""
    return {
        "lost": len(verdict.lost),
        "extra": len(verdict.extra),
        "unexplained_extra": len(verdict.unexplained),
        "missed": len(verdict.explicitly_missed),
        "crash_windows": len(verdict.windows),
        "due_in_windows": len(verdict.due_in_window),
        "missed_in_windows": len(verdict.missed_in_window),
        "missed_outside_windows": len(verdict.missed_outside_window),
    }


def received_fires(received: Path, prefix: str) -> list[Fire]:
    """The receiver's requests for ``prefix`` as the checker's fires (by idempotency key)."""
    return [
        Fire(str(r.get("key") or "<none>"), float(r["received_ms"]))
        for r in read_received(received)
        if str(r.get("task_id") or "").startswith(prefix)
    ]


def stored(client: Client, task_ids: Sequence[str]) -> list[Any]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        return [t for t in pool.map(client.get, task_ids) if t is not None]


def store_latency(source: Any) -> Any:
    """The store latency model the stack says it applies (settings or state file), if it says one."""
    if isinstance(source, Mapping):
        return source.get("store_latency")
    return getattr(source, "store_latency", None)
