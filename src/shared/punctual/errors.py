"""Every error Punctual raises on purpose, under :class:`PunctualError`.

Each error is given facts (an id, a field, a reason) and builds its message from them, so that a message says
the same thing wherever the error is raised. The families::

    PunctualError
    ├── InvalidRequestError (ValueError: field, reason)   the call is refused as asked; nothing was stored
    │   ├── InvalidTaskError                              a task does not validate
    │   ├── InvalidScheduleError                          a schedule does not validate
    │   ├── RequestTooLargeError                          the call holds more than one call takes
    │   └── QuotaExceededError                            the call would pass one of the tenant's quotas
    ├── NotFoundError (LookupError)                       TaskNotFoundError, ScheduleNotFoundError
    ├── ConflictError                                     TaskConflictError, ScheduleConflictError
    ├── StateError                                        TaskStateError, ScheduleStateError
    ├── UndecodableItemError (ValueError)                 a stored item is not what its key says
    ├── NoTenantError                                     the REST API's caller is mapped to no tenant
    ├── ApiError                                          the REST API refused a call, or gave no answer
    ├── SettingsError (ValueError)                        the environment holds a setting that does not validate
    ├── TenantMapUnavailableError                         the tenant map in Parameter Store cannot be read or used
    ├── ExpressionError (ValueError)                      a schedule expression or time zone is not valid
    ├── TargetRefusedError (ValueError)                   a URL target may not be called
    ├── SecretReferenceError (ValueError)                 a secret reference is malformed or not allowed
    ├── SecretUnavailableError                            a secret could not be resolved at fire time
    ├── SigningSecretError (ValueError)                   a webhook signing secret is malformed
    ├── WireError                                         an HTTP request got no complete answer
    │   └── StaleConnectionError                          a kept-alive connection closed first: send again
    └── ActionFailedError                                 an action ran and failed
        └── TransientActionError                          ... in a way that may pass if tried again soon

The ``ValueError`` bases are kept where pydantic (a validator's error becomes a field error) or callers rely on
them. Every module may raise these, so this one imports nothing of the package: the task or schedule an error
holds (``existing``, ``task``) is typed loosely here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Self

__all__ = [
    "ActionFailedError",
    "ApiError",
    "ConflictError",
    "ExpressionError",
    "InvalidRequestError",
    "InvalidScheduleError",
    "InvalidTaskError",
    "NoTenantError",
    "NotFoundError",
    "PunctualError",
    "QuotaExceededError",
    "RequestTooLargeError",
    "ScheduleConflictError",
    "ScheduleNotFoundError",
    "ScheduleStateError",
    "SecretReferenceError",
    "SecretUnavailableError",
    "SettingsError",
    "SigningSecretError",
    "StaleConnectionError",
    "StateError",
    "TargetRefusedError",
    "TaskConflictError",
    "TaskNotFoundError",
    "TaskStateError",
    "TenantMapUnavailableError",
    "TransientActionError",
    "UndecodableItemError",
    "WireError",
    "aws_error_code",
    "is_transient_status",
]

SHOWN_REFERENCE_CHARS = 200  # how much of a secret reference an error message shows


class PunctualError(Exception):
    """Base class of every error Punctual raises on purpose; ``str(exc)`` is its message, safe to show."""

    def __init__(self, message: str) -> None:
        super().__init__(message)

    @classmethod
    def relayed(cls, message: str, **facts: Any) -> Self:
        """The error as another process stated it (the REST API's problem ``detail``): its message as received,
        with the facts the answer gave; the others keep their class defaults."""
        error = cls.__new__(cls)
        Exception.__init__(error, message)
        error.__dict__.update(facts)
        return error

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from its message and facts, not by calling __init__ again (whose arguments are the facts)
        return (type(self).relayed, (str(self),), dict(self.__dict__))


# -- the call is refused as asked ------------------------------------------------------------------------------
class InvalidRequestError(PunctualError, ValueError):
    """The request is malformed (a query instant, a parameter, a page token); ``field`` names the offending input
    and ``reason`` says what is wrong with it. Nothing was stored."""

    subject: ClassVar[str] = "request"  # what the message calls the whole when no field is named
    field: str | None = None
    reason: str = ""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(f"invalid {field or self.subject}: {reason}")
        self.field = field
        self.reason = reason


class InvalidTaskError(InvalidRequestError):
    """The task does not validate; ``field`` names the offending field. Nothing was stored."""

    subject = "task"


class InvalidScheduleError(InvalidRequestError):
    """The schedule does not validate (its expression, zone, bounds, or what its occurrences would run);
    ``field`` names the offending field. Nothing was stored."""

    subject = "schedule"


class RequestTooLargeError(InvalidRequestError):
    """The request holds more than one call takes (the REST API's batch create: tasks or bytes); ``field`` names
    what to send less of. Nothing was stored."""


class QuotaExceededError(InvalidRequestError):
    """The call would pass one of the tenant's quotas; ``quota`` names it and ``limit`` is its value; ``usage`` says
    what the call would bring the tenant to. Nothing was stored."""

    quota: str = "unknown"
    limit: float = float("nan")

    def __init__(self, quota: str, limit: float, usage: str, field: str | None = None) -> None:
        shown = str(int(limit)) if float(limit).is_integer() else f"{limit:g}"
        PunctualError.__init__(self, f"{usage}, past the tenant's quota of {shown} ({quota})")
        self.field = field
        self.reason = usage
        self.quota = quota
        self.limit = limit


# -- the id names nothing --------------------------------------------------------------------------------------
class NotFoundError(PunctualError, LookupError):
    """Nothing of this kind is stored under ``key``."""

    what: ClassVar[str] = "item"
    key: str = ""

    def __init__(self, key: str) -> None:
        super().__init__(f"no {self.what} {key!r}")
        self.key = key


class TaskNotFoundError(NotFoundError):
    """No task has this id."""

    what = "task"


class ScheduleNotFoundError(NotFoundError):
    """No recurring schedule has this id (or it was deleted)."""

    what = "schedule"


# -- the id holds something else -------------------------------------------------------------------------------
class ConflictError(PunctualError):
    """Something else is stored under ``key`` (creating is idempotent only on equal content); ``existing`` holds
    it when known."""

    key: str = ""
    existing: Any = None


class TaskConflictError(ConflictError):
    """A task with this id exists with different content."""

    def __init__(self, task_id: str, existing: Any = None) -> None:
        found = "" if existing is None else f" (due {existing.due_at.isoformat()}, status {existing.status})"
        super().__init__(f"task {task_id!r} already exists with different content{found}")
        self.key = task_id
        self.existing = existing


class ScheduleConflictError(ConflictError):
    """A schedule with this id exists with another definition, or was deleted (its id cannot be used again: its
    occurrences' ids would meet the old ones')."""

    def __init__(self, schedule_id: str, existing: object = None, *, deleted: bool = False) -> None:
        super().__init__(
            f"schedule {schedule_id!r} was deleted, and a deleted schedule's id cannot be used again (its "
            "occurrences' ids would meet the old ones'): choose another id"
            if deleted
            else f"schedule {schedule_id!r} already exists with another definition"
        )
        self.key = schedule_id
        self.existing = existing


# -- the stored state does not allow the change ----------------------------------------------------------------
class StateError(PunctualError):
    """What is stored under ``key`` does not allow ``operation`` now; ``reason`` says why (its state, or a change
    meanwhile)."""

    what: ClassVar[str] = "item"
    key: str = ""
    operation: str = ""
    reason: str = ""

    def __init__(self, key: str, operation: str, reason: str) -> None:
        super().__init__(f"cannot {operation} {self.what} {key!r}: {reason}")
        self.key = key
        self.operation = operation
        self.reason = reason


class TaskStateError(StateError):
    """The task is in a state that does not allow the change (for example it is already armed to fire).

    ``task`` holds the task as it was when the change lost, read atomically with the failed condition.
    """

    what = "task"
    task: Any = None

    def __init__(self, task_id: str, operation: str, reason: str, task: object = None) -> None:
        super().__init__(task_id, operation, reason)
        self.task = task


class ScheduleStateError(StateError):
    """The schedule does not allow the change now (it changed since it was read, or its state forbids it)."""

    what = "schedule"


class UndecodableItemError(PunctualError, ValueError):
    """A stored item cannot be read as what its key says it is (written by hand, or by a version of Punctual that
    stores something this one does not know); ``key`` names it and ``reason`` says what failed (the exception
    reading it raised, whatever it was). Reading it changed nothing."""

    key: str = ""
    reason: str = ""

    def __init__(self, key: str, what: str, cause: BaseException) -> None:
        self.reason = f"{type(cause).__name__}: {cause}"[:900]
        super().__init__(f"{what} item {key!r} cannot be read: {self.reason}"[:1000])
        self.key = key


# -- the REST API and its client -------------------------------------------------------------------------------
class NoTenantError(PunctualError):
    """The REST API's caller is mapped to no tenant: it may do nothing."""

    def __init__(self) -> None:
        super().__init__("this principal is not mapped to a tenant (the tenant map)")


class ApiError(PunctualError):
    """The API refused the call for a reason that is not the task's (authentication, limits, a server error), or
    (``status`` 0) gave no answer at all: the connection could not be made, or broke before an answer came."""

    status: int = 0
    detail: str = ""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


# -- configuration ---------------------------------------------------------------------------------------------
class SettingsError(PunctualError, ValueError):
    """The environment holds a setting that does not validate; ``names`` are the variables at fault."""

    names: tuple[str, ...] = ()

    def __init__(self, names: Sequence[str], detail: str) -> None:
        super().__init__(f"invalid setting(s) {', '.join(names) or 'together'}: {detail}")
        self.names = tuple(names)


class TenantMapUnavailableError(PunctualError):
    """The tenant map could not be read from where the settings name (``where``: a parameter or a path of Parameter
    Store), or what was read is not a valid map; ``reason`` says which, never the map's text."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"tenant map {where}: {reason}")
        self.where = where
        self.reason = reason


class ExpressionError(PunctualError, ValueError):
    """The schedule expression or time zone is not valid; the message says what is wrong and how it is written. The
    schedule's validators raise it, and the client reports it as an InvalidScheduleError on the field."""


# -- targets and secrets ---------------------------------------------------------------------------------------
class TargetRefusedError(PunctualError, ValueError):
    """A target may not be called; ``str(exc)`` is the reason, safe to show.

    The reason names ``scheme://host[:port]`` (``origin``, when the URL has one) and the kind of address, never
    userinfo, path or query, nor an address a name resolved to.
    """

    origin: str | None = None
    reason: str = ""

    def __init__(self, origin: str | None, reason: str) -> None:
        super().__init__(reason if origin is None else f"{origin}: {reason}")
        self.origin = origin
        self.reason = reason


class SecretReferenceError(PunctualError, ValueError):
    """A secret reference is malformed or names a secret this deployment does not allow (raised at schedule time,
    and at fire time for a ``file:`` reference whose path leads out of the secrets directory). ``reference`` is
    None when the text is not shown (it may be a secret pasted where its reference belongs)."""

    reference: str | None = None

    def __init__(self, reference: str | None, reason: str) -> None:
        if reference is None:
            super().__init__(reason)
        else:
            shown = reference if len(reference) <= SHOWN_REFERENCE_CHARS else reference[:SHOWN_REFERENCE_CHARS] + "..."
            super().__init__(f"secret reference {shown!r}: {reason}")
        self.reference = reference


class SecretUnavailableError(PunctualError):
    """A valid reference could not be resolved at fire time (missing, access denied, not JSON, ...). The message
    names the reference, never a value."""

    def __init__(self, reference: object, reason: str) -> None:
        super().__init__(f"secret {reference}: {reason}")


class SigningSecretError(PunctualError, ValueError):
    """A webhook signing secret is malformed. The message says which one (``position``, 1-based; None for the
    list as a whole) and why, never its text."""

    position: int | None = None

    def __init__(self, position: int | None, problem: str) -> None:
        super().__init__(f"signing secrets: {problem}" if position is None else f"signing secret #{position} {problem}")
        self.position = position


# -- firing ----------------------------------------------------------------------------------------------------
class WireError(PunctualError):
    """The request did not get a complete answer (connection refused or lost, a malformed answer); the message
    says what went wrong."""


class StaleConnectionError(WireError):
    """A kept-alive connection closed before any byte of the answer: the request may be sent again."""

    def __init__(self) -> None:
        super().__init__("the kept-alive connection was closed")


class ActionFailedError(PunctualError):
    """The action ran and failed (for example a 4xx answer, or a target the rules refuse); the message is the
    outcome recorded for the task."""


class TransientActionError(ActionFailedError):
    """The action failed in a way that may pass if tried again soon (a connection error, a timeout, 429, 5xx):
    runners that retry within the grace do so only for these."""


TOO_MANY_REQUESTS = 429
FIRST_SERVER_ERROR = 500
EVENT_QUEUED = 202  # Lambda's status for an async invoke it accepted


def is_transient_status(status: int) -> bool:
    """Whether an HTTP answer's ``status`` is worth trying again soon (:class:`TransientActionError`): 429 or 5xx."""
    return status == TOO_MANY_REQUESTS or status >= FIRST_SERVER_ERROR


def aws_error_code(exc: BaseException) -> str:
    """What went wrong with an AWS call, in words that hold nothing it read: AWS's error code (a botocore
    ``ClientError``'s), or the exception's type."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        if isinstance(code, str) and code:
            return code
    return type(exc).__name__
