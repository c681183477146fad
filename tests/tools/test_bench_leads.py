"""The lead phases' judgements (punctual_tools.bench.leads, .restart): bounds, a restart's backlog and drain rate, and
their section of the drift page."""

from __future__ import annotations

from punctual_tools.bench import leads, pages, restart
from punctual_tools.bench.phase_parts import lead_seconds

KILL, UP = 100_000, 105_000


def test_a_rate_under_its_floor_is_missed_by_the_difference() -> None:
    # Given a drain rate that must be at least 200/s
    bound = leads.Bound("restart drain", 150.0, 200.0, "/s", at_least=True)
    # Then it is missed, by 50/s
    assert not bound.met
    assert bound.line() == "restart drain 150/s | target >= 200/s: MISSED by 50/s"
    assert leads.Bound("restart lost", 0, 0).line() == "restart lost 0 | target <= 0: MET"


def test_a_missing_figure_meets_a_bound_only_when_told() -> None:
    assert leads.Bound("drain", None, 200.0, at_least=True, none_meets=True).met
    assert leads.Bound("drain", None, 200.0, at_least=True).line() == "drain - | target >= 200: MISSED (no figure)"


def test_the_backlog_is_what_was_due_by_up_and_had_not_fired_before_the_kill() -> None:
    # Given tasks due before the kill (one fired then, one MISSED in its crash window), between the kill and up,
    # and long after up
    due = {"fired": KILL - 500, "missed": KILL - 100, "late-1": KILL + 1_000, "late-2": UP - 10, "later": UP + 20_000}
    arrived = {"fired": KILL - 499.0, "late-1": UP + 500.0, "late-2": UP + 1_000.0, "later": UP + 20_003.5}
    # When the restart is judged
    figures = restart.restart_figures(due, arrived, {"missed"}, KILL, UP)
    # Then the two due between the kill and up are the backlog, drained in 1 s; the last is judged as steady
    assert figures["backlog"] == 2
    assert figures["drained"] == 2
    assert figures["drain_s"] == 1.0
    assert figures["drain_rate_per_s"] == 2.0
    assert figures["after_up"] == [3.5]


def test_a_backlog_drained_before_up_has_no_rate_and_one_never_fired_counts_as_not_drained() -> None:
    due = {"a": KILL + 10, "b": KILL + 20}
    figures = restart.restart_figures(due, {"a": UP - 1.0}, set(), KILL, UP)
    assert figures["backlog"] == 2
    assert figures["drained"] == 1
    assert figures["drain_rate_per_s"] is None
    bounds = leads.lead_bounds({"restart": {**figures, "checker": checker()}})
    assert [b.name for b in bounds if not b.met] == ["restart drain"]


def test_leads_are_drawn_uniformly_within_their_range_and_the_same_each_run() -> None:
    drawn = lead_seconds(1_000, 2.0, 4.0)
    assert all(2.0 <= lead <= 4.0 for lead in drawn)
    assert drawn == lead_seconds(1_000, 2.0, 4.0)
    assert 2.9 < sum(drawn) / len(drawn) < 3.1


def checker(**counts: int) -> dict[str, int]:
    keys = ("lost", "extra", "unexplained_extra", "missed", "crash_windows", "due_in_windows", "missed_in_windows")
    return {**dict.fromkeys(keys, 0), "missed_outside_windows": 0, **counts}


def test_a_restart_judged_with_windows_counts_missed_outside_them_only() -> None:
    figures = {"backlog": 3, "drained": 3, "drain_rate_per_s": 250.0}
    bounds = leads.lead_bounds({"restart": {**figures, "checker": checker(missed=4, missed_in_windows=4)}})
    assert all(b.met for b in bounds)
    short = leads.lead_bounds({"short lead": {"checker": checker(missed=1)}})
    assert [b.name for b in short if not b.met] == ["short lead MISSED"]


def test_the_drift_page_has_a_section_on_the_lead_phases_with_the_footing_and_the_store_latency() -> None:
    summary = {"count": 10, "min": 1.0, "p50": 2.0, "p90": 3.0, "p99": 4.0, "max": 5.0}
    phases = {
        "short lead": {**summary, "checker": checker(), "cold_starts": 2, "invoked": 40, "store_latency": None},
        "restart": {
            **summary,
            "checker": checker(crash_windows=3, due_in_windows=12),
            "up_s": 6.5,
            "backlog": 900,
            "drain_s": 3.0,
            "drain_rate_per_s": 300.0,
            "store_latency": "lognormal p50 4 ms",
            "busy_starting": 0.97,
            "busy_draining": None,
            "cores": 2,
            "store_writes_per_s": 151.0,
            "drain_ceiling_per_s": 75.5,
        },
    }
    bounds = [leads.Bound("restart drain", 300.0, 200.0, "/s", at_least=True).as_dict()]
    report = {"profile": "lambda", "executor_memory_mb": 256, "cpu_quota": {"applied": True}}
    lines = pages.leads_page_lines({**report, "leads": {"phases": phases, "bounds": bounds}})
    text = "\n".join(lines)
    assert "## Short leads, a cold executor, a restart after a crash" in text
    assert "256 MB's CPU" in text
    assert "store latency model: lognormal p50 4 ms" in text
    assert "| restart drain | 300/s | ≥ 200/s: met |" in text
    assert "backlog 900 drained in 3.0 s = 300/s (the store took 151 writes/s from the client" in text
    assert "at two a task, 75.5 tasks/s at most)" in text
    assert "MISSED outside them; the 2 cores 97% busy coming up |" in text
    assert pages.leads_page_lines(report) == []


def test_how_busy_the_machine_was_is_read_between_the_samples_inside_the_span() -> None:
    samples = [(0.0, 0, 0), (1000.0, 150, 200), (2000.0, 350, 400), (3000.0, 360, 600)]
    assert restart.busy_share(samples, 0, 2000) == 0.875
    assert restart.busy_share(samples, 1000, 3000) == round(210 / 400, 3)
    assert restart.busy_share(samples, 500, 1500) is None  # one sample inside: no span to judge
    busy, total = restart.cpu_ticks()
    assert 0 <= busy <= total


def test_the_restart_row_printed_names_the_drains_ceiling_on_this_store() -> None:
    # Given a restart that drained 19.1/s while the store took 62.7 writes/s from the client in the same run
    figures = {"up_s": 24.1, "up_after_kill_s": 25.1, "backlog": 869, "drained": 869, "drain_s": 45.4}
    ceiling = {"drain_rate_per_s": 19.1, "store_writes_per_s": 62.7, "drain_ceiling_per_s": 31.3}
    notes = leads.phase_notes("restart", {**figures, **ceiling, "checker": checker()})
    # Then the printed row gives the drain beside the most this store allows
    assert "= 19.1/s (the store took 62.7 writes/s from the client in the same run" in notes
    assert "31.3 tasks/s at most)" in notes


def test_a_cold_row_says_when_its_inits_waited_for_a_core_here() -> None:
    # Given a cold phase whose 73 cold starts had 40 INITs wait for a core (up to 5.2 s), and one where none did
    figures = {"scheduled": 150, "fired": 150, "duplicates": 0, "cold_starts": 73, "invoked": 73}
    waited = leads.phase_notes(
        "cold", {**figures, "max_write_lag_s": 0.4, "checker": checker(), "init_waits": 40, "init_wait_ms_max": 5_210}
    )
    none = leads.phase_notes(
        "cold", {**figures, "max_write_lag_s": 0.4, "checker": checker(), "init_waits": 0, "init_wait_ms_max": 0}
    )
    # Then the first says it was measured with less CPU than AWS gives, and by how much; the second says nothing
    assert "cold starts 73 of 73 invocations, 40 of whose INITs waited for a core here, up to 5,210 ms" in waited
    assert "measured with less CPU than AWS gives" in waited
    assert "waited" not in none
    assert "cold starts 73 of 73 invocations; writes lag" in none
