"""Task items: CREATE and reads by id, the client's CANCEL and RESCHEDULE, and the REDRIVE and QUARANTINE writes
(:class:`TaskItems`; the conditions are in :mod:`.writes`; the executor's writes are in :mod:`.executors`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from punctual.domain.keys import from_ms
from punctual.domain.model import Task, TaskStatus, Unreadable
from punctual.errors import (
    InvalidTaskError,
    TaskConflictError,
    TaskNotFoundError,
    TaskStateError,
)
from punctual.stores.dynamodb.codec import (
    ITEM_HEADROOM_BYTES,
    MAX_ITEM_BYTES,
    SCHEDULE_PREFIX,
    item_size,
    item_to_task,
    new_task_item,
    text_of,
    to_av,
)
from punctual.stores.dynamodb.table import Table
from punctual.stores.dynamodb.tenants import TenantItems, readable_tasks
from punctual.stores.dynamodb.writes import (
    ARMED,
    CHANGEABLE,
    CREATABLE,
    PENDING,
    REDRIVABLE,
    Write,
    WriteKind,
    Writes,
    already_applied,
    is_conditional_failure,
    old_item,
    quarantinable,
)

if TYPE_CHECKING:
    from punctual.stores.dynamodb.due_pages import DuePages

log = logging.getLogger(__name__)


class TaskItems(TenantItems):
    """Tasks by id in ``table``, a tenant's tasks (:class:`~.tenants.TenantItems`), pages of the due index
    (:class:`~.due_pages.DuePages`, loaded by the first), and the writes that change one task at a time or many by
    id: the :class:`~punctual.stores.ports.ClientPort` of the adapter."""

    def __init__(self, table: Table, writes: Writes) -> None:
        super().__init__(table)
        self.config = table.config
        self.writes = writes
        self._due_pages: DuePages | None = None

    # -- pages of the due index, for a person ------------------------------------------------------------------
    def _pages(self) -> DuePages:
        if self._due_pages is None:
            from punctual.stores.dynamodb.due_pages import DuePages  # noqa: PLC0415  only a person's listing loads it: no handler's cold start pays for it

            self._due_pages = DuePages(self.table)
        return self._due_pages

    def due_page(  # noqa: PLR0913  ClientPort.due_page's signature
        self,
        due_from_ms: int | None,
        due_to_ms: int,
        after: str | None,
        limit: int,
        *,
        now_ms: int,
        statuses: Iterable[TaskStatus] | None = None,
    ) -> tuple[list[Task], str | None, int]:
        """See :meth:`punctual.stores.ports.ClientPort.due_page` (:meth:`.due_pages.DuePages.due_page`)."""
        return self._pages().due_page(due_from_ms, due_to_ms, after, limit, now_ms=now_ms, statuses=statuses)

    def due_instants(
        self, due_from_ms: int | None, due_to_ms: int, *, now_ms: int, limit: int, max_buckets: int
    ) -> tuple[list[int], bool]:
        """See :meth:`punctual.stores.ports.ClientPort.due_instants` (:meth:`.due_pages.DuePages.due_instants`)."""
        return self._pages().due_instants(due_from_ms, due_to_ms, now_ms=now_ms, limit=limit, max_buckets=max_buckets)

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
            self.table.client.put_item(
                TableName=self.table.name,
                Item=item,
                ConditionExpression=CREATABLE,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            old = old_item(exc) or self.table.get_item(task.task_id)
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
            due_bucket=self.config.index_key(task.task_id, task.due_ms, now_ms),
            fast_path=self.config.fast_path(task.due_ms, now_ms),
            created_ms=now_ms,
        )

    def get(self, task_id: str) -> Task | None:
        """The task as stored now (strongly consistent read), or None."""
        item = self.table.get_item(task_id)
        return None if item is None else item_to_task(item)

    def get_many(self, task_ids: list[str], unreadable: Unreadable | None = None) -> dict[str, Task]:
        """Tasks by id (strongly consistent BatchGetItem); an item that cannot be decoded is left out (logged,
        counted in ``unreadable``)."""
        items = self.table.batch_get(task_ids, consistent=True)
        return {task.task_id: task for task in readable_tasks(items, unreadable)}

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
            {":cancelled": TaskStatus.CANCELLED.value, ":expires": self.config.expires_at(now_ms)},
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
                ":fast": self.config.fast_path(due_ms, now_ms),
                ":new_due": due_ms,
                ":new_due_at": moved.due_at.isoformat(timespec="milliseconds"),
                ":bucket": self.config.index_key(task_id, due_ms, now_ms),
                ":hash": moved.content_hash(),
            },
            status=PENDING,
        )

    def _change(  # noqa: PLR0913  one write's parts as Writes.update takes them, its status keyword-only
        self, kind: WriteKind, task_id: str, now_ms: int, update: str, values: dict[str, Any], *, status: str
    ) -> Task:
        """CANCEL or RESCHEDULE (guarded by CHANGEABLE): the task as it now is, or the error saying why the
        change was refused. Each call writes a token of its own (``change_token``): botocore's retry of a
        request whose response was lost finds its own token and answers as the first attempt would have, while
        a second call (another token) is refused as before."""
        token = uuid.uuid4().hex
        write = self.writes.update(
            kind,
            task_id,
            update,
            f"attribute_exists(task_id) AND ({CHANGEABLE})",
            {":pending": PENDING, ":armed": ARMED, ":now": now_ms, ":token": token, **values},
            status=status,
            marker=("change_token", token),
        )
        try:
            response = self.table.client.update_item(
                **write.request, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            old = old_item(exc)
            if old is None:
                raise TaskNotFoundError(write.task_id) from exc
            if already_applied(write, old):
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
        unreadable: Unreadable | None = None,
    ) -> Iterator[Task]:
        """Tasks filtered by status and due range (a filtered scan: for admin use, not the hot path); an item that
        cannot be decoded is left out and counted in ``unreadable``."""
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
        kwargs: dict[str, Any] = {"TableName": self.table.name, "FilterExpression": " AND ".join(filters)}
        if values:
            kwargs["ExpressionAttributeValues"] = to_av(values)
        if names:
            kwargs["ExpressionAttributeNames"] = names
        count = 0
        for page in self.table.client.get_paginator("scan").paginate(**kwargs):
            for task in readable_tasks(page.get("Items", []), unreadable):
                yield task
                count += 1
                if limit is not None and count >= limit:
                    return

    # -- redrive and the poll's bad items ------------------------------------------------------------------
    def redrive_many(self, task_ids: list[str], now_ms: int) -> list[bool]:
        """REDRIVE: FAILED → PENDING, due now, attempt 0 (a fresh set of attempts and a fresh max age), back in
        the due index (and flagged for the fast path); its TTL is removed. False for a task that is not FAILED
        (already redriven, never failed, or gone): a second redrive is a no-op. The content hash is kept."""
        return self.writes.apply_many([self._redrive(t, now_ms) for t in task_ids])

    def _redrive(self, task_id: str, now_ms: int) -> Write:
        return self.writes.update(
            WriteKind.REDRIVE,
            task_id,
            "SET #st = :redriven, attempt = :zero, due_ms = :now, due_at = :now_at, due_bucket = :bucket, "
            "fast_path = :fast, redriven_ms = :now "
            "REMOVE expires_at, finished_ms, lease_until_ms, batch_id, armed_by, first_due_ms, late",
            REDRIVABLE,
            {
                ":redriven": PENDING,
                ":failed": TaskStatus.FAILED.value,
                ":zero": 0,
                ":now": now_ms,
                ":now_at": from_ms(now_ms).isoformat(timespec="milliseconds"),
                ":bucket": self.config.index_key(task_id, now_ms, now_ms),
                ":fast": self.config.fast_path(now_ms, now_ms),
            },
            status=PENDING,
            marker=("redriven_ms", now_ms),
        )

    def quarantine(self, item: dict[str, Any], now_ms: int, detail: str) -> bool:
        """QUARANTINE: an active item that cannot be decoded becomes FAILED with ``detail`` and leaves the due
        index, unless it changed since it was read. Never raises: a failure is logged (and the item is then
        met again, and counted again, by the next look)."""
        task_id = text_of(item, "task_id") or "?"
        raw_status = item.get("status")
        write = self.writes.update(
            WriteKind.QUARANTINE,
            task_id,
            "SET #st = :failed, detail = :detail, finished_ms = :now, expires_at = :expires "
            "REMOVE due_bucket, lease_until_ms",
            quarantinable(bool(raw_status)),
            {
                ":failed": TaskStatus.FAILED.value,
                ":detail": detail[:1000],
                ":now": now_ms,
                ":expires": self.config.expires_at(now_ms),
            },
            status=TaskStatus.FAILED.value,
        )
        if raw_status:
            write.request["ExpressionAttributeValues"][":raw"] = raw_status
        try:
            done = self.writes.apply(write)
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
