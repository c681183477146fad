"""The ``Invoker`` port: how the poller hands a batch to an executor, asynchronously.

In AWS it is Lambda's async invoke (``InvocationType="Event"``: at-least-once delivery, retried on error);
locally, :class:`punctual_tools.local.invoker.LocalInvoker` gives the same semantics with worker processes.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

from punctual.errors import EVENT_QUEUED

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient


class Invoker(Protocol):
    def invoke_async(self, payload: dict[str, Any]) -> None:
        """Queue one executor invocation; return as soon as it is accepted (raise if it is not)."""
        ...


class LambdaInvoker:
    """Async invoke of the executor function."""

    def __init__(self, lambda_client: LambdaClient, function_name: str) -> None:
        self._client = lambda_client
        self._function = function_name

    def invoke_async(self, payload: dict[str, Any]) -> None:
        response = self._client.invoke(
            FunctionName=self._function, InvocationType="Event", Payload=json.dumps(payload).encode()
        )
        status = response.get("StatusCode")
        if status != EVENT_QUEUED:
            raise RuntimeError(f"async invoke of {self._function} answered {status}, expected {EVENT_QUEUED}")
