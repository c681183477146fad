"""Punctual: fire a task at an exact instant, on AWS Lambda + DynamoDB or locally on DynamoDB Local."""

from .client import Client, ScheduleResult
from .errors import InvalidTaskError, PunctualError, TaskConflictError, TaskNotFoundError, TaskStateError
from .model import Action, HttpAction, LogAction, Task, TaskStatus
from .settings import Settings

__all__ = [
    "Action",
    "Client",
    "HttpAction",
    "InvalidTaskError",
    "LogAction",
    "PunctualError",
    "ScheduleResult",
    "Settings",
    "Task",
    "TaskConflictError",
    "TaskNotFoundError",
    "TaskStateError",
    "TaskStatus",
]
