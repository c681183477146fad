"""A lean loopback webhook receiver for benchmarks: Node's http server (``receiver.js``), in a process of its own.

It answers every POST 200 and appends one JSON line per request to a file: the ``Idempotency-Key``, the task id
and due instant Punctual sends (``X-Punctual-Task-Id``, ``X-Punctual-Due-Ms``) and ``received_ms``, the
wall-clock instant its headers were parsed. Node's parser is C: a burst of thousands of connections costs it
little, so what a benchmark measures is the sender (a receiver in Python, asyncio included, took ~0.2 ms a
request and was the bottleneck of a 2,000-webhook burst on two cores).
:class:`~punctual_tools.local.target.TargetServer` (a thread per connection) is the receiver for tests.

    process, port = start_receiver(Path("received.jsonl"))
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).with_name("receiver.js")


def start_receiver(path: Path) -> tuple[subprocess.Popen[str], int]:
    """Start the receiver (``node``, needed anyway for DynamoDB Local); returns the process and its port on
    127.0.0.1. Stop it with ``terminate()``: it flushes its last lines first."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node not found on PATH: the benchmark's webhook receiver runs on Node")
    process = subprocess.Popen([node, str(SCRIPT), str(path)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.strip().isdigit():
        process.kill()
        raise RuntimeError(f"the webhook receiver did not start (it said {line!r})")
    return process, int(line)


def read_received(path: Path) -> list[dict[str, Any]]:
    """The requests received so far (lines are flushed every 100 ms)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
