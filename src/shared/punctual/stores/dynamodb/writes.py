"""The conditional writes of the task life cycle: their kinds (:class:`WriteKind`), the conditions that guard
them, and how many are sent at once (:class:`Writes`). The parts of the adapter build each write here and
send it through here; none writes a task's state any other way.

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
           last lease: the crash window, see punctual.domain.decisions.decide_before_fire)

    kind        condition (every write names its kind: a retried request whose first attempt was applied is
                recognised from its kind and the item it finds, see :func:`already_applied`)
    CREATE      attribute_not_exists(task_id)
    ARM         due_ms = :due AND status = PENDING
                                                    -- two dispatches of one task: all but one executor lose
    TAKEOVER    due_ms = :due AND status = ARMED AND armed_by = :owner, in one transaction with the owner's
                heartbeat item: alive_until_ms = :seen (what the taker read, already < now; the item is marked
                taken_over, so the owner can never renew); without it once the owner is fenced or taken over
                (it can never renew: many executors take its tasks at once, with no conflict on its item); or,
                without the owner check, lease_until_ms < :now
    HEARTBEAT   attribute_not_exists(taken_over) AND attribute_not_exists(fenced)
                (on "#executor#<id>": alive_until_ms = now + lease)
    FENCE       alive_until_ms >= :now AND attribute_not_exists(taken_over) (an executor known dead: alive until
                now - 1 and fenced, so that it can never renew)
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
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from botocore.exceptions import ClientError

from punctual.domain.model import TaskStatus
from punctual.stores.dynamodb.codec import number_of, text_of, to_av
from punctual.stores.dynamodb.table import Table

TRANSACTION_LIMIT = 100  # items in one TransactWriteItems

PENDING, ARMED = TaskStatus.PENDING.value, TaskStatus.ARMED.value

# The conditions of the table above ("#st" is status).
CREATABLE = "attribute_not_exists(task_id)"
ARMABLE = "due_ms = :due AND #st = :pending"
TAKEABLE = "due_ms = :due AND #st = :armed AND armed_by = :owner"
TAKEABLE_LEASE_ENDED = TAKEABLE + " AND lease_until_ms < :now"
OWNER_DEAD = "alive_until_ms = :seen"  # on the owner's heartbeat item, in the same transaction as the takeover
OWNER_WITHOUT_HEARTBEAT = "attribute_not_exists(alive_until_ms)"  # ... when the owner never wrote one
ALIVE = "attribute_not_exists(taken_over) AND attribute_not_exists(fenced)"
FENCEABLE = "alive_until_ms >= :now AND attribute_not_exists(taken_over)"
RECORDABLE = "#st = :armed AND armed_by = :executor"
CHANGEABLE = "#st = :pending OR (#st = :armed AND lease_until_ms < :now)"
REDRIVABLE = "#st = :failed"


def quarantinable(status_read: bool) -> str:
    """QUARANTINE's condition: still active, and with the status that was read (``:raw``), or still none."""
    return "attribute_exists(due_bucket) AND " + ("#st = :raw" if status_read else "attribute_not_exists(#st)")


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


def already_applied(write: Write, old: dict[str, Any] | None) -> bool:
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


def is_conditional_failure(exc: ClientError) -> bool:
    """Whether ``exc`` is a failed condition (ConditionalCheckFailedException)."""
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def old_item(exc: ClientError) -> dict[str, Any] | None:
    """The item a failed condition found (``ReturnValuesOnConditionCheckFailure="ALL_OLD"``), if any."""
    item: dict[str, Any] | None = exc.response.get("Item")  # type: ignore[assignment]
    return item


class Writes:
    """Conditional writes on ``table``: built (:meth:`update`), and sent one (:meth:`apply`) or many at once
    (:meth:`apply_many`, by ``write_batch``)."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def update(  # noqa: PLR0913  an UpdateItem's parts; what the write sets besides, keyword-only
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
            "TableName": self.table.name,
            "Key": {"task_id": {"S": task_id}},
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": to_av(values),
        }
        return Write(kind, task_id, request, status, owner, marker)

    def apply_item(self, write: Write) -> dict[str, Any] | None:
        """One conditional update returning the item as it now is (ALL_NEW), or None if the condition failed.

        A failed condition whose old item already shows this very change counts as done (see
        :func:`already_applied`)."""
        try:
            item: dict[str, Any] = self.table.client.update_item(
                **write.request, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
            )["Attributes"]
            return item
        except ClientError as exc:
            if is_conditional_failure(exc):
                old = old_item(exc)
                return old if old is not None and already_applied(write, old) else None
            raise

    def apply(self, write: Write) -> bool:
        """:meth:`apply_item`, answering only whether the change holds."""
        return self.apply_item(write) is not None

    def apply_many(self, writes: list[Write]) -> list[bool]:
        """Many conditional updates, each decided by its own condition: which ones held."""
        if self.table.config.write_batch == "transaction":
            return self.transact(writes)
        return self.table.parallel(self.apply, writes)

    def transact(self, writes: list[Write], attempts: int = 4) -> list[bool]:
        """Many conditional updates with few requests: TransactWriteItems of up to 100 (chunks in parallel).

        A transaction is all or nothing, so when some conditions fail the others are retried without them
        (``CancellationReasons`` names the failed ones). Whatever is still undecided after ``attempts`` goes
        one UpdateItem at a time.
        """
        result: list[bool | None] = [None] * len(writes)

        def run(chunk: list[int]) -> list[int]:
            """One transaction; returns the indexes to try again."""
            if len(chunk) == 1:
                result[chunk[0]] = self.apply(writes[chunk[0]])
                return []
            codes = self.table.transact([{"Update": writes[i].request} for i in chunk])
            if codes is None:
                for index in chunk:
                    result[index] = True
                return []
            retry = []
            for index, code in zip(chunk, codes, strict=False):
                if code == "ConditionalCheckFailed":
                    result[index] = False
                else:  # "None" (rolled back with the others), a conflict, or unknown: try again
                    retry.append(index)
            return retry

        pending = list(range(len(writes)))
        for _ in range(attempts):
            chunks = [pending[i : i + TRANSACTION_LIMIT] for i in range(0, len(pending), TRANSACTION_LIMIT)]
            pending = [index for retry in self.table.parallel(run, chunks) for index in retry]
            if not pending:
                break
        for index in pending:
            result[index] = self.apply(writes[index])
        return [bool(r) for r in result]
