"""A small HTTP/1.1 client on asyncio protocols: what the ``http`` action sends webhooks with.

Why not a general client: a webhook is one POST whose bytes can be prepared at once, and a burst of thousands
must leave an executor in the few tens of milliseconds a log burst takes. A general client's per-request work
in Python (docs/decisions.md, "Webhooks from a small HTTP/1.1 client") holds the interpreter long enough to delay
the other fires of a burst; here a request is one ``write`` and its answer is parsed just enough to know its
status and where it ends (Content-Length, chunked, or the connection's close), so that its connection can
serve the next request.

Safety is the caller's rules (:class:`~punctual.network.policy.TargetPolicy`), applied here where it matters: a
name is resolved once (cached for :data:`DNS_TTL_S`), refused unless every address is allowed, and the
connection goes to one of exactly those addresses. No redirect is followed (a 3xx is an answer like any
other). One deadline covers the wait for a connection, connecting, sending and reading. At most ``body_cap``
bytes of an answer are read; beyond, the connection is closed. An answer's head is at most :data:`MAX_HEAD`
bytes.

A burst does not pay for its connections at its instant: :meth:`WirePool.warm` opens them ahead (the executor
asks when it knows its batch's targets, shortly before they are due), so that the fires find them idle.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from punctual.errors import StaleConnectionError, WireError
from punctual.network.policy import Target, TargetPolicy

MAX_HEAD = 64 * 1024  # status line and headers of an answer
DNS_TTL_S = 10.0  # how long a checked resolution is reused
IDLE_S = 30.0  # a kept-alive connection unused this long is closed rather than reused
WARM_AT_ONCE = 32  # connections a warm-up opens together (the loop stays free for fires between the groups)
WARM_CONNECT_S = 5.0  # a warm-up gives up on a connection that takes longer to open


@dataclass
class _Answer:
    status: int = 0
    reusable: bool = True
    body_read: int = 0


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: one request at a time, its answer parsed as it arrives."""

    def __init__(
        self, body_cap: int, on_open: Callable[[], None] | None = None, on_lost: Callable[[], None] | None = None
    ) -> None:
        self._body_cap = body_cap
        self._on_open, self._on_lost = on_open, on_lost  # the pool's count of open connections
        self._counted = False
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = time.monotonic()
        self.was_idle = False  # it waited in the pool (after an answer, or opened ahead by a warm-up)
        self._buffer = bytearray()
        self._waiter: asyncio.Future[_Answer] | None = None
        self._answer = _Answer()
        self._state = "idle"  # head, length, chunk-size, chunk-data, trailers, until-close
        self._left = 0
        self._got_bytes = False

    # -- asyncio.Protocol --------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self._on_open is not None:
            self._on_open()
            self._counted = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._counted and self._on_lost is not None:
            self._counted = False
            self._on_lost()
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._state == "until-close":
            self._finish(reusable=False)
        elif not self._got_bytes and self.was_idle:
            waiter.set_exception(StaleConnectionError())
        else:
            waiter.set_exception(WireError("the connection closed before the answer was complete"))

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self._close()  # bytes nobody asked for: this connection cannot be trusted with another request
            return
        self._got_bytes = True
        self._buffer += data
        try:
            self._parse()
        except WireError as exc:
            self._close()
            if not self._waiter.done():
                self._waiter.set_exception(exc)

    # -- one exchange ------------------------------------------------------------------------------------------
    def send(self, request: bytes) -> asyncio.Future[_Answer]:
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._answer = _Answer()
        self._state, self._got_bytes = "head", False
        self._buffer.clear()
        self.transport.write(request)
        return self._waiter

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _finish(self, reusable: bool) -> None:
        self._answer.reusable = reusable and self._answer.reusable and not self.closed
        self._state = "idle"
        self.idle_since = time.monotonic()
        if not self._answer.reusable:
            self._close()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(self._answer)

    def _take_body(self, count: int) -> bool:
        """Count ``count`` body bytes as read; False (and the connection closed) past the cap."""
        self._answer.body_read += count
        if self._answer.body_read > self._body_cap:
            self._finish(reusable=False)
            return False
        return True

    def _parse(self) -> None:  # noqa: C901, PLR0911, PLR0912, PLR0915  one state machine, a branch per state, in the loop an answer's bytes go through
        buffer = self._buffer
        while True:
            if self._state == "head":
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(buffer) > MAX_HEAD:
                        raise WireError(f"the answer's head is longer than {MAX_HEAD} bytes")
                    return
                head = bytes(buffer[:end]).decode("latin-1")
                del buffer[: end + 4]
                if not self._head(head):
                    continue  # an interim (1xx) answer: the real one follows
            elif self._state == "length":
                take = min(self._left, len(buffer))
                del buffer[:take]
                self._left -= take
                if not self._take_body(take):
                    return
                if self._left == 0:
                    self._finish(reusable=True)
                return
            elif self._state == "until-close":
                if not self._take_body(len(buffer)):
                    return
                buffer.clear()
                return
            elif self._state == "chunk-size":
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > 1024:
                        raise WireError("a chunk-size line is too long")
                    return
                text = bytes(buffer[:end]).split(b";", 1)[0].strip()
                del buffer[: end + 2]
                try:
                    self._left = int(text, 16)
                except ValueError:
                    raise WireError("malformed chunked encoding") from None
                self._state = "trailers" if self._left == 0 else "chunk-data"
            elif self._state == "chunk-data":
                if self._left > 0:
                    take = min(self._left, len(buffer))
                    del buffer[:take]
                    self._left -= take
                    if not self._take_body(take) or self._left > 0:
                        return
                if len(buffer) < 2:
                    return
                if buffer[:2] != b"\r\n":
                    raise WireError("malformed chunked encoding")
                del buffer[:2]
                self._state = "chunk-size"
            elif self._state == "trailers":
                if buffer[:2] == b"\r\n":
                    del buffer[:2]
                    self._finish(reusable=True)
                    return
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(buffer) > MAX_HEAD:
                        raise WireError("the answer's trailers are too long")
                    return
                del buffer[: end + 4]
                self._finish(reusable=True)
                return
            else:
                return

    def _head(self, head: str) -> bool:  # noqa: C901  an answer's head read in one pass: status, headers, then how its body is framed
        """Read an answer's head; False for an interim 1xx answer (skipped)."""
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
            raise WireError("malformed status line")
        status = int(parts[1])
        if 100 <= status < 200 and status != 101:
            return False
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise WireError("malformed header line")
            headers[name.strip().lower()] = value.strip()
        self._answer.status = status
        keep = headers.get("connection", "").lower()
        self._answer.reusable = "close" not in keep and (parts[0] != "HTTP/1.0" or "keep-alive" in keep)
        if status in (204, 304) or status == 101:
            self._answer.reusable = status != 101 and self._answer.reusable
            self._finish(reusable=True)
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = "chunk-size"
        elif "content-length" in headers:
            try:
                self._left = int(headers["content-length"])
            except ValueError:
                raise WireError("malformed Content-Length") from None
            if self._left < 0:
                raise WireError("malformed Content-Length")
            self._state = "length"
            if self._left == 0:
                self._finish(reusable=True)
        else:
            self._state = "until-close"
            self._answer.reusable = False
        return True


@dataclass
class _Host:
    idle: deque[_Connection] = field(default_factory=deque)
    slots: asyncio.Semaphore | None = None
    live: int = 0  # connections open (idle, in use, or closing)
    warming: int = 0  # connections a warm-up is opening


class WirePool:
    """Kept-alive connections per (scheme, host, port), at most ``connections_per_host`` in use per host and
    ``connections`` in all; names resolved through ``policy`` (see the module docstring)."""

    def __init__(self, policy: TargetPolicy, connections: int, connections_per_host: int, body_cap: int) -> None:
        self._policy = policy
        self._per_host = connections_per_host
        self._body_cap = body_cap
        self._hosts: dict[tuple[str, str, int], _Host] = {}
        self._dns: dict[tuple[str, int], tuple[float, list[str]]] = {}
        self._all: asyncio.Semaphore | None = None
        self._connections = connections
        self._tls: ssl.SSLContext | None = None
        self._live = 0  # connections open, to every host
        self._warming = 0  # connections warm-ups are opening

    async def post(self, target: Target, request: bytes, timeout_s: float) -> tuple[int, int]:
        """Send ``request`` (the whole request's bytes) to ``target`` and wait for its answer: its status and the
        body bytes read. Raises :class:`WireError` (or TimeoutError, or the policy's TargetRefusedError)."""
        async with asyncio.timeout(timeout_s):
            host = self._host(target)
            assert host.slots is not None
            assert self._all is not None
            async with self._all, host.slots:
                for attempt in range(2):
                    connection = self._idle(host) if attempt == 0 else None
                    if connection is None:
                        connection = await self._connect(target, host)
                    try:
                        answer = await connection.send(request)
                    except StaleConnectionError:
                        continue  # the server had closed it while idle: once more, on a new connection
                    except BaseException:
                        connection.abort()
                        raise
                    if answer.reusable and not connection.closed:
                        connection.was_idle = True
                        host.idle.append(connection)
                    return answer.status, answer.body_read
                raise WireError("the connection closed before the answer")

    async def warm(self, target: Target, count: int, fire_in_s: float = 0.0) -> int:
        """Open connections to ``target`` ahead of its fires (due in ``fire_in_s``), so that ``count`` requests
        sent together find one idle, within the per-host and overall limits (counting every open connection);
        returns how many were opened. An idle connection that would be past :data:`IDLE_S` by then is closed
        now (the fire would otherwise drop it and connect at its instant). Connections are opened
        :data:`WARM_AT_ONCE` at a time, and none after the fires are due (they connect for themselves); one that
        cannot be opened ends the warm-up, without an error (its fire reports why)."""
        host = self._host(target)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + fire_in_s
        oldest = time.monotonic() + fire_in_s - IDLE_S
        fresh: deque[_Connection] = deque()
        for connection in host.idle:
            if connection.closed or connection.idle_since <= oldest:
                connection.abort()
            else:
                fresh.append(connection)
        host.idle = fresh
        opened = 0
        while True:
            wanted = min(count, self._per_host) - len(host.idle) - host.warming
            room = min(self._connections - self._live - self._warming, self._per_host - host.live - host.warming)
            group = min(WARM_AT_ONCE, wanted, room)
            if group <= 0 or (opened and loop.time() >= deadline):
                return opened
            host.warming += group
            self._warming += group
            try:
                results = await asyncio.gather(
                    *(asyncio.wait_for(self._connect(target, host), WARM_CONNECT_S) for _ in range(group)),
                    return_exceptions=True,
                )
            finally:
                host.warming -= group
                self._warming -= group
            made = [r for r in results if isinstance(r, _Connection)]
            for connection in made:
                connection.was_idle = True
                host.idle.append(connection)
            opened += len(made)
            if len(made) < group:
                return opened  # the target refuses or cannot be reached: its fires will say so

    async def idle(self, target: Target) -> int:
        """How many connections to ``target`` wait idle in the pool now (a warm-up's count once it has finished)."""
        host = self._hosts.get((target.scheme, target.host, target.port))
        return 0 if host is None else sum(not c.closed for c in host.idle)

    def _host(self, target: Target) -> _Host:
        key = (target.scheme, target.host, target.port)
        host = self._hosts.get(key)
        if host is None:
            host = self._hosts[key] = _Host(slots=asyncio.Semaphore(self._per_host))
        if self._all is None:
            self._all = asyncio.Semaphore(self._connections)
        return host

    def _idle(self, host: _Host) -> _Connection | None:
        now = time.monotonic()
        while host.idle:
            connection = host.idle.pop()
            if not connection.closed and now - connection.idle_since < IDLE_S:
                return connection
            connection.abort()
        return None

    async def _addresses(self, target: Target) -> list[str]:
        if target.literal is not None:
            return [str(target.literal)]
        key = (target.host, target.port)
        cached = self._dns.get(key)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        infos = await asyncio.get_running_loop().getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
        addresses = self._policy.check_addresses(target, list(dict.fromkeys(str(i[4][0]) for i in infos)))
        self._dns[key] = (now + DNS_TTL_S, addresses)
        return addresses

    def _opened(self, host: _Host) -> None:
        host.live += 1
        self._live += 1

    def _lost(self, host: _Host) -> None:
        host.live -= 1
        self._live -= 1

    async def _connect(self, target: Target, host: _Host) -> _Connection:
        loop = asyncio.get_running_loop()
        tls = None
        if target.scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            tls = self._tls
        error: OSError | None = None
        for address in await self._addresses(target):
            try:
                _, protocol = await loop.create_connection(
                    lambda: _Connection(self._body_cap, partial(self._opened, host), partial(self._lost, host)),
                    host=address.split("%", 1)[0],
                    port=target.port,
                    ssl=tls,
                    server_hostname=target.host if tls is not None else None,
                )
                return protocol
            except OSError as exc:
                error = exc
        reason = (error.strerror or type(error).__name__) if error is not None else "no address"
        raise WireError(f"could not connect: {reason}")

    def close(self) -> None:
        for host in self._hosts.values():
            while host.idle:
                host.idle.pop().abort()
