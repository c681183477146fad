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
(IPv4-compatible, 6to4, Teredo) and local-use NAT64 (64:ff9b:1::/48) are refused outright.
"""

from __future__ import annotations

import ipaddress
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias
from urllib.parse import SplitResult, urlsplit

from .errors import TargetRefusedError

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_URL_LENGTH = 2048
INVALID_URL = "<invalid url>"  # what redact_url returns for anything it cannot reduce to an origin

_DEFAULT_PORTS = {"http": 80, "https": 443}
_DEC = frozenset("0123456789")
_OCT = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")
_IPV6_CHARS = _HEX | frozenset(":.")
_ZONE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789+-.")

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


def _networks(*table: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(cidr), kind) for cidr, kind in table)


# First match wins: the specific entries come before the ranges that hold them.
_IPV4_SPECIAL = _networks(
    ("0.0.0.0/32", "unspecified"),
    ("255.255.255.255/32", "broadcast"),
    ("169.254.169.254/32", "link-local (instance metadata service)"),
    ("0.0.0.0/8", "this network (0.0.0.0/8)"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared address space (CGNAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "reserved (IETF protocol assignments)"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "reserved (deprecated 6to4 relay anycast)"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
)
_IPV6_SPECIAL = _networks(
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("::/8", "reserved"),
    ("100::/64", "discard-only"),
    ("2001:2::/48", "benchmarking"),
    ("2001:db8::/32", "documentation"),
    ("2001::/23", "reserved (IETF protocol assignments)"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "reserved (SRv6 SIDs)"),
    ("fd00:ec2::254/128", "unique local (instance metadata service)"),
    ("fc00::/7", "unique local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
)
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
_TEREDO = ipaddress.IPv6Network("2001::/32")
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")


class _InvalidError(ValueError):
    """A URL part failed a check; the message is safe to show (it never echoes user text that is not vetted)."""


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
        return _format_origin(self.scheme, self.host, self.port)


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
        name = _loose_name(host)
        return any(_opens(opened, port) for entry, opened in self.names if entry == name) or any(
            name.endswith(suffix) and _opens(opened, port) for suffix, opened in self.suffixes
        )

    def matches_address(self, address: IPAddress, port: int | None = None) -> bool:
        """Whether the address (IPv4-mapped IPv6 counts as its IPv4 form) lies in an allowlisted network, on
        ``port`` (None: on every port)."""
        judged = _unmap(address)
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
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError("a port is a number from 1 to 65535")
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
        """Check a webhook URL without resolving it (the static rules in the module docstring).

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
        if not isinstance(url, str):
            raise TargetRefusedError(None, "the URL is not a string")
        if len(url) > MAX_URL_LENGTH:
            raise _refusal(url, f"the URL is longer than {MAX_URL_LENGTH} characters")
        try:
            parts = _split(url)
        except _InvalidError as exc:
            raise _refusal(url, str(exc)) from None
        scheme = parts.scheme
        if not scheme:
            raise _refusal(url, "no scheme: use https://")
        if scheme not in _DEFAULT_PORTS:
            shown = f"{scheme!r}" if len(scheme) <= 32 else "(long)"
            raise _refusal(url, f"scheme {shown} is not allowed: use https")
        try:
            userinfo, host_raw, port_raw = _authority(parts.netloc)
        except _InvalidError as exc:
            raise _refusal(url, str(exc)) from None
        if userinfo is not None:
            raise _refusal(url, "credentials in the URL (name:password@ before the host) are not allowed")
        try:
            host, literal = _classify_host(host_raw)
        except _InvalidError as exc:
            raise TargetRefusedError(None, str(exc)) from None
        try:
            port = _parse_port(port_raw) or _DEFAULT_PORTS[scheme]
        except _InvalidError as exc:
            raise TargetRefusedError(_format_origin(scheme, host, None), str(exc)) from None

        origin = _format_origin(scheme, host, port)
        if literal is not None:
            allowlisted = self.allowlist.matches_address(literal, port)
            problem = None if allowlisted else public_address_problem(literal)
            if problem is not None:
                written = host_raw.lower()
                shown = f"[{host}]" if literal.version == 6 else host
                as_written = host_raw if len(host_raw) <= 64 else host_raw[:61] + "..."
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
            judged = _unmap(resolved)
            if not self.is_allowed_address(judged, host=target.host, port=target.port):
                problem = public_address_problem(judged)
                raise TargetRefusedError(target.origin, f"the host resolves to a non-public address ({problem})")
            normalised = str(judged) if judged.version == 4 else str(resolved)
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
        judged = _unmap(address)
        return self.allowlist.matches_address(judged, port) or public_address_problem(judged) is None


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address a host stands for, in any spelling a resolver or the C library turns into one.

    Recognised: dotted quads and their 1-, 2- and 3-part short forms (``127.1``), decimal, hex (``0x``) and
    octal (leading ``0``) parts in any mix (``2130706433``, ``0x7f.1``, ``0177.0.0.1``), one trailing dot,
    full-width digits and dots (IDNA maps them to ASCII), IPv6 with or without brackets, with a zone id
    (``fe80::1%eth0``, ``%25eth0``; dropped) and with embedded IPv4. IPv4-mapped IPv6 (``::ffff:127.0.0.1``,
    ``::ffff:7f00:1``) is returned as the IPv4 address it reaches; other IPv6 forms stay IPv6.

    Parameters
    ----------
    host
        A URL's host part.

    Returns
    -------
    IPv4Address | IPv6Address | None
        None for a name, and for anything that is no valid address: more than four parts (``1.2.3.4.5``), a
        value out of range (``4294967296``, ``256.0.0.1``), bad digits (``08``). :meth:`TargetPolicy.check_url`
        refuses the numeric ones of these; ``0x7f.example.com`` is a name.

    Examples
    --------
    >>> parse_ip_literal("0x7f.1"), parse_ip_literal("[::ffff:7f00:1]"), parse_ip_literal("example.com")
    (IPv4Address('127.0.0.1'), IPv4Address('127.0.0.1'), None)
    """
    if not isinstance(host, str):
        return None
    try:
        return _classify_host(host)[1]
    except _InvalidError:
        return None


def public_address_problem(address: IPAddress | str) -> str | None:
    """Why an address is not publicly routable, or None when it is.

    IPv4-mapped (``::ffff:0:0/96``) and NAT64 (``64:ff9b::/96``) addresses are judged by the IPv4 address they
    embed (``"IPv4-mapped loopback"``, ``"NAT64 private"``). IPv4-compatible (``::/96``), 6to4 (``2002::/16``) and
    Teredo (``2001::/32``) are deprecated and refused outright (the kind names the embedded address's problem when
    it has one); local-use NAT64 (``64:ff9b:1::/48``) too, its embedding having no fixed place. IPv6 outside
    ``2000::/3`` is reserved.

    Parameters
    ----------
    address
        An address, or its text in any spelling :func:`parse_ip_literal` accepts.

    Returns
    -------
    str | None
        The kind: ``"loopback"``, ``"private"``, ``"link-local"``, ``"shared address space (CGNAT)"``,
        ``"multicast"``, ``"reserved"``, ``"unspecified"``, ``"broadcast"``, ``"documentation"``,
        ``"benchmarking"``, ``"unique local"``, ``"IPv4-mapped loopback"``...

    Raises
    ------
    ValueError
        When given text that is no IP address.

    Examples
    --------
    >>> public_address_problem("8.8.8.8") is None, public_address_problem("10.1.2.3")
    (True, 'private')
    """
    if isinstance(address, str):
        parsed = parse_ip_literal(address)
        if parsed is None:
            raise ValueError("not an IP address")
        address = parsed
    if isinstance(address, ipaddress.IPv4Address):
        return _ipv4_problem(address)
    return _ipv6_problem(ipaddress.IPv6Address(int(address)))


def redact_url(url: str) -> str:
    """A URL reduced to ``scheme://host[:port]``, safe to log and show.

    Userinfo, path, query and fragment never appear; the host is normalised as in :class:`Target`. Anything
    that does not reduce cleanly (no host, a control character, a bad port...) gives ``"<invalid url>"``.

    Parameters
    ----------
    url
        Any text (or anything else: it never raises).

    Returns
    -------
    str
        The origin, or ``"<invalid url>"``.

    Examples
    --------
    >>> redact_url("https://user:secret@Example.com:8443/path?token=x#f")
    'https://example.com:8443'
    """
    try:
        parts = _split(url)
        scheme = parts.scheme
        if not scheme or len(scheme) > 32 or not set(scheme) <= _SCHEME_CHARS:
            return INVALID_URL
        _, host_raw, port_raw = _authority(parts.netloc)
        host, _ = _classify_host(host_raw)
        return _format_origin(scheme, host, _parse_port(port_raw))
    except Exception:  # noqa: BLE001 - never raises, whatever comes in
        return INVALID_URL


# --- private helpers ---------------------------------------------------------------------------------------------


def _refusal(url: str, reason: str) -> TargetRefusedError:
    origin = redact_url(url)
    return TargetRefusedError(None if origin == INVALID_URL else origin, reason)


def _format_origin(scheme: str, host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    if port is None or port == _DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{shown}"
    return f"{scheme}://{shown}:{port}"


def _split(url: str) -> SplitResult:
    """urlsplit, after refusing what parsers disagree on (urlsplit itself drops tabs and newlines)."""
    if not isinstance(url, str):
        raise _InvalidError("the URL is not a string")
    for char in url:
        category = unicodedata.category(char)
        if category == "Cc":
            raise _InvalidError("control character in the URL")
        if category == "Cs":
            raise _InvalidError("invalid character in the URL")
        if char.isspace():
            raise _InvalidError("whitespace in the URL")
        if char == "\\":
            raise _InvalidError("backslash in the URL")
    try:
        return urlsplit(url)
    except ValueError:
        raise _InvalidError("malformed URL") from None


def _authority(netloc: str) -> tuple[str | None, str, str | None]:
    """Split ``[userinfo@]host[:port]`` as urlsplit does (the last ``@`` ends the userinfo)."""
    userinfo, at, hostport = netloc.rpartition("@")
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise _InvalidError("unbalanced brackets in the host")
        host_raw, rest = hostport[: end + 1], hostport[end + 1 :]
        if rest and not rest.startswith(":"):
            raise _InvalidError("malformed host")
        port_raw = rest[1:] if rest else None
    else:
        host_raw, colon, port_text = hostport.partition(":")
        if ":" in port_text:
            raise _InvalidError("an IPv6 address must be in brackets")
        port_raw = port_text if colon else None
    if not host_raw:
        raise _InvalidError("no host")
    return (userinfo if at else None), host_raw, port_raw


def _parse_port(port_raw: str | None) -> int | None:
    """The explicit port, or None when there is none (an empty port, ``host:``, means the default)."""
    if not port_raw:
        return None
    if not set(port_raw) <= _DEC:
        raise _InvalidError("the port is not a number")
    digits = port_raw.lstrip("0") or "0"
    if len(digits) > 5 or not 1 <= int(digits) <= 65535:
        shown = digits if len(digits) <= 10 else digits[:10] + "..."
        raise _InvalidError(f"port {shown} is out of range (1-65535)")
    return int(digits)


def _classify_host(raw: str) -> tuple[str, IPAddress | None]:
    """The normalised host and, for an IP literal, its address; _InvalidError for a host no one should call."""
    if not raw:
        raise _InvalidError("no host")
    if raw.startswith("[") or raw.endswith("]"):
        if not (raw.startswith("[") and raw.endswith("]")):
            raise _InvalidError("unbalanced brackets in the host")
        return _ipv6_host(raw[1:-1])
    if ":" in raw:
        return _ipv6_host(raw)
    name = _ascii_name(raw)
    labels = name.split(".")
    if not _looks_numeric(labels[-1]):
        return _check_name_length(name), None
    value = _ipv4_value(labels)
    if value is None:
        raise _InvalidError(f"numeric host {name} is not a valid IPv4 address")
    address = ipaddress.IPv4Address(value)
    return str(address), address


def _ipv6_host(text: str) -> tuple[str, IPAddress]:
    address_text, percent, zone = text.partition("%")
    if percent:
        if zone.startswith("25") and len(zone) > 2:  # RFC 6874: the "%" itself percent-encoded
            zone = zone[2:]
        if not zone or not set(zone) <= _ZONE_CHARS:
            raise _InvalidError("invalid IPv6 zone id")
    if not address_text or not set(address_text) <= _IPV6_CHARS:
        raise _InvalidError("invalid IPv6 address")
    try:
        address = _unmap(ipaddress.IPv6Address(address_text))
    except ValueError:
        raise _InvalidError("invalid IPv6 address") from None
    return str(address), address


def _ascii_name(raw: str) -> str:
    """Lower-case ASCII (IDNA for non-ASCII), one trailing dot dropped; letters, digits, ``-``, ``_``, dots."""
    text = raw
    if not text.isascii():
        try:
            text = text.encode("idna").decode("ascii")
        except (UnicodeError, ValueError):
            raise _InvalidError("the host is not a valid internationalised domain name") from None
    text = text.lower()
    if text.endswith("."):
        text = text[:-1]
    if not text:
        raise _InvalidError("no host")
    for char in text:
        if char not in _NAME_CHARS:
            shown = f" {char!r}" if char.isascii() and char.isprintable() else ""
            raise _InvalidError(f"invalid character{shown} in the host")
    if "" in text.split("."):
        raise _InvalidError("empty label in the host name")
    return text


def _check_name_length(name: str) -> str:
    """DNS limits, for names only (a numeric host is read as inet_aton reads it, whatever its length)."""
    if len(name) > 253:
        raise _InvalidError("the host name is longer than 253 characters")
    if any(len(label) > 63 for label in name.split(".")):
        raise _InvalidError("a host name label is longer than 63 characters")
    return name


def _loose_name(host: str) -> str:
    """A host name in allowlist form, for comparison only (never raises)."""
    try:
        return _ascii_name(host)
    except _InvalidError:
        return host.lower().rstrip(".")


def _looks_numeric(label: str) -> bool:
    """The URL standard's "ends in a number": such a host is an IPv4 address or invalid, never a name."""
    if not label:
        return False
    if label[:2] in ("0x", "0X"):
        return set(label[2:]) <= _HEX
    return set(label) <= _DEC


def _ipv4_number(part: str) -> int | None:
    """One part as inet_aton reads it: ``0x`` hex, leading ``0`` octal, else decimal; None when invalid."""
    if part[:2] in ("0x", "0X"):
        digits = part[2:]
        if not set(digits) <= _HEX:
            return None
        digits = digits.lstrip("0") or "0"  # "0x" alone is 0, as in the URL standard
        return int(digits, 16) if len(digits) <= 8 else None
    if not part or not set(part) <= _DEC:
        return None
    if len(part) > 1 and part[0] == "0":
        if not set(part) <= _OCT:
            return None
        digits = part.lstrip("0") or "0"
        return int(digits, 8) if len(digits) <= 11 else None
    return int(part) if len(part) <= 10 else None


def _ipv4_value(labels: list[str]) -> int | None:
    """The 32-bit value of 1 to 4 parts, the last filling the remaining bytes; None when invalid or too large."""
    if len(labels) > 4:
        return None
    numbers = [_ipv4_number(label) for label in labels]
    if any(number is None for number in numbers):
        return None
    *head, last = [number for number in numbers if number is not None]
    if any(number > 255 for number in head) or last >= 256 ** (4 - len(head)):
        return None
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return value


def _unmap(address: IPAddress) -> IPAddress:
    """IPv4-mapped IPv6 as its IPv4 address; other IPv6 without zone id."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    mapped = address.ipv4_mapped
    return mapped if mapped is not None else ipaddress.IPv6Address(int(address))


def _parse_entry(entry: str) -> str | IPNetwork:
    """One allowlist entry: a network, a ``.suffix`` (from ``*.suffix``) or a name; ValueError when bad."""
    text = entry.lower()
    if "/" in text:
        try:
            network = ipaddress.ip_network(text)
        except ValueError as exc:
            raise ValueError(f"not a CIDR ({exc})") from None
        if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(_IPV4_MAPPED):
            network = ipaddress.IPv4Network((int(network.network_address) & 0xFFFFFFFF, network.prefixlen - 96))
        return network
    if text.startswith("*."):
        suffix = text[2:]
        if "*" in suffix:
            raise ValueError("a wildcard may only be a leading '*.'")
        return "." + _entry_name(suffix)
    if "*" in text:
        raise ValueError("a wildcard may only be a leading '*.'")
    address = parse_ip_literal(text)
    if address is not None:
        return ipaddress.ip_network(address)
    return _entry_name(text)


def _entry_name(text: str) -> str:
    if ":" in text or "[" in text or "]" in text:
        raise ValueError("expected a host name, an IP or a CIDR (no scheme, port or brackets)")
    try:
        name = _ascii_name(text)
    except _InvalidError as exc:
        raise ValueError(str(exc)) from None
    if _looks_numeric(name.split(".")[-1]):
        raise ValueError("numeric host that is not a valid IPv4 address")
    try:
        return _check_name_length(name)
    except _InvalidError as exc:
        raise ValueError(str(exc)) from None


def _ipv4_problem(address: ipaddress.IPv4Address) -> str | None:
    for network, kind in _IPV4_SPECIAL:
        if address in network:
            return kind
    return None


def _embedded(value: int) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(value & 0xFFFFFFFF)


def _ipv6_problem(address: ipaddress.IPv6Address) -> str | None:
    if address == ipaddress.IPv6Address(0):
        return "unspecified"
    if address == ipaddress.IPv6Address(1):
        return "loopback"
    if address in _IPV4_MAPPED:
        problem = _ipv4_problem(_embedded(int(address)))
        return None if problem is None else f"IPv4-mapped {problem}"
    if address in _NAT64:
        problem = _ipv4_problem(_embedded(int(address)))
        return None if problem is None else f"NAT64 {problem}"
    deprecated: tuple[str, list[ipaddress.IPv4Address]] | None = None
    if address in _IPV4_COMPATIBLE:
        deprecated = "IPv4-compatible", [_embedded(int(address))]
    elif address in _SIX_TO_FOUR:
        deprecated = "6to4", [_embedded(int(address) >> 80)]
    elif address in _TEREDO:
        deprecated = "Teredo", [_embedded(int(address) >> 64), _embedded(~int(address))]
    if deprecated is not None:
        form, embedded = deprecated
        problems = [problem for problem in map(_ipv4_problem, embedded) if problem is not None]
        return f"{form} {problems[0]}" if problems else f"{form} (deprecated)"
    for network, kind in _IPV6_SPECIAL:
        if address in network:
            return kind
    if address not in _GLOBAL_UNICAST:
        return "reserved"
    return None
