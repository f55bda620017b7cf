"""The robots.txt fetch-status state machine, Crawl-delay policy, and parser properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.config import load_defaults
from udfs.config.policies import robots_policy
from udfs.core.robots import MAX_ROBOTS_BYTES, is_allowed, parse_robots
from udfs.core.robots_state import (
    RobotsFetch,
    RobotsPolicy,
    RobotsState,
    RobotsStatus,
    Verdict,
    after_fetch,
    crawl_delay_s,
    decide,
    fetch_due,
)

POLICY = robots_policy(load_defaults())
DAY = 86400.0
RULES = "User-agent: *\nDisallow: /private/\nCrawl-delay: 7\nSitemap: /sitemap.xml\n"
URL = "https://h.example/robots.txt"


def fetched(status, body=None, location=None, hops=0, now=0.0, state=None):
    state = RobotsState() if state is None else state
    return after_fetch(state, RobotsFetch(status, body, location, URL, hops), now, POLICY)


def test_policy_comes_from_the_configuration():
    assert POLICY.user_agent == "FlinkCrawler" and POLICY.cache_ttl_s == DAY
    assert POLICY.max_redirects == 5


def test_nothing_is_leased_before_robots():
    s = RobotsState()
    assert fetch_due(s, 0) and decide(s, "https://h.example/", 0, POLICY) is Verdict.NEED_ROBOTS


def test_2xx_obeys_rules_for_24_hours_then_needs_a_refresh():
    s, follow = fetched(200, RULES, now=100)
    assert follow is None and s.status is RobotsStatus.RULES
    assert decide(s, "https://h.example/private/x", 100, POLICY) is Verdict.DISALLOWED
    assert decide(s, "https://h.example/public", 100 + DAY - 1, POLICY) is Verdict.ALLOWED
    assert not fetch_due(s, 100 + DAY - 1)
    assert fetch_due(s, 100 + DAY)
    assert decide(s, "https://h.example/public", 100 + DAY, POLICY) is Verdict.NEED_ROBOTS


def test_bytes_body_is_decoded():
    s, _ = fetched(200, RULES.encode(), now=0)
    assert decide(s, "https://h.example/private/", 1, POLICY) is Verdict.DISALLOWED


def test_3xx_follows_up_to_five_hops_then_is_unavailable():
    s0 = RobotsState()
    s, follow = fetched(301, location="/elsewhere/robots.txt", hops=0, state=s0)
    assert s == s0 and follow == "https://h.example/elsewhere/robots.txt"
    s, follow = fetched(302, location="https://cdn.example/r.txt", hops=4, state=s0)
    assert follow == "https://cdn.example/r.txt"
    s, follow = fetched(302, location="https://cdn.example/r.txt", hops=5, now=10, state=s0)
    assert follow is None and s.status is RobotsStatus.ALLOW_ALL
    s, follow = fetched(301, location=None, now=10)  # a redirect without a target
    assert follow is None and s.status is RobotsStatus.ALLOW_ALL


def test_4xx_allows_everything():
    for code in (400, 401, 403, 404, 410, 451):
        s, _ = fetched(code, now=5)
        assert s.status is RobotsStatus.ALLOW_ALL
        assert decide(s, "https://h.example/private/x", 6, POLICY) is Verdict.ALLOWED


def test_5xx_network_error_and_429_disallow_everything_until_a_fetch_succeeds():
    for code in (500, 503, 429, None):
        s, _ = fetched(code, now=0)
        assert s.status is RobotsStatus.DISALLOW_ALL and s.failures == 1
        assert decide(s, "https://h.example/any", 1, POLICY) is Verdict.DISALLOWED
        assert not fetch_due(s, POLICY.retry_base_s - 1) and fetch_due(s, POLICY.retry_base_s)
    # Retries back off, capped, and recover on success.
    s = RobotsState()
    times = []
    for i in range(8):
        s, _ = fetched(503, now=i * 10_000.0, state=s)
        times.append(s.retry_at - i * 10_000.0)
    assert times[:3] == [60.0, 120.0, 240.0] and max(times) == POLICY.retry_max_s
    s, _ = fetched(200, RULES, now=90_000, state=s)
    assert s.status is RobotsStatus.RULES and s.failures == 0
    assert decide(s, "https://h.example/ok", 90_001, POLICY) is Verdict.ALLOWED


def test_cached_copy_is_used_past_24h_only_while_unreachable():
    good, _ = fetched(200, RULES, now=0)
    # Expired and reachable: must refresh before leasing.
    assert decide(good, "https://h.example/ok", DAY + 1, POLICY) is Verdict.NEED_ROBOTS
    # The refresh fails: the old rules keep applying, disallowed paths stay disallowed.
    down, _ = fetched(500, now=DAY + 1, state=good)
    assert down.status is RobotsStatus.RULES and down.failures == 1
    assert decide(down, "https://h.example/ok", DAY + 2, POLICY) is Verdict.ALLOWED
    assert decide(down, "https://h.example/private/a", DAY + 2, POLICY) is Verdict.DISALLOWED
    assert fetch_due(down, DAY + 1 + POLICY.retry_base_s)
    # Back up: fresh rules, normal 24 h expiry again.
    up, _ = fetched(200, "User-agent: *\nDisallow: /\n", now=DAY + 100, state=down)
    assert up.failures == 0 and up.expires_at == DAY + 100 + DAY
    assert decide(up, "https://h.example/ok", DAY + 101, POLICY) is Verdict.DISALLOWED


def test_crawl_delay_policy_and_cap():
    s, _ = fetched(200, RULES, now=0)
    assert crawl_delay_s(s, POLICY) == 7.0
    assert crawl_delay_s(s, RobotsPolicy(crawl_delay="ignore")) == 0.0
    assert crawl_delay_s(s, RobotsPolicy(crawl_delay_cap_s=3.0)) == 3.0
    big, _ = fetched(200, "User-agent: *\nCrawl-delay: 1e9\n", now=0)
    assert crawl_delay_s(big, POLICY) == POLICY.crawl_delay_cap_s
    bad, _ = fetched(200, "User-agent: *\nCrawl-delay: soon\n", now=0)
    assert crawl_delay_s(bad, POLICY) == 0.0
    allow_all, _ = fetched(404, now=0)
    assert crawl_delay_s(allow_all, POLICY) == 0.0


def test_crawl_delay_of_our_own_group():
    robots = "User-agent: *\nCrawl-delay: 2\n\nUser-agent: FlinkCrawler\nCrawl-delay: 5\n"
    assert parse_robots(robots).crawl_delay("FlinkCrawler") == 5.0
    assert parse_robots(robots).crawl_delay("other") == 2.0


def test_sitemaps_are_absolute():
    assert parse_robots(RULES).sitemap_urls(URL) == ["https://h.example/sitemap.xml"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4000), st.text(max_size=30), st.text(max_size=60))
def test_parser_never_raises_on_bytes(data, agent, url):
    assert isinstance(is_allowed(data, agent, url), bool)


LINE = st.sampled_from(["User-agent: *", "user-agent: bot", "Disallow: /", "Allow: /a", "",
                        "Disallow: /*.gif$", "Allow: /$", "# c", "Sitemap: /s.xml", "junk",
                        "Crawl-delay: 3", "Disallow: /%7e", "Allow: /ツ", "\ufeff", "\r"])


@settings(max_examples=300, deadline=None)
@given(st.lists(LINE, max_size=30).map("\n".join), st.sampled_from(["bot", "*", "x"]),
       st.text(alphabet="/abc.$*?=%7eツ", max_size=20))
def test_parser_never_raises_on_robots_like_text(text, agent, path):
    parsed = parse_robots(text)
    assert isinstance(parsed.is_allowed(agent, "http://h" + "/" + path), bool)


def test_huge_input_is_capped():
    data = b"User-agent: *\n" + b"Disallow: /x\n" * (2 * MAX_ROBOTS_BYTES // 13)
    parsed = parse_robots(data)
    assert parsed.stats.truncated
    assert parsed.stats.directives <= MAX_ROBOTS_BYTES // 13 + 1


def _reference_allowed(rules: list[tuple[bool, str]], path: str) -> bool:
    """Longest match, Allow on ties, by scanning every rule (written for the test)."""
    import re

    best = (-1, True)
    for allow, pattern in rules:
        if not pattern:
            continue
        anchored = pattern.endswith("$")
        body = pattern[:-1] if anchored else pattern
        regex = ".*".join(re.escape(x) for x in body.split("*")) + (r"\Z" if anchored else "")
        if re.match(regex, path, re.DOTALL):
            if len(pattern) > best[0] or (len(pattern) == best[0] and allow):
                best = (len(pattern), allow)
    return best[1]


PATTERN = (st.lists(st.sampled_from(["/", "a", "b", "*", ".", "?", "=", "x"]), max_size=6)
           .map("".join).map(lambda p: p if p.startswith(("/", "*")) else "/" + p))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.booleans(), PATTERN, st.booleans()), max_size=12),
       st.lists(st.sampled_from(["/", "a", "b", ".", "?", "=", "x"]), max_size=8).map("".join))
def test_indexed_matcher_agrees_with_a_full_scan(rules, tail):
    rules = [(allow, p + ("$" if end and not p.endswith("$") else "")) for allow, p, end in rules]
    text = "User-agent: *\n" + "".join(
        f"{'Allow' if a else 'Disallow'}: {p}\n" for a, p in rules)
    path = "/" + tail
    got = parse_robots(text).is_allowed("bot", "http://h" + path)
    # index.html is Google's extra rule; the generated patterns never contain it.
    assert got == _reference_allowed(rules, path)
