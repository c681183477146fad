"""Drift pictures and the benchmarks' verdicts, on a small synthetic fire log."""

from __future__ import annotations

import builtins
import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from punctual.domain.keys import from_ms
from punctual.domain.model import Task, TaskStatus
from punctual.targets import LogAction
from punctual_tools import cli
from punctual_tools.drift import (
    PlotsUnavailableError,
    entries_from_tasks,
    judge,
    read_fire_log,
    save_cdf,
    save_frontier,
    save_pictures,
    series_of,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fire_log(path: Path) -> Path:
    """Ten tasks due 100 ms apart (drift 0.01 .. 10 ms), a duplicate of one, a non-JSON line and a foreign task."""
    due = [1_000 + 100 * i for i in range(10)]
    lines = [
        json.dumps({"task_id": f"run-{i}", "due_ms": d, "fired_ms": d + 10 ** (i / 3 - 2)}) for i, d in enumerate(due)
    ]
    lines.insert(3, json.dumps({"task_id": "run-1", "due_ms": 1_100, "fired_ms": 1_900}))  # a later duplicate
    lines.insert(5, "not json")
    lines.append(json.dumps({"task_id": "other-1", "due_ms": 1, "fired_ms": 2}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_series_keeps_the_first_fire_of_each_task_and_counts_the_others(tmp_path: Path) -> None:
    # Given a fire log with a duplicate fire, a line that is not JSON and a task of another run
    entries = read_fire_log(fire_log(tmp_path / "fires.jsonl"), prefix="run-")
    # When it becomes a series
    series = series_of("run", entries)
    # Then each task counts once, with its first fire's drift, and the duplicate is counted
    assert len(series.fires) == 10
    assert series.duplicates == 1
    assert series.drifts[1] == pytest.approx(10 ** (1 / 3 - 2))
    assert all(f.task_id.startswith("run-") for f in series.fires)


def test_entries_without_times_are_skipped() -> None:
    series = series_of(
        "x",
        [
            {"task_id": "a"},
            {"task_id": "b", "due_ms": "x", "fired_ms": 1},
            {"task_id": "c", "due_ms": 1, "fired_ms": float("nan")},
            {"task_id": "d", "due_ms": 1, "fired_ms": 3},
        ],
    )
    assert [f.task_id for f in series.fires] == ["d"]
    assert series.drifts == [2]


def test_table_entries_come_from_fired_tasks_only() -> None:
    due = from_ms(1_700_000_000_000)
    fired = Task(
        task_id="a",
        due_at=due,
        action=LogAction(),
        status=TaskStatus.SUCCEEDED,
        drift_ms=0.25,
        fired_at=due + timedelta(milliseconds=0),
    )
    pending = Task(task_id="b", due_at=due, action=LogAction())
    assert entries_from_tasks([fired, pending]) == [
        {"task_id": "a", "due_ms": 1_700_000_000_000, "fired_ms": 1_700_000_000_000.25}
    ]


def test_pictures_are_three_pngs(tmp_path: Path) -> None:
    # Given a small series with a zero and a slightly negative drift (log axes must cope)
    series = series_of(
        "run",
        [
            *read_fire_log(fire_log(tmp_path / "fires.jsonl"), "run-"),
            {"task_id": "run-zero", "due_ms": 5, "fired_ms": 5},
            {"task_id": "run-neg", "due_ms": 5, "fired_ms": 4.9999},
        ],
    )
    # When its pictures are saved
    paths = save_pictures(series, tmp_path / "out")
    # Then there are a histogram, a timeline and a CDF, each a PNG
    assert [p.name for p in paths] == ["run-histogram.png", "run-timeline.png", "run-cdf.png"]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC


def test_a_cdf_of_several_series_and_of_none(tmp_path: Path) -> None:
    one = series_of("a", [{"task_id": "1", "due_ms": 0, "fired_ms": 0.5}])
    empty = series_of("b", [])
    assert save_cdf([one, empty], tmp_path / "all.png").read_bytes()[:8] == PNG_MAGIC
    assert save_pictures(empty, tmp_path, "empty")[0].read_bytes()[:8] == PNG_MAGIC


def test_a_caption_says_the_figures_of_its_fires_fractions_of_a_ms_included() -> None:
    # Given fires due at fractional instants (a spread floor's), each started 0.017 ms after its instant
    entries = [
        {"task_id": str(i), "due_ms": 1_000 + i * 1000 / 3, "fired_ms": 1_000 + i * 1000 / 3 + 0.017} for i in range(9)
    ]
    # Then the series (what the pictures draw and caption) keeps that drift, not one rounded to the ms
    series = series_of("floor/steady", entries)
    assert series.drifts == pytest.approx([0.017] * 9)


def test_the_frontier_picture_is_a_png_with_a_line_per_phase(tmp_path: Path) -> None:
    lines = {"steady": [(9.77, 0.0, "1769 MB"), (4.2, 9.0, "256 MB")], "burst": [(4.2, 30.0, "256 MB")], "none": []}
    path = save_frontier(lines, tmp_path / "pics" / "frontier.png", title="drift p99 against $/M")
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_without_matplotlib_the_error_says_which_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(PlotsUnavailableError, match=r"punctual\[plots\]"):
        save_pictures(series_of("a", []), tmp_path)


def test_the_cli_saves_the_pictures_and_names_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = fire_log(tmp_path / "fires.jsonl")
    code = cli.main(
        ["--home", str(tmp_path), "drift", "--fire-log", str(log), "--prefix", "run-", "--out", str(tmp_path / "pics")]
    )
    assert code == 0
    printed = capsys.readouterr().out.split()
    assert [Path(p).name for p in printed] == ["run-histogram.png", "run-timeline.png", "run-cdf.png"]
    assert all(Path(p).is_file() for p in printed)


def test_the_cli_refuses_a_missing_log_or_no_fires(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--home", str(tmp_path), "drift", "--fire-log", str(tmp_path / "none.jsonl")]) == 2
    assert "no fire log" in capsys.readouterr().err
    log = fire_log(tmp_path / "fires.jsonl")
    assert cli.main(["--home", str(tmp_path), "drift", "--fire-log", str(log), "--prefix", "nobody-"]) == 2
    assert "no fires" in capsys.readouterr().err


# -- verdicts --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "floor", "ratio", "abs_met", "ratio_met"),
    [
        (0.080, 0.052, 0.080 / 0.052, True, True),  # quiet machine: both met
        (4.5, 1.6, 4.5 / 1.6, False, True),  # noisy machine: the floor moved too; the ratio holds
        (0.4, 0.02, 20.0, True, False),  # fast machine: under the absolute target, but 20x its own floor
        (0.52, 0.052, 10.0, False, True),  # exactly at the ratio target: met (<=)
        (None, 0.05, None, False, False),  # nothing fired: no verdict can be met
        (1.0, None, None, False, False),  # no floor: the ratio cannot be judged
        (0.0, 0.0, 0.0, True, True),  # a zero floor and a zero value
        (0.1, 0.0, math.inf, True, False),  # a zero floor and a positive value
    ],
)
def test_judge_ratio_and_absolute(
    value: float | None, floor: float | None, ratio: float | None, abs_met: bool, ratio_met: bool
) -> None:
    verdict = judge("steady", value, floor, floor_name="floor/steady", abs_target=0.5, ratio_target=10)
    assert verdict.ratio == (None if ratio is None else pytest.approx(ratio))
    assert (verdict.abs_met, verdict.ratio_met, verdict.met) == (abs_met, ratio_met, ratio_met)


def test_a_verdict_line_shows_both_and_says_which_counts() -> None:
    line = judge("steady", 0.080, 0.052, floor_name="floor/steady", abs_target=0.5, ratio_target=10).line()
    assert line == (
        "steady p99 0.080 ms = 1.54x floor/steady (0.052 ms) | abs target 0.5 ms: MET | ratio target 10x: MET (counts)"
    )
    missed = judge("burst", 90.0, 30.0, floor_name="floor/burst", abs_target=90, ratio_target=1.5)
    assert "= 3.00x floor/burst (30.000 ms) | abs target 90 ms: MET | ratio target 1.5x: MISSED" in missed.line()
    assert missed.as_dict()["met"] is False
