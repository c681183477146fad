"""Punctual: fire a task at an exact instant, on AWS Lambda + DynamoDB or locally on DynamoDB Local."""

from .actions import EventBridgeAction, HttpAction, LambdaAction, LogAction, SnsAction, SqsAction
from .client import Client, ScheduleResult
from .errors import InvalidTaskError, PunctualError, TaskConflictError, TaskNotFoundError, TaskStateError
from .model import Action, Task, TaskStatus
from .settings import Settings

__all__ = [
    "Action",
    "Client",
    "EventBridgeAction",
    "HttpAction",
    "InvalidTaskError",
    "LambdaAction",
    "LogAction",
    "PunctualError",
    "ScheduleResult",
    "Settings",
    "SnsAction",
    "SqsAction",
    "Task",
    "TaskConflictError",
    "TaskNotFoundError",
    "TaskStateError",
    "TaskStatus",
]
