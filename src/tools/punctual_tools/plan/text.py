"""``punctual plan``'s human output: a short block of the plan (:class:`~punctual_tools.plan.model.Plan`)."""

from __future__ import annotations

from punctual_tools.plan.model import Plan


def plan_lines(plan: Plan) -> list[str]:
    """The plan as a few readable lines: overrides as ``sam deploy`` text, quotas, capacity, the bill."""
    d = plan.as_dict()
    cap, month = d["capacity"], d["monthly"]
    overrides = " ".join(f"{k}={v}" for k, v in plan.overrides().items())
    made = "the REST API" if plan.made_by == "api" else "the client (PutItem)"
    lv = d["levers"]
    capacity_mode = "on demand" if lv["capacity"] == "on-demand" else f"provisioned at {lv['utilization']:.0%}"
    if lv["reserved"] != "none":
        capacity_mode += f", priced as {lv['reserved']} reserved capacity"
    lines = [
        f"{plan.rate:,.0f} tasks due a second, sustained; {plan.payload_kb:g} KB payload, executor "
        f"{plan.executor_mb} MB {lv['arch']}; tasks made through {made}"
        + (f", {lv['api_tasks_per_call']} a call" if plan.made_by == "api" else ""),
        f"{lv['polls_per_minute']} poll(s) a minute, lead {lv['lead_s']:g} s; table {capacity_mode}",
        "",
        "parameters:",
        f"  sam deploy --parameter-overrides {overrides}" if overrides else "  the template's defaults",
    ]
    for name, value in plan.not_parameters().items():
        lines.append(f"  and {name} {value} (not a parameter of this template: edit it)")
    lines.append(
        f"  shards {plan.shards}, poll groups {plan.poll_groups} at {plan.poller_mb} MB ({d['pollers']:g} pollers' "
        f"CPU), batches of {plan.batch}, {plan.executors:,} executors at the peak"
    )
    if plan.batch < plan.defaults.batch_size:
        lines.append(
            f"  batches are cut for the executors' CPU: at {d['executor_memory_for_full_batches_mb']} MB or more "
            "they stay whole"
        )
    lines += ["", "account quotas:"]
    for q in d["quotas"]:
        to = f"raise to {q['to']:,}" if q.get("to") else "cannot be raised"
        note = f": {q['note']}" if q.get("note") else ""
        lines.append(f"  {q['quota']}: default {q['default']:,}, {to}{note}")
    if not d["quotas"]:
        lines.append("  the defaults suffice")
    lines += [
        "",
        f"table capacity ({capacity_mode}): {cap['write_units_per_s']:,} write units/s "
        f"({cap['table_write_units_per_s']:,} table, {cap['index_write_units_per_s']:,} indexes; "
        f"{cap['due_index_writes_per_shard_per_s']:,} per due-index shard), {cap['read_units_per_s']:,} read units/s",
        "",
        f"a month at this rate ({month['tasks'] / 1e6:,.0f} M tasks): ${month['usd']:,.2f}, "
        f"${d['usd_per_million']:.2f} per million (EventBridge Scheduler: ${month['eventbridge_scheduler_usd']:,.2f})",
    ]
    lines += [f"  {name}: ${usd:,.2f}" for name, usd in month["lines_usd"].items()]
    return lines
