"""A lean loopback webhook receiver for benchmarks: asyncio, HTTP/1.1 keep-alive, one process of its own.

It answers every POST 200 and appends one JSON line per request to a file: the ``Idempotency-Key``, the
task id and due instant Punctual sends (``X-Punctual-Task-Id``, ``X-Punctual-Due-Ms``) and ``received_ms``, the
wall-clock instant its headers were read. :class:`~punctual_tools.local.target.TargetServer` (a thread per
connection) is the receiver for tests; this one keeps a burst of thousands of connections cheap, so that what
a benchmark measures is the sender.

    receiver = start_receiver(Path("received.jsonl"))   # a process; returns (process, port)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, fd: int) -> None:
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            headers: dict[str, str] = {}
            while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = header.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            received_ms = time.time_ns() / 1_000_000
            await reader.readexactly(int(headers.get("content-length", "0")))
            due = headers.get("x-punctual-due-ms", "")
            entry = {
                "key": headers.get("idempotency-key"),
                "task_id": headers.get("x-punctual-task-id"),
                "due_ms": int(due) if due.isdigit() else None,
                "received_ms": round(received_ms, 3),
            }
            os.write(fd, (json.dumps(entry, separators=(",", ":")) + "\n").encode())
            writer.write(_OK)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


def serve(path: str, ports: Any, port: int = 0) -> None:
    """Run the receiver (in its own process) on ``port`` (0: any free one): appends to ``path``, puts the port it
    listens on on ``ports`` (or, when it cannot listen, why)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    async def main() -> None:
        try:
            server = await asyncio.start_server(lambda r, w: _serve(r, w, fd), "127.0.0.1", port, backlog=4096)
        except OSError as exc:
            ports.put(f"cannot listen on 127.0.0.1:{port} ({exc.strerror})")
            return
        ports.put(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def start_receiver(path: Path, port: int = 0) -> tuple[multiprocessing.process.BaseProcess, int]:
    """Start :func:`serve` in a spawned process on ``port`` (0: any free one); returns it and the port it listens
    on (127.0.0.1). Raises OSError when it cannot listen there (another demo's receiver holds the port)."""
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    process = context.Process(target=serve, args=(str(path), ports, port), name="receiver", daemon=True)
    process.start()
    try:
        answer = ports.get(timeout=30)
        if isinstance(answer, str):
            raise OSError(f"the demo's webhook receiver {answer}")
        return process, int(answer)
    except BaseException:
        process.kill()  # it never said where it listens: not left running
        raise


@contextlib.contextmanager
def receiving(path: Path) -> Iterator[int]:
    """A receiver process (:func:`start_receiver`) for the ``with`` block; yields its port and stops it after.

    Out of the caller's process, it answers at once however busy the caller's threads keep its interpreter."""
    process, port = start_receiver(path)
    try:
        yield port
    finally:
        process.kill()
        process.join(timeout=30)


def read_received(path: Path) -> list[dict[str, Any]]:
    """The requests received so far."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
