"""The Now page's SVG charts: valid SVG (parsed as XML), one mark per figure, axes and titles, the log scale's
clipping and the hour's largest drift labelled."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from punctual_tools.console.charts import (
    DRIFT_FLOOR_MS,
    HEIGHT,
    MARGIN_BOTTOM,
    MARGIN_TOP,
    drift_chart,
    due_chart,
    nice_top,
    outcome_chart,
)
from punctual_tools.console.model import MinuteFigures

NS = {"svg": "http://www.w3.org/2000/svg"}
HOUR_START_MS = 1_900_000_020_000 - 1_900_000_020_000 % 60_000
BOTTOM = HEIGHT - MARGIN_BOTTOM


def parse(markup: str) -> ET.Element:
    root = ET.fromstring(markup)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def minutes(count: int = 60, **figures: list[float | None]) -> list[MinuteFigures]:
    return [
        MinuteFigures(minute_ms=HOUR_START_MS + i * 60_000, **{k: v[i] for k, v in figures.items()})  # type: ignore[arg-type]
        for i in range(count)
    ]


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iterfind(".//svg:text", NS)]


def y_labels(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iterfind(".//svg:text[@class='tick-label y']", NS)]


def test_the_due_chart_draws_one_bar_a_second_scaled_to_the_busiest() -> None:
    # Given 300 seconds ahead, 10 tasks in the busiest one (a round top: the scale's)
    due = [0] * 300
    due[0], due[10], due[299] = 10, 5, 1
    root = parse(due_chart(due))
    bars = root.findall(".//svg:rect[@class='bar']", NS)
    # Then one bar a second, the busiest reaching the top of the plot, half of it half as high
    assert len(bars) == 300
    heights = [float(b.get("height", "nan")) for b in bars]
    assert float(bars[0].get("y", "nan")) == MARGIN_TOP
    assert heights[10] == pytest.approx(heights[0] / 2)
    assert heights[1] == 0
    assert bars[10].findtext("svg:title", namespaces=NS) == "+10 s: 5 due"
    # And a title, axes and their labels
    assert root.findtext("svg:title", namespaces=NS) == "Tasks due per second, next 5 minutes (16 in all)"
    assert len(root.findall(".//svg:line[@class='axis']", NS)) == 2
    labels = texts(root)
    assert {"from now", "tasks due", "+1 min", "+5 min", "0", "10"} <= set(labels)
    assert y_labels(root) == ["0", "2", "4", "6", "8", "10"]


@pytest.mark.parametrize(
    ("busiest", "ticks"), [(0, ["0", "1"]), (2, ["0", "1", "2"]), (4, ["0", "1", "2", "3", "4", "5"])]
)
def test_a_count_axis_is_ticked_in_whole_counts(busiest: int, ticks: list[str]) -> None:
    assert y_labels(parse(due_chart([busiest, 0, 1]))) == ticks


def test_an_empty_horizon_still_draws_its_axes() -> None:
    root = parse(due_chart([0] * 60))
    assert len(root.findall(".//svg:rect[@class='bar']", NS)) == 60
    assert "+10 s" in texts(root)
    assert root.findtext("svg:title", namespaces=NS) == "Tasks due per second, next 60 s (0 in all)"


def test_the_outcome_chart_stacks_fired_missed_and_failed_per_minute() -> None:
    root = parse(
        outcome_chart(minutes(fired=[i % 5 for i in range(60)], missed=[1] * 60, failed=[i % 2 for i in range(60)]))
    )
    columns = root.findall(".//svg:g[@class='minute']", NS)
    assert len(columns) == 60
    # Minute 3: 3 fired, 1 MISSED, 1 FAILED, stacked in that order from the axis up
    segments = columns[3].findall("svg:rect", NS)
    assert [s.get("class") for s in segments] == ["fired", "missed", "failed"]
    tops = [float(s.get("y", "nan")) for s in segments]
    assert tops == sorted(tops, reverse=True)
    bottom_of_first = float(segments[0].get("y", "nan")) + float(segments[0].get("height", "nan"))
    assert bottom_of_first == pytest.approx(BOTTOM)
    # Minute 0 has no fire and no failure: its MISSED one alone
    assert [s.get("class") for s in columns[0].findall("svg:rect", NS)] == ["missed"]
    assert "120 fired, 60 MISSED, 30 FAILED" in (root.findtext("svg:title", namespaces=NS) or "")
    assert {"fired", "MISSED", "FAILED", "minute (UTC)", "tasks"} <= set(texts(root))


def test_the_drift_chart_draws_a_point_per_minute_with_a_figure_on_a_log_scale() -> None:
    # Given drift figures in 58 minutes of 60 (none at minutes 7 and 8), the largest 2,500 ms
    p50: list[float | None] = [1.0] * 60
    p99: list[float | None] = [10.0] * 60
    top: list[float | None] = [100.0] * 60
    for gap in (7, 8):
        p50[gap] = p99[gap] = top[gap] = None
    top[30] = 2_500.0
    p50[0] = -3.0  # fired early: drawn at the scale's floor
    root = parse(drift_chart(minutes(drift_p50_ms=p50, drift_p99_ms=p99, drift_max_ms=top)))
    paths = {p.get("class"): p.get("d", "") for p in root.iterfind(".//svg:path", NS)}
    assert set(paths) == {"line p50", "line p99", "line max"}
    for d in paths.values():
        assert d.count("M") + d.count("L") == 58
    # Log scale: 1, 10 and 100 ms are evenly spaced; the early fire sits on the floor, at the bottom
    y = {name: float(d.split()[1].split(",")[1]) for name, d in paths.items()}
    y_first = float(paths["line p50"].split()[0].split(",")[1])
    assert y["line p50"] - y["line p99"] == pytest.approx(y["line p99"] - y["line max"], abs=0.2)
    assert y_first == pytest.approx(BOTTOM)
    # The scale reaches the decade above the largest, which is labelled
    labels = texts(root)
    assert f"{DRIFT_FLOOR_MS:g} ms" in labels
    assert "10000 ms" in labels
    assert "largest: 2,500.0 ms" in labels


def test_an_hour_without_fires_says_so() -> None:
    root = parse(drift_chart(minutes()))
    assert root.findall(".//svg:path", NS) == []
    assert "no fire in the last hour" in texts(root)


@pytest.mark.parametrize(("value", "top"), [(0, 1), (1, 1), (3, 5), (7, 10), (10, 10), (11, 20), (4_999, 5_000)])
def test_the_count_scale_tops_at_one_two_or_five_times_a_power_of_ten(value: float, top: float) -> None:
    assert nice_top(value) == top
