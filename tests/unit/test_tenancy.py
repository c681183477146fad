"""Tenant names in keys (punctual.tenancy) and the schedule item's key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from punctual.dynamodb.schedules import schedule_id_of_key, schedule_key
from punctual.model import SCHEDULE_NAME, TENANT
from punctual.tenancy import TenantMap, is_tenant, qualify, role_arn, split, unqualify

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
    with pytest.raises(ValueError):
        qualify(value, "x")


def test_a_role_session_is_mapped_through_its_role() -> None:
    tenants = TenantMap.parse('{"arn:aws:iam::123456789012:role/AcmeScheduler": "acme", '
                              '"arn:aws:iam::123456789012:user/ci": "ci"}')
    assert role_arn("arn:aws:sts::123456789012:assumed-role/AcmeScheduler/s-1") == (
        "arn:aws:iam::123456789012:role/AcmeScheduler")
    assert tenants.tenant_of("arn:aws:sts::123456789012:assumed-role/AcmeScheduler/s-1") == "acme"
    assert tenants.tenant_of("arn:aws:iam::123456789012:user/ci") == "ci"
    assert tenants.tenant_of("arn:aws:sts::123456789012:assumed-role/Other/s-1") is None
    assert tenants.tenant_of("arn:aws:sts::999999999999:assumed-role/AcmeScheduler/s-1") is None
    assert tenants.tenant_of(None) is None
    assert TenantMap.parse("").tenant_of("arn:aws:iam::123456789012:user/ci") is None


@pytest.mark.parametrize("text", ["{", "[]", '{"arn": 1}', '{"arn": "Not A Tenant"}'])
def test_a_bad_tenant_map_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        TenantMap.parse(text)


def test_a_role_with_a_path_is_matched_by_its_sessions() -> None:
    # A role session's ARN names the role without its path: the map's entry is read without it too
    tenants = TenantMap.parse('{"arn:aws:iam::123456789012:role/service-role/team/AcmeScheduler": "acme"}')
    assert tenants.tenant_of("arn:aws:sts::123456789012:assumed-role/AcmeScheduler/s-1") == "acme"
