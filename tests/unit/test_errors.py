"""The errors: one module, one base, each building its message from its facts, and the families kept apart."""

from __future__ import annotations

import ast
import builtins
import inspect
import pickle
from pathlib import Path

import pytest

import punctual
from punctual import errors
from punctual.api.routes.tasks import instant
from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.errors import (
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
)
from punctual.scheduling.client import Client
from punctual.targets import LogAction
from support import FakeClock, NoRepository

PACKAGE = Path(punctual.__file__).parent
BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}
NOW_MS = 1_700_000_000_000


def error_classes() -> list[type[BaseException]]:
    return [
        c
        for _, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, BaseException) and c.__module__ == errors.__name__
    ]


def exception_classes_defined_in(path: Path) -> list[str]:
    """The exception classes a module defines, read from its source: a class whose base is a builtin exception, an
    ``...Error`` / ``...Exception`` name, or another exception class of the same module."""
    found: set[str] = set()
    classes = [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ClassDef)]
    changed = True
    while changed:
        changed = False
        for node in classes:
            bases = {ast.unparse(base).rpartition(".")[2] for base in node.bases}
            if node.name not in found and any(
                b in BUILTIN_EXCEPTIONS or b in found or b.endswith(("Error", "Exception")) for b in bases
            ):
                found.add(node.name)
                changed = True
    return sorted(found)


@pytest.fixture
def client() -> Client:
    return Client(Settings(ntp_server=None), NoRepository(), NoRepository(), clock=FakeClock(wall_ms=float(NOW_MS)))  # type: ignore[arg-type]


# -- one module, one base --------------------------------------------------------------------------------------
def test_every_error_class_derives_from_punctual_error_and_is_exported() -> None:
    classes = error_classes()
    assert len(classes) > 20
    for cls in classes:
        assert issubclass(cls, PunctualError), cls
        assert cls.__name__.endswith("Error"), cls
        assert cls.__name__ in errors.__all__, cls


def test_no_module_of_the_runtime_package_defines_an_exception_class_outside_errors() -> None:
    # Given every module of the runtime package but errors.py
    modules = [p for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "errors.py"]
    assert len(modules) > 20
    # When their exception classes are read from the source
    defined = {str(p.relative_to(PACKAGE)): exception_classes_defined_in(p) for p in modules}
    # Then none defines one, but for a private signal that never leaves its module (the URL parser's)
    public = {module: names for module, names in defined.items() if any(not n.startswith("_") for n in names)}
    assert public == {}
    assert {module: names for module, names in defined.items() if names} == {"network/hosts.py": ["_InvalidError"]}


def test_the_ast_walk_finds_exception_classes(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "class A(ValueError): ...\nclass B(A): ...\nclass C(x.SomeError): ...\nclass D: ...\n", encoding="utf-8"
    )
    assert exception_classes_defined_in(module) == ["A", "B", "C"]


# -- messages from facts ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "message"),
    [
        (TaskNotFoundError("x"), "no task 'x'"),
        (ScheduleNotFoundError("daily"), "no schedule 'daily'"),
        (InvalidTaskError("due_at", "naive datetime"), "invalid due_at: naive datetime"),
        (InvalidTaskError(None, "not an object"), "invalid task: not an object"),
        (InvalidScheduleError(None, "not an object"), "invalid schedule: not an object"),
        (InvalidRequestError("due_from", "bad"), "invalid due_from: bad"),
        (TaskStateError("x", "cancel", "it is ARMED"), "cannot cancel task 'x': it is ARMED"),
        (ScheduleStateError("daily", "pause", "it is DELETED"), "cannot pause schedule 'daily': it is DELETED"),
        (TaskConflictError("x"), "task 'x' already exists with different content"),
        (ScheduleConflictError("daily"), "schedule 'daily' already exists with another definition"),
        (
            QuotaExceededError("schedules", 2, "2 schedules and one more"),
            "2 schedules and one more, past the tenant's quota of 2 (schedules)",
        ),
        (
            QuotaExceededError("schedule_rate_per_s", 0.5, "1 a second"),
            "1 a second, past the tenant's quota of 0.5 (schedule_rate_per_s)",
        ),
    ],
)
def test_each_error_builds_its_message_from_its_facts(error: PunctualError, message: str) -> None:
    assert str(error) == message


def test_an_error_keeps_its_facts() -> None:
    refused = InvalidTaskError("due_at", "naive datetime")
    assert (refused.field, refused.reason) == ("due_at", "naive datetime")
    assert TaskNotFoundError("x").key == "x"
    over = QuotaExceededError("active_tasks", 10, "10 active tasks and 1 more")
    assert (over.quota, over.limit, over.field) == ("active_tasks", 10, None)


def test_an_error_pickles_with_its_message_and_facts() -> None:
    # Given errors whose constructors take facts, not a message
    for error in (
        TaskNotFoundError("x"),
        InvalidScheduleError("expression", "bad"),
        TaskStateError("x", "cancel", "armed"),
    ):
        # When one is pickled and read back (as a worker process's error is)
        copy = pickle.loads(pickle.dumps(error))
        # Then it is the same error
        assert type(copy) is type(error)
        assert str(copy) == str(error)
        assert vars(copy) == vars(error)


def test_a_relayed_error_keeps_the_message_it_was_given() -> None:
    relayed = InvalidTaskError.relayed("invalid due_at: naive datetime", field="due_at")
    assert str(relayed) == "invalid due_at: naive datetime"
    assert relayed.field == "due_at"
    assert TaskStateError.relayed("cannot cancel task 'x': it is ARMED").task is None


# -- the families kept apart -----------------------------------------------------------------------------------
def test_a_missing_schedule_is_not_a_missing_task() -> None:
    assert issubclass(ScheduleNotFoundError, NotFoundError)
    assert issubclass(TaskNotFoundError, NotFoundError)
    assert not issubclass(ScheduleNotFoundError, TaskNotFoundError)
    assert not issubclass(TaskNotFoundError, ScheduleNotFoundError)
    assert issubclass(NotFoundError, LookupError)


def test_schedule_conflicts_and_states_are_not_task_ones() -> None:
    assert issubclass(ScheduleConflictError, ConflictError)
    assert not issubclass(ScheduleConflictError, TaskConflictError)
    assert issubclass(ScheduleStateError, StateError)
    assert not issubclass(ScheduleStateError, TaskStateError)


def test_invalid_tasks_schedules_and_quotas_are_invalid_requests_and_value_errors() -> None:
    for cls in (InvalidTaskError, InvalidScheduleError, QuotaExceededError):
        assert issubclass(cls, InvalidRequestError)
    assert issubclass(InvalidRequestError, ValueError)
    assert not issubclass(InvalidScheduleError, InvalidTaskError)
    assert not issubclass(QuotaExceededError, InvalidTaskError)


def test_a_bad_query_instant_is_an_invalid_request_not_an_invalid_task() -> None:
    # When a query's instant does not parse
    with pytest.raises(InvalidRequestError) as refused:
        instant("yesterday", "due_from")
    # Then it is an invalid request naming the parameter, and no invalid task
    assert not isinstance(refused.value, InvalidTaskError)
    assert refused.value.field == "due_from"
    assert str(refused.value).startswith("invalid due_from: ")


def test_a_bad_status_filter_is_an_invalid_request_not_an_invalid_task(client: Client) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        client.list(status="NOT-A-STATUS")
    assert not isinstance(refused.value, InvalidTaskError)
    assert refused.value.field == "status"


@pytest.mark.parametrize(
    ("expression", "field"),
    [
        ("cron(not a cron)", "expression"),
        ("rate(1 fortnight)", "expression"),
        ("at(2020-01-01T00:00:00)", "expression"),
    ],
)
def test_a_bad_schedule_expression_is_an_invalid_schedule_not_an_invalid_task(
    client: Client, expression: str, field: str
) -> None:
    with pytest.raises(InvalidScheduleError) as refused:
        client.create_schedule("daily", expression, LogAction())
    assert not isinstance(refused.value, InvalidTaskError)
    assert refused.value.field == field


def test_a_schedule_whose_action_the_rules_refuse_is_an_invalid_schedule(client: Client) -> None:
    with pytest.raises(InvalidScheduleError) as refused:
        client.create_schedule("daily", "rate(1 hour)", {"kind": "http", "url": "https://127.0.0.1/hook"})
    assert refused.value.field == "action.url"


def test_a_task_whose_action_the_rules_refuse_is_an_invalid_task(client: Client) -> None:
    with pytest.raises(InvalidTaskError) as refused:
        client.build_task(from_ms(NOW_MS + 60_000), {"kind": "http", "url": "https://127.0.0.1/hook"})
    assert refused.value.field == "action.url"
