"""The fetcher's HTTP client: aiohttp with an SSRF guard on every connection and bounded reads.

The rules come from `udfs.core.fetching`; this module only does the I/O. The
address policy is applied three times, from the earliest to the last moment:

1. `fetch` refuses a URL whose host is an IP literal in a forbidden range before
   any connection is attempted (aiohttp never asks a resolver about an IP literal);
2. the resolver answers from `fetch.static_hosts`, the DNS cache, or DNS (answers
   cached for their TTL, `udfs.fetcher.dns`), and
   returns only addresses the policy allows, so aiohttp connects to exactly the
   address that was checked (no second lookup for DNS rebinding to exploit);
3. every socket the connector opens comes from `guarded_socket_factory`, which
   checks the address the socket is about to connect to, and the socket checks it
   again in `connect` itself: whatever path produced the address (an IP literal,
   a resolver, a proxy, a future client), nothing connects to a refused address.

No redirects are followed; bodies are read in chunks up to the limit, and
gzip/deflate are decoded here with a cap (a bomb stops at the cap).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from udfs.core.addresses import AddressPolicy, parse_ip, url_address_refusal
from udfs.core.fetching import DnsCache, FetchLimits, classify, request_headers
from udfs.core.records import Kind, Outcome
from udfs.core.urls import normalize_url
from udfs.fetcher.dns import TtlResolver
from udfs.storage.warc import Exchange

# In every refusal's message: a refusal that aiohappyeyeballs folds into one OSError
# with others ("Multiple exceptions: ...") is still recognised as one.
REFUSAL_MARK = "refused by the SSRF policy"


class AddressRefused(OSError):
    """Every address of a host is refused by the SSRF policy."""


def _refusal(address: str, reason: str) -> AddressRefused:
    return AddressRefused(f"{address}: {reason} ({REFUSAL_MARK})")


class _GuardedSocket(socket.socket):
    """A socket that checks, in connect itself, the address it is asked to connect to."""

    address_policy: AddressPolicy

    def _check(self, address) -> None:
        host = address[0] if isinstance(address, tuple) else address
        reason = self.address_policy.check(str(host))
        if reason is not None:
            raise _refusal(str(host), reason)

    def connect(self, address) -> None:
        self._check(address)
        super().connect(address)

    def connect_ex(self, address) -> int:
        self._check(address)
        return super().connect_ex(address)


def guarded_socket_factory(policy: AddressPolicy) -> Callable[[tuple], socket.socket]:
    """aiohttp's `socket_factory`: called with the exact address a connection is about
    to be made to, for every connection (IP-literal hosts included)."""

    def factory(addr_info: tuple) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        reason = policy.check(str(sockaddr[0]))
        if reason is not None:
            raise _refusal(str(sockaddr[0]), reason)
        sock = _GuardedSocket(family, type_, proto)
        sock.address_policy = policy
        return sock

    return factory


def literal_refusal(url: str, policy: AddressPolicy, parsed: URL | None = None
                    ) -> str | None:
    """Why the policy refuses `url`'s host, if that host is an IP literal as a browser
    (WHATWG: 2130706433, 0x7f000001 and 127.1 are 127.0.0.1) or aiohttp parses it; None
    for names (the resolver and the socket guard check those). `parsed`: `url` as the
    yarl URL the request will be made with (`fetch` parses it once for both)."""
    normalized = normalize_url(url)
    reason = url_address_refusal(normalized, policy) if normalized else None
    if reason is not None:
        return reason
    try:
        host = (parsed if parsed is not None else URL(url)).host
    except (ValueError, TypeError):
        return None
    if host is None or parse_ip(host) is None:
        return None
    return policy.check(host)


# RFC 6761 section 6.3: these names are loopback, answered locally, never sent to DNS.
LOCALHOST_ADDRESSES = ["127.0.0.1", "::1"]


def is_localhost_name(host: str) -> bool:
    name = host.lower().rstrip(".")
    return name == "localhost" or name.endswith(".localhost")


class GuardedResolver(AbstractResolver):
    """Resolve, then keep only addresses the SSRF policy allows.

    Answers come from `fetch.static_hosts`, then the DNS cache, then DNS itself
    (`udfs.fetcher.dns`: each answer is cached for its TTL, clamped to the configured
    bounds); "localhost" names are loopback without a query (RFC 6761)."""

    def __init__(self, cache: DnsCache, clock=time.monotonic,
                 dns: Callable[[], TtlResolver] | None = None) -> None:
        self.cache = cache
        self.clock = clock
        limits = cache.limits
        self._make_dns = dns or (lambda: TtlResolver(limits.dns_servers, limits.dns_timeout_s))
        self._dns: TtlResolver | None = None  # made on first use (reads /etc/resolv.conf)

    async def _lookup(self, host: str) -> tuple[list[str], float | None]:
        """(addresses, TTL) of a name not in the cache; raises OSError on failure."""
        static = self.cache.static_answer(host)
        if static is not None:
            return static, None
        if is_localhost_name(host):
            return list(LOCALHOST_ADDRESSES), None
        if parse_ip(host) is not None:  # aiohttp passes IP literals by; a caller might not
            return [host.strip("[]")], None
        if self._dns is None:
            self._dns = self._make_dns()
        answer = await self._dns.lookup(host)
        return answer.addresses, answer.ttl_s

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        now = self.clock()
        entry = self.cache.cached(host, now)
        if entry is None:
            try:
                answers, ttl = await self._lookup(host)
            except OSError as exc:
                self.cache.store_failure(host, f"DNS: {exc}", now)
                raise
            addresses, refusal = self.cache.store(host, answers, ttl, now)
            if not addresses:
                raise _refusal(host, refusal or "no address")
        elif entry.error is not None:
            if entry.error.startswith("DNS:"):
                raise OSError(entry.error)
            raise _refusal(host, entry.error)
        else:
            addresses = list(entry.addresses)
        return [{"hostname": host, "host": a, "port": port,
                 "family": socket.AF_INET6 if ":" in a else socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST} for a in addresses]

    async def close(self) -> None:
        self._dns = None


@dataclass
class FetchResponse:
    outcome: Outcome
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""  # decoded (decompressed), at most the limit
    wire_bytes: int = 0
    # The request's time, less the time spent decoding its body and the time its last
    # byte waited for this process (`receive_lag`): the server's time is what the gap
    # after it (10x the duration) is counted from, not our CPU or our loop's delays.
    duration_s: float = 0.0
    error: str | None = None
    decode_s: float = 0.0  # seconds spent decompressing the body
    # How long after our end the server may still be at this request: when we closed
    # the connection before the answer's end (a body cut at the limit or not read, a
    # timeout), the server notices only when the close reaches it and its next write
    # fails. The time its answer took to begin (at least a round trip; the whole
    # request's time when none began), at most LINGER_MAX_S. The gaps after the
    # request (the host's, the address's) count from our end plus this.
    linger_s: float = 0.0
    # The HTTP exchange as sent and received (for the WARC records), when asked for:
    # set for every answer that came back with a status.
    exchange: Exchange | None = None


LINGER_MAX_S = 1.0  # the most a request cut short adds to the gaps after it

# Bytes decompressed per call before the loop gets a turn: a gzip bomb decoding 50 MB
# must not stall every other fetch of the engine (and inflate their durations, which
# their hosts' gaps are counted from).
DECODE_PIECE = 1024 * 1024


def make_session(cache: DnsCache, limits: FetchLimits, *, limit: int = 200,
                 connector_cls: type[aiohttp.TCPConnector] = aiohttp.TCPConnector
                 ) -> aiohttp.ClientSession:
    """A session whose every connection goes through the guarded resolver and sockets."""
    connector = connector_cls(resolver=GuardedResolver(cache), limit=limit, ttl_dns_cache=None,
                              use_dns_cache=False, enable_cleanup_closed=True,
                              socket_factory=guarded_socket_factory(cache.policy))
    connector.address_policy = cache.policy  # type: ignore[attr-defined]  # read by fetch
    timeout = aiohttp.ClientTimeout(total=limits.total_timeout_s,
                                    sock_connect=limits.connect_timeout_s,
                                    sock_read=limits.read_timeout_s)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False,
                                 cookie_jar=aiohttp.DummyCookieJar())


async def _decode(decoder: Any, chunk: bytes, out: bytearray, cap: int) -> float:
    """Append the decoded `chunk` to `out`, up to one byte past `cap`, a piece at a time
    with a turn for the loop between pieces; the seconds spent decoding."""
    spent, data = 0.0, chunk
    while data and len(out) <= cap:
        t = time.monotonic()
        out += decoder.decompress(data, min(DECODE_PIECE, cap + 1 - len(out)))
        spent += time.monotonic() - t
        data = decoder.unconsumed_tail
        if data:
            await asyncio.sleep(0)
    return spent


def _extra_info(resp: aiohttp.ClientResponse, name: str) -> Any:
    """`get_extra_info(name)` of the response's transport. aiohttp releases a connection
    whose answer is already buffered (`resp.connection` is then None), so the response's
    protocol (a private attribute: None if a later aiohttp drops it) is asked too."""
    for holder in (resp.connection, getattr(resp, "_protocol", None)):
        transport = getattr(holder, "transport", None)
        info = transport.get_extra_info(name) if transport is not None else None
        if info:
            return info
    return None


def _peer(resp: aiohttp.ClientResponse) -> str | None:
    """The address the response came from."""
    peer = _extra_info(resp, "peername")
    return str(peer[0]) if peer else None


# Linux's struct tcp_info (netinet/tcp.h): its length up to tcpi_rttvar, and the offset
# of tcpi_last_data_recv, milliseconds since the kernel last received data on the socket.
_TCP_INFO_LEN = 76
_LAST_DATA_RECV = 52
# tcp_info counts its times in jiffies: one of rounding (10 ms at HZ 100, the coarsest).
JIFFY_S = 0.010


def receive_lag(resp: aiohttp.ClientResponse) -> float:
    """Seconds since the kernel last received data on `resp`'s connection (Linux
    TCP_INFO), less a jiffy of rounding; 0.0 where it cannot say (another system, a
    connection already closed). The last data received on the socket is the response's
    last byte or, were the connection passed on meanwhile, newer: never older, so the
    lag is never over-counted, and the request's duration less it never under-counted."""
    option = getattr(socket, "TCP_INFO", None)
    sock = _extra_info(resp, "socket") if option is not None else None
    if sock is None:
        return 0.0
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, option, _TCP_INFO_LEN)
    except OSError:  # not a TCP socket, or closed
        return 0.0
    if len(raw) < _LAST_DATA_RECV + 4:
        return 0.0
    (ago_ms,) = struct.unpack_from("=I", raw, _LAST_DATA_RECV)
    return max(0.0, ago_ms / 1000 - JIFFY_S)


def _exchange(resp: aiohttp.ClientResponse, wire: list[bytes], truncated: str | None,
              ip: str | None) -> Exchange:
    """The exchange of `resp` as the WARC records keep it: the request as aiohttp sent
    it, the status line and the headers as received (order, case, repeats), the payload
    as received (Content-Encoding kept; aiohttp has removed any chunked coding)."""
    v = resp.version
    info = resp.request_info
    return Exchange(
        method=info.method, target=info.url.raw_path_qs or "/",
        request_headers=[(k, v) for k, v in info.headers.items()],
        version=f"HTTP/{v.major}.{v.minor}" if v else "HTTP/1.1",
        status=resp.status, reason=resp.reason or "",
        response_headers=[(k.decode("latin-1"), val.decode("latin-1"))
                          for k, val in resp.raw_headers],
        payload=b"".join(wire), truncated=truncated, ip=ip)


def _decoder(encoding: str):
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    return None


async def fetch(session: aiohttp.ClientSession, url: str, kind: Kind, limits: FetchLimits,
                user_agent: str, etag: str | None = None, last_modified: str | None = None,
                keep_exchange: bool = False) -> FetchResponse:
    """One GET, classified. Never raises for network trouble: it becomes the outcome.
    `keep_exchange`: also return the exchange as sent and received (`exchange`), the
    payload as received on the wire (for the WARC records)."""
    start = time.monotonic()
    policy = getattr(session.connector, "address_policy", None)
    # Parsed once: the address check reads the very URL object aiohttp then requests.
    target: URL | str = url
    try:
        target = URL(url)
    except (ValueError, TypeError):  # aiohttp's own parse fails the same way below
        pass
    refusal = None if policy is None else \
        literal_refusal(url, policy, target if isinstance(target, URL) else None)
    if refusal is not None:  # an IP literal: no resolver is asked, so refuse it here
        return FetchResponse(Outcome.ADDRESS_BLOCKED, error=str(_refusal(url, refusal)))
    cap, wire_cap = limits.body_limit(kind), limits.wire_limit(kind)
    # (response, wire bytes so far, peer) once an answer has come: a body cut short by a
    # timeout or a disconnect still leaves the exchange, marked truncated.
    answered: list[tuple[aiohttp.ClientResponse, list[bytes], str | None]] = []

    def partial(why: str) -> Exchange | None:
        return _exchange(*answered[0][:2], why, answered[0][2]) if answered else None

    began: list[float] = []  # when the answer began (its status line and headers came)

    def linger() -> float:
        """For a request we cut short: see FetchResponse.linger_s."""
        return min(LINGER_MAX_S, (began[0] if began else time.monotonic()) - start)

    try:
        async with session.get(target,
                               headers=request_headers(user_agent, etag, last_modified),
                               allow_redirects=False) as resp:
            began.append(time.monotonic())
            headers = {k.title(): v for k, v in resp.headers.items()}
            outcome = classify(resp.status, kind, headers.get("Content-Type"),
                               headers.get("Location"))
            body, wire, too_large, decode_s = b"", 0, False, 0.0
            raw: list[bytes] = []  # the wire bytes, kept only for the exchange
            ip = _peer(resp) if keep_exchange else None
            if keep_exchange:
                answered.append((resp, raw, ip))
            # A body that is not read (only OK answers' are) is absent from the record.
            truncated = None if outcome is Outcome.OK or \
                headers.get("Content-Length", "").strip() == "0" else "unspecified"
            if outcome is Outcome.OK:
                decoder = _decoder(headers.get("Content-Encoding", "").lower())
                out = bytearray()
                async for chunk in resp.content.iter_chunked(64 * 1024):
                    wire += len(chunk)
                    if keep_exchange:
                        raw.append(chunk)
                    if decoder is None:
                        out += chunk
                    else:
                        decode_s += await _decode(decoder, chunk, out, cap)
                    if wire > wire_cap or len(out) > cap:
                        too_large = True
                        break
                if too_large and kind is not Kind.ROBOTS:
                    # robots.txt: the first 512 KiB is what counts; anything else is
                    # refused whole, and nothing of it is kept.
                    outcome = Outcome.TOO_LARGE
                    raw, truncated = [], "length"  # nothing of it is kept
                else:
                    if too_large:
                        truncated = "length"
                    del out[cap:]
                    body = bytes(out)
            # Read before anything else can run on this loop: how long the answer's last
            # byte has waited for this process (a busy loop, the GIL) is not the server's.
            lag = receive_lag(resp)
            exchange = _exchange(resp, raw, truncated, ip) if keep_exchange else None
            # Leaving the block closes a connection whose answer has not all come.
            cut = not resp.content.is_eof()
            # (decoding and waiting may overlap: the larger is taken off, not both)
            return FetchResponse(outcome, resp.status, headers, body, wire,
                                 max(0.0, time.monotonic() - start - max(decode_s, lag)),
                                 decode_s=decode_s, exchange=exchange,
                                 linger_s=linger() if cut else 0.0)
    except AddressRefused as exc:
        return FetchResponse(Outcome.ADDRESS_BLOCKED, error=str(exc),
                             duration_s=time.monotonic() - start)
    except aiohttp.ClientConnectorError as exc:  # DNS errors are a subclass
        cause = exc.os_error
        if isinstance(cause, AddressRefused) or REFUSAL_MARK in str(cause):
            outcome = Outcome.ADDRESS_BLOCKED
        elif isinstance(exc, aiohttp.ClientConnectorDNSError):
            outcome = Outcome.DNS_ERROR
        else:
            outcome = Outcome.CONNECT_ERROR
        return FetchResponse(outcome, error=f"{exc.host}: {cause}",
                             duration_s=time.monotonic() - start)
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        return FetchResponse(Outcome.TIMEOUT, error=f"timeout: {exc!r}",
                             duration_s=time.monotonic() - start, exchange=partial("time"),
                             linger_s=linger())
    except OSError as exc:
        if REFUSAL_MARK in str(exc):
            return FetchResponse(Outcome.ADDRESS_BLOCKED, error=str(exc),
                                 duration_s=time.monotonic() - start)
        return FetchResponse(Outcome.OTHER_ERROR, error=f"{type(exc).__name__}: {exc}",
                             duration_s=time.monotonic() - start,
                             exchange=partial("disconnect"))
    except (aiohttp.ClientError, zlib.error) as exc:
        return FetchResponse(Outcome.OTHER_ERROR, error=f"{type(exc).__name__}: {exc}",
                             duration_s=time.monotonic() - start,
                             exchange=partial("disconnect" if isinstance(
                                 exc, aiohttp.ClientError) else "unspecified"))
