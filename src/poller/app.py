"""Poller Lambda, on ``rate(1 minute)``: claim due and overdue tasks and hand them to executors.

A thin adapter: the EventBridge scheduled event only triggers the poll (it is validated, and its ``id`` and
``time`` go into the logs); ``now`` is read here, from the clock, and passed in.

Logs (JSON, Powertools): every line of an invocation, including those of ``punctual.poller``, carries
``correlation_id`` = the scheduled event's ``id`` and ``scheduled_time`` = its ``time`` (how late the rule
ran shows as ``timestamp - scheduled_time``). Keys are reset at each invocation. Metrics (EMF, names from
:mod:`punctual.metrics`): one value each of ``TasksClaimed``, ``TasksRecovered``, ``ClaimConflicts``,
``TasksMissed`` and ``InvokeFailures`` per poll.
"""

from __future__ import annotations

import os
import time
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.metrics import (
    CLAIM_CONFLICTS,
    INVOKE_FAILURES,
    NAMESPACE,
    SERVICE,
    TASKS_CLAIMED,
    TASKS_MISSED,
    TASKS_RECOVERED,
)
from punctual.runtime import build_poller
from punctual.settings import Settings

# In Lambda the template sets POWERTOOLS_SERVICE_NAME and POWERTOOLS_METRICS_NAMESPACE; elsewhere they default
# to Punctual's own, so that metrics still validate (Powertools refuses to flush without a namespace).
SERVICE_NAME = os.environ.get("POWERTOOLS_SERVICE_NAME") or SERVICE
logger = Logger(service=SERVICE_NAME)
# The package logs with stdlib logging under "punctual.*": with the service named "punctual" those records
# reach this Logger's handler by propagation; under another service name this hands them its JSON handler.
copy_config_to_registered_loggers(source_logger=logger, include={"punctual"})
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or NAMESPACE, service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
settings = Settings.from_env()
# Built once per cold start; the handler looks it up at each call, so a test can swap in a poller with a
# recording invoker.
poller = build_poller(settings)


@logger.inject_lambda_context(log_event=False, correlation_id_path=correlation_paths.EVENT_BRIDGE, clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    trigger = EventBridgeModel.model_validate(event)
    logger.append_keys(scheduled_time=trigger.time.isoformat())
    report = poller.poll(now_ms=int(time.time() * 1000))
    metrics.add_metric(name=TASKS_CLAIMED, unit=MetricUnit.Count, value=report.claimed)
    metrics.add_metric(name=TASKS_RECOVERED, unit=MetricUnit.Count, value=report.recovered)
    metrics.add_metric(name=CLAIM_CONFLICTS, unit=MetricUnit.Count, value=report.conflicts)
    metrics.add_metric(name=TASKS_MISSED, unit=MetricUnit.Count, value=report.missed)
    metrics.add_metric(name=INVOKE_FAILURES, unit=MetricUnit.Count, value=report.invoke_failures)
    return report.model_dump()
