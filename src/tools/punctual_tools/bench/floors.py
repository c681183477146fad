"""The benchmarks' floors: the bare dispatcher, with no database, poller or record, on the executors' footing.

A floor is what the machine allows a phase: one heap dispatcher thread firing the same action into a worker pool,
as an executor fires it. It must stand where the executors stand, neither handicapped nor flattered
(:class:`FloorRunner`): each floor process runs

- under the **lambda** profile, in a cgroup of its own with the CFS quota of one executor worker (``MemorySize /
  1769`` of a core, :func:`punctual_tools.local.cpu_quota.quota_us`), found and made as the local invoker makes
  its workers' (:meth:`~punctual_tools.local.cpu_quota.CpuGroups.open`); a burst spread over executors is fired by
  one process per batch, each in a group of its own;
- under the **local** profile, on whole cores;

and its firing threads get the real-time priority the executors get under that profile (none under lambda:
``LocalSettings.firing_realtime``), with the executor's switch interval and no automatic garbage collection while
it fires. Each floor process is started and warmed before its first instant, and reports the CPU it used and the
time its group was throttled while it fired (:mod:`cpu_use`).

Due instants are whole milliseconds, as a task's are, so the fire log (which keeps them as whole milliseconds)
and the drifts computed here are the same figures.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from punctual.config.cpu_share import detect_cpu_share
from punctual.config.settings import Settings
from punctual.domain.clock import SystemClock
from punctual.domain.model import Action
from punctual.executing.dispatcher import Dispatcher, FireTiming
from punctual.executing.priority import raise_current_thread, set_realtime_firing
from punctual.network.policy import TargetPolicy
from punctual.targets import (
    ActionEnv,
    FireContext,
    FireLog,
    HttpAction,
    LogAction,
    TargetRules,
    prepare_actions,
    start_action,
)
from punctual_tools.bench.cpu_use import CpuUse, sample
from punctual_tools.local.cpu_quota import PERIOD_US, CpuGroups, join, quota_us
from punctual_tools.settings import LocalSettings

ACTION = LogAction(message="bench")
PROFILES = ("lambda", "local")
log = logging.getLogger("bench.floors")


# -- one floor, in the process that runs it --------------------------------------------------------------
def run_floor(
    due_ms: list[float],
    fire_log: Path,
    prefix: str,
    *,
    workers: int | None = None,
    action: Action = ACTION,
    env: ActionEnv | None = None,
) -> list[dict[str, Any]]:
    """One dispatcher thread, the same action, no database: the precision floor of this process's footing.
    Returns one fire-log-like entry a task (``task_id``, ``due_ms``, ``fired_ms``: when its action started). A
    webhook is started as the executor starts it (handed to the event loop, not awaited by the worker), and its
    connections warmed as the executor warms them (:func:`~punctual.targets.prepare_actions`)."""
    FireLog.configure(str(fire_log))
    clock = SystemClock()
    fires: list[dict[str, Any]] = []
    lock = threading.Lock()
    env = env or ActionEnv()

    def fire(item: tuple[str, float]) -> None:
        started = clock.wall_ms()
        start_action(action, FireContext(item[0], 0, int(item[1]), started, None), env)
        with lock:
            fires.append({"task_id": item[0], "due_ms": item[1], "fired_ms": started})

    gc_enabled = gc.isenabled()
    gc.disable()  # as an executor while its batch fires
    try:
        with Dispatcher(
            fire,
            workers=workers or Settings().worker_threads,
            clock=clock,
            timing=FireTiming.for_cpu_share(detect_cpu_share()),
        ) as dispatcher:  # as the executor's
            wall, mono = clock.wall_ms(), clock.monotonic()
            task_ids = [f"{prefix}{i:07d}" for i in range(len(due_ms))]
            for task_id, due in zip(task_ids, due_ms, strict=True):
                dispatcher.add(mono + (due - wall) / 1000, (task_id, due))
            prepare_actions(
                [(action, (due - wall) / 1000, task_id) for task_id, due in zip(task_ids, due_ms, strict=True)], env
            )
    finally:
        if gc_enabled:
            gc.enable()
        FireLog.configure(None)
    return fires


def loopback_env() -> ActionEnv:
    """An executor's action environment for the floors' webhooks: loopback allowed, its event loop started (as
    an executor starts it at a cold start)."""
    env = ActionEnv(rules=TargetRules(urls=TargetPolicy.from_settings("127.0.0.1")))
    env.warm()
    return env


def firing_policy() -> str:
    """The policy this process's firing threads get (``SCHED_FIFO`` or ``normal``), probed from a new thread."""
    granted: list[bool] = []
    probe = threading.Thread(target=lambda: granted.append(raise_current_thread()), name="priority-probe")
    probe.start()
    probe.join()
    return "SCHED_FIFO" if granted[0] else "normal"


@dataclass(frozen=True)
class FloorJob:
    """One floor process's share: tasks due at ``offsets_ms`` after the run's start, fired with the log action,
    or as webhooks to ``url``."""

    prefix: str
    offsets_ms: list[int]
    fire_log: str
    url: str | None = None


@dataclass
class FloorRun:
    """What one floor process fired (fire-log-like entries) and the CPU it used doing so."""

    fires: list[dict[str, Any]] = field(default_factory=list)
    cpu: CpuUse = field(default_factory=CpuUse)
    policy: str = "normal"


def _enter_footing(group: str | None, realtime: bool, switch_interval_s: float) -> None:
    """A floor process's first step: its cgroup (the executor's quota), its firing priority, the executor's
    switch interval."""
    if group:
        join(group)
    set_realtime_firing(realtime)
    sys.setswitchinterval(switch_interval_s)


def _warm(url: str | None) -> str:
    """A floor process's warm-up: what a warm executor has done before a batch (imports, the dispatcher and
    its workers started once, the event loop for webhooks); returns its firing policy."""
    run_floor([], Path("/dev/null"), "warm-")
    if url:
        loopback_env().close()
    return firing_policy()


def _run_job(job: FloorJob, start_ms: int) -> FloorRun:
    before = sample()
    env = loopback_env() if job.url else ActionEnv()
    action: Action = HttpAction(url=job.url) if job.url else ACTION
    try:
        fires = run_floor(
            [start_ms + offset for offset in job.offsets_ms], Path(job.fire_log), job.prefix, action=action, env=env
        )
        if job.url:
            time.sleep(2.0)  # the answers come back before the engine closes its connections
    finally:
        env.close()
    after = sample()
    cpu = after - before if after is not None and before is not None else CpuUse()
    return FloorRun(fires, cpu, firing_policy())


# -- the footing ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Footing:
    """Where the floors stand: the profile, the executor memory size whose CPU quota they get (when it could be
    set), and whether their firing threads ask for real-time priority."""

    profile: str
    memory_mb: int
    quota: bool
    realtime: bool
    detail: str

    def line(self) -> str:
        if self.profile == "lambda":
            cpu = (
                f"{self.memory_mb} MB's CPU quota ({self.memory_mb / 1769:.3f} of a core: {self.detail})"
                if self.quota
                else f"NO CPU quota ({self.detail}): more than {self.memory_mb} MB buys"
            )
        else:
            cpu = "whole cores (more than Lambda gives)"
        return (
            f"floors: profile {self.profile}, each floor process on {cpu}, firing threads "
            f"{'real-time where allowed' if self.realtime else 'at normal priority'}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "memory_mb": self.memory_mb,
            "quota": self.quota,
            "realtime": self.realtime,
            "detail": self.detail,
        }


def profile_realtime(profile: str) -> bool:
    """Whether the executors' firing threads ask for real-time priority under ``profile`` (and so the floors')."""
    return LocalSettings.from_env(profile=profile).firing_realtime


class FloorRunner:
    """Starts floor processes on the executors' footing (see the module's docstring); close it at the end."""

    def __init__(self, profile: str, memory_mb: int) -> None:
        if profile not in PROFILES:
            raise ValueError(f"no profile {profile!r}: one of {', '.join(PROFILES)}")
        self._groups: CpuGroups | None = None
        self._memory_mb = memory_mb
        detail = "whole cores"
        if profile == "lambda":
            self._groups, where = CpuGroups.open()
            detail = f"{quota_us(memory_mb)} us every {PERIOD_US} us, {where}" if self._groups is not None else where
            if self._groups is None:
                log.warning("no CPU quota for the floors (%s): they run on whole cores", where)
        self.footing = Footing(profile, memory_mb, self._groups is not None, profile_realtime(profile), detail)
        self._switch_s = Settings().switch_interval_s

    @contextlib.contextmanager
    def processes(self, count: int, url: str | None = None) -> Iterator[list[ProcessPoolExecutor]]:
        """``count`` floor processes, each in a group of its own (under the lambda profile), started and warmed."""
        spawn = multiprocessing.get_context("spawn")
        groups: list[Path | None] = []
        pools: list[ProcessPoolExecutor] = []
        try:
            for _ in range(count):
                group = self._groups.create(self._memory_mb) if self._groups is not None else None
                groups.append(group)
                pools.append(
                    ProcessPoolExecutor(
                        max_workers=1,
                        mp_context=spawn,
                        initializer=_enter_footing,
                        initargs=(str(group) if group else None, self.footing.realtime, self._switch_s),
                    )
                )
            for warm in [pool.submit(_warm, url) for pool in pools]:
                warm.result()
            yield pools
        finally:
            for pool in pools:
                pool.shutdown(wait=True)
            for made in groups:
                if made is not None and self._groups is not None:
                    self._groups.remove(made)

    def run(self, jobs: list[FloorJob], lead_ms: int = 1500) -> list[FloorRun]:
        """Each job in a floor process of its own, all from one start ``lead_ms`` after the processes are warm
        (a burst spread over processes shares its instant)."""
        url = next((job.url for job in jobs if job.url), None)
        with self.processes(len(jobs), url) as pools:
            start_ms = int(time.time() * 1000) + lead_ms
            runs: list[Future[FloorRun]] = [
                pool.submit(_run_job, job, start_ms) for pool, job in zip(pools, jobs, strict=True)
            ]
            return [run.result() for run in runs]

    def submit(self, pool: ProcessPoolExecutor, job: FloorJob, start_ms: int) -> Future[FloorRun]:
        """One job in a process of :meth:`processes`, from ``start_ms`` (epoch ms)."""
        return pool.submit(_run_job, job, start_ms)

    def close(self) -> None:
        if self._groups is not None:
            self._groups.close()


# -- the shapes of the floors ----------------------------------------------------------------------------
def steady_offsets(rate: float, seconds: float) -> list[int]:
    """Offsets (whole ms) of ``rate`` tasks a second for ``seconds``."""
    return [int(i * 1000 / rate) for i in range(int(rate * seconds))]


def burst_batch(memory_mb: int | None) -> int:
    """How many tasks due at one instant the poller puts into one batch for executors of ``memory_mb`` (None:
    whole cores): the batch size, or fewer, what the executor's quota fires in one period
    (:attr:`~punctual.config.settings.Settings.max_fires_at_once`)."""
    settings = Settings(executor_memory_mb=memory_mb)
    return min(settings.max_batch_size, settings.max_fires_at_once or settings.max_batch_size)


def burst_shares(count: int, batch: int) -> list[int]:
    """A burst of ``count`` cut as the poller cuts it: batches of at most ``batch`` (:func:`burst_batch`)."""
    return [min(batch, count - i) for i in range(0, count, batch)]


def merged(runs: list[FloorRun]) -> tuple[list[dict[str, Any]], CpuUse]:
    """The fires of several floor processes, and their CPU together."""
    return [f for run in runs for f in run.fires], sum((run.cpu for run in runs), CpuUse())
