"""Functional-tier fixtures: the real repository on moto, with the table built from template.yaml."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from moto_table import dynamodb, now_ms, read_raw, settings
from punctual.config.settings import Settings
from punctual.executing.executor import Executor
from punctual.polling.poller import Poller
from punctual.runtime.client import Client
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from support import FakeClock, RecordingInvoker, TaskFactory, executor_on

__all__ = ["dynamodb", "now_ms", "read_raw", "settings"]  # the moto table's fixtures, shared with tests/tools


@pytest.fixture(params=["single", "transaction"])
def store(request: pytest.FixtureRequest, dynamodb: Any, settings: Settings) -> DynamoStores:
    """The repository, once per way of writing many items at once (``Settings.write_batch``)."""
    return DynamoStores.from_settings(dynamodb, settings.model_copy(update={"write_batch": request.param}))


@pytest.fixture
def clock(now_ms: int) -> FakeClock:
    """A fake clock at the tier's fixed "now" (a test that needs another clock has its own ``clock``)."""
    return FakeClock(wall_ms=now_ms)


@pytest.fixture
def client(dynamodb: Any, settings: Settings, clock: FakeClock) -> Client:
    """The client straight to the moto table (no tenant), on ``clock``."""
    return Client(settings, dynamodb=dynamodb, clock=clock)


@pytest.fixture
def tasks(store: DynamoStores) -> TaskFactory:
    return TaskFactory(store)


@pytest.fixture
def invoker() -> RecordingInvoker:
    """Lambda's async invoke, recording each batch sent."""
    return RecordingInvoker()


@pytest.fixture
def poller(store: DynamoStores, invoker: RecordingInvoker, settings: Settings) -> Poller:
    """A poller of ``store``, sending its batches to ``invoker``."""
    return poller_on(store, invoker, settings, poller_id="poller-test")


@pytest.fixture
def executor(store: DynamoStores, settings: Settings) -> Executor:
    """An executor on the real clock, its NTP probe off."""
    return executor_on(store, settings)


@pytest.fixture
def local_home(tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home whose state file points the CLI at the moto table (endpoint None: AWS, i.e. moto)."""
    home = tmp_path / "home"
    home.mkdir()
    state = {"endpoint_url": None, "table_name": settings.table_name, "shard_count": settings.shard_count}
    (home / "stack.json").write_text(json.dumps(state))
    monkeypatch.setenv("PUNCTUAL_REGION", "us-east-1")
    return home
