"""Small statistics shared by the demo, the benchmark and the reports."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[nearest_rank(len(ordered), q) - 1]


def nearest_rank(count: int, q: float) -> int:
    """The rank (1-based, ascending) of the ``q`` percentile of ``count`` values, by nearest rank."""
    return max(1, math.ceil(q / 100 * count))


def summarize(values: Sequence[float]) -> dict[str, float | None]:
    """p50 / p90 / p99 / max (and min, count) in the values' unit."""
    return {
        "count": len(values),
        "min": min(values) if values else None,
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }
