"""Secrets by reference: parsing and the allowed prefixes, and the resolver on moto (SSM, Secrets Manager), on files
in a temporary directory and on an explicit environment: values, failures that never show a value, the cache
(with an injected monotonic clock) and one fetch per reference under concurrency."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws

from punctual.errors import SecretReferenceError, SecretUnavailableError
from punctual.targets.secrets import SecretRef, SecretResolver, SecretRules, parse_secret_ref
from support import run_threads

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
VALUE = "s3cr3t-Value-that-must-never-leak"


class CountingClient:
    """Wraps a boto3 client and counts the calls of the two read operations; ``delay_s`` holds each call open so
    that concurrent callers overlap."""

    def __init__(self, client: Any, delay_s: float = 0.0) -> None:
        self.client = client
        self.delay_s = delay_s
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, operation: str) -> None:
        with self._lock:
            self.calls[operation] += 1
        if self.delay_s:
            time.sleep(self.delay_s)

    def get_parameter(self, **kwargs: Any) -> Any:
        self._count("get_parameter")
        return self.client.get_parameter(**kwargs)

    def get_secret_value(self, **kwargs: Any) -> Any:
        self._count("get_secret_value")
        return self.client.get_secret_value(**kwargs)


class ManualClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


@pytest.fixture
def ssm(aws: None) -> CountingClient:
    return CountingClient(boto3.client("ssm", region_name=REGION))


@pytest.fixture
def secretsmanager(aws: None) -> CountingClient:
    return CountingClient(boto3.client("secretsmanager", region_name=REGION))


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "secrets"
    directory.mkdir()
    return directory


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def resolver(
    ssm: CountingClient, secretsmanager: CountingClient, secrets_dir: Path, clock: ManualClock
) -> SecretResolver:
    return SecretResolver(
        secrets_dir=secrets_dir,
        environ={"PUNCTUAL_SECRET_TOKEN": VALUE, "PATH": "/usr/bin"},
        ssm_client=ssm,  # type: ignore[arg-type]  # a stand-in that answers only the calls this test makes
        secretsmanager_client=secretsmanager,  # type: ignore[arg-type]  # a stand-in that answers only the calls this test makes
        ttl_s=300.0,
        monotonic=clock,
    )


def put_parameter(ssm: CountingClient, name: str, value: str = VALUE) -> None:
    ssm.client.put_parameter(Name=name, Value=value, Type="SecureString")


def create_secret(secretsmanager: CountingClient, name: str, value: str = VALUE) -> str:
    return str(secretsmanager.client.create_secret(Name=name, SecretString=value)["ARN"])


def assert_hides_value(exc: BaseException, value: str = VALUE) -> None:
    """Neither the message nor the repr of the error, nor of anything it was raised from, holds the value."""
    seen: BaseException | None = exc
    while seen is not None:
        assert value not in str(seen)
        assert value not in repr(seen)
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)


# -- each kind resolves ---------------------------------------------------------------------------------------
def test_env_resolves_from_the_given_environment(resolver: SecretResolver) -> None:
    # Given an environment holding PUNCTUAL_SECRET_TOKEN
    # When / Then the env reference resolves to its value
    assert resolver.resolve("env:PUNCTUAL_SECRET_TOKEN") == VALUE


def test_file_resolves_with_one_trailing_newline_stripped(resolver: SecretResolver, secrets_dir: Path) -> None:
    # Given files in the secrets directory, one nested, one with two trailing newlines
    (secrets_dir / "token").write_text(VALUE + "\n")
    (secrets_dir / "team").mkdir()
    (secrets_dir / "team" / "api-key.txt").write_text("line1\nline2\n\n")
    (secrets_dir / "raw").write_text("no-newline")
    # When / Then each resolves to its content, less exactly one trailing newline
    assert resolver.resolve("file:token") == VALUE
    assert resolver.resolve("file:team/api-key.txt") == "line1\nline2\n"
    assert resolver.resolve("file:raw") == "no-newline"


def test_file_through_a_symlink_inside_the_directory_resolves(resolver: SecretResolver, secrets_dir: Path) -> None:
    # Given a symlink (as Kubernetes mounts secrets) to a file inside the directory
    (secrets_dir / "..data").mkdir()
    (secrets_dir / "..data" / "token").write_text(VALUE)
    (secrets_dir / "token").symlink_to(secrets_dir / "..data" / "token")
    # When / Then it resolves
    assert resolver.resolve("file:token") == VALUE


def test_ssm_resolves_a_secure_string_by_name_and_by_arn(resolver: SecretResolver, ssm: CountingClient) -> None:
    # Given a SecureString parameter under /punctual/
    put_parameter(ssm, "/punctual/webhook/token")
    # When / Then it resolves decrypted, by name and by ARN
    assert resolver.resolve("ssm:/punctual/webhook/token") == VALUE
    assert resolver.resolve(f"ssm:arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/punctual/webhook/token") == VALUE
    assert ssm.calls["get_parameter"] == 2


def test_secretsmanager_resolves_the_secret_string_by_name_and_by_arn(
    resolver: SecretResolver, secretsmanager: CountingClient
) -> None:
    # Given a secret under punctual/
    arn = create_secret(secretsmanager, "punctual/token")
    # When / Then its SecretString resolves, by name and by ARN
    assert resolver.resolve("secretsmanager:punctual/token") == VALUE
    assert resolver.resolve(f"secretsmanager:{arn}") == VALUE


def test_secretsmanager_json_key_resolves_that_keys_value(
    resolver: SecretResolver, secretsmanager: CountingClient
) -> None:
    # Given a secret holding a JSON object
    arn = create_secret(secretsmanager, "punctual/db", json.dumps({"user": "app", "password": VALUE}))
    # When / Then #password resolves to that key's value, by name and by ARN
    assert resolver.resolve("secretsmanager:punctual/db#password") == VALUE
    assert resolver.resolve(f"secretsmanager:{arn}#user") == "app"


def test_a_secret_ref_object_resolves_like_its_string(resolver: SecretResolver) -> None:
    assert resolver.resolve(SecretRef("env", "PUNCTUAL_SECRET_TOKEN")) == VALUE


# -- failures name the reference, never the value -------------------------------------------------------------
def test_missing_secrets_are_unavailable(resolver: SecretResolver) -> None:
    # Given references to secrets that do not exist
    refs = [
        "env:PUNCTUAL_SECRET_MISSING",
        "file:missing",
        "ssm:/punctual/missing",
        "secretsmanager:punctual/missing",
        "secretsmanager:punctual/missing#key",
    ]
    for ref in refs:
        # When / Then each is unavailable, and the message names the reference
        with pytest.raises(SecretUnavailableError) as raised:
            resolver.resolve(ref)
        assert ref in str(raised.value)


def test_aws_failures_name_the_error_code(resolver: SecretResolver) -> None:
    with pytest.raises(SecretUnavailableError, match="ParameterNotFound"):
        resolver.resolve("ssm:/punctual/missing")
    with pytest.raises(SecretUnavailableError, match="ResourceNotFoundException"):
        resolver.resolve("secretsmanager:punctual/missing")


@pytest.mark.parametrize(
    ("secret_string", "reason"),
    [
        (json.dumps({"user": "app", "password": VALUE}), "no key 'token'"),
        (VALUE, "not JSON"),
        ('{"token": "' + VALUE, "not JSON"),
        (json.dumps([VALUE]), "not a JSON object"),
        (json.dumps({"token": {"nested": VALUE}}), "not a string"),
        (json.dumps({"token": ""}), "empty"),
    ],
    ids=["missing key", "not JSON", "truncated JSON", "array", "not a string", "empty"],
)
def test_json_key_failures_name_the_reference_not_the_value(
    resolver: SecretResolver, secretsmanager: CountingClient, secret_string: str, reason: str
) -> None:
    # Given a secret whose SecretString does not hold a string under "token"
    create_secret(secretsmanager, "punctual/app", secret_string)
    # When the key is resolved
    with pytest.raises(SecretUnavailableError, match=reason) as raised:
        resolver.resolve("secretsmanager:punctual/app#token")
    # Then the error names the reference and holds no part of the value
    assert "secretsmanager:punctual/app#token" in str(raised.value)
    assert_hides_value(raised.value)


def test_a_binary_secret_is_unavailable(resolver: SecretResolver, secretsmanager: CountingClient) -> None:
    secretsmanager.client.create_secret(Name="punctual/bin", SecretBinary=VALUE.encode())
    with pytest.raises(SecretUnavailableError, match="no SecretString") as raised:
        resolver.resolve("secretsmanager:punctual/bin")
    assert_hides_value(raised.value)


def test_a_file_that_is_not_utf8_or_is_a_directory_or_too_big_is_unavailable(
    resolver: SecretResolver, secrets_dir: Path
) -> None:
    # Given a binary file, a directory and a file over 64 KiB
    (secrets_dir / "binary").write_bytes(b"\xff\xfe" + VALUE.encode())
    (secrets_dir / "folder").mkdir()
    (secrets_dir / "huge").write_text(VALUE * 3000)
    # When / Then each is unavailable, with a message that holds no value
    for name, reason in [("binary", "not UTF-8"), ("folder", "not a regular file"), ("huge", "larger than")]:
        with pytest.raises(SecretUnavailableError, match=reason) as raised:
            resolver.resolve(f"file:{name}")
        assert_hides_value(raised.value)


def test_an_empty_value_is_unavailable(resolver: SecretResolver, secrets_dir: Path) -> None:
    (secrets_dir / "empty").write_text("\n")
    with pytest.raises(SecretUnavailableError, match="empty"):
        resolver.resolve("file:empty")


def test_file_without_a_secrets_directory_is_unavailable() -> None:
    # Given a resolver with no secrets directory
    resolver = SecretResolver(environ={})
    # When / Then a file reference is unavailable, saying why
    with pytest.raises(SecretUnavailableError, match="no secrets directory configured"):
        resolver.resolve("file:token")


def test_values_stay_out_of_reprs(resolver: SecretResolver, secrets_dir: Path) -> None:
    # Given a resolver that has cached a value
    (secrets_dir / "token").write_text(VALUE)
    assert resolver.resolve("file:token") == VALUE
    # When / Then neither its repr nor the reference's shows the value
    assert VALUE not in repr(resolver)
    assert VALUE not in repr(parse_secret_ref("file:token"))


# -- references that are malformed or not allowed -------------------------------------------------------------
NOT_ALLOWED = [
    "env:AWS_SECRET_ACCESS_KEY",
    "env:PATH",
    "env:PUNCTUAL_SECRET_",
    "env:punctual_secret_token",
    "env:PUNCTUAL_SECRET_X-Y",
    "file:../x",
    "file:a/../../x",
    "file:/etc/passwd",
    "file:./token",
    "file:a//b",
    "file:",
    "ssm:/other/x",
    "ssm:punctual/x",
    "ssm:/punctual/",
    "ssm:/punctual/../other/x",
    "ssm:/punctual/x:1",
    f"ssm:arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/other/x",
    f"ssm:arn:aws:ssm:{REGION}:{ACCOUNT}:parameterpunctual/x",
    "secretsmanager:other/x",
    "secretsmanager:punctual",
    "secretsmanager:punctual/",
    "secretsmanager:punctual/../other",
    "secretsmanager:punctual/x#",
    f"secretsmanager:arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:other/x-AbCdEf",
    f"secretsmanager:arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:other/x-AbCdEf#password",
    "vault:punctual/x",
    "PUNCTUAL_SECRET_TOKEN",
    "",
    " env:PUNCTUAL_SECRET_TOKEN",
]


@pytest.mark.parametrize("ref", NOT_ALLOWED)
def test_disallowed_or_malformed_references_are_refused(
    ref: str, resolver: SecretResolver, ssm: CountingClient, secretsmanager: CountingClient
) -> None:
    # Given a reference outside the rules (or not a reference at all)
    # When it is parsed, or resolved
    # Then it is refused with a reason, and no service was asked
    with pytest.raises(SecretReferenceError):
        parse_secret_ref(ref)
    with pytest.raises(SecretReferenceError):
        resolver.resolve(ref)
    assert not ssm.calls
    assert not secretsmanager.calls


def test_the_refusal_says_why() -> None:
    with pytest.raises(SecretReferenceError, match="must start with 'PUNCTUAL_SECRET_'"):
        parse_secret_ref("env:AWS_SECRET_ACCESS_KEY")
    with pytest.raises(SecretReferenceError, match="'/punctual/'"):
        parse_secret_ref("ssm:/other/x")
    with pytest.raises(SecretReferenceError, match="relative"):
        parse_secret_ref("file:/etc/passwd")


@pytest.mark.parametrize("pasted", ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "Bearer eyJhbGciOi.x.y", VALUE])
def test_a_secret_pasted_instead_of_a_reference_is_not_echoed(pasted: str) -> None:
    # Given a value where its reference belongs
    # When it is parsed
    with pytest.raises(SecretReferenceError, match="must start with one of") as raised:
        parse_secret_ref(pasted)
    # Then the error does not repeat it
    assert pasted not in str(raised.value)


def test_a_symlink_pointing_outside_the_directory_is_refused(
    resolver: SecretResolver, secrets_dir: Path, tmp_path: Path
) -> None:
    # Given a file outside the secrets directory and links to it from inside (direct, and through a linked dir)
    outside = tmp_path / "outside.txt"
    outside.write_text(VALUE)
    (secrets_dir / "escape").symlink_to(outside)
    (secrets_dir / "linkdir").symlink_to(tmp_path)
    # When / Then resolving either link is refused as a reference that leaves the directory
    for ref in ("file:escape", "file:linkdir/outside.txt"):
        with pytest.raises(SecretReferenceError, match="outside the secrets directory") as raised:
            resolver.resolve(ref)
        assert_hides_value(raised.value)


def test_a_link_out_of_a_tenants_folder_is_unavailable_to_the_tenant(
    resolver: SecretResolver, secrets_dir: Path
) -> None:
    # Given beta's secret file, and in acme's folder links to it: to the file, to beta's folder, and to a file
    # of beta's that does not exist
    beta, acme = secrets_dir / "tenants" / "beta", secrets_dir / "tenants" / "acme"
    beta.mkdir(parents=True)
    acme.mkdir()
    (beta / "token").write_text(VALUE)
    (acme / "stolen").symlink_to(beta / "token")
    (acme / "beta-folder").symlink_to(beta)
    (acme / "guess").symlink_to(beta / "missing")
    acme_rules = SecretRules().for_tenant("acme")
    # When acme's task resolves each  Then each is unavailable, all alike (nothing told of what lies in beta's)
    reasons = set()
    for ref in ("file:tenants/acme/stolen", "file:tenants/acme/beta-folder/token", "file:tenants/acme/guess"):
        with pytest.raises(SecretUnavailableError) as raised:
            resolver.resolve(ref, acme_rules)
        assert_hides_value(raised.value)
        reasons.add(str(raised.value).removeprefix(f"secret {ref}: "))
    assert reasons == {"the file lies outside the tenant's folder"}
    # And the operator's tasks, whose rules are the whole directory's, still read through the link; that does
    # not put the value in the cache for acme
    assert resolver.resolve("file:tenants/acme/stolen") == VALUE
    with pytest.raises(SecretUnavailableError):
        resolver.resolve("file:tenants/acme/stolen", acme_rules)


def test_a_link_inside_a_tenants_own_folder_resolves(resolver: SecretResolver, secrets_dir: Path) -> None:
    # Given acme's folder mounted as Kubernetes mounts secrets: its files are links into a folder inside it
    acme = secrets_dir / "tenants" / "acme"
    (acme / "..data").mkdir(parents=True)
    (acme / "..data" / "token").write_text(VALUE)
    (acme / "token").symlink_to(acme / "..data" / "token")
    # When / Then acme's task reads it
    assert resolver.resolve("file:tenants/acme/token", SecretRules().for_tenant("acme")) == VALUE


def test_a_ref_built_by_hand_is_checked_again(resolver: SecretResolver) -> None:
    # Given a SecretRef that never went through parse_secret_ref
    ref = SecretRef("env", "PATH")
    # When / Then the resolver refuses it all the same
    with pytest.raises(SecretReferenceError):
        resolver.resolve(ref)


def test_custom_rules_move_the_allowed_prefixes(ssm: CountingClient) -> None:
    # Given rules allowing /team/ parameters only
    rules = SecretRules(ssm_prefixes=("/team/",))
    put_parameter(ssm, "/team/token")
    # When / Then /team/ resolves and the default /punctual/ is refused
    assert SecretResolver(rules=rules, ssm_client=ssm).resolve("ssm:/team/token") == VALUE  # type: ignore[arg-type]  # a stand-in that answers only the calls this test makes
    with pytest.raises(SecretReferenceError):
        parse_secret_ref("ssm:/punctual/token", rules)


def test_rules_refuse_a_bare_string_or_an_empty_prefix() -> None:
    # A bare string would be read as the prefixes "/", "p", ... and allow every parameter
    with pytest.raises(ValueError, match="tuple"):
        SecretRules(ssm_prefixes="/punctual/")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tuple"):
        SecretRules(secretsmanager_prefixes=("",))
    with pytest.raises(ValueError, match="env_prefix"):
        SecretRules(env_prefix="")


# -- round trip -----------------------------------------------------------------------------------------------
ROUND_TRIP = [
    "env:PUNCTUAL_SECRET_TOKEN",
    "file:token",
    "file:team/api-key.txt",
    "ssm:/punctual/webhook/token",
    f"ssm:arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/punctual/x",
    "secretsmanager:punctual/token",
    "secretsmanager:punctual/db#password",
    "secretsmanager:punctual/db#key with spaces#and-hash",
    f"secretsmanager:arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:punctual/db-AbCdEf#password",
]


@pytest.mark.parametrize("ref", ROUND_TRIP)
def test_str_of_a_parsed_ref_is_the_ref(ref: str) -> None:
    assert str(parse_secret_ref(ref)) == ref


def test_parse_splits_kind_name_and_key() -> None:
    assert parse_secret_ref("secretsmanager:punctual/db#password") == SecretRef(
        "secretsmanager", "punctual/db", "password"
    )
    assert parse_secret_ref("ssm:/punctual/x") == SecretRef("ssm", "/punctual/x")


segments = st.text(alphabet="abcXYZ019_-", min_size=1, max_size=12)
paths = st.lists(segments, min_size=1, max_size=4).map("/".join)
valid_refs = st.one_of(
    segments.map(lambda s: f"env:PUNCTUAL_SECRET_{s.replace('-', '_')}"),
    paths.map(lambda p: f"file:{p}"),
    paths.map(lambda p: f"ssm:/punctual/{p}"),
    st.tuples(paths, st.none() | st.text(min_size=1, max_size=20)).map(
        lambda pk: f"secretsmanager:punctual/{pk[0]}" + ("" if pk[1] is None else f"#{pk[1]}")
    ),
)


@given(ref=valid_refs)
def test_any_valid_ref_round_trips(ref: str) -> None:
    parsed = parse_secret_ref(ref)
    assert str(parsed) == ref
    assert parse_secret_ref(str(parsed)) == parsed


# -- the cache ------------------------------------------------------------------------------------------------
def test_a_second_resolve_within_the_ttl_does_not_fetch_again(
    resolver: SecretResolver, ssm: CountingClient, clock: ManualClock
) -> None:
    # Given a parameter resolved once
    put_parameter(ssm, "/punctual/token")
    assert resolver.resolve("ssm:/punctual/token") == VALUE
    # When it is resolved again just before the ttl runs out (and as an equal SecretRef)
    clock.now += 299.999
    assert resolver.resolve("ssm:/punctual/token") == VALUE
    assert resolver.resolve(SecretRef("ssm", "/punctual/token")) == VALUE
    # Then SSM was asked once
    assert ssm.calls["get_parameter"] == 1


def test_at_the_ttl_the_value_is_fetched_again(
    resolver: SecretResolver, ssm: CountingClient, clock: ManualClock
) -> None:
    # Given a parameter resolved once, then rotated
    put_parameter(ssm, "/punctual/token", "v1")
    assert resolver.resolve("ssm:/punctual/token") == "v1"
    ssm.client.put_parameter(Name="/punctual/token", Value="v2", Type="SecureString", Overwrite=True)
    # When the ttl has run out (exactly)
    clock.now += 300.0
    # Then the next resolve fetches the new value, and caches it again
    assert resolver.resolve("ssm:/punctual/token") == "v2"
    assert resolver.resolve("ssm:/punctual/token") == "v2"
    assert ssm.calls["get_parameter"] == 2


def test_clear_forgets_the_cache(resolver: SecretResolver, secretsmanager: CountingClient) -> None:
    create_secret(secretsmanager, "punctual/token")
    resolver.resolve("secretsmanager:punctual/token")
    resolver.clear()
    resolver.resolve("secretsmanager:punctual/token")
    assert secretsmanager.calls["get_secret_value"] == 2


def test_each_reference_is_cached_apart(resolver: SecretResolver, secretsmanager: CountingClient) -> None:
    # Given one secret read whole and by two keys
    create_secret(secretsmanager, "punctual/db", json.dumps({"user": "app", "password": VALUE}))
    # When each reference is resolved twice
    for _ in range(2):
        assert resolver.resolve("secretsmanager:punctual/db#user") == "app"
        assert resolver.resolve("secretsmanager:punctual/db#password") == VALUE
    # Then each was fetched once
    assert secretsmanager.calls["get_secret_value"] == 2


def test_a_failure_is_not_cached(resolver: SecretResolver, ssm: CountingClient) -> None:
    # Given a parameter that does not exist yet
    with pytest.raises(SecretUnavailableError):
        resolver.resolve("ssm:/punctual/late")
    # When it is created and resolved again (no time has passed)
    put_parameter(ssm, "/punctual/late")
    # Then the resolver asks again and gets it
    assert resolver.resolve("ssm:/punctual/late") == VALUE
    assert ssm.calls["get_parameter"] == 2


def test_a_zero_ttl_fetches_every_time(ssm: CountingClient) -> None:
    put_parameter(ssm, "/punctual/token")
    resolver = SecretResolver(ssm_client=ssm, ttl_s=0)  # type: ignore[arg-type]  # a stand-in that answers only the calls this test makes
    resolver.resolve("ssm:/punctual/token")
    resolver.resolve("ssm:/punctual/token")
    assert ssm.calls["get_parameter"] == 2


def test_concurrent_resolves_of_one_reference_fetch_once(ssm: CountingClient, aws: None) -> None:
    # Given a parameter and a slow SSM (each call held open 50 ms, so the callers overlap)
    put_parameter(ssm, "/punctual/token")
    slow = CountingClient(ssm.client, delay_s=0.05)
    resolver = SecretResolver(ssm_client=slow)  # type: ignore[arg-type]  # a stand-in that answers only the calls this test makes
    # When 16 threads, released together, resolve it
    values = run_threads([lambda: resolver.resolve("ssm:/punctual/token")] * 16)
    # Then all get the value from a single fetch
    assert values == [VALUE] * 16
    assert slow.calls["get_parameter"] == 1


def test_concurrent_resolves_of_different_references_do_not_wait_for_each_other(secrets_dir: Path) -> None:
    # Given two references, the first of whose fetch is blocked until the second has been resolved
    (secrets_dir / "b").write_text("B")
    release = threading.Event()

    class BlockingSsm:
        def get_parameter(self, **kwargs: Any) -> Any:
            assert release.wait(10), "the other reference waited for this fetch"
            return {"Parameter": {"Value": "A"}}

    resolver = SecretResolver(secrets_dir=secrets_dir, ssm_client=BlockingSsm())  # type: ignore[arg-type]  # a stand-in that answers only the calls this test makes
    first = threading.Thread(target=resolver.resolve, args=("ssm:/punctual/a",), daemon=True)
    first.start()
    # When the second is resolved meanwhile
    value = resolver.resolve("file:b")
    release.set()
    first.join(10)
    # Then it was not held up by the first
    assert value == "B"
    assert not first.is_alive()


# -- clients --------------------------------------------------------------------------------------------------
def test_clients_are_built_lazily_once_per_service(aws: None) -> None:
    # Given a resolver with a client factory and no explicit clients
    built: list[str] = []
    clients = {"ssm": boto3.client("ssm", region_name=REGION)}

    def factory(service: str) -> Any:
        built.append(service)
        return clients[service]

    resolver = SecretResolver(client_factory=factory, environ={"PUNCTUAL_SECRET_X": "x"}, ttl_s=0)
    clients["ssm"].put_parameter(Name="/punctual/a", Value="a", Type="String")
    # When env is resolved, then SSM twice
    assert resolver.resolve("env:PUNCTUAL_SECRET_X") == "x"
    assert built == []
    resolver.resolve("ssm:/punctual/a")
    resolver.resolve("ssm:/punctual/a")
    # Then the SSM client was built on first use, once
    assert built == ["ssm"]


def test_the_default_environment_is_the_process_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUNCTUAL_SECRET_FROM_OS", "from-os")
    assert SecretResolver().resolve("env:PUNCTUAL_SECRET_FROM_OS") == "from-os"
    assert os.environ["PUNCTUAL_SECRET_FROM_OS"] == "from-os"


def test_a_negative_ttl_is_refused() -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        SecretResolver(ttl_s=-1)
