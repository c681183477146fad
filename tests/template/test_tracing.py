"""Tracing adds no subsegment per AWS call: the functions trace (``Tracing: Active`` in template.yaml) and the
handlers' Tracer (:func:`punctual.runtime.observability.handler_tools`) records the handler's segment only.

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
    from punctual.runtime.observability import handler_tools
    tracer = handler_tools()[2]
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


def _run_probe(tmp_path: Path, mode: str) -> dict[str, Any]:
    script = tmp_path / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
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
    done = subprocess.run(
        [sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_handlers_tracer_records_the_handler_and_no_aws_call(tmp_path: Path) -> None:
    # Given the handlers' Tracer, traced as in Lambda  When a handler makes a DynamoDB call  Then the handler's
    # subsegment is recorded, botocore (nor any other module) is not patched, and the call adds no subsegment
    seen = _run_probe(tmp_path, "punctual")
    assert seen == {"tracing": True, "botocore_patched": False, "patched_modules": [], "subsegments": ["## handler"]}


def test_the_probe_sees_a_patched_botocore(tmp_path: Path) -> None:
    # Given Powertools' default Tracer (auto_patch)  Then the same probe sees botocore patched and a "dynamodb"
    # subsegment: the test above would catch a return to the default
    seen = _run_probe(tmp_path, "default")
    assert seen["tracing"] and seen["botocore_patched"] and "botocore" in seen["patched_modules"]
    assert "dynamodb" in seen["subsegments"] and "## handler" in seen["subsegments"]


@pytest.mark.parametrize("function", ["poller", "executor", "fastpath", "api"])
def test_each_handler_takes_its_tracer_from_handler_tools(function: str) -> None:
    # Given a handler module (read, not imported)  Then it builds no Tracer of its own: its tracer is the one
    # handler_tools() returns
    source = (ROOT / "src" / function / "app.py").read_text(encoding="utf-8")
    calls = {
        node.func.id
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert "handler_tools" in calls and "Tracer" not in calls
