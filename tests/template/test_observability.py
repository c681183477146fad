"""The dashboard and alarms of template.yaml read metrics that exist: Punctual's own (names from
punctual.runtime.metrics, which the code writes) and AWS's (the metric and dimension names AWS documents), on resources
of this stack, with thresholds that follow the template's parameters and the poller's timeout."""

from __future__ import annotations

import json
from typing import Any

import pytest
from template_tools import SUB_VARIABLE, sub_text, substitute

from punctual.polling.tick import DEADLINE_MARGIN_MS
from punctual.runtime import metrics

PSEUDO_PARAMETERS = {"AWS::Region", "AWS::AccountId", "AWS::Partition", "AWS::StackName", "AWS::URLSuffix"}
DUE_INDEX = "due"
# The AWS metrics the template may read, each with the dimension sets AWS publishes it under (a row or alarm
# with other dimensions shows no data and never goes off). Sources:
# Lambda: https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html
# SQS: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html
# DynamoDB: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/metrics-dimensions.html and
# .../TroubleshootingThrottling-cloudwatch.html (throttle events per table, and per table + index).
# API Gateway (REST): https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-metrics-and-dimensions.html
# (per API name, and per API name + stage).
_FUNCTION: set[tuple[str, ...]] = {("FunctionName",)}
_TABLE_OR_INDEX = {("TableName",), ("TableName", "GlobalSecondaryIndexName")}
_REST_API = {("ApiName",), ("ApiName", "Stage")}
AWS_METRICS: dict[str, dict[str, set[tuple[str, ...]]]] = {
    "AWS/Lambda": {
        name: _FUNCTION
        for name in (
            "Invocations",
            "Errors",
            "Throttles",
            "Duration",
            "ConcurrentExecutions",
            "IteratorAge",
            "AsyncEventsReceived",
            "AsyncEventAge",
            "AsyncEventsDropped",
        )
    },
    "AWS/SQS": {"ApproximateNumberOfMessagesVisible": {("QueueName",)}},
    "AWS/DynamoDB": {
        name: _TABLE_OR_INDEX
        for name in (
            "ReadThrottleEvents",
            "WriteThrottleEvents",
            "ConsumedReadCapacityUnits",
            "ConsumedWriteCapacityUnits",
        )
    },
    "AWS/ApiGateway": {name: _REST_API for name in ("Count", "4XXError", "5XXError", "Latency", "IntegrationLatency")},
}


def _dashboard_text(cfn_resources: dict[str, Any]) -> str:
    dashboards = [r for r in cfn_resources.values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    assert len(dashboards) == 1
    return sub_text(dashboards[0]["Properties"]["DashboardBody"])


@pytest.fixture(scope="module")
def dashboard(cfn_resources: dict[str, Any]) -> dict[str, Any]:
    """The dashboard body, parsed after its ${...} placeholders are replaced."""
    result: dict[str, Any] = json.loads(substitute(_dashboard_text(cfn_resources)))
    return result


@pytest.fixture(scope="module")
def metric_rows(cfn_resources: dict[str, Any]) -> list[tuple[str, str, dict[str, str], str | None]]:
    """``(namespace, metric, dimensions, stat)`` of every metric row of the dashboard, placeholders kept
    (``${ExecutorFunction}``), parsed with ${...} turned into JSON-safe text first."""
    text = _dashboard_text(cfn_resources).replace('"${', '"@{')  # quoted placeholders survive as text
    body = json.loads(substitute(text))
    rows = []
    for widget in body["widgets"]:
        if widget["type"] != "metric":
            continue
        default_stat = widget["properties"].get("stat")
        for row in widget["properties"]["metrics"]:
            options = row[-1] if isinstance(row[-1], dict) else {}
            names = [part.replace("@{", "${") for part in row if isinstance(part, str)]
            assert "." not in names, f"write rows out in full (no '.' shorthand): {row}"
            namespace, metric, *dims = names
            rows.append(
                (namespace, metric, dict(zip(dims[::2], dims[1::2], strict=True)), options.get("stat", default_stat))
            )
    return rows


def test_the_dashboard_body_is_json_whose_placeholders_exist(
    cfn_resources: dict[str, Any], cfn_template: dict[str, Any], dashboard: dict[str, Any]
) -> None:
    # Given the DashboardBody Fn::Sub  Then it is valid JSON once substituted, and each ${X} / ${X.Attr} names
    # a resource, a parameter or a pseudo parameter
    assert dashboard["widgets"]
    body = [r for r in cfn_resources.values() if r["Type"] == "AWS::CloudWatch::Dashboard"][0]["Properties"]
    variables = body["DashboardBody"]["Fn::Sub"][1]  # the Sub's own variables
    known = set(cfn_resources) | set(cfn_template["Parameters"]) | PSEUDO_PARAMETERS | set(variables)
    for variable in SUB_VARIABLE.findall(_dashboard_text(cfn_resources)):
        name = variable if variable.startswith("AWS::") else variable.split(".")[0]
        assert name in known, variable


def test_punctual_metrics_on_the_dashboard_are_those_the_code_writes(metric_rows: list[Any]) -> None:
    # Given every row of namespace Punctual  Then its metric is in punctual.runtime.metrics.ALL and its dimensions are
    # exactly Powertools' default service dimension (a row with other dimensions would show no data)
    punctual_rows = [r for r in metric_rows if r[0] == metrics.NAMESPACE]
    assert punctual_rows
    for _, metric, dims, _ in punctual_rows:
        assert metric in metrics.ALL, metric
        assert dims == {"service": metrics.SERVICE}, (metric, dims)
    assert {r[0] for r in metric_rows} <= {metrics.NAMESPACE, *AWS_METRICS}


def test_the_dashboard_shows_what_the_issue_asks_for(metric_rows: list[Any]) -> None:
    # Given the dashboard's rows  Then drift percentiles, every metric the code writes, executor concurrency,
    # throttles, async event age and drops, poll duration, fast-path lag, the table's throttles and the
    # dead-letter queue's depth are all there
    seen = {(namespace, metric, tuple(sorted(dims.items())), stat) for namespace, metric, dims, stat in metric_rows}
    service = (("service", metrics.SERVICE),)
    executor = (("FunctionName", "${ExecutorFunction}"),)
    for stat in ("p50", "p90", "p99", "Maximum"):
        assert (metrics.NAMESPACE, metrics.FIRE_DRIFT, service, stat) in seen
    names = {(namespace, metric, dims) for namespace, metric, dims, _ in seen}
    for metric in metrics.ALL:
        assert (metrics.NAMESPACE, metric, service) in names, metric
    for metric in ("ConcurrentExecutions", "Throttles", "AsyncEventAge", "AsyncEventsDropped"):
        assert ("AWS/Lambda", metric, executor) in names, metric
    assert ("AWS/Lambda", "Duration", (("FunctionName", "${PollerFunction}"),)) in names
    assert ("AWS/Lambda", "IteratorAge", (("FunctionName", "${FastPathFunction}"),)) in names
    for metric in ("ReadThrottleEvents", "WriteThrottleEvents"):
        assert ("AWS/DynamoDB", metric, (("TableName", "${TasksTable}"),)) in names
        on_index = (("GlobalSecondaryIndexName", DUE_INDEX), ("TableName", "${TasksTable}"))
        assert ("AWS/DynamoDB", metric, on_index) in names
    assert (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        (("QueueName", "${TaskDeadLetterQueue.QueueName}"),),
    ) in names


def test_the_dashboard_shows_the_api(cfn_resources: dict[str, Any], metric_rows: list[Any]) -> None:
    # Given the dashboard's rows  Then the REST API's requests, 4xx, 5xx and latency are there, and the API
    # function's errors next to the other functions'
    api = (("ApiName", _rest_api_dimensions(cfn_resources)["ApiName"]),)
    names = {(namespace, metric, tuple(sorted(dims.items()))) for namespace, metric, dims, _ in metric_rows}
    for metric in ("Count", "4XXError", "5XXError", "Latency"):
        assert ("AWS/ApiGateway", metric, api) in names, metric
    assert ("AWS/Lambda", "Errors", (("FunctionName", "${ApiFunction}"),)) in names


# -- alarms ----------------------------------------------------------------------------------------------
def _alarms(cfn_resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: r["Properties"] for name, r in cfn_resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}


def _placeholder(value: Any) -> str:
    """A dimension value as the dashboard spells it: ``${X}`` for a Ref, ``${X.Attr}`` for a GetAtt, the
    template text of a Sub."""
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return f"${{{value['Ref']}}}"
    if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
        return f"${{{'.'.join(value['Fn::GetAtt'])}}}"
    if isinstance(value, dict) and set(value) == {"Fn::Sub"}:
        return sub_text(value)
    assert isinstance(value, str), value
    return value


def _watched(alarm: dict[str, Any]) -> list[tuple[str, str, dict[str, str], str]]:
    """``(namespace, metric, dimensions, statistic)`` of every metric an alarm reads: its one metric, or each
    MetricStat of a metric-math alarm."""
    if "MetricName" in alarm:
        stat = alarm.get("Statistic") or alarm["ExtendedStatistic"]
        return [
            (
                alarm["Namespace"],
                alarm["MetricName"],
                {d["Name"]: _placeholder(d["Value"]) for d in alarm.get("Dimensions", [])},
                stat,
            )
        ]
    found = []
    for query in alarm["Metrics"]:
        if "MetricStat" in query:
            stat, metric = query["MetricStat"], query["MetricStat"]["Metric"]
            found.append(
                (
                    metric["Namespace"],
                    metric["MetricName"],
                    {d["Name"]: _placeholder(d["Value"]) for d in metric.get("Dimensions", [])},
                    stat["Stat"],
                )
            )
    return found


def _all_watched(cfn_resources: dict[str, Any]) -> list[tuple[str, str, dict[str, str], str]]:
    return [w for alarm in _alarms(cfn_resources).values() for w in _watched(alarm)]


def _rest_api_dimensions(cfn_resources: dict[str, Any]) -> dict[str, str]:
    """The REST API's ``ApiName`` (its Name, as the template spells it) and ``Stage`` dimension values."""
    (api,) = [r["Properties"] for r in cfn_resources.values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    (stage,) = [r["Properties"] for r in cfn_resources.values() if r["Type"] == "AWS::ApiGateway::Stage"]
    return {"ApiName": _placeholder(api["Name"]), "Stage": stage["StageName"]}


def test_every_metric_the_template_reads_exists(cfn_resources: dict[str, Any], metric_rows: list[Any]) -> None:
    # Given every metric of every alarm (metric math included) and of every dashboard row  Then a Punctual one is
    # in punctual.runtime.metrics.ALL under exactly the service dimension; an AWS one is a metric AWS publishes, under a
    # dimension set it publishes it with, naming a resource of this stack (the function, queue, table, index)
    indexes = {i["IndexName"] for i in cfn_resources["TasksTable"]["Properties"]["GlobalSecondaryIndexes"]}
    assert DUE_INDEX in indexes
    read = [(ns, m, d) for ns, m, d, _ in _all_watched(cfn_resources)] + [(ns, m, d) for ns, m, d, _ in metric_rows]
    assert {ns for ns, _, _ in read} == {metrics.NAMESPACE, *AWS_METRICS}
    for namespace, metric, dims in read:
        if namespace == metrics.NAMESPACE:
            assert metric in metrics.ALL, metric
            assert dims == {"service": metrics.SERVICE}, (metric, dims)
            continue
        assert metric in AWS_METRICS[namespace], (namespace, metric)
        assert tuple(sorted(dims)) in {tuple(sorted(s)) for s in AWS_METRICS[namespace][metric]}, (metric, dims)
        for name, value in dims.items():
            if name == "GlobalSecondaryIndexName":
                assert value in indexes, (metric, value)
                continue
            if name in ("ApiName", "Stage"):
                assert value == _rest_api_dimensions(cfn_resources)[name], (metric, name, value)
                continue
            assert value.startswith("${"), (metric, name, value)
            assert value.endswith("}"), (metric, name, value)
            resource, _, attribute = value[2:-1].partition(".")
            expected = {
                "FunctionName": ("AWS::Lambda::Function", ""),
                "QueueName": ("AWS::SQS::Queue", "QueueName"),
                "TableName": ("AWS::DynamoDB::Table", ""),
            }[name]
            assert (cfn_resources[resource]["Type"], attribute) == expected, (metric, name, value)


def test_every_alarm_notifies_and_is_on_the_dashboard(cfn_resources: dict[str, Any]) -> None:
    # Given every alarm  Then it notifies the alarm topic when there is one, treats missing data as fine unless
    # silence is the fault itself (the poller not running), and is listed in the dashboard's alarm widget
    text = json.loads(substitute(_dashboard_text(cfn_resources).replace('"${', '"@{')))
    listed = {
        a.removeprefix("@{").removesuffix(".Arn}")
        for w in text["widgets"]
        if w["type"] == "alarm"
        for a in w["properties"]["alarms"]
    }
    alarms = _alarms(cfn_resources)
    assert listed == set(alarms)
    for name, alarm in alarms.items():
        assert alarm["AlarmActions"] == {"Fn::If": ["HasAlarmEmail", [{"Ref": "AlarmTopic"}], {"Ref": "AWS::NoValue"}]}
        expected = "breaching" if name == "PollerStoppedAlarm" else "notBreaching"
        assert alarm["TreatMissingData"] == expected, name


def _alarm_on(cfn_resources: dict[str, Any], namespace: str, metric: str, dims: dict[str, str]) -> dict[str, Any]:
    found = [
        a
        for a in _alarms(cfn_resources).values()
        if any((ns, m, d) == (namespace, metric, dims) for ns, m, d, _ in _watched(a))
    ]
    assert len(found) == 1, (namespace, metric, dims)
    return found[0]


def _above_zero(alarm: dict[str, Any]) -> bool:
    result: bool = alarm["Threshold"] == 0 and alarm["ComparisonOperator"] == "GreaterThanThreshold"
    return result


SERVICE = {"service": metrics.SERVICE}


def test_the_alarms_the_issue_asks_for(cfn_resources: dict[str, Any]) -> None:
    # Given the alarms  Then: drift p99 above DriftP99AlarmMs; any task MISSED in a minute; the dead-letter queue
    # not empty; any poller error; any executor event dropped or throttled; any throttle event on the table or
    # its due index; anything a tick left undispatched or could not invoke; any undecodable item; any 5xx answer
    # of the REST API
    drift = _alarm_on(cfn_resources, metrics.NAMESPACE, metrics.FIRE_DRIFT, SERVICE)
    assert (drift["ExtendedStatistic"], drift["Threshold"], drift["ComparisonOperator"]) == (
        "p99",
        {"Ref": "DriftP99AlarmMs"},
        "GreaterThanThreshold",
    )
    missed = _alarm_on(cfn_resources, metrics.NAMESPACE, metrics.TASKS_MISSED, SERVICE)
    assert (missed["Statistic"], missed["Period"], missed["EvaluationPeriods"]) == ("Sum", 60, 1)
    dlq = _alarm_on(
        cfn_resources,
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        {"QueueName": "${TaskDeadLetterQueue.QueueName}"},
    )
    poller = _alarm_on(cfn_resources, "AWS/Lambda", "Errors", {"FunctionName": "${PollerFunction}"})
    dropped = _alarm_on(cfn_resources, "AWS/Lambda", "AsyncEventsDropped", {"FunctionName": "${ExecutorFunction}"})
    throttled = _alarm_on(cfn_resources, "AWS/Lambda", "Throttles", {"FunctionName": "${ExecutorFunction}"})
    undecodable = _alarm_on(cfn_resources, metrics.NAMESPACE, metrics.UNDECODABLE_ITEMS, SERVICE)
    api_errors = _alarm_on(
        cfn_resources, "AWS/ApiGateway", "5XXError", {"ApiName": _rest_api_dimensions(cfn_resources)["ApiName"]}
    )
    assert (api_errors["Statistic"], api_errors["Period"]) == ("Sum", 60)
    for alarm in (missed, dlq, poller, dropped, throttled, undecodable, api_errors):
        assert _above_zero(alarm), alarm["AlarmDescription"]

    table = _alarm_on(cfn_resources, "AWS/DynamoDB", "WriteThrottleEvents", {"TableName": "${TasksTable}"})
    watched = {(m, tuple(sorted(d.items())), stat) for _, m, d, stat in _watched(table)}
    assert watched == {
        (m, dims, "Sum")
        for m in ("ReadThrottleEvents", "WriteThrottleEvents")
        for dims in (
            (("TableName", "${TasksTable}"),),
            (("GlobalSecondaryIndexName", DUE_INDEX), ("TableName", "${TasksTable}")),
        )
    }
    shortfall = _alarm_on(cfn_resources, metrics.NAMESPACE, metrics.TASKS_UNDISPATCHED, SERVICE)
    assert {m for _, m, _, _ in _watched(shortfall)} == {metrics.TASKS_UNDISPATCHED, metrics.INVOKE_FAILURES}
    for alarm in (table, shortfall):
        assert _above_zero(alarm), alarm["AlarmDescription"]
        (output,) = [q for q in alarm["Metrics"] if q.get("ReturnData", True)]
        ids = [q["Id"] for q in alarm["Metrics"] if "MetricStat" in q]
        # every metric is summed in, each with its gaps read as 0 (these metrics are only sent when not zero)
        assert sorted(output["Expression"].split(" + ")) == sorted(f"FILL({i}, 0)" for i in ids)


def test_the_poll_duration_alarm_follows_the_poller_timeout_and_its_polls(
    cfn_resources: dict[str, Any], sam_template: dict[str, Any], dashboard: dict[str, Any]
) -> None:
    # Given the poller's Timeout and each PollsPerMinute  Then its Duration alarm goes off when the invocation's last
    # poll (it starts (polls - 1) intervals in) has used 80% of the time it has before the deadline margin: before a
    # poll is cut short by it (timeout - DEADLINE_MARGIN_MS), and after the last poll starts
    timeout_ms = cfn_resources["PollerFunction"]["Properties"]["Timeout"] * 1000
    alarm = _alarm_on(cfn_resources, "AWS/Lambda", "Duration", {"FunctionName": "${PollerFunction}"})
    assert (alarm["Statistic"], alarm["ComparisonOperator"]) == ("Maximum", "GreaterThanThreshold")
    lookup = {"Fn::FindInMap": ["PollCycles", {"Ref": "PollsPerMinute"}, "DurationAlarmMs"]}
    assert alarm["Threshold"] == lookup
    for polls in sam_template["Parameters"]["PollsPerMinute"]["AllowedValues"]:
        cycle = sam_template["Mappings"]["PollCycles"][str(polls)]
        last_poll_ms = (polls - 1) * cycle["IntervalMs"]
        assert cycle["DurationAlarmMs"] == last_poll_ms + 0.8 * (timeout_ms - DEADLINE_MARGIN_MS - last_poll_ms)
        assert last_poll_ms < cycle["DurationAlarmMs"] < timeout_ms - DEADLINE_MARGIN_MS
    # ... and the dashboard marks both the alarm (the same lookup) and the timeout
    body = [r for r in cfn_resources.values() if r["Type"] == "AWS::CloudWatch::Dashboard"][0]["Properties"]
    assert body["DashboardBody"]["Fn::Sub"][1] == {"PollerDurationAlarmMs": lookup}
    (widget,) = [
        w
        for w in dashboard["widgets"]
        if w["type"] == "metric" and any("Duration" in row for row in w["properties"]["metrics"])
    ]
    assert '"value": ${PollerDurationAlarmMs}' in _dashboard_text(cfn_resources)
    assert {a["value"] for a in widget["properties"]["annotations"]["horizontal"]} == {0, timeout_ms}


def test_the_fast_path_lag_alarm_follows_its_parameter(
    cfn_resources: dict[str, Any], sam_template: dict[str, Any]
) -> None:
    # Given FastPathIteratorAgeAlarmMs  Then the fast path's IteratorAge alarm uses it, and so does the dashboard
    alarm = _alarm_on(cfn_resources, "AWS/Lambda", "IteratorAge", {"FunctionName": "${FastPathFunction}"})
    assert (alarm["Statistic"], alarm["Threshold"]) == ("Maximum", {"Ref": "FastPathIteratorAgeAlarmMs"})
    assert "FastPathIteratorAgeAlarmMs" in sam_template["Parameters"]
    assert '"value": ${FastPathIteratorAgeAlarmMs}' in _dashboard_text(cfn_resources)
    assert '"value": ${DriftP99AlarmMs}' in _dashboard_text(cfn_resources)


@pytest.mark.parametrize("parameter", ["DriftP99AlarmMs", "FastPathIteratorAgeAlarmMs", "ExecutorEventAgeAlarmMs"])
def test_threshold_parameters_reach_the_alarm_descriptions(cfn_resources: dict[str, Any], parameter: str) -> None:
    # Given a threshold parameter  Then the alarm it sets says the threshold in its description
    (alarm,) = [a for a in _alarms(cfn_resources).values() if a["Threshold"] == {"Ref": parameter}]
    assert f"${{{parameter}}}" in sub_text(alarm["AlarmDescription"])


EXECUTOR = {"FunctionName": "${ExecutorFunction}"}
POLL_INTERVAL_MS = 60_000


def test_an_executor_queue_that_delays_arming_is_alarmed(
    cfn_resources: dict[str, Any], sam_template: dict[str, Any], dashboard: dict[str, Any]
) -> None:
    # Given the alarm on the executor's AsyncEventAge (how long an invocation waited in Lambda's queue)
    alarm = _alarm_on(cfn_resources, "AWS/Lambda", "AsyncEventAge", EXECUTOR)
    # Then it takes the longest wait of each minute, above ExecutorEventAgeAlarmMs, whose default is no more than
    # the least lead a poll gives a task it is the first to see (LeadMs - the poll interval): a batch that waited
    # longer arms after its first task's instant
    assert (alarm["Statistic"], alarm["Period"], alarm["EvaluationPeriods"]) == ("Maximum", 60, 1)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (
        {"Ref": "ExecutorEventAgeAlarmMs"},
        "GreaterThanThreshold",
    )
    parameters = sam_template["Parameters"]
    assert parameters["ExecutorEventAgeAlarmMs"]["Default"] <= parameters["LeadMs"]["Default"] - POLL_INTERVAL_MS
    # ... and the dashboard draws its threshold on the executor's async queue
    assert '"value": ${ExecutorEventAgeAlarmMs}' in _dashboard_text(cfn_resources)


def test_dropped_failed_and_unarmed_batches_are_alarmed(cfn_resources: dict[str, Any]) -> None:
    # Given the alarms  Then any executor event Lambda dropped, any failed executor invocation, and any task a poll
    # found still PENDING after sending it (a batch not armed: queued or lost) sets one off within a minute
    for namespace, metric, dims in (
        ("AWS/Lambda", "AsyncEventsDropped", EXECUTOR),
        ("AWS/Lambda", "Errors", EXECUTOR),
        (metrics.NAMESPACE, metrics.TASKS_NOT_ARMED, SERVICE),
    ):
        alarm = _alarm_on(cfn_resources, namespace, metric, dims)
        assert (alarm["Statistic"], alarm["Period"], alarm["EvaluationPeriods"]) == ("Sum", 60, 1), metric
        assert _above_zero(alarm), metric


def test_the_gradual_deployment_rolls_back_on_alarms_of_the_stack(sam_resources: dict[str, Any]) -> None:
    # Given the executor's deployment preference  Then its rollback alarms are alarms of this template (executor
    # errors and drift)
    alarms = sam_resources["ExecutorFunction"]["Properties"]["DeploymentPreference"]["Alarms"]
    assert alarms == [{"Ref": "ExecutorErrorsAlarm"}, {"Ref": "FireDriftAlarm"}]
    for alarm in alarms:
        assert sam_resources[alarm["Ref"]]["Type"] == "AWS::CloudWatch::Alarm"
