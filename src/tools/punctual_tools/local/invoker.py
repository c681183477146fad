"""Lambda async invoke, locally: executor invocations run in worker processes, limited as Lambda limits them.

- **Async**: ``invoke_async`` queues the event and returns at once (like ``InvocationType="Event"``); Lambda's
  queue rules apply (:class:`~punctual_tools.local.async_queue.AsyncEventQueue`): at most the function's
  concurrency at once (others throttled and backed off), retries after a failure, events dropped past their age.
- **Execution environments**: one invocation at a time per worker process; idle workers are reused (warm),
  new ones are started on demand (a cold start: no idle worker is free). ``prewarm`` of them start at once, as
  environments warm from earlier traffic would be (:meth:`LocalInvoker.wait_warm` waits for their INIT). The
  duration of each INIT, from the start to the worker's ``ready``, is kept (:attr:`LocalInvoker.init_durations_ms`).
- **The Lambda profile** (``profile="lambda"``, the default) gives each environment what its function's
  configuration (:class:`~punctual_tools.local.lambda_rules.FunctionLimits`, from ``template.yaml``) gives it:

  - *A cold start as Lambda's*: each new environment is a fresh interpreter (:mod:`.environment`) that joins its
    cgroup before its first heavy import, then imports the handler module and with it boto3, pydantic,
    Powertools and Punctual: its INIT costs what it costs in Lambda. INIT runs on one whole core (the lower bound
    of the CPU an on-demand INIT is measured to get, :mod:`.cpu_quota`), until ready or :data:`INIT_LIMIT_S`.
    In Lambda each INIT has a CPU of its own; here as many INITs run at once as this process has cores, and a
    cold start beyond them waits for one to end. That wait is what this machine lacks, not Lambda's: it is kept
    apart (:attr:`LocalInvoker.init_waits_ms`, and ``init_wait_ms_max`` in the stats), so a figure measured over
    cold starts can say how much of it was the local shortage.
  - *CPU*: a cgroup of its own with the share of a core its memory size buys (:mod:`.cpu_quota`). Where no
    cgroup can be written, the invoker warns once and says so in :attr:`LocalInvoker.cpu_quota`.
  - *Timeout*: an invocation still running at the function's timeout is killed (SIGKILL: "Task timed out"),
    and is retried as any failure.
  - *Frozen while idle*: a worker is stopped (SIGSTOP) once its cold start or its invocation is over, and
    continued (SIGCONT) when the next invocation arrives: nothing of it (a heartbeat thread, an NTP probe) runs
    while Lambda would run nothing.

  The ``local`` profile (a stack on a server of its own) gives whole cores, no timeout and no freezing; its
  workers are forked from a forkserver that has the libraries imported already, so that a cold start only loads
  the handler module.
- **At least once**: a ``duplicate_rate`` delivers some events twice on purpose, for fault tests.
- **Stop**: :meth:`LocalInvoker.shutdown` drops what waits, sends SIGTERM to busy workers (their executors hand
  unfired tasks back to PENDING), waits, then continues and ends every worker and removes its cgroup.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Literal

from punctual_tools.local.async_queue import AsyncEventQueue, InvokerStoppedError, Outcome, ResultCallback
from punctual_tools.local.cpu_quota import (
    PERIOD_US,
    CpuGroups,
    CpuQuotaStatus,
    InitSlot,
    init_quota_us,
    init_slot_count,
    init_wait_figures,
    quota_us,
)
from punctual_tools.local.environment import FreshProcess, start_environment
from punctual_tools.local.lambda_rules import FunctionLimits, concurrency_cap
from punctual_tools.local.worker import PRELOAD, WorkerSpec, run_worker
from punctual_tools.stats import percentile

log = logging.getLogger(__name__)

__all__ = ["InvokerStoppedError", "LocalInvoker", "Profile"]

Profile = Literal["lambda", "local"]
# Lambda's init phase: past it, the init is done again within the invocation's timeout (and on the memory's share)
INIT_LIMIT_S = 10.0
INIT_SLOT_POLL_S = 0.5  # how often a cold start waiting for an INIT slot looks whether the invoker stops


_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


@dataclass
class _Worker:
    process: BaseProcess | FreshProcess
    conn: Connection
    cgroup: Path | None
    started: float  # monotonic, when the cold start began
    busy: bool = False
    frozen: bool = False
    boosted: bool = False  # its group still has INIT's CPU
    init_slot: InitSlot | None = None  # the core its INIT holds (Lambda profile), given back when INIT ends
    ready: threading.Event = field(default_factory=threading.Event)
    init_error: str | None = None

    def alive(self) -> bool:
        return self.process.exitcode is None and self.process.is_alive()


class LocalInvoker:
    """Runs ``handler_path``'s ``handler(event, context)`` in worker processes, asynchronously, within ``limits``
    (Lambda's defaults unless given) under ``profile``. ``time_scale`` multiplies Lambda's async delays and
    event age (1.0: Lambda's own), and with ``scale_timeout`` the function's timeout too: a scenario then keeps
    Lambda's proportions between an invocation's timeout, its retries and its event age (without it, a shortened
    event age holds fewer timeouts than Lambda's, a lengthened one more)."""

    def __init__(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
        self,
        handler_path: Path,
        env: dict[str, str],
        log_file: Path | None = None,
        *,
        limits: FunctionLimits | None = None,
        profile: Profile = "lambda",
        max_concurrency: int = 64,
        prewarm: int = 2,
        time_scale: float = 1.0,
        scale_timeout: bool = False,
        duplicate_rate: float = 0.0,
        on_result: ResultCallback | None = None,
        on_worker_started: Callable[[int], None] | None = None,
        keep_warm: bool = True,
    ) -> None:
        self._handler_path = str(handler_path)
        # False: an environment ends with its invocation, so that every invocation is a cold start (as when
        # Lambda has reclaimed every idle environment: a benchmark's cold phase)
        self._keep_warm = keep_warm
        self._env = dict(env)
        self._log_file = str(log_file) if log_file else None
        self.limits = limits or FunctionLimits()
        # The seconds an invocation may run here (killed then, under the Lambda profile; its context says so)
        self.timeout_s = self.limits.timeout_s * (time_scale if scale_timeout else 1.0)
        self.profile = profile
        self._lambda = profile == "lambda"
        self._duplicate_rate = duplicate_rate
        self._on_worker_started = on_worker_started  # e.g. record the pid, so a restart after SIGKILL finds it
        self._lock = threading.Condition()
        self._idle: list[_Worker] = []
        self._workers: list[_Worker] = []
        self._stopping = False
        self._stats = {"cold_starts": 0, "timeouts": 0, "cpu_quota_failures": 0}
        self._init_ms: list[float] = []
        self._init_waits_ms: list[float] = []
        # One INIT per core at once (Lambda profile): each INIT then has a core, as each has a CPU in Lambda
        self._init_slots = threading.BoundedSemaphore(init_slot_count()) if self._lambda else None
        self._groups: CpuGroups | None = None
        self.cpu_quota = self._open_cpu_groups()
        self._queue = AsyncEventQueue(
            self._execute, self.limits, concurrency_cap(self.limits, max_concurrency), time_scale, on_result
        )
        # Environments are started from a thread of the constructor's priority and CPUs, which they inherit: not
        # from the (lowered) thread of a poller that invokes
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="environment-start")
        self._starter.submit(lambda: None).result()
        self._warm = threading.Event()
        threading.Thread(
            target=self._prewarm, args=(min(prewarm, self._queue.concurrency),), daemon=True, name="prewarm"
        ).start()

    def _open_cpu_groups(self) -> CpuQuotaStatus:
        if not self._lambda:
            return CpuQuotaStatus(False, "profile local: whole cores")
        self._groups, where = CpuGroups.open()
        if self._groups is None:
            log.warning(
                "no CPU quota for the %s workers (%s): they run on whole cores, more than the %d MB Lambda "
                "gives (%.3f of a core); figures measured here say 'no CPU quota'",
                self.limits.function,
                where,
                self.limits.memory_mb,
                self.limits.cpu_share,
            )
            return CpuQuotaStatus(False, where)
        return CpuQuotaStatus(
            True,
            f"{quota_us(self.limits.memory_mb)} us of CPU every {PERIOD_US} us "
            f"({self.limits.memory_mb} MB / 1769), {where}",
        )

    @property
    def concurrency(self) -> int:
        """Invocations that may run at once (the reserved concurrency, within the local cap)."""
        return self._queue.concurrency

    @property
    def stats(self) -> dict[str, int]:
        """Counts: invoked, completed, errors, retries, dropped (of which expired), throttles, cold starts,
        timeouts, and workers that could not join their cgroup; the INITs' median and longest (ms)."""
        with self._lock:
            own = dict(self._stats)
            init = list(self._init_ms)
            waits = list(self._init_waits_ms)
        return {
            **self._queue.stats,
            **own,
            "init_ms_p50": round(percentile(init, 50) or 0),
            "init_ms_max": round(max(init, default=0)),
            **init_wait_figures(waits),
        }

    @property
    def init_waits_ms(self) -> list[float]:
        """How long each cold start waited for an INIT slot (a core) before it began (ms): time Lambda, where each
        INIT has a CPU of its own, would not have spent."""
        with self._lock:
            return list(self._init_waits_ms)

    @property
    def init_durations_ms(self) -> list[float]:
        """Each cold start's INIT (ms): from the worker's start to its ``ready`` (the handler module loaded), less
        the local tooling it set up (the IAM check), in the order they ended."""
        with self._lock:
            return list(self._init_ms)

    def wait_warm(self, timeout: float) -> bool:
        """Wait until the prewarmed workers are through their INIT; whether they are."""
        return self._warm.wait(timeout)

    # -- the port --------------------------------------------------------------------------------------
    def invoke_async(self, payload: dict[str, Any]) -> None:
        self._queue.put(json.loads(json.dumps(payload)))
        if self._duplicate_rate and random.random() < self._duplicate_rate:
            self._queue.put(json.loads(json.dumps(payload)), duplicate=True)

    # -- workers ---------------------------------------------------------------------------------------
    def _prewarm(self, count: int) -> None:
        """Start ``count`` idle workers (under the Lambda profile, as many INITs at once as there are INIT slots)."""
        try:
            started = []
            for _ in range(count):
                worker = self._start_worker(busy=False)
                with self._lock:
                    self._idle.append(worker)
                started.append(worker)
            for worker in started:
                worker.ready.wait(INIT_LIMIT_S + self.timeout_s)
        except InvokerStoppedError:
            return
        except OSError as exc:
            log.error("cannot start the warm workers: %s", exc)
        finally:
            self._warm.set()

    def _start_worker(self, *, busy: bool) -> _Worker:
        slot = self._take_init_slot()
        try:
            return self._start_worker_in_slot(busy, slot)
        except BaseException:
            if slot is not None:  # (one the worker took is given back once: a slot is released at most once)
                slot.release()
            raise

    def _take_init_slot(self) -> InitSlot | None:
        """(Lambda profile) Wait for an INIT slot, keeping the time waited."""
        if self._init_slots is None:
            return None
        began = time.monotonic()
        while not self._init_slots.acquire(timeout=INIT_SLOT_POLL_S):
            with self._lock:
                if self._stopping:
                    raise InvokerStoppedError("the local invoker is stopping")
        with self._lock:
            self._init_waits_ms.append((time.monotonic() - began) * 1000)
        return InitSlot(self._init_slots)

    def _start_worker_in_slot(self, busy: bool, slot: InitSlot | None) -> _Worker:
        with self._lock:
            if self._stopping:
                raise InvokerStoppedError("the local invoker is stopping")
        group = self._make_init_group()
        spec = WorkerSpec(self.timeout_s, self.limits.memory_mb, str(group) if group else None)
        parent_end, child_end = _CONTEXT.Pipe()
        started = time.monotonic()
        process = self._spawn(spec, group, parent_end, child_end)
        child_end.close()
        worker = _Worker(process, parent_end, group, started, busy=busy, boosted=group is not None, init_slot=slot)
        with self._lock:
            stopping = self._stopping
            if not stopping:
                self._workers.append(worker)
                self._stats["cold_starts"] += 1
        if stopping:  # shutdown has begun and will not see this one
            self._discard(worker)
            raise InvokerStoppedError("the local invoker is stopping")
        threading.Thread(target=self._await_ready, args=(worker,), daemon=True, name="worker-init").start()
        if self._on_worker_started is not None and process.pid is not None:
            self._on_worker_started(process.pid)
        return worker

    def _make_init_group(self) -> Path | None:
        """A new worker's cgroup, with INIT's CPU first (the memory's share once ready); None without cgroups
        or when it cannot be made (counted as a CPU quota failure)."""
        if self._groups is None:
            return None
        try:
            return self._groups.create(self.limits.memory_mb, init_quota_us(self.limits.memory_mb))
        except (OSError, ValueError) as exc:
            log.error("no CPU quota for a new worker: cannot make its cgroup (%s)", exc)
            with self._lock:
                self._stats["cpu_quota_failures"] += 1
            return None

    def _spawn(
        self, spec: WorkerSpec, group: Path | None, parent_end: Connection, child_end: Connection
    ) -> BaseProcess | FreshProcess:
        """Start a worker's process: in Lambda's mode a fresh interpreter, as Lambda starts a new environment,
        then told what to run; otherwise a forked process running the worker."""
        if not self._lambda:
            process = _CONTEXT.Process(
                target=run_worker,
                args=(self._handler_path, child_end, self._log_file, self._env, spec),
                name="punctual-executor",
                daemon=False,
            )
            process.start()
            return process
        try:
            fresh = self._starter.submit(start_environment, child_end, spec.cgroup, self._log_file).result()
        except RuntimeError as exc:  # the starter has shut down: so has the invoker
            for end in (parent_end, child_end):
                end.close()
            if group is not None and self._groups is not None:
                self._groups.remove(group)
            raise InvokerStoppedError("the local invoker is stopping") from exc
        environment = {"handler_path": self._handler_path, "log_path": self._log_file, "env": self._env}
        with contextlib.suppress(OSError):  # one that died at once is found dead when it is awaited
            parent_end.send({**environment, "worker": asdict(spec)})
        return fresh

    def _await_ready(self, worker: _Worker) -> None:
        """The cold start's end: the worker says it is ready (or dies); its INIT's CPU ends then (or at
        :data:`INIT_LIMIT_S`, as Lambda's INIT does), and an idle one is frozen."""
        try:
            if not worker.conn.poll(INIT_LIMIT_S):
                self._end_init_cpu(worker)
            message = worker.conn.recv()
            init_ms = (time.monotonic() - worker.started) * 1000 - float(message.get("tooling_ms") or 0)
            with self._lock:
                self._init_ms.append(init_ms)
            if message.get("cgroup_error"):
                log.error("worker %s runs without its CPU quota: %s", worker.process.pid, message["cgroup_error"])
                with self._lock:
                    self._stats["cpu_quota_failures"] += 1
        except (OSError, EOFError) as exc:
            worker.process.join(1)
            worker.init_error = (
                f"worker {worker.process.pid} died in its cold start (exit code {worker.process.exitcode}): {exc!r}"
            )
        self._end_init_cpu(worker)
        with self._lock:
            worker.ready.set()
            if not worker.busy:
                self._freeze(worker)

    def _end_init_cpu(self, worker: _Worker) -> None:
        """Set a worker's group to the CPU its memory size buys, once its INIT is over; its INIT slot goes."""
        if worker.init_slot is not None:
            worker.init_slot.release()
        if not worker.boosted or worker.cgroup is None or self._groups is None:
            return
        worker.boosted = False
        try:
            self._groups.set_quota(worker.cgroup, quota_us(self.limits.memory_mb))
        except (OSError, ValueError) as exc:
            if worker.alive():  # (a worker that died may have lost its group already)
                log.error("worker %s keeps its INIT's CPU: %s", worker.process.pid, exc)
                with self._lock:
                    self._stats["cpu_quota_failures"] += 1

    def _freeze(self, worker: _Worker) -> None:
        """(Under the lock.) Stop an idle worker, under the Lambda profile, unless the invoker is stopping."""
        if self._lambda and not self._stopping and not worker.frozen and worker.alive() and worker.process.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.process.pid, signal.SIGSTOP)
                worker.frozen = True

    def _thaw(self, worker: _Worker) -> None:
        """(Under the lock.)"""
        if worker.frozen and worker.process.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.process.pid, signal.SIGCONT)
            worker.frozen = False

    def _take_worker(self) -> _Worker:
        """An idle worker (warm), or a new one (a cold start); either is busy from now on."""
        dead = []
        warm = None
        with self._lock:
            if self._stopping:
                raise InvokerStoppedError("the local invoker is stopping")
            while self._idle and warm is None:
                worker = self._idle.pop()
                if worker.alive():
                    worker.busy = True
                    warm = worker
                else:
                    dead.append(worker)
        for gone in dead:
            self._discard(gone)
        return warm if warm is not None else self._start_worker(busy=True)

    def _discard(self, worker: _Worker, wait_s: float = 5.0) -> None:
        """End a worker (if it still runs), and remove its cgroup."""
        with self._lock:
            self._thaw(worker)
            if worker in self._workers:
                self._workers.remove(worker)
        if worker.alive():
            worker.process.kill()
        worker.process.join(wait_s)
        with contextlib.suppress(OSError):
            worker.conn.close()
        if worker.cgroup is not None and self._groups is not None:
            self._groups.remove(worker.cgroup)

    def _execute(self, payload: dict[str, Any], request_id: str) -> Outcome:
        """Run one invocation in an idle worker, or a new one (the queue keeps them within the concurrency); its
        context carries ``request_id``, as Lambda's does (the same on every retry of the event)."""
        worker = self._take_worker()
        reusable = False
        try:
            timeout = self.timeout_s if self._lambda else None
            if not worker.ready.wait(None if timeout is None else INIT_LIMIT_S + timeout):
                return self._time_out(worker, timeout)
            if worker.init_error is not None:
                return Outcome(error=worker.init_error)
            with self._lock:
                self._thaw(worker)
            worker.conn.send((payload, request_id))
            if not worker.conn.poll(timeout):
                return self._time_out(worker, timeout)
            response = worker.conn.recv()
            reusable = True
            if not response.get("ok"):
                return Outcome(error=str(response.get("error")))
            return Outcome(result=response.get("result") or {})
        except (OSError, EOFError) as exc:
            worker.process.join(1)
            return Outcome(error=f"worker {worker.process.pid} died (exit code {worker.process.exitcode}): {exc!r}")
        finally:
            self._finish(worker, reusable)

    def _time_out(self, worker: _Worker, timeout: float | None) -> Outcome:
        with self._lock:
            self._stats["timeouts"] += 1
        log.error(
            "%s: task timed out after %.2f seconds: worker %s killed",
            self.limits.function,
            timeout or 0,
            worker.process.pid,
        )
        worker.process.kill()
        return Outcome(error=f"Task timed out after {timeout or 0:.2f} seconds")

    def _finish(self, worker: _Worker, reusable: bool) -> None:
        with self._lock:
            worker.busy = False
            if reusable and self._keep_warm and worker.alive() and not self._stopping:
                self._freeze(worker)
                self._idle.append(worker)
                self._lock.notify_all()
                return
        if not reusable or not self._keep_warm or not worker.alive():
            self._discard(worker)

    # -- control ---------------------------------------------------------------------------------------
    def in_flight(self) -> int:
        return self._queue.in_flight()

    def wait_idle(self, timeout: float) -> bool:
        return self._queue.wait_idle(timeout)

    def busy_worker_pids(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in self._workers if w.busy and w.alive() and w.process.pid]

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in self._workers if w.alive() and w.process.pid]

    def shutdown(self, timeout: float = 15.0) -> None:
        """Stop accepting events and drop what waits; ask busy executors to release unfired tasks; end every
        worker; remove the cgroups."""
        with self._lock:
            self._stopping = True  # from now on no worker is frozen
            workers = list(self._workers)
            for worker in workers:
                self._thaw(worker)
        self._queue.stop()
        for worker in workers:
            if worker.busy and worker.alive():
                worker.process.terminate()  # SIGTERM: the executor releases its unfired tasks
        self._queue.wait_idle(timeout)
        with self._lock:
            workers = list(self._workers)  # including any started while the busy ones wound down
        for worker in workers:
            if worker.alive():
                with contextlib.suppress(OSError, ValueError):
                    worker.conn.send(None)  # an idle worker exits on None
        deadline = time.monotonic() + 5
        for worker in workers:
            worker.process.join(max(0.1, deadline - time.monotonic()))
            self._discard(worker)
        if self._groups is not None:
            self._groups.close()
        self._starter.shutdown(wait=False)
