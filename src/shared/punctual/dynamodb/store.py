"""The DynamoDB implementation of the store port (:class:`punctual.store.TaskStore`): the only module that
speaks DynamoDB. The Tasks table and its sparse ``due`` index; items are encoded by :mod:`.codec`.

``due_bucket`` is ``"<minute bucket>#<shard>"``; it is present only while the task is active (PENDING, CLAIMED,
ARMED), which makes the ``due`` index sparse: it holds exactly the tasks that may still have to fire. The
bucket is the minute of ``max(due, now at write time)``, so a task written late (due in the past, or in a
minute the poller already swept) always lands at or after the poller's watermark. The index projects keys
only: no claim, arm or record changes an indexed attribute, so none of them costs an index write; the poller
reads status and lease of what it found from the base table (eventually consistent, 0.5 read unit a task).

A task written due sooner than the next poll can dispatch it (``due_ms - now < poll interval + margin``)
carries ``fast_path = 1``: the table stream hands it to the fast path, which claims and dispatches it like the
poller does (the claim condition makes the two race-safe; the poller still finds it in the index if the
fast path does not).

Many conditional writes at once (claims, arms, records) go one of two ways, by ``Settings.write_batch``. In AWS
("single", the default) each is an UpdateItem, run in parallel on a small thread pool: 1 write unit per KB.
Locally ("transaction") they go as TransactWriteItems of up to 100, each item keeping its own condition: that
costs 2 write units an item in AWS, but on DynamoDB Local and 2 cores it takes about a tenth of the CPU per
item (one HTTP request and one botocore call for 100 items), which is what lets the local runtime keep up.
Either way each item's condition alone decides its fate.

The life of a task, and the condition expression that guards each arrow (every state change is one
conditional write on the base table; the index is only used to find candidates)::

    schedule ─▶ PENDING ──claim (poller)──▶ CLAIMED ──arm (executor)──▶ ARMED ──fire──▶ record ─▶ outcome
                ▲ ▲ │  ▲                      │ lease = claim + claim_lease   │ lease = due + grace    │
                │ │ │  └──── reschedule ──────┤                               │   + timeout + margin   │
                │ │ ├───── cancel ────────────┴──▶ CANCELLED                  │                        │
                │ │ └── overdue past grace ──▶ MISSED     (any lease expired ──▶ claimable again)     │
                │ └──── retry: the action failed, attempts remain (due = now + backoff) ◀─────────────┤
                └────── redrive (punctual redrive): FAILED ──▶ PENDING, attempt 0, due = now ◀── FAILED
                      (misfire policy "skip", the default; a "fire_late" task is claimed like any other,
                       and its executor fires it and records it with late = true)

    kind        condition (every write names its kind: a retried request whose first attempt was applied is
                recognised from its kind and the item it finds, see ``_already_applied``)
    CREATE      attribute_not_exists(task_id)
    CLAIM       due_ms = :due AND (status = PENDING OR (status IN (CLAIMED, ARMED) AND lease_until_ms < :now))
    MISS        same as CLAIM (only a claimable task can be declared missed by the poller; skip policy only)
    ARM         status = CLAIMED AND batch_id = :batch        -- a duplicate delivery of a batch loses here
    RECORD      status = ARMED AND armed_by = :executor       -- only the executor that armed it records it
    RETRY       same as RECORD, writing PENDING instead of an outcome: due_ms = the next try, due_bucket and
                fast_path recomputed, first_due_ms kept (set on the first retry), attempt kept (the next claim
                ADDs 1), armed_by kept (so that botocore's retry of this very write can recognise it)
    REDRIVE     status = FAILED                               -- a second redrive of the same task is a no-op
    RELEASE     same as RECORD: an executor shutting down hands its unfired tasks back (ARMED → PENDING)
    CANCEL,     status IN (PENDING, CLAIMED) OR (status = ARMED AND lease_until_ms < :now)
    RESCHEDULE  (cancel, reschedule: a claimed-but-not-armed task can still be changed; its executor then
                 loses at ARM. Once armed and within its lease, the task belongs to its executor.)

A lease expires at ``lease_until_ms``: at that millisecond the task is still owned; one millisecond later
(``lease_until_ms < now``) it is claimable again. An ARMED lease lasts until due + grace + the longest action
timeout + a margin, so by the time it expires the task is past its grace: the poller records it MISSED with a
detail saying its executor was lost after arming it. That is the crash window (the executor died after arming,
before recording): the task may or may not have fired, and it is never fired a second time by Punctual. A
second fire can only come from outside (an at-least-once target retrying); every fire carries the same
idempotency key (task id + occurrence) so that targets can drop a duplicate.

Finding due work (:meth:`DynamoTaskStore.find_due`): every shard of every minute bucket from the watermark (the
oldest bucket that may still hold an active task) up to the end of the window. Overdue tasks are always
included: scheduled rules can be ~119 s apart and index writes lag, so the watermark (an item of its own,
``#poller-watermark``) stays at least ``overdue_safety_ms`` behind now and never passes a bucket in which an
active task was seen. With no watermark yet, one scan of the sparse index finds the oldest active task.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Any

from botocore.exceptions import ClientError

from ..errors import TaskConflictError, TaskNotFoundError, TaskStateError
from ..keys import BUCKET_MS, bucket_start, buckets_between, from_ms, index_key, shard_of
from ..model import Candidate, DueScan, FireRecord, Task, TaskStatus
from ..settings import Settings
from .codec import candidate_of_item, item_to_task, new_task_item, number_of, text_of, to_av
from .schema import DUE_INDEX

BATCH_GET_LIMIT = 100  # keys in one BatchGetItem
TRANSACTION_LIMIT = 100  # items in one TransactWriteItems
WATERMARK_KEY = "#poller-watermark"  # not a valid task id, so it can never collide with a task

_P, _C, _A = TaskStatus.PENDING.value, TaskStatus.CLAIMED.value, TaskStatus.ARMED.value

CLAIMABLE = "due_ms = :due AND (#st = :pending OR (#st IN (:claimed, :armed) AND lease_until_ms < :now))"
ARMABLE = "#st = :claimed AND batch_id = :batch"
RECORDABLE = "#st = :armed AND armed_by = :executor"
CHANGEABLE = "#st IN (:pending, :claimed) OR (#st = :armed AND lease_until_ms < :now)"
REDRIVABLE = "#st = :failed"
CANDIDATE_PROJECTION = "task_id, due_ms, #st, lease_until_ms, misfire_grace_ms, misfire_policy"


class WriteKind(Enum):
    """Which life-cycle change a conditional write is (the table in the module docstring)."""

    CLAIM = "claim"
    MISS = "miss"
    ARM = "arm"
    RECORD = "record"
    RETRY = "retry"
    RELEASE = "release"
    REDRIVE = "redrive"
    CANCEL = "cancel"
    RESCHEDULE = "reschedule"


@dataclass(frozen=True, slots=True)
class Write:
    """One conditional UpdateItem, named by its kind. ``owner`` is the batch (CLAIM) or executor (ARM, RECORD,
    RETRY, RELEASE) it writes; ``status`` the status it writes; ``marker`` the number only this very write puts
    on the item (a retry's next due, a redrive's instant), for the kinds where owner and status are not enough."""

    kind: WriteKind
    task_id: str
    request: dict[str, Any]
    status: str
    owner: str | None = None
    marker: tuple[str, int | str] | None = None


def _already_applied(write: Write, old: dict[str, Any] | None) -> bool:
    """Whether ``old`` (the item a failed condition found) already shows ``write``: botocore retries a request
    whose response was lost, and the retry then finds its own change. Decided from the write's kind and the
    item alone."""
    if not old or text_of(old, "status") != write.status:
        return False
    match write.kind:
        case WriteKind.CLAIM:
            return text_of(old, "batch_id") == write.owner
        case WriteKind.ARM | WriteKind.RECORD:
            return text_of(old, "armed_by") == write.owner
        case WriteKind.RETRY | WriteKind.REDRIVE | WriteKind.CANCEL | WriteKind.RESCHEDULE:
            assert write.marker is not None
            name, value = write.marker
            found = text_of(old, name) if isinstance(value, str) else number_of(old, name)
            return (write.kind is not WriteKind.RETRY or text_of(old, "armed_by") == write.owner) and found == value
        case _:  # MISS, RELEASE: a second attempt reports what it finds
            return False


def _is_conditional_failure(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def _old_item(exc: ClientError) -> dict[str, Any] | None:
    """The item a failed condition found (``ReturnValuesOnConditionCheckFailure="ALL_OLD"``), if any."""
    item: dict[str, Any] | None = exc.response.get("Item")  # type: ignore[assignment]
    return item


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One entry of the keys-only due index: a task that was active when the index was last written."""

    task_id: str
    due_ms: int


class DynamoTaskStore:
    """Tasks in DynamoDB: the conditional writes of the task life cycle, and the due-index queries.

    Parameters
    ----------
    client:
        A boto3 DynamoDB *client* (low level), for AWS, DynamoDB Local or moto alike.
    table_name:
        The Tasks table (defined in ``template.yaml``).
    shard_count:
        Shards per minute bucket of the due index.
    fast_path_within_ms:
        A task written due sooner than this (the poll interval + a margin) carries ``fast_path = 1``.
    retention_days:
        Finished tasks get ``expires_at`` = finish + this; DynamoDB's TTL deletes them afterwards.
    db_threads:
        Parallel requests for the many-item writes and reads.
    write_batch:
        "single" (UpdateItem each) or "transaction" (TransactWriteItems of up to 100): see the module docstring.
    overdue_safety_ms:
        :meth:`find_due` never moves its watermark closer to now than this.
    """

    def __init__(self, client: Any, table_name: str, shard_count: int, *, fast_path_within_ms: int = 70_000,
                 retention_days: int = 30, db_threads: int = 8, write_batch: str = "single",
                 overdue_safety_ms: int = 180_000) -> None:
        self._client = client
        self.table_name = table_name
        self.shard_count = shard_count
        self.fast_path_within_ms = fast_path_within_ms
        self.retention_ms = retention_days * 86_400_000
        self.overdue_safety_ms = overdue_safety_ms
        self._db_threads = db_threads
        if write_batch not in ("single", "transaction"):
            raise ValueError(f"write_batch must be 'single' or 'transaction', not {write_batch!r}")
        self.write_batch = write_batch
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @classmethod
    def from_settings(cls, client: Any, settings: Settings) -> DynamoTaskStore:
        return cls(client, settings.table_name, settings.shard_count,
                   fast_path_within_ms=settings.poll_interval_ms + settings.fast_path_margin_ms,
                   retention_days=settings.retention_days, db_threads=settings.db_threads,
                   write_batch=settings.write_batch, overdue_safety_ms=settings.overdue_safety_ms)

    # -- helpers -----------------------------------------------------------------------------------------
    def _index_key(self, task_id: str, due_ms: int, now_ms: int) -> str:
        return index_key(max(due_ms, now_ms), shard_of(task_id, self.shard_count))

    def _fast_path(self, due_ms: int, now_ms: int) -> int:
        return 1 if due_ms - now_ms < self.fast_path_within_ms else 0

    def _expires_at(self, finished_ms: int) -> int:
        return (finished_ms + self.retention_ms) // 1000

    def _write(self, kind: WriteKind, task_id: str, update: str, condition: str, values: dict[str, Any], *,
               status: str, owner: str | None = None, marker: tuple[str, int | str] | None = None) -> Write:
        """One conditional UpdateItem of ``kind``."""
        request = {
            "TableName": self.table_name,
            "Key": {"task_id": {"S": task_id}},
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": to_av(values),
        }
        return Write(kind, task_id, request, status, owner, marker)

    def _single_item(self, write: Write) -> dict[str, Any] | None:
        """One conditional update returning the item as it now is (ALL_NEW), or None if the condition failed.

        A failed condition whose old item already shows this very change counts as done (see
        :func:`_already_applied`)."""
        try:
            return self._client.update_item(
                **write.request, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
            )["Attributes"]
        except ClientError as exc:
            if _is_conditional_failure(exc):
                old = _old_item(exc)
                return old if old is not None and _already_applied(write, old) else None
            raise

    def _single(self, write: Write) -> bool:
        """:meth:`_single_item`, answering only whether the change holds."""
        return self._single_item(write) is not None

    def _parallel(self, work: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``work`` over ``items`` on the store's thread pool (in order); inline for a single item.
        The pool's threads are started by the first caller and inherit its CPU priority."""
        if len(items) <= 1:
            return [work(item) for item in items]
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self._db_threads, thread_name_prefix="ddb")
        return list(self._pool.map(work, items))

    def _apply_many(self, writes: list[Write]) -> list[bool]:
        """Many conditional updates, each decided by its own condition: which ones held."""
        if self.write_batch == "transaction":
            return self._transact(writes)
        return self._parallel(self._single, writes)

    def _transact(self, writes: list[Write], attempts: int = 4) -> list[bool]:
        """Many conditional updates with few requests: TransactWriteItems of up to 100 (chunks in parallel).

        A transaction is all or nothing, so when some conditions fail the others are retried without them
        (``CancellationReasons`` names the failed ones). Whatever is still undecided after ``attempts`` goes
        one UpdateItem at a time.
        """
        result: list[bool | None] = [None] * len(writes)

        def run(chunk: list[int]) -> list[int]:
            """One transaction; returns the indexes to try again."""
            if len(chunk) == 1:
                result[chunk[0]] = self._single(writes[chunk[0]])
                return []
            try:
                self._client.transact_write_items(TransactItems=[{"Update": writes[i].request} for i in chunk])
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                    raise
                reasons = exc.response.get("CancellationReasons") or []
                retry = []
                for position, index in enumerate(chunk):
                    code = reasons[position].get("Code") if position < len(reasons) else None
                    if code == "ConditionalCheckFailed":
                        result[index] = False
                    else:  # "None" (rolled back with the others), a conflict, or unknown: try again
                        retry.append(index)
                return retry
            for index in chunk:
                result[index] = True
            return []

        pending = list(range(len(writes)))
        for _ in range(attempts):
            chunks = [pending[i : i + TRANSACTION_LIMIT] for i in range(0, len(pending), TRANSACTION_LIMIT)]
            pending = [index for retry in self._parallel(run, chunks) for index in retry]
            if not pending:
                break
        for index in pending:
            result[index] = self._single(writes[index])
        return [bool(r) for r in result]

    # -- client side -------------------------------------------------------------------------------------
    def create(self, task: Task, now_ms: int) -> tuple[Task, bool]:
        """CREATE a new PENDING task; idempotent on ``task_id`` with equal content.

        Returns the stored task and whether it was created now (False: an equal task already existed).

        Raises
        ------
        TaskConflictError
            A task with this id exists with different content.
        """
        item = new_task_item(task, due_bucket=self._index_key(task.task_id, task.due_ms, now_ms),
                             fast_path=self._fast_path(task.due_ms, now_ms), created_ms=now_ms)
        try:
            self._client.put_item(
                TableName=self.table_name,
                Item=item,
                ConditionExpression="attribute_not_exists(task_id)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not _is_conditional_failure(exc):
                raise
            old = _old_item(exc) or self._get_item(task.task_id)
            if old is None:  # deleted between the two calls: try once more
                return self.create(task, now_ms)
            existing = item_to_task(old)
            if text_of(old, "content_hash") == text_of(item, "content_hash"):
                return existing, False
            raise TaskConflictError(
                f"task {task.task_id!r} already exists with different content "
                f"(due {existing.due_at.isoformat()}, status {existing.status})",
                existing=existing,
            ) from exc
        return item_to_task(item), True

    def _get_item(self, task_id: str) -> dict[str, Any] | None:
        response = self._client.get_item(
            TableName=self.table_name, Key={"task_id": {"S": task_id}}, ConsistentRead=True
        )
        return response.get("Item")

    def get(self, task_id: str) -> Task | None:
        """The task as stored now (strongly consistent read), or None."""
        item = self._get_item(task_id)
        return None if item is None else item_to_task(item)

    def cancel(self, task_id: str, now_ms: int) -> Task:
        """CANCEL: PENDING or CLAIMED (not yet armed) → CANCELLED; the task leaves the due index.

        Raises
        ------
        TaskNotFoundError, TaskStateError
            No such task; or it is armed (its executor owns it) or already finished.
        """
        return self._change(
            WriteKind.CANCEL, task_id, now_ms,
            "SET #st = :cancelled, finished_ms = :now, expires_at = :expires, change_token = :token "
            "REMOVE due_bucket, lease_until_ms, batch_id",
            {":cancelled": TaskStatus.CANCELLED.value, ":expires": self._expires_at(now_ms)},
            status=TaskStatus.CANCELLED.value,
        )

    def reschedule(self, task_id: str, due_ms: int, now_ms: int) -> Task:
        """RESCHEDULE a PENDING or CLAIMED task to a new due time; it is PENDING again and is claimed afresh.

        Raises
        ------
        TaskNotFoundError, TaskStateError
            As for :meth:`cancel`.
        """
        current = self.get(task_id)
        if current is None:
            raise TaskNotFoundError(f"no task {task_id!r}")
        moved = current.model_copy(update={"due_at": from_ms(due_ms)})
        return self._change(
            WriteKind.RESCHEDULE, task_id, now_ms,
            "SET #st = :pending, due_ms = :new_due, due_at = :new_due_at, due_bucket = :bucket, "
            "content_hash = :hash, fast_path = :fast, change_token = :token "
            "REMOVE lease_until_ms, batch_id, claimed_by, armed_by",
            {":fast": self._fast_path(due_ms, now_ms), ":new_due": due_ms,
             ":new_due_at": moved.due_at.isoformat(timespec="milliseconds"),
             ":bucket": self._index_key(task_id, due_ms, now_ms), ":hash": moved.content_hash()},
            status=_P,
        )

    def _change(self, kind: WriteKind, task_id: str, now_ms: int, update: str, values: dict[str, Any], *,
                status: str) -> Task:
        """CANCEL or RESCHEDULE (guarded by CHANGEABLE): the task as it now is, or the error saying why the
        change was refused. Each call writes a token of its own (``change_token``): botocore's retry of a
        request whose response was lost finds its own token and answers as the first attempt would have, while
        a second call (another token) is refused as before."""
        token = uuid.uuid4().hex
        write = self._write(kind, task_id, update, f"attribute_exists(task_id) AND ({CHANGEABLE})",
                            {":pending": _P, ":claimed": _C, ":armed": _A, ":now": now_ms, ":token": token, **values},
                            status=status, marker=("change_token", token))
        try:
            response = self._client.update_item(**write.request, ReturnValues="ALL_NEW",
                                                ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ClientError as exc:
            if not _is_conditional_failure(exc):
                raise
            old = _old_item(exc)
            if old is None:
                raise TaskNotFoundError(f"no task {write.task_id!r}") from exc
            if _already_applied(write, old):
                return item_to_task(old)
            task = item_to_task(old)
            why = "it is armed and about to fire" if task.status is TaskStatus.ARMED else f"it is {task.status}"
            raise TaskStateError(f"cannot {write.kind.value} task {write.task_id!r}: {why}", task=task) from exc
        return item_to_task(response["Attributes"])

    def list_tasks(self, statuses: Iterable[TaskStatus] | None = None, due_from_ms: int | None = None,
                   due_to_ms: int | None = None, limit: int | None = None) -> Iterator[Task]:
        """Tasks filtered by status and due range (a filtered scan: for admin use, not the hot path)."""
        filters: list[str] = []
        values: dict[str, Any] = {}
        names: dict[str, str] = {}
        status_list = list(statuses or [])
        if status_list:
            keys = [f":s{i}" for i in range(len(status_list))]
            filters.append(f"#st IN ({', '.join(keys)})")
            values.update({k: s.value for k, s in zip(keys, status_list, strict=True)})
            names["#st"] = "status"
        if due_from_ms is not None:
            filters.append("due_ms >= :from")
            values[":from"] = due_from_ms
        if due_to_ms is not None:
            filters.append("due_ms < :to")
            values[":to"] = due_to_ms
        filters.append("attribute_exists(due_ms)")
        kwargs: dict[str, Any] = {"TableName": self.table_name, "FilterExpression": " AND ".join(filters)}
        if values:
            kwargs["ExpressionAttributeValues"] = to_av(values)
        if names:
            kwargs["ExpressionAttributeNames"] = names
        count = 0
        for page in self._client.get_paginator("scan").paginate(**kwargs):
            for item in page.get("Items", []):
                yield item_to_task(item)
                count += 1
                if limit is not None and count >= limit:
                    return

    # -- poller side -------------------------------------------------------------------------------------
    def find_due(self, now_ms: int, until_ms: int) -> DueScan:
        """Every active task due at or before ``until_ms``, overdue included (see "Finding due work" in the
        module docstring): the due index from the watermark to ``until_ms``, every shard of every minute
        bucket, read in parallel; then status and lease of each task found, from the base table. The watermark
        moves forward to the oldest bucket in which an active task was seen, never closer to now than
        ``overdue_safety_ms``."""
        safety_bucket = bucket_start(now_ms - self.overdue_safety_ms)
        watermark = self.get_watermark()
        if watermark is None:
            oldest = self.oldest_active_due()
            watermark = min(safety_bucket, oldest) if oldest is not None else safety_bucket
        buckets = buckets_between(watermark, until_ms)
        queries = [(b, shard) for b in buckets for shard in range(self.shard_count)]
        pages = self._parallel(lambda q: self.query_index(q[0], q[1], until_ms), queries)
        new_watermark = min([safety_bucket, *(b for (b, _), page in zip(queries, pages, strict=True) if page)])
        # The index may briefly list a rescheduled task under its old and new key: read each task once, from
        # the base table, which also says whether it is still claimable.
        task_ids = list(dict.fromkeys(e.task_id for page in pages for e in page))
        found = [c for c in self.candidates(task_ids) if c.due_ms <= until_ms]
        # Safe before the caller dispatches: a task seen here stays active (and its bucket stays at or after
        # the new watermark) until it finishes.
        self.advance_watermark(new_watermark)
        return DueScan(candidates=found, watermark_ms=new_watermark, buckets=len(buckets), queries=len(queries))

    def query_index(self, bucket_ms: int, shard: int, until_ms: int) -> list[IndexEntry]:
        """Entries of one shard of one minute bucket of the (keys-only) due index, due at or before
        ``until_ms``. The index is eventually consistent: an entry may be stale or not there yet."""
        entries: list[IndexEntry] = []
        for page in self._client.get_paginator("query").paginate(
            TableName=self.table_name,
            IndexName=DUE_INDEX,
            KeyConditionExpression="due_bucket = :pk AND due_ms <= :until",
            ExpressionAttributeValues=to_av({":pk": index_key(bucket_ms, shard), ":until": until_ms}),
            ProjectionExpression="task_id, due_ms",
        ):
            entries.extend(IndexEntry(raw["task_id"]["S"], int(raw["due_ms"]["N"])) for raw in page.get("Items", []))
        return entries

    def candidates(self, task_ids: list[str]) -> list[Candidate]:
        """The still-active tasks among ``task_ids``, with status and lease as the base table has them
        (BatchGetItem, eventually consistent: the claim's condition decides anyway). Finished or deleted
        tasks are left out."""
        items = self._batch_get(task_ids, consistent=False, projection=CANDIDATE_PROJECTION)
        return [c for c in map(candidate_of_item, items) if c is not None]

    def _claim(self, candidate: Candidate, batch_id: str, poller_id: str, now_ms: int, lease_ms: int) -> Write:
        return self._write(
            WriteKind.CLAIM, candidate.task_id,
            "SET #st = :claimed, lease_until_ms = :lease, batch_id = :batch, claimed_by = :poller ADD attempt :one",
            CLAIMABLE,
            {":due": candidate.due_ms, ":pending": _P, ":claimed": _C, ":armed": _A, ":now": now_ms,
             ":lease": now_ms + lease_ms, ":batch": batch_id, ":poller": poller_id, ":one": 1},
            status=_C, owner=batch_id,
        )

    def claim(self, candidate: Candidate, batch_id: str, poller_id: str, now_ms: int, lease_ms: int) -> bool:
        """CLAIM (see the module docstring): True if this poller now owns the task for ``lease_ms``.

        False when the condition failed: another poller claimed it, it was cancelled or rescheduled, or its
        lease is still live. A task whose lease ends at ``lease_until_ms`` is claimable from the next ms.
        """
        return self._single(self._claim(candidate, batch_id, poller_id, now_ms, lease_ms))

    def claim_many(self, claims: list[tuple[Candidate, str]], poller_id: str, now_ms: int,
                   lease_ms: int) -> list[bool]:
        """:meth:`claim` for many ``(candidate, batch_id)`` pairs (see ``write_batch``)."""
        return self._apply_many([self._claim(c, b, poller_id, now_ms, lease_ms) for c, b in claims])

    def _miss(self, candidate: Candidate, now_ms: int, detail: str) -> Write:
        return self._write(
            WriteKind.MISS, candidate.task_id,
            "SET #st = :missed, finished_ms = :now, detail = :detail, expires_at = :expires "
            "REMOVE due_bucket, lease_until_ms",
            CLAIMABLE,
            {":due": candidate.due_ms, ":pending": _P, ":claimed": _C, ":armed": _A, ":now": now_ms,
             ":missed": TaskStatus.MISSED.value, ":detail": detail, ":expires": self._expires_at(now_ms)},
            status=TaskStatus.MISSED.value,
        )

    def mark_missed(self, candidate: Candidate, now_ms: int, detail: str) -> bool:
        """MISS: a claimable task already past its misfire grace is recorded MISSED without firing."""
        return self._single(self._miss(candidate, now_ms, detail))

    def mark_missed_many(self, missed: list[tuple[Candidate, str]], now_ms: int) -> list[bool]:
        """:meth:`mark_missed` for many ``(candidate, detail)`` pairs (in parallel)."""
        return self._parallel(lambda m: self.mark_missed(m[0], now_ms, m[1]), missed)

    def get_watermark(self) -> int | None:
        """Bucket start before which the index holds no active task (as of the last poll), or None."""
        item = self._client.get_item(
            TableName=self.table_name, Key={"task_id": {"S": WATERMARK_KEY}}, ConsistentRead=True
        ).get("Item")
        return None if item is None else int(item["watermark_ms"]["N"])

    def advance_watermark(self, watermark_ms: int) -> bool:
        """Move the watermark forward (never back: a concurrent poller may have moved it further)."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"task_id": {"S": WATERMARK_KEY}},
                UpdateExpression="SET watermark_ms = :w",
                ConditionExpression="attribute_not_exists(watermark_ms) OR watermark_ms < :w",
                ExpressionAttributeValues={":w": {"N": str(watermark_ms)}},
            )
        except ClientError as exc:
            if _is_conditional_failure(exc):
                return False
            raise
        return True

    def oldest_active_due(self) -> int | None:
        """The bucket before the earliest due time in the whole due index (a scan of the sparse index; used
        only once, when no watermark exists yet)."""
        oldest: int | None = None
        for page in self._client.get_paginator("scan").paginate(
            TableName=self.table_name, IndexName=DUE_INDEX, ProjectionExpression="due_ms, due_bucket"
        ):
            for raw in page.get("Items", []):
                due = int(raw["due_ms"]["N"])
                oldest = due if oldest is None else min(oldest, due)
        return None if oldest is None else bucket_start(oldest) - BUCKET_MS

    # -- executor side -----------------------------------------------------------------------------------
    def _arm(self, task_id: str, batch_id: str, executor_id: str, lease_until_ms: int) -> Write:
        return self._write(
            WriteKind.ARM, task_id,
            "SET #st = :armed, armed_by = :executor, lease_until_ms = :lease",
            ARMABLE,
            {":claimed": _C, ":armed": _A, ":batch": batch_id, ":executor": executor_id, ":lease": lease_until_ms},
            status=_A, owner=executor_id,
        )

    def arm(self, task_id: str, batch_id: str, executor_id: str, lease_until_ms: int) -> Task | None:
        """ARM: CLAIMED by ``batch_id`` → ARMED by ``executor_id``. Returns the task, or None if it lost
        (a duplicate delivery, a re-claim after the claim lease expired, a cancel or reschedule)."""
        item = self._single_item(self._arm(task_id, batch_id, executor_id, lease_until_ms))
        return None if item is None else item_to_task(item)

    def arm_many(self, leases: list[tuple[str, int]], batch_id: str, executor_id: str) -> list[Task | None]:
        """:meth:`arm` for many ``(task_id, lease_until_ms)``. Single writes return the armed tasks' content;
        after transactions it is read back (one strongly consistent BatchGetItem per 100 armed tasks)."""
        if self.write_batch == "single":
            return self._parallel(lambda lease: self.arm(lease[0], batch_id, executor_id, lease[1]), leases)
        won = self._transact([self._arm(t, batch_id, executor_id, lease) for t, lease in leases])
        tasks = self.get_many([task_id for (task_id, _), ok in zip(leases, won, strict=True) if ok])
        return [tasks.get(task_id) if ok else None for (task_id, _), ok in zip(leases, won, strict=True)]

    def _batch_get(self, task_ids: list[str], consistent: bool, projection: str | None = None) -> list[dict[str, Any]]:
        """Raw items by id: BatchGetItem, 100 ids a request (in parallel), unprocessed keys retried."""

        def fetch(ids: list[str]) -> list[dict[str, Any]]:
            request: dict[str, Any] = {"Keys": [{"task_id": {"S": t}} for t in ids], "ConsistentRead": consistent}
            if projection:
                request["ProjectionExpression"] = projection
                if "#st" in projection:
                    request["ExpressionAttributeNames"] = {"#st": "status"}
            items: list[dict[str, Any]] = []
            for _ in range(10):
                response = self._client.batch_get_item(RequestItems={self.table_name: request})
                items.extend(response.get("Responses", {}).get(self.table_name, []))
                keys = response.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])
                if not keys:
                    return items
                request = {**request, "Keys": keys}
            raise RuntimeError(f"BatchGetItem left {len(keys)} keys unprocessed after 10 attempts")

        unique = list(dict.fromkeys(task_ids))
        chunks = [unique[i : i + BATCH_GET_LIMIT] for i in range(0, len(unique), BATCH_GET_LIMIT)]
        return [item for part in self._parallel(fetch, chunks) for item in part]

    def get_many(self, task_ids: list[str]) -> dict[str, Task]:
        """Tasks by id (strongly consistent BatchGetItem)."""
        return {task.task_id: task for task in map(item_to_task, self._batch_get(task_ids, consistent=True))}

    def release(self, task_id: str, executor_id: str) -> bool:
        """RELEASE: an executor that stops before firing hands the task back: ARMED (by it) → PENDING."""
        return self._single(self._write(
            WriteKind.RELEASE, task_id,
            "SET #st = :pending REMOVE lease_until_ms, batch_id, armed_by",
            RECORDABLE,
            {":armed": _A, ":executor": executor_id, ":pending": _P},
            status=_P,
        ))

    def _record(self, executor_id: str, record: FireRecord) -> Write:
        if record.retry_due_ms is not None:
            return self._retry(executor_id, record, record.retry_due_ms)
        values: dict[str, Any] = {
            ":armed": _A, ":executor": executor_id, ":outcome": record.outcome.value,
            ":finished": record.finished_ms, ":expires": self._expires_at(record.finished_ms),
        }
        sets = ["#st = :outcome", "finished_ms = :finished", "expires_at = :expires", *_fire_fields(record, values)]
        if record.late:
            sets.append("late = :late")
            values[":late"] = True
        return self._write(WriteKind.RECORD, record.task_id,
                           f"SET {', '.join(sets)} REMOVE due_bucket, lease_until_ms", RECORDABLE, values,
                           status=record.outcome.value, owner=executor_id)

    def _retry(self, executor_id: str, record: FireRecord, due_ms: int) -> Write:
        """RETRY: ARMED by this executor → PENDING, due at the next try (see the module docstring)."""
        now_ms = record.finished_ms
        values: dict[str, Any] = {
            ":armed": _A, ":executor": executor_id, ":retrying": _P, ":retry_due": due_ms,
            ":retry_due_at": from_ms(due_ms).isoformat(timespec="milliseconds"),
            ":bucket": self._index_key(record.task_id, due_ms, now_ms), ":fast": self._fast_path(due_ms, now_ms),
            ":first_due": record.first_due_ms if record.first_due_ms is not None else due_ms,
        }
        sets = ["#st = :retrying", "due_ms = :retry_due", "due_at = :retry_due_at", "due_bucket = :bucket",
                "fast_path = :fast", "first_due_ms = if_not_exists(first_due_ms, :first_due)",
                *_fire_fields(record, values)]
        return self._write(WriteKind.RETRY, record.task_id,
                           f"SET {', '.join(sets)} REMOVE lease_until_ms, batch_id, claimed_by", RECORDABLE, values,
                           status=_P, owner=executor_id, marker=("due_ms", due_ms))

    def _redrive(self, task_id: str, now_ms: int) -> Write:
        return self._write(
            WriteKind.REDRIVE, task_id,
            "SET #st = :redriven, attempt = :zero, due_ms = :now, due_at = :now_at, due_bucket = :bucket, "
            "fast_path = :fast, redriven_ms = :now "
            "REMOVE expires_at, finished_ms, lease_until_ms, batch_id, claimed_by, armed_by, first_due_ms, late",
            REDRIVABLE,
            {":redriven": _P, ":failed": TaskStatus.FAILED.value, ":zero": 0, ":now": now_ms,
             ":now_at": from_ms(now_ms).isoformat(timespec="milliseconds"),
             ":bucket": self._index_key(task_id, now_ms, now_ms), ":fast": self._fast_path(now_ms, now_ms)},
            status=_P, marker=("redriven_ms", now_ms),
        )

    def redrive_many(self, task_ids: list[str], now_ms: int) -> list[bool]:
        """REDRIVE: FAILED → PENDING, due now, attempt 0 (a fresh set of attempts and a fresh max age), back in
        the due index (and flagged for the fast path); its TTL is removed. False for a task that is not FAILED
        (already redriven, never failed, or gone): a second redrive is a no-op. The content hash is kept."""
        return self._apply_many([self._redrive(t, now_ms) for t in task_ids])

    def record(self, executor_id: str, record: FireRecord) -> bool:
        """RECORD: ARMED by this executor → outcome; the task leaves the due index. A record whose
        ``retry_due_ms`` is set is a RETRY instead: the task goes back to PENDING, due at that instant.

        Returns False when this executor no longer owns the task (its lease expired and it was claimed
        again): the outcome is then not written, and the log says so.
        """
        return self._single(self._record(executor_id, record))

    def record_many(self, executor_id: str, records: list[FireRecord]) -> list[bool]:
        """:meth:`record` for many outcomes (see ``write_batch``)."""
        return self._apply_many([self._record(executor_id, r) for r in records])


def _fire_fields(record: FireRecord, values: dict[str, Any]) -> list[str]:
    """SET clauses (and their values) for what a fire measured: fired_ms, drift and detail, where known."""
    sets = []
    for name, value in (("fired_ms", record.fired_ms), ("drift_ms", record.drift_ms),
                        ("drift_corrected_ms", record.drift_corrected_ms), ("detail", record.detail)):
        if value is not None:
            sets.append(f"{name} = :{name}")
            values[f":{name}"] = value
    return sets
