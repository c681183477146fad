"""The local runtime's IAM check, wired: with ``PUNCTUAL_IAM_CHECK=1`` each part obeys the role of the function it
stands for (the poller's and the fast path's stores, the API's client, the executors' worker processes), and with
it off nothing is judged.

The decisions themselves are tested in tests/template/test_iam_evaluator.py; here, on moto, only that each part
of the stack is watched under the right function.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from punctual.config.settings import Settings
from punctual.domain.keys import from_ms
from punctual.domain.model import Task
from punctual.runtime.wiring import poller_on
from punctual.stores.dynamodb import DynamoStores
from punctual.targets import LogAction
from punctual_tools.iam import IamDeniedError, live
from punctual_tools.local import api_server
from punctual_tools.local.stack import executor_env, function_store
from support import RecordingInvoker, call_worker_once

HANDLER = """
import boto3

client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")


def handler(event, context):
    try:
        client.delete_table(TableName=event["table"])
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": None}
"""


@pytest.fixture
def iam_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(live.ENABLE_VARIABLE, "1")
    yield
    for check in live._checks.values():
        check.uninstall()


@pytest.fixture
def iam_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(live.ENABLE_VARIABLE, "0")

    def no_check(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an IAM check was built while the check is off")

    monkeypatch.setattr(live.IamCheck, "for_function", no_check)


def test_the_executors_get_the_setting_as_the_stack_has_it(settings: Settings) -> None:
    assert executor_env(settings, {live.ENABLE_VARIABLE: "1"})[live.ENABLE_VARIABLE] == "1"
    assert live.ENABLE_VARIABLE not in executor_env(settings, {})


@pytest.mark.usefixtures("iam_on")
def test_with_the_check_on_the_pollers_store_obeys_the_pollers_role(
    dynamodb: Any, settings: Settings, now_ms: int, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a task due now, and the store the stack gives the poller
    due = Task(task_id="due", due_at=from_ms(now_ms), action=LogAction(message="test"), payload={})
    DynamoStores.from_settings(dynamodb, settings).client.create(due, now_ms)
    store = function_store(settings, "PollerFunction")
    # When it polls  Then its calls are granted and the task is dispatched
    assert poller_on(store, RecordingInvoker(), settings).poll(now_ms).dispatched == 1
    # When it makes a call its role does not grant (a scan of the table)  Then AWS's AccessDenied is raised and
    # logged at ERROR, naming the function and the action
    with caplog.at_level(logging.ERROR), pytest.raises(IamDeniedError, match="PollerFunction") as denied:
        list(store.client.list_tasks())
    assert denied.value.response["Error"]["Code"] == "AccessDeniedException"
    assert any(r.levelno == logging.ERROR and "dynamodb:Scan" in r.getMessage() for r in caplog.records)


@pytest.mark.usefixtures("iam_on")
def test_with_the_check_on_the_fast_paths_store_obeys_the_fast_paths_role(dynamodb: Any, settings: Settings) -> None:
    # Given the store the stack gives the fast path  When it reads when the last polls started  Then its role
    # allows it
    store = function_store(settings, "FastPathFunction")
    assert store.dispatch.last_polls() == [None]
    # When it reads the poller's watermark (the poller's grant, not the fast path's)  Then it is refused
    with pytest.raises(IamDeniedError, match="FastPathFunction"):
        store.dispatch.get_watermark()
    # And so is reading a task
    with pytest.raises(IamDeniedError, match="FastPathFunction"):
        store.client.get("some-task")


@pytest.mark.usefixtures("iam_off")
def test_with_the_check_off_nothing_is_judged(dynamodb: Any, settings: Settings) -> None:
    # Given the poller's store and the API's resolver with the check off  When they make any call  Then it is sent
    # as it is, and no check was built (no node run)
    assert list(function_store(settings, "PollerFunction").client.list_tasks()) == []
    api_server.ApiResolverFactory(settings)()


@pytest.mark.usefixtures("iam_on")
def test_with_the_check_on_the_in_process_api_client_obeys_the_api_role(
    dynamodb: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the API resolved in the stack's process  When its resolver is built  Then its client is the API's
    watched: list[str] = []

    def recording(client: Any, function: str, s: Settings | None = None) -> Any:
        watched.append(function)
        return live.check_client(client, function, s)

    monkeypatch.setattr(api_server, "check_client", recording)
    api_server.ApiResolverFactory(settings)()
    assert watched == ["ApiFunction"]


def test_an_api_worker_process_installs_the_api_roles_check_before_building_its_resolver(
    dynamodb: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the initializer of an API worker process, told by the stack that the check is on (run here, with what
    # it does to the process beside the check left out)
    for name in ("lower_current_thread", "set_background_cpus"):
        monkeypatch.setattr(api_server, name, lambda *args: None)
    monkeypatch.setattr(signal, "signal", lambda *args: None)
    monkeypatch.setattr(api_server, "_in_worker", False)
    monkeypatch.setattr(api_server, "_worker_resolver", None)
    monkeypatch.setenv(live.ENABLE_VARIABLE, "0")  # the worker's own environment does not decide
    built: list[Any] = []

    class Factory:
        def __init__(self) -> None:
            self.settings = settings

        def __call__(self) -> Any:
            built.append(boto3.client("dynamodb", region_name="us-east-1"))
            return object()

    try:
        api_server._start_worker(Factory(), None, True)
        # When the resolver's client deletes the table (never granted to the API)  Then it is refused as the API's
        with pytest.raises(IamDeniedError, match="ApiFunction"):
            built[0].delete_table(TableName=settings.table_name)
    finally:
        for check in live._checks.values():
            check.uninstall()


def test_with_the_check_on_an_executor_worker_refuses_what_the_executors_role_does_not_grant(
    tmp_path: Path, settings: Settings
) -> None:
    # Given an executor worker started as the stack starts it, the check on, and a handler module that builds a
    # client at its cold start
    handler = tmp_path / "handler.py"
    handler.write_text(HANDLER)
    env = executor_env(
        settings.model_copy(update={"fire_log_path": str(tmp_path / "fires.jsonl")}), {live.ENABLE_VARIABLE: "1"}
    )
    # When the handler deletes the table (never granted to the executor)
    result = call_worker_once(handler, env, {"table": settings.table_name}, tmp_path / "worker.log")
    # Then the call is refused before it is sent, as AWS would, under the executor's role
    assert result["error"] == "IamDeniedError"
    assert "ExecutorFunction" in result["message"]
    assert "dynamodb:DeleteTable" in result["message"]
