"""The cost model: the capacity rules of the meter, the per-task counts of a real run on moto, and
docs/cost.md, whose generated block must equal what this run counts (``make cost`` regenerates it).

The expected counts come from the design (the store's life cycle, the keys-only ``due`` index of
template.yaml), not from a previous run: one conditional write per step, each within one write unit, the index
written only when a task enters or leaves it, the poll's fixed reads exactly one query per shard and bucket.
"""

from __future__ import annotations

import math

import boto3
import pytest
from moto import mock_aws

from punctual.dynamodb.schema import ensure_table
from punctual.keys import bucket_start, buckets_between
from punctual_tools import cost

TASKS = 300


@pytest.fixture(scope="module")
def counted() -> cost.Counts:
    return cost.counts(cost.run_scenario(tasks=TASKS, windows=1))


def rows(c: cost.Counts, step: str) -> dict[str, cost.Row]:
    return {r.op: r for r in c.per_task if r.step == step}


# -- the meter's rules ---------------------------------------------------------------------------------------
def test_item_size_follows_dynamodbs_rules() -> None:
    # names count, strings by UTF-8 bytes, numbers by significant digits (2 a byte, + 1)
    assert cost.item_size({"ab": {"S": "héllo"}}) == 2 + 6
    assert cost.item_size({"n": {"N": "12345"}}) == 1 + 3 + 1
    assert cost.item_size({"n": {"N": "1000"}}) == 1 + 1 + 1  # trailing zeros are not significant
    assert cost.item_size({"n": {"N": "-0.0012"}}) == 1 + 1 + 1
    assert cost.item_size({"b": {"BOOL": True}, "z": {"NULL": True}}) == 2 + 2
    assert cost.item_size({"m": {"M": {"k": {"S": "v"}}}}) == 1 + 3 + 1 + 1 + 1
    assert cost.item_size(None) == 0


def test_a_keys_only_index_costs_a_write_only_when_its_keys_change() -> None:
    spec = cost.TableSpec.from_template()
    (due,) = spec.indexes
    assert due.projection == "KEYS_ONLY"  # what template.yaml defines, read through punctual.schema
    base = {"task_id": {"S": "t"}, "status": {"S": "PENDING"}, "payload": {"S": "x" * 900}}
    active = {**base, "due_bucket": {"S": "2030-01-01T00:00#1"}, "due_ms": {"N": "1"}}
    assert spec.index_writes(None, active) == {"due": 1}  # enters the index
    assert spec.index_writes(active, {**active, "status": {"S": "CLAIMED"}}) == {}  # not projected
    assert spec.index_writes(active, {**active, "due_ms": {"N": "2"}}) == {"due": 2}  # key change: delete + put
    assert spec.index_writes(active, base) == {"due": 1}  # leaves the index
    assert spec.index_writes(base, {**base, "status": {"S": "SUCCEEDED"}}) == {}


def test_the_meter_counts_failed_conditions_and_eventually_consistent_reads() -> None:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        raw = boto3.client("dynamodb", region_name="us-east-1")
        ensure_table(raw, "cost-meter")
        spec = cost.TableSpec.from_template()
        big = {"task_id": {"S": "big"}, "blob": {"S": "x" * 1500}}
        with cost.CapacityMeter(client, raw, "cost-meter", spec) as meter:
            client.put_item(TableName="cost-meter", Item=big)
            with pytest.raises(client.exceptions.ConditionalCheckFailedException):
                client.put_item(TableName="cost-meter", Item=big, ConditionExpression="attribute_not_exists(task_id)")
            client.get_item(TableName="cost-meter", Key={"task_id": {"S": "big"}})
            client.get_item(TableName="cost-meter", Key={"task_id": {"S": "none"}}, ConsistentRead=True)
            client.delete_item(TableName="cost-meter", Key={"task_id": {"S": "big"}})
        put, failed, read, missing, delete = meter.calls
        assert (put.op, put.wru, put.ok) == ("PutItem", 2, True)  # 1,508 bytes: two 1 KB units
        assert (failed.wru, failed.ok) == (2, False)  # a failed condition still pays for the existing item
        assert read.rru == 0.5  # eventually consistent, under 4 KB
        assert missing.rru == 1.0  # a strongly consistent read of nothing still costs a unit
        assert delete.wru == 2


# -- the counted run ---------------------------------------------------------------------------------------
def test_every_task_fires_and_is_recorded(counted: cost.Counts) -> None:
    assert counted.scenario.outcomes == {"SUCCEEDED": TASKS}


def test_the_handlers_logs_are_measured_by_the_child_process(counted: cost.Counts) -> None:
    # Given the run (which starts `python -m punctual_tools.cost --measure-logs` beside it)
    logs = counted.scenario.logs
    # Then the child ran the real handlers and measured what they print: a poll, a batch and each task log bytes
    assert logs.measured
    assert logs.per_poll > 0 and logs.per_batch > 0 and logs.per_task > 0


def test_each_step_is_one_conditional_write_of_one_unit_per_task(counted: cost.Counts) -> None:
    # schedule: one PutItem, which also puts the task in the due index
    assert set(rows(counted, "schedule")) == {"PutItem"}
    put = rows(counted, "schedule")["PutItem"]
    assert (put.requests, put.wru, put.wru_index, put.rru) == (1, 1, 1, 0)
    # claim and arm: one UpdateItem each; neither touches an indexed attribute (keys-only index)
    for step in ("claim", "arm"):
        assert set(rows(counted, step)) == {"UpdateItem"}, step
        update = rows(counted, step)["UpdateItem"]
        assert (update.requests, update.wru, update.wru_index, update.rru) == (1, 1, 0, 0), step
    # record: one UpdateItem that also takes the task out of the index
    record = rows(counted, "record")["UpdateItem"]
    assert (record.requests, record.wru, record.wru_index, record.rru) == (1, 1, 1, 0)
    # every item stays under one write unit
    assert counted.scenario.max_item_bytes <= 1024
    # and nothing else writes per task: no transactions, no reads by the executor, nothing missed
    assert {r.step for r in counted.per_task} <= {"schedule", "poll", "claim", "arm", "record"}
    assert not [r for r in counted.per_task if r.step == "poll" and (r.wru or r.wru_index)]


def test_the_poll_reads_each_task_from_the_table_once_or_twice(counted: cost.Counts) -> None:
    # Each task is found in the keys-only index and read (eventually consistent, 0.5 unit) at the tick that
    # claims it; those still ARMED at the next tick (due after it) are read once more.
    poll = rows(counted, "poll")
    reads = sum(r.rru for r in poll.values())
    assert 0.5 <= reads <= 1.0
    assert poll["BatchGetItem"].requests <= 2 / 100 + 1e-9  # 100 keys a request, at most two sightings


def test_an_empty_poll_costs_one_query_per_shard_and_bucket(counted: cost.Counts) -> None:
    settings = counted.scenario.settings
    interval = settings["poll_interval_ms"]
    now = counted.scenario.start_ms + interval * counted.scenario.baseline_ticks[0]
    # from the watermark the previous tick left (its now - overdue safety margin) to now + lead
    buckets = buckets_between(bucket_start(now - interval - settings["overdue_safety_ms"]), now + settings["lead_ms"])
    fixed = {r.op: r for r in counted.per_tick}
    assert set(fixed) == {"GetItem", "Query", "UpdateItem"}  # watermark read, index queries, watermark write
    assert fixed["Query"].requests == len(buckets) * settings["shard_count"]
    assert fixed["Query"].rru == 0.5 * fixed["Query"].requests  # empty: the minimum, eventually consistent
    assert (fixed["GetItem"].requests, fixed["GetItem"].rru) == (1, 1)
    assert (fixed["UpdateItem"].requests, fixed["UpdateItem"].wru) == (1, 1)


def test_one_executor_per_batch_and_the_lambda_model_matches_the_run(counted: cost.Counts) -> None:
    s = counted.scenario
    max_batch = s.settings["max_batch_size"]
    assert len(s.batches) == math.ceil(TASKS / max_batch)
    assert sum(b.tasks for b in s.batches) == TASKS
    invocations, model_s = cost.executor_seconds_per_tick(TASKS, max_batch, s.settings["lead_ms"],
                                                          s.settings["poll_interval_ms"])
    assert invocations == len(s.batches)
    assert cost.measured_executor_seconds(s) == pytest.approx(model_s, rel=0.02)


def test_costs_per_million_fall_with_volume_and_beat_step_functions(counted: cost.Counts) -> None:
    low, high = (cost.monthly_cost(counted, v) for v in (1e6, 100e6))
    assert high.per_million() < low.per_million()
    assert high.per_million() < 25.0 * cost.STEP_FUNCTIONS_TRANSITIONS[0]
    # per task, DynamoDB alone is 4 + 2 write units and ~0.75 read unit: about $3.85 a million
    dynamodb = sum(x.usd for x in high.lines if x.item.startswith("DynamoDB") and x.in_target) / 100
    assert 3.7 < dynamodb < 4.0


def test_docs_cost_md_holds_what_was_counted(counted: cost.Counts) -> None:
    doc = cost.doc_path().read_text(encoding="utf-8")
    fresh = cost.render(counted)
    mismatches = cost.blocks_match(cost.extract_block(doc), fresh)
    assert not mismatches, "docs/cost.md is stale: run `make cost`\n" + "\n".join(mismatches)
