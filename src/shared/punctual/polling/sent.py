"""What a poller sent lately, and which of it a poll sends again (:class:`SentMemory`).

An async invoke answers 202 before Lambda's queue throttles or drops the invocation, so a poll that finds a task
it sent still PENDING cannot tell a dropped invocation from an executor still arming its batch (a burst of
thousands on a slow store, or a restart's catch-up on a busy one). Sent again too soon, the task makes two
executors race at ARM, poll after poll, and the second one's work is wasted where the machine or the store is
the bottleneck already. So each task is remembered with the batch it went in:

- a PENDING task is held back until :func:`send_again` says so (a hold-back has passed, or it is due before
  the next poll could send it in time); one held by the same dead executor as when it was sent is held back for
  an executor lease (the executor it went to is taking it over);
- short of a hold-back, it is sent again only if its batch shows no progress: every other task of the batch is
  still armable, as the same complete poll finds it. One that is not (armed by a live executor, or done) shows
  that the batch's executor ran; if it then dies mid-batch, Lambda retries its invocation, and the hold-back
  bounds the rest;
- what was sent is remembered for a poll interval past its hold-back (the poll that sends it again knows it was
  sent), then forgotten. A memory, not a guarantee: a new process starts empty, and every dispatch stays safe
  at ARM and TAKEOVER.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from punctual.config.settings import Settings
from punctual.domain.model import Candidate, TaskStatus


def send_again(due_ms: int, sent_ms: int, now_ms: int, settings: Settings) -> bool:
    """Whether a poll at ``now_ms`` sends again a task it finds still PENDING that this poller sent at ``sent_ms``.

    Not while it is young: a task still PENDING a poll later is most often one its executor is still arming (a
    burst of thousands on a slow store), and sending it again would make two executors race at ARM, poll after
    poll. It is sent again once ``redispatch_hold_back_ms`` has passed, or sooner when it is due before the next
    poll could send it in time (within a poll interval and the fast-path margin) and was sent at least a poll
    interval ago (less that margin, as a tick may come a little early, but never less than half an interval): no
    executor armed it for that long (throttled, dropped, failed), and waiting would fire it late (unless its
    batch shows progress, see :class:`SentMemory`).
    """
    age = now_ms - sent_ms
    interval, margin = settings.poll_interval_ms, settings.fast_path_margin_ms
    return age >= settings.redispatch_hold_back_ms or (
        due_ms <= now_ms + interval + margin and age >= max(interval - margin, interval // 2)
    )


def sent_key(candidate: Candidate) -> tuple[str, int, str | None]:
    """What a poller remembers of a candidate it sent: the task, its due time and who held it then (None: it
    was PENDING; a task whose lease ended counts as held by its owner)."""
    owner = None if candidate.status is TaskStatus.PENDING else (candidate.owner or "")
    return candidate.task_id, candidate.due_ms, owner


@dataclass
class Sorted:
    """A part of a poll's candidates, sorted by what this poller sent: to send now, to send only if their batch
    shows no progress (:meth:`SentMemory.stalled`, once the poll has found everything), how many are held back,
    and, of the PENDING ones it sent before, how long ago (ms) by task id."""

    send: list[Candidate] = field(default_factory=list)
    unless_progress: list[Candidate] = field(default_factory=list)
    held: int = 0
    unarmed_ages: dict[str, int] = field(default_factory=dict)


class SentMemory:
    """What one poller sent lately: each task (by :func:`sent_key`) with when and in which batch (see the
    module's docstring). Thread-safe: a poll's dispatches run in parallel."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._sent: dict[tuple[str, int, str | None], tuple[int, str]] = {}  # key -> (sent at, batch id)
        self._members: dict[str, frozenset[str]] = {}  # batch id -> its task ids
        self._lock = threading.Lock()

    def remember(self, batch_id: str, batch: list[Candidate], sent_at_ms: int) -> None:
        """``batch`` went out as ``batch_id`` at ``sent_at_ms`` (a hold-back of 0: nothing is remembered)."""
        if not self._settings.redispatch_hold_back_ms:
            return
        with self._lock:
            self._sent.update((sent_key(c), (sent_at_ms, batch_id)) for c in batch)
            self._members[batch_id] = frozenset(c.task_id for c in batch)

    def sort(self, candidates: list[Candidate], now_ms: int) -> Sorted:
        """Sort ``candidates`` found by a poll at ``now_ms``; what was sent longer ago than it remembers is
        forgotten first."""
        settings = self._settings
        hold_back = settings.redispatch_hold_back_ms
        lease = min(hold_back, settings.executor_lease_ms)
        out = Sorted()
        with self._lock:
            self._forget(now_ms - hold_back - settings.poll_interval_ms)
            for candidate in candidates:
                key = sent_key(candidate)
                sent = self._sent.get(key)
                if sent is None:
                    out.send.append(candidate)
                    continue
                age = now_ms - sent[0]
                if key[2] is None:
                    out.unarmed_ages[candidate.task_id] = age
                    due_now = send_again(candidate.due_ms, sent[0], now_ms, settings)
                    if due_now and age >= hold_back:
                        out.send.append(candidate)
                    elif due_now:
                        out.unless_progress.append(candidate)
                    else:
                        out.held += 1
                elif age >= hold_back:
                    out.send.append(candidate)
                elif age >= lease:
                    out.unless_progress.append(candidate)
                else:
                    out.held += 1
        return out

    def stalled(self, candidates: list[Candidate], found: set[str]) -> list[Candidate]:
        """Those of ``candidates`` (each one this poller sent) whose batch shows no progress: every other task of
        the batch is still in ``found``, the ids of everything a complete poll found armable."""
        with self._lock:
            batches = {c.task_id: self._sent.get(sent_key(c), (0, ""))[1] for c in candidates}
            return [c for c in candidates if self._members.get(batches[c.task_id], frozenset()) - {c.task_id} <= found]

    def _forget(self, before_ms: int) -> None:
        self._sent = {key: sent for key, sent in self._sent.items() if sent[0] > before_ms}
        live = {batch for _, batch in self._sent.values()}
        self._members = {batch: ids for batch, ids in self._members.items() if batch in live}
