"""Domain errors. Every one ends in ``Error`` and says what to do about it."""

from __future__ import annotations

from typing import Any


class PunctualError(Exception):
    """Base class of every error Punctual raises on purpose."""


class InvalidTaskError(PunctualError, ValueError):
    """The task does not validate; ``field`` names the offending field. Nothing was stored."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class QuotaExceededError(InvalidTaskError):
    """The call would pass one of the tenant's quotas; ``quota`` names it and ``limit`` is its value. Nothing was
    stored."""

    def __init__(self, message: str, *, quota: str, limit: float, field: str | None = None) -> None:
        super().__init__(message, field)
        self.quota = quota
        self.limit = limit


class TaskNotFoundError(PunctualError, LookupError):
    """No task has this id."""


class TaskConflictError(PunctualError):
    """A task with this id exists with different content (schedule is idempotent only on equal content)."""

    def __init__(self, message: str, existing: Any = None) -> None:
        super().__init__(message)
        self.existing = existing


class TaskStateError(PunctualError):
    """The task is in a state that does not allow the change (for example it is already armed to fire).

    ``task`` holds the task as it was when the change lost, read atomically with the failed condition.
    """

    def __init__(self, message: str, task: Any = None) -> None:
        super().__init__(message)
        self.task = task


class ScheduleNotFoundError(TaskNotFoundError):
    """No recurring schedule has this id."""


class ScheduleConflictError(TaskConflictError):
    """A schedule with this id exists with another definition (creating one is idempotent on equal content)."""


class ScheduleStateError(TaskStateError):
    """The schedule does not allow the change now (it changed since it was read, or its state forbids it)."""


class UndecodableItemError(PunctualError, ValueError):
    """A stored item cannot be read as what its key says it is (written by hand, or by a version of Punctual that
    stores something this one does not know); ``key`` names it. Reading it changed nothing."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key
