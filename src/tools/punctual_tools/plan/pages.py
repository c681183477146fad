"""The generated tables of docs/scale.md and docs/cost.md, from the plan's model (``punctual plan --json`` gives
the same figures for any one rate). :mod:`punctual_tools.docgen` writes them between their markers
(``make docs-pages``) and ``tests/unit/test_plan.py`` fails when a page is stale or disagrees with the CLI."""

from __future__ import annotations

from punctual_tools.plan.model import PAGE_RATES, Plan, make_plan

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
