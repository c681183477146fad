"""Drift pictures and verdicts: ``punctual drift``, ``make bench`` and ``make scale`` use them.

A drift is ``fired - due`` in ms, read from a fire log (JSON lines with ``task_id``, ``due_ms``, ``fired_ms``:
what the log action writes, see :func:`punctual_tools.demo.read_fires`) or from the table (``drift_ms`` of
the tasks that fired). :func:`save_pictures` draws three PNGs from them: a histogram, a timeline (drift
against due time) and a CDF; :func:`save_frontier` draws drift against cost, one point per executor memory size.
matplotlib is an optional extra (``pip install 'punctual[plots]'``), imported only when a picture is drawn, with
the Agg backend (no display needed).

The pictures show the figures the tables print: a series holds the fires a table row was computed from (due
instants and action starts as they were, fractions of a millisecond included).

:func:`judge` is the benchmarks' verdict on one figure: as a ratio to the floor measured in the same run (the
verdict that counts: a noisy machine moves the floor and the system together) and against an absolute target.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from punctual.domain.keys import to_ms
from punctual.errors import PunctualError
from punctual_tools.stats import summarize

SHOWN_MIN_MS = 0.001  # log axes: a drift at or below this (0, or a rounding below 0) is drawn at this value
PICTURES = ("histogram", "timeline", "cdf")


class PlotsUnavailableError(PunctualError):
    """matplotlib (the ``plots`` extra) is not installed (the CLI prints it as an error, exit 2)."""


@dataclass(frozen=True)
class Fire:
    """One fire: which task, when it was due and when its action started (epoch ms)."""

    task_id: str
    due_ms: float
    fired_ms: float

    @property
    def drift_ms(self) -> float:
        return self.fired_ms - self.due_ms


@dataclass(frozen=True)
class DriftSeries:
    """The first fire of each task of one run, and how many extra fires (duplicates) there were."""

    name: str
    fires: list[Fire]
    duplicates: int = 0

    @property
    def drifts(self) -> list[float]:
        return [f.drift_ms for f in self.fires]


def series_of(name: str, entries: Iterable[Mapping[str, Any]]) -> DriftSeries:
    """A series from fire-log entries (dicts with ``task_id``, ``due_ms``, ``fired_ms``): the first fire of each
    task in log order, the later ones counted as duplicates; entries without those fields are skipped."""
    first: dict[str, Fire] = {}
    duplicates = 0
    for entry in entries:
        try:
            fire = Fire(str(entry["task_id"]), float(entry["due_ms"]), float(entry["fired_ms"]))
        except (KeyError, TypeError, ValueError):
            continue
        if not (math.isfinite(fire.due_ms) and math.isfinite(fire.fired_ms)):
            continue
        if fire.task_id in first:
            duplicates += 1
        else:
            first[fire.task_id] = fire
    return DriftSeries(name, list(first.values()), duplicates)


def read_fire_log(path: Path, prefix: str = "") -> list[dict[str, Any]]:
    """Every JSON-object line of ``path`` whose ``task_id`` starts with ``prefix`` (other lines are skipped)."""
    entries = []
    with path.open("rb") as handle:
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and str(entry.get("task_id", "")).startswith(prefix):
                entries.append(entry)
    return entries


def entries_from_tasks(tasks: Iterable[Any]) -> list[dict[str, Any]]:
    """Fire-log-like entries from stored tasks (:class:`punctual.domain.model.Task`) that fired: ``due_ms`` from
    ``due_at`` and ``fired_ms = due + drift_ms`` (``fired_at`` keeps whole milliseconds only)."""
    return [
        {"task_id": t.task_id, "due_ms": to_ms(t.due_at), "fired_ms": to_ms(t.due_at) + t.drift_ms}
        for t in tasks
        if t.drift_ms is not None
    ]


# -- verdicts --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """One target judged two ways: ``value`` (a p99, ms) against ``ratio_target`` x ``floor`` (the verdict that
    counts) and against ``abs_target`` ms (kept beside it). ``None`` where the figure or the floor is missing."""

    name: str
    value: float | None
    floor: float | None
    floor_name: str
    abs_target: float
    ratio_target: float

    @property
    def ratio(self) -> float | None:
        if self.value is None or self.floor is None:
            return None
        if self.floor <= 0:
            return 0.0 if self.value <= 0 else math.inf
        return self.value / self.floor

    @property
    def abs_met(self) -> bool:
        return self.value is not None and self.value <= self.abs_target

    @property
    def ratio_met(self) -> bool:
        ratio = self.ratio
        return ratio is not None and ratio <= self.ratio_target

    @property
    def met(self) -> bool:
        """The verdict that counts: the ratio one."""
        return self.ratio_met

    def line(self) -> str:
        """``steady p99 0.080 ms = 1.5x floor/steady (0.052 ms) | abs target 0.5 ms: MET | ratio target 10x: MET``"""
        value = "-" if self.value is None else f"{self.value:.3f} ms"
        floor = "-" if self.floor is None else f"{self.floor:.3f} ms"
        ratio = "-" if self.ratio is None else f"{self.ratio:.2f}x"
        return (
            f"{self.name} p99 {value} = {ratio} {self.floor_name} ({floor}) | "
            f"abs target {self.abs_target:g} ms: {_met(self.abs_met)} | "
            f"ratio target {self.ratio_target:g}x: {_met(self.ratio_met)} (counts)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "ratio": self.ratio,
            "abs_met": self.abs_met,
            "ratio_met": self.ratio_met,
            "met": self.met,
        }


def _met(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def judge(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    name: str, value: float | None, floor: float | None, *, floor_name: str, abs_target: float, ratio_target: float
) -> Verdict:
    """The verdict on one figure (see :class:`Verdict`)."""
    return Verdict(name, value, floor, floor_name, abs_target, ratio_target)


# -- pictures --------------------------------------------------------------------------------------------
def _pyplot() -> Any:
    try:
        import matplotlib  # noqa: PLC0415  the optional 'plots' extra: loaded only to draw
    except ImportError as exc:
        raise PlotsUnavailableError(
            "drift pictures need matplotlib, the optional 'plots' extra: pip install 'punctual[plots]' "
            "(or make setup, whose dev extra includes it)"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415  after matplotlib.use: pyplot picks its backend on import

    return plt


def _shown(drifts: Sequence[float]) -> list[float]:
    return [max(d, SHOWN_MIN_MS) for d in drifts]


def _caption(series: DriftSeries) -> str:
    s = summarize(series.drifts)
    if not s["count"]:
        return f"{series.name}: no fires"
    return (
        f"{series.name}: {s['count']} fired, {series.duplicates} duplicate(s); p50 {s['p50']:.3f}, "
        f"p99 {s['p99']:.3f}, max {s['max']:.3f} ms"
    )


NEGLIGIBLE_DECADES = 1e-9


def _log_bins(drifts: Sequence[float], count: int = 60) -> list[float]:
    low = math.log10(min(drifts))
    high = math.log10(max(drifts))
    if high - low < NEGLIGIBLE_DECADES:  # one drift value: one decade above it
        high = low + 1
    return [10 ** (low + (high - low) * i / count) for i in range(count + 1)]


def save_pictures(series: DriftSeries, out_dir: Path, stem: str | None = None) -> list[Path]:
    """Histogram, timeline and CDF of ``series`` as PNGs in ``out_dir`` (``<stem>-histogram.png`` etc.); returns
    their paths. Drift axes are logarithmic: drifts at or below :data:`SHOWN_MIN_MS` are drawn at that value."""
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = stem or _slug(series.name)
    drifts = _shown(series.drifts)
    caption = _caption(series)
    paths = [out_dir / f"{stem}-{kind}.png" for kind in PICTURES]

    fig, ax = plt.subplots(figsize=(8, 4.5))
    if drifts:
        ax.hist(drifts, bins=_log_bins(drifts), color="tab:blue")
        ax.set_xscale("log")
        _mark_percentiles(ax, series.drifts, vertical=True)
    ax.set_xlabel(f"drift = fired - due (ms, log; <= {SHOWN_MIN_MS} shown at {SHOWN_MIN_MS})")
    ax.set_ylabel("fires")
    ax.set_title(caption, fontsize=9)
    _save(plt, fig, paths[0])

    fig, ax = plt.subplots(figsize=(8, 4.5))
    if drifts:
        start = min(f.due_ms for f in series.fires)
        ax.scatter(
            [(f.due_ms - start) / 1000 for f in series.fires], drifts, s=3, alpha=0.5, color="tab:blue", linewidths=0
        )
        ax.set_yscale("log")
    ax.set_xlabel("due time (s from the first due)")
    ax.set_ylabel("drift (ms, log)")
    ax.set_title(caption, fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    _save(plt, fig, paths[1])

    save_cdf([series], paths[2], title=caption)
    return paths


def save_cdf(all_series: Sequence[DriftSeries], path: Path, title: str | None = None) -> Path:
    """One CDF plot with a line per series (a run's phases side by side, or one series)."""
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for series in all_series:
        drifts = sorted(_shown(series.drifts))
        if not drifts:
            continue
        n = len(drifts)
        ax.step(drifts, [(i + 1) / n for i in range(n)], where="post", label=f"{series.name} ({n})")
    if len(all_series) == 1:
        _mark_percentiles(ax, all_series[0].drifts, vertical=True)
    ax.axhline(0.99, color="grey", linestyle=":", linewidth=1)  # p99
    ax.set_xscale("log")
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("drift (ms, log)")
    ax.set_ylabel("fraction of fires at or below")
    ax.grid(True, which="major", alpha=0.3)
    if any(s.fires for s in all_series):
        ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title or "drift CDF", fontsize=9)
    _save(plt, fig, path)
    return path


def save_frontier(
    lines: Mapping[str, Sequence[tuple[float, float, str]]],
    path: Path,
    title: str,
    xlabel: str = "$ per million tasks",
    ylabel: str = "drift p99 (ms, log)",
) -> Path:
    """One line per name of ``lines``, through its points ``(x, y, label)`` (e.g. cost per million, drift p99 and
    the memory size), each point labelled; y on a log axis (values at or below :data:`SHOWN_MIN_MS` drawn at it).
    A line whose name starts with ``floor`` (a reference, not a phase) is dashed."""
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, points in lines.items():
        shown = sorted((x, max(y, SHOWN_MIN_MS), label) for x, y, label in points)
        if not shown:
            continue
        ax.plot(
            [p[0] for p in shown],
            [p[1] for p in shown],
            marker="o",
            linewidth=1,
            label=name,
            linestyle="--" if name.startswith("floor") else "-",
        )
        for x, y, label in shown:
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    if any(lines.values()):
        ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    _save(plt, fig, path)
    return path


def _mark_percentiles(ax: Any, drifts: Sequence[float], vertical: bool) -> None:
    s = summarize(drifts)
    for label, key, style in (("p50", "p50", ":"), ("p99", "p99", "--")):
        value = s[key]
        if value is not None:
            ax.axvline(
                max(value, SHOWN_MIN_MS), color="tab:red", linestyle=style, linewidth=1, label=f"{label} {value:.3f} ms"
            )
    if drifts:
        ax.legend(fontsize=8)


def _save(plt: Any, fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name).strip("-").lower() or "drift"
