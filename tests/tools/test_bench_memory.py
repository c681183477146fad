"""The precision/cost frontier's pure parts: the cost adapter, the rows,
the verdicts and the picture's points."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from punctual_tools import cost
from punctual_tools.bench import memory


def test_the_cost_adapter_prices_each_size_in_the_targets_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a cost model whose price grows with the executor's memory
    calls: list[tuple[float, int]] = []

    class Month:
        def __init__(self, mb: int) -> None:
            self.mb = mb

        def per_million(self, in_target: bool | None = True) -> float:
            assert in_target is True
            return self.mb / 100

    def monthly_cost(counted: Any, volume: float, executor_memory_mb: int | None = None) -> Month:
        assert counted == "counts"
        assert executor_memory_mb is not None
        calls.append((volume, executor_memory_mb))
        return Month(executor_memory_mb)

    monkeypatch.setattr(cost, "run_scenario", lambda measure_logs=True: "scenario")
    monkeypatch.setattr(cost, "counts", lambda scenario: "counts")
    monkeypatch.setattr(cost, "monthly_cost", monthly_cost)
    # When two sizes are priced at two volumes
    priced = memory.cost_per_million((256, 512), (1e6, 1e8))
    # Then each size has its price at each volume, from the model's own function
    assert priced == {256: {1e6: 2.56, 1e8: 2.56}, 512: {1e6: 5.12, 1e8: 5.12}}
    assert sorted(calls) == [(1e6, 256), (1e6, 512), (1e8, 256), (1e8, 512)]


def size(mb: int, p99s: dict[str, float], floor: float) -> dict[str, Any]:
    phases = {
        name: memory.phase_figures([p99s[name] / 2, p99s[name]], [floor / 2, floor], None, memory.TARGETS[name], name)
        for name in memory.PHASES
    }
    return {"memory_mb": mb, "cpu_share": mb / 1769, "cpu_quota": {"applied": True}, "phases": phases, "complete": True}


def test_a_phase_is_judged_against_its_same_quota_floor() -> None:
    figures = memory.phase_figures(
        [1.0, 3.0], [1.0, 2.0], {"executors": 1}, (1.5, 2.0), "steady", extra={"scheduled": 2}
    )
    assert (figures["p99"], figures["floor"]["p99"], figures["ratio"]) == (3.0, 2.0, 1.5)
    assert figures["verdict"]["ratio_met"]
    assert not figures["verdict"]["abs_met"]
    assert figures["verdict"]["floor_name"] == "floor/steady"
    assert figures["scheduled"] == 2
    assert figures["cpu"] == {"executors": 1}


def test_the_frontier_table_and_its_picture_have_a_row_and_a_point_per_size() -> None:
    sizes = [size(256, dict.fromkeys(memory.PHASES, 9.0), 3.0), size(1769, dict.fromkeys(memory.PHASES, 1.0), 1.0)]
    costs = {256: {1e8: 4.2, 1e6: 16.5}, 1769: {1e8: 9.77, 1e6: 91.2}}
    lines = memory.frontier_lines(sizes, costs, 1e8, default_mb=256)
    assert lines[1].startswith("256 MB (default)")
    assert "4.20" in lines[1]
    assert "9.000 ms (3.00x)" in lines[1]
    assert lines[2].startswith("1769 MB ")
    assert "1.000 ms (1.00x)" in lines[2]
    points = memory.frontier_points(sizes, costs, 1e8)
    assert points["steady"] == [(4.2, 9.0, "256 MB"), (9.77, 1.0, "1769 MB")]
    assert points["floor/steady"] == [(4.2, 3.0, "256 MB"), (9.77, 1.0, "1769 MB")]
    table = memory.size_lines(sizes[0], costs[256], 1e8)
    assert "$4.20 per million at 100 M tasks/month" in table[0]
    rows = {name: next(line for line in table[2:] if line.strip().startswith(name)) for name in memory.PHASES}
    assert "MISSED | MISSED" in rows["steady"]  # 3x its floor, and over 2 ms
    assert "MISSED | MET" in rows["burst 250"]  # 3x its floor, within 90 ms
    assert [v.met for v in memory.verdicts_of(sizes[1])] == [True] * 4


def test_sizes_are_lambdas() -> None:
    assert memory.parse_sizes("256,1769") == (256, 1769)
    with pytest.raises(argparse.ArgumentTypeError):
        memory.parse_sizes("64")
    with pytest.raises(argparse.ArgumentTypeError):
        memory.parse_sizes("")


def test_the_choice_is_the_cheapest_size_meeting_every_ratio_target() -> None:
    # Given 256 MB missing the bursts' ratios, and 512 and 1,024 MB meeting everything at a higher price
    p99s = {name: 1.0 for name in memory.PHASES}
    bursty = {**p99s, "burst 250": 9.0, "burst 2000": 9.0}
    sizes = [size(256, bursty, 1.0), size(512, p99s, 1.0), size(1024, p99s, 1.0)]
    costs = {256: {1e8: 2.0}, 512: {1e8: 3.0}, 1024: {1e8: 5.0}}
    # When the run chooses
    mb, why = memory.choose_size(sizes, costs, 1e8)
    # Then it is 512 MB, the cheaper of the two that meet every target
    assert mb == 512
    assert "every phase" in why


def test_without_a_size_meeting_everything_the_choice_meets_the_most_and_never_loses_a_task() -> None:
    # Given no size meeting every ratio target: 256 MB misses two, 512 MB one but lost a task, 1,024 MB one
    p99s = {name: 1.0 for name in memory.PHASES}
    sizes = [
        size(256, {**p99s, "burst 250": 9.0, "burst 2000": 9.0}, 1.0),
        {**size(512, {**p99s, "burst 2000": 9.0}, 1.0), "complete": False},
        size(1024, {**p99s, "burst 2000": 9.0}, 1.0),
    ]
    costs = {256: {1e8: 2.0}, 512: {1e8: 3.0}, 1024: {1e8: 5.0}}
    # When the run chooses
    mb, why = memory.choose_size(sizes, costs, 1e8)
    # Then it is 1,024 MB: the most targets met among the sizes that fired every task once, and it says so
    assert mb == 1024
    assert "3 of 4" in why


def report_of(sizes: list[dict[str, Any]], commit: str, choice: int) -> dict[str, Any]:
    return {
        "machine": "vm (2 cores)",
        "commit": commit,
        "profile": "lambda",
        "load_avg_before": [0.5, 0, 0],
        "load_avg_after": [0.6, 0, 0],
        "template_default_mb": 256,
        "args": {"volume": 1e8},
        "cost_scope": "Lambda + DynamoDB + poller",
        "picture": None,
        "cost_per_million": {str(s["memory_mb"]): {"1e+08": 4.0} for s in sizes},
        "sizes": sizes,
        "choice": {"memory_mb": choice, "why": "the cheapest"},
    }


def test_the_page_shows_each_size_and_phase_and_whether_two_runs_agree(tmp_path: Path) -> None:
    # Given two runs at 256 and 512 MB whose verdicts differ on one phase (512 MB's steady)
    p99s = {name: 1.0 for name in memory.PHASES}
    first = report_of([size(256, p99s, 1.0), size(512, p99s, 1.0)], "aaa1111", 256)
    second = report_of([size(256, p99s, 1.0), size(512, {**p99s, "steady": 9.0}, 1.0)], "bbb2222", 256)
    page = tmp_path / "benchmarks" / "memory.md"
    # When each is published in turn
    memory.publish(first, page)
    memory.publish(second, page)
    text = page.read_text()
    # Then the page is the second run's, with both runs' verdicts side by side and the disagreement named
    assert "commit: bbb2222" in text
    assert "run 1 (aaa1111" in text
    assert "run 2 (bbb2222" in text
    for mb in (256, 512):
        for name in memory.PHASES:
            assert f"| {mb} MB | {name} |" in text
    assert "| 512 MB | steady | met (1.00x) | missed (9.00x) | NO |" in text
    # and it names the store latency model its stacks ran under (a run that named none says so)
    assert "- store latency: this run named no model" in text
    named = [size(256, p99s, 1.0) | {"store_latency_line": "store latency (the executors' DynamoDB calls): in-region"}]
    assert "- store latency (the executors' DynamoDB calls): in-region" in memory.page_lines(
        report_of(named, "ccc3333", 256)
    )
    assert "differ on 1" in text
    # and both runs' figures stay beside it, from which the page is made again to the byte
    again = memory.write_page(
        json.loads((page.parent / "memory.json").read_text()),
        tmp_path / "again.md",
        earlier=[json.loads((page.parent / "memory-previous.json").read_text())],
    )
    assert again.read_text() == text


def test_the_published_frontier_page_is_the_one_its_figures_make(tmp_path: Path) -> None:
    # Given the frontier page in docs/benchmarks and the figures beside it
    docs = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
    latest, previous = docs / "memory.json", docs / "memory-previous.json"
    if not latest.is_file():
        pytest.skip("no frontier page published yet (make bench-memory writes it)")
    # When the page is made again from them
    earlier = [json.loads(previous.read_text())] if previous.is_file() else []
    made = memory.write_page(json.loads(latest.read_text()), tmp_path / "memory.md", earlier=earlier)
    # Then it is the page as published: nobody edited the figures by hand
    assert made.read_text() == (docs / "memory.md").read_text()
