"""A Jepsen-style checker: what was expected to fire against what a target actually saw.

Punctual's promise, checked from the outside: every expected occurrence fires once, on time, or ends with an
explicit outcome (MISSED, FAILED, CANCELLED) in the table; the only possible second fire is the documented
crash window (an executor died after firing and before recording), and it carries the same idempotency key.

:func:`check` matches every expected occurrence to a distinct observed fire (by idempotency key
``<task_id>:<occurrence>``, earliest first) and sorts everything else:

* **lost**: expected, never fired, and no explicit outcome (no outcome, an active status, or SUCCEEDED without
  a fire that the target saw). A lost occurrence fails the verdict.
* **explicitly missed / failed / cancelled**: never fired, and the table says why. Not lost.
* **skipped**: an occurrence of a recurring schedule that fell while nothing ran (a downtime) and that the
  schedule's downtime policy did not make (:func:`expected_from_schedule`). Not lost.
* **extra**: fires beyond the first of a key, and fires of keys nobody expected. An extra is *explained* when
  its key is in the allowance (one extra per key: the crash window); any other extra fails the verdict.
* **rejected attempts**: fires the target answered with an error (the action failed there). They match an
  occurrence like any fire, but a retry repeating a rejected attempt is not a duplicate: only accepted fires
  count as extras.
* **fired though cancelled**, **early** (observed more than ε before due) and **past grace** (observed more
  than grace + ε after due, for an occurrence not allowed to fire late) fail the verdict.
* **late** (observed more than ε after due) is reported; it fails the verdict only when the caller asks.
* **crash windows**: when the caller gives them (each from a dead executor's last sign of life to the moment its
  death was known: a fence, a takeover, Lambda's retry), the verdict counts the occurrences due in them and the
  explicitly missed ones among them; a MISSED occurrence due outside every window fails the verdict (a crash
  may cost its window, nothing more).

Drift is ``observed - due`` in ms for each matched occurrence, summarized with :func:`punctual_tools.stats.summarize`.
The observed time is the target's receive time (or the fire log's ``fired_ms``), so it includes the delivery.

Examples
--------
>>> verdict = check([Expected("t1", 0, 1_000)], [Fire("t1:0", 1_003.0), Fire("t1:0", 1_004.0)],
...                 epsilon_ms=50, allowance={"t1:0"})
>>> verdict.ok, len(verdict.matched), len(verdict.extra), len(verdict.unexplained)
(True, 1, 1, 0)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol

from punctual.domain.keys import to_ms
from punctual.domain.model import occurrence_id
from punctual.domain.schedules import instants_after
from punctual_tools.stats import summarize

EXPLICIT_OUTCOMES = frozenset({"MISSED", "FAILED", "CANCELLED", "SKIPPED"})
SKIPPED = "SKIPPED"  # a recurring schedule's occurrence not made after a downtime, by its policy
_EXAMPLES = 5  # keys shown per non-zero figure in format()


@dataclass(frozen=True, slots=True)
class Expected:
    """One occurrence that should fire at ``due_ms``.

    ``outcome`` is what the table recorded (a :class:`~punctual.domain.model.TaskStatus` value), if known;
    ``grace_ms`` the occurrence's misfire grace, if it should be checked; ``fire_late`` whether its misfire
    policy lets it fire past the grace.
    """

    task_id: str
    occurrence: int
    due_ms: float
    outcome: str | None = None
    grace_ms: float | None = None
    fire_late: bool = False

    @property
    def key(self) -> str:
        return f"{self.task_id}:{self.occurrence}"


@dataclass(frozen=True, slots=True)
class Fire:
    """One fire seen at the target: its idempotency key, when it was observed (wall ms), and whether the
    target accepted it (False: the target answered with an error, so the fire may be retried)."""

    key: str
    observed_ms: float
    accepted: bool = True


@dataclass(frozen=True)
class Verdict:
    """What :func:`check` found. Each tuple holds the keys (or fires) concerned; ``format()`` prints it."""

    epsilon_ms: float
    expected: int
    fires: int
    matched: tuple[str, ...]
    lost: tuple[str, ...]
    explicitly_missed: tuple[str, ...]
    failed: tuple[str, ...]
    cancelled: tuple[str, ...]
    skipped: tuple[str, ...]
    extra: tuple[Fire, ...]
    unexplained: tuple[Fire, ...]
    unknown: tuple[Fire, ...]
    rejected: tuple[Fire, ...]
    fired_cancelled: tuple[str, ...]
    late: tuple[tuple[str, float], ...]
    early: tuple[tuple[str, float], ...]
    past_grace: tuple[tuple[str, float], ...]
    drift: dict[str, float | None] = field(default_factory=dict)
    late_is_failure: bool = False
    windows: tuple[tuple[float, float], ...] = ()
    due_in_window: tuple[str, ...] = ()
    missed_in_window: tuple[str, ...] = ()
    missed_outside_window: tuple[str, ...] = ()

    @property
    def explained(self) -> int:
        return len(self.extra) - len(self.unexplained)

    @property
    def ok(self) -> bool:
        """Nothing lost, no unexplained extra, nothing fired early, past its grace or though cancelled; and,
        if the caller asked for it, nothing late beyond ε."""
        return not (
            self.lost
            or self.unexplained
            or self.fired_cancelled
            or self.early
            or self.past_grace
            or self.missed_outside_window
            or (self.late_is_failure and self.late)
        )

    def problems(self) -> list[str]:
        """One phrase per failing figure (empty when ``ok``)."""
        found = [
            (len(self.lost), "lost"),
            (len(self.unexplained), "unexplained extra fires"),
            (len(self.fired_cancelled), "fired though cancelled"),
            (len(self.early), "early beyond ε"),
            (len(self.past_grace), "fired past grace"),
            (len(self.missed_outside_window), "MISSED outside the crash windows"),
        ]
        if self.late_is_failure:
            found.append((len(self.late), "late beyond ε"))
        return [f"{n} {what}" for n, what in found if n]

    def format(self, title: str = "checker") -> str:
        """A short printable block: a verdict line, then one line per figure."""

        def keys(items: Iterable[Any]) -> str:
            names = [
                item
                if isinstance(item, str)
                else item.key
                if isinstance(item, Fire)
                else f"{item[0]} ({item[1]:+.0f} ms)"
                for item in items
            ]
            if not names:
                return ""
            more = f", ... ({len(names) - _EXAMPLES} more)" if len(names) > _EXAMPLES else ""
            return "   e.g. " + ", ".join(names[:_EXAMPLES]) + more

        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.3f}"

        eps = f"{self.epsilon_ms:g} ms"
        status = "OK" if self.ok else "FAIL: " + ", ".join(self.problems())
        d = self.drift
        lines = [
            f"{title}: {status}",
            f"  expected occurrences   {self.expected:6d}",
            f"  observed fires         {self.fires:6d}   ({len(self.rejected)} rejected by the target)",
            f"  matched                {len(self.matched):6d}",
            f"  lost                   {len(self.lost):6d}{keys(self.lost)}",
            f"  explicitly missed      {len(self.explicitly_missed):6d}{keys(self.explicitly_missed)}",
            f"  failed (no fire)       {len(self.failed):6d}{keys(self.failed)}",
            f"  cancelled (no fire)    {len(self.cancelled):6d}",
            f"  skipped (downtime)     {len(self.skipped):6d}",
            f"  extra fires            {len(self.extra):6d}   (explained {self.explained}, "
            f"unexplained {len(self.unexplained)}, unknown keys {len(self.unknown)}){keys(self.unexplained)}",
            f"  fired though cancelled {len(self.fired_cancelled):6d}{keys(self.fired_cancelled)}",
            f"  early beyond {eps:<9} {len(self.early):6d}{keys(self.early)}",
            f"  late beyond {eps:<10} {len(self.late):6d}{keys(self.late)}",
            f"  fired past grace       {len(self.past_grace):6d}{keys(self.past_grace)}",
            f"  drift ms (observed-due) p50 {ms(d.get('p50'))}  p90 {ms(d.get('p90'))}  p99 {ms(d.get('p99'))}  "
            f"max {ms(d.get('max'))}  (n={d.get('count', 0)})",
        ]
        if self.windows:
            spans = ", ".join(f"{(end - start) / 1000:.1f} s" for start, end in self.windows)
            lines += [
                f"  crash windows          {len(self.windows):6d}   ({spans})",
                f"  due in the windows     {len(self.due_in_window):6d}",
                f"  MISSED in the windows  {len(self.missed_in_window):6d}",
                f"  MISSED outside them    {len(self.missed_outside_window):6d}{keys(self.missed_outside_window)}",
            ]
        return "\n".join(lines)


def check(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    expected: Iterable[Expected],
    fires: Iterable[Fire],
    epsilon_ms: float = 1_000.0,
    allowance: Iterable[str] = (),
    *,
    late_is_failure: bool = False,
    windows: Iterable[tuple[float, float]] = (),
) -> Verdict:
    """Match ``expected`` occurrences to observed ``fires`` and judge the result (see the module docstring).

    Parameters
    ----------
    expected:
        Every occurrence that should have fired (keys must be distinct).
    fires:
        Every fire observed at the target, in any order.
    epsilon_ms:
        Tolerance for "early" and "late" (and added to the grace for "past grace").
    allowance:
        Keys for which one extra fire is explained (the crash window: fired, then the executor died before
        recording; see ``punctual.stores.dynamodb.writes``).
    late_is_failure:
        Count fires later than ``due + epsilon_ms`` as a failure (by default they are only reported).
    windows:
        Crash windows ``(start_ms, end_ms)``, both ends included: from a dead executor's last sign of life to
        the moment its death was known. Given, they are counted, and a MISSED occurrence due outside all of
        them fails the verdict.

    Raises
    ------
    ValueError
        Two expected occurrences share a key.
    """
    by_key = _index_expected(expected)
    all_fires = sorted(fires, key=lambda f: (f.observed_ms, f.key))
    tally = _Tally()
    tally.count(by_key, _group_by_key(all_fires), epsilon_ms=epsilon_ms, allowed=frozenset(allowance))

    spans = tuple(sorted((float(start), float(end)) for start, end in windows))

    def in_a_window(key: str) -> bool:
        return any(start <= by_key[key].due_ms <= end for start, end in spans)

    return Verdict(
        windows=spans,
        due_in_window=tuple(k for k in by_key if in_a_window(k)) if spans else (),
        missed_in_window=tuple(k for k in tally.missed if in_a_window(k)) if spans else (),
        missed_outside_window=tuple(k for k in tally.missed if not in_a_window(k)) if spans else (),
        epsilon_ms=epsilon_ms,
        expected=len(by_key),
        fires=len(all_fires),
        matched=tuple(tally.matched),
        lost=tuple(tally.lost),
        explicitly_missed=tuple(tally.missed),
        failed=tuple(tally.failed),
        cancelled=tuple(tally.cancelled),
        skipped=tuple(tally.skipped),
        extra=tuple(tally.extra),
        unexplained=tuple(tally.unexplained),
        unknown=tuple(tally.unknown),
        rejected=tuple(f for f in all_fires if not f.accepted),
        fired_cancelled=tuple(tally.fired_cancelled),
        late=tuple(tally.late),
        early=tuple(tally.early),
        past_grace=tuple(tally.past_grace),
        drift=summarize(tally.drifts),
        late_is_failure=late_is_failure,
    )


def _index_expected(expected: Iterable[Expected]) -> dict[str, Expected]:
    """The expected occurrences by key; a key given twice is a :class:`ValueError`."""
    by_key: dict[str, Expected] = {}
    for occurrence in expected:
        if occurrence.key in by_key:
            raise ValueError(f"expected occurrence {occurrence.key!r} given twice")
        by_key[occurrence.key] = occurrence
    return by_key


def _group_by_key(fires: Iterable[Fire]) -> dict[str, list[Fire]]:
    """The fires of each key, in the order given."""
    observed: dict[str, list[Fire]] = {}
    for fire in fires:
        observed.setdefault(fire.key, []).append(fire)
    return observed


@dataclass(slots=True)
class _Tally:
    """What :func:`check` counts while it matches the expected occurrences to the fires observed."""

    matched: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    fired_cancelled: list[str] = field(default_factory=list)
    late: list[tuple[str, float]] = field(default_factory=list)
    early: list[tuple[str, float]] = field(default_factory=list)
    past_grace: list[tuple[str, float]] = field(default_factory=list)
    drifts: list[float] = field(default_factory=list)
    extra: list[Fire] = field(default_factory=list)
    unexplained: list[Fire] = field(default_factory=list)
    unknown: list[Fire] = field(default_factory=list)

    def count(
        self,
        by_key: Mapping[str, Expected],
        observed: Mapping[str, list[Fire]],
        *,
        epsilon_ms: float,
        allowed: frozenset[str],
    ) -> None:
        """Count every expected occurrence against its fires, then every fire of a key nobody expected."""
        for key, occurrence in by_key.items():
            seen = observed.get(key, [])
            if seen:
                self._count_fired(occurrence, seen, epsilon_ms=epsilon_ms, allowed=allowed)
            else:
                self._count_unfired(occurrence)
        for key, seen in observed.items():
            if key not in by_key:
                self.unknown.extend(seen)
                self.extra.extend(seen)
                self.unexplained.extend(seen)

    def _count_unfired(self, occurrence: Expected) -> None:
        """An occurrence never fired: explained by its recorded outcome, or lost."""
        by_outcome = {
            "MISSED": self.missed,
            "FAILED": self.failed,
            "CANCELLED": self.cancelled,
            SKIPPED: self.skipped,
        }
        by_outcome.get(occurrence.outcome or "", self.lost).append(occurrence.key)

    def _count_fired(
        self, occurrence: Expected, seen: list[Fire], *, epsilon_ms: float, allowed: frozenset[str]
    ) -> None:
        """An occurrence fired: its drift judged on its first accepted fire, its further accepted fires extra."""
        key = occurrence.key
        accepted = [f for f in seen if f.accepted]
        first = accepted[0] if accepted else seen[0]
        self.matched.append(key)
        if occurrence.outcome == "CANCELLED":
            self.fired_cancelled.append(key)
        drift = first.observed_ms - occurrence.due_ms
        self.drifts.append(drift)
        if drift > epsilon_ms:
            self.late.append((key, drift))
        elif drift < -epsilon_ms:
            self.early.append((key, drift))
        if occurrence.grace_ms is not None and not occurrence.fire_late and drift > occurrence.grace_ms + epsilon_ms:
            self.past_grace.append((key, drift))
        extras = accepted[1:]
        self.extra.extend(extras)
        self.unexplained.extend(extras[1:] if key in allowed else extras)


# -- adapters ----------------------------------------------------------------------------------------------
class _Received(Protocol):
    key: str | None
    received_ms: float
    status: int


def fires_from_target(records: Iterable[_Received]) -> list[Fire]:
    """Fires as the loopback target (:class:`punctual_tools.local.target.TargetServer`) recorded them: keyed by the
    ``Idempotency-Key`` header, observed at the receive time, rejected when it answered an error. A request
    without the header counts under the key ``"<none>"`` (an unknown key)."""
    return [Fire(r.key or "<none>", float(r.received_ms), r.status < HTTPStatus.BAD_REQUEST) for r in records]


def fires_from_fire_log(entries: Iterable[Mapping[str, Any]]) -> list[Fire]:
    """Fires from the log action's fire log (the entries :func:`punctual_tools.demo.read_fires` returns): keyed by
    ``key``, observed at ``fired_ms`` (when the action started; the log action cannot fail)."""
    return [Fire(str(e.get("key") or f"{e.get('task_id')}:0"), float(e["fired_ms"])) for e in entries]


def occurrence_due_ms(task: Any) -> int:
    """The occurrence's own due instant: a retry moves ``due_at`` and keeps the original in ``first_due_at``."""
    first = getattr(task, "first_due_at", None)
    return to_ms(first) if first is not None else int(task.due_ms)


def expected_from_tasks(tasks: Iterable[Any]) -> list[Expected]:
    """Expected occurrences from :class:`~punctual.domain.model.Task` objects as stored (their status is the
    outcome, their grace and misfire policy are checked; drift is measured from the occurrence's first due
    instant, before any retry moved it)."""
    return [
        Expected(
            t.task_id,
            t.occurrence,
            float(occurrence_due_ms(t)),
            str(t.status.value) if t.status is not None else None,
            t.misfire_grace_ms,
            getattr(t, "misfire_policy", "skip") == "fire_late",
        )
        for t in tasks
    ]


def expected_from_due(
    due_ms: Mapping[str, int],
    outcomes: Mapping[str, Any] | None = None,
    grace_ms: float | None = None,
    occurrence: int = 0,
) -> list[Expected]:
    """Expected occurrences from a ``task id -> due ms`` map (a demo or load-test plan) and, optionally, the
    outcome recorded for each (a status or its value; missing ids have no outcome)."""
    outcomes = outcomes or {}

    def value(status: Any) -> str | None:
        return None if status is None else str(getattr(status, "value", status))

    return [
        Expected(task_id, occurrence, due, value(outcomes.get(task_id)), grace_ms) for task_id, due in due_ms.items()
    ]


def expected_from_schedule(
    schedule: Any, after_ms: int, until_ms: int, stored: Mapping[str, Any], downtime: Iterable[tuple[int, int]] = ()
) -> list[Expected]:
    """Every occurrence a recurring schedule's definition has in ``(after_ms, until_ms]``, computed from its
    expression (:mod:`punctual.domain.recurrence`), not from what the chain made; each with the outcome of its task in
    ``stored`` (task id -> task), if there is one. An occurrence with no task that fell in a ``downtime`` window
    ``(start, end)`` more than its grace before the window ended is SKIPPED (the downtime policy), not lost."""
    windows = list(downtime)
    expected: list[Expected] = []
    for due in instants_after(schedule, after_ms):
        if due > until_ms:
            break
        task_id = occurrence_id(schedule.schedule_id, due)
        task = stored.get(task_id)
        if task is not None:
            expected.extend(expected_from_tasks([task]))
            continue
        down = any(start <= due < end - schedule.misfire_grace_ms for start, end in windows)
        expected.append(
            Expected(
                task_id,
                0,
                due,
                SKIPPED if down else None,
                schedule.misfire_grace_ms,
                schedule.misfire_policy == "fire_late",
            )
        )
    return expected
