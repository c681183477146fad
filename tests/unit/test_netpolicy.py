"""The webhook target policy (SSRF guard): static URL checks, resolved-address checks, the allowlist, redaction."""

from __future__ import annotations

import ipaddress
import re
import string
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import settings as fuzz_settings
from hypothesis import strategies as st

from punctual.errors import TargetRefusedError
from punctual.network.addresses import public_address_problem
from punctual.network.hosts import MAX_URL_LENGTH, parse_ip_literal, redact_url
from punctual.network.policy import Allowlist, Target, TargetPolicy

fuzz = fuzz_settings(max_examples=200, deadline=None)
DEFAULT = TargetPolicy()
IPV4 = ipaddress.IPv4Address
IPV6 = ipaddress.IPv6Address

HOSTILE = [
    # the instance metadata service, in every spelling
    ("https://169.254.169.254/latest/meta-data/", "link-local (instance metadata service)"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://2852039166/", "link-local"),
    ("https://0xa9fea9fe/", "link-local"),
    ("https://0XA9FEA9FE/", "link-local"),
    ("https://0251.0376.0251.0376/", "link-local"),
    ("https://169.254.43518/", "link-local"),
    ("https://169.16689662/", "link-local"),
    ("https://0xa9.0xfe.0xa9.0xfe/", "link-local"),
    ("https://169.254.169.254./", "link-local"),
    ("https://[::ffff:169.254.169.254]/", "link-local"),
    ("https://[::ffff:a9fe:a9fe]/", "link-local"),
    ("https://[fd00:ec2::254]/", "unique local (instance metadata service)"),
    ("https://metadata.google.internal/computeMetadata/v1/", "metadata"),
    ("https://instance-data/latest/", "metadata"),
    # loopback
    ("https://127.0.0.1/", "loopback"),
    ("https://127.1/", "loopback"),
    ("https://127.0.1/", "loopback"),
    ("https://0x7f.1/", "loopback"),
    ("https://2130706433/", "loopback"),
    ("https://0x7f000001/", "loopback"),
    ("https://0177.0.0.1/", "loopback"),
    ("https://0177.0x0.00.1/", "loopback"),
    ("https://127.255.255.254:22/", "loopback"),
    ("https://[::1]/", "loopback"),
    ("https://[::ffff:127.0.0.1]/", "loopback"),
    ("https://[::ffff:7f00:1]/", "loopback"),
    ("https://[0:0:0:0:0:0:0:1]/", "loopback"),
    ("https://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11/", "loopback"),  # full-width 127.0.0.1
    ("https://127\u30020\u30020\u30021/", "loopback"),  # ideographic full stops
    ("https://localhost/", "localhost"),
    ("https://localhost:22/", "localhost"),
    ("https://LOCALHOST./", "localhost"),
    ("https://foo.localhost/", "localhost"),
    ("https://localhost.localdomain/", "localhost"),
    ("https://ip6-localhost/", "localhost"),
    ("https://ip6-loopback/", "localhost"),
    # unspecified, private and other non-public ranges
    ("https://0.0.0.0/", "unspecified"),
    ("https://0/", "unspecified"),
    ("https://[::]/", "unspecified"),
    ("https://0.1.2.3/", "this network"),
    ("https://10.0.0.1/", "private"),
    ("https://10.255.255.255/", "private"),
    ("https://172.16.0.1/", "private"),
    ("https://172.31.255.255/", "private"),
    ("https://192.168.1.1/", "private"),
    ("https://100.64.0.1/", "shared address space (CGNAT)"),
    ("https://100.127.255.255/", "CGNAT"),
    ("https://198.18.0.1/", "benchmarking"),
    ("https://198.19.255.255/", "benchmarking"),
    ("https://192.0.2.1/", "documentation"),
    ("https://224.0.0.1/", "multicast"),
    ("https://255.255.255.255/", "broadcast"),
    ("https://240.0.0.1/", "reserved"),
    ("https://[fe80::1%25eth0]/", "link-local"),
    ("https://[fe80::1]/", "link-local"),
    ("https://[fc00::1]/", "unique local"),
    ("https://[fdff:ffff::1]/", "unique local"),
    ("https://[ff02::1]/", "multicast"),
    ("https://[2001:db8::1]/", "documentation"),
    ("https://[64:ff9b::7f00:1]/", "NAT64 loopback"),
    ("https://[64:ff9b::10.0.0.1]/", "NAT64 private"),
    ("https://[64:ff9b:1::1]/", "local-use NAT64"),
    ("https://[2002:7f00:1::]/", "6to4 loopback"),
    ("https://[2002:5db8:d822::1]/", "6to4 (deprecated)"),
    ("https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "Teredo"),
    ("https://[::127.0.0.1]/", "IPv4-compatible loopback"),
    ("https://[::8.8.8.8]/", "IPv4-compatible (deprecated)"),
    ("https://[4000::1]/", "reserved"),
    # numeric hosts that are not addresses: resolvers disagree about them
    ("https://1.2.3.4.5/", "not a valid IPv4 address"),
    ("https://4294967296/", "not a valid IPv4 address"),
    ("https://0x100000000/", "not a valid IPv4 address"),
    ("https://256.0.0.1/", "not a valid IPv4 address"),
    ("https://08.0.0.1/", "not a valid IPv4 address"),
    ("https://example.123/", "not a valid IPv4 address"),
    # credentials, schemes, plain http
    ("https://user:pass@example.com/", "credentials"),
    ("https://user@example.com/", "credentials"),
    ("https://@example.com/", "credentials"),
    ("https://example.com@127.0.0.1/", "credentials"),
    ("ftp://example.com/file", "scheme 'ftp'"),
    ("file:///etc/passwd", "scheme 'file'"),
    ("gopher://example.com:70/", "scheme 'gopher'"),
    ("data:text/plain,hello", "scheme 'data'"),
    ("javascript:alert(1)", "scheme 'javascript'"),
    ("example.com/hook", "no scheme"),
    ("//example.com/hook", "no scheme"),
    ("http://example.com/", "use https"),
    # malformed
    ("https://example.com/" + "a" * 3000, f"longer than {MAX_URL_LENGTH}"),
    ("https://example.com:0/", "port 0 is out of range"),
    ("https://example.com:70000/", "port 70000 is out of range"),
    ("https://example.com:8o/", "port is not a number"),
    ("https://exa mple.com/", "whitespace"),
    ("https://example.com\u3000/", "whitespace"),
    ("https://exa\rmple.com/", "control character"),
    ("https://example.com\n.evil/", "control character"),
    ("https://exa\tmple.com/", "control character"),
    ("https://evil.com\\@127.0.0.1/", "backslash"),
    ("https:///hook", "no host"),
    ("https:example.com", "no host"),
    ("https://:443/", "no host"),
    ("https://%31%32%37.0.0.1/", "invalid character '%'"),
    ("https://a..b/", "empty label"),
    ("https://::1/", "brackets"),
    ("https://[::1/", "malformed URL"),
    ("https://[not-an-address]/", "malformed URL"),
    ("https://[v1.x]/", "invalid IPv6 address"),
    ("https://[fe80::1%25e!0]/", "zone"),
    ("https://" + "a" * 64 + ".com/", "longer than 63"),
    ("https://" + "a." * 127 + "com/", "longer than 253"),
    ("https://" + "0" * 70 + "177.0.0.1/", "loopback"),
]


@pytest.mark.parametrize(("url", "reason"), HOSTILE, ids=[repr(url[:60]) for url, _ in HOSTILE])
def test_hostile_targets_are_refused_with_their_reason(url: str, reason: str) -> None:
    # Given the default policy (https only, no allowlist)
    # When a hostile URL is checked
    with pytest.raises(TargetRefusedError) as refused:
        DEFAULT.check_url(url)
    # Then it is refused, with a reason that says why and is a ValueError for callers that validate
    assert reason in str(refused.value)
    assert isinstance(refused.value, ValueError)


@pytest.mark.parametrize(
    "url",
    [
        "https://alice:hunter2@example.com/hidden/s3cr3t?tok=k3y#frag",
        "https://alice@127.0.0.1/hidden/s3cr3t?tok=k3y",
        "ftp://alice:hunter2@example.com/hidden/s3cr3t?tok=k3y",
        "https://alice:hunter2@127.0.0.1:8080/hidden/s3cr3t?tok=k3y",
        "https://10.0.0.1/hidden/s3cr3t?tok=k3y",
        "http://example.com/hidden/s3cr3t?tok=k3y",
        "https://example.com:0/hidden/s3cr3t?tok=k3y",
    ],
)
def test_a_reason_never_shows_userinfo_path_or_query(url: str) -> None:
    # Given a refused URL carrying secrets in its userinfo, path and query
    # When it is checked
    with pytest.raises(TargetRefusedError) as refused:
        DEFAULT.check_url(url)
    # Then the reason shows none of them
    for secret in ("alice", "hunter2", "hidden", "s3cr3t", "tok", "k3y", "frag"):
        assert secret not in str(refused.value)


def test_a_refused_literal_names_its_origin_and_how_it_was_written() -> None:
    # Given a loopback address written in hex with a port
    # When it is checked
    with pytest.raises(TargetRefusedError) as refused:
        DEFAULT.check_url("https://0x7f.1:8443/x")
    # Then the reason names the normalised origin, the spelling and the kind of address
    assert str(refused.value) == "https://127.0.0.1:8443 (written 0x7f.1): not a public address (loopback)"


ALLOWLISTED = [
    ("http://127.0.0.1:8080/hook", "127.0.0.1"),
    ("http://127.1:8080/hook", "127.0.0.1"),
    ("http://0x7f.1/", "127.0.0.0/8"),
    ("http://2130706433/", "127.0.0.1"),
    ("http://0177.0.0.1/", "127.0.0.1"),
    ("http://[::ffff:127.0.0.1]/", "127.0.0.1"),
    ("http://[::ffff:7f00:1]/", "::ffff:127.0.0.0/104"),
    ("http://[::1]:9000/", "::1"),
    ("http://[0:0:0:0:0:0:0:1]/", "[::1]"),
    ("http://localhost:9000/", "localhost"),
    ("http://LOCALHOST./", "localhost"),
    ("http://foo.localhost/", "*.localhost"),
    ("https://169.254.169.254/latest", "169.254.169.254"),
    ("https://0xa9fea9fe/latest", "169.254.0.0/16"),
    ("https://[fd00:ec2::254]/", "fd00:ec2::/32"),
    ("https://[fe80::1%25eth0]/", "fe80::/10"),
    ("https://10.1.2.3/", "10.0.0.0/8"),
    ("https://172.16.0.1/", "172.16.0.0/12"),
    ("https://192.168.1.1/", "192.168.0.0/16"),
    ("https://100.64.0.1/", "100.64.0.0/10"),
    ("https://198.18.0.1/", "198.18.0.0/15"),
    ("https://[fc00::1]/", "fc00::/7"),
    ("https://metadata.google.internal/", "metadata.google.internal"),
    ("http://hooks.corp.example/", "*.corp.example"),
    ("http://Hooks.Example.com./", "hooks.example.com."),
]


@pytest.mark.parametrize(("url", "entries"), ALLOWLISTED)
def test_allowlisted_targets_pass_even_over_plain_http(url: str, entries: str) -> None:
    # Given an allowlist that names the target (by host, by IP or by CIDR) and no general plain-http permission
    policy = TargetPolicy.from_settings(entries)
    # When the URL is checked
    target = policy.check_url(url)
    # Then it passes, flagged allowlisted
    assert target.allowlisted
    assert target.scheme == url.split(":", maxsplit=1)[0]


def test_plain_http_to_a_public_name_needs_the_setting() -> None:
    # Given one policy without and one with allow_plain_http
    strict, relaxed = TargetPolicy(), TargetPolicy(allow_plain_http=True)
    # When http://example.com is checked / Then only the relaxed policy lets it through, not allowlisted
    with pytest.raises(TargetRefusedError, match="use https"):
        strict.check_url("http://example.com/hook")
    target = relaxed.check_url("http://example.com/hook")
    assert (target.scheme, target.port, target.allowlisted) == ("http", 80, False)


def test_plain_http_does_not_open_private_addresses() -> None:
    # Given plain http allowed for all targets
    policy = TargetPolicy(allow_plain_http=True)
    # When a private address is checked / Then it is still refused
    with pytest.raises(TargetRefusedError, match="private"):
        policy.check_url("http://10.0.0.1/")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://example.com/x", Target("https", "example.com", 443, None, False)),
        ("https://93.184.216.34/", Target("https", "93.184.216.34", 443, IPV4("93.184.216.34"), False)),
        (
            "https://[2606:2800:220:1:248:1893:25c8:1946]/",
            Target(
                "https", "2606:2800:220:1:248:1893:25c8:1946", 443, IPV6("2606:2800:220:1:248:1893:25c8:1946"), False
            ),
        ),
        ("HTTPS://Example.COM.:8443/a?b#c", Target("https", "example.com", 8443, None, False)),
        ("https://example.com:/x", Target("https", "example.com", 443, None, False)),
        ("https://example.com:00443/x", Target("https", "example.com", 443, None, False)),
        ("https://b\u00fccher.example/", Target("https", "xn--bcher-kva.example", 443, None, False)),
        ("https://0x7f.example.com/", Target("https", "0x7f.example.com", 443, None, False)),
        ("https://127.0.0.1.nip.io/", Target("https", "127.0.0.1.nip.io", 443, None, False)),
        ("https://svc.internal/", Target("https", "svc.internal", 443, None, False)),
        ("https://[::ffff:8.8.8.8]/", Target("https", "8.8.8.8", 443, IPV4("8.8.8.8"), False)),
        ("https://[64:ff9b::808:808]/", Target("https", "64:ff9b::808:808", 443, IPV6("64:ff9b::808:808"), False)),
        ("https://my_host.example.com/", Target("https", "my_host.example.com", 443, None, False)),
    ],
)
def test_public_https_targets_pass_normalised(url: str, expected: Target) -> None:
    # Given the default policy / When a public https URL is checked
    target = DEFAULT.check_url(url)
    # Then it passes, normalised (names are judged again once resolved)
    assert target == expected


def test_a_url_of_exactly_the_maximum_length_passes() -> None:
    # Given a URL of exactly MAX_URL_LENGTH characters, and one a character longer
    base = "https://example.com/"
    exact = base + "a" * (MAX_URL_LENGTH - len(base))
    # When both are checked / Then the edge passes and one past it is refused
    assert DEFAULT.check_url(exact).host == "example.com"
    with pytest.raises(TargetRefusedError, match="longer than"):
        DEFAULT.check_url(exact + "a")


@pytest.mark.parametrize(
    ("target", "origin"),
    [
        (Target("https", "example.com", 443, None, False), "https://example.com"),
        (Target("https", "example.com", 80, None, False), "https://example.com:80"),
        (Target("http", "example.com", 80, None, False), "http://example.com"),
        (Target("http", "127.0.0.1", 8080, IPV4("127.0.0.1"), True), "http://127.0.0.1:8080"),
        (Target("https", "2001:db8::1", 443, IPV6("2001:db8::1"), False), "https://[2001:db8::1]"),
        (Target("https", "2001:db8::1", 8443, IPV6("2001:db8::1"), False), "https://[2001:db8::1]:8443"),
    ],
)
def test_origin_shows_the_port_only_when_not_default(target: Target, origin: str) -> None:
    # Given a target / Then its origin has brackets for IPv6 and a port only when it is not the default
    assert target.origin == origin


# --- parse_ip_literal and public_address_problem ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", IPV4("127.0.0.1")),
        ("127.1", IPV4("127.0.0.1")),
        ("127.0.1", IPV4("127.0.0.1")),
        ("2130706433", IPV4("127.0.0.1")),
        ("0x7f000001", IPV4("127.0.0.1")),
        ("0x7f.1", IPV4("127.0.0.1")),
        ("0177.0.0.1", IPV4("127.0.0.1")),
        ("0x7F.0.0X0.01", IPV4("127.0.0.1")),
        ("127.0.0.1.", IPV4("127.0.0.1")),
        ("0", IPV4("0.0.0.0")),
        ("0x", IPV4("0.0.0.0")),
        ("255.255.255.255", IPV4("255.255.255.255")),
        ("4294967295", IPV4("255.255.255.255")),
        ("1.16777215", IPV4("1.255.255.255")),
        ("0" * 70 + "177.0.0.1", IPV4("127.0.0.1")),
        ("[::1]", IPV6("::1")),
        ("::1", IPV6("::1")),
        ("[0:0:0:0:0:0:0:1]", IPV6("::1")),
        ("[::ffff:127.0.0.1]", IPV4("127.0.0.1")),
        ("::ffff:7f00:1", IPV4("127.0.0.1")),
        ("[::127.0.0.1]", IPV6("::7f00:1")),
        ("fe80::1%eth0", IPV6("fe80::1")),
        ("[fe80::1%25eth0]", IPV6("fe80::1")),
        ("[FD00:EC2::254]", IPV6("fd00:ec2::254")),
        ("\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11", IPV4("127.0.0.1")),
        ("example.com", None),
        ("0x7f.example.com", None),
        ("1.2.3.4.5", None),
        ("4294967296", None),
        ("0x100000000", None),
        ("256.0.0.1", None),
        ("1.256.0.1", None),
        ("1.2.65536", None),
        ("08.0.0.1", None),
        ("0x7g.1", None),
        ("1..1", None),
        ("", None),
        (" 127.0.0.1", None),
        ("+127.0.0.1", None),
        ("1_27.0.0.1", None),
        ("\u0661\u0662\u0667.0.0.1", None),  # Arabic-Indic digits: int() would read them, resolvers do not
        ("[127.0.0.1]", None),
        ("[::1", None),
        ("[::ffff:0127.0.0.1]", None),
    ],
)
def test_parse_ip_literal_reads_every_resolver_spelling_and_nothing_else(host: str, expected: object) -> None:
    # Given a host / When it is parsed / Then it is the address it reaches, or None when it is no address
    assert parse_ip_literal(host) == expected


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("8.8.8.8", None),
        ("93.184.216.34", None),
        ("100.63.255.255", None),
        ("100.128.0.0", None),
        ("172.15.255.255", None),
        ("172.32.0.0", None),
        ("198.17.255.255", None),
        ("198.20.0.0", None),
        ("223.255.255.255", None),
        ("127.0.0.1", "loopback"),
        ("10.0.0.1", "private"),
        ("169.254.169.254", "link-local (instance metadata service)"),
        ("169.254.0.1", "link-local"),
        ("100.64.0.0", "shared address space (CGNAT)"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.0", "reserved"),
        ("0.0.0.0", "unspecified"),
        ("255.255.255.255", "broadcast"),
        ("198.51.100.7", "documentation"),
        ("203.0.113.7", "documentation"),
        ("198.18.0.0", "benchmarking"),
        ("192.0.0.8", "reserved (IETF protocol assignments)"),
        (IPV6("2606:4700:4700::1111"), None),
        (IPV6("::"), "unspecified"),
        (IPV6("::1"), "loopback"),
        (IPV6("::ffff:127.0.0.1"), "IPv4-mapped loopback"),
        (IPV6("::ffff:169.254.169.254"), "IPv4-mapped link-local (instance metadata service)"),
        (IPV6("::ffff:8.8.8.8"), None),
        (IPV6("::ffff:0:8.8.8.8"), "reserved"),
        (IPV6("64:ff9b::8.8.8.8"), None),
        (IPV6("64:ff9b::192.168.0.1"), "NAT64 private"),
        (IPV6("64:ff9b:1::8.8.8.8"), "local-use NAT64"),
        (IPV6("2002:0808:0808::1"), "6to4 (deprecated)"),
        (IPV6("2002:a9fe:a9fe::1"), "6to4 link-local (instance metadata service)"),
        (IPV6("2001::1"), "Teredo unspecified"),
        (IPV6("2001:0:808:808::f7f7:f7f7"), "Teredo (deprecated)"),
        (IPV6("2001:0:808:808::80ff:fffe"), "Teredo loopback"),
        (IPV6("2001:2::1"), "benchmarking"),
        (IPV6("2001:10::1"), "reserved (IETF protocol assignments)"),
        (IPV6("100::1"), "discard-only"),
        (IPV6("fd00:ec2::254"), "unique local (instance metadata service)"),
        (IPV6("fec0::1"), "site-local (deprecated)"),
        (IPV6("5f00::1"), "reserved (SRv6 SIDs)"),
        (IPV6("3fff::1"), "documentation"),
        (IPV6("fe80::1%eth0"), "link-local"),
        ("0x7f.1", "loopback"),
    ],
)
def test_public_address_problem_names_the_kind(address: str | ipaddress.IPv6Address, kind: str | None) -> None:
    # Given an address (as text or object) / When it is judged / Then its kind is named, None for public ones
    assert public_address_problem(address if isinstance(address, IPV6) else address) == kind


def test_public_address_problem_rejects_text_that_is_no_address() -> None:
    # Given a name / When it is judged as an address / Then it is a ValueError
    with pytest.raises(ValueError, match="not an IP address"):
        public_address_problem("example.com")


# --- check_addresses and is_allowed_address -----------------------------------------------------------------------


def test_a_name_resolving_to_a_private_address_is_refused() -> None:
    # Given a target that passed the static checks
    target = DEFAULT.check_url("https://hooks.example.com/x")
    # When it resolves to 10.0.0.1 / Then it is refused, naming the kind but not the address
    with pytest.raises(TargetRefusedError) as refused:
        DEFAULT.check_addresses(target, ["10.0.0.1"])
    assert str(refused.value) == "https://hooks.example.com: the host resolves to a non-public address (private)"


def test_a_name_resolving_to_public_and_private_addresses_is_refused_whole() -> None:
    # Given a target / When it resolves to a public and a private address (in either order)
    target = DEFAULT.check_url("https://hooks.example.com/x")
    for addresses in (["93.184.216.34", "127.0.0.1"], ["169.254.169.254", "93.184.216.34"]):
        # Then it is refused, not trimmed to the public address
        with pytest.raises(TargetRefusedError, match="non-public"):
            DEFAULT.check_addresses(target, addresses)


def test_a_name_resolving_to_public_addresses_passes_normalised() -> None:
    # Given a target / When it resolves to public addresses (one IPv4-mapped, one duplicated)
    target = DEFAULT.check_url("https://hooks.example.com/x")
    allowed = DEFAULT.check_addresses(
        target, ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "::ffff:93.184.216.34", "93.184.216.34"]
    )
    # Then the addresses come back normalised, duplicates dropped, in order
    assert allowed == ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]


def test_a_mapped_private_address_is_refused() -> None:
    # Given a target / When it resolves to an IPv4-mapped metadata address / Then it is refused
    target = DEFAULT.check_url("https://hooks.example.com/x")
    with pytest.raises(TargetRefusedError, match="link-local"):
        DEFAULT.check_addresses(target, ["::ffff:169.254.169.254"])


def test_an_address_in_an_allowlisted_cidr_passes() -> None:
    # Given 10.0.0.0/8 allowlisted and a name inside the private zone
    policy = TargetPolicy.from_settings("10.0.0.0/8")
    target = policy.check_url("https://svc.corp.internal/x")
    # When it resolves inside the CIDR / Then it passes; one address outside it is refused
    assert policy.check_addresses(target, ["10.1.2.3", "10.9.9.9"]) == ["10.1.2.3", "10.9.9.9"]
    with pytest.raises(TargetRefusedError, match="private"):
        policy.check_addresses(target, ["10.1.2.3", "192.168.0.1"])


def test_an_allowlisted_name_passes_whatever_it_resolves_to() -> None:
    # Given a name allowlisted by name
    policy = TargetPolicy.from_settings("receiver.local.test")
    target = policy.check_url("http://receiver.local.test:9000/")
    # When it resolves to loopback / Then it passes
    assert policy.check_addresses(target, ["127.0.0.1", "::1"]) == ["127.0.0.1", "::1"]


def test_an_empty_resolution_is_refused() -> None:
    # Given a target / When it resolved to nothing / Then it is refused
    target = DEFAULT.check_url("https://hooks.example.com/x")
    with pytest.raises(TargetRefusedError, match="no addresses"):
        DEFAULT.check_addresses(target, [])


def test_a_resolution_that_is_no_address_is_refused() -> None:
    # Given a target / When the resolver returned junk / Then it is refused, not passed on
    target = DEFAULT.check_url("https://hooks.example.com/x")
    with pytest.raises(TargetRefusedError, match="not an IP address"):
        DEFAULT.check_addresses(target, ["example.com"])


def test_a_single_string_is_not_taken_for_a_list_of_addresses() -> None:
    # Given a target / When one string is passed instead of a list / Then it is a TypeError, not a check per char
    target = DEFAULT.check_url("https://hooks.example.com/x")
    with pytest.raises(TypeError, match="not one string"):
        DEFAULT.check_addresses(target, "93.184.216.34")


def test_a_literal_target_is_checked_again_by_check_addresses() -> None:
    # Given an allowlisted loopback literal
    policy = TargetPolicy.from_settings("127.0.0.1")
    target = policy.check_url("http://127.1:8080/")
    # When its own address is checked / Then it passes; a policy without the entry refuses it
    assert policy.check_addresses(target, [str(target.literal)]) == ["127.0.0.1"]
    with pytest.raises(TargetRefusedError, match="loopback"):
        DEFAULT.check_addresses(target, [str(target.literal)])


def test_is_allowed_address_combines_names_networks_and_public_addresses() -> None:
    # Given an allowlist with a name, a wildcard and a CIDR
    policy = TargetPolicy.from_settings("db.example.com, *.corp.example, 192.168.0.0/16")
    # Then public addresses pass, private ones only through a matching entry
    assert policy.is_allowed_address(IPV4("8.8.8.8"))
    assert policy.is_allowed_address(IPV4("192.168.3.4"))
    assert policy.is_allowed_address(IPV6("::ffff:192.168.3.4"))
    assert not policy.is_allowed_address(IPV4("10.0.0.1"))
    assert policy.is_allowed_address(IPV4("10.0.0.1"), host="DB.example.com.")
    assert policy.is_allowed_address(IPV4("10.0.0.1"), host="a.b.corp.example")
    assert not policy.is_allowed_address(IPV4("10.0.0.1"), host="corp.example")
    assert not policy.is_allowed_address(IPV4("10.0.0.1"), host="evilcorp.example")
    assert not policy.is_allowed_address(IPV4("10.0.0.1"), host="other.example.com")


# --- the allowlist setting ---------------------------------------------------------------------------------------


def test_from_settings_parses_names_wildcards_ips_and_cidrs() -> None:
    # Given the documented example setting
    policy = TargetPolicy.from_settings("host1, 10.0.0.0/8, 127.0.0.1, ::1, *.internal.example.com")
    # Then each entry lands where it belongs
    assert policy.allowlist == Allowlist(
        names=frozenset({("host1", None)}),
        suffixes=((".internal.example.com", None),),
        networks=(
            (ipaddress.ip_network("10.0.0.0/8"), None),
            (ipaddress.ip_network("127.0.0.1/32"), None),
            (ipaddress.ip_network("::1/128"), None),
        ),
    )
    assert policy.allow_plain_http is False


@pytest.mark.parametrize("setting", ["", "   ", " , ,", []])
def test_an_empty_setting_is_an_empty_allowlist(setting: str | list[str]) -> None:
    # Given an empty or blank setting / Then the allowlist is empty
    assert TargetPolicy.from_settings(setting).allowlist == Allowlist()


def test_from_settings_takes_an_iterable_of_entries() -> None:
    # Given entries as a list (one of them itself comma-separated)
    policy = TargetPolicy.from_settings(["localhost", "127.0.0.1, ::ffff:10.0.0.0/104"], allow_plain_http=True)
    # Then all are parsed, the IPv4-mapped CIDR as IPv4
    assert policy.allowlist.names == frozenset({("localhost", None)})
    assert policy.allowlist.networks == (
        (ipaddress.ip_network("127.0.0.1/32"), None),
        (ipaddress.ip_network("10.0.0.0/8"), None),
    )
    assert policy.allow_plain_http


@pytest.mark.parametrize(
    "entry",
    [
        "10.0.0.0/33",
        "10.0.0.1/8",
        "*",
        "*.",
        "a.*.b",
        "foo*.example",
        "exa mple.com",
        "http://x",
        "host:0",
        "1.2.3.4.5",
        "4294967296",
        "[::1",
        "a..b",
        "under%score",
    ],
)
def test_a_bad_entry_is_a_value_error_naming_it(entry: str) -> None:
    # Given a setting with one bad entry among good ones
    # When it is parsed / Then a ValueError names the bad entry
    with pytest.raises(ValueError, match=re.escape(repr(entry))):
        TargetPolicy.from_settings(f"example.com, {entry}, 10.0.0.0/8")


# --- redact_url --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("https://user:secret@Example.com:8443/path?token=x#f", "https://example.com:8443"),
        ("https://example.com:443/p", "https://example.com"),
        ("http://[::1]:8080/p?q", "http://[::1]:8080"),
        ("http://0x7f.1/p", "http://127.0.0.1"),
        ("ftp://user:pw@files.example.com/pub", "ftp://files.example.com"),
        ("https://a@b@example.com/", "https://example.com"),
        ("file:///etc/passwd", "<invalid url>"),
        ("not a url", "<invalid url>"),
        ("https://exa\nmple.com/", "<invalid url>"),
        ("https://example.com:99999/", "<invalid url>"),
        ("", "<invalid url>"),
    ],
)
def test_redact_url_keeps_only_the_origin(url: str, redacted: str) -> None:
    # Given a URL / When it is redacted / Then only scheme://host[:port] is left, or the invalid marker
    assert redact_url(url) == redacted


def test_redact_url_never_raises_on_non_text() -> None:
    # Given things that are not text / When they are redacted / Then the invalid marker comes back
    for junk in (None, b"https://example.com", 42, ["https://example.com"]):
        assert redact_url(junk) == "<invalid url>"  # type: ignore[arg-type]


secrets = st.text(min_size=1, max_size=20).map(lambda text: "~s" + text)  # "~" is never in a host or scheme
hosts = st.sampled_from(["example.com", "hooks.example.org", "127.0.0.1", "[2001:db8::1]", "xn--bcher-kva.example"])
ports = st.none() | st.integers(1, 65535)
schemes = st.sampled_from(["http", "https"])


@fuzz
@given(
    scheme=schemes,
    user=secrets,
    password=st.none() | secrets,
    host=hosts,
    port=ports,
    path=secrets,
    query=secrets,
    fragment=secrets,
)
def test_redact_url_never_leaks_userinfo_path_or_query(
    scheme: str, user: str, password: str | None, host: str, port: int | None, path: str, query: str, fragment: str
) -> None:
    # Given a URL built from random userinfo, path, query and fragment, each percent-encoded
    userinfo = quote(user, safe="") + ("" if password is None else ":" + quote(password, safe=""))
    authority = host if port is None else f"{host}:{port}"
    url = f"{scheme}://{userinfo}@{authority}/{quote(path, safe='/')}?{quote(query, safe='=&')}#{quote(fragment)}"
    # When it is redacted
    redacted = redact_url(url)
    # Then exactly the origin is left, and none of the secrets, raw or encoded
    default = {"http": 80, "https": 443}[scheme]
    assert redacted == (f"{scheme}://{host}" if port in (None, default) else f"{scheme}://{host}:{port}")
    for secret in (user, password, path, query, fragment):
        if secret is not None:
            assert secret not in redacted
            assert quote(secret, safe="") not in redacted


@fuzz
@given(st.text(max_size=200) | st.text(max_size=100).map(lambda text: "https://" + text))
def test_redact_url_never_raises_and_check_url_raises_only_its_error(text: str) -> None:
    # Given arbitrary text, bare or after https://
    # When it is redacted / Then a string comes back, with no control characters or whitespace
    redacted = redact_url(text)
    assert isinstance(redacted, str)
    assert redacted == "<invalid url>" or (redacted.isprintable() and " " not in redacted)
    # When it is checked / Then it passes or is refused with TargetRefusedError, never another exception
    try:
        target = DEFAULT.check_url(text)
    except TargetRefusedError:
        return
    assert target.scheme == "https"
    assert target.origin == redacted


@fuzz
@given(
    st.text(string.ascii_letters + string.digits + "%@:[]/?#.-_~!$&'()*+,;=\\", max_size=60).map(
        lambda text: "https://" + text
    )
)
def test_check_url_never_raises_another_exception_on_url_shaped_junk(url: str) -> None:
    # Given URL-shaped junk (brackets, @, colons, percent signs...)
    # When it is checked / Then it passes or is refused with TargetRefusedError only
    try:
        target = DEFAULT.check_url(url)
    except TargetRefusedError:
        return
    # And what passes has a clean host: a public literal or a name of letters, digits, "-", "_" and dots
    assert target.literal is not None or set(target.host) <= set(string.ascii_lowercase + string.digits + "-_.")
    assert target.literal is None or public_address_problem(target.literal) is None


# --- every spelling of an address gets the same verdict ----------------------------------------------------------


def spellings(value: int) -> list[str]:
    """Spellings of one IPv4 address that resolvers read alike."""
    address = IPV4(value)
    a, b, c, d = address.packed
    return [
        str(address),
        str(value),
        hex(value),
        hex(value).upper().replace("0X", "0x"),
        f"0{a:o}.0{b:o}.0{c:o}.0{d:o}",
        f"{a:#x}.{b}.0{c:o}.{d:#x}",
        f"{a}.{b}.{(c << 8) | d}",
        f"{a}.{value & 0xFFFFFF}",
        f"{address}.",
        f"[::ffff:{address}]",
        f"[::ffff:{value >> 16:x}:{value & 0xFFFF:x}]",
        f"[0:0:0:0:0:ffff:{value >> 16:04x}:{value & 0xFFFF:04x}]",
    ]


policies = st.sampled_from([DEFAULT, TargetPolicy.from_settings("10.0.0.0/8, 127.0.0.1, 169.254.169.254")])


@fuzz
@given(value=st.integers(0, 2**32 - 1), policy=policies)
def test_every_spelling_of_an_ipv4_address_gets_the_same_verdict(value: int, policy: TargetPolicy) -> None:
    # Given an IPv4 address and its dotted, decimal, hex, octal, short and IPv4-mapped spellings
    address = IPV4(value)
    expected_allowed = policy.is_allowed_address(address)
    for spelling in spellings(value):
        # When each spelling is parsed and checked over https
        assert parse_ip_literal(spelling) == address, spelling
        try:
            target = policy.check_url(f"https://{spelling}/hook")
        except TargetRefusedError:
            allowed = False
        else:
            allowed = True
            assert target.literal == address
            assert target.host == str(address)
        # Then all get the verdict of the address itself
        assert allowed == expected_allowed, spelling


@fuzz
@given(value=st.integers(0, 2**32 - 1))
def test_the_verdict_on_a_literal_is_the_address_problem(value: int) -> None:
    # Given any IPv4 address and the default policy
    address = IPV4(value)
    # When it is checked as a literal / Then it is refused exactly when it has a problem, with that problem named
    problem = public_address_problem(address)
    if problem is None:
        assert DEFAULT.check_url(f"https://{value}/").literal == address
    else:
        with pytest.raises(TargetRefusedError) as refused:
            DEFAULT.check_url(f"https://{value}/")
        assert f"({problem})" in str(refused.value)


# --- ports in the allowlist --------------------------------------------------------------------------------------


def test_an_entry_with_a_port_opens_that_port_only() -> None:
    # Given loopback allowed on port 9000 only, a name on 8443 and a network on every port
    policy = TargetPolicy.from_settings("127.0.0.1:9000, [::1]:9000, hooks.internal:8443, 10.0.0.0/8")
    # Then the allowed port passes, in every spelling of the address
    assert policy.check_url("http://127.0.0.1:9000/hook").allowlisted
    assert policy.check_url("http://0x7f.1:9000/hook").allowlisted
    assert policy.check_url("http://[::1]:9000/").allowlisted
    assert policy.check_url("https://hooks.internal:8443/").allowlisted
    assert policy.check_url("http://10.1.2.3:5/").allowlisted
    # And another port of the same host is refused (DynamoDB Local's, the API's, the scheme's default)
    for url in ("http://127.0.0.1:8000/", "http://127.0.0.1/", "http://[::1]:8766/"):
        with pytest.raises(TargetRefusedError, match="not a public address"):
            policy.check_url(url)
    assert not policy.check_url("https://hooks.internal/").allowlisted
    # And a name's resolved addresses are judged on the target's port
    target = policy.check_url("https://hooks.internal:8443/")
    assert policy.check_addresses(target, ["10.9.9.9"]) == ["10.9.9.9"]
    other = TargetPolicy.from_settings("hooks.internal:8443").check_url("https://hooks.internal:9443/")
    with pytest.raises(TargetRefusedError, match="non-public"):
        TargetPolicy.from_settings("hooks.internal:8443").check_addresses(other, ["127.0.0.1"])
    # And "every port?" is answered by portless entries only
    assert not policy.is_allowed_address(IPV4("127.0.0.1"))
    assert policy.is_allowed_address(IPV4("127.0.0.1"), port=9000)
    assert policy.is_allowed_address(IPV4("10.0.0.1"))


@pytest.mark.parametrize(
    "entry", ["127.0.0.1:0", "127.0.0.1:65536", "host:x", "[::1", "[::1]x", "[::1]:", "*.corp:99999"]
)
def test_a_bad_port_in_an_entry_is_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="bad allowlist entry"):
        TargetPolicy.from_settings(entry)
