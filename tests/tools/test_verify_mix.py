"""The pure parts of ``punctual verify``: the mix's plan, drift and counts by group, the verdict, the cost's
arithmetic from canned CloudWatch figures, and which queue a run may make."""

from __future__ import annotations

import json
from itertools import islice

import pytest

from punctual.domain.keys import from_ms
from punctual.domain.schedules import Schedule, instants_after
from punctual_tools.checker import Expected
from punctual_tools.cost import pricing
from punctual_tools.verify.metrics import (
    FunctionUsage,
    MetricSpec,
    Usage,
    covers,
    format_cost,
    price_lines,
    usage_of,
    usage_queries,
)
from punctual_tools.verify.plan import BURST, GROUPS, RECURRING, SHORT_LEAD, SPREAD, MixOptions, plan_mix
from punctual_tools.verify.queue import VerifyError, allowed_queue_arns, queue_name_for
from punctual_tools.verify.report import Arrival, arrival_of, every_task_once, format_groups, judge, verdict_line

NOW = 1_800_000_000_000


# -- the plan -------------------------------------------------------------------------------------------------
def test_the_mix_has_each_group_in_its_place() -> None:
    # Given the default options  When planned
    options = MixOptions()
    plan = plan_mix("r1", NOW, options)
    start, end = NOW + 30_000, NOW + 90_000
    by_group = {group: [t for t in plan.tasks if t.group == group] for group in GROUPS}
    # Then the spread falls at even steps inside the window, written at the start
    spread = sorted(t.due_ms for t in by_group[SPREAD])
    assert len(spread) == options.spread
    assert spread[0] == start
    assert spread[-1] < end
    assert len(set(spread)) == options.spread
    assert all(t.write_at_ms is None for t in by_group[SPREAD] + by_group[BURST])
    # ... the burst is one instant, mid-window
    assert {t.due_ms for t in by_group[BURST]} == {start + 30_000}
    assert len(by_group[BURST]) == options.burst
    # ... each short lead is written 2 to 4 s ahead, the first 2 s and the last 4 s, inside the window
    leads = [t.lead_ms for t in plan.short if t.lead_ms is not None]
    assert len(leads) == options.short_leads
    assert min(leads) == 2_000
    assert max(leads) == 4_000
    assert all(start <= t.due_ms < end for t in plan.short)
    # ... the schedule starts with the window; ids are the run's and distinct
    assert plan.schedule is not None
    assert plan.schedule.start_ms == start
    assert plan.counts() == {SPREAD: 600, BURST: 1_000, SHORT_LEAD: 20, RECURRING: 10}
    assert len({t.task_id for t in plan.tasks}) == len(plan.tasks)
    assert all(t.task_id.startswith("verify-r1-") for t in plan.tasks)


def test_the_planned_last_occurrence_is_the_products() -> None:
    # Given a plan's schedule  When the product's own recurrence reads it
    plan = plan_mix("r2", NOW, MixOptions.quick().with_changes(rate_ms=250, occurrences=3))
    assert plan.schedule is not None
    schedule = Schedule(
        schedule_id=plan.schedule.schedule_id,
        expression=plan.schedule.expression,
        action={"kind": "log"},
        start_at=from_ms(plan.schedule.start_ms),
        max_occurrences=3,
    )
    instants = list(islice(instants_after(schedule, plan.schedule.start_ms - 1), 3))
    # Then its occurrences are the plan's: from the start, at the rate, and the plan waits for the last
    assert instants == [plan.schedule.start_ms + i * 250 for i in range(3)]
    assert plan.last_due_ms >= instants[-1]


def test_a_single_short_lead_is_written_3_s_ahead_and_none_is_allowed() -> None:
    one = plan_mix("r3", NOW, MixOptions.quick().with_changes(short_leads=1))
    assert [t.lead_ms for t in one.short] == [3_000]
    none = plan_mix("r3", NOW, MixOptions.quick().with_changes(short_leads=0, occurrences=0))
    assert none.short == []
    assert none.schedule is None


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"rate_ms": 99}, "100 ms at least"),
        ({"lead_in_s": 4.9}, "lead-in must be 5 s"),
        ({"lead_in_s": 0.9, "short_leads": 0}, "lead-in must be 1 s"),
        ({"over_s": 0}, "window"),
        ({"spread": 0, "burst": 0, "short_leads": 0, "occurrences": 0}, "nothing to schedule"),
        ({"burst": -1}, "0 or more"),
    ],
)
def test_unusable_options_are_refused_with_the_reason(changes: dict[str, float], problem: str) -> None:
    options = MixOptions.quick().with_changes(**changes)
    with pytest.raises(ValueError, match=problem):
        plan_mix("r4", NOW, options)


def test_the_quick_mix_is_small_and_the_shortest_usable_lead_in_passes() -> None:
    quick = MixOptions.quick()
    assert quick.spread + quick.burst + quick.short_leads + quick.occurrences < 100
    assert MixOptions.quick().with_changes(lead_in_s=5.0).problems() == []


# -- judging the messages -----------------------------------------------------------------------------------------
def message(key: str, group: str, sent_ms: float, message_id: str, run: str = "r") -> dict[str, object]:
    body = {
        "task_id": key.split(":", maxsplit=1)[0],
        "idempotency_key": key,
        "payload": {"verify": run, "group": group},
    }
    return {"MessageId": message_id, "Body": json.dumps(body), "Attributes": {"SentTimestamp": str(int(sent_ms))}}


def expected(group_dues: dict[str, list[tuple[str, int]]]) -> dict[str, list[Expected]]:
    return {group: [Expected(task_id, 0, due) for task_id, due in dues] for group, dues in group_dues.items()}


def test_drift_per_group_is_sent_timestamp_minus_due() -> None:
    # Given three spread tasks arriving 5, 10 and 20 ms late and a burst task 40 ms late
    plan = expected({SPREAD: [("a", 1_000), ("b", 2_000), ("c", 3_000)], BURST: [("d", 5_000)]})
    arrivals = [
        arrival_of(message("a:0", SPREAD, 1_005, "m1"), "r"),
        arrival_of(message("b:0", SPREAD, 2_010, "m2"), "r"),
        arrival_of(message("c:0", SPREAD, 3_020, "m3"), "r"),
        arrival_of(message("d:0", BURST, 5_040, "m4"), "r"),
    ]
    # When judged
    result = judge(plan, arrivals, epsilon_ms=100)
    # Then each group has its own figures, and all of them together
    spread, burst = result.groups
    assert (spread.group, spread.expected, spread.arrived, spread.missing, spread.duplicates) == (SPREAD, 3, 3, 0, 0)
    assert (spread.drift["p50"], spread.drift["p99"], spread.drift["max"]) == (10, 20, 20)
    assert (burst.drift["p50"], burst.drift["max"]) == (40, 40)
    assert result.overall.drift["max"] == 40
    assert result.every_task_once
    assert verdict_line(result) == "verdict: every task once"
    table = "\n".join(format_groups(result))
    assert "spread" in table
    assert "all" in table


def test_a_second_message_of_a_key_is_a_duplicate_but_a_redelivery_is_not() -> None:
    plan = expected({SPREAD: [("a", 1_000)]})
    # Given the same message delivered twice (one MessageId): one fire
    redelivered = [Arrival("a:0", SPREAD, 1_001, "m1"), Arrival("a:0", SPREAD, 1_001, "m1")]
    assert judge(plan, redelivered, 100).every_task_once
    # Given two messages of one key: two fires, the verdict fails naming it
    fired_twice = [Arrival("a:0", SPREAD, 1_001, "m1"), Arrival("a:0", SPREAD, 1_050, "m2")]
    result = judge(plan, fired_twice, 100)
    assert result.groups[0].duplicates == 1
    assert not result.every_task_once
    assert verdict_line(result) == "verdict: NOT every task once: 1 extra messages"


def test_missing_early_and_unknown_messages_each_fail_the_verdict() -> None:
    plan = expected({SPREAD: [("a", 1_000), ("b", 2_000)], RECURRING: [("s@1", 3_000)]})
    # Given b never arrives
    missing = judge(plan, [Arrival("a:0", SPREAD, 1_001, "m1"), Arrival("s@1:0", RECURRING, 3_001, "m2")], 100)
    assert [g.missing for g in missing.groups] == [1, 0]
    assert not missing.every_task_once
    assert "1 never arrived" in verdict_line(missing)
    # Given all arrive, one of them 101 ms before its due instant (beyond ε)
    early = [
        Arrival("a:0", SPREAD, 899, "m1"),
        Arrival("b:0", SPREAD, 2_000, "m2"),
        Arrival("s@1:0", RECURRING, 3_000, "m3"),
    ]
    assert not judge(plan, early, 100).every_task_once
    assert judge(plan, early, 101).every_task_once  # exactly at ε: not early
    # Given a message nobody expected: an extra, under its own group
    stray = [*early[1:], Arrival("a:0", SPREAD, 1_000, "m1"), Arrival("zzz:0", "unknown", 5_000, "m9")]
    result = judge(plan, stray, 100)
    assert not result.every_task_once
    assert result.groups[-1].group == "unknown"


def test_an_explicit_missed_outcome_is_not_every_task_once() -> None:
    # Given an occurrence that the table recorded MISSED: the checker's verdict holds, ours does not
    plan = {SPREAD: [Expected("a", 0, 1_000, "MISSED")]}
    result = judge(plan, [], 100)
    assert result.overall.ok
    assert not every_task_once(result.overall)
    assert verdict_line(result) == "verdict: NOT every task once: 1 MISSED"


def test_a_message_of_another_run_or_unreadable_counts_as_unknown() -> None:
    assert arrival_of(message("a:0", SPREAD, 1, "m1", run="other"), "r").group == "unknown"
    assert arrival_of({"MessageId": "m", "Body": "not json", "Attributes": {"SentTimestamp": "5"}}, "r").key == (
        "<unreadable>"
    )


# -- the cost ---------------------------------------------------------------------------------------------------
CONFIGS = {
    "PollerFunction": {"FunctionName": "stack-Poller", "MemorySize": 512, "Architectures": ["arm64"]},
    "ExecutorFunction": {"FunctionName": "stack-Executor", "MemorySize": 1024, "Architectures": ["arm64"]},
}
MINUTE = 1_800_000_000_000 // 60_000 * 60_000


def canned() -> tuple[list[MetricSpec], dict[str, list[tuple[int, float]]]]:
    functions = {logical: str(config["FunctionName"]) for logical, config in CONFIGS.items()}
    specs = usage_queries(functions, "tasks", ["due"])
    values = {
        ("PollerFunction", "Invocations"): [2.0, 1.0],
        ("PollerFunction", "Duration"): [1_000.0, 1_000.0],
        ("ExecutorFunction", "Invocations"): [4.0, 0.0],
        ("ExecutorFunction", "Duration"): [6_000.0, 4_000.0],
        ("table", "ConsumedWriteCapacityUnits"): [100.0, 20.0],
        ("table", "ConsumedReadCapacityUnits"): [10.0, 0.5],
        ("index:due", "ConsumedWriteCapacityUnits"): [30.0, 0.0],
        ("index:due", "ConsumedReadCapacityUnits"): [0.0, 0.0],
    }
    series = {
        spec.query_id: [(MINUTE + i * 60_000, v) for i, v in enumerate(values[(spec.owner, spec.name)])]
        for spec in specs
    }
    return specs, series


def test_usage_adds_each_series_and_turns_duration_into_gb_seconds() -> None:
    specs, series = canned()
    usage = usage_of(specs, series, CONFIGS)
    poller, executor = usage.functions
    assert (poller.invocations, poller.duration_ms, poller.gb_s) == (3, 2_000, 1.0)  # 2 s at 0.5 GB
    assert (executor.invocations, executor.gb_s) == (4, 10.0)  # 10 s at 1 GB
    assert usage.write_units == {"table": 120, "index:due": 30}
    assert usage.read_units == {"table": 10.5, "index:due": 0}
    assert usage.latest_ms == MINUTE + 60_000


def test_the_price_is_the_cost_modules_list_prices_times_the_usage() -> None:
    specs, series = canned()
    lines = price_lines(usage_of(specs, series, CONFIGS))
    poller, executor, table = (line.usd for line in lines)
    assert poller == pytest.approx(1.0 * pricing.LAMBDA_GB_S_ARM_USD + 3 * pricing.LAMBDA_REQUEST_USD)
    assert executor == pytest.approx(10.0 * pricing.LAMBDA_GB_S_ARM_USD + 4 * pricing.LAMBDA_REQUEST_USD)
    assert table == pytest.approx(150 * pricing.DDB_WRU_USD + 10.5 * pricing.DDB_RRU_USD)


def test_a_function_the_cost_module_has_no_price_for_gets_none() -> None:
    usage = Usage((FunctionUsage("ExecutorFunction", "e", 1024, "x86_64", 1, 1_000),), {}, {}, MINUTE)
    assert price_lines(usage)[0].usd is None
    assert "no price in the cost module" in "\n".join(format_cost(usage, MINUTE, MINUTE + 1))


def test_no_data_is_said_plainly_and_partial_data_is_labelled() -> None:
    # Given no data at all  Then one line says so, with no figure
    empty = format_cost(Usage((), {}, {}, None), MINUTE, MINUTE + 90_000)
    assert len(empty) == 1
    assert empty[0].endswith("not available: CloudWatch has no data for the run yet")
    assert "$" not in empty[0]
    # Given data up to the minute before the run's last  Then the figures are printed, labelled as short
    specs, series = canned()
    usage = usage_of(specs, series, CONFIGS)  # data up to MINUTE + 1 min
    assert covers(usage, MINUTE + 60_000 + 59_999)
    assert not covers(usage, MINUTE + 120_000)
    partial = "\n".join(format_cost(usage, MINUTE, MINUTE + 120_000))
    assert "not yet available" in partial
    assert "total of the priced lines" in partial


# -- the queue a run makes ----------------------------------------------------------------------------------------
ALLOWLIST = (
    "arn:aws:lambda:eu-west-1:123456789012:function:f, arn:aws:sqs:eu-west-1:123456789012:orders,"
    "arn:aws:sqs:us-east-1:123456789012:punctual-verify-us,arn:aws:sqs:eu-west-1:123456789012:punctual-verify-a"
)


def test_the_queue_is_the_allowlists_punctual_verify_queue_in_the_region() -> None:
    assert allowed_queue_arns(ALLOWLIST, "eu-west-1") == ["arn:aws:sqs:eu-west-1:123456789012:punctual-verify-a"]
    assert queue_name_for(ALLOWLIST, "eu-west-1") == "punctual-verify-a"
    assert queue_name_for(ALLOWLIST, "eu-west-1", "mine") == "mine"
    with pytest.raises(VerifyError, match="ActionTargetArns"):
        queue_name_for(ALLOWLIST, "ap-south-1")
