"""Cold starts: what a new Lambda execution environment of the executor costs, and how many a month there are.

Lambda bills the INIT phase of on-demand functions (ZIP package, managed runtime) like the invoke phase since
1 August 2025 (AWS Compute Blog, "AWS Lambda standardizes billing for INIT Phase"). An executor's INIT is the
interpreter's start and the load of ``src/executor/app.py`` (its imports, settings, clients, threads).

:func:`measure_executor_init` measures it: a child process, started afresh, loads the real handler module as
Lambda does and reports the CPU time it took (interpreter start included). :func:`init_seconds` turns that into
the billed INIT at a memory size, assuming the INIT runs on the share of a core the memory size buys
(``MemorySize / 1769``, as an invocation does); :func:`executor_environments` counts the environments the poll path
keeps busy, each re-created every :data:`ENVIRONMENT_LIFETIME_S` (Lambda recycles environments "every few hours",
even under continuous load; the exact figure is not published).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass

import punctual.runtime.metrics as metric_names
from punctual_tools.template import find_template

FULL_CORE_MB = 1769  # Lambda: a function gets one full vCPU at 1,769 MB, proportionally less below
INIT_LIMIT_S = 10.0  # Lambda's INIT phase: past it, the init is retried within the first invocation
ENVIRONMENT_LIFETIME_S = 2 * 3600  # assumed: Lambda re-creates an environment "every few hours"
INIT_CPU_S_ASSUMED = 1.0  # when the child process could not measure it
INIT_RUNS = 3  # the measurement is the median of this many fresh processes

_PROBE = """
import importlib.util, json, os, resource, sys
spec = importlib.util.spec_from_file_location("punctual_cost_init_probe", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu_s": usage.ru_utime + usage.ru_stime}), flush=True)
os._exit(0)
"""


@dataclass(frozen=True)
class InitTime:
    """CPU seconds an executor's INIT took on this machine (median of ``runs`` fresh processes)."""

    cpu_s: float
    measured: bool
    runs: int = 0


INIT_UNMEASURED = InitTime(cpu_s=INIT_CPU_S_ASSUMED, measured=False)


def lambda_probe_env() -> dict[str, str]:
    """The executor's environment as in AWS (tracing on), with no network at load: NTP off, dummy credentials."""
    env = {
        **os.environ,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_LAMBDA_FUNCTION_NAME": "punctual-executor",
        "PUNCTUAL_TABLE_NAME": "punctual-cost-init",
        "PUNCTUAL_NTP_SERVER": "off",
        "PUNCTUAL_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": metric_names.SERVICE,
        "POWERTOOLS_METRICS_NAMESPACE": metric_names.NAMESPACE,
    }
    for name in (
        "PUNCTUAL_ENDPOINT_URL",
        "PUNCTUAL_FIRE_LOG_PATH",
        "POWERTOOLS_DEV",
        "POWERTOOLS_TRACE_DISABLED",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
    ):
        env.pop(name, None)
    return env


def measure_executor_init(runs: int = INIT_RUNS) -> InitTime:
    """Load ``src/executor/app.py`` in ``runs`` fresh processes and take the median CPU time each needed from its
    start to the module loaded (:data:`INIT_UNMEASURED` if a run fails)."""
    handler = find_template().parent / "src" / "executor" / "app.py"
    samples: list[float] = []
    for _ in range(runs):
        try:
            done = subprocess.run(
                [sys.executable, "-c", _PROBE, str(handler)],
                env=lambda_probe_env(),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return INIT_UNMEASURED
        lines = [line for line in done.stdout.splitlines() if line.startswith('{"cpu_s"')]
        if done.returncode != 0 or not lines:
            print(f"punctual_tools.cost: INIT measurement failed:\n{done.stderr[-2000:]}", file=sys.stderr)
            return INIT_UNMEASURED
        samples.append(float(json.loads(lines[-1])["cpu_s"]))
    return InitTime(cpu_s=statistics.median(samples), measured=True, runs=runs)


def init_seconds(cpu_s: float, memory_mb: int) -> float:
    """Billed INIT seconds at ``memory_mb``: the CPU it needs, on the share of a core the memory size buys."""
    return cpu_s * max(1.0, FULL_CORE_MB / memory_mb)


def executor_environments(n: float, max_batch: int, lead_ms: int, interval_ms: int, tail_s: float) -> float:
    """Executor environments the poll path keeps in use at a steady ``n`` tasks a tick: the tick's batches, plus
    the previous tick's batches still waiting for their last task (their last due instant, ``k / (n + 1)`` into
    the window, plus ``tail_s``, falls after the next tick). Below one task a tick, at most one."""
    if n <= 0:
        return 0.0
    if n < 1:
        return 1.0
    head, window, interval = (lead_ms - interval_ms) / 1000, interval_ms / 1000, interval_ms / 1000
    batches = math.ceil(n / max_batch)
    still_alive = sum(
        1 for i in range(1, batches + 1) if head + window * min(i * max_batch, n) / (n + 1) + tail_s > interval
    )
    return float(batches + still_alive)


def cold_starts_per_month(environments: float, month_s: float) -> float:
    """New environments a month for ``environments`` kept in use all month, each re-created every
    :data:`ENVIRONMENT_LIFETIME_S`."""
    return environments * month_s / ENVIRONMENT_LIFETIME_S
