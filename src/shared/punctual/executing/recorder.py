"""Recording what a batch's fires came to, without getting in the way of the next fire.

Records are written only in the quiet gaps between fires (the next fire of this process at least
:data:`QUIET_S` away and the latest at least :data:`SETTLE_S` ago), so that recording never holds the
interpreter when the dispatcher must wake. Under a CPU quota of less than a core a write takes longer than its
CPU (``cpu / share``), and a quota spent on it stops the whole process until the quota's next period: there a gap
takes only the records whose writes end, at the CPU a record has been seen to need, a quota period before the
next fire; the others wait for a longer gap, or the batch's last fire. With no fire of this process within
:data:`BACKGROUND_S`, as
background work (lowered, see :mod:`punctual.executing.priority`), so that it never takes a core from another
executor's dispatcher either. A retry's next try is fixed when its record is written (now + its delay), so a
record delayed by a burst does not eat into the backoff. After a FAILED record is written, the task goes to
the dead-letter queue.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from punctual.config.cpu_share import QUOTA_PERIOD_MS
from punctual.domain.backoff import backoff_s
from punctual.domain.clock import Clock
from punctual.domain.keys import from_ms, to_ms
from punctual.domain.model import FireRecord, Outcome, Task, status_after
from punctual.executing.dispatcher import Dispatcher
from punctual.executing.priority import lower_current_thread
from punctual.stores.dlq import DeadLetterQueue
from punctual.stores.ports import FiringPort

log = logging.getLogger("punctual.executing.executor")

QUIET_S = 0.025  # record only when the next fire is at least this far away
SETTLE_S = 0.2  # ... and at least this long after the latest fire (a burst may still be firing elsewhere)
MAX_NAP_S = 0.25  # the longest the recorder sleeps before it looks again
BACKGROUND_S = 1.0  # with no fire of this process this close, recording is background work (lowered)
RECORD_CHUNK = 100  # outcomes written in one request (a transaction, locally)
RECORD_BACKOFF_CAP_S = 5.0  # the longest wait between two tries of a failed record write
RECORD_ATTEMPTS = 6  # tries of a failed record write at most (waits of about 1.5 s in all, at the most)
LEASE_MARGIN_MS = 2_000  # a failed record is tried again only while this far from the end of its tasks' lease
QUOTA_PERIOD_S = QUOTA_PERIOD_MS / 1000  # a CFS quota's period
RECORD_CPU_S = 0.002  # the CPU one record's write is assumed to need until one has been measured


def _stop_job() -> None:  # the job that ends the recorder thread (:meth:`Recorder.close`)
    """Never run: ``_run_jobs`` returns when it takes this job."""


def task_log_keys(task_id: str, **keys: object) -> dict[str, object]:
    """``extra`` of a per-task log line: under Powertools (the Lambda handlers) the line's correlation id is
    the task id, and it carries ``task_id`` too."""
    return {"task_id": task_id, "correlation_id": task_id, **keys}


def _log_outcome(record: FireRecord) -> None:
    """One line per recorded outcome: DEBUG when it succeeded (the table holds it), WARNING otherwise."""
    level = logging.DEBUG if record.outcome is Outcome.SUCCEEDED else logging.WARNING
    if log.isEnabledFor(level):
        log.log(
            level,
            "task %s: %s",
            record.task_id,
            record.outcome.value,
            extra=task_log_keys(
                record.task_id, outcome=record.outcome.value, drift_ms=record.drift_ms, detail=record.detail
            ),
        )


Result = FireRecord | Callable[[], FireRecord] | None
"""What a fire hands the recorder: its record, or a function that makes it (called by the recorder's thread, so
that deciding the outcome costs the fire nothing), or None for a task released unfired."""


def _made(result: FireRecord | Callable[[], FireRecord]) -> FireRecord:
    return result if isinstance(result, FireRecord) else result()


_SEALED = object()  # put by Recording.seal: no task is added after it


@dataclass
class Recording:
    """One batch's recording, which grows as the batch is armed: :meth:`add` the tasks of each armed part before
    any of them fires, :meth:`put` one result per task added (:data:`Result`), :meth:`seal` once arming is over,
    then :meth:`wait` for what was written."""

    executor_id: str
    tasks: dict[str, Task] = field(default_factory=dict)
    results: queue.SimpleQueue[Any] = field(default_factory=queue.SimpleQueue)
    recorded: list[FireRecord] = field(default_factory=list)
    not_recorded: int = 0
    dead_lettered: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    expected: int = 0  # results to come: one per task added

    def add(self, tasks: dict[str, Task]) -> None:
        self.tasks.update(tasks)
        self.expected += len(tasks)

    def seal(self) -> None:
        self.results.put(_SEALED)

    def put(self, record: Result) -> None:
        self.results.put(record)

    def wait(self) -> Recording:
        self.done.wait()
        return self


class Recorder:
    """Writes outcomes for an executor: one recorder thread (default priority: it runs while a batch fires,
    and a starved thread holding the interpreter would stall the dispatcher) and one lowered background thread.
    Built by the thread that builds the executor, whose CPU priority its threads inherit."""

    def __init__(  # noqa: PLR0913  the recorder's store, clock and dispatcher; its optional parts keyword-only
        self,
        store: FiringPort,
        clock: Clock,
        dispatcher: Dispatcher[Any],
        *,
        dead_letters: DeadLetterQueue | None = None,
        alive: Callable[[], bool] | None = None,
        cpu_share: float | None = None,
    ) -> None:
        self._store = store
        self._cpu_share = cpu_share if cpu_share is not None and cpu_share < 1.0 else None
        self.record_cpu_s = RECORD_CPU_S  # CPU a record's write needs, as last measured
        self._alive = alive or (lambda: True)  # whether the executor is still alive by its own lease
        self._clock = clock
        self._dispatcher = dispatcher
        self._dead_letters = dead_letters
        self.last_fire = clock.monotonic()
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run_jobs, name="recorder", daemon=True)
        self._thread.start()
        self._background = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="record-bg", initializer=lower_current_thread
        )

    def note_fire(self) -> None:
        """Called by each fire, as it starts: recording waits until fires have settled."""
        self.last_fire = self._clock.monotonic()

    def start(self, executor_id: str) -> Recording:
        """Start recording a batch armed by ``executor_id``: the tasks :meth:`Recording.add` adds, until
        :meth:`Recording.seal`."""
        recording = Recording(executor_id)
        self._jobs.put(lambda: self._record(recording))
        return recording

    def close(self, timeout_s: float = 5.0) -> None:
        """End the recorder's threads once the jobs already queued are done (a batch still recording finishes)."""
        self._jobs.put(_stop_job)
        self._thread.join(timeout_s)
        self._background.shutdown(wait=not self._thread.is_alive(), cancel_futures=True)

    def _run_jobs(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _stop_job:
                return
            try:
                job()
            except Exception:  # a failed job must not end the thread
                log.exception("recorder job failed")

    def _record(self, recording: Recording) -> None:
        try:
            taken, sealed = 0, False
            while not sealed or taken < recording.expected:
                first = recording.results.get()
                if first is _SEALED:
                    sealed = True
                    continue
                # Not even the records are made while fires are close: the thread that made them would take the
                # interpreter from the fires of a burst.
                self._wait_for_quiet(RECORD_CHUNK)
                chunk, more, sealed_now = self._next_chunk(first, recording.results)
                taken += more
                sealed = sealed or sealed_now
                while chunk:
                    room = self._wait_for_quiet(len(chunk))
                    self._write(recording, chunk[:room])
                    chunk = chunk[room:]
        finally:
            recording.done.set()

    @staticmethod
    def _next_chunk(first: Result, results: queue.SimpleQueue[Any]) -> tuple[list[FireRecord], int, bool]:
        """Up to :data:`RECORD_CHUNK` records: ``first``, then the results already there (a deferred record is
        made here); how many results that took, and whether the seal was among them."""
        taken, sealed = 1, False
        chunk = [] if first is None else [_made(first)]
        while len(chunk) < RECORD_CHUNK:
            try:
                more = results.get_nowait()
            except queue.Empty:
                break
            if more is _SEALED:
                sealed = True
                continue
            taken += 1
            if more is not None:
                chunk.append(_made(more))
        return chunk, taken, sealed

    def room_in(self, gap_s: float) -> float:
        """How many records can be written in a gap of ``gap_s`` before the next fire (``inf`` on whole cores once
        the gap is at least QUIET_S; under a quota, those whose CPU, at ``cpu / share`` of wall time, ends a quota
        period and QUIET_S before the fire)."""
        if self._cpu_share is None:
            return float("inf") if gap_s >= QUIET_S else 0.0
        return max(gap_s - QUIET_S - QUOTA_PERIOD_S, 0.0) * self._cpu_share / self.record_cpu_s

    def _wait_for_quiet(self, count: int) -> int:
        """Sleep until the next fire leaves room for at least one record and the latest was at least SETTLE_S ago;
        returns how many of ``count`` records to write now."""
        clock, dispatcher = self._clock, self._dispatcher
        while True:
            gap = dispatcher.seconds_to_next_fire()
            settle = SETTLE_S - (clock.monotonic() - self.last_fire)
            room = self.room_in(gap)
            if room >= 1 and settle <= 0:
                return min(count, int(min(room, count)))
            if room >= 1:
                clock.sleep(settle)
            else:  # fires follow each other closely: sleep past them all, not after each one (in steps of at
                # most MAX_NAP_S, so that a stop, which empties the heap, is seen soon)
                one = (
                    QUIET_S
                    if self._cpu_share is None
                    else (QUIET_S + QUOTA_PERIOD_S + self.record_cpu_s / self._cpu_share)
                )
                nap = max(dispatcher.busy_until(one) - clock.monotonic(), 0.0) + 0.003
                clock.sleep(min(nap, MAX_NAP_S))

    def _write(self, recording: Recording, chunk: list[FireRecord]) -> None:
        dispatcher = self._dispatcher
        now_ms = int(self._clock.wall_ms())  # a retry's next try: now + its delay
        chunk = [r if r.retry_delay_ms is None else replace(r, retry_due_ms=now_ms + r.retry_delay_ms) for r in chunk]
        cpu_before = time.process_time()
        written = self._write_until_lease_end(recording, chunk)
        # what a record's write costs this process (its pool's threads included), for the next gap's room
        self.record_cpu_s = max((time.process_time() - cpu_before) / len(chunk), RECORD_CPU_S / 20)
        if dispatcher.seconds_to_next_fire() >= QUIET_S:
            gc.collect(1)  # the automatic collector is off while firing: collect in the quiet gap
        failed = []
        for record, ok in zip(chunk, written, strict=True):
            if ok:
                recording.recorded.append(record)
                _log_outcome(record)
                if record.outcome is Outcome.FAILED:
                    failed.append(record)
            else:
                recording.not_recorded += 1
                log.warning(
                    "task %s: outcome %s not recorded (this executor no longer owns it)",
                    record.task_id,
                    record.outcome.value,
                    extra=task_log_keys(record.task_id, outcome=record.outcome.value),
                )
        recording.dead_lettered += self._send_dead_letters(failed, recording.tasks)

    def _write_until_lease_end(self, recording: Recording, chunk: list[FireRecord]) -> list[bool]:
        """``record_many`` of ``chunk``, tried again after a failed call (a throttle, a timeout) with a jittered,
        growing wait, up to :data:`RECORD_ATTEMPTS` tries, for as long as every task of the chunk is still within
        its lease (less :data:`LEASE_MARGIN_MS`) and the executor within its own (the heartbeat renews it
        meanwhile; past it, another executor may take the tasks over): a fired task is not left ARMED by a
        transient error, to be recorded MISSED (or fired again) by the next poll. Past any: not recorded
        (logged)."""
        leases = [
            task.lease_until
            for task in (recording.tasks.get(r.task_id) for r in chunk)
            if task is not None and task.lease_until is not None
        ]
        deadline_ms = min((to_ms(lease) for lease in leases), default=None)
        attempt = 0
        while True:
            try:
                if self._dispatcher.seconds_to_next_fire() >= BACKGROUND_S:
                    return self._background.submit(self._store.record_many, recording.executor_id, chunk).result()
                return self._store.record_many(recording.executor_id, chunk)
            except Exception:  # tried again while the leases last; then the others go on
                wait_s = backoff_s(attempt, cap_s=RECORD_BACKOFF_CAP_S)
                attempt += 1
                now_ms = self._clock.wall_ms()
                if (
                    deadline_ms is None
                    or now_ms + wait_s * 1000 >= deadline_ms - LEASE_MARGIN_MS
                    or not self._alive()
                    or attempt >= RECORD_ATTEMPTS
                ):
                    log.exception(
                        "recording %d outcomes failed %d time(s), up to the end of their lease; "
                        "the next poll finds them",
                        len(chunk),
                        attempt,
                    )
                    return [False] * len(chunk)
                log.warning(
                    "recording %d outcomes failed (try %d); again in %.2f s", len(chunk), attempt, wait_s, exc_info=True
                )
                self._clock.sleep(wait_s)

    def _send_dead_letters(self, failed: list[FireRecord], tasks: dict[str, Task]) -> int:
        """After their FAILED records are written: one dead letter per task (a failed send is logged; the
        task is FAILED in the table, where ``punctual redrive --all`` finds it too)."""
        if self._dead_letters is None or not failed:
            return 0
        sent = 0
        for record in failed:
            task = tasks[record.task_id].model_copy(
                update={
                    "status": status_after(record.outcome),
                    "finished_at": from_ms(record.finished_ms),
                    "detail": record.detail,
                }
            )
            try:
                self._dead_letters.send(task, record.detail or "failed")
                sent += 1
            except Exception:  # the table holds the FAILED task anyway
                log.exception(
                    "task %s: sending it to the dead-letter queue failed (it is FAILED in the table)",
                    record.task_id,
                    extra=task_log_keys(record.task_id),
                )
        return sent
