"""Poller Lambda, on ``rate(1 minute)``: find due and overdue tasks and hand them to executors.

A thin adapter: the EventBridge scheduled event only triggers the poll (it is validated, and its ``id`` and
``time`` go into the logs); ``now`` is read here, from the clock, and passed in.

Logs (JSON, Powertools): every line of an invocation, including those of ``punctual.poller``, carries
``correlation_id`` = the scheduled event's ``id`` and ``scheduled_time`` = its ``time`` (how late the rule
ran shows as ``timestamp - scheduled_time``). Keys are reset at each invocation. Metrics (EMF, names from
:mod:`punctual.metrics`): one value each of ``TasksDispatched``, ``TasksRecovered``, ``TasksUndispatched``,
``UndecodableItems`` and ``InvokeFailures`` per poll.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.metrics import (
    INVOKE_FAILURES,
    TASKS_DISPATCHED,
    TASKS_RECOVERED,
    TASKS_UNDISPATCHED,
    UNDECODABLE_ITEMS,
)
from punctual.observability import add_counts, handler_tools
from punctual.runtime import build_poller
from punctual.settings import Settings

DEADLINE_MARGIN_MS = 5_000
logger, metrics, tracer = handler_tools()
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
    # A tick stops dispatching DEADLINE_MARGIN_MS before Lambda's timeout: what it left is found next tick.
    report = poller.poll(now_ms=int(time.time() * 1000),
                         out_of_time=lambda: context.get_remaining_time_in_millis() < DEADLINE_MARGIN_MS)
    add_counts(metrics, {TASKS_DISPATCHED: report.dispatched, TASKS_RECOVERED: report.recovered,
                         TASKS_UNDISPATCHED: report.undispatched, UNDECODABLE_ITEMS: report.undecodable,
                         INVOKE_FAILURES: report.invoke_failures})
    return report.model_dump()
