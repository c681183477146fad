"""The load test's ledgers and its check (:mod:`loadtest.locustfile`): what each user's calls reported, and, when
the test stops, the plan they add up to judged against the stack's fire log by the checker. Apart from locust, so
that it can be tested without it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from punctual import Client
from punctual.domain.model import TaskStatus, occurrence_id, split_occurrence_id
from punctual.domain.schedules import Schedule, ScheduleState, instants_after
from punctual_tools.checker import Verdict, occurrence_due_ms
from punctual_tools.demo import FireLogTail, check_fire_log

# -- what the calls reported ------------------------------------------------------------------------------------
DUE, CANCELLED, UNKNOWN = "due", "cancelled", "unknown"
LANDING_S = 3.0  # a request the API server was still finishing when its caller stopped has landed by then


@dataclass(frozen=True)
class Expectation:
    """What a task should do, as its last call reported: fire at ``due_ms`` (DUE), not fire (CANCELLED), or
    UNKNOWN (the call's effect is unknown: the table decides)."""

    state: str
    due_ms: int


@dataclass(frozen=True)
class ScheduleExpectation:
    """A recurring schedule as the calls reported it: its definition (None: the create's effect is unknown, the
    table decides) and, once a pause was asked, the instant the call started (occurrences after it need not be
    made; one made before it was either armed, and fires, or is CANCELLED)."""

    schedule: Schedule | None
    paused_from_ms: int | None = None


# -- the check -----------------------------------------------------------------------------------------------------
def resolve(client: Client, ledger: dict[str, Expectation]) -> tuple[dict[str, int], set[str]]:
    """The plan (task id -> due ms) and the cancelled ids; an UNKNOWN entry is what the table holds now."""
    due: dict[str, int] = {}
    cancelled: set[str] = set()
    for task_id, written in ledger.items():
        expectation = written
        if written.state == UNKNOWN:
            stored = client.get(task_id)
            if stored is None:
                continue  # never stored
            state = CANCELLED if stored.status is TaskStatus.CANCELLED else DUE
            expectation = Expectation(state, occurrence_due_ms(stored))
        due[task_id] = expectation.due_ms
        if expectation.state == CANCELLED:
            cancelled.add(task_id)
    return due, cancelled


def occurrences(client: Client, schedules: dict[str, ScheduleExpectation]) -> tuple[dict[str, int], set[str]]:
    """The plan (task id -> due ms) of the recurring schedules: every instant of each definition up to its end (or
    to when it was paused), plus any occurrence the schedule made beyond that (armed before the pause: it fires;
    or CANCELLED: the table says so); and the ids of the schedules not stored (yet)."""
    due: dict[str, int] = {}
    absent: set[str] = set()
    for schedule_id, expectation in schedules.items():
        stored = client.get_schedule(schedule_id)
        if stored is None:
            absent.add(schedule_id)  # never stored, or a create its user was stopped in the middle of lands later
            continue
        # A pause whose call failed in a way that says nothing took effect leaves the schedule ACTIVE.
        paused_from = expectation.paused_from_ms if stored.state is ScheduleState.PAUSED else None
        for at in instants_after(expectation.schedule or stored, 0):  # start to end (every schedule here has one)
            if paused_from is not None and at > paused_from:
                break
            due[occurrence_id(schedule_id, at)] = at
        for made in client.schedule_history(schedule_id):
            split = split_occurrence_id(made.task_id)
            if split is not None:
                due[made.task_id] = split[1]
    return due, absent


def check_ledgers(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    client: Client,
    fire_log: Path,
    prefix: str,
    ledger: dict[str, Expectation],
    schedules: dict[str, ScheduleExpectation],
    *,
    margin_s: float,
    epsilon_ms: float,
    progress: Callable[[int, int, float, bool], None] | None = None,
) -> Verdict:
    """Wait (until every expected task fired, or the last due time + ``margin_s``) for the fires the ledgers
    expect in ``fire_log`` (ids starting with ``prefix``), then the checker's verdict. ``progress(fired,
    expected, seconds_left, last)`` after each read of the log."""
    began = time.monotonic()
    due, cancelled = resolve(client, ledger)
    recurring, absent = occurrences(client, schedules)

    def expected() -> tuple[set[str], float]:
        to_fire = {task_id for task_id in due | recurring if task_id not in cancelled}
        return to_fire, max(((due | recurring)[t] for t in to_fire), default=0) + margin_s * 1000

    to_fire, deadline_ms = expected()

    def show(fired: int, last: bool) -> None:
        if progress is not None:
            progress(fired, len(to_fire), max((deadline_ms - time.time() * 1000) / 1000, 0.0), last)

    tail = FireLogTail(fire_log, prefix)
    tail.wait(to_fire, deadline_ms, progress=show)
    # A call its user was stopped in the middle of can land after the first read: the API server finishes a request
    # whose caller has gone. Read those calls' tasks and every schedule again (no sooner than LANDING_S after the
    # first read: a create or a pause that landed since counts as it is now), and wait for what is expected now.
    time.sleep(max(0.0, began + LANDING_S - time.monotonic()))
    unread = {task_id: e for task_id, e in ledger.items() if e.state == UNKNOWN and task_id not in due}
    landed, landed_cancelled = resolve(client, unread)
    due.update(landed)
    cancelled |= landed_cancelled
    if landed or absent or any(e.paused_from_ms is not None for e in schedules.values()):
        recurring, _ = occurrences(client, schedules)
        to_fire, deadline_ms = expected()
        tail.wait(to_fire, deadline_ms, progress=show)
    time.sleep(1.0)  # let the last outcomes be recorded (and a late duplicate show)
    return check_fire_log(
        client,
        due | recurring,
        list(tail.read()),
        epsilon_ms=epsilon_ms,
        grace_ms=client.settings.default_misfire_grace_ms,
        cancelled=cancelled,
    )
