"""``python -m punctual_tools.sim``: run the scenarios and the calibration, write the JSON and the page.

``make simulate`` runs it: a million tasks due a minute for ten minutes and a million due at one instant, with the
template's defaults and with the overrides ``punctual plan`` sets for that rate (or those given), then the
calibration against the local benchmarks; it writes docs/benchmarks/simulation.json and docs/simulation.md from it
(``--render`` rewrites the page alone).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from punctual_tools.cost.pricing import MONTH_S
from punctual_tools.plan.model import item_write_units, make_plan
from punctual_tools.plan.pages import CHEAPEST_WITHOUT_COMMITMENT
from punctual_tools.sim.calibrate import calibrate
from punctual_tools.sim.model import Scenario, simulate
from punctual_tools.sim.page import render
from punctual_tools.sim.params import (
    SOURCES,
    Deployment,
    Platform,
    aws_platform,
    load_measured,
    template_deployment,
)

ROOT = Path(__file__).resolve().parents[4]
MILLION_A_MINUTE = 1e6 / 60


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m punctual_tools.sim", description=__doc__)
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "simulation.json"))
    p.add_argument("--page", default=str(ROOT / "docs" / "simulation.md"))
    p.add_argument("--render", action="store_true", help="rewrite the page from --out without running")
    p.add_argument("--rate", type=float, default=MILLION_A_MINUTE, help="tasks due a second (sustained)")
    p.add_argument("--minutes", type=float, default=10.0, help="how long the sustained rate lasts")
    p.add_argument("--burst", type=int, default=1_000_000, help="tasks due at one instant")
    planned = p.add_argument_group("the planned overrides (default: what punctual plan --rate R sets)")
    planned.add_argument("--shards", type=int, default=None)
    planned.add_argument("--poll-groups", type=int, default=None)
    planned.add_argument("--poller-memory", type=int, default=None)
    planned.add_argument("--executor-memory", type=int, default=None)
    planned.add_argument("--reserved", type=int, default=None, help="the executor's reserved concurrency")
    planned.add_argument("--provisioned", type=int, default=None)
    planned.add_argument("--account-concurrency", type=int, default=None)
    planned.add_argument("--table-wcu", type=float, default=None, help="the table's warm write throughput")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    measured = load_measured()
    defaults = template_deployment()
    plan = make_plan(args.rate, executor_mb=args.executor_memory)
    cold_start_too_slow = any(q["quota"].startswith("Lambda scaling rate") for q in plan.quotas())

    def given(value: Any, planned: Any) -> Any:
        return planned if value is None else value

    planned = defaults.overridden(
        "planned overrides",
        shard_count=given(args.shards, plan.shards),
        poll_groups=given(args.poll_groups, plan.poll_groups),
        poller_memory_mb=given(args.poller_memory, plan.poller_mb),
        executor_memory_mb=plan.executor_mb,
        executor_reserved=given(args.reserved, plan.executor_concurrency),
        provisioned=given(args.provisioned, plan.executors if cold_start_too_slow else 0),
        table_warm_wcu=given(args.table_wcu, max(plan.capacity.table_writes, plan.capacity.index_writes)),
    )
    account_concurrency = given(args.account_concurrency, plan.account_concurrency)
    scenarios = [
        Scenario(
            f"{args.rate * 60:,.0f} due a minute for {args.minutes:g} min", rate=args.rate, seconds=args.minutes * 60
        ),
        Scenario(f"{args.burst:,} due at one instant", burst=args.burst),
    ]
    runs = []
    for deployment, platform in (
        (defaults, aws_platform(measured)),
        (planned, aws_platform(measured, account_concurrency=account_concurrency)),
    ):
        runs += [one_run(platform, deployment, scenario, args.seed) for scenario in scenarios]
    runs += levers_runs(args, measured, defaults)
    return {
        "kind": "simulation",
        "measured": {k: v for k, v in vars(measured).items()},
        "sources": {k: {"what": what, "url": url} for k, (what, url) in SOURCES.items()},
        "runs": runs,
        "calibration": calibrate(measured=measured),
    }


LEVERS_GROUP = "levers"  # the runs' group on the page
LEVERS_VOLUME = 100e6  # tasks a month: the cost page's target volume
LEVERS_PAYLOAD_KB = 1.0
STEPS = (2.0, 3.0)  # rises auto scaling has not followed yet: times the rate the capacity was provisioned for
CREATES_AHEAD_S = 60.0  # the provisioned runs make their tasks during the run, a minute before they are due
BURST_CAPACITY_S = 300.0  # DynamoDB keeps up to 300 s of a provisioned table's unused capacity


def levers_runs(args: argparse.Namespace, measured: Any, defaults: Deployment) -> list[dict[str, Any]]:
    """The cost page's levers at its target volume (1 KB tasks at 100 M a month): the short poll cycle and large
    batches on demand, the same with provisioned capacity at auto scaling's target, and that capacity meeting
    twice the rate before auto scaling follows (it acts in minutes; the run lasts ten)."""
    rate = LEVERS_VOLUME / MONTH_S
    levers = CHEAPEST_WITHOUT_COMMITMENT
    plan = make_plan(rate, LEVERS_PAYLOAD_KB, levers=levers)
    cycle = defaults.overridden(
        "levers, on demand",
        poll_interval_s=plan.defaults.interval_s,
        lead_s=plan.defaults.lead_s,
        max_batch_size=plan.defaults.batch_size,
        poller_memory_mb=plan.poller_mb,
        item_wcu=item_write_units(LEVERS_PAYLOAD_KB * 1024),
    )
    u = levers.utilization
    provisioned = cycle.overridden(
        f"levers, provisioned at {u:.0%}",
        capacity="provisioned",
        utilization=u,
        table_warm_wcu=plan.capacity.table_writes / u,
        index_wcu=plan.capacity.due_index_writes / u,
        table_bank_s=BURST_CAPACITY_S,
        creates_ahead_s=CREATES_AHEAD_S,
    )
    steady = Scenario(
        f"{LEVERS_VOLUME / 1e6:g} M a month ({rate:.1f}/s) for {args.minutes:g} min", rate, args.minutes * 60
    )
    steps = [
        Scenario(f"{k:g}× that rate for {args.minutes:g} min, auto scaling not following", rate * k, args.minutes * 60)
        for k in STEPS
    ]
    runs = ((cycle, steady), (provisioned, steady), *((provisioned, s) for s in steps))
    return [one_run(aws_platform(measured), d, scenario, args.seed, LEVERS_GROUP) for d, scenario in runs]


def one_run(
    platform: Platform, deployment: Deployment, scenario: Scenario, seed: int, group: str | None = None
) -> dict[str, Any]:
    """One simulated run's figures, with the account's concurrency, the deployment's settings, how long the run
    took and its group on the page (none: the million-a-minute runs); a line of them printed."""
    started = time.monotonic()
    figures = simulate(platform, deployment, scenario, seed=seed)
    figures["account_concurrency"] = platform.account_concurrency
    figures["settings"] = {k: v for k, v in vars(deployment).items() if k != "label"}
    figures["seconds"] = round(time.monotonic() - started, 1)
    if group is not None:
        figures["group"] = group
    print(json.dumps({k: figures[k] for k in ("deployment", "scenario", "drift_ms", "dynamodb", "usd_per_million")}))
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out, page = Path(args.out), Path(args.page)
    if args.render:
        data = json.loads(out.read_text())
    else:
        data = run(args)
        out.write_text(json.dumps(data, indent=1) + "\n")
    page.write_text(render(data))
    print(f"wrote {page}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
