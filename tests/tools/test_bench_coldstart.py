"""The cold-start benchmark's pure parts: the shortest leads it names, the batch it sends, and how it judges the
first fire of a cold executor."""

from __future__ import annotations

from punctual.config.settings import Settings
from punctual_tools.bench import coldstart


def test_the_poll_s_shortest_lead_is_the_fast_path_margin_and_the_fast_path_s_is_the_drift_bench_s() -> None:
    # Given the default settings
    settings = Settings()

    # When the benchmark names the shortest leads
    leads = coldstart.shortest_leads(settings)

    # Then a poll dispatches at least the fast-path margin ahead, and the fast path at the drift benchmark's 2 s
    assert leads["poll"]["lead_ms"] == settings.fast_path_margin_ms == 10_000
    assert leads["fast path"]["lead_ms"] == 2_000
    assert all(lead["why"] for lead in leads.values())


def test_a_batch_s_first_task_is_due_at_the_lead_and_the_others_after_it() -> None:
    # When a batch of three is shaped for a 2 s lead
    offsets = coldstart.batch_offsets(3, 2_000)

    # Then the first is due at the lead, the others a spacing apart after it
    assert offsets == [2_000, 2_000 + coldstart.SPACING_MS, 2_000 + 2 * coldstart.SPACING_MS]


def test_the_first_fire_of_the_first_task_is_the_one_judged() -> None:
    # Given a fire log with another task's fire, then the first task fired twice
    entries = [
        {"task_id": "cold-1", "due_ms": 1_000, "fired_ms": 1_000.5},
        {"task_id": "cold-0", "due_ms": 900, "fired_ms": 900.25},
        {"task_id": "cold-0", "due_ms": 900, "fired_ms": 950.0},
    ]

    # When the first task's drift is read
    drift = coldstart.first_fire_drift(entries, "cold-0")

    # Then it is its first fire's, and a task that never fired has none
    assert drift == 0.25
    assert coldstart.first_fire_drift(entries, "cold-9") is None


def test_the_slack_is_what_the_lead_left_after_the_arm_and_is_negative_when_late() -> None:
    # Given a task due at 10,000 ms
    # Then armed at 9,000 ms it left 1,000 ms, armed at 10,001 ms it was 1 ms short, never armed: unknown
    assert coldstart.slack_ms(10_000, 9_000) == 1_000
    assert coldstart.slack_ms(10_000, 10_001) == -1
    assert coldstart.slack_ms(10_000, None) is None


def test_a_row_meets_the_target_within_2_ms_and_within_1_5x_the_floor() -> None:
    # Given two cold runs whose first fires were 0.03 ms late, and a floor of 0.025 ms
    runs = [
        {"init_ms": 700.0, "arm_ms": 40.0, "slack_ms": 1_250.0, "drift_ms": 0.03},
        {"init_ms": 800.0, "arm_ms": 50.0, "slack_ms": 1_150.0, "drift_ms": 0.03},
    ]

    # When the row is summarised
    row = coldstart.summarize_runs(runs, [0.025], "cold")

    # Then INIT, slack and drift are summarised, and both targets are met (1.2x the floor)
    assert row["init_ms"] == {"p50": 700.0, "max": 800.0}
    assert row["slack_ms"] == {"p50": 1_150.0, "min": 1_150.0}
    assert row["slack_left"] is True
    assert row["verdict"]["abs_met"]
    assert row["verdict"]["ratio_met"]


def test_a_cold_executor_whose_init_outlasts_the_lead_misses_and_a_run_without_a_fire_is_counted() -> None:
    # Given one run armed 3.7 s after its task was due (fired 3.7 s late) and one that never fired
    runs: list[dict[str, float | None]] = [
        {"init_ms": 5_600.0, "arm_ms": 116.0, "slack_ms": -3_716.0, "drift_ms": 3_717.0},
        {"init_ms": None, "arm_ms": None, "slack_ms": None, "drift_ms": None},
    ]

    # When the row is summarised against a floor of 0.02 ms
    row = coldstart.summarize_runs(runs, [0.02], "cold")

    # Then no slack was left, one of two runs fired, and both targets are missed
    assert (row["runs"], row["fired"]) == (2, 1)
    assert row["slack_left"] is False
    assert not row["verdict"]["abs_met"]
    assert not row["verdict"]["ratio_met"]
    floors = {"log": {"p50": 0.02, "p99": 0.02, "import_p50": 2_800.0}}
    lines = coldstart.size_lines(256, {"2000 / quota / log": row}, floors)
    assert any("1 of 2 runs without a fire" in line for line in lines)
