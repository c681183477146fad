"""Stand-ins for what surrounds the runtime: an HTTP target, Lambda's async invoke and context, EventBridge's
scheduled event, the clocks and the NTP probe; and the store's ports in memory (:mod:`.memory`).

One set, shared by the tests (``tests/support.py`` re-exports them) and the cost model's moto run, so that a
fix to a stand-in reaches both. Tooling only: nothing in the ``punctual`` package (the Lambda layer) may
import this module.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import Message
from socketserver import BaseServer
from typing import Any, TypeVar

from punctual.domain.clock import ClockOffset, SystemClock
from punctual.domain.events import BatchEvent

S = TypeVar("S", bound=BaseServer)

ACCOUNT = "123456789012"
REGION = "us-east-1"


# -- clocks ------------------------------------------------------------------------------------------------
class FakeClock:
    """A clock that only moves when told to; ``sleep`` advances it instead of waiting.

    For code that reads the time but must not wait on it (the client, the poller, decisions at an exact
    millisecond). Not for the executor's dispatcher, which spins on the monotonic clock until a deadline:
    give it a :class:`ShiftedClock`.
    """

    def __init__(self, wall_ms: float = 1_700_000_000_000.0, monotonic: float = 1_000.0) -> None:
        self._wall_ms = wall_ms
        self._monotonic = monotonic

    def wall_ms(self) -> float:
        return self._wall_ms

    def monotonic(self) -> float:
        return self._monotonic

    def sleep(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))

    def advance(self, seconds: float) -> None:
        self._wall_ms += seconds * 1000.0
        self._monotonic += seconds


class ShiftedClock(SystemClock):
    """The machine's clocks with the wall clock moved by ``shift_ms`` (which may be changed at any time).

    Unlike :class:`FakeClock`, time really passes: sleeping sleeps and the monotonic clock is the machine's,
    so the executor's dispatcher waits and fires as it does in Lambda, only at a replayed wall-clock instant
    (the cost model moves it to a batch's last due instant so that the batch fires as one burst).
    """

    def __init__(self, shift_ms: float = 0.0) -> None:
        self.shift_ms = shift_ms

    def wall_ms(self) -> float:
        return super().wall_ms() + self.shift_ms


class FixedOffset:
    """An NTP offset probe that has already measured ``offset_ms`` (None: unknown, drift stays uncorrected)."""

    def __init__(self, offset_ms: float | None) -> None:
        self._offset = ClockOffset(offset_ms, "stub" if offset_ms is not None else None)

    def current(self) -> ClockOffset:
        return self._offset


# -- Lambda and EventBridge ----------------------------------------------------------------------------------
class RecordingInvoker:
    """Stands in for Lambda's async invoke: keeps every payload exactly as it was passed (from any thread) and
    runs nothing; raises while ``failing`` is set (an invoke that is throttled)."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self.failing = False
        self._lock = threading.Lock()

    def invoke_async(self, payload: dict[str, Any]) -> None:
        if self.failing:
            raise RuntimeError("throttled")
        with self._lock:
            self.payloads.append(payload)

    def take(self) -> list[dict[str, Any]]:
        """The payloads kept so far, which are forgotten (the next call returns only newer ones)."""
        with self._lock:
            taken, self.payloads = self.payloads, []
        return taken

    @property
    def events(self) -> list[BatchEvent]:
        """The payloads as batch events (each must validate as one)."""
        return [BatchEvent.model_validate(p) for p in self.payloads]

    @property
    def task_ids(self) -> list[str]:
        """The ids of the tasks in every batch, in the order they were sent."""
        return [t.task_id for e in self.events for t in e.tasks]


@dataclass
class LambdaContext:
    """The parts of Lambda's context object that the handlers and Powertools read."""

    function_name: str
    memory_limit_in_mb: int = 1024
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


def scheduled_event() -> dict[str, Any]:
    """What EventBridge delivers for the poller's ``rate(1 minute)`` rule (at the start of this minute)."""
    minute = datetime.now(UTC).replace(second=0, microsecond=0)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": minute.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [f"arn:aws:events:{REGION}:{ACCOUNT}:rule/punctual-PollerFunctionEveryMinute-1A2B3C4D5E6F"],
        "detail": {},
    }


# -- an HTTP target ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def serving(server: S) -> Iterator[S]:
    """Serve ``server`` (an ``http.server`` one, bound already) on a daemon thread; shut it down afterwards."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class StubTarget(http.server.ThreadingHTTPServer):
    """An HTTP target on a free loopback port (serve it with :func:`serving`): every POST gets the status that
    :meth:`answer` gives, and an empty body. By default that is ``status`` (500); subclasses answer otherwise,
    and keep what they need of each request (under ``lock``: requests arrive on threads of their own)."""

    request_queue_size = 1024  # a burst of fires (a batch of 250 at once) must not meet a full listen backlog

    def __init__(self, status: int = 500) -> None:
        self.lock = threading.Lock()
        self.status = status
        super().__init__(("127.0.0.1", 0), _StubHandler)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"

    def answer(self, path: str, headers: Message, body: bytes) -> int:
        return self.status


class _StubHandler(http.server.BaseHTTPRequestHandler):
    server: StubTarget

    def do_POST(self) -> None:  # the http.server naming
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(self.server.answer(self.path, self.headers, body))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        pass
