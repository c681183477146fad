"""The poller service: find due and overdue tasks in the due index, claim them, hand them to executors.

Each tick queries every shard of every minute bucket from the watermark (the oldest bucket that may still
hold an active task) up to ``now + lead``. Overdue tasks are always included: scheduled rules can be ~119 s
apart and index writes lag, so the watermark stays at least ``overdue_safety_ms`` behind now and never passes
a bucket in which an active task was seen.
"""

from __future__ import annotations

import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

from .events import BatchEvent, BatchTask, DispatchReport, PollReport
from .invoker import Invoker
from .keys import bucket_start, buckets_between
from .model import TaskStatus, misfire_decision
from .repository import Candidate, DynamoTaskRepository
from .settings import Settings

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

    def __init__(self, repository: DynamoTaskRepository, invoker: Invoker, settings: Settings,
                 poller_id: str | None = None) -> None:
        self._repo = repository
        self._invoker = invoker
        self._settings = settings
        self.poller_id = poller_id or f"p-{uuid.uuid4().hex[:12]}"

    def poll(self, now_ms: int) -> PollReport:
        s = self._settings
        end_ms = now_ms + s.lead_ms
        safety_bucket = bucket_start(now_ms - s.overdue_safety_ms)
        watermark = self._repo.get_watermark()
        if watermark is None:
            oldest = self._repo.oldest_active_due()
            watermark = min(safety_bucket, oldest) if oldest is not None else safety_bucket
        buckets = buckets_between(watermark, end_ms)
        queries = [(b, sh) for b in buckets for sh in range(self._repo.shard_count)]
        with ThreadPoolExecutor(max_workers=s.db_threads, thread_name_prefix="poll") as pool:
            pages = list(pool.map(lambda q: self._repo.query_index(q[0], q[1], end_ms), queries))
        # The watermark may advance to the oldest bucket still holding an active task, but never closer to
        # now than the safety margin (index lag, late rules, clock skew of writers).
        new_watermark = min([safety_bucket, *(b for (b, _), page in zip(queries, pages, strict=True) if page)])
        # The index may briefly list a rescheduled task under its old and new key: read each task once, from
        # the base table, which also says whether it is still claimable.
        task_ids = list(dict.fromkeys(e.task_id for page in pages for e in page))
        found = self._repo.candidates(task_ids)
        done = self.dispatch([c for c in found if c.due_ms <= end_ms], now_ms)
        self._repo.advance_watermark(new_watermark)
        report = PollReport(now_ms=now_ms, window_end_ms=end_ms, watermark_ms=new_watermark, buckets=len(buckets),
                            queries=len(queries), candidates=len(found), **done.model_dump())
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
        missed = sum(self._repo.mark_missed_many([(c, _missed_detail(c, now_ms)) for c in overdue], now_ms))
        batches = make_batches(to_claim, s.max_batch_size)
        batch_ids = {c.task_id: batch_id for batch in batches for batch_id in [uuid.uuid4().hex] for c in batch}
        won = self._repo.claim_many([(c, batch_ids[c.task_id]) for c in to_claim], self.poller_id, now_ms,
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
