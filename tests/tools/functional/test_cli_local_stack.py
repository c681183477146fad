"""The CLI against a running local stack, as its state file describes it (the table on moto): a client takes the
stack's settings, ``punctual status --wait`` waits for a stack to be ready, and ``punctual up``'s options."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from punctual_tools.cli import build_parser, main
from punctual_tools.cli.stack import stack_config
from punctual_tools.local.stack import LocalStack, StackConfig, client_settings, wait_ready
from punctual_tools.settings import LocalSettings

TABLE = "punctual-tasks-test"  # the functional conftest's table
NO_SUCH_PID = 4_194_305  # above Linux's largest pid: never a running process


def write_state(home: Path, **fields: Any) -> None:
    home.mkdir(exist_ok=True)
    state = {"ready": True, "pid": os.getpid(), "endpoint_url": None, "table_name": TABLE, "shard_count": 4}
    (home / "stack.json").write_text(json.dumps(state | fields))


@pytest.mark.parametrize(
    ("poll_interval_ms", "lead_ms", "due_in", "flagged"), [(5_000, 90_000, "30s", "0"), (590_000, 600_000, "5m", "1")]
)
def test_schedule_flags_the_fast_path_by_the_running_stacks_poll_interval(
    dynamodb: Any,
    read_raw: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    poll_interval_ms: int,
    lead_ms: int,
    due_in: str,
    flagged: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a running stack that polls every 5 s (or 590 s, with a 600 s lead), its fast-path margin 10 s, and this
    # process's own settings at the default poll interval (60 s) and lead (90 s)
    monkeypatch.setenv("PUNCTUAL_REGION", "us-east-1")
    monkeypatch.delenv("PUNCTUAL_POLL_INTERVAL_MS", raising=False)
    monkeypatch.delenv("PUNCTUAL_LEAD_MS", raising=False)
    write_state(tmp_path, poll_interval_ms=poll_interval_ms, lead_ms=lead_ms, fast_path_margin_ms=10_000)
    # When `punctual schedule` writes a task due in 30 s (beyond 5 s + 10 s) or 5 min (within 590 s + 10 s), both
    # of which the default interval would get wrong (within 60 s + 10 s; beyond it)
    assert main(["--home", str(tmp_path), "schedule", "--in", due_in, "--id", "t1"]) == 0
    capsys.readouterr()
    # Then the task is flagged for the fast path as the stack's interval says
    assert read_raw("t1")["fast_path"] == {"N": flagged}


def test_client_settings_are_the_stacks_table_and_polling() -> None:
    # Given a state file's content, When a client's settings are taken from it
    state = {"ready": True, "pid": 1, "endpoint_url": "http://127.0.0.1:9", "table_name": "t", "shard_count": 8}
    state |= {"lead_ms": 20_000, "poll_interval_ms": 2_000, "fast_path_margin_ms": 0, "api_url": None}
    # Then they are where its table is and how it polls, nothing else
    assert client_settings(state) == {
        "endpoint_url": "http://127.0.0.1:9",
        "table_name": "t",
        "shard_count": 8,
        "lead_ms": 20_000,
        "poll_interval_ms": 2_000,
        "fast_path_margin_ms": 0,
    }


def test_wait_ready_waits_for_the_state_file_of_a_ready_stack(tmp_path: Path) -> None:
    # Given no stack yet, When one becomes ready a moment after the wait began
    writer = threading.Timer(0.3, write_state, args=(tmp_path,), kwargs={"poll_interval_ms": 2_000})
    started = time.monotonic()
    writer.start()
    state = wait_ready(tmp_path, timeout_s=300)
    writer.join()
    # Then the wait returns its state once it is there, not before
    assert state is not None
    assert state["poll_interval_ms"] == 2_000
    assert time.monotonic() - started >= 0.3


@pytest.mark.parametrize("fields", [{"ready": False}, {"pid": NO_SUCH_PID}])
def test_wait_ready_is_none_for_a_stack_not_ready_or_dead(tmp_path: Path, fields: dict[str, Any]) -> None:
    # Given the state file of a stack that is not ready, or whose process is gone
    write_state(tmp_path, **fields)
    # When it is waited for briefly, Then no stack is ready
    assert wait_ready(tmp_path, timeout_s=0.2) is None


def test_status_prints_a_ready_stacks_state_and_fails_without_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given no stack, When `punctual status` asks, Then it says none is ready (exit 1)
    assert main(["--home", str(tmp_path), "status", "--wait", "0.1"]) == 1
    assert "no local stack is ready within 0.1 s" in capsys.readouterr().err
    # Given a ready one, Then its state is printed (exit 0)
    write_state(tmp_path, poll_interval_ms=2_000)
    assert main(["--home", str(tmp_path), "status", "--wait", "5"]) == 0
    assert json.loads(capsys.readouterr().out)["poll_interval_ms"] == 2_000


def test_up_no_api_starts_a_stack_without_the_rest_api() -> None:
    # Given `punctual up --no-api`, When its stack's configuration is made, Then it serves no API
    args = build_parser().parse_args(["up", "--no-api"])
    assert stack_config(args, args.poll_interval).api is False
    # (and by default it does)
    args = build_parser().parse_args(["up"])
    assert stack_config(args, args.poll_interval).api is True


def test_up_takes_the_lead_into_its_stacks_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given `punctual up --poll-interval 10 --lead-ms 20000` (six polls a minute, as the drift benchmark runs)
    monkeypatch.delenv("PUNCTUAL_LEAD_MS", raising=False)
    args = build_parser().parse_args(["up", "--poll-interval", "10", "--lead-ms", "20000"])
    # When its stack's configuration is made  Then the stack's settings take that lead, which covers the interval
    config = stack_config(args, args.poll_interval)
    assert config.settings_overrides["lead_ms"] == 20_000
    settings = LocalSettings.from_env(poll_interval_ms=int(config.poll_interval_s * 1000), **config.settings_overrides)
    assert (settings.poll_interval_ms, settings.lead_ms) == (10_000, 20_000)
    # And without --lead-ms the setting's own default (or PUNCTUAL_LEAD_MS) stands
    args = build_parser().parse_args(["up"])
    assert "lead_ms" not in stack_config(args, args.poll_interval).settings_overrides


def test_up_no_api_refuses_what_needs_the_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # When `punctual up --no-api` is also asked to serve a tenant, Then it refuses before anything starts
    assert main(["--home", str(tmp_path), "up", "--no-api", "--tenant", "acme"]) == 2
    assert "--no-api" in capsys.readouterr().err
    assert not (tmp_path / "stack.json").exists()


def test_every_option_of_up_is_described_and_so_is_the_fast_path_rule() -> None:
    # Given `punctual up`'s parser
    parser = build_parser()
    up = parser._subparsers._group_actions[0].choices["up"]  # type: ignore[union-attr, index]  # argparse's own record
    # Then every option has a help text
    undescribed = [a.option_strings for a in up._actions if not a.help]
    assert undescribed == []
    # And its help says which tasks go by the fast path
    assert "poll interval + 10 s" in " ".join(up.format_help().split())


def test_a_killed_stacks_state_file_is_gone_as_the_next_stack_starts(tmp_path: Path) -> None:
    # Given the state file a killed stack left (its process runs no more)
    write_state(tmp_path, pid=NO_SUCH_PID, dynamodb_pid=None, worker_pids=[])
    # When the next stack cleans up before it starts
    LocalStack(StackConfig(home=tmp_path))._clean_stale()
    # Then nobody can take that file for the new stack's until the new one is ready
    assert not (tmp_path / "stack.json").exists()
    assert wait_ready(tmp_path, timeout_s=0) is None
