"""What the console's forms send, read as the REST API reads the same input: a bad value is the API's
:class:`~punctual.errors.InvalidRequestError` naming the field, with the API's message, and nothing is done."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import UTC, datetime

from pydantic import TypeAdapter, ValidationError

from punctual import targets  # noqa: F401 - registers every action kind the Tasks page's form offers
from punctual.api.routes.tasks import instant
from punctual.domain.keys import from_ms, to_ms
from punctual.domain.model import TaskStatus, known_action_kinds
from punctual.errors import InvalidRequestError, RequestTooLargeError
from punctual_tools.console.model import TaskFilter

MAX_SELECTED = 100  # dead letters one redrive takes (the Dead letters page lists this many)
_STATUS = TypeAdapter(TaskStatus)


def instant_ms(value: str | None, field: str) -> int | None:
    """An instant of a form, in epoch ms (None when empty): ISO 8601 with its offset, as the REST API takes it, or
    without one (what a ``datetime-local`` input sends), read in UTC."""
    if not value:
        return None
    with contextlib.suppress(ValueError):
        if "T" in value and datetime.fromisoformat(value).tzinfo is None:
            value = datetime.fromisoformat(value).replace(tzinfo=UTC).isoformat()
    moment = instant(value, field)
    return None if moment is None else to_ms(moment)


def status_of(value: str | None) -> TaskStatus | None:
    """A status of the Tasks page's form (None when empty), refused with the API's message for an unknown one."""
    if not value:
        return None
    try:
        return _STATUS.validate_python(value)
    except ValidationError as exc:
        raise InvalidRequestError("status", exc.errors()[0]["msg"]) from exc


def kind_of(value: str | None) -> str | None:
    """An action kind (None when empty), refused when no action has it."""
    if not value:
        return None
    if value not in known_action_kinds():
        raise InvalidRequestError(
            "kind", f"unknown action kind {value!r}; known kinds: {', '.join(known_action_kinds())}"
        )
    return value


def task_filter(args: Mapping[str, str]) -> TaskFilter:
    """The Tasks page's filter from its form's query (every field optional)."""
    return TaskFilter(
        status=status_of(args.get("status")),
        tenant=args.get("tenant", "").strip() or None,
        due_from_ms=instant_ms(args.get("due_from", "").strip(), "due_from"),
        due_to_ms=instant_ms(args.get("due_to", "").strip(), "due_to"),
        kind=kind_of(args.get("kind")),
        retrying=args.get("retrying", "") not in {"", "0"},
        after=args.get("after") or None,
    )


def form_value(ms: int | None) -> str:
    """An instant as a ``datetime-local`` input shows it (UTC, to the second), or empty."""
    if ms is None:
        return ""
    return from_ms(ms).strftime("%Y-%m-%dT%H:%M:%S")


def selected(ids: list[str]) -> list[str]:
    """The task ids a redrive form checked: each once, in order; at least one, at most :data:`MAX_SELECTED`."""
    chosen = list(dict.fromkeys(i.strip() for i in ids if i.strip()))
    if not chosen:
        raise InvalidRequestError("task_id", "check at least one task to redrive")
    if len(chosen) > MAX_SELECTED:
        raise RequestTooLargeError("task_id", f"at most {MAX_SELECTED} tasks are redriven at once")
    return chosen
