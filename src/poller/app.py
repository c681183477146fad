"""Poller Lambda, on ``rate(1 minute)``: claim due and overdue tasks and hand them to executors.

A thin adapter: the scheduled event only triggers the poll; ``now`` is read here and passed in.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.runtime import build_poller
from punctual.settings import Settings

logger = Logger()
metrics = Metrics()
tracer = Tracer()
settings = Settings.from_env()
poller = build_poller(settings)


@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = poller.poll(now_ms=int(time.time() * 1000))
    metrics.add_metric(name="TasksClaimed", unit=MetricUnit.Count, value=report.claimed)
    metrics.add_metric(name="TasksRecovered", unit=MetricUnit.Count, value=report.recovered)
    metrics.add_metric(name="ClaimConflicts", unit=MetricUnit.Count, value=report.conflicts)
    metrics.add_metric(name="TasksMissed", unit=MetricUnit.Count, value=report.missed)
    metrics.add_metric(name="InvokeFailures", unit=MetricUnit.Count, value=report.invoke_failures)
    return report.model_dump()
