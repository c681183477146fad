"""Executor Lambda: arm a batch, fire each task at its instant, record outcomes and drift.

A thin adapter: parse the async event (the poller's batch) into a ``BatchEvent``, call the service, emit
metrics.

Logs (JSON, Powertools): every line of an invocation, including those of ``punctual.executing.executor`` and the
threads it runs, carries ``batch_id`` (the id the poller dispatched the tasks under, stored on each armed task).
``correlation_id`` names what a line is about: the batch on batch-level lines (taken from the event, so a
malformed event without a batch id logs none), the task on per-task lines, which carry ``task_id`` as well:
a task this executor could not arm (INFO), an outcome FAILED, MISSED or RETRY (WARNING) or SUCCEEDED (DEBUG: the
table records it; at INFO a busy executor would log thousands of such lines a minute). Keys are reset at each
invocation, so a warm start does not inherit the previous batch's. Metrics (EMF, names from
:mod:`punctual.runtime.metrics`): ``FireDrift`` in ms at high resolution, one value per task fired within its grace;
``LateFireDelay``, one value per task fired past its grace (``fire_late``), apart so that a task due long ago never
skews the drift; ``TasksFired``, ``TasksFiredLate``, ``TasksFailed``, ``TasksMissed`` and ``ArmConflicts``, one value
each per batch.

Loading this module is the cold start (:func:`cold_start`, called once below). The local invoker loads it by
path, in a worker process, the same way; that worker sets the local-only parts (CPU confinement, fire log) before.
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

from aws_lambda_powertools.metrics import MetricResolution, MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.config.settings import Settings
from punctual.domain.events import BatchEvent
from punctual.executing.executor import Executor
from punctual.executing.priority import lower_current_thread
from punctual.runtime.metrics import (
    ARM_CONFLICTS,
    FIRE_DRIFT,
    LATE_FIRE_DELAY,
    TASKS_FAILED,
    TASKS_FENCED,
    TASKS_FIRED,
    TASKS_FIRED_LATE,
    TASKS_MISSED,
    TASKS_TAKEN_OVER,
)
from punctual.runtime.observability import add_counts, handler_tools
from punctual.runtime.wiring import build_executor

logger, metrics = handler_tools()
settings = Settings.from_env()


def cold_start(settings: Settings) -> Executor:
    """Set up this process for firing, once per execution environment (Lambda's INIT), and return its executor.

    Process-wide, hence here and not in :func:`~punctual.runtime.wiring.build_executor`: it shortens the GIL
    switch interval, builds the executor (which starts its dispatcher and worker threads), freezes what is
    loaded out of the garbage collector's sight, then lowers the CPU priority of the calling thread, which
    goes on to run the handler.
    """
    # The dispatcher thread must get the interpreter back quickly after its sleep: shorten the GIL switch
    # interval from 5 ms so that recording threads cannot hold it for long.
    sys.setswitchinterval(settings.switch_interval_s)
    built = build_executor(settings)
    # Everything loaded so far lives as long as the process: move it out of the collector's sight, so that a
    # collection during a batch scans only what the batch allocated (a full one would stall the dispatcher).
    gc.collect()
    gc.freeze()
    # The dispatcher and its workers (started above) keep the default CPU priority; this thread, which parses
    # events, arms, records and flushes metrics, runs below it, and so do the threads it starts. It never holds
    # the interpreter while this process has a fire due: it arms before adding to the dispatcher and finishes
    # after the batch has fired.
    lower_current_thread()
    return built


executor = cold_start(settings)


@logger.inject_lambda_context(log_event=False, correlation_id_path="batch_id", clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    batch = BatchEvent.model_validate(event)
    logger.append_keys(batch_id=batch.batch_id)
    deadline_ms = time.time() * 1000 + context.get_remaining_time_in_millis()  # when Lambda ends this invocation
    report = executor.run_batch(batch, deadline_ms, context.aws_request_id)
    for drift in report.drift_ms:
        metrics.add_metric(name=FIRE_DRIFT, unit=MetricUnit.Milliseconds, value=drift, resolution=MetricResolution.High)
    for late in report.late_ms:  # past the grace, under fire_late: apart, so it never skews the drift's figures
        metrics.add_metric(name=LATE_FIRE_DELAY, unit=MetricUnit.Milliseconds, value=late)
    add_counts(
        metrics,
        {
            TASKS_FIRED: report.fired,
            TASKS_FIRED_LATE: report.late,
            TASKS_FAILED: report.failed,
            TASKS_MISSED: report.missed,
            ARM_CONFLICTS: report.lost_arm,
            TASKS_TAKEN_OVER: report.taken_over,
            TASKS_FENCED: report.fenced,
        },
    )
    summary = report.model_dump(exclude={"drift_ms", "late_ms"})
    logger.info("batch done", extra={"report": summary})
    return {**summary, "drift_ms": report.drift_ms, "late_ms": report.late_ms}
