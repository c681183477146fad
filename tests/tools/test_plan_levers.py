"""The levers of a task's cost in ``punctual plan`` and docs/cost.md's generated "bill by volume" and "levers"
tables: each row is what the CLI prints with the row's flags; each lever moves the line it should, by the rule it
states; a lever that cannot be set is a clear error with exit 2."""

from __future__ import annotations

import doctest
import json
import shlex
from typing import Any

import pytest

from punctual_tools import docgen
from punctual_tools.cli import main
from punctual_tools.cost import pricing
from punctual_tools.plan import defaults, make_plan, model, pages
from punctual_tools.plan.model import Levers
from punctual_tools.template import load_template

RATE_100M = 100e6 / pricing.MONTH_S


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", *args, "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def block_rows(block: str) -> list[list[str]]:
    text = (docgen.DOCS / "cost.md").read_text()
    body = text.split(docgen.begin_marker(block), 1)[1].split(docgen.end_marker(block), 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| ---")][1:]
    return [[c.strip() for c in row.split("|")[1:-1]] for row in rows]


def dollars(cell: str) -> float:
    return float(cell.strip("*").lstrip("$").replace(",", ""))


def test_the_levers_rows_are_what_punctual_plan_prints_with_their_flags(capsys: pytest.CaptureFixture[str]) -> None:
    # Given each row of the levers table, when punctual plan runs with the flags the row names, then its bill is
    # the row's
    rows = block_rows(pages.LEVERS_BLOCK)
    assert len(rows) == len(pages.LEVER_STEPS)
    for row in rows:
        flags = shlex.split(row[1].strip("`")) if row[1] != "-" else []
        got = plan_json(capsys, "--rate", repr(RATE_100M), "--payload-kb", "1", *flags)
        assert dollars(row[5]) == pytest.approx(got["usd_per_million"], abs=0.006), row[0]
        lines = got["monthly"]["lines_usd"]
        per = got["monthly"]["tasks"] / 1e6
        assert dollars(row[3]) == pytest.approx(lines["Lambda executors"] / per, abs=0.002), row[0]


def test_the_volume_rows_are_what_punctual_plan_prints(capsys: pytest.CaptureFixture[str]) -> None:
    rows = block_rows(pages.VOLUME_BLOCK)
    assert [(r[0], r[1]) for r in rows] == [
        (pages._volume_label(v), f"{kb:g} KB") for v in pages.VOLUMES for kb in pages.PAYLOADS_KB
    ]
    levers = ["--polls-per-minute", "6", "--lead-ms", "20000", "--batch-size", "900", "--capacity", "provisioned"]
    for row, (volume, kb) in zip(rows, [(v, kb) for v in pages.VOLUMES for kb in pages.PAYLOADS_KB], strict=True):
        base = ["--rate", repr(volume / pricing.MONTH_S), "--payload-kb", repr(kb)]
        cells = [
            plan_json(capsys, *base),
            plan_json(capsys, *base, *levers),
            plan_json(capsys, *base, "--api"),
            plan_json(capsys, *base, "--api", "--api-batch", "100", *levers),
        ]
        for cell, got in zip(row[2:6], cells, strict=True):
            assert dollars(cell) == pytest.approx(got["usd_per_million"], abs=0.006 if dollars(cell) < 100 else 0.6)


def test_shorter_sleeps_cut_the_executors_line_by_the_awake_time_they_save() -> None:
    # Given the same volume, when the poller polls 6 times a minute with a 20 s lead, then the executors' line
    # follows their awake time: the tick's head (lead - interval) shrinks from 30 s to 10 s
    base, short = make_plan(RATE_100M), make_plan(RATE_100M, levers=Levers(polls_per_minute=6, lead_s=20))
    d, ds = base.defaults, short.defaults
    assert (ds.interval_s, ds.lead_s) == (10.0, 20.0)
    awake = [
        pricing.executor_seconds_per_tick(
            RATE_100M * x.interval_s, p.batch, int(x.lead_s * 1000), int(x.interval_s * 1000)
        )[1]
        / x.interval_s
        for x, p in ((d, base), (ds, short))
    ]
    executors = [p.bill.lines["Lambda executors"] for p in (base, short)]
    assert executors[1] / executors[0] == pytest.approx(awake[1] / awake[0], rel=0.02)
    assert executors[1] < executors[0] / 2
    # the poller now lives most of its minute, at 256 MB: 50 s of waits a minute plus its polls
    assert short.poller_mb == model.POLLER_LEAST_MB
    billed = model.poller_seconds_per_minute(RATE_100M, short.poller_mb, short.poll_groups, ds)
    assert 50 <= billed < 51
    assert short.overrides()["LeadMs"] == 20000


def test_provisioned_capacity_bills_consumed_units_over_the_target_utilization() -> None:
    plan = make_plan(RATE_100M, levers=Levers(capacity="provisioned"))
    c, hours = plan.capacity, pricing.MONTH_S / 3600
    d = plan.defaults
    expected = (c.table_writes + c.due_index_writes) / 0.7 + d.min_write_capacity * (d.indexes - 1)
    assert plan.bill.lines["DynamoDB writes"] == pytest.approx(expected * hours * pricing.DDB_WCU_HOUR_USD, rel=1e-6)
    on_demand = make_plan(RATE_100M)
    assert plan.bill.lines["DynamoDB writes"] < on_demand.bill.lines["DynamoDB writes"] / 2
    reserved = make_plan(RATE_100M, levers=Levers(capacity="provisioned", reserved="3y"))
    assert reserved.bill.lines["DynamoDB writes"] == pytest.approx(plan.bill.lines["DynamoDB writes"] * 0.23)
    assert plan.overrides()["TableBillingMode"] == "PROVISIONED"


def test_at_a_million_a_month_the_provisioned_minimum_and_a_poller_awake_all_minute_cost_more() -> None:
    rate = 1e6 / pricing.MONTH_S
    assert make_plan(rate, levers=pages.CHEAPEST_WITHOUT_COMMITMENT).bill.usd > make_plan(rate).bill.usd


def test_the_batch_route_divides_api_gateway_by_the_tasks_a_call_carries() -> None:
    one = make_plan(RATE_100M, made_by="api").bill.lines["API Gateway and the API function"]
    batch = make_plan(RATE_100M, made_by="api", levers=Levers(api_tasks_per_call=100))
    assert batch.bill.lines["API Gateway and the API function"] < one / 20


def test_graviton_saves_a_fifth_of_the_lambda_lines() -> None:
    arm, x86 = make_plan(RATE_100M), make_plan(RATE_100M, levers=Levers(arch="x86_64"))
    ratio = x86.bill.lines["Lambda executors"] / arm.bill.lines["Lambda executors"]
    assert ratio == pytest.approx(pricing.LAMBDA_GB_S_X86_USD / pricing.LAMBDA_GB_S_ARM_USD, rel=0.01)


def test_the_verdict_line_states_the_target_and_how_far_off_it_is() -> None:
    text = "\n".join(pages.levers_block())
    free = make_plan(RATE_100M, 1.0, levers=pages.CHEAPEST_WITHOUT_COMMITMENT).bill.usd_per_million
    assert f"${free:.2f}" in text
    assert ("missed by" in text) == (free > pages.TARGET_USD_PER_MILLION)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--lead-ms", "60000"], "the lead (60 s) must be at least the poll interval (60 s) plus"),
        (["--polls-per-minute", "2", "--lead-ms", "30000"], "must be at least the poll interval (30 s)"),
        (["--reserved", "1y"], "needs provisioned capacity"),
    ],
)
def test_a_lever_that_cannot_be_set_is_a_clear_error(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--rate", "10", *args]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ["--polls-per-minute", "7"],
        ["--polls-per-minute", "0"],
        ["--lead-ms", "19999"],
        ["--capacity", "reserved"],
        ["--utilization", "95"],
        ["--batch-size", "901"],
        ["--api-batch", "101"],
        ["--arch", "sparc"],
    ],
)
def test_a_lever_out_of_its_range_is_an_argparse_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--rate", "10", *args])
    assert exit_.value.code == 2
    assert "punctual plan: error:" in capsys.readouterr().err


def test_the_defaults_keep_the_shipped_poll_cycle() -> None:
    plan = make_plan(RATE_100M)
    assert plan.defaults.interval_s == 60
    assert plan.defaults.lead_s == defaults().lead_s
    assert not {"PollsPerMinute", "LeadMs", "TableBillingMode"} & set(plan.overrides())


def test_the_provisioned_model_holds_the_templates_minimums_and_indexes() -> None:
    template = load_template()
    params = template["Parameters"]
    d = defaults()
    assert int(params["TableMinWriteCapacity"]["Default"]) == d.min_write_capacity == 5
    assert int(params["TableMinReadCapacity"]["Default"]) == d.min_read_capacity == 5
    table = template["Resources"]["TasksTable"]["Properties"]
    assert len(table["GlobalSecondaryIndexes"]) == d.indexes == 5


def test_a_provisioned_plan_raises_auto_scalings_ceiling_when_the_table_needs_more() -> None:
    small = make_plan(RATE_100M, levers=Levers(capacity="provisioned"))
    assert "TableMaxWriteCapacity" not in small.overrides()
    big = make_plan(2_000, levers=Levers(capacity="provisioned"))
    ceiling = big.overrides()["TableMaxWriteCapacity"]
    assert isinstance(ceiling, int)
    assert ceiling >= big.capacity.table_writes / 0.7
    on_demand = make_plan(2_000)
    assert not {"TableMaxWriteCapacity", "TableBillingMode"} & set(on_demand.overrides())


def test_the_precision_line_reads_the_drift_benchmark_run_at_the_levers_cycle() -> None:
    levers = pages.CHEAPEST_WITHOUT_COMMITMENT
    verdicts = [{"name": "system/steady", "ratio_met": True}, {"name": "cold", "ratio_met": False}]
    at_cycle = {
        "args": {"poll_interval": 10.0, "lead_ms": 20000, "max_batch_size": 900},
        "verdicts": verdicts,
        "commit": "abc1234",
    }
    reference = {"verdicts": [{"name": "system/steady", "ratio_met": True}, {"name": "cold", "ratio_met": False}]}
    line = pages.precision_line(levers, at_cycle, reference)
    assert "met 1 of 2 ratio targets; missed: cold." in line
    assert "abc1234" in line
    assert "not met with these levers" not in line  # cold was missed at the default settings too
    elsewhere = {"args": {"poll_interval": 10.0, "lead_ms": 90000}, "verdicts": verdicts}
    assert "not measured" in pages.precision_line(levers, elsewhere, reference)


def test_a_target_the_default_settings_met_and_the_levers_miss_is_named() -> None:
    levers = pages.CHEAPEST_WITHOUT_COMMITMENT
    args = {"poll_interval": 10.0, "lead_ms": 20000, "max_batch_size": 900}
    burst = {"name": "system/burst", "ratio_met": False, "value": 5774.1, "ratio": 35.0}
    reference = {"commit": "old1234", "verdicts": [{"name": "system/burst", "ratio_met": True}]}
    line = pages.precision_line(levers, {"args": args, "verdicts": [burst]}, reference)
    assert "system/burst p99 5,774.1 ms (35.0× its floor)" in line
    assert "**The precision targets are not met with these levers**" in line


def test_each_levers_flags_parse_back_to_the_same_levers(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctest.testmod(model).failed == 0
    for _, levers in pages.LEVER_STEPS:
        got = plan_json(capsys, "--rate", "38.58", *levers.flags())["levers"]
        assert got["polls_per_minute"] == levers.polls_per_minute
        assert got["capacity"] == levers.capacity
        assert got["reserved"] == levers.reserved
        assert got["arch"] == levers.arch
        assert got["utilization"] == pytest.approx(levers.utilization)
