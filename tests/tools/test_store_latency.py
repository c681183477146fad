"""The store's latency model: seeded draws, quantiles where the model's docstring puts them, TLS's CPU by bytes,
and the profile's defaults (the model and the AWS write mode under lambda; neither under local).

Every figure here is drawn from the distribution itself, never timed: a sleep on a busy machine says nothing.
"""

from __future__ import annotations

import os
import random
import threading

import pytest

from punctual_tools.local.stack import StackConfig, executor_env
from punctual_tools.local.store_latency import (
    DYNAMODB_IN_REGION,
    NONE,
    StoreLatency,
    TlsCost,
    store_latency_of,
)
from punctual_tools.settings import LocalSettings

DRAWS = 50_000


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def draws(operation: str, n: int = DRAWS, seed: int = 0, stream: int = 1) -> list[float]:
    latency = StoreLatency(DYNAMODB_IN_REGION, seed, stream)
    return [latency.sample_ms(operation) for _ in range(n)]


def test_the_same_seed_and_stream_draw_the_same_sequence() -> None:
    # Given two samplers of one seed and stream  When each draws  Then they draw the same round trips
    assert draws("UpdateItem", 200) == draws("UpdateItem", 200)
    # And another seed, or another process (stream), draws others
    assert draws("UpdateItem", 200, seed=1) != draws("UpdateItem", 200)
    assert draws("UpdateItem", 200, stream=2) != draws("UpdateItem", 200)


def test_a_process_seeds_its_stream_from_its_pid() -> None:
    assert StoreLatency(DYNAMODB_IN_REGION, 3).stream == os.getpid()


@pytest.mark.parametrize("operation", ["GetItem", "UpdateItem", "PutItem", "DeleteItem"])
def test_a_point_operation_takes_single_digit_ms_with_a_tail_of_tens(operation: str) -> None:
    # Given many round trips of a point operation
    sample = draws(operation)
    # Then its median is that of in-region DynamoDB seen from Lambda (2-5 ms), its p99 10-25 ms
    assert 2 <= quantile(sample, 0.5) <= 5
    assert 10 <= quantile(sample, 0.99) <= 25
    # And no draw is zero or negative
    assert min(sample) > 0


def test_transactions_batches_and_queries_take_longer_than_a_point_operation() -> None:
    point = quantile(draws("GetItem"), 0.5)
    for operation in ("TransactWriteItems", "BatchGetItem", "Query", "BatchWriteItem"):
        assert quantile(draws(operation), 0.5) > point, operation
    assert quantile(draws("TransactWriteItems"), 0.5) > quantile(draws("BatchGetItem"), 0.5)


def test_the_tail_share_is_the_models() -> None:
    # Given the point class's tail (2 % of requests, median 12 ms, on a body of median 3 ms)
    latency = DYNAMODB_IN_REGION.latency_of("GetItem")
    rng = random.Random(5)
    # When drawn many times  Then the share of draws past 10 ms (the body alone reaches it about 3 times in 10,000)
    # is about the tail's share: the tail is rare, and it is there
    share = sum(latency.sample_ms(rng) > 10 for _ in range(DRAWS)) / DRAWS
    assert 0.5 * latency.tail_share <= share <= 1.5 * latency.tail_share + 0.001


def test_draws_from_many_threads_are_the_sequence_of_one() -> None:
    # Given one sampler drawn from by 8 threads at once (as the store's pool does)
    shared = StoreLatency(DYNAMODB_IN_REGION, 4, 9)
    drawn: list[float] = []
    lock = threading.Lock()

    def draw() -> None:
        mine = [shared.sample_ms("GetItem") for _ in range(500)]
        with lock:
            drawn.extend(mine)

    threads = [threading.Thread(target=draw) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then together they drew exactly the single-threaded sequence, each draw once
    assert sorted(drawn) == sorted(draws("GetItem", 4000, seed=4, stream=9))
    assert shared.draws == 4000


def test_tls_costs_cpu_in_proportion_to_bytes() -> None:
    tls = TlsCost(per_request_us=6, per_kib_us=1)
    assert tls.seconds(0, with_request=True) == pytest.approx(6e-6)
    assert tls.seconds(4096, with_request=False) == pytest.approx(4e-6)
    assert tls.seconds(8192, with_request=True) == pytest.approx(14e-6)


def test_describe_names_the_model_and_its_seed() -> None:
    latency = StoreLatency(DYNAMODB_IN_REGION, 42, 1)
    line = latency.describe()
    assert line.startswith("dynamodb-in-region")
    assert "seed 42" in line
    assert "\n" not in line
    as_json = latency.as_dict()
    assert as_json["name"] == "dynamodb-in-region"
    assert as_json["seed"] == 42
    assert as_json["latencies"]["point"]["median_ms"] == DYNAMODB_IN_REGION.latencies["point"].median_ms


# -- the profile's defaults ----------------------------------------------------------------------------------
def test_the_lambda_profile_models_the_store_and_writes_as_in_aws() -> None:
    settings = LocalSettings.from_env({})
    assert (settings.profile, settings.store_latency, settings.write_batch) == (
        "lambda",
        "dynamodb-in-region",
        "single",
    )
    assert store_latency_of(settings) is not None


def test_the_local_profile_keeps_dynamodb_locals_latency_and_writes_transactions() -> None:
    settings = LocalSettings.from_env({"PUNCTUAL_PROFILE": "local"})
    assert (settings.store_latency, settings.write_batch) == (NONE, "transaction")
    assert store_latency_of(settings) is None


def test_a_variable_overrides_the_profiles_defaults() -> None:
    env = {
        "PUNCTUAL_PROFILE": "local",
        "PUNCTUAL_STORE_LATENCY": "dynamodb-in-region",
        "PUNCTUAL_WRITE_BATCH": "single",
    }
    settings = LocalSettings.from_env(env, store_latency_seed=7)
    assert (settings.store_latency, settings.write_batch, settings.store_latency_seed) == (
        "dynamodb-in-region",
        "single",
        7,
    )
    lambda_env = {"PUNCTUAL_STORE_LATENCY": "none", "PUNCTUAL_WRITE_BATCH": "transaction"}
    assert (LocalSettings.from_env(lambda_env).store_latency, LocalSettings.from_env(lambda_env).write_batch) == (
        NONE,
        "transaction",
    )


def test_the_stack_leaves_the_write_mode_to_the_profile_and_its_workers_get_it() -> None:
    # Given the stack's default configuration  Then it names no write mode of its own
    assert StackConfig().write_batch is None
    # And the executors' workers of a Lambda-profile stack write single items, with the store's latency modelled
    env = executor_env(LocalSettings.from_env({}, write_batch=StackConfig().write_batch))
    assert env["PUNCTUAL_WRITE_BATCH"] == "single"
    assert env["PUNCTUAL_STORE_LATENCY"] == "dynamodb-in-region"
    # ... and those of a local-profile stack, transactions and DynamoDB Local's own latency
    local = executor_env(LocalSettings.from_env({}, profile="local", write_batch=StackConfig().write_batch))
    assert (local["PUNCTUAL_WRITE_BATCH"], local["PUNCTUAL_STORE_LATENCY"]) == ("transaction", NONE)
