"""The plan's per-task capacity units (punctual_tools.plan.model) against what the cost meter counts on moto:
the real client, poller and executor, for tasks made with the client and for a tenant's tasks as the REST API
makes them (keyed ``<tenant>/<id>``, in the tenant indexes)."""

from __future__ import annotations

import pytest

from punctual_tools import cost
from punctual_tools.cost.pricing import MONTH_S
from punctual_tools.plan import model
from punctual_tools.plan.model import TASK_UNITS

TASKS = 60


@pytest.fixture(scope="module", params=["client", "api"])
def made(request: pytest.FixtureRequest) -> tuple[str, cost.Counts]:
    tenant = "acme" if request.param == "api" else None
    scenario = cost.run_scenario(tasks=TASKS, measure_logs=False, measure_init=False, tenant=tenant)
    return request.param, cost.counts(scenario)


def test_the_plan_counts_the_writes_the_code_makes(made: tuple[str, cost.Counts]) -> None:
    # Given a run on moto, when its per-task writes are summed, then they are the plan's
    made_by, counted = made
    assert counted.scenario.outcomes == {"SUCCEEDED": TASKS}
    steps = ("schedule", "arm", "record")
    table = sum(r.wru for r in counted.per_task if r.step in steps)
    index = sum(r.wru_index for r in counted.per_task if r.step in steps)
    units = TASK_UNITS[made_by]
    assert table == units.table_writes * model.item_write_units(counted.scenario.payload_bytes, made_by)
    assert index == units.index_writes


def test_the_plans_item_size_reads_and_fixed_poll_are_the_counted_ones(made: tuple[str, cost.Counts]) -> None:
    made_by, counted = made
    s = counted.scenario
    assert abs(s.final_item_bytes - s.payload_bytes - TASK_UNITS[made_by].item_bytes) <= 32
    poll = sum(r.rru for r in counted.per_task if r.step == "poll")
    d = model.defaults()
    assert poll == pytest.approx(model.item_read_units(s.payload_bytes, made_by) * d.lead_s / d.interval_s, rel=0.02)
    queries = sum(r.requests for r in counted.per_tick if r.op == "Query")
    assert queries == s.settings["shard_count"] * model.TICK_BUCKETS


def test_the_plans_bill_is_the_cost_pages_at_the_same_volume(made: tuple[str, cost.Counts]) -> None:
    # Given the counted run priced by the cost page's model at 100 M tasks a month, when the plan prices the
    # same volume as a rate, then the two agree within 3 % (the plan leaves out only INIT and empty polls)
    made_by, counted = made
    if made_by != "client":
        pytest.skip("the cost page's block prices client-made tasks")
    volume = 100e6
    page = cost.monthly_cost(counted, volume).per_million(True)
    planned = model.make_plan(volume / MONTH_S).bill.usd_per_million
    assert planned == pytest.approx(page, rel=0.03)


def test_shorter_sleeps_counted_on_moto_are_the_plans() -> None:
    # Given the real client, poller and executors on moto with the short cycle of the levers (a poll every 10 s,
    # a 20 s lead), when the run is counted, then the executors' awake time and the poll's reads of each task are
    # what the plan bills for that cycle: executors invoked 10 to 20 s before their tasks, each task read twice
    interval_ms, lead_ms = 10_000, 20_000
    scenario = cost.run_scenario(
        tasks=TASKS, measure_logs=False, measure_init=False, poll_interval_ms=interval_ms, lead_ms=lead_ms
    )
    counted = cost.counts(scenario)
    assert scenario.outcomes == {"SUCCEEDED": TASKS}
    assert (scenario.settings["poll_interval_ms"], scenario.settings["lead_ms"]) == (interval_ms, lead_ms)
    d = model.Levers(polls_per_minute=6, lead_s=lead_ms / 1000).apply(model.defaults())
    _, planned_s = cost.executor_seconds_per_tick(TASKS, d.batch_size, lead_ms, interval_ms)
    assert cost.measured_executor_seconds(scenario) == pytest.approx(planned_s, rel=0.02)
    assert all(10 <= (b.last_due_ms - b.invoked_ms) / 1000 <= 20 for b in scenario.batches)
    # the poll's reads of the tasks it finds (its index queries are per tick: a 20 s lead's window crosses into
    # a fifth minute bucket at some ticks, which the per-task figure shows as a tenth of a read unit)
    reads = sum(r.rru for r in counted.per_task if r.step == "poll" and r.op == "BatchGetItem")
    assert reads == pytest.approx(model.item_read_units(scenario.payload_bytes) * d.lead_s / d.interval_s, rel=0.02)
    # and the same run's units are the default cycle's: the lever moves Lambda's time and the poll's reads only
    steps = ("schedule", "arm", "record")
    assert sum(r.wru + r.wru_index for r in counted.per_task if r.step in steps) == 5
