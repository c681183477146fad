"""``punctual plan`` and the generated tables of docs/scale.md and docs/cost.md: one model, so they agree, and
the pages are current; the model's rules (shards, the CPU-quota cut of batches, the reservation) at their edges;
bad input is an error with exit 2."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from punctual.config.cpu_share import QUOTA_PERIOD_MS, fires_per_period
from punctual_tools import docgen
from punctual_tools.cli import main
from punctual_tools.plan import PAGE_RATES, defaults, make_plan, model, pages
from punctual_tools.plan.model import TASK_UNITS


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", *args, "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def page_rows(page: str, block: str) -> dict[str, list[str]]:
    text = (docgen.DOCS / page).read_text()
    body = text.split(docgen.begin_marker(block), 1)[1].split(docgen.end_marker(block), 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ") and "/s" in line.split("|")[1]]
    return {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[2:-1]] for row in rows}


def number(cell: str) -> float:
    return float(re.sub(r"[$,]", "", cell.split(maxsplit=1)[0]))


def test_the_pages_are_what_the_model_makes() -> None:
    stale = [p for p in docgen.stale_pages() if "scale.md" in p or "cost.md" in p]
    assert stale == []


def test_the_pages_hold_the_rates_of_a_million_a_minute_and_below() -> None:
    labels = set(page_rows("scale.md", pages.SCALE_BLOCK))
    assert labels == {"100 /s", "1,000 /s", "10,000 /s", "16,667 /s (1 M due a minute)"}
    assert set(page_rows("cost.md", pages.COST_BLOCK)) == labels


@pytest.mark.parametrize("rate", PAGE_RATES)
def test_each_scale_row_is_what_punctual_plan_prints(rate: float, capsys: pytest.CaptureFixture[str]) -> None:
    # Given the scale page's row for a rate, when punctual plan --json runs at that rate, then they agree
    row = page_rows("scale.md", pages.SCALE_BLOCK)[pages.rate_label(rate)]
    plan = plan_json(capsys, "--rate", repr(rate))
    cap = plan["capacity"]
    assert number(row[0]) == plan["shards"]
    assert row[1] == f"{plan['poll_groups']} ({plan['poller_memory_mb']})"
    assert number(row[2]) == plan["batch_size"]
    assert number(row[3]) == plan["executors"]
    assert number(row[4]) == plan["executor_reserved_concurrency"]
    assert number(row[5]) == plan["account_concurrency"]
    assert number(row[6]) == pytest.approx(cap["write_units_per_s"], abs=1)
    assert number(row[7]) == pytest.approx(cap["read_units_per_s"], abs=1)


@pytest.mark.parametrize("rate", PAGE_RATES)
def test_each_cost_row_is_what_punctual_plan_prints(rate: float, capsys: pytest.CaptureFixture[str]) -> None:
    row = page_rows("cost.md", pages.COST_BLOCK)[pages.rate_label(rate)]
    client = plan_json(capsys, "--rate", repr(rate))
    api = plan_json(capsys, "--rate", repr(rate), "--api")
    assert number(row[1]) == pytest.approx(client["monthly"]["usd"], abs=1)
    assert number(row[2]) == pytest.approx(client["usd_per_million"], abs=0.006)
    assert number(row[3]) == pytest.approx(api["monthly"]["usd"], abs=1)
    assert number(row[4]) == pytest.approx(api["usd_per_million"], abs=0.006)


def test_the_human_block_names_the_overrides_quotas_capacity_and_bill(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--rate", "16667"]) == 0
    out = capsys.readouterr().out
    assert "sam deploy --parameter-overrides ShardCount=128 " in out
    assert "Lambda concurrent executions: default 1,000, raise to" in out
    assert "Lambda scaling rate" in out
    assert "write units/s" in out
    assert "per million" in out


@pytest.mark.parametrize(
    "args",
    [
        ["--rate", "0"],
        ["--rate", "-5"],
        ["--rate", "many"],
        ["--rate", "nan"],
        ["--rate", "10", "--memory", "127"],
        ["--rate", "10", "--memory", "10241"],
        ["--rate", "10", "--memory", "1.5"],
        ["--rate", "10", "--payload-kb", "x"],
        [],
    ],
)
def test_bad_input_is_a_clear_error_with_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["plan", *args])
    assert exit_.value.code == 2
    assert "punctual plan: error:" in capsys.readouterr().err


def test_memory_at_its_edges_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_json(capsys, "--rate", "10", "--memory", "128")["executor_memory_mb"] == 128
    assert plan_json(capsys, "--rate", "10", "--memory", "10240")["executor_memory_mb"] == 10240


def test_shards_keep_each_due_index_key_under_half_a_partition() -> None:
    d = defaults()
    assert model.shards_needed(100, d) == d.shard_count  # never below the default
    for rate in (1_000, 10_000, 1e6 / 60, 100_000):
        shards = model.shards_needed(rate, d)
        assert shards & (shards - 1) == 0
        assert 2 * rate / shards <= model.PARTITION_WRITES_PER_S / 2 or shards == d.max_shards


def test_a_sustained_rate_keeps_whole_batches_at_any_memory_as_the_poller_cuts_them() -> None:
    # Given rates below and far above what one executor at 256 MB fires in a quota period
    d = defaults()
    at_once = fires_per_period(256, d.fire_cpu_us)
    edge = at_once * 1000 / QUOTA_PERIOD_MS  # tasks a second that put at_once in one period
    # Then the poller's cut interleaves them in lanes: every batch stays whole, and no memory is needed for it
    for rate in (100, edge, edge + 1, 10_000, 1e6 / 60):
        assert model.batch_tasks(rate, 256, d) == d.batch_size
    assert model.full_batch_memory(10_000, d) == 128


def test_the_reservation_holds_the_peak_and_twice_a_ticks_batches() -> None:
    for rate in PAGE_RATES:
        p = make_plan(rate)
        tick_batches = rate * p.defaults.interval_s / p.batch
        assert p.executor_concurrency >= max(p.executors, 2 * tick_batches)
        assert p.account_concurrency == p.executor_concurrency + p.poller_concurrency + 100


def test_an_api_made_task_pays_its_tenant_index_writes_and_the_api() -> None:
    client, api = make_plan(1_000), make_plan(1_000, made_by="api")
    extra = TASK_UNITS["api"].index_writes - TASK_UNITS["client"].index_writes
    assert extra == 5  # the tenant index, and the active-task index twice while both of its forms are kept
    assert api.capacity.index_writes - client.capacity.index_writes == extra * 1_000
    assert api.bill.usd_per_million > 2 * client.bill.usd_per_million


def test_a_payload_past_a_kilobyte_adds_a_write_unit_to_each_item_write() -> None:
    small, large = make_plan(1_000, payload_kb=0.2), make_plan(1_000, payload_kb=1.0)
    assert large.capacity.table_writes - small.capacity.table_writes == pytest.approx(3 * 1_000)
