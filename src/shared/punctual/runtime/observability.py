"""Powertools for the Lambda handlers (adapters only: the services log with stdlib ``logging``).

In Lambda the template sets ``POWERTOOLS_SERVICE_NAME`` and ``POWERTOOLS_METRICS_NAMESPACE``; elsewhere (the
local runtime, tests) they default to Punctual's own (:mod:`punctual.runtime.metrics`), so that metrics still
validate: Powertools refuses to flush without a namespace.

Tracing keeps the handler's own segment (``capture_lambda_handler``) and patches no library: by default
Powertools' Tracer patches every module the X-Ray SDK knows, botocore included, which turns each DynamoDB
call (one per arm, record and heartbeat) and each executor invoke into an X-Ray subsegment, work and
payload on the hot path that grow with the batch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit

from punctual.runtime.metrics import NAMESPACE, SERVICE


def handler_tools() -> tuple[Logger, Metrics, Tracer]:
    """The Logger, Metrics and Tracer of one handler module, built once at its cold start."""
    service = os.environ.get("POWERTOOLS_SERVICE_NAME") or SERVICE
    logger = Logger(service=service)
    # The package logs with stdlib logging under "punctual.*": with the service named "punctual" those records
    # reach this Logger's handler by propagation; under another service name this hands them its JSON handler.
    copy_config_to_registered_loggers(source_logger=logger, include={"punctual"})
    metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or NAMESPACE, service=service)
    # auto_patch=False: no per-call subsegments (see the module docstring). Powertools keeps one class-wide
    # Tracer config, so a later Tracer() in the process inherits this instead of patching.
    return logger, metrics, Tracer(service=service, auto_patch=False)


def add_counts(metrics: Metrics, counts: Mapping[str, int]) -> None:
    """One Count value per metric name."""
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
