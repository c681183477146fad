"""Drift benchmark: the whole local system against the bare dispatcher floor, in one run.

    .venv/bin/python -m punctual_tools.bench [--profile lambda|local] [--steady-rate R] [--steady-seconds 60]
                                    [--burst 2000] [--json]

The profile (``--profile``, default ``lambda``) is the footing of the run, printed first and kept in the JSON:

- ``lambda``: each executor as Lambda runs it, at the template's executor memory (``ExecutorMemorySize``): a cgroup
  with the CPU quota that memory buys, normal priority, killed at its timeout, frozen while idle. Every floor runs
  on the same footing (:mod:`floors`): each floor process in a cgroup with one executor's quota, its firing
  threads at the executors' priority, and a burst fired by one floor process per batch, as the stack's executors
  fire it;
- ``local``: whole cores and real-time firing (where the system allows it), for the executors and the floors:
  more than Lambda gives, and labelled so.

Phases (each prints its figures; drift = action start - due, ms):

1. floor/steady  one heap dispatcher thread firing the log action into a thread pool, no database,
                 at the steady rate for ``--steady-seconds`` seconds, in system/steady's window: a floor process
                 firing half-way between two of the system's instants, so that both meet the same machine
                 (:class:`Beside`). The steady rate is ``--steady-rate``, or by default what the store
                 here carries with half to spare (:func:`carried_rate`: a probe's writes a second from one
                 client, two writes a task), at most 100 tasks/s: beyond it a phase measures DynamoDB Local on
                 these cores rather than the scheduler. Every system phase prints what the store carried just
                 before it beside what it asked for;
2. floor/burst   the same dispatcher, ``--burst`` tasks due at one instant (under lambda, one floor process per
                 batch, as the executors share it);
3. system/steady the local stack (DynamoDB Local on disk, poller every 10 s, executors in worker processes,
                 recording): the steady rate due for ``--steady-seconds`` seconds, scheduled ahead;
4. steady+writes the same while a client schedules the tasks during the run, each due 30 s after it is
                 written (the client's writes share the cores too);
5. system/burst  ``--burst`` tasks scheduled ahead, all due at one instant;
6. webhooks      ``floor/webhook``: the floor's heap thread firing webhooks with the executor's HTTP engine at a
                 loopback receiver in its own process, ``--webhook-rate`` a second; ``webhook/spread``: the same
                 rate through the stack, drift at the receiver; ``webhook/burst``: ``--webhook-burst`` webhooks
                 due at one instant, the action starts the executors recorded judged against the log burst
                 (system/burst), and their arrivals at the receiver judged against ``floor/webhook-burst``: the
                 same burst from one floor process per batch (as the stack's executors), each with the floor's
                 heap thread and the executor's engine (connections warmed as an executor warms them), no database;
7. recurring 1s ``--recurring-schedules`` schedules of ``rate(1 second)``, their starts spread over a second,
                 each firing for ``--recurring-seconds`` s: their occurrences are made by the poller's chain
                 as the run goes, as in production (one fire per occurrence, judged like system/steady);
8. fast path     ``--fast-rate`` tasks/s for ``--fast-seconds`` s, each written 2 s before it is due (less than
                 one poll interval): the table stream's fast path dispatches them.

Every target is judged twice (:func:`punctual_tools.drift.judge`): as a ratio to the floor measured in this
run on the same footing (floor/steady for the steady-like phases, floor/burst for the burst) - the verdict that
counts, since a busy or slow machine moves the floor and the system together - and against an absolute figure,
printed beside it. Before each system phase the stack must be idle (no executor invocation in flight, no active
task left in the due index) and then rest ``--settle`` seconds, so that one phase's backlog cannot spill into the
next; each wait is printed. Fires are observed at the target (the log action's fire log), so a lost or doubled
fire shows in the counts. The CPU the executors used in each phase, and the time their cgroups were throttled
(``cpu.stat``), are printed beside the drifts (:mod:`cpu_use`). Drift pictures (histogram, timeline, CDF per
phase, and one CDF of all phases) are drawn from the same fires as the table, in the run's directory. With
``--json`` the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from punctual.config.clients import make_dynamodb_client
from punctual.config.settings import Settings
from punctual.domain.keys import from_ms, next_tick, shard_of
from punctual.domain.model import occurrence_id
from punctual.runtime.client import Client
from punctual.targets import HttpAction
from punctual_tools.bench.cpu_use import CpuUse
from punctual_tools.bench.floors import (
    ACTION,
    FloorJob,
    FloorRunner,
    burst_batch,
    burst_shares,
    loopback_env,
    merged,
    run_floor,
    steady_offsets,
)
from punctual_tools.bench.leads import (
    LEAD_TARGETS,
    Bound,
    add_arguments,
    lead_bounds,
    lead_report,
    measure_floors,
    print_leads,
    run_without_stack,
    short_lead,
)
from punctual_tools.bench.pages import beside_note, ceiling_cell, git_commit, publish_drift
from punctual_tools.bench.phase_parts import (
    active_tasks,
    after_a_poll,
    arrivals,
    drift_of,
    executor_cpu,
    first_due_after_writes,
    floor_result,
    floor_webhook,
    log,
    policy_of,
    row,
    store_ceiling,
    store_write_probe,
    wait_for_arrivals,
    wait_quiet,
    wait_until_idle,
    write_paced,
)
from punctual_tools.demo import FireLogTail
from punctual_tools.drift import (
    DriftSeries,
    PlotsUnavailableError,
    Verdict,
    entries_from_tasks,
    judge,
    save_cdf,
    save_pictures,
    series_of,
)
from punctual_tools.local.lambda_rules import EXECUTOR_FUNCTION, read_function_limits
from punctual_tools.local.receiver import start_receiver
from punctual_tools.local.stack import LocalStack, StackConfig
from punctual_tools.local.store_latency import store_latency_of
from punctual_tools.stats import summarize

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import WriteRequestOutputTypeDef, WriteRequestTypeDef

# the floors' parts and the phases' shared ones, for the other benchmarks
__all__ = [
    "ACTION",
    "active_tasks",
    "arrivals",
    "executor_cpu",
    "floor_webhook",
    "log",
    "loopback_env",
    "run_floor",
    "wait_quiet",
    "wait_until_idle",
]

# Each phase's target: (the floor it is judged against, ratio target, absolute target in ms). The steady tail and a
# burst may add at most half their floor on whole cores as under Lambda's quota (at normal priority: the local
# profile asks for real-time priority only with --realtime). Under the local profile other ratios are the absolute
# target over the floor of a quiet reference machine (docs/decisions.md), so that both agree there.
# steady+writes is judged against the floor measured under the same client writes (floor/writes), with the
# same 10x allowance as system/steady: what the scheduler adds to what the machine allows under that load.
LOCAL_TARGETS: dict[str, tuple[str, float, float]] = {
    "system/steady": ("floor/steady", 1.5, 0.5),
    "steady+writes": ("floor/writes", 10.0, 10.0),
    "system/burst": ("floor/burst", 1.5, 90.0),
    "fast path 2s": ("floor/steady", 200.0, 10.0),
    # Recurring schedules: occurrences are tasks the chain makes ahead; judged as system/steady.
    "recurring 1s": ("floor/steady", 10.0, 0.5),
    # Webhooks: spread ones at the receiver against the same engine firing from the floor's heap thread; a
    # burst's action starts against the log-action burst of this run.
    "webhook/spread": ("floor/webhook", 10.0, 2.0),
    "webhook/burst": ("system/burst", 1.5, 135.0),
    # ... and the same burst's arrivals at the receiver, against the same burst fired by the floor's heap
    # threads (one process per batch, as the stack's executors) with the same engine to the same receiver.
    "webhook/burst arrival": ("floor/webhook-burst", 1.5, 300.0),
    # A short lead, a cold executor, a restart after a crash (punctual_tools.bench.leads): p99 within 1.5x the
    # webhook floor at the same rate and within 50 ms.
    **LEAD_TARGETS,
}
# Under the lambda profile the floors stand on the executors' footing (the same CPU quota and priority), so the
# scheduler may add at most half its floor to the steady, burst and webhook phases, and steady stays within 2 ms.
LAMBDA_TARGETS: dict[str, tuple[str, float, float]] = {
    **LOCAL_TARGETS,
    "system/steady": ("floor/steady", 1.5, 2.0),
    "recurring 1s": ("floor/steady", 1.5, 2.0),
    "webhook/spread": ("floor/webhook", 1.5, 2.0),
}
TARGETS = {"lambda": LAMBDA_TARGETS, "local": LOCAL_TARGETS}


# -- the floors, on the executors' footing ---------------------------------------------------------------


def measure_floor_steady(runner: FloorRunner, rate: float, seconds: float, fire_log: Path) -> dict[str, Any]:
    """floor/steady: one floor process at ``rate`` for ``seconds``."""
    runs = runner.run([FloorJob("floor-steady-", steady_offsets(rate, seconds), str(fire_log))])
    return floor_result(*merged(runs), processes=1, policy=policy_of(runs))


def measure_floor_burst(
    runner: FloorRunner, shares: list[int], fire_log: Path, prefix: str = "floor-burst-"
) -> dict[str, Any]:
    """Tasks due at one instant, a floor process for each of ``shares`` (as the executors share them: see
    :func:`floors.burst_shares`)."""
    runs = runner.run([FloorJob(f"{prefix}{i}-", [0] * n, str(fire_log)) for i, n in enumerate(shares)])
    return floor_result(*merged(runs), processes=len(shares), policy=policy_of(runs))


# -- the system ------------------------------------------------------------------------------------------
def wait_for_fires(fire_log: Path, prefix: str, task_ids: list[str], until_ms: float) -> list[dict[str, Any]]:
    tail = FireLogTail(fire_log, prefix)
    tail.wait(task_ids, until_ms)
    time.sleep(1.0)  # a late duplicate shows too
    return list(tail.read())


def _write_in_a_process(
    settings: Settings, task_ids: list[str], rate: float, lead_s: float, start: float | None = None
) -> dict[str, Any]:
    return write_paced(Client(settings), task_ids, rate, lead_s, start)


def floor_with_writes(
    stack: LocalStack, runner: FloorRunner, rate: float, seconds: float, fire_log: Path
) -> dict[str, Any]:
    """The floor under the steady+writes phase's load: a floor process (on the executors' footing) fires at
    ``rate`` while the same client, in a process of its own (as in that phase, where the writer and the executors
    share the cores but not an interpreter), writes at ``rate`` into the running stack's table - tasks due two
    hours ahead, so that nothing of the system fires, deleted afterwards. What the machine allows while a client
    writes; the steady+writes phase is judged against it.

    The floor fires at the instants the client writes, as in steady+writes, where each task is due a fixed lead
    after its write and so falls due while a later one is written. Both run at ``rate``, so their phase holds for
    the whole run: left to chance, floors 40x apart were seen against the same system (fires on writes, or
    between them).

    The floor runs in a process of its own, as an executor does: in this process it would share the interpreter
    with the running stack's poller, stream reader and invoker threads, which an executor does not."""
    assert stack.settings is not None
    task_ids = [f"floor-writes-{uuid.uuid4().hex[:6]}-{i:07d}" for i in range(int(rate * seconds))]
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as writer, runner.processes(1) as [floor]:
        writer.submit(_write_in_a_process, stack.settings, task_ids[:1], 1.0, 7_200.0).result()  # warm, set up
        start_ms = int(time.time() * 1000) + 1000
        written = writer.submit(_write_in_a_process, stack.settings, task_ids[1:], rate, 7_200.0, start_ms / 1000)
        offsets = [int(i * 1000 / rate) for i in range(len(task_ids) - 1)]  # fire i at write i
        run = runner.submit(floor, FloorJob("floor-writes-", offsets, str(fire_log)), start_ms).result()
        result = written.result()
    raw = make_dynamodb_client(stack.settings)
    keys: list[WriteRequestTypeDef] = [{"DeleteRequest": {"Key": {"task_id": {"S": t}}}} for t in task_ids]
    for i in range(0, len(keys), 25):
        requests: Sequence[WriteRequestTypeDef | WriteRequestOutputTypeDef] = keys[i : i + 25]
        while requests:
            requests = (
                raw.batch_write_item(RequestItems={stack.settings.table_name: requests})
                .get("UnprocessedItems", {})
                .get(stack.settings.table_name, [])
            )
    return {
        **floor_result(run.fires, run.cpu, processes=1, policy=run.policy),
        "write_rate_per_s": result["write_rate_per_s"],
        "max_write_lag_s": result["max_write_lag_s"],
        "write_errors": len(result["errors"]),
    }


@dataclass(frozen=True)
class Beside:
    """A floor to measure beside a steady phase (``phase``): ``runner`` starts its process, whose fires go to
    ``fire_log``."""

    runner: FloorRunner
    fire_log: Path
    phase: str  # the phase's name, as the floor's figures say where it ran


def system_steady(
    stack: LocalStack,
    rate: float,
    seconds: float,
    *,
    lead_s: float = 30.0,
    concurrent_writes: bool = False,
    beside: Beside | None = None,
) -> dict[str, Any]:
    """``rate`` tasks/s due for ``seconds``.

    Without ``concurrent_writes`` every task is scheduled first and the run is the
    poller dispatching, executors arming, firing and recording. With it, a client writes the tasks during the
    run, each ``lead_s`` before it is due (:func:`write_paced`), so that scheduling shares the cores too.

    With ``beside`` (only without ``concurrent_writes``), floor/steady runs in the same window: a floor process
    at the same rate for the same seconds, each of its instants half-way between two of the system's, so that the
    floor and the system meet the same machine (measured apart, before the system, the floor's p99 moved between
    runs more than the system's did). Its figures come back under ``"floor"``.
    """
    if beside is not None and concurrent_writes:
        raise ValueError("a floor beside the steady phase needs its tasks scheduled ahead")
    if beside is None:
        return _system_steady(stack, rate, seconds, lead_s, concurrent_writes, floor=None)
    with beside.runner.processes(1) as [pool]:  # started and warm before the tasks are written
        return _system_steady(stack, rate, seconds, lead_s, concurrent_writes, floor=(beside, pool))


def _system_steady(
    stack: LocalStack,
    rate: float,
    seconds: float,
    lead_s: float,
    concurrent_writes: bool,
    *,
    floor: tuple[Beside, ProcessPoolExecutor] | None,
) -> dict[str, Any]:
    assert stack.settings is not None
    client = Client(stack.settings)
    prefix = f"steady-{uuid.uuid4().hex[:6]}-"
    total = int(rate * seconds)
    task_ids = [f"{prefix}{i:07d}" for i in range(total)]
    if concurrent_writes:
        log(f"writing {total} tasks at {rate:g}/s, each due {lead_s:g} s after it is written")
        written = write_paced(client, task_ids, rate, lead_s)
        errors, dues = written["errors"], written["dues"]
        write_rate, max_lag = written["write_rate_per_s"], written["max_write_lag_s"]
        last_due = max(dues, default=time.time() * 1000)
    else:
        interval = stack.settings.poll_interval_ms
        first_due = first_due_after_writes(client, total, interval)

        def write(i: int) -> None:
            client.schedule(from_ms(int(first_due + i * 1000 / rate)), ACTION, None, task_id=task_ids[i])

        log(
            f"system/steady: scheduling {total} tasks due at {rate:g}/s for {seconds:g} s, "
            f"the first {(first_due - time.time() * 1000) / 1000:.0f} s ahead"
        )
        writing = time.time()
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(write, range(total)))
        errors = []
        write_rate = round(total / max(time.time() - writing, 1e-3), 1)
        max_lag = 0.0
        last_due = first_due + (total - 1) * 1000 / rate
    floor_run = None
    if floor is not None:
        beside, floor_pool = floor
        job = FloorJob("floor-steady-", steady_offsets(rate, seconds), str(beside.fire_log))
        floor_run = beside.runner.submit(floor_pool, job, int(first_due + 500 / rate))  # half-way between two of ours
    log("waiting for the last fires")
    fires = wait_for_fires(stack.fire_log, prefix, task_ids, last_due + 20_000)
    drifts, fired, dup = drift_of(fires)
    beside_figures = {}
    if floor_run is not None:
        run = floor_run.result()
        figures = floor_result(run.fires, run.cpu, processes=1, policy=run.policy)
        beside_figures = {"floor": figures | {"beside": beside.phase}}
    return {
        **beside_figures,
        "scheduled": total,
        "write_errors": len(errors),
        "fired": fired,
        "duplicates": dup,
        "drift": drifts,
        "fires": fires,
        "write_rate_per_s": write_rate,
        "max_write_lag_s": max_lag,
    }


def one_shard_ids(prefix: str, count: int, shard_count: int, shard: int = 0) -> list[str]:
    """``count`` task ids of the form ``<prefix><n>`` that all fall in ``shard`` of the due index: a poll finds
    them in one read and hands them to one executor (when ``count`` is at most a batch)."""
    found: list[str] = []
    n = 0
    while len(found) < count:
        task_id = f"{prefix}{n:07d}"
        if shard_of(task_id, shard_count) == shard:
            found.append(task_id)
        n += 1
    return found


BURST_WAIT_MS = 120_000  # a burst's fires are awaited this long after its instant: a busy machine's tail is long


def system_burst(stack: LocalStack, count: int, task_ids: list[str] | None = None) -> dict[str, Any]:
    """``count`` tasks (``task_ids`` if given) scheduled ahead, all due at one instant, written between two polls
    so that one poll finds them all and cuts them into batches as a burst is cut (``batches``: how many)."""
    assert stack.settings is not None
    client = Client(stack.settings)
    prefix = f"burst-{uuid.uuid4().hex[:6]}-"
    task_ids = task_ids or [f"{prefix}{i:06d}" for i in range(count)]
    prefix = os.path.commonprefix(task_ids)
    interval = stack.settings.poll_interval_ms
    after_a_poll(stack)
    due = first_due_after_writes(client, len(task_ids), interval)
    log(f"burst: scheduling {len(task_ids)} tasks due at one instant, {(due - time.time() * 1000) / 1000:.0f} s ahead")
    polls_before = len(stack.polls)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda task_id: client.schedule(from_ms(due), ACTION, None, task_id=task_id), task_ids))
    fires = wait_for_fires(stack.fire_log, prefix, task_ids, due + BURST_WAIT_MS)
    drifts, fired, dup = drift_of(fires)
    batches = sum(report.batches for report in stack.polls[polls_before:])
    return {
        "scheduled": len(task_ids),
        "fired": fired,
        "duplicates": dup,
        "drift": drifts,
        "fires": fires,
        "batches": batches,
    }


def system_recurring(stack: LocalStack, schedules: int, seconds: int) -> dict[str, Any]:
    """``schedules`` recurring schedules of ``rate(1 second)``, started ``1000 / schedules`` ms apart, each for
    ``seconds`` occurrences. Only the first few occurrences are made when a schedule is created: the poller
    makes the rest as the run goes (a poll interval and its lead ahead), so the chain is part of what is timed."""
    assert stack.settings is not None
    client = Client(stack.settings)
    prefix = f"recurring-{uuid.uuid4().hex[:6]}-"
    first = next_tick(int(time.time() * 1000) + 100 * schedules + 5_000, stack.settings.poll_interval_ms) + 15_000
    task_ids: list[str] = []
    for i in range(schedules):
        schedule_id, start = f"{prefix}{i:03d}", first + i * 1000 // schedules
        client.create_schedule(
            schedule_id, "rate(1 second)", ACTION, start_at=from_ms(start), end_at=from_ms(start + (seconds - 1) * 1000)
        )
        task_ids += [occurrence_id(schedule_id, start + k * 1000) for k in range(seconds)]
    log(
        f"recurring 1s: {schedules} schedules of rate(1 second), {seconds} occurrences each, the first "
        f"{(first - time.time() * 1000) / 1000:.0f} s ahead"
    )
    fires = wait_for_fires(stack.fire_log, prefix, task_ids, first + seconds * 1000 + 20_000)
    drifts, fired, dup = drift_of(fires)
    return {"scheduled": len(task_ids), "fired": fired, "duplicates": dup, "drift": drifts, "fires": fires}


# -- webhooks ---------------------------------------------------------------------------------------------


def floor_webhook_burst(runner: FloorRunner, url: str, count: int, batch: int, received: Path) -> dict[str, Any]:
    """floor/webhook-burst: ``count`` webhooks due at one instant, fired as the stack fires them - one floor
    process per ``batch`` of them (an executor's share), each with the floor's heap thread and the executor's
    engine (its connections warmed as an executor warms them) - to the same receiver, with no database, poller or
    record; drift = arrival - due. What this machine and this receiver allow such a burst; webhook/burst's
    arrivals are judged against it."""
    prefix = f"floor-hookburst-{uuid.uuid4().hex[:6]}-"
    shares = burst_shares(count, batch)
    floor_log = str(received.with_suffix(".floor-log"))
    runs = runner.run([FloorJob(f"{prefix}{i}-", [0] * n, floor_log, url) for i, n in enumerate(shares)], lead_ms=3000)
    fires = wait_for_arrivals(received, prefix, count, time.time() * 1000 + 30_000)
    return floor_result(fires, merged(runs)[1], processes=len(shares), policy=policy_of(runs))


def webhook_spread(stack: LocalStack, url: str, rate: float, seconds: float, received: Path) -> dict[str, Any]:
    """``rate`` webhooks/s for ``seconds`` through the stack, scheduled ahead; drift at the receiver."""
    assert stack.settings is not None
    client = Client(stack.settings)
    prefix = f"hook-{uuid.uuid4().hex[:6]}-"
    total = int(rate * seconds)
    first_due = first_due_after_writes(client, total, stack.settings.poll_interval_ms)
    action = HttpAction(url=url)
    log(
        f"webhook/spread: scheduling {total} webhooks at {rate:g}/s, the first "
        f"{(first_due - time.time() * 1000) / 1000:.0f} s ahead"
    )
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(
            pool.map(
                lambda i: client.schedule(
                    from_ms(int(first_due + i * 1000 / rate)), action, None, task_id=f"{prefix}{i:06d}"
                ),
                range(total),
            )
        )
    fires = wait_for_arrivals(
        received, prefix, total, first_due + seconds * 1000 + 20_000, last_due_ms=first_due + (total - 1) * 1000 / rate
    )
    drifts, fired, dup = drift_of(fires)
    return {"scheduled": total, "fired": fired, "duplicates": dup, "drift": drifts, "fires": fires}


def webhook_burst(stack: LocalStack, url: str, count: int, received: Path) -> dict[str, Any]:
    """``count`` webhooks due at one instant: the action starts the executors recorded (``drift``, judged
    against the log-action burst of this run) and the arrivals at the receiver (``arrival``)."""
    assert stack.settings is not None
    client = Client(stack.settings)
    prefix = f"hookburst-{uuid.uuid4().hex[:6]}-"
    task_ids = [f"{prefix}{i:06d}" for i in range(count)]
    after_a_poll(stack)
    due = first_due_after_writes(client, count, stack.settings.poll_interval_ms)
    action = HttpAction(url=url)
    log(
        f"webhook/burst: scheduling {count} webhooks due at one instant, {(due - time.time() * 1000) / 1000:.0f} s "
        "ahead"
    )
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda task_id: client.schedule(from_ms(due), action, None, task_id=task_id), task_ids))
    wait_for_arrivals(received, prefix, count, due + 30_000, last_due_ms=due)
    deadline = time.time() + 60
    while True:  # the executors' records (each task's action start): written after the burst, in quiet gaps
        with ThreadPoolExecutor(max_workers=8) as pool:
            tasks = [t for t in pool.map(client.get, task_ids) if t is not None]
        if all(t.drift_ms is not None for t in tasks) or time.time() > deadline:
            break
        time.sleep(1.0)
    # read once the outcomes are in: a webhook recorded as answered has arrived, however late in the burst's tail
    fires = arrivals(received, prefix)
    arrival, fired, dup = drift_of(fires)
    starts = entries_from_tasks(tasks)
    return {
        "scheduled": count,
        "fired": fired,
        "duplicates": dup,
        "drift": drift_of(starts)[0],
        "fires": starts,
        "arrival": arrival,
        "arrival_fires": fires,
        "recorded": len(starts),
    }


# -- between phases --------------------------------------------------------------------------------------


# -- report ----------------------------------------------------------------------------------------------


def cpu_row(name: str, cpu: dict[str, Any]) -> str:
    """One phase's executor CPU: how many worked, their CPU and their throttling (mean / largest per executor)."""

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    share = cpu.get("throttled_share")
    return (
        f"{name:<20}{cpu['executors']:>5}  cpu {f(cpu['cpu_s'])} s (each {f(cpu['cpu_s_mean'])} / "
        f"{f(cpu['cpu_s_max'])})  throttled {f(cpu['throttled_s'])} s (each {f(cpu['throttled_s_mean'])} / "
        f"{f(cpu['throttled_s_max'])}) in {cpu['nr_throttled']} of {cpu['nr_periods']} periods"
        + ("" if share is None else f" ({share:.1%})")
    )


def floor_cpu_row(name: str, result: dict[str, Any]) -> str:
    cpu: CpuUse = result["floor_cpu"]
    return (
        f"{name:<20}{result['processes']:>5}  cpu {cpu.cpu_s:.3f} s  throttled {cpu.throttled_s:.3f} s in "
        f"{cpu.nr_throttled} of {cpu.nr_periods} periods"
    )


def verdicts(p99: dict[str, float | None], profile: str = "lambda") -> list[Verdict]:
    """Each system phase's p99 judged against its floor's p99 (ratio, the verdict that counts) and in ms."""
    return [
        judge(name, p99[name], p99[floor], floor_name=floor, abs_target=absolute, ratio_target=ratio)
        for name, (floor, ratio, absolute) in TARGETS[profile].items()
        if name in p99
    ]


def phase_series(floors: dict[str, dict[str, Any]], results: dict[str, dict[str, Any]]) -> list[DriftSeries]:
    """Each row of the table as a series of the fires it was computed from: the floors, each phase (a floor
    measured with the stack up included), and a phase's arrivals at the receiver beside its action starts."""
    series = [series_of(name, f["fires"]) for name, f in floors.items()]
    for name, result in results.items():
        series.append(series_of(name, result["fires"]))
        if "arrival_fires" in result:
            series.append(series_of(f"{name} arrival", result["arrival_fires"]))
    return series


def draw_pictures(out: Path, series: list[DriftSeries]) -> list[str]:
    """Histogram, timeline and CDF of each series, and one CDF of all of them; returns the paths."""
    try:
        paths = [path for one in series for path in save_pictures(one, out)]
        paths.append(save_cdf(series, out / "all-phases-cdf.png", title="drift CDF, every phase of this run"))
    except PlotsUnavailableError as exc:
        log(f"no drift pictures: {exc}")
        return []
    return [str(path) for path in paths]


def profile_line(profile: str, memory_mb: int, quota_applied: bool | None, realtime: bool = False) -> str:
    """The footing every figure of the run stands on, as the table's first line says it."""
    if profile == "local":
        firing = "real-time firing where allowed" if realtime else "firing at normal priority"
        return f"profile local: whole cores and {firing}, for the executors and the floors (more than Lambda gives)"
    quota = "" if quota_applied is None or quota_applied else "; NO CPU quota could be set: more than Lambda gives"
    return (
        f"profile lambda: executors and floors at {memory_mb} MB's CPU ({memory_mb / 1769:.3f} of a core each), "
        f"normal priority{quota}"
    )


STEADY_RATE_MAX = 100.0  # tasks a second: the steady phases' rate where the store carries it
STORE_SHARE = 0.5  # of what the store takes from one client, the share the steady phase's arming and outcomes use


def carried_rate(writes_per_s: float, writes_per_task: int) -> float:
    """The steady phases' rate on this machine: :data:`STORE_SHARE` of the store's writes a second at
    ``writes_per_task`` (the poll's reads and the heartbeats use the rest), a whole number of tasks a second, at
    most :data:`STEADY_RATE_MAX`. Beyond it a phase measures DynamoDB Local on these cores, not the
    scheduler (docs/decisions.md, "The drift benchmark leaves the cores to what it measures")."""
    return float(max(1, min(STEADY_RATE_MAX, int(writes_per_s * STORE_SHARE / writes_per_task))))


def phase_loads(args: argparse.Namespace) -> dict[str, tuple[int, float | None]]:
    """Each system phase's load on the store: the writes a task makes during the run (its arming and its outcome,
    plus the client's write when the phase writes while it runs, or the chain's for a schedule's occurrence) and
    the tasks a second it asks for (None: a burst at one instant)."""
    return {
        "system/steady": (2, args.steady_rate),
        "steady+writes": (3, args.steady_rate),
        "system/burst": (2, None),
        "webhook/spread": (2, args.webhook_rate),
        "webhook/burst": (2, None),
        "recurring 1s": (3, float(args.recurring_schedules)),
        "fast path 2s": (3, args.fast_rate),
        "short lead": (3, args.lead_rate + args.lead_background_rate),
    }


def make_parser() -> argparse.ArgumentParser:
    """The benchmark's options (the lead phases' too)."""
    parser = argparse.ArgumentParser(
        prog="python -m punctual_tools.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--profile",
        choices=("lambda", "local"),
        default="lambda",
        help="lambda (default): executors and floors at the template's executor memory's CPU quota, "
        "normal priority; local: whole cores, normal priority",
    )
    parser.add_argument(
        "--realtime",
        action="store_true",
        help="local profile only: the executors' and the floors' firing threads ask for real-time priority where "
        "the host grants it (more than Lambda gives; the verdicts of the issue's targets rest on a run without it)",
    )
    parser.add_argument(
        "--steady-rate",
        type=float,
        default=None,
        help="tasks a second due in the steady phases; default: what the store here carries with half to spare (a "
        "probe just before them, at two writes a task), at most 100",
    )
    parser.add_argument("--steady-seconds", type=float, default=60)
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--poll-interval", type=float, default=10)
    parser.add_argument(
        "--lead-ms",
        type=int,
        default=Settings().lead_ms,
        help="how far ahead of now the local stack's poller dispatches (ms; at least the poll interval + the "
        "fast-path margin, e.g. 20000 with --poll-interval 10)",
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=Settings().max_batch_size,
        help="the most tasks the poller puts into one executor's batch (the template's ExecutorBatchSize, 1 to 900)",
    )
    parser.add_argument(
        "--page",
        default=None,
        help="with --publish: publish as docs/benchmarks/drift-<PAGE>.md instead of the profile's page (a run at "
        "other settings, e.g. lambda-levers); the README keeps the profile's",
    )
    parser.add_argument("--page-title", default=None, help="with --page: what the page's title adds")
    parser.add_argument("--json", action="store_true", help="also print every figure as one JSON object (last line)")
    parser.add_argument(
        "--publish",
        action="store_true",
        help="write docs/benchmarks/drift-<profile>.md from this run (its figures and CDF beside it) "
        "and the README's benchmark figures",
    )
    parser.add_argument(
        "--prewarm",
        type=int,
        default=40,
        help="warm executor processes: the steady load keeps about 36 batches in flight "
        "(90 s lead x 100 tasks/s / 250 per batch); Lambda's answer is provisioned concurrency",
    )
    parser.add_argument("--fast-rate", type=float, default=10)
    parser.add_argument("--fast-seconds", type=float, default=30)
    parser.add_argument(
        "--settle", type=float, default=5.0, help="seconds of rest once the stack is idle, before each system phase"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the run's directory (stack data, fire logs, pictures); default a new temporary one",
    )
    parser.add_argument("--no-pictures", dest="pictures", action="store_false", help="draw no drift pictures")
    parser.add_argument(
        "--no-fast-path",
        dest="fast_path",
        action="store_false",
        help="run the stack without its stream fast path, and skip the fast-path phase",
    )
    parser.add_argument("--webhook-rate", type=float, default=20, help="spread webhooks a second")
    parser.add_argument("--webhook-seconds", type=float, default=50)
    parser.add_argument("--webhook-burst", type=int, default=2000, help="webhooks due at one instant")
    parser.add_argument("--no-webhooks", dest="webhooks", action="store_false", help="skip the webhook phases")
    parser.add_argument(
        "--recurring-schedules",
        type=int,
        default=20,
        help="rate(1 second) schedules in the recurring phase (0: skip it)",
    )
    parser.add_argument("--recurring-seconds", type=int, default=40, help="occurrences of each")
    parser.add_argument(
        "--no-writes",
        dest="with_writes",
        action="store_false",
        help="skip the phase in which a client schedules tasks during the steady run",
    )
    parser.add_argument("--no-leads", dest="leads", action="store_false", help="skip the short-lead phase")
    parser.add_argument("--no-cold", dest="cold", action="store_false", help="skip the cold-executor phase")
    parser.add_argument("--no-restart", dest="restart", action="store_false", help="skip the restart phase")
    add_arguments(parser)
    return parser


@dataclass
class Run:
    """What one run holds from one phase to the next: its footing, the floors, the phases' results and waits."""

    work: Path
    machine: str
    load_before: tuple[float, float, float]
    memory_mb: int
    batch: int
    runner: FloorRunner
    floor_log: Path
    received: Path
    hook_url: str = ""
    receiver: Any = None
    floors: dict[str, dict[str, Any]] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    lead_results: dict[str, dict[str, Any]] = field(default_factory=dict)  # the phases that start stacks of their own
    waits: dict[str, dict[str, Any]] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    quota_applied: bool | None = None
    invoker_stats: dict[str, Any] = field(default_factory=dict)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)


def set_up(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Run:
    """The run's directory, the firing priority, the executors' memory and the floors' footing."""
    work = args.out or Path(tempfile.mkdtemp(prefix="punctual-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    log(f"run directory {work}; load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    if args.realtime and args.profile != "local":
        parser.error("--realtime: only under --profile local (Lambda gives no real-time priority)")
    # Whether firing threads ask for real-time priority, for the floors (read from the environment) and the stack:
    # not unless asked, so that a verdict rests on normal priority, as on Lambda.
    os.environ["PUNCTUAL_REALTIME_FIRING"] = "true" if args.realtime else "false"
    memory_mb = read_function_limits(EXECUTOR_FUNCTION).memory_mb
    runner = FloorRunner(args.profile, memory_mb)
    log(runner.footing.line())
    return Run(
        work=work,
        machine=f"{platform.node()} ({os.cpu_count()} cores, Python {platform.python_version()})",
        load_before=load_before,
        memory_mb=memory_mb,
        batch=burst_batch(memory_mb if args.profile == "lambda" else None),  # as the poller cuts a burst
        runner=runner,
        floor_log=work / "floor.jsonl",
        received=work / "received.jsonl",
    )


def run_floors(run: Run, args: argparse.Namespace) -> None:
    """The floors measured before the stack starts: the burst, the webhooks' and the lead phases'; starts the
    loopback receiver when a phase needs it."""
    runner, floors, received, batch = run.runner, run.floors, run.received, run.batch
    lead_phases = args.leads or args.cold or args.restart
    # Under lambda a burst is fired by one floor process per batch, as the executors share it; under local, by one
    # process on whole cores.
    floor_batch = batch if args.profile == "lambda" else max(args.burst, 1)
    log(f"floor/burst: {args.burst} at one instant, {len(burst_shares(args.burst, floor_batch))} floor process(es)")
    floors["floor/burst"] = measure_floor_burst(runner, burst_shares(args.burst, floor_batch), run.floor_log)
    if args.webhooks or lead_phases:
        run.receiver, port = start_receiver(received)
        run.hook_url = f"http://127.0.0.1:{port}/hook"
    hook_url = run.hook_url
    if args.webhooks:
        time.sleep(args.settle)
        log(
            f"floor/webhook: {args.webhook_rate:g}/s for {args.webhook_seconds:g} s to a loopback receiver (its "
            "own process), one heap thread, the executor's HTTP engine, no database"
        )
        floors["floor/webhook"] = floor_webhook(runner, hook_url, args.webhook_rate, args.webhook_seconds, received)
        time.sleep(args.settle)
        log(
            f"floor/webhook-burst: {args.webhook_burst} webhooks due at one instant to the same receiver, one "
            f"floor process per {batch} (an executor's batch), the executor's HTTP engine, no database"
        )
        floors["floor/webhook-burst"] = floor_webhook_burst(runner, hook_url, args.webhook_burst, batch, received)
    if lead_phases:
        time.sleep(args.settle)
        have = floors if args.webhooks and args.webhook_rate == args.restart_rate else {}
        floors |= measure_floors(runner, hook_url, received, args, args.restart, have=have)


def stack_config(run: Run, args: argparse.Namespace) -> StackConfig:
    """The local stack the system phases run on."""
    # The loopback receiver is allowed by the runtime's configuration (as PUNCTUAL_ALLOWED_TARGETS would).
    return StackConfig(
        home=run.work / "stack",
        port=0,
        poll_interval_s=args.poll_interval,
        prewarm=args.prewarm,
        fast_path=args.fast_path,
        settings_overrides={
            "ntp_server": None,
            "allowed_targets": "127.0.0.1",
            "lead_ms": args.lead_ms,
            "max_batch_size": args.max_batch_size,
            "profile": args.profile,
            "realtime_firing": args.realtime,
        },
    )


def steady_rate_of(stack: LocalStack, args: argparse.Namespace) -> float:
    """``--steady-rate``, or what the store here carries with half to spare (a probe of its writes)."""
    if args.steady_rate is not None:
        return float(args.steady_rate)
    prober = Client(stack.settings)
    store_write_probe(prober)  # a fresh store's first writes are slow (its JIT): warm it, then measure
    return carried_rate(store_write_probe(prober), phase_loads(args)["system/steady"][0])


def phase_plan(
    stack: LocalStack, run: Run, args: argparse.Namespace, steady_rate: float
) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """The system phases the options ask for, in the order they run, each a name and what runs it."""
    hook_url, received = run.hook_url, run.received
    beside = Beside(run.runner, run.floor_log, "system/steady")  # floor/steady, in system/steady's window
    plan: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("system/steady", lambda: system_steady(stack, steady_rate, args.steady_seconds, beside=beside))
    ]
    if args.with_writes:
        plan.append(
            (
                "floor/writes",
                lambda: floor_with_writes(stack, run.runner, steady_rate, args.steady_seconds, run.floor_log),
            )
        )
        plan.append(
            (
                "steady+writes",
                lambda: system_steady(stack, steady_rate, args.steady_seconds, concurrent_writes=True),
            )
        )
    plan.append(("system/burst", lambda: system_burst(stack, args.burst)))
    if args.webhooks:
        plan.append(
            (
                "webhook/spread",
                lambda: webhook_spread(stack, hook_url, args.webhook_rate, args.webhook_seconds, received),
            )
        )
        plan.append(("webhook/burst", lambda: webhook_burst(stack, hook_url, args.webhook_burst, received)))
    if args.recurring_schedules > 0:
        plan.append(("recurring 1s", lambda: system_recurring(stack, args.recurring_schedules, args.recurring_seconds)))
    if args.fast_path:
        plan.append(
            (
                "fast path 2s",
                lambda: system_steady(stack, args.fast_rate, args.fast_seconds, lead_s=2.0, concurrent_writes=True),
            )
        )
    if args.leads:
        plan.append(
            (
                "short lead",
                lambda: short_lead(
                    stack,
                    hook_url,
                    received,
                    args.lead_rate,
                    args.lead_seconds,
                    background_rate=args.lead_background_rate,
                ),
            )
        )
    return plan


def run_system_phases(run: Run, args: argparse.Namespace) -> None:
    """The local stack up, then each system phase once the stack is idle, with what the store carries beside it."""
    with LocalStack(
        stack_config(run, args),
        on_poll=lambda r: log(f"poll: dispatched {r.dispatched} in {r.batches} batch(es)"),
        on_batch=lambda r: None,
    ) as stack:
        assert stack.settings is not None
        assert stack.invoker is not None
        log(f"stack up: DynamoDB Local at {stack.settings.endpoint_url}, poll every {args.poll_interval:g} s")
        for line in stack.describe_limits():  # the profile every figure of the system's phases is measured under
            log(line)
        latency = store_latency_of(stack.settings)  # the store's distance every system phase ran at
        run.profile = {
            "profile": stack.settings.profile,
            "cpu_quota": stack.invoker.cpu_quota.as_dict(),
            "store_latency": latency.as_dict() if latency else None,
            "store_latency_line": stack.describe_store_latency(),
        }
        run.quota_applied = stack.invoker.cpu_quota.applied and run.runner.footing.quota
        steady_rate = steady_rate_of(stack, args)
        args.steady_rate = steady_rate  # what the report's args say the steady phases ran at
        plan = phase_plan(stack, run, args, steady_rate)
        log(f"executors quiet (their cold starts over) after {wait_quiet(stack):.1f} s")
        loads = phase_loads(args)
        for name, phase in plan:
            log(f"{name}: waiting until the stack is idle")
            run.waits[name] = wait_until_idle(stack, args.settle)
            ceiling: dict[str, Any] = {}
            if name in loads:
                ceiling = store_ceiling(store_write_probe(Client(stack.settings)), *loads[name])
                log(f"{name}: the store carries {ceiling_cell(ceiling)} at {loads[name][0]} writes a task")
            log(f"{name}: starting")
            run.results[name] = executor_cpu(stack, phase) | ceiling
            if "floor" in run.results[name]:
                run.floors["floor/steady"] = run.results[name].pop("floor")
        run.invoker_stats = dict(stack.invoker.stats)


def tear_down(run: Run) -> None:
    """The receiver and the floors' processes stop, whatever happened."""
    if run.receiver is not None:
        run.receiver.terminate()
    run.runner.close()


def judge_run(run: Run, args: argparse.Namespace) -> list[Verdict]:
    """The verdicts on each floor's and each phase's p99 (and each arrival's)."""
    floors, results, lead_results = run.floors, run.results, run.lead_results
    p99 = {
        **{name: summarize(f["drift"])["p99"] for name, f in floors.items()},
        **{name: summarize(r["drift"])["p99"] for name, r in [*results.items(), *lead_results.items()]},
        **{f"{name} arrival": summarize(r["arrival"])["p99"] for name, r in results.items() if "arrival" in r},
    }
    return verdicts(p99, args.profile)


def print_drift_table(run: Run, args: argparse.Namespace) -> None:
    """The footing, then one row of drift per floor and per phase."""
    floors, results, load_before, load_after = run.floors, run.results, run.load_before, run.load_after
    print(f"\nPunctual drift benchmark - {run.machine}")
    print(profile_line(args.profile, run.memory_mb, run.quota_applied, run.runner.footing.realtime))
    print(run.runner.footing.line())
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    print("drift = action start - due (ms)\n")
    print(f"{'phase':<20}{'count':>7}{'p50':>11}{'p90':>11}{'p99':>11}{'max':>11}")
    for name, f in floors.items():
        where = " (arrival at the receiver)" if "webhook" in name else ""
        during = beside_note(f)
        print(row(name, f["drift"], f"({f['processes']} floor process(es), firing {f['policy']}{during}){where}"))
    notes = {
        name: f"(writes {r['write_rate_per_s']:g}/s, lag up to {r['max_write_lag_s']:g} s; each due "
        f"{'30' if name == 'steady+writes' else '2'} s after its write)"
        for name, r in results.items()
        if "write_rate_per_s" in r and name != "system/steady"
    }
    for name, r in results.items():
        if name in LEAD_TARGETS:  # printed with the other lead phases below
            continue
        if "scheduled" not in r:  # a floor measured with the stack up
            print(
                row(
                    name,
                    r["drift"],
                    f"(a floor process while a client writes {r['write_rate_per_s']:g}/s, "
                    f"lag up to {r['max_write_lag_s']:g} s)",
                )
            )
            continue
        where = {
            "webhook/spread": "(arrival at the receiver) ",
            "webhook/burst": f"(action start, {r.get('recorded')} recorded) ",
        }.get(name, "")
        print(
            row(
                name,
                r["drift"],
                f"{where}scheduled {r['scheduled']}, fired {r['fired']}, dup {r['duplicates']} "
                f"{notes.get(name, '')} store carries {ceiling_cell(r)}".rstrip(),
            )
        )
        if "arrival" in r:
            print(row("  arrival", r["arrival"], "(the same burst at the receiver)"))


def lead_phases_of(run: Run) -> tuple[dict[str, dict[str, Any]], list[Bound]]:
    """The lead phases' results (the short lead's from the stack, the others' from stacks of their own) and their
    bounds."""
    leads = {**{name: r for name, r in run.results.items() if name in LEAD_TARGETS}, **run.lead_results}
    return leads, lead_bounds(leads)


def print_leads_cpu_and_waits(run: Run) -> None:
    """The lead phases, the CPU of the floors and the executors in each phase, and the idle waits."""
    leads, bounds = lead_phases_of(run)
    if leads:
        print("\nshort leads, a cold executor, a restart after a crash (drift at the receiver):")
        print_leads(leads, bounds)
    print(
        "\nCPU: floor processes, and the executors' worker processes in each phase (executors that worked; "
        "each: mean / largest; throttled: held back by their cgroup's quota, from cpu.stat)"
    )
    for name, f in run.floors.items():
        print(floor_cpu_row(name, f))
    for name, r in run.results.items():
        print(floor_cpu_row(name, r) if "floor_cpu" in r else cpu_row(name, r["cpu"]))
    print(
        "\nidle waits before each phase: "
        + ", ".join(
            f"{name} {w['idle_wait_s']:.1f} s{'' if w['idle'] else ' (TIMED OUT, not idle)'} + {w['settle_s']:g} s"
            for name, w in run.waits.items()
        )
    )
    print(f"executor invocations: {run.invoker_stats}")


def is_complete(run: Run) -> bool:
    """Every task of every system phase fired exactly once."""
    return all(r["fired"] == r["scheduled"] and not r["duplicates"] for r in run.results.values() if "scheduled" in r)


def print_verdicts(run: Run, args: argparse.Namespace, judged: list[Verdict]) -> None:
    """Each target's verdict, whether every task fired once, and the run's verdict."""
    print(
        f"\ntargets ({args.profile} profile; p99; the ratio to this run's floor is the verdict that counts, the "
        "absolute one is shown beside it):"
    )
    for verdict in judged:
        print("  " + verdict.line())
    all_met = all(v.met for v in judged)
    print(f"every task fired exactly once: {'yes' if is_complete(run) else 'NO'}")
    missed = ", ".join(v.name for v in judged if not v.met)
    print(
        f"verdict (ratio targets): {'all MET' if all_met else 'MISSED: ' + missed}"
        f"; absolute targets: {sum(v.abs_met for v in judged)} of {len(judged)} met"
    )


def draw_run_pictures(run: Run, args: argparse.Namespace) -> list[str]:
    """The drift pictures of every floor and phase, unless ``--no-pictures``; their paths, printed."""
    pictures: list[str] = []
    if args.pictures:
        pictures = draw_pictures(run.work / "pictures", phase_series(run.floors, {**run.results, **run.lead_results}))
        print("drift pictures:")
        for path in pictures:
            print(f"  {path}")
    return pictures


def make_report(run: Run, args: argparse.Namespace, judged: list[Verdict], pictures: list[str]) -> dict[str, Any]:
    """Every figure of the run, as the JSON and the published page hold it."""
    leads, bounds = lead_phases_of(run)
    hidden = ("drift", "fires", "arrival", "arrival_fires", "floor_cpu")
    return {
        **({"page": args.page, "page_title": args.page_title} if args.page else {}),
        "machine": run.machine,
        "commit": git_commit(),
        "run_dir": str(run.work),
        "load_avg_before": run.load_before,
        "load_avg_after": run.load_after,
        **run.profile,
        "executor_memory_mb": run.memory_mb,
        "floor_footing": run.runner.footing.as_dict(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "floors": {
            name: {
                **summarize(f["drift"]),
                "processes": f["processes"],
                "policy": f["policy"],
                "cpu": vars(f["floor_cpu"]),
                **({"beside": f["beside"]} if f.get("beside") else {}),
            }
            for name, f in run.floors.items()
        },
        "phases": {
            name: {
                **summarize(r["drift"]),
                **{k: v for k, v in r.items() if k not in hidden},
                **({"floor_cpu": vars(r["floor_cpu"])} if "floor_cpu" in r else {}),
                **({"arrival": summarize(r["arrival"])} if "arrival" in r else {}),
                **run.waits[name],
            }
            for name, r in run.results.items()
        },
        "verdicts": [v.as_dict() for v in judged],
        "targets_met": all(v.met for v in judged),
        "complete": is_complete(run),
        "invoker": run.invoker_stats,
        **({"leads": lead_report(leads, bounds), "leads_met": all(b.met for b in bounds)} if leads else {}),
        "pictures": pictures,
    }


def publish(report: dict[str, Any], args: argparse.Namespace) -> None:
    """With ``--publish`` the page and the README's figures; with ``--json`` the report's one line."""
    if args.publish:
        print(f"page: {publish_drift(report)} (and the README's benchmark figures)")
    if args.json:
        print(json.dumps(report))


def main() -> int:
    parser = make_parser()
    args = parser.parse_args()
    run = set_up(parser, args)
    try:
        run_floors(run, args)
        run_system_phases(run, args)
        if args.cold or args.restart:
            run.lead_results = run_without_stack(
                run.work, run.hook_url, run.received, args, args.cold, restart=args.restart
            )
    finally:
        tear_down(run)
    run.load_after = os.getloadavg()
    judged = judge_run(run, args)
    print_drift_table(run, args)
    print_leads_cpu_and_waits(run)
    print_verdicts(run, args, judged)
    report = make_report(run, args, judged, draw_run_pictures(run, args))
    publish(report, args)
    return 0 if report["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
