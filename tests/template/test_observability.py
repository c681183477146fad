"""The dashboard and alarms of template.yaml read metrics the code writes (names from punctual.metrics)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from template_tools import SUB_VARIABLE, sub_text, substitute

from punctual import metrics

PSEUDO_PARAMETERS = {"AWS::Region", "AWS::AccountId", "AWS::Partition", "AWS::StackName", "AWS::URLSuffix"}


def _dashboard_text(cfn_resources: dict[str, Any]) -> str:
    dashboards = [r for r in cfn_resources.values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    assert len(dashboards) == 1
    return sub_text(dashboards[0]["Properties"]["DashboardBody"])


@pytest.fixture(scope="module")
def dashboard(cfn_resources: dict[str, Any]) -> dict[str, Any]:
    """The dashboard body, parsed after its ${...} placeholders are replaced."""
    return json.loads(substitute(_dashboard_text(cfn_resources)))


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
            rows.append((namespace, metric, dict(zip(dims[::2], dims[1::2], strict=True)),
                         options.get("stat", default_stat)))
    return rows


def test_the_dashboard_body_is_json_whose_placeholders_exist(cfn_resources: dict[str, Any],
                                                              cfn_template: dict[str, Any],
                                                              dashboard: dict[str, Any]) -> None:
    # Given the DashboardBody Fn::Sub  Then it is valid JSON once substituted, and each ${X} / ${X.Attr} names
    # a resource, a parameter or a pseudo parameter
    assert dashboard["widgets"]
    known = set(cfn_resources) | set(cfn_template["Parameters"]) | PSEUDO_PARAMETERS
    for variable in SUB_VARIABLE.findall(_dashboard_text(cfn_resources)):
        name = variable if variable.startswith("AWS::") else variable.split(".")[0]
        assert name in known, variable


def test_punctual_metrics_on_the_dashboard_are_those_the_code_writes(metric_rows: list[Any]) -> None:
    # Given every row of namespace Punctual  Then its metric is in punctual.metrics.ALL and its dimensions are
    # exactly Powertools' default service dimension (a row with other dimensions would show no data)
    punctual_rows = [r for r in metric_rows if r[0] == metrics.NAMESPACE]
    assert punctual_rows
    for _, metric, dims, _ in punctual_rows:
        assert metric in metrics.ALL, metric
        assert dims == {"service": metrics.SERVICE}, (metric, dims)
    assert {r[0] for r in metric_rows} <= {metrics.NAMESPACE, "AWS/Lambda", "AWS/SQS"}


def test_the_dashboard_shows_what_the_issue_asks_for(metric_rows: list[Any]) -> None:
    # Given the dashboard's rows  Then drift percentiles, outcomes, claims, executor concurrency, throttles,
    # async event age and drops, and the dead-letter queue's depth are all there
    seen = {(namespace, metric, tuple(sorted(dims.items())), stat) for namespace, metric, dims, stat in metric_rows}
    service = (("service", metrics.SERVICE),)
    executor = (("FunctionName", "${ExecutorFunction}"),)
    for stat in ("p50", "p90", "p99", "Maximum"):
        assert (metrics.NAMESPACE, metrics.FIRE_DRIFT, service, stat) in seen
    names = {(namespace, metric, dims) for namespace, metric, dims, _ in seen}
    for metric in (metrics.TASKS_FIRED, metrics.TASKS_MISSED, metrics.TASKS_FAILED, metrics.TASKS_CLAIMED,
                   metrics.CLAIM_CONFLICTS):
        assert (metrics.NAMESPACE, metric, service) in names, metric
    for metric in ("ConcurrentExecutions", "Throttles", "AsyncEventAge", "AsyncEventsDropped"):
        assert ("AWS/Lambda", metric, executor) in names, metric
    assert ("AWS/SQS", "ApproximateNumberOfMessagesVisible",
            (("QueueName", "${TaskDeadLetterQueue.QueueName}"),)) in names


def _alarms(cfn_resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: r["Properties"] for name, r in cfn_resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}


def test_punctual_alarms_watch_metrics_the_code_writes(cfn_resources: dict[str, Any]) -> None:
    for name, alarm in _alarms(cfn_resources).items():
        if alarm["Namespace"] == metrics.NAMESPACE:
            assert alarm["MetricName"] in metrics.ALL, name
            assert alarm["Dimensions"] == [{"Name": "service", "Value": metrics.SERVICE}], name


def _alarm_on(cfn_resources: dict[str, Any], namespace: str, metric: str, dimension: dict[str, Any]) -> dict:
    found = [a for a in _alarms(cfn_resources).values()
             if (a["Namespace"], a["MetricName"]) == (namespace, metric) and a["Dimensions"] == [dimension]]
    assert len(found) == 1, (namespace, metric, dimension)
    return found[0]


def test_the_alarms_the_issue_asks_for(cfn_resources: dict[str, Any]) -> None:
    # Given the alarms  Then: drift p99 above DriftP99AlarmMs; the dead-letter queue not empty; any poller
    # error; any executor event dropped
    drift = _alarm_on(cfn_resources, metrics.NAMESPACE, metrics.FIRE_DRIFT,
                      {"Name": "service", "Value": metrics.SERVICE})
    assert (drift["ExtendedStatistic"], drift["Threshold"], drift["ComparisonOperator"]) == (
        "p99", {"Ref": "DriftP99AlarmMs"}, "GreaterThanThreshold")

    def above_zero(alarm: dict[str, Any]) -> bool:
        return alarm["Threshold"] == 0 and alarm["ComparisonOperator"] == "GreaterThanThreshold"

    dlq = _alarm_on(cfn_resources, "AWS/SQS", "ApproximateNumberOfMessagesVisible",
                    {"Name": "QueueName", "Value": {"Fn::GetAtt": ["TaskDeadLetterQueue", "QueueName"]}})
    poller = _alarm_on(cfn_resources, "AWS/Lambda", "Errors",
                       {"Name": "FunctionName", "Value": {"Ref": "PollerFunction"}})
    dropped = _alarm_on(cfn_resources, "AWS/Lambda", "AsyncEventsDropped",
                        {"Name": "FunctionName", "Value": {"Ref": "ExecutorFunction"}})
    assert above_zero(dlq) and above_zero(poller) and above_zero(dropped)
