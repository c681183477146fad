"""A tenant's schedule usage in the Tasks table (:mod:`punctual.domain.quota`): one item per tenant, keyed
``<tenant>/#schedule-usage`` (a ``#`` is in no task id, and the key holds no ``#schedule#``: it is neither a task nor a
schedule; it starts with its tenant, as every key of that tenant does)::

    task_id S | schedules N (not deleted) | rate N (the ACTIVE ones' fires a second, in billionths)
    seeded N (1: counted from the tenant's schedules; the quotas are checked against it only then)

Every write that changes what a schedule holds carries an update of this item in its own ``TransactWriteItems``
(:meth:`UsageItems.change`), so the check and the write are one step however many callers race:

    TAKE     ADD the change, conditional on ``seeded`` and on the total staying within the limits (a write that adds
             to a quota; its refusal cancels the schedule's write)
    RELEASE  ADD the change, unconditional (a write that only gives back: it never fails for the quota)
    SEED     SET both totals to what the tenant's schedules hold now plus the write's change, conditional on
             ``seeded`` absent (in the write's transaction, in place of its TAKE)

A tenant whose schedules were made before this item existed has none (or one that releases made, unseeded): its
first write that takes is refused as unseeded, reads the tenant's schedules and is tried again with a SEED
(:meth:`UsageItems.after_refusal`); a write past the quotas is refused before anything is written. A release landing
between the seed's read of the schedules and its write is lost to the seed: the total is then above the truth by
that release (never below it), for that tenant, once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from punctual.domain.quota import ScheduleLimits, ScheduleUsage, held_by
from punctual.domain.schedules import Schedule
from punctual.domain.tenancy import SEPARATOR
from punctual.stores.dynamodb.codec import number_of, to_av
from punctual.stores.dynamodb.table import Table

USAGE_SUFFIX = "#schedule-usage"
NAMES = {"#count": "schedules", "#rate": "rate"}  # the totals' attributes, named apart from DynamoDB's reserved words


def usage_key(tenant: str) -> str:
    """The key of ``tenant``'s usage item."""
    return f"{tenant}{SEPARATOR}{USAGE_SUFFIX}"


class UsageItems:
    """Tenants' schedule usage in ``table``."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def change(self, tenant: str, change: ScheduleUsage, limits: ScheduleLimits | None) -> dict[str, Any] | None:
        """The transaction item that adds ``change`` to ``tenant``'s usage: TAKE (with ``limits``, when it adds to a
        quota) or RELEASE; None when it changes nothing."""
        if change.zero:
            return None
        values: dict[str, Any] = {":s": change.schedules, ":r": change.rate}
        update: dict[str, Any] = {
            "TableName": self.table.name,
            "Key": {"task_id": {"S": usage_key(tenant)}},
            "UpdateExpression": "ADD #count :s, #rate :r",
            "ExpressionAttributeNames": NAMES,
        }
        conditions = []
        if limits is not None and change.schedules > 0:
            conditions.append("#count <= :max_s")
            values[":max_s"] = limits.schedules - change.schedules
        if limits is not None and change.rate > 0:
            conditions.append("#rate <= :max_r")
            values[":max_r"] = limits.rate - change.rate
        if conditions:
            update["ConditionExpression"] = " AND ".join(["seeded = :one", *conditions])
            values[":one"] = 1
        update["ExpressionAttributeValues"] = to_av(values)
        return {"Update": update}

    def read(self, tenant: str) -> tuple[ScheduleUsage, bool]:
        """``tenant``'s usage as stored (strongly consistent), and whether it is seeded."""
        item = self.table.get_item(usage_key(tenant))
        usage = ScheduleUsage(number_of(item, "schedules") or 0, number_of(item, "rate") or 0)
        return usage, number_of(item, "seeded") == 1

    def after_refusal(
        self,
        tenant: str,
        change: ScheduleUsage,
        limits: ScheduleLimits,
        schedules: Callable[[], Iterable[Schedule]],
    ) -> dict[str, Any]:
        """After a TAKE was refused: QuotaExceededError when the usage leaves no room for ``change``, else the
        transaction item to try again with: the TAKE again (the usage changed since), or, when the item is not
        seeded, SEED it from the tenant's ``schedules()`` as they are now with ``change`` added (conditional on it
        being unseeded still). A refusal writes nothing."""
        usage, seeded = self.read(tenant)
        if seeded:
            limits.check(usage, change)
            return self.change(tenant, change, limits) or {}
        held = held_by(schedules())
        limits.check(held, change)
        after = held + change
        return {
            "Update": {
                "TableName": self.table.name,
                "Key": {"task_id": {"S": usage_key(tenant)}},
                "UpdateExpression": "SET #count = :s, #rate = :r, seeded = :one",
                "ConditionExpression": "attribute_not_exists(seeded)",
                "ExpressionAttributeNames": NAMES,
                "ExpressionAttributeValues": to_av({":s": after.schedules, ":r": after.rate, ":one": 1}),
            }
        }
