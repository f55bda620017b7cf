"""robots.txt's fetch status (RFC 9309 2.3.1 and 2.4): when to fetch it, and what a
URL of the host may do meanwhile.

The state machine is pure: `after_fetch` takes a fetch outcome and `now` and returns
the next state; `decide` tells whether a URL may be leased; `crawl_delay_s` is the
Crawl-delay to honour. The rules themselves are parsed and matched in robots.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from udfs.core.robots import RobotsTxt, parse_robots
from udfs.core.urls import normalize_url


class RobotsStatus(StrEnum):
    UNKNOWN = "UNKNOWN"  # never fetched: nothing of the host may be leased
    RULES = "RULES"  # 2xx: obey the rules
    ALLOW_ALL = "ALLOW_ALL"  # 4xx (or too many redirects): unavailable, no restrictions
    DISALLOW_ALL = "DISALLOW_ALL"  # unreachable (5xx, network) and no earlier copy


class Verdict(StrEnum):
    ALLOWED = "ALLOWED"
    DISALLOWED = "DISALLOWED"
    NEED_ROBOTS = "NEED_ROBOTS"  # fetch robots.txt first; lease nothing else of the host


@dataclass(frozen=True)
class RobotsPolicy:
    """Our side of the protocol, from the `robots` configuration section."""

    user_agent: str = "FlinkCrawler"
    cache_ttl_s: float = 86400.0
    max_redirects: int = 5
    retry_base_s: float = 60.0
    retry_max_s: float = 3600.0
    crawl_delay: str = "honor"  # or "ignore": Crawl-delay is not in the RFC
    crawl_delay_cap_s: float = 30.0


@dataclass(frozen=True)
class RobotsState:
    """What the frontier keeps per host about its robots.txt (times in seconds)."""

    status: RobotsStatus = RobotsStatus.UNKNOWN
    body: str | None = None  # the rules in force when status is RULES
    fetched_at: float | None = None  # last successful (2xx or 4xx) fetch
    expires_at: float = 0.0  # when a successful result must be refreshed
    failures: int = 0  # consecutive unreachable results
    retry_at: float = 0.0  # next attempt while unreachable


@dataclass(frozen=True)
class RobotsFetch:
    """The outcome of one robots.txt fetch: an HTTP status, or None for a network error."""

    status: int | None
    body: str | bytes | None = None
    location: str | None = None  # absolute or relative target of a 3xx
    url: str = ""  # the URL that was fetched (base for a relative location)
    hops: int = 0  # redirects followed before this fetch


def after_fetch(state: RobotsState, fetch: RobotsFetch, now: float, policy: RobotsPolicy
                ) -> tuple[RobotsState, str | None]:
    """The next state, and the URL to fetch next when a redirect is to be followed."""
    code = fetch.status
    if code is not None and 300 <= code < 400:
        target = normalize_url(fetch.location, fetch.url or None) if fetch.location else None
        if target is not None and fetch.hops < policy.max_redirects:
            return state, target
        code = 404  # RFC 9309 2.3.1.2: past 5 redirects, the file MAY be taken as unavailable
    if code is not None and 200 <= code < 300:
        body = fetch.body.decode("utf-8", "replace") if isinstance(fetch.body, bytes) \
            else (fetch.body or "")
        return RobotsState(RobotsStatus.RULES, body, now, now + policy.cache_ttl_s), None
    if code is not None and 400 <= code < 500 and code != 429:
        return RobotsState(RobotsStatus.ALLOW_ALL, None, now, now + policy.cache_ttl_s), None
    # 429, 5xx, other codes, network errors: unreachable. Keep an earlier good copy
    # (even past its 24 h) while it stays unreachable; without one, disallow all.
    failures = state.failures + 1
    retry = min(policy.retry_max_s, policy.retry_base_s * 2 ** (failures - 1))
    if state.fetched_at is not None:
        return replace(state, failures=failures, retry_at=now + retry), None
    return RobotsState(RobotsStatus.DISALLOW_ALL, None, None, 0.0, failures, now + retry), None


def fetch_due(state: RobotsState, now: float) -> bool:
    """Should robots.txt be (re)fetched now?"""
    if state.status is RobotsStatus.UNKNOWN:
        return True
    if state.failures:
        return now >= state.retry_at
    return now >= state.expires_at


def decide(state: RobotsState, url: str, now: float, policy: RobotsPolicy,
           parsed: RobotsTxt | None = None) -> Verdict:
    """May `url` be leased now under this host's robots state?

    `parsed` is the caller's parse of `state.body`, to spare a parse per URL.
    """
    if state.status is RobotsStatus.UNKNOWN:
        return Verdict.NEED_ROBOTS
    if not state.failures and now >= state.expires_at:
        return Verdict.NEED_ROBOTS  # refresh within 24 h before leasing more
    if state.status is RobotsStatus.DISALLOW_ALL:
        return Verdict.DISALLOWED
    if state.status is RobotsStatus.ALLOW_ALL:
        return Verdict.ALLOWED
    rules = parsed if parsed is not None else parse_robots(state.body or "")
    return Verdict.ALLOWED if rules.is_allowed(policy.user_agent, url) else Verdict.DISALLOWED


def crawl_delay_s(state: RobotsState, policy: RobotsPolicy,
                  parsed: RobotsTxt | None = None) -> float:
    """The Crawl-delay to honour for the host (0 when none or ignored), capped."""
    if policy.crawl_delay != "honor" or state.status is not RobotsStatus.RULES:
        return 0.0
    rules = parsed if parsed is not None else parse_robots(state.body or "")
    delay = rules.crawl_delay(policy.user_agent)
    return min(delay, policy.crawl_delay_cap_s) if delay else 0.0
