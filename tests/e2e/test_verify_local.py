"""``punctual verify --quick`` end to end on the local stack, its SQS action sent to moto's server on loopback.

The stack's executors reach moto through boto3's ``AWS_ENDPOINT_URL_SQS`` (the stack passes it to its workers),
and may send only to the queue on ``PUNCTUAL_ALLOWED_TARGET_ARNS``, checked by the client, by the executor
when it fires, and (``PUNCTUAL_IAM_CHECK=1``) against the executor's role in template.yaml, whose
``ActionTargetArns`` the local stack takes from the same setting. What is asserted is correctness: the verdict,
the counts, the clean-up; never a timing.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from punctual_tools.cli import main
from punctual_tools.iam import live
from punctual_tools.local.stack import LocalStack, StackConfig
from punctual_tools.verify.plan import MixOptions

LOOPBACK_NTP = "127.0.0.1:9"  # the executors' NTP probe stays on the machine
MOTO_ACCOUNT = "123456789012"


@pytest.fixture
def own_iam_checks() -> Iterator[None]:
    """This test's IAM checks, for its own table: the process keeps one check per function, built for the first
    table it saw, so any from before are set aside, and this test's dropped (uninstalled) at its end."""
    saved = dict(live._checks)
    live._checks.clear()
    try:
        yield
    finally:
        for check in live._checks.values():
            check.uninstall()
        live._checks.clear()
        live._checks.update(saved)


@pytest.fixture
def moto_sqs() -> Iterator[str]:
    """moto's server on 127.0.0.1 (any free port): its endpoint URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def sqs_client(endpoint: str) -> Any:
    return boto3.client(
        "sqs", region_name="us-east-1", endpoint_url=endpoint, aws_access_key_id="x", aws_secret_access_key="x"
    )


def row(out: str, group: str) -> list[int]:
    """expected, arrived, missing, duplicates of ``group`` in the report's drift table."""
    match = re.search(rf"^\s+{re.escape(group)}\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s", out, re.MULTILINE)
    assert match is not None, out
    return [int(n) for n in match.groups()]


@pytest.mark.timeout(300)
def test_a_quick_verify_on_the_local_stack_finds_every_task_once_and_leaves_nothing(
    tmp_path: Path,
    fresh_table_name: str,
    moto_sqs: str,
    own_iam_checks: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    # Given moto's SQS on loopback, a queue name on the allowlist, and the local stack (polling every 2 s, its
    # executors judged against their role) whose executors send SQS calls to moto
    queue = f"punctual-verify-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("PUNCTUAL_ALLOWED_TARGET_ARNS", f"arn:aws:sqs:us-east-1:{MOTO_ACCOUNT}:{queue}")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto_sqs)
    monkeypatch.setenv("PUNCTUAL_DEFAULT_MISFIRE_GRACE_MS", "300000")  # a busy machine fires late, never MISSED
    monkeypatch.setenv("PUNCTUAL_NTP_SERVER", LOOPBACK_NTP)
    monkeypatch.setenv(live.ENABLE_VARIABLE, "1")
    config = StackConfig(
        home=tmp_path,
        port=0,
        poll_interval_s=2,
        prewarm=2,
        api=False,
        settings_overrides={"table_name": fresh_table_name, "ntp_server": None},
    )
    with LocalStack(config):
        # When punctual verify --quick runs against it
        code = main(["--home", str(tmp_path), "verify", "--quick"])
    out = capsys.readouterr().out

    # Then every task of every group arrived once, and the verdict says so
    quick = MixOptions.quick()
    assert code == 0, out
    assert "verdict: every task once" in out
    assert row(out, "spread") == [quick.spread, quick.spread, 0, 0]
    assert row(out, "burst") == [quick.burst, quick.burst, 0, 0]
    assert row(out, "short-lead") == [quick.short_leads, quick.short_leads, 0, 0]
    assert row(out, "recurring") == [quick.occurrences, quick.occurrences, 0, 0]
    total = quick.spread + quick.burst + quick.short_leads + quick.occurrences
    assert row(out, "all") == [total, total, 0, 0]
    # ... the cost is said to be unavailable, not made up
    assert "not available: a local stack has no CloudWatch" in out
    assert "$" not in out
    # ... and the queue is gone, its deletion reported
    assert f"queue {queue} deleted" in out
    assert sqs_client(moto_sqs).list_queues(QueueNamePrefix="punctual-verify").get("QueueUrls", []) == []
