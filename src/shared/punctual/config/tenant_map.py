"""The tenant map: which principals belong to which tenant, and each tenant's targets and quotas.

Written as JSON (:class:`TenantMap`) in the ``PUNCTUAL_TENANT_MAP`` setting or in Parameter Store
(:mod:`punctual.config.tenant_source` reads it from there); how a tenant is written into the keys of its items is
:mod:`punctual.domain.tenancy`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from punctual.domain.tenancy import is_tenant
from punctual.network.policy import Allowlist, check_target_arn

# arn:aws:sts::<account>:assumed-role/<role>/<session> is the principal of a role's session
_ROLE_WITH_PATH_RE = re.compile(r"^(?P<head>arn:aws[a-z-]*:iam::\d{12}:)role/(?:[^/]+/)+(?P<name>[^/]+)$")
_ASSUMED_ROLE_RE = re.compile(r"^arn:(?P<partition>aws[a-z-]*):sts::(?P<account>\d{12}):assumed-role/(?P<role>[^/]+)/")


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


QUOTA_FIELDS = ("active_tasks", "schedules", "schedule_rate_per_s", "retry_attempts")


@dataclass(frozen=True, slots=True)
class Quotas:
    """What one tenant may hold and make Punctual do.

    ``active_tasks``: tasks (occurrences included) PENDING or ARMED at once; ``schedules``: recurring schedules
    not deleted; ``schedule_rate_per_s``: the fires per second its active schedules add up to (a ``rate(...)``
    counts its own rate, a ``cron(...)`` one a minute, an ``at(...)`` none); ``retry_attempts``: the most
    attempts a task's retry policy may make (the executor never makes more, whatever an item says).
    """

    active_tasks: int = 100_000
    schedules: int = 1_000
    schedule_rate_per_s: float = 10.0
    retry_attempts: int = 5

    @classmethod
    def parse(cls, raw: object, base: Quotas | None = None, where: str = "quotas") -> Quotas:
        """Quotas from a JSON object, each field given overriding ``base`` (the defaults when None)."""
        base = base or cls()
        if not isinstance(raw, dict):
            raise ValueError(f"{where} must be a JSON object of {', '.join(QUOTA_FIELDS)}")
        unknown = sorted(set(raw) - set(QUOTA_FIELDS))
        if unknown:
            raise ValueError(
                f"{where}: unknown quota(s) {', '.join(map(str, unknown))} (known: {', '.join(QUOTA_FIELDS)})"
            )
        values: dict[str, int | float] = {}
        for name in QUOTA_FIELDS:
            value = raw.get(name, getattr(base, name))
            number_ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not number_ok or value < 0 or (name != "schedule_rate_per_s" and not float(value).is_integer()):
                kind = "number" if name == "schedule_rate_per_s" else "integer"
                raise ValueError(f"{where}.{name} must be a non-negative {kind}")
            values[name] = float(value) if name == "schedule_rate_per_s" else int(value)
        return cls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """One tenant's entry of the tenant map: where its tasks may go and its quotas.

    ``targets``: allowlist entries for its webhooks (``host:port``, ``*.suffix:port``, ``10.0.0.0/8:443``; see
    :class:`~punctual.network.policy.Allowlist`): public https targets need none. ``target_arns``: the exact ARNs its
    Lambda, SQS, SNS and EventBridge actions may target. A tenant's tasks never use the deployment-wide lists,
    which are for tasks without a tenant.
    """

    targets: tuple[str, ...] = ()
    target_arns: frozenset[str] = frozenset()
    quotas: Quotas = field(default_factory=Quotas)


@dataclass(frozen=True)
class TenantMap:
    """The tenants: which principals belong to which tenant, and each tenant's targets and quotas.

    Written as JSON in the ``PUNCTUAL_TENANT_MAP`` setting or a Parameter Store parameter
    (``PUNCTUAL_TENANT_MAP_PARAMETER``), in one of two forms. The short one maps IAM role or
    user ARNs (exact) to tenant names, every tenant with the default policy::

        {"arn:aws:iam::123456789012:role/AcmeScheduler": "acme"}

    The full one adds each tenant's :class:`TenantPolicy` and the default quotas::

        {"principals": {"arn:aws:iam::123456789012:role/AcmeScheduler": "acme"},
         "tenants": {"acme": {"targets": ["hooks.acme.example:443"],
                              "target_arns": ["arn:aws:sqs:eu-west-1:123456789012:acme-orders"],
                              "quotas": {"active_tasks": 50000}}},
         "quotas": {"schedules": 200}}

    A principal not in the map has no tenant: the API refuses it (403), whatever IAM allowed. A tenant without
    an entry in ``tenants`` may reach public https targets only, no ARN, with the default quotas.
    """

    principals: tuple[tuple[str, str], ...] = ()
    tenants: tuple[tuple[str, TenantPolicy], ...] = ()
    quotas: Quotas = field(default_factory=Quotas)

    @classmethod
    def parse(cls, text: str | None) -> TenantMap:
        """The map written as ``text``, in either form (blank: no tenants); ValueError saying what is wrong."""
        if not text or not text.strip():
            return cls()
        return cls._build(_full_form(_load(text)))

    @classmethod
    def parse_parts(cls, parts: Mapping[str, str]) -> TenantMap:
        """One map from several texts, each a map in either form, keyed by where it was read (a parameter's name):
        a map too large for one place, split. Their principals and tenants are put together and read as one map
        (the default quotas apply to every part's tenants). A principal or a tenant in two parts, or default quotas
        in more than one, is a ValueError naming both parts: which should win is not the reader's to guess."""
        merged: dict[str, dict[str, object]] = {"principals": {}, "tenants": {}, "quotas": {}}
        found_in: dict[tuple[str, str], str] = {}
        for where, text in parts.items():
            try:
                raw = _full_form(_load(text))
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            for section, entries in raw.items():
                # the default quotas are one entry: a part gives them all, or none
                named = {"default quotas": entries} if section == "quotas" else entries
                if not isinstance(named, dict):
                    raise ValueError(f"{where}: the tenant map's {section} must be a JSON object")
                for key, value in named.items():
                    first = found_in.setdefault((section, key), where)
                    if first != where:
                        what = key if section == "quotas" else f"{section.removesuffix('s')} {key}"
                        raise ValueError(f"{what}: in both {first} and {where}")
                    merged[section][key] = value
        quotas = merged.pop("quotas")
        return cls._build({**merged, **({"quotas": quotas["default quotas"]} if quotas else {})})

    @classmethod
    def _build(cls, raw: dict[str, object]) -> TenantMap:
        defaults = Quotas.parse(raw.get("quotas", {}))
        tenants = raw.get("tenants", {})
        if not isinstance(tenants, dict):
            raise ValueError("the tenant map's tenants must be a JSON object of tenant name to its policy")
        return cls(
            _principals(raw.get("principals", {})),
            tuple(sorted((name, _policy(name, entry, defaults)) for name, entry in tenants.items())),
            defaults,
        )

    @cached_property
    def _tenant_by_principal(self) -> dict[str, str]:
        return dict(self.principals)

    @cached_property
    def _policy_by_tenant(self) -> dict[str, TenantPolicy]:
        return dict(self.tenants)

    def tenant_of(self, principal_arn: str | None) -> str | None:
        if not principal_arn:
            return None
        found = self._tenant_by_principal
        return found.get(principal_arn) or found.get(role_arn(principal_arn))

    def policy_of(self, tenant: str) -> TenantPolicy:
        """``tenant``'s policy: its entry, or (no entry) public targets only and the default quotas."""
        return self._policy_by_tenant.get(tenant) or TenantPolicy(quotas=self.quotas)


def _load(text: str) -> dict[str, object]:
    """The JSON object ``text`` holds (blank: an empty one)."""
    if not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the tenant map is not JSON: {exc.msg}") from exc
    if not isinstance(raw, dict):
        raise ValueError("the tenant map must be a JSON object")
    return raw


def _full_form(raw: dict[str, object]) -> dict[str, object]:
    """A map in the full form: the short one (no principals, tenants nor quotas key) is its principals."""
    if "principals" not in raw and "tenants" not in raw and "quotas" not in raw:
        return {"principals": raw}
    unknown = sorted(set(raw) - {"principals", "tenants", "quotas"})
    if unknown:
        raise ValueError(f"the tenant map has unknown key(s) {', '.join(unknown)} (principals, tenants, quotas)")
    return raw


def _principals(raw: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise ValueError("the tenant map's principals must be a JSON object of principal ARN to tenant name")
    bad = sorted(v for v in raw.values() if not is_tenant(v))
    if bad:
        raise ValueError(
            f"not tenant names: {', '.join(bad)} (lower-case letters and digits in words joined by "
            "single hyphens; at most 40)"
        )
    principals: dict[str, str] = {}
    for arn, tenant in raw.items():
        if principals.setdefault(_without_path(arn), tenant) != tenant:
            raise ValueError(f"{_without_path(arn)} is mapped to two tenants (a role's ARN is read without its path)")
    return tuple(sorted(principals.items()))


def _strings(value: object, where: str) -> list[str]:
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} must be a list of strings")
    return [v.strip() for v in value]


def _policy(name: object, entry: object, defaults: Quotas) -> TenantPolicy:
    if not isinstance(name, str) or not is_tenant(name):
        raise ValueError(f"not a tenant name: {name!r}")
    if not isinstance(entry, dict):
        raise ValueError(f"tenant {name}: its policy must be a JSON object (targets, target_arns, quotas)")
    unknown = sorted(set(entry) - {"targets", "target_arns", "quotas"})
    if unknown:
        raise ValueError(f"tenant {name}: unknown key(s) {', '.join(unknown)} (targets, target_arns, quotas)")
    targets = tuple(_strings(entry.get("targets", []), f"tenant {name}: targets"))
    try:
        Allowlist.parse(targets)
    except ValueError as exc:
        raise ValueError(f"tenant {name}: {exc}") from None
    arns = _strings(entry.get("target_arns", []), f"tenant {name}: target_arns")
    for arn in arns:
        check_target_arn(arn)
    return TenantPolicy(
        targets, frozenset(arns), Quotas.parse(entry.get("quotas", {}), defaults, f"tenant {name}: quotas")
    )
