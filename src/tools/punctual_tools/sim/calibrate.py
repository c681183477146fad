"""The model against the local stack: the same components with the local platform's parameters predict what the
local benchmarks measured (docs/benchmarks/drift-local.json, memory.json, scale.json), figure by figure, with the
error and whether it is within :data:`DRIFT_BAND` / :data:`RATE_BAND`.

The CPU a fire takes is fit on one of these phases (the local profile's burst, ``fit``); every other row is a
prediction the fit did not see.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from punctual_tools.sim.model import Scenario, simulate
from punctual_tools.sim.params import Deployment, Measured, _read, load_measured, local_platform, template_deployment

DRIFT_BAND = (0.5, 1.0)  # a drift percentile is within the band when off by at most 50 % or 1 ms
RATE_BAND = 0.2  # a throughput within 20 %


def _bench_deployment(base: Deployment, tasks: int, batches: int, memory_mb: int) -> Deployment:
    """The benchmark's set-up: executors warm and dispatched ahead (poll every 10 s), its batches as measured."""
    return replace(
        base,
        label="benchmark",
        executor_memory_mb=memory_mb,
        max_batch_size=math.ceil(tasks / max(1, batches)),
        executor_reserved=max(batches, 1) * 2,
        provisioned=max(batches, 1),
        poll_interval_s=10.0,
    )


def _row(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    name: str, figure: str, predicted: float | None, measured: float | None, kind: str, *, note: str = ""
) -> dict[str, Any]:
    error = None if predicted is None or measured is None else predicted - measured
    if error is None or measured is None:
        within = None
    elif kind == "rate":
        within = abs(error) <= RATE_BAND * measured
    else:
        within = abs(error) <= max(DRIFT_BAND[0] * measured, DRIFT_BAND[1])
    relative = None if error is None or not measured else round(error / measured * 100, 1)
    return {
        "phase": name,
        "figure": figure,
        "predicted": None if predicted is None else round(predicted, 3),
        "measured": None if measured is None else round(measured, 3),
        "error": None if error is None else round(error, 3),
        "error_pct": relative,
        "within_band": within,
        "note": note,
    }


def _drift_rows(name: str, predicted: dict[str, Any], measured: dict[str, Any], note: str = "") -> list[dict[str, Any]]:
    return [
        _row(name, f"drift {q} (ms)", predicted["drift_ms"][q], float(measured[q]), "drift", note=note)
        for q in ("p50", "p99", "max")
    ]


def calibrate(bench_dir: Path | None = None, measured: Measured | None = None) -> dict[str, Any]:
    """Predicted against measured, a row a figure, with the bands."""
    m = measured or load_measured(bench_dir)
    drift = _read("drift-local.json", bench_dir)
    memory = _read("memory.json", bench_dir)
    scale = _read("scale.json", bench_dir)
    base = template_deployment()
    rows: list[dict[str, Any]] = []
    local = local_platform(m)
    burst = drift["phases"]["system/burst"]
    dep = _bench_deployment(base, int(burst["count"]), int(burst["batches"]), 256)
    got = simulate(local, replace(dep, label="benchmark (no CPU cut)"), Scenario("burst", burst=int(burst["count"])))
    rows += _drift_rows("local profile: burst 2000 (fit)", got, burst, "the fire CPU is fit on its max")
    steady = drift["phases"]["system/steady"]
    got = simulate(local, dep, Scenario("steady", rate=float(steady["demand_per_s"]), seconds=60))
    rows += _drift_rows("local profile: steady 35/s", got, steady)
    quota = local_platform(m, cpu_quota=True)
    for size in memory["sizes"]:
        mb = int(size["memory_mb"])
        for phase, tasks_key in (("burst 2000", "batches"), ("burst 250", None)):
            ph = size["phases"].get(phase)
            if not ph:
                continue
            batches = int(ph[tasks_key]) if tasks_key else 1
            dep = _bench_deployment(base, int(ph["count"]), batches, mb)
            got = simulate(quota, dep, Scenario(phase, burst=int(ph["count"])))
            rows += _drift_rows(f"Lambda profile {mb} MB: {phase}", got, ph)
    sustained = scale["sustained"][0]
    ceiling = m.store_tasks_per_s
    rows.append(
        _row(
            f"sustained {sustained['rate']}/s (scale.json)",
            "write rate (tasks/s)",
            min(float(sustained["rate"]), ceiling),
            float(sustained["write_rate_per_s"]),
            "rate",
            note=f"the store's measured ceiling alone ({ceiling:.0f}/s); the run shared the cores with its executors",
        )
    )
    judged = [r for r in rows if r["within_band"] is not None]
    return {
        "bands": {
            "drift": f"within {DRIFT_BAND[0]:.0%} or {DRIFT_BAND[1]:g} ms, whichever is larger",
            "rate": f"within {RATE_BAND:.0%}",
        },
        "fire_cpu_us": round(m.fire_cpu_us, 1),
        "rows": rows,
        "within": sum(1 for r in judged if r["within_band"]),
        "judged": len(judged),
    }
