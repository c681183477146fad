"""What a fire does: a registry from action kind to the function that runs it.

New kinds (signed webhooks, Lambda, SQS, SNS, EventBridge...) register a pydantic model (the ``kind`` tag)
and a runner with :func:`register_action`. A runner raises :class:`ActionFailedError` (or anything) to fail.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .model import Action, HttpAction, JsonValue, LogAction, canonical_json, register_action_model

log = logging.getLogger("punctual.fire")


class ActionFailedError(Exception):
    """The action ran and failed (for example a non-2xx HTTP answer)."""


@dataclass(frozen=True, slots=True)
class FireContext:
    """What a runner knows about the fire it performs."""

    task_id: str
    occurrence: int
    due_ms: int
    started_ms: float
    payload: JsonValue

    @property
    def idempotency_key(self) -> str:
        return f"{self.task_id}:{self.occurrence}"


ActionRunner = Callable[[Any, FireContext], None]
_RUNNERS: dict[str, ActionRunner] = {}


def register_action(model: type[Action], runner: ActionRunner) -> None:
    """Add an action kind: its model (for validation) and its runner (for firing)."""
    register_action_model(model)
    _RUNNERS[model.model_fields["kind"].default] = runner


def run_action(action: Action, context: FireContext) -> None:
    """Run ``action``; raises on failure."""
    runner = _RUNNERS.get(action.kind)
    if runner is None:
        raise ActionFailedError(f"no runner registered for action kind {action.kind!r}")
    runner(action, context)


def run_http(action: HttpAction, context: FireContext) -> None:
    """POST the payload as JSON, with the idempotency key; a non-2xx answer fails the fire."""
    body = canonical_json(context.payload).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "punctual/0.1",
        **action.headers,
        "Idempotency-Key": context.idempotency_key,
        "X-Punctual-Task-Id": context.task_id,
        "X-Punctual-Due-Ms": str(context.due_ms),
    }
    request = urllib.request.Request(str(action.url), data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=action.timeout_s) as response:  # noqa: S310
            response.read()
    except urllib.error.HTTPError as exc:
        raise ActionFailedError(f"HTTP {exc.code} from {action.url}") from exc
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise ActionFailedError(f"POST {action.url} failed: {exc}") from exc


class FireLog:
    """An append-only JSON-lines file of fires, written with one ``write`` per line (atomic with O_APPEND,
    so executor processes can share it). The local runtime sets it; in AWS the log line alone is written."""

    _lock = threading.Lock()
    _fd: int | None = None
    _path: str | None = None

    @classmethod
    def configure(cls, path: str | None) -> None:
        with cls._lock:
            if path == cls._path:
                return
            if cls._fd is not None:
                os.close(cls._fd)
            cls._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
            cls._path = path

    @classmethod
    def write(cls, entry: dict[str, Any]) -> bool:
        """Append one line; False when no fire log is configured."""
        fd = cls._fd
        if fd is None:
            return False
        os.write(fd, (json.dumps(entry, separators=(",", ":")) + "\n").encode())
        return True


def run_log(action: LogAction, context: FireContext) -> None:
    """Record that the task fired: one fire-log line where a fire log is configured (locally), else one
    structured log line (CloudWatch Logs in AWS)."""
    entry = {
        "event": "fired",
        "task_id": context.task_id,
        "key": context.idempotency_key,
        "due_ms": context.due_ms,
        "fired_ms": round(context.started_ms, 3),
        "message": action.message,
    }
    if FireLog.write(entry):
        return
    if log.isEnabledFor(logging.INFO):
        log.info("fired %s", context.idempotency_key, extra={"fire": entry})


register_action(HttpAction, run_http)
register_action(LogAction, run_log)
