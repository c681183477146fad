"""The ``log`` action: record that the task fired (a fire-log line locally, a structured log line in AWS)."""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Literal

from pydantic import Field

from punctual.domain.model import Action
from punctual.targets.registry import ActionEnv, ActionKind, FireContext

log = logging.getLogger("punctual.fire")


class LogAction(Action):
    """Record that the task fired (a structured log line, plus the local fire log when one is set)."""

    kind: Literal["log"] = "log"
    message: str = Field("", max_length=1_000)


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


def run_log(action: LogAction, context: FireContext, env: ActionEnv | None = None) -> None:
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


LOG = ActionKind(model=LogAction, run=run_log, max_timeout_s=0.0)
