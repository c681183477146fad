"""Functional-tier fixtures: the real repository on moto, with the table built from template.yaml."""

from __future__ import annotations

from typing import Any

import pytest

from moto_table import dynamodb, now_ms, read_raw, settings
from punctual.config.settings import Settings
from punctual.domain.clock import SystemClock
from punctual.domain.keys import from_ms
from punctual.domain.model import Task
from punctual.executing.executor import Executor
from punctual.runtime.ntp import OffsetProbe
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import LogAction
from support import FIXED_NOW_MS

__all__ = ["dynamodb", "now_ms", "read_raw", "settings"]  # the moto table's fixtures, shared with tests/tools


@pytest.fixture(params=["single", "transaction"])
def store(request: pytest.FixtureRequest, dynamodb: Any, settings: Settings) -> DynamoStores:
    """The repository, once per way of writing many items at once (``Settings.write_batch``)."""
    return DynamoStores.from_settings(dynamodb, settings.model_copy(update={"write_batch": request.param}))


class TaskFactory:
    """Builds tasks with sensible defaults and stores them through the repository."""

    def __init__(self, store: DynamoStores) -> None:
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


@pytest.fixture
def tasks(store: DynamoStores) -> TaskFactory:
    return TaskFactory(store)


@pytest.fixture
def executor(store: DynamoStores, settings: Settings) -> Executor:
    """An executor on the real clock, its NTP probe off."""
    return Executor(store.firing, settings, SystemClock(), OffsetProbe(None, 0.5))
