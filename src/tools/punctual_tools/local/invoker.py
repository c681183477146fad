"""Lambda async invoke, locally: executor invocations run in worker processes with Lambda's semantics.

- **Async**: ``invoke_async`` queues the event and returns at once (like ``InvocationType="Event"``).
- **Execution environments**: one invocation at a time per worker process; idle workers are reused (warm),
  new ones are started on demand up to ``max_concurrency``. Workers are forked from a forkserver that has
  the libraries imported already, so a cold start only loads the handler module (Lambda's init phase).
- **At least once**: an invocation whose handler raised, or whose process died, is retried up to
  ``len(retry_delays)`` times after those delays (Lambda: 2 retries, about 1 and 2 minutes apart). A
  ``duplicate_rate`` delivers some events twice on purpose, for fault tests.
- **Stop**: :meth:`shutdown` sends SIGTERM to busy workers (their executors hand unfired tasks back to
  PENDING), waits, then ends every worker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from .worker import PRELOAD, run_worker

log = logging.getLogger(__name__)

ResultCallback = Callable[[dict[str, Any], dict[str, Any]], None]


class InvokerStoppedError(RuntimeError):
    """The invoker is shutting down and accepts no more events."""


_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    busy: bool = False
    invocations: int = 0

    def alive(self) -> bool:
        return self.process.exitcode is None and self.process.is_alive()


@dataclass
class _Invocation:
    payload: dict[str, Any]
    attempt: int = 0
    queued_at: float = field(default_factory=time.monotonic)


class LocalInvoker:
    """Runs ``handler_path``'s ``handler(event, context)`` in worker processes, asynchronously."""

    def __init__(self, handler_path: Path, env: dict[str, str], log_file: Path | None = None,
                 max_concurrency: int = 64, prewarm: int = 2, retry_delays: tuple[float, ...] = (1.0, 2.0),
                 duplicate_rate: float = 0.0, on_result: ResultCallback | None = None,
                 on_worker_started: Callable[[int], None] | None = None) -> None:
        self._handler_path = str(handler_path)
        self._env = dict(env)
        self._log_file = str(log_file) if log_file else None
        self._max = max_concurrency
        self._retry_delays = retry_delays
        self._duplicate_rate = duplicate_rate
        self._on_result = on_result
        self._on_worker_started = on_worker_started  # e.g. record the pid, so a restart after SIGKILL finds it
        self._lock = threading.Condition()
        self._idle: list[_Worker] = []
        self._workers: list[_Worker] = []
        self._stopping = False
        self._in_flight = 0
        self.stats = {"invoked": 0, "completed": 0, "errors": 0, "retries": 0, "dropped": 0, "cold_starts": 0}
        for _ in range(prewarm):
            self._idle.append(self._start_worker())

    # -- the port --------------------------------------------------------------------------------------
    def invoke_async(self, payload: dict[str, Any]) -> None:
        with self._lock:
            if self._stopping:
                raise InvokerStoppedError("the local invoker is stopping")
            self.stats["invoked"] += 1
        self._launch(_Invocation(json.loads(json.dumps(payload))))
        if self._duplicate_rate and random.random() < self._duplicate_rate:
            self._launch(_Invocation(json.loads(json.dumps(payload))))

    # -- workers ---------------------------------------------------------------------------------------
    def _start_worker(self) -> _Worker:
        parent_end, child_end = _CONTEXT.Pipe()
        process = _CONTEXT.Process(target=run_worker, args=(self._handler_path, child_end, self._log_file, self._env),
                                   name="punctual-executor", daemon=False)
        process.start()
        child_end.close()
        worker = _Worker(process, parent_end)
        with self._lock:
            self._workers.append(worker)
            self.stats["cold_starts"] += 1
        if self._on_worker_started is not None and process.pid is not None:
            self._on_worker_started(process.pid)
        return worker

    def _take_worker(self) -> _Worker:
        with self._lock:
            while True:
                if self._stopping:
                    raise InvokerStoppedError("the local invoker is stopping")
                if self._idle:
                    worker = self._idle.pop()
                    if worker.alive():
                        worker.busy = True
                        return worker
                    continue
                if len([w for w in self._workers if w.alive()]) < self._max:
                    break
                self._lock.wait(0.5)
        worker = self._start_worker()
        worker.busy = True
        return worker

    def _launch(self, invocation: _Invocation) -> None:
        with self._lock:
            self._in_flight += 1
        threading.Thread(target=self._run, args=(invocation,), daemon=True, name="invoke").start()

    def _run(self, invocation: _Invocation) -> None:
        try:
            self._run_once(invocation)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._lock.notify_all()

    def _run_once(self, invocation: _Invocation) -> None:
        try:
            worker = self._take_worker()
        except InvokerStoppedError:
            # Not delivered: its tasks stay PENDING, and the next poll dispatches them again.
            with self._lock:
                self.stats["dropped"] += 1
            return
        error: str | None = None
        response: dict[str, Any] | None = None
        try:
            if not worker.invocations:  # wait for the cold start's "ready" message
                worker.conn.recv()
            worker.conn.send(invocation.payload)
            worker.invocations += 1
            response = worker.conn.recv()
            if not response.get("ok"):
                error = str(response.get("error"))
        except (OSError, EOFError) as exc:
            worker.process.join(1)
            error = f"worker {worker.process.pid} died (exit code {worker.process.exitcode}): {exc!r}"
            worker.process.kill()
        finally:
            with self._lock:
                worker.busy = False
                if worker.alive() and not self._stopping:
                    self._idle.append(worker)
                self._lock.notify_all()
        if error is None and response is not None:
            with self._lock:
                self.stats["completed"] += 1
            if self._on_result is not None:
                self._on_result(invocation.payload, response.get("result") or {})
            return
        with self._lock:
            self.stats["errors"] += 1
            stopping = self._stopping
        if invocation.attempt < len(self._retry_delays) and not stopping:
            delay = self._retry_delays[invocation.attempt]
            log.warning("executor invocation failed (%s); retry %d in %.1f s", error, invocation.attempt + 1, delay)
            with self._lock:
                self.stats["retries"] += 1
            time.sleep(delay)
            self._run_once(_Invocation(invocation.payload, invocation.attempt + 1, invocation.queued_at))
        else:
            with self._lock:
                self.stats["dropped"] += 1
            log.error("executor invocation dropped after %d attempts: %s", invocation.attempt + 1, error)

    # -- control ---------------------------------------------------------------------------------------
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def wait_idle(self, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: self._in_flight == 0, timeout)

    def busy_worker_pids(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in self._workers if w.busy and w.alive() and w.process.pid]

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in self._workers if w.alive() and w.process.pid]

    def shutdown(self, timeout: float = 15.0) -> None:
        """Stop accepting events; ask busy executors to release unfired tasks; end every worker."""
        with self._lock:
            self._stopping = True
            workers = list(self._workers)
        for worker in workers:
            if worker.busy and worker.alive():
                worker.process.terminate()  # SIGTERM: the executor releases its unfired tasks
        self.wait_idle(timeout)
        with self._lock:
            workers = list(self._workers)  # including any started while the busy ones wound down
        for worker in workers:
            if worker.alive():
                with contextlib.suppress(OSError, ValueError):
                    worker.conn.send(None)  # an idle worker exits on None
        deadline = time.monotonic() + 5
        for worker in workers:
            worker.process.join(max(0.1, deadline - time.monotonic()))
            if worker.process.exitcode is None:
                worker.process.kill()
                worker.process.join()
            worker.conn.close()
