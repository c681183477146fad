"""The poller service: find due and overdue tasks and hand them to executors, writing nothing per task.

Each tick asks the store for every armable task due up to ``now + lead``, overdue ones included however old
(scheduled rules can be ~119 s apart and index writes lag: how the store keeps that promise is its business,
see :meth:`punctual.store.TaskStore.find_due`), cuts them into batches in due order and invokes one executor
per batch, the invocations in parallel. The per-task conditional write (ARM) happens in the executors, in
parallel: two pollers at one instant, a duplicate async delivery, the fast path racing a poll all dispatch the
same task, and all but one executor lose at ARM. A tick stops dispatching when ``out_of_time()`` says so (its
Lambda's remaining time): what it did not dispatch is still PENDING, and the next tick finds it.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from .events import BatchEvent, BatchTask, DispatchReport, PollReport
from .invoker import Invoker
from .model import Candidate, TaskStatus
from .settings import Settings
from .store import TaskStore

log = logging.getLogger(__name__)

INVOKE_THREADS = 8  # async invocations in flight at once


def make_batches(candidates: list[Candidate], max_size: int) -> list[list[Candidate]]:
    """Candidates in due order, cut into batches of at most ``max_size``."""
    ordered = sorted(candidates, key=lambda c: (c.due_ms, c.task_id))
    return [ordered[i : i + max_size] for i in range(0, len(ordered), max_size)]


def batch_event(batch: list[Candidate], dispatcher_id: str) -> BatchEvent:
    """The executor's event for one batch: each task with the due time it was found at (the ARM condition)."""
    return BatchEvent(
        batch_id=uuid.uuid4().hex,
        claimed_by=dispatcher_id,
        tasks=[BatchTask(task_id=c.task_id, due_ms=c.due_ms, grace_ms=c.misfire_grace_ms,
                         **({} if c.misfire_policy == "skip" else {"misfire_policy": c.misfire_policy}))
               for c in batch],
    )


class Poller:
    """One poll = one call of :meth:`poll` with an explicit ``now_ms``. The fast path (the table stream)
    hands the tasks it sees to :meth:`dispatch`, the same batch-and-invoke step the poll ends with."""

    def __init__(self, store: TaskStore, invoker: Invoker, settings: Settings,
                 poller_id: str | None = None) -> None:
        self._store = store
        self._invoker = invoker
        self._settings = settings
        self.poller_id = poller_id or f"p-{uuid.uuid4().hex[:12]}"

    def poll(self, now_ms: int, out_of_time: Callable[[], bool] | None = None) -> PollReport:
        """One tick: find every armable task due up to ``now + lead`` (overdue included), then :meth:`dispatch`;
        both stop early once ``out_of_time()`` is true."""
        end_ms = now_ms + self._settings.lead_ms
        scan = self._store.find_due(now_ms, end_ms, out_of_time)
        done = self.dispatch(scan.candidates, out_of_time)
        report = PollReport(now_ms=now_ms, window_end_ms=end_ms, watermark_ms=scan.watermark_ms, buckets=scan.buckets,
                            queries=scan.queries, candidates=len(scan.candidates), undecodable=scan.undecodable,
                            complete=scan.complete and done.undispatched == 0,
                            **done.model_dump())
        log.info("poll: %s", report.model_dump())
        return report

    def dispatch(self, candidates: list[Candidate], out_of_time: Callable[[], bool] | None = None) -> DispatchReport:
        """Cut ``candidates`` into batches and invoke one executor per batch, in parallel, until
        ``out_of_time()``. A failed invocation leaves its tasks as they are: the next poll dispatches them."""
        batches = make_batches(candidates, self._settings.max_batch_size)
        lock = threading.Lock()
        sent = {"batches": 0, "tasks": 0, "failures": 0, "skipped": 0}

        def invoke(batch: list[Candidate]) -> None:
            if out_of_time is not None and out_of_time():
                with lock:
                    sent["skipped"] += len(batch)
                return
            event = batch_event(batch, self.poller_id)
            try:
                # exclude_unset: a default ("skip") policy adds nothing to the payload (up to 256 KB async)
                self._invoker.invoke_async(event.model_dump(mode="json", exclude_unset=True))
            except Exception:  # noqa: BLE001 - the tasks stay as they are; the next poll dispatches them again
                log.exception("invoking an executor for batch %s failed", event.batch_id)
                with lock:
                    sent["failures"] += 1
                return
            with lock:
                sent["batches"] += 1
                sent["tasks"] += len(batch)

        if len(batches) <= 1:
            for batch in batches:
                invoke(batch)
        else:
            with ThreadPoolExecutor(max_workers=INVOKE_THREADS, thread_name_prefix="invoke") as pool:
                list(pool.map(invoke, batches))
        return DispatchReport(dispatched=sent["tasks"], batches=sent["batches"], invoke_failures=sent["failures"],
                              undispatched=sent["skipped"],
                              recovered=sum(1 for c in candidates if c.status is not TaskStatus.PENDING))
