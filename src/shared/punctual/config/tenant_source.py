"""Where the API and the executor get the tenant map: the ``PUNCTUAL_TENANT_MAP`` setting, or Parameter Store.

Lambda gives a function 4 KB of environment variables, about a dozen tenants' worth of map. A larger map lives in
Parameter Store (``PUNCTUAL_TENANT_MAP_PARAMETER``): one String or SecureString parameter holds up to 8 KB (4 KB in
the standard tier), and a larger map is split over the parameters directly under a path, the setting's value ending
in ``/``, each a map in either form (:meth:`~punctual.config.tenant_map.TenantMap.parse_parts`).

Services ask a :class:`TenantMapSource` (the port) for the map and never see SSM: :class:`FixedTenantMap` holds the
map of the environment; :class:`ParameterTenantMap` (the adapter, the one part that calls SSM) reads the parameter
at a cold start and again once its copy is older than ``PUNCTUAL_TENANT_MAP_CACHE_S``, so that a warm function
sees a change within that time without a call per request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from punctual.config.settings import Settings
from punctual.config.tenant_map import TenantMap
from punctual.errors import TenantMapUnavailableError, aws_error_code

if TYPE_CHECKING:
    from mypy_boto3_ssm import SSMClient

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5.0  # after a failed read, the map read before serves this long (at most the cache's time)


class TenantMapSource(Protocol):
    """Gives the tenant map to use now."""

    def tenant_map(self) -> TenantMap:
        """The map; may read it again from where it is kept (never the way to a fire: see the executor)."""
        ...


@dataclass(frozen=True)
class FixedTenantMap:
    """A map that never changes: the ``PUNCTUAL_TENANT_MAP`` setting's."""

    tenants: TenantMap = field(default_factory=TenantMap)

    def tenant_map(self) -> TenantMap:
        return self.tenants


class ParameterTenantMap:
    """The tenant map kept in Parameter Store under ``name``, read through ``ssm`` (a boto3 SSM client) and kept
    for ``ttl_s`` seconds of ``monotonic``.

    ``name`` is a parameter's name, read with ``GetParameter``, or a path ending in ``/``, whose parameters directly
    under it (not deeper) are read with ``GetParametersByPath`` and put together; SecureStrings are decrypted. Only
    a changed text is parsed again: an unchanged map stays the same object.

    The first read raises :class:`~punctual.errors.TenantMapUnavailableError` when the map cannot be read or is not
    valid (there is no map to fall back on). A later one that fails keeps the map read before, logs why at ERROR
    and is tried again after :data:`RETRY_AFTER_S` (or the cache's time, if shorter); so does an update that is not
    a valid map, or a path whose parts disagree while they are being changed one by one.

    Thread-safe: one read at a time; the others wait for it.
    """

    def __init__(
        self, ssm: SSMClient, name: str, ttl_s: float = 60.0, *, monotonic: Callable[[], float] = time.monotonic
    ):
        self.name = name
        self.ttl_s = ttl_s
        self._ssm = ssm
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._map: TenantMap | None = None
        self._texts: dict[str, str] = {}
        self._read_after = 0.0

    def tenant_map(self) -> TenantMap:
        with self._lock:
            if self._map is not None and self._monotonic() < self._read_after:
                return self._map
            try:
                texts = self._read()
                tenants = self._map if self._map is not None and texts == self._texts else self._parse(texts)
            except TenantMapUnavailableError as exc:
                if self._map is None:
                    raise
                retry_s = min(self.ttl_s, RETRY_AFTER_S)
                log.error("%s; the map read before serves on, read again in %g s", exc, retry_s)
                self._read_after = self._monotonic() + retry_s
                return self._map
            self._map, self._texts = tenants, texts
            self._read_after = self._monotonic() + self.ttl_s
            return tenants

    def _read(self) -> dict[str, str]:
        """The text of each parameter that holds the map (or a part of it), by name."""
        try:
            if not self.name.endswith("/"):
                response = self._ssm.get_parameter(Name=self.name, WithDecryption=True)
                return {self.name: str(response["Parameter"]["Value"])}
            pages = self._ssm.get_paginator("get_parameters_by_path").paginate(
                Path=self.name.removesuffix("/"), Recursive=False, WithDecryption=True
            )
            texts = {p["Name"]: str(p["Value"]) for page in pages for p in page["Parameters"]}
        except Exception as exc:  # any failure to read is "unavailable", named by its code
            raise TenantMapUnavailableError(self.name, f"cannot be read ({aws_error_code(exc)})") from exc
        if not texts:
            raise TenantMapUnavailableError(self.name, "no parameter under this path (put {} in one for no tenants)")
        return texts

    def _parse(self, texts: dict[str, str]) -> TenantMap:
        try:
            return TenantMap.parse_parts(texts) if self.name.endswith("/") else TenantMap.parse(texts[self.name])
        except ValueError as exc:
            raise TenantMapUnavailableError(self.name, f"not a valid tenant map: {exc}") from None


def tenant_map_source(settings: Settings, ssm: SSMClient | None = None) -> TenantMapSource:
    """The source of the map ``settings`` name: ``tenant_map_parameter`` through ``ssm`` (one is made when None),
    read at once so that a map that cannot be read, or is not valid, fails the cold start as an invalid
    ``tenant_map`` does; or else ``tenant_map`` itself (no SSM client is made).

    Raises
    ------
    TenantMapUnavailableError
        When the parameter cannot be read, or does not hold a valid map.
    """
    if settings.tenant_map_parameter is None:
        return FixedTenantMap(TenantMap.parse(settings.tenant_map))
    if ssm is None:
        from punctual.config.clients import make_ssm_client  # noqa: PLC0415  looked up when needed: a fixed map never makes an SSM client (tests replace the builder)

        ssm = make_ssm_client(settings)
    source = ParameterTenantMap(ssm, settings.tenant_map_parameter, settings.tenant_map_cache_s)
    source.tenant_map()
    return source
