"""Tracing adds no subsegment per AWS call and no cold start on the path to a fire: the functions trace
(``Tracing: Active`` in template.yaml), the poller's Tracer (:func:`punctual.runtime.observability.handler_tracer`)
records the handler's segment only, and the executor, the fast path and the API load no X-Ray SDK at all.

Patching is process-wide and cannot be undone, so each case runs in a fresh interpreter that looks like Lambda
to Powertools (``LAMBDA_TASK_ROOT`` and a trace header set, so tracing is on) and captures what the X-Ray SDK
would send instead of sending it. botocore is stubbed: nothing leaves the machine.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from template_tools import ROOT

from punctual_tools.cost.coldstart import lambda_probe_env

PROBE = r"""
import json, sys
import boto3, botocore.client
from botocore.stub import Stubber
from aws_xray_sdk.core import patcher, xray_recorder

class Capture:  # the X-Ray SDK's emitter interface, keeping what it would send to the daemon
    def __init__(self):
        self.sent = []
    def send_entity(self, entity):
        self.sent.append(json.loads(entity.serialize()))
    def set_daemon_address(self, address):
        pass
    ip, port = "127.0.0.1", 2000

if sys.argv[1] == "punctual":
    from punctual.runtime.observability import handler_tracer
    tracer = handler_tracer()
else:  # Powertools' default, to show that the probe sees patching
    from aws_lambda_powertools import Tracer
    tracer = Tracer(service="probe")
capture = Capture()
xray_recorder.emitter = capture
client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
stubber = Stubber(client)
stubber.add_response("get_item", {})
stubber.activate()

@tracer.capture_lambda_handler(capture_response=False)
def handler(event, context):
    client.get_item(TableName="tasks", Key={"task_id": {"S": "t-1"}})
    return {}

class Context:
    function_name, aws_request_id = "punctual-executor", "r-1"

handler({}, Context())

def names(entity):
    yield entity.get("name")
    for child in entity.get("subsegments", []):
        yield from names(child)

print(json.dumps({"tracing": not tracer.disabled, "botocore_patched": hasattr(botocore.client, "_xray_enabled"),
                  "patched_modules": sorted(patcher._PATCHED_MODULES),
                  "subsegments": [n for e in capture.sent for n in names(e)]}))
"""


LOADS = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("handler_probe", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("aws_xray_sdk", "yaml") or m in sys.argv[2:])))
"""
# What a handler's cold start never loads: the X-Ray SDK (~0.25 s of CPU), PyYAML (only tools read template.yaml)
# and, on the executor and the fast path, the scheduling clients they never call
NOT_LOADED = {
    "executor": [
        "punctual.scheduling.client",
        "punctual.scheduling.api_client",
        "punctual.scheduling.chain",
        "punctual.polling.poller",
        "punctual.runtime.client",
        "punctual_tools.doubles.memory",
    ],
    "fastpath": [
        "punctual.scheduling.client",
        "punctual.scheduling.api_client",
        "punctual.runtime.client",
        "punctual_tools.doubles.memory",
    ],
    "api": ["punctual_tools.doubles.memory"],
}


def _lambda_env() -> dict[str, str]:
    """This environment as Lambda's looks to Powertools: inside Lambda (tracing on), with a trace header."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POWERTOOLS_", "AWS_SAM", "AWS_XRAY", "_X_AMZN"))}
    env.update(
        {
            "LAMBDA_TASK_ROOT": "/var/task",  # Powertools traces only inside Lambda
            "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
            "AWS_REGION": "us-east-1",
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT / "src/shared"), str(ROOT / "src/tools"), env.get("PYTHONPATH", "")]
            ),
        }
    )
    return env


def _run_probe(tmp_path: Path, mode: str) -> dict[str, Any]:
    script = tmp_path / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), mode], env=_lambda_env(), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_handlers_tracer_records_the_handler_and_no_aws_call(tmp_path: Path) -> None:
    # Given the handlers' Tracer, traced as in Lambda  When a handler makes a DynamoDB call  Then the handler's
    # subsegment is recorded, botocore (nor any other module) is not patched, and the call adds no subsegment
    seen = _run_probe(tmp_path, "punctual")
    assert seen == {"tracing": True, "botocore_patched": False, "patched_modules": [], "subsegments": ["## handler"]}


def test_the_probe_sees_a_patched_botocore(tmp_path: Path) -> None:
    # Given Powertools' default Tracer (auto_patch)  Then the same probe sees botocore patched and a "dynamodb"
    # subsegment: the test above would catch a return to the default
    seen = _run_probe(tmp_path, "default")
    assert seen["tracing"]
    assert seen["botocore_patched"]
    assert "botocore" in seen["patched_modules"]
    assert "dynamodb" in seen["subsegments"]
    assert "## handler" in seen["subsegments"]


def test_the_poller_takes_its_tracer_from_handler_tracer() -> None:
    # Given the poller's handler module (read, not imported)  Then it builds no Tracer of its own: its tracer is
    # the one handler_tracer() returns
    assert {"handler_tools", "handler_tracer"} <= _calls("poller")
    assert "Tracer" not in _calls("poller")


@pytest.mark.parametrize("function", ["executor", "fastpath", "api"])
def test_the_functions_on_the_path_to_a_fire_load_no_xray_sdk_and_nothing_they_never_call(
    function: str, tmp_path: Path
) -> None:
    # Given a handler on the path from a write to its fire, loaded as Lambda loads it (tracing on, no network:
    # NTP off, dummy credentials)  Then it builds no Tracer and its cold start never imports the X-Ray SDK, PyYAML
    # or a client it never calls
    assert "handler_tools" in _calls(function)
    assert not {"Tracer", "handler_tracer"} & _calls(function)
    script = tmp_path / "loads.py"
    script.write_text(LOADS, encoding="utf-8")
    env = {**lambda_probe_env(), **_lambda_env()}
    env.update({"PUNCTUAL_NTP_SERVER": "off", "PUNCTUAL_TENANT_MAP": "{}"})
    handler = ROOT / "src" / function / "app.py"
    done = subprocess.run(
        [sys.executable, str(script), str(handler), *NOT_LOADED[function]],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def _calls(function: str) -> set[str]:
    """The names a handler module calls (read, not imported)."""
    source = (ROOT / "src" / function / "app.py").read_text(encoding="utf-8")
    return {
        node.func.id
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
