"""The chain service: make a recurring schedule's next occurrences, and clean up after a change of it.

Called by the client (right after creating, resuming or updating a schedule) and by the poller (for every
schedule its look for due work found: see :mod:`punctual.stores.ports` for when one is found). Whoever
comes first does the work; the others find the cursor moved and do nothing (every write is conditional).
Each chunk is admitted against its tenant's ``active_tasks`` quota; what does not fit is held back, the cursor
left at it, until a later call finds room (:mod:`punctual.scheduling.quotas`).

A change (pause, update, delete) is written first, one version up, with ``cleanup`` set; then the occurrences
an older version made that are still PENDING are cancelled, and the flag is cleared. If the caller dies in
between, the schedule waits in the due index and the next poll finishes the cleanup. An older version's
occurrence already ARMED is its executor's: it fires as it was made (the documented outcome of a change racing
an arm), and a newer version makes no occurrence at that instant.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass, field

from punctual.domain.model import Task, TaskStatus, occurrence_id
from punctual.domain.schedules import Schedule, instants_after, plan_advance
from punctual.errors import TaskNotFoundError, TaskStateError
from punctual.scheduling.quotas import TenantAdmission
from punctual.stores.ports import ClientPort, SchedulePort

log = logging.getLogger(__name__)

MAX_ROUNDS = 50  # transactions one call makes at most (98 occurrences each)
MAX_NAMED = 10_000  # occurrences a cleanup names by id at most (a poll window of rate(100 milliseconds) is ~2,500)
CLEANUP_LOOKBACK_MS = 86_400_000  # the longest misfire grace: an older PENDING occurrence cannot be older than this


@dataclass
class ChainReport:
    """What one call did to one schedule: the occurrences it created (tasks), how many instants it skipped
    after downtime, how many older occurrences it cancelled, whether it lost a race to another caller, and how
    many occurrences it held back for its tenant's ``active_tasks`` quota (made by a later call, once there is
    room)."""

    schedule_id: str
    created: list[Task] = field(default_factory=list)
    skipped: int = 0
    cancelled: int = 0
    raced: bool = False
    held_back: int = 0


def extend(  # noqa: PLR0913  the ports, the schedule and its window; the admission keyword-only
    schedules: SchedulePort,
    tasks: ClientPort,
    schedule_id: str,
    now_ms: int,
    until_ms: int,
    *,
    admit: TenantAdmission | None = None,
) -> ChainReport:
    """Create the schedule's occurrences due up to ``until_ms`` that do not exist yet (finishing a pending
    cleanup first), each admitted by ``admit`` against its tenant's ``active_tasks`` quota: past it, those left
    are held back (logged, counted in the report; the cursor stays at the first of them, for the next call)."""
    report = ChainReport(schedule_id)
    taken: set[str] = set()  # instants an older version's live occurrence holds
    for _ in range(MAX_ROUNDS):
        schedule = schedules.get_schedule(schedule_id)
        if schedule is None:
            return report
        if schedule.cleanup:
            report.cancelled += cleanup(schedules, tasks, schedule, now_ms)
            continue
        step = plan_advance(schedule, now_ms, until_ms)
        if step is None:
            return report
        wanted = len(step.occurrences)
        with admit(schedule_id, wanted, partial=True) if admit is not None else nullcontext(wanted) as room:
            if room < wanted:
                report.held_back = wanted - room
                log.warning(
                    "schedule %s: %d occurrences held back, past its tenant's active_tasks quota; made when there "
                    "is room",
                    schedule_id,
                    report.held_back,
                    extra={"schedule_id": schedule_id, "quota": "active_tasks", "held_back": report.held_back},
                )
                step = plan_advance(schedule, now_ms, until_ms, limit=room) if room else None
                if step is None:
                    return report
            made = [schedule.occurrence(ms, late=ms == step.late_ms) for ms in step.occurrences]
            made = [t for t in made if t.task_id not in taken]
            result = schedules.advance_schedule(schedule, step, made, now_ms)
        if result.done:
            report.created.extend(made)
            report.skipped += step.skipped
            if report.held_back or step.next_due_ms is None or step.next_due_ms > until_ms:
                return report
            continue
        if not result.blocked:
            report.raced = True  # another caller moved the cursor, or the schedule changed: read it again
            continue
        cancelled, held = _clear_blocked(tasks, schedule, result.blocked, now_ms)
        report.cancelled += cancelled
        taken |= held
    log.warning("schedule %s: still not extended to %d after %d rounds", schedule_id, until_ms, MAX_ROUNDS)
    return report


def _clear_blocked(tasks: ClientPort, schedule: Schedule, blocked: list[str], now_ms: int) -> tuple[int, set[str]]:
    """Cancel the occurrences in ``blocked`` that an older version of ``schedule`` made: how many were cancelled,
    and the ids still held by one (armed, or changed meanwhile); an occurrence gone meanwhile is in neither."""
    cancelled, held = 0, set()
    existing = tasks.get_many(blocked)
    for task_id in blocked:
        task = existing.get(task_id)
        if task is None:
            continue  # gone meanwhile: the next round creates it
        if _cancel_older(tasks, schedule, task, now_ms):
            cancelled += 1
        else:
            held.add(task_id)
    return cancelled, held


def _cancel_older(tasks: ClientPort, schedule: Schedule, task: Task, now_ms: int) -> bool:
    """Cancel ``task`` if an older version of ``schedule`` made it and it is still changeable."""
    if (task.schedule_version or 0) >= schedule.version or task.status is not TaskStatus.PENDING:
        return False
    try:
        tasks.cancel(task.task_id, now_ms)
    except (TaskStateError, TaskNotFoundError):
        return False  # armed meanwhile: it fires as its version made it
    return True


def cleanup(  # noqa: PLR0913  the ports, the schedule and the instant; what it was before keyword-only
    schedules: SchedulePort,
    tasks: ClientPort,
    schedule: Schedule,
    now_ms: int,
    *,
    before: Schedule | None = None,
    until_ms: int | None = None,
) -> int:
    """Cancel the occurrences older versions of ``schedule`` made that are still PENDING, then clear its
    ``cleanup`` flag. How many were cancelled.

    They are listed by the ``schedule`` index, which is eventually consistent: an occurrence a poll made a
    moment before the change may not be listed yet. So a caller that has the schedule as it was ``before`` the
    change also names the occurrences its definition has from a grace ago up to ``until_ms`` (as far ahead as
    any poll makes them), and those are read by id as well."""
    ids = schedules.schedule_occurrence_ids(schedule.schedule_id, from_ms_=now_ms - CLEANUP_LOOKBACK_MS)
    if before is not None and until_ms is not None:
        ids = list(dict.fromkeys([*ids, *_instants_made(before, now_ms, until_ms)]))
    cancelled = sum(1 for task in tasks.get_many(ids).values() if _cancel_older(tasks, schedule, task, now_ms))
    schedules.finish_cleanup(schedule, now_ms)
    return cancelled


def _instants_made(before: Schedule, now_ms: int, until_ms: int) -> list[str]:
    """The ids of the occurrences ``before``'s definition may have made that can still be PENDING: due from a grace
    ago up to ``until_ms`` (at most MAX_NAMED of them)."""
    ids: list[str] = []
    for instant in instants_after(before, now_ms - before.misfire_grace_ms - 1):
        if instant > until_ms or len(ids) >= MAX_NAMED:
            break
        ids.append(occurrence_id(before.schedule_id, instant))
    return ids
