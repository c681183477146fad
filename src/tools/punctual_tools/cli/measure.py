"""Measuring and planning: ``drift`` pictures, ``verify`` a stack, ``plan`` a rate's parameters and bill."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from punctual.errors import PunctualError
from punctual_tools.cli.common import home, number, settings_of


def cmd_drift(args: argparse.Namespace) -> int:
    """Drift pictures (histogram, timeline, CDF) from a fire log, or from the table's fired tasks."""
    from punctual_tools.drift import entries_from_tasks, read_fire_log, save_pictures, series_of

    if args.table:
        from punctual.domain.model import Outcome, status_after
        from punctual.stores.dynamodb import build_stores

        statuses = [status_after(o) for o in (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.RETRY)]  # what a fire leaves
        tasks = build_stores(settings_of(args)).client.list_tasks(statuses)
        entries = entries_from_tasks(t for t in tasks if t.task_id.startswith(args.prefix))
        source = f"table {settings_of(args).table_name}"
    else:
        from punctual_tools.local.stack import read_state

        state = read_state(home(args)) or {}
        path = Path(args.fire_log or state.get("fire_log") or home(args) / "fires.jsonl")
        if not path.is_file():
            raise PunctualError(f"no fire log at {path}: give --fire-log PATH, or --table")
        entries = read_fire_log(path, args.prefix)
        source = str(path)
    series = series_of(args.name or (args.prefix.rstrip("-") or "drift"), entries)
    if not series.fires:
        which = f" for tasks starting with {args.prefix!r}" if args.prefix else ""
        raise PunctualError(f"no fires in {source}{which}")
    out = Path(args.out) if args.out else home(args) / "drift"
    for path in save_pictures(series, out):
        print(path)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Schedule a mix to an SQS queue of its own, read it back, judge it, clean up (:mod:`punctual_tools.verify`)."""
    from punctual_tools.verify.command import run_command

    return run_command(args, home(args))


def cmd_plan(args: argparse.Namespace) -> int:
    """Print the parameters, quotas, table capacity and monthly bill a sustained rate needs."""
    from punctual_tools.plan import make_plan
    from punctual_tools.plan.model import Levers
    from punctual_tools.plan.text import plan_lines

    levers = Levers(
        polls_per_minute=args.polls_per_minute,
        lead_s=None if args.lead_ms is None else args.lead_ms / 1000,
        capacity=args.capacity,
        utilization=args.utilization / 100,
        reserved=args.reserved,
        arch=args.arch,
        api_tasks_per_call=args.api_batch if args.api else 1,
        batch_size=args.batch_size,
    )
    try:
        plan = make_plan(args.rate, args.payload_kb, args.memory, "api" if args.api else "client", levers=levers)
    except ValueError as exc:
        print(f"punctual plan: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(plan.as_dict(), indent=2) if args.json else "\n".join(plan_lines(plan)))
    return 0


def add_commands(sub: Any) -> None:
    """Add ``drift``, ``verify`` and ``plan`` to the subcommands ``sub``."""
    drift = sub.add_parser("drift", help="drift pictures (histogram, timeline, CDF as PNG) from a fire log or table")
    source = drift.add_mutually_exclusive_group()
    source.add_argument(
        "--fire-log",
        metavar="PATH",
        help="JSON lines with task_id, due_ms, fired_ms (default: the running stack's, else <home>/fires.jsonl)",
    )
    source.add_argument("--table", action="store_true", help="the fired tasks in the table (drift_ms) instead")
    drift.add_argument("--prefix", default="", help="only tasks whose id starts with this")
    drift.add_argument("--out", metavar="DIR", help="where the PNGs go (default <home>/drift)")
    drift.add_argument("--name", help="the pictures' title and file-name stem (default: the prefix, or 'drift')")
    drift.add_argument("--aws", action="store_true", help="with --table: AWS (PUNCTUAL_* settings)")
    drift.set_defaults(func=cmd_drift)
    verify = sub.add_parser(
        "verify", help="schedule a mix to an SQS queue of its own, read it back: drift, verdict, cost; clean up"
    )
    from punctual_tools.verify.options import add_arguments as verify_arguments

    verify_arguments(verify)
    verify.set_defaults(func=cmd_verify)
    plan = sub.add_parser(
        "plan",
        help="the parameter overrides, account quotas, table capacity and monthly bill for a rate of tasks "
        "(docs/scale.md)",
    )
    plan.add_argument(
        "--rate", required=True, type=number(0, 1e9, above=True), metavar="R", help="tasks due a second, sustained"
    )
    plan.add_argument(
        "--payload-kb", type=number(0, 400), default=0.2, metavar="K", help="a task's payload in KB (default 0.2)"
    )
    plan.add_argument(
        "--memory",
        type=number(128, 10_240, int),
        default=None,
        metavar="MB",
        help="the executor's memory, 128 to 10240 (default the template's ExecutorMemorySize)",
    )
    plan.add_argument("--api", action="store_true", help="tasks made through the REST API (its tenant indexes)")
    plan.add_argument(
        "--api-batch",
        type=number(1, 100, int),
        default=1,
        metavar="N",
        help="with --api: tasks a call carries (up to 100 through POST /v1/tasks:batch; default 1)",
    )
    plan.add_argument(
        "--polls-per-minute",
        type=number(1, 6, int),
        default=1,
        metavar="K",
        help="polls within each scheduled minute, 1 to 6 (the template's PollsPerMinute; default 1)",
    )
    plan.add_argument(
        "--lead-ms",
        type=number(20_000, 180_000, int),
        default=None,
        metavar="MS",
        help="how far ahead the poller dispatches (LeadMs; default the template's); at least the poll interval "
        "plus the fast path's margin",
    )
    plan.add_argument(
        "--capacity",
        choices=("on-demand", "provisioned"),
        default="on-demand",
        help="the table's capacity mode (TableBillingMode; provisioned: with auto scaling)",
    )
    plan.add_argument(
        "--utilization",
        type=number(20, 90),
        default=70,
        metavar="PCT",
        help="provisioned: auto scaling's target utilization, 20 to 90 %% (default 70)",
    )
    plan.add_argument(
        "--reserved",
        choices=("none", "1y", "3y"),
        default="none",
        help="provisioned: priced as DynamoDB reserved capacity of that term (a purchase, not a parameter)",
    )
    plan.add_argument(
        "--batch-size",
        type=number(1, 900, int),
        default=None,
        metavar="N",
        help="the most tasks an executor's batch holds, 1 to 900 (ExecutorBatchSize; default the template's)",
    )
    plan.add_argument(
        "--arch",
        choices=("arm64", "x86_64"),
        default="arm64",
        help="the functions' architecture (the template's is arm64; x86_64 prices what it saves)",
    )
    plan.add_argument("--json", action="store_true", help="print one JSON object (with usd_per_million)")
    plan.set_defaults(func=cmd_plan)
