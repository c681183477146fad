"""Which IP addresses are publicly routable, and what the others are (loopback, private, link-local...).

IPv6 forms that embed an IPv4 address are judged by it (IPv4-mapped, NAT64 64:ff9b::/96); the deprecated ones
(IPv4-compatible, 6to4, Teredo) and local-use NAT64 (64:ff9b:1::/48) are refused outright.
"""

from __future__ import annotations

import ipaddress

from punctual.network.hosts import IPAddress, IPNetwork, parse_ip_literal


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
IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
_TEREDO = ipaddress.IPv6Network("2001::/32")
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")


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


def _ipv4_problem(address: ipaddress.IPv4Address) -> str | None:
    for network, kind in _IPV4_SPECIAL:
        if address in network:
            return kind
    return None


def _embedded(value: int) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(value & 0xFFFFFFFF)


def _translated(address: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The form and the IPv4 address of an IPv4-mapped or NAT64 address (judged as that IPv4 address), or None."""
    if address in IPV4_MAPPED:
        return "IPv4-mapped", _embedded(int(address))
    if address in _NAT64:
        return "NAT64", _embedded(int(address))
    return None


def _deprecated(address: ipaddress.IPv6Address) -> tuple[str, list[ipaddress.IPv4Address]] | None:
    """The form and the IPv4 addresses embedded in a deprecated transition address, or None."""
    if address in _IPV4_COMPATIBLE:
        return "IPv4-compatible", [_embedded(int(address))]
    if address in _SIX_TO_FOUR:
        return "6to4", [_embedded(int(address) >> 80)]
    if address in _TEREDO:
        return "Teredo", [_embedded(int(address) >> 64), _embedded(~int(address))]
    return None


def _ipv6_problem(address: ipaddress.IPv6Address) -> str | None:
    if address == ipaddress.IPv6Address(0):
        return "unspecified"
    if address == ipaddress.IPv6Address(1):
        return "loopback"
    translated = _translated(address)
    if translated is not None:
        form, ipv4 = translated
        problem = _ipv4_problem(ipv4)
        return None if problem is None else f"{form} {problem}"
    deprecated = _deprecated(address)
    if deprecated is not None:
        form, embedded = deprecated
        problems = [problem for problem in map(_ipv4_problem, embedded) if problem is not None]
        return f"{form} {problems[0]}" if problems else f"{form} (deprecated)"
    for network, kind in _IPV6_SPECIAL:
        if address in network:
            return kind
    return None if address in _GLOBAL_UNICAST else "reserved"
