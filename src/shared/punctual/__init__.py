"""Punctual: fire a task at an exact instant, on AWS Lambda + DynamoDB or locally on DynamoDB Local.

The clients (``Client``, ``ApiClient``, ``ScheduleResult``) load when first named: the Lambda handlers import this
package too, and the executor's cold start need not pay for the scheduling SDK it never calls.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from punctual.config.settings import Settings
from punctual.domain.model import Action, Task, TaskStatus
from punctual.domain.schedules import Schedule, ScheduleState
from punctual.errors import (
    ApiError,
    ConflictError,
    InvalidRequestError,
    InvalidScheduleError,
    InvalidTaskError,
    NotFoundError,
    PunctualError,
    QuotaExceededError,
    ScheduleConflictError,
    ScheduleNotFoundError,
    ScheduleStateError,
    StateError,
    TaskConflictError,
    TaskNotFoundError,
    TaskStateError,
    UndecodableItemError,
)
from punctual.targets import EventBridgeAction, HttpAction, LambdaAction, LogAction, SnsAction, SqsAction

if TYPE_CHECKING:
    from punctual.runtime.client import Client
    from punctual.scheduling.api_client import ApiClient
    from punctual.scheduling.bulk import ScheduleResult

_CLIENTS = {
    "ApiClient": "punctual.scheduling.api_client",
    "Client": "punctual.runtime.client",
    "ScheduleResult": "punctual.scheduling.bulk",
}


def __getattr__(name: str) -> Any:
    """``Client``, ``ApiClient`` and ``ScheduleResult``, imported at first use."""
    if name not in _CLIENTS:
        raise AttributeError(f"module 'punctual' has no attribute {name!r}")
    value = getattr(importlib.import_module(_CLIENTS[name]), name)
    globals()[name] = value
    return value


def connect(settings: Settings | None = None) -> Client | ApiClient:
    """The client ``settings`` (default: ``PUNCTUAL_*``) point at: through the REST API when ``api_url`` is set
    (SigV4-signed in AWS, or the local API's ``api_token``), else straight to the table. Both have the same
    methods and answers."""
    from punctual.runtime.client import Client  # noqa: PLC0415  imported on first use: `import punctual` stays free of boto3 and the DynamoDB adapter
    from punctual.scheduling.api_client import ApiClient  # noqa: PLC0415  imported on first use: `import punctual` stays free of boto3 and the DynamoDB adapter

    settings = settings or Settings.from_env()
    return ApiClient.from_settings(settings) if settings.api_url else Client(settings)


__all__ = [
    "Action",
    "ApiClient",
    "ApiError",
    "Client",
    "ConflictError",
    "EventBridgeAction",
    "HttpAction",
    "InvalidRequestError",
    "InvalidScheduleError",
    "InvalidTaskError",
    "LambdaAction",
    "LogAction",
    "NotFoundError",
    "PunctualError",
    "QuotaExceededError",
    "Schedule",
    "ScheduleConflictError",
    "ScheduleNotFoundError",
    "ScheduleResult",
    "ScheduleState",
    "ScheduleStateError",
    "Settings",
    "SnsAction",
    "SqsAction",
    "StateError",
    "Task",
    "TaskConflictError",
    "TaskNotFoundError",
    "TaskStateError",
    "TaskStatus",
    "UndecodableItemError",
    "connect",
]
