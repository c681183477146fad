"""The console's per-minute figures of the last hour: fired, MISSED and FAILED tasks and the drift of the fires, one
:class:`~punctual_tools.console.model.MinuteFigures` a minute.

Two sources: locally, the batch log (:class:`BatchLog`, ``<home>/batches.jsonl``), one JSON line a batch an
executor finished, which the local stack appends as each batch ends and the console reads the last hour of
(:func:`minutes_of`: a batch counts in the minute it ended); on AWS, CloudWatch (:class:`CloudWatchFigures`): the
executors' ``TasksFired``, ``TasksMissed`` and ``TasksFailed`` sums and ``FireDrift`` p50 / p99 / maximum a minute,
in one ``GetMetricData`` call, under the namespace and dimension the template's dashboard and alarms read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from punctual.domain.keys import BUCKET_MS, bucket_start, from_ms
from punctual.runtime.metrics import FIRE_DRIFT, NAMESPACE, SERVICE, TASKS_FAILED, TASKS_FIRED, TASKS_MISSED
from punctual_tools.console.model import MinuteFigures
from punctual_tools.stats import percentile

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_cloudwatch.type_defs import MetricDataQueryTypeDef

log = logging.getLogger(__name__)

BATCH_LOG = "batches.jsonl"  # in the stack's home
HOUR_MINUTES = 60
KEEP_MS = 3 * 3_600_000  # a log grown past its size keeps the batches of the last three hours
MAX_LOG_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchLine:
    """One batch an executor finished, as the batch log keeps it: when it ended, by whom, what it came to."""

    end_ms: int
    executor_id: str
    fired: int = 0
    missed: int = 0
    failed: int = 0
    drift_ms: list[float] = field(default_factory=list)

    @classmethod
    def of_report(cls, report: Mapping[str, Any], end_ms: int) -> BatchLine:
        """The line of an executor's batch report (:class:`~punctual.domain.events.BatchReport`, as a dict)."""
        return cls(
            end_ms=end_ms,
            executor_id=str(report.get("executor_id") or "?"),
            fired=int(report.get("fired") or 0),
            missed=int(report.get("missed") or 0),
            failed=int(report.get("failed") or 0),
            drift_ms=[round(float(d), 3) for d in report.get("drift_ms") or []],
        )

    def text(self) -> str:
        return json.dumps(
            {
                "end_ms": self.end_ms,
                "executor_id": self.executor_id,
                "fired": self.fired,
                "missed": self.missed,
                "failed": self.failed,
                "drift_ms": self.drift_ms,
            }
        )

    @classmethod
    def parse(cls, text: str) -> BatchLine:
        """The line written as ``text``; ValueError (or KeyError, TypeError) when it is none."""
        raw = json.loads(text)
        return cls(
            end_ms=int(raw["end_ms"]),
            executor_id=str(raw["executor_id"]),
            fired=int(raw["fired"]),
            missed=int(raw["missed"]),
            failed=int(raw["failed"]),
            drift_ms=[float(d) for d in raw["drift_ms"]],
        )


class BatchLog:
    """The local stack's batch log: a JSON-lines file only its user can read (0600), appended by the stack's process
    (one thread at a time) and read by the console. Bounded: once it grows past ``max_bytes`` the lines that ended
    more than ``keep_ms`` before the newest are dropped (a new file renamed over it, so a reader sees one or the
    other whole)."""

    def __init__(self, path: Path, *, max_bytes: int = MAX_LOG_BYTES, keep_ms: int = KEEP_MS) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep_ms = keep_ms
        self._lock = threading.Lock()

    def append(self, report: Mapping[str, Any], end_ms: int) -> None:
        """Add the batch ``report`` that ended at ``end_ms``."""
        line = BatchLine.of_report(report, end_ms).text() + "\n"
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as out:
                out.write(line)
                size = out.tell()
            if size > self.max_bytes:
                self._drop_before(end_ms - self.keep_ms)

    def _drop_before(self, oldest_ms: int) -> None:
        kept = [line for line in self.read(oldest_ms)]
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("".join(line.text() + "\n" for line in kept))
        tmp.replace(self.path)

    def read(self, since_ms: int) -> list[BatchLine]:
        """The batches that ended at or after ``since_ms``, in the log's order; a line that is not one is skipped."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        lines: list[BatchLine] = []
        for raw in text.splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                line = BatchLine.parse(raw)
                if line.end_ms >= since_ms:
                    lines.append(line)
        return lines


def hour_minutes(now_ms: int) -> list[int]:
    """The starts of the last hour's minutes, oldest first, the one holding ``now_ms`` last."""
    last = bucket_start(now_ms)
    return [last - (HOUR_MINUTES - 1 - i) * BUCKET_MS for i in range(HOUR_MINUTES)]


def minutes_of(lines: Iterable[BatchLine], now_ms: int) -> list[MinuteFigures]:
    """The last hour's figures, a minute each (empty ones too), of the batches that ended in it."""
    minutes = hour_minutes(now_ms)
    counts = {m: [0, 0, 0] for m in minutes}
    drifts: dict[int, list[float]] = {m: [] for m in minutes}
    for line in lines:
        minute = bucket_start(line.end_ms)
        if minute in counts:
            for i, count in enumerate((line.fired, line.missed, line.failed)):
                counts[minute][i] += count
            drifts[minute].extend(line.drift_ms)
    return [
        MinuteFigures(
            minute_ms=m,
            fired=counts[m][0],
            missed=counts[m][1],
            failed=counts[m][2],
            drift_p50_ms=percentile(drifts[m], 50),
            drift_p99_ms=percentile(drifts[m], 99),
            drift_max_ms=max(drifts[m]) if drifts[m] else None,
        )
        for m in minutes
    ]


# (query id, metric, statistic) of the figures read from CloudWatch
CLOUDWATCH_FIGURES = (
    ("fired", TASKS_FIRED, "Sum"),
    ("missed", TASKS_MISSED, "Sum"),
    ("failed", TASKS_FAILED, "Sum"),
    ("p50", FIRE_DRIFT, "p50"),
    ("p99", FIRE_DRIFT, "p99"),
    ("max", FIRE_DRIFT, "Maximum"),
)


def metric_queries(namespace: str = NAMESPACE, service: str = SERVICE) -> list[MetricDataQueryTypeDef]:
    """The ``GetMetricData`` queries of the figures, a minute each, as the template's dashboard and alarms read
    them (namespace ``Punctual``, dimension ``service``)."""
    return [
        {
            "Id": query_id,
            "MetricStat": {
                "Metric": {
                    "Namespace": namespace,
                    "MetricName": metric,
                    "Dimensions": [{"Name": "service", "Value": service}],
                },
                "Period": 60,
                "Stat": stat,
            },
            "ReturnData": True,
        }
        for query_id, metric, stat in CLOUDWATCH_FIGURES
    ]


class CloudWatchFigures:
    """The last hour's figures of a deployed stack, from CloudWatch through ``cloudwatch`` (one ``GetMetricData``
    call, its pages followed)."""

    def __init__(self, cloudwatch: CloudWatchClient, namespace: str = NAMESPACE, service: str = SERVICE) -> None:
        self.cloudwatch = cloudwatch
        self.queries = metric_queries(namespace, service)

    def minutes(self, now_ms: int) -> list[MinuteFigures]:
        minutes = hour_minutes(now_ms)
        values: dict[str, dict[int, float]] = {query_id: {} for query_id, _, _ in CLOUDWATCH_FIGURES}
        kwargs: dict[str, Any] = {
            "MetricDataQueries": self.queries,
            "StartTime": from_ms(minutes[0]),
            "EndTime": from_ms(minutes[-1] + BUCKET_MS),
            "ScanBy": "TimestampAscending",
        }
        while True:
            answer = self.cloudwatch.get_metric_data(**kwargs)
            for result in answer.get("MetricDataResults", []):
                series = values.setdefault(str(result.get("Id")), {})
                for at, value in zip(result.get("Timestamps", []), result.get("Values", []), strict=False):
                    series[bucket_start(int(at.astimezone(UTC).timestamp() * 1000))] = float(value)
            token = answer.get("NextToken")
            if not token:
                break
            kwargs["NextToken"] = token
        return [
            MinuteFigures(
                minute_ms=m,
                fired=int(values["fired"].get(m, 0)),
                missed=int(values["missed"].get(m, 0)),
                failed=int(values["failed"].get(m, 0)),
                drift_p50_ms=values["p50"].get(m),
                drift_p99_ms=values["p99"].get(m),
                drift_max_ms=values["max"].get(m),
            )
            for m in minutes
        ]
