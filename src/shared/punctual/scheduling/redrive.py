"""Redrive: FAILED tasks back to PENDING, due now, attempt 0, and their dead letters removed.

One policy for ``punctual redrive``, the client's :meth:`~punctual.scheduling.client.Client.redrive` and the REST API's
``POST /v1/tasks/{id}/redrive`` (through the client). :func:`redrive_tasks` takes a :class:`Selection`, reads
each selected task (strongly consistent), redrives those it read FAILED in one ``redrive_many`` and answers a
:class:`RedriveReport`: the tasks redriven, and each task skipped with its :class:`SkipReason`:

* ``NOT_FOUND``: no readable task under the id (never created, expired, or an item that is no task);
* ``NOT_FAILED``: the task was not FAILED when read (already redriven, never failed, still running);
* ``LOST_RACE``: read FAILED, but another change (another caller's redrive, the record expiring) came first: the
  REDRIVE write's condition no longer held;
* ``OVER_QUOTA``: read FAILED, but its tenant has no room for one more active task (``active_tasks``, admitted as a
  create is: :mod:`punctual.scheduling.quotas`); it stays FAILED, its dead letter kept.

With a dead-letter queue, every message it holds is read first. The messages of tasks redriven now, or of tasks
no longer FAILED or gone (stale: an earlier redrive did not get to remove them), are removed; the others (tasks
still FAILED, or not selected) are handed back to the queue.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from punctual.domain.model import Task, TaskStatus
from punctual.domain.tenancy import split

if TYPE_CHECKING:
    from punctual.scheduling.quotas import TenantAdmission
    from punctual.stores.dlq import DeadLetter, RedrivableQueue
    from punctual.stores.ports import ClientPort


class SkipReason(StrEnum):
    """Why a selected task was not redriven."""

    NOT_FOUND = "not found"
    NOT_FAILED = "not FAILED"
    LOST_RACE = "lost the race"
    OVER_QUOTA = "over its tenant's quota"


@dataclass(frozen=True, kw_only=True, slots=True)
class Selection:
    """Which tasks to redrive: those named, every FAILED task in the store, every task the dead-letter queue holds a
    message for, or any of these together (each task once, in that order)."""

    task_ids: tuple[str, ...] = ()
    failed: bool = False
    dead_lettered: bool = False

    @classmethod
    def of(cls, task_ids: Iterable[str]) -> Selection:
        """The tasks named."""
        return cls(task_ids=tuple(task_ids))

    @classmethod
    def everything(cls) -> Selection:
        """Every task with a dead letter and every FAILED task (one whose message was never sent is found too)."""
        return cls(failed=True, dead_lettered=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class Skipped:
    """A selected task left as it is: why, and the task as last read (None: there is none)."""

    task_id: str
    reason: SkipReason
    task: Task | None = None

    @property
    def status(self) -> TaskStatus | None:
        return None if self.task is None else self.task.status


@dataclass(frozen=True, kw_only=True, slots=True)
class RedriveReport:
    """What :func:`redrive_tasks` did, in the selection's order.

    ``dead_letters_removed`` is None when no dead-letter queue was given.
    """

    redriven: tuple[str, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    dead_letters_removed: int | None = None

    @property
    def counts(self) -> dict[str, int]:
        """How many were redriven, and how many skipped for each reason (every reason named, zero included)."""
        return {
            "redriven": len(self.redriven),
            **{reason.value: sum(1 for s in self.skipped if s.reason is reason) for reason in SkipReason},
        }


def redrive_tasks(
    store: ClientPort,
    selection: Selection,
    now_ms: int,
    dead_letters: RedrivableQueue | None = None,
    admit: TenantAdmission | None = None,
) -> RedriveReport:
    """Redrive the selected FAILED tasks at ``now_ms`` (PENDING, due then, attempt 0) and settle their dead letters.

    Parameters
    ----------
    store:
        The task store.
    selection:
        Which tasks (see :class:`Selection`); ``dead_lettered`` selects nothing without ``dead_letters``.
    now_ms:
        The instant the tasks become due again.
    dead_letters:
        The dead-letter queue whose messages are settled (see the module's docstring), if any.
    admit:
        Admits the tasks of each tenant against its ``active_tasks`` quota (None: no quota); those past it are
        skipped, ``OVER_QUOTA``.
    """
    letters = dead_letters.receive() if dead_letters is not None else []
    task_ids = _selected(store, selection, letters)
    read = store.get_many(task_ids) if task_ids else {}
    failed = [t for t in task_ids if t in read and read[t].status is TaskStatus.FAILED]
    with contextlib.ExitStack() as admissions:
        over = _over_quota(failed, admit, admissions)
        failed = [t for t in failed if t not in over]
        won = dict(zip(failed, store.redrive_many(failed, now_ms), strict=True)) if failed else {}
    lost = [t for t, ok in won.items() if not ok]
    after = store.get_many(lost) if lost else {}
    redriven: list[str] = []
    skipped: list[Skipped] = []
    for task_id in task_ids:
        task = read.get(task_id)
        if task is None:
            skipped.append(Skipped(task_id=task_id, reason=SkipReason.NOT_FOUND))
        elif task_id in over:
            skipped.append(Skipped(task_id=task_id, reason=SkipReason.OVER_QUOTA, task=task))
        elif task_id not in won:
            skipped.append(Skipped(task_id=task_id, reason=SkipReason.NOT_FAILED, task=task))
        elif won[task_id]:
            redriven.append(task_id)
        else:
            skipped.append(Skipped(task_id=task_id, reason=SkipReason.LOST_RACE, task=after.get(task_id)))
    removed = None
    if dead_letters is not None:
        removed = _settle(dead_letters, letters, redriven, skipped)
    return RedriveReport(redriven=tuple(redriven), skipped=tuple(skipped), dead_letters_removed=removed)


def _over_quota(failed: list[str], admit: TenantAdmission | None, admissions: contextlib.ExitStack) -> set[str]:
    """The tasks among ``failed`` their tenant has no room for: each tenant's are admitted together (the first ones
    in the selection's order), the admissions held by ``admissions`` until the redrive's writes have landed."""
    if admit is None:
        return set()
    by_tenant: dict[str | None, list[str]] = {}
    for task_id in failed:
        by_tenant.setdefault(split(task_id)[0], []).append(task_id)
    over: set[str] = set()
    for ids in by_tenant.values():
        room = admissions.enter_context(admit(ids[0], len(ids), partial=True))
        over.update(ids[room:])
    return over


def _selected(store: ClientPort, selection: Selection, letters: list[DeadLetter]) -> list[str]:
    """The selection's task ids, each once, in order: those named, those dead-lettered, the FAILED ones."""
    task_ids = list(selection.task_ids)
    if selection.dead_lettered:
        task_ids.extend(letter.task_id for letter in letters)
    if selection.failed:
        task_ids.extend(task.task_id for task in store.list_tasks([TaskStatus.FAILED]))
    return list(dict.fromkeys(task_ids))


def _settle(queue: RedrivableQueue, letters: list[DeadLetter], redriven: list[str], skipped: list[Skipped]) -> int:
    """Remove the letters of the tasks redriven now or no longer FAILED, hand the others back; how many removed."""
    settled = set(redriven) | {s.task_id for s in skipped if s.status is not TaskStatus.FAILED}
    done = [letter for letter in letters if letter.task_id in settled]
    removed = queue.acknowledge(done) if done else 0
    queue.release([letter for letter in letters if letter.task_id not in settled])
    return removed
