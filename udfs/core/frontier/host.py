"""`HostFrontier`: the scheduler of one host, the single owner of its tokens and URLs.

It admits discovered URLs, grants leases ("which host is ready" is `next_wake`/`poll`;
"which URL of this host next" is its queue), accepts completions only on a matching
(url_id, url_version), expires leases, and schedules revisits. Everything takes `now`
(seconds on the crawl clock); randomness comes from a seeded generator. The Flink
frontier operator keeps one `HostFrontier` per key and turns `next_wake` into its one
timer; the simulator drives many (crawler/testkit/many_hosts.py).

The host is one owner object over small parts, each one idea: which URLs enter
(admission.py), its URL queue (queue.py), the window of URLs kept in memory (cold.py),
the robots gate (robots_gate.py), the pacer (pacer.py), its leases (leasing.py) and how
they end (completion.py), a hot host's shards (sharding.py), and the state codec
(state.py). The parts get what they need at construction; none imports the host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from udfs.core.coldqueue import KeyValue
from udfs.core.frontier import state
from udfs.core.frontier.admission import Admitter
from udfs.core.frontier.cold import ColdWindow
from udfs.core.frontier.completion import Completions
from udfs.core.frontier.config import FrontierConfig
from udfs.core.frontier.hearing import FetcherHearing
from udfs.core.frontier.leasing import LeaseBook
from udfs.core.frontier.pacer import Pacer
from udfs.core.frontier.queue import UrlQueue
from udfs.core.frontier.robots_gate import RobotsGate
from udfs.core.frontier.sharding import ShardLink
from udfs.core.politeness import HostPolicy, Jitter
from udfs.core.records import (
    Admission,
    CompletionResult,
    FetchResult,
    FrontierObserver,
    Kind,
    Lease,
    UrlState,
)
from udfs.core.recrawl import Dup, host_priority
from udfs.core.robots_state import Verdict
from udfs.core.shards import Transfer
from udfs.core.traps import DAY_S, DailyBudget

MAX_POPS_PER_POLL = 64  # bounded work per poll; the rest waits for the next wake


class HostFrontier:
    """The scheduler of one host_key."""

    # Fixed attributes: setting one the host does not have (a field that moved into a
    # part) raises instead of passing silently.
    __slots__ = ("host_key", "cfg", "stats", "observer", "pacer", "gate", "queue", "window",
                 "leases", "ends", "shards", "door", "budget", "paused",
                 "control_version", "commands", "counted", "added_fields")

    def __init__(self, host_key: str, cfg: FrontierConfig, seed: int = 0,
                 policy: HostPolicy | None = None) -> None:
        self.host_key = host_key
        self.cfg = cfg
        self.stats: dict[str, int] = {}
        # Who hears of each counted event and page lease (the operator's metrics).
        self.observer: FrontierObserver | None = None
        self.pacer = Pacer(cfg, policy or cfg.host, Jitter(f"{seed}:{host_key}"))
        self.gate = RobotsGate(host_key, cfg.robots)
        self.queue = UrlQueue(cfg.recrawl)
        self.window = ColdWindow(cfg, self.queue, self._count)
        self.leases = LeaseBook(host_key, cfg, self._count)
        self.ends = Completions(cfg, self.queue, self.window, self.pacer, self.gate,
                                self.leases, self._count)
        self.shards = ShardLink(host_key, cfg, self._count)
        self.door = Admitter(host_key, cfg, self.queue, self.window, self.shards, self._count)
        self.budget = DailyBudget()
        # An operator's controls (udfs/core/control.py): a paused host gets no new lease;
        # control_version counts the commands applied, `commands` keeps the last ids.
        self.paused = False
        self.control_version = 0
        self.commands: list[str] = []
        # The operator's size gauges: what this host last added to them, and in which
        # incarnation of the operator (after a restore the gauges start from zero).
        self.counted: tuple[str, tuple[int, ...]] | None = None
        # Fields this code has that the restored state did not (added since it was
        # written; they took their defaults): the operator reports them.
        self.added_fields: frozenset[str] = frozenset()

    @property
    def urls(self) -> dict[str, UrlState]:
        """The resident URLs (url_id → state)."""
        return self.queue.urls

    @property
    def in_flight(self) -> dict[str, Lease]:
        """The leases out (lease_id → lease)."""
        return self.leases.out

    def set_policy(self, policy: HostPolicy) -> None:
        """Apply a negotiated per-host policy; only a newer policy_version replaces it."""
        if policy.policy_version <= self.pacer.policy.policy_version:
            raise ValueError(f"policy_version {policy.policy_version} is not newer than "
                             f"{self.pacer.policy.policy_version} for {self.host_key}")
        self.pacer.policy = policy

    def _count(self, name: str) -> None:
        self.stats[name] = self.stats.get(name, 0) + 1
        if self.observer is not None:
            self.observer.event(name)

    def pending(self) -> int:
        """URLs waiting in the queue (not leased), resident or cold."""
        return self.window.cold() + self.queue.unleased()

    def known(self) -> int:
        """URLs this owner holds: resident and cold (not those in its shards)."""
        return self.door.known()

    def gauges(self, now: float) -> tuple[int, ...]:
        """This host's share of the frontier's size gauges, in `GAUGES` order: itself, its
        URLs not leased (resident or cold), those in the cold queue, and whether it is in
        backoff, blocked by robots.txt 5xx (no earlier copy), paused. O(leases out)."""
        cold = self.window.cold()
        return (1, len(self.queue) + cold - self.leases.pages_out(), cold,
                int(self.pacer.backoff_until > now), int(self.gate.blocks_all()),
                int(self.paused))

    # -- discovery (admission.py) -----------------------------------------------

    def find(self, url: str) -> tuple[str, UrlState | None]:
        """The URL's id and state, resident or cold (see Admitter.find)."""
        return self.door.find(url)

    def discover(self, url: str, now: float, *, depth: int = 0, priority: float | None = None,
                 is_seed: bool = False, redirect_hops: int = 0, checked: bool = False,
                 kind: Kind = Kind.PAGE, lastmod: float | None = None,
                 changefreq: str | None = None) -> Admission:
        """Admit a normalized URL of this host, unless known or refused by a trap rule
        (see Admitter.discover)."""
        return self.door.discover(url, now, depth=depth, priority=priority, is_seed=is_seed,
                                  redirect_hops=redirect_hops, checked=checked, kind=kind,
                                  lastmod=lastmod, changefreq=changefreq)

    def maybe_pull(self, now: float) -> None:
        """Ask a shard for URLs when this owner's backlog runs low (see ShardLink)."""
        self.shards.maybe_pull(now, self.queue.earliest_due, self.window.earliest)

    def take_refill(self, t: Transfer, now: float) -> int:
        """A shard's answer, taken into this owner's queue (see Admitter.take_refill)."""
        return self.door.take_refill(t, now)

    # -- leasing --------------------------------------------------------------

    def expire(self, now: float, hearing: FetcherHearing | None = None) -> list[Lease]:
        """Expire overdue leases: re-let their URLs (attempt + 1) or park them; one issued
        while the fetcher was silent spends no attempt (see Completions.expire)."""
        return self.ends.expire(now, hearing)

    def ready_at(self, now: float) -> float:
        """The earliest time the host's tokens allow a request (ignoring the queue)."""
        return self.pacer.ready_at(now, self.leases.out)

    def _tokens_free(self, now: float) -> bool:
        return not self.paused and self.pacer.tokens_free(now, self.leases.out)

    def poll(self, now: float, global_budget: DailyBudget | None = None,
             hearing: FetcherHearing | None = None) -> Lease | None:
        """Grant the next lease if the host's tokens allow one now (at most one per call).
        `hearing`: what the frontier heard from the fetcher (see expire)."""
        self.expire(now, hearing)
        self.window.refill(now, len(self.leases))
        if not self._tokens_free(now):
            return None
        due = self.queue.earliest_due()
        wants_pages = due is not None and due <= now
        if self.gate.wants_fetch(now, wants_pages):
            url, version = self.gate.next_round()
            self._count("robots_leases")
            self.gate.lease = self.leases.make(now, self.pacer, "robots", version, 1, url,
                                               Kind.ROBOTS)
            return self.gate.lease
        if not wants_pages or self.gate.blocking(now):
            return None
        for _ in range(MAX_POPS_PER_POLL):
            u = self.queue.pop_ready(now)
            if u is None:
                return None
            verdict = self.gate.verdict(u.url, now)
            if verdict is Verdict.NEED_ROBOTS:
                self.queue.enqueue(u, now)  # robots.txt is being fetched; keep its place
                return None
            if verdict is Verdict.DISALLOWED:
                self._count("robots_disallowed")
                self.queue.enqueue(u, self.gate.recheck_at(now))
                continue
            return self._lease_page(u, now, global_budget)
        return None

    def _lease_page(self, u: UrlState, now: float, global_budget: DailyBudget | None
                    ) -> Lease | None:
        """Lease `u` if the day's budgets allow a fetch, else queue it for when they do."""
        def weight() -> float:
            return self.queue.score(u) * host_priority(self.pacer.allowance,
                                                       self.ends.dup_share, self.cfg.recrawl)
        again = self.leases.spend(now, self.budget, self.pacer.policy.daily_budget,
                                  global_budget, weight)
        if again is not None:
            self.queue.enqueue(u, again)
            return None
        if self.observer is not None:
            self.observer.leased(now - u.next_fetch_at,
                                 u.priority >= self.cfg.recrawl.high_value_priority)
        self.queue.dirty.add(u.url_id)
        return self.leases.lease_url(u, now, self.pacer, self.shards)

    def next_wake(self, now: float) -> float | None:
        """When this host next needs attention (a grant may be possible, or a lease expires)."""
        pacer, gate = self.pacer, self.gate
        times = [lease.expires_at for lease in self.leases.out.values()]
        if pacer.backoff_until > now:  # its end changes the host's state (and its gauges)
            times.append(pacer.backoff_until)
        retry = self.shards.retry_at()
        if retry is not None:  # no answer by then: ask again
            times.append(retry)
        if not self.paused and len(self.leases) < pacer.lease_limit():
            want: float | None
            if gate.lease is None and gate.follow is not None:
                want = now
            elif gate.lease is not None and gate.blocking(now):
                want = None  # the robots completion (or its expiry) wakes the host
            else:
                want = self.queue.earliest_due()
                cold = self.window.wake(len(self.leases))
                if cold is not None:
                    want = cold if want is None else min(want, cold)
            if want is not None:
                budget_reset = (now // DAY_S + 1) * DAY_S \
                    if self.budget.remaining(now, pacer.policy.daily_budget) == 0 else 0.0
                times.append(max(want, pacer.next_start(now, self.leases.out)
                                 - self.cfg.lookahead_s, pacer.backoff_until, budget_reset))
        return min(times) if times else None

    # -- completion -----------------------------------------------------------

    def complete(self, r: FetchResult, now: float) -> CompletionResult:
        """Apply one fetch outcome; conditional on (url_id, url_version)."""
        return self.ends.complete(r, now)

    def duplicate(self, url_id: str, url_version: int, dup: Dup, new_page: bool,
                  now: float) -> bool:
        """The index found this URL's copy to duplicate another's (Completions.duplicate)."""
        return self.ends.duplicate(url_id, url_version, dup, new_page, now)

    # -- state (state.py) -----------------------------------------------------

    def host_state(self) -> dict[str, Any]:
        """The host's durable state except its URLs, as plain data (one keyed value)."""
        return state.host_state(self)

    def snapshot(self) -> dict[str, Any]:
        """The host's whole durable state as plain data."""
        return {**self.host_state(), "urls": self.queue.snapshot()}

    @classmethod
    def restore(cls, snap: dict[str, Any], cfg: FrontierConfig) -> HostFrontier:
        """Rebuild a host from a snapshot (see state.restore)."""
        h = cls(snap["host_key"], cfg)
        state.restore(h, snap)
        return h

    def save(self, urls: KeyValue, resident: KeyValue, segments: KeyValue,
             robots: state.Slot | None = None) -> dict[str, Any]:
        """Write what changed since the last save; returns the host's own value to store."""
        return state.save(self, urls, resident, segments, robots)

    @classmethod
    def load(cls, host_key: str, saved: dict[str, Any] | None, cfg: FrontierConfig,
             urls: KeyValue, resident: KeyValue, segments: KeyValue,
             all_urls: Callable[[], Iterable[tuple[str, Any]]],
             resident_ids: Callable[[], Iterable[str]], robots: state.Slot | None = None
             ) -> HostFrontier:
        """Rebuild a host from keyed storage (see state.load)."""
        h = cls(host_key if saved is None else saved["host_key"], cfg)
        state.load(h, saved, urls, resident, segments, all_urls, resident_ids, robots)
        return h

    def check_invariants(self) -> list[str]:
        """Every URL is queued exactly once or held by a live lease: none can be lost."""
        return self.queue.problems(set(self.leases.out))
