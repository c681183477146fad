"""Settings.from_env: PUNCTUAL_* variables in, one validated object out, or an error naming the variable."""

from __future__ import annotations

import pytest

from punctual.settings import Settings, SettingsError


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


def test_every_bad_variable_is_named() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"PUNCTUAL_SHARD_COUNT": "x", "PUNCTUAL_MAX_BATCH_SIZE": "0", "PUNCTUAL_LEAD_MS": "90000"})
    message = str(info.value)
    assert "PUNCTUAL_SHARD_COUNT" in message
    assert "PUNCTUAL_MAX_BATCH_SIZE" in message
    assert "PUNCTUAL_LEAD_MS" not in message.split(":")[0]


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(ValueError):
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
    assert Settings.from_env(background_cpus=" 1-3 ").background_cpus == "1-3"
    assert Settings.from_env(background_cpus="").background_cpus is None
    with pytest.raises(SettingsError, match="PUNCTUAL_BACKGROUND_CPUS"):
        Settings.from_env(background_cpus="one")
