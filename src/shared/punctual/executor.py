"""The executor service: arm a batch, fire each task at its instant, record the outcomes.

Order of work, so that nothing but the action runs between wake-up and fire:

1. **arm** every task of the batch (conditional write CLAIMED → ARMED); a duplicate delivery loses here;
2. **fire** from one dispatcher thread into the worker pool, each task at its due instant;
3. **record** outcome, ``fired_at`` and drift (conditional write ARMED → outcome), only in the quiet gaps
   between fires, so that recording never holds the interpreter when the dispatcher must wake; with no fire
   of this process within :data:`BACKGROUND_S`, as background work (lowered, see :mod:`punctual.priority`),
   so that it never takes a core from another executor's dispatcher either. A failed action
   whose retry policy allows another attempt is recorded as a RETRY instead (ARMED → PENDING, due after a
   backoff drawn by :func:`punctual.retry.retry_delay_ms`; the next try's instant is fixed when the record
   is written, so a record delayed by a burst does not eat into the backoff).
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from .actions import FireContext, run_action
from .clock import Clock, OffsetProbe
from .dispatcher import Dispatcher
from .dlq import DeadLetterQueue
from .events import BatchEvent, BatchReport
from .keys import from_ms, to_ms
from .model import Task, TaskStatus, misfire_decision
from .priority import lower_current_thread
from .repository import DynamoTaskRepository, FireRecord
from .retry import retry_delay_ms
from .settings import Settings

log = logging.getLogger(__name__)

QUIET_S = 0.025  # record only when the next fire is at least this far away
SETTLE_S = 0.2  # ... and at least this long after the latest fire (a burst may still be firing elsewhere)
MAX_NAP_S = 0.25  # the longest the recorder sleeps before it looks again
BACKGROUND_S = 1.0  # with no fire of this process this close, recording is background work (lowered)
RECORD_CHUNK = 100  # outcomes written in one transaction
MAX_ACTION_TIMEOUT_MS = 60_000  # the largest timeout an action model allows


def _run_jobs(jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
    while True:
        job = jobs.get()
        try:
            job()
        except Exception:  # noqa: BLE001 - a failed job must not end the thread
            log.exception("recorder job failed")


def _task_keys(task_id: str, **keys: object) -> dict[str, object]:
    """``extra`` of a per-task log line: under Powertools (the Lambda handlers) the line's correlation id is
    the task id, and it carries ``task_id`` too."""
    return {"task_id": task_id, "correlation_id": task_id, **keys}


def _log_outcome(record: FireRecord) -> None:
    """One line per recorded outcome: DEBUG when it succeeded (the table holds it), WARNING otherwise."""
    level = logging.DEBUG if record.outcome is TaskStatus.SUCCEEDED else logging.WARNING
    if log.isEnabledFor(level):
        log.log(level, "task %s: %s", record.task_id, record.outcome.value,
                extra=_task_keys(record.task_id, outcome=record.outcome.value, drift_ms=record.drift_ms,
                                 detail=record.detail))


def _fire_item(item: tuple[_Armed, Callable[[_Armed], None]]) -> None:
    entry, fire = item
    fire(entry)


@dataclass(slots=True)
class _Armed:
    task: Task
    due_ms: int


class Executor:
    """Runs batches. One instance per process; dependencies are injected."""

    def __init__(self, repository: DynamoTaskRepository, settings: Settings, clock: Clock,
                 offset: OffsetProbe, spin_s: float = 0.001, *, dead_letters: DeadLetterQueue | None = None) -> None:
        self._repo = repository
        self._dead_letters = dead_letters
        self._settings = settings
        self._clock = clock
        self._offset = offset
        self._stopping = threading.Event()
        self._current: Dispatcher[tuple[_Armed, Callable[[_Armed], None]]] | None = None
        # One dispatcher and worker pool for the life of the process (a warm start reuses them), created
        # here, by the thread that builds the executor: threads inherit its CPU priority.
        self._dispatcher: Dispatcher[tuple[_Armed, Callable[[_Armed], None]]] = Dispatcher(
            _fire_item, workers=settings.worker_threads, clock=clock, spin_s=spin_s, name="dispatch",
        )
        # The recorder runs while the batch fires, in the gaps between fires: it keeps the default priority
        # (a starved recorder holding the interpreter would stall the dispatcher), so it is started here too.
        self._record_jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=_run_jobs, args=(self._record_jobs,), name="recorder", daemon=True).start()
        # ... but with no fire of this process near, its writes run here, as background work, so that they
        # never take a core from another executor's dispatcher (on a machine the executors share).
        self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="record-bg",
                                              initializer=lower_current_thread)
        self._cancelled: list[_Armed] = []
        self._stop_lock = threading.Lock()  # cancel_pending + _cancelled change together

    def request_stop(self) -> None:
        """Stop firing: tasks not yet handed to a worker are released back to PENDING (ARMED → PENDING)
        by :meth:`run_batch` before it returns, so a restart finds them again. Safe from a signal handler."""
        self._stopping.set()
        with self._stop_lock:
            current = self._current
            if current is not None:
                self._cancelled.extend(item[0] for item in current.cancel_pending())

    def run_batch(self, event: BatchEvent) -> BatchReport:
        executor_id = f"x-{uuid.uuid4().hex[:12]}"
        armed, lost = self._arm(event, executor_id)
        results: queue.SimpleQueue[FireRecord | None] = queue.SimpleQueue()
        offset = self._offset.current()
        clock = self._clock

        last_fire = [clock.monotonic()]

        def fire(entry: _Armed) -> None:
            started = clock.wall_ms()
            last_fire[0] = clock.monotonic()
            try:
                results.put(fire_one(entry, started))
            except BaseException as exc:  # noqa: BLE001 - the recorder must get one result per task
                results.put(FireRecord(entry.task.task_id, TaskStatus.FAILED, started, int(clock.wall_ms()),
                                       started - entry.due_ms, None, f"executor error: {exc!r}"[:1000]))

        def fire_one(entry: _Armed, started: float) -> FireRecord:
            task = entry.task
            late = started - entry.due_ms
            corrected = None if offset.offset_ms is None else late + offset.offset_ms
            decision = "fire" if late <= task.misfire_grace_ms else misfire_decision(
                late, task.misfire_grace_ms, task.misfire_policy)
            if decision == "miss":
                return FireRecord(task.task_id, TaskStatus.MISSED, None, int(started), None, None,
                                  f"would fire {late:.0f} ms late, past its grace of {task.misfire_grace_ms} ms")
            outcome, detail = TaskStatus.SUCCEEDED, None
            try:
                run_action(task.action, FireContext(task.task_id, task.occurrence, entry.due_ms, started,
                                                    task.payload))
            except Exception as exc:  # noqa: BLE001 - any failure of the action is its outcome
                outcome, detail = TaskStatus.FAILED, f"{type(exc).__name__}: {exc}"[:1000]
            if decision == "fire_late":
                note = f"fired {late:.0f} ms late, past its grace of {task.misfire_grace_ms} ms (policy fire_late)"
                detail = note if detail is None else f"{note}; {detail}"[:1000]
            finished = int(clock.wall_ms())
            if outcome is TaskStatus.FAILED and task.retry is not None:
                first_due = entry.due_ms if task.first_due_at is None else to_ms(task.first_due_at)
                delay = retry_delay_ms(task.retry, task.attempt, first_due, finished)
                if delay is not None:
                    detail = (f"attempt {task.attempt} of {task.retry.max_attempts} failed, next in {delay} ms: "
                              f"{detail}")[:1000]
                    return FireRecord(task.task_id, TaskStatus.PENDING, started, finished, late, corrected, detail,
                                      late=decision == "fire_late", retry_delay_ms=delay, first_due_ms=first_due)
                detail = f"attempt {task.attempt} of {task.retry.max_attempts} failed, no retry left: {detail}"[:1000]
            return FireRecord(task.task_id, outcome, started, finished, late, corrected, detail,
                              late=decision == "fire_late")

        dispatcher = self._dispatcher
        by_id = {entry.task.task_id: entry.task for entry in armed}
        dead_lettered = [0]
        recorded: list[FireRecord] = []
        not_recorded = 0

        def record_loop() -> None:
            nonlocal not_recorded
            remaining = len(armed)
            while remaining:
                first = results.get()
                remaining -= 1
                chunk = [] if first is None else [first]  # None: a task released unfired at shutdown
                while remaining and len(chunk) < RECORD_CHUNK:
                    try:
                        more = results.get_nowait()
                    except queue.Empty:
                        break
                    remaining -= 1
                    if more is not None:
                        chunk.append(more)
                if not chunk:
                    continue
                # Wait for a quiet gap: never hold the interpreter (or a core) when a fire is near.
                while True:
                    gap = dispatcher.seconds_to_next_fire()
                    settle = SETTLE_S - (clock.monotonic() - last_fire[0])
                    if gap >= QUIET_S and settle <= 0:
                        break
                    if gap >= QUIET_S:
                        clock.sleep(settle)
                    else:  # fires follow each other closely: sleep past them all, not after each one (in
                        # steps of at most MAX_NAP_S, so that a stop, which empties the heap, is seen soon)
                        nap = max(dispatcher.busy_until(QUIET_S) - clock.monotonic(), 0.0) + 0.003
                        clock.sleep(min(nap, MAX_NAP_S))
                now_ms = int(clock.wall_ms())  # a retry's next try: now + its delay
                chunk = [r if r.retry_delay_ms is None else replace(r, retry_due_ms=now_ms + r.retry_delay_ms)
                         for r in chunk]
                try:
                    if dispatcher.seconds_to_next_fire() >= BACKGROUND_S:
                        written = self._background.submit(self._repo.record_many, executor_id, chunk).result()
                    else:
                        written = self._repo.record_many(executor_id, chunk)
                except Exception:  # noqa: BLE001 - keep recording the others; the lease recovers these
                    log.exception("recording %d outcomes failed", len(chunk))
                    written = [False] * len(chunk)
                if dispatcher.seconds_to_next_fire() >= QUIET_S:
                    gc.collect(1)  # the automatic collector is off while firing: collect in the quiet gap
                failed = []
                for record, ok in zip(chunk, written, strict=True):
                    if ok:
                        recorded.append(record)
                        _log_outcome(record)
                        if record.outcome is TaskStatus.FAILED:
                            failed.append(record)
                    else:
                        not_recorded += 1
                        log.warning("task %s: outcome %s not recorded (this executor no longer owns it)",
                                    record.task_id, record.outcome.value,
                                    extra=_task_keys(record.task_id, outcome=record.outcome.value))
                dead_lettered[0] += self._send_dead_letters(failed, by_id)

        recorded_all = threading.Event()

        def record_job() -> None:
            try:
                record_loop()
            finally:
                recorded_all.set()

        self._record_jobs.put(record_job)
        self._cancelled = []
        # A full garbage collection holds the interpreter for tens of ms: no automatic collection while
        # this batch fires (the recorder collects the young generations in quiet gaps).
        gc_enabled = gc.isenabled()
        gc.disable()
        wall, mono = clock.wall_ms(), clock.monotonic()
        for entry in armed:
            dispatcher.add(mono + (entry.due_ms - wall) / 1000.0, (entry, fire))
        with self._stop_lock:
            self._current = dispatcher
            if self._stopping.is_set():
                self._cancelled.extend(item[0] for item in dispatcher.cancel_pending())
        dispatcher.wait_idle()
        with self._stop_lock:
            self._current = None
            cancelled = list(self._cancelled)
        for _ in cancelled:
            results.put(None)
        recorded_all.wait()
        if gc_enabled:
            gc.enable()
        released = sum(1 for entry in cancelled if self._repo.release(entry.task.task_id, executor_id))

        count = {status: 0 for status in TaskStatus}
        for record in recorded:
            count[record.outcome] += 1
        return BatchReport(
            batch_id=event.batch_id,
            executor_id=executor_id,
            tasks=len(event.tasks),
            armed=len(armed),
            lost_arm=lost,
            fired=count[TaskStatus.SUCCEEDED] + count[TaskStatus.FAILED] + count[TaskStatus.PENDING],
            succeeded=count[TaskStatus.SUCCEEDED],
            failed=count[TaskStatus.FAILED],
            missed=count[TaskStatus.MISSED],
            late=sum(1 for r in recorded if r.late),
            retried=count[TaskStatus.PENDING],
            dead_lettered=dead_lettered[0],
            not_recorded=not_recorded,
            released=released,
            clock_offset_ms=offset.offset_ms,
            drift_ms=[r.drift_ms for r in recorded if r.drift_ms is not None],
        )

    def _send_dead_letters(self, failed: list[FireRecord], tasks: dict[str, Task]) -> int:
        """After their FAILED records are written: one dead letter per task (a failed send is logged; the
        task is FAILED in the table, where ``punctual redrive --all`` finds it too)."""
        if self._dead_letters is None or not failed:
            return 0
        sent = 0
        for record in failed:
            task = tasks[record.task_id].model_copy(update={
                "status": TaskStatus.FAILED, "finished_at": from_ms(record.finished_ms), "detail": record.detail})
            try:
                self._dead_letters.send(task, record.detail or "failed")
                sent += 1
            except Exception:  # noqa: BLE001 - the table holds the FAILED task anyway
                log.exception("task %s: sending it to the dead-letter queue failed (it is FAILED in the table)",
                              record.task_id, extra=_task_keys(record.task_id))
        return sent

    def _arm(self, event: BatchEvent, executor_id: str) -> tuple[list[_Armed], int]:
        """ARM each task; returns the armed ones and how many were lost to another owner."""
        now = self._clock.wall_ms()
        margin = self._settings.arm_margin_ms

        # The armed lease outlives every legitimate fire: due (or now, if late) + grace + the longest action
        # timeout + a margin. Past it the task is claimable again (its executor is presumed dead).
        leases = [(e.task_id, int(max(now, e.due_ms) + e.grace_ms + MAX_ACTION_TIMEOUT_MS + margin))
                  for e in event.tasks]
        outcome: list[list[Task | None]] = []

        def arm() -> None:
            # Background work: at a lower CPU priority (this thread only; nothing of this batch is firing
            # yet), so that arming a new batch never takes a core from another executor's dispatcher.
            lower_current_thread()
            try:
                outcome.append(self._repo.arm_many(leases, event.batch_id, executor_id))
            except Exception:  # noqa: BLE001 - some chunks may have been armed before the error: read back
                log.exception("arming batch %s failed; reading back what this executor armed", event.batch_id)
                try:
                    stored = self._repo.get_many([task_id for task_id, _ in leases])
                except Exception:  # noqa: BLE001 - what was armed becomes claimable when its lease expires
                    log.exception("reading back batch %s failed", event.batch_id)
                    return
                outcome.append([
                    t if t is not None and t.status is TaskStatus.ARMED and t.armed_by == executor_id else None
                    for t in (stored.get(task_id) for task_id, _ in leases)
                ])

        thread = threading.Thread(target=arm, name="arm")
        thread.start()
        thread.join()
        tasks = outcome[0] if outcome else [None] * len(leases)
        armed = [_Armed(t, t.due_ms) for t in tasks if t is not None]
        for (task_id, _), task in zip(leases, tasks, strict=False):  # aligned; a log line never raises
            if task is None:
                log.info("task %s: not armed (another owner has it: a duplicate delivery, a new claim, a cancel "
                         "or a reschedule; or arming failed)", task_id, extra=_task_keys(task_id))
        return armed, len(tasks) - len(armed)
