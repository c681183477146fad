"""CPU priority for background work, so that firing wins the cores when they are contended.

On Lambda every executor has its own CPU and DynamoDB runs elsewhere. On one machine (the local runtime) the
store, the poller, arming and the firing share the cores: background work (store, poll, arm, metrics) runs
at a lower priority, and the dispatcher, its workers and the recorder keep the default. Only work
that never holds the interpreter while a fire of its process is due is lowered: a starved thread holding the
GIL would stall the dispatcher (priority inversion).

Background work is niced (+10: about a tenth of a normal thread's share of a contended core), never
``SCHED_IDLE``: an idle-class thread runs only when no other thread of the machine wants the core, so on a
machine that other work keeps busy (a CI runner, a laptop compiling) the store, the API and arming starved
(docs/decisions.md, "Firing first on shared cores, locally"). A nice value bounds the slowdown instead.

A low priority alone does not keep a core free: niced background work that saturates every core delays a heap
dispatcher's fires by a scheduler slice (docs/decisions.md, "Firing first on shared cores, locally"). So the
local runtime also confines background work to a CPU set that leaves one core out
(``punctual_tools.settings.LocalSettings.background_cpus``, see :func:`set_background_cpus`): a firing thread
always finds a core that no background thread may take. Unset (the default, and in AWS), background work may
run on any CPU.

Lowering the rest still leaves the firing threads to the normal scheduler: a few of a local steady run's fires
are late, each time a dispatcher or worker that was runnable
but not running (``perf sched``: queued behind another normal thread, or woken on a core that took a
scheduler slice to answer). Where the process may use real-time scheduling (root, ``CAP_SYS_NICE`` or a
non-zero ``RLIMIT_RTPRIO``) and the runtime asks for it (:func:`set_realtime_firing`; the local runtime does,
``LocalSettings.realtime_firing``), each dispatcher and worker thread runs ``SCHED_FIFO`` at the lowest
real-time priority (:func:`raise_current_thread`): a waking dispatcher or a spinning worker then takes a core
from any normal thread at once. What they spin is bounded (``spin_s`` + ``handoff_s`` a fire at most, see
:class:`~punctual.executing.dispatcher.FireTiming`), and the kernel's real-time throttling keeps 5% of each second for
normal threads. Lambda does not allow it (and has no need: an
executor has its own CPU there); where it is refused, the threads stay normal, silently.
"""

from __future__ import annotations

import contextlib
import os
import threading

BACKGROUND_NICE = 10
MAX_CPU = 8191  # Linux's largest NR_CPUS

FIRING_RT_PRIORITY = 1  # the lowest SCHED_FIFO priority: above every normal thread, below the kernel's own

_background_cpus: frozenset[int] | None = None
_realtime_firing = False


def parse_cpu_list(spec: str) -> frozenset[int]:
    """``"1"``, ``"1-3"``, ``"0,2-3"`` → the CPU numbers; a clear ``ValueError`` for anything else."""
    cpus: set[int] = set()
    for listed in spec.split(","):
        part = listed.strip()
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"invalid CPU list {spec!r}: expected numbers and ranges such as '1' or '1-3,5'")
        first, last = int(low), int(high) if sep else int(low)
        if last > MAX_CPU:
            raise ValueError(f"invalid CPU list {spec!r}: CPU {last} is beyond the largest Linux allows ({MAX_CPU})")
        if last < first:
            raise ValueError(f"invalid CPU list {spec!r}: range {part!r} runs backwards")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def default_background_cpus() -> str | None:
    """For a runtime that shares the machine's cores with firing: every CPU this process may use but the
    first, when there are at least two; ``None`` (no confinement) on one CPU."""
    try:
        usable = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None
    background = usable[1:]
    return ",".join(str(cpu) for cpu in background) if background else None


def set_background_cpus(spec: str | None) -> None:
    """Confine the threads (and child processes) lowered from now on in this process to these CPUs
    (``None``: any CPU). CPUs this process may not use are ignored; if none is left, there is no confinement."""
    global _background_cpus  # noqa: PLW0603  a process-wide setting: the threads lowered from now on read it
    if not spec:
        _background_cpus = None
        return
    wanted = parse_cpu_list(spec)
    try:
        usable = os.sched_getaffinity(0)
    except AttributeError:
        _background_cpus = None
        return
    _background_cpus = frozenset(wanted & usable) or None


def lower_current_thread(nice: int = BACKGROUND_NICE) -> None:
    """Run the calling thread (only it: on Linux each thread has its own nice value and CPU set, and threads it
    starts inherit both) at a higher nice value; and, when background CPUs are set, only on those."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), max(nice, _own_nice()))
    cpus = _background_cpus
    if cpus is not None:
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, cpus)  # pid 0: the calling thread


def _own_nice() -> int:
    """The calling thread's nice value (0 where it cannot be read): lowering never raises a thread."""
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (AttributeError, OSError):
        return 0


def lower_process_at_start(nice: int = BACKGROUND_NICE) -> None:
    """For ``subprocess.Popen(preexec_fn=...)``: the child starts as background work."""
    lower_current_thread(nice)


def set_realtime_firing(enabled: bool) -> None:
    """Whether firing threads started from now on in this process ask for real-time scheduling
    (:func:`raise_current_thread`)."""
    global _realtime_firing  # noqa: PLW0603  a process-wide setting: the firing threads started from now on read it
    _realtime_firing = enabled


def raise_current_thread() -> bool:
    """For a firing thread (a dispatcher or one of its workers): ``SCHED_FIFO`` at :data:`FIRING_RT_PRIORITY`
    for the calling thread only, when :func:`set_realtime_firing` asked for it and the system allows it.
    Whether the thread now runs real-time; refused or not asked, it keeps its policy."""
    if not _realtime_firing:
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIRING_RT_PRIORITY))  # pid 0: the calling thread
    except (AttributeError, OSError):  # not Linux, or not permitted (no CAP_SYS_NICE, RLIMIT_RTPRIO 0)
        return False
    return True
