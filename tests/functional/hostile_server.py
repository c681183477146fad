"""A loopback HTTP/1.1 server (raw asyncio, keep-alive) that plays good and hostile webhook receivers, for the
``http`` action's tests. Behaviour is chosen by the request path:

``/ok``              200
``/status/N``        answers N
``/flaky/N``         503 to the first N requests of each idempotency key, then 200
``/redirect``        302 to the metadata endpoint (a client that follows it would be an SSRF)
``/drip``            a 200 with Content-Length 10000, then one byte every 0.25 s
``/huge``            a 200 with Content-Length 300 MiB, written as fast as the client reads
``/hold``            held until :meth:`release` (the peak of requests held at once is kept)
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Seen:
    path: str
    headers: dict[str, str]  # by name in lower case (a repeated one: its last value)
    body: bytes
    peer_port: int
    received_s: float
    header_lines: list[tuple[str, str]] = field(default_factory=list)  # as sent, a repeated one as often


@dataclass
class _State:
    requests: list[Seen] = field(default_factory=list)
    flaky: Counter[str] = field(default_factory=Counter)
    held: int = 0
    peak_held: int = 0
    huge_sent: int = 0
    connections: int = 0


class HostileServer:
    def __init__(self) -> None:
        self.state = _State()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._release: asyncio.Event | None = None
        self._ready = threading.Event()
        self.port = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="hostile-server")

    def __enter__(self) -> HostileServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def release(self) -> None:
        self._loop.call_soon_threadsafe(lambda: self._release.set() if self._release else None)

    def requests(self, path: str | None = None) -> list[Seen]:
        with self._lock:
            return [r for r in self.state.requests if path is None or r.path == path]

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._release = asyncio.Event()
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=2048))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        for task in asyncio.all_tasks(self._loop):  # connections still open: closed before the loop is
            task.cancel()
        self._loop.run_until_complete(asyncio.sleep(0))
        self._loop.run_until_complete(server.wait_closed())
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_port = writer.get_extra_info("peername")[1]
        with self._lock:
            self.state.connections += 1
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                lines: list[tuple[str, str]] = []
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = header.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                    lines.append((name.strip(), value.strip()))
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                with self._lock:
                    self.state.requests.append(Seen(path, headers, body, peer_port, time.time(), lines))
                if not await self._answer(path, headers, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return
        finally:
            writer.close()

    async def _answer(self, path: str, headers: dict[str, str], writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must close."""
        if path.startswith("/status/"):
            return await _reply(writer, int(path.rsplit("/", 1)[1]))
        if path.startswith("/flaky/"):
            key = headers.get("idempotency-key", "")
            with self._lock:
                self.state.flaky[key] += 1
                failing = self.state.flaky[key] <= int(path.rsplit("/", 1)[1])
            return await _reply(writer, 503 if failing else 200)
        if path == "/redirect":
            return await _reply(writer, 302, extra="Location: http://169.254.169.254/latest/meta-data/\r\n")
        if path == "/drip":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10000\r\n\r\n")
            for _ in range(10_000):
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(0.25)
            return False
        if path == "/huge":
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {300 * 1024 * 1024}\r\n\r\n".encode())
            chunk = b"\0" * 65_536
            for _ in range(300 * 16):
                writer.write(chunk)
                await writer.drain()
                with self._lock:
                    self.state.huge_sent += len(chunk)
            return False
        if path == "/hold":
            with self._lock:
                self.state.held += 1
                self.state.peak_held = max(self.state.peak_held, self.state.held)
            assert self._release is not None
            try:
                await asyncio.wait_for(self._release.wait(), 60)
            finally:
                with self._lock:
                    self.state.held -= 1
        return await _reply(writer, 200)


async def _reply(writer: asyncio.StreamWriter, status: int, extra: str = "") -> bool:
    body = b'{"ok":true}'
    writer.write(
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    return True
