"""What the host frontier decides with: its settings, and the size gauges it reports."""

from __future__ import annotations

from dataclasses import dataclass

from udfs.core.politeness import HostPolicy
from udfs.core.recrawl import RecrawlPolicy
from udfs.core.robots_state import RobotsPolicy
from udfs.core.traps import DAY_S, TrapPolicy

GAUGES = ("frontier_hosts", "frontier_urls_pending", "frontier_urls_cold",
          "frontier_hosts_backoff", "frontier_hosts_robots_blocked", "frontier_hosts_paused")
RECENT_OUTCOMES = 8  # the last fetch outcomes a host keeps, for `crawl host show`


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
    cache_hosts: int = 10_000  # and in hosts
    # The intake's memory of URLs sent to their hosts lately (recent.py): how many,
    # for how long.
    intake_recent_urls: int = 100_000
    intake_recent_s: float = 600.0
    near_duplicate_bucket: int = 1000  # the job's index stage: SimHashes kept per band value
    # Look-ahead: leases granted before their time (the fetcher holds them until their
    # not_before and enforces the gap at request time), so that a host's pace is not
    # the round trip of lease and completion. Up to max_lookahead_leases beyond the
    # host's in-flight limit, each due within lookahead_s. 0 and 0: one lease at a time.
    lookahead_s: float = 2.5
    max_lookahead_leases: int = 10
    max_grants_per_call: int = 16  # leases per call of the frontier operator, per host
    clock_idle_ms: int = 1000  # the frontier job's crawl clock (see the defaults file)
    clock_topic: str = ""
    # A hot host's queue, partitioned (udfs/core/shards.py): past shard_above_urls known
    # URLs, new ones go to host_shards shards; the owner pulls shard_refill_urls at a
    # time when its own pending URLs fall below that. 0: never.
    shard_above_urls: int = 1_000_000
    host_shards: int = 64
    shard_refill_urls: int = 5000
    shard_pull_timeout_s: float = 120.0
