"""The executor service: arm a batch, fire each task at its instant, record the outcomes.

Order of work, so that nothing but the action runs between wake-up and fire:

1. **arm** the tasks of the batch (conditional write PENDING → ARMED, or a takeover from a dead executor),
   under a heartbeat that shows this executor alive while it holds them (:mod:`punctual.executing.heartbeat`); a
   duplicate delivery, a second poller or the fast path racing a poll lose here. The soonest due are armed
   first, in parts that double in size (:func:`arm_parts`), and each part is handed to the dispatcher as soon as
   it is armed: a batch whose first tasks are due before the whole batch could be armed (a short lead, a
   catch-up after a crash) fires them while the rest is armed;
2. **fire** from one dispatcher thread into the worker pool, each task at its due instant, and only within
   this executor's lease; what a fire comes to (missed, succeeded, failed, retried, late) is decided by
   :mod:`punctual.domain.decisions`;
3. **record** outcome, ``fired_at`` and drift (conditional write ARMED → outcome) through the
   :class:`~punctual.executing.recorder.Recorder`, only in the quiet gaps between fires.
"""

from __future__ import annotations

import bisect
import gc
import logging
import threading
import uuid
from collections.abc import Callable
from functools import partial

from punctual.config.settings import Settings
from punctual.domain.backoff import backoff_s
from punctual.domain.clock import Clock, ClockOffset, OffsetSource
from punctual.domain.decisions import FireDecision, decide_before_fire, decide_outcome
from punctual.domain.events import BatchEvent, BatchReport
from punctual.domain.model import Armed, ArmRequest, FireRecord, Outcome, TaskStatus
from punctual.executing.dispatcher import Dispatcher, FireTiming
from punctual.executing.heartbeat import Heartbeat
from punctual.executing.priority import lower_current_thread
from punctual.executing.recorder import Recorder, Recording, task_log_keys
from punctual.stores.dlq import DeadLetterQueue
from punctual.stores.ports import FiringPort
from punctual.targets import ActionEnv, FireContext, longest_action_timeout_ms, prepare_actions, start_action

log = logging.getLogger(__name__)

MAX_ACTION_TIMEOUT_MS = longest_action_timeout_ms()  # the longest any action kind may run
CLOSE_WAIT_S = 10.0  # close() waits this long for fires already handed to a worker
FIRST_ARM_PART = 16  # the soonest due tasks armed first; each later part twice the one before
ARM_AHEAD_MS = 5_000  # tasks due later than this after arming starts are armed in one last part
ARM_ATTEMPTS = 3  # arm_many calls for one part when arming fails (botocore has retried each request already)


def arm_parts(requests: list[ArmRequest], now_ms: int) -> list[list[ArmRequest]]:
    """``requests`` in due order, cut into the parts an executor arms one after the other: the first
    :data:`FIRST_ARM_PART` soonest due, then parts twice as large, up to the tasks due more than
    :data:`ARM_AHEAD_MS` after ``now_ms``, which go in one last part (a batch with a long lead is one part: one
    round of writes).

    >>> due = [ArmRequest(task_id=f"t{i}", due_ms=1_000 + i, lease_until_ms=0) for i in range(100)]
    >>> [len(p) for p in arm_parts(due, now_ms=0)]
    [16, 32, 52]
    >>> [len(p) for p in arm_parts(due, now_ms=-10_000)]
    [100]
    """
    ordered = sorted(requests, key=lambda r: (r.due_ms, r.task_id))
    horizon = bisect.bisect_right([r.due_ms for r in ordered], now_ms + ARM_AHEAD_MS)  # the first one beyond it
    parts: list[list[ArmRequest]] = []
    size, start = FIRST_ARM_PART, 0
    while start < len(ordered):
        end = min(start + size, horizon) if start < horizon else len(ordered)
        parts.append(ordered[start:end])
        start, size = end, size * 2
    return parts


_Item = tuple[Armed, Callable[[Armed], None]]


def _fire_item(item: _Item) -> None:
    entry, fire = item
    fire(entry)


class Executor:
    """Runs batches. One instance per process; dependencies are injected. ``cpu_share``: the share of a core
    this process may use (:func:`punctual.config.cpu_share.detect_cpu_share`; ``None``: whole cores), which decides
    how the dispatcher waits for a deadline (:meth:`punctual.executing.dispatcher.FireTiming.for_cpu_share`)."""

    def __init__(  # noqa: PLR0913  the ports and settings a service is given, the optional ones keyword-only
        self,
        store: FiringPort,
        settings: Settings,
        clock: Clock,
        offset: OffsetSource,
        *,
        dead_letters: DeadLetterQueue | None = None,
        actions: ActionEnv | None = None,
        cpu_share: float | None = None,
    ) -> None:
        self._store = store
        self._actions = actions or ActionEnv.from_settings(settings)
        self._settings = settings
        self._clock = clock
        self._offset = offset
        self._stopping = threading.Event()
        self._current: Dispatcher[_Item] | None = None
        # One dispatcher and worker pool, and one recorder, for the life of the process (a warm start reuses
        # them), created here, by the thread that builds the executor: their threads inherit its CPU priority.
        self._dispatcher: Dispatcher[_Item] = Dispatcher(
            _fire_item,
            workers=settings.worker_threads,
            clock=clock,
            name="dispatch",
            timing=FireTiming.for_cpu_share(cpu_share),
        )
        self._heartbeat = Heartbeat(
            store,
            clock,
            settings.executor_lease_ms,
            settings.heartbeat_interval_ms,
            seconds_to_next_fire=self._dispatcher.seconds_to_next_fire,
        )
        # A failed record is tried again while this executor is alive by its own lease (past it, another may
        # have taken its tasks over) and the task's lease lasts.
        self._recorder = Recorder(
            store,
            clock,
            self._dispatcher,
            dead_letters=dead_letters,
            alive=lambda: clock.monotonic() < self._heartbeat.fence,
            cpu_share=cpu_share,
        )
        # The event loop starts here, by the thread that builds the executor: it keeps the default CPU priority.
        self._actions.warm()
        self._fenced: list[Armed] = []
        self._deadline_ms: float | None = None  # the current invocation's end (run_batch)
        self._invocation: str | None = None  # the current invocation's request id (run_batch)
        self._cancelled: list[Armed] = []
        self._started_ms = 0.0  # the current invocation's start (wall ms) and the stages it reached since
        self._timeline: dict[str, int] = {}
        # cancel_pending + _cancelled change together; re-entrant: a signal handler may stop the thread holding it
        self._stop_lock = threading.RLock()
        self._idle = threading.Event()  # no batch running (close() waits for one)
        self._idle.set()

    def request_stop(self) -> None:
        """Stop firing: tasks not yet handed to a worker are released back to PENDING (ARMED → PENDING)
        by :meth:`run_batch` before it returns, so a restart finds them again. Safe from a signal handler."""
        self._stopping.set()
        with self._stop_lock:
            current = self._current
            if current is not None:
                self._cancelled.extend(item[0] for item in current.cancel_pending())

    def close(self) -> None:
        """End this executor's threads and its actions' event loop and connections (a process that ends its
        executor before it exits: tests, a runtime shutting down). What is still queued is taken back first."""
        self.request_stop()
        # A batch still running hands back what it has not fired, waits for its fires and records them, and
        # retires its lease: wait for it (a bounded wait: a batch that does not end is left to its thread).
        if self._idle.wait(CLOSE_WAIT_S) and self._dispatcher.wait_idle(CLOSE_WAIT_S):
            self._dispatcher.close()
        self._recorder.close()
        self._heartbeat.close()
        self._actions.close()

    def run_batch(
        self, event: BatchEvent, deadline_ms: float | None = None, invocation: str | None = None
    ) -> BatchReport:
        """Arm the batch, fire each armed task at its instant, record what each came to. ``deadline_ms``: when
        the invocation ends (Lambda's timeout: no lease outlives it, and an action's own retries stop well before
        it); ``invocation``: its request id (Lambda keeps it when it retries: the retry fences its earlier
        attempt and takes its tasks over at once)."""
        # The tenant map the batch's fires are checked against: read again here if its copy is old, before any
        # task is armed (never between a wake-up and its fire), and kept for the batch.
        self._actions.refresh_tenants()
        executor_id = f"x-{uuid.uuid4().hex[:12]}"
        self._deadline_ms, self._invocation = deadline_ms, invocation
        self._started_ms, self._timeline = self._clock.wall_ms(), {}
        self._idle.clear()
        try:
            started = self._heartbeat.start(executor_id, deadline_ms, invocation)
            self._mark("heartbeat")
            if not started:
                log.error(
                    "batch %s: no heartbeat could be written; arming nothing (the tasks stay as they are)",
                    event.batch_id,
                )
                return _report(event, executor_id, self._offset.current(), None, armed=0, lost=len(event.tasks))
            try:
                return self._run_armed(event, executor_id)
            finally:
                self._heartbeat.stop()
        finally:
            self._idle.set()

    def _run_armed(self, event: BatchEvent, executor_id: str) -> BatchReport:
        offset = self._offset.current()
        self._fenced = []
        recording = self._recorder.start(executor_id)
        # A full garbage collection holds the interpreter for tens of ms: no automatic collection while this
        # batch fires (the recorder collects the young generations in quiet gaps).
        gc_enabled = gc.isenabled()
        gc.disable()
        armed, lost, cancelled = self._arm_and_fire(
            event, executor_id, recording, partial(self._fire_one, recording, offset)
        )
        self._mark("fired")
        for _ in cancelled:
            recording.put(None)
        recording.wait()
        self._mark("recorded")
        if gc_enabled:
            gc.enable()
        # Tasks a stop took back, or that reached their instant after this executor's lease ended (it could not
        # renew it): not fired, so handed back (a no-op where another executor has taken them over meanwhile).
        unfired = [*cancelled, *self._fenced]
        released = sum(1 for entry in unfired if self._release(entry.task.task_id, executor_id))
        return _report(
            event,
            executor_id,
            offset,
            recording,
            armed=len(armed),
            lost=lost,
            released=released,
            taken_over=sum(1 for entry in armed if entry.taken_over_until_ms is not None),
            fenced=len(self._fenced),
            timeline=self._timeline,
        )

    def _since_start(self) -> int:
        return int(self._clock.wall_ms() - self._started_ms)

    def _mark(self, stage: str) -> None:
        """The batch reached ``stage`` now (its timeline, in the report)."""
        self._timeline[stage] = self._since_start()

    def _release(self, task_id: str, executor_id: str) -> bool:
        """RELEASE one unfired task; a failure is logged (the task is taken over once this heartbeat ends)."""
        try:
            return self._store.release(task_id, executor_id)
        except Exception:  # one failed write must not lose the batch's report
            log.exception(
                "task %s: handing it back failed; it is taken over once this executor's lease ends",
                task_id,
                extra=task_log_keys(task_id),
            )
            return False

    def _arm_and_fire(
        self, event: BatchEvent, executor_id: str, recording: Recording, fire: Callable[[Armed], None]
    ) -> tuple[list[Armed], int, list[Armed]]:
        """Arm the batch part by part (:func:`arm_parts`), handing each part to the dispatcher (and to the
        recording) as soon as it is armed, and wait until every task handed over has fired; returns the armed
        tasks, how many were lost to another owner, and those a stop took back before they fired (a stop also
        ends the arming: what was not armed yet stays as it was)."""
        dispatcher = self._dispatcher
        self._cancelled = []
        with self._stop_lock:
            self._current = dispatcher
        armed: list[Armed] = []
        lost = [0]

        def arm() -> None:
            # Background work: at a lower CPU priority (this thread only), so that arming never takes a core from
            # a fire of this batch's earlier parts or of another executor's.
            lower_current_thread()
            try:
                now = int(self._clock.wall_ms())
                for part in arm_parts(self._arm_requests(event, now), now):
                    if self._stopping.is_set():
                        break
                    taken, missed = self._arm(part, event.batch_id, executor_id, now)
                    armed.extend(taken)
                    lost[0] += missed
                    self._hand_over(taken, recording, fire)
                    self._timeline.setdefault("first_armed", self._since_start())
            finally:
                self._mark("armed")
                recording.seal()

        thread = threading.Thread(target=arm, name="arm")
        thread.start()
        thread.join()
        dispatcher.wait_idle()
        with self._stop_lock:
            self._current = None
            return armed, lost[0], list(self._cancelled)

    def _hand_over(self, armed: list[Armed], recording: Recording, fire: Callable[[Armed], None]) -> None:
        """Give armed tasks to the recording and the dispatcher (or, once a stop has come, to the tasks taken
        back); then warm their actions up (connections opened shortly before a run of webhooks is due)."""
        recording.add({entry.task.task_id: entry.task for entry in armed})
        wall, mono = self._clock.wall_ms(), self._clock.monotonic()
        with self._stop_lock:
            if self._stopping.is_set():
                self._cancelled.extend(armed)
                return
            for entry in armed:
                self._dispatcher.add(mono + (entry.due_ms - wall) / 1000.0, (entry, fire))
            if self._stopping.is_set():  # a signal handler's stop, on this thread, while the tasks were added
                self._cancelled.extend(item[0] for item in self._dispatcher.cancel_pending())
        prepare_actions(
            [(entry.task.action, (entry.due_ms - wall) / 1000.0, entry.task.task_id) for entry in armed], self._actions
        )

    def _fire_one(self, recording: Recording, offset: ClockOffset, entry: Armed) -> None:
        """A worker thread at the task's instant: decide, start the action, and hand its record to the
        recorder when it ends (here for a plain runner; on the event loop, when its future completes, for a
        coroutine runner: the worker is free for the next fire at once)."""
        if self._clock.monotonic() > self._heartbeat.fence:  # past its own lease: another may take over
            self._fenced.append(entry)
            recording.put(None)
            return
        started = self._clock.wall_ms()
        self._recorder.note_fire()
        task = entry.task
        finish = partial(self._finish, recording, offset, entry, started)
        try:
            decision = decide_before_fire(task, entry.due_ms, started, entry.taken_over_until_ms)
            if decision.action == "miss":
                finish(decision, None)
                return
            latest = entry.due_ms + task.misfire_grace_ms if decision.action == "fire" else None
            context = FireContext(
                task.task_id, task.occurrence, entry.due_ms, started, task.payload, latest, self._deadline_ms
            )
            try:
                future = start_action(task.action, context, self._actions)
            except Exception as exc:  # noqa: BLE001 - any failure of the action is its outcome
                finish(decision, _failure(exc))
                return
            if future is None:
                finish(decision, None)
            else:
                future.add_done_callback(lambda done: finish(decision, _failure(done.exception())))
        except BaseException as exc:  # noqa: BLE001 - the recorder must get one result per task
            finish(None, f"executor error: {exc!r}")

    def _finish(  # noqa: PLR0913, PLR0917  bound by partial on the fire's path, where no record is built
        self,
        recording: Recording,
        offset: ClockOffset,
        entry: Armed,
        started: float,
        decision: FireDecision | None,
        error: str | None,
    ) -> None:
        """Hand the recorder the task's record (exactly one per task, whatever happens here): the instant it
        finished now, and the rest of the record to be made by the recorder's thread, off the fire's path."""
        recording.put(partial(self._record_of, offset, entry, started, int(self._clock.wall_ms()), decision, error))

    def _record_of(  # noqa: PLR0913, PLR0917  bound by partial on the fire's path, where no record is built
        self,
        offset: ClockOffset,
        entry: Armed,
        started: float,
        finished_ms: int,
        decision: FireDecision | None,
        error: str | None,
    ) -> FireRecord:
        """What a fire comes to (:func:`~punctual.domain.decisions.decide_outcome`); never raises."""
        task = entry.task
        detail = error  # decision None: the executor failed before deciding; ``error`` says how
        if decision is not None:
            try:
                quotas = self._actions.rules.of(task.task_id).quotas  # the key's tenant's, whatever the item says
                return decide_outcome(
                    task,
                    entry.due_ms,
                    started,
                    finished_ms,
                    decision=decision,
                    error=error,
                    offset_ms=offset.offset_ms,
                    max_attempts=None if quotas is None else quotas.retry_attempts,
                )
            except BaseException as exc:  # noqa: BLE001 - the recorder must get one result per task
                detail = f"executor error: {exc!r}"
        return FireRecord(
            task_id=task.task_id,
            outcome=Outcome.FAILED,
            fired_ms=started,
            finished_ms=finished_ms,
            drift_ms=started - entry.due_ms,
            drift_corrected_ms=None,
            detail=(detail or "executor error")[:1000],
        )

    def _arm_requests(self, event: BatchEvent, now: int) -> list[ArmRequest]:
        """What arming each task of the batch asks for. The task's own lease is a backstop that outlives every
        legitimate fire: due (or now, if late) + grace + the longest action timeout + a margin. A dead executor's
        tasks are taken over long before, when its heartbeat lapses."""
        margin = self._settings.arm_margin_ms
        return [
            ArmRequest(
                task_id=e.task_id,
                due_ms=e.due_ms,
                lease_until_ms=int(max(now, e.due_ms) + e.grace_ms + MAX_ACTION_TIMEOUT_MS + margin),
                held=e.held,
            )
            for e in event.tasks
        ]

    def _arm(self, requests: list[ArmRequest], batch_id: str, executor_id: str, now: int) -> tuple[list[Armed], int]:
        """ARM each task of one part (or take it over from a dead executor); returns the armed ones and how many
        were lost to another owner. When arming fails (botocore's retries exhausted), what this executor armed is
        read back and the rest is armed again, up to ``ARM_ATTEMPTS`` times in all: while it lives, its batch is
        its own (a poll sends a task again only when its batch shows no progress, see punctual.polling.sent)."""
        results: list[Armed | None] = [None] * len(requests)
        todo = list(range(len(requests)))
        for attempt in range(ARM_ATTEMPTS):
            part = [requests[i] for i in todo]
            try:
                got = self._store.arm_many(part, batch_id, executor_id, now, self._invocation)
                failed = False
            except Exception:  # some writes may have been applied before the error: read back
                log.exception("arming batch %s failed; reading back what this executor armed", batch_id)
                got, failed = self._armed_by(part, batch_id, executor_id), True
            for index, result in zip(todo, got, strict=True):
                results[index] = result
            todo = [i for i in todo if results[i] is None]
            if not failed or not todo or attempt + 1 == ARM_ATTEMPTS:
                break
            self._clock.sleep(backoff_s(attempt))
        armed = [a for a in results if a is not None]
        for request, result in zip(requests, results, strict=False):  # aligned; a log line never raises
            if result is None:
                log.info(
                    "task %s: not armed (another executor has it: a duplicate delivery, a second dispatch; "
                    "or it was cancelled, rescheduled or finished; or arming failed)",
                    request.task_id,
                    extra=task_log_keys(request.task_id),
                )
        return armed, len(results) - len(armed)

    def _armed_by(self, requests: list[ArmRequest], batch_id: str, executor_id: str) -> list[Armed | None]:
        """Of ``requests``, what the store says this executor holds ARMED (None: not, or not readable)."""
        try:
            stored = self._store.get_many([r.task_id for r in requests])
        except Exception:  # what was armed is taken over once this heartbeat ends
            log.exception("reading back batch %s failed", batch_id)
            stored = {}
        return [
            Armed(task=t) if t is not None and t.status is TaskStatus.ARMED and t.armed_by == executor_id else None
            for t in (stored.get(r.task_id) for r in requests)
        ]


def _failure(exc: BaseException | None) -> str | None:
    """An action's failure as the record's detail (None: it succeeded)."""
    return None if exc is None else f"{type(exc).__name__}: {exc}"


def _report(  # noqa: PLR0913  the report's figures, each named by its caller
    event: BatchEvent,
    executor_id: str,
    offset: ClockOffset,
    recording: Recording | None,
    *,
    armed: int,
    lost: int,
    released: int = 0,
    taken_over: int = 0,
    fenced: int = 0,
    timeline: dict[str, int] | None = None,
) -> BatchReport:
    """What a batch did: ``armed`` of its tasks armed, ``lost`` to another owner, ``released`` handed back; the
    fires ``recording`` recorded (None: nothing was), by outcome, and the drift of each."""
    recorded = [] if recording is None else recording.recorded
    count = dict.fromkeys(Outcome, 0)
    for record in recorded:
        count[record.outcome] += 1
    return BatchReport(
        batch_id=event.batch_id,
        executor_id=executor_id,
        tasks=len(event.tasks),
        armed=armed,
        lost_arm=lost,
        fired=count[Outcome.SUCCEEDED] + count[Outcome.FAILED] + count[Outcome.RETRY],
        succeeded=count[Outcome.SUCCEEDED],
        failed=count[Outcome.FAILED],
        missed=count[Outcome.MISSED],
        late=sum(1 for r in recorded if r.late),
        retried=count[Outcome.RETRY],
        dead_lettered=0 if recording is None else recording.dead_lettered,
        not_recorded=0 if recording is None else recording.not_recorded,
        released=released,
        taken_over=taken_over,
        fenced=fenced,
        clock_offset_ms=offset.offset_ms,
        timeline_ms=dict(timeline or {}),
        drift_ms=[r.drift_ms for r in recorded if r.drift_ms is not None and not r.late],
        late_ms=[r.drift_ms for r in recorded if r.drift_ms is not None and r.late],
    )
