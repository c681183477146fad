"""Which webhook targets may be called: the guard against server-side request forgery (SSRF).

Whoever may schedule a task chooses the URL it calls, so without a guard they could make the executor reach the
instance metadata service (169.254.169.254, fd00:ec2::254), loopback services, private networks or a private
DynamoDB. The client checks a URL at schedule time (:meth:`TargetPolicy.check_url`); the executor checks it again,
resolves the host once, checks every resolved address (:meth:`TargetPolicy.check_addresses`) and connects to exactly
a checked address, so a DNS answer cannot change between the check and the call.

Rules: http or https only, plain http only when allowed or for an allowlisted target; no credentials in the URL;
no control characters, whitespace or backslashes; at most :data:`MAX_URL_LENGTH` characters; port 1-65535. A host
that is an IP address in any spelling a resolver accepts (``2130706433``, ``0x7f.1``, ``[::ffff:127.0.0.1]``...) is
judged as that address; a host whose last label is numeric but which is no valid IPv4 address (``1.2.3.4.5``,
``4294967296``) is refused, because resolvers disagree about it. ``localhost`` names and cloud metadata names are
refused; other names (``.internal`` too) are judged by what they resolve to. Only publicly routable addresses pass,
unless the allowlist (``PUNCTUAL_ALLOWED_TARGETS``, or a tenant's own: host names, ``*.suffix`` wildcards, IPs and
CIDRs, each with an optional port) opens them.
IPv6 forms that embed an IPv4 address are judged by it (IPv4-mapped, NAT64 64:ff9b::/96); the deprecated ones
(IPv4-compatible, 6to4, Teredo) and local-use NAT64 (64:ff9b:1::/48) are refused outright. Reading a URL and
its host is :mod:`punctual.network.hosts`' job; naming what kind of address one is, :mod:`punctual.network.addresses`'.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from punctual.errors import TargetRefusedError
from punctual.network.addresses import IPV4_MAPPED, public_address_problem
from punctual.network.hosts import (
    MAX_PORT,
    IPAddress,
    IPNetwork,
    allowlist_name,
    format_origin,
    loose_name,
    parse_ip_literal,
    parse_url,
    unmap,
)

SHOWN_HOST_CHARS = 64  # how much of a refused host, as written, a message shows
_TARGET_ARN_RE = re.compile(r"arn:aws[a-z-]*:(lambda|sqs|sns|events):[a-z0-9-]+:\d{12}:[A-Za-z0-9_.:/+=,@$-]+")

# Names that resolve to loopback on common systems (/etc/hosts, RFC 6761 .localhost).
_LOOPBACK_NAMES = frozenset(
    {
        "localhost",
        "localhost.localdomain",
        "localhost6",
        "localhost6.localdomain6",
        "ip6-localhost",
        "ip6-loopback",
    }
)
# Names of cloud instance metadata services (they resolve to link-local addresses inside the cloud).
_METADATA_NAMES = frozenset({"metadata", "metadata.google.internal", "instance-data", "instance-data.ec2.internal"})


@dataclass(frozen=True, slots=True)
class Target:
    """A URL's target as checked: what the executor resolves (``host``) and calls.

    ``host`` is lower-case, without brackets or trailing dot, IDNA-encoded (ASCII) for names; for an IP literal
    it is the normalised address (``0x7f.1`` becomes ``127.0.0.1``, ``::ffff:127.0.0.1`` too), without zone id.
    """

    scheme: str
    host: str
    port: int
    literal: IPAddress | None
    allowlisted: bool

    @property
    def origin(self) -> str:
        """``scheme://host[:port]``: the port only when not the scheme's default, an IPv6 host in brackets."""
        return format_origin(self.scheme, self.host, self.port)


@dataclass(frozen=True, slots=True)
class Allowlist:
    """Parsed allowlist entries: exact names, ``*.suffix`` wildcards (kept as ``.suffix``) and networks, each with
    the one port it opens (None: every port)."""

    names: frozenset[tuple[str, int | None]] = frozenset()
    suffixes: tuple[tuple[str, int | None], ...] = ()
    networks: tuple[tuple[IPNetwork, int | None], ...] = ()

    @classmethod
    def parse(cls, entries: str | Iterable[str]) -> Allowlist:
        """Parse comma-separated entries (a string, or an iterable of them); blank entries are ignored.

        Parameters
        ----------
        entries
            For example ``"hooks.example.com, *.corp.example:8443, 127.0.0.1:9000, [::1]:9000, 10.0.0.0/8"``.
            An entry with ``:port`` (an IPv6 address or network in brackets then) opens that port only; one
            without opens every port of the host.

        Returns
        -------
        Allowlist
            Names lower-case and IDNA-encoded, trailing dot dropped; single IPs as /32 or /128 networks;
            IPv4-mapped IPv6 entries as their IPv4 form.

        Raises
        ------
        ValueError
            Naming the first bad entry: a malformed name, CIDR or port, host bits set in a CIDR, a wildcard other
            than a leading ``*.``, a scheme, a numeric name that is no IPv4 address.
        """
        items = [entries] if isinstance(entries, str) else list(entries)
        names: set[tuple[str, int | None]] = set()
        suffixes: list[tuple[str, int | None]] = []
        networks: list[tuple[IPNetwork, int | None]] = []
        for item in items:
            for raw in item.split(","):
                entry = raw.strip()
                if not entry:
                    continue
                try:
                    host, port = _entry_port(entry)
                    parsed = _parse_entry(host)
                except ValueError as exc:
                    raise ValueError(f"bad allowlist entry {entry!r}: {exc}") from None
                if not isinstance(parsed, str):
                    networks.append((parsed, port))
                elif parsed.startswith("."):
                    suffixes.append((parsed, port))
                else:
                    names.add((parsed, port))
        return cls(frozenset(names), tuple(dict.fromkeys(suffixes)), tuple(dict.fromkeys(networks)))

    def matches_name(self, host: str, port: int | None = None) -> bool:
        """Whether the host name is an allowlisted name or a subdomain of an allowlisted ``*.suffix``, on ``port``
        (None: on every port, so only by an entry without one)."""
        name = loose_name(host)
        return any(_opens(opened, port) for entry, opened in self.names if entry == name) or any(
            name.endswith(suffix) and _opens(opened, port) for suffix, opened in self.suffixes
        )

    def matches_address(self, address: IPAddress, port: int | None = None) -> bool:
        """Whether the address (IPv4-mapped IPv6 counts as its IPv4 form) lies in an allowlisted network, on
        ``port`` (None: on every port)."""
        judged = unmap(address)
        return any(judged in network and _opens(opened, port) for network, opened in self.networks)


def _opens(opened: int | None, port: int | None) -> bool:
    """Whether an entry opening ``opened`` (None: every port) allows ``port`` (None: every port)."""
    return opened is None or opened == port


def _entry_port(entry: str) -> tuple[str, int | None]:
    """An allowlist entry split into its host part and its port (None when it names none): ``host:port``,
    ``[v6]:port`` or ``[v6/len]``; an unbracketed IPv6 address or network has no port."""
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError("an IPv6 entry in brackets is [address] or [address]:port")
        return host, _entry_port_number(rest[1:]) if rest else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, _entry_port_number(port)
    return entry, None


def _entry_port_number(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_PORT:
        raise ValueError(f"a port is a number from 1 to {MAX_PORT}")
    return int(text)


@dataclass(frozen=True, slots=True)
class TargetPolicy:
    """What may be called: public targets over https, plus whatever the allowlist opens."""

    allowlist: Allowlist = Allowlist()
    allow_plain_http: bool = False

    @classmethod
    def from_settings(cls, allowed_targets: str | Iterable[str] = "", allow_plain_http: bool = False) -> TargetPolicy:
        """Build the policy from the settings' values.

        Parameters
        ----------
        allowed_targets
            ``PUNCTUAL_ALLOWED_TARGETS``: comma-separated host names, ``*.suffix`` wildcards, IPs and CIDRs, each
            with an optional ``:port``, e.g. ``"hooks.example.com, *.corp.example, 10.0.0.0/8:443, 127.0.0.1:9000,
            [::1]:9000"``; empty means no exceptions.
        allow_plain_http
            Whether ``http://`` is allowed for every target (it always is for allowlisted ones).

        Raises
        ------
        ValueError
            Naming a bad entry (see :meth:`Allowlist.parse`).
        """
        return cls(Allowlist.parse(allowed_targets), allow_plain_http)

    def check_url(self, url: str) -> Target:
        """Check a webhook URL without resolving it (the static rules in the module docstring; the parsing
        is :func:`~punctual.network.hosts.parse_url`'s).

        Parameters
        ----------
        url
            The URL as the user gave it.

        Returns
        -------
        Target
            The normalised target. A name still has to pass :meth:`check_addresses` once resolved.

        Raises
        ------
        TargetRefusedError
            With the reason, e.g. ``"https://127.0.0.1 (written 0x7f.1): not a public address (loopback)"``.

        Examples
        --------
        >>> TargetPolicy().check_url("https://Example.COM./hook?x=1").origin
        'https://example.com'
        >>> TargetPolicy.from_settings("127.0.0.1").check_url("http://127.1:8080/").origin
        'http://127.0.0.1:8080'
        """
        parts = parse_url(url)
        scheme, host, port, literal, host_raw = parts.scheme, parts.host, parts.port, parts.literal, parts.host_raw
        origin = format_origin(scheme, host, port)
        if literal is not None:
            allowlisted = self.allowlist.matches_address(literal, port)
            problem = None if allowlisted else public_address_problem(literal)
            if problem is not None:
                written = host_raw.lower()
                shown = f"[{host}]" if isinstance(literal, ipaddress.IPv6Address) else host
                as_written = host_raw if len(host_raw) <= SHOWN_HOST_CHARS else host_raw[: SHOWN_HOST_CHARS - 3] + "..."
                spelled = f" (written {as_written})" if written != shown and host_raw.isprintable() else ""
                raise TargetRefusedError(f"{origin}{spelled}", f"not a public address ({problem})")
        else:
            allowlisted = self.allowlist.matches_name(host, port)
            if not allowlisted and (host in _LOOPBACK_NAMES or host.endswith(".localhost")):
                raise TargetRefusedError(origin, "localhost names resolve to loopback")
            if not allowlisted and host in _METADATA_NAMES:
                raise TargetRefusedError(origin, "a cloud instance metadata service name")
        if scheme == "http" and not (self.allow_plain_http or allowlisted):
            raise TargetRefusedError(origin, "plain http is not allowed: use https")
        return Target(scheme, host, port, literal, allowlisted)

    def check_addresses(self, target: Target, addresses: Sequence[str]) -> list[str]:
        """Check the addresses ``target.host`` resolved to; all of them must be allowed.

        A name that resolves to a public and a private address is refused as a whole: dropping the private one
        would still let an attacker's DNS choose. Allowed are public addresses, addresses in an allowlisted
        network, and anything a name allowlisted by name resolves to.

        Parameters
        ----------
        target
            What :meth:`check_url` returned.
        addresses
            The resolved addresses as text (``getaddrinfo``'s form; a zone id is kept but not judged).

        Returns
        -------
        list[str]
            The addresses to connect to, normalised (IPv4-mapped IPv6 as IPv4), duplicates dropped, in order.

        Raises
        ------
        TargetRefusedError
            When the list is empty, an entry is no IP address, or any address is not allowed (the reason names
            the kind of address, not the address).
        """
        if isinstance(addresses, str):
            raise TypeError("addresses must be a sequence of address strings, not one string")
        if not addresses:
            raise TargetRefusedError(target.origin, "the host resolved to no addresses")
        allowed: list[str] = []
        for text in addresses:
            try:
                resolved = ipaddress.ip_address(str(text).strip())
            except ValueError:
                raise TargetRefusedError(
                    target.origin, "the host resolved to something that is not an IP address"
                ) from None
            judged = unmap(resolved)
            if not self.is_allowed_address(judged, host=target.host, port=target.port):
                problem = public_address_problem(judged)
                raise TargetRefusedError(target.origin, f"the host resolves to a non-public address ({problem})")
            normalised = str(judged) if isinstance(judged, ipaddress.IPv4Address) else str(resolved)
            if normalised not in allowed:
                allowed.append(normalised)
        return allowed

    def is_allowed_address(self, address: IPAddress, host: str | None = None, port: int | None = None) -> bool:
        """Whether ``address`` may be connected to (for the name ``host``, when given) on ``port``.

        Parameters
        ----------
        address
            The address; IPv4-mapped IPv6 is judged as its IPv4 form, a zone id is ignored.
        host
            The name it was resolved from: an allowlisted name allows whatever it resolves to.
        port
            The port called; None asks whether every port is open (only an entry without a port opens them).

        Returns
        -------
        bool
            True when the host name is allowlisted, the address lies in an allowlisted network, or it is public.
        """
        if host is not None and self.allowlist.matches_name(host, port):
            return True
        judged = unmap(address)
        return self.allowlist.matches_address(judged, port) or public_address_problem(judged) is None


def _parse_entry(entry: str) -> str | IPNetwork:
    """One allowlist entry: a network, a ``.suffix`` (from ``*.suffix``) or a name; ValueError when bad."""
    text = entry.lower()
    if "/" in text:
        try:
            network = ipaddress.ip_network(text)
        except ValueError as exc:
            raise ValueError(f"not a CIDR ({exc})") from None
        if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(IPV4_MAPPED):
            network = ipaddress.IPv4Network((int(network.network_address) & 0xFFFFFFFF, network.prefixlen - 96))
        return network
    if text.startswith("*."):
        suffix = text[2:]
        if "*" in suffix:
            raise ValueError("a wildcard may only be a leading '*.'")
        return "." + allowlist_name(suffix)
    if "*" in text:
        raise ValueError("a wildcard may only be a leading '*.'")
    address = parse_ip_literal(text)
    if address is not None:
        return ipaddress.ip_network(address)
    return allowlist_name(text)


def check_target_arn(arn: str) -> None:
    """Refuse (ValueError) anything but the exact ARN of a Lambda function, SQS queue, SNS topic or event bus."""
    if not _TARGET_ARN_RE.fullmatch(arn):
        raise ValueError(
            f"{arn!r} is not the exact ARN of a Lambda function, SQS queue, SNS topic or EventBridge bus (no wildcards)"
        )
