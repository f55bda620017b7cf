"""The frontier core: one host's scheduler (`HostFrontier`) and a many-host driver (`Frontier`).

`HostFrontier` is the single owner of a host's politeness tokens and of every
URL of that host: it admits discovered URLs, grants leases ("which host is
ready" is `next_wake`/`poll`; "which URL of this host next" is its priority
queue), accepts completions only on a matching (url_id, url_version), expires
leases, and schedules revisits. Everything takes `now` (seconds on the crawl
clock); randomness comes from a seeded generator. The Flink frontier operator
keeps one `HostFrontier` per key and turns `next_wake` into its one timer;
`Frontier` does the same for many hosts with a ready-heap keyed by wake time
(the simulator and the benchmarks).

Versions: a URL's `version` is bumped when a new fetch round starts (a lease
granted from any state but an expired lease's re-lease). A re-lease after
expiry keeps the version with attempt + 1. A completion is accepted once per
version; later ones for the same version are duplicates, older versions stale.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields, replace
from enum import Enum, StrEnum
from functools import cache
from operator import attrgetter
from typing import Any, Protocol, get_type_hints

from udfs.core.coldqueue import ColdIndex, ColdQueue, KeyValue
from udfs.core.fingerprints import url_ids
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
from udfs.core.recrawl import (
    DUP_SHARE_WEIGHT,
    Change,
    Dup,
    RecrawlPolicy,
    budget_wait,
    classify_change,
    discovery_priority,
    hinted_interval,
    host_priority,
    next_interval,
    queue_priority,
    revisit_after,
    sitemap_says_changed,
    updated_dup_share,
)
from udfs.core.robots import (
    RobotsFetch,
    RobotsPolicy,
    RobotsState,
    RobotsStatus,
    RobotsTxt,
    Verdict,
    after_fetch,
    crawl_delay_s,
    decide,
    fetch_due,
    parse_robots,
)
from udfs.core.shards import LocalShards, Transfer, shard_of
from udfs.core.traps import DAY_S, DailyBudget, TemplateBudget, TrapPolicy, check_url
from udfs.core.urls import split_host_key

GAUGES = ("frontier_hosts", "frontier_urls_pending", "frontier_urls_cold",
          "frontier_hosts_backoff", "frontier_hosts_robots_blocked", "frontier_hosts_paused")
RECENT_OUTCOMES = 8  # the last fetch outcomes a host keeps, for `crawl host show`


class UrlStatus(StrEnum):
    QUEUED = "QUEUED"  # new, or waiting for a retry / re-lease
    LEASED = "LEASED"
    FETCHED = "FETCHED"  # visited; queued for its revisit
    TOMBSTONE = "TOMBSTONE"  # 404/410; revisited rarely, never re-created
    PARKED = "PARKED"  # repeated failure; revisited after a long interval, never dropped


class Kind(StrEnum):
    PAGE = "PAGE"
    ROBOTS = "ROBOTS"
    SITEMAP = "SITEMAP"  # read as a sitemap by the fetcher; scheduled like a page


class Outcome(StrEnum):
    """Classified fetch results (the Completion record's FetchOutcome)."""

    OK = "OK"
    NOT_MODIFIED = "NOT_MODIFIED"
    REDIRECT = "REDIRECT"
    GONE = "GONE"
    CLIENT_ERROR = "CLIENT_ERROR"
    THROTTLED = "THROTTLED"
    SERVER_ERROR = "SERVER_ERROR"
    DNS_ERROR = "DNS_ERROR"
    CONNECT_ERROR = "CONNECT_ERROR"
    TIMEOUT = "TIMEOUT"
    ADDRESS_BLOCKED = "ADDRESS_BLOCKED"
    TOO_LARGE = "TOO_LARGE"
    UNSUPPORTED_TYPE = "UNSUPPORTED_TYPE"
    PARSE_ERROR = "PARSE_ERROR"
    OTHER_ERROR = "OTHER_ERROR"
    # The fetcher did not send the lease and knows no one did (udfs/core/backqueue.py):
    # the URL goes back to the queue at once, without spending an attempt.
    NOT_SENT = "NOT_SENT"
    # The page was fetched and stored but its parse went past a parser limit (CPU time,
    # memory) or killed the parser (completion v3): visited, nothing kept, a trap trigger
    # of its host (event trap_parse_timeout), revisited after the failed-visit interval.
    PARSE_TIMEOUT = "PARSE_TIMEOUT"


RETRYABLE = frozenset({Outcome.SERVER_ERROR, Outcome.DNS_ERROR, Outcome.CONNECT_ERROR,
                       Outcome.TIMEOUT, Outcome.OTHER_ERROR})
HOST_TROUBLE = frozenset({Outcome.SERVER_ERROR, Outcome.DNS_ERROR, Outcome.CONNECT_ERROR,
                          Outcome.TIMEOUT})


@dataclass(frozen=True)
class FrontierConfig:
    """Everything the frontier decides with, from the configuration file."""

    host: HostPolicy = HostPolicy()
    robots: RobotsPolicy = RobotsPolicy()
    recrawl: RecrawlPolicy = RecrawlPolicy()
    traps: TrapPolicy = TrapPolicy()
    lease_timeout_s: float = 300.0
    max_lease_attempts: int = 3
    max_retries: int = 3
    retry_base_s: float = 60.0
    max_redirect_hops: int = 5
    daily_fetch_budget: int = 1_000_000_000
    address_block_s: float = DAY_S
    max_resident_urls: int = 20_000
    cold_bucket_s: float = 3600.0
    cache_urls: int = 2_000_000  # the frontier job's cache of live hosts, in URLs
    # Look-ahead: leases granted before their time (the fetcher holds them until their
    # not_before and enforces the gap at request time), so that a host's pace is not
    # the round trip of lease and completion. Up to max_lookahead_leases beyond the
    # host's in-flight limit, each due within lookahead_s. 0 and 0: one lease at a time.
    lookahead_s: float = 1.5
    max_lookahead_leases: int = 3
    clock_idle_ms: int = 1000  # the frontier job's crawl clock (see the defaults file)
    clock_topic: str = ""
    # A hot host's queue, partitioned (udfs/core/shards.py): past shard_above_urls known
    # URLs, new ones go to host_shards shards; the owner pulls shard_refill_urls at a
    # time when its own pending URLs fall below that. 0: never.
    shard_above_urls: int = 1_000_000
    host_shards: int = 64
    shard_refill_urls: int = 5000
    shard_pull_timeout_s: float = 120.0

    @classmethod
    def from_config(cls, data: dict[str, Any]) -> FrontierConfig:
        own = {k: data["frontier"][k] for k in (f.name for f in fields(cls))
               if k in data.get("frontier", {})}
        return cls(host=HostPolicy.from_config(data["politeness"]),
                   robots=RobotsPolicy.from_config(data["robots"]),
                   recrawl=RecrawlPolicy.from_config(data["recrawl"]),
                   traps=TrapPolicy.from_config(data["traps"]), **own)


@dataclass(slots=True)
class UrlState:
    url_id: str
    url: str
    version: int = 0
    accepted_version: int = 0  # highest version whose completion was accepted
    status: UrlStatus = UrlStatus.QUEUED
    attempt: int = 0  # attempts of the current version (expired leases)
    relet: bool = False  # the next lease re-lets an expired one (same version)
    next_fetch_at: float = 0.0
    last_fetch_at: float | None = None
    interval_s: float = 0.0
    priority: float = 0.5
    depth: int = 0
    redirect_hops: int = 0  # redirects that led to this URL (the hop limit counts them)
    kind: Kind = Kind.PAGE  # SITEMAP: read as a sitemap file
    etag: str | None = None
    last_modified: str | None = None
    content_hash: str | None = None
    text_hash: str | None = None
    failure_count: int = 0
    park_reason: str | None = None
    lease_id: str | None = None
    token: int = 0  # identifies the URL's live queue entry
    dup: int = 0  # a recrawl.Dup: what the index's duplicate checks said of its last copy


@dataclass(frozen=True, slots=True)
class Lease:
    lease_id: str
    url_id: str
    url_version: int
    attempt: int
    issued_at: float
    expires_at: float
    url: str
    host_key: str
    kind: Kind = Kind.PAGE
    depth: int = 0
    etag: str | None = None
    last_modified: str | None = None
    # When the lease may be used, the lease granted just before it if that one was
    # still out (None: a head, see udfs/core/backqueue.py), and the host's pace and
    # throttle count at the grant: what the fetcher enforces.
    not_before: float = 0.0
    prev_lease_id: str | None = None
    gap_s: float = 1.0
    duration_factor: float = 10.0
    max_gap_s: float = 120.0
    max_in_flight: int = 1
    throttle_seq: int = 0
    # "low" for a page the index found to duplicate another URL's at its last visit:
    # the fetcher stores its body in a colder class (recrawl.learned_priority).
    storage_tier: str = "standard"

    @property
    def pace(self) -> Pace:
        return Pace(self.gap_s, self.duration_factor, self.max_gap_s, self.max_in_flight)


@dataclass(frozen=True)
class FetchResult:
    """What the fetcher reports for one lease (the Completion record, in core terms)."""

    lease_id: str
    url_id: str
    url_version: int
    outcome: Outcome
    kind: Kind = Kind.PAGE
    attempt: int = 1
    http_status: int | None = None
    fetch_duration_s: float = 0.0
    retry_after: str | None = None
    redirect_location: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    body_sha256: str | None = None
    text_sha256: str | None = None
    robots_body: str | bytes | None = None
    fetched_at: float | None = None  # when the request ended, on the fetcher's clock
    detail: str | None = None  # the error text; for NOT_SENT, why (a backqueue.Skip)


class Acceptance(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"  # this version was already accepted: the existing result stands
    STALE = "stale"  # an older round, or a lease this state does not know


@dataclass
class CompletionResult:
    verdict: Acceptance
    index: bool = False  # emit an index event (an accepted 2xx with a body)
    change: Change | None = None
    url: str | None = None
    discovered: list[tuple[str, int, int, str]] = field(default_factory=list)
    # (url, depth, redirect_hops, source) for redirect targets and robots sitemaps
    reason: str = ""
    state: UrlState | None = None  # the URL after an accepted completion (it may be cold)


class FrontierObserver(Protocol):
    """Hears what a host's scheduler does, for metrics (no decision depends on it)."""

    def event(self, name: str) -> None:
        """One more of a counted event (the names of `HostFrontier.stats`)."""

    def leased(self, lag_s: float, high_value: bool) -> None:
        """A page lease granted `lag_s` after its URL came due (eligibility lag)."""


@dataclass(frozen=True)
class Admission:
    accepted: bool
    url_id: str | None
    reason: str  # "new", "known", or the trap/limit that refused it


class HostFrontier:
    """The scheduler of one host_key."""

    def __init__(self, host_key: str, cfg: FrontierConfig, seed: int = 0,
                 policy: HostPolicy | None = None) -> None:
        self.host_key = host_key
        self.cfg = cfg
        self.policy = policy or cfg.host
        self.rng = Jitter(f"{seed}:{host_key}")
        self.robots = RobotsState()
        self.robots_version = 0
        self.robots_lease: Lease | None = None
        self.robots_follow: tuple[str, int] | None = None  # redirect to fetch next, hops
        self._robots_hops = 0  # redirects behind the robots lease in flight
        self.next_allowed_at = 0.0  # a head lease's earliest start: after everything known
        self.plan_at = 0.0  # no follower before: the real ends (and the fetcher's hints)
        self.heads_only = False  # a fetcher lost the chain: grant a head next
        self.throttles = 0  # 429/503 answers seen (leases carry it: throttle_seq)
        self.last_duration_s = 0.0  # of the last fetch that came back: plans the next gaps
        self.backoff_until = 0.0
        self.backoff_exponent = 0
        self.allowance = 1.0
        self.dup_share = 0.0  # of its recent new pages, the share that were duplicates
        # An operator's controls (udfs/core/control.py): a paused host gets no new lease;
        # control_version counts the commands applied, `commands` keeps the last ids.
        self.paused = False
        self.control_version = 0
        self.commands: list[str] = []
        self.recent: list[tuple[float, str, str, int | None]] = []  # (at, kind, outcome, status)
        # The operator's size gauges: what this host last added to them, and in which
        # incarnation of the operator (after a restore the gauges start from zero).
        self.counted: tuple[str, tuple[int, ...]] | None = None
        self.in_flight: dict[str, Lease] = {}
        self.budget = DailyBudget()
        self.templates = TemplateBudget()
        self.urls: dict[str, UrlState] = {}
        self._due: list[tuple[float, int, str]] = []
        self._ready: list[tuple[float, float, int, int, str]] = []
        self._seq = 0
        self._lease_seq = 0
        self._parsed: RobotsTxt | None = None
        self._crawl_delay = 0.0
        self.stats: dict[str, int] = {}
        # Snapshots are incremental, as Flink's are: only URLs changed since the last
        # one are copied again.
        self._dirty: set[str] = set()
        self._snap_urls: dict[str, tuple] = {}
        # Bounded memory: with a cold queue attached, a host past max_resident_urls
        # ("big") keeps only a window of its URLs here and the rest in the cold queue.
        self.cold: ColdQueue | None = None
        self.big = False
        self._resident_added: set[str] = set()
        self._resident_removed: set[str] = set()
        self._cold_index: dict[str, Any] | None = None
        self._last_room_scan = float("-inf")
        # Fields this code has that the restored state did not (added since it was
        # written; they took their defaults): the operator reports them.
        self.added_fields: frozenset[str] = frozenset()
        # Who hears of each counted event and page lease (the operator's metrics).
        self.observer: FrontierObserver | None = None
        # A hot host's shards (udfs/core/shards.py): URLs each holds by the owner's
        # count, the pull out [shard, sent at], and the transfers to send (the caller
        # empties the outbox after each call; it is never part of the state).
        self.sharded: dict[int, int] = {}
        self.pull_out: list[float] | None = None
        self.unleased = 0  # of this owner's URLs, those never leased (while it has shards)
        self.outbox: list[Transfer] = []

    # -- policy ---------------------------------------------------------------

    def set_policy(self, policy: HostPolicy) -> None:
        """Apply a negotiated per-host policy; only a newer policy_version replaces it."""
        if policy.policy_version <= self.policy.policy_version:
            raise ValueError(f"policy_version {policy.policy_version} is not newer than "
                             f"{self.policy.policy_version} for {self.host_key}")
        self.policy = policy

    def gap_s(self, fetch_duration_s: float = 0.0) -> float:
        return effective_gap(self.policy, self.allowance, self._crawl_delay, fetch_duration_s)

    def pace(self) -> Pace:
        return host_pace(self.policy, self.allowance, self._crawl_delay)

    def _count(self, name: str) -> None:
        self.stats[name] = self.stats.get(name, 0) + 1
        if self.observer is not None:
            self.observer.event(name)

    # -- queue ----------------------------------------------------------------

    def _enqueue(self, u: UrlState, due: float) -> None:
        self._dirty.add(u.url_id)
        self._seq += 1
        u.token = self._seq
        u.next_fetch_at = due
        heapq.heappush(self._due, (due, self._seq, u.url_id))

    def _live(self, seq: int, url_id: str) -> UrlState | None:
        u = self.urls.get(url_id)
        return u if u is not None and u.token == seq and u.status is not UrlStatus.LEASED \
            else None

    def _promote(self, now: float) -> None:
        """Move entries that are due into the ready heap (best value first)."""
        due = self._due
        while due and due[0][0] <= now:
            when, seq, url_id = heapq.heappop(due)
            u = self._live(seq, url_id)
            if u is not None:
                heapq.heappush(self._ready, (-self.score(u), when, u.depth, seq, url_id))

    def score(self, u: UrlState) -> float:
        """The URL's place in the host's queue: see recrawl.queue_priority."""
        return queue_priority(u.priority, u.interval_s, fetched=u.last_fetch_at is not None,
                              failures=u.failure_count,
                              tombstone=u.status is UrlStatus.TOMBSTONE, dup=Dup(u.dup),
                              policy=self.cfg.recrawl)

    def _pop_ready(self, now: float) -> UrlState | None:
        self._promote(now)
        while self._ready:
            _, _, _, seq, url_id = heapq.heappop(self._ready)
            u = self._live(seq, url_id)
            if u is not None:
                return u
        return None

    def _earliest_due(self) -> float | None:
        while self._ready:
            if self._live(self._ready[0][3], self._ready[0][4]) is not None:
                return self._ready[0][1]
            heapq.heappop(self._ready)
        while self._due:
            if self._live(self._due[0][1], self._due[0][2]) is not None:
                return self._due[0][0]
            heapq.heappop(self._due)
        return None

    def pending(self) -> int:
        """URLs waiting in the queue (not leased), resident or cold."""
        cold = len(self.cold) if self.big and self.cold is not None else 0
        return cold + sum(1 for u in self.urls.values() if u.status is not UrlStatus.LEASED)

    def gauges(self, now: float) -> tuple[int, ...]:
        """This host's share of the frontier's size gauges, in `GAUGES` order: itself, its
        URLs not leased (resident or cold), those in the cold queue, and whether it is in
        backoff, blocked by robots.txt 5xx (no earlier copy), paused. O(leases out)."""
        cold = len(self.cold) if self.big and self.cold is not None else 0
        pages_out = sum(1 for lease in self.in_flight.values() if lease.kind is not Kind.ROBOTS)
        return (1, len(self.urls) + cold - pages_out, cold, int(self.backoff_until > now),
                int(self.robots.status is RobotsStatus.DISALLOW_ALL), int(self.paused))

    # -- bounded memory ---------------------------------------------------------

    def attach_cold(self, segments: KeyValue, urls: KeyValue) -> None:
        """Give the host storage for the URLs that do not fit in memory: `urls` maps
        url_id → saved URL (the same map the resident URLs are saved to), `segments`
        holds the cold queue's order."""
        saved = self._cold_index or {}
        index = ColdIndex({int(b): list(w) for b, w in saved.get("buckets", {}).items()},
                          saved.get("count", 0))
        self.cold = ColdQueue(segments, urls, index, bucket_s=self.cfg.cold_bucket_s)

    def resident_changes(self) -> tuple[set[str], set[str]]:
        """URL ids that entered / left memory since the last call (only while big):
        the keyed state's record of which URLs to load when the host is rebuilt."""
        out = self._resident_added, self._resident_removed
        self._resident_added, self._resident_removed = set(), set()
        return out

    def _go_big(self) -> None:
        if not self.big:
            self.big = True
            self._resident_added |= set(self.urls)
            self._count("hosts_spilling")

    def _spill(self, u: UrlState) -> None:
        """Move a queued URL out of memory, to the cold queue (its heap entries go stale)."""
        assert self.cold is not None
        del self.urls[u.url_id]
        self._dirty.discard(u.url_id)
        self.cold.add(u.url_id, url_to_saved(u), u.next_fetch_at)
        self._resident_removed.add(u.url_id)
        self._resident_added.discard(u.url_id)
        self._count("urls_spilled")

    def _maybe_spill(self, u: UrlState, now: float) -> None:
        """A big host keeps in memory only what it may lease within one cold bucket."""
        if self.big and u.status is not UrlStatus.LEASED and u.url_id in self.urls and \
                u.next_fetch_at > now + self.cfg.cold_bucket_s:
            self._spill(u)

    def _refill_possible(self) -> bool:
        """Room for a batch (a quarter of the window), or nothing queued at all."""
        cap = self.cfg.max_resident_urls
        room = cap - len(self.urls)
        return room > 0 and (room >= cap // 4 or len(self.urls) == len(self.in_flight))

    def _cold_wake(self) -> float | None:
        """When the cold queue needs the host awake: its first bucket, if it can load."""
        if not self.big or self.cold is None or not len(self.cold):
            return None
        return self.cold.earliest() if self._refill_possible() else None

    def _make_room(self, now: float) -> None:
        """Cold URLs are due but the window is full: spill resident URLs that are not
        due within a bucket (rarely: at most once a minute)."""
        if now - self._last_room_scan < 60.0:
            return
        self._last_room_scan = now
        horizon = now + self.cfg.cold_bucket_s
        for u in [u for u in self.urls.values()
                  if u.status is not UrlStatus.LEASED and u.next_fetch_at > horizon]:
            self._spill(u)

    def _refill(self, now: float) -> None:
        """Load cold URLs that are due soon, while the window has room (in batches)."""
        cold = self.cold
        if not self.big or cold is None or not len(cold):
            return
        earliest = cold.earliest()
        if earliest is None or earliest > now:
            return
        if not self._refill_possible():
            self._make_room(now)
            if not self._refill_possible():
                return
        room = self.cfg.max_resident_urls - len(self.urls)
        for uid, saved in cold.take(room, now + self.cfg.cold_bucket_s):
            u = url_from_saved(saved)
            self.urls[uid] = u
            self._resident_added.add(uid)
            self._resident_removed.discard(uid)
            self._seq += 1
            u.token = self._seq
            heapq.heappush(self._due, (u.next_fetch_at, self._seq, uid))
            self._count("urls_loaded")

    # -- discovery ------------------------------------------------------------

    def find(self, url: str) -> tuple[str, UrlState | None]:
        """The URL's id and state; probing on a 64-bit id collision (full URL compared)."""
        cold = self.cold if self.big else None
        for uid in url_ids(url):
            u = self.urls.get(uid)
            if u is None and cold is not None:
                saved = cold.get(uid)
                u = None if saved is None else url_from_saved(saved)
            if u is None or u.url == url:
                return uid, u
            self._count("url_id_collisions")
        raise RuntimeError(f"no free url_id for {url} after probing")  # pragma: no cover

    def discover(self, url: str, now: float, *, depth: int = 0, priority: float | None = None,
                 is_seed: bool = False, redirect_hops: int = 0, checked: bool = False,
                 kind: Kind = Kind.PAGE, lastmod: float | None = None,
                 changefreq: str | None = None) -> Admission:
        """Admit a normalized URL of this host, unless known or refused by a trap rule.

        `checked` says the caller already routed the URL by its host_key. A sitemap's
        `lastmod` (seconds) newer than a known URL's last fetch makes it due now; its
        `changefreq` sets a new URL's first revisit interval."""
        if not checked and split_host_key(url)[0] != self.host_key:
            raise ValueError(f"{url} does not belong to {self.host_key}")
        uid, known = self.find(url)
        if known is not None:
            self._count("urls_known")  # URL dedup: a rediscovery, nothing admitted
            resident = uid in self.urls  # (a cold URL is left as it is until loaded)
            if priority is not None and priority > known.priority and resident:
                known.priority = priority
                self._dirty.add(uid)
            if resident and sitemap_says_changed(lastmod, known.last_fetch_at) and \
                    known.status is not UrlStatus.LEASED and known.next_fetch_at > now:
                self._count("sitemap_changed_due")
                self._enqueue(known, now)
            return Admission(False, uid, "known")
        reason = check_url(url, depth, self.cfg.traps)
        if reason is None and redirect_hops > self.cfg.max_redirect_hops:
            reason = "redirect_hops"
        if reason is None:
            reason = self.templates.admit(url, now, self.cfg.traps)
        if reason is not None:
            self._count(f"refused_{reason}")
            return Admission(False, None, str(reason))
        value = discovery_priority(priority, depth, is_seed, self.cfg.recrawl)
        u = UrlState(uid, url, priority=value, depth=depth, redirect_hops=redirect_hops,
                     kind=kind, interval_s=hinted_interval(changefreq, value, self.cfg.recrawl))
        if self.cfg.shard_above_urls and self.known() >= self.cfg.shard_above_urls:
            u.next_fetch_at = now
            self._to_shard(u)
            self._count("urls_admitted")
            return Admission(True, uid, "sharded")
        if self.cfg.shard_above_urls:
            self.unleased += 1
        if self.cold is not None and len(self.urls) >= self.cfg.max_resident_urls:
            self._go_big()
            u.next_fetch_at = now
            self.cold.add(uid, url_to_saved(u), now)
            self._count("urls_spilled")
            self._count("urls_admitted")
            return Admission(True, uid, "new")
        self._count("urls_admitted")
        self.urls[uid] = u
        if self.big:
            self._resident_added.add(uid)
        self._enqueue(u, now)
        return Admission(True, uid, "new")

    # -- a hot host's shards (udfs/core/shards.py) -------------------------------

    def known(self) -> int:
        """URLs this owner holds: resident and cold (not those in its shards)."""
        return len(self.urls) + (len(self.cold) if self.big and self.cold is not None else 0)

    def _to_shard(self, u: UrlState) -> None:
        n = shard_of(u.url, self.cfg.host_shards)
        put = next((t for t in self.outbox if t.kind == "PUT" and t.shard == n), None)
        if put is None:
            put = Transfer("PUT", self.host_key, n)
            self.outbox.append(put)
        put.urls.append((u.url, url_to_saved(u)))
        self.sharded[n] = self.sharded.get(n, 0) + 1
        self._count("urls_sharded")

    def maybe_pull(self, now: float) -> None:
        """Ask a shard for URLs when this owner's backlog runs low: fewer than
        shard_refill_urls never-leased URLs, or nothing due within a cold bucket (so a
        miscount can only make it pull early). One pull out at a time."""
        if not self.sharded:
            return
        if self.unleased >= self.cfg.shard_refill_urls:
            due = self._earliest_due()
            cold = self.cold.earliest() if self.big and self.cold is not None else None
            soon = now + self.cfg.cold_bucket_s
            if (due is not None and due <= soon) or (cold is not None and cold <= soon):
                return
        if self.pull_out is not None and now < self.pull_out[1] + self.cfg.shard_pull_timeout_s:
            return
        n = max(sorted(self.sharded), key=lambda k: self.sharded[k])
        self.pull_out = [n, now]
        self.outbox.append(Transfer("PULL", self.host_key, n, want=self.cfg.shard_refill_urls))
        self._count("shard_pulls")

    def take_refill(self, t: Transfer, now: float) -> int:
        """A shard's answer: take its URLs into this owner's queue (a URL this owner
        knows already is a copy, dropped). Returns how many were taken."""
        if t.remaining:
            self.sharded[t.shard] = t.remaining
        else:
            self.sharded.pop(t.shard, None)
        if self.pull_out is not None and int(self.pull_out[0]) == t.shard:
            self.pull_out = None
        taken = 0
        for url, saved in t.urls:
            uid, have = self.find(url)
            if have is not None:
                self._count("urls_known")
                continue
            u = url_from_saved(saved)
            u.url_id = uid
            if u.version == 0:
                self.unleased += 1
            if self.cold is not None and len(self.urls) >= self.cfg.max_resident_urls:
                self._go_big()
                self.cold.add(uid, url_to_saved(u), u.next_fetch_at)
            else:
                self.urls[uid] = u
                if self.big:
                    self._resident_added.add(uid)
                self._enqueue(u, u.next_fetch_at)
            self._count("urls_unsharded")
            taken += 1
        return taken

    # -- leasing --------------------------------------------------------------

    def _new_lease_id(self, now: float) -> str:
        """host#sequence@grant-time-ms: the sequence orders a host's leases; the grant time
        keeps ids unique when a restore from an older checkpoint repeats a sequence."""
        self._lease_seq += 1
        return f"{self.host_key}#{self._lease_seq}@{int(round(now * 1000))}"

    def expire(self, now: float) -> list[Lease]:
        """Expire overdue leases: re-let their URLs (attempt + 1) or park them."""
        expired = [lease for lease in self.in_flight.values() if lease.expires_at <= now]
        for lease in expired:
            del self.in_flight[lease.lease_id]
            self._count("leases_expired")
            if lease.kind is Kind.ROBOTS:
                self.robots_lease = None
                continue
            u = self.urls.get(lease.url_id)
            if u is None or u.lease_id != lease.lease_id or u.status is not UrlStatus.LEASED:
                continue
            self._dirty.add(u.url_id)
            u.lease_id = None
            if u.attempt < self.cfg.max_lease_attempts:
                u.status, u.relet = UrlStatus.QUEUED, True
                self._enqueue(u, now)
            else:
                self._park(u, now, f"lease expired {u.attempt} times")
                self._maybe_spill(u, now)
        return expired

    def _park(self, u: UrlState, now: float, reason: str) -> None:
        u.status, u.park_reason, u.relet, u.attempt = UrlStatus.PARKED, reason, False, 0
        u.accepted_version = u.version  # the round is over; a late completion is a duplicate
        self._count("urls_parked")
        self._enqueue(u, now + self.cfg.recrawl.failed_visit_interval_s)

    def _lease_limit(self) -> int:
        """Leases the host may have out at once: its in-flight limit plus the look-ahead
        (only one, a head, after a fetcher lost the chain)."""
        if self.heads_only:
            return 1
        return effective_in_flight(self.policy, self.allowance) + self.cfg.max_lookahead_leases

    def _next_start(self, now: float) -> float:
        """The not_before of the next lease: a head counts from everything the frontier
        knows (completions as they arrived, expiries); a follower keeps the plan (the
        fetcher counts the gap from the previous request's real end)."""
        if self.in_flight:
            gap = self.gap_s(self.last_duration_s)  # as the fetcher will count it
            last = max(lease.not_before for lease in self.in_flight.values()) + gap
            return max(now, self.plan_at, last)
        return max(now, self.next_allowed_at, self.plan_at)

    def ready_at(self, now: float) -> float:
        """The earliest time the host's tokens allow a request (ignoring the queue)."""
        return max(self._next_start(now), self.backoff_until)

    def _tokens_free(self, now: float) -> bool:
        return (not self.paused and now >= self.backoff_until and
                len(self.in_flight) < self._lease_limit() and
                self._next_start(now) <= now + self.cfg.lookahead_s)

    def _new_lease(self, now: float, lease_id: str, url_id: str, version: int, attempt: int,
                   url: str, kind: Kind, depth: int = 0, etag: str | None = None,
                   last_modified: str | None = None, storage_tier: str = "standard"
                   ) -> Lease:
        """A lease starting at the next start, following the last lease still out."""
        start = self._next_start(now)
        prev = max(self.in_flight.values(), key=attrgetter("not_before", "issued_at"),
                   default=None)
        pace = self.pace()
        return Lease(lease_id, url_id, version, attempt, now, start + self.cfg.lease_timeout_s,
                     url, self.host_key, kind, depth, etag, last_modified, start,
                     None if prev is None else prev.lease_id, pace.gap_s,
                     pace.duration_factor, pace.max_gap_s, pace.max_in_flight, self.throttles,
                     storage_tier)

    def _grant(self, now: float, lease: Lease) -> Lease:
        self.in_flight[lease.lease_id] = lease
        # Granting takes the host's token: the next lease is planned one gap later.
        self.next_allowed_at = max(self.next_allowed_at,
                                   lease.not_before + self.gap_s(self.last_duration_s))
        return lease

    def _robots_url(self) -> str:
        return self.host_key + "/robots.txt"

    def _robots_blocking(self, now: float) -> bool:
        """Must robots.txt be fetched before any page of the host is leased?"""
        r = self.robots
        return r.status.value == "UNKNOWN" or (not r.failures and now >= r.expires_at)

    def poll(self, now: float, global_budget: DailyBudget | None = None) -> Lease | None:
        """Grant the next lease if the host's tokens allow one now (at most one per call)."""
        self.expire(now)
        self._refill(now)
        if not self._tokens_free(now):
            return None
        due = self._earliest_due()
        wants_pages = due is not None and due <= now
        if self.robots_lease is None and (self.robots_follow is not None or
                                          (wants_pages and fetch_due(self.robots, now))):
            url, hops = self.robots_follow or (self._robots_url(), 0)
            self.robots_follow = None
            self.robots_version += 1
            self._robots_hops = hops
            self._count("robots_leases")
            self.robots_lease = self._new_lease(now, self._new_lease_id(now), "robots",
                                                self.robots_version, 1, url, Kind.ROBOTS)
            return self._grant(now, self.robots_lease)
        if not wants_pages or self._robots_blocking(now):
            return None
        for _ in range(64):  # bounded work per call; the rest waits for the next wake
            u = self._pop_ready(now)
            if u is None:
                return None
            verdict = decide(self.robots, u.url, now, self.cfg.robots, self._parsed)
            if verdict is Verdict.NEED_ROBOTS:
                self._enqueue(u, now)  # robots.txt is being fetched; keep its place
                return None
            if verdict is Verdict.DISALLOWED:
                self._count("robots_disallowed")
                # Re-check after the next robots.txt refresh.
                self._enqueue(u, max(now + 1.0, self.robots.expires_at, self.robots.retry_at))
                continue
            if global_budget is not None and self.cfg.recrawl.learned_priority:
                wait = budget_wait(global_budget.spent(now), self.cfg.daily_fetch_budget,
                                   now, self.score(u) * host_priority(
                                       self.allowance, self.dup_share, self.cfg.recrawl))
                if wait is not None:  # URLs of more weight may spend the budget first
                    self._count("budget_deferred")
                    self._enqueue(u, wait)
                    return None
            if self.budget.take(now, self.policy.daily_budget) is not None:
                self._count("host_budget_exhausted")
                self._enqueue(u, (now // DAY_S + 1) * DAY_S)
                return None
            if global_budget is not None and global_budget.take(
                    now, self.cfg.daily_fetch_budget) is not None:
                self.budget.used -= 1  # not spent after all
                self._count("global_budget_exhausted")
                self._enqueue(u, (now // DAY_S + 1) * DAY_S)
                return None
            if self.observer is not None:
                self.observer.leased(now - u.next_fetch_at,
                                     u.priority >= self.cfg.recrawl.high_value_priority)
            if u.relet:
                u.attempt += 1
                self._count("leases_relet")
            else:
                if u.version == 0 and self.unleased:
                    self.unleased -= 1
                u.version += 1
                u.attempt = 1
            u.relet = False
            u.status = UrlStatus.LEASED
            self._dirty.add(u.url_id)
            low = u.dup and self.cfg.recrawl.learned_priority
            lease = self._new_lease(now, self._new_lease_id(now), u.url_id, u.version,
                                    u.attempt, u.url, u.kind, u.depth, u.etag,
                                    u.last_modified if u.etag is None else None,
                                    "low" if low else "standard")
            u.lease_id = lease.lease_id
            self._count("leases_granted")
            return self._grant(now, lease)
        return None

    def next_wake(self, now: float) -> float | None:
        """When this host next needs attention (a grant may be possible, or a lease expires)."""
        times = [lease.expires_at for lease in self.in_flight.values()]
        if self.backoff_until > now:  # its end changes the host's state (and its gauges)
            times.append(self.backoff_until)
        if self.pull_out is not None:  # no answer by then: ask again
            times.append(self.pull_out[1] + self.cfg.shard_pull_timeout_s)
        if not self.paused and len(self.in_flight) < self._lease_limit():
            want: float | None
            if self.robots_lease is None and self.robots_follow is not None:
                want = now
            elif self.robots_lease is not None and self._robots_blocking(now):
                want = None  # the robots completion (or its expiry) wakes the host
            else:
                want = self._earliest_due()
                cold = self._cold_wake()
                if cold is not None:
                    want = cold if want is None else min(want, cold)
            if want is not None:
                budget_reset = (now // DAY_S + 1) * DAY_S \
                    if self.budget.remaining(now, self.policy.daily_budget) == 0 else 0.0
                times.append(max(want, self._next_start(now) - self.cfg.lookahead_s,
                                 self.backoff_until, budget_reset))
        return min(times) if times else None

    # -- completion -----------------------------------------------------------

    def complete(self, r: FetchResult, now: float) -> CompletionResult:
        """Apply one fetch outcome; conditional on (url_id, url_version)."""
        if r.outcome is Outcome.NOT_SENT:
            return self._not_sent(r, now)
        lease = self.in_flight.pop(r.lease_id, None)
        if not self.in_flight:
            self.heads_only = False
        # Whatever happened, the host was contacted: the next request waits a full gap,
        # for a head counted from now (the completion's arrival), for a follower from the
        # request's end as the fetcher saw it.
        self.next_allowed_at = max(self.next_allowed_at, now + self.gap_s(r.fetch_duration_s))
        ended = now if r.fetched_at is None else min(now, r.fetched_at)
        self.plan_at = max(self.plan_at, ended + self.gap_s(r.fetch_duration_s))
        self.last_duration_s = r.fetch_duration_s
        self.recent = [*self.recent[-(RECENT_OUTCOMES - 1):],
                       (now, r.kind.value, r.outcome.value, r.http_status)]
        self._host_signal(r, now)
        if r.kind is Kind.ROBOTS:
            return self._complete_robots(r, lease, now)
        u = self.urls.get(r.url_id)
        if u is None or r.url_version > u.version or r.url_version < u.accepted_version:
            self._count("completions_stale")
            return CompletionResult(Acceptance.STALE, reason="unknown URL or older round")
        if r.url_version == u.accepted_version:
            self._count("completions_duplicate")
            return CompletionResult(Acceptance.DUPLICATE, url=u.url,
                                    reason="this version was already accepted")
        if r.url_version < u.version:
            self._count("completions_stale")
            return CompletionResult(Acceptance.STALE, url=u.url, reason="older round")
        # Accept: this is the one result of this version.
        self._dirty.add(u.url_id)
        u.accepted_version = u.version
        # A re-let lease of this round may still be fetching: it keeps its token until
        # its own completion (a duplicate) or its expiry.
        u.lease_id, u.relet, u.attempt = None, False, 0
        self._count("completions_accepted")
        out = self._apply(u, r, now)
        out.state = u
        self._maybe_spill(u, now)
        return out

    def duplicate(self, url_id: str, url_version: int, dup: Dup, new_page: bool,
                  now: float) -> bool:
        """The index found the URL's copy of `url_version` to duplicate another URL's
        (exact or near): its revisits are spaced out and its place in the queue lowered;
        a new page counts toward the host's duplicate share. Its links were followed
        already. False when nothing changed (an unknown or cold URL, an older round, a
        repeated answer)."""
        u = self.urls.get(url_id)
        if u is None or url_version < u.accepted_version or u.dup == dup:
            return False
        self._dirty.add(url_id)
        u.dup = dup
        if new_page:  # it counted as not a duplicate at its completion: correct that
            self.dup_share = min(1.0, self.dup_share + DUP_SHARE_WEIGHT)
        self._count("duplicates_reported")
        if u.status is UrlStatus.FETCHED and u.last_fetch_at is not None:
            later = u.last_fetch_at + revisit_after(u.interval_s, dup, self.dup_share,
                                                    self.cfg.recrawl)
            if later > u.next_fetch_at:
                self._enqueue(u, later)
        return True

    def _not_sent(self, r: FetchResult, now: float) -> CompletionResult:
        """The fetcher did not send the lease (and knows no one did): take it back, the URL
        to the queue with its attempt unspent; the host was not contacted."""
        from udfs.core.backqueue import Skip  # the fetcher's reasons

        lease = self.in_flight.pop(r.lease_id, None)
        if lease is None:
            self._count("completions_stale")
            return CompletionResult(Acceptance.STALE, reason="unknown lease")
        self._count("leases_not_sent")
        if r.detail == Skip.UNKNOWN_PREDECESSOR.value and self.in_flight:
            self.heads_only = True  # the fetcher cannot follow the leases still out
        if not self.in_flight:
            self.heads_only = False
        hint = parse_retry_after(r.retry_after, now)
        if hint is not None:  # the fetcher's own wait for the host (a Retry-After it saw)
            self.plan_at = max(self.plan_at, hint)
            self.next_allowed_at = max(self.next_allowed_at, hint)
        if lease.kind is Kind.ROBOTS:
            if self.robots_lease is not None and self.robots_lease.lease_id == lease.lease_id:
                self.robots_lease = None
                self.robots_version -= 1  # not fetched: the same robots round again
            return CompletionResult(Acceptance.ACCEPTED, url=lease.url, reason="not sent")
        u = self.urls.get(lease.url_id)
        if u is not None and u.lease_id == lease.lease_id and u.status is UrlStatus.LEASED:
            self._dirty.add(u.url_id)
            u.status, u.lease_id, u.relet = UrlStatus.QUEUED, None, True
            u.attempt -= 1  # the re-let adds it back: nothing was spent
            self._enqueue(u, min(u.next_fetch_at, now))  # its place in the queue, kept
        return CompletionResult(Acceptance.ACCEPTED, url=lease.url, reason="not sent")

    def _host_signal(self, r: FetchResult, now: float) -> None:
        """Backoff and allowance from what the host answered."""
        if r.outcome is Outcome.THROTTLED:
            self.throttles += 1
            until = parse_retry_after(r.retry_after, now)
            if until is None:
                until = now + backoff_delay(self.policy, self.backoff_exponent, self.rng.random())
            self.backoff_until = max(self.backoff_until, until)
            self.backoff_exponent += 1
            self.allowance = cut_allowance(self.policy, self.allowance)
            self._count("throttled")
        elif r.outcome in HOST_TROUBLE:
            self.backoff_until = max(self.backoff_until, now + backoff_delay(
                self.policy, self.backoff_exponent, self.rng.random()))
            self.backoff_exponent += 1
        elif r.outcome is Outcome.ADDRESS_BLOCKED:
            self.backoff_until = max(self.backoff_until, now + self.cfg.address_block_s)
        else:
            self.backoff_exponent = 0
            self.allowance = recover_allowance(self.policy, self.allowance)

    def _complete_robots(self, r: FetchResult, lease: Lease | None, now: float
                         ) -> CompletionResult:
        if lease is None or self.robots_lease is None or \
                lease.lease_id != self.robots_lease.lease_id:
            self._count("completions_stale")
            return CompletionResult(Acceptance.STALE, reason="unknown robots lease")
        self.robots_lease = None
        status = r.http_status if r.outcome not in HOST_TROUBLE | {Outcome.ADDRESS_BLOCKED} \
            else None
        self.robots, follow = after_fetch(
            self.robots, RobotsFetch(status, r.robots_body, r.redirect_location, lease.url,
                                     self._robots_hops), now, self.cfg.robots)
        if follow is not None:
            self.robots_follow = (follow, self._robots_hops + 1)
        self._parsed = parse_robots(self.robots.body) if self.robots.body else None
        self._crawl_delay = crawl_delay_s(self.robots, self.cfg.robots, self._parsed)
        # A Crawl-delay just learned counts from this fetch already.
        ended = now if r.fetched_at is None else min(now, r.fetched_at)
        self.next_allowed_at = max(self.next_allowed_at, now + self.gap_s(r.fetch_duration_s))
        self.plan_at = max(self.plan_at, ended + self.gap_s(r.fetch_duration_s))
        found = [(url, 0, 0, "ROBOTS_SITEMAP") for url in
                 (self._parsed.sitemap_urls(lease.url) if self._parsed else [])]
        self._count("robots_fetched")
        return CompletionResult(Acceptance.ACCEPTED, url=lease.url, discovered=found,
                                reason=f"robots {self.robots.status.value}")

    def _schedule(self, u: UrlState, now: float, status: UrlStatus, after_s: float) -> None:
        """The visit is over: record its status and queue the next visit."""
        u.status = status
        self._enqueue(u, now + after_s)

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
            u.last_fetch_at, u.failure_count, u.park_reason = now, 0, None
            u.interval_s = next_interval(u.interval_s, change, u.priority, rc) \
                if change is not Change.NEW else u.interval_s
            if change is Change.NEW and out.index:
                # A new page; the index's duplicate checks answer later (`duplicate`).
                self.dup_share = updated_dup_share(self.dup_share, False)
            elif change is Change.CHANGED:
                u.dup = Dup.NONE  # new text: a duplicate only if the index says so again
            self._schedule(u, now, UrlStatus.FETCHED,
                           revisit_after(u.interval_s, Dup(u.dup), self.dup_share, rc))
        elif r.outcome is Outcome.REDIRECT:
            u.last_fetch_at, u.failure_count = now, 0
            hops = u.redirect_hops + 1
            if r.redirect_location and r.redirect_location != u.url:
                out.discovered.append((r.redirect_location, u.depth, hops, "REDIRECT"))
            else:
                self._count("redirect_loops")
            self._schedule(u, now, UrlStatus.FETCHED, rc.max_interval_s)
        elif r.outcome is Outcome.GONE:
            u.last_fetch_at, u.failure_count = now, 0
            self._schedule(u, now, UrlStatus.TOMBSTONE, rc.tombstone_interval_s)
        elif r.outcome is Outcome.THROTTLED:
            # 429/503 speaks about the host's pace, not this URL: the host backs off
            # (growing without bound) and the URL waits for it, its retry budget untouched.
            u.status = UrlStatus.QUEUED
            self._enqueue(u, max(now, self.backoff_until))
        elif r.outcome in RETRYABLE:
            u.failure_count += 1
            if u.failure_count > self.cfg.max_retries:
                u.failure_count = 0
                self._park(u, now, f"{r.outcome.value} after {self.cfg.max_retries} retries")
            else:
                wait = self.cfg.retry_base_s * 2 ** (u.failure_count - 1)
                u.status = UrlStatus.QUEUED
                self._enqueue(u, max(now + wait * (0.5 + 0.5 * self.rng.random()),
                                     self.backoff_until))
        elif r.outcome is Outcome.ADDRESS_BLOCKED:
            self._park(u, now, "address blocked by the SSRF policy")
        elif r.outcome is Outcome.PARSE_TIMEOUT:
            # A hostile or pathological page: counted as a trap trigger of the host, and
            # never retried at once (the text hash of its last good visit is kept).
            self._count("trap_parse_timeout")
            u.last_fetch_at, u.failure_count = now, 0
            self._schedule(u, now, UrlStatus.FETCHED, rc.failed_visit_interval_s)
        else:  # CLIENT_ERROR, TOO_LARGE, UNSUPPORTED_TYPE, PARSE_ERROR: visited, nothing kept
            u.last_fetch_at, u.failure_count = now, 0
            self._schedule(u, now, UrlStatus.FETCHED, rc.max_interval_s)
        return out

    # -- snapshots ------------------------------------------------------------

    def host_state(self) -> dict[str, Any]:
        """The host's durable state except its URLs, as plain data (one keyed value)."""
        # Records by field name, not pickled classes: a savepoint restores into code
        # that added or retired a field (see _from_fields).
        return {
            "host_key": self.host_key, "policy": _fields_of(self.policy),
            "robots": _fields_of(self.robots), "robots_version": self.robots_version,
            "robots_lease": None if self.robots_lease is None else _fields_of(self.robots_lease),
            "robots_follow": self.robots_follow, "robots_hops": self._robots_hops,
            "next_allowed_at": self.next_allowed_at, "backoff_until": self.backoff_until,
            "plan_at": self.plan_at, "heads_only": self.heads_only,
            "throttles": self.throttles, "last_duration_s": self.last_duration_s,
            "backoff_exponent": self.backoff_exponent, "allowance": self.allowance,
            "dup_share": self.dup_share, "paused": self.paused,
            "control_version": self.control_version, "commands": list(self.commands),
            "recent": list(self.recent),
            "counted": self.counted,
            "in_flight": {k: _fields_of(v) for k, v in self.in_flight.items()},
            "budget": _fields_of(self.budget),
            "templates": {"day": self.templates.day, "counts": dict(self.templates.counts)},
            "lease_seq": self._lease_seq, "rng": self.rng.state, "stats": dict(self.stats),
            "sharded": dict(self.sharded), "pull_out": self.pull_out,
            "unleased": self.unleased,
            "big": self.big, "cold_index": None if self.cold is None else {
                "buckets": {b: list(w) for b, w in self.cold.index.buckets.items()},
                "count": self.cold.index.count},
        }

    def changed_urls(self) -> list[tuple[str, tuple | None]]:
        """URL states changed since the last call, as (url_id, fields) for a keyed map
        (None: removed); the incremental counterpart of `snapshot`."""
        out = [(uid, _URL_FIELDS(self.urls[uid]) if uid in self.urls else None)
               for uid in self._dirty]
        self._dirty.clear()
        return out

    def snapshot(self) -> dict[str, Any]:
        """The host's whole durable state as plain data."""
        return {**self.host_state(), "urls": self._snapshot_urls()}

    def _snapshot_urls(self) -> dict[str, tuple]:
        """URL states as tuples (immutable, so unchanged ones are shared between snapshots)."""
        cache = self._snap_urls
        for uid in self._dirty:
            u = self.urls.get(uid)
            if u is None:
                cache.pop(uid, None)
            else:
                cache[uid] = _URL_FIELDS(u)
        self._dirty.clear()
        return dict(cache)

    @classmethod
    def restore(cls, snap: dict[str, Any], cfg: FrontierConfig) -> HostFrontier:
        """Rebuild a host from a snapshot; the queue is derived from the URL states.

        State written by other code restores: a field added since (at the top level or
        in a record) takes the value a new host has, a retired one is ignored; the added
        ones are listed in `added_fields`."""
        h = cls(snap["host_key"], cfg)
        fresh = h.host_state()
        added = {k for k in fresh if k not in snap}
        snap = {**fresh, **snap}
        h.policy = _from_fields(HostPolicy, snap["policy"], added, "policy")
        h.robots = _from_fields(RobotsState, snap["robots"], added, "robots")
        h.robots_version = snap["robots_version"]
        h.robots_lease = _from_fields(Lease, snap["robots_lease"], added, "robots_lease")
        h.robots_follow = snap["robots_follow"]
        h._robots_hops = snap["robots_hops"]
        h.next_allowed_at, h.backoff_until = snap["next_allowed_at"], snap["backoff_until"]
        h.plan_at, h.heads_only = snap["plan_at"], snap["heads_only"]
        h.throttles, h.last_duration_s = snap["throttles"], snap["last_duration_s"]
        h.backoff_exponent, h.allowance = snap["backoff_exponent"], snap["allowance"]
        h.dup_share = snap["dup_share"]
        h.paused, h.control_version = snap["paused"], snap["control_version"]
        h.commands = list(snap["commands"])
        h.recent = [tuple(r) for r in snap["recent"]]
        h.counted = None if snap["counted"] is None else \
            (snap["counted"][0], tuple(snap["counted"][1]))
        h.in_flight = {k: _from_fields(Lease, v, added, "in_flight")
                       for k, v in snap["in_flight"].items()}
        h.budget = replace(_from_fields(DailyBudget, snap["budget"], added, "budget"))
        h.added_fields = frozenset(added)
        templates = snap["templates"]
        if isinstance(templates, TemplateBudget):  # written before field-named state
            templates = {"day": templates.day, "counts": templates.counts}
        h.templates = TemplateBudget(templates["day"], dict(templates["counts"]))
        h._lease_seq = snap["lease_seq"]
        h.rng.state = snap["rng"]
        h.stats = dict(snap.get("stats", {}))
        h.big, h._cold_index = snap.get("big", False), snap.get("cold_index")
        h.sharded = {int(k): v for k, v in snap["sharded"].items()}
        h.pull_out = None if snap["pull_out"] is None else list(snap["pull_out"])
        h.unleased = snap["unleased"]
        h._parsed = parse_robots(h.robots.body) if h.robots.body else None
        h._crawl_delay = crawl_delay_s(h.robots, cfg.robots, h._parsed)
        restored = sorted(((k, url_from_saved(saved), saved) for k, saved in snap["urls"].items()),
                          key=lambda t: (t[1].next_fetch_at, t[0]))
        # Sorted, so that the rebuilt queue does not depend on the snapshot's dict order.
        for k, u, saved in restored:
            h.urls[k] = u
            if isinstance(saved, tuple) and not _is_layout(saved):
                h._snap_urls[k] = saved
            if u.status is not UrlStatus.LEASED:
                h._enqueue(u, u.next_fetch_at)
        h._dirty.clear()
        return h

    # -- keyed storage (the frontier job's state; dicts in tests) ------------------------

    def save(self, urls: KeyValue, resident: KeyValue, segments: KeyValue) -> dict[str, Any]:
        """Write what changed since the last save; returns the host's own value to store.

        `urls`: url_id → URL by field name (every URL, resident or cold); `resident`:
        the ids in memory (kept only once the host is big); `segments`: the cold queue.
        """
        if self.cold is None:
            self.attach_cold(segments, urls)
        for uid, saved in self.changed_urls():
            if saved is None:
                urls.remove(uid)
            else:  # in a named layout: a savepoint survives added or retired fields
                urls.put(uid, _saved_url(saved))
        assert self.cold is not None
        self.cold.flush()
        added, removed = self.resident_changes()
        for uid in added:
            resident.put(uid, True)
        for uid in removed:
            resident.remove(uid)
        return self.host_state()

    @classmethod
    def load(cls, host_key: str, saved: dict[str, Any] | None, cfg: FrontierConfig,
             urls: KeyValue, resident: KeyValue, segments: KeyValue,
             all_urls: Callable[[], Iterable[tuple[str, Any]]],
             resident_ids: Callable[[], Iterable[str]]) -> HostFrontier:
        """Rebuild a host from keyed storage: a big host loads only its resident window,
        a small one all its URLs."""
        if saved is None:
            h = cls(host_key, cfg)
        else:
            if saved.get("big"):
                window = {uid: urls.get(uid) for uid in resident_ids()}
                window = {uid: v for uid, v in window.items() if v is not None}
            else:
                window = dict(all_urls())
            h = cls.restore({**saved, "urls": window}, cfg)
        h.attach_cold(segments, urls)
        return h

    def check_invariants(self) -> list[str]:
        """Every URL is queued exactly once or held by a live lease: none can be lost."""
        problems = []
        live = {seq for _, seq, _ in self._due} | {e[3] for e in self._ready}
        for u in self.urls.values():
            if u.status is UrlStatus.LEASED:
                if u.lease_id not in self.in_flight:
                    problems.append(f"{u.url} is LEASED without a live lease")
            elif u.token not in live:
                problems.append(f"{u.url} is {u.status} but not queued")
        return problems


URL_FIELD_NAMES = tuple(f.name for f in fields(UrlState))
_URL_FIELDS = attrgetter(*URL_FIELD_NAMES)
_URL_FIELD_SET = frozenset(URL_FIELD_NAMES)


@cache
def _enum_fields(cls: type) -> dict[str, type[Enum]]:
    """The fields of a dataclass whose type is one of our enums (kept by value in state)."""
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)
            if isinstance(hints[f.name], type) and issubclass(hints[f.name], Enum)}


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _fields_of(record: Any) -> dict[str, Any]:
    """A dataclass record as {field name: value}, enums by their value: keyed state holds
    builtin types only, so renaming or moving a class of ours never breaks a savepoint."""
    return {name: _plain(getattr(record, name)) for name in _field_names(type(record))}


def _from_fields(cls: type, saved: Any, added: set[str] | None = None, where: str = ""
                 ) -> Any:
    """Rebuild a record saved by field name: unknown (retired) fields are ignored, missing
    (added) ones take their defaults and are noted in `added` as "where.name"; enums are
    read back from their values (or taken as they are, from state written before enums
    were stored by value). A record pickled whole by older code passes as is."""
    if saved is None or isinstance(saved, cls):
        return saved
    names = {f.name for f in fields(cls)}
    if added is not None:
        added.update(f"{where}.{n}" for n in names if n not in saved)
    values = {k: v for k, v in saved.items() if k in names}
    for name, enum in _enum_fields(cls).items():
        if values.get(name) is not None:
            values[name] = enum(values[name])
    return cls(**values)


# How a URL is kept in keyed state: a tuple (layout number, value, value, ...), enums
# by value, in the field order its layout names. The names are written once, here, not
# in each of billions of records (a dict by field name pickled to ~440 B for a queued
# URL; this tuple to ~190 B). A build that adds, retires or reorders a UrlState field
# appends a layout and never edits an old one: savepoints written by older builds name
# theirs, and are read by name (an added field takes its default, a retired one is
# ignored). URLs saved as dicts by field name (the builds before layouts) still load.
URL_LAYOUTS: dict[int, tuple[str, ...]] = {
    1: ("url_id", "url", "version", "accepted_version", "status", "attempt", "relet",
        "next_fetch_at", "last_fetch_at", "interval_s", "priority", "depth",
        "redirect_hops", "kind", "etag", "last_modified", "content_hash", "text_hash",
        "failure_count", "park_reason", "lease_id", "token"),
    2: ("url_id", "url", "version", "accepted_version", "status", "attempt", "relet",
        "next_fetch_at", "last_fetch_at", "interval_s", "priority", "depth",
        "redirect_hops", "kind", "etag", "last_modified", "content_hash", "text_hash",
        "failure_count", "park_reason", "lease_id", "token", "dup"),
}
URL_LAYOUT = max(URL_LAYOUTS)
if URL_LAYOUTS[URL_LAYOUT] != URL_FIELD_NAMES:  # pragma: no cover - a developer's slip
    raise RuntimeError("UrlState's fields changed: append their new order to URL_LAYOUTS "
                       "(udfs/core/frontier.py), so that old savepoints still load")
_STATUS_AT = URL_FIELD_NAMES.index("status")
_KIND_AT = URL_FIELD_NAMES.index("kind")


def url_to_saved(u: UrlState) -> tuple:
    """A URL state as keyed state stores it (see URL_LAYOUTS and url_from_saved)."""
    return _saved_url(_URL_FIELDS(u))


def _saved_url(values: tuple) -> tuple:
    saved = [URL_LAYOUT, *values]
    saved[1 + _STATUS_AT] = values[_STATUS_AT].value
    saved[1 + _KIND_AT] = values[_KIND_AT].value
    return tuple(saved)


def _is_layout(saved: Any) -> bool:
    return isinstance(saved, tuple) and bool(saved) and isinstance(saved[0], int)


def url_from_saved(saved: tuple | dict[str, Any]) -> UrlState:
    """A URL state from keyed state (a layout tuple, or a dict by field name from the
    builds before layouts) or from an in-process snapshot (a plain tuple of values)."""
    if _is_layout(saved):
        names = URL_LAYOUTS.get(saved[0])
        if names is None:
            raise ValueError(f"URL state in layout {saved[0]}, which this build does not "
                             f"know (newest {URL_LAYOUT}): written by a newer build")
        if saved[0] == URL_LAYOUT:
            u = UrlState(*saved[1:])
            u.status, u.kind = UrlStatus(u.status), Kind(u.kind)
            return u
        saved = dict(zip(names, saved[1:], strict=True))
    if isinstance(saved, dict):
        u = UrlState(**{k: v for k, v in saved.items() if k in _URL_FIELD_SET})
        u.status, u.kind = UrlStatus(u.status), Kind(u.kind)
        return u
    return UrlState(*saved)


class Frontier:
    """Many hosts behind one ready-heap keyed by each host's wake time (simulator, benches)."""

    def __init__(self, cfg: FrontierConfig, seed: int = 0) -> None:
        self.cfg = cfg
        self.seed = seed
        self.hosts: dict[str, HostFrontier] = {}
        self.budget = DailyBudget()
        self._heap: list[tuple[float, int, str]] = []
        self._wake: dict[str, int] = {}  # host → seq of its live heap entry
        self._wake_at: dict[str, float] = {}  # host → time of its live heap entry
        self._seq = 0
        self._touched: set[str] = set()  # hosts changed since the last snapshot
        self._snap_hosts: dict[str, dict[str, Any]] = {}
        # Hot hosts' shards, in memory (the job's shards topic, delivered at once).
        self.shards = LocalShards(cfg.cold_bucket_s)

    def _exchange(self, h: HostFrontier, now: float) -> None:
        h.maybe_pull(now)
        if h.outbox:
            self.shards.deliver(h, now)

    def host(self, host_key: str) -> HostFrontier:
        h = self.hosts.get(host_key)
        if h is None:
            h = self.hosts[host_key] = HostFrontier(host_key, self.cfg, self.seed)
        return h

    def _reschedule(self, h: HostFrontier, now: float, *, earlier_only: bool = False) -> None:
        """Put the host on the ready-heap at its next wake time.

        `earlier_only`: keep an existing earlier entry (waking early is harmless: the poll
        finds nothing and reschedules), so a burst of discoveries adds no heap entries.
        """
        self._touched.add(h.host_key)
        key = h.host_key
        if earlier_only and key in self._wake and self._wake_at[key] <= now:
            return
        when = h.next_wake(now)
        if when is None:
            self._wake.pop(key, None)
            return
        if earlier_only and key in self._wake and self._wake_at[key] <= when:
            return
        self._seq += 1
        self._wake[key] = self._seq
        self._wake_at[key] = when
        heapq.heappush(self._heap, (when, self._seq, key))

    def discover(self, url: str, now: float, **kw: Any) -> Admission:
        h = self.host(split_host_key(url)[0])
        result = h.discover(url, now, checked=True, **kw)
        self._exchange(h, now)
        self._touched.add(h.host_key)
        if result.accepted or kw.get("lastmod") is not None:  # (a sitemap can make it due)
            self._reschedule(h, now, earlier_only=True)
        return result

    def poll(self, now: float, limit: int | None = None) -> Iterator[Lease]:
        """Leases every ready host may have now (one per host per wake)."""
        granted = 0
        heap = self._heap
        while heap and heap[0][0] <= now and (limit is None or granted < limit):
            _, seq, key = heapq.heappop(heap)
            if self._wake.get(key) != seq:
                continue
            h = self.hosts[key]
            lease = h.poll(now, self.budget)
            self._exchange(h, now)
            self._reschedule(h, now)
            if lease is not None:
                granted += 1
                yield lease

    def complete(self, r: FetchResult, host_key: str, now: float) -> CompletionResult:
        h = self.hosts[host_key]
        out = h.complete(r, now)
        self._exchange(h, now)
        self._reschedule(h, now)
        return out

    def duplicate(self, host_key: str, url_id: str, url_version: int, dup: Dup,
                  new_page: bool, now: float) -> bool:
        h = self.hosts[host_key]
        changed = h.duplicate(url_id, url_version, dup, new_page, now)
        self._touched.add(host_key)
        self._reschedule(h, now)
        return changed

    def next_wake(self) -> float | None:
        while self._heap and self._wake.get(self._heap[0][2]) != self._heap[0][1]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def snapshot(self) -> dict[str, Any]:
        for key in self._touched:
            self._snap_hosts[key] = self.hosts[key].snapshot()
        self._touched.clear()
        return {"hosts": {k: self._snap_hosts[k] for k in self.hosts},
                "budget": replace(self.budget)}

    @classmethod
    def restore(cls, snap: dict[str, Any], cfg: FrontierConfig, seed: int, now: float
                ) -> Frontier:
        f = cls(cfg, seed)
        f.budget = replace(snap["budget"])
        for key, hs in snap["hosts"].items():
            f.hosts[key] = HostFrontier.restore(hs, cfg)
            f._snap_hosts[key] = hs
            f._reschedule(f.hosts[key], now)
        f._touched.clear()
        return f
