"""The tenant map in Parameter Store, on moto: a map of 500 tenants split over the parameters of a path, one map in
one parameter, the cache (no read within its time, a change seen after it, a failed read keeping the map read
before), and the API and the executor serving and checking tenants from it.

Parameter Store holds at most 4 KB in a standard parameter (8 KB in an advanced one); moto does not enforce it, so
every part written here is checked against the standard tier's limit by :func:`put_parts`. The cache runs on an
injected monotonic clock.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from test_api import gateway_event

from punctual.config import clients
from punctual.config.settings import Settings
from punctual.config.tenant_map import Quotas, TenantMap
from punctual.config.tenant_source import (
    RETRY_AFTER_S,
    FixedTenantMap,
    ParameterTenantMap,
    tenant_map_source,
)
from punctual.domain.model import Task, TaskStatus
from punctual.errors import InvalidRequestError, SettingsError, TenantMapUnavailableError
from punctual.runtime.wiring import build_api, build_executor, poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import ActionEnv, SqsAction, TargetRules
from punctual_tools.local.stack import LocalStack, StackConfig
from support import RecordingInvoker, executor_on, read_task

ACCOUNT = "123456789012"
REGION = "us-east-1"
PATH = "/punctual-config/tenants/"
NAME = "/punctual-config/tenant-map"
STANDARD_TIER_BYTES = 4096
TENANTS = 500


def tenant(i: int) -> str:
    return f"tenant-{i:03d}"


def principal(i: int) -> str:
    return f"arn:aws:iam::{ACCOUNT}:role/Tenant{i:03d}Scheduler"


def queue_arn(i: int) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{tenant(i)}-orders"


def policy(i: int) -> dict[str, Any]:
    """Tenant i's entry: a private webhook host, its own queue, and quotas of its own."""
    return {
        "targets": [f"hooks.{tenant(i)}.example:8443"],
        "target_arns": [queue_arn(i)],
        "quotas": {"active_tasks": 1000 + i, "schedules": 10 + i % 50, "retry_attempts": 1 + i % 5},
    }


def whole_map(count: int = TENANTS) -> dict[str, Any]:
    return {
        "principals": {principal(i): tenant(i) for i in range(1, count + 1)},
        "tenants": {tenant(i): policy(i) for i in range(1, count + 1)},
        "quotas": {"schedule_rate_per_s": 2.5},
    }


def split(whole: dict[str, Any], limit: int = STANDARD_TIER_BYTES) -> list[str]:
    """``whole`` as parts of at most ``limit`` characters, each in the full form, tenants never split; the default
    quotas in the first."""
    parts: list[dict[str, Any]] = [{"principals": {}, "tenants": {}, "quotas": whole["quotas"]}]
    by_tenant = {
        name: [arn for arn, owner in whole["principals"].items() if owner == name] for name in whole["tenants"]
    }
    for name, entry in whole["tenants"].items():
        grown = json.loads(json.dumps(parts[-1]))
        grown["tenants"][name] = entry
        grown["principals"].update({arn: name for arn in by_tenant[name]})
        if len(json.dumps(grown)) > limit:
            parts.append({"principals": {arn: name for arn in by_tenant[name]}, "tenants": {name: entry}})
        else:
            parts[-1] = grown
    return [json.dumps(part) for part in parts]


def put_parts(ssm: Any, path: str, texts: list[str]) -> list[str]:
    """Each text as a parameter directly under ``path`` (SecureStrings, standard tier); their names."""
    names = []
    for n, text in enumerate(texts):
        assert len(text.encode()) <= STANDARD_TIER_BYTES, "Parameter Store refuses a standard parameter this long"
        name = f"{path}part-{n:03d}"
        ssm.put_parameter(Name=name, Value=text, Type="SecureString", Tier="Standard", Overwrite=True)
        names.append(name)
    return names


def requests_to(client: Any, operation: str) -> list[dict[str, Any]]:
    """The parameters of every ``operation`` request ``client`` sends from now on."""
    seen: list[dict[str, Any]] = []
    service = client.meta.service_model.service_name
    client.meta.events.register(
        f"before-parameter-build.{service}.{operation}", lambda params, **_: seen.append(dict(params))
    )
    return seen


class Ticks:
    """A monotonic clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ssm(dynamodb: Any) -> Any:
    """An SSM client in the same moto as the table (``dynamodb`` opened it)."""
    return boto3.client("ssm", region_name=REGION)


@pytest.fixture
def in_parts(ssm: Any, settings: Settings) -> Settings:
    """The 500 tenants' map split over the parameters under PATH, and settings that name the path."""
    put_parts(ssm, PATH, split(whole_map()))
    return settings.model_copy(update={"tenant_map_parameter": PATH})


# -- reading ------------------------------------------------------------------------------------------------------
def test_a_map_of_500_tenants_split_over_a_path_is_read_whole(ssm: Any, in_parts: Settings) -> None:
    # Given the map of 500 tenants: over 100 KB, far more than Lambda's 4 KB of variables or one parameter's 8 KB,
    # in parts of at most 4 KB each
    assert len(json.dumps(whole_map())) > 100_000
    parts = len(split(whole_map()))
    assert parts > 30
    pages = requests_to(ssm, "GetParametersByPath")
    # When the source of the settings naming its path is built
    tenants = tenant_map_source(in_parts, ssm).tenant_map()
    # Then the parameters directly under the path were read, decrypted, ten to a page
    assert {(p["Path"], p["Recursive"], p["WithDecryption"]) for p in pages} == {(PATH[:-1], False, True)}
    assert len(pages) == -(-parts // 10)
    # And a principal of the 500th tenant (its role's session, as API Gateway reports it) resolves to it
    assert tenants.tenant_of(f"arn:aws:sts::{ACCOUNT}:assumed-role/Tenant500Scheduler/s-1") == tenant(500)
    assert len(tenants.principals) == len(tenants.tenants) == TENANTS
    # With its own quotas, the default ones for what it does not set, and its own targets
    entry = tenants.policy_of(tenant(500))
    assert entry.quotas == Quotas(active_tasks=1500, schedules=10, schedule_rate_per_s=2.5, retry_attempts=1)
    assert entry.targets == ("hooks.tenant-500.example:8443",)
    assert entry.target_arns == frozenset({queue_arn(500)})
    assert tenants == TenantMap.parse(json.dumps(whole_map()))


def test_a_map_in_one_parameter_is_read_with_get_parameter(ssm: Any, settings: Settings) -> None:
    # Given a small map in the short form, as one SecureString
    ssm.put_parameter(Name=NAME, Value=json.dumps({principal(1): tenant(1)}), Type="SecureString")
    reads = requests_to(ssm, "GetParameter")
    # When it is read
    tenants = tenant_map_source(settings.model_copy(update={"tenant_map_parameter": NAME}), ssm).tenant_map()
    # Then with one GetParameter of that name, decrypted
    assert reads == [{"Name": NAME, "WithDecryption": True}]
    assert tenants.tenant_of(principal(1)) == tenant(1)


def test_without_a_parameter_the_map_of_the_environment_is_used_and_no_ssm_client_is_made(
    settings: Settings, dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given settings with the map in PUNCTUAL_TENANT_MAP, as the local runtime has it

    def no_client(settings: Settings) -> Any:
        raise AssertionError("an SSM client was made")

    monkeypatch.setattr(clients, "make_ssm_client", no_client)
    given = settings.model_copy(update={"tenant_map": json.dumps({principal(7): tenant(7)})})
    # When the API and the executor are built  Then neither makes an SSM client, and the map is the setting's
    source = tenant_map_source(given)
    assert isinstance(source, FixedTenantMap)
    assert source.tenant_map().tenant_of(principal(7)) == tenant(7)
    build_api(given, dynamodb)
    build_executor(given, dynamodb)


def test_a_tenant_in_two_parts_is_refused_naming_both(ssm: Any, settings: Settings) -> None:
    # Given two parts that both give tenant 3's entry
    one = {"principals": {principal(3): tenant(3)}, "tenants": {tenant(3): policy(3)}}
    two = {"tenants": {tenant(3): policy(4)}}
    put_parts(ssm, PATH, [json.dumps(one), json.dumps(two)])
    # When the map is read  Then it is refused, naming the tenant and both parameters
    with pytest.raises(
        TenantMapUnavailableError, match=rf"tenant {tenant(3)}: in both {PATH}part-000 and {PATH}part-001"
    ):
        tenant_map_source(settings.model_copy(update={"tenant_map_parameter": PATH}), ssm)


# -- a failed first read fails the cold start ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "reason"),
    [(None, r"cannot be read \(ParameterNotFound\)"), ('{"principals": []}', "not a valid tenant map: .*principals")],
)
def test_a_map_that_cannot_be_read_or_is_invalid_fails_the_cold_start(
    ssm: Any, settings: Settings, dynamodb: Any, value: str | None, reason: str
) -> None:
    # Given a parameter that does not exist, or holds no valid map
    if value is not None:
        ssm.put_parameter(Name=NAME, Value=value, Type="String")
    given = settings.model_copy(update={"tenant_map_parameter": NAME})
    # When the API's resolver or the executor is built  Then it fails, naming the parameter and why
    for build in (lambda: build_api(given, dynamodb, ssm), lambda: build_executor(given, dynamodb, ssm_client=ssm)):
        with pytest.raises(TenantMapUnavailableError, match=rf"tenant map {NAME}: {reason}"):
            build()


def test_an_empty_path_fails_the_cold_start(ssm: Any, settings: Settings) -> None:
    with pytest.raises(TenantMapUnavailableError, match="no parameter under this path"):
        tenant_map_source(settings.model_copy(update={"tenant_map_parameter": PATH}), ssm)


# -- the cache ------------------------------------------------------------------------------------------------------
def test_within_its_time_the_map_is_not_read_again_and_after_it_a_change_is_seen(ssm: Any) -> None:
    # Given a map read once, kept for 60 s
    ssm.put_parameter(Name=NAME, Value=json.dumps({principal(1): tenant(1)}), Type="String")
    reads = requests_to(ssm, "GetParameter")
    clock = Ticks()
    source = ParameterTenantMap(ssm, NAME, 60.0, monotonic=clock)
    first = source.tenant_map()
    # When it is asked for again up to the last instant of those 60 s, the parameter changed meanwhile
    ssm.put_parameter(Name=NAME, Value=json.dumps({principal(2): tenant(2)}), Type="String", Overwrite=True)
    clock.now += 59.999
    # Then no second read is made, and the map is the one read first
    assert source.tenant_map() is first
    assert len(reads) == 1
    # When 60 s have passed  Then it is read again, and the change is seen
    clock.now += 0.001
    changed = source.tenant_map()
    assert len(reads) == 2
    assert (changed.tenant_of(principal(2)), changed.tenant_of(principal(1))) == (tenant(2), None)
    # And a read that finds the same text keeps the same map (nothing parsed again)
    clock.now += 60
    assert source.tenant_map() is changed
    assert len(reads) == 3


@pytest.mark.parametrize("failure", ["deleted", "invalid"])
def test_a_failed_read_keeps_the_map_read_before_and_is_tried_again_soon(
    ssm: Any, failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a map read once, kept for 60 s
    ssm.put_parameter(Name=NAME, Value=json.dumps({principal(1): tenant(1)}), Type="String")
    reads = requests_to(ssm, "GetParameter")
    clock = Ticks()
    source = ParameterTenantMap(ssm, NAME, 60.0, monotonic=clock)
    first = source.tenant_map()
    # When, once it is old, the parameter is gone, or holds what is no map
    if failure == "deleted":
        ssm.delete_parameter(Name=NAME)
    else:
        ssm.put_parameter(Name=NAME, Value="{not json", Type="String", Overwrite=True)
    clock.now += 60
    with caplog.at_level(logging.ERROR, logger="punctual.config.tenant_source"):
        kept = source.tenant_map()
    # Then the map read before serves on, and the failure is logged at ERROR naming the parameter
    assert kept is first
    assert len(reads) == 2
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert NAME in record.getMessage()
    assert "not json" not in record.getMessage()  # what was read is never logged
    # And it is not read again before RETRY_AFTER_S; then it is, and a good map is taken up
    clock.now += RETRY_AFTER_S - 0.001
    assert source.tenant_map() is first
    assert len(reads) == 2
    ssm.put_parameter(Name=NAME, Value=json.dumps({principal(3): tenant(3)}), Type="String", Overwrite=True)
    clock.now += 0.001
    assert source.tenant_map().tenant_of(principal(3)) == tenant(3)
    assert len(reads) == 3


def test_the_executors_rules_take_up_a_new_map_only_when_it_refreshes_them(ssm: Any, settings: Settings) -> None:
    # Given an executor's action environment over a map read from a parameter, in which tenant 2 has no ARN
    ssm.put_parameter(Name=NAME, Value=json.dumps({"tenants": {tenant(2): {}}}), Type="String")
    clock = Ticks()
    source = ParameterTenantMap(ssm, NAME, 60.0, monotonic=clock)
    env = ActionEnv.from_settings(settings, {}, source)
    before = env.rules
    with pytest.raises(InvalidRequestError):
        before.of(f"{tenant(2)}/job").check_arn(queue_arn(2), "queue", "action.queue_arn")
    # When the map gains tenant 2's queue, and the cache's time passes
    ssm.put_parameter(Name=NAME, Value=json.dumps({"tenants": {tenant(2): policy(2)}}), Type="String", Overwrite=True)
    clock.now += 60
    # Then the rules are those of the map read before until they are refreshed (a batch refreshes them before it arms)
    assert env.rules is before
    env.refresh_tenants()
    env.rules.of(f"{tenant(2)}/job").check_arn(queue_arn(2), "queue", "action.queue_arn")
    # And a refresh within the cache's time changes nothing
    after = env.rules
    env.refresh_tenants()
    assert env.rules is after
    assert isinstance(after, TargetRules)
    assert after.tenant is None


# -- the API and the executor ----------------------------------------------------------------------------------
def _task_body(i: int) -> str:
    due = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    return json.dumps({"due_at": due, "action": {"kind": "sqs", "queue_arn": queue_arn(i)}, "task_id": "order-1"})


def test_the_api_serves_a_caller_of_tenant_437_and_refuses_an_unknown_principal(
    ssm: Any, in_parts: Settings, dynamodb: Any
) -> None:
    # Given the API's resolver, built as its function builds it, over the map of 500 tenants in Parameter Store
    app = build_api(in_parts, dynamodb, ssm)
    caller = f"arn:aws:sts::{ACCOUNT}:assumed-role/Tenant437Scheduler/s-1"
    # When a caller of tenant 437 lists its tasks, and schedules one for its own queue
    listed = app.resolve(gateway_event("GET", "/v1/tasks", caller), None)  # type: ignore[arg-type]  # reads no context
    created = app.resolve(gateway_event("POST", "/v1/tasks", caller, _task_body(437)), None)  # type: ignore[arg-type]  # reads no context
    # Then it is served, and the task is stored as tenant 437's
    assert listed["statusCode"] == 200
    assert created["statusCode"] == 201, created["body"]
    assert DynamoStores.from_settings(dynamodb, in_parts).client.get(f"{tenant(437)}/order-1") is not None
    # When it names another tenant's queue  Then its entry in the map refuses it
    refused = app.resolve(gateway_event("POST", "/v1/tasks", caller, _task_body(438)), None)  # type: ignore[arg-type]  # reads no context
    assert refused["statusCode"] == 422
    assert "action.queue_arn" in refused["body"]
    # And a principal the map does not name is refused
    stranger = f"arn:aws:iam::{ACCOUNT}:role/Tenant501Scheduler"
    assert app.resolve(gateway_event("GET", "/v1/tasks", stranger), None)["statusCode"] == 403  # type: ignore[arg-type]  # reads no context


def _create_and_dispatch(store: DynamoStores, settings: Settings, owners: list[int], queue: int) -> RecordingInvoker:
    """A task of each tenant in ``owners`` sending to tenant ``queue``'s queue, due in 0.4 s, polled."""
    now = datetime.now(UTC)
    for owner in owners:
        task = Task(
            task_id=f"{tenant(owner)}/order-1",
            due_at=now + timedelta(milliseconds=400),
            action=SqsAction(queue_arn=queue_arn(queue)),
            payload={"owner": owner},
        )
        assert store.client.create(task, int(now.timestamp() * 1000))[1]
    invoker = RecordingInvoker()
    poller_on(store, invoker, settings).poll(int(now.timestamp() * 1000))
    assert invoker.events
    return invoker


def test_the_executor_fires_a_tenants_task_to_a_target_its_entry_in_the_parameter_allows(
    ssm: Any, in_parts: Settings, dynamodb: Any
) -> None:
    # Given tenant 437's queue, the executor built as its function builds it over the map in Parameter Store,
    # and a task of tenant 437 and one of tenant 1, each sending to that queue
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName=f"{tenant(437)}-orders")["QueueUrl"]
    executor = build_executor(in_parts, dynamodb, ssm_client=ssm, action_clients={"sqs": sqs})
    store = DynamoStores.from_settings(dynamodb, in_parts)
    invoker = _create_and_dispatch(store, in_parts, [437, 1], 437)
    # When it runs the batch
    for event in invoker.events:
        executor.run_batch(event)
    # Then tenant 437's task reached its queue, and tenant 1's was refused: that queue is not in its entry
    assert read_task(store, f"{tenant(437)}/order-1").status is TaskStatus.SUCCEEDED
    refused = read_task(store, f"{tenant(1)}/order-1")
    assert refused.status is TaskStatus.FAILED
    assert "tenant-001's target_arns" in (refused.detail or "")
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    assert [json.loads(m["Body"])["payload"] for m in messages] == [{"owner": 437}]


def test_a_batch_is_checked_against_the_map_as_it_is_when_the_batch_starts(
    ssm: Any, settings: Settings, dynamodb: Any
) -> None:
    # Given an executor over a map in which tenant 2 has no queue, read once, and a task of tenant 2 for its queue
    ssm.put_parameter(Name=NAME, Value=json.dumps({"tenants": {tenant(2): {}}}), Type="String")
    sqs = boto3.client("sqs", region_name=REGION)
    sqs.create_queue(QueueName=f"{tenant(2)}-orders")
    clock = Ticks()
    source = ParameterTenantMap(ssm, NAME, 60.0, monotonic=clock)
    actions = ActionEnv.from_settings(settings, {"sqs": sqs}, source)
    store = DynamoStores.from_settings(dynamodb, settings)
    executor = executor_on(store, settings, actions=actions)
    invoker = _create_and_dispatch(store, settings, [2], 2)
    # When the map gains tenant 2's queue, the cache's time passes, and the batch runs
    ssm.put_parameter(Name=NAME, Value=json.dumps({"tenants": {tenant(2): policy(2)}}), Type="String", Overwrite=True)
    clock.now += 60
    for event in invoker.events:
        executor.run_batch(event)
    # Then the task was checked against the new map, and sent
    assert read_task(store, f"{tenant(2)}/order-1").status is TaskStatus.SUCCEEDED


# -- the local runtime ----------------------------------------------------------------------------------------------
def test_the_local_stack_refuses_a_parameter_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given PUNCTUAL_TENANT_MAP_PARAMETER in the environment of `punctual up` (which has no Parameter Store)

    monkeypatch.setenv("PUNCTUAL_TENANT_MAP_PARAMETER", NAME)
    stack = LocalStack(StackConfig(home=tmp_path / "home", in_memory=True))
    # When it starts  Then it is refused, naming the variable and the one to use, before DynamoDB Local starts
    with pytest.raises(
        SettingsError, match="PUNCTUAL_TENANT_MAP_PARAMETER.*give the tenant map as PUNCTUAL_TENANT_MAP"
    ):
        stack.start()
    assert stack.ddb is None
