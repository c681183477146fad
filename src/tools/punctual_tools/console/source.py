"""The console's two :class:`~punctual_tools.console.model.ConsoleSource` implementations, and how each is built.

:class:`OperatorSource` sees a whole deployment through its store's ports and a
:class:`~punctual.scheduling.client.Client` on them (every change goes through the client, its errors unchanged):
active tasks in due order from the due index, a tenant's tasks from the tenant index, the dead-letter queue, the
tenants' quota use, the executors' heartbeats and the last hour's figures (:mod:`.figures`). Built on the running
local stack by :func:`local_source`, or on a deployed one with the operator's AWS credentials by :func:`aws_source`.

:class:`TenantSource` sees one tenant through the REST API (:class:`~punctual.scheduling.api_client.ApiClient`, SigV4
or a bearer token), as the API lets that tenant: its own tasks and schedules. Built by :func:`api_source`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from punctual.config.settings import Settings
from punctual.config.tenant_map import TenantMap
from punctual.domain.keys import from_ms
from punctual.domain.model import Task, TaskStatus
from punctual.domain.quota import held_by
from punctual.domain.schedules import Schedule
from punctual.domain.tenancy import is_tenant, prefix
from punctual.errors import InvalidRequestError, PunctualError
from punctual.scheduling.api_client import ApiClient
from punctual.scheduling.client import Client
from punctual.scheduling.quotas import QuotaGuard, TenantAdmission
from punctual.scheduling.redrive import Selection, redrive_tasks
from punctual.stores.dlq import RedrivableQueue
from punctual.stores.dynamodb.heartbeats import HeartbeatItem
from punctual.stores.ports import Stores
from punctual.targets.registry import TargetRules
from punctual_tools.console.counts import KeptCounts
from punctual_tools.console.figures import BatchLine, BatchLog, hour_minutes, minutes_of
from punctual_tools.console.model import (
    DeadLetter,
    ExecutorView,
    MinuteFigures,
    NowView,
    RedriveOutcome,
    TaskFilter,
    TaskPage,
    TenantUsage,
)

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_dynamodb import DynamoDBClient

    from punctual.scheduling.protocol import Scheduler
    from punctual.stores.dlq import DeadLetter as QueuedLetter

COUNT_THREADS = 2  # a background count's requests at once (the pages' own reads use the stores' pool)
KIND_PAGES = 5  # index pages a page filtered by action kind or retries reads at most to fill itself
NOW_ENTRIES = 200_000  # due-index entries the Now page counts at most, ahead and overdue each
OVERDUE_BUCKETS = 60  # minutes of the due index (the latest) the overdue count reads at most
EXECUTOR_WINDOW_MS = 10 * 60_000  # an executor is shown when it reported a batch this recently
ARMED_PROBE = 100  # due-index entries a shard of a minute the Now page reads for the executors holding armed tasks
ARMED_AHEAD_MS = 120_000  # ... due before this far ahead: an executor arms what is due within the lead (90 s)
API_PAGES = 10  # pages of the REST API's listing (1,000 tasks each) a tenant's Now page reads at most
API_PAGE = 1_000
# Without a due range's end, the due index is listed up to an hour ahead: a page walks at most an hour of minutes
# (each a query of every shard), and an index of tasks due months ahead would otherwise page through empty hours
DEFAULT_AHEAD_MS = 3_600_000
DEFAULT_AHEAD_NOTE = "active tasks due up to an hour from now, overdue ones included: a due range shows later ones"
FINISHED_NOTE = (
    "finished tasks are listed per tenant (choose one); FAILED ones are on the Dead letters page; any task is "
    "found by its id"
)

Figures = Callable[[int], list[MinuteFigures]]  # the last hour's figures at an instant
Heartbeats = Callable[[set[str]], dict[str, HeartbeatItem]]
PageReader = Callable[[str | None, int], tuple[list[Task], str | None, int]]  # (cursor, wanted) -> page


def filled_page(read_page: PageReader, flt: TaskFilter) -> tuple[list[Task], str | None, int]:
    """A page of ``flt.limit`` tasks at most: one index page, or with an action kind or retries asked for, as many
    as fill it (:data:`KIND_PAGES` at most), each asking for what the page still lacks; the cursor after the last one
    read."""
    tasks: list[Task] = []
    cursor = flt.after
    read = 0
    for _ in range(KIND_PAGES if flt.reads_tasks else 1):
        page, cursor, count = read_page(cursor, flt.limit - len(tasks))
        read += count
        tasks.extend(t for t in page if flt.keeps(t))
        if cursor is None or len(tasks) >= flt.limit:
            break
    return tasks, cursor, read


def check_filter(flt: TaskFilter) -> None:
    """Refuse a filter no index can answer, as the API refuses bad input (InvalidRequestError naming the field): a
    page of no task, a tenant name that is none, a tenant's cursor that is not one of its ids."""
    if flt.limit < 1:
        raise InvalidRequestError("limit", f"a page holds at least one task, not {flt.limit}")
    if flt.tenant is None:
        return
    if not is_tenant(flt.tenant):
        raise InvalidRequestError("tenant", f"{flt.tenant!r} is not a tenant name")
    if flt.after is not None and not flt.after.startswith(prefix(flt.tenant)):
        raise InvalidRequestError("after", f"{flt.after!r} is not a cursor of the tenant {flt.tenant}'s tasks")


def per_second(dues: Iterable[int], now_ms: int, horizon_s: int) -> list[int]:
    """How many of ``dues`` fall in each second from ``now_ms`` on, ``horizon_s`` seconds."""
    counts = [0] * horizon_s
    for due in dues:
        second = (due - now_ms) // 1000
        if 0 <= second < horizon_s:
            counts[second] += 1
    return counts


def executor_state(beat: HeartbeatItem | None, now_ms: int) -> str:
    """What an executor's heartbeat item says of it at ``now_ms``."""
    if beat is None:
        return "lapsed"
    if beat.taken_over:
        return "taken over"
    if beat.fenced:
        return "fenced"
    return "alive" if beat.alive_until_ms is not None and beat.alive_until_ms >= now_ms else "lapsed"


def executor_views(lines: list[BatchLine], holding: Counter[str], beats: Heartbeats, now_ms: int) -> list[ExecutorView]:
    """The executors that hold armed tasks (``holding``: how many each, a batch not reported yet) or reported a batch
    in the last :data:`EXECUTOR_WINDOW_MS`: those holding first, then the latest, each with its heartbeat item and
    how many batches it reported then."""
    recent = [line for line in lines if line.end_ms >= now_ms - EXECUTOR_WINDOW_MS]
    batches = Counter(line.executor_id for line in recent)
    last: dict[str, int] = {}
    for line in recent:
        last[line.executor_id] = max(line.end_ms, last.get(line.executor_id, line.end_ms))
    found = beats(set(batches) | set(holding))
    views = [
        ExecutorView(
            executor_id=executor,
            state=executor_state(beat := found.get(executor), now_ms),
            alive_until_ms=beat.alive_until_ms if beat else None,
            beat_ms=beat.beat_ms if beat else None,
            invocation=beat.invocation if beat else None,
            batches=batches[executor],
            last_batch_ms=last.get(executor),
            holding=holding[executor],
        )
        for executor in dict.fromkeys([*holding, *batches])
    ]
    return sorted(views, key=lambda v: (-v.holding, -(v.last_batch_ms or 0), v.executor_id))


def newest_letters(letters: list[QueuedLetter], limit: int) -> list[QueuedLetter]:
    """The newest message of each task, newest first, ``limit`` at most."""
    newest: dict[str, QueuedLetter] = {}
    for letter in letters:
        if letter.task_id not in newest or letter.failed_at >= newest[letter.task_id].failed_at:
            newest[letter.task_id] = letter
    return sorted(newest.values(), key=lambda letter: letter.failed_at, reverse=True)[:limit]


@dataclass(frozen=True, kw_only=True)
class OperatorSource:
    """The operator's view of a deployment: ``stores`` (its ports), ``client`` (the changes, on those ports),
    ``dead_letter_queue`` (None: none configured), ``figures`` (the last hour's, said where from by
    ``figures_note``), ``batch_log`` and ``heartbeats`` (the executors: None where there is no batch log, on AWS),
    ``tenant_names`` (the tenants the stack's settings know), ``tenant_map`` (their quotas) and ``active_counts``
    (their active tasks, counted between pages by ``count_active``)."""

    label: str
    stores: Stores
    client: Client
    dead_letter_queue: RedrivableQueue | None
    figures: Figures
    figures_note: str
    batch_log: BatchLog | None = None
    heartbeats: Heartbeats | None = None
    tenant_names: tuple[str, ...] = ()
    tenant_map: TenantMap = field(default_factory=TenantMap)
    active_counts: KeptCounts = field(default_factory=KeptCounts)
    count_active: Callable[[str], int] | None = None  # how those are counted (None: by the stores' client)

    @property
    def operator(self) -> bool:
        return True

    # -- Now ------------------------------------------------------------------------------------------------------
    def now(self, now_ms: int, horizon_s: int = 300) -> NowView:
        """The load ahead and the overdue tasks from the due index's keys, the last hour from ``figures``, the
        executors from the batch log and their heartbeats."""
        client = self.stores.client
        ahead, ahead_whole = client.due_instants(
            now_ms, now_ms + horizon_s * 1000, now_ms=now_ms, limit=NOW_ENTRIES, max_buckets=horizon_s // 60 + 2
        )
        overdue, overdue_whole = client.due_instants(
            None, now_ms, now_ms=now_ms, limit=NOW_ENTRIES, max_buckets=OVERDUE_BUCKETS
        )
        notes = [
            "tasks due and overdue: the due index's entries (eventually consistent: a task finished a moment ago "
            "may still count)",
            self.figures_note,
        ]
        if not ahead_whole:
            notes.append(f"tasks due: the first {NOW_ENTRIES} counted")
        if not overdue_whole:
            notes.append(f"overdue: counted over the latest {OVERDUE_BUCKETS} minutes of the index, or {NOW_ENTRIES}")
        executors = None
        if self.heartbeats is not None:
            lines = self.batch_log.read(now_ms - EXECUTOR_WINDOW_MS) if self.batch_log is not None else []
            executors = executor_views(lines, self.armed_owners(now_ms), self.heartbeats, now_ms)
            notes.append(
                "executors: those holding armed tasks among the active ones due soonest (from the due index, "
                f"{ARMED_PROBE} a shard at most, due before {ARMED_AHEAD_MS // 1000} s from now)"
                + (
                    " and those that reported a batch in the last 10 minutes, with their heartbeat items"
                    if self.batch_log is not None
                    else ", with their heartbeat items (no batch log on AWS: one that holds none is not listed)"
                )
            )
        else:
            notes.append("executors: not known here; CloudWatch has their metrics")
        return NowView(
            now_ms=now_ms,
            due_per_second=per_second(ahead, now_ms, horizon_s),
            overdue=len(overdue),
            minutes=self.figures(now_ms),
            executors=executors,
            notes=notes,
        )

    def armed_owners(self, now_ms: int) -> Counter[str]:
        """How many armed tasks each executor holds among the active tasks due soonest: one page of the due index
        (from its oldest active minute to :data:`ARMED_AHEAD_MS` ahead, :data:`ARMED_PROBE` entries a shard of a
        minute at most), ARMED ones kept. An executor arms what is due within the lead, so this finds those
        running a batch that has not ended yet."""
        armed, _, _ = self.stores.client.due_page(
            None, now_ms + ARMED_AHEAD_MS, None, ARMED_PROBE, now_ms=now_ms, statuses=[TaskStatus.ARMED]
        )
        return Counter(task.armed_by for task in armed if task.armed_by)

    # -- tasks ----------------------------------------------------------------------------------------------------
    def tasks(self, flt: TaskFilter, now_ms: int) -> TaskPage:
        """A tenant's tasks from the tenant index, else the active ones from the due index (a finished status of
        no tenant: an empty page and a note saying where those are)."""
        client = self.stores.client
        statuses = [flt.status] if flt.status is not None else None
        check_filter(flt)
        if flt.tenant is not None:
            tenant = flt.tenant

            def tenant_page(after: str | None, wanted: int) -> tuple[list[Task], str | None, int]:
                page, more = client.tenant_page(tenant, statuses, flt.due_from_ms, flt.due_to_ms, wanted, after)
                return page, more, len(page)

            tasks, cursor, read = filled_page(tenant_page, flt)
            return TaskPage(tasks=tasks, next_cursor=cursor, index="tenant", entries_read=read)
        if flt.status is not None and not flt.status.is_active:
            return TaskPage(tasks=[], next_cursor=None, index="due", entries_read=0, note=FINISHED_NOTE)
        due_to = flt.due_to_ms if flt.due_to_ms is not None else now_ms + DEFAULT_AHEAD_MS
        note = DEFAULT_AHEAD_NOTE if flt.due_to_ms is None else None

        def due_page(after: str | None, wanted: int) -> tuple[list[Task], str | None, int]:
            return client.due_page(flt.due_from_ms, due_to, after, wanted, now_ms=now_ms, statuses=statuses)

        tasks, cursor, read = filled_page(due_page, flt)
        return TaskPage(tasks=tasks, next_cursor=cursor, index="due", entries_read=read, note=note)

    def task(self, task_id: str) -> Task | None:
        return self.client.get(task_id)

    def cancel(self, task_id: str) -> Task:
        return self.client.cancel(task_id)

    def reschedule(self, task_id: str, due_ms: int) -> Task:
        return self.client.reschedule(task_id, from_ms(due_ms))

    def run_now(self, task_id: str) -> Task:
        return self.client.run_now(task_id)

    # -- schedules ------------------------------------------------------------------------------------------------
    def schedules(self) -> list[Schedule]:
        return self.client.list_schedules()

    def schedule(self, schedule_id: str) -> Schedule | None:
        return self.client.get_schedule(schedule_id)

    def occurrences(self, schedule_id: str, limit: int = 20) -> list[Task]:
        """The latest ``limit`` occurrences from the ``schedule`` index, each read as stored, newest first."""
        ids = self.stores.schedules.schedule_occurrence_ids(schedule_id)
        found = self.stores.client.get_many(ids[-limit:] if limit > 0 else [])
        return sorted(found.values(), key=lambda t: (t.due_ms, t.task_id), reverse=True)

    def pause_schedule(self, schedule_id: str) -> Schedule:
        return self.client.pause_schedule(schedule_id)

    def resume_schedule(self, schedule_id: str) -> Schedule:
        return self.client.resume_schedule(schedule_id)

    def delete_schedule(self, schedule_id: str) -> Schedule:
        return self.client.delete_schedule(schedule_id)

    def run_schedule_now(self, schedule_id: str) -> Task:
        return self.client.run_schedule_now(schedule_id)

    # -- dead letters ---------------------------------------------------------------------------------------------
    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The queue's newest message of each task (received, then released at once: a look hides none for
        long), each with its task as stored now."""
        queue = self.dead_letter_queue
        if queue is None:
            return []
        letters = queue.receive()
        try:
            chosen = newest_letters(letters, limit)
        finally:
            queue.release(letters)
        found = self.stores.client.get_many([letter.task_id for letter in chosen])
        return [
            DeadLetter(task_id=letter.task_id, reason=letter.reason, task=found.get(letter.task_id))
            for letter in chosen
        ]

    def redrive(self, task_ids: list[str]) -> RedriveOutcome:
        """Redrive the FAILED ones among ``task_ids`` (their tenants' ``active_tasks`` quota kept) and settle their
        dead letters."""
        rules = TargetRules.from_settings(self.client.settings, self.tenant_map)
        admit = TenantAdmission(QuotaGuard(self.stores.client), lambda task_id: rules.of(task_id).quotas)
        report = redrive_tasks(
            self.stores.client, Selection.of(task_ids), self.client.now_ms(), self.dead_letter_queue, admit
        )
        return RedriveOutcome(
            redriven=list(report.redriven), skipped={s.task_id: str(s.reason) for s in report.skipped}
        )

    # -- tenants --------------------------------------------------------------------------------------------------
    def tenants(self, wait_s: float | None = None) -> list[TenantUsage]:
        """Each known tenant's active tasks (a count of the sparse count index kept between pages,
        :class:`~.counts.KeptCounts`: waited for at most ``wait_s``) and what its schedules hold (read from the
        tenant index), against its quotas in the tenant map."""
        counter = self.count_active or self.stores.client.count_active
        kept = {
            tenant: self.active_counts.get(tenant, partial(counter, tenant), wait_s) for tenant in self.tenant_names
        }
        now = self.active_counts.monotonic()
        usage: list[TenantUsage] = []
        for tenant in self.tenant_names:
            quotas = self.tenant_map.policy_of(tenant).quotas
            held = held_by(self.client.list_schedules(prefix(tenant)))
            count = kept[tenant]
            usage.append(
                TenantUsage(
                    tenant=tenant,
                    active_tasks=count.value,
                    counted_s_ago=count.age_s(now),
                    counting=count.counting,
                    count_error=count.error,
                    active_tasks_limit=quotas.active_tasks,
                    schedules=held.schedules,
                    schedules_limit=quotas.schedules,
                    schedule_rate_per_s=held.rate_per_s,
                    schedule_rate_limit=quotas.schedule_rate_per_s,
                )
            )
        return usage


@dataclass(frozen=True, kw_only=True)
class TenantSource:
    """One tenant's view through the REST API (``api``): its tasks and schedules, no operator's figures."""

    label: str
    api: ApiClient
    tenant: str

    @property
    def operator(self) -> bool:
        return False

    def _active_until(self, until_ms: int) -> tuple[list[Task], bool]:
        """The tenant's PENDING and ARMED tasks due before ``until_ms``, from the API's listing (id order), at most
        :data:`API_PAGES` pages; and whether that was all of them."""
        active: list[Task] = []
        token: str | None = None
        for _ in range(API_PAGES):
            page, token = self.api.list_page(
                [TaskStatus.PENDING, TaskStatus.ARMED], None, from_ms(until_ms), API_PAGE, token
            )
            active.extend(page)
            if token is None:
                return active, True
        return active, False

    def now(self, now_ms: int, horizon_s: int = 300) -> NowView:
        """The load ahead and the overdue tasks of this tenant, from the API's listing; no figures, no executors
        (an operator's)."""
        active, whole = self._active_until(now_ms + horizon_s * 1000)
        notes = [
            f"tasks due and overdue: the tenant {self.tenant}'s PENDING and ARMED tasks, as the REST API lists them",
            "the last hour's figures and the executors are the operator's view",
        ]
        if not whole:
            notes.append(f"counted over the first {API_PAGES * API_PAGE} of the tenant's tasks (in id order)")
        return NowView(
            now_ms=now_ms,
            due_per_second=per_second((t.due_ms for t in active), now_ms, horizon_s),
            overdue=sum(1 for t in active if t.due_ms < now_ms),
            minutes=[],
            executors=None,
            notes=notes,
        )

    def tasks(self, flt: TaskFilter, now_ms: int) -> TaskPage:
        """The API's pages of the tenant's tasks (id order), filtered by status and due range there, and by action
        kind here; ``flt.tenant`` is this tenant whatever it says."""
        statuses: list[TaskStatus | str] | None = [flt.status] if flt.status is not None else None
        due_from = from_ms(flt.due_from_ms) if flt.due_from_ms is not None else None
        due_to = from_ms(flt.due_to_ms) if flt.due_to_ms is not None else None

        def api_page(after: str | None, wanted: int) -> tuple[list[Task], str | None, int]:
            page, token = self.api.list_page(statuses, due_from, due_to, wanted, after)
            return page, token, len(page)

        tasks, cursor, read = filled_page(api_page, flt)
        return TaskPage(tasks=tasks, next_cursor=cursor, index="api", entries_read=read)

    def task(self, task_id: str) -> Task | None:
        return self.api.get(task_id)

    def cancel(self, task_id: str) -> Task:
        return self.api.cancel(task_id)

    def reschedule(self, task_id: str, due_ms: int) -> Task:
        return self.api.reschedule(task_id, from_ms(due_ms))

    def run_now(self, task_id: str) -> Task:
        return self.api.run_now(task_id)

    def schedules(self) -> list[Schedule]:
        return self.api.list_schedules()

    def schedule(self, schedule_id: str) -> Schedule | None:
        return self.api.get_schedule(schedule_id)

    def occurrences(self, schedule_id: str, limit: int = 20) -> list[Task]:
        return self.api.schedule_history(schedule_id, limit)[::-1]

    def pause_schedule(self, schedule_id: str) -> Schedule:
        return self.api.pause_schedule(schedule_id)

    def resume_schedule(self, schedule_id: str) -> Schedule:
        return self.api.resume_schedule(schedule_id)

    def delete_schedule(self, schedule_id: str) -> Schedule:
        return self.api.delete_schedule(schedule_id)

    def run_schedule_now(self, schedule_id: str) -> Task:
        return self.api.run_schedule_now(schedule_id)

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The tenant's FAILED tasks (the dead-letter queue is the operator's), each with its last error."""
        failed: list[Task] = []
        token: str | None = None
        while len(failed) < limit:
            page, token = self.api.list_page([TaskStatus.FAILED], None, None, min(API_PAGE, limit - len(failed)), token)
            failed.extend(page)
            if token is None:
                break
        return [DeadLetter(task_id=t.task_id, reason=t.detail or "", task=t) for t in failed[:limit]]

    def redrive(self, task_ids: list[str]) -> RedriveOutcome:
        """Each task through ``POST /v1/tasks/{id}/redrive``; one refused is skipped with the API's reason."""
        redriven: list[str] = []
        skipped: dict[str, str] = {}
        for task_id in task_ids:
            try:
                self.api.redrive(task_id)
            except PunctualError as exc:
                skipped[task_id] = str(exc)
            else:
                redriven.append(task_id)
        return RedriveOutcome(redriven=redriven, skipped=skipped)

    def tenants(self, wait_s: float | None = None) -> list[TenantUsage] | None:
        """None: quota use per tenant is the operator's view."""
        return None


# -- builders -----------------------------------------------------------------------------------------------------
def stores_source(
    settings: Settings,
    dynamodb: DynamoDBClient | None = None,
    *,
    tenants: tuple[str, ...] = (),
    batch_log: BatchLog | None = None,
    label: str | None = None,
) -> OperatorSource:
    """The operator's view of the table ``settings`` name (through ``dynamodb``, by default a client of the
    settings), its dead-letter queue and the tenant map of the settings, knowing ``tenants``; the last hour's figures
    and the executors from ``batch_log`` (None: neither is known, and the notes say so)."""
    from punctual.stores.dlq import build_dead_letter_queue  # noqa: PLC0415  the builders' own
    from punctual.stores.dynamodb import DynamoStores, build_stores  # noqa: PLC0415
    from punctual.stores.dynamodb.heartbeats import heartbeat_items  # noqa: PLC0415

    stores = DynamoStores.from_settings(dynamodb, settings) if dynamodb is not None else build_stores(settings)
    tenant_map = TenantMap.parse(settings.tenant_map)
    log = batch_log

    def figures(now_ms: int) -> list[MinuteFigures]:
        return minutes_of(log.read(hour_minutes(now_ms)[0]) if log is not None else [], now_ms)

    return OperatorSource(
        label=label or f"table {settings.table_name} at {settings.endpoint_url or settings.region}",
        stores=stores,
        client=Client(settings, stores.client, stores.schedules, tenant_map=tenant_map),
        dead_letter_queue=build_dead_letter_queue(settings),
        figures=figures,
        figures_note=(
            f"the last hour: the stack's batch log ({log.path}), each batch in the minute it ended"
            if log is not None
            else "the last hour: no batch log here, so no figures"
        ),
        batch_log=log,
        heartbeats=(lambda executor_ids: heartbeat_items(stores.table, executor_ids)) if log is not None else None,
        tenant_names=tenants,
        tenant_map=tenant_map,
        count_active=background_count(stores.table.client, settings),
    )


def background_count(dynamodb: DynamoDBClient, settings: Settings) -> Callable[[str], int]:
    """A tenant's active tasks counted :data:`COUNT_THREADS` keys at a time (on a table of its own, with a pool that
    small): a count in the background leaves the store room for the pages' own reads (DynamoDB Local counts on the
    machine's cores; through a region, fewer requests at once only make the count take longer)."""
    from punctual.stores.dynamodb import DynamoStores  # noqa: PLC0415  the builders' own

    return DynamoStores.from_settings(
        dynamodb, settings.model_copy(update={"db_threads": COUNT_THREADS})
    ).client.count_active


def local_source(home: Path) -> OperatorSource:
    """The operator's view of the local stack running with its home at ``home`` (its state file says where its
    table, dead-letter queue and batch log are, and which tenants it serves); PunctualError when none runs."""
    from punctual.stores.dlq import file_queue_url  # noqa: PLC0415
    from punctual_tools.local.stack import client_settings, local_tenant_map, wait_ready  # noqa: PLC0415

    state = wait_ready(home, 0)  # ready, and its process alive
    if state is None:
        raise PunctualError(f"no local stack is running with its home at {home}: start one with punctual up")
    tenants = tuple(state.get("tenants") or ())
    settings = Settings.from_env(
        **client_settings(state),
        dead_letter_queue_url=state.get("dead_letter_queue_url") or file_queue_url(home / "dlq.jsonl"),
        tenant_map=state.get("tenant_map") or local_tenant_map(tenants, int(state.get("receiver_port") or 0)),
        tenant_map_parameter=None,
    )
    return stores_source(
        settings,
        tenants=tenants,
        batch_log=BatchLog(Path(state.get("batch_log") or home / "batches.jsonl")),
        label=f"local stack at {settings.endpoint_url} (table {settings.table_name})",
    )


def tenants_of(tenant_map: TenantMap) -> tuple[str, ...]:
    """Every tenant a tenant map names (with a policy, or as a principal's), by name."""
    return tuple(sorted({name for name, _ in tenant_map.tenants} | {t for _, t in tenant_map.principals}))


def aws_source(settings: Settings, cloudwatch: CloudWatchClient | None = None) -> OperatorSource:
    """The operator's view of the deployed stack ``settings`` name (the ``PUNCTUAL_*`` settings of the CLI's
    ``--aws``), with the operator's AWS credentials: its table, its dead-letter queue, its tenant map, and the last
    hour's figures from CloudWatch (``cloudwatch``: a client, by default one for ``settings.region``)."""
    import boto3  # noqa: PLC0415  only an AWS source needs it

    from punctual.config.tenant_source import tenant_map_source  # noqa: PLC0415
    from punctual.stores.dlq import build_dead_letter_queue  # noqa: PLC0415
    from punctual.stores.dynamodb import build_stores  # noqa: PLC0415
    from punctual.stores.dynamodb.heartbeats import heartbeat_items  # noqa: PLC0415
    from punctual_tools.console.figures import CloudWatchFigures  # noqa: PLC0415

    stores = build_stores(settings)
    tenant_map = tenant_map_source(settings).tenant_map()
    figures = CloudWatchFigures(cloudwatch or boto3.client("cloudwatch", region_name=settings.region))
    return OperatorSource(
        label=f"AWS table {settings.table_name} in {settings.region}",
        stores=stores,
        client=Client(settings, stores.client, stores.schedules, tenant_map=tenant_map),
        dead_letter_queue=build_dead_letter_queue(settings),
        figures=figures.minutes,
        figures_note="the last hour: CloudWatch (TasksFired, TasksMissed, TasksFailed, FireDrift), a minute each",
        heartbeats=lambda executor_ids: heartbeat_items(stores.table, executor_ids),
        tenant_names=tenants_of(tenant_map),
        tenant_map=tenant_map,
    )


def api_source(api: Scheduler, tenant: str) -> TenantSource:
    """The tenant ``tenant``'s view through the REST API that ``api`` reaches (an
    :class:`~punctual.scheduling.api_client.ApiClient`: with the local stack's bearer token, or signed with SigV4 by
    the caller's AWS credentials, whose principal the tenant map names)."""
    if not isinstance(api, ApiClient):
        raise PunctualError("a tenant's console reads the REST API: give its URL (--api, or PUNCTUAL_API_URL)")
    return TenantSource(label=f"tenant {tenant} via {api.base_url}", api=api, tenant=tenant)
