"""The fetcher's HTTP client: aiohttp with an SSRF-guarded resolver and bounded reads.

The rules come from `udfs.core.fetching`; this module only does the I/O. The
resolver answers from `fetch.static_hosts`, the DNS cache, or the system
resolver, and returns only addresses the SSRF policy allows, so aiohttp
connects to exactly the address that was checked (no second lookup for DNS
rebinding to exploit). No redirects are followed; bodies are read in chunks
up to the limit, and gzip/deflate are decoded here with a cap (a bomb stops
at the cap).
"""

from __future__ import annotations

import socket
import time
import zlib
from dataclasses import dataclass, field

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from udfs.core.fetching import DnsCache, FetchLimits, classify, request_headers
from udfs.core.frontier import Kind, Outcome


class AddressRefused(OSError):
    """Every address of a host is refused by the SSRF policy."""


class GuardedResolver(AbstractResolver):
    """Resolve, then keep only addresses the SSRF policy allows."""

    def __init__(self, cache: DnsCache, clock=time.monotonic) -> None:
        self.cache = cache
        self.clock = clock
        self._system: AbstractResolver | None = None  # made in the running loop, on first use

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        now = self.clock()
        entry = self.cache.cached(host, now)
        if entry is None:
            static = self.cache.static_answer(host)
            if static is not None:
                addresses, refusal = self.cache.store(host, static, None, now)
            else:
                if self._system is None:
                    self._system = ThreadedResolver()
                try:
                    answers = await self._system.resolve(host, port, family)
                except OSError as exc:
                    self.cache.store_failure(host, f"DNS: {exc}", now)
                    raise
                addresses, refusal = self.cache.store(
                    host, [a["host"] for a in answers], None, now)
            if not addresses:
                raise AddressRefused(f"{host}: {refusal}")
        elif entry.error is not None:
            if entry.error.startswith("DNS:"):
                raise OSError(entry.error)
            raise AddressRefused(f"{host}: {entry.error}")
        else:
            addresses = list(entry.addresses)
        return [{"hostname": host, "host": a, "port": port,
                 "family": socket.AF_INET6 if ":" in a else socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST} for a in addresses]

    async def close(self) -> None:
        if self._system is not None:
            await self._system.close()


@dataclass
class FetchResponse:
    outcome: Outcome
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""  # decoded (decompressed), at most the limit
    wire_bytes: int = 0
    duration_s: float = 0.0
    error: str | None = None


def make_session(cache: DnsCache, limits: FetchLimits, *, limit: int = 200,
                 connector_cls: type[aiohttp.TCPConnector] = aiohttp.TCPConnector
                 ) -> aiohttp.ClientSession:
    """A session whose every connection goes through the guarded resolver."""
    connector = connector_cls(resolver=GuardedResolver(cache), limit=limit, ttl_dns_cache=None,
                              use_dns_cache=False, enable_cleanup_closed=True)
    timeout = aiohttp.ClientTimeout(total=limits.total_timeout_s,
                                    sock_connect=limits.connect_timeout_s,
                                    sock_read=limits.read_timeout_s)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False,
                                 cookie_jar=aiohttp.DummyCookieJar())


def _decoder(encoding: str):
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    return None


async def fetch(session: aiohttp.ClientSession, url: str, kind: Kind, limits: FetchLimits,
                user_agent: str, etag: str | None = None, last_modified: str | None = None
                ) -> FetchResponse:
    """One GET, classified. Never raises for network trouble: it becomes the outcome."""
    start = time.monotonic()
    cap = limits.body_limit(kind)
    try:
        async with session.get(url, headers=request_headers(user_agent, etag, last_modified),
                               allow_redirects=False) as resp:
            headers = {k.title(): v for k, v in resp.headers.items()}
            outcome = classify(resp.status, kind, headers.get("Content-Type"),
                               headers.get("Location"))
            body, wire, too_large = b"", 0, False
            if outcome is Outcome.OK:
                decoder = _decoder(headers.get("Content-Encoding", "").lower())
                out = bytearray()
                async for chunk in resp.content.iter_chunked(64 * 1024):
                    wire += len(chunk)
                    data = decoder.decompress(chunk, cap + 1 - len(out)) if decoder else chunk
                    out += data
                    if wire > limits.max_body_bytes or len(out) > cap:
                        too_large = True
                        break
                body = bytes(out[:cap])
                if too_large and kind is not Kind.ROBOTS:
                    outcome = Outcome.TOO_LARGE  # robots.txt: the first 512 KiB is what counts
            return FetchResponse(outcome, resp.status, headers, body, wire,
                                 time.monotonic() - start)
    except AddressRefused as exc:
        return FetchResponse(Outcome.ADDRESS_BLOCKED, error=str(exc),
                             duration_s=time.monotonic() - start)
    except aiohttp.ClientConnectorError as exc:  # DNS errors are a subclass
        cause = exc.os_error
        if isinstance(cause, AddressRefused):
            outcome = Outcome.ADDRESS_BLOCKED
        elif isinstance(exc, aiohttp.ClientConnectorDNSError):
            outcome = Outcome.DNS_ERROR
        else:
            outcome = Outcome.CONNECT_ERROR
        return FetchResponse(outcome, error=f"{exc.host}: {cause}",
                             duration_s=time.monotonic() - start)
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        return FetchResponse(Outcome.TIMEOUT, error=f"timeout: {exc!r}",
                             duration_s=time.monotonic() - start)
    except (aiohttp.ClientError, zlib.error, OSError) as exc:
        return FetchResponse(Outcome.OTHER_ERROR, error=f"{type(exc).__name__}: {exc}",
                             duration_s=time.monotonic() - start)
