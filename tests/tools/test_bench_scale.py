"""The scale benchmark's burst floor is cut as the stack's poller cuts the burst, so that it stands where the
executors stand: one floor process per batch, each with an executor's CPU quota."""

from __future__ import annotations

from punctual.config.settings import Settings
from punctual_tools.bench import scale


def test_the_burst_floor_has_a_process_per_batch_the_poller_would_make() -> None:
    # Given the scale stack's executors: 256 MB (33 fires a quota period), batches of 2,000, 48 at once
    settings = Settings(executor_memory_mb=256, max_batch_size=2_000, executor_concurrency=48)
    # When 20,000 due at one instant are cut
    shares = scale.burst_cut(settings, 20_000)
    # Then the quota's cut gives way to the concurrency bound: no more batches than half the executors allowed
    assert sum(shares) == 20_000
    assert len(shares) == settings.quota_cut_max_batches == 24
    assert max(shares) == 834  # the least cap that keeps within 24 batches


def test_a_burst_one_quota_period_fires_is_one_floor_process() -> None:
    # Given the same executors  When as many are due at one instant as a period's quota fires  Then one batch,
    # one floor process
    settings = Settings(executor_memory_mb=256, max_batch_size=2_000, executor_concurrency=48)
    assert settings.max_fires_at_once is not None
    assert scale.burst_cut(settings, settings.max_fires_at_once) == [settings.max_fires_at_once]


def test_the_rate_ladder_has_a_rung_at_the_targets_share_of_the_ceiling() -> None:
    # Given steps of 100 and a store that took 159 tasks/s in this run
    rates = scale.ladder([100, 200, 300], 159.0)
    # Then 0.8x its ceiling is tried between them, so the verdict does not hang on the steps
    assert rates == [100, 128, 200, 300]
    assert rates[1] / 159.0 >= scale.CEILING_SHARE_TARGET


def test_without_given_rates_the_ladder_climbs_in_shares_of_the_ceiling_from_well_below_it() -> None:
    # Given a store that took 60 tasks/s in this run (single writes), and no rates given
    rates = scale.ladder([], 60.0)
    # Then the first rung is a quarter of it, so a run's verdict never hangs on a first step above the ceiling,
    # and the target's rung is among them
    assert rates[0] == 15
    assert 48 in rates
    assert rates == sorted(rates)
