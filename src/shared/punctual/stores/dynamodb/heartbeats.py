"""Executors' heartbeat items as an operator looks at them (:func:`heartbeat_items`): what each says of its executor.
How they are written, and what arms and takeovers make of them, is :mod:`.executors`'."""

from __future__ import annotations

from dataclasses import dataclass

from punctual.stores.dynamodb.codec import number_of, text_of
from punctual.stores.dynamodb.executors import EXECUTOR_PREFIX
from punctual.stores.dynamodb.table import Table


@dataclass(frozen=True, kw_only=True, slots=True)
class HeartbeatItem:
    """An executor's heartbeat item as stored: alive up to ``alive_until_ms``, last renewed at ``beat_ms`` by the
    ``invocation`` running it; ``fenced`` or ``taken_over`` once it is known dead."""

    executor_id: str
    alive_until_ms: int | None
    beat_ms: int | None
    invocation: str | None
    fenced: bool
    taken_over: bool


def heartbeat_items(table: Table, executor_ids: set[str]) -> dict[str, HeartbeatItem]:
    """The heartbeat items of ``executor_ids`` that exist in ``table`` (strongly consistent BatchGetItems, a hundred
    keys each); a key left unprocessed (throttled) is left out."""
    if not executor_ids:
        return {}
    items = table.batch_get(
        [EXECUTOR_PREFIX + e for e in executor_ids],
        consistent=True,
        projection="task_id, alive_until_ms, beat_ms, invocation, fenced, taken_over",
        partial=True,
    )
    found = [
        HeartbeatItem(
            executor_id=(text_of(i, "task_id") or "")[len(EXECUTOR_PREFIX) :],
            alive_until_ms=number_of(i, "alive_until_ms"),
            beat_ms=number_of(i, "beat_ms"),
            invocation=text_of(i, "invocation"),
            fenced="fenced" in i,
            taken_over="taken_over" in i,
        )
        for i in items
    ]
    return {beat.executor_id: beat for beat in found}
