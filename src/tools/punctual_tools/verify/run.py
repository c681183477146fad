"""One verify run: the mix scheduled to the run's queue through the ordinary client, and every message read back.

Whatever happens, the run cleans up: the queue deleted, the schedule deleted, tasks that did not arrive cancelled.

The client is any scheduler with the client's methods (:class:`Scheduler`: :class:`punctual.Client` or the API
client); the queue wraps any boto3 SQS client (AWS, or a local endpoint such as moto's server): both are handed
in, so the same run goes against a deployed stack or the local one.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, TextIO

from punctual.domain.keys import from_ms
from punctual.domain.schedules import instants_after
from punctual.errors import PunctualError
from punctual.scheduling.protocol import Scheduler
from punctual.targets import SqsAction
from punctual_tools.checker import Expected, expected_from_due, expected_from_schedule
from punctual_tools.progress import ProgressLine
from punctual_tools.verify.plan import GROUPS, RECURRING, SHORT_LEAD, MixOptions, Plan, PlannedTask, plan_mix
from punctual_tools.verify.queue import VerifyQueue
from punctual_tools.verify.report import Arrival, RunResult, arrival_of, judge

WRITE_THREADS = 16
# Once the reading is over, the queue is read on until a long poll of DRAIN_WAIT_S finds it empty (a long poll
# answers as soon as a message is there), for DRAIN_MAX_S at most: a sender that never stops cannot hold the run.
DRAIN_WAIT_S = 1.0
DRAIN_MAX_S = 30.0


@dataclass
class RunRecord:
    """What a run did and found (filled as it goes: an interrupted run has what it got to)."""

    plan: Plan
    queue_arn: str | None = None
    expected: dict[str, list[Expected]] = field(default_factory=dict)
    arrivals: list[Arrival] = field(default_factory=list)
    write_errors: list[str] = field(default_factory=list)
    short_leads_ms: list[float] = field(default_factory=list)  # due - the moment each short-lead write completed
    writes_done_ms: int | None = None  # when the tasks written ahead were all stored
    end_ms: int | None = None
    result: RunResult | None = None
    cleanup: list[str] = field(default_factory=list)

    @property
    def arrived_keys(self) -> set[str]:
        return {a.key for a in self.arrivals}


def payload_of(run_id: str, group: str) -> dict[str, str]:
    """What each message's payload holds: the run and the group (the body adds the task id and due time)."""
    return {"verify": run_id, "group": group}


def wall_ms() -> int:
    return int(time.time() * 1000)


class VerifyRun:
    """Schedule ``options``' mix through ``scheduler`` to ``queue`` and read it back (:meth:`run`)."""

    def __init__(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
        self,
        scheduler: Scheduler,
        queue: VerifyQueue,
        allowlist: Sequence[str],
        options: MixOptions,
        run_id: str,
        *,
        epsilon_ms: float = 100.0,
        out: TextIO | None = None,
        now_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self.scheduler = scheduler
        self.queue = queue
        self.allowlist = list(allowlist)
        self.options = options
        self.run_id = run_id
        self.epsilon_ms = epsilon_ms
        self.progress = ProgressLine(out)
        self.now_ms = now_ms
        self._stop = threading.Event()
        self.record = RunRecord(plan_mix(run_id, now_ms(), options))

    # -- the run ------------------------------------------------------------------------------------------
    def run(self) -> RunRecord:
        """Make the queue, schedule, read back, judge; clean up in any case (Ctrl-C and failures included)."""
        record = self.record
        writer: threading.Thread | None = None
        try:
            record.queue_arn = self.queue.create(self.allowlist)
            action = SqsAction(queue_arn=record.queue_arn)
            record.plan = plan_mix(self.run_id, self.now_ms(), self.options)  # the window opens from now
            self._expect_tasks()
            self._schedule_recurring(action)
            self._schedule_ahead(action)
            writer = threading.Thread(target=self._write_short_leads, args=(action,), name="verify-short", daemon=True)
            writer.start()
            self._read_back()
            record.end_ms = self.now_ms()
            self._note_outcomes()
            record.result = judge(record.expected, record.arrivals, self.epsilon_ms)
            return record
        finally:
            self._stop.set()
            if writer is not None:
                writer.join(timeout=30)
            record.end_ms = record.end_ms or self.now_ms()
            self._clean_up()

    def _expect_tasks(self) -> None:
        self.record.expected = {group: [] for group in GROUPS}
        for task in self.record.plan.tasks:
            self.record.expected[task.group].extend(expected_from_due({task.task_id: task.due_ms}))

    def _schedule_recurring(self, action: SqsAction) -> None:
        """Create the schedule; its expected occurrences come from its stored definition, as the product reads it."""
        record, planned = self.record, self.record.plan.schedule
        if planned is None:
            return
        schedule = self.scheduler.create_schedule(
            planned.schedule_id,
            planned.expression,
            action,
            payload_of(self.run_id, RECURRING),
            start_at=from_ms(planned.start_ms),
            max_occurrences=planned.occurrences,
        )
        instants = list(islice(instants_after(schedule, planned.start_ms - 1), planned.occurrences))
        if instants:
            record.expected[RECURRING] = expected_from_schedule(schedule, planned.start_ms - 1, instants[-1], {})

    def _schedule_ahead(self, action: SqsAction) -> None:
        record = self.record
        specs = [self._spec(task, action) for task in record.plan.ahead]
        total = len(specs)

        def show(done: int, _: int) -> None:
            self.progress.show(f"verify: writing {done}/{total} tasks")

        results = self.scheduler.schedule_many(specs, threads=WRITE_THREADS, on_progress=show)
        record.writes_done_ms = self.now_ms()
        self.progress.end(f"verify: wrote {sum(1 for r in results if r.ok)}/{total} tasks ahead")
        record.write_errors += [f"{r.task_id}: {r.outcome}: {r.error}" for r in results if not r.ok]

    def _spec(self, task: PlannedTask, action: SqsAction) -> dict[str, Any]:
        return {
            "due_at": from_ms(task.due_ms),
            "action": action,
            "payload": payload_of(self.run_id, task.group),
            "task_id": task.task_id,
        }

    def _write_short_leads(self, action: SqsAction) -> None:
        """Each short-lead task written at its instant (2 to 4 s before it is due), until the run stops."""
        for task in self.record.plan.short:
            assert task.write_at_ms is not None
            if self._stop.wait(max(0.0, (task.write_at_ms - self.now_ms()) / 1000)):
                return
            try:
                self.scheduler.schedule(
                    from_ms(task.due_ms), action, payload_of(self.run_id, SHORT_LEAD), task_id=task.task_id
                )
            except Exception as exc:  # noqa: BLE001 - reported with this task (never arrived); the other writes go on
                self.record.write_errors.append(f"{task.task_id}: {type(exc).__name__}: {exc}")
                continue
            self.record.short_leads_ms.append(float(task.due_ms - self.now_ms()))

    def _read_back(self) -> None:
        """Read until every expected occurrence arrived and ``settle_s`` passed the last due instant, or until
        ``wait_s`` past it; then read on until the queue is empty: what was sent by then is counted, even when the
        writes or a busy reader left no time to read it before (its ``SentTimestamp`` judges how late it was)."""
        record, options = self.record, self.options
        keys = {e.key for occurrences in record.expected.values() for e in occurrences}
        last_due = max([e.due_ms for occurrences in record.expected.values() for e in occurrences], default=0)
        settled = last_due + options.settle_s * 1000
        deadline = last_due + options.wait_s * 1000
        arrived: set[str] = set()
        drain_end: float | None = None
        while True:
            now = self.now_ms()
            over = (keys <= arrived and now >= settled) or now > deadline
            if over and drain_end is None:
                drain_end = now + DRAIN_MAX_S * 1000
            until = settled if keys <= arrived else deadline  # all in: read on only to the settle
            wait_s = DRAIN_WAIT_S if over else min(5.0, max(0.0, (until - now) / 1000))
            messages = self.queue.receive(wait_s)
            for message in messages:
                arrival = arrival_of(message, self.run_id)
                record.arrivals.append(arrival)
                arrived.add(arrival.key)
            if over and (not messages or self.now_ms() > (drain_end or 0)):
                break
            self.progress.show(f"verify: {len(arrived & keys)}/{len(keys)} arrived, {len(record.arrivals)} messages")
        self.progress.end(f"verify: {len(arrived & keys)}/{len(keys)} arrived, {len(record.arrivals)} messages")

    def _missing(self) -> list[Expected]:
        arrived = self.record.arrived_keys
        return [e for occurrences in self.record.expected.values() for e in occurrences if e.key not in arrived]

    def _note_outcomes(self) -> None:
        """What the table says of each occurrence that did not arrive (MISSED, FAILED, still PENDING, ...)."""
        missing = self._missing()
        if not missing:
            return
        with ThreadPoolExecutor(max_workers=WRITE_THREADS) as pool:
            found = pool.map(lambda e: self.scheduler.get(e.task_id), missing)
            tasks = dict(zip([e.key for e in missing], found, strict=True))

        def with_outcome(e: Expected) -> Expected:
            task = tasks.get(e.key)
            status = getattr(getattr(task, "status", None), "value", None)
            return Expected(e.task_id, e.occurrence, e.due_ms, None if status is None else str(status))

        self.record.expected = {
            group: [with_outcome(e) if e.key in tasks else e for e in occurrences]
            for group, occurrences in self.record.expected.items()
        }

    # -- clean-up -----------------------------------------------------------------------------------------
    def _clean_up(self) -> None:
        """Each step on its own: one failing does not keep the others from running."""
        notes = self.record.cleanup
        plan = self.record.plan
        arrived = self.record.arrived_keys
        pending = [t.task_id for t in plan.tasks if f"{t.task_id}:0" not in arrived]
        if pending:
            notes.append(self._cancel(pending))
        if plan.schedule is not None:
            try:
                self.scheduler.delete_schedule(plan.schedule.schedule_id)
                notes.append(f"schedule {plan.schedule.schedule_id} deleted")
            except PunctualError as exc:
                notes.append(f"schedule {plan.schedule.schedule_id}: {exc}")
        try:
            deleted = self.queue.delete()
            notes.append(f"queue {self.queue.name} deleted" if deleted else "no queue was made")
        except Exception as exc:  # noqa: BLE001 - said in the report: the queue is the one thing left to delete by hand
            notes.append(f"queue {self.queue.name} NOT deleted ({type(exc).__name__}: {exc}): delete it by hand")

    def _cancel(self, task_ids: list[str]) -> str:
        """Cancel the tasks that did not arrive: one not written, fired meanwhile or armed already is left."""

        def cancel(task_id: str) -> bool:
            with contextlib.suppress(PunctualError):
                self.scheduler.cancel(task_id)
                return True
            return False

        with ThreadPoolExecutor(max_workers=WRITE_THREADS) as pool:
            cancelled = sum(pool.map(cancel, task_ids))
        return f"{cancelled} of {len(task_ids)} task(s) that had not arrived cancelled"


def short_lead_line(record: RunRecord) -> str | None:
    """How far ahead the short-lead tasks were written, as measured once each write completed."""
    if not record.short_leads_ms:
        return None
    leads = record.short_leads_ms
    return f"short leads: {len(leads)} written {min(leads) / 1000:.2f}-{max(leads) / 1000:.2f} s before due (stored)"
