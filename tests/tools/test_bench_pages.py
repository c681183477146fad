"""The benchmark pages and the README's benchmark figures: made from the published figures, never typed."""

from __future__ import annotations

import doctest
import json
from pathlib import Path
from typing import Any

import pytest

from punctual_tools.bench import pages


def verdict(
    name: str, value: float, floor: float, ratio_target: float = 1.5, abs_target: float = 2.0
) -> dict[str, Any]:
    ratio = value / floor
    return {
        "name": name,
        "value": value,
        "floor": floor,
        "floor_name": f"floor/{name}",
        "abs_target": abs_target,
        "ratio_target": ratio_target,
        "ratio": ratio,
        "abs_met": value <= abs_target,
        "ratio_met": ratio <= ratio_target,
        "met": ratio <= ratio_target,
    }


def summary(p99: float) -> dict[str, Any]:
    return {"count": 10, "min": 0.0, "p50": p99 / 2, "p90": p99 * 0.9, "p99": p99, "max": p99 * 1.1}


def drift_report(profile: str, steady: float, burst: float) -> dict[str, Any]:
    return {
        "machine": "vm (2 cores)",
        "commit": "abc1234",
        "profile": profile,
        "executor_memory_mb": 256,
        "cpu_quota": {"applied": profile == "lambda"},
        "load_avg_before": [0.4, 0, 0],
        "load_avg_after": [0.5, 0, 0],
        "complete": True,
        "floors": {"floor/steady": {**summary(0.1), "processes": 1}},
        "phases": {"system/steady": summary(steady), "system/burst": {**summary(burst), "arrival": summary(9.0)}},
        "verdicts": [verdict("system/steady", steady, 0.1), verdict("system/burst", burst, 20.0, abs_target=90)],
        "pictures": ["/tmp/run/pictures/all-phases-cdf.png"],
    }


def test_a_drift_page_says_its_footing_and_judges_each_phase_against_its_floor(tmp_path: Path) -> None:
    # Given a Lambda-profile run whose burst missed its ratio target
    report = drift_report("lambda", 0.12, 45.0)
    # When its page is written
    page = pages.write_drift_page(report, tmp_path)
    text = page.read_text()
    # Then it names the footing, the commit, each verdict (the missed one marked) and the CDF picture
    assert "Lambda profile: executors and floors at 256 MB's CPU (0.145 of a core)" in text
    assert "commit: abc1234" in text
    assert "| system/steady | 0.120 | floor/system/steady | 0.100 | 1.20× | 1.5×: met | 2 ms: met |" in text
    assert "| system/burst | 45.000 | floor/system/burst | 20.000 | 2.25× | 1.5×: **missed** | 90 ms: met |" in text
    assert "| system/burst, arrival at the receiver |" in text
    assert "![drift CDF of every phase of the run](drift-lambda-cdf.png)" in text


def test_a_drift_page_says_which_floor_ran_in_its_phases_window(tmp_path: Path) -> None:
    # Given a run whose floor/steady fired beside system/steady, and a floor measured apart
    report = drift_report("lambda", 0.12, 45.0)
    report["floors"]["floor/steady"]["beside"] = "system/steady"
    report["floors"]["floor/burst"] = {**summary(20.0), "processes": 3}
    # When its page is written
    text = pages.write_drift_page(report, tmp_path).read_text()
    # Then the one row says where its floor ran, and the other says nothing of the kind
    assert "| floor/steady (1 floor process(es), beside system/steady) |" in text
    assert "| floor/burst (3 floor process(es)) |" in text


def test_the_page_helpers_examples_hold() -> None:
    assert doctest.testmod(pages).failed == 0


def test_a_drift_page_names_the_store_latency_model_its_run_named(tmp_path: Path) -> None:
    # Given a Lambda-profile run that names the model its store calls were delayed by
    report = {**drift_report("lambda", 0.12, 45.0), "store_latency_line": "dynamodb-in-region (median ...; seed 0)"}
    # When its page is written  Then its footing names the model
    text = pages.write_drift_page(report, tmp_path).read_text()
    assert "normal priority; store latency: dynamodb-in-region (median ...; seed 0)" in text
    # And a run that names none says nothing of it
    assert "store latency" not in pages.footing(drift_report("lambda", 0.12, 45.0))


def test_a_published_drift_page_shows_each_floors_spread_over_the_earlier_runs_on_its_footing(tmp_path: Path) -> None:
    # Given two earlier published runs on the same footing (one of them also carried in the other's history), one
    # on another footing, and a text that is not a report
    def run(commit: str, steady: float, detail: str = "2894 us every 20000 us, cgroup v1 at /a") -> dict[str, Any]:
        report = drift_report("lambda", 0.12, 45.0) | {"commit": commit}
        report["floors"]["floor/steady"] |= {"p99": steady}
        return report | {"floor_footing": {"detail": detail, "realtime": False}}

    first, second = run("aaa1111", 0.5), run("bbb2222", 1.5)
    second["floor_history"] = [{"commit": "aaa1111", "floors": {"floor/steady": 0.5}}]
    other = run("ccc3333", 9.0, detail="14471 us every 100000 us, cgroup v1 at /b")
    (tmp_path / "drift-lambda.json").write_text(json.dumps(second))
    # When a new run on that footing is published beside them
    report = run("ddd4444", 0.1, detail="2894 us every 20000 us, cgroup v1 at /c")
    texts = [json.dumps(first), json.dumps(other), "not json"]
    report["floor_history"] = pages.earlier_floor_runs([*texts, (tmp_path / "drift-lambda.json").read_text()], report)
    pages.publish_drift(report, tmp_path, readme=None)
    # Then its page sets this run's floor beside the earlier runs' on the same footing, each run counted once
    text = (tmp_path / "drift-lambda.md").read_text()
    assert "## Floors over repeated runs" in text
    assert "over the 2 earlier published run(s) on the same footing" in text
    assert "| floor/steady | 0.100 | 2 | 0.500 | 1.000 | 1.500 |" in text
    # And the history is kept in the published figures, so that the page can be made again from them alone
    kept = json.loads((tmp_path / "drift-lambda.json").read_text())
    assert [r["commit"] for r in kept["floor_history"]] == ["aaa1111", "bbb2222"]
    again = tmp_path / "again"
    again.mkdir()
    assert pages.write_drift_page(kept, again).read_text() == text
    # And a run with no earlier run on its footing has no such section
    assert pages.floor_spread_lines(run("eee5555", 0.1)) == []


def test_a_drift_page_says_what_the_store_carried_beside_what_each_phase_asked_for(tmp_path: Path) -> None:
    # Given a run whose steady phase asked for more tasks a second than the store took just before it, whose burst
    # measured the store too, and an older run's figures without the probe
    report = drift_report("lambda", 0.12, 45.0)
    report["phases"]["system/steady"] |= {"store_ceiling_per_s": 31.3, "demand_per_s": 100.0}
    report["phases"]["system/burst"] |= {"store_ceiling_per_s": 40.0, "demand_per_s": None}
    # When its page is written
    text = pages.write_drift_page(report, tmp_path).read_text()
    # Then the steady row says the phase asked for more than the store carries, the burst says it was one, and a
    # floor (no store) says nothing
    assert "| 31.3/s (asks 100/s: over) |" in text
    assert "| 40/s (a burst) |" in text
    assert "| floor/steady (1 floor process(es)) | 10 | 0.050 | 0.090 | 0.100 | 0.110 | - |" in text
    # And a phase the store carries is not marked over; one without the probe shows none
    assert pages.ceiling_cell({"store_ceiling_per_s": 62.0, "demand_per_s": 20.0}) == "62/s (asks 20/s)"
    assert pages.ceiling_cell(summary(1.0)) == "-"


def test_a_drift_page_says_by_how_much_each_target_is_missed_and_what_the_run_measured_that_explains_it(
    tmp_path: Path,
) -> None:
    # Given a run whose steady phase was throttled far more than its floor and asked more of the store than it
    # carried, whose burst had throttled invocations, and whose restart drained below its bound
    report = drift_report("lambda", 3.0, 45.0)
    report["floors"]["floor/system/steady"] = {
        **summary(0.1),
        "processes": 1,
        "cpu": {"nr_throttled": 3, "nr_periods": 300},
    }
    report["phases"]["system/steady"] |= {
        "cpu": {"throttled_share": 0.408},
        "store_ceiling_per_s": 31.3,
        "demand_per_s": 100.0,
    }
    report["phases"]["system/burst"] |= {
        "invocations": {"invoked": 60, "throttles": 14, "cold_starts": 30, "init_waits": 28, "init_wait_ms_max": 21400}
    }
    report["leads"] = {
        "phases": {
            "restart": {
                **summary(900.0),
                "checker": {
                    "lost": 0,
                    "extra": 0,
                    "missed": 0,
                    "crash_windows": 1,
                    "due_in_windows": 2,
                    "missed_outside_windows": 0,
                },
                "up_s": 3.0,
                "backlog": 750,
                "drain_s": 38.0,
                "drain_rate_per_s": 19.4,
                "store_writes_per_s": 64.2,
                "drain_ceiling_per_s": 32.1,
                "busy_draining": 0.874,
                "cores_draining": {"store": 0.51, "stack": 0.06, "executors": 1.08},
                "invocations": {"invoked": 57, "throttles": 0, "cold_starts": 12, "init_waits": 0},
            }
        },
        "bounds": [
            {"name": "restart drain", "value": 19.4, "unit": "/s", "target": 200, "at_least": True, "met": False}
        ],
    }
    # When its page is written
    text = pages.write_drift_page(report, tmp_path).read_text()
    # Then each missed target says by how much, and the figures that explain it
    why = text.split("## Why a target is missed", 1)[1]
    assert "- **system/steady**: p99 3.000 ms = 30.00× its floor (floor/system/steady, 0.100 ms) against 1.5×;" in why
    assert "it asks 100 tasks/s where the store carried 31.3/s just before it" in why.lower()
    assert "throttled in 40.8% of their CPU quota's periods, its floor's processes in 1.0%" in why
    assert "14 of its 60 executor invocations found the executors' concurrency spent" in why
    assert "28 of its 30 cold starts waited for a core, up to 21.4 s" in why
    assert "- **restart drain**: restart drain: 19.4/s against ≥ 200/s. Its backlog drained at 19.4/s" in why
    assert "32.1 tasks/s at most" in why
    assert (
        "while it drained, the 2 cores were 87% busy: DynamoDB Local used 0.51 of a core, the executors (the INITs "
        "of their 12 cold starts included) 1.08, the poller, fast path and API 0.06" in why
    )
    # And the table shows each phase's throttled share beside its floor's
    assert "| system/steady | 10 | 1.500 | 2.700 | 3.000 | 3.300 | 31.3/s (asks 100/s: over) | 40.8% |" in text
    # And a missed absolute target whose floor is itself over it says so
    report["verdicts"].append(verdict("webhook/burst arrival", 341.0, 324.0, abs_target=300))
    why = pages.write_drift_page(report, tmp_path).read_text().split("## Why a target is missed", 1)[1]
    assert (
        "- **webhook/burst arrival**: p99 341.000 ms = 1.05× its floor (floor/webhook/burst arrival, 324.000 ms) "
        "against 1.5×; 300 ms missed. Its floor (floor/webhook/burst arrival) is itself 324.000 ms, over the 300 ms "
        "target: this machine does not give that figure even without the scheduler." in why
    )
    # And a run that met every target has no such section
    assert "## Why" not in pages.write_drift_page(drift_report("lambda", 0.12, 25.0), tmp_path).read_text()


def test_the_readme_block_sets_the_lambda_profile_beside_the_local_one(tmp_path: Path) -> None:
    # Given both profiles' published figures and a README with the block's markers
    for profile, steady in (("lambda", 0.3), ("local", 0.05)):
        (tmp_path / f"drift-{profile}.json").write_text(json.dumps(drift_report(profile, steady, 25.0)))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n\n{pages.BEGIN}\nold figures\n{pages.END}\n\nafter\n")
    # When the block is made again
    pages.write_readme_block(readme, tmp_path)
    text = readme.read_text()
    # Then each phase has a column per profile, each labelled with its footing, and the rest is untouched
    assert "old figures" not in text
    assert text.startswith("intro\n")
    assert text.endswith("\nafter\n")
    assert "| phase | lambda profile | local profile |" in text
    assert "| system/steady | 0.300 (3.00×, **missed**) | 0.050 (0.50×) |" in text
    assert "- **lambda**: Lambda profile: executors and floors at 256 MB's CPU" in text
    assert "- **local**: local profile: whole cores and real-time firing" in text


ROOT = Path(__file__).resolve().parents[2]


def test_the_readmes_benchmark_figures_are_the_ones_the_published_figures_make() -> None:
    # Given the README and the figures published in docs/benchmarks
    text = (ROOT / "README.md").read_text()
    block = text[text.index(pages.BEGIN) : text.index(pages.END) + len(pages.END)]
    # Then the block is exactly what punctual_tools.bench.pages makes of them: nobody typed a figure
    assert block == "\n".join(pages.readme_block_lines(ROOT / "docs" / "benchmarks"))


@pytest.mark.parametrize("profile", pages.PROFILES)
def test_a_published_drift_page_is_the_one_its_figures_make(profile: str, tmp_path: Path) -> None:
    published = ROOT / "docs" / "benchmarks" / f"drift-{profile}.json"
    if not published.is_file():
        pytest.skip(f"no {profile} drift page published yet (make bench writes it)")
    made = pages.write_drift_page(json.loads(published.read_text()), tmp_path)
    assert made.read_text() == published.with_suffix(".md").read_text()


def test_the_published_scale_page_is_the_one_its_figures_make(tmp_path: Path) -> None:
    published = ROOT / "docs" / "benchmarks" / "scale.json"
    if not published.is_file():
        pytest.skip("no scale page published yet (make scale writes it)")
    made = pages.write_scale_page(json.loads(published.read_text()), tmp_path)
    assert made.read_text() == published.with_suffix(".md").read_text()


SCALE_FLOOR = {"count": 10, "p50": 0.01, "p90": 0.01, "p99": 0.02, "max": 0.1}
SCALE_PHASE = {"scheduled": 10, "fired": 10, "duplicates": 0, "count": 10, "p50": 0.1, "p90": 0.2, "max": 1.0}


def scale_report(**changes: Any) -> dict[str, Any]:
    """A scale run whose store took 200 tasks/s and that held 150/s, with ``changes`` over it."""
    return {
        "machine": "m (2 cores)",
        "load_avg_before": [1.0, 1.0, 1.0],
        "load_avg_after": [1.0, 1.0, 1.0],
        "floor_steady": {"150": SCALE_FLOOR},
        "floor_burst": SCALE_FLOOR,
        "local_settings": {"poll_interval_s": 5, "lead_ms": 90_000, "max_batch_size": 2000, "writer": "batch_write"},
        "store_ceiling": {"items": 10, "create_per_s": 600, "arm_per_s": 600, "record_per_s": 600, "tasks_per_s": 200},
        "sustained_rate_per_s": 150,
        "sustained_share_of_ceiling": 0.75,
        "sustained_share_target": 0.8,
        "sustained": [{**SCALE_PHASE, "rate": 150, "p99": 0.3, "ok": True}],
        "burst": {**SCALE_PHASE, "p99": 0.4},
        "pictures": [],
        **changes,
    }


def test_a_scale_page_judges_the_sustained_rate_against_the_stores_ceiling_and_says_why_a_rate_failed(
    tmp_path: Path,
) -> None:
    # Given a run whose store took 200 tasks/s, that held 150/s and failed 300/s on its writes
    failed = {**SCALE_PHASE, "rate": 300, "p99": 0.3, "ok": False, "writes_kept_up": False, "max_write_lag_s": 2.5}
    report = scale_report(
        floor_steady={"150": SCALE_FLOOR, "300": SCALE_FLOOR},
        sustained=[{**SCALE_PHASE, "rate": 150, "p99": 0.3, "ok": True}, failed],
    )
    # When its page is made
    text = pages.write_scale_page(report, tmp_path).read_text()
    # Then the share of the ceiling is judged against its target, each phase's ratio and verdict shown
    assert "**150/s = 0.75× the store's ceiling** (target ≥ 0.8×: **missed**)" in text
    assert "| sustained 150/s | 10 | 0.100 | 0.200 | 0.300 | 1.000 | 15.00× | 10 of 10 | ok |" in text
    assert "failed: writes lagged up to 2.5 s" in text
    assert "| burst of 10 | 10 | 0.100 | 0.200 | 0.400 | 1.000 | 20.00× | 10 of 10 | - |" in text
    assert "![" not in text
    # And floors with no footing recorded are said to have had more than the executors
    assert "Floors: one process on whole cores at normal priority: **more than the executors get**" in text


def test_a_scale_page_says_what_a_burst_became_and_why_when_the_store_could_not_arm_it(tmp_path: Path) -> None:
    # Given a burst of 20,000 of which the store held most MISSED, and a store that armed 100 a second in single
    # writes, against 150 s from the dispatching poll to the end of the grace
    report = scale_report(
        store_ceiling={
            "items": 10,
            "write_batch": "single",
            "create_per_s": 600,
            "arm_per_s": 100,
            "record_per_s": 600,
            "tasks_per_s": 75,
        },
        burst={
            **SCALE_PHASE,
            "p99": 0.4,
            "outcomes": {"MISSED": 19_000, "SUCCEEDED": 1_000},
            "store_arm_s": 200.0,
            "window_s": 150.0,
        },
    )
    # When its page is made
    text = pages.write_scale_page(report, tmp_path).read_text()
    # Then the burst's row counts each outcome and gives the store's arming time against the tasks' window
    assert "| MISSED 19,000, SUCCEEDED 1,000: the store arms 20,000 in 200 s at its ceiling, its tasks had 150 s |" in (
        text
    )
    # And the ceiling says in which write mode it was measured
    assert "(DynamoDB Local alone, 10 items; single conditional writes, as on AWS)" in text


def test_a_scale_page_says_where_its_floors_stood_and_how_many_processes_fired_the_burst(tmp_path: Path) -> None:
    # Given a run whose floors stood at 256 MB's quota, the burst's over 24 processes
    report = scale_report(
        floor_footing={"line": "floors: profile lambda, each floor process on 256 MB's CPU quota"},
        floor_burst={**SCALE_FLOOR, "processes": 24},
    )
    # When its page is made  Then it names the footing and the burst floor's processes
    text = pages.write_scale_page(report, tmp_path).read_text()
    assert (
        "Floors, measured after the stack stopped, with no database: profile lambda, each floor process on 256 MB's"
        in text
    )
    assert "| floor/burst (24 processes) | 10 |" in text


def test_the_published_faults_page_is_the_one_its_figures_make(tmp_path: Path) -> None:
    published = ROOT / "docs" / "benchmarks" / "faults.json"
    if not published.is_file():
        pytest.skip("no faults page published yet (make faults writes it)")
    made = pages.write_faults_page(json.loads(published.read_text()), tmp_path)
    assert made.read_text() == published.with_suffix(".md").read_text()


def test_the_faults_page_counts_the_missed_inside_and_outside_the_crash_windows(tmp_path: Path) -> None:
    # Given a SIGKILL run where 2 tasks were due in the windows and both were MISSED, and 95 of 100 due after
    # the kill arrived, the last late one 3 s after the restart was up
    where = {"machine": "m (2 cores)", "commit": "abc1234"}
    kill = {
        **where,
        "tasks": 120,
        "burst": 50,
        "burst_due_after_kill_s": 8.0,
        "restart_after_kill_s": 1.0,
        "up_after_kill_s": 4.0,
        "fenced_after_kill_s": 2.5,
        "crash_windows": 3,
        "due_in_windows": 2,
        "missed_in_windows": 2,
        "missed_outside_windows": 0,
        "due_after_kill": 100,
        "arrived_after_kill": 95,
        "taken_over": 60,
        "late_until_after_up_s": 3.0,
        "p99_ms": {"burst after the restart": 812.5},
        "lost": 0,
        "unexplained_extra": 0,
    }
    lease = {
        **where,
        "tasks": 250,
        "policy": "skip",
        "due_in_window": 14,
        "missed": 14,
        "fired_again": 0,
        "taken_over_after_lapse_ms": 900,
        "due_later": 230,
        "late_after_takeover": 0,
        "lost": 0,
        "unexplained_extra": 0,
    }
    report = {"scenarios": {"sigkill": kill, "lease-skip": lease}}
    # When its page and README line are made
    text = pages.write_faults_page(report, tmp_path).read_text()
    readme = "\n".join(pages.faults_readme_lines(report))
    # Then each target is judged where the figures say, and the README names the counts and the page
    assert "| MISSED outside them | 0 | 0: met |" in text
    assert "| due after the kill, arrived | 95 of 100 (95.0%) | ≥ 90%: met |" in text
    assert "| 3 s after it was up | on time: **missed** |" in text
    assert "| burst after the restart | 812.500 |" in text
    assert "Due in its window 14: MISSED 14" in text
    assert "95 of 100 tasks due after the kill arrived, 2 MISSED, all in the crash windows (2 due in them)" in readme
    assert "commit abc1234; [page](docs/benchmarks/faults.md)" in readme
    assert "Lambda's retries" not in readme


def test_a_scale_page_names_the_store_latency_model_its_stack_ran_under(tmp_path: Path) -> None:
    # Given a scale run whose stack named its store latency model among its limits, and one from before the model
    named = scale_report(executors=["profile lambda", "store latency (the functions' DynamoDB calls): in-region"])
    # When their pages are written
    text = pages.write_scale_page(named, tmp_path).read_text()
    older = pages.write_scale_page(scale_report(executors=["profile lambda"]), tmp_path)
    # Then the page names the model, or says the run named none
    assert "- store latency (the functions' DynamoDB calls): in-region" in text
    assert "- store latency: this run named no model" in older.read_text()
