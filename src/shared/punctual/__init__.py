"""Punctual: fire a task at an exact instant, on AWS Lambda + DynamoDB or locally on DynamoDB Local."""

from .actions import EventBridgeAction, HttpAction, LambdaAction, LogAction, SnsAction, SqsAction
from .client import Client, ScheduleResult
from .errors import (
    InvalidTaskError,
    PunctualError,
    ScheduleConflictError,
    ScheduleNotFoundError,
    ScheduleStateError,
    TaskConflictError,
    TaskNotFoundError,
    TaskStateError,
)
from .model import Action, Task, TaskStatus
from .schedules import Schedule, ScheduleState
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
    "Schedule",
    "ScheduleConflictError",
    "ScheduleNotFoundError",
    "ScheduleResult",
    "ScheduleState",
    "ScheduleStateError",
    "Settings",
    "SnsAction",
    "SqsAction",
    "Task",
    "TaskConflictError",
    "TaskNotFoundError",
    "TaskStateError",
    "TaskStatus",
]
