"""The benchmarks' CPU accounting: /proc/<pid>/stat, a cgroup's cpu.stat, and what a phase cost each executor."""

from __future__ import annotations

import os

import pytest

from punctual_tools.bench.cpu_use import CpuUse, cpu_summary, delta, parse_cpu_stat, parse_proc_stat_cpu_s, sample


def test_process_cpu_is_utime_plus_stime_counted_after_the_command_name() -> None:
    # Given a stat line whose command name holds a space and a parenthesis
    line = "4242 (punctual (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 150 50 0 0 20 0 33 0 100 0 0\n"
    # When its CPU is read at 100 ticks a second
    # Then it is utime (150) + stime (50) ticks
    assert parse_proc_stat_cpu_s(line, 100) == pytest.approx(2.0)


def test_cpu_stat_v1_counts_throttled_time_in_ns() -> None:
    use = parse_cpu_stat("nr_periods 40\nnr_throttled 12\nthrottled_time 350000000\nnr_bursts 0\nburst_time 0\n")
    assert use == CpuUse(0.0, 0.35, 12, 40)


def test_cpu_stat_v2_counts_throttled_usec() -> None:
    use = parse_cpu_stat(
        "usage_usec 9000\nuser_usec 6000\nsystem_usec 3000\nnr_periods 8\nnr_throttled 2\nthrottled_usec 125000\n"
    )
    assert use == CpuUse(0.0, 0.125, 2, 8)


def test_a_phase_counts_what_each_process_used_since_the_reading_before() -> None:
    # Given two readings: worker 1 ran before and after, worker 2 started meanwhile, worker 3 ended meanwhile
    before = {1: CpuUse(1.0, 0.1, 1, 10), 3: CpuUse(5.0, 0.0, 0, 0)}
    after = {1: CpuUse(1.5, 0.3, 4, 20), 2: CpuUse(0.25, 0.05, 1, 3)}
    # When the phase's share is taken
    used = delta(before, after)
    # Then the new worker counts from its start and the ended one is not counted
    assert used[1] == CpuUse(pytest.approx(0.5), pytest.approx(0.2), 3, 10)  # type: ignore[arg-type]
    assert used[2] == after[2]
    assert 3 not in used


def test_the_summary_counts_executors_that_worked_only() -> None:
    uses = [CpuUse(0.4, 0.2, 5, 10), CpuUse(0.2, 0.0, 0, 10), CpuUse(0.0, 0.0, 0, 0)]  # the last stayed frozen
    summary = cpu_summary(uses)
    assert summary["executors"] == 2
    assert summary["cpu_s"] == pytest.approx(0.6)
    assert (summary["cpu_s_mean"], summary["cpu_s_max"]) == (pytest.approx(0.3), pytest.approx(0.4))
    assert (summary["throttled_s"], summary["throttled_s_max"]) == (pytest.approx(0.2), pytest.approx(0.2))
    assert (summary["nr_throttled"], summary["nr_periods"], summary["throttled_share"]) == (5, 20, 0.25)


def test_no_executor_worked() -> None:
    summary = cpu_summary([])
    assert summary["executors"] == 0
    assert summary["cpu_s_mean"] is None
    assert summary["throttled_share"] is None


def test_this_process_can_be_sampled_and_an_ended_one_cannot() -> None:
    mine = sample(os.getpid())
    assert mine is not None
    assert mine.cpu_s > 0
    assert sample(2**22 + 12345) is None  # beyond pid_max: no such process
