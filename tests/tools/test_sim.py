"""The simulation's components (punctual_tools.sim): each mechanism's rule, deterministic and fast."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from punctual_tools.cost import pricing
from punctual_tools.sim.components import AsyncQueue, ScalingRate, WriteBucket, admit_write, fire_times
from punctual_tools.sim.model import Scenario, batch_sizes, simulate
from punctual_tools.sim.params import Deployment, aws_platform, template_deployment


def test_scaling_rate_caps_new_environments_at_1000_per_10_s() -> None:
    # Given Lambda's scaling rate for one function
    rate = ScalingRate(1_000, 10.0)
    # When 5,000 environments are asked for at once, then again 10 s later
    first = sum(rate.take(0.0) for _ in range(5_000))
    later = sum(rate.take(10.0) for _ in range(5_000))
    # Then 1,000 are granted each time: the unused rate is never banked past 1,000
    assert (first, later) == (1_000, 1_000)
    assert sum(rate.take(100.0) for _ in range(5_000)) == 1_000


def test_scaling_rate_refills_continuously() -> None:
    rate = ScalingRate(1_000, 10.0)
    assert sum(rate.take(0.0) for _ in range(1_000)) == 1_000
    assert not rate.take(0.0)
    assert rate.next_at(0.0) == pytest.approx(0.01)
    assert sum(rate.take(1.0) for _ in range(1_000)) == 100


def test_an_event_older_than_its_maximum_age_is_dropped() -> None:
    # Given an async queue keeping events 60 s
    queue = AsyncQueue(max_age_s=60)
    # When an event sent at 0 is throttled again and again
    at, attempt, retries = 0.0, 0, []
    while True:
        attempt += 1
        retry = queue.on_throttle(0.0, at, attempt)
        if retry is None:
            break
        retries.append(retry)
        at = retry
    # Then it is retried after 1, 2, 4, 8, 16 s (at 1, 3, 7, 15, 31), and dropped when the next retry (at 63)
    # would be past 60 s
    assert retries == [1, 3, 7, 15, 31]
    assert (queue.throttles, queue.dropped) == (6, 1)


def test_retry_interval_stops_at_five_minutes() -> None:
    assert AsyncQueue(max_age_s=21_600).retry_delay(20) == 300


def test_a_partition_over_1000_wcu_a_second_throttles() -> None:
    # Given one partition of 1,000 write units a second, idle before
    key = WriteBucket(1_000)
    # When 1,000 units arrive at once, then 1,000 more in the same instant
    assert key.admit(10.0, 1_000) == 10.0
    assert key.throttled_units == 0
    done = key.admit(10.0, 1_000)
    # Then the second thousand is throttled, taken only a second later
    assert key.throttled_units == 1_000
    assert done == pytest.approx(11.0)


def test_a_throttled_index_write_throttles_the_base_write() -> None:
    # Given a table with room and one index key that is full
    table, index = WriteBucket(40_000), WriteBucket(1_000)
    index.admit(0.0, 1_000)
    # When a record writes both
    done = admit_write(0.0, 500, [table, index])
    # Then the write completes when the index takes it, half a second later
    assert table.throttled_units == 0
    assert done == pytest.approx(0.5)


def test_fires_past_the_period_quota_wait_for_the_next_period() -> None:
    # Given a batch of 10 tasks due at once on 0.1 of a core in 20 ms periods, each fire 1 ms of CPU
    due = np.zeros(10)
    # When it fires
    fired = fire_times(due, 0.0, 0.001, 0.1, 0.020)
    # Then two fires fit in each period's 2 ms of quota: the next two wait for the next period
    assert fired.tolist() == pytest.approx([0.001, 0.002, 0.021, 0.022, 0.041, 0.042, 0.061, 0.062, 0.081, 0.082])


def test_fires_on_a_shared_core_are_paced_by_the_share() -> None:
    fired = fire_times(np.zeros(4), 0.0, 0.001, 0.25, None)
    assert fired.tolist() == pytest.approx([0.004, 0.008, 0.012, 0.016])


def test_a_fire_never_starts_before_its_due_instant() -> None:
    due = np.array([0.0, 1.0, 2.0])
    assert fire_times(due, 0.0, 0.001, 1.0, 0.020).tolist() == pytest.approx([0.001, 1.001, 2.001])


def test_batches_are_the_pollers_cut() -> None:
    # Given the template's executor (256 MB) and a reserved concurrency that does not bind
    dep = replace(template_deployment(), executor_reserved=10_000)
    # When 1,000 tasks due at one instant are cut
    sizes = batch_sizes([1_000] * 1_000, dep, 60.0, groups=1)
    # Then no batch holds more than the quota fires in a period (33 at 60 us), as make_batches says
    assert sum(sizes) == 1_000
    assert max(sizes) == 33


def test_a_small_run_fires_every_task_within_its_lead() -> None:
    # Given the template's defaults on AWS and 2,000 tasks due over 20 s
    got = simulate(aws_platform(), template_deployment(), Scenario("small", rate=100, seconds=20))
    # Then every task fires, none throttled, at a few ms at most, and the cost is counted
    assert (got["fired"], got["missed"], got["undispatched"]) == (2_000, 0, 0)
    assert got["lambda"]["throttles"] == 0
    assert got["drift_ms"]["max"] < 20
    assert got["usd_per_million"] > 0


def test_the_same_seed_gives_the_same_run() -> None:
    scenario = Scenario("burst", burst=5_000)
    one = simulate(aws_platform(), template_deployment(), scenario, seed=3)
    two = simulate(aws_platform(), template_deployment(), scenario, seed=3)
    assert one == two


def test_burst_capacity_serves_a_rise_from_banked_units_then_throttles() -> None:
    # Given a provisioned table of 100 units a second that keeps 300 s of unused units, idle for 300 s
    table = WriteBucket(100, bank_s=300)
    # When 30,000 units arrive at once (300 s of its rate), then it takes them without a throttle
    assert table.admit(300.0, 30_000) == 300.0
    assert table.throttled_units == 0
    # and the next 1,000 units at that instant are throttled: 10 s at its rate
    assert table.admit(300.0, 1_000) == pytest.approx(310.0)
    assert table.throttled_units == 1_000
    # while an on-demand partition (one second banked) throttles the same rise at once
    partition = WriteBucket(100)
    partition.admit(300.0, 30_000)
    assert partition.throttled_units == 30_000 - 100


def provisioned(levels: float, **changes: Any) -> Deployment:
    """The short poll cycle on a provisioned table and due index of ``levels`` units a second each."""
    settings: dict[str, Any] = {
        "poll_interval_s": 10.0,
        "lead_s": 20.0,
        "capacity": "provisioned",
        "table_warm_wcu": levels,
        "index_wcu": levels,
        "table_bank_s": 300.0,
        "creates_ahead_s": 60.0,
    }
    return template_deployment().overridden("provisioned", **(settings | changes))


def test_a_provisioned_table_throttles_a_rise_only_past_its_burst_capacity() -> None:
    # Given capacity for 20 tasks a second (4 item writes on the table each: create, arm, record, and a margin)
    d = provisioned(80.0)
    steady = simulate(aws_platform(), d, Scenario("steady", rate=20, seconds=120))
    assert steady["dynamodb"]["table_throttled_units"] == 0
    assert steady["drift_ms"]["max"] < 50
    # When four times that rate lasts long enough to spend the banked units, then writes are throttled and
    # tasks fire late
    rise = simulate(aws_platform(), d, Scenario("rise", rate=80, seconds=600))
    assert rise["dynamodb"]["table_throttled_units"] > 0
    assert rise["drift_ms"]["max"] > 1_000


def test_provisioned_units_are_billed_by_the_hour_over_the_target_utilization() -> None:
    scenario = Scenario("steady", rate=400, seconds=300)  # enough units for the cents the figures keep
    on_demand = simulate(aws_platform(), provisioned(1e6, capacity="on-demand"), scenario)
    billed = simulate(aws_platform(), provisioned(1e6), scenario)

    ratio = billed["cost_usd"]["dynamodb_writes"] / on_demand["cost_usd"]["dynamodb_writes"]
    # (within the rounding of figures kept to the cent)
    assert ratio == pytest.approx(pricing.DDB_WCU_HOUR_USD / 3600 / 0.7 / pricing.DDB_WRU_USD, rel=0.05)


def test_creates_during_the_run_draw_on_the_tables_units() -> None:
    scenario = Scenario("steady", rate=20, seconds=120)
    made_before = simulate(aws_platform(), provisioned(1e6, creates_ahead_s=None), scenario)
    made_during = simulate(aws_platform(), provisioned(1e6), scenario)
    # the creates add no units to the bill (they are billed either way) but do reach the table
    assert made_during["cost_usd"]["dynamodb_writes"] == made_before["cost_usd"]["dynamodb_writes"]
    tight = simulate(aws_platform(), provisioned(40.0, table_bank_s=1.0), scenario)
    loose = simulate(aws_platform(), provisioned(40.0, table_bank_s=1.0, creates_ahead_s=None), scenario)
    assert tight["dynamodb"]["table_throttled_units"] > loose["dynamodb"]["table_throttled_units"]
