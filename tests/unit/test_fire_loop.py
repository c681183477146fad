"""punctual.targets.registry.FireLoop: coroutines handed over from many threads each run once and report their
outcome; a closed loop refuses work instead of leaving a caller waiting; warm-ups run after their delay."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from punctual.targets import FireLoop, Warmup


@pytest.fixture
def loop() -> Iterator[FireLoop]:
    running = FireLoop(name="test-fire-loop")
    yield running
    running.close()


async def double(n: int) -> int:
    await asyncio.sleep(0)
    return 2 * n


async def fail() -> None:
    raise ValueError("boom")


def test_coroutines_submitted_together_from_many_threads_each_run_once(loop: FireLoop) -> None:
    # When 32 threads hand over 2,000 coroutines at once
    with ThreadPoolExecutor(max_workers=32) as pool:
        futures = list(pool.map(lambda n: loop.submit(double(n)), range(2_000)))
    # Then each one ran and its future holds its own result
    assert [f.result(timeout=30) for f in futures] == [2 * n for n in range(2_000)]


def test_a_failing_coroutine_fails_its_future_only(loop: FireLoop) -> None:
    failing, fine = loop.submit(fail()), loop.submit(double(4))
    with pytest.raises(ValueError, match="boom"):
        failing.result(timeout=30)
    assert fine.result(timeout=30) == 8


def test_a_closed_loop_refuses_a_coroutine_instead_of_leaving_its_caller_waiting() -> None:
    closed = FireLoop(name="test-closed-loop")
    closed.close()
    coroutine = double(1)
    with pytest.raises(RuntimeError, match="closed"):
        closed.submit(coroutine)
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED  # closed, not left to warn "never awaited"


def test_warm_ups_run_after_their_delay_and_a_failing_one_is_logged(
    loop: FireLoop, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []
    done = threading.Event()

    async def note(name: str) -> None:
        ran.append(name)
        if len(ran) == 2:
            done.set()

    async def broken() -> None:
        raise OSError("unreachable")

    # When three warm-ups are scheduled, the failing one first
    with caplog.at_level(logging.WARNING, logger="punctual.targets.registry"):
        loop.schedule([Warmup(0.0, broken), Warmup(0.2, lambda: note("later")), Warmup(0.0, lambda: note("now"))])
        assert done.wait(30)
        # Then the others ran, in the order of their delays, and the failure was logged
        assert ran == ["now", "later"]
        assert _eventually(lambda: any("warm-up failed" in r.getMessage() for r in caplog.records))


def _eventually(predicate: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def test_close_fails_a_coroutine_submitted_but_not_started() -> None:
    # Given a loop kept busy by a coroutine that blocks its thread, and a second coroutine queued behind it
    closing = FireLoop(name="test-closing-loop")
    started, release = threading.Event(), threading.Event()

    async def block() -> None:
        started.set()
        release.wait(60)

    blocker = closing.submit(block())
    assert started.wait(30)
    queued = closing.submit(double(1))
    # When the loop is closed (from another thread: close waits for the loop thread, which is blocked)
    closer = threading.Thread(target=closing.close)
    closer.start()
    # Then the queued one fails at once instead of leaving its caller waiting
    with pytest.raises(RuntimeError, match="closed before the coroutine started"):
        queued.result(timeout=30)
    release.set()
    closer.join(30)
    assert blocker.done() or not closer.is_alive()


def test_only_coroutines_are_accepted(loop: FireLoop) -> None:
    with pytest.raises(TypeError, match="coroutine is required"):
        loop.submit(asyncio.sleep)  # type: ignore[arg-type]
