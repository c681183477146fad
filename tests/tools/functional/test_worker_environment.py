"""What an executor worker's environment tells the handler, as Lambda's runtime tells it: the memory size, from
which the executor reads the CPU share it fires under (``punctual.config.cpu_share``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from punctual.config.settings import Settings
from punctual.executing.dispatcher import QUOTA_SPIN_S
from punctual_tools.local.stack import executor_env
from punctual_tools.settings import LocalSettings
from support import call_worker_once

HANDLER = """
from punctual.config.cpu_share import detect_cpu_share
from punctual.executing.dispatcher import FireTiming

SHARE = detect_cpu_share()  # read at the cold start, as the executor reads it


def handler(event, context):
    return {"share": SHARE, "fire_spin_s": FireTiming.for_cpu_share(SHARE).final_spin_s}
"""


def test_an_executor_reads_its_memory_sizes_cpu_share_at_its_cold_start(tmp_path: Path, settings: Settings) -> None:
    # Given an executor worker started as the stack starts one, with 256 MB, and a handler that reads its CPU share
    # as it loads (where a cgroup's quota would still be the INIT's CPU)
    handler = tmp_path / "handler.py"
    handler.write_text(HANDLER)
    local = LocalSettings.model_validate({**settings.model_dump(), "fire_log_path": str(tmp_path / "fires.jsonl")})
    # When it is invoked
    result = call_worker_once(handler, executor_env(local, {}), {}, tmp_path / "worker.log")
    # Then it knows the share 256 MB buys, and fires as a quota allows: spinning only the quota's short spin
    assert result["share"] == pytest.approx(256 / 1769)
    assert result["fire_spin_s"] == QUOTA_SPIN_S
