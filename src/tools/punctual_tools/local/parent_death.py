"""Child processes that end with the stack: ``PR_SET_PDEATHSIG`` set in the child between fork and exec.

DynamoDB Local runs in a session of its own and each executor worker in a process group of its own (a Ctrl-C in
the terminal reaches the stack only, which stops them in order). So a SIGKILL of the stack, or of its process
group (``kill -9 -PGID``), reaches neither: without more, DynamoDB Local would run on, and a frozen (SIGSTOP)
idle worker would wait forever. With :func:`signal_on_parent_death` as a child's ``preexec_fn``, the kernel sends
the child a signal the moment the thread that started it ends, however the stack died.

The kernel ties the signal to the *thread* that forked the child, not to its process: a child must be started
from a thread that lives as long as the child is meant to (a long-lived starter thread, see
:class:`~punctual_tools.local.dynamodb_local.DynamoDBLocal` and the local invoker), never from a short-lived one.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def signal_on_parent_death(sig: int, before: Callable[[], None] | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` that runs ``before`` (if given), then asks the kernel to send ``sig`` to the child when
    the thread that starts it ends; a child whose parent is already gone by then gets ``sig`` at once. Where
    ``prctl`` is missing (not Linux), only ``before`` runs. Built in the parent: the child calls no loader."""
    parent = os.getpid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (AttributeError, OSError):
        prctl = None

    def preexec() -> None:
        if before is not None:
            before()
        if prctl is None or prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
            return
        if os.getppid() != parent:  # the parent died between the fork and the prctl
            os.kill(os.getpid(), sig)

    return preexec
