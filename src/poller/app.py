"""Poller Lambda, on ``rate(1 minute)``: find due and overdue tasks and hand them to executors.

A thin adapter: the EventBridge scheduled event only triggers the poll (it is validated, and its ``id`` and
``time`` go into the logs); ``now`` is read here, from the clock, and passed to :func:`punctual.polling.tick.run_tick`
with the invocation's remaining time. An invocation polls once a poll interval (``PUNCTUAL_POLL_INTERVAL_MS``) within
its minute: once by default, up to six times (the template's ``PollsPerMinute``).

Fan-out (``PUNCTUAL_POLL_GROUPS`` > 1): the scheduled invocation starts one poller per other group by invoking
this same function asynchronously with a :class:`PollGroupEvent` (same ``id`` and ``time``), then polls group
0 itself. A group invocation polls only its group, at each of its own sub-polls.

Logs (JSON, Powertools): every line of an invocation, including those of ``punctual.polling.poller``, carries
``correlation_id`` = the scheduled event's ``id`` and ``scheduled_time`` = its ``time`` (how late the rule
ran shows as ``timestamp - scheduled_time``). Keys are reset at each invocation. Metrics (EMF, names from
:mod:`punctual.runtime.metrics`): one value each of ``TasksDispatched``, ``TasksRecovered``, ``TasksUndispatched``,
``UndecodableItems``, ``InvokeFailures`` and ``TasksNotArmed`` (tasks still PENDING that this poller had sent: an
executor invocation throttled or dropped after its invoke answered 202) per invocation, summed over its sub-polls,
and ``PollGroupsLate`` (poll groups whose own poller had not started since the tick before: this tick polled them) per
scheduled tick.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.config.clients import aws_client
from punctual.config.settings import Settings
from punctual.domain.events import PollGroupEvent
from punctual.polling.invoker import Invoker, LambdaInvoker
from punctual.polling.tick import ScheduledTick, run_tick
from punctual.runtime.metrics import (
    INVOKE_FAILURES,
    POLL_GROUPS_LATE,
    TASKS_DISPATCHED,
    TASKS_NOT_ARMED,
    TASKS_RECOVERED,
    TASKS_UNDISPATCHED,
    UNDECODABLE_ITEMS,
)
from punctual.runtime.observability import add_counts, handler_tools, handler_tracer
from punctual.runtime.wiring import build_poller

logger, metrics = handler_tools()
tracer = handler_tracer()
settings = Settings.from_env()
# Built once per cold start; the handler looks it up at each call, so a test can swap in a poller with a
# recording invoker.
poller = build_poller(settings)
group_invoker: Invoker | None = None  # this function, invoked async per poll group; built at the first fan-out


@logger.inject_lambda_context(log_event=False, correlation_id_path=correlation_paths.EVENT_BRIDGE, clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if "poll_group" in event:
        trigger: ScheduledTick | PollGroupEvent = PollGroupEvent.model_validate(event)
        logger.append_keys(scheduled_time=trigger.time, poll_group=trigger.poll_group)
    else:
        scheduled = EventBridgeModel.model_validate(event)
        trigger = ScheduledTick(id=scheduled.id, time=scheduled.time.isoformat())
        logger.append_keys(scheduled_time=trigger.time)

    def start_group(group_event: PollGroupEvent) -> None:
        global group_invoker  # noqa: PLW0603  the handler's client, kept between invocations as Lambda keeps the module
        if group_invoker is None:
            group_invoker = LambdaInvoker(aws_client("lambda", None, settings.region), context.invoked_function_arn)
        group_invoker.invoke_async(group_event.model_dump())

    tick = run_tick(poller, trigger, int(time.time() * 1000), context.get_remaining_time_in_millis, start_group)
    if not tick.ignored:
        counts = {
            TASKS_DISPATCHED: tick.total("dispatched"),
            TASKS_RECOVERED: tick.total("recovered"),
            TASKS_UNDISPATCHED: tick.total("undispatched"),
            UNDECODABLE_ITEMS: tick.total("undecodable"),
            INVOKE_FAILURES: tick.total("invoke_failures"),
            TASKS_NOT_ARMED: tick.total("not_armed"),
        }
        if isinstance(trigger, ScheduledTick):  # only a scheduled tick looks for late groups
            counts[POLL_GROUPS_LATE] = tick.total("groups_late")
        add_counts(metrics, counts)
    return tick.answer()
