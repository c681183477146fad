"""The Now page's charts, drawn as SVG on the server: no chart library, no script.

Each chart is an ``<svg>`` with a title, axes, tick labels and one mark per figure: a ``rect.bar`` per second for the
load ahead (:func:`due_chart`), a ``g.minute`` of stacked ``rect`` per minute for the outcomes (:func:`outcome_chart`),
and one ``path`` per drift series whose points are the minutes that have a figure (:func:`drift_chart`, log scale).
Colours come from the console's style sheet (classes), never from inline styles, which its Content-Security-Policy
refuses. The markup is built as XML elements, so every label is escaped.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup

from punctual.domain.keys import from_ms
from punctual_tools.console.model import MinuteFigures

SVG_NS = "http://www.w3.org/2000/svg"
WIDTH = 720
HEIGHT = 252
MARGIN_LEFT = 64
MARGIN_RIGHT = 28
MARGIN_TOP = 48  # the title, then the legend
MARGIN_BOTTOM = 44
DRIFT_FLOOR_MS = 0.1  # the log scale's bottom: a drift at or under it (early fires included) is drawn there
MINUTE_TICKS_FROM_S = 120  # a horizon this long is ticked by the minute, a shorter one every 10 s
OUTCOMES = (("fired", "fired"), ("missed", "MISSED"), ("failed", "FAILED"))
DRIFTS = (("p50", "p50"), ("p99", "p99"), ("max", "max"))


@dataclass(frozen=True, slots=True)
class Frame:
    """A chart's plot area, and the SVG it is drawn into."""

    svg: ET.Element
    x_count: int  # slots along the x axis (seconds, minutes)
    y_top: float  # the value at the top of the plot

    @property
    def plot_width(self) -> float:
        return WIDTH - MARGIN_LEFT - MARGIN_RIGHT

    @property
    def plot_height(self) -> float:
        return HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    @property
    def slot(self) -> float:
        return self.plot_width / max(self.x_count, 1)

    def x(self, index: float) -> float:
        return MARGIN_LEFT + index * self.slot

    def y(self, value: float) -> float:
        return MARGIN_TOP + self.plot_height * (1 - min(value, self.y_top) / self.y_top)


def _element(parent: ET.Element, tag: str, text: str | None = None, **attributes: str | float) -> ET.Element:
    element = ET.SubElement(
        parent, tag, {name.rstrip("_").replace("_", "-"): _num(v) for name, v in attributes.items()}
    )
    if text is not None:
        element.text = text
    return element


def _num(value: str | float) -> str:
    return value if isinstance(value, str) else f"{value:.1f}".removesuffix(".0")


def _frame(name: str, title: str, x_count: int, y_top: float) -> Frame:
    svg = ET.Element(
        "svg",
        {
            "xmlns": SVG_NS,
            "class": f"chart {name}",
            "viewBox": f"0 0 {WIDTH} {HEIGHT}",
            "role": "img",
            "aria-label": title,
        },
    )
    _element(svg, "title", title)
    _element(svg, "text", title, x=MARGIN_LEFT, y=16, class_="chart-title")
    return Frame(svg, x_count, y_top)


def _axes(
    frame: Frame, x_ticks: Sequence[tuple[float, str]], y_ticks: Sequence[tuple[float, str]], labels: tuple[str, str]
) -> None:
    """The axes, their ticks (x: slot index and label; y: height in the drawing and label) and their titles."""
    bottom = MARGIN_TOP + frame.plot_height
    axes = _element(frame.svg, "g", class_="axes")
    _element(axes, "line", x1=MARGIN_LEFT, y1=bottom, x2=WIDTH - MARGIN_RIGHT, y2=bottom, class_="axis")
    _element(axes, "line", x1=MARGIN_LEFT, y1=MARGIN_TOP, x2=MARGIN_LEFT, y2=bottom, class_="axis")
    for index, label in x_ticks:
        x = frame.x(index)
        _element(axes, "line", x1=x, y1=bottom, x2=x, y2=bottom + 4, class_="tick")
        _element(axes, "text", label, x=x, y=bottom + 16, class_="tick-label x")
    for y, label in y_ticks:
        _element(axes, "line", x1=MARGIN_LEFT, y1=y, x2=WIDTH - MARGIN_RIGHT, y2=y, class_="grid")
        _element(axes, "text", label, x=MARGIN_LEFT - 6, y=y + 4, class_="tick-label y")
    x_label, y_label = labels
    _element(axes, "text", x_label, x=MARGIN_LEFT + frame.plot_width / 2, y=HEIGHT - 6, class_="axis-label x")
    _element(
        axes,
        "text",
        y_label,
        x=14,
        y=MARGIN_TOP + frame.plot_height / 2,
        class_="axis-label y",
        transform=f"rotate(-90 14 {MARGIN_TOP + frame.plot_height / 2:.1f})",
    )


def nice_top(value: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten at or above ``value`` (1 for nothing)."""
    if value <= 1:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(float(step * power) for step in (1, 2, 5, 10) if step * power >= value)


def _count_ticks(frame: Frame) -> list[tuple[float, str]]:
    """Whole counts from 0 to the top, five or so (every one up to a top of 5)."""
    step = nice_top(frame.y_top / 5)
    values = [step * i for i in range(round(frame.y_top / step) + 1)]
    return [(frame.y(value), f"{value:g}") for value in values]


def _markup(frame: Frame) -> Markup:
    return Markup(ET.tostring(frame.svg, encoding="unicode"))


def _clock(ms: int) -> str:
    return from_ms(ms).strftime("%H:%M")


def _span(seconds: int) -> str:
    return f"{seconds // 60} minutes" if seconds >= MINUTE_TICKS_FROM_S and seconds % 60 == 0 else f"{seconds} s"


def due_chart(due_per_second: Sequence[int]) -> Markup:
    """Tasks due in each second from now on (index 0: the current second): one ``rect.bar`` a second."""
    seconds = len(due_per_second)
    title = f"Tasks due per second, next {_span(seconds)} ({sum(due_per_second)} in all)"
    frame = _frame("due", title, seconds, nice_top(max(due_per_second, default=0)))
    by_minute = seconds >= MINUTE_TICKS_FROM_S
    _axes(
        frame,
        [(s, f"+{s // 60} min" if by_minute else f"+{s} s") for s in range(0, seconds + 1, 60 if by_minute else 10)],
        _count_ticks(frame),
        ("from now", "tasks due"),
    )
    bars = _element(frame.svg, "g", class_="bars")
    width = max(frame.slot * 0.8, 0.5)
    bottom = MARGIN_TOP + frame.plot_height
    for second, count in enumerate(due_per_second):
        top = frame.y(count)
        bar = _element(bars, "rect", x=frame.x(second), y=top, width=width, height=bottom - top, class_="bar")
        _element(bar, "title", f"+{second} s: {count} due")
    return _markup(frame)


def _minute_ticks(minutes: Sequence[MinuteFigures]) -> list[tuple[float, str]]:
    return [(i, _clock(m.minute_ms)) for i, m in enumerate(minutes) if i % 10 == 0]


def outcome_chart(minutes: Sequence[MinuteFigures]) -> Markup:
    """Fired, MISSED and FAILED per minute of the last hour: one ``g.minute`` a minute, holding a ``rect`` for each
    of its non-zero figures, stacked in that order."""
    totals = [m.fired + m.missed + m.failed for m in minutes]
    title = f"Fired, MISSED and FAILED per minute, last hour (UTC): {sum(m.fired for m in minutes)} fired, " + (
        f"{sum(m.missed for m in minutes)} MISSED, {sum(m.failed for m in minutes)} FAILED"
    )
    frame = _frame("outcomes", title, len(minutes), nice_top(max(totals, default=0)))
    _axes(frame, _minute_ticks(minutes), _count_ticks(frame), ("minute (UTC)", "tasks"))
    _legend(frame, OUTCOMES)
    columns = _element(frame.svg, "g", class_="bars")
    width = max(frame.slot * 0.8, 0.5)
    for index, minute in enumerate(minutes):
        column = _element(columns, "g", class_="minute")
        base = 0
        for name, label in OUTCOMES:
            count = int(getattr(minute, name))
            if count == 0:
                continue
            top, bottom = frame.y(base + count), frame.y(base)
            segment = _element(column, "rect", x=frame.x(index), y=top, width=width, height=bottom - top, class_=name)
            _element(segment, "title", f"{_clock(minute.minute_ms)}: {count} {label}")
            base += count
    return _markup(frame)


def _legend(frame: Frame, series: Sequence[tuple[str, str]]) -> None:
    legend = _element(frame.svg, "g", class_="legend")
    for i, (name, label) in enumerate(series):
        x = MARGIN_LEFT + 90 * i
        _element(legend, "rect", x=x, y=24, width=10, height=10, class_=name)
        _element(legend, "text", label, x=x + 14, y=33, class_="legend-label")


def _log_y(frame: Frame, value: float) -> float:
    """The height of ``value`` ms on the log scale from :data:`DRIFT_FLOOR_MS` to ``frame.y_top``."""
    low, high = math.log10(DRIFT_FLOOR_MS), math.log10(frame.y_top)
    share = (math.log10(max(value, DRIFT_FLOOR_MS)) - low) / (high - low)
    return MARGIN_TOP + frame.plot_height * (1 - min(share, 1.0))


def _drift_ticks(top: float) -> list[tuple[float, str]]:
    ticks = []
    decade = DRIFT_FLOOR_MS
    while decade <= top * 1.0001:
        ticks.append((decade, f"{decade:g} ms"))
        decade *= 10
    return ticks


def drift_chart(minutes: Sequence[MinuteFigures]) -> Markup:
    """Drift p50, p99 and max per minute of the last hour on a log scale: one ``path`` per series, a point for each
    minute with a figure; the hour's largest drift is labelled."""
    values = [v for m in minutes for v in (m.drift_p50_ms, m.drift_p99_ms, m.drift_max_ms) if v is not None]
    largest = max(values, default=None)
    top = 10.0 ** max(1, math.ceil(math.log10(max(largest or 1.0, DRIFT_FLOOR_MS * 10))))
    frame = _frame("drift", "Drift (fired - due) per minute, last hour (UTC): p50, p99, max", len(minutes), top)
    ticks = [(_log_y(frame, value), label) for value, label in _drift_ticks(top)]
    _axes(frame, _minute_ticks(minutes), ticks, ("minute (UTC)", "drift, ms (log scale)"))
    _legend(frame, DRIFTS)
    lines = _element(frame.svg, "g", class_="lines")
    centre = frame.slot / 2
    for name, _label in DRIFTS:
        points = [
            (frame.x(i) + centre, _log_y(frame, value))
            for i, m in enumerate(minutes)
            if (value := getattr(m, f"drift_{name}_ms")) is not None
        ]
        if points:
            path = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(points))
            _element(lines, "path", d=path, class_=f"line {name}")
    if largest is not None:
        _element(
            frame.svg,
            "text",
            f"largest: {largest:,.1f} ms",
            x=WIDTH - MARGIN_RIGHT,
            y=MARGIN_TOP - 4,
            class_="max-label",
        )
    else:
        _element(frame.svg, "text", "no fire in the last hour", x=MARGIN_LEFT + 8, y=MARGIN_TOP + 16, class_="empty")
    return _markup(frame)
