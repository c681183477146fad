"""URLs and hosts as a resolver reads them: the parsing behind the target rules (:mod:`punctual.network.policy`).

A host that is an IP address in any spelling a resolver or the C library accepts (``2130706433``, ``0x7f.1``,
``[::ffff:127.0.0.1]``...) is read as that address; a host whose last label is numeric but which is no valid IPv4
address is refused; names come out lower-case, IDNA-encoded, without trailing dot. A part that fails a check
raises a private error whose message is safe to show; what leaves this module is a
:class:`~punctual.errors.TargetRefusedError`, a ``ValueError`` or nothing at all (:func:`redact_url`).
"""

from __future__ import annotations

import ipaddress
import unicodedata
from dataclasses import dataclass
from typing import TypeAlias
from urllib.parse import SplitResult, urlsplit

from punctual.errors import TargetRefusedError

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_URL_LENGTH = 2048
INVALID_URL = "<invalid url>"  # what redact_url returns for anything it cannot reduce to an origin
DEFAULT_PORTS = {"http": 80, "https": 443}

# The grammar's limits: a scheme's length (longer is shown as "(long)"), a port's digits and range, the digits of a
# number shown in a message, DNS's name and label lengths, and an IPv4 address's parts, bytes and digits per base
MAX_SCHEME_CHARS = 32
MAX_PORT_DIGITS = 5
MAX_PORT = 65535
SHOWN_DIGITS = 10
MAX_NAME_CHARS = 253
MAX_LABEL_CHARS = 63
MAX_IPV4_PARTS = 4
MAX_BYTE = 255
MAX_HEX_DIGITS = 8  # 32 bits
MAX_OCTAL_DIGITS = 11
MAX_DECIMAL_DIGITS = 10
_ENCODED_PERCENT = "25"  # RFC 6874: a zone's "%" itself percent-encoded

_DEC = frozenset("0123456789")
_OCT = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")
_IPV6_CHARS = _HEX | frozenset(":.")
_ZONE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789+-.")


class _InvalidError(ValueError):
    """A URL part failed a check; the message is safe to show (it never echoes user text that is not vetted)."""


@dataclass(frozen=True, slots=True)
class UrlParts:
    """A URL as :func:`parse_url` read it: ``host`` normalised as in :class:`~punctual.network.policy.Target`,
    ``literal`` its address when it is an IP literal, ``host_raw`` the host as written."""

    scheme: str
    host: str
    port: int
    literal: IPAddress | None
    host_raw: str


def parse_url(url: str) -> UrlParts:
    """Read a webhook URL's scheme, host and port, refusing what no one should call or parsers disagree on.

    Raises
    ------
    TargetRefusedError
        With the reason: not a string, too long, a control character, whitespace or backslash, no or another
        scheme than http(s), credentials, a malformed host or port.
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
    if scheme not in DEFAULT_PORTS:
        shown = f"{scheme!r}" if len(scheme) <= MAX_SCHEME_CHARS else "(long)"
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
        port = _parse_port(port_raw) or DEFAULT_PORTS[scheme]
    except _InvalidError as exc:
        raise TargetRefusedError(format_origin(scheme, host, None), str(exc)) from None
    return UrlParts(scheme, host, port, literal, host_raw)


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
        if not scheme or len(scheme) > MAX_SCHEME_CHARS or not set(scheme) <= _SCHEME_CHARS:
            return INVALID_URL
        _, host_raw, port_raw = _authority(parts.netloc)
        host, _ = _classify_host(host_raw)
        return format_origin(scheme, host, _parse_port(port_raw))
    except Exception:  # noqa: BLE001 - never raises, whatever comes in
        return INVALID_URL


# --- private helpers ---------------------------------------------------------------------------------------------


def _refusal(url: str, reason: str) -> TargetRefusedError:
    origin = redact_url(url)
    return TargetRefusedError(None if origin == INVALID_URL else origin, reason)


def format_origin(scheme: str, host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    if port is None or port == DEFAULT_PORTS.get(scheme):
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
    if len(digits) > MAX_PORT_DIGITS or not 1 <= int(digits) <= MAX_PORT:
        shown = digits if len(digits) <= SHOWN_DIGITS else digits[:SHOWN_DIGITS] + "..."
        raise _InvalidError(f"port {shown} is out of range (1-{MAX_PORT})")
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
        if zone.startswith(_ENCODED_PERCENT) and len(zone) > len(_ENCODED_PERCENT):
            zone = zone[len(_ENCODED_PERCENT) :]
        if not zone or not set(zone) <= _ZONE_CHARS:
            raise _InvalidError("invalid IPv6 zone id")
    if not address_text or not set(address_text) <= _IPV6_CHARS:
        raise _InvalidError("invalid IPv6 address")
    try:
        address = unmap(ipaddress.IPv6Address(address_text))
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
    if len(name) > MAX_NAME_CHARS:
        raise _InvalidError(f"the host name is longer than {MAX_NAME_CHARS} characters")
    if any(len(label) > MAX_LABEL_CHARS for label in name.split(".")):
        raise _InvalidError(f"a host name label is longer than {MAX_LABEL_CHARS} characters")
    return name


def loose_name(host: str) -> str:
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
        return int(digits, 16) if len(digits) <= MAX_HEX_DIGITS else None
    if not part or not set(part) <= _DEC:
        return None
    if len(part) > 1 and part[0] == "0":
        if not set(part) <= _OCT:
            return None
        digits = part.lstrip("0") or "0"
        return int(digits, 8) if len(digits) <= MAX_OCTAL_DIGITS else None
    return int(part) if len(part) <= MAX_DECIMAL_DIGITS else None


def _ipv4_value(labels: list[str]) -> int | None:
    """The 32-bit value of 1 to 4 parts, the last filling the remaining bytes; None when invalid or too large."""
    if len(labels) > MAX_IPV4_PARTS:
        return None
    numbers = [_ipv4_number(label) for label in labels]
    if any(number is None for number in numbers):
        return None
    *head, last = [number for number in numbers if number is not None]
    if any(number > MAX_BYTE for number in head) or last >= (MAX_BYTE + 1) ** (MAX_IPV4_PARTS - len(head)):
        return None
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return value


def unmap(address: IPAddress) -> IPAddress:
    """IPv4-mapped IPv6 as its IPv4 address; other IPv6 without zone id."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    mapped = address.ipv4_mapped
    return mapped if mapped is not None else ipaddress.IPv6Address(int(address))


def allowlist_name(text: str) -> str:
    """A host name of an allowlist entry, in allowlist form; ValueError (safe to show) when it is none."""
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
