"""Executors in the Tasks table: their heartbeats and fences, and the ARM and TAKEOVER writes by which an
executor owns a batch's tasks (:class:`Executors`; the conditions are in :mod:`.writes`).

An executor's heartbeat is an item keyed ``#executor#<id>`` (not a valid task id, never in the due index):
``alive_until_ms`` (the executor is alive up to and including that millisecond), ``beat_ms``, ``invocation``
(the Lambda request running it), and once it is known dead ``taken_over`` or ``fenced``: it can never renew.
"""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError

from punctual.domain.model import Armed, ArmRequest, FireRecord, Outcome, Task
from punctual.stores.dynamodb.codec import DECODE_ERRORS, item_to_task, number_of, text_of, to_av
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
UNREAD_ALIVE_UNTIL_MS = 2**62  # what a heartbeat that could not be read counts as: alive


class Executors:
    """Heartbeats, fences and arms in ``table``; an item armed here that cannot be decoded is recorded FAILED
    through ``tasks``."""

    def __init__(self, table: Table, writes: Writes, tasks: TaskItems) -> None:
        self.table = table
        self.writes = writes
        self.tasks = tasks

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
        if not executor_ids:
            return {}
        items, unread = self.table.batch_get_read(
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
            self.tasks.record(executor_id, FireRecord(task_id, Outcome.FAILED, None, now_ms, None, None, detail))
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
        alive = self.alive_until(set(held), consistent=True)
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
            self.writes.update(
                WriteKind.TAKEOVER,
                r.task_id,
                "SET armed_by = :executor, lease_until_ms = :lease, batch_id = :batch, taken_from = :owner, "
                "taken_until_ms = :bound ADD attempt :one",
                TAKEABLE_LEASE_ENDED if lease_ended is not None else TAKEABLE,
                {
                    ":due": r.due_ms,
                    ":armed": ARMED,
                    ":owner": owner,
                    ":executor": executor_id,
                    ":batch": batch_id,
                    ":lease": r.lease_until_ms,
                    ":bound": bound,
                    ":one": 1,
                    **({":now": now_ms} if lease_ended is not None else {}),
                },
                status=ARMED,
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
                        "TableName": self.table.name,
                        "Key": {"task_id": {"S": EXECUTOR_PREFIX + owner}},
                        "UpdateExpression": "SET taken_over = :true",
                        "ConditionExpression": OWNER_DEAD if seen_until is not None else OWNER_WITHOUT_HEARTBEAT,
                        "ExpressionAttributeValues": values,
                    }
                }
            ]
        won: dict[str, Armed] = {}
        for start in range(0, len(writes), TRANSACTION_LIMIT - 1):
            chunk = writes[start : start + TRANSACTION_LIMIT - 1]
            for _ in range(4):
                codes = self.table.transact([*guard, *({"Update": w.request} for w in chunk)])
                if codes is not None:
                    if guard and codes[0] == "ConditionalCheckFailed":
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
                for item in self.table.batch_get([w.task_id for w in chunk], consistent=True):
                    task_id = text_of(item, "task_id") or "?"
                    task = self._decode_armed(item, task_id, executor_id, now_ms)
                    if task is not None:
                        won[task_id] = Armed(task, taken_over_until_ms=bound)
                break
        return won
