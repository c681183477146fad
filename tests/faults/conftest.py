"""Fault-suite fixtures: settings on the session's DynamoDB Local, the loopback target, executors (in-process, and
the real executor handler under Lambda's rules).

The scenarios are marked ``integration`` (``e2e`` for the one that runs the local runtime in subprocesses) by
a ``pytestmark`` in each module, since tests/conftest.py marks tiers by directory name. Every server, thread
and process a scenario starts is stopped by these fixtures or by the scenario itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lambda_tools import LambdaExecutors

from punctual.config.settings import Settings
from punctual.domain.clock import SystemClock
from punctual.executing.executor import Executor
from punctual.runtime.ntp import OffsetProbe
from punctual.stores.dlq import DeadLetterQueue
from punctual.stores.dynamodb import DynamoStores
from punctual_tools.local.lambda_rules import FunctionLimits
from punctual_tools.local.target import TargetServer

SHARDS = 4


@pytest.fixture
def make_settings(ddb_local: str, local_table: str) -> Callable[..., Settings]:
    """Settings for this test's table on the session's DynamoDB Local; keyword arguments override."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "endpoint_url": ddb_local,
            "table_name": local_table,
            "ntp_server": None,
            "shard_count": SHARDS,
            "worker_threads": 8,
            "db_threads": 4,
            "allowed_targets": "127.0.0.1",
        }  # the loopback receiver, by configuration
        values.update(overrides)
        return Settings(**values)

    return make


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
def target() -> Iterator[TargetServer]:
    """The loopback HTTP target the scenarios' http actions POST to."""
    with TargetServer() as server:
        yield server


@pytest.fixture
def make_executor() -> Iterator[Callable[..., Executor]]:
    """Executors on the real clock (one per Lambda environment); their dispatchers are closed afterwards."""
    made: list[Executor] = []

    def make(
        store: DynamoStores,
        settings: Settings,
        offset: OffsetProbe | None = None,
        dead_letters: DeadLetterQueue | None = None,
    ) -> Executor:
        executor = Executor(
            store.firing, settings, SystemClock(), offset or OffsetProbe(None, 0.1), dead_letters=dead_letters
        )
        made.append(executor)
        return executor

    yield make
    for executor in made:
        # Executor has no close(); its dispatcher has. The recorder thread is a daemon blocked on its queue.
        dispatcher = getattr(executor, "_dispatcher", None)
        if dispatcher is not None:
            dispatcher.close()


@pytest.fixture
def lambda_executors(tmp_path: Path) -> Iterator[Callable[..., LambdaExecutors]]:
    """Makes :class:`LambdaExecutors` (keyword arguments as its own); each is shut down, its workers ended, after
    the test."""
    made: list[LambdaExecutors] = []

    def make(
        settings: Settings, limits: FunctionLimits, *, max_concurrency: int = 4, prewarm: int = 1, **scale: Any
    ) -> LambdaExecutors:
        home = tmp_path / f"lambda-{len(made)}"
        home.mkdir()
        run = LambdaExecutors(home, settings, limits, max_concurrency=max_concurrency, prewarm=prewarm, **scale)
        made.append(run)
        return run

    yield make
    for run in made:
        run.close()
