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
``PUNCTUAL_TENANT_MAP`` setting (:class:`~punctual.config.tenant_map.TenantMap`); locally the API server maps its tokens
to tenants itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import zip_longest

# Lower-case letters and digits in words joined by single hyphens, at most 40 characters (a DNS label's shape), so
# that the secret names derived from a tenant's never overlap another's (SecretRules.for_tenant). The pattern
# bounds the length and the edges; "no double hyphen" is is_tenant's (the patterns of ids have no look-ahead).
TENANT = r"[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?"
TENANT_PATTERN = rf"^{TENANT}$"
SEPARATOR = "/"
_TENANT_RE = re.compile(TENANT_PATTERN)


def is_tenant(value: str) -> bool:
    return isinstance(value, str) and _TENANT_RE.fullmatch(value) is not None and "--" not in value


def check_tenant_part(key: str) -> str:
    """``key`` if the tenant it starts with (if any) is a tenant's name; ValueError otherwise (an id pattern lets
    a double hyphen through)."""
    tenant = split(key)[0]
    if tenant is not None and not is_tenant(tenant):
        raise ValueError(
            f"{tenant[:64]!r} is not a tenant name (lower-case letters and digits in words joined by "
            "single hyphens; at most 40)"
        )
    return key


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


def interleave_by_tenant(ids: Iterable[str]) -> list[str]:
    """``ids`` taken a tenant at a time, round robin (tenants in order of first appearance, the ids without one
    as one more): work done in this order gives each tenant its share however many ids another has."""
    groups: dict[str | None, list[str]] = {}
    for key in ids:
        groups.setdefault(split(key)[0], []).append(key)
    return [key for round_ in zip_longest(*groups.values()) for key in round_ if key is not None]
