"""What the client checks of a task or a schedule before it writes one: the field a validation names, the
misfire grace, the target rules of its tenant, the payload's size."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from punctual.config.settings import Settings
from punctual.domain.model import Action, canonical_json
from punctual.errors import InvalidRequestError, InvalidTaskError
from punctual.targets import TargetRules, check_action


def field_error(exc: ValidationError, invalid: type[InvalidRequestError]) -> InvalidRequestError:
    """The first field error of a task's or a schedule's validation, as an ``invalid`` error naming the field."""
    first = exc.errors()[0]
    return invalid(".".join(str(p) for p in first["loc"]) or None, first["msg"])


def grace_ms(value: timedelta | int | None, default: int, invalid: type[InvalidRequestError] = InvalidTaskError) -> int:
    """A misfire grace given as a timedelta or whole milliseconds, in ms (``default`` when None)."""
    if value is None:
        return default
    if isinstance(value, timedelta):
        return value // timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid("misfire_grace_ms", "give a timedelta or whole milliseconds")
    return value


def check_target(action: Action, rules: TargetRules, invalid: type[InvalidRequestError]) -> None:
    """The target rules for ``action``, a refusal raised as ``invalid`` (of a task, or of a schedule)."""
    try:
        check_action(action, rules)
    except InvalidRequestError as exc:
        raise invalid(exc.field, exc.reason) from None


def check_payload(payload: Any, invalid: type[InvalidRequestError], settings: Settings) -> None:
    """Refuse (``invalid``) a payload that is no valid Unicode or, as JSON, over ``settings.max_payload_bytes``."""
    try:
        size = len(canonical_json(payload).encode())
    except UnicodeEncodeError as exc:
        raise invalid("payload", f"not valid Unicode ({exc.reason})") from exc
    if size > settings.max_payload_bytes:
        raise invalid("payload", f"{size} bytes as JSON, more than the limit of {settings.max_payload_bytes}")
