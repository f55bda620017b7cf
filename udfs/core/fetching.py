"""The fetcher's rules, free of I/O: request headers, response classification, size limits,
and the DNS cache with the SSRF policy applied to every answer.

The async fetcher (aiohttp) only adapts these: it asks `request_headers` what
to send, `FetchLimits` how much to read, `classify` what an answer means, and
`DnsCache` which checked address to connect to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from udfs.core.addresses import AddressPolicy
from udfs.core.records import Kind, Outcome

HTML_TYPES = ("text/html", "application/xhtml+xml")
SITEMAP_TYPES = ("application/xml", "text/xml", "application/gzip", "application/x-gzip",
                 "text/plain", "application/octet-stream")
REDIRECTS = (301, 302, 303, 307, 308)


@dataclass(frozen=True)
class FetchLimits:
    """From the `fetch` configuration section."""

    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    total_timeout_s: float = 60.0
    max_body_bytes: int = 10 * 1024 * 1024  # read from the wire, then cut
    max_decompressed_bytes: int = 50 * 1024 * 1024
    max_robots_bytes: int = 512 * 1024
    max_sitemap_bytes: int = 50 * 1024 * 1024
    dns_ttl_min_s: float = 60.0
    dns_ttl_max_s: float = 3600.0
    dns_negative_ttl_s: float = 30.0
    dns_servers: tuple[str, ...] = ()  # empty: the system's (/etc/resolv.conf)
    dns_timeout_s: float = 5.0

    def wire_limit(self, kind: Kind) -> int:
        """Bytes read from the wire: a sitemap has its own limit."""
        return self.max_sitemap_bytes if kind is Kind.SITEMAP else self.max_body_bytes

    def body_limit(self, kind: Kind) -> int:
        """Bytes kept after HTTP content decoding: robots.txt is cut at its limit (the
        rest is ignored), a sitemap at 50 MB, a page at max_decompressed_bytes."""
        if kind is Kind.ROBOTS:
            return self.max_robots_bytes
        if kind is Kind.SITEMAP:
            return self.max_sitemap_bytes
        return self.max_decompressed_bytes


def request_headers(user_agent: str, etag: str | None = None,
                    last_modified: str | None = None) -> dict[str, str]:
    """Headers of one GET: conditional on the stored ETag, else on Last-Modified."""
    headers = {
        "User-Agent": user_agent,
        "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,text/plain;q=0.8,"
                  "*/*;q=0.1",
        "Accept-Encoding": "gzip, deflate",
    }
    if etag:
        headers["If-None-Match"] = etag
    elif last_modified:
        headers["If-Modified-Since"] = last_modified
    return headers


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def classify(status: int, kind: Kind, content_type: str | None = None,
             location: str | None = None) -> Outcome:
    """What an HTTP answer means for the frontier."""
    if status == 304:
        return Outcome.NOT_MODIFIED
    if status in REDIRECTS:
        return Outcome.REDIRECT if location else Outcome.CLIENT_ERROR
    if status in (404, 410):
        return Outcome.GONE
    if status in (429, 503):
        return Outcome.THROTTLED
    if 500 <= status < 600:
        return Outcome.SERVER_ERROR
    if 400 <= status < 500:
        return Outcome.CLIENT_ERROR
    if 200 <= status < 300:
        if kind is Kind.ROBOTS:
            return Outcome.OK  # robots.txt is read whatever its type
        mt = media_type(content_type)
        if mt in HTML_TYPES or mt == "" or (kind is Kind.SITEMAP and mt in SITEMAP_TYPES):
            return Outcome.OK
        return Outcome.UNSUPPORTED_TYPE
    return Outcome.OTHER_ERROR


@dataclass
class _DnsEntry:
    addresses: tuple[str, ...]
    expires_at: float
    error: str | None = None


@dataclass
class DnsCache:
    """Resolved addresses per host name, checked by the SSRF policy before they are used.

    `static` maps names to fixed addresses (tests map virtual hosts to 127.0.0.1);
    those addresses still have to pass the policy, so loopback is only reachable
    when `fetch.allowed_networks` allows it.
    """

    policy: AddressPolicy
    limits: FetchLimits = field(default_factory=FetchLimits)
    static: Mapping[str, str] = field(default_factory=dict)
    _entries: dict[str, _DnsEntry] = field(default_factory=dict)

    def cached(self, host: str, now: float) -> _DnsEntry | None:
        entry = self._entries.get(host.lower())
        return entry if entry is not None and entry.expires_at > now else None

    def static_answer(self, host: str) -> list[str] | None:
        ip = self.static.get(host.lower())
        return [ip] if ip is not None else None

    def store(self, host: str, answers: Iterable[str], ttl_s: float | None, now: float
              ) -> tuple[list[str], str | None]:
        """Record a resolver answer; returns (addresses allowed to connect to, refusal)."""
        allowed: list[str] = []
        refusals: list[str] = []
        for a in answers:
            reason = self.policy.check(a)
            (refusals if reason else allowed).append(reason or a)
        ttl = self.limits.dns_ttl_min_s if ttl_s is None else \
            min(self.limits.dns_ttl_max_s, max(self.limits.dns_ttl_min_s, ttl_s))
        if allowed:
            self._entries[host.lower()] = _DnsEntry(tuple(allowed), now + ttl)
            return allowed, None
        error = "; ".join(refusals) or "no address"
        self._entries[host.lower()] = _DnsEntry((), now + self.limits.dns_negative_ttl_s, error)
        return [], error

    def store_failure(self, host: str, error: str, now: float) -> None:
        """A failed lookup is remembered briefly (negative cache)."""
        self._entries[host.lower()] = _DnsEntry((), now + self.limits.dns_negative_ttl_s, error)
