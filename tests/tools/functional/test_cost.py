"""The cost model: the capacity rules of the meter, the per-task counts of a real run on moto, and
docs/cost.md, whose generated block must equal what this run counts (``make cost`` regenerates it).

The expected counts come from the design (the store's life cycle, the keys-only ``due`` index of
template.yaml), not from a previous run: one conditional write per step (schedule, arm straight from PENDING,
record), each within one write unit, the index written only when a task enters or leaves it, a poll that
writes nothing per task and whose fixed reads are exactly one query per shard and bucket, and heartbeat writes
per executor batch, not per task. The fast path's premises are checked on the real code too: a stream batch
becomes one executor invocation and one read (when the last poll started), and what it keeps comes from its own
decision.
"""

from __future__ import annotations

import math

import boto3
import pytest
from moto import mock_aws

from punctual.config.settings import Settings
from punctual.domain.keys import bucket_start, buckets_between, from_ms
from punctual.polling.fastpath import dispatch_stream_records
from punctual.runtime.client import Client
from punctual.runtime.wiring import decode_stream_image, poller_on
from punctual.stores.dynamodb import build_stores
from punctual.targets import HttpAction
from punctual_tools import cost
from punctual_tools.cost.coldstart import FULL_CORE_MB, executor_environments, init_seconds
from punctual_tools.cost.fastpath import (
    POLL_STARTS_RRU,
    fast_path_cost,
    fast_path_window_s,
    kept_share,
    last_lead_s,
    left_to_poll_cost,
    stream_batch_tasks,
)
from punctual_tools.cost.pricing import eventbridge_scheduler_usd, marginal_per_million
from punctual_tools.cost.scenario import SCENARIO_START_MS
from punctual_tools.doubles import FakeClock, RecordingInvoker
from punctual_tools.template import ensure_table

TASKS = 300


@pytest.fixture(scope="module")
def counted() -> cost.Counts:
    return cost.counts(cost.run_scenario(tasks=TASKS, windows=1))


@pytest.fixture(scope="module")
def recurring() -> tuple[cost.Recurring, ...]:
    return tuple(cost.run_recurring(rate) for rate in cost.RECURRING_RATES_MS)


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
    due, history, tenant, retired, active_of_tenant = sorted(spec.indexes, key=lambda index: index.name)
    assert (due.name, history.name, tenant.name, retired.name, active_of_tenant.name) == (
        "due",
        "schedule",
        "tenant",
        "tenant_active",  # keyed by tenant alone: kept for one release while tenant_active_sharded replaces it
        "tenant_active_sharded",
    )
    # what template.yaml defines, via punctual.schema
    assert {index.projection for index in spec.indexes} == {"KEYS_ONLY"}
    base = {"task_id": {"S": "t"}, "status": {"S": "PENDING"}, "payload": {"S": "x" * 900}}
    active = {**base, "due_bucket": {"S": "2030-01-01T00:00#1"}, "due_ms": {"N": "1"}}
    assert spec.index_writes(None, active) == {"due": 1}  # enters the index
    assert spec.index_writes(active, {**active, "status": {"S": "ARMED"}}) == {}  # not projected
    assert spec.index_writes(active, {**active, "due_ms": {"N": "2"}}) == {"due": 2}  # key change: delete + put
    occurrence = {**active, "schedule_id": {"S": "s"}}  # a recurring schedule's occurrence: in its history too
    assert spec.index_writes(None, occurrence) == {"due": 1, "schedule": 1}
    assert spec.index_writes(occurrence, {**occurrence, "status": {"S": "ARMED"}}) == {}
    assert spec.index_writes(active, base) == {"due": 1}  # leaves the index
    assert spec.index_writes(base, {**base, "status": {"S": "SUCCEEDED"}}) == {}
    # a tenant's task: listed by tenant, counted under its tenant_shard key
    tenants = {**active, "task_id": {"S": "acme/t"}, "tenant": {"S": "acme"}, "tenant_shard": {"S": "acme#7"}}
    actives = {"tenant_active": 1, "tenant_active_sharded": 1}
    assert spec.index_writes(None, tenants) == {"due": 1, "tenant": 1, **actives}
    assert spec.index_writes(tenants, {**tenants, "status": {"S": "ARMED"}}) == {}  # never again while active
    finished = {k: v for k, v in tenants.items() if k not in ("due_bucket", "due_ms")}
    assert spec.index_writes(tenants, finished) == {"due": 1, **actives}  # leaves the active count


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


def test_writes_are_labelled_by_the_item_and_status_change_they_make() -> None:
    task = {"task_id": {"S": "t"}}
    beat = {"task_id": {"S": "#executor#x-1"}, "alive_until_ms": {"N": "5"}}
    assert cost.status_label(None, {**task, "status": {"S": "PENDING"}}) == "schedule"
    assert cost.status_label({**task, "status": {"S": "PENDING"}}, {**task, "status": {"S": "ARMED"}}) == "arm"
    assert cost.status_label({**task, "status": {"S": "ARMED"}}, {**task, "status": {"S": "SUCCEEDED"}}) == "record"
    # an executor's heartbeat item, whether it is created or renewed
    assert cost.status_label(None, beat) == "heartbeat"
    assert cost.status_label(beat, {**beat, "alive_until_ms": {"N": "6"}}) == "heartbeat"
    # the poller reading owners' heartbeats is a step of its own; reading tasks is not labelled by key
    assert cost.heartbeat_read_label([{"task_id": {"S": "#executor#x-1"}}]) == "heartbeat check"
    assert cost.heartbeat_read_label([{"task_id": {"S": "t"}}, {"task_id": {"S": "#executor#x-1"}}]) is None


# -- the counted run ---------------------------------------------------------------------------------------
def test_every_task_fires_and_is_recorded(counted: cost.Counts) -> None:
    assert counted.scenario.outcomes == {"SUCCEEDED": TASKS}


def test_the_handlers_logs_are_measured_by_the_child_process(counted: cost.Counts) -> None:
    # Given the run (which starts `python -m punctual_tools.cost --measure-logs` beside it)
    logs = counted.scenario.logs
    # Then the child ran the real handlers and measured what they print: a poll, a batch and each task log bytes
    assert logs.measured
    assert logs.per_poll > 0
    assert logs.per_batch > 0
    assert logs.per_task > 0


def test_each_step_is_one_conditional_write_of_one_unit_per_task(counted: cost.Counts) -> None:
    # schedule: one PutItem, which also puts the task in the due index
    assert set(rows(counted, "schedule")) == {"PutItem"}
    put = rows(counted, "schedule")["PutItem"]
    assert (put.requests, put.wru, put.wru_index, put.rru) == (1, 1, 1, 0)
    # arm: one UpdateItem, straight from PENDING (nothing written before it); it touches no indexed attribute
    assert set(rows(counted, "arm")) == {"UpdateItem"}
    arm = rows(counted, "arm")["UpdateItem"]
    assert (arm.requests, arm.wru, arm.wru_index, arm.rru) == (1, 1, 0, 0)
    # record: one UpdateItem that also takes the task out of the index
    assert set(rows(counted, "record")) == {"UpdateItem"}
    record = rows(counted, "record")["UpdateItem"]
    assert (record.requests, record.wru, record.wru_index, record.rru) == (1, 1, 1, 0)
    # every item stays under one write unit
    assert counted.scenario.max_item_bytes <= 1024
    # and nothing else writes per task: not the poller, no transactions, no reads by the executor, nothing missed
    assert {r.step for r in counted.per_task} <= {"schedule", "poll", "heartbeat check", "arm", "record"}
    assert sum(r.wru for r in counted.per_task) == 3
    assert sum(r.wru_index for r in counted.per_task) == 2


def test_the_poll_writes_nothing_per_task(counted: cost.Counts) -> None:
    # Given the per-task rows of the poller's steps (beyond what an empty poll costs)
    polled = [r for r in counted.per_task if r.step in ("poll", "heartbeat check")]
    # Then they are reads only: BatchGetItem of tasks and of owners' heartbeats, no write of any kind
    assert {r.op for r in polled} == {"BatchGetItem"}
    assert not [r for r in polled if r.wru or r.wru_index]


def test_the_poll_reads_each_task_from_the_table_once_or_twice(counted: cost.Counts) -> None:
    # Each task is found in the keys-only index and read (eventually consistent, 0.5 unit) at the tick that
    # dispatches it; those still ARMED at the next tick (due after it) are read once more.
    poll = rows(counted, "poll")
    reads = sum(r.rru for r in poll.values())
    assert 0.5 <= reads <= 1.0
    assert poll["BatchGetItem"].requests <= 2 / 100 + 1e-9  # 100 keys a request, at most two sightings


def test_the_poll_reads_the_heartbeat_of_each_owner_of_armed_tasks_it_sees(counted: cost.Counts) -> None:
    # Given the batches of the run, each executor still holding ARMED tasks at the next tick (its last due
    # instant is after it) is seen by that tick, once (no batch lives two intervals)
    s = counted.scenario
    interval = s.settings["poll_interval_ms"]
    assert all(b.last_due_ms < b.invoked_ms + 2 * interval for b in s.batches)
    seen = sum(1 for b in s.batches if b.last_due_ms > b.invoked_ms + interval)
    assert seen >= 1
    # Then the poller reads each such owner's heartbeat item once, eventually consistent (0.5 unit)
    check = rows(counted, "heartbeat check")
    assert set(check) == {"BatchGetItem"}
    assert check["BatchGetItem"].rru * TASKS == pytest.approx(0.5 * seen)
    assert check["BatchGetItem"].requests * TASKS == pytest.approx(1)  # one tick saw them, in one request


def test_heartbeats_are_written_per_batch_not_per_task(counted: cost.Counts) -> None:
    # Given the run, whose executors live a few seconds (the scenario's heartbeat interval is longer)
    # Then each batch writes its heartbeat item twice (before it arms, and retiring at its end): one unit
    # each, never the index
    assert counted.per_batch == [cost.Row("heartbeat", "UpdateItem", 2, 2, 0, 0)]
    assert "heartbeat" not in {r.step for r in counted.per_task}
    # And in AWS a tick's executors add a renewal every heartbeat interval over their life (Settings default)
    s = counted.scenario.settings
    invocations, seconds = cost.executor_seconds_per_tick(
        2_315, s["max_batch_size"], s["lead_ms"], s["poll_interval_ms"]
    )
    assert cost.heartbeat_interval_ms() == 5_000
    assert cost.heartbeat_writes_per_tick(invocations, seconds, 2) == pytest.approx(2 * invocations + seconds / 5)


def test_an_empty_poll_costs_one_query_per_shard_and_bucket(counted: cost.Counts) -> None:
    settings = counted.scenario.settings
    interval = settings["poll_interval_ms"]
    now = counted.scenario.start_ms + interval * counted.scenario.baseline_ticks[0]
    # from the watermark the previous tick left (its now - overdue safety margin) to now + lead
    buckets = buckets_between(bucket_start(now - interval - settings["overdue_safety_ms"]), now + settings["lead_ms"])
    fixed = {r.op: r for r in counted.per_tick}
    # the poll's start noted and the watermark read, index queries, watermark write
    assert set(fixed) == {"GetItem", "Query", "UpdateItem"}
    assert fixed["Query"].requests == len(buckets) * settings["shard_count"]
    assert fixed["Query"].rru == 0.5 * fixed["Query"].requests  # empty: the minimum, eventually consistent
    assert (fixed["GetItem"].requests, fixed["GetItem"].rru) == (1, 1)
    assert (fixed["UpdateItem"].requests, fixed["UpdateItem"].wru) == (2, 2)


def test_one_executor_per_batch_and_the_lambda_model_matches_the_run(counted: cost.Counts) -> None:
    s = counted.scenario
    max_batch = s.settings["max_batch_size"]
    assert len(s.batches) == math.ceil(TASKS / max_batch)
    assert sum(b.tasks for b in s.batches) == TASKS
    invocations, model_s = cost.executor_seconds_per_tick(
        TASKS, max_batch, s.settings["lead_ms"], s.settings["poll_interval_ms"]
    )
    assert invocations == len(s.batches)
    assert cost.measured_executor_seconds(s) == pytest.approx(model_s, rel=0.02)


def test_costs_per_million_fall_with_volume_and_beat_step_functions(counted: cost.Counts) -> None:
    low, high = (cost.monthly_cost(counted, v) for v in (1e6, 100e6))
    assert high.per_million() < low.per_million()
    assert high.per_million() < 25.0 * cost.STEP_FUNCTIONS_TRANSITIONS[0]
    # per task, DynamoDB alone is 3 + 2 write units, ~0.75 read unit and a share of heartbeats: about $3.26
    # a million at 100 M tasks a month
    dynamodb = sum(x.usd for x in high.lines if x.item.startswith("DynamoDB") and x.in_target) / 100
    assert 3.1 < dynamodb < 3.4


def test_heartbeats_cost_less_than_a_write_unit_a_task(counted: cost.Counts) -> None:
    # An executor's sign of life is its own heartbeat item, not a write on each task: at both volumes it costs
    # less than one write unit a task (at 1 M a month one executor renews all the time for ~23 tasks a tick,
    # at 100 M ten share ~2,300)
    for volume in (1e6, 100e6):
        month = cost.monthly_cost(counted, volume)
        (heartbeats,) = [x for x in month.lines if x.item.startswith("DynamoDB heartbeats")]
        assert 0 < heartbeats.usd < volume * 0.625 / 1e6, volume


def test_a_recurring_occurrence_is_made_by_one_transaction_shared_by_up_to_98(
    recurring: tuple[cost.Recurring, ...],
) -> None:
    fast, slow = recurring
    # A schedule every 250 ms makes 240 occurrences a poll: 3 chunks (98, 98, 44), each one consistent read of
    # the schedule and one transaction. Each occurrence costs 2 write units (transactional) and 2 index writes
    # (the due index and the schedule's history index); each chunk adds the cursor's 2 units, and the
    # schedule item's 2 index writes as it moves in the due index.
    assert fast.per_tick == 240
    assert fast.occurrences == 240
    by_step = {r.step: r for r in fast.rows}
    assert by_step["read schedule"].requests == pytest.approx(3 / 240)
    assert by_step["make occurrence"].requests == pytest.approx(3 / 240)
    assert by_step["make occurrence"].wru == pytest.approx(2 + 2 * 3 / 240)
    assert by_step["make occurrence"].wru_index == pytest.approx(2 + 2 * 3 / 240)
    # A schedule every minute makes one a poll, and pays the read and the cursor for it
    assert slow.per_tick == 1
    assert slow.requests == 2
    assert slow.rru == 1
    assert slow.wru == 8


# -- what the model adds beyond the counts: INIT, the fast path, EventBridge's free tier ----------------------
def test_the_executors_init_is_measured_in_a_fresh_process(counted: cost.Counts) -> None:
    # Given the run, which loads src/executor/app.py in fresh processes after it
    init = counted.scenario.init
    # Then the load was measured (CPU time, interpreter start included), and is billed on the memory size's share
    # of a core: at 1,769 MB and above one core, below it proportionally longer
    assert init.measured
    assert init.runs == 3
    assert init.cpu_s > 0
    assert init_seconds(init.cpu_s, FULL_CORE_MB) == init.cpu_s == init_seconds(init.cpu_s, 3538)
    assert init_seconds(1.0, 256) == pytest.approx(FULL_CORE_MB / 256)


def test_the_poll_path_keeps_the_ticks_batches_and_the_previous_ticks_late_ones_busy() -> None:
    # Given 60 s polls, a 90 s lead and batches of 250: a tick's batches live from 30 s to 90 s after it, so
    # those whose last task is due in the second half of the window are still waiting at the next tick
    assert executor_environments(2_315, 250, 90_000, 60_000, 0.25) == 10 + 6  # 10 batches, the last 6 late
    assert executor_environments(23, 250, 90_000, 60_000, 0.25) == 2  # one batch a tick, alive ~59 s
    assert executor_environments(0.5, 250, 90_000, 60_000, 0.25) == 1
    assert executor_environments(0, 250, 90_000, 60_000, 0.25) == 0


def test_init_is_in_the_targets_scope_and_counts_each_environment_re_created(counted: cost.Counts) -> None:
    month = cost.monthly_cost(counted, 100e6)
    (init,) = [x for x in month.lines if x.timing]
    assert init.item.startswith("Lambda INIT")
    assert init.in_target
    # 16 executor environments and the poller's, each new every 2 h over a 30-day month
    assert month.cold_starts == pytest.approx(17 * 30 * 12)
    assert 0 < init.usd < 1.0  # steady load: a few cents a month


def test_eventbridge_scheduler_is_free_for_its_first_14_million_invocations_a_month() -> None:
    assert eventbridge_scheduler_usd(1e6) == 0.0
    assert eventbridge_scheduler_usd(14e6) == 0.0
    assert eventbridge_scheduler_usd(100e6) == pytest.approx(86.0)


def test_lambdas_free_tier_takes_off_at_most_its_allowance(counted: cost.Counts) -> None:
    low, high = (cost.monthly_cost(counted, v) for v in (1e6, 100e6))
    allowance = 400_000 * 0.0000133334 + 1e6 * 0.20 / 1e6
    assert 0 < low.lambda_free_tier_usd() <= allowance
    # at 100 M the GB-seconds pass the allowance; the invocations (one poll and ~11 executors a tick) do not
    assert high.lambda_gb_s > 400_000
    assert high.lambda_requests == pytest.approx(43_200 * 11, rel=0.01)
    assert high.lambda_free_tier_usd() == pytest.approx(400_000 * 0.0000133334 + high.lambda_requests * 0.20 / 1e6)


def test_a_stream_batch_is_one_executor_invocation_and_one_read_of_the_last_polls() -> None:
    # Given a poll that started 20 s ago, tasks written 2 s ahead (so flagged for the fast path, and due long before
    # the next poll) and the stream records of their writes
    settings = Settings(table_name="cost-fastpath", ntp_server=None, allowed_targets="127.0.0.1")
    now = SCENARIO_START_MS
    with mock_aws():
        client = boto3.client("dynamodb", region_name=settings.region)
        raw = boto3.client("dynamodb", region_name=settings.region)
        ensure_table(raw, settings.table_name)
        scheduler = Client(settings, dynamodb=client, clock=FakeClock(now))
        action = HttpAction(url="http://127.0.0.1:9/hook")
        ids = [scheduler.schedule(from_ms(now + 2_000 + i), action, {"n": i}).task_id for i in range(3)]
        images = [raw.get_item(TableName=settings.table_name, Key={"task_id": {"S": t}})["Item"] for t in ids]
        assert all(image["fast_path"]["N"] == "1" for image in images)
        records = [
            {"eventName": "INSERT", "eventID": str(i), "dynamodb": {"NewImage": image}}
            for i, image in enumerate(images)
        ]
        invoker = RecordingInvoker()
        poller = poller_on(build_stores(settings, client), invoker, settings, poller_id="fast-cost")
        assert build_stores(settings, raw).dispatch.mark_polled(now - 20_000)
        # When the fast path dispatches the stream batch, under the meter
        with cost.CapacityMeter(client, raw, settings.table_name, cost.TableSpec.from_template()) as meter:
            report = dispatch_stream_records(poller, records, now, decode=decode_stream_image)
    # Then one executor is invoked for the whole batch, and the fast path itself makes one DynamoDB request: the
    # strongly consistent read of the poll's start (one read unit, the fast path's POLL_STARTS_RRU), no write
    assert report.dispatched == 3
    assert report.batches == 1
    assert report.polls_known
    (payload,) = invoker.payloads
    assert sorted(t["task_id"] for t in payload["tasks"]) == sorted(ids)
    (read,) = meter.calls
    assert (read.op, read.rru, read.wru) == ("BatchGetItem", POLL_STARTS_RRU, 0)


def test_a_fast_path_task_costs_more_alone_and_further_ahead(counted: cost.Counts) -> None:
    window = fast_path_window_s()
    assert window == 70.0  # the poll interval + the fast-path margin, from Settings
    assert last_lead_s(1, None, window) == 35.0
    assert last_lead_s(5, 2.0, window) == 2.0
    one, five = (fast_path_cost(counted, k, 2.0, 1e6) for k in (1, 5))
    assert one.per_million > five.per_million
    assert fast_path_cost(counted, 1, 35.0, 1e6).per_million > one.per_million
    # one task 2 s ahead: the executor is billed 2 s + the record tail at 256 MB, plus its request
    assert one.executor_s == pytest.approx(2.25)
    assert one.usd["executor"] == pytest.approx(2.25 * 0.25 * 0.0000133334 + 0.20 / 1e6)
    # and it costs more than one more task on the poll path, at both volumes
    for volume in (1e6, 100e6):
        assert one.per_million > marginal_per_million(counted, volume)


def test_the_fast_path_keeps_of_spread_leads_what_the_next_poll_does_not_reach_in_time() -> None:
    # Given the default 60 s poll, 90 s lead and 10 s margin, and tasks written at a random phase of the poll cycle
    # (x: time to the next poll) with leads spread over 0-70 s: the fast path keeps all within 10 s of the next poll
    # (x < 10), else those due before x + 10 s
    spread = kept_share()
    # Then it keeps (10 * 70 + (70² - 20²) / 2) / (60 * 70) of them, whose leads spread up to 54.5 s on average
    assert spread.kept == pytest.approx(2_950 / 4_200, abs=0.005)
    assert spread.reach_s == pytest.approx((10 * 70**2 + (70**3 - 20**3) / 3) / 2_950, abs=0.3)
    # And it keeps every task written 2 s ahead, and half of those written 50 s ahead (x < 10 or x > 40)
    assert kept_share(lead_s=2.0).kept == 1.0
    assert kept_share(lead_s=50.0).kept == pytest.approx(0.5, abs=0.01)


def test_a_task_left_to_the_poll_costs_one_more_poll_path_task_and_a_look(counted: cost.Counts) -> None:
    # A task left to the poll costs one more poll-path task, and its share of the fast-path function's invocation
    for volume in (1e6, 100e6):
        more = marginal_per_million(counted, volume) / 1e6
        assert more < left_to_poll_cost(counted, 5, volume) < left_to_poll_cost(counted, 1, volume) < 2 * more


def test_a_stream_batch_holds_what_a_shard_received_in_a_quarter_second() -> None:
    assert stream_batch_tasks(0) == 1.0
    rate = 100e6 / (30 * 86_400)  # tasks a second at 100 M a month
    expected = rate / 4
    assert stream_batch_tasks(100e6) == pytest.approx(expected / (1 - math.exp(-expected)))
    assert stream_batch_tasks(100e6, shards=4) < stream_batch_tasks(100e6)


def test_docs_cost_md_holds_what_was_counted(counted: cost.Counts, recurring: tuple[cost.Recurring, ...]) -> None:
    doc = cost.doc_path().read_text(encoding="utf-8")
    fresh = cost.render(counted, recurring=recurring)
    mismatches = cost.blocks_match(cost.extract_block(doc), fresh)
    assert not mismatches, "docs/cost.md is stale: run `make cost`\n" + "\n".join(mismatches)
