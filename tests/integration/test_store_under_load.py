"""DynamoDB Local as the local stack runs it: background work (niced, off the first core), so that firing wins the
cores from it, but never idle-class, so that it does not lose them to every other program on the machine too.
Idle-class, it starved: a ``schedule`` took 30-65 ms and ``schedule_many`` made ~15 tasks/s with two busy loops
beside the stack. Niced, the same took 23.6 ms and 59.7 tasks/s (the cores shared, the client's too)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from punctual.executing.priority import BACKGROUND_NICE, default_background_cpus, set_background_cpus
from punctual_tools.local.dynamodb_local import DynamoDBLocal


@pytest.fixture
def stack_store() -> Iterator[DynamoDBLocal]:
    """DynamoDB Local started as the local stack starts it: as background work, on the background cores."""
    set_background_cpus(default_background_cpus())
    server = DynamoDBLocal(data_dir=None, in_memory=True)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        set_background_cpus(None)


def _threads(pid: int) -> list[int]:
    return [int(name) for name in os.listdir(f"/proc/{pid}/task")]


def _nice(pid: int, tid: int) -> int:
    # /proc/PID/task/TID/stat: the 19th field is the nice value; the command name (field 2) may hold spaces
    fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[16])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread priorities are read from /proc")
def test_every_thread_of_the_store_is_niced_never_idle_class(stack_store: DynamoDBLocal) -> None:
    # Given DynamoDB Local started as the stack starts it, and its threads once the JVM has started them
    pid = stack_store.pid
    assert pid is not None
    threads = _threads(pid)
    assert len(threads) > 1  # a JVM serves with many threads: each must be checked, not only the first

    # Then every thread keeps the normal policy at the background nice value: idle-class threads run only when
    # nothing else on the machine wants a core
    policies = {tid: os.sched_getscheduler(tid) for tid in threads if Path(f"/proc/{pid}/task/{tid}").exists()}
    assert set(policies.values()) == {os.SCHED_OTHER}
    assert max(_nice(pid, tid) for tid in policies) <= BACKGROUND_NICE
