"""A tenant's quotas against parallel callers on DynamoDB Local, with real threads: 20 creates at once against a
quota of 5, for schedules (each caller a client and connection of its own, as separate processes are) and for
tasks (the clients of one API process, one per request, sharing the process's guard). Only counts are asserted,
never how long anything took."""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Callable

import pytest

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.schedules import ScheduleState
from punctual.errors import QuotaExceededError
from punctual.runtime.client import Client
from punctual.scheduling.quotas import QuotaGuard
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import LogAction
from punctual_tools.local.dynamodb_local import make_client
from support import FakeClock, run_threads

RACERS = 20
QUOTA = 5
TIMEOUT_S = 120  # a hung racer fails the test instead of hanging it; no property depends on it
NOW_MS = 1_900_000_020_000


@pytest.fixture
def settings(ddb_local: str, local_table: str) -> Settings:
    quotas = {"active_tasks": QUOTA, "schedules": QUOTA, "schedule_rate_per_s": 100}
    return Settings(
        endpoint_url=ddb_local,
        table_name=local_table,
        ntp_server=None,
        tenant_map=json.dumps({"tenants": {"acme": {"quotas": quotas}}}),
    )


def outcomes(create: Callable[[int], object]) -> Counter[str]:
    """What each of the racers' ``create(k)`` did, all released at once: "created", or the quota that refused it."""

    def one(k: int) -> str:
        try:
            create(k)
        except QuotaExceededError as exc:
            return exc.quota
        return "created"

    return Counter(run_threads([functools.partial(one, k) for k in range(RACERS)], timeout=TIMEOUT_S))


def test_parallel_schedule_creates_from_separate_clients_never_pass_a_quota_of_5(
    ddb_local: str, settings: Settings
) -> None:
    # Given 20 callers, each with a client and a connection of its own (as 20 API processes would have), of a
    # tenant allowed 5 schedules
    clients = [
        Client(settings, dynamodb=make_client(ddb_local), clock=FakeClock(wall_ms=NOW_MS)) for _ in range(RACERS)
    ]
    # When all of them create a schedule at once (one a day: a single occurrence ahead at most)
    results = outcomes(
        lambda k: clients[k].create_schedule(f"acme/daily-{k:02d}", "rate(1 day)", LogAction(), timezone="UTC")
    )
    # Then exactly 5 were stored and the 15 others refused, naming the quota
    assert results == Counter({"created": QUOTA, "schedules": RACERS - QUOTA})
    live = [s for s in clients[0].list_schedules("acme/") if s.state is not ScheduleState.DELETED]
    assert len(live) == QUOTA


def test_parallel_task_creates_through_one_api_process_never_pass_a_quota_of_5(
    ddb_local: str, settings: Settings
) -> None:
    # Given one API process: one store, and a client per request over it sharing the process's quota guard
    store = DynamoStores.from_settings(make_client(ddb_local), settings)
    guard = QuotaGuard(store.client)

    def create(k: int) -> None:
        client = Client(settings, stores=store, clock=FakeClock(wall_ms=NOW_MS), quota=guard)
        client.schedule(from_ms(NOW_MS + 3_600_000), LogAction(), task_id=f"acme/t-{k:02d}")

    # When 20 requests create a task at once for a tenant allowed 5 active tasks
    results = outcomes(create)
    # Then exactly 5 were created and the others refused, naming the quota
    assert results == Counter({"created": QUOTA, "active_tasks": RACERS - QUOTA})
    assert store.client.count_active("acme") == QUOTA
