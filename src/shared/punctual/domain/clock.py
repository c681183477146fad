"""Clocks: the ``Clock`` port, the system clock, and the clock offset as the executor reads it.

Sleeping uses the monotonic clock; due times are wall-clock instants, converted to monotonic deadlines once,
when a task is armed. The wall-clock offset from NTP (:class:`ClockOffset`, read through an
:class:`OffsetSource`) is only used to *report* drift corrected for it; measuring it is I/O, done in the
background by :mod:`punctual.runtime.ntp`, and a fire never waits for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    """Time as the services see it (inject a fake one in tests instead of freezing time)."""

    def wall_ms(self) -> float:
        """Wall-clock time, milliseconds since the epoch (sub-millisecond fraction kept)."""
        ...

    def monotonic(self) -> float:
        """Monotonic seconds, for deadlines and sleeping."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The machine's clocks."""

    def wall_ms(self) -> float:
        return time.time_ns() / 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """``offset_ms`` is what to add to this machine's wall clock to get NTP time; None when unknown."""

    offset_ms: float | None
    server: str | None
    error: str | None = None

    @property
    def corrected(self) -> bool:
        return self.offset_ms is not None


class LatestOffset:
    """The clock offset as last measured, ``initial`` until a measurement is in: what the executor reads, at once.
    Measuring is the runtime's (:class:`punctual.runtime.ntp.OffsetProbe` fills one in the background)."""

    def __init__(self, initial: ClockOffset) -> None:
        self._latest = initial

    def current(self) -> ClockOffset:
        """The offset last measured, or the initial one. Never waits."""
        return self._latest

    def _record(self, offset: ClockOffset) -> None:
        self._latest = offset


class OffsetSource(Protocol):
    """Where the executor reads the clock offset from (:class:`punctual.runtime.ntp.OffsetProbe`, or a fixed one in
    tests)."""

    def current(self) -> ClockOffset: ...
