"""A task's path through the runtime: which of its modules run from ``Client.schedule`` to the recorded outcome.

One task is scheduled, polled, dispatched, armed, fired and recorded on moto, in this process, by the same
services the handlers build (:mod:`punctual.runtime.wiring`), with a profiler on every thread. Each phase lists the
runtime modules (``punctual.*``) whose functions ran during it; building the services (the cold start) is not
part of the path. ``python -m punctual_tools.task_path`` prints the phases and the count; docs/contributing.md
shows them (a generated block).
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import boto3
from moto import mock_aws

from punctual.runtime.client import Client
from punctual.runtime.wiring import build_poller
from punctual.targets import LogAction
from punctual_tools.doubles import REGION, LambdaContext, scheduled_event
from punctual_tools.local.worker import lambda_environment, load_handler_in_a_thread
from punctual_tools.template import ensure_table

SRC = Path(__file__).resolve().parents[2]  # src: the runtime package and the handlers
RUNTIME = "punctual."
TABLE = "punctual-task-path"
HANDLER_PARTS = 2  # a handler is src/<function>/app.py
LEAD_S = 3.0  # the task is due this long after it is scheduled (on time on a busy machine too)


@dataclass(kw_only=True)
class TaskPath:
    """The runtime modules each phase of one task's life ran, in the order the phases came."""

    phases: dict[str, list[str]] = field(default_factory=dict)
    outcome: str = ""

    @property
    def modules(self) -> list[str]:
        """Every module the task's life crossed, once each, sorted."""
        return sorted({module for modules in self.phases.values() for module in modules})


def _runtime_module(filename: str) -> str | None:
    """The runtime module a code object's file is (``punctual.…``, or a handler as ``<function>.app``), if any."""
    path = Path(filename)
    if not path.is_relative_to(SRC) or path.suffix != ".py":
        return None
    parts = path.relative_to(SRC).with_suffix("").parts
    if parts[:2] == ("shared", "punctual"):
        return ".".join(parts[1:]).removesuffix(".__init__")
    if len(parts) == HANDLER_PARTS and parts[1] == "app" and parts[0] != "tools":
        return f"{parts[0]}.app"
    return None


class _Profiler:
    """Notes the module of each Python function called while it is on, on every thread started after
    :meth:`install` and on the one that installed it."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.active = False
        self._lock = threading.Lock()

    def install(self) -> None:
        sys.setprofile(self)
        threading.setprofile(self)

    def uninstall(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # None removes it, as for sys.setprofile

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if not self.active or event != "call":
            return
        module = _runtime_module(frame.f_code.co_filename)
        if module and frame.f_code.co_name != "<module>" and module not in self.seen:
            with self._lock:
                self.seen.add(module)

    @contextmanager
    def on(self) -> Iterator[set[str]]:
        self.seen, self.active = set(), True
        try:
            yield self.seen
        finally:
            self.active = False


def trace_task_life() -> TaskPath:
    """Run one task's life on moto through the handlers and return the modules each phase crossed."""
    sent: list[dict[str, Any]] = []

    class Collect:
        def invoke_async(self, payload: dict[str, Any]) -> None:
            sent.append(json.loads(json.dumps(payload)))  # as Lambda delivers it: through JSON

    path = TaskPath()
    profiler = _Profiler()
    environment = lambda_environment(TABLE, region=REGION)
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    stdout, sys.stdout = sys.stdout, io.StringIO()  # the handlers' JSON logs and metrics
    profiler.install()  # before the handlers start their threads, which it then sees too
    try:
        with mock_aws():
            dynamodb = boto3.client("dynamodb")
            ensure_table(dynamodb, TABLE)
            poller_app = load_handler_in_a_thread(SRC / "poller" / "app.py")
            executor_app = load_handler_in_a_thread(SRC / "executor" / "app.py")
            poller_app.poller = build_poller(poller_app.settings, invoker=Collect())  # type: ignore[attr-defined]
            client = Client(poller_app.settings, dynamodb=dynamodb)
            due_at = datetime.now(UTC) + timedelta(seconds=LEAD_S)
            phases: list[tuple[str, Callable[[], Any]]] = [
                ("schedule", lambda: client.schedule(due_at, LogAction(message="path"), {"n": 1}, task_id="path-1")),
                ("poll and dispatch", lambda: poller_app.handler(scheduled_event(), LambdaContext("poller"))),
                ("arm, fire and record", lambda: [executor_app.handler(p, LambdaContext("executor")) for p in sent]),
            ]
            for name, run in phases:
                with profiler.on() as seen:
                    run()
                path.phases[name] = sorted(seen)
            task = client.get("path-1")
            path.outcome = task.status.value if task else "gone"
    finally:
        profiler.uninstall()
        sys.stdout = stdout
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return path


def render(path: TaskPath) -> str:
    """The phases and their modules, as Markdown."""
    lines = [f"One task, scheduled to its recorded outcome ({path.outcome}), crosses **{len(path.modules)}** of the "]
    lines[0] += "runtime's modules:"
    lines.append("")
    for name, modules in path.phases.items():
        lines.append(f"- **{name}** ({len(modules)}): " + ", ".join(f"`{m}`" for m in modules))
    return "\n".join(lines)


def main() -> int:
    path = trace_task_life()
    print(render(path))
    return 0 if path.outcome == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
