"""Drift benchmark phases off the steady path: a short lead, a cold executor, a restart after a crash.

    .venv/bin/python -m punctual_tools.bench.leads [--phases short,cold,restart] [--seconds 30] [--profile lambda]
        [--json]

``make bench`` runs them after its other phases (``punctual_tools.bench.bench``; ``--no-leads``, ``--no-cold`` and
``--no-restart`` skip each) and publishes them on its page; run alone, this module measures the floors they
need and prints the same figures.

1. **short lead**: webhooks to a loopback receiver in its own process, each written 2-4 s (uniformly) before it is
   due, ``--lead-rate`` a second for ``--lead-seconds``, through the stream's fast path, while a background of
   log-action tasks scheduled ahead keeps other executors asleep on their batches. Drift at the receiver, p99
   judged against ``floor/lead-webhook`` (the floor firing the same webhooks at the same rate) and 50 ms; the
   checker counts lost, extra and MISSED tasks (none allowed).
2. **cold**: the same load on a stack started for the phase that keeps no environment warm (prewarm 0, and
   each environment ends with its invocation, as when Lambda has reclaimed the idle ones): every invocation is
   a cold start, a fresh interpreter's INIT; the cold starts the invoker counted are printed beside the same
   verdicts.
3. **restart**: ``punctual up`` in a process of its own; a spread of webhooks (``--restart-rate`` a second for
   ``--restart-seconds``, a quarter of it due before the kill), a burst of ``--restart-burst`` due 8 s after the
   kill, and short-lead webhooks written before the kill and after the restart. The whole process tree is
   SIGKILLed (DynamoDB Local's data stays on disk), and ``punctual up`` started again 1 s later on the same home.
   Figures: the seconds until it is up; the backlog due by then and how fast it drains (tasks/s from up to the
   backlog's last arrival, target >= 200/s); the p99 drift of every task due 10 s or more after up (target
   50 ms, and its ratio to ``floor/webhook`` at the same rate); and the checker's verdict with the dead
   executors' crash windows: each task fired once, or MISSED inside a window; none lost.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from punctual.domain.keys import from_ms
from punctual.runtime.client import Client
from punctual.targets import HttpAction
from punctual_tools.bench import pages
from punctual_tools.bench.floors import ACTION, FloorRunner
from punctual_tools.bench.phase_parts import (
    after_a_poll,
    checker_figures,
    drift_of,
    executor_cpu,
    floor_webhook,
    lead_seconds,
    log,
    received_fires,
    row,
    store_latency,
    stored,
    wait_for_arrivals,
    write_paced,
)
from punctual_tools.bench.restart import restart_phase
from punctual_tools.checker import check, expected_from_tasks
from punctual_tools.drift import judge
from punctual_tools.local.cpu_quota import init_wait_figures
from punctual_tools.local.lambda_rules import EXECUTOR_FUNCTION, read_function_limits
from punctual_tools.local.receiver import start_receiver
from punctual_tools.local.stack import LocalStack, StackConfig
from punctual_tools.stats import summarize

LEAD_FLOOR = "floor/lead-webhook"
RESTART_FLOOR = "floor/webhook"
# Each phase's p99 target: (its floor, ratio target, absolute target in ms), as bench.py's TARGETS.
LEAD_TARGETS: dict[str, tuple[str, float, float]] = {
    "short lead": (LEAD_FLOOR, 1.5, 50.0),
    "cold": (LEAD_FLOOR, 1.5, 50.0),
    "restart": (RESTART_FLOOR, 1.5, 50.0),
}
DRAIN_TARGET_PER_S = 200.0


# -- judgements --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bound:
    """A figure against a bound: at most ``target`` (a count, ms), or at least it (``at_least``: a rate).
    A missing ``value`` meets it only if ``none_meets`` (a backlog drained before the stack was up)."""

    name: str
    value: float | None
    target: float
    unit: str = ""
    at_least: bool = False
    none_meets: bool = False

    @property
    def met(self) -> bool:
        if self.value is None:
            return self.none_meets
        return self.value >= self.target if self.at_least else self.value <= self.target

    def line(self) -> str:
        """``restart drain 312/s | target >= 200/s: MET`` or ``... MISSED by 88/s``."""
        value = "-" if self.value is None else f"{self.value:g}{self.unit}"
        if self.met:
            verdict = "MET"
        elif self.value is None:
            verdict = "MISSED (no figure)"
        else:
            verdict = f"MISSED by {abs(self.value - self.target):g}{self.unit}"
        return f"{self.name} {value} | target {'>=' if self.at_least else '<='} {self.target:g}{self.unit}: {verdict}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "met": self.met}


def checker_bounds(name: str, figures: Mapping[str, int], windows: bool = False) -> list[Bound]:
    """The checker's counts as bounds: none lost, no unexplained extra fire, none MISSED (with crash windows:
    none MISSED outside them)."""
    return [
        Bound(f"{name} lost", figures["lost"], 0),
        Bound(f"{name} unexplained extra fires", figures["unexplained_extra"], 0),
        Bound(
            f"{name} MISSED{' outside the crash windows' if windows else ''}",
            figures["missed_outside_windows" if windows else "missed"],
            0,
        ),
    ]


def lead_bounds(leads: Mapping[str, Mapping[str, Any]]) -> list[Bound]:
    """Every phase's checker bounds, and the restart's drain rate."""
    bounds = [
        b for name in ("short lead", "cold") if name in leads for b in checker_bounds(name, leads[name]["checker"])
    ]
    if "restart" in leads:
        r = leads["restart"]
        bounds += checker_bounds("restart", r["checker"], windows=True)
        drained = r["backlog"] == r["drained"]
        bounds.append(
            Bound("restart drain", r["drain_rate_per_s"], DRAIN_TARGET_PER_S, "/s", at_least=True, none_meets=drained)
        )
    return bounds


# -- what the phases share -----------------------------------------------------------------------------------


# -- short lead, cold ----------------------------------------------------------------------------------------
def short_lead(
    stack: LocalStack, url: str, received: Path, rate: float, seconds: float, *, background_rate: float
) -> dict[str, Any]:
    """Webhooks each written 2-4 s before due, ``rate`` a second for ``seconds``, over a background of
    log-action tasks at ``background_rate`` scheduled ahead (found by a poll, their executors asleep)."""
    assert stack.settings is not None
    assert stack.invoker is not None
    client = Client(stack.settings)
    tag = uuid.uuid4().hex[:6]
    prefix, background = f"lead-{tag}-", f"leadbg-{tag}-"
    total = int(rate * seconds)
    task_ids = [f"{prefix}{i:06d}" for i in range(total)]
    after_a_poll(stack)
    quiet = int(background_rate * (seconds + 6))
    # past the fast path's reach, with time to write them on a busy machine (a fresh store writes slowly)
    start_ms = int(time.time() * 1000) + stack.settings.poll_interval_ms + 12_000 + 50 * quiet
    results = client.schedule_many(
        {
            "due_at": from_ms(start_ms + int(i * 1000 / background_rate)),
            "action": ACTION,
            "task_id": f"{background}{i:06d}",
        }
        for i in range(quiet)
    )
    log(
        f"short lead: {quiet - sum(not r.ok for r in results)} background tasks due from "
        f"{(start_ms - time.time() * 1000) / 1000:.0f} s ahead; then {total} webhooks at {rate:g}/s, each written "
        "2-4 s before due"
    )
    stats_before, waits_before = stack.invoker.stats, len(stack.invoker.init_waits_ms)
    begin_s = max(start_ms / 1000 - 2.0, time.time() + 0.5)  # the short leads begin as the background falls due
    written = write_paced(client, task_ids, rate, lead_seconds(total, 2.0, 4.0), begin_s, action=HttpAction(url=url))
    fires = wait_for_arrivals(
        received, prefix, total, max(written["dues"], default=0) + 20_000, max(written["dues"], default=0)
    )
    deadline = time.time() + 60  # each task's outcome recorded (an active one would count as lost)
    while time.time() < deadline and any(t.status.is_active for t in stored(client, task_ids)):
        time.sleep(1.0)
    verdict = check(expected_from_tasks(stored(client, task_ids)), received_fires(received, prefix))
    stats_after, waits = stack.invoker.stats, stack.invoker.init_waits_ms[waits_before:]
    drifts, fired, dup = drift_of(fires)
    return {
        "scheduled": total - len(written["errors"]),
        "fired": fired,
        "duplicates": dup,
        "drift": drifts,
        "fires": fires,
        "write_rate_per_s": written["write_rate_per_s"],
        "max_write_lag_s": written["max_write_lag_s"],
        "background": quiet,
        "cold_starts": stats_after["cold_starts"] - stats_before["cold_starts"],
        "invoked": stats_after.get("invoked", 0) - stats_before.get("invoked", 0),
        **init_wait_figures(waits),
        "checker": checker_figures(verdict),
        "store_latency": store_latency(stack.settings),
    }


def cold_phase(
    config: StackConfig, url: str, received: Path, rate: float, seconds: float, *, background: float
) -> dict[str, Any]:
    """The short-lead load on a stack started for it with no warm executor (``config`` with prewarm 0)."""
    log(f"cold: a stack with no warm executor in {config.home}")
    with LocalStack(config, on_poll=lambda r: None, on_batch=lambda r: None) as stack:
        assert stack.invoker is not None
        result = executor_cpu(
            stack, lambda: short_lead(stack, url, received, rate, seconds, background_rate=background)
        )
        result["invoker"] = dict(stack.invoker.stats)
    return result


# -- what make bench and a run of this module share ------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The phases' options (``bench.py`` adds its ``--no-*`` switches; this module its ``--phases``)."""
    parser.add_argument("--lead-rate", type=float, default=5, help="short-lead webhooks a second")
    parser.add_argument("--lead-seconds", type=float, default=30, help="seconds of short-lead writes")
    parser.add_argument("--lead-background-rate", type=float, default=20, help="background tasks a second")
    parser.add_argument("--restart-rate", type=float, default=20, help="the restart's spread webhooks a second")
    parser.add_argument("--restart-seconds", type=float, default=60, help="seconds the restart's spread is due over")
    parser.add_argument("--restart-burst", type=int, default=500, help="webhooks due 8 s after the kill")


def measure_floors(
    runner: FloorRunner, url: str, received: Path, args: argparse.Namespace, restart: bool, *, have: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """``floor/lead-webhook`` at the short leads' rate, and ``floor/webhook`` at the restart's unless ``have``
    holds it at that rate already."""
    log(f"{LEAD_FLOOR}: {args.lead_rate:g}/s for {args.lead_seconds:g} s to the receiver, no database")
    floors = {LEAD_FLOOR: floor_webhook(runner, url, args.lead_rate, args.lead_seconds, received)}
    if restart and RESTART_FLOOR not in have:
        log(f"{RESTART_FLOOR}: {args.restart_rate:g}/s for {args.lead_seconds:g} s to the receiver, no database")
        floors[RESTART_FLOOR] = floor_webhook(runner, url, args.restart_rate, args.lead_seconds, received)
    return floors


def cold_config(home: Path, poll_interval_s: float, profile: str) -> StackConfig:
    return StackConfig(
        home=home,
        port=0,
        poll_interval_s=poll_interval_s,
        prewarm=0,
        keep_warm=False,
        settings_overrides={"ntp_server": None, "allowed_targets": "127.0.0.1", "profile": profile},
    )


def run_without_stack(
    work: Path, url: str, received: Path, args: argparse.Namespace, cold: bool, *, restart: bool
) -> dict[str, dict[str, Any]]:
    """The phases that start stacks of their own (cold, restart): run once the benchmark's stack is stopped."""
    results: dict[str, dict[str, Any]] = {}
    if cold:
        config = cold_config(work / "cold-stack", args.poll_interval, args.profile)
        rate, seconds, background = args.lead_rate, args.lead_seconds, args.lead_background_rate
        results["cold"] = cold_phase(config, url, received, rate, seconds, background=background)
    if restart:
        results["restart"] = restart_phase(
            work / "restart-stack",
            url,
            received,
            rate=args.restart_rate,
            seconds=args.restart_seconds,
            burst=args.restart_burst,
            lead_rate=args.lead_rate,
            poll_interval_s=args.poll_interval,
            profile=args.profile,
        )
    return results


def phase_notes(name: str, r: Mapping[str, Any]) -> str:
    """What the table prints beside a phase's drifts."""
    c = r["checker"]
    counts = f"lost {c['lost']}, extra {c['extra']}, MISSED {c['missed']}"
    if name == "restart":
        rate = "-" if r["drain_rate_per_s"] is None else f"{r['drain_rate_per_s']:g}/s"
        return (
            f"(due >= 10 s after up) up {r['up_s']:g} s after the restart ({r['up_after_kill_s']:g} s after the kill); "
            f"backlog {r['backlog']}, {r['drained']} drained in {r['drain_s']} s = {rate}"
            f"{pages.ceiling_note(r)}; {c['crash_windows']} crash "
            f"windows, {c['due_in_windows']} due in them, MISSED {c['missed_in_windows']} in / "
            f"{c['missed_outside_windows']} outside; {counts}"
        )
    return (
        f"(arrival) scheduled {r['scheduled']}, fired {r['fired']}, dup {r['duplicates']}; {counts}; cold starts "
        f"{r['cold_starts']} of {r['invoked']} invocations{init_wait_note(r)}; writes lag up to "
        f"{r['max_write_lag_s']:g} s"
    )


def init_wait_note(r: Mapping[str, Any]) -> str:
    """What a phase's cold starts lacked here: INITs that waited for a core (each has a CPU of its own in Lambda)."""
    if not r.get("init_waits"):
        return ""
    return (
        f", {r['init_waits']} of whose INITs waited for a core here, up to {r['init_wait_ms_max']:,} ms "
        "(measured with less CPU than AWS gives: in Lambda each INIT has a CPU of its own)"
    )


def print_leads(results: Mapping[str, Mapping[str, Any]], bounds: Sequence[Bound]) -> None:
    """Each phase's row and its bounds (its p99 verdicts are printed with the other targets)."""
    for name, r in results.items():
        print(row(name, r["drift"], phase_notes(name, r)))
    latency = next((r["store_latency"] for r in results.values() if r.get("store_latency") is not None), None)
    print(f"store latency model: {latency if latency is not None else 'none (DynamoDB Local as it answers here)'}")
    for bound in bounds:
        print("  " + bound.line())


def lead_report(results: Mapping[str, Mapping[str, Any]], bounds: Sequence[Bound]) -> dict[str, Any]:
    """The phases' figures for the JSON object and the page (drifts summarized)."""
    hidden = ("drift", "fires", "cpu")
    return {
        "phases": {
            name: {**summarize(r["drift"]), **{k: v for k, v in r.items() if k not in hidden}}
            for name, r in results.items()
        },
        "bounds": [b.as_dict() for b in bounds],
    }


def parse_args() -> argparse.Namespace:
    """The options given; ``--seconds`` stands for ``--lead-seconds``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", default="short,cold,restart", help="which to run (comma-separated)")
    parser.add_argument("--seconds", type=float, default=None, help="the short leads' seconds (--lead-seconds)")
    parser.add_argument("--profile", choices=("lambda", "local"), default="lambda")
    parser.add_argument("--poll-interval", type=float, default=10)
    parser.add_argument("--prewarm", type=int, default=40, help="warm executors of the short-lead stack")
    parser.add_argument("--out", type=Path, default=None, help="the run's directory (default a new temporary one)")
    parser.add_argument("--json", action="store_true", help="also print every figure as one JSON object (last line)")
    add_arguments(parser)
    args = parser.parse_args()
    args.lead_seconds = args.seconds or args.lead_seconds
    return args


def run_phases(
    args: argparse.Namespace, phases: set[str], work: Path
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The floors, then each phase asked for (the short lead on a stack of its own); returns both."""
    runner = FloorRunner(args.profile, read_function_limits(EXECUTOR_FUNCTION).memory_mb)
    log(f"run directory {work}; {runner.footing.line()}")
    received = work / "received.jsonl"
    receiver, port = start_receiver(received)
    url = f"http://127.0.0.1:{port}/hook"
    results: dict[str, dict[str, Any]] = {}
    try:
        floors = measure_floors(runner, url, received, args, "restart" in phases, have={})
        if "short" in phases:
            config = cold_config(work / "stack", args.poll_interval, args.profile)
            config.prewarm, config.keep_warm = args.prewarm, True
            with LocalStack(config, on_poll=lambda r: None, on_batch=lambda r: None) as stack:
                rate, seconds, background = args.lead_rate, args.lead_seconds, args.lead_background_rate
                results["short lead"] = executor_cpu(
                    stack, lambda: short_lead(stack, url, received, rate, seconds, background_rate=background)
                )
        results |= run_without_stack(work, url, received, args, "cold" in phases, restart="restart" in phases)
    finally:
        receiver.terminate()
        runner.close()
    return floors, results


def print_verdicts(
    floors: Mapping[str, Mapping[str, Any]], results: Mapping[str, Mapping[str, Any]], bounds: Sequence[Bound]
) -> list[Any]:
    """The floors' rows, the phases' figures and bounds, and each phase's verdict against its floor."""
    p99 = {name: summarize(f["drift"])["p99"] for name, f in floors.items()}
    for name, f in floors.items():
        print(row(name, f["drift"], "(floor: arrival at the receiver)"))
    print_leads(results, bounds)
    verdicts = [
        judge(name, summarize(r["drift"])["p99"], p99.get(floor), floor_name=floor, abs_target=ms, ratio_target=ratio)
        for name, r in results.items()
        for floor, ratio, ms in [LEAD_TARGETS[name]]
    ]
    for verdict in verdicts:
        print("  " + verdict.line())
    return verdicts


def main() -> int:
    args = parse_args()
    phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    work = args.out or Path(tempfile.mkdtemp(prefix="punctual-leads-"))
    work.mkdir(parents=True, exist_ok=True)
    floors, results = run_phases(args, phases, work)
    bounds = lead_bounds(results)
    verdicts = print_verdicts(floors, results, bounds)
    if args.json:
        report = lead_report(results, bounds) | {"verdicts": [v.as_dict() for v in verdicts], "profile": args.profile}
        print(json.dumps(report, default=str))
    return 0 if all(b.met for b in bounds) else 1


if __name__ == "__main__":
    sys.exit(main())
