"""The console's HTTP server: Werkzeug's threaded server on a daemon thread, on loopback unless told otherwise."""

from __future__ import annotations

import ipaddress
import threading
from types import TracebackType
from typing import Self

from flask import Flask
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

STOP_TIMEOUT_S = 10
FIRST_ERROR_STATUS = 400


class QuietRequestHandler(WSGIRequestHandler):
    """Werkzeug's handler, logging only the requests that failed (the Now page asks for its figures every 2 s)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if str(code).isdigit() and int(code) >= FIRST_ERROR_STATUS:
            super().log_request(code, size)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ConsoleServer:
    """Serves ``app`` on ``host``:``port`` (0: a free port) from :meth:`start` to :meth:`stop`, or as a context
    manager. A host other than loopback is refused unless ``allow_remote``: the console's token travels in clear
    HTTP."""

    def __init__(self, app: Flask, host: str = "127.0.0.1", port: int = 0, *, allow_remote: bool = False) -> None:
        if not allow_remote and not is_loopback(host):
            raise ValueError(f"the console serves loopback only, not {host!r} (allow_remote=True to serve it)")
        self.app = app
        self.host = host
        self.port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The console's address (its port is known once started)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("the console server is already running")
        self._server = make_server(self.host, self.port, self.app, threaded=True, request_handler=QuietRequestHandler)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="punctual-console", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(STOP_TIMEOUT_S)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
