"""CPU priority for background work, so that firing wins the cores when they are contended.

On Lambda every executor has its own CPU and DynamoDB runs elsewhere. On one machine (the local runtime) the
store, the poller, arming and the firing share the cores: background work (store, poll, arm) runs at a lower
priority (a higher nice value, per thread on Linux), and the dispatcher and its workers keep the default. Only
work that never holds the interpreter while a fire is due is lowered, so no priority inversion on the GIL.
"""

from __future__ import annotations

import contextlib
import os
import threading

BACKGROUND_NICE = 10


def lower_current_thread(nice: int = BACKGROUND_NICE) -> None:
    """Give the calling thread (only it: Linux threads have their own nice value) a lower priority."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


def lower_process_at_start(nice: int = BACKGROUND_NICE) -> None:
    """For ``subprocess.Popen(preexec_fn=...)``: the child starts with a lower priority."""
    with contextlib.suppress(OSError):
        os.nice(nice)
