"""SSRF address policy: which resolved IP addresses the fetcher may connect to.

Every DNS answer is classified before connecting (and the fetcher connects to
the very address it checked, so a rebinding answer cannot slip through).
Only public unicast addresses are allowed by default; networks listed in the
configuration (`fetch.allowed_networks`, e.g. 127.0.0.0/8 for tests) are
allowed explicitly. Cloud metadata endpoints stay blocked unless an allowed
network names that exact address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class AddressClass(StrEnum):
    PUBLIC = "public"
    LOOPBACK = "loopback"
    PRIVATE = "private"
    LINK_LOCAL = "link-local"
    CGNAT = "cgnat"
    MULTICAST = "multicast"
    BROADCAST = "broadcast"
    UNSPECIFIED = "unspecified"
    RESERVED = "reserved"  # documentation, benchmarking, protocol assignments, future use
    CLOUD_METADATA = "cloud-metadata"
    INVALID = "invalid"


# Instance metadata services: AWS/GCP/Azure/OpenStack, AWS IPv6, ECS task metadata,
# Alibaba Cloud. Checked before the ranges they sit in.
CLOUD_METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200"))

_V4 = [(ipaddress.ip_network(n), c) for n, c in (
    ("0.0.0.0/8", AddressClass.UNSPECIFIED),
    ("10.0.0.0/8", AddressClass.PRIVATE),
    ("100.64.0.0/10", AddressClass.CGNAT),
    ("127.0.0.0/8", AddressClass.LOOPBACK),
    ("169.254.0.0/16", AddressClass.LINK_LOCAL),
    ("172.16.0.0/12", AddressClass.PRIVATE),
    ("192.0.0.0/24", AddressClass.RESERVED),
    ("192.0.2.0/24", AddressClass.RESERVED),
    ("192.88.99.0/24", AddressClass.RESERVED),
    ("192.168.0.0/16", AddressClass.PRIVATE),
    ("198.18.0.0/15", AddressClass.RESERVED),
    ("198.51.100.0/24", AddressClass.RESERVED),
    ("203.0.113.0/24", AddressClass.RESERVED),
    ("224.0.0.0/4", AddressClass.MULTICAST),
    ("255.255.255.255/32", AddressClass.BROADCAST),
    ("240.0.0.0/4", AddressClass.RESERVED),
)]
_V6 = [(ipaddress.ip_network(n), c) for n, c in (
    ("::/128", AddressClass.UNSPECIFIED),
    ("::1/128", AddressClass.LOOPBACK),
    ("64:ff9b:1::/48", AddressClass.RESERVED),
    ("100::/64", AddressClass.RESERVED),
    ("2001:db8::/32", AddressClass.RESERVED),
    ("2001::/23", AddressClass.RESERVED),
    ("3fff::/20", AddressClass.RESERVED),
    ("5f00::/16", AddressClass.RESERVED),
    ("fc00::/7", AddressClass.PRIVATE),
    ("fe80::/10", AddressClass.LINK_LOCAL),
    ("fec0::/10", AddressClass.PRIVATE),
    ("ff00::/8", AddressClass.MULTICAST),
)]
# Only 2000::/3 is allocated as global unicast; everything else is reserved.
_GLOBAL_V6 = ipaddress.ip_network("2000::/3")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_V4_COMPAT = ipaddress.ip_network("::/96")


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4, compatible)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64 or (ip in _V4_COMPAT and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    return None


def parse_ip(address: str | IPAddress) -> IPAddress | None:
    """The IP address `address` is (blanks, brackets and a zone ignored), else None."""
    if isinstance(address, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return address
    try:
        bare = address.strip().strip("[]").split("%", 1)[0]
        # A dotted IPv4 address ends in a digit and an IPv6 address has colons: a host
        # name (most calls: every link's host) is told apart without the parse and the
        # exception it raises, which cost more than the rest of an address check.
        if ":" not in bare and not bare[-1:].isdigit():
            return None
        return ipaddress.ip_address(bare)
    except (ValueError, AttributeError):
        return None


def classify(address: str | IPAddress) -> AddressClass:
    """The class of one IP address; IPv6 forms that embed IPv4 are judged by the IPv4 inside."""
    ip = parse_ip(address)
    if ip is None:
        return AddressClass.INVALID
    if ip in CLOUD_METADATA:
        return AddressClass.CLOUD_METADATA
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None:
            return classify(inner)
        for net, cls in _V6:
            if ip in net:
                return cls
        return AddressClass.PUBLIC if ip in _GLOBAL_V6 else AddressClass.RESERVED
    for net, cls in _V4:
        if ip in net:
            return cls
    return AddressClass.PUBLIC


@dataclass(frozen=True)
class AddressPolicy:
    """Public addresses, plus the networks configured as allowed."""

    allowed_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_networks(cls, networks: Iterable[str]) -> AddressPolicy:
        return cls(tuple(ipaddress.ip_network(n, strict=False) for n in networks))

    def check(self, address: str | IPAddress) -> str | None:
        """None if the fetcher may connect to `address`, else the reason it may not."""
        ip = parse_ip(address)
        cls = classify(address)
        if ip is None:
            return f"not an IP address: {address!r}"
        candidates: list[IPAddress] = [ip]
        embedded = _embedded_v4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
        if embedded is not None:
            candidates.append(embedded)
        for net in self.allowed_networks:
            for candidate in candidates:
                if candidate.version == net.version and candidate in net:
                    if cls is AddressClass.CLOUD_METADATA and net.num_addresses != 1:
                        continue  # metadata needs its own explicit /32 or /128
                    return None
        if cls is AddressClass.PUBLIC:
            return None
        return f"address {ip} is {cls.value}"


def literal_host(host_key: str) -> str | None:
    """The IP address of a normalized URL's or host_key's host if it is an IP literal
    ("127.0.0.1", "::1" from "[::1]"), else None. WHATWG parsing has already turned
    every other IPv4 form (2130706433, 0x7f000001, 127.1, 0177.0.0.1) into dotted form."""
    rest = host_key.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    if rest.startswith("["):
        host = rest[1:rest.find("]")] if "]" in rest else rest[1:]
    else:
        host = rest.rsplit(":", 1)[0] if ":" in rest else rest
    return host if parse_ip(host) is not None else None


def url_address_refusal(url: str, policy: AddressPolicy) -> str | None:
    """Why `policy` refuses a normalized URL whose host is an IP literal; None for host
    names (their addresses are checked when they are resolved and connected to)."""
    host = literal_host(url)
    return None if host is None else _literal_refusal(host, policy)


@lru_cache(maxsize=4096)
def _literal_refusal(host: str, policy: AddressPolicy) -> str | None:
    """`policy.check` of an IP literal, remembered: every link of a page to an address
    host would parse and classify the same address again."""
    return policy.check(host)


# -- DNS servers (fetch.dns_servers) --------------------------------------------------

DNS_DEFAULT_PORT = 53


def _parse_server(item: object) -> tuple[str, int]:
    if not isinstance(item, str) or not item.strip():
        raise ValueError(f"DNS server {item!r}: expected an IP address, optionally with :port")
    text = item.strip()
    host, port_text = text, None
    if text.startswith("["):  # [v6] or [v6]:port
        end = text.find("]")
        if end < 0:
            raise ValueError(f"DNS server {item!r}: missing ']'")
        host, rest = text[1:end], text[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"DNS server {item!r}: expected ':port' after ']'")
            port_text = rest[1:]
    elif text.count(":") == 1:  # v4:port (a bare IPv6 address has two colons or more)
        host, port_text = text.split(":")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"DNS server {item!r}: {host!r} is not an IP address") from None
    if text.startswith("[") and ip.version != 6:
        raise ValueError(f"DNS server {item!r}: brackets are for IPv6 addresses")
    port = DNS_DEFAULT_PORT
    if port_text is not None:
        if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"DNS server {item!r}: port {port_text!r} is not in 1..65535")
        port = int(port_text)
    return str(ip), port


def parse_servers(items: Iterable[object]) -> list[tuple[str, int]]:
    """Validate DNS server strings: "address", "address:port" or "[v6]:port".

    Returns (address, port) pairs, port 53 when none is given; addresses must
    be IP literals (an IPv6 scope such as fe80::1%eth0 is kept). Raises
    ValueError naming the first bad item.
    """
    if isinstance(items, (str, bytes)):
        raise ValueError(f"DNS servers {items!r}: expected a list of strings")
    return [_parse_server(item) for item in items]
