"""``punctual up`` as another program drives it: waited for until ready, killed with its whole process group
(``kill -9 -PGID``), started again on the same home.

What a kill must leave: nothing running (DynamoDB Local and the executors' environments each run in a process
group of their own, out of the signal's reach, and end with the stack by themselves), the data on disk, and
CPU groups that the next start removes whatever its profile.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from punctual.config.settings import Settings
from punctual.runtime.client import Client
from punctual.targets import LogAction
from punctual_tools.local.cpu_quota import group_of
from punctual_tools.local.dynamodb_local import find_project_root
from punctual_tools.local.stack import LocalStack, StackConfig, client_settings
from support import wait_until

ROOT = find_project_root()
PUNCTUAL = str(ROOT / ".venv" / "bin" / "punctual")
MARKER = "PUNCTUAL_E2E_KILL_HOME"  # in the environment of everything the stack starts: how its processes are found
UP_GUARD_S = 240  # the longest `punctual up` may take to be ready on a busy machine (a guard, not a timing)


def marked(home: Path) -> dict[int, str]:
    """The processes (pid: command line) whose environment carries ``home``'s marker."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if f"{MARKER}={home}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    return found


@pytest.mark.timeout(600)
def test_a_stack_killed_with_its_group_leaves_nothing_running_and_restarts_on_its_data(
    tmp_path: Path, fresh_table_name: str
) -> None:
    # Given `punctual up` without the REST API, in a process group of its own
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCTUAL_")}
    env |= {"PUNCTUAL_NTP_SERVER": "127.0.0.1:9", MARKER: str(home)}
    command = [PUNCTUAL, "--home", str(home), "up", "--port", "0", "--no-api", "--prewarm", "2"]
    command += ["--poll-interval", "2", "--table", fresh_table_name]
    with (tmp_path / "up.log").open("wb") as log:
        up = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # When another program waits for it to be ready
        began = time.monotonic()
        status = subprocess.run(
            [PUNCTUAL, "--home", str(home), "status", "--wait", str(UP_GUARD_S)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        start_s = time.monotonic() - began
        up_log = (tmp_path / "up.log").read_text(errors="replace")[-3000:]
        assert status.returncode == 0, f"{status.stderr}\n{up_log}"
        # Then the state it prints is the ready stack's, with no API
        state = json.loads(status.stdout)
        assert (state["ready"], state["pid"], state["api_url"]) == (True, up.pid, None)
        assert not (home / "api-token").exists()
        assert state["dynamodb_pid"] in marked(home)
        assert len(state["worker_pids"]) == 2
        # And a task written to it is stored (on disk), due in an hour
        client = Client(Settings(**client_settings(state), ntp_server=None))
        client.schedule(datetime.now(UTC) + timedelta(hours=1), LogAction(message="kept"), task_id="kept")
        own_group = group_of(os.getpid())
        groups = own_group / f"punctual-{up.pid}" if own_group is not None else None
        quota = bool(state["cpu_quota"]["applied"]) and groups is not None and groups.is_dir()

        # When its whole process group is killed
        os.killpg(up.pid, signal.SIGKILL)
        up.wait(30)

        # Then nothing it started runs on for long (as long as its start took, at most)
        gone = wait_until(lambda: not marked(home), timeout=max(start_s, 5.0), interval=0.1)
        assert gone, f"still running after the kill: {marked(home)}"

        # When a stack starts again on the same home, under the local profile (which makes no CPU groups)
        config = StackConfig(
            home=home,
            port=0,
            poll_interval_s=2,
            prewarm=0,
            api=False,
            fast_path=False,
            settings_overrides={"table_name": fresh_table_name, "ntp_server": None, "profile": "local"},
        )
        with LocalStack(config) as again:
            # Then it is ready when its start returns: its first tick is over
            assert again.polls
            # And the killed stack's CPU groups are gone
            if quota:
                assert groups is not None
                assert not groups.exists()
            # And the task written before the kill is there, from disk
            assert again.settings is not None
            assert Client(again.settings).get("kept") is not None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGKILL)
        up.wait(30)
        for pid in marked(home):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
