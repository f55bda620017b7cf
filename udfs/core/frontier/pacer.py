"""A host's pace (our version of Scrapy's downloader `Slot`): when its next request may
start, how many may be out at once, and how it backs off.

The pacer keeps the host's negotiated policy, its allowance (cut by 429/503, recovered
by good answers), its Crawl-delay, the backoff window, and two clocks: `next_allowed_at`
(a head lease's earliest start, counted from everything the frontier knows) and
`plan_at` (no follower before it: the real ends as the fetcher saw them, and its hints).
It decides nothing about which URL goes next; it owns the host's tokens.
"""

from __future__ import annotations

from collections.abc import Mapping

from udfs.core.frontier.config import FrontierConfig
from udfs.core.politeness import (
    HostPolicy,
    Jitter,
    Pace,
    backoff_delay,
    cut_allowance,
    effective_gap,
    effective_in_flight,
    host_pace,
    parse_retry_after,
    recover_allowance,
)
from udfs.core.records import HOST_TROUBLE, FetchResult, Lease, Outcome


class Pacer:
    """The politeness tokens of one host."""

    __slots__ = ("cfg", "policy", "rng", "crawl_delay", "next_allowed_at", "plan_at",
                 "heads_only", "throttles", "last_duration_s", "backoff_until",
                 "backoff_exponent", "allowance")

    def __init__(self, cfg: FrontierConfig, policy: HostPolicy, rng: Jitter) -> None:
        self.cfg = cfg
        self.policy = policy
        self.rng = rng
        self.crawl_delay = 0.0  # from the host's robots.txt
        self.next_allowed_at = 0.0  # a head lease's earliest start: after everything known
        self.plan_at = 0.0  # no follower before: the real ends (and the fetcher's hints)
        self.heads_only = False  # a fetcher lost the chain: grant a head next
        self.throttles = 0  # 429/503 answers seen (leases carry it: throttle_seq)
        self.last_duration_s = 0.0  # of the last fetch that came back: plans the next gaps
        self.backoff_until = 0.0
        self.backoff_exponent = 0
        self.allowance = 1.0

    def gap_s(self, fetch_duration_s: float = 0.0) -> float:
        return effective_gap(self.policy, self.allowance, self.crawl_delay, fetch_duration_s)

    def pace(self) -> Pace:
        return host_pace(self.policy, self.allowance, self.crawl_delay)

    def lease_limit(self) -> int:
        """Leases the host may have out at once: its in-flight limit plus the look-ahead
        (only one, a head, after a fetcher lost the chain)."""
        if self.heads_only:
            return 1
        return effective_in_flight(self.policy, self.allowance) + self.cfg.max_lookahead_leases

    def next_start(self, now: float, in_flight: Mapping[str, Lease]) -> float:
        """The not_before of the next lease: a head counts from everything the frontier
        knows (completions as they arrived, expiries); a follower keeps the plan (the
        fetcher counts the gap from the previous request's real end)."""
        if in_flight:
            gap = self.gap_s(self.last_duration_s)  # as the fetcher will count it
            last = max(lease.not_before for lease in in_flight.values()) + gap
            return max(now, self.plan_at, last)
        return max(now, self.next_allowed_at, self.plan_at)

    def ready_at(self, now: float, in_flight: Mapping[str, Lease]) -> float:
        """The earliest time the host's tokens allow a request (ignoring the queue)."""
        return max(self.next_start(now, in_flight), self.backoff_until)

    def tokens_free(self, now: float, in_flight: Mapping[str, Lease]) -> bool:
        """May a lease be granted now (look-ahead included)?"""
        return (now >= self.backoff_until and len(in_flight) < self.lease_limit() and
                self.next_start(now, in_flight) <= now + self.cfg.lookahead_s)

    def granted(self, lease: Lease) -> None:
        """Granting takes the host's token: the next lease is planned one gap later."""
        self.next_allowed_at = max(self.next_allowed_at,
                                   lease.not_before + self.gap_s(self.last_duration_s))

    def contacted(self, r: FetchResult, now: float) -> None:
        """A request came back: the next one waits a full gap, for a head counted from
        now (the completion's arrival), for a follower from the request's end as the
        fetcher saw it."""
        self.next_allowed_at = max(self.next_allowed_at, now + self.gap_s(r.fetch_duration_s))
        ended = now if r.fetched_at is None else min(now, r.fetched_at)
        self.plan_at = max(self.plan_at, ended + self.gap_s(r.fetch_duration_s))

    def hinted(self, until: float) -> None:
        """The fetcher's own wait for the host (a Retry-After it saw on a lease it did
        not send)."""
        self.plan_at = max(self.plan_at, until)
        self.next_allowed_at = max(self.next_allowed_at, until)

    def signal(self, r: FetchResult, now: float) -> bool:
        """Backoff and allowance from what the host answered; True for a throttle."""
        if r.outcome is Outcome.THROTTLED:
            self.throttles += 1
            until = parse_retry_after(r.retry_after, now)
            if until is None:
                until = now + backoff_delay(self.policy, self.backoff_exponent, self.rng.random())
            self.backoff_until = max(self.backoff_until, until)
            self.backoff_exponent += 1
            self.allowance = cut_allowance(self.policy, self.allowance)
            return True
        if r.outcome in HOST_TROUBLE:
            self.backoff_until = max(self.backoff_until, now + backoff_delay(
                self.policy, self.backoff_exponent, self.rng.random()))
            self.backoff_exponent += 1
        elif r.outcome is Outcome.ADDRESS_BLOCKED:
            self.backoff_until = max(self.backoff_until, now + self.cfg.address_block_s)
        else:
            self.backoff_exponent = 0
            self.allowance = recover_allowance(self.policy, self.allowance)
        return False
