"""Settings.from_env: PUNCTUAL_* variables in, one validated object out, or an error naming the variable.

Two models: ``Settings`` (what the Lambdas and the client load) and ``LocalSettings`` (the local runtime's,
which adds what only one machine needs). Every ``PUNCTUAL_*`` variable the code reads is a field of one of
them, and the wiring (``build_stores``) has no process-wide effect: the local worker applies the local-only ones.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

import boto3
import pytest
from pydantic import TypeAdapter

from punctual.config.settings import ENV_PREFIX, Settings
from punctual.errors import SettingsError
from punctual.executing import priority
from punctual.stores.dynamodb import build_stores
from punctual.targets import FireLog
from punctual_tools.local.invoker import LocalInvoker
from punctual_tools.local.lambda_rules import FunctionLimits
from punctual_tools.local.stack import settings_env
from punctual_tools.settings import LocalSettings

SRC = Path(__file__).resolve().parents[2] / "src"
LOCAL_ONLY = {
    "profile",
    "lambda_time_scale",
    "background_cpus",
    "realtime_firing",
    "fire_log_path",
    "dynamodb_java_opts",
    "local_timeout_s",
    "receiver_port",
    "store_latency",
    "store_latency_seed",
}
# A valid value, other than the default, for every field of both models (as a variable would give it).
SAMPLES = {
    "table_name": "tasks-dev",
    "region": "eu-west-1",
    "endpoint_url": "http://localhost:8000",
    "shard_count": "16",
    "lead_ms": "75000",
    "poll_interval_ms": "30000",
    "fast_path_margin_ms": "5000",
    "executor_lease_ms": "30000",
    "heartbeat_interval_ms": "4000",
    "arm_margin_ms": "20000",
    "overdue_safety_ms": "240000",
    "max_batch_size": "100",
    "executor_memory_mb": "512",
    "fire_cpu_us": "45.5",
    "executor_concurrency": "200",
    "poll_groups": "2",
    "redispatch_after_ms": "100000",
    "default_misfire_grace_ms": "1000",
    "max_horizon_days": "30",
    "max_payload_bytes": "1024",
    "ntp_server": "127.0.0.1:1123",
    "ntp_timeout_s": "0.25",
    "executor_function": "exec-dev",
    "worker_threads": "4",
    "db_threads": "2",
    "write_batch": "transaction",
    "retention_days": "7",
    "dead_letter_queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/dlq",
    "switch_interval_s": "0.002",
    "tenant_map": '{"arn:aws:iam::123456789012:role/Acme": "acme"}',
    "tenant_map_parameter": "/punctual-config/tenant-map",
    "tenant_map_cache_s": "30",
    "api_url": "https://api.example.com/prod",
    "api_token": "local-token",
    "background_cpus": "1-3",
    "fire_log_path": "/tmp/fires.jsonl",
    "dynamodb_java_opts": "-Xmx256m",
    "local_timeout_s": "60",
    "receiver_port": "9123",
    "realtime_firing": "false",
    "store_latency": "none",
    "store_latency_seed": "7",
    "profile": "local",
    "lambda_time_scale": "0.01",
    "allowed_targets": "127.0.0.1, 10.0.0.0/8, hooks.internal",
    "allow_plain_http": "true",
    "allowed_target_arns": "arn:aws:sqs:us-east-1:123456789012:q,arn:aws:lambda:us-east-1:123456789012:function:f",
    "secrets_dir": "/run/secrets",
    "secret_cache_s": "60",
    "http_connections": "100",
    "http_connections_per_host": "50",
}


def test_defaults_without_any_variable() -> None:
    settings = Settings.from_env({})
    assert settings == Settings()
    assert settings.table_name == "punctual-tasks"
    assert settings.shard_count == 4
    assert settings.lead_ms == 90_000


def test_reads_punctual_variables() -> None:
    # Given a few PUNCTUAL_* variables, and others that are not ours
    env = {
        "PUNCTUAL_TABLE_NAME": "tasks-dev",
        "PUNCTUAL_SHARD_COUNT": "16",
        "PUNCTUAL_NTP_TIMEOUT_S": "0.25",
        "PUNCTUAL_NTP_SERVER": "127.0.0.1:1123",
        "PUNCTUAL_ENDPOINT_URL": "http://localhost:8000",
        "SHARD_COUNT": "99",
        "PUNCTUAL_": "x",
    }
    # When settings are built from them
    settings = Settings.from_env(env)
    # Then each is read and converted to its type
    assert settings.table_name == "tasks-dev"
    assert settings.shard_count == 16
    assert settings.ntp_timeout_s == 0.25
    assert settings.ntp_server == "127.0.0.1:1123"
    assert settings.endpoint_url == "http://localhost:8000"


def test_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUNCTUAL_MAX_BATCH_SIZE", "7")
    assert Settings.from_env().max_batch_size == 7


def test_empty_variable_means_default() -> None:
    assert Settings.from_env({"PUNCTUAL_SHARD_COUNT": ""}).shard_count == 4


def test_overrides_win_over_the_environment_and_none_is_ignored() -> None:
    settings = Settings.from_env({"PUNCTUAL_SHARD_COUNT": "16"}, shard_count=2, lead_ms=None)
    assert settings.shard_count == 2
    assert settings.lead_ms == 90_000


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PUNCTUAL_SHARD_COUNT", "many"),
        ("PUNCTUAL_SHARD_COUNT", "0"),
        ("PUNCTUAL_LEAD_MS", "100"),
        ("PUNCTUAL_NTP_TIMEOUT_S", "-1"),
        ("PUNCTUAL_TABLE_NAME", "ab"),
        ("PUNCTUAL_OVERDUE_SAFETY_MS", "1000"),
    ],
)
def test_bad_value_raises_settings_error_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({name: value})
    assert name in str(info.value)
    assert isinstance(info.value, ValueError)


def test_poll_groups_must_divide_the_shard_count() -> None:
    # Given 4 shards / Then 1, 2 and 4 groups are accepted, and 3 is refused with both settings named
    assert [Settings.from_env({"PUNCTUAL_POLL_GROUPS": str(g)}).poll_groups for g in (1, 2, 4)] == [1, 2, 4]
    with pytest.raises(SettingsError, match=r"poll_groups \(3\) must divide shard_count \(4\)") as info:
        Settings.from_env({"PUNCTUAL_POLL_GROUPS": "3"})
    # (CloudFormation's rules cannot divide: a deploy that breaks it fails the poller's cold start, with this message)
    assert info.value.names == ("PUNCTUAL_POLL_GROUPS", "PUNCTUAL_SHARD_COUNT")


@pytest.mark.parametrize(("interval", "margin", "lead"), [(60_000, 10_000, 70_000), (10_000, 10_000, 20_000)])
def test_the_lead_must_cover_a_poll_interval_and_the_fast_path_margin(interval: int, margin: int, lead: int) -> None:
    # Given a poll interval and a fast-path margin  Then a lead of their sum is accepted, one ms less is refused
    # with the three settings named (a task the poll dispatches could otherwise go out less than the margin ahead)
    def env(lead_ms: int) -> dict[str, str]:
        return {
            "PUNCTUAL_POLL_INTERVAL_MS": str(interval),
            "PUNCTUAL_FAST_PATH_MARGIN_MS": str(margin),
            "PUNCTUAL_LEAD_MS": str(lead_ms),
        }

    assert Settings.from_env(env(lead)).lead_ms == lead
    with pytest.raises(SettingsError, match=rf"lead_ms \({lead - 1}\) must be at least poll_interval_ms") as info:
        Settings.from_env(env(lead - 1))
    assert info.value.names == ("PUNCTUAL_LEAD_MS", "PUNCTUAL_POLL_INTERVAL_MS", "PUNCTUAL_FAST_PATH_MARGIN_MS")


def test_every_bad_variable_is_named() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"PUNCTUAL_SHARD_COUNT": "x", "PUNCTUAL_MAX_BATCH_SIZE": "0", "PUNCTUAL_LEAD_MS": "90000"})
    message = str(info.value)
    assert "PUNCTUAL_SHARD_COUNT" in message
    assert "PUNCTUAL_MAX_BATCH_SIZE" in message
    assert "PUNCTUAL_LEAD_MS" not in message.split(":", maxsplit=1)[0]


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(ValueError, match="Instance is frozen"):
        settings.shard_count = 8  # type: ignore[misc]


@pytest.mark.parametrize("value", ["", "off", "OFF", "none", " off "])
def test_ntp_can_be_switched_off_from_the_environment(value: str) -> None:
    assert Settings.from_env({"PUNCTUAL_NTP_SERVER": value}).ntp_server is None


def test_ntp_can_be_switched_off_by_override_or_argument() -> None:
    assert Settings.from_env({"PUNCTUAL_NTP_SERVER": "pool.ntp.org"}, ntp_server=None).ntp_server is None
    assert Settings(ntp_server="off").ntp_server is None
    assert Settings().ntp_server == "time.aws.com"
    assert Settings.from_env({}).ntp_server == "time.aws.com"


def test_background_cpus_is_checked_when_the_settings_load() -> None:
    assert LocalSettings.from_env({}, background_cpus=" 1-3 ").background_cpus == "1-3"
    assert LocalSettings.from_env({}, background_cpus="").background_cpus is None
    with pytest.raises(SettingsError, match="PUNCTUAL_BACKGROUND_CPUS"):
        LocalSettings.from_env({}, background_cpus="one")


# -- every variable through one of the two models ------------------------------------------------------------
def test_the_samples_cover_every_field_of_both_models() -> None:
    # Given the sample values below  Then there is one for every field (a new field gets one, and is tested)
    assert set(SAMPLES) == set(LocalSettings.model_fields)


@pytest.mark.parametrize("field", sorted(SAMPLES))
def test_each_variable_is_read_into_its_field(field: str) -> None:
    # Given PUNCTUAL_<FIELD> set to a valid value that is not the default
    env = {ENV_PREFIX + field.upper(): SAMPLES[field]}
    default = LocalSettings().model_dump()[field]
    # When the local settings are read
    value = LocalSettings.from_env(env).model_dump()[field]
    # Then the field holds it, converted to its type
    assert value != default
    assert str(value) == SAMPLES[field] or value == TypeAdapter(type(value)).validate_python(SAMPLES[field])
    # And the Lambdas' model reads it too, unless it is local-only (then it ignores the variable)
    if field in LOCAL_ONLY:
        assert field not in Settings.model_fields
        assert Settings.from_env(env) == Settings()
    else:
        assert getattr(Settings.from_env(env), field) == value


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PUNCTUAL_SWITCH_INTERVAL_S", "0"),
        ("PUNCTUAL_SWITCH_INTERVAL_S", "fast"),
        ("PUNCTUAL_DEAD_LETTER_QUEUE_URL", "/tmp/dlq.jsonl"),
        ("PUNCTUAL_DEAD_LETTER_QUEUE_URL", "file://host/dlq.jsonl"),
        ("PUNCTUAL_DEAD_LETTER_QUEUE_URL", "sqs:dlq"),
        ("PUNCTUAL_LOCAL_TIMEOUT_S", "-1"),
        ("PUNCTUAL_LOCAL_TIMEOUT_S", "901"),
        ("PUNCTUAL_BACKGROUND_CPUS", "3-1"),
        ("PUNCTUAL_TENANT_MAP", "not json"),
        ("PUNCTUAL_TENANT_MAP", '["acme"]'),
        ("PUNCTUAL_TENANT_MAP", '{"arn:aws:iam::123456789012:role/Acme": "Acme Corp"}'),
        ("PUNCTUAL_TENANT_MAP_CACHE_S", "0"),
        ("PUNCTUAL_TENANT_MAP_CACHE_S", "3601"),
    ],
)
def test_a_bad_new_variable_is_named(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as info:
        LocalSettings.from_env({name: value})
    assert name in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "https://sqs.us-east-1.amazonaws.com/123456789012/dlq",
        "http://localhost:4566/000000000000/dlq",
        "file:///var/punctual/stores/dlq.jsonl",
        "file:///tmp/dead%20letters/dlq.jsonl",
    ],
)
def test_a_dead_letter_queue_is_an_sqs_url_or_a_local_file_url(url: str) -> None:
    assert Settings.from_env({"PUNCTUAL_DEAD_LETTER_QUEUE_URL": url}).dead_letter_queue_url == url


def test_the_local_only_fields_are_not_in_what_the_lambdas_load() -> None:
    # Given the two models  Then LocalSettings adds exactly the local-only fields to Settings
    assert set(LocalSettings.model_fields) - set(Settings.model_fields) == LOCAL_ONLY
    assert set(Settings.model_fields) <= set(LocalSettings.model_fields)
    # And Settings refuses them as overrides, naming the variable
    with pytest.raises(SettingsError, match="PUNCTUAL_FIRE_LOG_PATH"):
        Settings.from_env({}, fire_log_path="/tmp/fires.jsonl")


def test_settings_env_round_trips_through_both_models() -> None:
    # Given local settings with every field set (the tenant map once: in the variable, not in Parameter Store too),
    # and NTP off
    env = {ENV_PREFIX + k.upper(): v for k, v in SAMPLES.items() if k != "tenant_map_parameter"}
    local = LocalSettings.from_env(env, ntp_server=None)
    # When they are turned into a worker's environment and read back
    env = settings_env(local)
    # Then the worker reads the same local settings, and its handler the Settings part of them
    assert LocalSettings.from_env(env) == local
    assert Settings.from_env(env) == Settings.model_validate(local.model_dump(include=set(Settings.model_fields)))


# A PUNCTUAL_* variable read by name: ``environ.get("PUNCTUAL_…")``, ``getenv("PUNCTUAL_…")``, or
# ``environ["PUNCTUAL_…"]`` not assigned to (a tool may write one for the settings of a process it starts)
READ_BY_NAME = re.compile(
    r"""(environ\.get|getenv)\(\s*["']PUNCTUAL_|environ\[\s*["']PUNCTUAL_\w*["']\s*\](?!\s*=[^=])"""
)


def test_a_read_of_a_variable_is_told_from_a_write() -> None:
    # Given reads and writes of a PUNCTUAL_* variable  Then only the reads are found
    reads = ['os.environ.get("PUNCTUAL_X")', "os.getenv('PUNCTUAL_X')", 'f(os.environ["PUNCTUAL_X"])']
    reads.append('os.environ["PUNCTUAL_X"] == "1"')
    writes = ['os.environ["PUNCTUAL_X"] = "1"', 'os.environ.update(PUNCTUAL_X="1")']
    assert [bool(READ_BY_NAME.search(line)) for line in reads + writes] == [True] * len(reads) + [False] * len(writes)


def test_no_punctual_variable_is_read_outside_the_settings_models() -> None:
    # Given every source file  Then none reads a PUNCTUAL_* variable from the environment by name
    sources = SRC.rglob("*.py")
    offenders = [str(path.relative_to(SRC)) for path in sources if READ_BY_NAME.search(path.read_text("utf-8"))]
    assert offenders == []


# -- no process-wide effect in the wiring; the local worker applies the local-only settings ------------------
def test_build_store_leaves_cpu_confinement_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a process whose background work is confined to CPU 0 (as the local stack may have set)
    monkeypatch.setattr(priority, "_background_cpus", frozenset({0}))
    client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    # When the store is built (no request is sent)
    build_stores(Settings(), client)
    # Then the confinement is as it was
    assert priority._background_cpus == frozenset({0})  # the module's state is what is under test


HANDLER = """
from punctual.executing import priority
from punctual.targets import FireLog

AT_LOAD = {"cpus": sorted(priority._background_cpus or []), "fire_log": FireLog._path,
           "realtime": priority._realtime_firing}


def handler(event, context):
    return {**AT_LOAD, "function": context.function_name, "remaining_ms": context.get_remaining_time_in_millis(),
            "memory_mb": context.memory_limit_in_mb}
"""


@pytest.mark.timeout(60)
def test_the_local_worker_applies_the_local_settings_before_it_loads_the_handler(tmp_path: Path) -> None:
    # Given a handler that reports the CPU confinement and fire log it found when it loaded, behind a local
    # invoker whose workers get local settings as PUNCTUAL_* variables
    usable = sorted(os.sched_getaffinity(0))
    settings = LocalSettings(
        background_cpus=str(usable[-1]),
        fire_log_path=str(tmp_path / "fires.jsonl"),
        executor_function="exec-local",
        ntp_server=None,
    )
    handler = tmp_path / "report_handler.py"
    handler.write_text(HANDLER)
    results: list[dict[str, Any]] = []
    done = threading.Event()

    def on_result(_event: dict[str, Any], result: dict[str, Any]) -> None:
        results.append(result)
        done.set()

    invoker = LocalInvoker(
        handler,
        settings_env(settings),
        log_file=tmp_path / "worker.log",
        prewarm=0,
        limits=FunctionLimits("ExecutorFunction", memory_mb=256, timeout_s=60, max_retry_attempts=0),
        on_result=on_result,
    )
    try:
        # When one event is invoked
        invoker.invoke_async({"batch_id": "b-1"})
        assert done.wait(45), (tmp_path / "worker.log").read_text() if (tmp_path / "worker.log").exists() else ""
    finally:
        invoker.shutdown(timeout=10)
    # Then the worker had confined background work and opened the fire log before the handler loaded, left
    # real-time firing off (the lambda profile, the default), and gives the handler the function name from the
    # settings and the timeout and memory size of its limits
    (result,) = results
    assert result["cpus"] == [usable[-1]]
    assert result["fire_log"] == str(tmp_path / "fires.jsonl")
    assert result["realtime"] is False
    assert result["function"] == "exec-local"
    assert 0 < result["remaining_ms"] <= 60_000
    assert result["memory_mb"] == 256
    # And this process's own state was left alone
    assert FireLog._path != str(tmp_path / "fires.jsonl")


def test_the_profile_decides_real_time_firing_and_the_lambda_profile_refuses_it() -> None:
    # Given no real-time setting  Then the lambda profile (the default) fires at normal priority, the local one
    # real-time; either may turn it off
    assert LocalSettings.from_env({}).profile == "lambda"
    assert LocalSettings.from_env({}).firing_realtime is False
    assert LocalSettings.from_env({ENV_PREFIX + "PROFILE": "local"}).firing_realtime is True
    assert LocalSettings.from_env({ENV_PREFIX + "PROFILE": "local"}, realtime_firing=False).firing_realtime is False
    # And asking for it under the lambda profile is refused, naming the variable (Lambda gives none)
    with pytest.raises(SettingsError, match="PUNCTUAL_REALTIME_FIRING"):
        LocalSettings.from_env({ENV_PREFIX + "REALTIME_FIRING": "true"})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("allowed_targets", "10.0.0.1/8"),
        ("allowed_target_arns", "arn:aws:sqs:us-east-1:123456789012:*"),
        ("allowed_target_arns", "*"),
        ("allowed_target_arns", "arn:aws:dynamodb:us-east-1:123456789012:table/t"),
    ],
)
def test_a_bad_target_allowlist_is_refused_naming_its_variable(name: str, value: str) -> None:
    # Given an allowlist entry that is not a host, address or CIDR / not the exact ARN of a target
    # When settings load  Then they fail, naming the variable
    with pytest.raises(SettingsError, match=ENV_PREFIX + name.upper()):
        Settings.from_env({ENV_PREFIX + name.upper(): value})


# -- the tenant map in Parameter Store ----------------------------------------------------------------------------
def test_the_tenant_map_in_both_the_variable_and_a_parameter_is_refused_naming_both() -> None:
    env = {
        "PUNCTUAL_TENANT_MAP": '{"arn:aws:iam::123456789012:role/Acme": "acme"}',
        "PUNCTUAL_TENANT_MAP_PARAMETER": "/punctual-config/tenant-map",
    }
    with pytest.raises(SettingsError, match="both set") as info:
        Settings.from_env(env)
    assert info.value.names == ("PUNCTUAL_TENANT_MAP", "PUNCTUAL_TENANT_MAP_PARAMETER")
    # And either alone is read
    assert Settings.from_env({"PUNCTUAL_TENANT_MAP_PARAMETER": env["PUNCTUAL_TENANT_MAP_PARAMETER"]}).tenant_map == ""
    assert Settings.from_env({"PUNCTUAL_TENANT_MAP": env["PUNCTUAL_TENANT_MAP"]}).tenant_map_parameter is None


@pytest.mark.parametrize(
    "name", ["tenant-map", "/punctual-config/tenant-map", "/punctual-config/tenants/", "/a.b_c-d/e", "/punctual/map"]
)
def test_a_parameter_name_or_a_path_is_accepted(name: str) -> None:
    assert Settings.from_env({"PUNCTUAL_TENANT_MAP_PARAMETER": name}).tenant_map_parameter == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("tenant map", "not a Parameter Store name"),
        ("/tenants/*", "not a Parameter Store name"),
        ("/" + "a" * 1011, "not a Parameter Store name"),
        ("config/tenant-map", "starts with '/'"),
        ("/config//tenant-map", "none empty"),
        ("/", "none empty"),
        ("/" + "/".join("abcdefghijklmnop"), "1 to 15 levels"),
        ("/aws/tenant-map", "cannot start with aws or ssm"),
        ("SSM-tenant-map", "cannot start with aws or ssm"),
        ("/punctual/tenants/map", "where tenants' tasks may read secrets"),
        ("/punctual/tenants/", "where tenants' tasks may read secrets"),
    ],
)
def test_a_bad_parameter_name_is_refused_saying_why(name: str, why: str) -> None:
    with pytest.raises(SettingsError, match="PUNCTUAL_TENANT_MAP_PARAMETER") as info:
        Settings.from_env({"PUNCTUAL_TENANT_MAP_PARAMETER": name})
    assert why in str(info.value)


def test_the_redispatch_hold_back_is_at_least_a_lead() -> None:
    # Given a hold-back shorter than the lead (a throttled tick would send again what the last one sent)
    # Then it is refused; a lead or more, or 0 (always send), is taken
    with pytest.raises(SettingsError, match="redispatch_after_ms"):
        Settings.from_env({ENV_PREFIX + "REDISPATCH_AFTER_MS": "30000", ENV_PREFIX + "LEAD_MS": "90000"})
    assert Settings(redispatch_after_ms=90_000, lead_ms=90_000).redispatch_after_ms == 90_000
    assert Settings(redispatch_after_ms=0).redispatch_after_ms == 0
    assert Settings().redispatch_hold_back_ms == Settings().lead_ms
    assert Settings(lead_ms=180_000).redispatch_hold_back_ms == 180_000
