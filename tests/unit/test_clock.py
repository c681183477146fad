"""The wall-clock offset from NTP, against a tiny NTP responder on the loopback interface.

No assertion depends on how fast the machine is: a measured offset may be off by half the round trip (which a
busy machine stretches), so it is checked within a second of the responder's 2.5 s skew; a timeout is checked
by what is asked of ntplib and by waiting at least that long, never by an upper bound on the time taken.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import ntplib
import pytest

from punctual.config.settings import Settings
from punctual.domain.clock import ClockOffset, SystemClock
from punctual.runtime.ntp import OffsetProbe, measure_offset, offset_probe

NTP_EPOCH_OFFSET = 2_208_988_800  # seconds from 1900-01-01 (NTP) to 1970-01-01 (Unix)
PACKET = struct.Struct("!B B B b 11I")
SKEW_S = 2.5
OFFSET_TOLERANCE_MS = 1_000  # half a round trip on a busy machine; still far from both 0 and 2 x SKEW_S


def _ntp_parts(unix_seconds: float) -> tuple[int, int]:
    ntp = unix_seconds + NTP_EPOCH_OFFSET
    whole = int(ntp)
    return whole, int((ntp - whole) * 2**32)


class NtpResponder:
    """Answers each NTP client packet with a server packet whose clock runs ``skew_s`` ahead of ours.

    With ``silent=True`` it reads requests and never answers (a server that is up but does not reply).
    """

    def __init__(self, skew_s: float = SKEW_S, silent: bool = False) -> None:
        self.skew_s = skew_s
        self.silent = silent
        self.requests = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.05)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="ntp-responder", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._sock.recvfrom(512)
            except TimeoutError:
                continue
            except OSError:
                return
            self.requests += 1
            if self.silent or len(data) < PACKET.size:
                continue
            request = PACKET.unpack(data[: PACKET.size])
            origin = request[13], request[14]  # the client's transmit timestamp
            received = _ntp_parts(time.time() + self.skew_s)
            transmitted = _ntp_parts(time.time() + self.skew_s)
            header = (0 << 6) | (3 << 3) | 4  # no leap warning, version 3, mode 4 (server)
            stratum, poll, precision = 2, 4, -20
            root_delay = root_dispersion = reference_id = 0
            reference = received
            reply = PACKET.pack(
                header, stratum, poll, precision, root_delay, root_dispersion, reference_id,
                *reference, *origin, *received, *transmitted,
            )  # fmt: skip
            self._sock.sendto(reply, peer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()


@pytest.fixture
def ntp_server() -> Iterator[NtpResponder]:
    server = NtpResponder()
    yield server
    server.close()


@pytest.fixture
def silent_server() -> Iterator[NtpResponder]:
    server = NtpResponder(silent=True)
    yield server
    server.close()


def closed_port() -> int:
    """A UDP port on the loopback interface that nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_measure_offset_against_a_server_2_5_s_ahead(ntp_server: NtpResponder) -> None:
    # Given an NTP server whose clock is 2.5 s ahead of ours, addressed as "host:port"
    # When the offset is measured
    offset = measure_offset(ntp_server.address, timeout_s=2.0)
    # Then it is about +2,500 ms, with no error
    assert offset.error is None
    assert offset.corrected
    assert offset.server == ntp_server.address
    assert offset.offset_ms is not None
    assert abs(offset.offset_ms - 2_500) <= OFFSET_TOLERANCE_MS
    assert ntp_server.requests == 1


def test_settings_accept_host_and_port_for_ntp(ntp_server: NtpResponder) -> None:
    settings = Settings.from_env({"PUNCTUAL_NTP_SERVER": ntp_server.address, "PUNCTUAL_NTP_TIMEOUT_S": "2"})
    offset = measure_offset(settings.ntp_server, settings.ntp_timeout_s)
    assert offset.offset_ms is not None
    assert abs(offset.offset_ms - 2_500) <= OFFSET_TOLERANCE_MS


@pytest.fixture
def requested_timeouts(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The timeout of every request measure_offset makes of ntplib (which then really asks the server)."""

    asked: list[float] = []
    request = ntplib.NTPClient.request

    def spy(self: ntplib.NTPClient, *args: object, **kwargs: object) -> object:
        asked.append(kwargs["timeout"])  # type: ignore[arg-type]
        return request(self, *args, **kwargs)

    monkeypatch.setattr(ntplib.NTPClient, "request", spy)
    return asked


@pytest.mark.timeout(30)
def test_unreachable_server_gives_no_offset_within_the_timeout(requested_timeouts: list[float]) -> None:
    # Given a port nothing listens on
    address = f"127.0.0.1:{closed_port()}"
    # When the offset is measured with a 0.3 s timeout
    offset = measure_offset(address, timeout_s=0.3)
    # Then it is unknown and says why, after one request bounded by that timeout
    assert offset.offset_ms is None
    assert not offset.corrected
    assert offset.error
    assert requested_timeouts == [0.3]


@pytest.mark.timeout(30)
def test_silent_server_gives_no_offset_within_the_timeout(
    silent_server: NtpResponder, requested_timeouts: list[float]
) -> None:
    # Given a server that reads requests and never answers
    # When the offset is measured with a 0.3 s timeout
    started = time.monotonic()
    offset = measure_offset(silent_server.address, timeout_s=0.3)
    # Then it is unknown and says why, after one request bounded by that timeout, which it waited out
    assert offset.offset_ms is None
    assert offset.error
    assert requested_timeouts == [0.3]
    assert time.monotonic() - started >= 0.3 - 0.01


@pytest.mark.parametrize("server", [None, ""])
def test_no_server_configured(server: str | None) -> None:
    offset = measure_offset(server, timeout_s=0.5)
    assert offset == ClockOffset(None, None, "no NTP server configured")


def test_offset_probe_current_never_blocks(silent_server: NtpResponder) -> None:
    # Given a probe against a server that never answers, with a timeout far longer than this test can take
    probe = OffsetProbe(silent_server.address, timeout_s=60.0)
    # When the offset is read at once
    current = probe.current()
    # Then the reader gets "unknown": it did not wait for the measurement (which cannot be over yet)
    assert current.offset_ms is None
    assert current.error == "not measured yet"


def test_offset_probe_says_why_once_its_measurement_timed_out(silent_server: NtpResponder) -> None:
    # Given a probe against a server that never answers, with a 0.3 s timeout
    probe = OffsetProbe(silent_server.address, timeout_s=0.3)
    # When its measurement has timed out / Then the result says why
    final = probe.wait(timeout=30)
    assert final.offset_ms is None
    assert final.error
    assert final.error != "not measured yet"


def test_offset_probe_publishes_the_measured_offset(ntp_server: NtpResponder) -> None:
    probe = OffsetProbe(ntp_server.address, timeout_s=2.0)
    result = probe.wait(timeout=5)
    assert result.offset_ms is not None
    assert abs(result.offset_ms - 2_500) <= OFFSET_TOLERANCE_MS
    assert probe.current() == result


def test_offset_probe_is_measured_once_per_server(ntp_server: NtpResponder) -> None:
    # Given the process-wide probe asked for twice
    first = offset_probe(ntp_server.address, 2.0)
    second = offset_probe(ntp_server.address, 2.0)
    first.wait(timeout=5)
    # Then it is one probe, and the server saw one request
    assert first is second
    assert ntp_server.requests == 1


def test_system_clock() -> None:
    clock = SystemClock()
    before = time.time_ns() / 1e6
    wall = clock.wall_ms()
    assert before <= wall <= time.time_ns() / 1e6
    before = clock.monotonic()
    clock.sleep(0.01)
    clock.sleep(-1)  # a negative sleep returns at once
    assert clock.monotonic() >= before + 0.01
