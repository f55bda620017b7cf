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
from udfs.fetch_client import GuardedResolver, fetch, make_session

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


def test_size_limits_bombs_and_timeouts(web):
    big = site(web, feature="huge")
    bomb = site(web, feature="bomb")
    slow = site(web, feature="slow")
    huge, gz, late = run(fetch_all(loopback_cache(web), [
        web.host_key(big) + "/huge", web.host_key(bomb) + "/bomb", web.host_key(slow) + "/slow"]))
    assert huge.outcome is Outcome.TOO_LARGE and len(huge.body) <= LIMITS.max_body_bytes
    assert gz.outcome is Outcome.TOO_LARGE and len(gz.body) <= LIMITS.max_body_bytes
    assert late.outcome is Outcome.TIMEOUT
    # robots.txt over 512 KiB is cut, not refused.
    (robots,) = run(fetch_all(loopback_cache(web), [web.host_key(site(web, robots="huge")) +
                                                    "/robots.txt"], kind=Kind.ROBOTS))
    assert robots.outcome is Outcome.OK and len(robots.body) == LIMITS.max_robots_bytes


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


class FakeSystemResolver:
    """What a hostile DNS server might answer (no real lookup happens)."""

    def __init__(self, answers):
        self.answers = answers

    async def resolve(self, host, port=0, family=0):
        if isinstance(self.answers, Exception):
            raise self.answers
        return [{"host": a} for a in self.answers]

    async def close(self):
        pass


def test_dns_answers_are_filtered_and_private_or_metadata_never_connected():
    cache = DnsCache(AddressPolicy.from_networks([]), LIMITS)
    resolver = GuardedResolver(cache)
    resolver._system = FakeSystemResolver(["10.1.2.3", "169.254.169.254", "::1"])

    async def go():
        with pytest.raises(OSError, match="private"):
            await resolver.resolve("evil.example", 80)
        # Cached negatively: the second ask does not even reach the resolver.
        resolver._system = FakeSystemResolver(["8.8.8.8"])
        with pytest.raises(OSError, match="cloud-metadata"):
            await resolver.resolve("evil.example", 80)
        resolver._system = FakeSystemResolver(["93.184.216.34", "10.0.0.1"])
        return await resolver.resolve("mixed.example", 80)

    answers = asyncio.run(go())
    assert [a["host"] for a in answers] == ["93.184.216.34"]  # only the checked public one


def test_dns_failure_becomes_dns_error():
    cache = DnsCache(AddressPolicy.from_networks([]), LIMITS)
    resolver = GuardedResolver(cache)
    resolver._system = FakeSystemResolver(OSError("Name or service not known"))

    async def go():
        with pytest.raises(OSError, match="not known"):
            await resolver.resolve("nx.example", 80)
        with pytest.raises(OSError, match="DNS:"):  # negative cache
            await resolver.resolve("nx.example", 80)

    asyncio.run(go())
