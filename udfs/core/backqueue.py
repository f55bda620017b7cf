"""The fetcher's back queues: per host, when a granted lease may be sent (pure, takes `now`).

The frontier is the single owner of a host's tokens. It grants a bounded look-ahead of
leases per host, each with the earliest time it may be used (`not_before`) and the
host's pace (`udfs.core.politeness.Pace`), without waiting for the previous fetch to
come back. The fetcher keeps one `Slot` per host (Mercator's back queues, StormCrawler's
FetchItemQueues, Scrapy's downloader slots) and sends a lease only when every one of
these holds at that moment:

1. this fetcher incarnation's own history of the host allows it: fewer requests in
   flight than the lease's `max_in_flight`, at least `gap_after(duration)` since the
   end of its last request to the host, and no Retry-After window or throttle stop in
   force;
2. `now >= not_before` (the frontier's plan: it includes everything the frontier knows,
   e.g. a Retry-After that reached it, or an expired lease);
3. the fetcher knows everything that may have happened to the host before this lease:
   the lease is a *head* (`prev_lease_id` is None: when it was granted, the host had no
   other lease out, so its `not_before` already counts from the end of every earlier
   request) or its predecessor was admitted by this same incarnation (so rule 1 covers
   it). A lease whose predecessor this incarnation never saw (it went to an earlier
   incarnation, before a crash) is not sent.

A lease issued before this incarnation started is never sent (an earlier incarnation
may have sent it a moment before it failed): it is left to expire, and the frontier
re-lets it as a head after the expiry, with the gap counted from there. Every other
lease that is not sent is reported back as NOT_SENT (the fetcher knows it was not
sent: no other incarnation can have seen a lease issued after this one started), so the
frontier takes it back at once without spending an attempt.

Two clocks. A lease's times (`issued_at`, `not_before`, `expires_at`) are on the crawl
clock, which the frontier keeps and the fetcher reads as its wall clock (`now`). The
slot's own history (when its requests started and ended, the gap after them, a
Retry-After window) is kept on this process's monotonic clock (`local`), so that a step
of the wall clock (NTP, a resumed VM) neither shortens a gap nor stretches it: rule 1
holds on a clock that never jumps. Every call takes both, read at the same moment;
`local` None means one clock for both (a virtual clock, as the simulation has).

Why no failure can break politeness follows from these rules; see the README section
"Pace and politeness".
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from enum import StrEnum

from udfs.core.politeness import Pace


class Skip(StrEnum):
    """Why a lease is not sent."""

    REPLAYED = "issued before this fetcher started"  # silent: it expires
    DUPLICATE = "this lease was already received"  # silent: the first copy is handled
    UNKNOWN_PREDECESSOR = "its predecessor went to an earlier fetcher"
    HALTED = "the host throttled us, and the frontier had not seen it when it granted this"
    TOO_LATE = "its start would come too close to its expiry"
    TOO_EARLY = "its start is further away than the fetcher holds a lease"


# Skips the fetcher reports (NOT_SENT): it knows no one sent these leases.
REPORTED = frozenset({Skip.UNKNOWN_PREDECESSOR, Skip.HALTED, Skip.TOO_LATE, Skip.TOO_EARLY})


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """What the back queue needs of a lease (seconds on the crawl clock)."""

    lease_id: str
    host_key: str
    issued_at: float
    not_before: float
    expires_at: float
    prev_lease_id: str | None
    pace: Pace
    throttle_seq: int = 0  # the 429/503 answers the frontier had seen (-1: not known)


@dataclass
class Slot:
    """One host as this fetcher incarnation has seen it."""

    # On the local clock (BackQueues' `local`), all of them.
    in_flight: int = 0
    free_at: float = float("-inf")  # earliest next start: end of the last request + its gap
    last_end: float | None = None  # the last request's end and duration: the gap after
    last_duration: float = 0.0  # it is counted again with each lease's (newer) pace
    blocked_until: float = float("-inf")  # a Retry-After window
    # After a 429/503, leases granted before the frontier had seen it (a lower
    # throttle_seq) are not sent: it is backing off and will grant afresh.
    halt_seq: int = 0
    # Recent lease ids seen, each True if admitted, False if refused at sight (its
    # predecessor unknown, reported NOT_SENT): a later copy of either is a duplicate,
    # so a lease reported not sent is never sent after all.
    admitted: OrderedDict[str, bool] = field(default_factory=OrderedDict)
    last_used: float = 0.0


class BackQueues:
    """Every host's slot in one fetcher incarnation.

    `started_at`: when the incarnation started (leases issued before are never sent).
    `hold_s`: the longest a lease is held waiting for its turn; one whose turn is further
    away is not sent (NOT_SENT), so that a waiting lease never holds the fetch stage's
    bundle (and a checkpoint) back for long. `fetch_s`: the longest a fetch takes; a
    lease is sent only if the fetch ends before the lease expires."""

    def __init__(self, started_at: float, hold_s: float, fetch_s: float,
                 remember: int = 256) -> None:
        self.started_at = started_at
        self.hold_s = hold_s
        self.fetch_s = fetch_s
        self.remember = remember
        self.slots: dict[str, Slot] = {}

    def slot(self, host_key: str) -> Slot:
        s = self.slots.get(host_key)
        if s is None:
            s = self.slots[host_key] = Slot()
        return s

    def admit(self, lease: LeaseTiming, now: float, local: float | None = None
              ) -> Skip | None:
        """First sight of a lease: None if it may be sent (when `wait` says), else why not."""
        if lease.issued_at < self.started_at:
            return Skip.REPLAYED
        s = self.slot(lease.host_key)
        s.last_used = now if local is None else local
        if lease.lease_id in s.admitted:
            return Skip.DUPLICATE
        known = lease.prev_lease_id is None or s.admitted.get(lease.prev_lease_id, False)
        s.admitted[lease.lease_id] = known
        while len(s.admitted) > self.remember:
            s.admitted.popitem(last=False)
        return None if known else Skip.UNKNOWN_PREDECESSOR

    def wait(self, lease: LeaseTiming, now: float, local: float | None = None
             ) -> float | Skip | None:
        """Seconds until the lease may be sent (0: now); None: a request to the host is in
        flight at the limit (ask again when it ends); a Skip: it will not be sent."""
        s = self.slot(lease.host_key)
        s.last_used = now if local is None else local
        if 0 <= lease.throttle_seq < s.halt_seq:
            return Skip.HALTED
        delay = self.delay(lease, now, local)
        if now + delay + self.fetch_s > lease.expires_at:
            return Skip.TOO_LATE
        if delay > self.hold_s:
            return Skip.TOO_EARLY
        if delay > 0.0:
            return delay
        if s.in_flight >= lease.pace.max_in_flight:
            return None
        return 0.0

    def delay(self, lease: LeaseTiming, now: float, local: float | None = None) -> float:
        """Seconds from now until the lease could start, as far as this incarnation knows:
        its not_before on the crawl clock, the slot's history on the local one (each
        measured against its own clock, so a step of one does not move the other)."""
        s = self.slot(lease.host_key)
        loc = now if local is None else local
        after_last = float("-inf") if s.last_end is None else \
            s.last_end + lease.pace.gap_after(s.last_duration)
        return max(0.0, lease.not_before - now,
                   max(s.free_at, after_last, s.blocked_until) - loc)

    def start_at(self, lease: LeaseTiming, now: float, local: float | None = None) -> float:
        """The earliest time (crawl clock) the lease could start, as far as this
        incarnation knows."""
        return now + self.delay(lease, now, local)

    def begin(self, lease: LeaseTiming, now: float) -> None:
        """The request starts now (call only when `wait` returned 0, with no await between).
        `now` here and in `end`, `cancel` and `forget_idle`: the local clock (the crawl
        clock where there is one clock).

        The gap counts from this start too (until the request ends and counts it from its
        end): with several requests allowed in flight, the next may start one gap later."""
        s = self.slot(lease.host_key)
        s.in_flight += 1
        s.free_at = max(s.free_at, now + lease.pace.gap_s)

    def end(self, lease: LeaseTiming, now: float, duration_s: float, *,
            retry_until: float | None = None, throttled: bool = False) -> None:
        """The request ended now after `duration_s`; `retry_until`: a Retry-After's end
        (on the same clock as `now`); `throttled`: a 429/503 (leases the frontier granted
        before it sees this one are not sent)."""
        s = self.slot(lease.host_key)
        s.in_flight = max(0, s.in_flight - 1)
        s.free_at = max(s.free_at, now + lease.pace.gap_after(duration_s))
        s.last_end, s.last_duration = now, duration_s
        if retry_until is not None:
            s.blocked_until = max(s.blocked_until, retry_until)
        if throttled:
            s.halt_seq = max(s.halt_seq, lease.throttle_seq + 1)
        s.last_used = now

    def cancel(self, lease: LeaseTiming, now: float) -> None:
        """A request `begin` counted did not go out after all: its place in flight is
        free again. The gap `begin` set stays (it errs on the polite side); no end is
        counted, so no duration rule follows."""
        s = self.slot(lease.host_key)
        s.in_flight = max(0, s.in_flight - 1)
        s.last_used = now

    def forget_idle(self, now: float, idle_s: float) -> int:
        """Drop slots unused for `idle_s` with nothing in flight and no wait pending (their
        admitted ids go too: a follower of a forgotten lease is then not sent, safely)."""
        idle = [k for k, s in self.slots.items()
                if s.in_flight == 0 and now - s.last_used > idle_s and
                now > max(s.free_at, s.blocked_until)]
        for k in idle:
            del self.slots[k]
        return len(idle)
