"""The fetcher's pure rules: headers, classification, limits, DNS cache with SSRF checks.
No network: resolver answers are given as data."""

from __future__ import annotations

import pytest

from udfs.config import ConfigError, load_config, load_defaults
from udfs.config.policies import fetch_limits, frontier_config
from udfs.core.addresses import AddressPolicy
from udfs.core.fetching import DnsCache, FetchLimits, classify, request_headers
from udfs.core.frontier import Kind, Outcome

LIMITS = fetch_limits(load_defaults())


def test_limits_come_from_configuration_and_fit_inside_a_lease():
    assert FetchLimits() == LIMITS
    assert LIMITS.total_timeout_s < frontier_config(load_defaults()).lease_timeout_s
    assert LIMITS.body_limit(Kind.ROBOTS) == 512 * 1024
    # A page: 10 MiB on the wire, 50 MiB once decoded; a sitemap: 50 MB both ways.
    assert LIMITS.wire_limit(Kind.PAGE) == 10 * 1024 * 1024
    assert LIMITS.body_limit(Kind.PAGE) == 50 * 1024 * 1024
    assert LIMITS.wire_limit(Kind.SITEMAP) == LIMITS.body_limit(Kind.SITEMAP) == 52_428_800


def test_conditional_get_prefers_etag():
    h = request_headers("FlinkCrawler", etag='"abc"', last_modified="Sun, 29 Nov 2026 10:00:00 GMT")
    assert h["If-None-Match"] == '"abc"' and "If-Modified-Since" not in h
    h = request_headers("FlinkCrawler", last_modified="Sun, 29 Nov 2026 10:00:00 GMT")
    assert h["If-Modified-Since"] == "Sun, 29 Nov 2026 10:00:00 GMT"
    assert "If-None-Match" not in request_headers("FlinkCrawler")
    assert request_headers("FlinkCrawler")["User-Agent"] == "FlinkCrawler"


@pytest.mark.parametrize("status, kind, ctype, location, outcome", [
    (200, Kind.PAGE, "text/html; charset=utf-8", None, Outcome.OK),
    (200, Kind.PAGE, "application/xhtml+xml", None, Outcome.OK),
    (200, Kind.PAGE, "image/png", None, Outcome.UNSUPPORTED_TYPE),
    (200, Kind.PAGE, "application/xml", None, Outcome.UNSUPPORTED_TYPE),
    (200, Kind.SITEMAP, "application/xml", None, Outcome.OK),
    (200, Kind.ROBOTS, "text/plain", None, Outcome.OK),
    (304, Kind.PAGE, None, None, Outcome.NOT_MODIFIED),
    (301, Kind.PAGE, None, "/new", Outcome.REDIRECT),
    (308, Kind.PAGE, None, "/new", Outcome.REDIRECT),
    (302, Kind.PAGE, None, None, Outcome.CLIENT_ERROR),
    (404, Kind.PAGE, None, None, Outcome.GONE), (410, Kind.PAGE, None, None, Outcome.GONE),
    (429, Kind.PAGE, None, None, Outcome.THROTTLED), (503, Kind.PAGE, None, None,
                                                       Outcome.THROTTLED),
    (500, Kind.PAGE, None, None, Outcome.SERVER_ERROR), (403, Kind.PAGE, None, None,
                                                           Outcome.CLIENT_ERROR),
    (101, Kind.PAGE, None, None, Outcome.OTHER_ERROR),
])
def test_classify(status, kind, ctype, location, outcome):
    assert classify(status, kind, ctype, location) is outcome


def test_dns_cache_checks_every_answer_and_keeps_only_allowed_addresses():
    cache = DnsCache(AddressPolicy.from_networks([]), LIMITS)
    allowed, refusal = cache.store("Mixed.example", ["10.0.0.1", "8.8.8.8"], 300, now=0.0)
    assert allowed == ["8.8.8.8"] and refusal is None
    assert cache.cached("mixed.example", 299.0).addresses == ("8.8.8.8",)
    assert cache.cached("mixed.example", 300.0) is None  # TTL over
    allowed, refusal = cache.store("rebind.example", ["127.0.0.1", "169.254.169.254"], 5, 0.0)
    assert allowed == [] and "loopback" in refusal and "cloud-metadata" in refusal
    entry = cache.cached("rebind.example", 1.0)
    assert entry.error == refusal  # refused answers are cached briefly, then asked again
    assert cache.cached("rebind.example", LIMITS.dns_negative_ttl_s) is None


def test_dns_ttl_is_clamped_and_failures_are_negatively_cached():
    cache = DnsCache(AddressPolicy.from_networks([]), LIMITS)
    cache.store("a.example", ["1.1.1.1"], 1, now=0.0)
    assert cache.cached("a.example", LIMITS.dns_ttl_min_s - 1) is not None
    cache.store("b.example", ["1.1.1.1"], 10**9, now=0.0)
    assert cache.cached("b.example", LIMITS.dns_ttl_max_s) is None
    cache.store_failure("c.example", "NXDOMAIN", now=0.0)
    assert cache.cached("c.example", 1.0).error == "NXDOMAIN"


def test_static_hosts_still_pass_the_policy():
    cfg = load_config(env={}, overrides=["fetch.static_hosts=[h1.test=127.0.0.1]",
                                         "fetch.allowed_networks=[127.0.0.0/8]"])
    static = dict(item.split("=", 1) for item in cfg["fetch.static_hosts"])
    cache = DnsCache(AddressPolicy.from_networks(cfg["fetch.allowed_networks"]), LIMITS, static)
    answer = cache.static_answer("H1.test")
    assert cache.store("h1.test", answer, None, 0.0) == (["127.0.0.1"], None)
    strict = DnsCache(AddressPolicy.from_networks([]), LIMITS, static)
    assert strict.store("h1.test", strict.static_answer("h1.test"), None, 0.0)[0] == []
    with pytest.raises(ConfigError, match="not name=address"):
        load_config(env={}, overrides=["fetch.static_hosts=[h1.test=localhost]"])
