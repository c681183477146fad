"""What a page's code reaches of the console answering it (:func:`console`), and how pages show figures."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

from flask import current_app

from punctual.domain.keys import from_ms
from punctual.domain.recurrence import zone
from punctual.domain.tenancy import split
from punctual_tools.console.model import ConsoleSource

EXTENSION = "punctual_console"


@dataclass(frozen=True, kw_only=True, slots=True)
class Console:
    """A console's source, mode and clock, and its two secrets: the token and the CSRF token derived from it."""

    source: ConsoleSource
    read_only: bool
    clock: Callable[[], int]
    token: str
    token_hint: str
    csrf_token: str

    def token_matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def csrf_matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf_token.encode())


def console() -> Console:
    """The console of the app answering the current request."""
    return cast(Console, current_app.extensions[EXTENSION])


def show_instant(value: datetime | int | None) -> str:
    """An instant in UTC to the millisecond (``—`` for none)."""
    if value is None:
        return "—"
    moment = from_ms(value) if isinstance(value, int) else value.astimezone(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def show_zoned(value: int, timezone: str) -> str:
    """An instant (epoch ms) in ``timezone``, with its offset and the zone's abbreviation."""
    moment = from_ms(value).astimezone(zone(timezone))
    return f"{moment.isoformat(timespec='seconds')} {moment.tzname()}"


def show_ms(value: float | None) -> str:
    """A duration in milliseconds (``—`` for none)."""
    return "—" if value is None else f"{value:,.1f} ms"


def show_tenant(task_id: str) -> str:
    """The tenant a task id names (``—`` for none)."""
    return split(task_id)[0] or "—"
