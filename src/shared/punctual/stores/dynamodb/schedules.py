"""Recurring schedules in the Tasks table (the DynamoDB side of :mod:`punctual.domain.schedules`).

A schedule is one item keyed ``#schedule#<id>`` (not a valid task id, so it can never collide with one); a
tenant's schedule ``<tenant>/<id>`` is keyed ``<tenant>/#schedule#<id>``, so that its key starts with its tenant
as every key of that tenant does (:mod:`punctual.domain.tenancy`)::

    task_id S (schedule_key) | state S | version N | definition S (JSON: what the user asked for)
    next_due_ms N (the first occurrence not created yet; absent once ENDED) | created_count N | skipped_count N
    created_ms N | updated_ms N | cleanup N (1: occurrences of an older version may still be PENDING)
    due_ms N, due_bucket S: in the due index while the chain needs a hand: ACTIVE (at ``next_due_ms - ahead``,
    so that a poll creates its occurrences ``ahead`` before its window reaches them), or ``cleanup`` set (now)
    schedule_id S (SCHEDULE_REGISTRY, always: its entry in the schedule index's registry, which lists every schedule)

It has a ``state``, never a ``status``: nothing that reads tasks takes it for one. Its occurrences are tasks
with ``schedule_id`` and ``schedule_version``, listed by the sparse ``schedule`` index under their schedule's id.
The schedules themselves are listed there under :data:`~.codec.SCHEDULE_REGISTRY` (the registry), which is no
schedule's id, and a tenant's also by the tenant index. SCHEDULE writes the registry entry, which never changes:
one index write a schedule. An item written before the registry has no ``schedule_id``: CHANGE and ADVANCE set it
(to the same value every time: no further index write), and ``punctual backfill-schedule-registry`` sets it on the
others.

The chain's writes, each one conditional (see :meth:`ScheduleItems.advance_schedule`)::

    SCHEDULE  put the item if absent, with its first occurrences, in one transaction
    ADVANCE   version = :v AND next_due_ms = :cursor AND state = ACTIVE on the schedule, in one transaction with
              a put of each new occurrence: absent, or CANCELLED by an older version (a pause or an update
              cancelled it and a newer version runs at the same instant)
    CHANGE    version = :v (pause, resume, update, delete: what the caller read is still what is stored);
              the version goes up by one, and ``cleanup`` is set when occurrences may have to be cancelled
    CLEANED   version = :v: the cleanup is done (the item leaves the index unless it is ACTIVE)

A tenant's SCHEDULE, a CHANGE that alters what the schedule holds of its quotas (its state, an ACTIVE one's rate)
and an ADVANCE that ends it also update the tenant's usage item in the same transaction (:mod:`.usage`): taken
conditionally on the quotas, given back unconditionally.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from botocore.exceptions import ClientError

from punctual.domain.backoff import backoff_s
from punctual.domain.keys import from_ms
from punctual.domain.model import Task, TaskStatus, Unreadable, canonical_json, occurrence_id
from punctual.domain.quota import ScheduleLimits, ScheduleUsage, change_of, usage_of
from punctual.domain.schedules import Advance, AdvanceResult, Schedule, ScheduleState
from punctual.domain.tenancy import prefix, split
from punctual.errors import ScheduleConflictError, ScheduleNotFoundError, ScheduleStateError, UndecodableItemError
from punctual.stores.dynamodb.codec import (
    SCHEDULE_PREFIX,
    SCHEDULE_REGISTRY,
    check_owner,
    check_registry,
    decode,
    from_av,
    schedule_id_of_key,
    schedule_key,
    to_av,
)
from punctual.stores.dynamodb.table import SCHEDULE_INDEX, Table
from punctual.stores.dynamodb.tasks import TaskItems
from punctual.stores.dynamodb.usage import UsageItems
from punctual.stores.dynamodb.writes import CREATABLE, is_conditional_failure

log = logging.getLogger(__name__)

_ACTIVE = ScheduleState.ACTIVE.value


USAGE_ATTEMPTS = 12  # transactions a write with its tenant's usage makes at most (conflicts on the usage item)
KEEP: dict[str, Any] = {}  # _place: leave the item's place in the due index as it is
LIST_CHUNK = 1_000  # schedule items a list reads at once (BatchGetItem, 100 keys a request, in parallel)


def _place(sets: list[str], values: dict[str, Any], next_due_ms: int | None, index: dict[str, Any] | None) -> str:
    """The update expression of ``sets`` with the schedule's cursor set to ``next_due_ms`` (removed for None) and
    its due-index place set to ``index`` (removed for None, left as it is for :data:`KEEP`)."""
    removes: list[str] = []
    if next_due_ms is None:
        removes.append("next_due_ms")
    else:
        sets = [*sets, "next_due_ms = :next"]
        values[":next"] = next_due_ms
    if index is None:
        removes += ["due_ms", "due_bucket"]
    elif index is not KEEP:
        sets = [*sets, "due_ms = :due", "due_bucket = :bucket"]
        values.update({":due": index["due_ms"], ":bucket": index["due_bucket"]})
    return "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")


def schedule_of_item(item: dict[str, Any]) -> Schedule:
    """The :class:`Schedule` a raw item holds; UndecodableItemError when it holds none (whatever the reason: a
    missing attribute, a definition that no longer validates, a time zone that names a folder, ...)."""
    return decode(item, "schedule", _schedule_of_item)


def _schedule_of_item(item: dict[str, Any]) -> Schedule:
    v = from_av(item)
    definition = json.loads(v["definition"])
    key = v["task_id"]
    if not isinstance(definition, dict) or definition.get("schedule_id") != schedule_id_of_key(key):
        raise ValueError("its definition's schedule_id is not the schedule its key names")
    check_owner(key, v.get("tenant"))
    check_registry(v.get("schedule_id"))
    return Schedule.model_validate(
        {
            **definition,
            "state": v["state"],
            "version": int(v["version"]),
            "next_due_ms": int(v["next_due_ms"]) if "next_due_ms" in v else None,
            "created_count": int(v.get("created_count", 0)),
            "skipped_count": int(v.get("skipped_count", 0)),
            "created_at": from_ms(int(v["created_ms"])) if "created_ms" in v else None,
            "updated_at": from_ms(int(v["updated_ms"])) if "updated_ms" in v else None,
            "cleanup": bool(v.get("cleanup", 0)),
        }
    )


def _readable(items: Iterable[dict[str, Any]], unreadable: Unreadable | None) -> Iterator[Schedule]:
    """The schedules ``items`` hold; one that cannot be read is logged once, with its key, left out and counted
    in ``unreadable`` (a list must not fail on one bad item)."""
    for item in items:
        try:
            yield schedule_of_item(item)
        except UndecodableItemError as exc:
            log.warning("%s; left out of the list", exc, extra={"schedule_key": exc.key})
            if unreadable is not None:
                unreadable.add(exc.key)


class ScheduleItems:
    """Schedules in ``table``: an occurrence's item is what ``tasks`` puts for a task (:meth:`TaskItems.item_of`);
    a tenant's schedules are listed from its index (:meth:`TaskItems.tenant_keys`), every schedule from the
    registry partition of the schedule index."""

    def __init__(self, table: Table, tasks: TaskItems) -> None:
        self.table = table
        self.config = table.config
        self.tasks = tasks
        self.usage = UsageItems(table)

    def _transact_with_usage(
        self, schedule_id: str, items: list[dict[str, Any]], change: ScheduleUsage, limits: ScheduleLimits | None
    ) -> list[str] | None:
        """One transaction of ``items`` and the change to the tenant's usage (:mod:`.usage`): None when it held,
        else the codes of ``items``. A refusal by the usage alone seeds it or finds room meanwhile and tries again,
        or raises QuotaExceededError; a conflict on the usage item (callers of one tenant at once) is tried again
        after a backoff."""
        tenant = split(schedule_id)[0]
        usage = None if tenant is None else self.usage.change(tenant, change, limits)
        if tenant is None or usage is None:
            return self.table.transact(items)
        owner = tenant

        def schedules() -> Iterator[Schedule]:
            return self.list_schedules(prefix(owner))

        codes: list[str] = []
        for attempt in range(USAGE_ATTEMPTS):
            result = self.table.transact([*items, usage])
            if result is None:
                return None
            codes, mine = result[:-1], result[-1]
            if any(code == "ConditionalCheckFailed" for code in codes):
                return codes  # the schedule's own conditions: the caller's answer
            if mine == "ConditionalCheckFailed" and limits is not None:
                usage = self.usage.after_refusal(tenant, change, limits, schedules)
            elif "TransactionConflict" in result:
                self.table.sleep(backoff_s(attempt))
            else:
                return codes
        raise ScheduleStateError(
            schedule_id, "write", f"its tenant's usage stayed busy ({', '.join(codes)}); try again"
        )

    # -- items ----------------------------------------------------------------------------------------------
    def _index_fields(self, schedule: Schedule, now_ms: int, cleanup: bool = False) -> dict[str, Any] | None:
        """``due_ms`` and ``due_bucket`` of the schedule's item, or None when it stays out of the due index."""
        key = schedule_key(schedule.schedule_id)
        if cleanup:
            return {"due_ms": now_ms, "due_bucket": self.config.index_key(key, now_ms, now_ms)}
        if schedule.state is ScheduleState.ACTIVE and schedule.next_due_ms is not None:
            due = schedule.next_due_ms - self.config.schedule_ahead_ms
            return {"due_ms": due, "due_bucket": self.config.index_key(key, due, now_ms)}
        return None

    def schedule_item(self, schedule: Schedule, now_ms: int) -> dict[str, Any]:
        values: dict[str, Any] = {
            "task_id": schedule_key(schedule.schedule_id),
            "state": schedule.state.value,
            "version": schedule.version,
            "definition": canonical_json(schedule.definition()),
            "created_count": schedule.created_count,
            "skipped_count": schedule.skipped_count,
            "created_ms": now_ms,
            "updated_ms": now_ms,
            "schedule_id": SCHEDULE_REGISTRY,  # the schedule index's registry (written once, here)
        }
        if schedule.next_due_ms is not None:
            values["next_due_ms"] = schedule.next_due_ms
        tenant = split(schedule.schedule_id)[0]
        if tenant is not None:
            values["tenant"] = tenant  # the tenant index
        values.update(self._index_fields(schedule, now_ms) or {})
        return to_av(values)

    def _occurrence_put(self, task: Task, version: int, now_ms: int) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table.name,
                "Item": self.tasks.item_of(task, now_ms),
                "ConditionExpression": "attribute_not_exists(task_id) OR (#st = :cancelled AND schedule_version < :v)",
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": to_av({":cancelled": TaskStatus.CANCELLED.value, ":v": version}),
            }
        }

    # -- client side ----------------------------------------------------------------------------------------
    def create_schedule(
        self, schedule: Schedule, occurrences: list[Task], now_ms: int, limits: ScheduleLimits | None = None
    ) -> tuple[Schedule, bool]:
        """SCHEDULE: store a new schedule with its first occurrences (at most 98) and what it takes of its tenant's
        usage (past ``limits``: QuotaExceededError, nothing stored). Idempotent on the id with an equal definition
        (returns the stored one and False); other content raises ScheduleConflictError."""
        put = {
            "Put": {
                "TableName": self.table.name,
                "Item": self.schedule_item(schedule, now_ms),
                "ConditionExpression": CREATABLE,
            }
        }
        codes = self._transact_with_usage(
            schedule.schedule_id,
            [put, *(self._occurrence_put(t, schedule.version, now_ms) for t in occurrences)],
            usage_of(schedule),
            limits,
        )
        if codes is None:
            return schedule.model_copy(update={"created_at": from_ms(now_ms), "updated_at": from_ms(now_ms)}), True
        existing = self.get_schedule(schedule.schedule_id)
        if existing is None:
            raise ScheduleStateError(
                schedule.schedule_id, "create", f"its first occurrences failed ({', '.join(codes)}); nothing was stored"
            )
        if existing.state is ScheduleState.DELETED:
            raise ScheduleConflictError(schedule.schedule_id, existing, deleted=True)
        if existing.definition() == schedule.definition():
            return existing, False
        raise ScheduleConflictError(schedule.schedule_id, existing)

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        """The schedule as stored now (strongly consistent), or None."""
        item = self.table.get_item(schedule_key(schedule_id))
        return None if item is None else schedule_of_item(item)

    def list_schedules(self, id_prefix: str | None = None, unreadable: Unreadable | None = None) -> Iterator[Schedule]:
        """Every schedule (every tenant's too), or those whose id starts with ``id_prefix``, in id order: their keys
        from an index (a tenant's, ``"<tenant>/..."``, from the tenant index; any other list from the schedule
        index's registry, :meth:`_registry_keys`), their items read by key. Never a Scan: the list costs what it
        holds, however many tasks the table holds. An item that cannot be read is left out and counted in
        ``unreadable``."""
        tenant = split(id_prefix)[0] if id_prefix is not None else None
        if tenant is not None:
            keys, _ = self.tasks.tenant_keys(tenant, begins=schedule_key(id_prefix or ""))
        else:
            keys = self._registry_keys(id_prefix or "")
        for start in range(0, len(keys), LIST_CHUNK):
            yield from _readable(self.table.items_of(keys[start : start + LIST_CHUNK]), unreadable)

    def _registry_keys(self, id_prefix: str = "") -> list[str]:
        """Keys of the schedules whose id starts with ``id_prefix`` (every schedule for ``""``), in id order, from the
        registry partition of the keys-only schedule index (eventually consistent: a schedule created a moment ago
        may be missing). A schedule of no tenant is keyed ``#schedule#<id>``, a tenant's ``<tenant>/#schedule#<id>``
        (:func:`~.codec.schedule_key`), so a prefix is looked for as both: ``"ac"`` is ``"#schedule#ac"`` and
        tenants ``"ac..."``. An entry whose key is no schedule's (an item that carries the registry value without
        being a schedule) is left out."""
        starts = [SCHEDULE_PREFIX + id_prefix, id_prefix] if id_prefix else [None]
        named: dict[str, str] = {}
        for begins in starts:
            for key in self._query_registry(begins):
                schedule_id = schedule_id_of_key(key)
                if schedule_id is not None and schedule_id.startswith(id_prefix):
                    named[key] = schedule_id
        return sorted(named, key=named.__getitem__)

    def _query_registry(self, begins: str | None) -> Iterator[str]:
        """The keys in the registry partition of the schedule index (those starting with ``begins``), page by page."""
        condition = "schedule_id = :r" + ("" if begins is None else " AND begins_with(task_id, :b)")
        values = {":r": SCHEDULE_REGISTRY} | ({} if begins is None else {":b": begins})
        for page in self.table.client.get_paginator("query").paginate(
            TableName=self.table.name,
            IndexName=SCHEDULE_INDEX,
            KeyConditionExpression=condition,
            ExpressionAttributeValues=to_av(values),
        ):
            yield from (raw["task_id"]["S"] for raw in page.get("Items", []))

    def quarantine_schedule(self, schedule_id: str, detail: str, now_ms: int) -> bool:
        """QUARANTINE: a schedule item that cannot be read leaves the due index (no poll meets it again) and keeps
        ``detail``; the item is otherwise left as it is, for a person to mend or delete. False when it was not in
        the index any more. Never raises: a failure is logged, and the next poll meets the item again."""
        try:
            self.table.client.update_item(
                TableName=self.table.name,
                Key={"task_id": {"S": schedule_key(schedule_id)}},
                UpdateExpression="SET detail = :detail, quarantined_ms = :now REMOVE due_ms, due_bucket",
                ConditionExpression="attribute_exists(due_bucket)",
                ExpressionAttributeValues=to_av({":detail": detail[:1000], ":now": now_ms}),
            )
        except Exception as exc:  # one bad item must not stop a poll
            lost = isinstance(exc, ClientError) and is_conditional_failure(exc)
            if not lost:
                log.exception("schedule %s: taking it out of the due index failed", schedule_id)
            return False
        log.error(
            "schedule %s: %s; taken out of the due index (it makes no occurrence until mended)",
            schedule_id,
            detail,
            extra={"schedule_id": schedule_id},
        )
        return True

    def change_schedule(
        self,
        schedule: Schedule,
        changes: dict[str, Any],
        now_ms: int,
        *,
        cleanup: bool,
        limits: ScheduleLimits | None = None,
    ) -> Schedule:
        """CHANGE: write ``changes`` (definition fields, state, cursor) over ``schedule`` as read, one version up,
        with what they change of its tenant's usage (past ``limits``: QuotaExceededError, nothing written);
        ``cleanup``: occurrences of older versions may have to be cancelled (the item waits in the due index until
        :meth:`finish_cleanup`). Raises ScheduleStateError when the schedule changed since it was read."""
        changed = Schedule.model_validate({**schedule.model_dump(), **changes, "version": schedule.version + 1})
        values: dict[str, Any] = {
            ":v": schedule.version,
            ":nv": changed.version,
            ":state": changed.state.value,
            ":definition": canonical_json(changed.definition()),
            ":now": now_ms,
            ":cleanup": 1 if cleanup else 0,
            ":registry": SCHEDULE_REGISTRY,
        }
        sets = [
            "#ver = :nv",
            "#state = :state",
            "#def = :definition",
            "updated_ms = :now",
            "cleanup = :cleanup",
            "schedule_id = :registry",  # an item written before the registry joins it (else: unchanged)
        ]
        update = _place(sets, values, changed.next_due_ms, self._index_fields(changed, now_ms, cleanup=cleanup))
        write = {
            "TableName": self.table.name,
            "Key": {"task_id": {"S": schedule_key(schedule.schedule_id)}},
            "UpdateExpression": update,
            "ConditionExpression": "#ver = :v",
            "ExpressionAttributeNames": {"#state": "state", "#def": "definition", "#ver": "version"},
            "ExpressionAttributeValues": to_av(values),
        }
        change = change_of(schedule, changed)
        if split(schedule.schedule_id)[0] is None or change.zero:
            codes = self._update_alone(write)
        else:
            codes = self._transact_with_usage(schedule.schedule_id, [{"Update": write}], change, limits)
        if codes is not None:
            if codes[0] != "ConditionalCheckFailed":
                raise ScheduleStateError(schedule.schedule_id, "change", f"the write failed ({', '.join(codes)})")
            if self.get_schedule(schedule.schedule_id) is None:
                raise ScheduleNotFoundError(schedule.schedule_id)
            raise ScheduleStateError(schedule.schedule_id, "change", "it changed meanwhile; read it again")
        return changed.model_copy(update={"updated_at": from_ms(now_ms), "cleanup": cleanup})

    def _update_alone(self, write: dict[str, Any]) -> list[str] | None:
        """One UpdateItem of ``write``: None when it held, ``["ConditionalCheckFailed"]`` when its condition did not."""
        try:
            self.table.client.update_item(**write)
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            return ["ConditionalCheckFailed"]
        return None

    def finish_cleanup(self, schedule: Schedule, now_ms: int) -> bool:
        """CLEANED: no older version's occurrence is left PENDING; the item goes back to its place in the due
        index (or out of it). False when the schedule changed meanwhile (its new change has its own cleanup)."""
        values: dict[str, Any] = {":v": schedule.version}
        index = self._index_fields(schedule.model_copy(update={"cleanup": False}), now_ms)
        if index is None:
            update = "REMOVE cleanup, due_ms, due_bucket"
        else:
            update = "SET due_ms = :due, due_bucket = :bucket REMOVE cleanup"
            values.update({":due": index["due_ms"], ":bucket": index["due_bucket"]})
        try:
            self.table.client.update_item(
                TableName=self.table.name,
                Key={"task_id": {"S": schedule_key(schedule.schedule_id)}},
                UpdateExpression=update,
                ConditionExpression="#ver = :v",
                ExpressionAttributeNames={"#ver": "version"},
                ExpressionAttributeValues=to_av(values),
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            return False
        return True

    def schedule_occurrence_ids(
        self, schedule_id: str, from_ms_: int | None = None, limit: int | None = None
    ) -> list[str]:
        """Ids of the schedule's occurrences in due order (from the instant ``from_ms_`` if given), from the
        ``schedule`` index (eventually consistent: a just-created occurrence may be missing for a moment).
        Schedules' own entries are never among them: they are under SCHEDULE_REGISTRY, which is no schedule's id,
        and their keys hold no ``@``."""
        # Only ids of its own occurrences ("<schedule id>@<instant>Z"): schedule_id is an attribute, and a client
        # confined to its own keys (LeadingKeys) could still write another tenant's schedule id into an item.
        condition = "schedule_id = :s AND task_id BETWEEN :from AND :to"
        values: dict[str, Any] = {
            ":s": schedule_id,
            ":to": f"{schedule_id}@~",  # "~" sorts after every digit of an instant
            ":from": occurrence_id(schedule_id, max(0, from_ms_)) if from_ms_ is not None else f"{schedule_id}@",
        }
        ids: list[str] = []
        for page in self.table.client.get_paginator("query").paginate(
            TableName=self.table.name,
            IndexName=SCHEDULE_INDEX,
            KeyConditionExpression=condition,
            ExpressionAttributeValues=to_av(values),
            ProjectionExpression="task_id",
        ):
            ids.extend(raw["task_id"]["S"] for raw in page.get("Items", []))
            if limit is not None and len(ids) >= limit:
                return ids[:limit]
        return ids

    # -- the chain ------------------------------------------------------------------------------------------
    def advance_schedule(
        self, schedule: Schedule, step: Advance, occurrences: list[Task], now_ms: int
    ) -> AdvanceResult:
        """ADVANCE: create ``occurrences`` and move the cursor from ``schedule.next_due_ms`` to
        ``step.next_due_ms`` (the schedule ENDS when that is None), in one transaction (at most 98 occurrences)."""
        moved = schedule.model_copy(
            update={
                "next_due_ms": step.next_due_ms,
                "state": ScheduleState.ENDED if step.next_due_ms is None else schedule.state,
            }
        )
        values: dict[str, Any] = {
            ":v": schedule.version,
            ":cursor": schedule.next_due_ms,
            ":active": _ACTIVE,
            ":now": now_ms,
            ":created": len(occurrences),
            ":skipped": step.skipped,
            ":state": moved.state.value,
            ":registry": SCHEDULE_REGISTRY,
        }
        sets = [
            "created_count = created_count + :created",
            "skipped_count = skipped_count + :skipped",
            "updated_ms = :now",
            "#state = :state",
            "schedule_id = :registry",  # an item written before the registry joins it (else: unchanged)
        ]
        # while a cleanup is pending, the item keeps its place in the index (now): the next poll finishes it
        index = KEEP if schedule.cleanup else self._index_fields(moved, now_ms)
        update = {
            "Update": {
                "TableName": self.table.name,
                "Key": {"task_id": {"S": schedule_key(schedule.schedule_id)}},
                "UpdateExpression": _place(sets, values, step.next_due_ms, index),
                "ConditionExpression": "#ver = :v AND next_due_ms = :cursor AND #state = :active",
                "ExpressionAttributeNames": {"#state": "state", "#ver": "version"},
                "ExpressionAttributeValues": to_av(values),
            }
        }
        puts = [self._occurrence_put(t, schedule.version, now_ms) for t in occurrences]
        # an advance that ends the schedule gives its rate back in the same transaction (a release never fails)
        codes = self._transact_with_usage(schedule.schedule_id, [update, *puts], change_of(schedule, moved), None)
        if codes is None:
            return AdvanceResult(done=True)
        if codes[0] == "ConditionalCheckFailed":
            return AdvanceResult(done=False)
        blocked = [
            t.task_id for t, code in zip(occurrences, codes[1:], strict=True) if code == "ConditionalCheckFailed"
        ]
        if not blocked and "TransactionConflict" in codes:
            return AdvanceResult(done=False)  # another writer on one of its items at that moment: read again
        if not blocked:
            raise ScheduleStateError(schedule.schedule_id, "advance", f"the write failed ({', '.join(codes)})")
        return AdvanceResult(done=False, blocked=blocked)
