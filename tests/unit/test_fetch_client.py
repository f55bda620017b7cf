"""The fetcher's HTTP client against the synthetic web on loopback.

Loopback is reachable only because these tests allow 127.0.0.0/8 explicitly; the
SSRF tests use a connector that fails the test if it is asked to connect at all."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import aiohttp
import pytest

from udfs.core.addresses import AddressPolicy
from udfs.core.fetching import DnsCache, FetchLimits
from udfs.core.frontier import Kind, Outcome
from udfs.fetcher.client import LINGER_MAX_S, GuardedResolver, fetch, make_session
from udfs.fetcher.dns import DnsAnswer, DnsLookupError

UA = "FlinkCrawler"
LIMITS = replace(FetchLimits(), read_timeout_s=1.0, total_timeout_s=5.0,
                 max_body_bytes=2 * 1024 * 1024, max_decompressed_bytes=4 * 1024 * 1024)


def loopback_cache(web, networks=("127.0.0.0/8",)) -> DnsCache:
    static = dict(e.split("=", 1) for e in web.static_hosts())
    return DnsCache(AddressPolicy.from_networks(list(networks)), LIMITS, static)


def run(coro):
    return asyncio.run(coro)


async def fetch_all(cache, urls, kind=Kind.PAGE, **kw):
    async with make_session(cache, LIMITS, **kw) as session:
        return [await fetch(session, u, kind, LIMITS, UA) for u in urls]


def site(web, **want):
    return next(s for s in web.site_list if all(
        (v in s.features) if k == "feature" else getattr(s, k) == v for k, v in want.items()))


def test_pages_robots_redirects_and_conditional_get(web):
    s = site(web, feature="etag")
    base = web.host_key(s)
    (robots,) = run(fetch_all(loopback_cache(web), [base + "/robots.txt"], kind=Kind.ROBOTS))
    assert robots.outcome is Outcome.OK and b"Disallow" in robots.body
    (as_page,) = run(fetch_all(loopback_cache(web), [base + "/robots.txt"]))
    assert as_page.outcome is Outcome.UNSUPPORTED_TYPE  # text/plain is not a page
    page, missing = run(fetch_all(loopback_cache(web), [base + "/p/0", base + "/nope"]))
    assert page.outcome is Outcome.OK and b"<a href" in page.body and page.headers["Etag"]
    assert missing.outcome is Outcome.GONE

    async def conditional():
        async with make_session(loopback_cache(web), LIMITS) as session:
            return await fetch(session, base + "/p/0", Kind.PAGE, LIMITS, UA,
                               etag=page.headers["Etag"])
    assert run(conditional()).outcome is Outcome.NOT_MODIFIED
    r = site(web, feature="redirects")
    (redirect,) = run(fetch_all(loopback_cache(web), [web.host_key(r) + "/r/1"]))
    assert redirect.outcome is Outcome.REDIRECT and redirect.headers["Location"] == "/p/1"
    # Every answer came whole: none lingers at the server after our end.
    assert [x.linger_s for x in (robots, as_page, page, missing, redirect)] == [0.0] * 5


def test_size_limits_bombs_and_timeouts(web):
    big = site(web, feature="huge")
    bomb = site(web, feature="bomb")
    slow = site(web, feature="slow")
    huge, gz, late = run(fetch_all(loopback_cache(web), [
        web.host_key(big) + "/huge", web.host_key(bomb) + "/bomb", web.host_key(slow) + "/slow"]))
    # Past max_body_bytes on the wire; the bomb past max_decompressed_bytes once decoded
    # (its wire bytes stay far below the wire limit). Nothing of either is kept.
    assert huge.outcome is Outcome.TOO_LARGE and huge.body == b""
    assert huge.wire_bytes > LIMITS.max_body_bytes
    assert gz.outcome is Outcome.TOO_LARGE and gz.body == b""
    assert gz.wire_bytes < LIMITS.max_body_bytes
    assert late.outcome is Outcome.TIMEOUT
    # We closed both before the server's end: the gaps after them wait a little longer
    # (the time their answer took to begin; the timeout's, at most LINGER_MAX_S).
    assert 0 < huge.linger_s <= min(huge.duration_s, LINGER_MAX_S)
    assert 0 < late.linger_s <= LINGER_MAX_S
    # robots.txt over 512 KiB is cut, not refused.
    (robots,) = run(fetch_all(loopback_cache(web), [web.host_key(site(web, robots="huge")) +
                                                    "/robots.txt"], kind=Kind.ROBOTS))
    assert robots.outcome is Outcome.OK and len(robots.body) == LIMITS.max_robots_bytes


def test_decompressed_limit_is_its_own_setting(web):
    """fetch.max_decompressed_bytes, not max_body_bytes, caps a decoded page: a gzip page
    that decodes to more than the wire limit but less than the decoded one is read."""
    bomb = web.host_key(site(web, feature="bomb")) + "/bomb"
    (small,) = run(fetch_all(loopback_cache(web), [bomb]))
    wide = replace(LIMITS, max_decompressed_bytes=80 * 1024 * 1024)

    async def go():
        async with make_session(loopback_cache(web), wide) as session:
            return await fetch(session, bomb, Kind.PAGE, wide, UA)

    big = run(go())
    assert small.outcome is Outcome.TOO_LARGE
    assert big.outcome is Outcome.OK and len(big.body) > LIMITS.max_decompressed_bytes


def test_a_bomb_leaves_the_loop_turns_and_its_decoding_out_of_the_duration(web):
    """Decoding 48 MB of a gzip bomb gives the loop a turn after every 1 MiB piece,
    so the engine's other fetches go on (their durations, and so their hosts' gaps, are
    not inflated by it); the bomb's own duration does not count our decoding time."""
    bomb = web.host_key(site(web, feature="bomb")) + "/bomb"
    wide = replace(LIMITS, max_decompressed_bytes=48 * 1024 * 1024)
    lags: list[float] = []

    async def go():
        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        async def other_work():  # another fetch's turn: how long did it wait for it?
            last = loop.time()
            while not done.is_set():
                await asyncio.sleep(0)
                lags.append(loop.time() - last)
                last = loop.time()

        async with make_session(loopback_cache(web), wide) as session:
            task = asyncio.create_task(other_work())
            start = loop.time()
            try:
                return await fetch(session, bomb, Kind.PAGE, wide, UA), loop.time() - start
            finally:
                done.set()
                await task

    resp, elapsed = run(go())
    assert resp.outcome is Outcome.TOO_LARGE
    # In one piece, the longest wait would be the whole decoding time; in 1 MiB pieces,
    # about a 48th of it.
    assert max(lags) < resp.decode_s / 3, (max(lags), resp.decode_s)
    assert 0 < resp.duration_s <= elapsed - resp.decode_s + 0.001


def _fetch_with_the_loop_blocked(web, path: str, block_at: float, block_s: float):
    """Fetch `path` on a warm connection (after /p/0 of the same site) while the loop
    is blocked `block_s` seconds from `block_at` after the fetch's start (a busy fetch
    engine, another thread holding the GIL): (response, elapsed seconds)."""
    import time

    base = web.host_key(site(web, feature="slow"))
    limits = replace(LIMITS, read_timeout_s=5.0)  # (/slow answers after 3 s)

    async def go():
        loop = asyncio.get_running_loop()
        async with make_session(loopback_cache(web), limits) as session:
            await fetch(session, base + "/p/0", Kind.PAGE, limits, UA)
            start = loop.time()
            loop.call_later(block_at, time.sleep, block_s)
            resp = await fetch(session, base + path, Kind.PAGE, limits, UA)
            return resp, loop.time() - start

    return run(go())


@pytest.mark.skipif(not hasattr(__import__("socket"), "TCP_INFO"), reason="Linux TCP_INFO")
def test_the_duration_leaves_out_the_time_an_answer_waited_for_a_blocked_loop(web):
    """An answer that came in while our loop was blocked waited for us, not for the
    server: the duration (10x of which spaces the host's next request) leaves that wait
    out, as far as the kernel's receive time shows it, and keeps the server's own time."""
    resp, elapsed = _fetch_with_the_loop_blocked(web, "/p/0", 0.0, 0.5)
    assert resp.outcome is Outcome.OK and elapsed >= 0.5
    assert resp.duration_s < 0.15, resp.duration_s  # was the whole 0.5 s and more
    # A server that takes 3 s (/slow), the loop blocked for 0.5 s within them: all 3 s
    # count, the jiffy of rounding added rather than taken off.
    slow, elapsed = _fetch_with_the_loop_blocked(web, "/slow", 1.0, 0.5)
    assert slow.outcome is Outcome.OK and 3.0 <= slow.duration_s <= elapsed, \
        (slow.duration_s, elapsed)


class RefuseEveryConnection(aiohttp.TCPConnector):
    attempts: list = []

    async def _wrap_create_connection(self, *args, **kwargs):
        RefuseEveryConnection.attempts.append((args, kwargs))
        raise AssertionError("the SSRF guard let a connection through")


def test_loopback_is_refused_without_the_allowlist_and_nothing_connects(web):
    s = web.site_list[0]
    RefuseEveryConnection.attempts.clear()
    (r,) = run(fetch_all(loopback_cache(web, networks=()), [web.host_key(s) + "/robots.txt"],
                         connector_cls=RefuseEveryConnection))
    assert r.outcome is Outcome.ADDRESS_BLOCKED and "loopback" in r.error
    assert RefuseEveryConnection.attempts == []


class HostileDns:
    """What a hostile DNS server might answer (no real lookup happens)."""

    def __init__(self, answers, ttl_s=None):
        self.answers, self.ttl_s = answers, ttl_s

    async def lookup(self, host):
        if isinstance(self.answers, Exception):
            raise self.answers
        return DnsAnswer(list(self.answers), self.ttl_s)


def guarded(cache, dns):
    """A GuardedResolver whose DNS is `dns` (swappable between calls)."""
    holder = {"dns": dns}
    resolver = GuardedResolver(cache, dns=lambda: holder["dns"])
    return resolver, holder


def test_dns_answers_are_filtered_and_private_or_metadata_never_connected():
    cache = DnsCache(AddressPolicy.from_networks([]), LIMITS)
    resolver = GuardedResolver(cache, dns=lambda: HostileDns(["10.1.2.3", "169.254.169.254",
                                                              "::1"]))

    async def go():
        with pytest.raises(OSError, match="private"):
            await resolver.resolve("evil.example", 80)
        # Cached negatively: the second ask does not even reach DNS.
        resolver._dns = HostileDns(["8.8.8.8"])
        with pytest.raises(OSError, match="cloud-metadata"):
            await resolver.resolve("evil.example", 80)
        resolver._dns = HostileDns(["93.184.216.34", "10.0.0.1"])
        return await resolver.resolve("mixed.example", 80)

    answers = asyncio.run(go())
    assert [a["host"] for a in answers] == ["93.184.216.34"]  # only the checked public one


def test_dns_failure_becomes_dns_error():
    cache = DnsCache(AddressPolicy.from_networks([]), LIMITS)
    resolver = GuardedResolver(cache, dns=lambda: HostileDns(
        DnsLookupError("DNS nx.example: NXDOMAIN")))

    async def go():
        with pytest.raises(OSError, match="NXDOMAIN"):
            await resolver.resolve("nx.example", 80)
        with pytest.raises(OSError, match="DNS:"):  # negative cache
            await resolver.resolve("nx.example", 80)

    asyncio.run(go())


def test_localhost_names_are_loopback_without_a_query():
    cache = DnsCache(AddressPolicy.from_networks([]), LIMITS)
    resolver = GuardedResolver(cache, dns=lambda: pytest.fail("localhost went to DNS"))

    async def go():
        for name in ("localhost", "LOCALHOST.", "api.localhost"):
            with pytest.raises(OSError, match="loopback"):
                await resolver.resolve(name, 80)

    asyncio.run(go())


def test_answers_are_cached_for_their_ttl_from_a_real_dns_server():
    """fetch.dns_servers pointed at a DNS server on loopback: the answer's TTL (77 s, the
    smaller of A 123 and AAAA 77) is how long it is cached, within the configured bounds."""
    from tests.unit.test_ttl_resolver import DnsServer

    server = DnsServer()
    try:
        limits = replace(LIMITS, dns_servers=(f"127.0.0.1:{server.port}",), dns_timeout_s=1.0,
                         dns_ttl_min_s=10.0, dns_ttl_max_s=100.0)
        clock = [1000.0]
        cache = DnsCache(AddressPolicy.from_networks(["127.0.0.0/8", "::1/128"]), limits)
        resolver = GuardedResolver(cache, clock=lambda: clock[0])

        async def ask(name):
            return sorted(a["host"] for a in await resolver.resolve(name, 80))

        async def go():
            first = await ask("a.test")
            asked = len(server.queries)
            clock[0] += 76.0
            await ask("a.test")  # within the TTL: from the cache
            cached = len(server.queries) == asked
            clock[0] += 2.0
            await ask("a.test")  # past it: asked again
            again = len(server.queries) > asked
            await ask("chain.test")  # TTL 300 clamped to dns_ttl_max_s
            return first, cached, again, cache.cached("chain.test", clock[0]).expires_at

        first, cached, again, chain_expiry = asyncio.run(go())
        assert first == ["127.0.0.1", "::1"] and cached and again
        assert chain_expiry == clock[0] + 100.0
    finally:
        server.stop()
