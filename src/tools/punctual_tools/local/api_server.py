"""The REST API on loopback: the same resolver as the API Lambda (:mod:`punctual.api`), behind bearer tokens.

API Gateway authenticates a caller (SigV4) and hands the Lambda a proxy event; here :class:`LocalApi` does both:
it checks ``Authorization: Bearer <token>`` against its tokens (each names a tenant), turns the request into the
same REST proxy event, with the tenant as the authorizer's, and answers what the resolver answers. It listens on
127.0.0.1 only. ``punctual up`` writes one token per tenant it serves: ``<home>/api-token`` for the tenant
``local``, ``<home>/tokens/<tenant>`` for each other (mode 0600).

What a caller cannot make it do:

- **Read a body for nobody.** The token, ``Content-Length`` and ``Transfer-Encoding`` are checked on the headers;
  a refused request (401, 411, 413, 400) is answered without its body being read, and its connection closed.
- **Hold a thread by being slow.** Each request has ``timeout_s`` (default 10 s), from the end of the previous
  answer, to arrive whole: waiting for it, its headers and its body. Past it the connection is closed without
  an answer. At most ``max_connections`` (default 64) are served at once; past it a new connection gets a 503
  problem at once and is closed.
- **Hold the other requests with a slow one.** With ``workers`` > 0 requests are resolved in that many worker
  processes, each with its own resolver; with 0 (tests), in this process one at a time (see :class:`LocalApi`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hmac
import io
import logging
import multiprocessing
import os
import pickle
import queue
import secrets
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from punctual.api.app import PROBLEM, problem_json
from punctual.config.settings import Settings
from punctual.executing.priority import lower_current_thread, set_background_cpus
from punctual_tools.iam import check_client, check_enabled, install_iam_check
from punctual_tools.local.store_latency import with_store_latency

log = logging.getLogger("punctual_tools.local.api")
API_FUNCTION = "ApiFunction"  # the template's function the local API stands for (its role, with the IAM check)
MAX_BODY = 1024 * 1024  # API Gateway takes 10 MB; a task's item holds at most 400 KB
LOCAL_TENANT = "local"
READ_TIMEOUT_S = 10.0  # a request's time to arrive whole: the wait for it, its headers and its body
MAX_CONNECTIONS = 64  # connections served at once, each by a thread of its own
LINGER_S = 1.0  # after refusing a request whose body was not read: how long its rest is read and dropped
LINGER_BYTES = 4 * MAX_BODY  # ... and how much of it at most


def proxy_event(
    method: str, target: str, headers: dict[str, str], body: bytes | None, tenant: str | None
) -> dict[str, Any]:
    """The API Gateway REST proxy event of a request (``target``: path and query, as on the request line)."""
    split = urlsplit(target)
    query = parse_qs(split.query, keep_blank_values=True)
    return {
        "resource": "/{proxy+}",
        "path": unquote(split.path),
        "httpMethod": method,
        "headers": dict(headers),
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "stage": "local",
            "httpMethod": method,
            "path": split.path,
            "identity": {"sourceIp": "127.0.0.1", "userArn": None},
            "authorizer": {"tenant": tenant} if tenant else None,
        },
        "body": None if body is None else body.decode("utf-8", errors="replace"),
        "isBase64Encoded": False,
    }


class Answer(NamedTuple):
    """What the server sends back. ``close``: the connection ends after it (the request's body, if it had one,
    was not read, so the connection cannot carry another request)."""

    status: int
    headers: dict[str, str]
    body: bytes
    close: bool = False


def problem(status: int, detail: str, *, close: bool = False) -> Answer:
    """The server's own answer (before the resolver: authentication, size), in the API's problem format."""
    return Answer(status, {"Content-Type": PROBLEM}, problem_json(status, detail).encode(), close)


# -- resolving ------------------------------------------------------------------------------------------------
class _Resolving(Protocol):
    def resolve(self, event: dict[str, Any]) -> dict[str, Any]: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...


class _InProcess:
    """The resolver in this process, one request at a time: Powertools keeps the request being answered in a
    class attribute (``BaseRouter.current_event``), shared by every resolver of the process, so two requests
    resolved at once could each be answered from the other's body."""

    def __init__(self, resolver_factory: Callable[[], Any]) -> None:
        self._resolver = resolver_factory()
        self._lock = threading.Lock()

    def resolve(self, event: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            return dict(self._resolver.resolve(event, None))

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


_worker_resolver: Any = None  # in a worker process: the resolver its initializer built
_in_worker = False  # a worker process: the IAM check, if on, was installed process-wide by its initializer


def _start_worker(resolver_factory: Callable[[], Any], background_cpus: str | None, iam_check: bool = False) -> None:
    """A worker process's initializer: background work (as the handler threads), deaf to Ctrl-C (the stack
    stops it), with a resolver of its own. ``iam_check``: every client the resolver builds obeys the API
    function's role (:func:`punctual_tools.iam.install_iam_check`), installed before the resolver is built."""
    global _worker_resolver, _in_worker
    _in_worker = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_background_cpus(background_cpus)
    lower_current_thread()
    if iam_check:
        install_iam_check(API_FUNCTION, getattr(resolver_factory, "settings", None), force=True)
    _worker_resolver = resolver_factory()


def _resolve_in_worker(event: dict[str, Any]) -> dict[str, Any]:
    return dict(_worker_resolver.resolve(event, None))


def _ready() -> None:
    """A no-op: submitted once per worker at start, so that each is started (and its resolver built) before
    the first request needs it."""


class _WorkerProcesses:
    """Resolvers in ``workers`` processes (forked from the forkserver the executors' workers come from), one
    request at a time each: a slow request holds one of them, not the API. The event and the answer are plain
    dicts, sent by pickle. A pool broken by a dead worker is replaced (its requests answered 500)."""

    def __init__(self, resolver_factory: Callable[[], Any], workers: int, background_cpus: str | None) -> None:
        try:
            pickle.dumps(resolver_factory)
        except Exception as exc:  # pickle raises several kinds; all mean the same here
            raise TypeError(
                f"worker processes need a resolver factory that pickles (a top-level class or "
                f"function, not a lambda): {resolver_factory!r}"
            ) from exc
        self._factory = resolver_factory
        self._workers = workers
        self._background_cpus = background_cpus
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        pool = concurrent.futures.ProcessPoolExecutor(
            self._workers,
            mp_context=multiprocessing.get_context("forkserver"),
            initializer=_start_worker,
            initargs=(self._factory, self._background_cpus, check_enabled()),
        )
        for _ in range(self._workers):  # each submit starts a worker while none is idle
            pool.submit(_ready).add_done_callback(_report_start_failure)
        return pool

    def start(self) -> None:
        # From the caller's thread (not a lowered handler's): the forkserver, if this starts it, and with it
        # every process forked from it (the executors' too) keep the caller's priority.
        with self._lock:
            self._pool = self._new_pool()

    def resolve(self, event: dict[str, Any]) -> dict[str, Any]:
        pool = self._pool
        if pool is None:
            raise RuntimeError("the API's worker processes are not running")
        try:
            return pool.submit(_resolve_in_worker, event).result()
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    log.warning("an API worker process died: starting new ones")
                    self._pool = self._new_pool()
            pool.shutdown(wait=False, cancel_futures=True)
            raise

    def stop(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _report_start_failure(future: concurrent.futures.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("an API worker process did not start: %s", future.exception())


@dataclass(frozen=True)
class ApiResolverFactory:
    """Builds the API's resolver over the table of ``settings`` (:func:`punctual.runtime.wiring.build_api`, with its
    own DynamoDB client, as far from the store as ``settings.store_latency`` says). A worker process calls it:
    unlike a lambda it pickles. With ``PUNCTUAL_IAM_CHECK=1`` the client obeys the API function's role (in a
    worker process, the check installed there already watches it)."""

    settings: Settings

    def __call__(self) -> Any:
        from punctual.config.clients import make_dynamodb_client
        from punctual.runtime.wiring import build_api

        client = with_store_latency(make_dynamodb_client(self.settings), self.settings)
        if not _in_worker:
            check_client(client, API_FUNCTION, self.settings)
        return build_api(self.settings, client)


# -- the wire -------------------------------------------------------------------------------------------------
class _DeadlineReader(io.RawIOBase):
    """A connection's reading side, bounded by its handler's deadline: each ``recv`` waits at most until then
    (a trickle of bytes does not reset the clock, as a plain socket timeout would), past it ``TimeoutError``."""

    def __init__(self, sock: socket.socket, deadline: Callable[[], float]) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self._deadline() - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request did not arrive in time")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


def _drain(sock: socket.socket, seconds: float, limit: int) -> None:
    """Read and drop what the peer still sends, until it closes, ``seconds`` pass or ``limit`` bytes came: a
    connection closed with unread input is reset, and a reset can make the peer lose the answer it was sent."""
    deadline = time.monotonic() + seconds
    dropped = 0
    try:
        while dropped < limit and (remaining := deadline - time.monotonic()) > 0:
            sock.settimeout(remaining)
            data = sock.recv(65536)
            if not data:
                return
            dropped += len(data)
    except OSError:
        return


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api: LocalApi  # set by LocalApi on its own subclass, with ``timeout`` (the socket's, for writing answers)
    timeout: ClassVar[float] = READ_TIMEOUT_S
    _deadline = 0.0

    def setup(self) -> None:
        lower_current_thread()  # serving the API is background work: firing comes first
        super().setup()
        self.rfile.close()  # the socket's own reader: replaced by one that keeps the deadline
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, lambda: self._deadline))

    def handle_one_request(self) -> None:
        self._deadline = time.monotonic() + self.timeout
        try:
            super().handle_one_request()  # a TimeoutError closes the connection there, unanswered
        except ConnectionError:
            self.close_connection = True
            log.debug("%s left in the middle of a request", self.address_string())

    def handle_expect_100(self) -> bool:
        # "Expect: 100-continue" asks whether to send the body: a request its headers refuse gets its answer
        # instead (http.server would say "continue" to any)
        if self.api.refusal(dict(self.headers.items())) is not None:
            self._answer()
            return False
        return super().handle_expect_100()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s " + format, self.address_string(), *args)

    def _answer(self) -> None:
        answer = self.api.handle(self.command, self.path, dict(self.headers.items()), self.rfile)
        self.connection.settimeout(self.timeout)  # the answer has a timeout of its own to go out
        try:
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.body)))
            if answer.close:
                self.send_header("Connection", "close")  # sets close_connection
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(answer.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            log.debug("%s left before its answer", self.address_string())  # what it asked was done
            return
        if answer.close and (
            self.headers.get("Content-Length", "0").strip() not in ("", "0") or "Transfer-Encoding" in self.headers
        ):
            with contextlib.suppress(OSError):  # the answer is complete: the caller reads it to its end
                self.connection.shutdown(socket.SHUT_WR)
                _drain(self.connection, LINGER_S, LINGER_BYTES)

    def __getattr__(self, name: str) -> Any:
        # every method reaches the resolver (which answers a problem for one it does not route), as every
        # method reaches API Gateway: none is left to http.server's HTML 501
        if name.startswith("do_"):
            return self._answer
        raise AttributeError(name)


def _busy_answer(max_connections: int) -> bytes:
    body = problem_json(503, f"the local API serves {max_connections} connections at once; try again").encode()
    return (
        f"HTTP/1.1 503 {HTTPStatus(503).phrase}\r\nContent-Type: {PROBLEM}\r\nContent-Length: {len(body)}\r\n"
        f"Retry-After: 1\r\nConnection: close\r\n\r\n"
    ).encode() + body


class _Server(ThreadingHTTPServer):
    """A thread per connection, up to ``max_connections``; past them a connection is handed to one refusing
    thread, which answers it 503 and closes it (or, when even that one is behind, closed at once)."""

    request_queue_size = 128  # connections waiting to be accepted (socketserver's default is 5): a client's pool
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler], max_connections: int) -> None:
        self._slots = threading.BoundedSemaphore(max_connections)
        self._busy = _busy_answer(max_connections)
        self._refused: queue.Queue[socket.socket | None] = queue.Queue(maxsize=max_connections)
        self._refuser = threading.Thread(target=self._refuse_loop, name="local-api-refuse", daemon=True)
        super().__init__(address, handler)  # last: a failed bind calls server_close, which needs the above

    def start_refusing(self) -> None:
        self._refuser.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        if self._slots.acquire(blocking=False):
            try:
                super().process_request(request, client_address)
            except BaseException:
                self._slots.release()
                raise
            return
        try:
            self._refused.put_nowait(request)
        except queue.Full:
            self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse_loop(self) -> None:
        lower_current_thread()
        while (sock := self._refused.get()) is not None:
            try:
                sock.settimeout(LINGER_S)
                sock.sendall(self._busy)
                sock.shutdown(socket.SHUT_WR)
                _drain(sock, LINGER_S, LINGER_BYTES)
            except OSError:
                pass
            finally:
                sock.close()

    def server_close(self) -> None:
        super().server_close()
        if self._refuser.is_alive():
            while True:
                try:
                    self._refused.put_nowait(None)
                    break
                except queue.Full:
                    time.sleep(0.05)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("the local API failed on a connection from %s", client_address)


class LocalApi:
    """Serve the resolver ``resolver_factory()`` builds on ``127.0.0.1:port`` (0: any free port). ``tokens`` maps
    bearer tokens to tenants.

    ``workers`` > 0: requests are resolved in that many worker processes (``resolver_factory`` must then pickle:
    :class:`ApiResolverFactory`); ``background_cpus`` is where those run (``LocalSettings.background_cpus``).
    ``workers`` = 0: in this process, one request at a time (Powertools keeps the request being answered in a
    class attribute, ``BaseRouter.current_event``, shared by every resolver of the process). Either way,
    connections are served in parallel (read and written), within ``timeout_s`` and ``max_connections`` (the
    module's docstring says how)."""

    def __init__(
        self,
        resolver_factory: Callable[[], Any],
        tokens: dict[str, str],
        port: int = 0,
        *,
        workers: int = 0,
        background_cpus: str | None = None,
        timeout_s: float = READ_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        if timeout_s <= 0 or max_connections < 1 or workers < 0:
            raise ValueError("timeout_s > 0, max_connections >= 1 and workers >= 0, please")
        self._resolver: _Resolving = (
            _WorkerProcesses(resolver_factory, workers, background_cpus) if workers else _InProcess(resolver_factory)
        )
        self._tokens = dict(tokens)
        handler = type("Handler", (_Handler,), {"api": self, "timeout": timeout_s})
        self._server = _Server(("127.0.0.1", port), handler, max_connections)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add_token(self, tenant: str, token: str | None = None) -> str:
        """A new token for ``tenant`` (given, or a random one); returns it."""
        token = token or secrets.token_urlsafe(32)
        self._tokens[token] = tenant
        return token

    def tenant_of(self, authorization: str | None) -> str | None:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        found = None
        for known, tenant in self._tokens.items():  # every token compared, in constant time each
            if hmac.compare_digest(known.encode(), token.strip().encode()):
                found = tenant
        return found

    def refusal(self, headers: dict[str, str]) -> Answer | None:
        """The answer to a request its headers alone refuse (no known token, no body length, a body too
        large), which closes the connection; ``None`` for a request to read on."""
        lowered = {k.lower(): v for k, v in headers.items()}
        if self.tenant_of(lowered.get("authorization")) is None:
            return problem(
                401,
                "give the local API's token: Authorization: Bearer <token> (punctual up wrote it "
                "to .punctual/api-token, and another tenant's to .punctual/tokens/<tenant>)",
                close=True,
            )
        if "transfer-encoding" in lowered:
            return problem(411, "give the body's length in Content-Length (no Transfer-Encoding)", close=True)
        announced = (lowered.get("content-length") or "0").strip()
        if not announced.isascii() or not announced.isdigit():
            return problem(400, "bad Content-Length", close=True)
        if int(announced) > MAX_BODY:
            return problem(413, f"the body is larger than {MAX_BODY} bytes", close=True)
        return None

    def handle(self, method: str, target: str, headers: dict[str, str], body_stream: Any) -> Answer:
        """Answer one request. Its body is read from ``body_stream`` only once its headers are found good
        (:meth:`refusal`); a body that ends early raises ``ConnectionAbortedError``."""
        refused = self.refusal(headers)
        if refused is not None:
            return refused
        lowered = {k.lower(): v for k, v in headers.items()}
        tenant = self.tenant_of(lowered.get("authorization"))
        length = int((lowered.get("content-length") or "0").strip())
        body = body_stream.read(length) if length > 0 else None
        if body is not None and len(body) < length:
            raise ConnectionAbortedError("the caller closed the connection before its body ended")
        forwarded = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        event = proxy_event(method, target, forwarded, body, tenant)
        try:
            response = self._resolver.resolve(event)
        except Exception:  # the caller gets an answer (API Gateway's would be a 502), the log the cause
            log.exception("the API failed on %s %s", method, urlsplit(target).path)
            return problem(500, "the API failed on this request; the local stack's log has the cause")
        out_headers = {k: str(v) for k, v in (response.get("headers") or {}).items()}
        for name, values in (response.get("multiValueHeaders") or {}).items():
            if values:
                out_headers[name] = str(values[-1])
        text = response.get("body") or ""
        return Answer(int(response["statusCode"]), out_headers, text.encode() if isinstance(text, str) else text)

    def start(self) -> LocalApi:
        self._resolver.start()
        self._server.start_refusing()
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._resolver.stop()

    def __enter__(self) -> LocalApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as a file only this user can read (0600, whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)  # a file that was there keeps its mode through O_CREAT
        out.write(text)


def write_token(path: Path, token: str) -> None:
    """Write ``token`` where only this user can read it (the file 0600; a folder it needs made 0700)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(path, token + "\n")
