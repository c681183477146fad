"""The poller service: find due and overdue tasks and hand them to executors, writing nothing per task.

Each tick asks the store for every armable task due up to ``now + lead``, overdue ones included however old
(scheduled rules can be ~119 s apart and index writes lag: how the store keeps that promise is its business,
see :meth:`punctual.stores.ports.DispatchPort.find_due`); as each part of that comes back, it cuts it into batches
in due order and invokes one executor per batch, the invocations in parallel, before the store reads the next part.
The per-task conditional write (ARM) happens in the executors, in
parallel: two pollers at one instant, a duplicate async delivery, the fast path racing a poll all dispatch the
same task, and all but one executor lose at ARM. Each tick first notes its start in the store: the fast path
reads it to leave to the next poll what that poll dispatches in time. A tick stops dispatching when
``out_of_time()`` says so (its Lambda's remaining time): what it did not dispatch is still PENDING, and the next
tick finds it.

An async invoke answers 202 before Lambda's queue throttles or drops the invocation, so neither a poll group's
poller nor an executor is known to have run until it leaves a trace: a scheduled tick polls itself each group whose
poll has not started since the tick before (:func:`late_groups`), and a poll counts the tasks it sent that are still
PENDING (not armed) and sends them again before they would fire late, unless their batch shows progress
(:mod:`punctual.polling.sent`).

One invocation of the poller function, its sub-polls and its deadline: :mod:`punctual.polling.tick`.
"""

from __future__ import annotations

import heapq
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from punctual.config.cpu_share import QUOTA_PERIOD_MS
from punctual.config.settings import Settings
from punctual.domain.events import BatchEvent, BatchTask, DispatchReport, PollReport
from punctual.domain.model import Candidate, TaskStatus
from punctual.domain.tenancy import interleave_by_tenant
from punctual.errors import UndecodableItemError
from punctual.polling.invoker import Invoker
from punctual.polling.sent import SentMemory, Sorted
from punctual.scheduling import chain
from punctual.scheduling.quotas import TenantAdmission
from punctual.stores.ports import ClientPort, DispatchPort, SchedulePort

log = logging.getLogger(__name__)

INVOKE_THREADS = 8  # async invocations in flight at once


def make_batches(
    candidates: list[Candidate],
    max_size: int,
    max_at_once: int | None = None,
    window_ms: int = QUOTA_PERIOD_MS,
    max_batches: int | None = None,
) -> list[list[Candidate]]:
    """Candidates in due order, cut into batches of at most ``max_size``, none holding more than ``max_at_once``
    tasks due within ``window_ms`` of each other (what an executor's CPU quota can fire in one period; None: no
    such limit).

    The quota's cut never makes more than ``max_batches`` batches (the executors that may run at once): past that,
    a burst's executors would be throttled and fire seconds late, where a bigger batch fires its last task a few
    quota periods late. Then ``max_at_once`` is raised to the least that keeps within ``max_batches`` (and no cut
    by the quota at all if even the ``max_size`` cut makes more).

    Examples
    --------
    >>> pending = {"due_ms": 1_000, "status": TaskStatus.PENDING, "lease_until_ms": None, "misfire_grace_ms": 60_000}
    >>> due = [Candidate(task_id=f"t{i}", **pending) for i in range(1_000)]
    >>> [len(b) for b in make_batches(due, 250, max_at_once=168)]
    [168, 168, 168, 168, 168, 160]
    >>> [len(b) for b in make_batches(due, 250, max_at_once=168, max_batches=4)]
    [250, 250, 250, 250]
    >>> [len(b) for b in make_batches(due, 250, max_at_once=168, max_batches=5)]
    [200, 200, 200, 200, 200]
    """
    ordered = sorted(candidates, key=lambda c: (c.due_ms, c.task_id))
    batches = _cut(ordered, max_size, max_at_once, window_ms)
    if max_at_once is None or max_batches is None or len(batches) <= max_batches:
        return batches
    low, high = max_at_once, max_size  # the least cap within max_batches lies in (low, high]
    best = _cut(ordered, max_size, None, window_ms)
    if len(best) > max_batches:
        return best
    while high - low > 1:
        middle = (low + high) // 2
        cut = _cut(ordered, max_size, middle, window_ms)
        if len(cut) <= max_batches:
            high, best = middle, cut
        else:
            low = middle
    return best


def _cut(ordered: list[Candidate], max_size: int, max_at_once: int | None, window_ms: int) -> list[list[Candidate]]:
    """``ordered`` (in due order) cut as :func:`make_batches` says, with ``max_at_once`` as given.

    Each task joins the newest open batch that has room for it (fewer than ``max_at_once`` of its tasks due within
    ``window_ms`` before this one), and a new batch opens only when none has. So tasks spread over time fill a
    batch up to ``max_size`` (in interleaved lanes when a period holds more of them than one executor fires), and
    only tasks due together are shared out ``max_at_once`` to an executor.
    """
    if max_at_once is None or max_at_once >= max_size:
        return [ordered[i : i + max_size] for i in range(0, len(ordered), max_size)]
    batches: list[list[Candidate]] = []
    ready: list[int] = []  # -index of each open batch with room now: the newest first
    full: list[tuple[int, int]] = []  # (due from which it has room again, index) of each open batch without

    for candidate in ordered:
        while full and full[0][0] <= candidate.due_ms:
            heapq.heappush(ready, -heapq.heappop(full)[1])
        if ready:
            index = -heapq.heappop(ready)
        else:
            index = len(batches)
            batches.append([])
        batch = batches[index]
        batch.append(candidate)
        if len(batch) >= max_size:
            continue  # closed
        room_at = batch[-max_at_once].due_ms + window_ms if len(batch) >= max_at_once else candidate.due_ms
        if room_at <= candidate.due_ms:
            heapq.heappush(ready, -index)
        else:
            heapq.heappush(full, (room_at, index))
    return batches


def _warn_unarmed(ages: dict[str, int], again: set[str]) -> int:
    """Log the PENDING tasks this poller had sent (``ages``: ms since, by task id), of which ``again`` were sent
    again; how many."""
    if ages:
        spread = sorted(ages.values())
        log.warning(
            "%d tasks still PENDING though this poller sent them %.1f to %.1f s ago (their executor's invocation "
            "throttled, dropped or failed, or still arming); %d sent again, e.g. %s",
            len(ages),
            spread[0] / 1000,
            spread[-1] / 1000,
            len(again & ages.keys()),
            sorted(ages)[:3],
        )
    return len(ages)


def late_groups(last_polls_ms: Sequence[int | None], previous_tick_ms: int | None) -> list[int]:
    """The poll groups (group 0, the scheduled tick's own, aside) whose poll last started before
    ``previous_tick_ms`` (when the tick before started: group 0's last poll), or never: their own poller did not
    run since (its invocation throttled, dropped or failed; an async invoke answers 202 all the same).

    Nothing is late when the tick before is not known (a new stack): its groups' pollers were only just started.

    Examples
    --------
    >>> late_groups([60_000, 60_040, 1_000, None], 60_000), late_groups([None, None, None], None)
    ([2, 3], [])
    """
    if previous_tick_ms is None:
        return []
    return [g for g, last in enumerate(last_polls_ms) if g > 0 and (last is None or last < previous_tick_ms)]


def batch_event(batch: list[Candidate], dispatcher_id: str) -> BatchEvent:
    """The executor's event for one batch: each task with the due time it was found at (the ARM condition)."""
    return BatchEvent(
        batch_id=uuid.uuid4().hex,
        dispatcher=dispatcher_id,
        tasks=[
            BatchTask(
                task_id=c.task_id,
                due_ms=c.due_ms,
                grace_ms=c.misfire_grace_ms,
                **({} if c.misfire_policy == "skip" else {"misfire_policy": c.misfire_policy}),
                **({"held": True} if c.status is TaskStatus.ARMED else {}),
            )
            for c in batch
        ],
    )


class Poller:
    """One poll = one call of :meth:`poll` with an explicit ``now_ms``. The fast path (the table stream)
    hands the tasks it sees to :meth:`dispatch`, the same batch-and-invoke step the poll ends with."""

    def __init__(  # noqa: PLR0913  the poller's ports, invoker and settings; its id and admission keyword-only
        self,
        dispatch: DispatchPort,
        schedules: SchedulePort,
        tasks: ClientPort,
        invoker: Invoker,
        settings: Settings,
        *,
        poller_id: str | None = None,
        admit: TenantAdmission | None = None,
    ) -> None:
        self._store = dispatch
        self._schedules = schedules  # the recurring schedules a look for due work names, extended with ``tasks``
        self._tasks = tasks
        self._invoker = invoker
        self._settings = settings
        self._admit = admit  # a schedule's occurrences against its tenant's active_tasks (None: no quotas)
        self.poller_id = poller_id or f"p-{uuid.uuid4().hex[:12]}"
        self._sent = SentMemory(settings)

    @property
    def settings(self) -> Settings:
        return self._settings

    def last_polls(self) -> list[int | None]:
        """When the last poll of each group started, as the store noted it (None: not known)."""
        return self._store.last_polls()

    def poll(self, now_ms: int, out_of_time: Callable[[], bool] | None = None, group: int = 0) -> PollReport:
        """One tick of poll group ``group`` (of ``settings.poll_groups``; the only one by default): find every
        armable task of the group due up to ``now + lead`` (overdue included), then :meth:`dispatch`; both
        stop early once ``out_of_time()`` is true."""
        end_ms = now_ms + self._settings.lead_ms
        try:  # before any read: a task the fast path leaves to the next poll is written after this poll's start
            self._store.mark_polled(now_ms, group)
        except Exception:  # the fast path then takes every short-lead task itself; nothing is lost
            log.exception("noting the start of the poll of group %d failed", group)
        done = DispatchReport(dispatched=0, recovered=0, batches=0, invoke_failures=0)
        found: set[str] = set()
        resent: set[str] = set()  # PENDING tasks this poller had sent, sent again
        sorted_ = Sorted()

        def dispatch(candidates: list[Candidate]) -> None:
            nonlocal done
            more = self.dispatch(candidates, out_of_time, sent_at_ms=now_ms)
            done = DispatchReport(**{k: v + getattr(more, k) for k, v in done.model_dump().items()})

        def send(candidates: list[Candidate]) -> None:
            found.update(c.task_id for c in candidates)
            part = self._sent.sort(candidates, now_ms)
            sorted_.unless_progress += part.unless_progress
            sorted_.held += part.held
            sorted_.unarmed_ages |= part.unarmed_ages
            resent.update(c.task_id for c in part.send if c.task_id in part.unarmed_ages)
            dispatch(part.send)

        # Each read of the index is dispatched before the next one is made: the first batches do not wait for
        # the whole window to be read.
        scan = self._store.find_due(now_ms, end_ms, out_of_time, group, on_found=send)
        # Schedules after the tasks found: making occurrences (a read and a transaction per 98) never delays a
        # dispatch. Those due within the window go out now (the index may not list them yet).
        made, created, unreadable = self._extend_schedules(scan.schedules, now_ms, end_ms, out_of_time)
        if made:
            send(made)
        # What is sent again unless its batch shows progress: judged on the whole of a complete poll (a poll cut
        # short has not seen everything armable: all of it goes)
        unless = sorted_.unless_progress
        again = self._sent.stalled(unless, found) if scan.complete else unless
        dispatch(again)
        held_back = sorted_.held + len(unless) - len(again)
        not_armed = _warn_unarmed(sorted_.unarmed_ages, resent | {c.task_id for c in again})
        report = PollReport(
            group=group,
            now_ms=now_ms,
            window_end_ms=end_ms,
            watermark_ms=scan.watermark_ms,
            buckets=scan.buckets,
            queries=scan.queries,
            candidates=len(scan.candidates),
            held_back=held_back,
            not_armed=not_armed,
            undecodable=scan.undecodable + unreadable,
            schedules=len(scan.schedules),
            occurrences_created=created,
            complete=scan.complete and done.undispatched == 0,
            **done.model_dump(),
        )
        log.info("poll: %s", report.model_dump())
        return report

    def _extend_schedules(
        self, schedule_ids: list[str], now_ms: int, end_ms: int, out_of_time: Callable[[], bool] | None
    ) -> tuple[list[Candidate], int, int]:
        """Make the next occurrences of each recurring schedule found (up to ``schedule_ahead_ms`` past the
        window), each schedule on its own, the tenants' in turn: one that fails is logged and left for the next
        tick, one whose tenant is at its ``active_tasks`` quota makes what fits and holds the rest back for a later
        tick (:func:`chain.extend`), and one whose item cannot be read leaves the due index (quarantined). The new
        occurrences due within
        the window, as candidates to dispatch, how many occurrences were made, and how many items could not be
        read."""
        made: list[Candidate] = []
        created = unreadable = 0
        # A tenant at a time, round robin: a tick that runs out of time has given each tenant its share, however
        # many schedules another holds.
        for schedule_id in interleave_by_tenant(schedule_ids):
            if out_of_time is not None and out_of_time():
                break
            try:
                report = chain.extend(
                    self._schedules,
                    self._tasks,
                    schedule_id,
                    now_ms,
                    end_ms + self._settings.schedule_ahead_ms,
                    admit=self._admit,
                )
            except UndecodableItemError as exc:  # it would fail at every poll: out of the due index, counted
                unreadable += 1
                self._schedules.quarantine_schedule(schedule_id, str(exc), now_ms)
                continue
            except Exception:  # one schedule must not stop the poll; the next tick tries again
                log.exception("schedule %s: making its next occurrences failed", schedule_id)
                continue
            created += len(report.created)
            made.extend(
                Candidate(
                    task_id=t.task_id,
                    due_ms=t.due_ms,
                    status=TaskStatus.PENDING,
                    lease_until_ms=None,
                    misfire_grace_ms=t.misfire_grace_ms,
                    misfire_policy=t.misfire_policy,
                )
                for t in report.created
                if t.due_ms <= end_ms
            )
        return made, created, unreadable

    def poll_all_groups(
        self, now_ms: int, start_group: Callable[[int], None], out_of_time: Callable[[], bool] | None = None
    ) -> list[PollReport]:
        """The scheduled tick with fan-out over ``settings.poll_groups`` groups: start a poller for each group but
        the first (``start_group(g)``: in AWS an async invoke of the poller function with the group), poll group 0
        here, then, while time is left, the groups that are late (the reports of the groups polled here, group
        0's first).

        An async invoke answers 202 even when the invocation is then throttled or dropped, so a group is known
        late only by the start its own poll notes (:meth:`last_polls`): one that has not started since the tick
        before (:func:`late_groups`, read before this tick starts anything), or whose ``start_group`` raised. Group
        0's report counts them (``groups_late``); each is polled here unless its own poller of this tick has
        started by the end of group 0's poll (read again then). With one group this is :meth:`poll`."""

        def read_last_polls() -> list[int | None] | None:  # None: not known (then no group is found late)
            try:
                return self.last_polls()
            except Exception:
                log.exception("reading when each poll group last started failed")
                return None

        groups = self._settings.poll_groups
        before = read_last_polls() if groups > 1 else None
        previous_tick = before[0] if before else None
        unstarted: list[int] = []
        for group in range(1, groups):
            try:
                start_group(group)
            except Exception:  # it will not run: polled here below
                log.exception("starting the poller of group %d failed; polling it here", group)
                unstarted.append(group)
        reports = [self.poll(now_ms, out_of_time, group=0)]
        late = set(late_groups(before or [], previous_tick)) | set(unstarted)
        if not late:
            return reports
        reports[0] = reports[0].model_copy(update={"groups_late": len(late)})
        after = read_last_polls()
        started = set() if after is None else late - set(late_groups(after, previous_tick)) - set(unstarted)
        to_poll = sorted(late - started)
        log.warning(
            "poll groups %s had not started since the tick before (or could not be started); polling %s here",
            sorted(late),
            to_poll,
        )
        for group in to_poll:
            if out_of_time is not None and out_of_time():
                log.warning("out of time before polling group %d here: the next tick finds its tasks", group)
                break
            reports.append(self.poll(now_ms, out_of_time, group=group))
        return reports

    def dispatch(
        self, candidates: list[Candidate], out_of_time: Callable[[], bool] | None = None, sent_at_ms: int | None = None
    ) -> DispatchReport:
        """Cut ``candidates`` into batches and invoke one executor per batch, in parallel, until
        ``out_of_time()``. A failed invocation leaves its tasks as they are: the next poll dispatches them.
        With ``sent_at_ms`` (a poll's now), what was sent is remembered (:class:`SentMemory`)."""
        settings = self._settings
        batches = make_batches(
            candidates,
            settings.max_batch_size,
            settings.max_fires_at_once,
            max_batches=settings.quota_cut_max_batches,
        )
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
            except Exception:  # the tasks stay as they are; the next poll dispatches them again
                log.exception("invoking an executor for batch %s failed", event.batch_id)
                with lock:
                    sent["failures"] += 1
                return
            with lock:
                sent["batches"] += 1
                sent["tasks"] += len(batch)
            if sent_at_ms is not None:
                self._sent.remember(event.batch_id, batch, sent_at_ms)

        if len(batches) <= 1:
            for batch in batches:
                invoke(batch)
        else:
            with ThreadPoolExecutor(max_workers=INVOKE_THREADS, thread_name_prefix="invoke") as pool:
                list(pool.map(invoke, batches))
        return DispatchReport(
            dispatched=sent["tasks"],
            batches=sent["batches"],
            invoke_failures=sent["failures"],
            undispatched=sent["skipped"],
            recovered=sum(1 for c in candidates if c.status is not TaskStatus.PENDING),
        )
