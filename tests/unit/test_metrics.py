"""The jobs' metrics (issue 14, item 1): outcome classes and the fetcher's politeness
self-check on a virtual clock, and the operators' counters as the jobs build them."""

from __future__ import annotations

import asyncio

import pytest

from udfs.config import load_config
from udfs.core.selfcheck import BREACHES, OUTCOME_CLASSES, PolitenessSelfCheck, outcome_class
from udfs.fetcher.pipeline import PARSE_BUCKETS_S, PageStats

from .test_config_keys import (  # noqa: F401  (world: the fixture)
    LOOPBACK_NETS,
    FetcherJob,
    FrontierJob,
    crawl,
    p_cluster,
    seeds,
    world,
)

H = "http://a.test"


# -- outcome classes ------------------------------------------------------------------

@pytest.mark.parametrize(("outcome", "status", "cls"), [
    ("OK", 200, "2xx"), ("NOT_MODIFIED", 304, "304"), ("REDIRECT", 301, "3xx"),
    ("GONE", 404, "404_410"), ("GONE", 410, "404_410"), ("CLIENT_ERROR", 403, "other_4xx"),
    ("THROTTLED", 429, "429"), ("THROTTLED", 503, "503"), ("SERVER_ERROR", 503, "503"),
    ("SERVER_ERROR", 500, "other_5xx"), ("DNS_ERROR", None, "dns"),
    ("CONNECT_ERROR", None, "connect"), ("TIMEOUT", None, "timeout"),
    ("ADDRESS_BLOCKED", None, "refused_address"), ("TOO_LARGE", 200, "too_large"),
    ("NOT_SENT", None, "not_sent"), ("PARSE_TIMEOUT", 200, "parse_timeout"),
    ("OTHER_ERROR", None, "other")])
def test_every_outcome_has_its_class(outcome, status, cls):
    assert outcome_class(outcome, status) == cls
    assert cls in OUTCOME_CLASSES


# -- the politeness self-check ------------------------------------------------------------

def test_a_paced_host_breaks_nothing():
    check = PolitenessSelfCheck()
    for i in range(5):
        assert check.start(H, 10.0 + i * 1.5, gap_s=1.0, max_in_flight=1) == []
        check.end(H, 10.5 + i * 1.5)
    assert check.breaches == dict.fromkeys(BREACHES, 0) and check.starts == 5


def test_each_rule_is_counted_when_broken():
    check = PolitenessSelfCheck()
    check.start(H, 0.0, 1.0, 1)
    assert check.start(H, 0.1, 1.0, 1) == ["in_flight", "gap"]  # overlapping and too soon
    check.end(H, 0.2)
    check.end(H, 0.3, retry_until=30.0)  # a 429 asked for 30 s
    assert check.start(H, 5.0, 1.0, 1) == ["retry_after"]
    check.end(H, 5.1)
    assert check.start(H, 30.0, 1.0, 1) == []
    assert check.breaches == {"in_flight": 1, "gap": 1, "retry_after": 1}


def test_two_in_flight_when_the_host_allows_two_and_hosts_are_separate():
    check = PolitenessSelfCheck()
    assert check.start(H, 0.0, 1.0, 2) == []
    assert check.start(H, 0.1, 1.0, 2) == []  # no gap rule for a concurrent host
    assert check.start(H, 0.2, 1.0, 2) == ["in_flight"]
    assert check.start("http://b.test", 0.2, 1.0, 1) == []


def test_the_self_check_forgets_idle_hosts_not_busy_ones():
    check = PolitenessSelfCheck(max_hosts=2)
    check.start("http://busy.test", 0.0, 1.0, 1)
    check.start("http://a.test", 0.0, 1.0, 1)
    check.end("http://a.test", 0.1)
    check.start("http://c.test", 0.2, 1.0, 1)
    assert set(check.hosts) == {"http://busy.test", "http://c.test"}


# -- the frontier job's counters ------------------------------------------------------------

def test_the_frontier_counts_its_events_and_the_eligibility_lag(world):  # noqa: F811
    cfg = load_config(env={})
    job = crawl(cfg, world, [seeds("/", "/a"), seeds("/b", source="LINK", depth=1),
                             seeds("/", source="LINK", depth=1), seeds("/")], 30)
    m = job.runtime.metrics
    pages = len(job.grants())
    assert pages == 3 and len(job.grants(kind="ROBOTS")) == 1
    assert m.read("frontier_events_total", event="leases_granted") == pages
    assert m.read("frontier_events_total", event="robots_leases") == 1
    assert m.read("frontier_events_total", event="urls_admitted") == 3
    # "/" again: as a link, kept back by the intake (its host had it); as a seed, sent.
    assert job.intake_runtime.metrics.read("urls_rediscovered_at_intake") == 1
    assert m.read("frontier_events_total", event="urls_known") == 1
    # Seeds are high-value, the link is not; every lease is in its class's count, and
    # the cumulative buckets hold it from its lag on.
    high = m.read("eligibility_lag_seconds_count", priority_class="high")
    normal = m.read("eligibility_lag_seconds_count", priority_class="normal")
    assert (high, normal) == (2, 1)
    assert m.read("eligibility_lag_seconds_bucket", priority_class="high", le="86400") == 2
    assert m.read("eligibility_lag_seconds_bucket", priority_class="normal", le="+Inf") == 1
    # The first lease waited for robots.txt, the rest a gap each: all within 5 s.
    assert m.read("eligibility_lag_seconds_bucket", priority_class="high", le="5") == 2


def test_the_frontier_size_gauges_follow_each_host_and_restart_from_zero(world):  # noqa: F811
    from .test_config_keys import Answer, _Metrics

    cfg = load_config(env={})
    other = "http://b.test"
    throttled = {"n": 0}

    def respond(lease, job):  # b.test answers its first page with a long 429
        if lease["url"].startswith(other) and throttled["n"] == 0:
            throttled["n"] += 1
            return Answer("THROTTLED", 429, retry_after="600")
        return Answer()

    job = crawl(cfg, world, [seeds("/", "/a", "/b"), seeds("/", "/x", host=other)], 20,
                respond=respond)
    m = job.runtime.metrics
    assert m.read("frontier_hosts") == 2
    # Known URLs not leased: a.test's three are fetched (waiting for their revisit),
    # b.test's two wait out the backoff; no lease is out once the answers are in.
    assert m.read("frontier_urls_pending") == 5
    assert m.read("frontier_hosts_backoff") == 1 and m.read("frontier_urls_cold") == 0
    assert m.read("frontier_hosts_robots_blocked") == 0 == m.read("frontier_hosts_paused")
    # Every page lease saw a robots.txt fetched within the minute.
    pages = len(job.grants())
    assert m.read("robots_age_seconds_count") == pages == \
        m.read("robots_age_seconds_bucket", le="60")
    # The backoff ends: the host's timer moves the gauge back.
    with job.clock():
        job.run(700)
    assert m.read("frontier_hosts_backoff") == 0
    # A restart: Flink's counters start from zero, and each host adds its share once
    # when it is next touched (not twice: it was counted by the earlier incarnation).
    job.runtime.metrics = _Metrics()
    job.fn.open(job.runtime)
    job.runtime.metrics.flushers.append(job.fn.metrics.batch.flush)
    with job.clock():
        job.discover([H + "/c"])
        job.discover([other + "/y"])
        job.discover([H + "/d"])
    m = job.runtime.metrics
    assert m.read("frontier_hosts") == 2


def test_a_host_wakes_when_its_backoff_ends_though_nothing_is_due():
    # The size gauges recount a host when it is touched: the end of a backoff must
    # touch it, or a host whose last URL was parked reads "in backoff" for a week.
    from udfs.core.frontier import Outcome

    from .test_frontier import H as HOST
    from .test_frontier import host, ok, with_robots

    h = host()
    t = with_robots(h, urls=[HOST + "/a"])
    for _ in range(4):  # 500 each time: retried with backoff, then parked
        lease = None
        for _ in range(10):  # to the next wake that grants (a backoff's end may not)
            t = max(t, h.next_wake(t))
            lease = h.poll(t)
            if lease is not None:
                break
        t = max(t, lease.not_before)
        h.complete(ok(lease, Outcome.SERVER_ERROR, http_status=500), t)
    assert h.urls[lease.url_id].status.value == "PARKED" and h.pacer.backoff_until > t + 60
    assert h.next_wake(t) == h.pacer.backoff_until
    assert h.gauges(t)[3] == 1 and h.gauges(h.pacer.backoff_until)[3] == 0


def test_the_intake_counts_dead_letters_by_reason(world):  # noqa: F811
    cfg = load_config(env={})
    job = FrontierJob(cfg, world)
    with job.clock():
        job._send("discovered", b"k", b"not avro")
        job._send("completions", b"k", b"\x00\x01")
    assert len(job.dead) == 2
    reasons = {labels: c.count for (name, labels), c in job.intake_runtime.metrics.registry
               .items() if name == "dead_letters_total"}
    assert sum(reasons.values()) == 2 and all(k[0][0] == "reason" for k in reasons)


# -- the fetcher job's gauges ---------------------------------------------------------------

def test_the_fetcher_counts_outcomes_bytes_and_requests_and_breaks_no_rule(world):  # noqa: F811
    cfg = load_config(env={}, overrides=LOOPBACK_NETS)
    job = FetcherJob(cfg, world)
    m = job.runtime.metrics

    async def go():
        try:
            ok = await job.fetch(world.url("/page"))
            gone = await job.fetch(world.url("/missing"))
            return ok, gone
        finally:
            await job.close()

    ok, gone = asyncio.run(go())
    assert (ok.outcome, gone.outcome) == ("OK", "GONE")
    assert m.read("fetches_total", outcome="2xx") == 1
    assert m.read("fetches_total", outcome="404_410") == 1
    assert m.read("bytes_fetched_total") == ok.body_bytes > 0
    assert m.read("requests_started_total") == 2
    assert all(m.read("politeness_breaches_total", rule=r) == 0 for r in BREACHES)


def test_the_fetcher_counts_robots_fetches_stored_bytes_and_parse_times(world):  # noqa: F811
    # A fresh object folder: a body already stored is not written (nor counted) again.
    objects = world.fresh_dir("objects")
    cfg = load_config(env={}, overrides=[*LOOPBACK_NETS, f"storage.local_dir={objects}"])
    job = FetcherJob(cfg, world)
    m = job.runtime.metrics

    async def go():
        try:
            robots = await job.fetch(world.url("/robots/10"), kind="ROBOTS")
            first = await job.fetch(world.url("/page"))
            again = await job.fetch(world.url("/page"))  # the same bytes: stored once
            gone = await job.fetch(world.url("/missing"))
            return robots, first, again, gone
        finally:
            await job.close()

    robots, first, again, gone = asyncio.run(go())
    assert (robots.outcome, first.outcome, again.outcome, gone.outcome) == (
        "OK", "OK", "OK", "GONE")
    assert m.read("robots_fetches_total", outcome="2xx") == 1
    assert sum(m.read("robots_fetches_total", outcome=c) for c in OUTCOME_CLASSES) == 1
    assert m.read("fetches_total", outcome="2xx") == 3
    assert m.read("bytes_stored_total") == first.body_bytes > 0
    assert m.read("bytes_fetched_total") == robots.body_bytes + 2 * first.body_bytes
    # Two pages parsed (robots.txt and the 404 are not pages): the cumulative buckets
    # never decrease and +Inf holds every page.
    buckets = [m.read("parse_seconds_bucket", le=str(b)) for b in PARSE_BUCKETS_S]
    buckets.append(m.read("parse_seconds_bucket", le="+Inf"))
    assert m.read("parse_seconds_count") == 2 == buckets[-1]
    assert buckets == sorted(buckets)
    assert m.read("parse_microseconds_sum") > 0
    assert m.read("parse_backlog") == 0


def test_parse_times_fall_in_every_bucket_from_their_bound_on():
    stats = PageStats()
    stats.parse_took(0.001)  # on a bound: counted in that bucket (le: less or equal)
    stats.parse_took(0.2)
    stats.parse_took(60.0)  # beyond the last bound: +Inf only
    le = dict(zip((*PARSE_BUCKETS_S, "+Inf"), stats.buckets, strict=True))
    assert (le[0.001], le[0.1], le[0.25], le[5.0], le["+Inf"]) == (1, 1, 2, 2, 3)
    assert stats.parsed == 3 and stats.parse_us == 60_201_000


def test_a_page_waiting_for_its_parse_is_in_the_backlog(world):  # noqa: F811
    """The parse stalls 0.5 s (a fault): meanwhile the gauge reads one page in hand."""
    cfg = load_config(env={}, overrides=[*LOOPBACK_NETS, "faults.parse_delay_s=0.5",
                                         f"storage.local_dir={world.fresh_dir('objects')}"])
    job = FetcherJob(cfg, world)
    seen: list[int] = []

    async def go():
        fetch = asyncio.create_task(job.fetch(world.url("/page")))
        try:
            while not fetch.done():
                seen.append(job.runtime.metrics.read("parse_backlog"))
                await asyncio.sleep(0.02)
            return await fetch
        finally:
            await job.close()

    assert asyncio.run(go()).outcome == "OK"
    assert max(seen) == 1 and job.runtime.metrics.read("parse_backlog") == 0


# -- the session cluster's reporter -------------------------------------------------------

def test_the_session_cluster_runs_the_reporter_on_its_port_range_unless_told_not_to(
        world):  # noqa: F811
    conf, _, _ = p_cluster(load_config(env={}), world)
    assert conf["metrics.reporter.prom.port"] == "9260-9279"
    assert conf["metrics.reporter.prom.factory.class"] == \
        "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"
    off, _, _ = p_cluster(load_config(env={}, overrides=['cluster.metrics_ports=""']), world)
    assert not any(k.startswith("metrics.reporter") for k in off)
