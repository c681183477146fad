"""Helpers that more than one test module uses, whatever its tier (``tests/`` is on ``sys.path``, so a test
module imports them with ``from support import ...``; fixtures stay in the conftest.py files).

* time: :func:`now_ms`, :func:`wait_until`, :class:`FakeClock`, and the functional tier's fixed
  :data:`FIXED_NOW_MS`;
* threads, servers and processes: :func:`run_threads`, :func:`join_all`, :func:`serving` (an HTTP server on
  a thread), :class:`StubTarget` (an HTTP target that picks each answer's status), :func:`interrupt` (Ctrl-C a
  subprocess);
* tasks and the store: :func:`make_tasks`, :func:`create_all`, :func:`store_for`, :func:`with_part`,
  :func:`read_task`, :func:`candidate_of`, :func:`run_until_done`;
* moto in-process: :func:`moto_one_request_at_a_time` (each request atomic, as DynamoDB applies it);
* stand-ins: :class:`RecordingInvoker` (Lambda's async invoke), :class:`NoRepository`; :class:`FakeClock`,
  :func:`serving`, :class:`StubTarget` and :class:`RecordingInvoker` come from :mod:`punctual_tools.doubles`,
  which the cost model uses too;
* Hypothesis strategies the fuzz tests share, and :func:`reorder_keys`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import string
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import strategies as st

from punctual.config.settings import Settings
from punctual.domain.clock import SystemClock
from punctual.domain.events import BatchReport
from punctual.domain.keys import from_ms
from punctual.domain.model import Action, Armed, ArmRequest, Candidate, Task, TaskStatus
from punctual.executing.executor import Executor
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.due import DueIndex
from punctual.stores.dynamodb.executors import Executors
from punctual.stores.dynamodb.schedules import ScheduleItems
from punctual.stores.ports import Stores
from punctual_tools.doubles import FakeClock, RecordingInvoker, StubTarget, serving  # noqa: F401 - for the tests
from punctual_tools.local.dynamodb_local import make_client

T = TypeVar("T")

# The functional tier's "now" for tests that pass explicit times: 2030-06-01T12:00:20.000Z (20 s into a minute).
FIXED_NOW_MS = int(datetime(2030, 6, 1, 12, 0, 20, tzinfo=UTC).timestamp() * 1000)


# -- time ----------------------------------------------------------------------------------------------------
def call_worker_once(handler: Path, env: dict[str, str], event: dict[str, Any], log_path: Path) -> Any:
    """Start an executor worker as the stack starts one (a spawned process running ``run_worker`` on ``handler``,
    with ``env``), invoke it once with ``event`` and end it; the handler's result."""
    from punctual_tools.local.worker import WorkerSpec, run_worker  # noqa: PLC0415 - every tier imports this module; few start a worker

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    worker = context.Process(
        target=run_worker,
        args=(str(handler), child, str(log_path), env, WorkerSpec(timeout_s=30, memory_mb=256)),
        daemon=True,
    )
    worker.start()
    try:
        assert parent.poll(60)
        assert parent.recv()["ready"]
        parent.send(event)
        assert parent.poll(60)
        return parent.recv()["result"]
    finally:
        parent.send(None)
        worker.join(10)
        if worker.is_alive():
            worker.kill()


def now_ms() -> int:
    """The wall clock, in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
    """Whether ``condition`` became true within ``timeout`` s, asked every ``interval`` s (and once at the end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


# -- threads and processes -----------------------------------------------------------------------------------
def join_all(threads: Iterable[threading.Thread], timeout: float, what: str = "threads") -> None:
    """Wait for every thread, ``timeout`` s in all; fail (instead of hanging) when one is still running."""
    threads = list(threads)
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), f"{what} still running after {timeout} s"


def run_threads(targets: list[Callable[[], T]], timeout: float = 60) -> list[T]:
    """Run each target in a thread of its own, all released together by a barrier; their results, in order.

    A thread's error is re-raised; a thread still running after ``timeout`` s fails the test instead of hanging it.
    """
    barrier = threading.Barrier(len(targets))
    results: list[Any] = [None] * len(targets)
    errors: list[BaseException] = []

    def run(i: int, target: Callable[[], T]) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = target()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, t), daemon=True, name=f"race-{i}") for i, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    join_all(threads, timeout, "race threads")
    if errors:
        raise errors[0]
    return results


def interrupt(process: subprocess.Popen[Any], timeout: float = 30) -> None:
    """Ctrl-C ``process`` (SIGINT: a clean stop) and reap it; kill it when it has not ended within ``timeout`` s."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# -- tasks and the store -------------------------------------------------------------------------------------
def make_tasks(prefix: str, dues: Iterable[int], action: Action, grace_ms: int = 60_000, **fields: Any) -> list[Task]:
    """One task per due instant (epoch ms): ids ``{prefix}-0000``, ``{prefix}-0001``, ..., payload ``{"i": n}``."""
    return [
        Task(
            task_id=f"{prefix}-{i:04d}",
            due_at=from_ms(due),
            action=action,
            payload={"i": i},
            misfire_grace_ms=grace_ms,
            **fields,
        )
        for i, due in enumerate(dues)
    ]


def create_all(store: DynamoStores, tasks: list[Task], created_ms: int | None = None) -> None:
    """Store the tasks (as the client does, written at ``created_ms``, by default now), 8 at a time."""
    at = now_ms() if created_ms is None else created_ms
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda t: store.client.create(t, at), tasks))
    assert all(created for _, created in results)


def store_for(settings: Settings, part: type[Any] | None = None) -> DynamoStores:
    """The store's parts on ``settings.endpoint_url`` (DynamoDB Local), with a boto3 client of their own (one per
    thread in the races); with ``part``, that part made of this subclass (:func:`with_part`)."""
    stores = DynamoStores.from_settings(make_client(settings.endpoint_url), settings)
    return stores if part is None else with_part(stores, part)


def with_part(stores: DynamoStores, part: type[Any]) -> DynamoStores:
    """``stores`` with one part made of ``part``, a subclass of the part's own class (a fault or a probe injected
    into the due index, the executors' writes or the schedules), on the same table and the same other parts."""
    if issubclass(part, DueIndex):
        return replace(stores, dispatch=part(stores.table, stores.client, stores.firing))
    if issubclass(part, Executors):
        return replace(stores, firing=part(stores.table, stores.client.writes, stores.client))
    if issubclass(part, ScheduleItems):
        return replace(stores, schedules=part(stores.table, stores.client))
    raise TypeError(f"{part.__name__} is not a part of the DynamoDB store")


def read_task(store: DynamoStores, task_id: str) -> Task:
    """The stored task, which must exist."""
    task = store.client.get(task_id)
    assert task is not None, task_id
    return task


def due_candidates(store: DynamoStores, bucket_ms: int, shard: int, until_ms: int) -> list[Candidate]:
    """What one shard of one minute bucket of the due index lists up to ``until_ms``, read back from the table."""
    return store.dispatch.candidates([e.task_id for e in store.dispatch.query_index(bucket_ms, shard, until_ms)])


def candidate_of(task: Task, status: TaskStatus = TaskStatus.PENDING, lease_until_ms: int | None = None) -> Candidate:
    """The task as a poll finds it in the due index (by default PENDING, no lease)."""
    return Candidate(
        task_id=task.task_id,
        due_ms=task.due_ms,
        status=status,
        lease_until_ms=lease_until_ms,
        misfire_grace_ms=task.misfire_grace_ms,
    )


def run_until_done(
    store: DynamoStores, settings: Settings, executor: Executor, task_id: str, rounds: int = 4
) -> list[BatchReport]:
    """Poll on the real clock and run each batch on ``executor``, as the poller and the executors do, until the
    task is finished or ``rounds`` polls have run; the executor's reports."""
    clock = SystemClock()
    reports: list[BatchReport] = []
    for _ in range(rounds):
        invoker = RecordingInvoker()
        poller_on(store, invoker, settings).poll(int(clock.wall_ms()))
        reports.extend(executor.run_batch(event) for event in invoker.events)
        if not read_task(store, task_id).status.is_active:
            break
    return reports


# -- stand-ins -----------------------------------------------------------------------------------------------
class NoRepository:
    """A repository that ``Client.build_task`` must never touch: any attribute access fails the test."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"build_task used the repository ({name})")


# -- Hypothesis strategies -----------------------------------------------------------------------------------
# Every UTC offset a datetime can carry (strictly inside +-24 h), and real zones with their DST rules.
fixed_offsets = st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
zones = st.just(UTC) | fixed_offsets | st.timezones()

task_ids = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}\Z")
clean_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)  # no lone surrogates

json_payloads = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)  # JSON integers have no size limit
    | st.floats(allow_nan=False, allow_infinity=False)
    | clean_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(clean_text, children, max_size=4),
    max_leaves=20,
)

path_segments = st.text(string.ascii_letters + string.digits + "-._~", min_size=1, max_size=8)


class Opaque:
    """An object no validator knows."""

    def __repr__(self) -> str:
        return "Opaque()"


def reorder_keys(value: Any) -> Any:
    """The same JSON value with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {k: reorder_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reorder_keys(v) for v in value]
    return value


def arm(
    store: Stores,
    task: Task,
    executor_id: str,
    now_ms: int,
    *,
    lease_until_ms: int | None = None,
    batch_id: str = "batch-test",
) -> Armed | None:
    """ARM one task (at the due time it was created with) for ``executor_id``; its task lease defaults to an
    hour past its due time."""
    lease = task.due_ms + 3_600_000 if lease_until_ms is None else lease_until_ms
    return store.firing.arm_many(
        [ArmRequest(task_id=task.task_id, due_ms=task.due_ms, lease_until_ms=lease)], batch_id, executor_id, now_ms
    )[0]


@contextlib.contextmanager
def moto_one_request_at_a_time() -> Iterator[None]:
    """Inside it, moto's in-process hook answers one request at a time, as DynamoDB applies each request
    atomically. Left alone, moto copies a whole table for a transaction while another thread's write changes
    it (``dictionary changed size during iteration``): an error DynamoDB never gives."""
    from moto.core.botocore_stubber import BotocoreStubber  # noqa: PLC0415 - moto loads only in the tests that serialise it

    lock = threading.RLock()
    original = BotocoreStubber.process_request

    def one_at_a_time(self: Any, request: Any) -> Any:
        with lock:
            return original(self, request)

    BotocoreStubber.process_request = one_at_a_time  # type: ignore[method-assign]
    try:
        yield
    finally:
        BotocoreStubber.process_request = original  # type: ignore[method-assign]
