"""Powertools for the Lambda handlers (adapters only: the services log with stdlib ``logging``).

In Lambda the template sets ``POWERTOOLS_SERVICE_NAME`` and ``POWERTOOLS_METRICS_NAMESPACE``; elsewhere (the
local runtime, tests) they default to Punctual's own (:mod:`punctual.runtime.metrics`), so that metrics still
validate: Powertools refuses to flush without a namespace.

Every function traces (``Tracing: Active``): Lambda itself records each invocation's segment, with its
initialization, invocation and overhead, and needs nothing in the function for it. Only the poller adds the
handler's own subsegment (:func:`handler_tracer`): the X-Ray SDK that Powertools' Tracer loads costs CPU at every
cold start (docs/decisions.md, "Only the poller traces its handler"), which the executor, the fast path and the
API, on the path from a write to its fire, do not pay. That Tracer patches no library: by default Powertools'
Tracer patches every module the X-Ray SDK knows, botocore included, which turns each DynamoDB call and each
executor invoke into an X-Ray subsegment, work and payload that grow with the poll.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit

from punctual.runtime.metrics import NAMESPACE, SERVICE


def handler_tools() -> tuple[Logger, Metrics]:
    """The Logger and Metrics of one handler module, built once at its cold start."""
    service = os.environ.get("POWERTOOLS_SERVICE_NAME") or SERVICE
    logger = Logger(service=service)
    # The package logs with stdlib logging under "punctual.*": with the service named "punctual" those records
    # reach this Logger's handler by propagation; under another service name this hands them its JSON handler.
    copy_config_to_registered_loggers(source_logger=logger, include={"punctual"})
    metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or NAMESPACE, service=service)
    return logger, metrics


def handler_tracer() -> Tracer:
    """The poller's Tracer: the handler's subsegment, no library patched (see the module docstring). Building it
    loads the X-Ray SDK. Powertools keeps one class-wide Tracer config, so a later Tracer() in the process
    inherits this one instead of patching."""
    return Tracer(service=os.environ.get("POWERTOOLS_SERVICE_NAME") or SERVICE, auto_patch=False)


def add_counts(metrics: Metrics, counts: Mapping[str, int]) -> None:
    """One Count value per metric name."""
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
