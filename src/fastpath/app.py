"""Fast-path Lambda, on the Tasks table's stream: dispatch tasks written due before the next poll.

A thin adapter: the event source mapping (``template.yaml``) filters the stream to inserted or modified items
that are PENDING and flagged ``fast_path = 1``; the batch's records go to
:func:`punctual.polling.fastpath.dispatch_stream_records` with the time read here, which reads when the last polls
started (one read a batch), leaves to the next poll what it dispatches in time, and invokes executors for the rest
exactly as a poll does (:meth:`punctual.polling.poller.Poller.dispatch`), writing nothing per task: the executors
arm them.

Logs (JSON, Powertools): every line of an invocation carries ``correlation_id`` = the first record's
``eventID``, and the per-batch report. Metrics (EMF, names from :mod:`punctual.runtime.metrics`): ``TasksDispatched``
and ``InvokeFailures`` per stream batch. An exception fails the batch:
Lambda retries it (bisecting, per the template); the tasks are in the due index, so the poller finds them
anyway.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual.config.settings import Settings
from punctual.polling.fastpath import dispatch_stream_records
from punctual.runtime.metrics import INVOKE_FAILURES, TASKS_DISPATCHED
from punctual.runtime.observability import add_counts, handler_tools
from punctual.runtime.wiring import build_poller, decode_stream_image

logger, metrics = handler_tools()
settings = Settings.from_env()
# Its own poller id, so that a batch's dispatcher tells that the fast path dispatched it. Looked up at each
# call, so a test can swap in a poller with a recording invoker.
poller = build_poller(settings, poller_id=f"fast-{uuid.uuid4().hex[:12]}")


@logger.inject_lambda_context(log_event=False, correlation_id_path="Records[0].eventID", clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    records = event.get("Records")
    if not isinstance(records, list):
        raise ValueError("a DynamoDB stream event has a list of Records")
    report = dispatch_stream_records(poller, records, now_ms=int(time.time() * 1000), decode=decode_stream_image)
    add_counts(metrics, {TASKS_DISPATCHED: report.dispatched, INVOKE_FAILURES: report.invoke_failures})
    logger.info("fast path batch", extra={"report": report.model_dump()})
    return report.model_dump()
