"""The frontier core on a virtual clock: politeness, leases and versions, outcomes, recrawl."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from crawler.testkit.many_hosts import Frontier
from udfs.config import load_defaults
from udfs.config.policies import (
    frontier_config,
    host_policy,
    recrawl_policy,
    robots_policy,
    trap_policy,
)
from udfs.core.frontier import (
    Acceptance,
    FetchResult,
    FrontierConfig,
    HostFrontier,
    Kind,
    Outcome,
    UrlStatus,
)
from udfs.core.frontier.hearing import SILENCE_S, FetcherHearing
from udfs.core.politeness import HostPolicy
from udfs.core.recrawl import Change, RecrawlPolicy
from udfs.core.robots_state import RobotsPolicy
from udfs.core.traps import DAY_S, TrapPolicy

DEFAULTS = load_defaults()
# The host rules one lease at a time (no look-ahead); the look-ahead tests use LOOKAHEAD.
LOOKAHEAD = replace(frontier_config(DEFAULTS), lookahead_s=2.0,
                    max_lookahead_leases=2)
CFG = replace(LOOKAHEAD, lookahead_s=0.0, max_lookahead_leases=0)
H = "http://h.example"
ROBOTS = "User-agent: *\nDisallow: /private/\n"


def test_policy_dataclass_defaults_match_the_defaults_file():
    # The defaults file is the one source; the dataclasses' own defaults must not drift.
    # (tests/unit/test_config_schema.py checks every policy built in udfs/config/policies.py.)
    for cls, build in ((HostPolicy, host_policy), (RobotsPolicy, robots_policy),
                       (RecrawlPolicy, recrawl_policy), (TrapPolicy, trap_policy)):
        assert cls() == build(DEFAULTS), cls.__name__
    own = {f.name for f in fields(FrontierConfig)} - {"host", "robots", "recrawl", "traps"}
    assert {k: getattr(FrontierConfig(), k) for k in own} == DEFAULTS["frontier"]


def ok(lease, outcome=Outcome.OK, duration=0.0, **kw):
    return FetchResult(lease.lease_id, lease.url_id, lease.url_version, outcome, lease.kind,
                       lease.attempt, fetch_duration_s=duration, **kw)


def host(cfg=CFG, **policy):
    return HostFrontier(H, cfg, seed=1, policy=replace(cfg.host, **policy) if policy else None)


def with_robots(h, now=0.0, body=ROBOTS, urls=()):
    """Discover `urls`, then grant and complete the robots.txt lease that must come first;
    returns the time the host's token is free again."""
    for url in urls:
        h.discover(url, now)
    if not urls and not h.urls:
        h.discover(H + "/", now)  # robots.txt is only fetched for a host with work
    lease = h.poll(now)
    assert lease is not None and lease.kind is Kind.ROBOTS and lease.url == H + "/robots.txt"
    res = h.complete(ok(lease, http_status=200, robots_body=body), now)
    assert res.verdict is Acceptance.ACCEPTED
    return now + h.pacer.gap_s()


# -- item 1: host scheduling ----------------------------------------------------------

def test_robots_first_then_one_in_flight_and_the_gap():
    h = host()
    h.discover(H + "/a", 0.0)
    h.discover(H + "/b", 0.0)
    lease = h.poll(0.0)
    assert lease.kind is Kind.ROBOTS
    assert h.poll(0.0) is None  # nothing else before robots.txt is in
    t = with_robots_completed = 0.5
    h.complete(ok(lease, http_status=200, robots_body=ROBOTS), t)
    assert h.poll(t + 0.99) is None  # 1 s gap after the robots fetch
    first = h.poll(t + 1.0)
    assert first.kind is Kind.PAGE and first.url == H + "/a"
    assert h.poll(t + 5.0) is None  # 1 in flight
    h.complete(ok(first), t + 5.0)
    assert h.poll(t + 5.5) is None and h.poll(t + 6.0).url == H + "/b"
    assert with_robots_completed == 0.5


def test_gap_grows_with_fetch_duration():
    h = host()
    t = with_robots(h, urls=[H + "/a", H + "/b"])
    a = h.poll(t)
    h.complete(ok(a, duration=0.5), t + 1)  # 10 x 0.5 s = 5 s
    assert h.poll(t + 5.9) is None and h.poll(t + 6.0) is not None
    assert h.pacer.gap_s(60.0) == CFG.host.max_gap_s  # capped


def test_crawl_delay_is_honoured():
    h = host()
    t = with_robots(h, body="User-agent: *\nCrawl-delay: 7\n", urls=[H + "/a", H + "/b"])
    assert h.pacer.gap_s() == 7.0
    t = max(t, h.pacer.next_allowed_at)
    a = h.poll(t)
    h.complete(ok(a), t)
    assert h.poll(t + 6.9) is None and h.poll(t + 7.0) is not None


def test_per_host_override_is_versioned_and_allows_concurrency():
    h = host()
    with pytest.raises(ValueError, match="not newer"):
        h.set_policy(h.pacer.policy.override({"max_in_flight": 2}, 0))
    with pytest.raises(ValueError, match="unknown host policy fields"):
        h.pacer.policy.override({"speed": 9}, 1)
    h.set_policy(h.pacer.policy.override({"max_in_flight": 2, "min_gap_s": 0.1}, 3))
    assert h.pacer.policy.policy_version == 3
    t = with_robots(h, urls=[f"{H}/{p}" for p in "abc"])
    a, b = h.poll(t), h.poll(t + 0.1)
    assert a and b and h.poll(t + 0.2) is None  # two in flight, the third waits
    with pytest.raises(ValueError, match="not newer"):
        h.set_policy(replace(h.pacer.policy, max_in_flight=9, policy_version=2))
    assert h.pacer.policy.max_in_flight == 2


def test_retry_after_seconds_http_date_and_backoff_with_reduced_allowance():
    h = host()
    t = with_robots(h, urls=[f"{H}/p{p}" for p in range(6)])
    lease = h.poll(t)
    h.complete(ok(lease, Outcome.THROTTLED, http_status=429, retry_after="120"), t)
    assert h.pacer.backoff_until == t + 120 and h.pacer.allowance == 0.5
    assert h.poll(t + 119) is None
    lease = h.poll(t + 120)
    assert lease is not None
    when = datetime.fromtimestamp(t + 1000, UTC)
    h.complete(ok(lease, Outcome.THROTTLED, http_status=503,
                  retry_after=format_datetime(when, usegmt=True)), t + 121)
    assert h.pacer.backoff_until == t + 1000 and h.pacer.allowance == 0.25
    # The reduced allowance stretches the gap: 1 s / 0.25.
    assert h.pacer.gap_s() == 4.0
    lease = h.poll(t + 1000)
    h.complete(ok(lease, Outcome.THROTTLED, http_status=429), t + 1000)  # no Retry-After
    wait = h.pacer.backoff_until - (t + 1000)
    base = CFG.host.backoff_base_s * 2 ** 2
    assert 0.5 * base <= wait <= base  # jittered exponential
    # Good answers bring the allowance back, up to 1.
    now = h.pacer.backoff_until
    for _ in range(12):
        lease = h.poll(now)
        if lease is None:
            now = h.pacer.next_allowed_at
            continue
        h.complete(ok(lease), now)
        now = h.pacer.next_allowed_at
        h.discover(f"{H}/more{now}", now)
    assert h.pacer.allowance > 0.25 and h.pacer.backoff_exponent == 0


def test_daily_host_budget():
    h = host(daily_budget=2)
    t = with_robots(h, urls=[f"{H}/{p}" for p in "abc"])
    got = []
    now = t
    while now < t + 100:
        lease = h.poll(now)
        if lease:
            got.append(lease.url)
            h.complete(ok(lease), now)
        now += 1
    assert len(got) == 2
    assert h.next_wake(now) == (now // DAY_S + 1) * DAY_S
    assert h.poll(DAY_S + 1) is not None


def test_ready_heap_serves_every_host_and_a_hot_host_does_not_starve_others():
    f = Frontier(CFG, seed=3)
    hot, cold = "http://hot.example", "http://cold.example"
    for i in range(2000):
        f.discover(f"{hot}/p{i}", 0.0)
    f.discover(f"{cold}/x", 0.0)
    leases = list(f.poll(0.0))
    assert {lease.host_key for lease in leases} == {hot, cold}  # both robots leases at once
    for lease in leases:
        f.complete(ok(lease, http_status=200, robots_body=""), lease.host_key, 0.0)
    now, granted = 0.0, []
    while now <= 10.0:
        for lease in f.poll(now):
            granted.append((now, lease.host_key))
            f.complete(ok(lease), lease.host_key, now)
        now = f.next_wake()
    assert (1.0, cold) in granted  # the cold host's page at its first chance
    hot_times = [t for t, k in granted if k == hot]
    assert all(b - a >= 1.0 for a, b in zip(hot_times, hot_times[1:], strict=False))
    assert len(hot_times) <= 10  # the hot host stays within its 1 request / s


def test_global_daily_fetch_budget():
    f = Frontier(replace(CFG, daily_fetch_budget=3), seed=1)
    for i in range(5):  # seeds: weight 1, never deferred by the budget's pacing
        f.discover(f"http://h{i}.example/", 0.0, is_seed=True)
    leases = list(f.poll(0.0))
    for lease in leases:
        f.complete(ok(lease, http_status=404), lease.host_key, 0.0)
    pages = [lease for lease in f.poll(1.0)]
    assert len(pages) == 3
    assert sum(h.stats.get("global_budget_exhausted", 0) for h in f.hosts.values()) == 2


# -- item 2: leases and versions -------------------------------------------------------

def test_completion_is_conditional_on_url_id_and_version():
    h = host()
    t = with_robots(h, urls=[H + "/a"])
    lease = h.poll(t)
    assert (lease.url_version, lease.attempt) == (1, 1) and lease.expires_at == t + 300
    first = h.complete(ok(lease, text_sha256="x"), t + 1)
    assert first.verdict is Acceptance.ACCEPTED and first.index and first.change is Change.NEW
    again = h.complete(ok(lease, text_sha256="x"), t + 2)
    assert again.verdict is Acceptance.DUPLICATE and not again.index
    # The next visit bumps the version first; the old round's key cannot touch it.
    u = h.urls[lease.url_id]
    revisit = poll_page(h, u.next_fetch_at)
    assert revisit.url_version == 2
    late = h.complete(ok(lease), revisit.issued_at + 1)
    assert late.verdict is Acceptance.DUPLICATE and u.status is UrlStatus.LEASED
    now = revisit.issued_at + 2
    assert h.complete(ok(revisit, text_sha256="x"), now).verdict is Acceptance.ACCEPTED
    assert h.complete(ok(lease), now + 1).verdict is Acceptance.STALE  # older than accepted


def test_expired_lease_is_relet_with_attempt_plus_one_and_one_result_wins():
    h = host()
    t = with_robots(h, urls=[H + "/a"])
    first = h.poll(t)
    later = t + CFG.lease_timeout_s
    second = h.poll(later)
    assert (second.url_version, second.attempt) == (first.url_version, 2)
    assert h.stats["leases_expired"] == 1
    # The first fetch was only slow: its result is accepted; the re-let one is then a duplicate.
    h.discover(H + "/b", later)
    assert h.complete(ok(first), later + 1).verdict is Acceptance.ACCEPTED
    # The re-let lease may still be fetching: it keeps the host's only token.
    assert second.lease_id in h.in_flight and h.poll(later + 10) is None
    assert h.complete(ok(second), later + 12).verdict is Acceptance.DUPLICATE
    assert h.poll(later + 13).url == H + "/b"
    assert h.check_invariants() == []


def test_lease_expiry_is_bounded_then_the_url_is_parked_not_lost():
    h = host()
    t = with_robots(h, urls=[H + "/a"])
    now = t
    for attempt in range(1, CFG.max_lease_attempts + 1):
        lease = h.poll(now)
        assert lease.attempt == attempt
        now = lease.expires_at
    h.expire(now)
    u = h.urls[lease.url_id]
    assert u.status is UrlStatus.PARKED and "lease expired 3 times" in u.park_reason
    assert h.check_invariants() == []
    assert u.next_fetch_at == now + CFG.recrawl.failed_visit_interval_s
    assert poll_page(h, u.next_fetch_at).url_version == lease.url_version + 1


def test_a_lease_that_expires_while_the_fetcher_is_silent_spends_no_attempt():
    """Expiries of leases issued while the fetcher was silent (down, cut off) re-let the
    URL with its attempt unspent, as often as they come; once the fetcher is heard
    again, the expiries of leases issued after that count again, up to the park."""
    h = host()
    t = with_robots(h, urls=[H + "/a"])
    now = t
    hearing = FetcherHearing()
    hearing.heard(t - SILENCE_S - 1)  # nothing heard for longer than a silence
    for _ in range(2 * CFG.max_lease_attempts):
        lease = h.poll(now, hearing=hearing)
        assert lease.attempt == 1
        now = lease.expires_at
    assert h.stats["leases_expired_unheard"] == 2 * CFG.max_lease_attempts - 1
    # The fetcher is back: the last of those, issued while it was silent, is re-let
    # unspent too; the expiries of leases issued from now on are the URL's own.
    hearing.heard(now)
    assert h.poll(now, hearing=hearing).attempt == 1
    now += CFG.lease_timeout_s
    for attempt in range(2, CFG.max_lease_attempts + 1):
        hearing.heard(now)
        lease = h.poll(now, hearing=hearing)
        assert lease.attempt == attempt
        now = lease.expires_at
    hearing.heard(now)
    h.expire(now, hearing)
    u = h.urls[lease.url_id]
    assert u.status is UrlStatus.PARKED and "lease expired 3 times" in u.park_reason
    assert h.check_invariants() == []


def test_a_lease_issued_during_a_fetcher_restart_spends_no_attempt_when_it_is_back():
    """The fetcher is killed, and its restart takes longer than a silence: a lease issued
    after the last completion it wrote is never sent (the new incarnation skips leases
    issued before it started) and expires after the fetcher is back and heard from. Its
    expiry spends no attempt (it did, before the frontier remembered past silences).
    A lease the fetcher had and completions followed (it may have died of it) spends
    one; so does one issued after the fetcher is back."""
    def attempt_spent(last_s: float, back_s: float) -> bool:
        """A lease issued at t; the killed fetcher's last completion at t + last_s, the
        new incarnation's first at t + back_s."""
        h = host()
        t = with_robots(h, urls=[H + "/a"])
        lease = h.poll(t)
        hearing = FetcherHearing()
        hearing.heard(t + last_s)
        back = t + back_s
        while back <= lease.expires_at:  # and it keeps working: a completion a second
            hearing.heard(back)
            back += 1.0
        h.expire(lease.expires_at, hearing)
        return h.urls[lease.url_id].attempt == 1

    assert not attempt_spent(-1.0, SILENCE_S + 30)
    assert attempt_spent(1.0, SILENCE_S + 30)
    assert attempt_spent(-SILENCE_S - 30, -1.0)
    # A late copy of a completion written before the lease says nothing about now.
    h = host()
    t = with_robots(h, urls=[H + "/a"])
    hearing = FetcherHearing()
    hearing.heard(t - 1)
    lease = h.poll(t)
    hearing.heard(t - 0.5)  # (arrived after the lease was issued)
    h.expire(lease.expires_at, hearing)
    assert h.urls[lease.url_id].attempt == 0


def too_late(lease):
    """The fetcher's NOT_SENT for a lease it read only after the lease expired."""
    from udfs.core.backqueue import Skip

    return ok(lease, Outcome.NOT_SENT, detail=Skip.TOO_LATE.value)


def test_a_not_sent_after_the_expiry_gives_the_attempt_back_once():
    """A fetcher lagging behind the leases topic reads each lease after it expired and
    says it never sent it: every expiry's attempt comes back, so however long the lag,
    the URL is re-let, never parked; a copy of the NOT_SENT gives nothing more."""
    h = host()
    t = with_robots(h, urls=[H + "/a"])
    now = t
    for _ in range(3 * CFG.max_lease_attempts):
        lease = h.poll(now)
        now = lease.expires_at
        h.expire(now)  # spent: the fetcher was heard all along (no hearing: all count)
        assert h.urls[lease.url_id].attempt == lease.attempt
        res = h.complete(too_late(lease), now + 1)
        assert (res.verdict, res.reason) == (Acceptance.ACCEPTED, "not sent, refunded")
        assert h.urls[lease.url_id].attempt == lease.attempt - 1
        assert h.complete(too_late(lease), now + 2).verdict is Acceptance.STALE  # a copy
    u = h.urls[lease.url_id]
    assert u.status is not UrlStatus.PARKED and u.version == 1
    assert h.stats["lease_attempts_refunded"] == 3 * CFG.max_lease_attempts
    again = h.poll(now + 3)
    assert (again.url_version, again.attempt) == (1, 1)
    assert h.complete(ok(again), now + 4).verdict is Acceptance.ACCEPTED
    assert h.check_invariants() == []


def test_a_not_sent_after_the_expiry_that_parked_the_url_takes_it_out_of_the_park():
    h = host()
    t = with_robots(h, urls=[H + "/a"])
    now, leases = t, []
    for _ in range(CFG.max_lease_attempts):
        leases.append(h.poll(now))
        now = leases[-1].expires_at
    h.expire(now)
    u = h.urls[leases[0].url_id]
    assert u.status is UrlStatus.PARKED
    # The NOT_SENT of the last one: the round goes on, its last attempt re-let now.
    assert h.complete(too_late(leases[-1]), now + 1).reason == "not sent, refunded"
    assert u.status is UrlStatus.QUEUED and u.park_reason is None
    assert h.stats["urls_unparked"] == 1
    last = h.poll(now + 1)
    assert (last.url_version, last.attempt) == (1, CFG.max_lease_attempts)
    # An earlier lease's NOT_SENT refunds its attempt too; its copy, nothing.
    assert h.complete(too_late(leases[0]), now + 2).reason == "not sent, refunded"
    assert h.complete(too_late(leases[0]), now + 3).verdict is Acceptance.STALE
    assert u.attempt == CFG.max_lease_attempts - 1
    assert h.complete(ok(last), now + 4).verdict is Acceptance.ACCEPTED
    assert u.status is UrlStatus.FETCHED and h.check_invariants() == []


def test_a_not_sent_refunds_only_what_an_expiry_spent_in_a_round_still_open():
    # An expiry while the fetcher was silent spent nothing: its NOT_SENT gives nothing.
    h = host()
    t = with_robots(h, urls=[H + "/a"])
    hearing = FetcherHearing()
    hearing.heard(t - SILENCE_S - 1)
    lease = h.poll(t, hearing=hearing)
    h.expire(lease.expires_at, hearing)
    assert h.complete(too_late(lease), lease.expires_at + 1).verdict is Acceptance.STALE
    assert h.urls[lease.url_id].attempt == 0
    # A round accepted since (the first fetch was only slow): nothing to give back.
    h = host()
    t = with_robots(h, urls=[H + "/a"])
    first = h.poll(t)
    second = h.poll(first.expires_at)
    assert (second.url_id, second.attempt) == (first.url_id, 2)
    assert h.complete(ok(first), first.expires_at + 1).verdict is Acceptance.ACCEPTED
    assert h.complete(too_late(first), first.expires_at + 2).verdict is Acceptance.STALE
    assert h.complete(ok(second), first.expires_at + 3).verdict is Acceptance.DUPLICATE
    assert h.check_invariants() == []


def test_the_expiries_that_spent_an_attempt_survive_a_snapshot_and_stay_bounded():
    from udfs.core.frontier.leasing import EXPIRED_SPENT_KEEP

    h = host()
    t = with_robots(h, urls=[H + "/a"])
    lease = h.poll(t)
    h.expire(lease.expires_at)
    r = HostFrontier.restore(h.snapshot(), CFG)
    assert r.complete(too_late(lease), lease.expires_at + 1).reason == "not sent, refunded"
    assert r.urls[lease.url_id].attempt == 0
    now = lease.expires_at + 2
    for _ in range(EXPIRED_SPENT_KEEP + 5):
        lease = r.poll(now)
        now = lease.expires_at
        r.expire(now)
        r.complete(too_late(lease), now)  # (each refunded: never parked)
        r.leases.spent(lease)  # and remembered again, as if it had expired twice
    assert len(r.leases.expired_spent) == EXPIRED_SPENT_KEEP


# -- item 3: outcomes ------------------------------------------------------------------

def poll_page(h, now, body=ROBOTS):
    """The next page lease at or after `now`, answering a robots.txt refresh on the way."""
    lease = h.poll(now)
    if lease is not None and lease.kind is Kind.ROBOTS:
        h.complete(ok(lease, http_status=200, robots_body=body), now)
        return poll_page(h, h.pacer.next_allowed_at, body)
    return lease


def visit(h, url, now, outcome=Outcome.OK, **kw):
    if not h.urls:
        now = with_robots(h, now, urls=[url])
    h.discover(url, now)
    lease = h.poll(max(now, h.pacer.next_allowed_at, h.pacer.backoff_until))
    assert lease is not None, h.stats
    return lease, h.complete(ok(lease, outcome, **kw), max(now, lease.issued_at))


def test_2xx_and_304_and_change_detection():
    h = host()
    t = 0.0
    lease, res = visit(h, H + "/a", t, text_sha256="t1", body_sha256="b1", etag='"e1"')
    u = h.urls[lease.url_id]
    assert res.index and res.change is Change.NEW and u.etag == '"e1"'
    assert u.interval_s == CFG.recrawl.max_interval_s  # normal class starts at 30 days
    nxt = poll_page(h, u.next_fetch_at)
    assert nxt.etag == '"e1"'  # conditional GET: If-None-Match
    res = h.complete(ok(nxt, Outcome.NOT_MODIFIED, http_status=304), nxt.issued_at + 1)
    assert not res.index and res.change is Change.UNCHANGED
    assert u.last_fetch_at == nxt.issued_at + 1 and u.text_hash == "t1"
    assert u.interval_s == CFG.recrawl.max_interval_s  # x2, clamped at 30 days


def test_redirects_go_to_discovery_with_a_hop_limit_and_loop_detection():
    h = host()
    t = 0.0
    _, res = visit(h, H + "/old", t, Outcome.REDIRECT, http_status=301,
                   redirect_location="http://other.example/new")
    assert res.discovered == [("http://other.example/new", 0, 1, "REDIRECT")] and not res.index
    _, res = visit(h, H + "/self", h.pacer.next_allowed_at, Outcome.REDIRECT, http_status=302,
                   redirect_location=H + "/self")
    assert res.discovered == [] and h.stats["redirect_loops"] == 1
    refused = h.discover(H + "/far", t, redirect_hops=CFG.max_redirect_hops + 1)
    assert not refused.accepted and refused.reason == "redirect_hops"
    # Hops add up along a chain: a URL reached by 2 redirects reports 3 for its target.
    h.discover(H + "/hop2", t, redirect_hops=2)
    now = h.pacer.next_allowed_at
    lease = h.poll(now)
    while lease.url != H + "/hop2":
        h.complete(ok(lease), now)
        now = h.pacer.next_allowed_at
        lease = h.poll(now)
    res = h.complete(ok(lease, Outcome.REDIRECT, http_status=301,
                        redirect_location=H + "/hop3"), now)
    assert res.discovered == [(H + "/hop3", 0, 3, "REDIRECT")]


def test_404_410_tombstone_and_rediscovery_does_not_recreate():
    h = host()
    t = 0.0
    lease, res = visit(h, H + "/gone", t, Outcome.GONE, http_status=410)
    u = h.urls[lease.url_id]
    assert u.status is UrlStatus.TOMBSTONE and not res.index
    assert u.next_fetch_at == lease.issued_at + CFG.recrawl.tombstone_interval_s
    again = h.discover(H + "/gone", t + 50)
    assert again.reason == "known" and h.urls[lease.url_id].status is UrlStatus.TOMBSTONE
    assert len(h.urls) == 1


def test_a_parse_timeout_is_a_visit_with_nothing_kept_a_trap_trigger_and_no_quick_retry():
    h = host()
    lease, first = visit(h, H + "/a", 0.0, text_sha256="t1", body_sha256="b1")
    u = h.urls[lease.url_id]
    again = poll_page(h, u.next_fetch_at)
    now = again.issued_at + 1
    res = h.complete(ok(again, Outcome.PARSE_TIMEOUT, body_sha256="b2"), now)
    assert res.verdict is Acceptance.ACCEPTED and not res.index and res.change is None
    assert h.stats["trap_parse_timeout"] == 1
    assert u.status is UrlStatus.FETCHED and u.last_fetch_at == now and u.failure_count == 0
    assert u.text_hash == "t1" and u.content_hash == "b1"  # the last good visit stands
    # Not retried at once: next at the failed-visit interval, never before.
    assert u.next_fetch_at == now + CFG.recrawl.failed_visit_interval_s
    early = h.poll(now + CFG.recrawl.failed_visit_interval_s - 1)
    assert early is None or early.url_id != u.url_id
    # A duplicate completion of the same version changes nothing more.
    dup = h.complete(ok(again, Outcome.PARSE_TIMEOUT), now + 2)
    assert dup.verdict is Acceptance.DUPLICATE and h.stats["trap_parse_timeout"] == 1
    assert h.check_invariants() == []


@pytest.mark.parametrize("outcome", [Outcome.SERVER_ERROR, Outcome.DNS_ERROR,
                                     Outcome.CONNECT_ERROR, Outcome.TIMEOUT])
def test_transient_failures_retry_with_backoff_then_park(outcome):
    h = host()
    t = with_robots(h, urls=[H + "/flaky"])
    now, dues = t, []
    for _ in range(CFG.max_retries + 1):
        now = max(now, h.pacer.next_allowed_at, h.pacer.backoff_until)
        lease = h.poll(now)
        assert lease is not None
        h.complete(ok(lease, outcome), now)
        u = h.urls[lease.url_id]
        dues.append(u.next_fetch_at - now)
        now = u.next_fetch_at
    assert u.status is UrlStatus.PARKED and outcome.value in u.park_reason
    assert dues[0] < dues[1] < dues[2]  # backing off
    assert h.pacer.backoff_exponent == CFG.max_retries + 1  # the host backs off too
    assert h.check_invariants() == []


def test_throttling_never_parks_a_url_it_waits_for_the_host_backoff():
    # Every 429 is the host's pace, not the URL's fault: past max_retries the URL is
    # still queued, always due no earlier than the host's backoff, and then fetched.
    h = host()
    t = with_robots(h, urls=[H + "/busy"])
    now = t
    for i in range(CFG.max_retries + 3):
        now = max(now, h.pacer.next_allowed_at, h.pacer.backoff_until)
        lease = h.poll(now)
        assert lease is not None, i
        h.complete(ok(lease, Outcome.THROTTLED, http_status=429, retry_after="7"), now)
        u = h.urls[lease.url_id]
        assert u.status is UrlStatus.QUEUED and u.failure_count == 0
        assert u.next_fetch_at >= h.pacer.backoff_until == now + 7
    now = max(h.pacer.next_allowed_at, h.pacer.backoff_until)
    lease = h.poll(now)
    h.complete(ok(lease), now)
    assert h.urls[lease.url_id].status is UrlStatus.FETCHED
    assert h.check_invariants() == []


def test_robots_disallow_is_never_leased():
    h = host()
    t = with_robots(h, urls=[H + "/private/x", H + "/public"])
    leases = []
    now = t
    while now < t + 30:
        lease = h.poll(now)
        if lease:
            leases.append(lease.url)
            h.complete(ok(lease), now)
        now += 1
    assert leases == [H + "/public"] and h.stats["robots_disallowed"] >= 1
    u = next(u for u in h.urls.values() if "private" in u.url)
    assert u.status is UrlStatus.QUEUED and u.next_fetch_at >= h.gate.state.expires_at


def test_robots_unreachable_disallows_everything_until_it_recovers():
    h = host()
    h.discover(H + "/a", 0.0)
    robots = h.poll(0.0)
    h.complete(ok(robots, Outcome.SERVER_ERROR, http_status=503), 0.0)
    now = 0.0
    while now < 50:
        assert (lease := h.poll(now)) is None or lease.kind is Kind.ROBOTS
        now += 1
    retry = h.gate.state.retry_at
    robots = h.poll(max(retry, h.pacer.backoff_until))
    assert robots.kind is Kind.ROBOTS
    h.complete(ok(robots, http_status=200, robots_body=""), robots.issued_at)
    page = h.poll(h.pacer.next_allowed_at)
    assert page.kind is Kind.PAGE


def test_robots_redirects_are_followed_and_sitemaps_discovered():
    h = host()
    h.discover(H + "/a", 0.0)
    r1 = h.poll(0.0)
    h.complete(ok(r1, Outcome.REDIRECT, http_status=301, redirect_location="/r2.txt"), 0.0)
    r2 = h.poll(h.pacer.next_allowed_at)
    assert r2.kind is Kind.ROBOTS and r2.url == H + "/r2.txt"
    res = h.complete(ok(r2, http_status=200, robots_body="Sitemap: /sm.xml\n"), 1.0)
    assert res.discovered == [(H + "/sm.xml", 0, 0, "ROBOTS_SITEMAP")]


def test_address_blocked_parks_the_url_and_rests_the_host():
    h = host()
    t = 0.0
    lease, _ = visit(h, H + "/a", t, Outcome.ADDRESS_BLOCKED)
    assert h.urls[lease.url_id].status is UrlStatus.PARKED
    assert h.pacer.backoff_until == lease.issued_at + CFG.address_block_s


def test_traps_refuse_with_a_reason():
    h = host()
    assert h.discover(H + "/" + "x" * 3000, 0.0).reason == "url_length"
    assert h.discover(H + "/a", 0.0, depth=99).reason == "depth"
    with pytest.raises(ValueError, match="does not belong"):
        h.discover("http://other.example/", 0.0)


# -- item 4: recrawl --------------------------------------------------------------------

def test_recrawl_interval_doubles_halves_and_is_clamped():
    from udfs.core.recrawl import next_interval

    rc = CFG.recrawl
    assert next_interval(4 * DAY_S, Change.UNCHANGED, 0.5, rc) == 8 * DAY_S
    assert next_interval(4 * DAY_S, Change.CHANGED, 0.5, rc) == 2 * DAY_S
    assert next_interval(DAY_S, Change.CHANGED, 0.5, rc) == DAY_S
    assert next_interval(30 * DAY_S, Change.UNCHANGED, 0.5, rc) == 30 * DAY_S
    assert next_interval(30 * DAY_S, Change.CHANGED, 0.9, rc) == DAY_S  # high-value: daily


def test_changed_page_comes_back_sooner_and_seeds_are_daily():
    h = host()
    t = 0.0
    lease, _ = visit(h, H + "/n", t, text_sha256="v1")
    u = h.urls[lease.url_id]
    nxt = poll_page(h, u.next_fetch_at)
    h.complete(ok(nxt, text_sha256="v2"), nxt.issued_at)
    assert u.interval_s == 15 * DAY_S
    seed = h.discover(H + "/seed", t, is_seed=True)
    assert h.urls[seed.url_id].interval_s == DAY_S


# -- snapshots ---------------------------------------------------------------------------

def test_snapshot_restore_keeps_tokens_leases_and_queue():
    h = host()
    t = with_robots(h, urls=[f"{H}/p{p}" for p in range(5)])
    lease = h.poll(t)
    snap = h.snapshot()
    h.complete(ok(lease), t + 1)  # after the snapshot: lost with the crash
    r = HostFrontier.restore(snap, CFG)
    assert r.pacer.next_allowed_at == snap["next_allowed_at"] and lease.lease_id in r.in_flight
    assert r.check_invariants() == [] and r.pending() == 4
    assert r.poll(t + 0.5) is None  # the restored in-flight lease still holds the token
    assert r.complete(ok(lease), t + 2).verdict is Acceptance.ACCEPTED
    assert r.poll(r.pacer.next_allowed_at).url_version == 1


def test_restore_from_field_dicts_tolerates_added_and_retired_fields():
    from udfs.core.frontier import URL_FIELD_NAMES

    h = host()
    t = with_robots(h, urls=[f"{H}/p{p}" for p in range(3)])
    snap = h.snapshot()
    as_dicts = {uid: dict(zip(URL_FIELD_NAMES, fields, strict=True))
                for uid, fields in snap["urls"].items()}
    for d in as_dicts.values():
        d.pop("kind")  # written before the field existed: takes its default
        d["retired_field"] = 1  # written by an older build: ignored
    r = HostFrontier.restore({**snap, "urls": as_dicts}, CFG)
    assert r.check_invariants() == [] and r.pending() == 3
    assert all(u.kind is Kind.PAGE for u in r.urls.values())
    assert r.poll(max(t, r.pacer.next_allowed_at)).url.startswith(H + "/p")


def test_host_state_is_plain_data_by_field_name_and_survives_added_and_retired_fields():
    import pickle

    h = host()
    t = with_robots(h, urls=[f"{H}/p{p}" for p in range(3)])
    lease = h.poll(t)
    saved = pickle.loads(pickle.dumps(h.host_state()))
    # No pickled classes of ours but enums: records are dicts by field name.
    assert isinstance(saved["policy"], dict) and isinstance(saved["robots"], dict)
    assert isinstance(saved["in_flight"][lease.lease_id], dict)
    # An older build wrote a field we retired, and lacked fields we added since.
    saved["policy"]["retired_knob"] = 7
    del saved["policy"]["policy_version"]
    saved["robots"]["retired_flag"] = True
    del saved["robots"]["retry_at"]
    saved["in_flight"][lease.lease_id]["retired"] = "x"
    del saved["in_flight"][lease.lease_id]["last_modified"]
    urls = h.snapshot()["urls"]
    del saved["backoff_exponent"]  # a top-level field added since: a new host's value
    saved["retired_top_level"] = [1, 2]
    r = HostFrontier.restore({**saved, "urls": urls}, CFG)
    assert r.pacer.policy.policy_version == 0 and r.gate.state.retry_at == 0.0
    assert r.pacer.backoff_exponent == 0
    assert r.added_fields == {"policy.policy_version", "robots.retry_at",
                              "in_flight.last_modified", "backoff_exponent"}
    assert r.in_flight[lease.lease_id].url == lease.url  # the lease in flight survived
    assert r.pacer.next_allowed_at == h.pacer.next_allowed_at and r.check_invariants() == []
    done = r.complete(ok(r.in_flight[lease.lease_id]), t + 1)
    assert done.verdict is Acceptance.ACCEPTED
    # State written by this very code restores with nothing added.
    assert HostFrontier.restore(h.snapshot(), CFG).added_fields == frozenset()


def test_host_state_follows_every_change_of_its_leases_out():
    # A lease's field dict is made once while it is out (state.py, LeaseBook.saved_out):
    # a lease answered, or the same lease_id on another lease object (a restore), must
    # show at once, and the book must not keep answered leases.
    h = lookahead_host()
    t = with_robots(h, urls=[f"{H}/p{i}" for i in range(6)])
    first, second = h.poll(t), h.poll(t)
    before = h.host_state()
    assert set(before["in_flight"]) == {first.lease_id, second.lease_id}
    assert h.host_state()["in_flight"][first.lease_id] is before["in_flight"][first.lease_id]
    h.complete(ok(first), t + 1)
    after = h.host_state()
    assert set(after["in_flight"]) == {second.lease_id}
    assert set(h.leases.saved_out) == {second.lease_id}
    assert before["in_flight"][first.lease_id]["url"] == first.url  # returned, unchanged
    r = HostFrontier.restore(h.snapshot(), LOOKAHEAD)
    again = r.host_state()["in_flight"][second.lease_id]
    assert again == after["in_flight"][second.lease_id]
    assert again is not after["in_flight"][second.lease_id]


# -- look-ahead: leases granted before their time ------------------------------------------

def lookahead_host(**policy):
    return host(LOOKAHEAD, **policy)


def test_lookahead_grants_followers_one_gap_apart_up_to_the_limit():
    h = lookahead_host()
    t = with_robots(h, urls=[f"{H}/p{i}" for i in range(6)])
    first = h.poll(t - 1.0)  # due within lookahead_s (2 s): granted early
    assert first is not None and first.prev_lease_id is None  # a head
    assert first.not_before == t and first.expires_at == t + LOOKAHEAD.lease_timeout_s
    second, third = h.poll(t - 1.0), h.poll(t - 1.0)
    assert third is None  # due at t + 2: not within 2 s of t - 1
    third = h.poll(t)
    assert second.prev_lease_id == first.lease_id and second.not_before == t + 1.0
    assert third.prev_lease_id == second.lease_id and third.not_before == t + 2.0
    assert h.poll(t + 1.5) is None  # 1 in flight + 2 look-ahead: the limit
    assert (first.gap_s, first.max_in_flight, first.duration_factor) == (1.0, 1, 10.0)
    assert h.next_wake(t + 1.5) == first.expires_at  # nothing to grant until one returns


def test_lookahead_after_completions_plans_from_the_real_end_and_heads_count_from_arrival():
    h = lookahead_host()
    t = with_robots(h, urls=[f"{H}/p{i}" for i in range(6)])
    a, b = h.poll(t), h.poll(t)
    # a ran at t and ended at t + 0.1 on the fetcher's clock; its completion arrives late.
    h.complete(ok(a, duration=0.05, fetched_at=t + 0.1), t + 0.8)
    c = h.poll(t + 0.8)
    assert c.prev_lease_id == b.lease_id and c.not_before == t + 2.0  # b + one gap
    h.complete(ok(b, fetched_at=t + 1.1), t + 1.5)
    h.complete(ok(c, fetched_at=t + 2.1), t + 2.9)
    head = h.poll(t + 2.9)
    # Nothing out: a head, not before everything known (c's arrival + a gap).
    assert head.prev_lease_id is None and head.not_before == t + 3.9


def test_a_lease_not_sent_goes_back_without_spending_an_attempt_or_the_gap():
    from udfs.core.backqueue import Skip

    h = lookahead_host()
    t = with_robots(h, urls=[f"{H}/p{i}" for i in range(3)])
    a, b, c = h.poll(t), h.poll(t), h.poll(t)
    before = (h.pacer.next_allowed_at, h.pacer.plan_at)
    res = h.complete(ok(c, Outcome.NOT_SENT, detail=Skip.TOO_EARLY.value), t + 0.1)
    assert res.verdict is Acceptance.ACCEPTED and not res.index
    assert (h.pacer.next_allowed_at, h.pacer.plan_at) == before  # the host was not contacted
    u = h.urls[c.url_id]
    assert u.status is UrlStatus.QUEUED and c.lease_id not in h.in_flight
    again = h.poll(t + 0.1)
    assert again.url_id == c.url_id and again.attempt == 1 and again.url_version == 1
    # A fetcher that lost the chain: only a head next, once nothing is out.
    h.complete(ok(again, Outcome.NOT_SENT, detail=Skip.UNKNOWN_PREDECESSOR.value), t + 0.2)
    assert h.pacer.heads_only and h.poll(t + 0.2) is None
    h.complete(ok(a, fetched_at=t + 0.1), t + 0.3)
    assert h.poll(t + 0.3) is None  # b is still out
    h.complete(ok(b, fetched_at=t + 1.1), t + 1.2)
    head = h.poll(t + 1.2)
    assert head.prev_lease_id is None and not h.pacer.heads_only
    # A repeated NOT_SENT for a lease already taken back changes nothing.
    assert h.complete(ok(c, Outcome.NOT_SENT), t + 1.3).verdict is Acceptance.STALE


def test_throttles_are_counted_into_leases_and_a_retry_after_hint_delays_the_plan():
    h = lookahead_host()
    t = with_robots(h, urls=[f"{H}/p{i}" for i in range(6)])
    a = h.poll(t)
    assert a.throttle_seq == 0
    h.complete(ok(a, Outcome.THROTTLED, http_status=429, retry_after="5"), t + 0.1)
    b = h.poll(t + 5.1)
    assert b.throttle_seq == 1 and b.not_before >= t + 5.1
    h.complete(ok(b, Outcome.NOT_SENT, retry_after="30"), t + 5.2)
    assert h.poll(t + 20.0) is None and h.poll(t + 33.5) is not None


def test_lease_ids_stay_unique_when_a_restore_repeats_the_sequence():
    h = lookahead_host()
    t = with_robots(h, urls=[f"{H}/p{i}" for i in range(6)])
    snap = h.snapshot()
    lost = h.poll(t)  # granted after the checkpoint: the restore forgets it
    r = HostFrontier.restore(snap, LOOKAHEAD)
    again = r.poll(t + 0.5)
    assert lost.lease_id.split("@")[0] == again.lease_id.split("@")[0]  # same sequence
    assert lost.lease_id != again.lease_id


def test_url_state_is_kept_in_a_numbered_layout_of_about_190_bytes():
    """Keyed state holds a URL as (layout, values...), field names once in the code: a
    queued URL of 82 characters pickles to under 200 B (as a dict by name: ~440 B)."""
    import pickle

    from udfs.core.frontier import URL_LAYOUT, URL_LAYOUTS, url_from_saved, url_to_saved

    h = host()
    with_robots(h, urls=[f"{H}/articles/2026/11/30/some-article-slug-12345-abcdefghij.html"])
    u = next(u for u in h.urls.values() if "/articles/" in u.url)
    saved = url_to_saved(u)
    assert saved[0] == URL_LAYOUT and len(saved) == len(URL_LAYOUTS[URL_LAYOUT]) + 1
    assert all(type(v) in (str, int, float, bool, type(None)) for v in saved)  # no classes
    assert len(pickle.dumps(saved)) < 200
    assert len(pickle.dumps(dict(zip(URL_LAYOUTS[URL_LAYOUT], saved[1:], strict=True)))) > 400
    assert url_from_saved(pickle.loads(pickle.dumps(saved))) == u


def test_layout_1_is_what_earlier_builds_wrote_and_older_layouts_read_by_name(monkeypatch):
    import udfs.core.frontier as frontier

    # Savepoints hold layout 1 records: its order may never change.
    assert frontier.URL_LAYOUTS[1][:4] == ("url_id", "url", "version", "accepted_version")
    assert len(frontier.URL_LAYOUTS[1]) == 22 and frontier.URL_LAYOUTS[1][-1] == "token"
    # An older layout (no "kind", a retired field) is read by its own names.
    monkeypatch.setitem(frontier.URL_LAYOUTS, 0, ("url", "retired", "url_id", "status"))
    u = frontier.url_from_saved((0, f"{H}/x", 7, "0123456789abcdef", "FETCHED"))
    assert (u.url, u.url_id, u.status, u.kind) == \
        (f"{H}/x", "0123456789abcdef", UrlStatus.FETCHED, Kind.PAGE)
    with pytest.raises(ValueError, match="layout 99, which this build does not know"):
        frontier.url_from_saved((99, f"{H}/x"))
