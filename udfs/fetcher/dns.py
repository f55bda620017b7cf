"""DNS lookups that report the answer's TTL, for the fetcher's DNS cache.

aiohttp's default ThreadedResolver calls getaddrinfo(), which gives no TTL, so
every answer would live `fetch.dns_ttl_min_s` whatever the zone says. This
module asks DNS servers directly with dnspython's asyncio stub resolver
(`dns.asyncresolver`), chosen because it:

* returns each answer's TTL (the minimum along a CNAME chain);
* is pure Python, so there is no compiled extension to match the Flink
  worker's Python (aiodns/pycares, aiohttp's other resolver, is compiled);
* is asyncio-native: A and AAAA are asked concurrently on the fetcher's loop,
  without a thread per lookup.

Names are always queried as absolute names (`name.`) with the search list off,
so a bare name is never expanded with the host's search domains (no
`example.svc.cluster.local` queries under Kubernetes' ndots:5). /etc/hosts is
not read: production resolves via DNS only, and tests map names to addresses
with `fetch.static_hosts`, which the caller consults before this resolver.

This module only resolves. The caller must check every returned address with
the SSRF policy (`udfs.core.addresses`, through `udfs.core.fetching.DnsCache`)
before connecting, and must not pass IP literals here (they are not names).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

import dns.asyncresolver
import dns.exception
import dns.name
import dns.nameserver
import dns.rdatatype
import dns.resolver

from udfs.core.addresses import parse_servers

# The EDNS payload size of DNS Flag Day 2020: large answers fit in UDP without
# IP fragmentation; bigger ones come truncated and are asked again over TCP.
EDNS_PAYLOAD = 1232
# Seconds one server gets for one query before it is asked again (within timeout_s).
ATTEMPT_TIMEOUT_S = 2.0


@dataclass
class DnsAnswer:
    """Every address of a name (IPv4 first, then IPv6; textual) and the answer's TTL.

    `ttl_s` is the smallest TTL among the A and AAAA answers, each taken as the
    minimum along its CNAME chain; None when no answer carried a TTL.
    """

    addresses: list[str]
    ttl_s: float | None


class DnsLookupError(OSError):
    """A name has no address: NXDOMAIN, no A/AAAA records, timeout, or no server answered."""


def _is_ip_literal(host: str) -> bool:
    text = host.strip().strip("[]").split("%", 1)[0]
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class TtlResolver:
    """Resolves host names to addresses with their TTL, via DNS only (never /etc/hosts).

    `servers` are "address", "address:port" or "[v6]:port" strings (see
    `parse_servers`); empty means the system's nameservers from /etc/resolv.conf
    (dnspython's default configuration; its search domains are never used).
    `timeout_s` bounds a whole lookup, both record types together. No answers
    are cached here: the caller caches them for their TTL.
    """

    def __init__(self, servers: Sequence[str] = (), timeout_s: float = 5.0) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, not {timeout_s!r}")
        parsed = parse_servers(servers)
        if parsed:
            resolver = dns.asyncresolver.Resolver(configure=False)
            resolver.nameservers = [dns.nameserver.Do53Nameserver(a, p) for a, p in parsed]
        else:
            try:
                resolver = dns.asyncresolver.Resolver(configure=True)
            except dns.resolver.NoResolverConfiguration as exc:
                raise OSError(f"no DNS servers configured (/etc/resolv.conf): {exc}") from exc
        resolver.cache = None
        resolver.use_search_by_default = False
        resolver.timeout = min(ATTEMPT_TIMEOUT_S, timeout_s)
        resolver.lifetime = timeout_s
        resolver.use_edns(0, 0, EDNS_PAYLOAD)
        self.timeout_s = timeout_s
        self._resolver = resolver

    @property
    def nameservers(self) -> list[str]:
        """The servers asked, as dnspython describes them (for logs)."""
        return [str(ns) for ns in self._resolver.nameservers]

    async def lookup(self, host: str) -> DnsAnswer:
        """The A and AAAA addresses of `host`, asked concurrently, with the smallest TTL.

        Raises ValueError for an IP literal or an empty host (callers handle
        literals themselves), DnsLookupError when neither record type gives an
        address (NXDOMAIN, no records, timeout, servers failing, invalid name).
        """
        if not isinstance(host, str) or not host.strip(". "):
            raise ValueError(f"not a host name: {host!r}")
        if _is_ip_literal(host):
            raise ValueError(f"{host!r} is an IP literal, not a name to resolve")
        try:
            qname = dns.name.from_text(host.strip(), origin=dns.name.root)  # absolute
        except (dns.exception.DNSException, UnicodeError) as exc:
            raise DnsLookupError(f"DNS {host}: invalid name: {exc}") from None
        results = await asyncio.gather(
            self._query(qname, dns.rdatatype.A),
            self._query(qname, dns.rdatatype.AAAA),
            return_exceptions=True)
        addresses: list[str] = []
        ttls: list[float] = []
        errors: list[dns.exception.DNSException] = []
        for result in results:
            if isinstance(result, dns.exception.DNSException):
                errors.append(result)
            elif isinstance(result, BaseException):
                raise result
            elif result is not None and result.rrset is not None:
                rrset = result.rrset
                if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
                    for rdata in rrset:
                        if rdata.address not in addresses:
                            addresses.append(rdata.address)
                    ttls.append(float(result.chaining_result.minimum_ttl))
        if addresses:
            return DnsAnswer(addresses, min(ttls) if ttls else None)
        raise DnsLookupError(f"DNS {host}: {_describe(errors)}")

    async def _query(self, qname: dns.name.Name, rdtype: dns.rdatatype.RdataType
                     ) -> dns.resolver.Answer:
        # dnspython's lifetime is checked between attempts, and its backoff sleep
        # (up to 2 s) may overrun it: the hard bound is here.
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._resolver.resolve(qname, rdtype, raise_on_no_answer=False,
                                                    search=False)
        except TimeoutError:
            raise dns.exception.Timeout(timeout=self.timeout_s) from None


def _describe(errors: Sequence[dns.exception.DNSException]) -> str:
    """The most telling reason among the A and AAAA failures."""
    for kind, text in ((dns.resolver.NXDOMAIN, "no such name (NXDOMAIN)"),
                       (dns.exception.Timeout, None),
                       (dns.resolver.NoNameservers, None),
                       (dns.resolver.YXDOMAIN, None)):
        for exc in errors:
            if isinstance(exc, kind):
                return text or f"{type(exc).__name__}: {exc}"
    if errors:
        return f"{type(errors[0]).__name__}: {errors[0]}"
    return "no address (no A or AAAA records)"
