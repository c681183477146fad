"""The store's latency model, wired: its hooks on a DynamoDB client (on moto), and where the local stack installs
them (the poller's and the fast path's stores, the API's client, an executor worker's clients); the stack's own
calls and other services' clients are left alone.

What is asserted is what the hooks were asked to sleep and burn (an injected sleep and burn record it) or how
many round trips a process drew, never how long a call took.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from punctual.config.settings import Settings
from punctual.runtime.wiring import poller_on
from punctual_tools.local import api_server, store_latency
from punctual_tools.local.stack import executor_env, function_store
from punctual_tools.local.store_latency import DYNAMODB_IN_REGION, StoreLatency, store_latency_of
from punctual_tools.settings import LocalSettings
from support import RecordingInvoker, call_worker_once

HANDLER = """
import boto3
from botocore.config import Config

from punctual_tools.local import store_latency

client = boto3.client(
    "dynamodb", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
    config=Config(retries={"max_attempts": 1}, connect_timeout=1),
)


def handler(event, context):
    try:
        client.describe_table(TableName="nothing-listens")
    except Exception:
        pass  # nothing listens on port 9: the call fails after its round trip was drawn
    return {"draws": sum(latency.draws for latency in store_latency._instances.values())}
"""


class Recorder:
    """What the hooks were asked to sleep and burn, in order."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.burns: list[float] = []


def recorded_latency(recorder: Recorder, seed: int = 3) -> StoreLatency:
    return StoreLatency(DYNAMODB_IN_REGION, seed, 1, sleep=recorder.sleeps.append, burn=recorder.burns.append)


@pytest.fixture
def local_settings(settings: Settings) -> LocalSettings:
    """The functional tier's settings as the stack's, under the Lambda profile (the model on)."""
    return LocalSettings.model_validate(settings.model_dump())


@pytest.fixture(autouse=True)
def fresh_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_latency, "_instances", {})


def test_each_call_sleeps_one_drawn_round_trip_in_two_halves_and_burns_tls_cpu(dynamodb: Any) -> None:
    # Given a DynamoDB client with the model's hooks (sleep and burn recorded)
    recorder = Recorder()
    recorded_latency(recorder).install(dynamodb)
    # When it reads an item
    dynamodb.get_item(TableName="punctual-tasks-test", Key={"task_id": {"S": "none"}})
    # Then it slept twice (before the request, after the response), together the round trip the seed draws first
    expected = StoreLatency(DYNAMODB_IN_REGION, 3, 1).sample_ms("GetItem") / 1000
    assert len(recorder.sleeps) == 2
    assert sum(recorder.sleeps) == pytest.approx(expected)
    assert recorder.sleeps[0] == pytest.approx(expected * DYNAMODB_IN_REGION.outbound_share)
    # And it burnt TLS's CPU for the request (with the request's own cost) and for the response
    assert len(recorder.burns) == 2
    assert recorder.burns[0] > DYNAMODB_IN_REGION.tls.per_request_us / 1e6 > 0
    assert recorder.burns[1] > 0


def test_a_transaction_draws_from_the_transaction_class(dynamodb: Any) -> None:
    # Given a client with the hooks  When it writes a transaction
    recorder = Recorder()
    recorded_latency(recorder, seed=8).install(dynamodb)
    item = {"task_id": {"S": "t1"}}
    dynamodb.transact_write_items(TransactItems=[{"Put": {"TableName": "punctual-tasks-test", "Item": item}}])
    # Then its round trip is the one the transaction class draws first for that seed
    assert sum(recorder.sleeps) == pytest.approx(
        StoreLatency(DYNAMODB_IN_REGION, 8, 1).sample_ms("TransactWriteItems") / 1000
    )


def test_another_services_client_is_left_alone(dynamodb: Any) -> None:
    # Given an SQS client the hooks were offered (inside moto, with the DynamoDB fixture's mock)
    recorder = Recorder()
    client = boto3.client("sqs", region_name="us-east-1")
    assert recorded_latency(recorder).install(client) is client
    # When it makes a call  Then nothing was slept or burnt
    client.list_queues()
    assert recorder.sleeps == []
    assert recorder.burns == []


def test_the_pollers_store_is_delayed_under_the_lambda_profile(dynamodb: Any, local_settings: LocalSettings) -> None:
    # Given the store the stack gives the poller, under the Lambda profile
    store = function_store(local_settings, "PollerFunction")
    latency = store_latency_of(local_settings)
    assert latency is not None
    # When it polls  Then each of its requests drew a round trip
    poller_on(store, RecordingInvoker(), local_settings).poll(0)
    assert latency.draws > 0


def test_the_fast_paths_store_and_the_api_are_delayed_too(dynamodb: Any, local_settings: LocalSettings) -> None:
    latency = store_latency_of(local_settings)
    assert latency is not None
    function_store(local_settings, "FastPathFunction").dispatch.last_polls()
    after_fast_path = latency.draws
    assert after_fast_path > 0
    event = api_server.proxy_event("GET", "/v1/tasks/none", {}, None, api_server.LOCAL_TENANT)
    answer = api_server.ApiResolverFactory(local_settings)().resolve(event, None)
    assert answer["statusCode"] == 404
    assert latency.draws > after_fast_path


def test_under_the_local_profile_nothing_is_delayed(dynamodb: Any, local_settings: LocalSettings) -> None:
    settings = local_settings.model_copy(update={"profile": "local", "store_latency": "none"})
    assert list(function_store(settings, "PollerFunction").client.list_tasks()) == []
    assert store_latency._instances == {}


def test_plain_settings_are_never_delayed(dynamodb: Any, settings: Settings) -> None:
    assert store_latency_of(settings) is None


def test_an_executor_worker_delays_the_clients_its_handler_builds(tmp_path: Path, settings: Settings) -> None:
    # Given an executor worker started as the stack starts it under the Lambda profile, and a handler module that
    # builds a DynamoDB client at its cold start
    handler = tmp_path / "handler.py"
    handler.write_text(HANDLER)
    local = LocalSettings.model_validate({**settings.model_dump(), "fire_log_path": str(tmp_path / "fires.jsonl")})
    env = executor_env(local, {})
    # When the handler makes a call
    result = call_worker_once(handler, env, {}, tmp_path / "worker.log")
    # Then its round trip was drawn from the model, in the worker's own sequence
    assert result["draws"] >= 1
