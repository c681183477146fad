"""The simulation's components (punctual_tools.sim): each mechanism's rule, deterministic and fast."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from punctual_tools.sim.components import AsyncQueue, ScalingRate, WriteBucket, admit_write, fire_times
from punctual_tools.sim.model import Scenario, batch_sizes, simulate
from punctual_tools.sim.params import aws_platform, template_deployment


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
