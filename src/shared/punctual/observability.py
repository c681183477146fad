"""Powertools for the Lambda handlers (adapters only: the services log with stdlib ``logging``).

In Lambda the template sets ``POWERTOOLS_SERVICE_NAME`` and ``POWERTOOLS_METRICS_NAMESPACE``; elsewhere (the
local runtime, tests) they default to Punctual's own (:mod:`punctual.metrics`), so that metrics still
validate: Powertools refuses to flush without a namespace.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit

from .metrics import NAMESPACE, SERVICE


def handler_tools() -> tuple[Logger, Metrics, Tracer]:
    """The Logger, Metrics and Tracer of one handler module, built once at its cold start."""
    service = os.environ.get("POWERTOOLS_SERVICE_NAME") or SERVICE
    logger = Logger(service=service)
    # The package logs with stdlib logging under "punctual.*": with the service named "punctual" those records
    # reach this Logger's handler by propagation; under another service name this hands them its JSON handler.
    copy_config_to_registered_loggers(source_logger=logger, include={"punctual"})
    metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or NAMESPACE, service=service)
    return logger, metrics, Tracer(service=service)


def add_counts(metrics: Metrics, counts: Mapping[str, int]) -> None:
    """One Count value per metric name."""
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
