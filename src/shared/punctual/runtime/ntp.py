"""The NTP offset, measured once per cold start in the background: the executor's only clock I/O.

:func:`offset_probe` starts the measurement (one UDP round trip to the configured server, a short timeout) in a
thread of its own and returns at once; the executor reads the result through the
:class:`~punctual.domain.clock.OffsetSource` port, never waiting for it. ntplib is imported by that thread, when
it measures: importing this module loads nothing more.
"""

from __future__ import annotations

import logging
import threading

from punctual.domain.clock import ClockOffset, LatestOffset

log = logging.getLogger(__name__)


def measure_offset(server: str | None, timeout_s: float) -> ClockOffset:
    """Ask an NTP server once (ntplib, one UDP round trip, ``timeout_s`` at most)."""
    if not server:
        return ClockOffset(None, None, "no NTP server configured")
    import ntplib  # noqa: PLC0415  imported on first use, by the probe's own thread: no handler's import pays for it

    host, _, port = server.partition(":")
    try:
        response = ntplib.NTPClient().request(host, version=3, port=int(port) if port else "ntp", timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - any failure only means "uncorrected"
        return ClockOffset(None, server, f"{type(exc).__name__}: {exc}")
    return ClockOffset(response.offset * 1000.0, server)


class OffsetProbe(LatestOffset):
    """Measures the clock offset once, in a background thread; a reader gets the latest (``current``, from
    :class:`~punctual.domain.clock.LatestOffset`) and never waits for it."""

    def __init__(self, server: str | None, timeout_s: float) -> None:
        super().__init__(ClockOffset(None, server, "not measured yet"))
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(server, timeout_s), name="ntp-offset", daemon=True)
        self._thread.start()

    def _run(self, server: str | None, timeout_s: float) -> None:
        measured = measure_offset(server, timeout_s)
        if measured.error:
            log.info("clock offset unknown (%s); drift is recorded uncorrected", measured.error)
        self._record(measured)
        self._done.set()

    def wait(self, timeout: float | None = None) -> ClockOffset:
        self._done.wait(timeout)
        return self.current()


_probes: dict[tuple[str | None, float], OffsetProbe] = {}
_probes_lock = threading.Lock()


def offset_probe(server: str | None, timeout_s: float) -> OffsetProbe:
    """The process-wide probe for this server: measured once per cold start."""
    with _probes_lock:
        probe = _probes.get((server, timeout_s))
        if probe is None:
            probe = _probes[(server, timeout_s)] = OffsetProbe(server, timeout_s)
        return probe
