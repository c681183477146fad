"""The REST API on loopback: the same resolver as the API Lambda (:mod:`punctual.api`), behind bearer tokens.

API Gateway authenticates a caller (SigV4) and hands the Lambda a proxy event; here :class:`LocalApi` does both:
it checks ``Authorization: Bearer <token>`` against its tokens (each names a tenant), turns the request into the
same REST proxy event, with the tenant as the authorizer's, and answers what the resolver answers. It listens on
127.0.0.1 only. ``punctual up`` writes one token per tenant it serves: ``<home>/api-token`` for the tenant
``local``, ``<home>/tokens/<tenant>`` for each other (mode 0600).

How a connection is served: one thread, the gate, holds every connection that has not shown a token yet, in a
selector loop (a waiting socket costs a file descriptor, no thread). It reads a new connection's request line
and headers as they come; once they are whole it checks them (:meth:`LocalApi.refusal`), and only a request
with a known token takes one of the ``max_connections`` (default 64) serving slots: a thread of its own, which
serves that connection's requests from then on. The gate answers every refusal itself (401, 400, 411, 413, and
503 when no slot is free) without blocking: the answer is written as the socket takes it, then what the peer
still sends is read and dropped, for at most ``LINGER_S`` (closing with unread input would reset the
connection, and a reset can lose the answer), all of it interleaved with every other connection's.

What a caller cannot make it do:

- **Hold a slot without a token.** A new connection has ``header_timeout_s`` (default 2 s, at most
  ``timeout_s``) to send its request line and headers, however it trickles them; past it it is closed without
  an answer. Requests on a connection that showed a token have ``timeout_s`` (default 10 s) each, from the end
  of the previous answer, to arrive whole (headers and body).
- **Crowd out the others by opening many connections.** At most ``pending_per_address`` connections of one
  client address (default 256), and ``PENDING_TOTAL`` in all, wait at the gate (for their headers, or to be
  closed after a refusal); one more closes the one that has waited longest. Every loopback caller is
  127.0.0.1, so the cap is set far above a client's connection pool (a pool's connections wait at the gate
  only until their first request's headers arrive, milliseconds): a flood pushes out its own oldest sockets,
  while a caller's request, whose headers come at once, is read on the gate's next turn.
- **Read a body for nobody.** The token, ``Content-Length`` and ``Transfer-Encoding`` are checked on the headers;
  a refused request (401; 400 for a bad or repeated ``Content-Length``; 411, 413) is answered without its body
  being read, and its connection closed.
- **Hold the other requests with a slow one.** With ``workers`` > 0 requests are resolved in that many worker
  processes, each with its own resolver; with 0 (tests), in this process one at a time (see :class:`LocalApi`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hmac
import http.client
import io
import logging
import multiprocessing
import os
import pickle
import re
import secrets
import selectors
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from punctual.api.problems import PROBLEM, problem_json
from punctual.config.clients import make_dynamodb_client
from punctual.config.settings import Settings
from punctual.executing.priority import lower_current_thread, set_background_cpus
from punctual.runtime.wiring import build_api
from punctual.scheduling.bulk import BATCH_MAX_BYTES
from punctual_tools.iam import check_client, check_enabled, install_iam_check
from punctual_tools.local.store_latency import with_store_latency

log = logging.getLogger("punctual_tools.local.api")
API_FUNCTION = "ApiFunction"  # the template's function the local API stands for (its role, with the IAM check)
# API Gateway takes 10 MB, Lambda's event 6 MB; the API itself takes at most a batch's BATCH_MAX_BYTES (one task's
# item holds at most 400 KB). A little more passes the gate, so that the API's own 413 names the field, as in AWS.
MAX_BODY = BATCH_MAX_BYTES + 64 * 1024
LOCAL_TENANT = "local"
READ_TIMEOUT_S = 10.0  # a request's time to arrive whole: the wait for it, its headers and its body
HEADER_TIMEOUT_S = 2.0  # a new connection's time to send its request line and headers (its token with them)
MAX_HEAD = 64 * 1024  # a request line and its headers
MAX_CONNECTIONS = 64  # connections served at once (their token checked), each by a thread of its own
PENDING_PER_ADDRESS = 256  # connections of one client address waiting at the gate
PENDING_TOTAL = 1024  # connections waiting at the gate, from every address
LISTEN_BACKLOG = 128  # connections waiting to be accepted (a client's pool opening at once)
LINGER_S = 1.0  # after refusing a request whose body was not read: how long its rest is read and dropped
LINGER_BYTES = 4 * MAX_BODY  # ... and how much of it at most
SWEEP_S = 0.05  # how often the gate closes the connections past their time


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
    global _worker_resolver, _in_worker  # noqa: PLW0603  a worker process's own, set once by its initializer
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
        client = with_store_latency(make_dynamodb_client(self.settings), self.settings)
        if not _in_worker:
            check_client(client, API_FUNCTION, self.settings)
        return build_api(self.settings, client)


# -- the wire -------------------------------------------------------------------------------------------------
class _DeadlineReader(io.RawIOBase):
    """A connection's reading side, bounded by its handler's deadline: each ``recv`` waits at most until then
    (a trickle of bytes does not reset the clock, as a plain socket timeout would), past it ``TimeoutError``.
    ``received``: what the gate read of it already, read first."""

    def __init__(self, sock: socket.socket, deadline: Callable[[], float], received: bytes = b"") -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline
        self._received = memoryview(received)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._received:
            count = min(len(buffer), len(self._received))
            buffer[:count] = self._received[:count]
            self._received = self._received[count:]
            return count
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
    """Serves one connection whose first request the gate found good (``received``: what the gate read of it)."""

    protocol_version = "HTTP/1.1"
    api: LocalApi  # set by LocalApi on its own subclass, with ``timeout`` (the socket's, for writing answers)
    timeout: ClassVar[float] = READ_TIMEOUT_S
    _deadline = 0.0

    def __init__(self, request: socket.socket, client_address: Any, server: Any, received: bytes = b"") -> None:
        self._received = received
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        lower_current_thread()  # serving the API is background work: firing comes first
        super().setup()
        self.rfile.close()  # the socket's own reader: replaced by one that keeps the deadline
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, lambda: self._deadline, self._received))

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
        if self.api.refusal(self.headers.items()) is not None:
            self._answer()
            return False
        return super().handle_expect_100()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s " + format, self.address_string(), *args)

    def _answer(self) -> None:
        answer = self.api.handle(self.command, self.path, self.headers.items(), self.rfile)
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


def _answer_bytes(answer: Answer, method: str) -> bytes:
    """A refusal as the gate sends it: the whole answer, the connection closed after it."""
    head = [f"HTTP/1.1 {answer.status} {HTTPStatus(answer.status).phrase}"]
    head += [f"{name}: {value}" for name, value in answer.headers.items()]
    head += [f"Content-Length: {len(answer.body)}", "Connection: close"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (b"" if method == "HEAD" else answer.body)


def _busy_answer(max_connections: int) -> Answer:
    answer = problem(503, f"the local API serves {max_connections} connections at once; try again", close=True)
    return answer._replace(headers={**answer.headers, "Retry-After": "1"})


_HEAD_END = re.compile(rb"\r?\n\r?\n")


@dataclass(eq=False)
class _Waiting:
    """A connection at the gate: reading its first request's head until ``deadline``, or (``answer`` set)
    sending its refusal and then dropping what it still sends, until ``deadline``."""

    sock: socket.socket
    address: str
    deadline: float
    received: bytearray = field(default_factory=bytearray)
    answer: bytes | None = None
    dropped: int = 0


class _Server:
    """The listening socket, the gate (see the module's docstring) and the serving threads."""

    def __init__(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
        self,
        address: tuple[str, int],
        handler: type[_Handler],
        refusal: Callable[[Iterable[tuple[str, str]]], Answer | None],
        *,
        max_connections: int,
        header_timeout_s: float,
        pending_per_address: int,
    ) -> None:
        self._listener = socket.create_server(address, backlog=LISTEN_BACKLOG)
        self._listener.setblocking(False)
        self.server_address: tuple[str, int] = self._listener.getsockname()
        self._handler = handler
        self._refusal = refusal
        self._slots = threading.BoundedSemaphore(max_connections)
        self._busy = _busy_answer(max_connections)
        self._header_timeout_s = header_timeout_s
        self._pending_per_address = pending_per_address
        self._selector = selectors.DefaultSelector()
        self._wake_in, self._wake_out = socket.socketpair()
        self._waiting: dict[socket.socket, _Waiting] = {}  # oldest first
        self._by_address: dict[str, dict[socket.socket, None]] = {}  # each address's, oldest first
        self._stopping = threading.Event()

    # -- the gate's loop ---------------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_in, selectors.EVENT_READ)
        next_sweep = time.monotonic() + SWEEP_S
        try:
            while not self._stopping.is_set():
                for key, events in self._selector.select(max(0.0, next_sweep - time.monotonic())):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.data is not None:
                        self._step(key.data, events)
                if (now := time.monotonic()) >= next_sweep:
                    for waiting in [w for w in self._waiting.values() if w.deadline <= now]:
                        self._close(waiting)  # headers too late (unanswered), or a refusal's linger done
                    next_sweep = now + SWEEP_S
        finally:
            for waiting in list(self._waiting.values()):
                self._close(waiting)
            self._selector.close()

    def _accept(self) -> None:
        for _ in range(LISTEN_BACKLOG):
            try:
                sock, client_address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors, or the peer gone: the next turn tries again
                log.warning("the local API could not accept a connection: %s", exc)
                return
            sock.setblocking(False)
            waiting = _Waiting(sock, str(client_address[0]), time.monotonic() + self._header_timeout_s)
            same = self._by_address.setdefault(waiting.address, {})
            if len(same) >= self._pending_per_address:
                self._close(self._waiting[next(iter(same))])
            if len(self._waiting) >= PENDING_TOTAL:
                self._close(next(iter(self._waiting.values())))
            self._waiting[sock] = waiting
            self._by_address.setdefault(waiting.address, {})[sock] = None
            self._selector.register(sock, selectors.EVENT_READ, waiting)

    def _step(self, waiting: _Waiting, events: int) -> None:
        if self._waiting.get(waiting.sock) is not waiting:
            return  # closed earlier in this turn (pushed out by a newer connection)
        try:
            if waiting.answer is None:
                self._read_head(waiting)
            else:
                self._refuse_step(waiting, events)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(waiting)

    def _read_head(self, waiting: _Waiting) -> None:
        data = waiting.sock.recv(65536)
        if not data:
            self._close(waiting)
            return
        searched = max(0, len(waiting.received) - 3)  # a head's end may straddle two reads
        waiting.received += data
        end = _HEAD_END.search(waiting.received, searched)
        if end is None:
            if len(waiting.received) > MAX_HEAD:
                self._refuse(waiting, "GET", problem(431, f"the request's headers exceed {MAX_HEAD} bytes"))
            return
        first, _, rest = bytes(waiting.received[: end.end()]).partition(b"\n")
        method = first.split(b" ", 1)[0].decode("latin-1")
        try:
            headers = http.client.parse_headers(io.BytesIO(rest))
        except http.client.HTTPException:
            self._refuse(waiting, method, problem(400, "malformed request headers", close=True))
            return
        refused = self._refusal(headers.items())
        if refused is not None:
            self._refuse(waiting, method, refused)
        elif not self._slots.acquire(blocking=False):
            self._refuse(waiting, method, self._busy)
        else:
            self._forget(waiting)
            try:
                threading.Thread(
                    target=self._serve,
                    args=(waiting.sock, waiting.address, bytes(waiting.received)),
                    name="local-api-connection",
                    daemon=True,
                ).start()
            except RuntimeError as exc:  # no thread to be had: the connection is dropped, the gate goes on
                log.warning("the local API could not serve a connection: %s", exc)
                self._slots.release()
                waiting.sock.close()

    def _refuse(self, waiting: _Waiting, method: str, answer: Answer) -> None:
        waiting.answer = _answer_bytes(answer, method)
        waiting.deadline = time.monotonic() + LINGER_S
        self._selector.modify(waiting.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, waiting)

    def _refuse_step(self, waiting: _Waiting, events: int) -> None:
        if events & selectors.EVENT_WRITE and waiting.answer:
            waiting.answer = waiting.answer[waiting.sock.send(waiting.answer) :]
            if not waiting.answer:
                waiting.sock.shutdown(socket.SHUT_WR)
                self._selector.modify(waiting.sock, selectors.EVENT_READ, waiting)
        if events & selectors.EVENT_READ:
            data = waiting.sock.recv(65536)
            waiting.dropped += len(data)
            if not data or waiting.dropped > LINGER_BYTES:
                self._close(waiting)

    def _forget(self, waiting: _Waiting) -> None:
        self._selector.unregister(waiting.sock)
        del self._waiting[waiting.sock]
        same = self._by_address[waiting.address]
        del same[waiting.sock]
        if not same:
            del self._by_address[waiting.address]

    def _close(self, waiting: _Waiting) -> None:
        self._forget(waiting)
        waiting.sock.close()

    # -- a served connection -----------------------------------------------------------------------------------
    def _serve(self, sock: socket.socket, address: str, received: bytes) -> None:
        try:
            sock.setblocking(True)
            self._handler(sock, (address, 0), self, received)
        except Exception:
            log.exception("the local API failed on a connection from %s", address)
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            sock.close()
            self._slots.release()

    def shutdown(self) -> None:
        """Stop the gate's loop (connections being served finish on their own)."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_out.send(b"x")

    def server_close(self) -> None:
        self._listener.close()
        self._wake_in.close()
        self._wake_out.close()


class LocalApi:
    """Serve the resolver ``resolver_factory()`` builds on ``127.0.0.1:port`` (0: any free port). ``tokens`` maps
    bearer tokens to tenants.

    ``workers`` > 0: requests are resolved in that many worker processes (``resolver_factory`` must then pickle:
    :class:`ApiResolverFactory`); ``background_cpus`` is where those run (``LocalSettings.background_cpus``).
    ``workers`` = 0: in this process, one request at a time (Powertools keeps the request being answered in a
    class attribute, ``BaseRouter.current_event``, shared by every resolver of the process). Either way,
    connections are served in parallel (read and written), within ``header_timeout_s``, ``timeout_s``,
    ``max_connections`` and ``pending_per_address`` (the module's docstring says how)."""

    def __init__(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
        self,
        resolver_factory: Callable[[], Any],
        tokens: dict[str, str],
        port: int = 0,
        *,
        workers: int = 0,
        background_cpus: str | None = None,
        timeout_s: float = READ_TIMEOUT_S,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        pending_per_address: int = PENDING_PER_ADDRESS,
    ) -> None:
        if min(timeout_s, header_timeout_s) <= 0 or min(max_connections, pending_per_address) < 1 or workers < 0:
            raise ValueError(
                "timeout_s and header_timeout_s > 0, max_connections and pending_per_address >= 1, workers >= 0, please"
            )
        self._resolver: _Resolving = (
            _WorkerProcesses(resolver_factory, workers, background_cpus) if workers else _InProcess(resolver_factory)
        )
        self._tokens = dict(tokens)
        handler = type("Handler", (_Handler,), {"api": self, "timeout": timeout_s})
        self._server = _Server(
            ("127.0.0.1", port),
            handler,
            self.refusal,
            max_connections=max_connections,
            header_timeout_s=min(header_timeout_s, timeout_s),
            pending_per_address=pending_per_address,
        )
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

    def refusal(self, headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> Answer | None:
        """The answer to a request its headers alone refuse (no known token, no body length or two, a body too
        large), which closes the connection; ``None`` for a request to read on. ``headers``: as they came, a
        repeated one as often as it came."""
        given = _values(headers)
        tokens = given.get("authorization", [])
        if len(tokens) != 1 or self.tenant_of(tokens[0]) is None:
            return problem(
                401,
                "give the local API's token: Authorization: Bearer <token> (punctual up wrote it "
                "to .punctual/api-token, and another tenant's to .punctual/tokens/<tenant>)",
                close=True,
            )
        if "transfer-encoding" in given:
            return problem(411, "give the body's length in Content-Length (no Transfer-Encoding)", close=True)
        if len(lengths := given.get("content-length", [])) > 1:
            return problem(400, "give Content-Length once", close=True)
        announced = (lengths[0] if lengths else "0").strip() or "0"
        if not announced.isascii() or not announced.isdigit():
            return problem(400, "bad Content-Length", close=True)
        if int(announced) > MAX_BODY:
            return problem(413, f"the body is larger than {MAX_BODY} bytes", close=True)
        return None

    def handle(
        self, method: str, target: str, headers: Mapping[str, str] | Iterable[tuple[str, str]], body_stream: Any
    ) -> Answer:
        """Answer one request. Its body is read from ``body_stream`` only once its headers are found good
        (:meth:`refusal`); a body that ends early raises ``ConnectionAbortedError``."""
        pairs = list(headers.items() if isinstance(headers, Mapping) else headers)
        refused = self.refusal(pairs)
        if refused is not None:
            return refused
        given = _values(pairs)
        tenant = self.tenant_of(given["authorization"][0])
        length = int((given.get("content-length", ["0"])[0]).strip() or "0")
        body = body_stream.read(length) if length > 0 else None
        if body is not None and len(body) < length:
            raise ConnectionAbortedError("the caller closed the connection before its body ended")
        forwarded = {k: v for k, v in pairs if k.lower() != "authorization"}
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
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        if self._thread is not None:
            self._thread.join()
        self._server.server_close()
        self._resolver.stop()

    def __enter__(self) -> LocalApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _values(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Each header's values by its name in lower case, a repeated one's all."""
    values: dict[str, list[str]] = {}
    for name, value in headers.items() if isinstance(headers, Mapping) else headers:
        values.setdefault(name.lower(), []).append(value)
    return values


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
