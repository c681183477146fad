"""The poller service: find due and overdue tasks, claim them, hand them to executors.

Each tick asks the store for every active task due up to ``now + lead``, overdue ones included however old
(scheduled rules can be ~119 s apart and index writes lag: how the store keeps that promise is its business,
see :meth:`punctual.store.TaskStore.find_due`).
"""

from __future__ import annotations

import logging
import uuid

from .decisions import misfire_decision
from .events import BatchEvent, BatchTask, DispatchReport, PollReport
from .invoker import Invoker
from .model import Candidate, TaskStatus
from .settings import Settings
from .store import TaskStore

log = logging.getLogger(__name__)


def _missed_detail(candidate: Candidate, now_ms: int) -> str:
    late = f"found {now_ms - candidate.due_ms} ms after due, past its grace of {candidate.misfire_grace_ms} ms"
    if candidate.status is TaskStatus.ARMED:
        # The crash window: its executor armed it and was lost (lease expired) - before or after firing.
        return f"{late}; its executor was lost after arming it: it may have fired before recording"
    if candidate.status is TaskStatus.CLAIMED:
        return f"{late}; no executor armed it before its claim lease expired"
    return late


def make_batches(claimed: list[Candidate], max_size: int) -> list[list[Candidate]]:
    """Claimed tasks in due order, cut into batches of at most ``max_size``."""
    ordered = sorted(claimed, key=lambda c: (c.due_ms, c.task_id))
    return [ordered[i : i + max_size] for i in range(0, len(ordered), max_size)]


class Poller:
    """One poll = one call of :meth:`poll` with an explicit ``now_ms``. The fast path (the table stream)
    hands the tasks it sees to :meth:`dispatch`, the same claim-and-invoke step the poll ends with."""

    def __init__(self, store: TaskStore, invoker: Invoker, settings: Settings,
                 poller_id: str | None = None) -> None:
        self._store = store
        self._invoker = invoker
        self._settings = settings
        self.poller_id = poller_id or f"p-{uuid.uuid4().hex[:12]}"

    def poll(self, now_ms: int) -> PollReport:
        """One tick: find every active task due up to ``now + lead`` (overdue included), then :meth:`dispatch`."""
        end_ms = now_ms + self._settings.lead_ms
        scan = self._store.find_due(now_ms, end_ms)
        done = self.dispatch(scan.candidates, now_ms)
        report = PollReport(now_ms=now_ms, window_end_ms=end_ms, watermark_ms=scan.watermark_ms, buckets=scan.buckets,
                            queries=scan.queries, candidates=len(scan.candidates), **done.model_dump())
        log.info("poll: %s", report.model_dump())
        return report

    def dispatch(self, candidates: list[Candidate], now_ms: int) -> DispatchReport:
        """Claim what is claimable now, record MISSED what is past its grace (misfire policy "skip"; a
        "fire_late" task is claimed anyway), and invoke one executor per batch of claimed tasks.
        Candidates that are not claimable (a live lease) are left alone."""
        s = self._settings
        claimable = [c for c in candidates if c.claimable_at(now_ms)]
        # Past its grace (now - due > grace; at the grace edge it is still on time): a "skip" task is recorded
        # MISSED; a "fire_late" task is claimed and dispatched like any other (its executor flags it late).
        decisions = [misfire_decision(now_ms - c.due_ms, c.misfire_grace_ms, c.misfire_policy) for c in claimable]
        overdue = [c for c, d in zip(claimable, decisions, strict=True) if d == "miss"]
        to_claim = [c for c, d in zip(claimable, decisions, strict=True) if d != "miss"]
        missed = sum(self._store.mark_missed_many([(c, _missed_detail(c, now_ms)) for c in overdue], now_ms))
        batches = make_batches(to_claim, s.max_batch_size)
        batch_ids = {c.task_id: batch_id for batch in batches for batch_id in [uuid.uuid4().hex] for c in batch}
        won = self._store.claim_many([(c, batch_ids[c.task_id]) for c in to_claim], self.poller_id, now_ms,
                                    s.claim_lease_ms)
        claimed_ids = {c.task_id for c, ok in zip(to_claim, won, strict=True) if ok}
        recovered = sum(1 for c in to_claim if c.task_id in claimed_ids and c.status is not TaskStatus.PENDING)
        invoke_failures = 0
        sent = 0
        for batch in batches:
            mine = [c for c in batch if c.task_id in claimed_ids]
            if not mine:
                continue
            event = BatchEvent(
                batch_id=batch_ids[mine[0].task_id],
                claimed_by=self.poller_id,
                tasks=[BatchTask(task_id=c.task_id, due_ms=c.due_ms, grace_ms=c.misfire_grace_ms,
                                 **({} if c.misfire_policy == "skip" else {"misfire_policy": c.misfire_policy}))
                       for c in mine],
            )
            try:
                # exclude_unset: a default ("skip") policy adds nothing to the payload (up to 256 KB async)
                self._invoker.invoke_async(event.model_dump(mode="json", exclude_unset=True))
                sent += 1
            except Exception:  # noqa: BLE001 - the tasks stay CLAIMED; their lease expires; next poll retries
                invoke_failures += 1
                log.exception("invoking an executor for batch %s failed", event.batch_id)
        return DispatchReport(claimed=len(claimed_ids), recovered=recovered,
                              conflicts=len(to_claim) - len(claimed_ids), missed=missed, batches=sent,
                              invoke_failures=invoke_failures)
