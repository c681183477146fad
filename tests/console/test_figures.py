"""The console's figures: the local stack's batch log (private, bounded, appended as each batch ends) and
CloudWatch's (one GetMetricData call, on moto as far as moto goes, under the namespace and dimension the template's
alarms read).

What moto cannot check: it cannot answer the ``p50`` / ``p99`` extended statistics of ``GetMetricData`` (its answer
fails to serialise), which CloudWatch computes from the high-resolution ``FireDrift`` values: the test sends those two
queries to a stand-in that answers them with given values (which checks how they are read), the others to moto."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import boto3
import pytest
from moto import mock_aws

from punctual.domain.keys import BUCKET_MS, bucket_start, from_ms
from punctual.runtime.metrics import FIRE_DRIFT, NAMESPACE, SERVICE, TASKS_FAILED, TASKS_FIRED, TASKS_MISSED
from punctual_tools.console.figures import BATCH_LOG, BatchLine, BatchLog, CloudWatchFigures, metric_queries
from punctual_tools.local.stack import STACK_FILES, LocalStack, StackConfig
from punctual_tools.template import load_template

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient

MINUTE = bucket_start(1_796_000_000_000)


def test_the_batch_log_is_private_and_keeps_what_the_console_reads(tmp_path: Path) -> None:
    # Given a batch report as an executor answers it
    log = BatchLog(tmp_path / BATCH_LOG)
    report = {"executor_id": "x-1", "fired": 3, "missed": 1, "failed": 0, "drift_ms": [0.12345, 2.0], "armed": 4}
    # When it is appended at its end
    log.append(report, MINUTE + 5)
    # Then the file is the user's alone and holds one line of what the console reads
    assert stat.S_IMODE((tmp_path / BATCH_LOG).stat().st_mode) == 0o600
    assert log.read(MINUTE) == [
        BatchLine(end_ms=MINUTE + 5, executor_id="x-1", fired=3, missed=1, failed=0, drift_ms=[0.123, 2.0])
    ]
    assert log.read(MINUTE + 6) == []


def test_the_batch_log_drops_old_lines_once_it_grows_past_its_size(tmp_path: Path) -> None:
    # Given a log of at most 2 KB that keeps an hour once it is full, and 20 batches of three hours ago
    log = BatchLog(tmp_path / BATCH_LOG, max_bytes=2_048, keep_ms=3_600_000)
    old = MINUTE - 3 * 3_600_000
    for i in range(20):
        log.append({"executor_id": "x-old", "fired": 1, "drift_ms": [1.0] * 5}, old + i)
    # When batches of now are appended until it passes its size
    for i in range(20):
        log.append({"executor_id": "x-new", "fired": 1, "drift_ms": [1.0] * 5}, MINUTE + i)
    # Then the old lines are gone, the new ones kept, the file still private and under a few times its size
    kept = log.read(0)
    assert {line.executor_id for line in kept} == {"x-new"}
    assert len(kept) >= 5
    assert (tmp_path / BATCH_LOG).stat().st_size <= 2 * 2_048
    assert stat.S_IMODE((tmp_path / BATCH_LOG).stat().st_mode) == 0o600


def test_a_line_that_is_not_a_batch_is_skipped(tmp_path: Path) -> None:
    log = BatchLog(tmp_path / BATCH_LOG)
    log.append({"executor_id": "x-1", "fired": 1}, MINUTE)
    with open(tmp_path / BATCH_LOG, "a", encoding="utf-8") as out:
        out.write("not json\n" + json.dumps({"end_ms": MINUTE}) + "\n")
    assert [line.executor_id for line in log.read(0)] == ["x-1"]


def test_the_local_stack_appends_each_batch_it_is_told_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a stack (not started: only its batch bookkeeping runs) whose state file writes are left out
    stack = LocalStack(StackConfig(home=tmp_path), on_batch=lambda result: None)
    monkeypatch.setattr(stack, "_write_state", lambda: None)
    # When an executor's batch ends
    stack._batch_done({"batch_id": "b-1"}, {"executor_id": "x-7", "fired": 2, "drift_ms": [1.5, 2.5]})
    # Then its line is in the stack's batch log, a file the stack keeps private
    assert [(line.executor_id, line.fired, line.drift_ms) for line in stack.batch_log.read(0)] == [
        ("x-7", 2, [1.5, 2.5])
    ]
    assert BATCH_LOG in STACK_FILES


def test_the_queries_read_what_the_templates_alarms_read() -> None:
    # Given the template's FireDrift alarm (namespace and dimension of the executors' metrics)
    alarm = load_template()["Resources"]["FireDriftAlarm"]["Properties"]
    dimensions = [{"Name": d["Name"], "Value": d["Value"]} for d in alarm["Dimensions"]]
    # When the console's queries are built
    queries = metric_queries()
    # Then each reads a minute of one of the executors' metrics under that namespace and dimension
    assert {(q["MetricStat"]["Metric"]["MetricName"], q["MetricStat"]["Stat"]) for q in queries} == {
        (TASKS_FIRED, "Sum"),
        (TASKS_MISSED, "Sum"),
        (TASKS_FAILED, "Sum"),
        (FIRE_DRIFT, "p50"),
        (FIRE_DRIFT, "p99"),
        (FIRE_DRIFT, "Maximum"),
    }
    for query in queries:
        metric = query["MetricStat"]["Metric"]
        assert (metric["Namespace"], metric.get("Dimensions")) == (alarm["Namespace"], dimensions)
        assert query["MetricStat"]["Period"] == 60


PERCENTILES = {"p50": 4.0, "p99": 9.0}  # what the stand-in answers for the extended statistics moto cannot


class PercentilesApart:
    """moto's CloudWatch, but for the percentile queries, which this answers itself: ``PERCENTILES`` at each
    timestamp moto answers for the same metric's maximum."""

    def __init__(self, moto_client: Any) -> None:
        self.moto = moto_client
        self.calls = 0

    def get_metric_data(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        queries = kwargs["MetricDataQueries"]
        apart = [q for q in queries if q["MetricStat"]["Stat"] in PERCENTILES]
        answer: dict[str, Any] = self.moto.get_metric_data(
            **{**kwargs, "MetricDataQueries": [q for q in queries if q not in apart]}
        )
        maximum = next(r for r in answer["MetricDataResults"] if r["Id"] == "max")
        for query in apart:
            stat = query["MetricStat"]["Stat"]
            answer["MetricDataResults"].append(
                {
                    "Id": query["Id"],
                    "Timestamps": maximum["Timestamps"],
                    "Values": [PERCENTILES[stat]] * len(maximum["Timestamps"]),
                }
            )
        return answer


@pytest.fixture
def cloudwatch() -> Iterator[PercentilesApart]:
    with mock_aws():
        yield PercentilesApart(boto3.client("cloudwatch", region_name="us-east-1"))


def test_cloudwatch_figures_are_read_a_minute_each(cloudwatch: PercentilesApart) -> None:
    # Given the executors' metrics of one minute a quarter of an hour ago, as Powertools sends them
    now = bucket_start(1_796_000_000_000) + 30_000
    minute = bucket_start(now) - 15 * BUCKET_MS
    at = from_ms(minute + 10_000)
    dimensions = [{"Name": "service", "Value": SERVICE}]
    data = [
        {"MetricName": TASKS_FIRED, "Value": 7, "Unit": "Count"},
        {"MetricName": TASKS_FIRED, "Value": 5, "Unit": "Count"},
        {"MetricName": TASKS_MISSED, "Value": 2, "Unit": "Count"},
        {"MetricName": TASKS_FAILED, "Value": 1, "Unit": "Count"},
        {"MetricName": FIRE_DRIFT, "Value": 3.5, "Unit": "Milliseconds"},
        {"MetricName": FIRE_DRIFT, "Value": 9.25, "Unit": "Milliseconds"},
    ]
    cloudwatch.moto.put_metric_data(
        Namespace=NAMESPACE, MetricData=[{**d, "Timestamp": at, "Dimensions": dimensions} for d in data]
    )
    # When the console reads the last hour
    minutes = CloudWatchFigures(cast("CloudWatchClient", cloudwatch)).minutes(now)
    # Then, in one call, there are 60 minutes, and that one holds the sums, the maximum and the percentiles; the
    # others are empty
    assert cloudwatch.calls == 1
    assert len(minutes) == 60
    assert [m.minute_ms for m in minutes][-1] == bucket_start(now)
    shown = {m.minute_ms: m for m in minutes}[minute]
    assert (shown.fired, shown.missed, shown.failed, shown.drift_max_ms) == (12, 2, 1, 9.25)
    assert (shown.drift_p50_ms, shown.drift_p99_ms) == (PERCENTILES["p50"], PERCENTILES["p99"])
    assert sum(m.fired for m in minutes) == 12
    assert all(m.drift_max_ms is None for m in minutes if m.minute_ms != minute)
