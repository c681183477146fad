"""A loopback HTTP target that observes fires: what an ``http`` action reaches in tests, demos and load tests.

:class:`TargetServer` listens on ``127.0.0.1`` (a free port by default) and records every POST it receives:
the ``Idempotency-Key`` header, the body, and the wall-clock receive time in ms, taken as soon as the request
line and headers are read. It answers 200, or 500 for keys it was told to reject (a poison task: always, or
only for the first N attempts). The records feed :func:`punctual_tools.checker.fires_from_target`::

    with TargetServer() as target:
        client.schedule(due, HttpAction(url=target.url), {"n": 1}, task_id="t-1")
        ...
        verdict = check(expected, fires_from_target(target.records()))

Another process can read the records with ``GET /records`` (a JSON list), or from the JSON-lines file given
as ``record_path`` (one line per request, appended as it arrives).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Received:
    """One POST the target received, and what it answered."""

    key: str | None
    task_id: str | None
    due_ms: int | None
    body: Any
    received_ms: float
    status: int
    path: str


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # listen backlog: socketserver's 5 drops a burst's connects (a 1 s SYN retry)
    target: TargetServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # http.server's naming
        received_ms = time.time_ns() / 1_000_000
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        key = self.headers.get("Idempotency-Key")
        due = self.headers.get("X-Punctual-Due-Ms")
        status = self.server.target._answer(key)  # noqa: SLF001 - the handler belongs to the server
        self.server.target._record(  # noqa: SLF001 - the handler belongs to the server
            Received(
                key=key,
                task_id=self.headers.get("X-Punctual-Task-Id"),
                due_ms=int(due) if due and due.lstrip("-").isdigit() else None,
                body=body,
                received_ms=received_ms,
                status=status,
                path=self.path,
            )
        )
        self._reply(status, {"ok": status < HTTPStatus.BAD_REQUEST, "key": key})

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/records":
            self._reply(200, [asdict(r) for r in self.server.target.records()])
        elif self.path.rstrip("/") in ("", "/health"):
            self._reply(200, {"ok": True})
        else:
            self._reply(404, {"ok": False})

    def _reply(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: the records are the log
        return


class TargetServer:
    """Records every POST on ``127.0.0.1:<port>``; start with :meth:`start` or use it as a context manager.

    Parameters
    ----------
    port:
        0 picks a free port (see :attr:`port` once started).
    record_path:
        Also append each record to this JSON-lines file.
    """

    def __init__(self, port: int = 0, record_path: Path | str | None = None) -> None:
        self._requested_port = port
        self._record_path = Path(record_path) if record_path else None
        self._lock = threading.Condition()
        self._records: list[Received] = []
        self._fail: dict[str, int | None] = {}  # key -> failures left (None: always)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._fd: int | None = None

    # -- life cycle --------------------------------------------------------------------------------------
    def start(self) -> TargetServer:
        server = _Server((LOOPBACK, self._requested_port), _Handler)
        server.target = self
        if self._record_path is not None:
            self._fd = os.open(self._record_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="target", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (requests being handled finish in their daemon threads)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._server = None

    def __enter__(self) -> TargetServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the target is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The URL to give an ``HttpAction``."""
        return f"http://{LOOPBACK}:{self.port}/fire"

    # -- behaviour ---------------------------------------------------------------------------------------
    def fail(self, keys: Iterable[str], times: int | None = None) -> None:
        """Answer 500 to these idempotency keys: always (``times=None``, a poison task), or for the first
        ``times`` requests of each, then 200."""
        with self._lock:
            for key in keys:
                self._fail[key] = times

    def _answer(self, key: str | None) -> int:
        with self._lock:
            if key is None or key not in self._fail:
                return 200
            left = self._fail[key]
            if left is None:
                return 500
            if left <= 0:
                return 200
            self._fail[key] = left - 1
            return 500

    def _record(self, received: Received) -> None:
        with self._lock:
            self._records.append(received)
            if self._fd is not None:
                os.write(self._fd, (json.dumps(asdict(received), separators=(",", ":")) + "\n").encode())
            self._lock.notify_all()

    # -- what was seen -----------------------------------------------------------------------------------
    def records(self) -> list[Received]:
        """Every request so far, in arrival order."""
        with self._lock:
            return list(self._records)

    def counts(self) -> Counter[str | None]:
        """Requests per idempotency key."""
        with self._lock:
            return Counter(r.key for r in self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def wait_for(self, condition: Callable[[list[Received]], bool], timeout: float) -> bool:
        """Wait until ``condition(records)`` holds (checked on every new request) or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not condition(self._records):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._lock.wait(remaining)
            return True

    def wait_for_keys(self, keys: Iterable[str], timeout: float) -> bool:
        """Wait until every one of ``keys`` has been received at least once."""
        missing = set(keys)
        seen = 0

        def arrived(records: list[Received]) -> bool:
            nonlocal seen
            for record in records[seen:]:  # only the new ones: cheap for a load test's thousands of keys
                missing.discard(record.key)
            seen = len(records)
            return not missing

        return self.wait_for(arrived, timeout)
