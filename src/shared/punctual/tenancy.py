"""Tenants: who owns a task, and how the owner is written into its key.

A tenant's task ``invoice-42`` is stored as ``acme/invoice-42``, its schedule ``daily`` as
``acme/#schedule#daily`` and that schedule's occurrences as ``acme/daily@<instant>Z``: every key of a tenant's
items starts with ``<tenant>/``, so a client that writes the table directly can be confined to its own items
with IAM's ``dynamodb:LeadingKeys`` condition (``"acme/*"``; docs/deploy.md has the role). A task id given on its
own (no tenant: the direct client's default) has no ``/`` and belongs to no tenant; the API never shows it.

The API (:mod:`punctual.api`) names every task by its tenant-free id and qualifies it with the caller's tenant
before it touches the store, so another tenant's task is out of reach whatever id is asked for: the tenant-free
id pattern has no ``/``.

Who a caller is comes from API Gateway's IAM authentication (the principal's ARN), mapped to a tenant by the
``PUNCTUAL_TENANT_MAP`` setting (:class:`TenantMap`); locally the API server maps its tokens to tenants itself.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

TENANT = r"[a-z0-9][a-z0-9-]{0,39}"
TENANT_PATTERN = rf"^{TENANT}$"
SEPARATOR = "/"
_TENANT_RE = re.compile(TENANT_PATTERN)
# arn:aws:sts::<account>:assumed-role/<role>/<session> is the principal of a role's session
_ROLE_WITH_PATH_RE = re.compile(r"^(?P<head>arn:aws[a-z-]*:iam::\d{12}:)role/(?:[^/]+/)+(?P<name>[^/]+)$")
_ASSUMED_ROLE_RE = re.compile(r"^arn:(?P<partition>aws[a-z-]*):sts::(?P<account>\d{12}):assumed-role/(?P<role>[^/]+)/")


def is_tenant(value: str) -> bool:
    return _TENANT_RE.fullmatch(value) is not None


def qualify(tenant: str, name: str) -> str:
    """The stored id of a tenant's task or schedule ``name``."""
    if not is_tenant(tenant):
        raise ValueError(f"not a tenant name: {tenant!r}")
    return f"{tenant}{SEPARATOR}{name}"


def split(key: str) -> tuple[str | None, str]:
    """The tenant (None: none) and the tenant-free id of a stored id."""
    tenant, sep, name = key.partition(SEPARATOR)
    return (tenant, name) if sep else (None, key)


def unqualify(tenant: str, key: str) -> str | None:
    """The tenant-free id of ``key`` if ``tenant`` owns it, else None."""
    owner, name = split(key)
    return name if owner == tenant else None


def prefix(tenant: str) -> str:
    """What every stored id of ``tenant`` starts with."""
    return qualify(tenant, "")


def role_arn(principal_arn: str) -> str:
    """The IAM role ARN of a role session's principal (other principals unchanged): API Gateway reports the
    session (``arn:aws:sts::1:assumed-role/Name/session``), a tenant map names the role."""
    match = _ASSUMED_ROLE_RE.match(principal_arn)
    if match is None:
        return principal_arn
    return f"arn:{match['partition']}:iam::{match['account']}:role/{match['role']}"


def _without_path(arn: str) -> str:
    """A role's ARN without its path (``role/service/X`` -> ``role/X``): a role session's ARN, which is what
    API Gateway reports, names the role without it."""
    match = _ROLE_WITH_PATH_RE.match(arn)
    return f"{match['head']}role/{match['name']}" if match else arn


@dataclass(frozen=True)
class TenantMap:
    """Which principals belong to which tenant: IAM role or user ARNs (exact) to tenant names.

    Written as JSON in the ``PUNCTUAL_TENANT_MAP`` setting, for example
    ``{"arn:aws:iam::123456789012:role/AcmeScheduler": "acme"}``. A principal not in the map has no tenant:
    the API refuses it (403), whatever IAM allowed.
    """

    principals: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> TenantMap:
        if not text or not text.strip():
            return cls()
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the tenant map is not JSON: {exc.msg}") from exc
        if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
            raise ValueError("the tenant map must be a JSON object of principal ARN to tenant name")
        bad = sorted(v for v in raw.values() if not is_tenant(v))
        if bad:
            raise ValueError(f"not tenant names: {', '.join(bad)} (lower-case letters, digits, '-'; at most 40)")
        return cls(tuple(sorted((_without_path(k), v) for k, v in raw.items())))

    def tenant_of(self, principal_arn: str | None) -> str | None:
        if not principal_arn:
            return None
        found = dict(self.principals)
        return found.get(principal_arn) or found.get(role_arn(principal_arn))
