"""The precision/cost frontier: drift at each executor memory size against what a million tasks cost there.

    .venv/bin/python -m punctual_tools.bench.memory [--sizes 256,512,1024,1769] [--quick] [--out DIR]

For each memory size (Lambda profile: each executor worker in a cgroup with the CPU quota the size buys,
``MB / 1769`` of a core, normal priority), a local stack is started with the executor's ``MemorySize`` at that
size (the rest of its configuration from ``template.yaml``, as a deployment with ``ExecutorMemorySize=<MB>``
would run it) and four phases run, each judged against its floor measured at the same size in the same run
(:mod:`floors`: one floor process per executor, each in a cgroup with the same quota, the same priority):

- ``steady``: ``--steady-rate`` tasks/s for ``--steady-seconds`` s, scheduled ahead (floor: one process in the same
  window, firing half-way between two of the system's instants);
- ``burst 250``: ``--one-burst`` tasks due at one instant in one shard, as many as one batch holds (fewer
  where the poller cuts a burst smaller for the size's quota:
  :attr:`~punctual.config.settings.Settings.max_fires_at_once`), so that one executor fires them (floor: one
  process, as many tasks);
- ``burst 2000``: ``--burst`` tasks due at one instant, across executors (floor: one process per batch, cut
  as the poller cuts them);
- ``webhooks``: ``--webhook-rate`` webhooks/s for ``--webhook-seconds`` s, drift at a loopback receiver
  (floor: one process firing them with the executor's HTTP engine).

Each phase prints p50 / p99 / max, its floor's p99 and the ratio, the CPU the executors used and the time their
cgroups were throttled (``cpu.stat``); each size, the cost per million tasks at that size from the cost model
(:mod:`punctual_tools.cost`, the target's scope: Lambda, DynamoDB and the poller, at ``--volume`` tasks a month).
The run ends with the frontier table, a picture of drift p99 against $ per million (``frontier.png``) and
``memory.json`` in the run's directory. ``--quick`` is a smoke run (small counts, short phases).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from punctual.config.cpu_share import MB_PER_VCPU
from punctual_tools import cost as cost_model
from punctual_tools.bench.bench import (
    Beside,
    executor_cpu,
    floor_webhook,
    log,
    measure_floor_burst,
    one_shard_ids,
    system_burst,
    system_steady,
    wait_quiet,
    wait_until_idle,
    webhook_spread,
)
from punctual_tools.bench.floors import FloorRunner, burst_batch, burst_shares
from punctual_tools.bench.pages import PAGES, fmt_ms, git_commit, store_latency_named, write_readme_block
from punctual_tools.drift import PlotsUnavailableError, Verdict, judge, save_frontier
from punctual_tools.local.lambda_rules import EXECUTOR_FUNCTION, read_function_limits
from punctual_tools.local.receiver import start_receiver
from punctual_tools.local.stack import LocalStack, StackConfig
from punctual_tools.stats import summarize

LAMBDA_LEAST_MB, LAMBDA_MOST_MB = 128, 10_240  # the memory sizes Lambda allows
SIZES = (256, 512, 1024, 1769)
PHASES = ("steady", "burst 250", "burst 2000", "webhooks")
# Each phase's targets at a size: (ratio to its same-quota floor's p99, absolute p99 in ms). Steady must also stay
# within 2 ms; the others have the burst's and the webhooks' absolute figures of the drift benchmark beside them.
TARGETS: dict[str, tuple[float, float]] = {
    "steady": (1.5, 2.0),
    "burst 250": (1.5, 90.0),
    "burst 2000": (1.5, 90.0),
    "webhooks": (1.5, 2.0),
}
VOLUMES = (1e6, 100e6)


# -- cost ----------------------------------------------------------------------------------------------------
def cost_per_million(sizes: tuple[int, ...], volumes: tuple[float, ...] = VOLUMES) -> dict[int, dict[float, float]]:
    """$ per million tasks in the target's scope (Lambda, DynamoDB, the poller) at each size and monthly volume,
    from the cost model's counts (its scenario on moto, handler logs not measured: they are outside that scope)."""
    counted = cost_model.counts(cost_model.run_scenario(measure_logs=False))
    return {
        mb: {
            volume: cost_model.monthly_cost(counted, volume, executor_memory_mb=mb).per_million(True)
            for volume in volumes
        }
        for mb in sizes
    }


# -- one size ------------------------------------------------------------------------------------------------
def phase_figures(
    drift: list[float],
    floor: list[float],
    cpu: dict[str, Any] | None,
    target: tuple[float, float],
    name: str,
    *,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A phase's row: its drift summary, its floor's p99, the verdict on the ratio and in ms, the executors' CPU."""
    s = summarize(drift)
    f = summarize(floor)
    verdict = judge(name, s["p99"], f["p99"], floor_name=f"floor/{name}", abs_target=target[1], ratio_target=target[0])
    return {**s, "floor": f, "ratio": verdict.ratio, "verdict": verdict.as_dict(), "cpu": cpu, **(extra or {})}


def run_size(memory_mb: int, args: argparse.Namespace, hook_url: str, received: Path, work: Path) -> dict[str, Any]:
    """Every floor, then every phase, at ``memory_mb``; returns the size's figures."""
    batch = burst_batch(memory_mb)  # as the poller cuts a burst for executors of this size
    floor_log = work / "floor.jsonl"
    runner = FloorRunner("lambda", memory_mb)
    log(runner.footing.line())
    floors: dict[str, dict[str, Any]] = {}
    results: dict[str, dict[str, Any]] = {}
    try:
        one_batch = min(args.one_burst, batch)  # what one executor is given of a burst in one shard
        log(f"{memory_mb} MB: floor/burst {one_batch}, one floor process")
        floors["burst 250"] = measure_floor_burst(runner, [one_batch], floor_log, prefix="floor-one-")
        time.sleep(args.settle)
        log(f"{memory_mb} MB: floor/burst {args.burst}, one floor process per {batch}")
        floors["burst 2000"] = measure_floor_burst(
            runner, burst_shares(args.burst, batch), floor_log, prefix="floor-many-"
        )
        time.sleep(args.settle)
        log(f"{memory_mb} MB: floor/webhook, {args.webhook_rate:g}/s for {args.webhook_seconds:g} s")
        floors["webhooks"] = floor_webhook(runner, hook_url, args.webhook_rate, args.webhook_seconds, received)

        config = StackConfig(
            home=work / f"stack-{memory_mb}",
            port=0,
            poll_interval_s=args.poll_interval,
            prewarm=args.prewarm,
            fast_path=False,
            api=False,
            executor_memory_mb=memory_mb,
            settings_overrides={"ntp_server": None, "allowed_targets": "127.0.0.1", "profile": "lambda"},
        )
        with LocalStack(config, on_batch=lambda r: None) as stack:
            for line in stack.describe_limits():
                log(line)
            assert stack.invoker is not None
            assert stack.settings is not None
            quota = stack.invoker.cpu_quota.as_dict()
            store_latency_line = f"store latency (the executors' DynamoDB calls): {stack.describe_store_latency()}"
            shard_count = stack.settings.shard_count
            one = one_shard_ids(f"one-{uuid.uuid4().hex[:6]}-", min(args.one_burst, batch), shard_count)
            plan: list[tuple[str, Callable[[], dict[str, Any]]]] = [
                (
                    "steady",  # floor/steady in the same window
                    lambda: system_steady(
                        stack, args.steady_rate, args.steady_seconds, beside=Beside(runner, floor_log, "steady")
                    ),
                ),
                ("burst 250", lambda: system_burst(stack, len(one), one)),
                ("burst 2000", lambda: system_burst(stack, args.burst)),
                (
                    "webhooks",
                    lambda: webhook_spread(stack, hook_url, args.webhook_rate, args.webhook_seconds, received),
                ),
            ]
            log(f"{memory_mb} MB: executors quiet (their cold starts over) after {wait_quiet(stack):.1f} s")
            waits = {}
            for name, run in plan:
                waits[name] = wait_until_idle(stack, args.settle)
                log(f"{memory_mb} MB: {name}")
                results[name] = executor_cpu(stack, run)
                if "floor" in results[name]:
                    floors[name] = results[name].pop("floor")
            invoker = dict(stack.invoker.stats)
    finally:
        runner.close()
    phases = {}
    for name in PHASES:
        r = results[name]
        extra: dict[str, Any] = {k: r[k] for k in ("scheduled", "fired", "duplicates", "batches") if k in r}
        phases[name] = phase_figures(
            r["drift"],
            floors[name]["drift"],
            r.get("cpu"),
            TARGETS[name],
            name,
            extra={
                **extra,
                **waits[name],
                "floor_processes": floors[name]["processes"],
                "floor_policy": floors[name]["policy"],
                "floor_cpu": vars(floors[name]["floor_cpu"]),
            },
        )
    return {
        "memory_mb": memory_mb,
        "cpu_share": round(memory_mb / MB_PER_VCPU, 4),
        "cpu_quota": quota,
        "floor_footing": runner.footing.as_dict(),
        "store_latency_line": store_latency_line,
        "phases": phases,
        "invoker": invoker,
        "complete": all(r.get("fired") == r.get("scheduled") and not r.get("duplicates") for r in results.values()),
    }


# -- report --------------------------------------------------------------------------------------------------
def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def size_lines(size: dict[str, Any], cost: dict[float, float], volume: float) -> list[str]:
    """One size's table: each phase's drift, its floor, the ratio and verdicts, the executors' CPU."""
    mb = size["memory_mb"]
    quota = size["cpu_quota"] or {}
    lines = [
        f"{mb} MB ({size['cpu_share']:.3f} of a core; CPU quota {'yes' if quota.get('applied') else 'NO'}), "
        f"${cost[volume]:.2f} per million at {volume / 1e6:,.0f} M tasks/month"
        + ("" if size["complete"] else "; NOT every task fired exactly once"),
        f"  {'phase':<12}{'count':>6}{'p50':>9}{'p99':>9}{'max':>9}{'floor p99':>11}{'ratio':>8}  verdict "
        "(ratio | ms)   executors: cpu s each (mean/max), throttled s each (mean/max), periods throttled",
    ]
    for name in PHASES:
        p = size["phases"][name]
        v = p["verdict"]
        cpu = p["cpu"] or {}
        batches = f" ({p['batches']} batches)" if p.get("batches") is not None else ""
        executors = (
            f"{cpu.get('executors', 0)}{batches}: "
            f"{fmt_ms(cpu.get('cpu_s_mean'))}/{fmt_ms(cpu.get('cpu_s_max'))}, "
            f"{fmt_ms(cpu.get('throttled_s_mean'))}/{fmt_ms(cpu.get('throttled_s_max'))}, "
            f"{cpu.get('nr_throttled', 0)} of {cpu.get('nr_periods', 0)}"
        )
        lines.append(
            f"  {name:<12}{p['count']:>6}{fmt_ms(p['p50']):>9}{fmt_ms(p['p99']):>9}{fmt_ms(p['max']):>9}"
            f"{fmt_ms(p['floor']['p99']):>11}{_ratio(p['ratio']):>8}  "
            f"{'MET' if v['ratio_met'] else 'MISSED'} | {'MET' if v['abs_met'] else 'MISSED'}   {executors}"
        )
    return lines


def frontier_lines(
    sizes: list[dict[str, Any]], costs: dict[int, dict[float, float]], volume: float, default_mb: int
) -> list[str]:
    """The frontier: per size, $ per million and each phase's p99 with its ratio to the same-quota floor."""
    head = f"{'memory':<16}{'$/M':>8}" + "".join(f"{name + ' p99 (x floor)':>26}" for name in PHASES)
    lines = [head]
    for size in sizes:
        mb = size["memory_mb"]
        label = f"{mb} MB" + (" (default)" if mb == default_mb else "")
        cells = "".join(
            f"{fmt_ms(size['phases'][n]['p99']) + ' ms (' + _ratio(size['phases'][n]['ratio']) + ')':>26}"
            for n in PHASES
        )
        lines.append(f"{label:<16}{costs[mb][volume]:>8.2f}{cells}")
    return lines


def frontier_points(
    sizes: list[dict[str, Any]], costs: dict[int, dict[float, float]], volume: float
) -> dict[str, list[tuple[float, float, str]]]:
    """The picture's lines: each phase's p99 (and steady's floor) against $ per million, a point per size."""
    lines: dict[str, list[tuple[float, float, str]]] = {name: [] for name in (*PHASES, "floor/steady")}
    for size in sizes:
        mb = size["memory_mb"]
        for name in PHASES:
            p99 = size["phases"][name]["p99"]
            if p99 is not None:
                lines[name].append((costs[mb][volume], p99, f"{mb} MB"))
        floor = size["phases"]["steady"]["floor"]["p99"]
        if floor is not None:
            lines["floor/steady"].append((costs[mb][volume], floor, f"{mb} MB"))
    return lines


def verdicts_of(size: dict[str, Any]) -> list[Verdict]:
    """The size's verdicts, as the drift benchmark prints them."""
    return [
        Verdict(**{k: p["verdict"][k] for k in ("name", "value", "floor", "floor_name", "abs_target", "ratio_target")})
        for p in size["phases"].values()
    ]


def choose_size(sizes: list[dict[str, Any]], costs: dict[int, dict[float, float]], volume: float) -> tuple[int, str]:
    """The executor memory size this run's figures point to, and why: the cheapest size at which every ratio
    target is met and every task fired once; if none, the size that meets the most ratio targets, the cheapest
    of those (a size that lost or doubled a task is never chosen while another did not)."""

    def met(size: dict[str, Any]) -> int:
        return sum(v.ratio_met for v in verdicts_of(size))

    complete = [s for s in sizes if s["complete"]] or sizes
    best = max(met(s) for s in complete)
    chosen = min((s for s in complete if met(s) == best), key=lambda s: (costs[s["memory_mb"]][volume], s["memory_mb"]))
    mb, total = chosen["memory_mb"], len(chosen["phases"])
    if best == total:
        why = f"the cheapest size at which every phase meets its ratio target (${costs[mb][volume]:.2f} per million)"
    else:
        why = (
            f"no size meets every ratio target; {mb} MB meets the most ({best} of {total}) at the lowest cost "
            f"(${costs[mb][volume]:.2f} per million)"
        )
    return mb, why


def page_lines(report: dict[str, Any]) -> list[str]:
    """The frontier page (Markdown) of one run's ``memory.json``: where and what ran, the frontier, each size's
    phases with their floors and the executors' CPU, and the size the figures point to."""
    volume = float(report["args"]["volume"])
    costs = {int(mb): {float(v): usd for v, usd in c.items()} for mb, c in report["cost_per_million"].items()}
    sizes = report["sizes"]
    lines = [
        "# Precision against cost: the executor's memory size",
        "",
        "Generated by `make bench-memory` (`python -m punctual_tools.bench.memory`) from `memory.json` beside it "
        "(and the run before, `memory-previous.json`); do not edit by hand.",
        "",
        f"- machine: {report['machine']}; commit: {report.get('commit') or 'unknown'}; profile: "
        f"{report['profile']} (each executor and each floor process in a cgroup with the CPU quota of its memory "
        "size, MB / 1,769 of a core, at normal priority)",
        f"- load average (1 min) before {report['load_avg_before'][0]:.2f}, after {report['load_avg_after'][0]:.2f}",
        f"- {store_latency_named([s['store_latency_line'] for s in sizes if s.get('store_latency_line')])}",
        "- drift = the action's start − due (ms); webhooks: arrival at a loopback receiver − due; each phase's "
        "floor is measured at the same size in the same run, and its ratio is the verdict that counts",
        f"- cost: $ per million tasks ({report['cost_scope']}) at {volume / 1e6:,.0f} M tasks a month, from the "
        "cost model",
        "",
        "## The frontier",
        "",
        "| memory | $ per million | " + " | ".join(f"{name} p99 ms (× floor)" for name in PHASES) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in PHASES) + " |",
    ]
    for size in sizes:
        mb = size["memory_mb"]
        label = f"{mb} MB" + (" (template default)" if mb == report["template_default_mb"] else "")
        cells = []
        for name in PHASES:
            p = size["phases"][name]
            mark = "" if p["verdict"]["ratio_met"] else " **missed**"
            cells.append(f"{fmt_ms(p['p99'])} ({_ratio(p['ratio'])}){mark}")
        lines.append(f"| {label} | {costs[mb][volume]:.2f} | " + " | ".join(cells) + " |")
    choice = report.get("choice") or {}
    if choice:
        lines += ["", f"**This run points to {choice['memory_mb']} MB**: {choice['why']}."]
    if report.get("picture"):
        lines += ["", "![drift p99 against $ per million, a point per memory size](memory-frontier.png)"]
    for size in sizes:
        lines += [
            "",
            f"## {size['memory_mb']} MB ({size['cpu_share']:.3f} of a core)",
            "",
            "| phase | count | p50 | p99 | max | floor p99 | ratio | ratio target | ms target | executors | "
            "CPU s each (mean / max) | throttled s each (mean / max) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | --- | --- |",
        ]
        for name in PHASES:
            p = size["phases"][name]
            v = p["verdict"]
            cpu = p.get("cpu") or {}
            lines.append(
                f"| {name} | {p['count']} | {fmt_ms(p['p50'])} | {fmt_ms(p['p99'])} | {fmt_ms(p['max'])} | "
                f"{fmt_ms(p['floor']['p99'])} | {_ratio(p['ratio'])} | {v['ratio_target']:g}×: "
                f"{'met' if v['ratio_met'] else '**missed**'} | {v['abs_target']:g} ms: "
                f"{'met' if v['abs_met'] else '**missed**'} | {cpu.get('executors', 0)} | "
                f"{fmt_ms(cpu.get('cpu_s_mean'))} / {fmt_ms(cpu.get('cpu_s_max'))} | "
                f"{fmt_ms(cpu.get('throttled_s_mean'))} / {fmt_ms(cpu.get('throttled_s_max'))} |"
            )
        if not size["complete"]:
            lines += ["", "Not every task fired exactly once at this size."]
    return lines


def agreement_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Each size's ratio verdicts in each run, and whether the runs agree on every one."""
    names = [
        f"run {i + 1} ({run.get('commit') or 'unknown'}, load {run['load_avg_before'][0]:.2f})"
        for i, run in enumerate(runs)
    ]
    lines = [
        "## The runs compared",
        "",
        "Ratio verdicts per size and phase (met / missed, the ratio in brackets), one column per run:",
        "",
        "| memory | phase | " + " | ".join(names) + " | agree |",
        "| --- | --- | " + " | ".join("---" for _ in runs) + " | --- |",
    ]
    disagree = 0
    for size in runs[-1]["sizes"]:
        mb = size["memory_mb"]
        for name in PHASES:
            cells: list[str] = []
            verdicts: set[Any] = set()
            for run in runs:
                same = [s for s in run["sizes"] if s["memory_mb"] == mb]
                if not same:
                    cells.append("-")
                    verdicts.add(None)
                    continue
                p = same[0]["phases"][name]
                verdicts.add(p["verdict"]["ratio_met"])
                cells.append(f"{'met' if p['verdict']['ratio_met'] else 'missed'} ({_ratio(p['ratio'])})")
            disagree += len(verdicts) > 1
            lines.append(f"| {mb} MB | {name} | " + " | ".join(cells) + f" | {'yes' if len(verdicts) == 1 else 'NO'} |")
    choices = [(run.get("choice") or {}).get("memory_mb") for run in runs]
    lines += [
        "",
        f"The runs' verdicts {'agree on every size and phase' if not disagree else f'differ on {disagree}'}"
        f"; the sizes they point to: {', '.join(f'{c} MB' for c in choices)}.",
    ]
    return lines


def publish(report: dict[str, Any], page: Path) -> Path:
    """Write ``report`` beside ``page`` (``<page>.json``; the one it replaces becomes ``<page>-previous.json``)
    and the page from both: this run's tables and how its verdicts compare with the previous run's."""
    latest, previous = page.with_suffix(".json"), page.with_name(f"{page.stem}-previous.json")
    page.parent.mkdir(parents=True, exist_ok=True)
    if latest.is_file():
        latest.replace(previous)
    latest.write_text(json.dumps(report, indent=2) + "\n")
    earlier = [json.loads(previous.read_text())] if previous.is_file() else []
    written = write_page(report, page, earlier=earlier)
    if page.resolve().parent == PAGES.resolve():
        write_readme_block()
    return written


def write_page(report: dict[str, Any], page: Path, earlier: list[dict[str, Any]] | None = None) -> Path:
    """Write the frontier page of ``report`` (with, given ``earlier`` runs, how their verdicts compare), and copy
    the run's picture beside it (``memory-frontier.png``)."""
    page.parent.mkdir(parents=True, exist_ok=True)
    picture = report.get("picture")
    if picture and Path(picture).is_file():  # the page names the picture whenever the run drew one
        shutil.copyfile(picture, page.parent / "memory-frontier.png")
    lines = page_lines(report)
    if earlier:
        lines += ["", *agreement_lines([*earlier, report])]
    page.write_text("\n".join(lines) + "\n")
    return page


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"256,512"`` -> (256, 512); each a memory size Lambda allows (128 to 10,240 MB)."""
    sizes = tuple(int(part) for part in text.split(",") if part.strip())
    bad = [mb for mb in sizes if not LAMBDA_LEAST_MB <= mb <= LAMBDA_MOST_MB]
    if not sizes or bad:
        raise argparse.ArgumentTypeError(f"memory sizes are 128 to 10240 MB: {text!r}")
    return sizes


def make_parser() -> argparse.ArgumentParser:
    """The options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=parse_sizes, default=SIZES, help="executor memory sizes, MB (comma-separated)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small counts, short phases")
    parser.add_argument("--steady-rate", type=float, default=50)
    parser.add_argument("--steady-seconds", type=float, default=20)
    parser.add_argument("--one-burst", type=int, default=250, help="tasks due at one instant in one executor")
    parser.add_argument("--burst", type=int, default=2000, help="tasks due at one instant across executors")
    parser.add_argument("--webhook-rate", type=float, default=20)
    parser.add_argument("--webhook-seconds", type=float, default=20)
    parser.add_argument("--poll-interval", type=float, default=10)
    parser.add_argument(
        "--prewarm",
        type=int,
        default=12,
        help="warm executor processes at each size's start (the largest phase, a burst of 2,000, needs 8)",
    )
    parser.add_argument("--settle", type=float, default=3.0, help="seconds of rest before each phase")
    parser.add_argument(
        "--volume",
        type=float,
        default=100e6,
        choices=VOLUMES,
        help="tasks a month the table and the picture price (1e6 or 1e8)",
    )
    parser.add_argument("--out", type=Path, default=None, help="the run's directory; default a new temporary one")
    parser.add_argument(
        "--page",
        type=Path,
        default=None,
        help="also write the frontier page (Markdown, and its picture beside it) here",
    )
    parser.add_argument(
        "--render",
        type=Path,
        nargs="+",
        default=None,
        metavar="MEMORY_JSON",
        help="run nothing: write --page from the memory.json of earlier runs (the last one's tables, "
        "and whether the runs' verdicts agree)",
    )
    return parser


def render_only(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--render``: the page from earlier runs' memory.json, nothing run."""
    if args.page is None:
        parser.error("--render needs --page")
    runs = [json.loads(path.read_text()) for path in args.render]
    print(f"page: {write_page(runs[-1], args.page, earlier=runs[:-1])}")
    return 0


def apply_quick(args: argparse.Namespace) -> None:
    """``--quick``: small counts and short phases, a smoke run."""
    if args.quick:
        args.steady_rate, args.steady_seconds, args.one_burst, args.burst = 20.0, 5.0, 50, 500
        args.webhook_rate, args.webhook_seconds, args.prewarm, args.settle = 10.0, 5.0, 6, 1.0


def run_sizes(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """Each size's phases and floors, a loopback receiver up for their webhooks; each size's seconds beside it."""
    received = work / "received.jsonl"
    receiver, port = start_receiver(received)
    hook_url = f"http://127.0.0.1:{port}/hook"
    sizes: list[dict[str, Any]] = []
    try:
        for mb in args.sizes:
            size_started = time.monotonic()
            sizes.append(run_size(mb, args, hook_url, received, work))
            sizes[-1]["seconds"] = round(time.monotonic() - size_started, 1)
    finally:
        receiver.terminate()
    return sizes


def print_frontier(
    sizes: list[dict[str, Any]],
    costs: dict[int, dict[float, float]],
    args: argparse.Namespace,
    default_mb: int,
    machine: str,
    *,
    loads: tuple[Any, Any],
    seconds: float,
) -> tuple[int, str]:
    """The footing, each size's table, the frontier and each size's verdicts; returns this run's choice of size."""
    load_before, load_after = loads
    print(f"\nPunctual precision/cost frontier - {machine}")
    print(
        "profile lambda: each executor and each floor process in a cgroup with the CPU quota of its memory size "
        "(MB / 1769 of a core), normal priority; drift = action start - due (ms; webhooks: arrival at the "
        "receiver - due); each phase's floor measured at the same size in the same run"
    )
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min); {seconds:.0f} s in all")
    for size in sizes:
        print()
        print("\n".join(size_lines(size, costs[size["memory_mb"]], args.volume)))
    print(
        f"\nfrontier ($ per million tasks: Lambda + DynamoDB + poller at {args.volume / 1e6:,.0f} M tasks/month; "
        "p99 and its ratio to the same-quota floor):"
    )
    print("\n".join(frontier_lines(sizes, costs, args.volume, default_mb)))
    for size in sizes:
        judged = verdicts_of(size)
        missed = [v.name for v in judged if not v.met]
        print(
            f"{size['memory_mb']} MB: ratio targets {'all MET' if not missed else 'MISSED: ' + ', '.join(missed)}; "
            f"absolute targets {sum(v.abs_met for v in judged)} of {len(judged)} met"
        )
    chosen_mb, why = choose_size(sizes, costs, args.volume)
    print(f"this run's choice for ExecutorMemorySize: {chosen_mb} MB: {why} (the template's default: {default_mb} MB)")
    return chosen_mb, why


def draw_frontier(
    sizes: list[dict[str, Any]], costs: dict[int, dict[float, float]], volume: float, work: Path
) -> str | None:
    """The frontier's picture in the run's directory, None (and said why) without the plots extra."""
    try:
        picture = str(
            save_frontier(
                frontier_points(sizes, costs, volume),
                work / "frontier.png",
                title=f"drift p99 against $ per million tasks ({volume / 1e6:,.0f} M a "
                "month), Lambda profile, a point per executor memory size",
            )
        )
        print(f"picture: {picture}")
        return picture
    except PlotsUnavailableError as exc:
        log(f"no picture: {exc}")
        return None


def write_report(report: dict[str, Any], work: Path, args: argparse.Namespace) -> None:
    """memory.json in the run's directory, and with ``--page`` (not on a smoke run) the page."""
    path = work / "memory.json"
    path.write_text(json.dumps(report, indent=2))
    print(f"figures: {path}")
    if args.page is not None and args.quick:
        print(f"a smoke run (--quick): {args.page} left as it is")
    elif args.page is not None:
        print(f"page: {publish(report, args.page)}")


def main() -> int:
    parser = make_parser()
    args = parser.parse_args()
    if args.render is not None:
        return render_only(parser, args)
    apply_quick(args)

    work = args.out or Path(tempfile.mkdtemp(prefix="punctual-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    default_mb = read_function_limits(EXECUTOR_FUNCTION).memory_mb
    load_before = os.getloadavg()
    log(f"run directory {work}; sizes {', '.join(map(str, args.sizes))} MB; template default {default_mb} MB")
    log("cost model: counting a scenario on moto")
    costs = cost_per_million(args.sizes)
    started = time.monotonic()
    sizes = run_sizes(args, work)
    load_after = os.getloadavg()

    machine = f"{platform.node()} ({os.cpu_count()} cores, Python {platform.python_version()})"
    commit = git_commit()
    seconds = time.monotonic() - started
    chosen_mb, why = print_frontier(
        sizes, costs, args, default_mb, machine, loads=(load_before, load_after), seconds=seconds
    )
    picture = draw_frontier(sizes, costs, args.volume, work)
    report = {
        "machine": machine,
        "commit": commit,
        "run_dir": str(work),
        "profile": "lambda",
        "load_avg_before": load_before,
        "load_avg_after": load_after,
        "template_default_mb": default_mb,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "cost_scope": "Lambda + DynamoDB + poller (the cost model's target scope)",
        "cost_per_million": {str(mb): {f"{v:g}": round(usd, 4) for v, usd in c.items()} for mb, c in costs.items()},
        "sizes": sizes,
        "picture": picture,
        "choice": {"memory_mb": chosen_mb, "why": why},
    }
    write_report(report, work, args)
    return 0 if all(size["complete"] for size in sizes) else 1


if __name__ == "__main__":
    sys.exit(main())
