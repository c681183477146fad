"""The console benchmark's page is made from its JSON, never typed, labels each page as its run measured it, and
says which pages missed the target."""

from __future__ import annotations

import json
from typing import Any

from punctual_tools.bench.console import render, verdict
from punctual_tools.bench.pages import PAGES


def _page(p99_ms: float, calls: dict[str, int]) -> dict[str, Any]:
    return {"path": "/", "ms": {"p50": p99_ms / 2, "p99": p99_ms, "max": p99_ms}, "store_calls": calls}


def _report(**figures: Any) -> dict[str, Any]:
    """A run's report over 100,000 tasks, 20 requests a page, with ``figures`` (its floor and its pages)."""
    return {
        "commit": "abc1234",
        "at": "2026-11-30T00:00:00+00:00",
        "tasks": 100_000,
        "repeats": 20,
        "seed_s": 1.0,
        "target_ms": 300.0,
        "footing": "a test",
        **figures,
    }


def test_the_published_page_is_what_its_json_makes() -> None:
    report = json.loads((PAGES / "console.json").read_text())
    assert (PAGES / "console.md").read_text() == render(report)


def test_a_page_past_the_target_is_missed_counted_and_judged_against_its_floor() -> None:
    # Given a run where the Tasks page took 60 ms (floor 20 ms) and the Schedules list 900 ms with a Scan
    report = _report(
        floor={"tasks": _page(20.0, {"Query": 4}), "schedules": _page(10.0, {"Scan": 1})},
        pages={"tasks": _page(60.0, {"Query": 8}), "schedules": _page(900.0, {"Scan": 36})},
    )
    # Then the verdicts and the ratios are the run's own
    assert verdict(report, "tasks") == {"p99_ms": 60.0, "met": True, "floor_p99_ms": 20.0, "ratio": 3.0}
    assert verdict(report, "schedules")["met"] is False
    page = render(report)
    assert "**1 of 2 pages within the target.**" in page
    assert "| **missed** | 10.0 ms | 90.0× | 36 Scan |" in page
    assert "Pages that scan the table: `schedules`." in page


def test_a_page_is_labelled_as_its_run_measured_it() -> None:
    # Given a run whose Schedules page was measured under a label of its own, and whose Tasks page carries none
    schedules = {**_page(900.0, {"Scan": 36}), "what": "Schedules: a filtered Scan of the table"}
    report = _report(floor={}, pages={"tasks": _page(60.0, {"Query": 8}), "schedules": schedules})
    # When its page is made / Then the Schedules row keeps the run's label, the Tasks row takes today's
    page = render(report)
    assert "| Schedules: a filtered Scan of the table | 450.0 |" in page
    assert "| Tasks, first page: active tasks in due order (the due index) | 30.0 |" in page
