"""A new execution environment as Lambda starts one: a fresh interpreter that imports everything its handler needs.

Under the Lambda profile the invoker starts each executor environment with :func:`start_environment`:
``python -m punctual_tools.local.environment <fd> [<cgroup>]``, a child of the invoker's own process. Before it
imports anything but ``os`` and ``sys``, the new interpreter joins the cgroup the invoker made for it (the CPU of
its INIT, see :mod:`punctual_tools.local.cpu_quota`); then it reads its spec from the pipe on ``fd`` and runs
:func:`punctual_tools.local.worker.run_worker`, whose imports and handler module (boto3, pydantic, Powertools,
Punctual) are the INIT, paid in full as in Lambda. The pipe speaks :mod:`multiprocessing.connection`'s protocol,
as a forked worker's does. Until the worker sends its log there, the interpreter writes to the log file.

The environment runs in a process group of its own, so a signal to the stack's group does not reach it; when
the thread that started it ends (the stack stopped or died, however), the kernel sends it SIGCONT
(:mod:`~punctual_tools.local.parent_death`): an idle environment, frozen, wakes, finds its pipe closed and exits;
a busy one finishes the batch it holds, as a Lambda invocation outlives the poller that sent it, and exits then.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess
    from multiprocessing.connection import Connection

MODULE = "punctual_tools.local.environment"


class FreshProcess:
    """A started environment, seen as the invoker sees a ``multiprocessing`` process: pid, exit code, signals."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid: int | None = popen.pid

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def kill(self) -> None:
        if self.is_alive():
            self._popen.kill()

    def terminate(self) -> None:
        if self.is_alive():
            self._popen.terminate()

    def join(self, timeout: float | None = None) -> None:
        import subprocess

        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return


def start_environment(conn: Connection, cgroup: str | None, log_path: str | None) -> FreshProcess:
    """Start a fresh interpreter on the child end ``conn`` of a pipe, in ``cgroup`` from its first import on. The
    caller closes ``conn`` then, and sends the worker's spec on the parent end: a dict of :func:`run_worker`'s
    arguments (``handler_path``, ``log_path``, ``env``) and ``worker``, the :class:`WorkerSpec`'s fields."""
    import subprocess

    from punctual_tools.local.parent_death import signal_on_parent_death

    wake_when_orphaned = signal_on_parent_death(signal.SIGCONT)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
    command = [sys.executable, "-m", MODULE, str(conn.fileno()), *([cgroup] if cgroup else [])]

    def start(out: IO[bytes] | None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            pass_fds=(conn.fileno(),),
            process_group=0,  # Ctrl-C reaches the runtime only; it stops the workers itself
            # (a prctl and a getppid in the child; the invoker's starter thread lives as long as the invoker)
            preexec_fn=wake_when_orphaned,  # noqa: PLW1509 - no lock is taken between fork and exec
        )

    if log_path:
        with open(log_path, "ab") as out:
            popen = start(out)
    else:
        popen = start(None)
    return FreshProcess(popen)


def main(argv: list[str]) -> None:
    """The new interpreter: join the group, then read the spec and serve invocations (``run_worker``)."""
    fd = int(argv[0])
    if len(argv) > 1:
        try:  # first: the interpreter's imports are INIT, paid on INIT's CPU
            with open(os.path.join(argv[1], "cgroup.procs"), "w", encoding="ascii") as procs:
                procs.write(str(os.getpid()))
        except OSError:
            pass  # the worker tries again and reports why it could not
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    spec = conn.recv()
    from punctual_tools.local.worker import WorkerSpec, run_worker

    run_worker(spec["handler_path"], conn, spec["log_path"], spec["env"], WorkerSpec(**spec["worker"]))


if __name__ == "__main__":
    main(sys.argv[1:])
