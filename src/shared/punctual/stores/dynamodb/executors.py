"""Executors in the Tasks table: their heartbeats and fences, the ARM and TAKEOVER writes by which an executor owns
a batch's tasks, and the RECORD, RETRY and RELEASE writes that end its hold (:class:`Executors`, the
:class:`~punctual.stores.ports.FiringPort` of the adapter; the conditions are in :mod:`.writes`).

An executor's heartbeat is an item keyed ``#executor#<id>`` (not a valid task id, never in the due index):
``alive_until_ms`` (the executor is alive up to and including that millisecond), ``beat_ms``, ``invocation``
(the Lambda request running it), and once it is known dead ``taken_over`` or ``fenced``: it can never renew.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from botocore.exceptions import ClientError

from punctual.domain.backoff import backoff_s
from punctual.domain.keys import from_ms
from punctual.domain.model import Armed, ArmRequest, FireRecord, Outcome, Task, Unreadable, status_after
from punctual.errors import UndecodableItemError
from punctual.stores.dynamodb.codec import item_to_task, number_of, text_of, to_av
from punctual.stores.dynamodb.table import Table
from punctual.stores.dynamodb.tasks import TaskItems
from punctual.stores.dynamodb.writes import (
    ALIVE,
    ARMABLE,
    ARMED,
    FENCEABLE,
    OWNER_DEAD,
    OWNER_WITHOUT_HEARTBEAT,
    PENDING,
    RECORDABLE,
    TAKEABLE,
    TAKEABLE_LEASE_ENDED,
    TRANSACTION_LIMIT,
    Write,
    WriteKind,
    Writes,
    is_conditional_failure,
)

log = logging.getLogger(__name__)

EXECUTOR_PREFIX = "#executor#"  # heartbeat items: not valid task ids, never in the due index
TAKEOVER_ATTEMPTS = 6  # transactions of one chunk: a conflict or a lost task is tried again
UNREAD_ALIVE_UNTIL_MS = 2**62  # what a heartbeat that could not be read counts as: alive


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


class Executors:
    """Heartbeats, fences, arms and the records and releases that end them in ``table``: the adapter's
    :class:`~punctual.stores.ports.FiringPort`. An item armed here that cannot be decoded is recorded FAILED at once;
    what an executor holds is read through ``tasks``."""

    def __init__(self, table: Table, writes: Writes, tasks: TaskItems) -> None:
        self.table = table
        self.writes = writes
        self.tasks = tasks
        self.config = table.config

    def get_many(self, task_ids: list[str], unreadable: Unreadable | None = None) -> dict[str, Task]:
        """The tasks among ``task_ids`` as stored now (:meth:`TaskItems.get_many`): what an executor holds."""
        return self.tasks.get_many(task_ids, unreadable)

    # -- heartbeats and fences ---------------------------------------------------------------------------
    def heartbeat(self, executor_id: str, now_ms: int, alive_until_ms: int, invocation: str | None = None) -> bool:
        """HEARTBEAT: ``executor_id`` is alive until ``alive_until_ms``. False once a takeover or a fence marked
        it dead: it must then fire nothing more. ``invocation`` names the Lambda invocation running it (its
        request id, which Lambda keeps when it retries the invocation): a retry knows its earlier attempt by it."""
        values: dict[str, Any] = {
            ":until": alive_until_ms,
            ":now": now_ms,
            ":expires": self.table.config.expires_at(alive_until_ms),
        }
        update = "SET alive_until_ms = :until, beat_ms = :now, expires_at = :expires"
        if invocation is not None:
            update += ", invocation = :invocation"
            values[":invocation"] = invocation
        return self._update_heartbeat(executor_id, update, ALIVE, values)

    def fence(self, executor_id: str, now_ms: int, invocation: str | None = None) -> bool:
        """FENCE: an executor known to be dead (its process was stopped, or Lambda retried its invocation) is
        alive until just before now at the latest, and can never renew: its tasks may be taken over at once, and
        only those due up to now are its crash window. With ``invocation``, only if its heartbeat names that
        invocation. False when it has no live heartbeat (nothing to fence) or names another invocation."""
        condition = FENCEABLE
        values: dict[str, Any] = {":now": now_ms, ":until": now_ms - 1, ":true": True}
        if invocation is not None:
            condition += " AND invocation = :invocation"
            values[":invocation"] = invocation
        if not self._update_heartbeat(executor_id, "SET alive_until_ms = :until, fenced = :true", condition, values):
            return False
        log.warning("executor %s: fenced (known dead): its tasks are taken over from now", executor_id)
        return True

    def _update_heartbeat(self, executor_id: str, update: str, condition: str, values: dict[str, Any]) -> bool:
        """One conditional update of the executor's heartbeat item: False when its condition failed."""
        try:
            self.table.client.update_item(
                TableName=self.table.name,
                Key={"task_id": {"S": EXECUTOR_PREFIX + executor_id}},
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeValues=to_av(values),
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def fence_live_executors(self, now_ms: int) -> list[str]:
        """FENCE every executor whose heartbeat is still alive (a Scan of the heartbeat items): what a local
        stack does when it restarts after stopping the processes a killed one left, all of whose executors it
        knows to be dead. Returns the executors fenced."""
        fenced: list[str] = []
        for page in self.table.client.get_paginator("scan").paginate(
            TableName=self.table.name,
            FilterExpression="begins_with(task_id, :prefix) AND alive_until_ms >= :now",
            ExpressionAttributeValues=to_av({":prefix": EXECUTOR_PREFIX, ":now": now_ms}),
            ProjectionExpression="task_id",
        ):
            for item in page.get("Items", []):
                executor_id = item["task_id"]["S"][len(EXECUTOR_PREFIX) :]
                if self.fence(executor_id, now_ms):
                    fenced.append(executor_id)
        return fenced

    def alive_until(self, executor_ids: set[str], consistent: bool) -> dict[str, int | None]:
        """Each executor's heartbeat: the instant it is alive until, or None when it has no heartbeat item."""
        return {e: until for e, (until, _) in self.heartbeats(executor_ids, consistent).items()}

    def heartbeats(self, executor_ids: set[str], consistent: bool) -> dict[str, tuple[int | None, bool]]:
        """Each executor's heartbeat: the instant it is alive until (None: no heartbeat item), and whether it is
        dead for good (fenced or taken over: it can never renew, so its tasks need no guard to be taken)."""
        if not executor_ids:
            return {}
        items, unread = self.table.batch_get_read(
            [EXECUTOR_PREFIX + e for e in executor_ids],
            consistent=consistent,
            projection="task_id, alive_until_ms, fenced, taken_over",
        )
        seen = {
            text_of(i, "task_id")[len(EXECUTOR_PREFIX) :]: (  # type: ignore[index]
                number_of(i, "alive_until_ms"),
                "fenced" in i or "taken_over" in i,
            )
            for i in items
        }
        # A heartbeat that could not be read (throttled) is taken as alive: its tasks wait for the next look
        # rather than be taken over on a guess.
        seen.update({key[len(EXECUTOR_PREFIX) :]: (UNREAD_ALIVE_UNTIL_MS, False) for key in unread})
        return {e: seen.get(e, (None, False)) for e in executor_ids}

    # -- arms and takeovers ------------------------------------------------------------------------------
    def arm_many(
        self, requests: list[ArmRequest], batch_id: str, executor_id: str, now_ms: int, invocation: str | None = None
    ) -> list[Armed | None]:
        """ARM each request (see :mod:`.writes`), then TAKEOVER what another executor holds whose heartbeat
        lapsed (or whose task lease ended), or that ran this same ``invocation`` (an earlier attempt Lambda
        retried: it is fenced first). Single writes return the armed items; after transactions they are read
        back (one strongly consistent BatchGetItem per 100). An item armed here that cannot be decoded is
        recorded FAILED at once, with a detail, and is not returned. A ``held`` request (found ARMED by a dead
        executor) is taken over first and armed only if there was nothing to take: after a crash or a restart,
        the tasks a dead executor held cost no ARM that could only fail."""
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

    def _arm(self, request: ArmRequest, batch_id: str, executor_id: str) -> Write:
        return self.writes.update(
            WriteKind.ARM,
            request.task_id,
            "SET #st = :armed, armed_by = :executor, lease_until_ms = :lease, batch_id = :batch ADD attempt :one",
            ARMABLE,
            {
                ":due": request.due_ms,
                ":pending": PENDING,
                ":armed": ARMED,
                ":batch": batch_id,
                ":executor": executor_id,
                ":lease": request.lease_until_ms,
                ":one": 1,
            },
            status=ARMED,
            owner=executor_id,
        )

    def _arm_fresh(
        self, requests: list[ArmRequest], batch_id: str, executor_id: str, now_ms: int, invocation: str | None
    ) -> list[Armed | None]:
        """ARM each request, then TAKEOVER those lost to another owner (but the ``held`` ones, whose takeover
        :meth:`arm_many` tried first)."""
        if not requests:
            return []
        writes = [self._arm(r, batch_id, executor_id) for r in requests]
        if self.table.config.write_batch == "single":
            items = self.table.parallel(self.writes.apply_item, writes)
        else:
            won = self.writes.transact(writes)
            got = {
                text_of(i, "task_id"): i
                for i in self.table.batch_get(
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
                result.append(None if task is None else Armed(task=task))
        if lost:
            taken = self._take_over([requests[i] for i in lost], batch_id, executor_id, now_ms, invocation)
            for index, armed in zip(lost, taken, strict=True):
                result[index] = armed
        return result

    def _decode_armed(self, item: dict[str, Any], task_id: str, executor_id: str, now_ms: int) -> Task | None:
        """The task of an item this executor armed; one that cannot be decoded is recorded FAILED right away."""
        try:
            return item_to_task(item)
        except UndecodableItemError as exc:
            detail = f"undecodable item: {exc.reason}"[:1000]
            log.error("task %s: %s; recording it FAILED", task_id, detail, extra={"task_id": task_id})
            unfired = FireRecord(
                task_id=task_id,
                outcome=Outcome.FAILED,
                fired_ms=None,
                finished_ms=now_ms,
                drift_ms=None,
                drift_corrected_ms=None,
                detail=detail,
            )
            self.record(executor_id, unfired)
            return None

    def _take_over(
        self, requests: list[ArmRequest], batch_id: str, executor_id: str, now_ms: int, invocation: str | None = None
    ) -> list[Armed | None]:
        """TAKEOVER the requested tasks that another executor holds ARMED (at the requested due time) when that
        executor is dead - its heartbeat ended before ``now_ms``, checked in the same transaction as the
        takeover (which also marks it taken over, so that it can never renew) - or the task's own lease ended.
        Each taken task says until when its old owner may have fired it."""
        items = {text_of(i, "task_id"): i for i in self.table.batch_get([r.task_id for r in requests], consistent=True)}
        held: dict[str, list[tuple[ArmRequest, dict[str, Any]]]] = {}
        for request in requests:
            item = items.get(request.task_id)
            owner = text_of(item, "armed_by")
            if (
                item is not None
                and owner
                and owner != executor_id
                and text_of(item, "status") == ARMED
                and number_of(item, "due_ms") == request.due_ms
            ):
                held.setdefault(owner, []).append((request, item))
        taken: dict[str, Armed] = {}
        beats = self.heartbeats(set(held), consistent=True)
        if invocation is not None:
            # An owner running this same invocation is its earlier attempt, which Lambda retried because it ended
            # (an error, a timeout): dead, known now. Fenced, its tasks are taken over at once.
            for owner in held:
                if (beats[owner][0] or 0) >= now_ms and self.fence(owner, now_ms, invocation):
                    beats[owner] = (now_ms - 1, True)
        for owner, pairs in held.items():
            until, for_good = beats[owner]
            if until is None or until < now_ms:  # dead: it may have fired what was due up to its last lease
                requests_held = [r for r, _ in pairs]
                taken.update(self._take_from(owner, until, requests_held, batch_id, executor_id, now_ms, for_good))
            else:  # alive: only a task whose own lease ended (a backstop) can be taken
                for request, item in pairs:
                    lease = number_of(item, "lease_until_ms")
                    if lease is not None and lease < now_ms:
                        taken.update(
                            self._take_from(owner, None, [request], batch_id, executor_id, now_ms, lease_ended=lease)
                        )
        return [taken.get(r.task_id) for r in requests]

    def _take_from(  # noqa: PLR0913, PLR0917  an arm's figures as they are: no record built before the fires
        self,
        owner: str,
        seen_until: int | None,
        requests: list[ArmRequest],
        batch_id: str,
        executor_id: str,
        now_ms: int,
        for_good: bool = False,
        lease_ended: int | None = None,
    ) -> dict[str, Armed]:
        """TAKEOVER ``requests`` from ``owner``. Unless a task lease ended (``lease_ended``) or the owner is dead
        for good (fenced or already taken over: it can never renew), each write is in a transaction of up to 99
        tasks that also updates the owner's heartbeat item on condition that it still shows ``seen_until`` (None:
        no heartbeat item), marking it taken over. Without that guard the transactions hold tasks alone: many
        executors can take over one owner's tasks at once, with no conflict on its heartbeat item. Transactions
        in every write mode: a takeover is rare (a crash), and one request of 99 writes costs the executor's CPU
        about a third of what 99 single updates do, when it is catching up on tasks already late."""
        bound = lease_ended if lease_ended is not None else (now_ms if seen_until is None else seen_until)
        writes = [self._takeover(r, owner, batch_id, executor_id, bound, now_ms, lease_ended) for r in requests]
        guard = [] if lease_ended is not None or for_good else [self._guard(owner, seen_until)]
        won: dict[str, Armed] = {}
        for start in range(0, len(writes), TRANSACTION_LIMIT - 1):
            chunk = writes[start : start + TRANSACTION_LIMIT - 1]
            for attempt in range(TAKEOVER_ATTEMPTS):
                codes = self.table.transact([*guard, *({"Update": w.request} for w in chunk)])
                if codes is not None:
                    task_codes = codes[len(guard) :]
                    if guard and codes[0] == "ConditionalCheckFailed":
                        return won  # the owner renewed (it is alive) or another takeover changed its item
                    if "TransactionConflict" in codes:
                        # Another executor's transaction holds one of these items (a task sent twice, or the same
                        # owner's heartbeat item): not at once again, or the two collide again
                        time.sleep(backoff_s(attempt))
                    if (
                        guard
                        and codes[0] == "TransactionConflict"
                        and self.heartbeats({owner}, consistent=True)[owner][1]
                    ):
                        # Another executor is taking over from the same owner: once it has marked it taken over,
                        # nothing more needs the guard.
                        guard = []
                    failed = {
                        w.task_id
                        for w, code in zip(chunk, task_codes, strict=False)
                        if code == "ConditionalCheckFailed"
                    }
                    chunk = [w for w in chunk if w.task_id not in failed]
                    if not chunk:
                        break
                    continue
                guard = []  # the owner is marked taken over now: it can never renew
                for item in self.table.batch_get([w.task_id for w in chunk], consistent=True):
                    task_id = text_of(item, "task_id") or "?"
                    task = self._decode_armed(item, task_id, executor_id, now_ms)
                    if task is not None:
                        won[task_id] = Armed(task=task, taken_over_until_ms=bound)
                break
        return won

    def _takeover(  # noqa: PLR0913, PLR0917  an arm's figures as they are: no record built before the fires
        self,
        request: ArmRequest,
        owner: str,
        batch_id: str,
        executor_id: str,
        bound: int,
        now_ms: int,
        lease_ended: int | None,
    ) -> Write:
        """The TAKEOVER write of one task from ``owner`` (who may have fired it up to ``bound``)."""
        return self.writes.update(
            WriteKind.TAKEOVER,
            request.task_id,
            "SET armed_by = :executor, lease_until_ms = :lease, batch_id = :batch, taken_from = :owner, "
            "taken_until_ms = :bound ADD attempt :one",
            TAKEABLE_LEASE_ENDED if lease_ended is not None else TAKEABLE,
            {
                ":due": request.due_ms,
                ":armed": ARMED,
                ":owner": owner,
                ":executor": executor_id,
                ":batch": batch_id,
                ":lease": request.lease_until_ms,
                ":bound": bound,
                ":one": 1,
                **({":now": now_ms} if lease_ended is not None else {}),
            },
            status=ARMED,
            owner=executor_id,
        )

    def _guard(self, owner: str, seen_until: int | None) -> dict[str, Any]:
        """The transaction item that marks ``owner`` taken over while its heartbeat still shows ``seen_until``."""
        values = {":true": {"BOOL": True}, **({":seen": {"N": str(seen_until)}} if seen_until is not None else {})}
        return {
            "Update": {
                "TableName": self.table.name,
                "Key": {"task_id": {"S": EXECUTOR_PREFIX + owner}},
                "UpdateExpression": "SET taken_over = :true",
                "ConditionExpression": OWNER_DEAD if seen_until is not None else OWNER_WITHOUT_HEARTBEAT,
                "ExpressionAttributeValues": values,
            }
        }

    # -- recording and releasing -----------------------------------------------------------------------------------
    def release(self, task_id: str, executor_id: str) -> bool:
        """RELEASE: an executor that stops before firing hands the task back: ARMED (by it) → PENDING."""
        return self.writes.apply(
            self.writes.update(
                WriteKind.RELEASE,
                task_id,
                "SET #st = :pending REMOVE lease_until_ms, batch_id, armed_by",
                RECORDABLE,
                {":armed": ARMED, ":executor": executor_id, ":pending": PENDING},
                status=PENDING,
            )
        )

    def record(self, executor_id: str, record: FireRecord) -> bool:
        """RECORD: ARMED by this executor → the status its outcome sets (:func:`~punctual.domain.model.status_after`);
        the task leaves the due index. A RETRY puts it back to PENDING instead, due at its ``retry_due_ms``.

        Returns False when this executor no longer owns the task (its lease expired and another executor took
        it over): the outcome is then not written, and the log says so.
        """
        return self.writes.apply(self._record(executor_id, record))

    def record_many(self, executor_id: str, records: list[FireRecord]) -> list[bool]:
        """:meth:`record` for many outcomes (see ``write_batch``)."""
        return self.writes.apply_many([self._record(executor_id, r) for r in records])

    def _record(self, executor_id: str, record: FireRecord) -> Write:
        if record.outcome is Outcome.RETRY:
            return self._retry(executor_id, record)
        status = status_after(record.outcome).value
        values: dict[str, Any] = {
            ":armed": ARMED,
            ":executor": executor_id,
            ":outcome": status,
            ":finished": record.finished_ms,
            ":expires": self.config.expires_at(record.finished_ms),
        }
        sets = ["#st = :outcome", "finished_ms = :finished", "expires_at = :expires", *_fire_fields(record, values)]
        if record.late:
            sets.append("late = :late")
            values[":late"] = True
        return self.writes.update(
            WriteKind.RECORD,
            record.task_id,
            f"SET {', '.join(sets)} REMOVE due_bucket, lease_until_ms",
            RECORDABLE,
            values,
            status=status,
            owner=executor_id,
        )

    def _retry(self, executor_id: str, record: FireRecord) -> Write:
        """RETRY: ARMED by this executor → PENDING, due at the next try (see :mod:`.writes`)."""
        due_ms = record.retry_due_ms
        if due_ms is None:
            raise ValueError(f"task {record.task_id}: a RETRY record needs the instant of its next try")
        status = status_after(record.outcome).value
        now_ms = record.finished_ms
        values: dict[str, Any] = {
            ":armed": ARMED,
            ":executor": executor_id,
            ":retrying": status,
            ":retry_due": due_ms,
            ":retry_due_at": from_ms(due_ms).isoformat(timespec="milliseconds"),
            ":bucket": self.config.index_key(record.task_id, due_ms, now_ms),
            ":fast": self.config.fast_path(due_ms, now_ms),
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
        return self.writes.update(
            WriteKind.RETRY,
            record.task_id,
            f"SET {', '.join(sets)} REMOVE lease_until_ms, batch_id",
            RECORDABLE,
            values,
            status=status,
            owner=executor_id,
            marker=("due_ms", due_ms),
        )
