"""A host's leases out: their ids, how a lease is made from the pacer's plan, expiry.

A lease id is host#sequence@grant-time-ms: the sequence orders a host's leases; the
grant time keeps ids unique when a restore from an older checkpoint repeats a sequence.
Each lease names the one granted just before it while that one is still out (its
predecessor in the fetcher's per-host chain, udfs/core/backqueue.py) and carries the
host's pace at the grant: what the fetcher enforces at request time.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

from udfs.core.frontier.config import FrontierConfig
from udfs.core.frontier.pacer import Pacer
from udfs.core.frontier.sharding import ShardLink
from udfs.core.records import Kind, Lease, UrlState, UrlStatus
from udfs.core.recrawl import budget_wait
from udfs.core.traps import DAY_S, DailyBudget

# Expired leases a host remembers having spent an attempt: a NOT_SENT for one comes
# when the fetcher reads the lease after its expiry, within a lag, not days later.
EXPIRED_SPENT_KEEP = 64


class LeaseBook:
    """The leases one host has out (lease_id → lease)."""

    __slots__ = ("host_key", "cfg", "_count", "out", "seq", "saved_out", "expired_spent")

    def __init__(self, host_key: str, cfg: FrontierConfig,
                 count: Callable[[str], None]) -> None:
        self.host_key = host_key
        self.cfg = cfg
        self._count = count
        self.out: dict[str, Lease] = {}
        self.seq = 0
        # The state codec's field dicts of the leases out, by lease_id, with the lease
        # each was made from (state.py: a host's value is rebuilt on every call, and a
        # lease does not change while it is out). Never part of the state itself.
        self.saved_out: dict[str, tuple[Lease, dict[str, Any]]] = {}
        # The last EXPIRED_SPENT_KEEP expired leases that spent an attempt of their URL:
        # lease_id → (url_id, url_version). A NOT_SENT the fetcher sends for one later
        # (it read the lease only after its expiry) gives the attempt back
        # (Completions._refund).
        self.expired_spent: dict[str, tuple[str, int]] = {}

    def __len__(self) -> int:
        return len(self.out)

    def new_id(self, now: float) -> str:
        self.seq += 1
        return f"{self.host_key}#{self.seq}@{int(round(now * 1000))}"

    def make(self, now: float, pacer: Pacer, url_id: str, version: int, attempt: int,
             url: str, kind: Kind, depth: int = 0, etag: str | None = None,
             last_modified: str | None = None, storage_tier: str = "standard") -> Lease:
        """A lease with a new id, starting at the pacer's next start and following the
        last lease still out; granted (the pacer's token taken)."""
        lease_id = self.new_id(now)
        start = pacer.next_start(now, self.out)
        prev = max(self.out.values(), key=attrgetter("not_before", "issued_at"), default=None)
        pace = pacer.pace()
        lease = Lease(lease_id, url_id, version, attempt, now, start + self.cfg.lease_timeout_s,
                      url, self.host_key, kind, depth, etag, last_modified, start,
                      None if prev is None else prev.lease_id, pace.gap_s,
                      pace.duration_factor, pace.max_gap_s, pace.max_in_flight,
                      pacer.throttles, storage_tier)
        self.out[lease.lease_id] = lease
        pacer.granted(lease)
        return lease

    def lease_url(self, u: UrlState, now: float, pacer: Pacer, shards: ShardLink) -> Lease:
        """Lease a URL: a new fetch round (version + 1), or the re-let of an expired
        lease of its round (attempt + 1)."""
        if u.relet:
            u.attempt += 1
            self._count("leases_relet")
        else:
            if u.version == 0 and shards.unleased:
                shards.unleased -= 1
            u.version += 1
            u.attempt = 1
        u.relet = False
        u.status = UrlStatus.LEASED
        low = u.dup and self.cfg.recrawl.learned_priority
        lease = self.make(now, pacer, u.url_id, u.version, u.attempt, u.url, u.kind, u.depth,
                          u.etag, u.last_modified if u.etag is None else None,
                          "low" if low else "standard")
        u.lease_id = lease.lease_id
        self._count("leases_granted")
        return lease

    def spend(self, now: float, budget: DailyBudget, host_daily: int,
              crawl_budget: DailyBudget | None, weight: Callable[[], float]) -> float | None:
        """Spend one fetch of the host's daily budget and of the crawl's (`crawl_budget`,
        None: not counted here); None if spent, else when to try again (and the reason is
        counted). With learned priority, a URL of low `weight` waits while the crawl
        spends its day's budget faster than the day goes by (recrawl.budget_wait)."""
        cfg = self.cfg
        if crawl_budget is not None and cfg.recrawl.learned_priority:
            wait = budget_wait(crawl_budget.spent(now), cfg.daily_fetch_budget, now, weight())
            if wait is not None:  # URLs of more weight may spend the budget first
                self._count("budget_deferred")
                return wait
        if budget.take(now, host_daily) is not None:
            self._count("host_budget_exhausted")
            return (now // DAY_S + 1) * DAY_S
        if crawl_budget is not None and crawl_budget.take(now, cfg.daily_fetch_budget) \
                is not None:
            budget.used -= 1  # not spent after all
            self._count("global_budget_exhausted")
            return (now // DAY_S + 1) * DAY_S
        return None

    def pop(self, lease_id: str) -> Lease | None:
        return self.out.pop(lease_id, None)

    def spent(self, lease: Lease) -> None:
        """The lease expired and spent an attempt of its URL: remembered (the last few)."""
        self.expired_spent[lease.lease_id] = (lease.url_id, lease.url_version)
        while len(self.expired_spent) > EXPIRED_SPENT_KEEP:
            del self.expired_spent[next(iter(self.expired_spent))]

    def overdue(self, now: float) -> list[Lease]:
        """Take out the leases whose time is up."""
        expired = [lease for lease in self.out.values() if lease.expires_at <= now]
        for lease in expired:
            del self.out[lease.lease_id]
        return expired

    def pages_out(self) -> int:
        return sum(1 for lease in self.out.values() if lease.kind is not Kind.ROBOTS)
