"""Drift benchmark: the whole local system against the bare dispatcher floor, in one run.

    .venv/bin/python bench/bench.py [--steady-rate 100] [--steady-seconds 60] [--burst 2000] [--json]

Phases (each prints its figures; drift = action start - due, ms):

1. floor/steady  one heap dispatcher thread firing the log action into a thread pool, no database,
                 at ``--steady-rate`` tasks/s for ``--steady-seconds`` seconds;
2. floor/burst   the same dispatcher, ``--burst`` tasks due at one instant;
3. system/steady the local stack (DynamoDB Local on disk, poller every 10 s, executors in worker processes,
                 recording): ``--steady-rate`` tasks/s due for ``--steady-seconds`` seconds, scheduled ahead;
                 claiming, arming, firing and recording share the machine's 2 cores (the issue's scenario);
4. steady+writes the same while a client schedules the tasks during the run, each due 30 s after it is
                 written (extra, harsher: the client's writes share the cores too; no target);
5. system/burst  ``--burst`` tasks scheduled ahead, all due at one instant;
6. fast path     ``--fast-rate`` tasks/s for ``--fast-seconds`` s, each written 2 s before it is due (less than
                 one poll interval): the table stream's fast path claims and dispatches them.

Fires are observed at the target (the log action's fire log), so a lost or doubled fire shows in the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from punctual.actions import FireContext, FireLog, run_action
from punctual.client import Client
from punctual.clock import SystemClock
from punctual.dispatcher import Dispatcher
from punctual.keys import from_ms, next_tick
from punctual.model import LogAction
from punctual_tools.demo import FireLogTail
from punctual_tools.local.stack import LocalStack, StackConfig
from punctual_tools.stats import summarize

ACTION = LogAction(message="bench")
TARGETS = {"steady_p99_ms": 0.5, "burst_vs_floor": 1.5, "fast_path_p99_ms": 10.0}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the floor -------------------------------------------------------------------------------------------
def run_floor(due_ms: list[float], fire_log: Path, workers: int = 32) -> list[float]:
    """One dispatcher thread, the same action, no database: the precision floor of this machine."""
    FireLog.configure(str(fire_log))
    clock = SystemClock()
    drifts: list[float] = []
    lock = threading.Lock()

    def fire(item: tuple[str, float]) -> None:
        started = clock.wall_ms()
        run_action(ACTION, FireContext(item[0], 0, int(item[1]), started, None))
        with lock:
            drifts.append(started - item[1])

    with Dispatcher(fire, workers=workers, clock=clock) as dispatcher:
        wall, mono = clock.wall_ms(), clock.monotonic()
        for i, due in enumerate(due_ms):
            dispatcher.add(mono + (due - wall) / 1000, (f"floor-{i}", due))
    FireLog.configure(None)
    return drifts


def floor_steady(rate: float, seconds: float, fire_log: Path) -> list[float]:
    start = time.time() * 1000 + 1000
    return run_floor([start + i * 1000 / rate for i in range(int(rate * seconds))], fire_log)


def floor_burst(count: int, fire_log: Path) -> list[float]:
    due = int(time.time() * 1000) + 1000
    return run_floor([due] * count, fire_log)


# -- the system ------------------------------------------------------------------------------------------
def wait_for_fires(fire_log: Path, prefix: str, task_ids: list[str], until_ms: float) -> list[dict[str, Any]]:
    tail = FireLogTail(fire_log, prefix)
    tail.wait(task_ids, until_ms)
    time.sleep(1.0)  # a late duplicate shows too
    return list(tail.read())


def drift_of(fires: list[dict[str, Any]]) -> tuple[list[float], int, int]:
    """Drift of the first fire of each task, the number of distinct tasks fired and of duplicate fires."""
    first: dict[str, dict[str, Any]] = {}
    for fire in fires:
        first.setdefault(fire["task_id"], fire)
    return [f["fired_ms"] - f["due_ms"] for f in first.values()], len(first), len(fires) - len(first)


def system_steady(stack: LocalStack, rate: float, seconds: float, lead_s: float = 30.0,
                  concurrent_writes: bool = False) -> dict[str, Any]:
    """``rate`` tasks/s due for ``seconds``.

    Without ``concurrent_writes`` (the issue's scenario) every task is scheduled first and the run is the
    poller claiming, executors arming, firing and recording. With it, a client writes the tasks during the
    run, each ``lead_s`` before it is due, so that scheduling shares the cores too.
    """
    client = Client(stack.settings)
    prefix = f"steady-{uuid.uuid4().hex[:6]}-"
    total = int(rate * seconds)
    task_ids = [f"{prefix}{i:07d}" for i in range(total)]
    errors: list[str] = []
    if concurrent_writes:
        start = time.time() + 0.5

        def write(i: int) -> None:
            at = start + i / rate
            delay = at - time.time()
            if delay > 0:
                time.sleep(delay)
            try:
                client.schedule(from_ms(int(at * 1000 + lead_s * 1000)), ACTION, None, task_id=task_ids[i])
            except Exception as exc:  # noqa: BLE001 - counted and reported
                errors.append(repr(exc))

        log(f"writing {total} tasks at {rate:g}/s, each due {lead_s:g} s after it is written")
        first_due = (start + lead_s) * 1000
    else:
        interval = stack.settings.poll_interval_ms
        first_due = next_tick(int(time.time() * 1000) + 5 * total + 5_000, interval) + 15_000

        def write(i: int) -> None:
            client.schedule(from_ms(int(first_due + i * 1000 / rate)), ACTION, None, task_id=task_ids[i])

        log(f"system/steady: scheduling {total} tasks due at {rate:g}/s for {seconds:g} s, "
            f"the first {(first_due - time.time() * 1000) / 1000:.0f} s ahead")
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(write, range(total)))
    log(f"system/steady: written ({len(errors)} errors); waiting for the last fires")
    last_due = first_due + (total - 1) * 1000 / rate
    fires = wait_for_fires(stack.fire_log, prefix, task_ids, last_due + 20_000)
    drifts, fired, dup = drift_of(fires)
    return {"scheduled": total, "write_errors": len(errors), "fired": fired, "duplicates": dup, "drift": drifts}


def system_burst(stack: LocalStack, count: int) -> dict[str, Any]:
    client = Client(stack.settings)
    prefix = f"burst-{uuid.uuid4().hex[:6]}-"
    task_ids = [f"{prefix}{i:06d}" for i in range(count)]
    interval = stack.settings.poll_interval_ms
    due = next_tick(int(time.time() * 1000) + 3 * count + 3_000, interval) + 15_000
    log(f"system/burst: scheduling {count} tasks due at one instant, {(due - time.time() * 1000) / 1000:.0f} s ahead")
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda task_id: client.schedule(from_ms(due), ACTION, None, task_id=task_id), task_ids))
    fires = wait_for_fires(stack.fire_log, prefix, task_ids, due + 30_000)
    drifts, fired, dup = drift_of(fires)
    return {"scheduled": count, "fired": fired, "duplicates": dup, "drift": drifts}


# -- report ----------------------------------------------------------------------------------------------
def row(name: str, drifts: list[float], extra: str = "") -> str:
    s = summarize(drifts)

    def f(v: float | None) -> str:
        return "       -" if v is None else f"{v:8.3f}"

    return f"{name:<16}{s['count']:>7}{f(s['p50'])}{f(s['p90'])}{f(s['p99'])}{f(s['max'])}  {extra}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steady-rate", type=float, default=100)
    parser.add_argument("--steady-seconds", type=float, default=60)
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--poll-interval", type=float, default=10)
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON object")
    parser.add_argument("--prewarm", type=int, default=40,
                        help="warm executor processes: the steady load keeps about 36 batches in flight "
                        "(90 s lead x 100 tasks/s / 250 per batch); Lambda's answer is provisioned concurrency")
    parser.add_argument("--fast-rate", type=float, default=10)
    parser.add_argument("--fast-seconds", type=float, default=30)
    parser.add_argument("--no-fast-path", dest="fast_path", action="store_false",
                        help="run the stack without its stream fast path, and skip the fast-path phase")
    parser.add_argument("--no-writes", dest="with_writes", action="store_false",
                        help="skip the extra phase in which a client schedules tasks during the steady run")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="punctual-bench-"))
    log(f"floor/steady: {args.steady_rate:g}/s for {args.steady_seconds:g} s, one heap thread, no database")
    f_steady = floor_steady(args.steady_rate, args.steady_seconds, work / "floor.jsonl")
    log(f"floor/burst: {args.burst} at one instant")
    f_burst = floor_burst(args.burst, work / "floor.jsonl")

    config = StackConfig(home=work / "stack", port=0, poll_interval_s=args.poll_interval, prewarm=args.prewarm,
                         fast_path=args.fast_path, settings_overrides={"ntp_server": None})
    with LocalStack(config, on_poll=lambda r: log(f"poll: dispatched {r.dispatched} in {r.batches} batch(es)"),
                    on_batch=lambda r: None) as stack:
        log(f"stack up: DynamoDB Local at {stack.settings.endpoint_url}, poll every {args.poll_interval:g} s")
        s_steady = system_steady(stack, args.steady_rate, args.steady_seconds)
        s_writes = (system_steady(stack, args.steady_rate, args.steady_seconds, concurrent_writes=True)
                    if args.with_writes else None)
        s_burst = system_burst(stack, args.burst)
        s_fast = None
        if args.fast_path:
            log("fast path: tasks written 2 s before they are due")
            s_fast = system_steady(stack, args.fast_rate, args.fast_seconds, lead_s=2.0, concurrent_writes=True)
        invoker_stats = dict(stack.invoker.stats) if stack.invoker else {}

    steady_p99 = summarize(s_steady["drift"])["p99"]
    burst_p99 = summarize(s_burst["drift"])["p99"]
    floor_burst_p99 = summarize(f_burst)["p99"]
    ratio = burst_p99 / floor_burst_p99 if burst_p99 is not None and floor_burst_p99 else None

    machine = f"{platform.node()} ({os.cpu_count()} cores, Python {platform.python_version()})"
    print(f"\nPunctual drift benchmark - {machine}")
    print("drift = action start - due (ms)\n")
    print(f"{'phase':<16}{'count':>7}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}")
    print(row("floor/steady", f_steady))
    print(row("floor/burst", f_burst))
    print(row("system/steady", s_steady["drift"],
              f"scheduled {s_steady['scheduled']}, fired {s_steady['fired']}, dup {s_steady['duplicates']}"))
    if s_writes is not None:
        print(row("steady+writes", s_writes["drift"],
                  f"scheduled {s_writes['scheduled']}, fired {s_writes['fired']}, dup {s_writes['duplicates']} "
                  "(extra: a client writes 100/s during the run)"))
    print(row("system/burst", s_burst["drift"],
              f"scheduled {s_burst['scheduled']}, fired {s_burst['fired']}, dup {s_burst['duplicates']}"))
    if s_fast is not None:
        print(row("fast path 2s", s_fast["drift"],
                  f"scheduled {s_fast['scheduled']}, fired {s_fast['fired']}, dup {s_fast['duplicates']} "
                  f"(each written 2 s before due, {args.fast_rate:g}/s)"))
    print(f"\nexecutor invocations: {invoker_stats}")
    ok_steady = steady_p99 is not None and steady_p99 <= TARGETS["steady_p99_ms"]
    ok_burst = ratio is not None and ratio <= TARGETS["burst_vs_floor"]
    print(f"target steady p99 <= {TARGETS['steady_p99_ms']} ms: {steady_p99:.3f} ms "
          f"-> {'MET' if ok_steady else 'MISSED'}")
    print(f"target burst p99 <= {TARGETS['burst_vs_floor']}x floor burst p99 ({floor_burst_p99:.3f} ms): "
          f"{burst_p99:.3f} ms = {ratio:.2f}x -> {'MET' if ok_burst else 'MISSED'}")
    ok_fast = None
    if s_fast is not None:
        fast_p99 = summarize(s_fast["drift"])["p99"]
        ok_fast = fast_p99 is not None and fast_p99 <= TARGETS["fast_path_p99_ms"]
        print(f"target fast path (2 s lead) p99 <= {TARGETS['fast_path_p99_ms']} ms late: {fast_p99:.3f} ms "
              f"-> {'MET' if ok_fast else 'MISSED'}")
    phases = [s_steady, s_burst, *([s_fast] if s_fast else []), *([s_writes] if s_writes else [])]
    complete = all(p["fired"] == p["scheduled"] and not p["duplicates"] for p in phases)
    print(f"every task fired exactly once: {'yes' if complete else 'NO'}")
    if args.json:
        print(json.dumps({
            "floor_steady": summarize(f_steady), "floor_burst": summarize(f_burst),
            "system_steady": {**summarize(s_steady["drift"]), **{k: v for k, v in s_steady.items() if k != "drift"}},
            "system_burst": {**summarize(s_burst["drift"]), **{k: v for k, v in s_burst.items() if k != "drift"}},
            "fast_path": None if s_fast is None else {
                **summarize(s_fast["drift"]), **{k: v for k, v in s_fast.items() if k != "drift"}},
            "targets_met": {"steady": ok_steady, "burst": ok_burst, "fast_path": ok_fast}, "complete": complete,
        }))
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
