"""What a crash leaves in the table, read back: heartbeats, takeover marks and each dead executor's crash window.

An executor's heartbeat says its last sign of life, when its death was known and whether it was taken over; a
takeover marks each task it took. :func:`crash_windows` makes the windows :func:`punctual_tools.checker.check`
takes to tell a MISSED task due in one from one that should have fired. The fault tests and the benchmark's
restart phase use them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from punctual.config.settings import Settings
from punctual.stores.dynamodb.codec import number_of, text_of
from punctual.stores.dynamodb.executors import EXECUTOR_PREFIX
from punctual_tools.local.dynamodb_local import make_client


def raw_item(settings: Settings, key: str) -> dict[str, Any] | None:
    """The stored item under ``key`` (a task id, or a heartbeat's key), strongly consistent, or None."""
    client = make_client(settings.endpoint_url)
    return client.get_item(TableName=settings.table_name, Key={"task_id": {"S": key}}, ConsistentRead=True).get("Item")


def alive_until(settings: Settings, executor_id: str) -> int | None:
    """The last ``alive_until_ms`` an executor's heartbeat wrote (None: it never wrote one)."""
    return number_of(raw_item(settings, EXECUTOR_PREFIX + executor_id), "alive_until_ms")


def dead_for_good(settings: Settings, executor_id: str) -> bool:
    """Whether a takeover or a fence marked this executor's heartbeat (it can never renew it again)."""
    item = raw_item(settings, EXECUTOR_PREFIX + executor_id) or {}
    return any(item.get(mark, {}).get("BOOL") for mark in ("taken_over", "fenced"))


def crash_window(settings: Settings, executor_id: str, held_due_ms: Iterable[int] = ()) -> tuple[int, int]:
    """A dead executor's crash window: to the moment its death was known (the instant a fence set, or the end of
    the lease a takeover found lapsed), from its last sign of life: its last heartbeat, or, if earlier, the due
    instant of the first task it held and had not recorded (``held_due_ms``: the due instants of the tasks taken
    from it; one it fired just before it died may not have been recorded yet)."""
    item = raw_item(settings, EXECUTOR_PREFIX + executor_id)
    beat, until = number_of(item, "beat_ms"), number_of(item, "alive_until_ms")
    if beat is None or until is None:
        raise LookupError(f"executor {executor_id} has no heartbeat")
    return min([beat, *(due for due in held_due_ms if due <= until)]), until


def crash_windows(settings: Settings, due_ms: dict[str, int], dead: Iterable[str] = ()) -> list[tuple[int, int]]:
    """The crash window of every executor the tasks in ``due_ms`` (task id -> due instant) were last taken from,
    and of the ``dead`` executors named (whose tasks may have been taken again since)."""
    held: dict[str, list[int]] = {owner: [] for owner in dead}
    for task_id, (owner, _) in all_takeover_marks(settings).items():
        if task_id in due_ms:
            held.setdefault(owner, []).append(due_ms[task_id])
    return [crash_window(settings, owner, dues) for owner, dues in held.items()]


def takeover_marks(settings: Settings, task_id: str) -> tuple[str | None, int | None]:
    """Whom a task was taken over from and until when that executor may have fired it (None, None: never
    taken over). The marks stay on the item after its outcome is recorded."""
    item = raw_item(settings, task_id)
    return text_of(item, "taken_from"), number_of(item, "taken_until_ms")


def all_takeover_marks(settings: Settings) -> dict[str, tuple[str, int | None]]:
    """Every task taken over, by id: whom it was taken from and until when (one Scan, for many tasks)."""
    client = make_client(settings.endpoint_url)
    marks: dict[str, tuple[str, int | None]] = {}
    for page in client.get_paginator("scan").paginate(
        TableName=settings.table_name,
        FilterExpression="attribute_exists(taken_from)",
        ConsistentRead=True,
        ProjectionExpression="task_id, taken_from, taken_until_ms",
    ):
        for item in page.get("Items", []):
            marks[item["task_id"]["S"]] = (item["taken_from"]["S"], number_of(item, "taken_until_ms"))
    return marks
