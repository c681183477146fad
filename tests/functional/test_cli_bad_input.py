"""``punctual schedule`` with bad arguments: a non-zero exit, one error line naming the field, no traceback,
nothing stored.

The CLI runs in-process (``punctual_tools.cli.main``) with ``--aws``: it builds its client from ``PUNCTUAL_*``
settings exactly as it does against AWS, and moto answers for AWS (the functional tier's table). What this
leaves out is only the lookup of a running local stack's state file, which picks the endpoint; argument
parsing, validation, the client's write and the error printing are the CLI's own code. An exception that
escapes ``main`` is what a user would see as a traceback, and fails the test as one.
"""

from __future__ import annotations

import json
import math
import os
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as fuzz_settings
from hypothesis import strategies as st
from moto import mock_aws

from punctual_tools.cli import main
from punctual_tools.template import ensure_table

fuzz = fuzz_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


TABLE = "punctual-cli-test"


@pytest.fixture(scope="module")
def moto_table() -> Iterator[Any]:
    """One moto Tasks table (from template.yaml) for the whole module: building it costs ~0.5 s, and every
    check below compares the item count before and after, so the tests need not start from an empty table."""
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        ensure_table(dynamodb, TABLE)
        yield dynamodb


@pytest.fixture
def stored(moto_table: Any) -> Any:
    """How many items the table holds now (consistent scan)."""
    return lambda: int(moto_table.scan(TableName=TABLE, Select="COUNT", ConsistentRead=True)["Count"])


@pytest.fixture
def cli(moto_table: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    """Run ``punctual --home <tmp> schedule <args> --aws`` against the moto table; returns a :class:`Run`."""
    for name in [n for n in os.environ if n.startswith("PUNCTUAL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PUNCTUAL_TABLE_NAME", TABLE)
    monkeypatch.setenv("PUNCTUAL_REGION", "us-east-1")

    def run(*args: str) -> Run:
        capsys.readouterr()
        try:
            code = main(["--home", str(tmp_path / "home"), "schedule", *args, "--aws"])
        except SystemExit as exc:  # argparse's own errors
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception as exc:  # noqa: BLE001 - what the user would see as a traceback
            pytest.fail(
                "traceback from punctual schedule: " + "".join(traceback.format_exception_only(type(exc), exc)).strip()
            )
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds")


def assert_refused(run: Run, *names: str) -> str:
    """Exit 2, nothing on stdout, one ``error:`` line that names ``names``, no traceback. Returns the line."""
    assert run.code == 2, run
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    assert len(run.lines) == 1, run.lines
    line = run.lines[0]
    assert line.startswith("error: "), line
    for name in names:
        assert name in line, (name, line)
    return line


# -- bad arguments, each refused naming its field --------------------------------------------------------------
def in_days(days: float) -> str:
    return iso(datetime.now(UTC) + timedelta(days=days))


BAD_ARGUMENTS = [
    pytest.param(["--at", "2030-06-01T12:00:00"], ["due_at", "naive"], id="naive-at"),
    pytest.param(["--at", "2030-06-01 12:00"], ["due_at", "naive"], id="naive-at-with-space"),
    pytest.param(["--at", "tomorrow"], ["--at", "ISO-8601"], id="at-not-a-time"),
    pytest.param(["--at", "2030-13-01T00:00:00Z"], ["--at"], id="at-month-13"),
    pytest.param(["--at", "2030-02-30T00:00:00Z"], ["--at"], id="at-february-30"),
    pytest.param(["--at", "10000-01-01T00:00:00Z"], ["--at"], id="at-year-10000"),
    pytest.param(["--at", "1700000000"], ["--at"], id="at-unix-seconds"),
    pytest.param(["--at", in_days(400)], ["due_at", "horizon"], id="at-beyond-horizon"),
    pytest.param(["--at", "2001-01-01T00:00:00Z"], ["due_at", "MISSED"], id="at-long-past"),
    pytest.param(["--in", "9000h"], ["due_at", "horizon"], id="in-beyond-horizon"),
    pytest.param(["--in", "5 minutes"], ["--in"], id="in-not-a-duration"),
    pytest.param(["--in", "3d"], ["--in"], id="in-unknown-unit"),
    pytest.param(["--in", "30s", "--http", "ftp://example.com/hook"], ["action.url"], id="http-ftp"),
    pytest.param(["--in", "30s", "--http", "javascript:alert(1)"], ["action.url"], id="http-javascript"),
    pytest.param(["--in", "30s", "--http", "example.com/hook"], ["action.url"], id="http-no-scheme"),
    pytest.param(["--in", "30s", "--http", "http://"], ["action.url"], id="http-empty-host"),
    pytest.param(["--in", "30s", "--http", "http://exa mple.com/"], ["action.url"], id="http-space-in-host"),
    pytest.param(["--in", "30s", "--http", "https://example.com:99999/"], ["action.url"], id="http-bad-port"),
    pytest.param(["--in", "30s", "--log", "x" * 1_001], ["action.message"], id="log-message-too-long"),
    pytest.param(["--in", "30s", "--payload", '{"a":'], ["--payload", "not JSON"], id="payload-truncated"),
    pytest.param(["--in", "30s", "--payload", "{'a': 1}"], ["--payload", "not JSON"], id="payload-python-repr"),
    pytest.param(["--in", "30s", "--payload", "hello"], ["--payload", "not JSON"], id="payload-bare-word"),
    pytest.param(
        ["--in", "30s", "--payload", json.dumps("x" * 300_000)], ["payload", str(256 * 1024)], id="payload-oversize"
    ),
    pytest.param(
        ["--in", "30s", "--payload", json.dumps({"k": "é" * 131_072})],
        ["payload", str(256 * 1024)],
        id="payload-oversize-in-utf8-bytes",
    ),
    pytest.param(["--in", "30s", "--payload", '"\\ud800"'], ["payload", "Unicode"], id="payload-lone-surrogate"),
    pytest.param(["--in", "30s", "--id", "has space"], ["task_id"], id="id-with-space"),
    pytest.param(["--in", "30s", "--id", "#poller-watermark"], ["task_id"], id="id-reserved"),
    pytest.param(["--in", "30s", "--id", "x" * 129], ["task_id"], id="id-too-long"),
    # Known bugs that the fuzz test below found, fixed since
    pytest.param(["--in", "100000000h"], ["due_at"], id="in-past-year-9999"),
    pytest.param(["--in", "99999999999999h"], ["due_at"], id="in-past-timedelta-max"),
    pytest.param(["--in", "9" * 400 + "s"], ["due_at"], id="in-400-digit-seconds"),
    pytest.param(["--at", "0001-01-01T00:00:00+01:00"], ["due_at"], id="at-year-1-east-of-utc"),
    pytest.param(["--at", "9999-12-31T23:59:59-01:00"], ["due_at"], id="at-year-9999-west-of-utc"),
    pytest.param(["--in", "30s", "--payload", "NaN"], ["payload"], id="payload-nan"),
    pytest.param(["--in", "30s", "--payload", "[Infinity]"], ["payload"], id="payload-infinity"),
    pytest.param(["--in", "30s", "--payload", '{"x": -Infinity}'], ["payload"], id="payload-minus-infinity"),
    pytest.param(["--in", "30s", "--payload", "1e999"], ["payload"], id="payload-overflowing-number"),
    pytest.param(["--in", "30s", "--payload", ""], ["--payload"], id="payload-empty"),
]


@pytest.mark.parametrize(("args", "names"), BAD_ARGUMENTS)
def test_bad_arguments_are_refused_naming_the_field(cli: Any, stored: Any, args: list[str], names: list[str]) -> None:
    # Given the table as it is
    before = stored()
    # When punctual schedule runs with one bad argument
    run = cli(*args)
    # Then it exits 2 with one error line naming the field, no traceback
    assert_refused(run, *names)
    # And nothing is stored
    assert stored() == before


ARGPARSE_ERRORS = [
    pytest.param(["--in", "30s", "--pigeon", "coo"], ["unrecognized arguments: --pigeon"], id="unknown-action-kind"),
    pytest.param(["--in", "30s", "--kind", "lambda"], ["unrecognized arguments: --kind"], id="kind-option"),
    pytest.param(
        ["--in", "30s", "--http", "https://example.com/", "--log", "hi"],
        ["--log", "not allowed"],
        id="two-action-kinds",
    ),
    pytest.param(["--log", "hi"], ["--at", "--in", "required"], id="no-due-time"),
    pytest.param(["--in", "-5s"], ["--in", "expected one argument"], id="negative-duration"),
    pytest.param(["--at", "2030-06-01T12:00:00Z", "--in", "30s"], ["--in", "not allowed"], id="two-due-times"),
]


@pytest.mark.parametrize(("args", "names"), ARGPARSE_ERRORS)
def test_arguments_the_parser_refuses_are_named_and_nothing_is_stored(
    cli: Any, stored: Any, args: list[str], names: list[str]
) -> None:
    # When punctual schedule gets an option it has no such action kind for (or a conflicting pair)
    before = stored()
    run = cli(*args)
    # Then argparse refuses it: exit 2, its usage line, then one error line naming the option; no traceback
    assert run.code == 2
    assert "Traceback" not in run.stderr
    errors = [line for line in run.lines if ": error: " in line]
    assert len(errors) == 1, run.lines
    assert errors[0] == run.lines[-1], run.lines
    assert all(line.startswith(("usage:", " ")) for line in run.lines[:-1]), run.lines
    for name in names:
        assert name in errors[0], (name, errors[0])
    # And nothing is stored
    assert stored() == before


def test_good_arguments_store_one_task(cli: Any, stored: Any) -> None:
    # Given valid arguments (the control case: the harness does store what is valid)
    before = stored()
    run = cli("--in", "30s", "--http", "https://example.com/hook", "--payload", '{"video": "v-1"}', "--id", "ok-1")
    # Then the task is printed as JSON and stored
    assert run.code == 0, run
    assert json.loads(run.stdout)["task_id"] == "ok-1"
    assert stored() == before + 1


# -- fuzz: whatever the text, one line and nothing stored, or one task stored --------------------------------
safe_instants = st.datetimes(
    min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=st.one_of(st.none(), st.timezones())
)  # years 1 / 9999: covered by a case above
at_texts = (
    st.text(max_size=30)
    | safe_instants.map(datetime.isoformat)
    | st.integers(min_value=-400, max_value=400).map(lambda d: in_days(d / 1.1))
)


def has_no_non_finite_number(text: str) -> bool:
    """False when ``text`` parses (Python's json) to a NaN or an infinity: covered by a case above."""
    try:
        value = json.loads(text)
    except ValueError:
        return True
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        stack.extend(item.values() if isinstance(item, dict) else item if isinstance(item, list) else [])
    return True


payload_texts = (
    st.text(min_size=1, max_size=30).filter(has_no_non_finite_number)  # "": pinned above
    | st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=10,
    ).map(json.dumps)
)


@fuzz
@given(at=at_texts, payload=payload_texts, message=st.text(max_size=40))
def test_any_text_is_either_one_stored_task_or_one_error_line(
    cli: Any, stored: Any, at: str, payload: str, message: str
) -> None:
    # Given a table holding some number of tasks
    before = stored()
    # When punctual schedule runs with arbitrary text for its time, payload and message
    # (the --name=value form, so that text starting with "-" is not taken for an option)
    run = cli(f"--at={at}", f"--payload={payload}", f"--log={message}")
    # Then either it stored exactly one task and printed it ...
    if run.code == 0:
        assert json.loads(run.stdout)["payload"] == json.loads(payload)
        assert stored() == before + 1
    # ... or it printed one error line (no traceback: that fails inside `cli`) and stored nothing
    else:
        assert_refused(run)
        assert stored() == before


# -- hostile targets (docs/targets.md: each row of its table names its test) --------------------------------
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:jobs"
HOSTILE_TARGETS = [
    pytest.param(
        ["--http", "http://169.254.169.254/latest/meta-data/"], ["action.url", "metadata"], id="metadata-http"
    ),
    pytest.param(["--http", "https://169.254.169.254/latest/meta-data/"], ["action.url", "metadata"], id="metadata"),
    pytest.param(
        ["--http", "https://[::ffff:169.254.169.254]/"], ["action.url", "not a public"], id="metadata-v6-mapped"
    ),
    pytest.param(["--http", "https://2852039166/"], ["action.url", "not a public"], id="metadata-decimal"),
    pytest.param(["--http", "https://0xa9fea9fe/"], ["action.url", "not a public"], id="metadata-hex"),
    pytest.param(["--http", "https://[fd00:ec2::254]/"], ["action.url", "not a public"], id="metadata-ipv6"),
    pytest.param(["--http", "https://127.0.0.1:22/"], ["action.url", "loopback"], id="loopback-ssh"),
    pytest.param(["--http", "https://0x7f.1/"], ["action.url", "loopback"], id="loopback-hex-short"),
    pytest.param(["--http", "https://2130706433/"], ["action.url", "loopback"], id="loopback-decimal"),
    pytest.param(["--http", "https://[::1]/"], ["action.url", "loopback"], id="loopback-v6"),
    pytest.param(["--http", "https://[::ffff:127.0.0.1]/"], ["action.url", "loopback"], id="loopback-v6-mapped"),
    pytest.param(["--http", "https://localhost:8000/"], ["action.url", "localhost"], id="localhost"),
    pytest.param(["--http", "https://10.0.0.5/"], ["action.url", "private"], id="private-10"),
    pytest.param(["--http", "https://172.16.3.4/"], ["action.url", "private"], id="private-172"),
    pytest.param(["--http", "https://192.168.1.1/"], ["action.url", "private"], id="private-192"),
    pytest.param(["--http", "https://100.64.0.1/"], ["action.url", "not a public"], id="cgnat"),
    pytest.param(["--http", "https://0.0.0.0/"], ["action.url", "not a public"], id="unspecified"),
    pytest.param(["--http", "https://user:pass@example.com/"], ["action.url", "credentials"], id="credentials"),
    pytest.param(["--http", "http://example.com/hook"], ["action.url", "https"], id="plain-http"),
    pytest.param(["--http", "https://example.com/" + "a" * 2_100], ["action.url", "2048"], id="url-too-long"),
    pytest.param(
        ["--http", "https://example.com/", "--header", "Host:internal"], ["action.headers", "Host"], id="header-host"
    ),
    pytest.param(
        ["--http", "https://example.com/", "--header", "Content-Length:0"],
        ["action.headers"],
        id="header-content-length",
    ),
    pytest.param(
        ["--http", "https://example.com/", "--header", "X-Amz-Target:DynamoDB_20120810.DeleteTable"],
        ["action.headers", "reserved"],
        id="header-x-amz",
    ),
    pytest.param(
        ["--http", "https://example.com/", "--header", "Idempotency-Key:forged"],
        ["action.headers", "reserved"],
        id="header-forged-key",
    ),
    pytest.param(
        ["--http", "https://example.com/", "--header", "X-Name:Zoë"], ["action.headers", "ASCII"], id="header-not-ascii"
    ),
    pytest.param(
        ["--http", "https://example.com/", "--header", "X-Big:" + "v" * 5_000], ["action.headers"], id="header-too-long"
    ),
    pytest.param(
        ["--http", "https://example.com/", "--secret-header", "Authorization=env:AWS_SECRET_ACCESS_KEY"],
        ["action.secret_headers", "PUNCTUAL_SECRET_"],
        id="secret-ref-outside-prefix",
    ),
    pytest.param(
        ["--http", "https://example.com/", "--sign-secret", "whsec_" + "A" * 40],
        ["action.signing_secret", "reference"],
        id="signing-secret-inline",
    ),
    pytest.param(["--sqs", QUEUE_ARN], ["action.queue_arn", "not an allowed target"], id="arn-not-allowlisted"),
    pytest.param(
        ["--lambda", "arn:aws:lambda:us-east-1:123456789012:function:*"], ["action.function_arn"], id="arn-wildcard"
    ),
]


@pytest.mark.parametrize(("args", "names"), HOSTILE_TARGETS)
def test_a_hostile_target_is_refused_and_nothing_is_stored(
    cli: Any, stored: Any, args: list[str], names: list[str]
) -> None:
    # Given the table as it is  When punctual schedule names a hostile target
    before = stored()
    run = cli("--in", "30s", *args)
    # Then it exits 2 with one line saying why, and nothing is stored
    assert_refused(run, *names)
    assert stored() == before


def test_a_loopback_receiver_allowed_by_configuration_is_accepted(
    cli: Any, stored: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given PUNCTUAL_ALLOWED_TARGETS=127.0.0.1 for the client (as for the stack)
    monkeypatch.setenv("PUNCTUAL_ALLOWED_TARGETS", "127.0.0.1")
    before = stored()
    # When a task names a plain-http loopback receiver  Then it is stored
    run = cli("--in", "30s", "--http", "http://127.0.0.1:8080/hook")
    assert run.code == 0, run
    assert stored() == before + 1
    # But another private address still is not
    assert_refused(cli("--in", "30s", "--http", "http://10.0.0.1/hook"), "action.url")


def test_an_allowlisted_queue_is_accepted(cli: Any, stored: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUNCTUAL_ALLOWED_TARGET_ARNS", QUEUE_ARN)
    before = stored()
    run = cli("--in", "30s", "--sqs", QUEUE_ARN, "--payload", '{"job": 1}')
    assert run.code == 0, run
    assert json.loads(run.stdout)["action"] == {"kind": "sqs", "queue_arn": QUEUE_ARN, "message_group_id": None}
    assert stored() == before + 1
