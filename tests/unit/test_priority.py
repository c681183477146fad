"""Background CPU confinement: background work (lowered threads, DynamoDB Local) stays off the firing core;
firing threads run real-time where the runtime asks for it and the system allows it."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from punctual.executing import priority
from punctual.executing.dispatcher import Dispatcher
from punctual.executing.priority import (
    default_background_cpus,
    lower_current_thread,
    parse_cpu_list,
    raise_current_thread,
    set_background_cpus,
    set_realtime_firing,
)

USABLE = sorted(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    set_background_cpus(None)
    set_realtime_firing(False)


@pytest.mark.parametrize(
    ("spec", "cpus"),
    [
        ("1", {1}),
        ("0-2", {0, 1, 2}),
        ("0,2-3", {0, 2, 3}),
        (" 1 , 3 ", {1, 3}),
        ("2-2", {2}),
    ],
)
def test_cpu_lists_parse(spec: str, cpus: set[int]) -> None:
    assert parse_cpu_list(spec) == cpus


@pytest.mark.parametrize("spec", ["", "x", "1-", "-1", "3-1", "1,,2", "1.5", "1-2-3"])
def test_a_bad_cpu_list_is_refused_with_the_list_named(spec: str) -> None:
    with pytest.raises(ValueError, match="invalid CPU list"):
        parse_cpu_list(spec)


def test_the_default_leaves_the_first_usable_cpu_out() -> None:
    default = default_background_cpus()
    if len(USABLE) < 2:
        assert default is None
    else:
        assert default is not None
        assert parse_cpu_list(default) == set(USABLE[1:])


def _affinity_after_lowering() -> set[int]:
    seen: list[set[int]] = []

    def body() -> None:
        lower_current_thread()
        seen.append(set(os.sched_getaffinity(0)))
        child = threading.Thread(target=lambda: seen.append(set(os.sched_getaffinity(0))))
        child.start()  # a thread started by a lowered thread inherits its CPU set
        child.join()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert len(seen) == 2
    assert seen[0] == seen[1]
    return seen[0]


@pytest.mark.skipif(len(USABLE) < 2, reason="needs two usable CPUs")
def test_a_lowered_thread_runs_only_on_the_background_cpus_and_the_caller_is_untouched() -> None:
    before = set(os.sched_getaffinity(0))
    set_background_cpus(str(USABLE[-1]))
    assert _affinity_after_lowering() == {USABLE[-1]}
    assert set(os.sched_getaffinity(0)) == before  # only the lowered thread changed


def test_without_background_cpus_a_lowered_thread_keeps_every_cpu() -> None:
    set_background_cpus(None)
    assert _affinity_after_lowering() == set(os.sched_getaffinity(0))


def test_cpus_this_process_may_not_use_are_ignored_and_none_left_means_no_confinement() -> None:
    set_background_cpus(f"{max(USABLE) + 1000}")
    assert priority._background_cpus is None  # the module's state is what is under test
    if len(USABLE) >= 2:
        set_background_cpus(f"{USABLE[1]},{max(USABLE) + 1000}")
        assert priority._background_cpus == {USABLE[1]}


def test_a_cpu_beyond_what_linux_allows_is_refused_rather_than_enumerated() -> None:
    with pytest.raises(ValueError, match="beyond the largest"):
        parse_cpu_list("0-99999999999")


T = TypeVar("T")


def _in_a_thread(work: Callable[[], T]) -> T:
    out: list[T] = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join()
    return out[0]


def _realtime_allowed() -> bool:
    def probe() -> bool:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority.FIRING_RT_PRIORITY))
        except OSError:
            return False
        return True

    return bool(_in_a_thread(probe))


def test_unasked_a_firing_thread_keeps_the_normal_policy() -> None:
    assert _in_a_thread(lambda: (raise_current_thread(), os.sched_getscheduler(0))) == (False, os.SCHED_OTHER)


def test_refused_a_firing_thread_stays_normal_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given real-time firing asked for, on a system that refuses it (no CAP_SYS_NICE, RLIMIT_RTPRIO 0)
    set_realtime_firing(True)

    def refuse(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    # Then the thread carries on, normal
    assert _in_a_thread(lambda: (raise_current_thread(), os.sched_getscheduler(0))) == (False, os.SCHED_OTHER)


@pytest.mark.skipif(not _realtime_allowed(), reason="this system does not allow SCHED_FIFO to this process")
def test_asked_and_allowed_the_dispatcher_fires_from_real_time_threads_and_leaves_the_caller_alone() -> None:
    # Given real-time firing asked for, on a system that allows it
    set_realtime_firing(True)
    policies: list[int] = []
    # When a dispatcher fires an item
    with Dispatcher[str](lambda _: policies.append(os.sched_getscheduler(0)), workers=2, name="rt") as dispatcher:
        dispatcher.add(0.0, "item")
    # Then its worker ran SCHED_FIFO, and the thread that built the dispatcher kept its policy
    assert policies == [os.SCHED_FIFO]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


def test_a_lowered_thread_is_niced_not_idle_class_so_other_work_on_the_machine_cannot_starve_it() -> None:
    # Given a thread of this process; When it lowers itself
    def lowered() -> tuple[int, int]:
        lower_current_thread()
        return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    policy, nice = _in_a_thread(lowered)
    # Then it keeps the normal policy (an idle-class thread runs only when nothing else on the machine wants the
    # core) at the background nice value, and the calling thread is untouched
    assert (policy, nice) == (os.SCHED_OTHER, max(priority.BACKGROUND_NICE, before))
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before


def test_lowering_never_raises_a_thread_that_is_already_lower() -> None:
    def twice() -> int:
        lower_current_thread(15)
        lower_current_thread()
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    assert _in_a_thread(twice) == max(15, os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
