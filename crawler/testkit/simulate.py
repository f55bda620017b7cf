"""`crawl simulate`: the whole scheduling loop on a virtual clock, against a synthetic web.

Deterministic for a seed. The frontier core (`crawler.testkit.many_hosts.Frontier`) grants
leases; a simulated fetcher with a bounded number of slots fetches them from
a model of many hosts (robots.txt variants, Retry-After, slow and failing
hosts, redirects, 404s, changing pages) and reports completions; links found
on pages flow back into discovery. An independent oracle reads the request
log and counts politeness violations.

Pages change on their own clocks: a fifth every few minutes, a quarter every half hour
or so, the rest never (virtual time; the recrawl bounds are minutes here). Every tenth
host is duplicate-heavy: four in five of its pages serve one boilerplate text. The
index's exact-duplicate check (the first URL with a body owns it) answers the frontier
when the index commits, as the job reads its index topic back. The report gives the
share of stored copies that are current (freshness, sampled every minute) and of page
fetches that found the page unchanged (wasted), for the learned priority or, with
`learned_priority=False`, the fixed one.

Some hosts hide an endless calendar (each day links to the next): the trap rules
must stop it. Faults (all on by default): lost completions (the lease expires and is re-let),
duplicate completions, duplicate lease records, leases lost on their way to the
fetcher (they expire and are re-let), robots.txt answering 5xx before it recovers,
frontier crashes restored from the last checkpoint snapshot with their inputs
replayed while the fetcher keeps running, and fetcher crashes (requests in flight
cut, held leases lost, the leases read since the fetcher's checkpoint read again by
a new incarnation). Leases and completions travel at once, as the at-least-once
topics carry them; index events only when the frontier's checkpoint commits them.
The simulated fetcher is the real one's rules: per-host back queues
(`udfs.core.backqueue`) that hold each lease until its not_before and the gap after
the host's last request, and report NOT_SENT what they will not send.
"""

from __future__ import annotations

import heapq
import json
import random
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from crawler.testkit.many_hosts import Frontier
from crawler.testkit.oracle import HostRules, Request, count_violations
from udfs.config import load_defaults
from udfs.config.policies import frontier_config
from udfs.core.backqueue import REPORTED, BackQueues, LeaseTiming, Skip
from udfs.core.frontier import Acceptance, FetchResult, FrontierConfig, Kind, Outcome
from udfs.core.politeness import Jitter
from udfs.core.recrawl import Change, Dup
from udfs.core.robots import parse_robots
from udfs.core.robots_state import RobotsPolicy
from udfs.core.urls import split_host_key

FAULTS = ("lost_completion", "duplicate_completion", "duplicate_lease", "lease_expiry",
          "robots_5xx", "crash", "fetcher_crash")
TRANSPORT_S = 0.05  # a record's trip through Kafka, either way
HOLD_S = 5.0  # fetch.hold_s
UA = RobotsPolicy().user_agent


@dataclass
class SimHost:
    key: str
    pages: int
    robots_kind: str  # rules | missing | flaky | redirect | delay
    latency_s: float
    throttle_p: float
    retry_after: str | None
    error_p: float
    max_in_flight: int = 1
    calendar: bool = False
    robots_failures_left: int = 0
    duplicate_heavy: bool = False

    def change_period(self, page: int) -> float | None:
        """Seconds between the page's changes (None: it never changes), and its phase."""
        r = Jitter(f"change:{self.key}/{page}")
        kind = r.random()
        if kind < 0.2:
            return 60.0 + 240.0 * r.random()
        if kind < 0.45:
            return 900.0 + 2700.0 * r.random()
        return None

    def version(self, page: int, now: float) -> int:
        if self.duplicate_heavy and page % 5 != 0:
            return 0  # boilerplate: its text never changes
        period = self.change_period(page)
        if period is None:
            return 0
        phase = Jitter(f"phase:{self.key}/{page}").random()
        return int(now / period + phase)

    def text(self, page: int, now: float) -> str:
        if self.duplicate_heavy and page % 5 != 0:
            return f"{self.key}/boilerplate"
        return f"{self.key}/p/{page}#{self.version(page, now)}"

    def robots_body(self) -> str:
        if self.robots_kind == "delay":
            return f"User-agent: *\nCrawl-delay: 2\nDisallow: /private/\nSitemap: {self.key}/s\n"
        return f"User-agent: *\nDisallow: /private/\nUser-agent: {UA}\nDisallow: /private/\n" \
               f"Disallow: /*?sort=\n"


class SimulatedWeb:
    """Deterministic hosts and pages; answers a request at a time, computed (no HTTP: the
    synthetic web that serves pages is crawler/testkit/synthetic_web.py)."""

    def __init__(self, n_hosts: int, rng: random.Random, faults: set[str]) -> None:
        self.rng = rng
        self.hosts: dict[str, SimHost] = {}
        kinds = ["rules", "rules", "rules", "missing", "redirect", "delay"]
        if "robots_5xx" in faults:
            kinds.append("flaky")
        for i in range(n_hosts):
            key = f"http://h{i}.sim"
            pages = 50_000 if i == 0 else int(20 * 10 ** rng.random() * 10)
            if i % 10 == 4:
                pages = 20  # a small site whose calendar is most of what it links to
            kind = rng.choice(kinds)
            host = SimHost(
                key, pages, kind, latency_s=0.05 + 0.5 * rng.random() ** 3,
                throttle_p=0.02 if i % 7 == 3 else 0.0,
                retry_after=rng.choice(["30", None]) if i % 7 == 3 else None,
                error_p=0.03 if i % 11 == 5 else 0.002,
                max_in_flight=2 if i % 13 == 6 else 1, calendar=i % 10 == 4,
                robots_failures_left=rng.randint(1, 3) if kind == "flaky" else 0,
                duplicate_heavy=i % 10 == 8)
            self.hosts[key] = host
        self.host_list = list(self.hosts.values())

    def robots_rules(self, host: SimHost):
        return parse_robots(host.robots_body())

    def links(self, host: SimHost, page: int) -> list[str]:
        r = Jitter(f"{host.key}/{page}")  # the same links every visit

        def pick(n: int) -> int:
            return int(r.random() * n)

        out = [f"{host.key}/p/{pick(host.pages)}" for _ in range(5)]
        if r.random() < 0.2:
            out.append(f"{host.key}/private/{pick(100)}")
        if r.random() < 0.1:
            out.append(f"{host.key}/p/{pick(host.pages)}?sort=asc")
        if r.random() < 0.3:
            other = self.host_list[pick(len(self.host_list))]
            out.append(f"{other.key}/p/{pick(other.pages)}")
        if host.calendar and r.random() < 0.5:
            out.append(f"{host.key}/cal/{page}")  # the door into an endless calendar
        return out

    def answer(self, host: SimHost, kind: Kind, path: str, now: float
               ) -> tuple[int, dict[str, Any]]:
        """(HTTP status or 0 for a connection error, details)."""
        rng = self.rng
        if kind is Kind.ROBOTS:
            if host.robots_failures_left > 0:
                host.robots_failures_left -= 1
                return 503, {}
            if host.robots_kind == "missing":
                return 404, {}
            if host.robots_kind == "redirect" and path == "/robots.txt":
                return 301, {"location": "/real-robots.txt"}
            return 200, {"body": host.robots_body()}
        if rng.random() < host.throttle_p:
            return 429 if host.retry_after else 503, {"retry_after": host.retry_after}
        if rng.random() < host.error_p:
            return rng.choice([500, 0]), {}
        if path.startswith("/cal/"):  # a calendar trap: every day links to the next ones
            day = int(path.split("/")[2].split("?")[0])
            return 200, {"text": f"{host.key}{path}", "links": [
                f"{host.key}/cal/{day + 1}", f"{host.key}/cal/{day + 7}?view=week"]}
        if path == "/" or path.startswith("/p/"):
            page = 0 if path == "/" else int(path.split("/")[2].split("?")[0])
            if page % 97 == 13:
                return 404, {}
            if page % 89 == 7:
                return 301, {"location": f"{host.key}/p/{(page + 1) % host.pages}"}
            return 200, {"text": host.text(page, now), "links": self.links(host, page),
                         "page": page}
        return 404, {}


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class SimConfig:
    hosts: int = 1000
    fetches: int = 100_000
    seed: int = 1
    faults: tuple[str, ...] = FAULTS
    fetch_slots: int = 2000
    checkpoint_s: float = 5.0
    crashes: int = 3
    fault_p: float = 0.01
    learned_priority: bool = True  # recrawl.learned_priority
    freshness_every_s: float = 60.0


def simulation_frontier_config() -> FrontierConfig:
    """The configured policies, with recrawl intervals shrunk from days to minutes so a
    run of virtual minutes exercises revisits; politeness stays as configured."""
    cfg = frontier_config(load_defaults())
    recrawl = replace(cfg.recrawl, min_interval_s=60.0, max_interval_s=1800.0,
                      high_value_interval_s=60.0, tombstone_interval_s=5400.0,
                      failed_visit_interval_s=600.0)
    return replace(cfg, recrawl=recrawl, lease_timeout_s=30.0, retry_base_s=5.0)


class Simulation:
    def __init__(self, sc: SimConfig) -> None:
        self.sc = sc
        self.rng = random.Random(sc.seed)
        self.faults = set(sc.faults)
        cfg = simulation_frontier_config()
        self.cfg = replace(cfg, recrawl=replace(cfg.recrawl,
                                                learned_priority=sc.learned_priority))
        self.web = SimulatedWeb(sc.hosts, random.Random(sc.seed + 1), self.faults)
        self.frontier = Frontier(self.cfg, sc.seed)
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.queues = BackQueues(float("-inf"), HOLD_S, 21.0)  # the fetcher incarnation
        self.incarnation = 0
        self.read_since_checkpoint: list[Any] = []  # leases the fetcher read (replayed)
        self.backlog: deque = deque()  # leases whose turn came, waiting for a fetch slot
        self.waiting: dict[str, list[Any]] = {}  # per host: leases waiting for a request
        self.busy = 0
        self.running: dict[int, tuple[Any, float, int]] = {}  # log index → lease, start
        self.log: list[Request] = []
        self.input_log: list[tuple[str, Any]] = []
        self.snapshot = self.frontier.snapshot()
        self.snapshot_admitted: dict[str, int] = {}
        self.admitted: dict[str, int] = {}  # url → admissions (must stay 1)
        self.indexed: dict[tuple[str, int], int] = {}
        self.pending_index: list[tuple[str, int]] = []  # emitted, not yet committed
        self.lags: list[float] = []
        self.m: dict[str, int] = {k: 0 for k in (
            "fetches", "robots_fetches", "completions_lost", "completions_duplicated",
            "leases_dropped_expired", "leases_duplicated", "crashes", "fetcher_crashes",
            "accepted", "duplicates", "stale", "index_events", "double_completions",
            "refused", "not_sent", "replayed_skipped", "page_fetches", "unchanged_fetches",
            "duplicates_reported", "dup_host_fetches")}
        # The index's exact-duplicate state (body → first url_id), the events waiting
        # for the commit that gives them their duplicate check, and the copies stored.
        self.body_owner: dict[str, str] = {}
        self.pending_checks: list[tuple[str, str, int, str, bool]] = []
        self.stored: dict[tuple[str, int], int] = {}  # (host, page) → version fetched
        self.fresh_samples: list[float] = []
        self.dup_host_pages: set[tuple[str, int]] = set()

    # -- plumbing -------------------------------------------------------------

    def at(self, when: float, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, payload))

    def discover(self, url: str, now: float, **kw: Any) -> None:
        self.input_log.append(("discover", (url, now, kw)))
        adm = self.frontier.discover(url, now, **kw)
        if adm.accepted:
            self.admitted[url] = self.admitted.get(url, 0) + 1
        elif adm.reason != "known":
            self.m["refused"] += 1

    def poll(self, now: float) -> None:
        for lease in self.frontier.poll(now):
            if lease.kind is Kind.PAGE:
                h = self.frontier.hosts[lease.host_key]
                u = h.urls[lease.url_id]
                if u.priority >= self.cfg.recrawl.high_value_priority:
                    self.lags.append(now - u.next_fetch_at)
            self.deliver(lease, now + TRANSPORT_S)
            if "duplicate_lease" in self.faults and self.rng.random() < self.sc.fault_p:
                self.m["leases_duplicated"] += 1
                self.deliver(lease, now + TRANSPORT_S + self.rng.random() * 3)

    def deliver(self, lease, when: float) -> None:
        if "lease_expiry" in self.faults and self.rng.random() < self.sc.fault_p:
            self.m["leases_dropped_expired"] += 1  # lost on the way: it expires
            return
        self.at(when, "deliver", lease)

    # -- checkpoints and crashes ------------------------------------------------

    def checkpoint(self, now: float) -> None:
        self.snapshot = self.frontier.snapshot()
        self.snapshot_admitted = dict(self.admitted)
        self.input_log.clear()
        for ident in self.pending_index:  # the index topic's transaction commits
            self.indexed[ident] = self.indexed.get(ident, 0) + 1
            self.m["index_events"] += 1
            if self.indexed[ident] > 1:
                self.m["double_completions"] += 1
        self.pending_index.clear()
        # The committed events' duplicate checks; the frontier reads them back (its
        # inputs since this checkpoint: a crash replays them).
        checks, self.pending_checks = self.pending_checks, []
        for host_key, url_id, version, body, new_page in checks:
            owner = self.body_owner.setdefault(body, url_id)
            if owner != url_id:
                self.feedback((host_key, url_id, version, new_page), now)
        self.read_since_checkpoint.clear()  # the fetcher's checkpoint, at the same time

    def crash(self, now: float) -> None:
        """Lose the frontier's memory; restore the last snapshot and replay its inputs.
        The leases it granted since are already with the fetcher, which keeps running."""
        self.m["crashes"] += 1
        replay = list(self.input_log)
        self.frontier = Frontier.restore(self.snapshot, self.cfg, self.sc.seed, now)
        self.admitted = dict(self.snapshot_admitted)
        self.pending_index.clear()  # uncommitted: aborted with the transaction
        self.pending_checks.clear()
        self.input_log.clear()
        for kind, args in replay:  # the sources rewind to the checkpoint's offsets
            if kind == "discover":
                url, _, kw = args
                self.discover(url, now, **kw)
            elif kind == "duplicate":
                self.feedback(args, now)
            else:
                self.complete(args, now)

    def feedback(self, args: tuple[str, str, int, bool], now: float) -> None:
        self.input_log.append(("duplicate", args))
        host_key, url_id, version, new_page = args
        if self.frontier.duplicate(host_key, url_id, version, Dup.EXACT, new_page, now):
            self.m["duplicates_reported"] += 1

    def sample_freshness(self, now: float) -> None:
        """The share of stored copies that match the page as it is now."""
        if not self.stored:
            return
        hosts = self.web.hosts
        current = sum(hosts[h].version(page, now) == v for (h, page), v in self.stored.items())
        self.fresh_samples.append(current / len(self.stored))

    # -- the fetcher ------------------------------------------------------------

    @staticmethod
    def timing(lease) -> LeaseTiming:
        return LeaseTiming(lease.lease_id, lease.host_key, lease.issued_at, lease.not_before,
                           lease.expires_at, lease.prev_lease_id, lease.pace,
                           lease.throttle_seq)

    def received(self, lease, now: float) -> None:
        """A lease record reaches the fetcher."""
        self.read_since_checkpoint.append(lease)
        skip = self.queues.admit(self.timing(lease), now)
        if skip is not None:
            self.skipped(lease, skip, now)
            return
        self.try_start(lease, now)

    def skipped(self, lease, skip: Skip, now: float) -> None:
        if skip is Skip.REPLAYED:
            self.m["replayed_skipped"] += 1
        if skip not in REPORTED:
            return
        self.m["not_sent"] += 1
        start = self.queues.start_at(self.timing(lease), now)
        hint = str(int(start - now) + 1) if start > now + 1 else None
        result = FetchResult(lease.lease_id, lease.url_id, lease.url_version,
                             Outcome.NOT_SENT, lease.kind, lease.attempt, retry_after=hint,
                             fetched_at=now, detail=skip.value)
        self.at(now + TRANSPORT_S, "complete", (result, lease.host_key, []))

    def try_start(self, lease, now: float) -> None:
        t = self.timing(lease)
        verdict = self.queues.wait(t, now)
        if isinstance(verdict, Skip):
            self.skipped(lease, verdict, now)
        elif verdict is None:  # at the host's in-flight limit: when a request ends
            self.waiting.setdefault(lease.host_key, []).append((self.incarnation, lease))
        elif verdict > 0:
            self.at(now + verdict, "try", (self.incarnation, lease))
        elif self.busy >= self.sc.fetch_slots:
            self.backlog.append((self.incarnation, lease))
        else:
            self.queues.begin(t, now)
            self.fetch(lease, now)

    def start_fetches(self, now: float) -> None:
        while self.backlog and self.busy < self.sc.fetch_slots:
            incarnation, lease = self.backlog.popleft()
            if incarnation == self.incarnation:
                self.try_start(lease, now)

    def fetch(self, lease, now: float) -> None:
        host = self.web.hosts[lease.host_key]
        path = lease.url[len(lease.host_key):]
        status, details = self.web.answer(host, lease.kind, path, now)
        duration = min(host.latency_s * (1 + self.rng.random()), 20.0)
        end = now + duration
        ra = details.get("retry_after")
        self.log.append(Request(lease.host_key, lease.kind is Kind.ROBOTS, path, now, end,
                                status, float(ra) if ra and status == 429 else None))
        self.m["fetches"] += 1
        if lease.kind is Kind.ROBOTS:
            self.m["robots_fetches"] += 1
        page = details.get("page")
        if page is not None and status == 200:
            self.m["page_fetches"] += 1
            current = host.version(page, now)
            if self.stored.get((host.key, page)) == current:  # (never None: a version)
                self.m["unchanged_fetches"] += 1
            self.stored[(host.key, page)] = current
            if host.duplicate_heavy:
                self.m["dup_host_fetches"] += 1
                self.dup_host_pages.add((host.key, page))
        self.busy += 1
        self.running[len(self.log) - 1] = (lease, now, self.incarnation)
        self.at(end, "fetched", (lease, status, details, duration, len(self.log) - 1,
                                 self.incarnation))

    def fetcher_crash(self, now: float) -> None:
        """The fetcher's task dies: requests in flight are cut now, held leases and unsent
        completions are gone, and a new incarnation reads again every lease read since
        the fetcher's last checkpoint."""
        self.m["fetcher_crashes"] += 1
        for index, (_, start, _) in self.running.items():
            r = self.log[index]
            self.log[index] = Request(r.host, r.is_robots, r.path, start, now, 0)
        self.running.clear()
        self.busy = 0
        self.backlog.clear()
        self.waiting.clear()
        self.incarnation += 1
        self.queues = BackQueues(now, HOLD_S, 21.0)
        replay, self.read_since_checkpoint = list(self.read_since_checkpoint), []
        for lease in replay:
            self.at(now + 1.0 + TRANSPORT_S, "deliver", lease)

    def fetched(self, payload, now: float) -> None:
        lease, status, details, duration, index, incarnation = payload
        if incarnation != self.incarnation:
            return  # cut by a fetcher crash: no completion
        self.busy -= 1
        self.running.pop(index, None)
        throttled = status in (429, 503) and lease.kind is not Kind.ROBOTS
        ra = details.get("retry_after")
        self.queues.end(self.timing(lease), now, duration, throttled=throttled,
                        retry_until=now + float(ra) if throttled and ra else None)
        for _, waiter in self.waiting.pop(lease.host_key, []):
            self.at(now, "try", (self.incarnation, waiter))
        outcome = {200: Outcome.OK, 301: Outcome.REDIRECT, 404: Outcome.GONE,
                   429: Outcome.THROTTLED, 503: Outcome.THROTTLED, 500: Outcome.SERVER_ERROR,
                   0: Outcome.CONNECT_ERROR}[status]
        if lease.kind is Kind.ROBOTS and status == 503:
            outcome = Outcome.SERVER_ERROR
        text = details.get("text")
        result = FetchResult(
            lease.lease_id, lease.url_id, lease.url_version, outcome, lease.kind, lease.attempt,
            http_status=status or None, fetch_duration_s=duration,
            retry_after=details.get("retry_after"), redirect_location=details.get("location"),
            body_sha256=text and f"b:{text}", text_sha256=text and f"t:{text}",
            robots_body=details.get("body"), fetched_at=now)
        delay = TRANSPORT_S
        if "lost_completion" in self.faults and self.rng.random() < self.sc.fault_p:
            self.m["completions_lost"] += 1
        else:
            self.at(now + delay, "complete", (result, lease.host_key, details.get("links", [])))
            if "duplicate_completion" in self.faults and self.rng.random() < self.sc.fault_p:
                self.m["completions_duplicated"] += 1
                self.at(now + delay + self.rng.random() * 20, "complete",
                        (result, lease.host_key, details.get("links", [])))
        self.start_fetches(now)

    def complete(self, payload, now: float) -> None:
        self.input_log.append(("complete", payload))
        result, host_key, links = payload
        out = self.frontier.complete(result, host_key, now)
        key = {Acceptance.ACCEPTED: "accepted", Acceptance.DUPLICATE: "duplicates",
               Acceptance.STALE: "stale"}[out.verdict]
        self.m[key] += 1
        if out.verdict is not Acceptance.ACCEPTED:
            return
        if out.index:
            self.pending_index.append((result.url_id, result.url_version))
            self.pending_checks.append((host_key, result.url_id, result.url_version,
                                        result.body_sha256 or "", out.change is Change.NEW))
        h = self.frontier.hosts[host_key]
        depth = h.urls[result.url_id].depth if result.kind is Kind.PAGE else 0
        for url in links:
            self.discover(url, now, depth=depth + 1)
        for url, d, hops, _ in out.discovered:
            self.discover(url, now, depth=d + 1, redirect_hops=hops)

    # -- main loop ----------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        sc = self.sc
        for host in self.web.hosts.values():
            self.discover(host.key + "/", 0.0, is_seed=True)
            if host.max_in_flight > 1:
                h = self.frontier.host(host.key)
                h.set_policy(h.pacer.policy.override({"max_in_flight": host.max_in_flight}, 1))
        crash_every = sc.fetches // (sc.crashes + 1) if "crash" in self.faults and \
            sc.crashes else None
        next_crash = crash_every
        fetcher_crash_every = sc.fetches // (sc.crashes + 1) if "fetcher_crash" in \
            self.faults and sc.crashes else None
        next_fetcher_crash = None if fetcher_crash_every is None else \
            fetcher_crash_every + fetcher_crash_every // 2
        next_checkpoint = sc.checkpoint_s
        next_sample = sc.freshness_every_s
        now = 0.0
        guard = 0
        while self.m["fetches"] < sc.fetches:
            guard += 1
            if guard > 50 * sc.fetches + 10_000:
                raise RuntimeError("simulation stopped making progress")
            wake = self.frontier.next_wake()
            candidates = [next_checkpoint]
            if self.events:
                candidates.append(self.events[0][0])
            if wake is not None:
                candidates.append(wake)
            now = max(now, min(candidates))
            while self.events and self.events[0][0] <= now:
                _, _, kind, payload = heapq.heappop(self.events)
                if kind == "fetched":
                    self.fetched(payload, now)
                elif kind == "deliver":
                    self.received(payload, now)
                elif kind == "try":
                    incarnation, lease = payload
                    if incarnation == self.incarnation:
                        self.try_start(lease, now)
                else:
                    self.complete(payload, now)
            self.poll(now)
            if now >= next_checkpoint:
                self.checkpoint(now)
                next_checkpoint = now + sc.checkpoint_s
            if now >= next_sample:
                self.sample_freshness(now)
                next_sample = now + sc.freshness_every_s
            if next_crash is not None and self.m["fetches"] >= next_crash and \
                    self.m["crashes"] < sc.crashes:
                self.crash(now)
                next_crash += crash_every
            if next_fetcher_crash is not None and self.m["fetches"] >= next_fetcher_crash \
                    and self.m["fetcher_crashes"] < sc.crashes:
                self.fetcher_crash(now)
                next_fetcher_crash += fetcher_crash_every
        return self.report(now)

    # -- the oracle ---------------------------------------------------------------

    def violations(self) -> dict[str, int]:
        policy = self.cfg.host
        rules = {key: HostRules(
            max_in_flight=host.max_in_flight,
            min_gap_s=max(policy.min_gap_s, 2.0 if host.robots_kind == "delay" else 0.0),
            robots=None if host.robots_kind == "missing" else self.web.robots_rules(host))
            for key, host in self.web.hosts.items()}
        return count_violations(self.log, rules, UA)

    def report(self, now: float) -> dict[str, Any]:
        self.checkpoint(now)  # commit what the last interval produced
        lost = 0
        for url, n in self.admitted.items():
            h = self.frontier.hosts.get(split_host_key(url)[0])
            if n != 1 or h is None or h.find(url)[1] is None:
                lost += 1
        invariant_problems = sum(len(h.check_invariants()) for h in self.frontier.hosts.values())
        v = self.violations()
        return {
            "seed": self.sc.seed, "hosts": self.sc.hosts, "faults": sorted(self.faults),
            "fetches": self.m["fetches"], "robots_fetches": self.m["robots_fetches"],
            "virtual_seconds": round(now, 3),
            "violations": sum(v.values()), "violations_by_kind": v,
            "lost_urls": lost + invariant_problems,
            "double_completions": self.m["double_completions"],
            "urls_known": sum(len(h.urls) for h in self.frontier.hosts.values()),
            "index_events": self.m["index_events"],
            "completions": {k: self.m[k] for k in ("accepted", "duplicates", "stale")},
            "faults_injected": {k: self.m[k] for k in (
                "completions_lost", "completions_duplicated", "leases_duplicated",
                "leases_dropped_expired", "crashes", "fetcher_crashes")},
            "leases_not_sent": self.m["not_sent"],
            "leases_replayed_skipped": self.m["replayed_skipped"],
            "refused_by_traps": self.m["refused"],
            "learned_priority": self.sc.learned_priority,
            "freshness": round(sum(self.fresh_samples) / max(1, len(self.fresh_samples)), 4),
            "wasted_fetch_share": round(self.m["unchanged_fetches"] /
                                        max(1, self.m["page_fetches"]), 4),
            "page_fetches": self.m["page_fetches"],
            "pages_covered": len(self.stored),
            "duplicate_heavy_hosts": {"fetches": self.m["dup_host_fetches"],
                                      "pages_covered": len(self.dup_host_pages),
                                      "duplicates_reported": self.m["duplicates_reported"]},
            "eligibility_lag_s": {"p50": round(_percentile(self.lags, 0.5), 3),
                                  "p99": round(_percentile(self.lags, 0.99), 3),
                                  "high_priority_leases": len(self.lags)},
        }


def simulate(sc: SimConfig) -> dict[str, Any]:
    return Simulation(sc).run()


def main_line(sc: SimConfig) -> str:
    return json.dumps(simulate(sc), sort_keys=True)
