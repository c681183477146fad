"""Clocks: the ``Clock`` port, the system clock, and the NTP offset measured once per cold start.

Sleeping uses the monotonic clock; due times are wall-clock instants, converted to monotonic deadlines once,
when a task is armed. The wall-clock offset from NTP is measured in the background with a short timeout and
is only used to *report* drift corrected for it; a fire never waits for NTP.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


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


def measure_offset(server: str | None, timeout_s: float) -> ClockOffset:
    """Ask an NTP server once (ntplib, one UDP round trip, ``timeout_s`` at most)."""
    if not server:
        return ClockOffset(None, None, "no NTP server configured")
    import ntplib  # imported here: only cold starts pay for it

    host, _, port = server.partition(":")
    try:
        response = ntplib.NTPClient().request(host, version=3, port=int(port) if port else "ntp", timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - any failure only means "uncorrected"
        return ClockOffset(None, server, f"{type(exc).__name__}: {exc}")
    return ClockOffset(response.offset * 1000.0, server)


class OffsetSource(Protocol):
    """Where the executor reads the clock offset from (an :class:`OffsetProbe`, or a fixed one in tests)."""

    def current(self) -> ClockOffset: ...


class OffsetProbe:
    """Measures the clock offset once, in a background thread, and never blocks a reader for it."""

    def __init__(self, server: str | None, timeout_s: float) -> None:
        self._result = ClockOffset(None, server, "not measured yet")
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(server, timeout_s), name="ntp-offset", daemon=True)
        self._thread.start()

    def _run(self, server: str | None, timeout_s: float) -> None:
        self._result = measure_offset(server, timeout_s)
        if self._result.error:
            log.info("clock offset unknown (%s); drift is recorded uncorrected", self._result.error)
        self._done.set()

    def current(self) -> ClockOffset:
        """The offset if the measurement has finished, else an 'unknown' offset. Never waits."""
        return self._result

    def wait(self, timeout: float | None = None) -> ClockOffset:
        self._done.wait(timeout)
        return self._result


_probes: dict[tuple[str | None, float], OffsetProbe] = {}
_probes_lock = threading.Lock()


def offset_probe(server: str | None, timeout_s: float) -> OffsetProbe:
    """The process-wide probe for this server: measured once per cold start."""
    with _probes_lock:
        probe = _probes.get((server, timeout_s))
        if probe is None:
            probe = _probes[(server, timeout_s)] = OffsetProbe(server, timeout_s)
        return probe
