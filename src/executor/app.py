"""Executor Lambda: arm a batch, fire each task at its instant, record outcomes and drift.

A thin adapter: parse the async event into a ``BatchEvent``, call the service, emit metrics.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricResolution, MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.actions import FireLog
from punctual.events import BatchEvent
from punctual.priority import lower_current_thread
from punctual.runtime import build_executor
from punctual.settings import Settings

# The dispatcher thread must get the interpreter back quickly after its sleep: shorten the GIL switch
# interval from 5 ms so that recording threads cannot hold it for long.
sys.setswitchinterval(float(os.environ.get("PUNCTUAL_SWITCH_INTERVAL_S", "0.001")))

logger = Logger()
metrics = Metrics()
tracer = Tracer()
settings = Settings.from_env()
FireLog.configure(settings.fire_log_path)
executor = build_executor(settings)
# Everything loaded so far lives as long as the process: move it out of the collector's sight, so that a
# collection during a batch scans only what the batch allocated (a full one would stall the dispatcher).
gc.collect()
gc.freeze()
# The dispatcher and its workers (started above) keep the default CPU priority; this thread, which parses
# events, arms, records and flushes metrics, runs below it, and so do the threads it starts. It never holds
# the interpreter while this process has a fire due: it arms before adding to the dispatcher and finishes
# after the batch has fired.
lower_current_thread()


@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    batch = BatchEvent.model_validate(event)
    logger.append_keys(batch_id=batch.batch_id)
    report = executor.run_batch(batch)
    for drift in report.drift_ms:
        metrics.add_metric(name="FireDrift", unit=MetricUnit.Milliseconds, value=drift,
                           resolution=MetricResolution.High)
    metrics.add_metric(name="TasksFired", unit=MetricUnit.Count, value=report.fired)
    metrics.add_metric(name="TasksFailed", unit=MetricUnit.Count, value=report.failed)
    metrics.add_metric(name="TasksMissed", unit=MetricUnit.Count, value=report.missed)
    metrics.add_metric(name="ArmConflicts", unit=MetricUnit.Count, value=report.lost_arm)
    summary = report.model_dump(exclude={"drift_ms"})
    logger.info("batch done", extra={"report": summary})
    return {**summary, "drift_ms": report.drift_ms}
