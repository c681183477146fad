"""Helpers that more than one test module uses, whatever its tier (``tests/`` is on ``sys.path``, so a test
module imports them with ``from support import ...``; fixtures stay in the conftest.py files).

* time: :func:`now_ms`, :func:`wait_until`, :class:`FakeClock`, and the functional tier's fixed
  :data:`FIXED_NOW_MS`;
* threads, servers and processes: :func:`run_threads`, :func:`join_all`, :func:`serving` (an HTTP server on
  a thread), :class:`StubTarget` (an HTTP target that picks each answer's status), :func:`interrupt` (Ctrl-C a
  subprocess), :func:`running_dynamodb_local`;
* tasks and the store: :class:`TaskFactory`, :func:`make_tasks`, :func:`create_all`, :func:`store_for`,
  :func:`with_part`, :func:`read_task`, :func:`candidate_of`, :func:`run_until_done`;
* what an executor writes and sends: :func:`executor_on`, :func:`retry_record`, :func:`record_failed`,
  :func:`make_failed`, :func:`one_batch`, :func:`dispatch_batch`;
* the REST API: :func:`serving_api` (the local API server over a client of the table);
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

from punctual.api import build_app
from punctual.config.settings import Settings
from punctual.config.tenant_map import TenantMap
from punctual.domain.clock import Clock, SystemClock
from punctual.domain.events import BatchEvent, BatchReport
from punctual.domain.keys import from_ms
from punctual.domain.model import Action, Armed, ArmRequest, Candidate, FireRecord, Outcome, Task, TaskStatus
from punctual.executing.executor import Executor
from punctual.runtime.client import Client
from punctual.runtime.ntp import OffsetProbe
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.due import DueIndex
from punctual.stores.dynamodb.executors import Executors
from punctual.stores.dynamodb.schedules import ScheduleItems
from punctual.stores.ports import Stores
from punctual.targets import LogAction
from punctual_tools.doubles import FakeClock, RecordingInvoker, StubTarget, serving  # noqa: F401 - for the tests
from punctual_tools.local.api_server import LocalApi
from punctual_tools.local.dynamodb_local import DynamoDBLocal, make_client

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
class TaskFactory:
    """Builds tasks with distinct ids and payloads (a log action unless told), and creates them through the store
    (written at :data:`FIXED_NOW_MS` unless told): the ``tasks`` fixture of the functional and contract tiers."""

    def __init__(self, store: Stores) -> None:
        self.store = store
        self._n = 0

    def build(self, due_ms: int, task_id: str | None = None, **fields: Any) -> Task:
        self._n += 1
        fields.setdefault("action", LogAction(message="test"))
        fields.setdefault("payload", {"n": self._n})
        return Task(task_id=task_id or f"task-{self._n:04d}", due_at=from_ms(due_ms), **fields)

    def create(self, due_ms: int, task_id: str | None = None, now_ms: int = FIXED_NOW_MS, **fields: Any) -> Task:
        stored, created = self.store.client.create(self.build(due_ms, task_id, **fields), now_ms)
        assert created
        return stored


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


@contextlib.contextmanager
def running_dynamodb_local() -> Iterator[str]:
    """An in-memory DynamoDB Local of its own, started: its endpoint URL; stopped on leaving."""
    server = DynamoDBLocal(data_dir=None, in_memory=True)
    endpoint = server.start()
    try:
        yield endpoint
    finally:
        server.stop()


def read_task(store: Stores, task_id: str) -> Task:
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


# -- what an executor writes and sends ---------------------------------------------------------------------------
def executor_on(
    store: DynamoStores, settings: Settings, clock: Clock | None = None, probe_s: float = 0.5, **options: Any
) -> Executor:
    """An executor of ``store``'s tasks, on ``clock`` (by default the real one), its NTP probe off (giving up after
    ``probe_s`` s); ``options`` are the Executor's own keywords (``dead_letters``, ``actions``, ...)."""
    return Executor(store.firing, settings, clock or SystemClock(), OffsetProbe(None, probe_s), **options)


def retry_record(task: Task, finished_ms: int, detail: str, *, retry_due_ms: int, **fields: Any) -> FireRecord:
    """The RETRY an executor records for ``task``: its action failed (``detail``) and finished at ``finished_ms``;
    next try at ``retry_due_ms``. The occurrence's first due is the task's own due time and the fire measured
    nothing, unless ``fields`` say otherwise (``first_due_ms``, ``fired_ms``, ``drift_ms``, ``retry_delay_ms``)."""
    retry = FireRecord(
        task_id=task.task_id,
        outcome=Outcome.RETRY,
        fired_ms=None,
        finished_ms=finished_ms,
        drift_ms=None,
        drift_corrected_ms=None,
        detail=detail,
        retry_due_ms=retry_due_ms,
        first_due_ms=task.due_ms,
    )
    return replace(retry, **fields)


def record_failed(store: Stores, task: Task, executor_id: str, now_ms: int, detail: str = "boom") -> Task:
    """Make a stored task FAILED as an executor does: ``executor_id`` arms it at ``now_ms`` and records the
    failure (``detail``) 10 ms past its due time; the task as stored then."""
    assert arm(store, task, executor_id, now_ms) is not None
    failure = FireRecord(
        task_id=task.task_id,
        outcome=Outcome.FAILED,
        fired_ms=float(task.due_ms),
        finished_ms=task.due_ms + 10,
        drift_ms=0.0,
        drift_corrected_ms=None,
        detail=detail,
    )
    assert store.firing.record_many(executor_id, [failure]) == [True]
    return read_task(store, task.task_id)


def make_failed(store: Stores, tasks: TaskFactory, task_id: str, now_ms: int) -> Task:
    """A new task ``task_id``, due 1 s past ``now_ms``, armed and recorded FAILED (:func:`record_failed`)."""
    return record_failed(store, tasks.create(now_ms + 1_000, task_id), "x", now_ms)


def one_batch(invoker: RecordingInvoker) -> BatchEvent:
    """What one poll sent, as one batch: a poll dispatches each read of the index as it goes, so tasks found in
    two reads (both sides of a minute's edge, or more than a read's buckets) come in two or more batches."""
    events = list(invoker.events)
    assert events, "the poll dispatched nothing"
    return events[0].model_copy(update={"tasks": [task for event in events for task in event.tasks]})


def dispatch_batch(store: DynamoStores, settings: Settings, now_ms: int) -> BatchEvent:
    """Run the poller once at ``now_ms`` and return what it sent, as one batch (:func:`one_batch`)."""
    invoker = RecordingInvoker()
    poller_on(store, invoker, settings).poll(now_ms)
    return one_batch(invoker)


# -- the REST API --------------------------------------------------------------------------------------------
@contextlib.contextmanager
def serving_api(dynamodb: Any, settings: Settings, clock: Clock, tokens: dict[str, str]) -> Iterator[LocalApi]:
    """The local API server (bearer ``tokens``, each naming its tenant) over a :class:`Client` of the table on
    ``dynamodb`` with ``settings``, on ``clock``; stopped on leaving."""

    def resolver() -> Any:
        return build_app(lambda: Client(settings, dynamodb=dynamodb, clock=clock), TenantMap())

    with LocalApi(resolver, tokens) as server:
        yield server


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
