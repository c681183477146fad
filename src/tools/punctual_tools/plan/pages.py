"""The generated tables of docs/scale.md and docs/cost.md, from the plan's model (``punctual plan --json`` gives
the same figures for any one rate). :mod:`punctual_tools.docgen` writes them between their markers
(``make docs-pages``) and ``tests/tools/test_plan.py`` fails when a page is stale or disagrees with the CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from punctual_tools.cost.pricing import (
    MONTH_S,
    STEP_FUNCTIONS_PER_TRANSITION_USD,
    STEP_FUNCTIONS_TRANSITIONS,
    eventbridge_scheduler_usd,
)
from punctual_tools.plan.model import PAGE_RATES, Levers, Plan, make_plan
from punctual_tools.template import find_template

SCALE_BLOCK = "sizing by rate"
COST_BLOCK = "bill by rate"


def rate_label(rate: float) -> str:
    """``16,667 /s (1 M due a minute)`` for a million a minute; ``1,000 /s`` otherwise."""
    label = f"{rate:,.0f} /s"
    return f"{label} (1 M due a minute)" if abs(rate * 60 - 1e6) < 1 else label


def _quotas(plan: Plan) -> str:
    names = {
        "Lambda concurrent executions": "concurrency",
        "Lambda scaling rate": "warm executors",
        "DynamoDB table write units": "table writes",
        "DynamoDB table read units": "table reads",
        "DynamoDB warm throughput": "warm throughput",
    }
    found = [short for q in plan.quotas() for name, short in names.items() if q["quota"].startswith(name)]
    return ", ".join(found) or "none"


def scale_block(rates: tuple[float, ...] = PAGE_RATES) -> list[str]:
    """docs/scale.md's sizing table: one row a rate, at the template's defaults."""
    plans = [make_plan(rate) for rate in rates]
    d = plans[0].defaults
    lines = [
        f"At the template's defaults (executor {d.executor_mb} MB, batches of {d.batch_size}, lead {d.lead_s:g} s), "
        f"tasks made with the client and a 0.2 KB payload; CPU per task as `make scale` measured it (poll "
        f"{d.poll_us:g} µs, executor {d.executor_us:g} µs). `punctual plan --rate R --json` prints the same figures "
        "for any rate, memory and payload.",
        "",
        "| Rate due | `ShardCount` | Poll groups (poller MB) | Tasks a batch | Peak executors | "
        "`ExecutorReservedConcurrency` | Account concurrency | Write units/s (table + indexes) | Read units/s | "
        "Quotas to raise |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for p in plans:
        c = p.capacity
        lines.append(
            f"| {rate_label(p.rate)} | {p.shards} | {p.poll_groups} ({p.poller_mb}) | {p.batch} | {p.executors:,} | "
            f"{p.executor_concurrency:,} | {p.account_concurrency:,} | {c.writes:,.0f} ({c.table_writes:,.0f} + "
            f"{c.index_writes:,.0f}) | {c.reads:,.0f} | {_quotas(p)} |"
        )
    return lines


def cost_block(rates: tuple[float, ...] = PAGE_RATES) -> list[str]:
    """docs/cost.md's bill by rate: a month at each rate sustained, tasks made with the client and through the API."""
    lines = [
        "A month (30 days) at each rate sustained, at the template's defaults and a 0.2 KB payload: Lambda "
        "(executors, pollers; for API-made tasks also the API's function, 30 ms billed a call, assumed) and "
        "DynamoDB on demand, plus API Gateway for API-made tasks. `punctual plan --rate R --json` gives the same "
        "(`usd_per_million`; `--api` for API-made tasks).",
        "",
        "| Rate due | Tasks a month | Client-made: $ a month | $ per million | API-made: $ a month | $ per million | "
        "EventBridge Scheduler: $ per million |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for rate in rates:
        client, api = make_plan(rate), make_plan(rate, made_by="api")
        eb = client.as_dict()["monthly"]["eventbridge_scheduler_usd"] / (client.bill.tasks / 1e6)
        lines.append(
            f"| {rate_label(rate)} | {client.bill.tasks / 1e6:,.0f} M | ${client.bill.usd:,.0f} | "
            f"${client.bill.usd_per_million:.2f} | ${api.bill.usd:,.0f} | ${api.bill.usd_per_million:.2f} | "
            f"${eb:.2f} |"
        )
    return lines


# == the bill by volume and the levers (docs/cost.md) ==========================================================
VOLUME_BLOCK = "bill by volume"
LEVERS_BLOCK = "levers"
MILLION, BILLION = 1e6, 1e9
VOLUMES = (MILLION, 100 * MILLION, BILLION)  # tasks a month
CENTS_BELOW_USD = 100  # amounts under this show their cents
PAYLOADS_KB = (0.2, 1.0, 4.0)
TARGET_VOLUME, TARGET_PAYLOAD_KB, TARGET_USD_PER_MILLION = 100e6, 1.0, 1.0
# The levers in the order they are taken, each with the ones above it: (label, levers); the page prints each
# row's `punctual plan` flags (Levers.flags).
SHORT_POLLS = {"polls_per_minute": 6, "lead_s": 20.0}
PROVISIONED = {**SHORT_POLLS, "batch_size": 900, "capacity": "provisioned"}
LEVER_STEPS: tuple[tuple[str, Levers], ...] = (
    ("the template's defaults, x86_64 functions (what Graviton saves)", Levers(arch="x86_64")),
    ("the template's defaults (arm64, on demand, a poll a minute, lead 90 s)", Levers()),
    (
        "or, keeping the template's poll cycle, provisioned capacity alone (`TableBillingMode=PROVISIONED`, auto "
        "scaling at 70 %)",
        Levers(capacity="provisioned"),
    ),
    (
        "instead, 6 polls a minute, lead 20 s (`PollsPerMinute=6 LeadMs=20000`; the poller at 256 MB)",
        Levers(**SHORT_POLLS),  # type: ignore[arg-type]
    ),
    ("and batches of up to 900 (`ExecutorBatchSize=900`)", Levers(**SHORT_POLLS, batch_size=900)),  # type: ignore[arg-type]
    (
        "and provisioned capacity, auto scaling at 70 % (`TableBillingMode=PROVISIONED`)",
        Levers(**PROVISIONED),  # type: ignore[arg-type]
    ),
    (
        "or, instead, auto scaling at 90 % (`TableTargetUtilization=90`: less room for a burst)",
        Levers(**PROVISIONED, utilization=0.9),  # type: ignore[arg-type]
    ),
    (
        "or at 70 % with a 1-year reservation of the capacity (a purchase: about 54 % off)",
        Levers(**PROVISIONED, reserved="1y"),  # type: ignore[arg-type]
    ),
    ("or at 70 % with a 3-year reservation (about 77 % off)", Levers(**PROVISIONED, reserved="3y")),  # type: ignore[arg-type]
)
CHEAPEST_WITHOUT_COMMITMENT = Levers(**PROVISIONED)  # type: ignore[arg-type]


def _rate(volume: float) -> float:
    return volume / MONTH_S


def _volume_label(volume: float) -> str:
    return f"{volume / BILLION:g} B" if volume >= BILLION else f"{volume / MILLION:g} M"


def _usd(x: float) -> str:
    return f"${x:,.2f}" if x < CENTS_BELOW_USD else f"${x:,.0f}"


def volume_block() -> list[str]:
    """The bill at 1 M, 100 M and 1 B tasks a month, client- and API-made, at the defaults and with the levers
    that need no commitment, by payload size, next to EventBridge Scheduler and Step Functions."""
    lines = [
        "A month (30 days) at each volume spread evenly, in the target's scope (Lambda, DynamoDB requests, the "
        'pollers; for API-made tasks API Gateway and the API\'s function). "Levers": '
        f"`punctual plan {' '.join(CHEAPEST_WITHOUT_COMMITMENT.flags())}` (the table "
        "below says what each does). Every cell is `punctual plan --rate <volume / 2,592,000 s> --json`'s "
        "`usd_per_million` with those flags, `--payload-kb` and `--api` (`--api-batch 100`: through "
        "`POST /v1/tasks:batch`).",
        "",
        "| Tasks a month | Payload | Client-made | with the levers | API-made, one a call | through the batch "
        "route, with the levers | EventBridge Scheduler | Step Functions standard |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for volume in VOLUMES:
        rate = _rate(volume)
        eb = eventbridge_scheduler_usd(volume) / (volume / 1e6)
        sfn = [STEP_FUNCTIONS_PER_TRANSITION_USD * t * 1e6 for t in STEP_FUNCTIONS_TRANSITIONS]
        for kb in PAYLOADS_KB:
            cells = [
                make_plan(rate, kb),
                make_plan(rate, kb, levers=CHEAPEST_WITHOUT_COMMITMENT),
                make_plan(rate, kb, made_by="api"),
                make_plan(rate, kb, made_by="api", levers=replace(CHEAPEST_WITHOUT_COMMITMENT, api_tasks_per_call=100)),
            ]
            figures = " | ".join(f"{_usd(p.bill.usd_per_million)}" for p in cells)
            lines.append(
                f"| {_volume_label(volume)} | {kb:g} KB | {figures} | ${eb:.2f} | ${sfn[0]:.0f}–${sfn[-1]:.0f} |"
            )
    return lines


def levers_block() -> list[str]:
    """Each lever's effect on the bill of a 1 KB client-made task at 100 M a month, taken one after another."""
    rate = _rate(TARGET_VOLUME)
    lines = [
        f"A {TARGET_PAYLOAD_KB:g} KB task made with the client, {_volume_label(TARGET_VOLUME)} a month, in the "
        'target\'s scope; each row adds its lever to the rows above it, and an "or" row replaces the row before it '
        "(the first row is the reference). The flags are "
        f"`punctual plan --rate {rate:.2f} --payload-kb {TARGET_PAYLOAD_KB:g}`'s.",
        "",
        "| Lever | `punctual plan` flags | DynamoDB | Executors | Pollers | $ per million | vs $1 |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    bills: list[tuple[Levers, float]] = []
    for label, levers in LEVER_STEPS:
        plan = make_plan(rate, TARGET_PAYLOAD_KB, levers=levers)
        bills.append((levers, plan.bill.usd_per_million))
        flags = " ".join(levers.flags())
        per = plan.bill.tasks / 1e6
        ddb = (plan.bill.lines["DynamoDB writes"] + plan.bill.lines["DynamoDB reads"]) / per
        ratio = plan.bill.usd_per_million / TARGET_USD_PER_MILLION
        lines.append(
            f"| {label} | {f'`{flags}`' if flags else '-'} | ${ddb:.3f} | "
            f"${plan.bill.lines['Lambda executors'] / per:.3f} | ${plan.bill.lines['Lambda pollers'] / per:.3f} | "
            f"**${plan.bill.usd_per_million:.2f}** | {ratio:.2f}× |"
        )
    free = make_plan(rate, TARGET_PAYLOAD_KB, levers=CHEAPEST_WITHOUT_COMMITMENT)
    kept = make_plan(rate, TARGET_PAYLOAD_KB, levers=Levers(capacity="provisioned"))
    met = [(levers, usd) for levers, usd in bills if usd <= TARGET_USD_PER_MILLION]
    committed = all(levers.reserved != "none" for levers, _ in met)
    verdict = free.bill.usd_per_million / TARGET_USD_PER_MILLION
    if not met:
        reached = "met by no row. "
    elif committed:
        best = min(met, key=lambda m: m[1])
        reached = f"met only with a reservation of the capacity (at best ${best[1]:.2f}, {best[0].reserved}). "
    else:
        reached = "met. "
    lines += [
        "",
        f"**Target (${TARGET_USD_PER_MILLION:g} per million at {_volume_label(TARGET_VOLUME)} a month, "
        f"{TARGET_PAYLOAD_KB:g} KB):** {reached}"
        + f"Without a commitment, the levers bring it to ${free.bill.usd_per_million:.2f}: **missed by "
        f"${free.bill.usd_per_million - TARGET_USD_PER_MILLION:.2f} ({verdict:.1f}×)**, of which DynamoDB is "
        f"${(free.bill.lines['DynamoDB writes'] + free.bill.lines['DynamoDB reads']) / (free.bill.tasks / 1e6):.2f}: "
        f'{free.capacity.writes / rate:.1f} write units a task. The lever left is that count ("Fewer write units a '
        "task: not taken\", above). Keeping the template's poll cycle, whose precision is [the default run's]"
        f"({DEFAULT_DRIFT_PAGE}), provisioned capacity alone brings it to ${kept.bill.usd_per_million:.2f} "
        f"({kept.bill.usd_per_million / TARGET_USD_PER_MILLION:.1f}×).",
        "",
        precision_line(CHEAPEST_WITHOUT_COMMITMENT),
    ]
    return lines


DRIFT_PAGE = "benchmarks/drift-lambda-levers.md"  # the drift benchmark at the levers' cycle (Lambda profile)
DEFAULT_DRIFT_PAGE = "benchmarks/drift-lambda.md"  # the same benchmark's published run at the default settings


def _drift_report(page: str) -> dict[str, Any]:
    path = find_template().parent / "docs" / page.replace(".md", ".json")
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return report


def precision_line(
    levers: Levers, report: dict[str, Any] | None = None, reference: dict[str, Any] | None = None
) -> str:
    """What the drift benchmark's run at the levers' poll cycle (Lambda profile) says of precision, against the
    published run at the default settings (``reference``), or that it was not run at that cycle."""
    report = report if report is not None else _drift_report(DRIFT_PAGE)
    reference = reference if reference is not None else _drift_report(DEFAULT_DRIFT_PAGE)
    args = report.get("args") or {}
    interval, lead = 60 / levers.polls_per_minute, levers.lead_s
    ran = (args.get("poll_interval"), args.get("lead_ms"))
    if lead is None or ran != (interval, lead * 1000):
        return (
            f"**Precision at this poll cycle:** not measured: the drift benchmark's run ran with a poll every "
            f"{ran[0]} s and " + (f"a lead of {ran[1] / 1000:g} s." if ran[1] else "the settings' default lead.")
        )
    batch_note = (
        ""
        if args.get("max_batch_size") == levers.batch_size
        else f" (its batches: up to {args.get('max_batch_size') or 'the default'})"
    )
    verdicts = report.get("verdicts") or []
    met = {v["name"] for v in verdicts if v.get("ratio_met")}
    missed = [v["name"] for v in verdicts if not v.get("ratio_met")]
    met_before = {v["name"] for v in reference.get("verdicts") or [] if v.get("ratio_met")}
    lost = [name for name in missed if name in met_before]
    worst = {v["name"]: v for v in verdicts}
    lost_text = "; ".join(
        f"{name} p99 {worst[name]['value']:,.1f} ms ({worst[name]['ratio']:.1f}× its floor)" for name in lost
    )
    line = (
        f"**Precision at this poll cycle** (a poll every {interval:g} s, lead {lead:g} s): the drift benchmark's "
        f"[run at the levers' cycle]({DRIFT_PAGE}) (Lambda profile, executors at 256 MB's CPU, commit "
        f"{report.get('commit')}) met {len(met)} of {len(verdicts)} ratio targets{batch_note}"
        + (f"; missed: {', '.join(missed)}." if missed else ".")
    )
    if lost:
        line += (
            f" Of those, the [run at the default settings]({DEFAULT_DRIFT_PAGE}) (commit {reference.get('commit')}) "
            f"met: {lost_text}. **The precision targets are not met with these levers**, and the figure above is "
            "what they cost, not a bill for the benchmark's precision."
        )
    return line
    if lead is None or ran != (interval, lead * 1000):
        return (
            f"**Precision at this poll cycle:** not measured: the published drift benchmark ran with a poll every "
            f"{ran[0]} s and " + (f"a lead of {ran[1] / 1000:g} s." if ran[1] else "the settings' default lead.")
        )
    verdicts = report.get("verdicts") or []
    ratio_met = sum(1 for v in verdicts if v.get("ratio_met"))
    missed = [v["name"] for v in verdicts if not v.get("ratio_met")]
    return (
        f"**Precision at this poll cycle** (a poll every {interval:g} s, lead {lead:g} s): the drift benchmark's "
        f"[Lambda profile]({DRIFT_PAGE}) (executors at 256 MB's CPU, commit {report.get('commit')}) met "
        f"{ratio_met} of {len(verdicts)} ratio targets{batch_note}"
        + (f"; missed: {', '.join(missed)}." if missed else ".")
    )
