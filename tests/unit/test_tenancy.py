"""Tenant names in keys (punctual.domain.tenancy) and the schedule item's key."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from punctual.config.settings import Settings
from punctual.config.tenant_map import Quotas, TenantMap, TenantPolicy, role_arn
from punctual.domain.model import SCHEDULE_NAME
from punctual.domain.tenancy import TENANT, interleave_by_tenant, is_tenant, qualify, split, unqualify
from punctual.errors import TargetRefusedError
from punctual.stores.dynamodb.codec import schedule_id_of_key, schedule_key
from punctual.targets import TargetRules
from punctual.targets.secrets import SecretRules

tenants = st.from_regex(rf"\A{TENANT}\Z").filter(is_tenant)
names = st.from_regex(rf"\A{SCHEDULE_NAME}\Z")


@given(tenants, names)
def test_a_qualified_id_splits_back(tenant: str, name: str) -> None:
    key = qualify(tenant, name)
    assert split(key) == (tenant, name)
    assert unqualify(tenant, key) == name
    assert unqualify(tenant + "x" if len(tenant) < 40 else "other", key) is None


@given(st.one_of(st.none(), tenants), names)
def test_a_schedule_key_starts_with_its_tenant_and_reads_back(tenant: str | None, name: str) -> None:
    schedule_id = name if tenant is None else qualify(tenant, name)
    key = schedule_key(schedule_id)
    assert key.startswith(f"{tenant}/#schedule#" if tenant else "#schedule#")
    assert schedule_id_of_key(key) == schedule_id
    assert schedule_id_of_key(schedule_id) is None  # a task's key is never read as a schedule's


@pytest.mark.parametrize("value", ["", "Acme", "-acme", "acme-", "ac--me", "a" * 41, "ac me", "acme/"])
def test_bad_tenant_names(value: str) -> None:
    assert not is_tenant(value)
    with pytest.raises(ValueError, match="not a tenant name"):
        qualify(value, "x")


def test_a_role_session_is_mapped_through_its_role() -> None:
    tenants = TenantMap.parse(
        '{"arn:aws:iam::123456789012:role/AcmeScheduler": "acme", "arn:aws:iam::123456789012:user/ci": "ci"}'
    )
    assert role_arn("arn:aws:sts::123456789012:assumed-role/AcmeScheduler/s-1") == (
        "arn:aws:iam::123456789012:role/AcmeScheduler"
    )
    assert tenants.tenant_of("arn:aws:sts::123456789012:assumed-role/AcmeScheduler/s-1") == "acme"
    assert tenants.tenant_of("arn:aws:iam::123456789012:user/ci") == "ci"
    assert tenants.tenant_of("arn:aws:sts::123456789012:assumed-role/Other/s-1") is None
    assert tenants.tenant_of("arn:aws:sts::999999999999:assumed-role/AcmeScheduler/s-1") is None
    assert tenants.tenant_of(None) is None
    assert TenantMap.parse("").tenant_of("arn:aws:iam::123456789012:user/ci") is None


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("{", "the tenant map is not JSON"),
        ("[]", "the tenant map must be a JSON object"),
        ('{"arn": 1}', "principals must be a JSON object"),
        ('{"arn": "Not A Tenant"}', "not tenant names: Not A Tenant"),
    ],
)
def test_a_bad_tenant_map_is_refused(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        TenantMap.parse(text)


def test_a_role_with_a_path_is_matched_by_its_sessions() -> None:
    # A role session's ARN names the role without its path: the map's entry is read without it too
    tenants = TenantMap.parse('{"arn:aws:iam::123456789012:role/service-role/team/AcmeScheduler": "acme"}')
    assert tenants.tenant_of("arn:aws:sts::123456789012:assumed-role/AcmeScheduler/s-1") == "acme"


# -- the tenant map's full form, and each tenant's rules ---------------------------------------------------------
FULL = json.dumps(
    {
        "principals": {"arn:aws:iam::123456789012:role/AcmeScheduler": "acme"},
        "tenants": {
            "acme": {
                "targets": ["127.0.0.1:9000", "hooks.acme.example"],
                "target_arns": ["arn:aws:sqs:us-east-1:123456789012:acme-orders"],
                "quotas": {"active_tasks": 50, "retry_attempts": 2},
            }
        },
        "quotas": {"schedules": 7},
    }
)


def test_the_full_form_carries_each_tenants_targets_and_quotas_over_the_defaults() -> None:
    # Given the full form  When it is read
    tenants = TenantMap.parse(FULL)
    # Then a principal maps as in the short form, a tenant's entry overrides the default quotas it names, and a
    # tenant without an entry gets public targets only and the defaults
    assert tenants.tenant_of("arn:aws:sts::123456789012:assumed-role/AcmeScheduler/s") == "acme"
    acme = tenants.policy_of("acme")
    assert acme.targets == ("127.0.0.1:9000", "hooks.acme.example")
    assert acme.target_arns == frozenset({"arn:aws:sqs:us-east-1:123456789012:acme-orders"})
    assert acme.quotas == Quotas(active_tasks=50, schedules=7, schedule_rate_per_s=10.0, retry_attempts=2)
    assert tenants.policy_of("beta") == TenantPolicy(quotas=Quotas(schedules=7))


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{"principals": {}, "extra": 1}', r"unknown key\(s\) extra"),
        ('{"tenants": {"Acme": {}}}', "not a tenant name: 'Acme'"),
        ('{"tenants": {"acme": {"targets": ["10.0.0.1/8"]}}}', "tenant acme: bad allowlist entry '10.0.0.1/8'"),
        ('{"tenants": {"acme": {"target_arns": ["arn:aws:sqs:*"]}}}', r"'arn:aws:sqs:\*' is not the exact ARN"),
        ('{"tenants": {"acme": {"quotas": {"tasks": 1}}}}', r"tenant acme: quotas: unknown quota\(s\) tasks"),
        ('{"quotas": {"active_tasks": -1}}', "quotas.active_tasks must be a non-negative integer"),
        ('{"quotas": {"schedules": 1.5}}', "quotas.schedules must be a non-negative integer"),
        ('{"quotas": {"retry_attempts": true}}', "quotas.retry_attempts must be a non-negative integer"),
        ('{"tenants": {"acme": {"colour": "red"}}}', r"tenant acme: unknown key\(s\) colour"),
        ('{"tenants": []}', "the tenant map's tenants must be a JSON object"),
    ],
)
def test_a_bad_full_form_is_refused_naming_what_is_wrong(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        TenantMap.parse(text)


def test_a_role_named_with_and_without_its_path_for_two_tenants_is_refused() -> None:
    # Both are read as the role's ARN without its path: which tenant it is would be a guess
    text = json.dumps(
        {"arn:aws:iam::123456789012:role/team/Acme": "acme", "arn:aws:iam::123456789012:role/Acme": "beta"}
    )
    with pytest.raises(ValueError, match="arn:aws:iam::123456789012:role/Acme is mapped to two tenants"):
        TenantMap.parse(text)


# -- a map split into parts --------------------------------------------------------------------------------------
def test_parts_are_read_as_one_map_whatever_their_forms() -> None:
    # Given a part in the short form, one in the full form with acme's entry, and one with the default quotas
    parts = {
        "/m/1": '{"arn:aws:iam::123456789012:role/Beta": "beta"}',
        "/m/2": json.dumps({"principals": {"arn:aws:iam::123456789012:role/Acme": "acme"}, "tenants": {"acme": {}}}),
        "/m/3": '{"quotas": {"schedules": 7}}',
    }
    # When they are read together  Then the map is the one map they make, the default quotas applying to every
    # part's tenants
    tenants = TenantMap.parse_parts(parts)
    assert tenants == TenantMap.parse(
        json.dumps(
            {
                "principals": {
                    "arn:aws:iam::123456789012:role/Beta": "beta",
                    "arn:aws:iam::123456789012:role/Acme": "acme",
                },
                "tenants": {"acme": {}},
                "quotas": {"schedules": 7},
            }
        )
    )
    assert tenants.policy_of("acme").quotas.schedules == 7


@pytest.mark.parametrize(
    ("second", "what"),
    [
        ('{"arn:aws:iam::123456789012:role/Acme": "beta"}', "principal arn:aws:iam::123456789012:role/Acme"),
        ('{"tenants": {"acme": {}}}', "tenant acme"),
        ('{"quotas": {}}', "default quotas"),
    ],
)
def test_what_two_parts_both_give_is_refused_naming_both(second: str, what: str) -> None:
    first = json.dumps(
        {"principals": {"arn:aws:iam::123456789012:role/Acme": "acme"}, "tenants": {"acme": {}}, "quotas": {}}
    )
    with pytest.raises(ValueError, match=f"^{what}: in both /m/a and /m/b$"):
        TenantMap.parse_parts({"/m/a": first, "/m/b": second})


@pytest.mark.parametrize("text", ["{", "[]", '{"tenants": []}', '{"principals": {}, "extra": 1}'])
def test_a_bad_part_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="^/m/bad: "):
        TenantMap.parse_parts({"/m/good": "{}", "/m/bad": text})


def test_a_tenants_rules_are_its_own_whatever_the_deployments() -> None:
    # Given a deployment allowing loopback on every port and one ARN, and acme's own entry
    base = TargetRules.from_settings(
        Settings(
            allowed_targets="127.0.0.1", allowed_target_arns="arn:aws:sqs:us-east-1:123456789012:ops", tenant_map=FULL
        )
    )
    acme, beta = base.of("acme/t-1"), base.of("beta/t-1")
    # Then a task without a tenant keeps the deployment's rules; acme's task only acme's port and ARN
    assert base.of("t-1") is base
    assert base.quotas is None
    assert base.urls.check_url("http://127.0.0.1:8000/").allowlisted
    assert acme.urls.check_url("http://127.0.0.1:9000/").allowlisted
    with pytest.raises(TargetRefusedError):
        acme.urls.check_url("http://127.0.0.1:8000/")  # another port of the same host
    assert acme.arns == frozenset({"arn:aws:sqs:us-east-1:123456789012:acme-orders"})
    # And beta (no entry) has no private target, no ARN; each tenant its own secret namespace and quotas
    with pytest.raises(TargetRefusedError):
        beta.urls.check_url("http://127.0.0.1:9000/")
    assert beta.arns == frozenset()
    assert acme.secrets.env_prefix == "PUNCTUAL_SECRET_TENANT_ACME__"
    assert beta.secrets.ssm_prefixes == ("/punctual/tenants/beta/",)
    assert acme.quotas is not None
    assert acme.quotas.retry_attempts == 2
    # And the same rules come back for the same tenant, from any of them
    assert acme.of("acme/other") is acme
    assert beta.of("acme/x") is acme
    assert acme.of("plain") is base


@given(tenants, tenants)
def test_no_tenants_secret_namespace_holds_anothers(first: str, second: str) -> None:
    # Given two different tenants  Then no name in one's namespace is in the other's, in any kind of reference
    if first == second:
        return
    one, other = SecretRules().for_tenant(first), SecretRules().for_tenant(second)
    assert not one.env_prefix.startswith(other.env_prefix)
    assert not other.env_prefix.startswith(one.env_prefix)
    assert not one.file_prefix.startswith(other.file_prefix)
    assert not one.ssm_prefixes[0].startswith(other.ssm_prefixes[0])
    assert not one.secretsmanager_prefixes[0].startswith(other.secretsmanager_prefixes[0])


def test_schedules_are_worked_a_tenant_at_a_time() -> None:
    # Given one tenant's many schedules found before another's few and an operator's
    ids = [f"acme/s-{i}" for i in range(5)] + ["beta/s-0", "beta/s-1", "ops"]
    # Then they are taken round robin: each tenant's first comes before anyone's second
    assert interleave_by_tenant(ids) == [
        "acme/s-0",
        "beta/s-0",
        "ops",
        "acme/s-1",
        "beta/s-1",
        "acme/s-2",
        "acme/s-3",
        "acme/s-4",
    ]
