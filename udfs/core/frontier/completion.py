"""How a host's leases end: completions (accepted once per url_version), leases the
fetcher did not send, expiries, and the index's later word on duplicates.

Versions: a URL's `version` is bumped when a new fetch round starts (a lease granted
from any state but an expired lease's re-lease). A re-lease after expiry keeps the
version with attempt + 1. A completion is accepted once per version; later ones for the
same version are duplicates, older versions stale. An accepted outcome decides the
URL's next visit (udfs/core/recrawl.py) and the host's pace (the pacer).
"""

from __future__ import annotations

from collections.abc import Callable

from udfs.core.backqueue import Skip  # the fetcher's reasons for not sending a lease
from udfs.core.frontier.cold import ColdWindow
from udfs.core.frontier.config import RECENT_OUTCOMES, FrontierConfig
from udfs.core.frontier.hearing import FetcherHearing
from udfs.core.frontier.leasing import LeaseBook
from udfs.core.frontier.pacer import Pacer
from udfs.core.frontier.queue import UrlQueue
from udfs.core.frontier.robots_gate import RobotsGate
from udfs.core.politeness import parse_retry_after
from udfs.core.records import (
    HOST_TROUBLE,
    RETRYABLE,
    Acceptance,
    CompletionResult,
    DiscoverySource,
    FetchResult,
    Kind,
    Lease,
    Outcome,
    UrlState,
    UrlStatus,
)
from udfs.core.recrawl import (
    DUP_SHARE_WEIGHT,
    Change,
    Dup,
    classify_change,
    next_interval,
    revisit_after,
    updated_dup_share,
)


class Completions:
    """The end of each lease of one host, and what it teaches about the host."""

    __slots__ = ("cfg", "queue", "window", "pacer", "gate", "leases", "_count", "dup_share",
                 "recent")

    def __init__(self, cfg: FrontierConfig, queue: UrlQueue, window: ColdWindow,
                 pacer: Pacer, gate: RobotsGate, leases: LeaseBook,
                 count: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.queue, self.window, self.pacer = queue, window, pacer
        self.gate, self.leases = gate, leases
        self._count = count
        self.dup_share = 0.0  # of its recent new pages, the share that were duplicates
        self.recent: list[tuple[float, str, str, int | None]] = []  # (at, kind, outcome, status)

    def _stale(self, reason: str, url: str | None = None) -> CompletionResult:
        """A completion that changes nothing (counted as completions_stale)."""
        self._count("completions_stale")
        return CompletionResult(Acceptance.STALE, url=url, reason=reason)

    def complete(self, r: FetchResult, now: float) -> CompletionResult:
        """Apply one fetch outcome; conditional on (url_id, url_version)."""
        if r.outcome is Outcome.NOT_SENT:
            return self._not_sent(r, now)
        lease = self.leases.pop(r.lease_id)
        if not self.leases.out:
            self.pacer.heads_only = False
        # Whatever happened, the host was contacted.
        self.pacer.contacted(r, now)
        self.pacer.last_duration_s = r.fetch_duration_s
        self.recent = [*self.recent[-(RECENT_OUTCOMES - 1):],
                       (now, r.kind.value, r.outcome.value, r.http_status)]
        if self.pacer.signal(r, now):
            self._count("throttled")
        if r.kind is Kind.ROBOTS:
            return self._robots(r, lease, now)
        u = self.queue.urls.get(r.url_id)
        if u is None or r.url_version > u.version or r.url_version < u.accepted_version:
            return self._stale("unknown URL or older round")
        if r.url_version == u.accepted_version:
            self._count("completions_duplicate")
            return CompletionResult(Acceptance.DUPLICATE, url=u.url,
                                    reason="this version was already accepted")
        if r.url_version < u.version:
            return self._stale("older round", u.url)
        # Accept: this is the one result of this version.
        self.queue.dirty.add(u.url_id)
        u.accepted_version = u.version
        # A re-let lease of this round may still be fetching: it keeps its token until
        # its own completion (a duplicate) or its expiry.
        u.lease_id, u.relet, u.attempt = None, False, 0
        self._count("completions_accepted")
        out = self._apply(u, r, now)
        out.state = u
        self.window.maybe_spill(u, now)
        return out

    def _not_sent(self, r: FetchResult, now: float) -> CompletionResult:
        """The fetcher did not send the lease (and knows no one did): take it back, the URL
        to the queue with its attempt unspent; the host was not contacted."""
        lease = self.leases.pop(r.lease_id)
        if lease is None:
            return self._refund(r, now)
        self._count("leases_not_sent")
        if r.detail == Skip.UNKNOWN_PREDECESSOR.value and self.leases.out:
            self.pacer.heads_only = True  # the fetcher cannot follow the leases still out
        if not self.leases.out:
            self.pacer.heads_only = False
        hint = parse_retry_after(r.retry_after, now)
        if hint is not None:
            self.pacer.hinted(hint)
        if lease.kind is Kind.ROBOTS:
            self.gate.not_sent(lease)
            return CompletionResult(Acceptance.ACCEPTED, url=lease.url, reason="not sent")
        u = self.queue.urls.get(lease.url_id)
        if u is not None and u.lease_id == lease.lease_id and u.status is UrlStatus.LEASED:
            self.queue.dirty.add(u.url_id)
            u.status, u.lease_id, u.relet = UrlStatus.QUEUED, None, True
            u.attempt -= 1  # the re-let adds it back: nothing was spent
            self.queue.enqueue(u, min(u.next_fetch_at, now))  # its place in the queue, kept
        return CompletionResult(Acceptance.ACCEPTED, url=lease.url, reason="not sent")

    def _refund(self, r: FetchResult, now: float) -> CompletionResult:
        """A NOT_SENT for a lease no longer out: the fetcher read it only after its expiry
        (lagging behind the leases topic), too late to send it, and no one sent it. If
        that expiry spent an attempt of its URL, the attempt is given back: the round
        goes on, and a URL parked by its expiries is taken out of the park (re-let now,
        with its last attempt). Once only, however often the NOT_SENT comes."""
        spent = self.leases.expired_spent.pop(r.lease_id, None)
        if spent is None:
            return self._stale("unknown lease")
        url_id, version = spent
        u = self.queue.urls.get(url_id)  # (a URL spilled cold since keeps its count)
        if u is None or u.version != version:
            return self._stale("a later round")
        if u.status is UrlStatus.PARKED:
            if u.accepted_version != version or not (u.park_reason or "").startswith(
                    "lease expired"):
                return self._stale("parked", u.url)
            # Undo the park (`_park`): the round was opened after version - 1 was
            # closed, and its expiries fell one short of the limit: its last attempt.
            u.status, u.park_reason, u.relet = UrlStatus.QUEUED, None, True
            u.accepted_version = version - 1
            u.attempt = self.cfg.max_lease_attempts - 1
            self.queue.enqueue(u, now)
            self._count("urls_unparked")
        elif u.accepted_version >= version:
            return self._stale("its round is over", u.url)
        elif u.attempt > 0:
            u.attempt -= 1
        self.queue.dirty.add(url_id)
        self._count("lease_attempts_refunded")
        return CompletionResult(Acceptance.ACCEPTED, url=u.url, reason="not sent, refunded")

    def _robots(self, r: FetchResult, lease: Lease | None, now: float) -> CompletionResult:
        if lease is None or not self.gate.owns(lease):
            return self._stale("unknown robots lease")
        status = r.http_status if r.outcome not in HOST_TROUBLE | {Outcome.ADDRESS_BLOCKED} \
            else None
        sitemaps = self.gate.fetched(r, lease, status, now)
        self.pacer.crawl_delay = self.gate.crawl_delay()
        self.pacer.contacted(r, now)  # a Crawl-delay just learned counts from this fetch
        found: list[tuple[str, int, int, DiscoverySource]] = [
            (url, 0, 0, "ROBOTS_SITEMAP") for url in sitemaps]
        self._count("robots_fetched")
        return CompletionResult(Acceptance.ACCEPTED, url=lease.url, discovered=found,
                                reason=f"robots {self.gate.state.status.value}")

    def expire(self, now: float, hearing: FetcherHearing | None = None) -> list[Lease]:
        """Expire overdue leases: re-let their URLs (attempt + 1) or park them.

        `hearing`: what this frontier heard from the fetcher (udfs/core/frontier/
        hearing.py). A lease issued while the fetcher was silent (down, restarting, cut
        off) expired without its URL being at fault, so the expiry spends no attempt;
        otherwise an outage longer than max_lease_attempts lease timeouts would park
        every URL leased during it (a week at the defaults), and a restart that takes
        longer than a lease timeout spends one for every lease issued meanwhile. A lease
        whose fetch kills the fetcher still spends its attempts while other completions
        come in between its grant and the crash. None: every expiry spends one. Either
        way the URL is re-let only now, after its expiry: politeness is the same."""
        expired = self.leases.overdue(now)
        for lease in expired:
            self._count("leases_expired")
            if lease.kind is Kind.ROBOTS:
                self.gate.lease = None
                continue
            u = self.queue.urls.get(lease.url_id)
            if u is None or u.lease_id != lease.lease_id or u.status is not UrlStatus.LEASED:
                continue
            self.queue.dirty.add(u.url_id)
            u.lease_id = None
            if hearing is not None and hearing.silent_at(lease.issued_at):
                self._count("leases_expired_unheard")
                u.attempt -= 1  # the re-let adds it back: the fetcher was silent
            else:
                self.leases.spent(lease)  # given back if the fetcher says it never sent it
            if u.attempt < self.cfg.max_lease_attempts:
                u.status, u.relet = UrlStatus.QUEUED, True
                self.queue.enqueue(u, now)
            else:
                self._park(u, now, f"lease expired {u.attempt} times")
                self.window.maybe_spill(u, now)
        return expired

    def _park(self, u: UrlState, now: float, reason: str) -> None:
        u.status, u.park_reason, u.relet, u.attempt = UrlStatus.PARKED, reason, False, 0
        u.accepted_version = u.version  # the round is over; a late completion is a duplicate
        self._count("urls_parked")
        self.queue.enqueue(u, now + self.cfg.recrawl.failed_visit_interval_s)

    def duplicate(self, url_id: str, url_version: int, dup: Dup, new_page: bool,
                  now: float) -> bool:
        """The index found the URL's copy of `url_version` to duplicate another URL's
        (exact or near): its revisits are spaced out and its place in the queue lowered;
        a new page counts toward the host's duplicate share. Its links were followed
        already. False when nothing changed (an unknown or cold URL, an older round, a
        repeated answer)."""
        u = self.queue.urls.get(url_id)
        if u is None or url_version < u.accepted_version or u.dup == dup:
            return False
        self.queue.dirty.add(url_id)
        u.dup = dup
        if new_page:  # it counted as not a duplicate at its completion: correct that
            self.dup_share = min(1.0, self.dup_share + DUP_SHARE_WEIGHT)
        self._count("duplicates_reported")
        if u.status is UrlStatus.FETCHED and u.last_fetch_at is not None:
            later = u.last_fetch_at + revisit_after(u.interval_s, dup, self.dup_share,
                                                    self.cfg.recrawl)
            if later > u.next_fetch_at:
                self.queue.enqueue(u, later)
        return True

    def _visited(self, u: UrlState, now: float, status: UrlStatus, after_s: float) -> None:
        """The visit is over: record its status and queue the next visit."""
        u.last_fetch_at, u.failure_count = now, 0
        u.status = status
        self.queue.enqueue(u, now + after_s)

    def _apply(self, u: UrlState, r: FetchResult, now: float) -> CompletionResult:
        rc = self.cfg.recrawl
        out = CompletionResult(Acceptance.ACCEPTED, url=u.url, reason=r.outcome.value)
        if r.outcome in (Outcome.OK, Outcome.NOT_MODIFIED):
            change = classify_change(u.text_hash, r.text_sha256,
                                     not_modified=r.outcome is Outcome.NOT_MODIFIED)
            if r.outcome is Outcome.OK:
                u.content_hash, u.text_hash = r.body_sha256, r.text_sha256
                u.etag, u.last_modified = r.etag, r.last_modified
                out.index = u.kind is Kind.PAGE  # a sitemap file is read, not indexed
            out.change = change
            u.park_reason = None
            u.interval_s = next_interval(u.interval_s, change, u.priority, rc) \
                if change is not Change.NEW else u.interval_s
            if change is Change.NEW and out.index:
                # A new page; the index's duplicate checks answer later (`duplicate`).
                self.dup_share = updated_dup_share(self.dup_share, False)
            elif change is Change.CHANGED:
                u.dup = Dup.NONE  # new text: a duplicate only if the index says so again
            self._visited(u, now, UrlStatus.FETCHED,
                          revisit_after(u.interval_s, Dup(u.dup), self.dup_share, rc))
        elif r.outcome is Outcome.REDIRECT:
            hops = u.redirect_hops + 1
            if r.redirect_location and r.redirect_location != u.url:
                out.discovered.append((r.redirect_location, u.depth, hops, "REDIRECT"))
            else:
                self._count("redirect_loops")
            self._visited(u, now, UrlStatus.FETCHED, rc.max_interval_s)
        elif r.outcome is Outcome.GONE:
            self._visited(u, now, UrlStatus.TOMBSTONE, rc.tombstone_interval_s)
        elif r.outcome is Outcome.THROTTLED:
            # 429/503 speaks about the host's pace, not this URL: the host backs off
            # (growing without bound) and the URL waits for it, its retry budget untouched.
            u.status = UrlStatus.QUEUED
            self.queue.enqueue(u, max(now, self.pacer.backoff_until))
        elif r.outcome in RETRYABLE:
            u.failure_count += 1
            if u.failure_count > self.cfg.max_retries:
                u.failure_count = 0
                self._park(u, now, f"{r.outcome.value} after {self.cfg.max_retries} retries")
            else:
                wait = self.cfg.retry_base_s * 2 ** (u.failure_count - 1)
                u.status = UrlStatus.QUEUED
                self.queue.enqueue(u, max(now + wait * (0.5 + 0.5 * self.pacer.rng.random()),
                                          self.pacer.backoff_until))
        elif r.outcome is Outcome.ADDRESS_BLOCKED:
            self._park(u, now, "address blocked by the SSRF policy")
        elif r.outcome is Outcome.PARSE_TIMEOUT:
            # A hostile or pathological page: counted as a trap trigger of the host, and
            # never retried at once (the text hash of its last good visit is kept).
            self._count("trap_parse_timeout")
            self._visited(u, now, UrlStatus.FETCHED, rc.failed_visit_interval_s)
        else:  # CLIENT_ERROR, TOO_LARGE, UNSUPPORTED_TYPE, PARSE_ERROR: visited, nothing kept
            self._visited(u, now, UrlStatus.FETCHED, rc.max_interval_s)
        return out
