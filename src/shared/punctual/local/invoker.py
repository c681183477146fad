"""Lambda async invoke, locally: executor invocations run in worker processes with Lambda's semantics.

- **Async**: ``invoke_async`` queues the event and returns at once (like ``InvocationType="Event"``).
- **Execution environments**: one invocation at a time per worker process; idle workers are reused (warm),
  new ones are started on demand up to ``max_concurrency`` (a cold start imports the handler module).
- **At least once**: an invocation whose handler raised, or whose process died, is retried up to
  ``len(retry_delays)`` times after those delays (Lambda: 2 retries, about 1 and 2 minutes apart). A
  ``duplicate_rate`` delivers some events twice on purpose, for fault tests.
- **Stop**: :meth:`shutdown` sends SIGTERM to busy workers (their executors hand unfired tasks back to
  PENDING), waits, then ends every worker.
"""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

ResultCallback = Callable[[dict[str, Any], dict[str, Any]], None]


class InvokerStoppedError(RuntimeError):
    """The invoker is shutting down and accepts no more events."""


@dataclass
class _Worker:
    process: subprocess.Popen[str]
    results: IO[str]
    busy: bool = False
    invocations: int = 0


@dataclass
class _Invocation:
    payload: dict[str, Any]
    attempt: int = 0
    queued_at: float = field(default_factory=time.monotonic)


class LocalInvoker:
    """Runs ``handler_path``'s ``handler(event, context)`` in worker processes, asynchronously."""

    def __init__(self, handler_path: Path, env: dict[str, str], log_file: Path | None = None,
                 max_concurrency: int = 64, prewarm: int = 2, retry_delays: tuple[float, ...] = (1.0, 2.0),
                 duplicate_rate: float = 0.0, on_result: ResultCallback | None = None) -> None:
        self._handler_path = str(handler_path)
        self._env = {**os.environ, **env}
        self._log_file = log_file
        self._max = max_concurrency
        self._retry_delays = retry_delays
        self._duplicate_rate = duplicate_rate
        self._on_result = on_result
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
        read_fd, write_fd = os.pipe()
        out = open(self._log_file, "a") if self._log_file else subprocess.DEVNULL  # noqa: SIM115
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "punctual.local.worker", self._handler_path, str(write_fd)],
                stdin=subprocess.PIPE, stdout=out, stderr=out, env=self._env, text=True,
                pass_fds=(write_fd,), start_new_session=True,
            )
        finally:
            os.close(write_fd)
            if out is not subprocess.DEVNULL:
                out.close()
        worker = _Worker(process, os.fdopen(read_fd, "r"))
        with self._lock:
            self._workers.append(worker)
            self.stats["cold_starts"] += 1
        return worker

    def _take_worker(self) -> _Worker:
        with self._lock:
            while True:
                if self._stopping:
                    raise InvokerStoppedError("the local invoker is stopping")
                if self._idle:
                    worker = self._idle.pop()
                    if worker.process.poll() is None:
                        worker.busy = True
                        return worker
                    continue
                if len([w for w in self._workers if w.process.poll() is None]) < self._max:
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
            # Not delivered: its tasks stay CLAIMED and are claimed again once the claim lease expires.
            with self._lock:
                self.stats["dropped"] += 1
            return
        error: str | None = None
        response: dict[str, Any] | None = None
        try:
            if not worker.invocations:  # wait for the cold start's "ready" line
                ready = worker.results.readline()
                if not ready:
                    raise EOFError("worker died during its cold start")
            assert worker.process.stdin is not None
            worker.process.stdin.write(json.dumps(invocation.payload) + "\n")
            worker.process.stdin.flush()
            worker.invocations += 1
            line = worker.results.readline()
            if not line:
                raise EOFError(f"worker {worker.process.pid} died (exit code {worker.process.wait()})")
            response = json.loads(line)
            if not response.get("ok"):
                error = str(response.get("error"))
        except (OSError, EOFError, ValueError) as exc:
            error = str(exc)
            worker.process.kill()
        finally:
            with self._lock:
                worker.busy = False
                if worker.process.poll() is None and not self._stopping:
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
            return [w.process.pid for w in self._workers if w.busy and w.process.poll() is None]

    def shutdown(self, timeout: float = 15.0) -> None:
        """Stop accepting events; ask busy executors to release unfired tasks; end every worker."""
        with self._lock:
            self._stopping = True
            workers = list(self._workers)
        for worker in workers:
            if worker.busy and worker.process.poll() is None:
                worker.process.terminate()  # SIGTERM: the executor releases its unfired tasks
        self.wait_idle(timeout)
        with self._lock:
            workers = list(self._workers)  # including any started while the busy ones wound down
        for worker in workers:
            if worker.process.poll() is None:
                try:
                    assert worker.process.stdin is not None
                    worker.process.stdin.close()  # an idle worker exits at end of input
                except OSError:
                    pass
        deadline = time.monotonic() + 5
        for worker in workers:
            try:
                worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
            worker.results.close()
