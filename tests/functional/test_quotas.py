"""A tenant's quotas on moto: active tasks counted from the tenant_active_sharded index, schedules and their fire rate,
retry attempts at schedule time and at fire time. Past a quota: an error naming it, nothing stored."""

from __future__ import annotations

import json
from typing import Any

import pytest

from punctual.config.settings import Settings
from punctual.config.tenant_map import Quotas
from punctual.domain.decisions import FireDecision, decide_outcome
from punctual.domain.keys import from_ms
from punctual.domain.model import Outcome, Task, TaskStatus
from punctual.domain.retry import RetryPolicy
from punctual.domain.schedules import ScheduleState
from punctual.errors import QuotaExceededError
from punctual.runtime.client import Client
from punctual.runtime.wiring import build_poller
from punctual.scheduling.client import Client as TaskClient
from punctual.scheduling.quotas import QuotaGuard, TenantAdmission, schedule_rate_per_s
from punctual.scheduling.redrive import Selection, redrive_tasks
from punctual.stores.dynamodb import DynamoStores
from punctual.stores.dynamodb.table import TENANT_ACTIVE_INDEX
from punctual.targets import LogAction
from punctual_tools.doubles.memory import InMemoryStore
from punctual_tools.template import TABLE_RESOURCE, load_template
from support import FakeClock, RecordingInvoker, record_failed

QUOTAS = {"active_tasks": 3, "schedules": 2, "schedule_rate_per_s": 1, "retry_attempts": 2}


@pytest.fixture
def tenant_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"tenant_map": json.dumps({"tenants": {"acme": {"quotas": QUOTAS}}})})


@pytest.fixture
def client(dynamodb: Any, tenant_settings: Settings, now_ms: int) -> Client:
    return Client(tenant_settings, dynamodb=dynamodb, clock=FakeClock(wall_ms=now_ms))


def _stored_ids(dynamodb: Any, settings: Settings) -> set[str]:
    return {item["task_id"]["S"] for item in dynamodb.scan(TableName=settings.table_name)["Items"]}


def test_active_tasks_past_the_quota_are_refused_naming_it_and_nothing_is_stored(
    client: Client, dynamodb: Any, tenant_settings: Settings, now_ms: int
) -> None:
    # Given acme at its quota of 3 active tasks, and tasks of another tenant and of the operator
    for i in range(3):
        client.schedule(from_ms(now_ms + 60_000), LogAction(), task_id=f"acme/t-{i}")
    client.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="beta/t-0")
    client.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="ops-0")
    before = _stored_ids(dynamodb, tenant_settings)
    # When acme schedules a fourth
    with pytest.raises(QuotaExceededError) as refused:
        client.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="acme/t-3")
    # Then the quota is named, nothing is stored, and other tenants and the operator are not held by it
    assert refused.value.quota == "active_tasks"
    assert "active_tasks" in str(refused.value)
    assert _stored_ids(dynamodb, tenant_settings) == before
    client.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="beta/t-1")
    client.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="ops-1")
    # And a finished task makes room again (the count is read anew when the cached one says "full")
    client.cancel("acme/t-0")
    client.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="acme/t-3")


def test_the_count_reads_only_the_tenants_own_active_keys(
    dynamodb: Any, tenant_settings: Settings, now_ms: int
) -> None:
    # Given acme's two active tasks, and an item keyed under beta that forges tenant="acme"
    store = DynamoStores.from_settings(dynamodb, tenant_settings)
    client = Client(tenant_settings, dynamodb=dynamodb, clock=FakeClock(wall_ms=now_ms))
    for i in range(2):
        client.schedule(from_ms(now_ms + 60_000), LogAction(), task_id=f"acme/t-{i}")
    forged = client.to_item(client.build_task(from_ms(now_ms + 60_000), LogAction(), task_id="beta/junk"))
    forged = {**forged, "tenant": {"S": "acme"}, "tenant_shard": {"S": "acme#0"}}
    dynamodb.put_item(TableName=tenant_settings.table_name, Item=forged)
    # Then acme's count is its own two: a forged attribute neither fills nor empties another's quota
    assert store.client.count_active("acme") == 2
    assert store.client.count_active("beta") == 0


def _index_keys(index_name: str) -> tuple[str, str]:
    """The partition and sort key attributes of one of the table's indexes, as template.yaml defines them."""
    table = load_template()["Resources"][TABLE_RESOURCE]["Properties"]
    (index,) = [i for i in table["GlobalSecondaryIndexes"] if i["IndexName"] == index_name]
    keys = {k["KeyType"]: k["AttributeName"] for k in index["KeySchema"]}
    return keys["HASH"], keys["RANGE"]


def test_a_tenants_active_entries_spread_over_many_index_keys(dynamodb: Any, settings: Settings, now_ms: int) -> None:
    # Given one tenant's active tasks made on every path that makes one: single creates, many at once, a
    # schedule's occurrences, and a redrive of a failed task
    store = DynamoStores.from_settings(dynamodb, settings)
    client = Client(settings, dynamodb=dynamodb, clock=FakeClock(wall_ms=now_ms))
    for i in range(64):
        client.schedule(from_ms(now_ms + 120_000 + i), LogAction(), task_id=f"acme/one-{i}")
    many = [
        {"due_at": from_ms(now_ms + 120_000 + i), "action": LogAction(), "task_id": f"acme/many-{i}"} for i in range(64)
    ]
    assert all(r.ok for r in client.schedule_many(many))
    client.create_schedule("acme/minutely", "rate(1 minute)", LogAction())
    _failed(client, store, "acme/redriven", now_ms)
    client.redrive("acme/redriven")
    # When the table's items are read as the index the active count reads holds them
    partition, sort = _index_keys(TENANT_ACTIVE_INDEX)
    items = dynamodb.scan(TableName=settings.table_name)["Items"]
    entries = [
        i
        for i in items
        if partition in i
        and sort in i
        and i["task_id"]["S"].startswith("acme/")
        and "#schedule#" not in i["task_id"]["S"]
    ]
    per_key: dict[str, int] = {}
    for item in entries:
        per_key[item[partition]["S"]] = per_key.get(item[partition]["S"], 0) + 1
    # Then every active task is in it, under many partition keys (each takes ~1,000 writes a second), none
    # holding more than a small share of the tenant's entries; and the count is their sum
    occurrences = [t for t in client.schedule_history("acme/minutely") if t.status is TaskStatus.PENDING]
    assert occurrences
    assert len(entries) == 64 + 64 + 1 + len(occurrences)
    assert len(per_key) >= 16, per_key
    assert max(per_key.values()) <= len(entries) // 4, per_key
    assert store.client.count_active("acme") == len(entries)


def test_the_cached_count_is_reused_then_read_again(dynamodb: Any, tenant_settings: Settings) -> None:
    # Given a guard over a store that counts 1, with a clock the test moves
    class Counting:
        reads = 0

        def count_active(self, tenant: str) -> int:
            Counting.reads += 1
            return 1

    now = [100.0]
    guard = QuotaGuard(Counting(), monotonic=lambda: now[0])  # type: ignore[arg-type]
    quotas = Quotas(active_tasks=10)
    # When three creates are admitted within the cache's life, then one after it
    for _ in range(3):
        guard.admit_tasks("acme", quotas, 1)
    assert Counting.reads == 1
    now[0] += 5.0
    guard.admit_tasks("acme", quotas, 1)
    # Then the store was read once, then again once the count was 5 s old
    assert Counting.reads == 2
    # And a count that says "full" is read again before refusing
    with pytest.raises(QuotaExceededError):
        guard.admit_tasks("acme", Quotas(active_tasks=2), 5)
    assert Counting.reads == 3


def test_schedules_and_their_fire_rate_are_bounded(settings: Settings, now_ms: int) -> None:
    # Given acme allowed 2 schedules firing 1 a second in all (and room for their occurrences: a schedule makes
    # those of the next minutes at once, and each is an active task), on a store in memory (the guard counts
    # through the ports)
    quotas = {**QUOTAS, "active_tasks": 10_000}
    store = InMemoryStore.from_settings(settings)
    client = TaskClient(
        settings.model_copy(update={"tenant_map": json.dumps({"tenants": {"acme": {"quotas": quotas}}})}),
        store,
        store,
        clock=FakeClock(wall_ms=now_ms),
    )
    client.create_schedule("acme/slow", "rate(2 seconds)", LogAction())
    # When a schedule would take the rate past it
    with pytest.raises(QuotaExceededError) as too_fast:
        client.create_schedule("acme/fast", "rate(1 second)", LogAction())
    assert too_fast.value.quota == "schedule_rate_per_s"
    assert too_fast.value.field == "expression"
    assert client.get_schedule("acme/fast") is None
    # And a third schedule, whatever its rate
    client.create_schedule("acme/daily", "cron(0 9 * * ? *)", LogAction())
    with pytest.raises(QuotaExceededError) as too_many:
        client.create_schedule("acme/third", "at(2099-01-01T00:00:00)", LogAction())
    assert too_many.value.quota == "schedules"
    assert client.get_schedule("acme/third") is None
    # And an update that speeds one up past the rate is refused, the schedule unchanged
    with pytest.raises(QuotaExceededError):
        client.update_schedule("acme/slow", expression="rate(500 milliseconds)")
    assert client.get_schedule("acme/slow").expression == "rate(2 seconds)"  # type: ignore[union-attr]
    # And a paused schedule's rate is free for another, until it resumes
    client.pause_schedule("acme/slow")
    client.update_schedule("acme/daily", expression="rate(1 second)")
    with pytest.raises(QuotaExceededError):
        client.resume_schedule("acme/slow")


@pytest.mark.parametrize(
    ("expression", "rate"),
    [
        ("rate(100 milliseconds)", 10.0),
        ("rate(2 minutes)", 1 / 120),
        ("cron(* * * * ? *)", 1 / 60),
        ("*/5 * * * *", 1 / 60),
        ("at(2030-01-01T00:00:00)", 0.0),
    ],
)
def test_a_schedules_rate_is_its_most_fires_a_second(expression: str, rate: float) -> None:
    assert schedule_rate_per_s(expression) == pytest.approx(rate)


def test_retries_past_the_quota_are_refused_when_scheduled_and_capped_when_fired(client: Client, now_ms: int) -> None:
    # Given acme allowed 2 attempts a task
    with pytest.raises(QuotaExceededError) as refused:
        client.schedule(
            from_ms(now_ms + 60_000), LogAction(), task_id="acme/r", retry=RetryPolicy(max_attempts=3, backoff_ms=1_000)
        )
    assert refused.value.quota == "retry_attempts"
    assert refused.value.field == "retry.max_attempts"
    assert client.get("acme/r") is None
    # When a task (a forged item, say) asks for 100 attempts and its second attempt fails
    task = Task(
        task_id="acme/r",
        due_at=from_ms(now_ms),
        action=LogAction(),
        status=TaskStatus.ARMED,
        attempt=2,
        retry=RetryPolicy(max_attempts=100, backoff_ms=0),
    )
    record = decide_outcome(
        task,
        now_ms,
        now_ms,
        now_ms + 5,
        decision=FireDecision("fire"),
        error="HTTP 500",
        offset_ms=None,
        max_attempts=2,
    )
    # Then it is FAILED: no third attempt, whatever the item said
    assert record.outcome is Outcome.FAILED
    assert "attempt 2 of 2" in (record.detail or "")


def test_a_count_read_afresh_adds_the_tasks_still_being_written() -> None:
    # Given a store that counts 0 active tasks (what it holds before any write lands), a quota of 2, and a
    # cache that expires between each admission
    class Empty:
        def count_active(self, tenant: str) -> int:
            return 0

    now = [100.0]
    guard = QuotaGuard(Empty(), monotonic=lambda: now[0])  # type: ignore[arg-type]
    quotas = Quotas(active_tasks=2)
    # When two creates are admitted and still writing, and the count is read afresh for a third
    with guard.admitting("acme", quotas, 1), guard.admitting("acme", quotas, 1):
        now[0] += 10.0
        # Then the third is refused: the two in flight count though the store cannot see them yet
        with pytest.raises(QuotaExceededError):
            guard.admit_tasks("acme", quotas, 1)
    # ... and once their writes ended, the store's own count is what counts
    now[0] += 10.0
    guard.admit_tasks("acme", quotas, 1)


# -- every path that makes a task active is admitted ------------------------------------------------------------
def _failed(client: Client, store: DynamoStores, task_id: str, now_ms: int) -> None:
    """A task of ``task_id`` armed and recorded FAILED."""
    record_failed(store, client.schedule(from_ms(now_ms + 1_000), LogAction(), task_id=task_id), "x", now_ms)


def test_a_redrive_past_active_tasks_is_refused_naming_it_and_the_task_stays_failed(
    client: Client, dynamodb: Any, tenant_settings: Settings, now_ms: int
) -> None:
    # Given acme's FAILED task, then acme at its quota of 3 active tasks
    store = DynamoStores.from_settings(dynamodb, tenant_settings)
    _failed(client, store, "acme/failed", now_ms)
    for i in range(3):
        client.schedule(from_ms(now_ms + 60_000), LogAction(), task_id=f"acme/t-{i}")
    # When acme redrives the FAILED one
    with pytest.raises(QuotaExceededError) as refused:
        client.redrive("acme/failed")
    # Then the quota is named and the task is still FAILED
    assert refused.value.quota == "active_tasks"
    assert client.get("acme/failed").status is TaskStatus.FAILED  # type: ignore[union-attr]
    # And with room again it is redriven
    client.cancel("acme/t-0")
    assert client.redrive("acme/failed").status is TaskStatus.PENDING


def test_the_operators_redrive_keeps_each_tenant_within_its_room(
    client: Client, dynamodb: Any, tenant_settings: Settings, now_ms: int
) -> None:

    # Given acme's two FAILED tasks and one active task: room for two more of its quota of 3; and the operator's
    # FAILED task (no quota)
    store = DynamoStores.from_settings(dynamodb, tenant_settings)
    for task_id in ("acme/f1", "acme/f2", "acme/f3", "ops-f"):
        _failed(client, store, task_id, now_ms)
    client.schedule(from_ms(now_ms + 60_000), LogAction(), task_id="acme/t-0")
    # When the operator redrives them all, admitted as the tenant map says
    admit = TenantAdmission(QuotaGuard(store.client), lambda task_id: Quotas(**QUOTAS))
    selection = Selection.of(["acme/f1", "acme/f2", "acme/f3", "ops-f"])
    report = redrive_tasks(store.client, selection, now_ms, admit=admit)
    # Then acme's first two and the operator's are redriven; acme's third stays FAILED, skipped for its quota
    assert report.redriven == ("acme/f1", "acme/f2", "ops-f")
    assert [(s.task_id, s.reason.name) for s in report.skipped] == [("acme/f3", "OVER_QUOTA")]
    assert client.get("acme/f3").status is TaskStatus.FAILED  # type: ignore[union-attr]


def test_a_schedules_later_chunks_past_active_tasks_are_held_back_then_made_when_there_is_room(
    dynamodb: Any, tenant_settings: Settings, now_ms: int
) -> None:
    # Given acme allowed 5 active tasks, and a schedule every minute, whose first occurrences (those of the next
    # poll window and schedule_ahead) fit
    quotas = {**QUOTAS, "active_tasks": 5}
    settings = tenant_settings.model_copy(update={"tenant_map": json.dumps({"tenants": {"acme": {"quotas": quotas}}})})
    store = DynamoStores.from_settings(dynamodb, settings)
    client = Client(settings, dynamodb=dynamodb, clock=FakeClock(wall_ms=now_ms))
    client.create_schedule("acme/minutely", "rate(1 minute)", LogAction())
    first = store.client.count_active("acme")
    assert 0 < first < 5
    # When the poller (as its function is built) runs ten minutes on, nothing having fired (every occurrence still
    # PENDING)
    poller = build_poller(settings, invoker=RecordingInvoker(), dynamodb=dynamodb)
    later = now_ms + 600_000
    report = poller.poll(later)
    # Then the chain made only what acme has room for, and held the rest back: the schedule waits at the first
    # occurrence it did not make, still in the due index, and the poll went on
    assert store.client.count_active("acme") == 5
    assert report.occurrences_created == 5 - first
    schedule = client.get_schedule("acme/minutely")
    made = client.schedule_history("acme/minutely")
    assert schedule is not None
    assert schedule.state is ScheduleState.ACTIVE
    assert schedule.next_due_ms == max(t.due_ms for t in made) + 60_000
    assert "acme/minutely" in store.dispatch.find_due(later, later + settings.lead_ms).schedules
    # And once two tasks finish, a poll two minutes on makes two more (of the three its window holds)
    for task in made[:2]:
        client.cancel(task.task_id)
    poller.poll(later + 120_000)
    assert store.client.count_active("acme") == 5
    assert len(client.schedule_history("acme/minutely")) == len(made) + 2
