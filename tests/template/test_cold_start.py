"""What each handler's cold start loads, against a checked-in list (``cold_start_imports.json``).

Each handler module is imported as Lambda imports it (a fresh interpreter, its code directory and the layer on
``sys.path``, ``import app``) with its function's environment from template.yaml, as Lambda's looks to
Powertools (tracing on) and with no network (dummy credentials). The ``punctual.*`` modules and the third-party
top-level packages the import adds to ``sys.modules`` must all be on the handler's list: a newcomer fails the
test, named, so that what Lambda loads grows only on purpose. The lists hold no PyYAML, no tooling and no memory
store; ntplib is loaded by the executor's NTP probe, in its own thread, once it measures (never by an import).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from template_tools import ROOT

from punctual_tools.cost.coldstart import lambda_probe_env
from punctual_tools.iam.policies import Stack, function_environment
from punctual_tools.template import load_template

LISTS = Path(__file__).with_name("cold_start_imports.json")
FUNCTIONS = {
    "executor": "ExecutorFunction",
    "poller": "PollerFunction",
    "fastpath": "FastPathFunction",
    "api": "ApiFunction",
}
# Never loaded by a cold start: the template reader and its YAML, the tooling, the in-memory store.
NEVER = ("yaml", "punctual_tools", "punctual.stores.memory")
NTP_SILENT = "127.0.0.1:9"  # a server that never answers: the probe runs and gives up after its timeout

LOAD = r"""
import importlib, json, sys

before = set(sys.modules)
sys.path[:0] = [sys.argv[1], sys.argv[2]]  # the function's code, then the layer
importlib.import_module("app")
ntp = sys.modules.get("punctual.runtime.ntp")
for probe in list(ntp._probes.values()) if ntp else []:
    probe.wait(60)  # the probe's own timeout ends it; wait for it to have imported what it imports
loaded = set(sys.modules) - before
ours = sorted(m for m in loaded if m == "punctual" or m.startswith("punctual."))
stdlib = set(sys.stdlib_module_names) | {"__mp_main__"}  # multiprocessing's alias of __main__
tops = {m.split(".")[0] for m in loaded if not m.startswith("_sysconfigdata_")} - stdlib - {"punctual", "app"}
print(json.dumps({"punctual": ours, "third_party": sorted(tops)}))
"""


def _environment(function: str, **overrides: str) -> dict[str, str]:
    """``function``'s environment from the template, in a process that looks like Lambda to Powertools."""
    env = {k: v for k, v in lambda_probe_env().items() if not k.startswith(("PUNCTUAL_", "POWERTOOLS_", "_X_AMZN"))}
    env.update(function_environment(load_template(), FUNCTIONS[function], Stack()))
    env.update(
        {
            "AWS_LAMBDA_FUNCTION_NAME": f"punctual-{FUNCTIONS[function]}",
            "LAMBDA_TASK_ROOT": "/var/task",  # Powertools traces only inside Lambda
            "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
            "AWS_REGION": "us-east-1",
        }
    )
    env.update(overrides)
    return env


def cold_start_modules(handler_dir: Path, env: dict[str, str]) -> dict[str, list[str]]:
    """The ``punctual.*`` modules and third-party top-level packages importing ``handler_dir``/app.py loads."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", LOAD, str(handler_dir), str(ROOT / "src" / "shared")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=handler_dir,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def newcomers(loaded: dict[str, list[str]], listed: dict[str, list[str]]) -> dict[str, list[str]]:
    """What ``loaded`` holds that ``listed`` does not, by kind (``punctual``, ``third_party``)."""
    return {
        kind: sorted(set(names) - set(listed[kind])) for kind, names in loaded.items() if set(names) - set(listed[kind])
    }


def _never_loaded(names: list[str]) -> list[str]:
    return [n for n in names if any(n == never or n.startswith(f"{never}.") for never in NEVER)]


@pytest.fixture(scope="module")
def lists() -> dict[str, Any]:
    lists: dict[str, Any] = json.loads(LISTS.read_text(encoding="utf-8"))
    return lists


def test_the_lists_hold_no_yaml_no_tooling_no_memory_store(lists: dict[str, Any]) -> None:
    # Given the checked-in lists  Then no handler may load PyYAML, the tooling or the in-memory store, and only the
    # executor (its NTP probe, in the background) loads ntplib
    assert set(lists) == set(FUNCTIONS)
    for function, listed in lists.items():
        assert _never_loaded(listed["punctual"] + listed["third_party"]) == [], function
        assert ("ntplib" in listed["third_party"]) is (function == "executor"), function


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_a_cold_start_loads_only_what_its_list_names(function: str, lists: dict[str, Any]) -> None:
    # Given the handler, loaded as Lambda loads it with its function's environment (the executor's NTP probe
    # asking a server that never answers, and waited for)
    loaded = cold_start_modules(ROOT / "src" / function, _environment(function, PUNCTUAL_NTP_SERVER=NTP_SILENT))
    # Then every punctual module and third-party package it loaded is on its list
    assert newcomers(loaded, lists[function]) == {}, (
        f"{function}'s cold start loads what its list in {LISTS.name} lacks"
    )
    assert _never_loaded(loaded["punctual"] + loaded["third_party"]) == []


def test_ntplib_is_the_probe_s_not_an_import_s(lists: dict[str, Any]) -> None:
    # Given the executor with NTP off (no probe measures)  Then its cold start loads no ntplib: importing the
    # handler, the wiring and punctual.runtime.ntp never does
    loaded = cold_start_modules(ROOT / "src" / "executor", _environment("executor", PUNCTUAL_NTP_SERVER="off"))
    assert "ntplib" not in loaded["third_party"]
    assert "punctual.runtime.ntp" in loaded["punctual"]


def test_a_handler_that_loads_one_more_package_is_named(tmp_path: Path, lists: dict[str, Any]) -> None:
    # Given a copy of the API's handler that also imports PyYAML  When it is loaded
    (tmp_path / "app.py").write_text((ROOT / "src" / "api" / "app.py").read_text() + "\nimport yaml\n")
    loaded = cold_start_modules(tmp_path, _environment("api"))
    # Then the check names the newcomer (with what it loads itself), and no punctual module
    found = newcomers(loaded, lists["api"])
    assert list(found) == ["third_party"]
    assert "yaml" in found["third_party"]


def test_the_executor_sets_itself_up_in_one_cold_start_function() -> None:
    # Given the executor's handler module (read, not imported)
    tree = ast.parse((ROOT / "src" / "executor" / "app.py").read_text(encoding="utf-8"))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    # Then its process-wide set-up is in cold_start, documented, and module scope only calls it, once
    assert "cold_start" in functions
    assert ast.get_docstring(functions["cold_start"])
    set_up = {"setswitchinterval", "build_executor", "freeze", "lower_current_thread"}

    def called(nodes: list[ast.stmt]) -> set[str]:
        calls = [n.func for node in nodes for n in ast.walk(node) if isinstance(n, ast.Call)]
        return {f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "" for f in calls}

    assert set_up <= called(functions["cold_start"].body)
    module_scope = [node for node in tree.body if not isinstance(node, ast.FunctionDef)]
    assert not called(module_scope) & set_up
    scope_calls = [n.func for node in module_scope for n in ast.walk(node) if isinstance(n, ast.Call)]
    assert [f.id for f in scope_calls if isinstance(f, ast.Name) and f.id == "cold_start"] == ["cold_start"]


if __name__ == "__main__":  # print the lists as the handlers load them today (to review a change to the JSON file)
    print(
        json.dumps(
            {
                f: cold_start_modules(ROOT / "src" / f, _environment(f, PUNCTUAL_NTP_SERVER=NTP_SILENT))
                for f in sorted(FUNCTIONS)
            },
            indent=2,
        )
    )
