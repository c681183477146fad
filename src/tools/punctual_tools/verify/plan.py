"""The mix a verify run schedules: tasks spread over a window, a burst at one instant, short leads, a schedule.

Pure: :func:`plan_mix` turns the options, a run id and a start instant into the tasks' ids, groups, due instants
and (for short leads) the instants they are written at. Each group is named in :data:`GROUPS`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Self

from punctual.domain.recurrence import MIN_RATE_MS

SPREAD, BURST, SHORT_LEAD, RECURRING = "spread", "burst", "short-lead", "recurring"
GROUPS = (SPREAD, BURST, SHORT_LEAD, RECURRING)
SHORT_LEAD_MS = (2_000, 4_000)  # a short-lead task is written this long before it is due, shortest to longest


@dataclass(frozen=True)
class MixOptions:
    """What a run schedules, and how long it waits.

    Parameters
    ----------
    spread:
        Tasks due at even steps over ``over_s``.
    over_s:
        The window the spread and the short leads fall in; the burst is due at its middle.
    burst:
        Tasks due at one single instant.
    short_leads:
        Tasks each written 2 to 4 s before it is due, spread over the window.
    rate_ms, occurrences:
        The recurring schedule: ``rate(<rate_ms> milliseconds)``, this many occurrences from the window's start.
    lead_in_s:
        From the start of the run to the window's start (the tasks are written meanwhile).
    wait_s:
        How long past the last due instant the run waits for missing messages.
    settle_s:
        How long past the last due instant it goes on reading once every task has arrived (late duplicates).
    """

    spread: int = 600
    over_s: float = 60.0
    burst: int = 1_000
    short_leads: int = 20
    rate_ms: int = MIN_RATE_MS
    occurrences: int = 10
    lead_in_s: float = 30.0
    wait_s: float = 120.0
    settle_s: float = 5.0

    @classmethod
    def quick(cls) -> Self:
        """A small run: tens of tasks, a short burst, a few short leads, three occurrences."""
        return cls(spread=20, over_s=10.0, burst=30, short_leads=4, occurrences=3, lead_in_s=8.0, wait_s=60.0)

    def with_changes(self, **changes: Any) -> Self:
        """These options with the given fields replaced (None: kept)."""
        return replace(self, **{name: value for name, value in changes.items() if value is not None})

    def problems(self) -> list[str]:
        """What makes these options unusable (empty when none)."""
        found = []
        if min(self.spread, self.burst, self.short_leads) < 0 or self.occurrences < 0:
            found.append("counts must be 0 or more")
        if self.spread + self.burst + self.short_leads + self.occurrences == 0:
            found.append("nothing to schedule")
        if self.over_s <= 0:
            found.append("the window (--over) must be longer than 0 s")
        if self.rate_ms < MIN_RATE_MS:
            found.append(f"the rate is {MIN_RATE_MS} ms at least")
        shortest = SHORT_LEAD_MS[1] / 1000 + 1 if self.short_leads else 1.0
        if self.lead_in_s < shortest:
            found.append(
                f"the lead-in must be {shortest:g} s at least"
                + (" (a short lead is up to 4 s)" if self.short_leads else "")
            )
        if self.wait_s < 0 or self.settle_s < 0:
            found.append("waits must be 0 s or more")
        return found


@dataclass(frozen=True)
class PlannedTask:
    """One task of the mix: ``write_at_ms`` is when it is written (None: with the others, at the start)."""

    task_id: str
    group: str
    due_ms: int
    write_at_ms: int | None = None

    @property
    def lead_ms(self) -> int | None:
        """How long before it is due the task is written (short leads only)."""
        return None if self.write_at_ms is None else self.due_ms - self.write_at_ms


@dataclass(frozen=True)
class PlannedSchedule:
    """The mix's recurring schedule."""

    schedule_id: str
    rate_ms: int
    start_ms: int
    occurrences: int

    @property
    def expression(self) -> str:
        return f"rate({self.rate_ms} milliseconds)"

    @property
    def last_due_ms(self) -> int:
        """Its last occurrence: a rate counts from its start, which is the first."""
        return self.start_ms + (self.occurrences - 1) * self.rate_ms


@dataclass(frozen=True)
class Plan:
    """A run's mix: its tasks (written ahead, or at their short lead) and its schedule (None: no occurrence)."""

    run_id: str
    start_ms: int
    tasks: tuple[PlannedTask, ...]
    schedule: PlannedSchedule | None

    @property
    def ahead(self) -> list[PlannedTask]:
        """The tasks written at the start, all at once."""
        return [t for t in self.tasks if t.write_at_ms is None]

    @property
    def short(self) -> list[PlannedTask]:
        """The tasks written at their short lead, in the order they are written."""
        return sorted((t for t in self.tasks if t.write_at_ms is not None), key=lambda t: (t.write_at_ms, t.task_id))

    @property
    def last_due_ms(self) -> int:
        dues = [t.due_ms for t in self.tasks]
        if self.schedule is not None:
            dues.append(self.schedule.last_due_ms)
        return max(dues, default=self.start_ms)

    def counts(self) -> dict[str, int]:
        """Tasks (occurrences for the schedule) by group."""
        counts = {group: sum(1 for t in self.tasks if t.group == group) for group in GROUPS}
        counts[RECURRING] = self.schedule.occurrences if self.schedule else 0
        return counts


def task_id(run_id: str, group: str, index: int) -> str:
    """``verify-<run>-<group>-<index>``: every id of a run starts with ``verify-<run>-``."""
    return f"verify-{run_id}-{group}-{index:05d}"


def plan_mix(run_id: str, now_ms: int, options: MixOptions) -> Plan:
    """The mix of ``options`` for a run starting at ``now_ms``.

    The window opens ``lead_in_s`` after ``now_ms``. Spread task ``i`` of ``n`` is due ``i / n`` of the way
    through it, short lead ``i`` of ``k`` at ``(i + 0.5) / k``, written 2 s (the first) to 4 s (the last) before;
    the burst is due at the window's middle and the schedule's first occurrence at its start.

    Raises
    ------
    ValueError
        The options are unusable (:meth:`MixOptions.problems`).
    """
    problems = options.problems()
    if problems:
        raise ValueError("; ".join(problems))
    start = now_ms + round(options.lead_in_s * 1000)
    over = round(options.over_s * 1000)
    tasks = [
        PlannedTask(task_id(run_id, SPREAD, i), SPREAD, start + over * i // options.spread)
        for i in range(options.spread)
    ]
    tasks += [PlannedTask(task_id(run_id, BURST, i), BURST, start + over // 2) for i in range(options.burst)]
    shortest, longest = SHORT_LEAD_MS
    k = options.short_leads
    for i in range(k):
        due = start + (over * (2 * i + 1)) // (2 * k)
        lead = shortest + ((longest - shortest) * i // (k - 1) if k > 1 else (longest - shortest) // 2)
        tasks.append(PlannedTask(task_id(run_id, SHORT_LEAD, i), SHORT_LEAD, due, due - lead))
    schedule = (
        PlannedSchedule(f"verify-{run_id}-{RECURRING}", options.rate_ms, start, options.occurrences)
        if options.occurrences
        else None
    )
    return Plan(run_id, now_ms, tuple(tasks), schedule)
