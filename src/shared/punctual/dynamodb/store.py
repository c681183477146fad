"""The DynamoDB implementation of the store port (:class:`punctual.store.TaskStore`): the only module that
speaks DynamoDB. The Tasks table and its sparse ``due`` index; items are encoded by :mod:`.codec`.

``due_bucket`` is ``"<minute bucket>#<shard>"``; it is present only while the task is active (PENDING or
ARMED), which makes the ``due`` index sparse: it holds exactly the tasks that may still have to fire. The bucket
is the minute of ``max(due, now at write time)``, so a task written late (due in the past, or in a minute the
poller already swept) always lands at or after the poller's watermark. The index projects keys only: no arm or
record changes an indexed attribute, so none of them costs an index write; the poller reads status, lease and
owner of what it found from the base table (eventually consistent, 0.5 read unit a task).

A task written due sooner than the next poll can dispatch it (``due_ms - now < poll interval + margin``)
carries ``fast_path = 1``: the table stream hands it to the fast path, which dispatches it like the poller
does unless the next poll does so in time (each poll notes its start, ``polled_ms``, on its watermark item:
:meth:`DynamoTaskStore.mark_polled`, read by :meth:`DynamoTaskStore.last_polls`). The ARM condition makes the
two race-safe; the poller still finds the task in the index if the fast path does not dispatch it.

Many conditional writes at once (arms, records) go one of two ways, by ``Settings.write_batch``. In AWS
("single", the default) each is an UpdateItem, run in parallel on a small thread pool: 1 write unit per KB.
Locally ("transaction") they go as TransactWriteItems of up to 100, each item keeping its own condition: that
costs 2 write units an item in AWS, but on DynamoDB Local and 2 cores it takes about a tenth of the CPU per
item (one HTTP request and one botocore call for 100 items), which is what lets the local runtime keep up.
Either way each item's condition alone decides its fate. Transactions carry an idempotency token, so that
botocore's retry of one whose response was lost succeeds instead of failing its own conditions.

The life of a task, and the condition expression that guards each arrow (every state change is one
conditional write on the base table; the index is only used to find candidates; the poller writes nothing)::

    schedule ─▶ PENDING ─────────arm (executor)─────────▶ ARMED ──fire──▶ record ─▶ SUCCEEDED / FAILED / MISSED
                ▲ ▲ │  ▲                                   │ ▲  lease = due + grace + timeout + margin
                │ │ │  └──── reschedule ───────────────────┤ │  (a backstop; the owner's heartbeat decides)
                │ │ └───── cancel ──────▶ CANCELLED ◀──────┘ └── takeover (another executor): the owner's
                │ │                   (only past the lease)       heartbeat lapsed, or the task lease ended
                │ └──── retry: the action failed, attempts remain (due = now + backoff) ◀──── record ─┤
                └────── redrive (punctual redrive): FAILED ──▶ PENDING, attempt 0, due = now ◀── FAILED
          (an executor reaching a task past its grace records it MISSED under "skip" and fires it flagged late
           under "fire_late"; one that took a task over fires it only if it was due after the dead owner's
           last lease: the crash window, see punctual.decisions.decide_before_fire)

    kind        condition (every write names its kind: a retried request whose first attempt was applied is
                recognised from its kind and the item it finds, see ``_already_applied``)
    CREATE      attribute_not_exists(task_id)
    ARM         due_ms = :due AND status = PENDING
                                                    -- two dispatches of one task: all but one executor lose
    TAKEOVER    due_ms = :due AND status = ARMED AND armed_by = :owner, in one transaction with the owner's
                heartbeat item: alive_until_ms = :seen (what the taker read, already < now; the item is marked
                taken_over, so the owner can never renew); or, without the owner check, lease_until_ms < :now
    HEARTBEAT   attribute_not_exists(taken_over)  (on "#executor#<id>": alive_until_ms = now + lease)
    RECORD      status = ARMED AND armed_by = :executor       -- only the executor that armed it records it
    RETRY       same as RECORD, for the outcome RETRY: PENDING again, due_ms = the next try, due_bucket and
                fast_path recomputed, first_due_ms kept (set on the first retry), attempt kept (the next arm
                ADDs 1), armed_by kept (so that botocore's retry of this very write can recognise it)
    REDRIVE     status = FAILED                               -- a second redrive of the same task is a no-op
    RELEASE     same as RECORD: an executor handing back what it did not fire (a stop, its lease ended)
    QUARANTINE  attribute_exists(due_bucket) AND status = <what was read>: an active item that cannot be
                decoded becomes FAILED with a detail and leaves the index (one bad item never stops a poll)
    CANCEL,     status = PENDING OR (status = ARMED AND lease_until_ms < :now)
    RESCHEDULE  (once armed and within its lease, the task belongs to its executor)

A lease expires at ``lease_until_ms`` (a task's) or ``alive_until_ms`` (an executor's): at that millisecond it
is still held; one millisecond later (``< now``) it is not. An executor fires only within its own lease (it
stops ``heartbeat.SAFETY_MS`` before), so an executor found dead can have fired only tasks due up to its last
``alive_until_ms``: those (the crash window) are never fired a second time under "skip" (MISSED) and fired
again with the same idempotency key under "fire_late"; every later task it held fires on time, once, from the
executor that took it over. A second fire can only come from outside (an at-least-once target retrying);
every fire carries the same idempotency key (task id + occurrence) so that targets can drop a duplicate.

Finding due work (:meth:`DynamoTaskStore.find_due`): every shard of every minute bucket from the watermark (the
oldest bucket that may still hold an active task) up to the end of the window. Overdue tasks are always
included: scheduled rules can be ~119 s apart and index writes lag, so the watermark (an item of its own,
``#poller-watermark``) stays at least ``overdue_safety_ms`` behind now and never passes a bucket in which an
active task was seen. With no watermark yet, one scan of the sparse index finds the oldest active task.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Any

from botocore.exceptions import ClientError

from ..backoff import backoff_s
from ..errors import InvalidTaskError, TaskConflictError, TaskNotFoundError, TaskStateError
from ..keys import BUCKET_MS, bucket_start, buckets_between, from_ms, index_key, shard_of
from ..model import Armed, ArmRequest, Candidate, DueScan, FireRecord, Outcome, Task, TaskStatus, status_after
from ..settings import Settings
from ..tenancy import prefix
from .codec import (
    DECODE_ERRORS,
    ITEM_HEADROOM_BYTES,
    MAX_ITEM_BYTES,
    candidate_of_item,
    item_size,
    item_to_task,
    new_task_item,
    number_of,
    text_of,
    to_av,
)
from .reads import register_fast_reads
from .schedules import SCHEDULE_PREFIX, ScheduleItems, schedule_id_of_key
from .schema import DUE_INDEX, TENANT_ACTIVE_INDEX, TENANT_INDEX

log = logging.getLogger(__name__)

BATCH_GET_LIMIT = 100  # keys in one BatchGetItem
BATCH_GET_ATTEMPTS = 8  # requests for one chunk's keys, the unprocessed ones again after a backoff (~5 s at most)
UNREAD_ALIVE_UNTIL_MS = 2**62  # what a heartbeat that could not be read counts as: alive
THROTTLING_CODES = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"})
TRANSACTION_LIMIT = 100  # items in one TransactWriteItems
WATERMARK_KEY = "#poller-watermark"  # not a valid task id, so it can never collide with a task

_P, _A = TaskStatus.PENDING.value, TaskStatus.ARMED.value

ARMABLE = "due_ms = :due AND #st = :pending"
TAKEABLE = "due_ms = :due AND #st = :armed AND armed_by = :owner"
OWNER_DEAD = "alive_until_ms = :seen"  # on the owner's heartbeat item, in the same transaction as the takeover
EXECUTOR_PREFIX = "#executor#"  # heartbeat items: not valid task ids, never in the due index
RECORDABLE = "#st = :armed AND armed_by = :executor"
CHANGEABLE = "#st = :pending OR (#st = :armed AND lease_until_ms < :now)"
REDRIVABLE = "#st = :failed"
# tenant too: an item whose tenant is not its key's is met as undecodable by the poll already (codec)
CANDIDATE_PROJECTION = "task_id, due_ms, #st, lease_until_ms, misfire_grace_ms, misfire_policy, armed_by, tenant"


class WriteKind(Enum):
    """Which life-cycle change a conditional write is (the table in the module docstring)."""

    ARM = "arm"
    TAKEOVER = "takeover"
    QUARANTINE = "quarantine"
    RECORD = "record"
    RETRY = "retry"
    RELEASE = "release"
    REDRIVE = "redrive"
    CANCEL = "cancel"
    RESCHEDULE = "reschedule"


@dataclass(frozen=True, slots=True)
class Write:
    """One conditional UpdateItem, named by its kind. ``owner`` is the executor (ARM, TAKEOVER, RECORD, RETRY)
    it writes; ``status`` the status it writes; ``marker`` the number only this very write puts
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
        case WriteKind.ARM | WriteKind.TAKEOVER | WriteKind.RECORD:
            return text_of(old, "armed_by") == write.owner
        case WriteKind.RETRY | WriteKind.REDRIVE | WriteKind.CANCEL | WriteKind.RESCHEDULE:
            assert write.marker is not None
            name, value = write.marker
            found = text_of(old, name) if isinstance(value, str) else number_of(old, name)
            return (write.kind is not WriteKind.RETRY or text_of(old, "armed_by") == write.owner) and found == value
        case _:  # QUARANTINE, RELEASE: a second attempt reports what it finds
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


class DynamoTaskStore(ScheduleItems):
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
    poll_groups:
        Groups the due index's shards are split into, one poller each (:meth:`group_shards`); divides
        ``shard_count``.
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        shard_count: int,
        *,
        fast_path_within_ms: int = 70_000,
        retention_days: int = 30,
        db_threads: int = 8,
        write_batch: str = "single",
        overdue_safety_ms: int = 180_000,
        poll_groups: int = 1,
        schedule_ahead_ms: int = 70_000,
    ) -> None:
        if poll_groups < 1 or shard_count % poll_groups:
            raise ValueError(f"poll_groups ({poll_groups}) must divide shard_count ({shard_count})")
        self.poll_groups = poll_groups
        self.schedule_ahead_ms = schedule_ahead_ms
        self._client = client
        register_fast_reads(client)
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
        self._sleep: Callable[[float], None] = time.sleep  # between tries of unprocessed keys (tests inject it)

    @classmethod
    def from_settings(cls, client: Any, settings: Settings) -> DynamoTaskStore:
        return cls(
            client,
            settings.table_name,
            settings.shard_count,
            fast_path_within_ms=settings.poll_interval_ms + settings.fast_path_margin_ms,
            retention_days=settings.retention_days,
            db_threads=settings.db_threads,
            write_batch=settings.write_batch,
            overdue_safety_ms=settings.overdue_safety_ms,
            poll_groups=settings.poll_groups,
            schedule_ahead_ms=settings.schedule_ahead_ms,
        )

    # -- helpers -----------------------------------------------------------------------------------------
    def _index_key(self, task_id: str, due_ms: int, now_ms: int) -> str:
        return index_key(max(due_ms, now_ms), shard_of(task_id, self.shard_count))

    def _fast_path(self, due_ms: int, now_ms: int) -> int:
        return 1 if due_ms - now_ms < self.fast_path_within_ms else 0

    def _expires_at(self, finished_ms: int) -> int:
        return (finished_ms + self.retention_ms) // 1000

    def _write(
        self,
        kind: WriteKind,
        task_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
        *,
        status: str,
        owner: str | None = None,
        marker: tuple[str, int | str] | None = None,
    ) -> Write:
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
            item: dict[str, Any] = self._client.update_item(
                **write.request, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
            )["Attributes"]
            return item
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
                # The token makes botocore's retry of a transaction whose response was lost a no-op success.
                self._client.transact_write_items(
                    TransactItems=[{"Update": writes[i].request} for i in chunk], ClientRequestToken=uuid.uuid4().hex
                )
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
        item = self.item_of(task, now_ms)
        size = item_size(item)
        if size > MAX_ITEM_BYTES - ITEM_HEADROOM_BYTES:
            raise InvalidTaskError(
                "payload",
                f"the task's item would be {size} bytes; DynamoDB holds at most {MAX_ITEM_BYTES} and the task "
                f"needs {ITEM_HEADROOM_BYTES} of them for its life cycle (make the payload or the headers smaller)",
            )
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
            raise TaskConflictError(task.task_id, existing) from exc
        return item_to_task(item), True

    def item_of(self, task: Task, now_ms: int) -> dict[str, Any]:
        """The raw item CREATE puts for ``task`` written at ``now_ms`` (its due-index key and fast-path flag)."""
        return new_task_item(
            task,
            due_bucket=self._index_key(task.task_id, task.due_ms, now_ms),
            fast_path=self._fast_path(task.due_ms, now_ms),
            created_ms=now_ms,
        )

    def _get_item(self, task_id: str) -> dict[str, Any] | None:
        response = self._client.get_item(
            TableName=self.table_name, Key={"task_id": {"S": task_id}}, ConsistentRead=True
        )
        item: dict[str, Any] | None = response.get("Item")
        return item

    def get(self, task_id: str) -> Task | None:
        """The task as stored now (strongly consistent read), or None."""
        item = self._get_item(task_id)
        return None if item is None else item_to_task(item)

    def cancel(self, task_id: str, now_ms: int) -> Task:
        """CANCEL: PENDING (not yet armed) → CANCELLED; the task leaves the due index.

        Raises
        ------
        TaskNotFoundError, TaskStateError
            No such task; or it is armed (its executor owns it) or already finished.
        """
        return self._change(
            WriteKind.CANCEL,
            task_id,
            now_ms,
            "SET #st = :cancelled, finished_ms = :now, expires_at = :expires, change_token = :token "
            "REMOVE due_bucket, lease_until_ms, batch_id",
            {":cancelled": TaskStatus.CANCELLED.value, ":expires": self._expires_at(now_ms)},
            status=TaskStatus.CANCELLED.value,
        )

    def reschedule(self, task_id: str, due_ms: int, now_ms: int) -> Task:
        """RESCHEDULE a PENDING task to a new due time; it is PENDING again and is dispatched afresh.

        Raises
        ------
        TaskNotFoundError, TaskStateError
            As for :meth:`cancel`.
        """
        current = self.get(task_id)
        if current is None:
            raise TaskNotFoundError(task_id)
        moved = current.model_copy(update={"due_at": from_ms(due_ms)})
        return self._change(
            WriteKind.RESCHEDULE,
            task_id,
            now_ms,
            "SET #st = :pending, due_ms = :new_due, due_at = :new_due_at, due_bucket = :bucket, "
            "content_hash = :hash, fast_path = :fast, change_token = :token "
            "REMOVE lease_until_ms, batch_id, armed_by",
            {
                ":fast": self._fast_path(due_ms, now_ms),
                ":new_due": due_ms,
                ":new_due_at": moved.due_at.isoformat(timespec="milliseconds"),
                ":bucket": self._index_key(task_id, due_ms, now_ms),
                ":hash": moved.content_hash(),
            },
            status=_P,
        )

    def _change(
        self, kind: WriteKind, task_id: str, now_ms: int, update: str, values: dict[str, Any], *, status: str
    ) -> Task:
        """CANCEL or RESCHEDULE (guarded by CHANGEABLE): the task as it now is, or the error saying why the
        change was refused. Each call writes a token of its own (``change_token``): botocore's retry of a
        request whose response was lost finds its own token and answers as the first attempt would have, while
        a second call (another token) is refused as before."""
        token = uuid.uuid4().hex
        write = self._write(
            kind,
            task_id,
            update,
            f"attribute_exists(task_id) AND ({CHANGEABLE})",
            {":pending": _P, ":armed": _A, ":now": now_ms, ":token": token, **values},
            status=status,
            marker=("change_token", token),
        )
        try:
            response = self._client.update_item(
                **write.request, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
            )
        except ClientError as exc:
            if not _is_conditional_failure(exc):
                raise
            old = _old_item(exc)
            if old is None:
                raise TaskNotFoundError(write.task_id) from exc
            if _already_applied(write, old):
                return item_to_task(old)
            task = item_to_task(old)
            why = "it is armed and about to fire" if task.status is TaskStatus.ARMED else f"it is {task.status}"
            raise TaskStateError(write.task_id, write.kind.value, why, task=task) from exc
        return item_to_task(response["Attributes"])

    def list_tasks(
        self,
        statuses: Iterable[TaskStatus] | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        limit: int | None = None,
    ) -> Iterator[Task]:
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
        filters.append("attribute_exists(due_ms) AND NOT contains(task_id, :schedule_prefix)")
        values[":schedule_prefix"] = SCHEDULE_PREFIX
        kwargs: dict[str, Any] = {"TableName": self.table_name, "FilterExpression": " AND ".join(filters)}
        if values:
            kwargs["ExpressionAttributeValues"] = to_av(values)
        if names:
            kwargs["ExpressionAttributeNames"] = names
        count = 0
        for page in self._client.get_paginator("scan").paginate(**kwargs):
            for task in _decoded(page.get("Items", [])):
                yield task
                count += 1
                if limit is not None and count >= limit:
                    return

    def tenant_keys(
        self, tenant: str, begins: str | None = None, after: str | None = None, limit: int | None = None
    ) -> tuple[list[str], str | None]:
        """Ids of ``tenant``'s items (starting with ``begins``, if given) in id order, from after the id
        ``after``, ``limit`` at most, from the keys-only tenant index (eventually consistent); and the last id
        read when more may follow (None: the end)."""
        # The key's prefix bounds the read as well as the tenant attribute does: an item whose tenant attribute
        # was forged (keyed under another tenant) is never read, and a page never ends on one.
        begins = begins if begins is not None and begins.startswith(prefix(tenant)) else prefix(tenant)
        condition = "tenant = :t AND begins_with(task_id, :b)"
        values = {":t": tenant, ":b": begins}
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": TENANT_INDEX,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": to_av(values),
        }
        if after is not None:
            kwargs["ExclusiveStartKey"] = {"tenant": {"S": tenant}, "task_id": {"S": after}}
        ids: list[str] = []
        while True:
            if limit is not None:
                kwargs["Limit"] = limit - len(ids)
            page = self._client.query(**kwargs)
            ids.extend(item["task_id"]["S"] for item in page.get("Items", []))
            more = page.get("LastEvaluatedKey")
            if not more:
                return ids, None
            if limit is not None and len(ids) >= limit:
                return ids, ids[-1]
            kwargs["ExclusiveStartKey"] = more

    def _batch_items(self, keys: list[str]) -> list[dict[str, Any]]:
        """Raw items of ``keys`` that exist, in the order of ``keys`` (strongly consistent)."""
        found = {item["task_id"]["S"]: item for item in self._batch_get(keys, consistent=True)}
        return [found[key] for key in keys if key in found]

    def count_active(self, tenant: str) -> int:
        """How many of ``tenant``'s tasks are PENDING or ARMED: a COUNT query of the sparse ``tenant_active``
        index (only items carrying tenant and due_bucket are in it), schedules' own items left out. Reads a
        keys-only entry per active task (about 40 to a read unit)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": TENANT_ACTIVE_INDEX,
            "Select": "COUNT",
            "KeyConditionExpression": "tenant = :t",
            "FilterExpression": "begins_with(task_id, :p) AND NOT contains(task_id, :s)",
            "ExpressionAttributeValues": to_av({":t": tenant, ":p": prefix(tenant), ":s": SCHEDULE_PREFIX}),
        }
        count = 0
        while True:
            page = self._client.query(**kwargs)
            count += int(page.get("Count", 0))
            more = page.get("LastEvaluatedKey")
            if not more:
                return count
            kwargs["ExclusiveStartKey"] = more

    def tenant_page(
        self,
        tenant: str,
        statuses: Iterable[TaskStatus] | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> tuple[list[Task], str | None]:
        """One page of ``tenant``'s tasks, in id order from after the id ``after``: of the next ``limit`` ids in
        the tenant index, the tasks with one of ``statuses`` due in ``[due_from_ms, due_to_ms)``; and where the
        next page starts (None: this was the last). A query of the tenant's own index: the page costs what it
        reads, however large the table."""
        keys, more = self.tenant_keys(tenant, after=after, limit=limit)
        wanted = set(statuses or ())
        tasks = [
            task
            for task in _decoded(self._batch_items([k for k in keys if schedule_id_of_key(k) is None]))
            if (not wanted or task.status in wanted)
            and (due_from_ms is None or task.due_ms >= due_from_ms)
            and (due_to_ms is None or task.due_ms < due_to_ms)
        ]
        return tasks, more

    # -- poller side -------------------------------------------------------------------------------------
    def group_shards(self, group: int) -> range:
        """The shards poll group ``group`` reads (of ``poll_groups`` equal ranges)."""
        if not 0 <= group < self.poll_groups:
            raise ValueError(f"poll group {group} is not one of 0..{self.poll_groups - 1}")
        size = self.shard_count // self.poll_groups
        return range(group * size, (group + 1) * size)

    def find_due(
        self,
        now_ms: int,
        until_ms: int,
        out_of_time: Callable[[], bool] | None = None,
        group: int = 0,
        on_found: Callable[[list[Candidate]], None] | None = None,
    ) -> DueScan:
        """Every armable task due at or before ``until_ms``, overdue included (see "Finding due work" in the
        module docstring), in poll group ``group``'s shards (every shard when there is one group): the due
        index from the group's watermark to ``until_ms``, each of its shards of every minute bucket, oldest
        bucket first, read in parallel a few buckets at a time; after each read, the status, lease and owner of
        each task it found, from the base table, and the heartbeats of the owners of ARMED ones, and
        ``on_found(armable)`` with that read's armable tasks (so the caller can dispatch them before the next
        read). The group's watermark moves forward to the oldest bucket in which an active task was seen, never
        closer to now than ``overdue_safety_ms``, and never past a bucket it did not read (when
        ``out_of_time()`` stopped it)."""
        shards = self.group_shards(group)
        safety_bucket = bucket_start(now_ms - self.overdue_safety_ms)
        watermark = self.get_watermark(group)
        if watermark is None:
            oldest = self.oldest_active_due(group)
            watermark = min(safety_bucket, oldest) if oldest is not None else safety_bucket
        buckets = buckets_between(watermark, until_ms)
        found_in: list[int] = []  # buckets in which an active task was seen
        first_unread: list[int] = []  # the first bucket not read, when time ran out
        left_unread = 0  # tasks the index named whose items stayed unprocessed (throttled): for the next poll
        seen: set[str] = set()
        armable: list[Candidate] = []
        schedules: list[str] = []
        undecodable = 0
        step = max(1, self._db_threads // len(shards))  # buckets read at once: one query per shard each
        for start in range(0, len(buckets), step):
            if out_of_time is not None and out_of_time():
                first_unread.append(buckets[start])
                break
            queries = [(b, shard) for b in buckets[start : start + step] for shard in shards]
            pages = self._parallel(lambda q: self._query_index_or_none(q[0], q[1], until_ms), queries)
            task_ids: list[str] = []
            for (bucket, _), page in zip(queries, pages, strict=True):
                if page is None:  # throttled past botocore's retries: not read, so the watermark stays before it
                    first_unread.append(bucket)
                    continue
                if page:
                    found_in.append(bucket)
                    # The index may briefly list a rescheduled task under its old and new key: each task is read
                    # once, from the base table, which also says whether it is still armable.
                    for entry in page:
                        if entry.task_id not in seen:
                            seen.add(entry.task_id)
                            task_ids.append(entry.task_id)
            schedule_of = {t: schedule_id_of_key(t) for t in task_ids}
            schedules.extend(s for s in schedule_of.values() if s is not None)
            found, bad, unread = self._candidates([t for t in task_ids if schedule_of[t] is None], now_ms)
            left_unread += unread
            undecodable += bad
            found = [c for c in found if c.due_ms <= until_ms]
            owners = self._owners(
                {c.owner for c in found if c.status is TaskStatus.ARMED and c.owner}, consistent=False
            )
            ready = [c for c in found if _armable(c, now_ms, owners)]
            armable.extend(ready)
            if ready and on_found is not None:
                on_found(ready)
        # Safe whatever the caller did with what it was handed meanwhile: every active task seen is in a bucket at
        # or after the new watermark (a finished one needs no finding), and what was not read is after it too.
        new_watermark = min([safety_bucket, *found_in, *first_unread])
        self.advance_watermark(new_watermark, group)
        return DueScan(
            candidates=armable,
            watermark_ms=new_watermark,
            buckets=len(buckets),
            queries=len(buckets) * len(shards),
            recovered=sum(1 for c in armable if c.status is not TaskStatus.PENDING),
            undecodable=undecodable,
            complete=not first_unread and not left_unread,
            schedules=schedules,
        )

    def _query_index_or_none(self, bucket_ms: int, shard: int, until_ms: int) -> list[IndexEntry] | None:
        """:meth:`query_index`, or None when DynamoDB throttled it past botocore's own retries (a poll goes on
        with the other shards and buckets; the next one reads this one)."""
        try:
            return self.query_index(bucket_ms, shard, until_ms)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in THROTTLING_CODES:
                raise
            log.warning(
                "the due index's bucket %s shard %d was throttled: left for the next poll",
                from_ms(bucket_ms).isoformat(),
                shard,
            )
            return None

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

    def candidates(self, task_ids: list[str], now_ms: int = 0) -> list[Candidate]:
        """The still-active tasks among ``task_ids``, with status, lease and owner as the base table has them
        (BatchGetItem, eventually consistent: the arm's condition decides anyway). Finished or deleted tasks
        are left out, and so are items that are not tasks (see :meth:`_candidates`)."""
        return self._candidates(task_ids, now_ms)[0]

    def _candidates(self, task_ids: list[str], now_ms: int) -> tuple[list[Candidate], int, int]:
        """:meth:`candidates`, how many items could not be decoded, and how many stayed unread (throttled past
        every try: the next look reads them). Each item is decoded on its own: one that is not a task (a
        hand-written status, a missing due time) is recorded FAILED with a detail and leaves the due index
        (:meth:`_quarantine`); the others go on."""
        found: list[Candidate] = []
        bad = 0
        items, unread = self._batch_get_read(task_ids, consistent=False, projection=CANDIDATE_PROJECTION)
        for item in items:
            try:
                candidate = candidate_of_item(item)
            except DECODE_ERRORS as exc:
                bad += 1
                self._quarantine(item, now_ms, f"undecodable item: {type(exc).__name__}: {exc}")
                continue
            if candidate is not None:
                found.append(candidate)
        return found, bad, len(unread)

    def _quarantine(self, item: dict[str, Any], now_ms: int, detail: str) -> bool:
        """QUARANTINE: an active item that cannot be decoded becomes FAILED with ``detail`` and leaves the due
        index, unless it changed since it was read. Never raises: a failure is logged (and the item is then
        met again, and counted again, by the next look)."""
        task_id = text_of(item, "task_id") or "?"
        raw_status = item.get("status")
        condition = "attribute_exists(due_bucket) AND " + ("#st = :raw" if raw_status else "attribute_not_exists(#st)")
        write = self._write(
            WriteKind.QUARANTINE,
            task_id,
            "SET #st = :failed, detail = :detail, finished_ms = :now, expires_at = :expires "
            "REMOVE due_bucket, lease_until_ms",
            condition,
            {
                ":failed": TaskStatus.FAILED.value,
                ":detail": detail[:1000],
                ":now": now_ms,
                ":expires": self._expires_at(now_ms),
            },
            status=TaskStatus.FAILED.value,
        )
        if raw_status:
            write.request["ExpressionAttributeValues"][":raw"] = raw_status
        try:
            done = self._single(write)
        except Exception:  # one bad item must not stop a poll
            log.exception("task %s: undecodable (%s); recording it FAILED failed too", task_id, detail)
            return False
        log.error(
            "task %s: %s; %s",
            task_id,
            detail,
            "recorded FAILED" if done else "it changed meanwhile",
            extra={"task_id": task_id},
        )
        return done

    def _owners(self, executor_ids: set[str], consistent: bool) -> dict[str, int | None]:
        """Each executor's heartbeat: the instant it is alive until, or None when it has no heartbeat item."""
        if not executor_ids:
            return {}
        items, unread = self._batch_get_read(
            [EXECUTOR_PREFIX + e for e in executor_ids], consistent=consistent, projection="task_id, alive_until_ms"
        )
        seen = {
            text_of(i, "task_id")[len(EXECUTOR_PREFIX) :]: number_of(i, "alive_until_ms")  # type: ignore[index]
            for i in items
        }
        # A heartbeat that could not be read (throttled) is taken as alive: its tasks wait for the next look
        # rather than be taken over on a guess.
        seen.update({key[len(EXECUTOR_PREFIX) :]: UNREAD_ALIVE_UNTIL_MS for key in unread})
        return {e: seen.get(e) for e in executor_ids}

    def watermark_key(self, group: int = 0) -> str:
        """The item holding poll group ``group``'s watermark: one per group (a group must not move another's
        past a bucket it has not read); with one group, the historical single key."""
        self.group_shards(group)
        return WATERMARK_KEY if self.poll_groups == 1 else f"{WATERMARK_KEY}#{group}/{self.poll_groups}"

    def get_watermark(self, group: int = 0) -> int | None:
        """Bucket start before which the group's shards of the index hold no active task (as of its last poll),
        or None."""
        item = self._client.get_item(
            TableName=self.table_name, Key={"task_id": {"S": self.watermark_key(group)}}, ConsistentRead=True
        ).get("Item")
        return None if item is None or "watermark_ms" not in item else int(item["watermark_ms"]["N"])

    def advance_watermark(self, watermark_ms: int, group: int = 0) -> bool:
        """Move the group's watermark forward (never back: a concurrent poller may have moved it further)."""
        return self._move_forward(group, "watermark_ms", watermark_ms)

    def mark_polled(self, now_ms: int, group: int = 0) -> bool:
        """Note on the group's watermark item that a poll of the group starts at ``now_ms`` (``polled_ms``), never
        moving it back; False when a later start is already noted."""
        return self._move_forward(group, "polled_ms", now_ms)

    def _move_forward(self, group: int, attribute: str, value_ms: int) -> bool:
        """Set ``attribute`` of the group's watermark item to ``value_ms`` unless it already holds as much or
        more; False then."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"task_id": {"S": self.watermark_key(group)}},
                UpdateExpression=f"SET {attribute} = :v",
                ConditionExpression=f"attribute_not_exists({attribute}) OR {attribute} < :v",
                ExpressionAttributeValues={":v": {"N": str(value_ms)}},
            )
        except ClientError as exc:
            if _is_conditional_failure(exc):
                return False
            raise
        return True

    def last_polls(self) -> list[int | None]:
        """When the last poll of each group started (None: not known), from one strongly consistent BatchGetItem of
        the groups' watermark items; a key DynamoDB leaves unprocessed (throttled) counts as not known."""
        keys = [{"task_id": {"S": self.watermark_key(group)}} for group in range(self.poll_groups)]
        response = self._client.batch_get_item(
            RequestItems={
                self.table_name: {"Keys": keys, "ConsistentRead": True, "ProjectionExpression": "task_id, polled_ms"}
            }
        )
        polled = {
            text_of(item, "task_id"): number_of(item, "polled_ms")
            for item in response.get("Responses", {}).get(self.table_name, [])
        }
        return [polled.get(self.watermark_key(group)) for group in range(self.poll_groups)]

    def oldest_active_due(self, group: int = 0) -> int | None:
        """The bucket before the earliest due time in the group's shards of the due index (a scan of the sparse
        index; used only once per group, when it has no watermark yet)."""
        shards = {str(shard) for shard in self.group_shards(group)}
        oldest: int | None = None
        for page in self._client.get_paginator("scan").paginate(
            TableName=self.table_name, IndexName=DUE_INDEX, ProjectionExpression="due_ms, due_bucket"
        ):
            for raw in page.get("Items", []):
                if raw["due_bucket"]["S"].rpartition("#")[2] not in shards:
                    continue
                due = int(raw["due_ms"]["N"])
                oldest = due if oldest is None else min(oldest, due)
        return None if oldest is None else bucket_start(oldest) - BUCKET_MS

    # -- executor side -----------------------------------------------------------------------------------
    def heartbeat(self, executor_id: str, now_ms: int, alive_until_ms: int, invocation: str | None = None) -> bool:
        """HEARTBEAT: ``executor_id`` is alive until ``alive_until_ms``. False once a takeover or a fence marked
        it dead: it must then fire nothing more. ``invocation`` names the Lambda invocation running it (its
        request id, which Lambda keeps when it retries the invocation): a retry knows its earlier attempt by it."""
        values: dict[str, Any] = {
            ":until": alive_until_ms,
            ":now": now_ms,
            ":expires": self._expires_at(alive_until_ms),
        }
        update = "SET alive_until_ms = :until, beat_ms = :now, expires_at = :expires"
        if invocation is not None:
            update += ", invocation = :invocation"
            values[":invocation"] = invocation
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"task_id": {"S": EXECUTOR_PREFIX + executor_id}},
                UpdateExpression=update,
                ConditionExpression="attribute_not_exists(taken_over) AND attribute_not_exists(fenced)",
                ExpressionAttributeValues=to_av(values),
            )
        except ClientError as exc:
            if _is_conditional_failure(exc):
                return False
            raise
        return True

    def fence(self, executor_id: str, now_ms: int, invocation: str | None = None) -> bool:
        """FENCE: an executor known to be dead (its process was stopped, or Lambda retried its invocation) is
        alive until just before now at the latest, and can never renew: its tasks may be taken over at once, and
        only those due up to now are its crash window. With ``invocation``, only if its heartbeat names that
        invocation. False when it has no live heartbeat (nothing to fence) or names another invocation."""
        condition = "alive_until_ms >= :now AND attribute_not_exists(taken_over)"
        values: dict[str, Any] = {":now": now_ms, ":until": now_ms - 1, ":true": True}
        if invocation is not None:
            condition += " AND invocation = :invocation"
            values[":invocation"] = invocation
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"task_id": {"S": EXECUTOR_PREFIX + executor_id}},
                UpdateExpression="SET alive_until_ms = :until, fenced = :true",
                ConditionExpression=condition,
                ExpressionAttributeValues=to_av(values),
            )
        except ClientError as exc:
            if _is_conditional_failure(exc):
                return False
            raise
        log.warning("executor %s: fenced (known dead): its tasks are taken over from now", executor_id)
        return True

    def fence_live_executors(self, now_ms: int) -> list[str]:
        """FENCE every executor whose heartbeat is still alive (a Scan of the heartbeat items): what a local
        stack does when it restarts after stopping the processes a killed one left, all of whose executors it
        knows to be dead. Returns the executors fenced."""
        fenced: list[str] = []
        for page in self._client.get_paginator("scan").paginate(
            TableName=self.table_name,
            FilterExpression="begins_with(task_id, :prefix) AND alive_until_ms >= :now",
            ExpressionAttributeValues=to_av({":prefix": EXECUTOR_PREFIX, ":now": now_ms}),
            ProjectionExpression="task_id",
        ):
            for item in page.get("Items", []):
                executor_id = item["task_id"]["S"][len(EXECUTOR_PREFIX) :]
                if self.fence(executor_id, now_ms):
                    fenced.append(executor_id)
        return fenced

    def _arm(self, request: ArmRequest, batch_id: str, executor_id: str) -> Write:
        return self._write(
            WriteKind.ARM,
            request.task_id,
            "SET #st = :armed, armed_by = :executor, lease_until_ms = :lease, batch_id = :batch ADD attempt :one",
            ARMABLE,
            {
                ":due": request.due_ms,
                ":pending": _P,
                ":armed": _A,
                ":batch": batch_id,
                ":executor": executor_id,
                ":lease": request.lease_until_ms,
                ":one": 1,
            },
            status=_A,
            owner=executor_id,
        )

    def arm_many(
        self, requests: list[ArmRequest], batch_id: str, executor_id: str, now_ms: int, invocation: str | None = None
    ) -> list[Armed | None]:
        """ARM each request (see the module docstring), then TAKEOVER what another executor holds whose
        heartbeat lapsed (or whose task lease ended), or that ran this same ``invocation`` (an earlier attempt
        Lambda retried: it is fenced first). Single writes return the armed items; after transactions
        they are read back (one strongly consistent BatchGetItem per 100). An item armed here that cannot be
        decoded is recorded FAILED at once, with a detail, and is not returned. A ``held`` request (found ARMED
        by a dead executor) is taken over first and armed only if there was nothing to take: after a crash or a
        restart, the tasks a dead executor held cost no ARM that could only fail."""
        result: list[Armed | None] = [None] * len(requests)
        first_taken = [i for i, r in enumerate(requests) if r.held]
        if first_taken:
            taken = self._take_over([requests[i] for i in first_taken], batch_id, executor_id, now_ms, invocation)
            for index, took in zip(first_taken, taken, strict=True):
                result[index] = took
        to_arm = [i for i, r in enumerate(requests) if result[i] is None]
        armed = self._arm_fresh([requests[i] for i in to_arm], batch_id, executor_id, now_ms, invocation)
        for index, outcome in zip(to_arm, armed, strict=True):
            result[index] = outcome
        return result

    def _arm_fresh(
        self, requests: list[ArmRequest], batch_id: str, executor_id: str, now_ms: int, invocation: str | None
    ) -> list[Armed | None]:
        """ARM each request, then TAKEOVER those lost to another owner (but the ``held`` ones, whose takeover
        :meth:`arm_many` tried first)."""
        if not requests:
            return []
        writes = [self._arm(r, batch_id, executor_id) for r in requests]
        if self.write_batch == "single":
            items = self._parallel(self._single_item, writes)
        else:
            won = self._transact(writes)
            got = {
                text_of(i, "task_id"): i
                for i in self._batch_get(
                    [r.task_id for r, ok in zip(requests, won, strict=True) if ok], consistent=True
                )
            }
            items = [got.get(r.task_id) if ok else None for r, ok in zip(requests, won, strict=True)]
        result: list[Armed | None] = []
        lost: list[int] = []
        for index, (request, item) in enumerate(zip(requests, items, strict=True)):
            if item is None:
                if not request.held:
                    lost.append(index)
                result.append(None)
            else:
                task = self._decode_armed(item, request.task_id, executor_id, now_ms)
                result.append(None if task is None else Armed(task))
        if lost:
            taken = self._take_over([requests[i] for i in lost], batch_id, executor_id, now_ms, invocation)
            for index, armed in zip(lost, taken, strict=True):
                result[index] = armed
        return result

    def _decode_armed(self, item: dict[str, Any], task_id: str, executor_id: str, now_ms: int) -> Task | None:
        """The task of an item this executor armed; one that cannot be decoded is recorded FAILED right away."""
        try:
            return item_to_task(item)
        except DECODE_ERRORS as exc:
            detail = f"undecodable item: {type(exc).__name__}: {exc}"[:1000]
            log.error("task %s: %s; recording it FAILED", task_id, detail, extra={"task_id": task_id})
            self.record(executor_id, FireRecord(task_id, Outcome.FAILED, None, now_ms, None, None, detail))
            return None

    def _take_over(
        self, requests: list[ArmRequest], batch_id: str, executor_id: str, now_ms: int, invocation: str | None = None
    ) -> list[Armed | None]:
        """TAKEOVER the requested tasks that another executor holds ARMED (at the requested due time) when that
        executor is dead - its heartbeat ended before ``now_ms``, checked in the same transaction as the
        takeover (which also marks it taken over, so that it can never renew) - or the task's own lease ended.
        Each taken task says until when its old owner may have fired it."""
        items = {text_of(i, "task_id"): i for i in self._batch_get([r.task_id for r in requests], consistent=True)}
        held: dict[str, list[tuple[ArmRequest, dict[str, Any]]]] = {}
        for request in requests:
            item = items.get(request.task_id)
            owner = text_of(item, "armed_by")
            if (
                item is not None
                and owner
                and owner != executor_id
                and text_of(item, "status") == _A
                and number_of(item, "due_ms") == request.due_ms
            ):
                held.setdefault(owner, []).append((request, item))
        taken: dict[str, Armed] = {}
        alive = self._owners(set(held), consistent=True)
        if invocation is not None:
            # An owner running this same invocation is its earlier attempt, which Lambda retried because it ended
            # (an error, a timeout): dead, known now. Fenced, its tasks are taken over at once.
            for owner in held:
                if (alive[owner] or 0) >= now_ms and self.fence(owner, now_ms, invocation):
                    alive[owner] = now_ms - 1
        for owner, pairs in held.items():
            until = alive[owner]
            if until is None or until < now_ms:  # dead: it may have fired what was due up to its last lease
                taken.update(self._take_from(owner, until, [r for r, _ in pairs], batch_id, executor_id, now_ms))
            else:  # alive: only a task whose own lease ended (a backstop) can be taken
                for request, item in pairs:
                    lease = number_of(item, "lease_until_ms")
                    if lease is not None and lease < now_ms:
                        taken.update(
                            self._take_from(owner, None, [request], batch_id, executor_id, now_ms, lease_ended=lease)
                        )
        return [taken.get(r.task_id) for r in requests]

    def _take_from(
        self,
        owner: str,
        seen_until: int | None,
        requests: list[ArmRequest],
        batch_id: str,
        executor_id: str,
        now_ms: int,
        lease_ended: int | None = None,
    ) -> dict[str, Armed]:
        """TAKEOVER ``requests`` from ``owner`` in transactions of up to 99 tasks. Unless a task lease ended
        (``lease_ended``), each transaction also updates the owner's heartbeat item on condition that it still
        shows ``seen_until`` (None: no heartbeat item), marking it taken over."""
        bound = lease_ended if lease_ended is not None else (now_ms if seen_until is None else seen_until)
        writes = [
            self._write(
                WriteKind.TAKEOVER,
                r.task_id,
                "SET armed_by = :executor, lease_until_ms = :lease, batch_id = :batch, taken_from = :owner, "
                "taken_until_ms = :bound ADD attempt :one",
                TAKEABLE + (" AND lease_until_ms < :now" if lease_ended is not None else ""),
                {
                    ":due": r.due_ms,
                    ":armed": _A,
                    ":owner": owner,
                    ":executor": executor_id,
                    ":batch": batch_id,
                    ":lease": r.lease_until_ms,
                    ":bound": bound,
                    ":one": 1,
                    **({":now": now_ms} if lease_ended is not None else {}),
                },
                status=_A,
                owner=executor_id,
            )
            for r in requests
        ]
        guard: list[dict[str, Any]] = []
        if lease_ended is None:
            values = {":true": {"BOOL": True}, **({":seen": {"N": str(seen_until)}} if seen_until is not None else {})}
            guard = [
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": {"task_id": {"S": EXECUTOR_PREFIX + owner}},
                        "UpdateExpression": "SET taken_over = :true",
                        "ConditionExpression": OWNER_DEAD
                        if seen_until is not None
                        else "attribute_not_exists(alive_until_ms)",
                        "ExpressionAttributeValues": values,
                    }
                }
            ]
        won: dict[str, Armed] = {}
        for start in range(0, len(writes), TRANSACTION_LIMIT - 1):
            chunk = writes[start : start + TRANSACTION_LIMIT - 1]
            for _ in range(4):
                try:
                    self._client.transact_write_items(
                        TransactItems=[*guard, *({"Update": w.request} for w in chunk)],
                        ClientRequestToken=uuid.uuid4().hex,
                    )
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                        raise
                    codes = [r.get("Code") for r in exc.response.get("CancellationReasons") or []]
                    if guard and codes and codes[0] == "ConditionalCheckFailed":
                        return won  # the owner renewed (it is alive) or another takeover changed its item
                    failed = {
                        w.task_id
                        for w, code in zip(chunk, codes[len(guard) :], strict=False)
                        if code == "ConditionalCheckFailed"
                    }
                    chunk = [w for w in chunk if w.task_id not in failed]
                    if not chunk:
                        break
                    continue
                for item in self._batch_get([w.task_id for w in chunk], consistent=True):
                    task_id = text_of(item, "task_id") or "?"
                    task = self._decode_armed(item, task_id, executor_id, now_ms)
                    if task is not None:
                        won[task_id] = Armed(task, taken_over_until_ms=bound)
                break
        return won

    def _batch_get(
        self, task_ids: list[str], consistent: bool, projection: str | None = None, *, partial: bool = False
    ) -> list[dict[str, Any]]:
        """Raw items by id (:meth:`_batch_get_read`); keys still unprocessed after every attempt: with
        ``partial``, left out (logged; a poll meets them again), else a RuntimeError."""
        items, unread = self._batch_get_read(task_ids, consistent, projection)
        if unread and not partial:
            raise RuntimeError(f"BatchGetItem left {len(unread)} keys unprocessed after {BATCH_GET_ATTEMPTS} attempts")
        return items

    def _batch_get_read(
        self, task_ids: list[str], consistent: bool, projection: str | None = None
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """Raw items by id, and the ids left unread: BatchGetItem, 100 ids a request (in parallel), unprocessed
        keys (DynamoDB's answer to throttling) tried again after a jittered, growing wait
        (:func:`~punctual.backoff.backoff_s`), up to :data:`BATCH_GET_ATTEMPTS` requests."""

        def fetch(ids: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
            request: dict[str, Any] = {"Keys": [{"task_id": {"S": t}} for t in ids], "ConsistentRead": consistent}
            if projection:
                request["ProjectionExpression"] = projection
                if "#st" in projection:
                    request["ExpressionAttributeNames"] = {"#st": "status"}
            items: list[dict[str, Any]] = []
            keys: list[dict[str, Any]] = []
            for attempt in range(BATCH_GET_ATTEMPTS):
                if attempt:
                    self._sleep(backoff_s(attempt - 1))
                response = self._client.batch_get_item(RequestItems={self.table_name: request})
                items.extend(response.get("Responses", {}).get(self.table_name, []))
                keys = response.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])
                if not keys:
                    return items, []
                request = {**request, "Keys": keys}
            log.warning("BatchGetItem left %d keys unprocessed after %d attempts", len(keys), BATCH_GET_ATTEMPTS)
            return items, [key["task_id"]["S"] for key in keys]

        unique = list(dict.fromkeys(task_ids))
        chunks = [unique[i : i + BATCH_GET_LIMIT] for i in range(0, len(unique), BATCH_GET_LIMIT)]
        parts = self._parallel(fetch, chunks)
        return [item for items, _ in parts for item in items], [key for _, keys in parts for key in keys]

    def get_many(self, task_ids: list[str]) -> dict[str, Task]:
        """Tasks by id (strongly consistent BatchGetItem); an item that cannot be decoded is left out (logged)."""
        return {task.task_id: task for task in _decoded(self._batch_get(task_ids, consistent=True))}

    def release(self, task_id: str, executor_id: str) -> bool:
        """RELEASE: an executor that stops before firing hands the task back: ARMED (by it) → PENDING."""
        return self._single(
            self._write(
                WriteKind.RELEASE,
                task_id,
                "SET #st = :pending REMOVE lease_until_ms, batch_id, armed_by",
                RECORDABLE,
                {":armed": _A, ":executor": executor_id, ":pending": _P},
                status=_P,
            )
        )

    def _record(self, executor_id: str, record: FireRecord) -> Write:
        if record.outcome is Outcome.RETRY:
            return self._retry(executor_id, record)
        status = status_after(record.outcome).value
        values: dict[str, Any] = {
            ":armed": _A,
            ":executor": executor_id,
            ":outcome": status,
            ":finished": record.finished_ms,
            ":expires": self._expires_at(record.finished_ms),
        }
        sets = ["#st = :outcome", "finished_ms = :finished", "expires_at = :expires", *_fire_fields(record, values)]
        if record.late:
            sets.append("late = :late")
            values[":late"] = True
        return self._write(
            WriteKind.RECORD,
            record.task_id,
            f"SET {', '.join(sets)} REMOVE due_bucket, lease_until_ms",
            RECORDABLE,
            values,
            status=status,
            owner=executor_id,
        )

    def _retry(self, executor_id: str, record: FireRecord) -> Write:
        """RETRY: ARMED by this executor → PENDING, due at the next try (see the module docstring)."""
        due_ms = record.retry_due_ms
        if due_ms is None:
            raise ValueError(f"task {record.task_id}: a RETRY record needs the instant of its next try")
        status = status_after(record.outcome).value
        now_ms = record.finished_ms
        values: dict[str, Any] = {
            ":armed": _A,
            ":executor": executor_id,
            ":retrying": status,
            ":retry_due": due_ms,
            ":retry_due_at": from_ms(due_ms).isoformat(timespec="milliseconds"),
            ":bucket": self._index_key(record.task_id, due_ms, now_ms),
            ":fast": self._fast_path(due_ms, now_ms),
            ":first_due": record.first_due_ms if record.first_due_ms is not None else due_ms,
        }
        sets = [
            "#st = :retrying",
            "due_ms = :retry_due",
            "due_at = :retry_due_at",
            "due_bucket = :bucket",
            "fast_path = :fast",
            "first_due_ms = if_not_exists(first_due_ms, :first_due)",
            *_fire_fields(record, values),
        ]
        return self._write(
            WriteKind.RETRY,
            record.task_id,
            f"SET {', '.join(sets)} REMOVE lease_until_ms, batch_id",
            RECORDABLE,
            values,
            status=status,
            owner=executor_id,
            marker=("due_ms", due_ms),
        )

    def _redrive(self, task_id: str, now_ms: int) -> Write:
        return self._write(
            WriteKind.REDRIVE,
            task_id,
            "SET #st = :redriven, attempt = :zero, due_ms = :now, due_at = :now_at, due_bucket = :bucket, "
            "fast_path = :fast, redriven_ms = :now "
            "REMOVE expires_at, finished_ms, lease_until_ms, batch_id, armed_by, first_due_ms, late",
            REDRIVABLE,
            {
                ":redriven": _P,
                ":failed": TaskStatus.FAILED.value,
                ":zero": 0,
                ":now": now_ms,
                ":now_at": from_ms(now_ms).isoformat(timespec="milliseconds"),
                ":bucket": self._index_key(task_id, now_ms, now_ms),
                ":fast": self._fast_path(now_ms, now_ms),
            },
            status=_P,
            marker=("redriven_ms", now_ms),
        )

    def redrive_many(self, task_ids: list[str], now_ms: int) -> list[bool]:
        """REDRIVE: FAILED → PENDING, due now, attempt 0 (a fresh set of attempts and a fresh max age), back in
        the due index (and flagged for the fast path); its TTL is removed. False for a task that is not FAILED
        (already redriven, never failed, or gone): a second redrive is a no-op. The content hash is kept."""
        return self._apply_many([self._redrive(t, now_ms) for t in task_ids])

    def record(self, executor_id: str, record: FireRecord) -> bool:
        """RECORD: ARMED by this executor → the status its outcome sets (:func:`~punctual.model.status_after`);
        the task leaves the due index. A RETRY puts it back to PENDING instead, due at its ``retry_due_ms``.

        Returns False when this executor no longer owns the task (its lease expired and another executor took
        it over): the outcome is then not written, and the log says so.
        """
        return self._single(self._record(executor_id, record))

    def record_many(self, executor_id: str, records: list[FireRecord]) -> list[bool]:
        """:meth:`record` for many outcomes (see ``write_batch``)."""
        return self._apply_many([self._record(executor_id, r) for r in records])


def _decoded(items: Iterable[dict[str, Any]]) -> Iterator[Task]:
    """The tasks of ``items``, each decoded on its own: one that is not a task is logged and skipped."""
    for item in items:
        try:
            yield item_to_task(item)
        except DECODE_ERRORS as exc:
            log.warning(
                "item %s is not a readable task (%s: %s): skipped", text_of(item, "task_id"), type(exc).__name__, exc
            )


def _armable(candidate: Candidate, now_ms: int, owners: dict[str, int | None]) -> bool:
    """Whether an executor may arm ``candidate`` now: PENDING; held under a lease that ended; or ARMED by an
    executor whose heartbeat ended before now (or that has none)."""
    if candidate.status is TaskStatus.PENDING or candidate.lease_ended_at(now_ms):
        return True
    if candidate.status is TaskStatus.ARMED and candidate.owner is not None:
        until = owners.get(candidate.owner)
        return until is None or until < now_ms
    return False


def _fire_fields(record: FireRecord, values: dict[str, Any]) -> list[str]:
    """SET clauses (and their values) for what a fire measured: fired_ms, drift and detail, where known."""
    sets = []
    for name, value in (
        ("fired_ms", record.fired_ms),
        ("drift_ms", record.drift_ms),
        ("drift_corrected_ms", record.drift_corrected_ms),
        ("detail", record.detail),
    ):
        if value is not None:
            sets.append(f"{name} = :{name}")
            values[f":{name}"] = value
    return sets
