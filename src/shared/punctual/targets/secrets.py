"""Secrets by reference: a task names a secret, the executor resolves it when the task fires.

The table holds only the reference (``env:``, ``file:``, ``ssm:`` or ``secretsmanager:``), never the value, so a
table read, a backup or a log of a task leaks nothing. References are checked when a task is scheduled
(:func:`parse_secret_ref`): each kind may only name secrets under the prefixes the deployment allows, so a task
cannot make the executor read whatever its role or environment could. The executors resolve references at fire
time through one :class:`SecretResolver`, which caches each value for a while and fetches it once at a time.
Values never appear in exception messages or reprs.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, overload

from punctual.domain.tenancy import is_tenant
from punctual.errors import SecretReferenceError, SecretUnavailableError, aws_error_code

if TYPE_CHECKING:
    from botocore.client import BaseClient
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_ssm import SSMClient

__all__ = [
    "MAX_FILE_BYTES",
    "SecretRef",
    "SecretResolver",
    "SecretRules",
    "parse_secret_ref",
]

SecretKind = Literal["env", "file", "ssm", "secretsmanager"]
KINDS: tuple[SecretKind, ...] = ("env", "file", "ssm", "secretsmanager")
MAX_FILE_BYTES = 65_536  # Secrets Manager's own limit on a secret; a bigger file is not a secret but a mistake

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FILE_PART = re.compile(r"[A-Za-z0-9_.\-]+")
_SSM_NAME = re.compile(r"[A-Za-z0-9_.\-/]+")
_SSM_ARN = re.compile(r"arn:aws[a-z\-]*:ssm:[a-z0-9\-]+:\d{12}:parameter(?P<name>/.+)")
_SECRETSMANAGER_NAME = re.compile(r"[A-Za-z0-9/_+=.@\-]+")
_SECRETSMANAGER_ARN = re.compile(r"arn:aws[a-z\-]*:secretsmanager:[a-z0-9\-]+:\d{12}:secret:(?P<name>.+)")


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A reference to a secret: what the table stores instead of the value.

    ``str(ref)`` is the reference as written (``kind:name``, and ``#json_key`` for Secrets Manager), which
    :func:`parse_secret_ref` reads back to an equal ref.
    """

    kind: SecretKind
    name: str
    json_key: str | None = None

    def __str__(self) -> str:
        suffix = "" if self.json_key is None else f"#{self.json_key}"
        return f"{self.kind}:{self.name}{suffix}"


@dataclass(frozen=True, slots=True)
class SecretRules:
    """Which secrets a reference may name: env variables starting with ``env_prefix``, files under ``file_prefix``
    of the secrets directory, SSM parameters and Secrets Manager secrets whose names (the name part, for an ARN)
    start with one of their prefixes.

    These are the deployment's rules, for tasks without a tenant (the operator's). A tenant's tasks keep to
    :meth:`for_tenant`'s: its own namespace inside these, which no other tenant's overlaps.

    ``file_folder``: the folder of the secrets directory a ``file:`` reference must still lie in once its links
    are resolved (``None``: the whole directory). A tenant's is its own folder, so that a link in it to another
    tenant's file is not a way to read that file.
    """

    env_prefix: str = "PUNCTUAL_SECRET_"
    ssm_prefixes: tuple[str, ...] = ("/punctual/",)
    secretsmanager_prefixes: tuple[str, ...] = ("punctual/",)
    file_prefix: str = ""
    file_folder: str | None = None

    def __post_init__(self) -> None:
        # An empty prefix would allow every name; a bare string would be read character by character ("/" ...).
        if not isinstance(self.env_prefix, str) or not self.env_prefix:
            raise ValueError("env_prefix must be a non-empty string")
        for field, prefixes in (
            ("ssm_prefixes", self.ssm_prefixes),
            ("secretsmanager_prefixes", self.secretsmanager_prefixes),
        ):
            if not isinstance(prefixes, tuple) or not all(isinstance(p, str) and p for p in prefixes):
                raise ValueError(f"{field} must be a tuple of non-empty strings")

    def for_tenant(self, tenant: str | None) -> SecretRules:
        """The rules of ``tenant``'s tasks (None: these, the operator's): ``env:PUNCTUAL_SECRET_TENANT_<T>__*``
        (``<T>``: the name upper-case, ``-`` as ``_``), ``file:tenants/<tenant>/*``, and ``tenants/<tenant>/``
        under each SSM and Secrets Manager prefix (``ssm:/punctual/tenants/acme/*``). Tenant names are words
        joined by single hyphens, so no tenant's namespace holds another's. A name that is no tenant's gets a
        namespace no reference can reach."""
        if tenant is None:
            return self
        if not is_tenant(tenant):
            return SecretRules(env_prefix="\0", ssm_prefixes=("\0",), secretsmanager_prefixes=("\0",), file_prefix="\0")
        return SecretRules(
            env_prefix=f"{self.env_prefix}TENANT_{tenant.upper().replace('-', '_')}__",
            ssm_prefixes=tuple(_under(p, f"tenants/{tenant}/") for p in self.ssm_prefixes),
            secretsmanager_prefixes=tuple(_under(p, f"tenants/{tenant}/") for p in self.secretsmanager_prefixes),
            file_prefix=f"{self.file_prefix}tenants/{tenant}/",
            file_folder=f"{self.file_prefix}tenants/{tenant}",
        )


_CacheKey = tuple[SecretRef, str | None]  # a reference, and for a file the folder it was confined to


def _under(prefix: str, path: str) -> str:
    return prefix + path if prefix.endswith("/") else f"{prefix}/{path}"


def _check_segments(value: str, name: str) -> None:
    """Refuse empty, ``.`` and ``..`` path segments (past a leading ``/``): no name reaches another by path
    tricks, whatever the service makes of them."""
    parts = name.removeprefix("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise SecretReferenceError(value, "a name may not have empty, '.' or '..' path segments")


def _check_prefix(value: str, name: str, prefixes: tuple[str, ...], what: str) -> None:
    if not any(name.startswith(prefix) and len(name) > len(prefix) for prefix in prefixes):
        allowed = ", ".join(repr(p) for p in prefixes) or "none"
        raise SecretReferenceError(value, f"{what} names must start with one of: {allowed}")


def parse_secret_ref(value: str, rules: SecretRules = SecretRules()) -> SecretRef:  # frozen, shared
    """Read and check a secret reference.

    Parameters
    ----------
    value : str
        ``env:NAME`` (an environment variable of the executor, starting with ``rules.env_prefix``),
        ``file:NAME`` (a relative path inside the executor's secrets directory), ``ssm:NAME`` (an SSM parameter,
        ``/...`` or an ARN) or ``secretsmanager:NAME[#key]`` (a Secrets Manager secret, name or ARN, and with
        ``#key`` one string value of its JSON object).
    rules : SecretRules
        The prefixes this deployment allows.

    Returns
    -------
    SecretRef
        The reference; ``str()`` of it gives ``value`` back.

    Raises
    ------
    SecretReferenceError
        If the reference is malformed or names a secret outside the allowed prefixes; the message says why.
    """
    if not isinstance(value, str):
        raise SecretReferenceError(None, f"a secret reference must be a string, not {type(value).__name__}")
    kind, colon, rest = value.partition(":")
    if not colon or kind not in KINDS:  # not echoed: it may be a secret pasted where its reference belongs
        raise SecretReferenceError(
            None,
            f"a secret reference must start with one of {', '.join(k + ':' for k in KINDS)} "
            "(the value itself is never stored)",
        )
    if not rest:
        raise SecretReferenceError(value, "the name is empty")
    if kind == "env":
        return _env_ref(value, rest, rules)
    if kind == "file":
        return _file_ref(value, rest, rules)
    if kind == "ssm":
        return _ssm_ref(value, rest, rules)
    return _secretsmanager_ref(value, rest, rules)


def _env_ref(value: str, rest: str, rules: SecretRules) -> SecretRef:
    """``env:NAME``, its name after the kind (``rest``) checked against ``rules``."""
    if _ENV_NAME.fullmatch(rest) is None:
        raise SecretReferenceError(value, "not a valid environment variable name")
    if not rest.startswith(rules.env_prefix) or rest == rules.env_prefix:
        raise SecretReferenceError(value, f"environment variable names must start with {rules.env_prefix!r}")
    return SecretRef("env", rest)


def _file_ref(value: str, rest: str, rules: SecretRules) -> SecretRef:
    """``file:NAME``, its name after the kind (``rest``) checked against ``rules``."""
    if rest.startswith("/"):
        raise SecretReferenceError(value, "file names must be relative to the secrets directory")
    if not all(_FILE_PART.fullmatch(part) for part in rest.split("/")):
        raise SecretReferenceError(value, "file names are '/'-separated parts of letters, digits, '_', '.' and '-'")
    if any(part in (".", "..") for part in rest.split("/")):
        raise SecretReferenceError(value, "file names may not have '.' or '..' parts")
    if not rest.startswith(rules.file_prefix) or rest == rules.file_prefix:
        raise SecretReferenceError(value, f"file names must start with {rules.file_prefix!r}")
    return SecretRef("file", rest)


def _ssm_ref(value: str, rest: str, rules: SecretRules) -> SecretRef:
    """``ssm:NAME`` (a name or an ARN), its name after the kind (``rest``) checked against ``rules``."""
    arn = _SSM_ARN.fullmatch(rest)
    name = arn.group("name") if arn else rest
    if not name.startswith("/"):
        raise SecretReferenceError(value, "SSM names start with '/' (or are an SSM parameter ARN)")
    if _SSM_NAME.fullmatch(name) is None:
        raise SecretReferenceError(value, "SSM names are made of letters, digits, '_', '.', '-' and '/'")
    _check_segments(value, name)
    _check_prefix(value, name, rules.ssm_prefixes, "SSM parameter")
    return SecretRef("ssm", rest)


def _secretsmanager_ref(value: str, rest: str, rules: SecretRules) -> SecretRef:
    """``secretsmanager:NAME[#key]`` (a name or an ARN), its name after the kind (``rest``) checked against
    ``rules``."""
    name_or_arn, hash_sign, json_key = rest.partition("#")
    if hash_sign and not json_key:
        raise SecretReferenceError(value, "the JSON key after '#' is empty")
    arn = _SECRETSMANAGER_ARN.fullmatch(name_or_arn)
    name = arn.group("name") if arn else name_or_arn
    if not name or _SECRETSMANAGER_NAME.fullmatch(name) is None:
        raise SecretReferenceError(value, "Secrets Manager names are made of letters, digits and /_+=.@-")
    _check_segments(value, name)
    _check_prefix(value, name, rules.secretsmanager_prefixes, "Secrets Manager secret")
    return SecretRef("secretsmanager", name_or_arn, json_key if hash_sign else None)


def _default_client_factory(service: str) -> BaseClient:
    """A boto3 client of ``service`` in the process's region, failing fast: a secret is fetched while a task
    waits to fire, so three attempts and short timeouts, not the store's patient defaults."""
    import boto3  # noqa: PLC0415  imported on first use: `import punctual` (which loads the action kinds) stays free of boto3
    from botocore.config import Config  # noqa: PLC0415  imported on first use: `import punctual` (which loads the action kinds) stays free of boto3

    config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=2, read_timeout=5)
    # boto3's stubs type ``client`` per service name; a name known only at run time makes a client all the same
    make: Callable[..., BaseClient] = boto3.session.Session().client
    return make(service, config=config)


class SecretResolver:
    """Resolves secret references at fire time, caching each value for ``ttl_s``.

    Parameters
    ----------
    rules : SecretRules
        The prefixes references must keep to; every reference is checked again here, however it was built.
    secrets_dir : str | os.PathLike, optional
        The directory ``file:`` references are read from; without one they are unavailable.
    environ : Mapping[str, str], optional
        Where ``env:`` references are read; ``os.environ`` when None.
    ssm_client, secretsmanager_client : optional
        boto3 clients; when None, built on first use by ``client_factory``.
    client_factory : Callable[[str], BaseClient], optional
        Builds a client from a service name (``"ssm"``, ``"secretsmanager"``); by default a boto3 client in the
        process's region with three attempts and 2/5 s timeouts.
    ttl_s : float
        How long a value is reused before it is fetched again (so a rotated secret is picked up within
        ``ttl_s``). Failures are never cached: the next call tries again.
    monotonic : Callable[[], float]
        The clock of the cache (injected in tests).

    Notes
    -----
    Thread-safe: the executor's worker threads share one resolver. A reference is fetched by one thread at a
    time; the others wait for that fetch and take its value instead of fetching again.
    """

    def __init__(  # noqa: PLR0913  every part keyword-only, each with a default a test may replace
        self,
        *,
        rules: SecretRules = SecretRules(),  # frozen, shared
        secrets_dir: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        ssm_client: SSMClient | None = None,
        secretsmanager_client: SecretsManagerClient | None = None,
        client_factory: Callable[[str], BaseClient] | None = None,
        ttl_s: float = 300.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s < 0:
            raise ValueError("ttl_s must not be negative")
        self.rules = rules
        self.secrets_dir = None if secrets_dir is None else os.fspath(secrets_dir)
        self.ttl_s = ttl_s
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._clients: dict[str, BaseClient | None] = {"ssm": ssm_client, "secretsmanager": secretsmanager_client}
        self._client_factory = client_factory or _default_client_factory
        self._monotonic = monotonic
        self._lock = threading.Lock()  # guards the cache, the fetch locks and the clients
        self._cache: dict[_CacheKey, tuple[str, float]] = {}  # -> (value, expires_at on the monotonic clock)
        self._fetch_locks: dict[_CacheKey, threading.Lock] = {}

    def __repr__(self) -> str:
        return (
            f"SecretResolver(rules={self.rules!r}, secrets_dir={self.secrets_dir!r}, ttl_s={self.ttl_s!r}, "
            f"cached={len(self._cache)})"
        )

    def resolve(self, ref: SecretRef | str, rules: SecretRules | None = None) -> str:
        """The value of a secret reference, from the cache while it is fresh.

        Parameters
        ----------
        ref : SecretRef | str
            The reference (a string is parsed with the resolver's rules).
        rules : SecretRules, optional
            The rules this reference must keep to instead of the resolver's (a tenant's task: its own namespace,
            :meth:`SecretRules.for_tenant`), checked before the cache is read.

        Returns
        -------
        str
            The secret's value (never empty).

        Raises
        ------
        SecretReferenceError
            If the reference is malformed or not allowed by the rules, or a ``file:`` path leads out of the
            secrets directory.
        SecretUnavailableError
            If the secret cannot be read now (missing, access denied, not JSON, no such key, a ``file:`` link
            leading out of the tenant's folder, ...).
        """
        rules = rules or self.rules
        ref = parse_secret_ref(str(ref) if isinstance(ref, SecretRef) else ref, rules)
        # A file is cached per folder too: one the operator may read through a link is not thereby a tenant's.
        key = (ref, rules.file_folder if ref.kind == "file" else None)
        with self._lock:
            cached = self._fresh(key)
            if cached is not None:
                return cached
            fetch_lock = self._fetch_locks.setdefault(key, threading.Lock())
        with fetch_lock:
            with self._lock:  # another thread may have fetched it while this one waited
                cached = self._fresh(key)
            if cached is not None:
                return cached
            value = self._fetch(ref, rules.file_folder)
            with self._lock:
                self._cache[key] = (value, self._monotonic() + self.ttl_s)
            return value

    def clear(self) -> None:
        """Forget every cached value: the next resolve of each reference fetches it again."""
        with self._lock:
            self._cache.clear()

    def _fresh(self, key: _CacheKey) -> str | None:
        """The cached value of ``key`` if it has not expired (caller holds ``_lock``)."""
        entry = self._cache.get(key)
        if entry is None:
            return None
        value, expires_at = entry
        if self._monotonic() >= expires_at:
            del self._cache[key]
            return None
        return value

    @overload
    def _client(self, service: Literal["ssm"]) -> SSMClient: ...
    @overload
    def _client(self, service: Literal["secretsmanager"]) -> SecretsManagerClient: ...
    def _client(self, service: str) -> BaseClient:
        with self._lock:
            client = self._clients.get(service)
            if client is None:
                client = self._clients[service] = self._client_factory(service)
            return client

    def _fetch(self, ref: SecretRef, file_folder: str | None) -> str:
        if ref.kind == "env":
            value = self._environ.get(ref.name)
            if value is None:
                raise SecretUnavailableError(ref, "the environment variable is not set")
        elif ref.kind == "file":
            value = self._read_file(ref, file_folder)
        elif ref.kind == "ssm":
            value = self._read_ssm(ref)
        else:
            value = self._read_secretsmanager(ref)
        if not value:
            raise SecretUnavailableError(ref, "the value is empty")
        return value

    def _read_file(self, ref: SecretRef, file_folder: str | None) -> str:
        """The file's text, one trailing newline stripped. The path is judged after resolving symlinks, and the
        resolved path is opened without following a symlink, so a link cannot lead out of the directory, nor
        out of ``file_folder`` (a tenant's folder, as the operator placed it) when one is given. A link out of
        the tenant's folder is refused before anything is opened, whatever it names: the refusal tells nothing
        of what lies there."""
        if self.secrets_dir is None:
            raise SecretUnavailableError(ref, "no secrets directory configured")
        root = os.path.realpath(self.secrets_dir)
        path = os.path.realpath(os.path.join(root, ref.name))
        if file_folder is not None:
            folder = os.path.realpath(os.path.join(root, file_folder))
            if os.path.commonpath([folder, path]) != folder or path == folder:
                raise SecretUnavailableError(ref, "the file lies outside the tenant's folder")
        if os.path.commonpath([root, path]) != root or path == root:
            raise SecretReferenceError(str(ref), "the file lies outside the secrets directory")
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            raise SecretUnavailableError(ref, f"cannot open the file ({type(exc).__name__})") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SecretUnavailableError(ref, "not a regular file")
            with os.fdopen(os.dup(fd), "rb") as file:
                data = file.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise SecretUnavailableError(ref, f"cannot read the file ({type(exc).__name__})") from None
        finally:
            os.close(fd)
        if len(data) > MAX_FILE_BYTES:
            raise SecretUnavailableError(ref, f"the file is larger than {MAX_FILE_BYTES} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SecretUnavailableError(ref, "the file is not UTF-8 text") from None
        return text.removesuffix("\n")

    def _read_ssm(self, ref: SecretRef) -> str:
        try:
            response = self._client("ssm").get_parameter(Name=ref.name, WithDecryption=True)
        except Exception as exc:  # any failure to fetch is "unavailable", named by its code
            raise SecretUnavailableError(ref, f"SSM get_parameter failed ({aws_error_code(exc)})") from exc
        value = response.get("Parameter", {}).get("Value")
        if not isinstance(value, str):
            raise SecretUnavailableError(ref, "SSM returned no value")
        return value

    def _read_secretsmanager(self, ref: SecretRef) -> str:
        name = ref.name
        try:
            response = self._client("secretsmanager").get_secret_value(SecretId=name)
        except Exception as exc:  # any failure to fetch is "unavailable", named by its code
            code = aws_error_code(exc)
            raise SecretUnavailableError(ref, f"Secrets Manager get_secret_value failed ({code})") from exc
        secret_string = response.get("SecretString")
        if not isinstance(secret_string, str):
            raise SecretUnavailableError(ref, "the secret holds no SecretString (binary secrets are not supported)")
        if ref.json_key is None:
            return secret_string
        try:
            document = json.loads(secret_string)
        except ValueError:  # the error's text and .doc would carry the secret: dropped
            raise SecretUnavailableError(ref, "the SecretString is not JSON") from None
        if not isinstance(document, dict):
            raise SecretUnavailableError(ref, "the SecretString is not a JSON object")
        if ref.json_key not in document:
            raise SecretUnavailableError(ref, f"the JSON object has no key {ref.json_key!r}")
        value = document[ref.json_key]
        if not isinstance(value, str):
            raise SecretUnavailableError(ref, f"the value of key {ref.json_key!r} is not a string")
        return value
