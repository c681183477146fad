"""The CPU a process used and the time its cgroup was throttled, for the benchmarks' tables.

A process's CPU is ``utime + stime`` of ``/proc/<pid>/stat`` (all its threads); its cgroup's throttling is what the
cpu controller's ``cpu.stat`` counts: ``nr_periods``, ``nr_throttled`` and ``throttled_time`` (ns, cgroup v1) or
``throttled_usec`` (cgroup v2). :func:`sample` reads both for one process; :func:`delta` and :func:`cpu_summary`
turn two readings of each executor (before and after a phase) into what the phase cost each of them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from punctual_tools.local.cpu_quota import group_of


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds one process used, and the throttling its cgroup saw (zeros without a cgroup quota)."""

    cpu_s: float = 0.0
    throttled_s: float = 0.0
    nr_throttled: int = 0
    nr_periods: int = 0

    def __sub__(self, earlier: CpuUse) -> CpuUse:
        return CpuUse(
            self.cpu_s - earlier.cpu_s,
            self.throttled_s - earlier.throttled_s,
            self.nr_throttled - earlier.nr_throttled,
            self.nr_periods - earlier.nr_periods,
        )

    def __add__(self, other: CpuUse) -> CpuUse:
        return CpuUse(
            self.cpu_s + other.cpu_s,
            self.throttled_s + other.throttled_s,
            self.nr_throttled + other.nr_throttled,
            self.nr_periods + other.nr_periods,
        )


def parse_proc_stat_cpu_s(text: str, ticks_per_s: int) -> float:
    """``utime + stime`` (seconds) from a ``/proc/<pid>/stat`` line; the command name may hold spaces and
    parentheses, so fields are counted from its last ``)``."""
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / ticks_per_s  # fields 14 and 15 of the line


def parse_cpu_stat(text: str) -> CpuUse:
    """The throttling counters of a cgroup's ``cpu.stat`` (v1's ``throttled_time`` in ns, v2's
    ``throttled_usec``); the CPU used is not read from it (v1's cpu controller does not count it)."""
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            values[key] = int(value)
    throttled_s = (
        values["throttled_time"] / 1e9 if "throttled_time" in values else values.get("throttled_usec", 0) / 1e6
    )
    return CpuUse(0.0, throttled_s, values.get("nr_throttled", 0), values.get("nr_periods", 0))


def sample(pid: int | None = None) -> CpuUse | None:
    """Process ``pid``'s CPU so far (this process by default) and its cgroup's throttling; ``None`` once it has
    ended."""
    pid = pid or os.getpid()
    try:
        cpu_s = parse_proc_stat_cpu_s(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
    group = group_of(pid)
    throttling = CpuUse()
    if group is not None:
        with contextlib.suppress(OSError):
            throttling = parse_cpu_stat((group / "cpu.stat").read_text())
    return CpuUse(cpu_s, throttling.throttled_s, throttling.nr_throttled, throttling.nr_periods)


def sample_all(pids: Iterable[int]) -> dict[int, CpuUse]:
    """:func:`sample` of each process still running."""
    found = {pid: sample(pid) for pid in pids}
    return {pid: use for pid, use in found.items() if use is not None}


def delta(before: Mapping[int, CpuUse], after: Mapping[int, CpuUse]) -> dict[int, CpuUse]:
    """What each process of ``after`` used since ``before`` (one that started since: everything, its cold start
    included). A process that ended in between is not counted (its last figures are gone with it)."""
    return {pid: use - before.get(pid, CpuUse()) for pid, use in after.items()}


def cpu_summary(uses: Iterable[CpuUse], min_cpu_s: float = 0.005) -> dict[str, Any]:
    """The executors that worked (used at least ``min_cpu_s``), their CPU and their throttling: totals, mean and
    largest per executor, and the share of their CFS periods in which they were throttled."""
    busy = [u for u in uses if u.cpu_s >= min_cpu_s]
    total = sum(busy, CpuUse())
    n = len(busy)
    return {
        "executors": n,
        "cpu_s": round(total.cpu_s, 3),
        "cpu_s_mean": round(total.cpu_s / n, 3) if n else None,
        "cpu_s_max": round(max(u.cpu_s for u in busy), 3) if n else None,
        "throttled_s": round(total.throttled_s, 3),
        "throttled_s_mean": round(total.throttled_s / n, 3) if n else None,
        "throttled_s_max": round(max(u.throttled_s for u in busy), 3) if n else None,
        "nr_throttled": total.nr_throttled,
        "nr_periods": total.nr_periods,
        "throttled_share": round(total.nr_throttled / total.nr_periods, 4) if total.nr_periods else None,
    }
