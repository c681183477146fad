"""Punctual: fire a task at an exact instant, on AWS Lambda + DynamoDB or locally on DynamoDB Local."""

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
from punctual.scheduling.api_client import ApiClient
from punctual.scheduling.bulk import ScheduleResult
from punctual.scheduling.client import Client
from punctual.targets import EventBridgeAction, HttpAction, LambdaAction, LogAction, SnsAction, SqsAction


def connect(settings: Settings | None = None) -> Client | ApiClient:
    """The client ``settings`` (default: ``PUNCTUAL_*``) point at: through the REST API when ``api_url`` is set
    (SigV4-signed in AWS, or the local API's ``api_token``), else straight to the table. Both have the same
    methods and answers."""
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
