"""The load test (loadtest/locustfile.py) end to end: locust headless against a local stack, judged by the checker.

Locust runs in a process of its own (it patches the standard library with gevent when imported, which must not
happen in the test process). It finds the stack through the state file in ``LOAD_HOME``, schedules with a short
lead (``LOAD_LEAD_S``) so that the whole run, the wait for the last fire included, stays well under a minute, and
its exit status is the checker's verdict.

Network: DynamoDB Local is reached at 127.0.0.1 only, locust runs headless (no web UI, no port of its own), and
the NTP probe of the stack's executors is switched off (``ntp_server=None``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from punctual_tools.local.dynamodb_local import find_project_root
from punctual_tools.local.stack import LocalStack, StackConfig

ROOT = find_project_root()
LOCUSTFILE = ROOT / "loadtest" / "locustfile.py"
LOOPBACK_NTP = "127.0.0.1:9"  # discard port, as in test_local_runtime: no probe leaves the machine

# Not pytest.importorskip: importing locust would monkey-patch this process with gevent.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("locust") is None, reason="the load test needs locust (the dev and load extras install it)"
)


@pytest.mark.timeout(210)
# Through the API (make test); straight to the table as well with --slow (make slow): the other e2e tests and
# the fault suite schedule straight to the table already.
@pytest.mark.parametrize("via", [pytest.param("client", marks=pytest.mark.slow), "api"])
def test_a_headless_locust_run_ends_with_the_checkers_passing_verdict(tmp_path: Path, via: str) -> None:
    # Given a local stack polling every 2 s (DynamoDB Local in memory, on a free loopback port)
    config = StackConfig(
        home=tmp_path,
        port=0,
        in_memory=True,
        poll_interval_s=2,
        prewarm=2,
        settings_overrides={"table_name": f"punctual-load-{uuid.uuid4().hex[:8]}", "ntp_server": None},
    )
    with LocalStack(config) as stack:
        assert stack.settings is not None
        assert stack.settings.endpoint_url is not None
        assert stack.settings.endpoint_url.startswith("http://127.0.0.1:")
        env = {
            **os.environ,
            "LOAD_HOME": str(tmp_path),
            "LOAD_VIA": via,  # the users write the table, or go through the stack's REST API
            "LOAD_LEAD_S": "3,6",
            "LOAD_MARGIN_S": "60",  # how long past the last due it waits at most (it ends once all fired)
            "PUNCTUAL_NTP_SERVER": LOOPBACK_NTP,
            "PUNCTUAL_DEFAULT_MISFIRE_GRACE_MS": "300000",  # its tasks' grace: a slow machine makes fires late only
        }
        command = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--headless",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "8s",
            "--only-summary",
        ]

        # When 4 users schedule, read, reschedule and cancel tasks for 8 s, and the load test checks the fires
        try:
            run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150, check=False)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"locust did not finish within 150 s; stderr: {str(exc.stderr)[-3000:]}")

    # Then locust exits 0, and printed the checker's verdict: OK, some tasks expected, none lost, no extra fire
    output = run.stdout + run.stderr
    shown = f"{run.stdout[-3000:]}\n--- stderr ---\n{run.stderr[-2000:]}"  # the verdict is on stdout
    assert run.returncode == 0, shown
    verdict = re.search(r"load test \w+ checker: (.*)", run.stdout)
    assert verdict is not None, shown
    assert verdict.group(1) == "OK", run.stdout[-4000:]
    expected = int(re.search(r"expected occurrences\s+(\d+)", run.stdout).group(1))  # type: ignore[union-attr]
    assert expected > 0
    assert re.search(r"^\s+lost\s+0\b", run.stdout, re.MULTILINE)
    assert re.search(r"extra fires\s+0\b", run.stdout)
    # And the calls went the way asked (locust's summary names them by request type)
    assert f"punctual-{via}" in output
