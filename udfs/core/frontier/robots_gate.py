"""A host's robots gate: robots.txt is leased before any page, and every page lease is
checked against the rules it holds (udfs/core/robots.py has the rules themselves).

The gate keeps the host's RobotsState, the one robots lease that may be out, a redirect
to follow next, and the parsed rules (derived, never saved).
"""

from __future__ import annotations

from udfs.core.records import FetchResult, Lease
from udfs.core.robots import RobotsTxt, parse_robots
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

UNSTORED = object()  # RobotsGate.stored_body before the body was first written or read


class RobotsGate:
    """robots.txt of one host: when to fetch it, and what it allows."""

    __slots__ = ("host_key", "policy", "state", "version", "lease", "follow", "hops", "parsed",
                 "stored_body")

    def __init__(self, host_key: str, policy: RobotsPolicy) -> None:
        self.host_key = host_key
        self.policy = policy
        self.state = RobotsState()
        self.version = 0  # robots rounds leased (the robots lease's url_version)
        self.lease: Lease | None = None
        self.follow: tuple[str, int] | None = None  # redirect to fetch next, hops
        self.hops = 0  # redirects behind the robots lease in flight
        self.parsed: RobotsTxt | None = None
        # The body last written to (or read from) keyed storage's own robots.txt value
        # (state.save), compared by identity: the body is written only when it changed.
        self.stored_body: object = UNSTORED

    def reparse(self) -> None:
        """Derive the parsed rules from the state (after a fetch or a restore)."""
        self.parsed = parse_robots(self.state.body) if self.state.body else None

    def crawl_delay(self) -> float:
        return crawl_delay_s(self.state, self.policy, self.parsed)

    def blocking(self, now: float) -> bool:
        """Must robots.txt be fetched before any page of the host is leased?"""
        r = self.state
        return r.status.value == "UNKNOWN" or (not r.failures and now >= r.expires_at)

    def blocks_all(self) -> bool:
        """A 5xx with no earlier copy: every page waits (a gauge)."""
        return self.state.status is RobotsStatus.DISALLOW_ALL

    def wants_fetch(self, now: float, wants_pages: bool) -> bool:
        """Should the next lease be robots.txt (a redirect to follow, or a copy due while
        pages wait)?"""
        return self.lease is None and (self.follow is not None or
                                       (wants_pages and fetch_due(self.state, now)))

    def next_round(self) -> tuple[str, int]:
        """Start a robots round: the URL to lease and the round's version."""
        url, hops = self.follow or (self.host_key + "/robots.txt", 0)
        self.follow = None
        self.version += 1
        self.hops = hops
        return url, self.version

    def verdict(self, url: str, now: float) -> Verdict:
        return decide(self.state, url, now, self.policy, self.parsed)

    def recheck_at(self, now: float) -> float:
        """When a disallowed URL is worth checking again: after the next refresh."""
        return max(now + 1.0, self.state.expires_at, self.state.retry_at)

    def owns(self, lease: Lease | None) -> bool:
        return lease is not None and self.lease is not None and \
            lease.lease_id == self.lease.lease_id

    def not_sent(self, lease: Lease) -> None:
        """The fetcher did not send the robots lease: the same round again."""
        if self.owns(lease):
            self.lease = None
            self.version -= 1

    def fetched(self, r: FetchResult, lease: Lease, status: int | None, now: float
                ) -> list[str]:
        """Apply the robots lease's answer (`status` None: no answer from the host);
        returns the sitemap URLs it names."""
        self.lease = None
        self.state, follow = after_fetch(
            self.state, RobotsFetch(status, r.robots_body, r.redirect_location, lease.url,
                                    self.hops), now, self.policy)
        if follow is not None:
            self.follow = (follow, self.hops + 1)
        self.reparse()
        return self.parsed.sitemap_urls(lease.url) if self.parsed else []
