"""What the contract suites of the store ports (:mod:`punctual.stores.ports`) run on, and their helpers: each
implementation is a record of its ports (:class:`punctual.stores.ports.Stores`), each port a part of it.

Every implementation of the ports is one :class:`StoreKind` in :data:`STORE_KINDS`: a name (the test id, such as
``moto-single`` or ``memory``) and a way to open a fresh, empty store of that kind. The fixtures of
``conftest.py`` run every contract test once per kind; adding an implementation is adding one entry here (and
passing the suites).

The helpers talk to the store through the ports' methods only, with an explicit ``now`` everywhere, so that
no property of the suite depends on how fast the machine is.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from moto import mock_aws

from punctual.config.settings import Settings
from punctual.domain.keys import to_ms
from punctual.domain.model import Candidate, FireRecord, Outcome, Task, TaskStatus
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.ports import Stores
from punctual_tools.doubles.memory import InMemoryStore
from punctual_tools.local.dynamodb_local import make_client
from punctual_tools.template import ensure_table
from support import (  # the tests import TaskFactory and arm from here
    FIXED_NOW_MS,
    TaskFactory,
    arm,
    moto_one_request_at_a_time,
)

NOW = FIXED_NOW_MS  # the suite's "now": 2030-06-01T12:00:20.000Z, 20 s into a minute
ARMED_LEASE_MS = 200_000  # a task's armed lease, counted from NOW (due + grace + timeout + margin, roughly)
ALIVE_MS = 3_600_000  # how long a live executor's heartbeat holds, from NOW: past every instant of a test
SHARDS = 2  # more than one, so that a look for due work reads several shards; few, so that it stays quick


# -- the implementations ---------------------------------------------------------------------------------------
@dataclass
class Backend:
    """One opened store of some kind: ``store`` is what a test uses; ``new_store`` gives another store on the
    same data with a connection of its own (one per thread in the races, as separate processes would have)."""

    store: Stores
    new_store: Callable[[], Stores]
    kind: StoreKind | None = None  # what it is, set by the fixture


@dataclass
class DynamoBackend(Backend):
    """A DynamoDB store (AWS, DynamoDB Local or moto), with its low-level client and table for the tests of
    the adapter itself (``test_dynamodb_adapter.py``)."""

    client: Any = None
    table_name: str = ""

    @property
    def dynamo(self) -> DynamoStores:
        assert isinstance(self.store, DynamoStores)
        return self.store

    def raw_item(self, task_id: str) -> dict[str, Any]:
        """The stored item as DynamoDB holds it (attribute values), read consistently."""
        answer = self.client.get_item(TableName=self.table_name, Key={"task_id": {"S": task_id}}, ConsistentRead=True)
        item: dict[str, Any] = answer["Item"]
        return item


@dataclass(frozen=True)
class StoreKind:
    """One implementation of the port under test.

    ``open(request)`` yields a :class:`Backend` on a fresh, empty store and cleans up afterwards. ``atomic``:
    its conditional writes stay atomic under real concurrency (the races run only there; moto's server is
    not). ``dynamodb``: it is the DynamoDB adapter (its own tests run on it). ``marks``: pytest marks of its
    tests (a store that needs a server started by the session is ``integration``)."""

    name: str
    open: Callable[[pytest.FixtureRequest], contextlib.AbstractContextManager[Backend]]
    atomic: bool = False
    dynamodb: bool = False
    marks: tuple[Any, ...] = field(default=())


@contextlib.contextmanager
def dynamo_backend(client: Any, new_client: Callable[[int], Any], table: str, write_batch: str) -> Iterator[Backend]:
    """DynamoDB stores on ``table`` (built from template.yaml first): the first on ``client``, the n-th further
    one on ``new_client(n)``, a client of its own. Their thread pools are shut down afterwards."""
    ensure_table(client, table)
    opened: list[DynamoStores] = []

    def open_store(on: Any) -> DynamoStores:
        settings = Settings(table_name=table, shard_count=SHARDS, write_batch=write_batch, db_threads=4)
        opened.append(DynamoStores.from_settings(on, settings))
        return opened[-1]

    try:
        yield DynamoBackend(
            open_store(client), lambda: open_store(new_client(len(opened))), client=client, table_name=table
        )
    finally:
        for store in opened:
            store.table.close()


@functools.cache
def _moto_client() -> Any:
    """One moto client for the whole session (building a boto3 client costs more than most tests): moto's hook
    is on every client, active only inside ``mock_aws``, and each ``mock_aws`` starts from empty tables."""
    return boto3.client("dynamodb", region_name="us-east-1")


@functools.cache
def _local_client(endpoint: str, n: int = 0) -> Any:
    """The n-th client of the session's DynamoDB Local: a test's n-th store uses it (so that each racing thread
    has a client of its own), and the tests share them (building a client costs more than most tests)."""
    return make_client(endpoint)


def moto_backend(write_batch: str) -> Callable[[pytest.FixtureRequest], contextlib.AbstractContextManager[Backend]]:
    """DynamoDB as moto mocks it, each request atomic as DynamoDB's are."""

    @contextlib.contextmanager
    def open_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
        with (
            mock_aws(),
            moto_one_request_at_a_time(),
            dynamo_backend(
                _moto_client(),
                lambda n: boto3.client("dynamodb", region_name="us-east-1"),
                "punctual-contract",
                write_batch,
            ) as backend,
        ):
            yield backend

    return open_backend


def dynamodb_local_backend(
    write_batch: str,
) -> Callable[[pytest.FixtureRequest], contextlib.AbstractContextManager[Backend]]:
    """The session's DynamoDB Local (fixture ``ddb_local``), a fresh table each time (dropped afterwards)."""

    @contextlib.contextmanager
    def open_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
        endpoint: str = request.getfixturevalue("ddb_local")
        client = _local_client(endpoint)
        table = f"punctual-contract-{uuid.uuid4().hex[:8]}"
        try:
            with dynamo_backend(client, lambda n: _local_client(endpoint, n), table, write_batch) as backend:
                yield backend
        finally:
            with contextlib.suppress(client.exceptions.ResourceNotFoundException):
                client.delete_table(TableName=table)

    return open_backend


@contextlib.contextmanager
def memory_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The in-memory store: every further store is the same one (its data and its lock are the process's)."""
    store = InMemoryStore(SHARDS)
    yield Backend(store, lambda: store)


STORE_KINDS = [
    StoreKind("memory", memory_backend, atomic=True),
    StoreKind("moto-single", moto_backend("single"), dynamodb=True),
    StoreKind("moto-transaction", moto_backend("transaction"), dynamodb=True),
    StoreKind(
        "dynamodb-local-single",
        dynamodb_local_backend("single"),
        atomic=True,
        dynamodb=True,
        marks=(pytest.mark.integration,),
    ),
    StoreKind(
        "dynamodb-local-transaction",
        dynamodb_local_backend("transaction"),
        atomic=True,
        dynamodb=True,
        marks=(pytest.mark.integration,),
    ),
]


def store_params(select: Callable[[StoreKind], bool] = lambda kind: True) -> list[Any]:
    """The kinds ``select`` keeps, as fixture params named by the store."""
    return [pytest.param(kind, id=kind.name, marks=kind.marks) for kind in STORE_KINDS if select(kind)]


# -- tasks -------------------------------------------------------------------------------------------------------
def stored(store: Stores, task_id: str) -> Task:
    """The task as stored now; it must exist."""
    task = store.client.get(task_id)
    assert task is not None, task_id
    return task


def ms(moment: Any) -> int | None:
    """A stored instant in epoch ms (None stays None)."""
    return None if moment is None else to_ms(moment)


def candidate(task: Task) -> Candidate:
    """The task as a look for due work shows it: its due time, status, lease and (when ARMED) owner."""
    return Candidate(
        task_id=task.task_id,
        due_ms=task.due_ms,
        status=task.status,
        lease_until_ms=ms(task.lease_until),
        misfire_grace_ms=task.misfire_grace_ms,
        misfire_policy=task.misfire_policy,
        owner=task.armed_by if task.status is TaskStatus.ARMED else None,
    )


def alive(store: Stores, executor: str, until_ms: int, now_ms: int = NOW) -> None:
    """HEARTBEAT: ``executor`` is alive until ``until_ms`` (written at ``now_ms``); it must not be taken over."""
    assert store.firing.heartbeat(executor, now_ms, until_ms) is True


def record(store: Stores, executor: str, fire: FireRecord) -> bool:
    """RECORD one outcome (or a RETRY): whether it was written."""
    (written,) = store.firing.record_many(executor, [fire])
    return written


def succeeded(
    task: Task, finished_ms: int | None = None, outcome: Outcome = Outcome.SUCCEEDED, detail: str | None = None
) -> FireRecord:
    """The record of a fire exactly at the task's due time, finished 2 ms later (or at ``finished_ms``)."""
    end = task.due_ms + 2 if finished_ms is None else finished_ms
    return FireRecord(
        task_id=task.task_id,
        outcome=outcome,
        fired_ms=float(task.due_ms),
        finished_ms=end,
        drift_ms=0.0,
        drift_corrected_ms=None,
        detail=detail,
    )


def armed_task(
    store: Stores,
    tasks: TaskFactory,
    executor: str = "exec-1",
    *,
    due_ms: int = NOW + 10_000,
    lease_until_ms: int = NOW + ARMED_LEASE_MS,
    alive_until_ms: int = NOW + ALIVE_MS,
    **fields: Any,
) -> Task:
    """A new task armed at NOW by ``executor`` (batch ``batch-1``), its task lease until ``lease_until_ms``; the
    executor's heartbeat, written at NOW first, holds until ``alive_until_ms``."""
    task = tasks.create(due_ms, **fields)
    alive(store, executor, alive_until_ms)
    armed = arm(store, task, executor, NOW, lease_until_ms=lease_until_ms, batch_id="batch-1")
    assert armed is not None
    assert armed.taken_over_until_ms is None
    return armed.task


def due_ids(store: Stores, until_ms: int, now_ms: int = NOW) -> list[str]:
    """The ids a look for due work at ``now_ms`` finds up to ``until_ms``, in the order found."""
    return [c.task_id for c in store.dispatch.find_due(now_ms, until_ms).candidates]
