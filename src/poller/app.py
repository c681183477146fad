"""Poller Lambda, on ``rate(1 minute)``: find due and overdue tasks and hand them to executors.

A thin adapter: the EventBridge scheduled event only triggers the poll (it is validated, and its ``id`` and
``time`` go into the logs); ``now`` is read here, from the clock, and passed in.

Fan-out (``PUNCTUAL_POLL_GROUPS`` > 1): the scheduled invocation starts one poller per other group by invoking
this same function asynchronously with a :class:`PollGroupEvent` (same ``id`` and ``time``), then polls group
0 itself (``Poller.poll_all_groups``). A group invocation polls only its group.

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

from punctual.aws import aws_client
from punctual.events import PollGroupEvent, PollReport
from punctual.invoker import Invoker, LambdaInvoker
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
group_invoker: Invoker | None = None  # this function, invoked async per poll group; built at the first fan-out


@logger.inject_lambda_context(log_event=False, correlation_id_path=correlation_paths.EVENT_BRIDGE, clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # A tick stops dispatching DEADLINE_MARGIN_MS before Lambda's timeout: what it left is found next tick.
    def out_of_time() -> bool:
        return context.get_remaining_time_in_millis() < DEADLINE_MARGIN_MS

    if "poll_group" in event:
        work = PollGroupEvent.model_validate(event)
        logger.append_keys(scheduled_time=work.time, poll_group=work.poll_group)
        if work.poll_groups != settings.poll_groups or work.poll_group >= settings.poll_groups:
            # Sent under another configuration (a deploy in between): the next scheduled tick covers every group.
            logger.warning(
                "poll group %d of %d ignored: this function polls %d groups",
                work.poll_group,
                work.poll_groups,
                settings.poll_groups,
            )
            return {"ignored": True}
        reports = [poller.poll(now_ms=int(time.time() * 1000), out_of_time=out_of_time, group=work.poll_group)]
    else:
        trigger = EventBridgeModel.model_validate(event)
        logger.append_keys(scheduled_time=trigger.time.isoformat())

        def start_group(group: int) -> None:
            global group_invoker
            if group_invoker is None:
                group_invoker = LambdaInvoker(aws_client("lambda", None, settings.region), context.invoked_function_arn)
            group_invoker.invoke_async(
                PollGroupEvent(
                    id=trigger.id, time=trigger.time.isoformat(), poll_group=group, poll_groups=settings.poll_groups
                ).model_dump()
            )

        reports = poller.poll_all_groups(int(time.time() * 1000), start_group, out_of_time)
    add_counts(
        metrics,
        {
            TASKS_DISPATCHED: _total(reports, "dispatched"),
            TASKS_RECOVERED: _total(reports, "recovered"),
            TASKS_UNDISPATCHED: _total(reports, "undispatched"),
            UNDECODABLE_ITEMS: _total(reports, "undecodable"),
            INVOKE_FAILURES: _total(reports, "invoke_failures"),
        },
    )
    return reports[0].model_dump() if len(reports) == 1 else {"groups": [r.model_dump() for r in reports]}


def _total(reports: list[PollReport], field: str) -> int:
    return sum(getattr(report, field) for report in reports)
