"""The executor service: arm a batch, fire each task at its instant, record the outcomes.

Order of work, so that nothing but the action runs between wake-up and fire:

1. **arm** every task of the batch (conditional write CLAIMED → ARMED); a duplicate delivery loses here;
2. **fire** from one dispatcher thread into the worker pool, each task at its due instant; what a fire comes
   to (missed, succeeded, failed, retried, late) is decided by :mod:`punctual.decisions`;
3. **record** outcome, ``fired_at`` and drift (conditional write ARMED → outcome) through the
   :class:`~punctual.recorder.Recorder`, only in the quiet gaps between fires.
"""

from __future__ import annotations

import gc
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from .actions import FireContext, run_action
from .clock import Clock, ClockOffset, OffsetSource
from .decisions import decide_before_fire, decide_outcome
from .dispatcher import Dispatcher
from .dlq import DeadLetterQueue
from .events import BatchEvent, BatchReport
from .model import FireRecord, Task, TaskStatus
from .priority import lower_current_thread
from .recorder import Recorder, Recording, task_log_keys
from .settings import Settings
from .store import TaskStore

log = logging.getLogger(__name__)

MAX_ACTION_TIMEOUT_MS = 60_000  # the largest timeout an action model allows


@dataclass(slots=True)
class _Armed:
    task: Task
    due_ms: int


_Item = tuple[_Armed, Callable[[_Armed], None]]


def _fire_item(item: _Item) -> None:
    entry, fire = item
    fire(entry)


class Executor:
    """Runs batches. One instance per process; dependencies are injected."""

    def __init__(self, store: TaskStore, settings: Settings, clock: Clock,
                 offset: OffsetSource, spin_s: float = 0.001, *, dead_letters: DeadLetterQueue | None = None) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._offset = offset
        self._stopping = threading.Event()
        self._current: Dispatcher[_Item] | None = None
        # One dispatcher and worker pool, and one recorder, for the life of the process (a warm start reuses
        # them), created here, by the thread that builds the executor: their threads inherit its CPU priority.
        self._dispatcher: Dispatcher[_Item] = Dispatcher(
            _fire_item, workers=settings.worker_threads, clock=clock, spin_s=spin_s, name="dispatch",
        )
        self._recorder = Recorder(store, clock, self._dispatcher, dead_letters=dead_letters)
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
        """Arm the batch, fire each armed task at its instant, record what each came to."""
        executor_id = f"x-{uuid.uuid4().hex[:12]}"
        armed, lost = self._arm(event, executor_id)
        offset = self._offset.current()
        recording = self._recorder.start(executor_id, {entry.task.task_id: entry.task for entry in armed})
        # A full garbage collection holds the interpreter for tens of ms: no automatic collection while this
        # batch fires (the recorder collects the young generations in quiet gaps).
        gc_enabled = gc.isenabled()
        gc.disable()
        cancelled = self._fire(armed, partial(self._fire_one, recording, offset))
        for _ in cancelled:
            recording.put(None)
        recording.wait()
        if gc_enabled:
            gc.enable()
        released = sum(1 for entry in cancelled if self._store.release(entry.task.task_id, executor_id))
        return _report(event, executor_id, len(armed), lost, recording, released, offset)

    def _fire(self, armed: list[_Armed], fire: Callable[[_Armed], None]) -> list[_Armed]:
        """Hand every armed task to the dispatcher at its instant and wait until all have fired; returns the
        tasks a stop took back before they fired."""
        dispatcher = self._dispatcher
        self._cancelled = []
        wall, mono = self._clock.wall_ms(), self._clock.monotonic()
        for entry in armed:
            dispatcher.add(mono + (entry.due_ms - wall) / 1000.0, (entry, fire))
        with self._stop_lock:
            self._current = dispatcher
            if self._stopping.is_set():
                self._cancelled.extend(item[0] for item in dispatcher.cancel_pending())
        dispatcher.wait_idle()
        with self._stop_lock:
            self._current = None
            return list(self._cancelled)

    def _fire_one(self, recording: Recording, offset: ClockOffset, entry: _Armed) -> None:
        """A worker thread at the task's instant: decide, run the action, hand the record to the recorder."""
        started = self._clock.wall_ms()
        self._recorder.note_fire()
        task = entry.task
        try:
            decision = decide_before_fire(task, entry.due_ms, started)
            error = None
            if decision != "miss":
                try:
                    run_action(task.action, FireContext(task.task_id, task.occurrence, entry.due_ms, started,
                                                        task.payload))
                except Exception as exc:  # noqa: BLE001 - any failure of the action is its outcome
                    error = f"{type(exc).__name__}: {exc}"
            record = decide_outcome(task, entry.due_ms, started, int(self._clock.wall_ms()), decision=decision,
                                    error=error, offset_ms=offset.offset_ms)
        except BaseException as exc:  # noqa: BLE001 - the recorder must get one result per task
            record = FireRecord(task.task_id, TaskStatus.FAILED, started, int(self._clock.wall_ms()),
                                started - entry.due_ms, None, f"executor error: {exc!r}"[:1000])
        recording.put(record)

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
                outcome.append(self._store.arm_many(leases, event.batch_id, executor_id))
            except Exception:  # noqa: BLE001 - some chunks may have been armed before the error: read back
                log.exception("arming batch %s failed; reading back what this executor armed", event.batch_id)
                try:
                    stored = self._store.get_many([task_id for task_id, _ in leases])
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
                         "or a reschedule; or arming failed)", task_id, extra=task_log_keys(task_id))
        return armed, len(tasks) - len(armed)


def _report(event: BatchEvent, executor_id: str, armed: int, lost: int, recording: Recording, released: int,
            offset: ClockOffset) -> BatchReport:
    count = {status: 0 for status in TaskStatus}
    for record in recording.recorded:
        count[record.outcome] += 1
    return BatchReport(
        batch_id=event.batch_id,
        executor_id=executor_id,
        tasks=len(event.tasks),
        armed=armed,
        lost_arm=lost,
        fired=count[TaskStatus.SUCCEEDED] + count[TaskStatus.FAILED] + count[TaskStatus.PENDING],
        succeeded=count[TaskStatus.SUCCEEDED],
        failed=count[TaskStatus.FAILED],
        missed=count[TaskStatus.MISSED],
        late=sum(1 for r in recording.recorded if r.late),
        retried=count[TaskStatus.PENDING],
        dead_lettered=recording.dead_lettered,
        not_recorded=recording.not_recorded,
        released=released,
        clock_offset_ms=offset.offset_ms,
        drift_ms=[r.drift_ms for r in recording.recorded if r.drift_ms is not None],
    )
