"""A task's path through the runtime (:mod:`punctual_tools.task_path`): which modules one task's life crosses."""

from __future__ import annotations

import pytest

from punctual_tools.task_path import SRC, TaskPath, _runtime_module, trace_task_life

# One task crossed 33 modules when the services reached the store through a facade and the executor read the clock
# offset from the NTP module; the renovation brought it to 32, and no more: the console's pages of the due index are
# loaded by the first page a person asks for, and the poll's watermark helpers live with the store's configuration.
MOST_MODULES = 32


def test_files_are_named_as_the_runtime_modules_and_handlers_they_are() -> None:
    # Given files of the layer, of a handler, of the tooling and of a library  Then only the first two are named

    assert _runtime_module(str(SRC / "shared/punctual/domain/model.py")) == "punctual.domain.model"
    assert _runtime_module(str(SRC / "shared/punctual/targets/__init__.py")) == "punctual.targets"
    assert _runtime_module(str(SRC / "executor/app.py")) == "executor.app"
    assert _runtime_module(str(SRC / "tools/punctual_tools/task_path.py")) is None
    assert _runtime_module(pytest.__file__) is None


@pytest.fixture(scope="module")
def path() -> TaskPath:
    return trace_task_life()


def test_one_task_goes_from_the_client_through_both_handlers_to_its_recorded_outcome(path: TaskPath) -> None:
    # Given one task scheduled, polled and fired through the handlers on moto  Then it succeeded, and each phase
    # ran the module that owns it
    assert path.outcome == "SUCCEEDED"
    assert list(path.phases) == ["schedule", "poll and dispatch", "arm, fire and record"]
    assert "punctual.scheduling.client" in path.phases["schedule"]
    assert {"poller.app", "punctual.polling.poller"} <= set(path.phases["poll and dispatch"])
    assert {"executor.app", "punctual.executing.recorder"} <= set(path.phases["arm, fire and record"])


def test_a_task_crosses_fewer_modules_than_it_did_through_the_facade(path: TaskPath) -> None:
    # Given the same task's life  Then it crosses no more modules than the budget, and no tooling module
    assert len(path.modules) <= MOST_MODULES, path.modules
    assert all(m.startswith("punctual.") or m.endswith(".app") for m in path.modules)
