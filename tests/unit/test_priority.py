"""Priority that learns (issue 17): change rate, status, duplicates and sitemap hints
steer each host's queue and its revisits, on a virtual clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from udfs.core.frontier import HostFrontier, Kind, Outcome, UrlStatus
from udfs.core.recrawl import (
    DAY_S,
    Dup,
    RecrawlPolicy,
    change_rate,
    hinted_interval,
    host_priority,
    queue_priority,
    revisit_after,
    sitemap_says_changed,
    updated_dup_share,
)
from udfs.frontier.pipeline import duplicate_feedback, intake

from .test_frontier import CFG, H, ok, poll_page, visit, with_robots

RC = RecrawlPolicy()
FIXED = replace(RC, learned_priority=False)


def score(value=0.5, interval=30 * DAY_S, fetched=True, failures=0, tombstone=False,
          dup=Dup.NONE, policy=RC):
    return queue_priority(value, interval, fetched=fetched, failures=failures,
                          tombstone=tombstone, dup=dup, policy=policy)


# -- the pure rules --------------------------------------------------------------------

def test_change_rate_spans_the_interval_range_and_is_zero_before_any_fetch():
    assert change_rate(DAY_S, True, RC) == 1.0
    assert change_rate(30 * DAY_S, True, RC) == 0.0
    assert change_rate(90 * DAY_S, True, RC) == 0.0  # clamped
    assert 0.0 < change_rate(7 * DAY_S, True, RC) < 1.0
    assert change_rate(DAY_S, False, RC) == 0.0


def test_a_page_seen_to_change_ranks_above_a_static_or_new_page_of_equal_value():
    changing, static, new = score(interval=2 * DAY_S), score(), score(fetched=False)
    assert changing > static == new == 0.5
    assert changing <= 0.75  # up to half its value again
    # Faster than the middle of the range gains no more (Cho & Garcia-Molina).
    assert score(interval=DAY_S) == score(interval=5 * DAY_S) == 0.75
    # The value still leads: a seed outranks a changing deep link.
    assert score(value=1.0) > score(value=0.5, interval=DAY_S)


def test_failures_tombstones_and_duplicates_rank_lower():
    base = score()
    assert score(failures=1) == base / 2 and score(failures=3) == base / 8
    assert score(tombstone=True) == base / 4
    assert score(dup=Dup.NEAR) == score(dup=Dup.EXACT) == base / 2


def test_the_fixed_order_is_the_value_alone():
    assert score(value=0.4, interval=DAY_S, failures=2, dup=Dup.EXACT, policy=FIXED) == 0.4
    assert revisit_after(DAY_S, Dup.EXACT, 1.0, FIXED) == DAY_S
    assert host_priority(0.25, 0.9, FIXED) == 1.0


def test_duplicates_and_duplicate_heavy_hosts_are_revisited_later_never_never():
    assert revisit_after(2 * DAY_S, Dup.NONE, 0.0, RC) == 2 * DAY_S
    assert revisit_after(2 * DAY_S, Dup.NEAR, 0.0, RC) == 8 * DAY_S
    assert revisit_after(2 * DAY_S, Dup.NONE, 0.6, RC) == 8 * DAY_S  # a duplicate-heavy host
    assert revisit_after(2 * DAY_S, Dup.NONE, 0.4, RC) == 2 * DAY_S
    assert revisit_after(20 * DAY_S, Dup.EXACT, 0.0, RC) == 30 * DAY_S  # capped
    assert revisit_after(40 * DAY_S, Dup.EXACT, 0.0, RC) == 40 * DAY_S  # never sooner


def test_host_weight_falls_with_its_allowance_and_its_duplicate_share():
    assert host_priority(1.0, 0.0, RC) == 1.0
    assert host_priority(0.25, 0.0, RC) == 0.25
    assert host_priority(1.0, 0.4, RC) == 1.0  # below the duplicate-heavy share
    assert host_priority(1.0, 0.8, RC) == pytest.approx(0.6)


def test_duplicate_share_is_a_moving_mean_of_new_pages():
    share = 0.0
    for i in range(200):
        share = updated_dup_share(share, i % 5 != 0)  # four in five are duplicates
    assert share == pytest.approx(0.8, abs=0.05)
    for _ in range(100):
        share = updated_dup_share(share, False)
    assert share < 0.01


def test_changefreq_sets_a_new_urls_first_interval_within_the_bounds():
    assert hinted_interval(None, 0.5, RC) == 30 * DAY_S  # the value's default
    assert hinted_interval("weekly", 0.5, RC) == 7 * DAY_S
    assert hinted_interval("Hourly ", 0.5, RC) == DAY_S  # clamped to the minimum
    assert hinted_interval("never", 0.5, RC) == 30 * DAY_S  # clamped to the maximum
    assert hinted_interval("sometimes", 0.5, RC) == 30 * DAY_S  # not a changefreq
    assert hinted_interval("monthly", 0.9, RC) == DAY_S  # high value stays daily


def test_sitemap_lastmod_is_newer_than_the_last_fetch():
    assert sitemap_says_changed(100.0, 50.0)
    assert not sitemap_says_changed(50.0, 100.0)
    assert not sitemap_says_changed(None, 50.0)
    assert not sitemap_says_changed(100.0, None)  # never fetched: already due


# -- one host on a virtual clock -------------------------------------------------------

def fetched_pair(cfg=CFG):
    """A host with /changing (changed at its second visit) and /static (unchanged), both
    due again at the same moment."""
    h = HostFrontier(H, cfg, seed=1)
    t = with_robots(h, urls=[H + "/changing", H + "/static"])
    text = {H + "/changing": "c1", H + "/static": "s1"}
    for _ in range(2):
        lease = poll_page(h, t)
        h.complete(ok(lease, text_sha256=text[lease.url]), lease.issued_at)
        t = h.pacer.next_allowed_at
    for _ in range(2):  # second visits: /changing changed, /static did not
        lease = poll_page(h, max(t, min(u.next_fetch_at for u in h.urls.values())))
        changed = lease.url.endswith("/changing")
        h.complete(ok(lease, text_sha256="c2" if changed else "s1"), lease.issued_at)
        t = h.pacer.next_allowed_at
    due = max(u.next_fetch_at for u in h.urls.values()) + 1
    for path in ("/static", "/changing"):  # both due together, /static queued first
        h.queue.enqueue(h.find(H + path)[1], due)
    return h, due


def test_the_queue_serves_the_changing_page_first_and_the_fixed_order_by_due_time():
    h, due = fetched_pair()
    assert poll_page(h, due).url == H + "/changing"
    # The fixed order: equal value, equal due time, so the one queued first.
    h, due = fetched_pair(replace(CFG, recrawl=FIXED))
    assert poll_page(h, due).url == H + "/static"


def test_a_duplicate_report_spaces_out_the_revisit_once_and_counts_toward_the_host():
    h = HostFrontier(H, CFG, seed=1)
    lease, res = visit(h, H + "/d", 0.0, text_sha256="t", body_sha256="b")
    u = h.urls[lease.url_id]
    assert res.change.value == "NEW" and h.ends.dup_share == 0.0
    before = u.next_fetch_at
    assert h.duplicate(u.url_id, u.version, Dup.EXACT, True, lease.issued_at)
    assert u.dup == Dup.EXACT and u.status is UrlStatus.FETCHED
    assert u.next_fetch_at == pytest.approx(
        u.last_fetch_at + min(RC.max_interval_s, 4 * u.interval_s))
    assert u.next_fetch_at >= before
    assert h.ends.dup_share == pytest.approx(0.05)
    # The same answer again (a replay) and an older round change nothing.
    assert not h.duplicate(u.url_id, u.version, Dup.EXACT, True, lease.issued_at)
    assert not h.duplicate(u.url_id, u.version - 1, Dup.NEAR, False, lease.issued_at)
    assert not h.duplicate("ffffffffffffffff", 1, Dup.NEAR, False, lease.issued_at)
    assert h.ends.dup_share == pytest.approx(0.05) and h.check_invariants() == []


def test_a_changed_page_is_no_longer_a_duplicate_until_the_index_says_so_again():
    h = HostFrontier(H, CFG, seed=1)
    lease, _ = visit(h, H + "/d", 0.0, text_sha256="t1")
    u = h.urls[lease.url_id]
    h.duplicate(u.url_id, u.version, Dup.NEAR, True, lease.issued_at)
    nxt = poll_page(h, u.next_fetch_at)
    h.complete(ok(nxt, text_sha256="t2"), nxt.issued_at)
    assert u.dup == Dup.NONE


def test_a_duplicate_heavy_host_spaces_every_revisit_but_fetches_every_new_page():
    h = HostFrontier(H, CFG, seed=1)
    urls = [f"{H}/p{i}" for i in range(30)]
    t = with_robots(h, urls=urls)
    for _ in urls:
        lease = poll_page(h, t)
        h.complete(ok(lease, text_sha256="same"), lease.issued_at)
        if lease.url != urls[-1]:
            h.duplicate(lease.url_id, lease.url_version, Dup.EXACT, True, lease.issued_at)
        t = h.pacer.next_allowed_at
    assert h.ends.dup_share >= RC.duplicate_host_share
    assert all(u.last_fetch_at is not None for u in h.urls.values())  # coverage kept
    last = h.find(urls[-1])[1]  # not itself a duplicate: spaced because of its host
    assert last.dup == Dup.NONE
    assert last.next_fetch_at - last.last_fetch_at == RC.max_interval_s  # 30 d, capped
    assert last.interval_s == RC.max_interval_s


def test_a_sitemap_lastmod_newer_than_the_last_fetch_makes_a_known_url_due_now():
    h = HostFrontier(H, CFG, seed=1)
    lease, _ = visit(h, H + "/news", 0.0, text_sha256="t1")
    u = h.urls[lease.url_id]
    now = u.last_fetch_at + DAY_S
    assert u.next_fetch_at > now
    h.discover(H + "/news", now, lastmod=u.last_fetch_at - 10)  # older: nothing
    assert u.next_fetch_at > now
    h.discover(H + "/news", now, lastmod=now - 60)
    assert u.next_fetch_at == now and h.stats["sitemap_changed_due"] == 1
    assert poll_page(h, max(now, h.pacer.next_allowed_at)).url == H + "/news"


def test_changefreq_gives_a_new_url_its_first_interval():
    h = HostFrontier(H, CFG, seed=1)
    adm = h.discover(H + "/weekly", 0.0, changefreq="weekly", kind=Kind.PAGE)
    assert h.urls[adm.url_id].interval_s == 7 * DAY_S


def test_the_duplicate_flag_and_the_host_share_survive_snapshots_and_keyed_state():
    from udfs.core.frontier import URL_LAYOUTS, url_from_saved, url_to_saved

    h = HostFrontier(H, CFG, seed=1)
    lease, _ = visit(h, H + "/d", 0.0, text_sha256="t1")
    h.duplicate(lease.url_id, lease.url_version, Dup.NEAR, True, lease.issued_at)
    r = HostFrontier.restore(h.snapshot(), CFG)
    assert r.urls[lease.url_id].dup == Dup.NEAR and r.ends.dup_share == h.ends.dup_share
    saved = url_to_saved(h.urls[lease.url_id])
    assert saved[0] == 2 and url_from_saved(saved).dup == Dup.NEAR
    # A URL written in layout 1 (before the flag) loads as not a duplicate.
    old = (1, *saved[1:len(URL_LAYOUTS[1]) + 1])
    assert url_from_saved(old).dup == Dup.NONE
    # Host state written before the share existed restores with 0 and says so.
    state = h.host_state()
    del state["dup_share"]
    back = HostFrontier.restore({**state, "urls": {}}, CFG)
    assert back.ends.dup_share == 0.0 and "dup_share" in back.added_fields


def test_failed_pages_rank_below_healthy_ones_in_the_queue():
    h = HostFrontier(H, CFG, seed=1)
    t = with_robots(h, urls=[H + "/flaky", H + "/fine"])
    lease = poll_page(h, t)
    if lease.url.endswith("/fine"):  # make /flaky the one that fails
        h.complete(ok(lease, text_sha256="f"), lease.issued_at)
        lease = poll_page(h, h.pacer.next_allowed_at)
    h.complete(ok(lease, Outcome.SERVER_ERROR, http_status=500), lease.issued_at)
    flaky = h.find(H + "/flaky")[1]
    assert flaky.failure_count == 1
    assert h.queue.score(flaky) == flaky.priority / 2 < h.queue.score(h.find(H + "/fine")[1])


# -- the records between the topics and the core ------------------------------------------

def test_intake_carries_sitemap_lastmod_and_changefreq():
    found = intake({"source": "SITEMAP", "depth": 1, "redirect_hops": 0, "links": [
        {"url": H + "/a", "lastmod_ms": 1_764_480_000_000, "priority": 0.7,
         "changefreq": "daily"},
        {"url": H + "/b", "lastmod_ms": None, "priority": None, "changefreq": None}]})
    a, b = found.groups[H]
    assert (a["lastmod"], a["changefreq"], a["priority"]) == (1_764_480_000.0, "daily", 0.7)
    assert (b["lastmod"], b["changefreq"]) == (None, None)


def test_duplicate_feedback_from_an_index_event():
    event = {"url_id": "0123456789abcdef", "url_version": 3, "change": "NEW",
             "duplicate_of": None, "near_duplicate_of": None}
    assert duplicate_feedback(event) is None
    assert duplicate_feedback({**event, "near_duplicate_of": "x"}) == {
        "url_id": "0123456789abcdef", "url_version": 3, "dup": 1, "new_page": True}
    both = duplicate_feedback({**event, "duplicate_of": "y", "near_duplicate_of": "x",
                               "change": "CHANGED"})
    assert (both["dup"], both["new_page"]) == (int(Dup.EXACT), False)


# -- a shared daily budget, paced by weight ------------------------------------------------

def test_budget_wait_paces_the_day_by_weight():
    from udfs.core.recrawl import budget_wait

    day = 10 * DAY_S
    assert budget_wait(0, 100, day, 0.1) is None
    assert budget_wait(20, 100, day, 0.25) is None  # 20 % ahead, weight 0.25
    assert budget_wait(30, 100, day, 0.25) == pytest.approx(day + 0.05 * DAY_S)
    assert budget_wait(99, 100, day, 1.0) is None  # weight 1 never waits
    assert budget_wait(60, 100, day + DAY_S / 2, 0.05) == pytest.approx(day + 0.55 * DAY_S)


def test_a_tight_budget_goes_first_to_the_healthy_host_and_then_to_the_throttled_one():
    from crawler.testkit.many_hosts import Frontier

    def run(cfg):
        f = Frontier(replace(cfg, daily_fetch_budget=100), seed=1)
        for name in ("healthy", "throttled"):
            for i in range(80):
                f.discover(f"http://{name}.example/p{i}", 0.0, depth=1)
        per_host = {"http://healthy.example": 0, "http://throttled.example": 0}
        now = 0.0
        while now < 600:  # ten minutes of a day whose budget is 100 pages
            f.hosts["http://throttled.example"].pacer.allowance = 0.25  # it keeps answering 429
            for lease in f.poll(now):
                if lease.kind is Kind.PAGE:
                    per_host[lease.host_key] += 1
                f.complete(ok(lease, http_status=404 if lease.kind is Kind.ROBOTS else 200,
                              text_sha256="t"), lease.host_key, now)
            now += 0.5
        return per_host

    healthy, throttled = run(CFG).values()
    # Links of value 0.5: the throttled host (weight 0.5 x 0.25) stops spending once an
    # eighth of the day's budget is spent this early in the day, the healthy one once a half.
    assert 50 <= healthy + throttled <= 51 and throttled <= 13 < healthy
    healthy, throttled = run(replace(CFG, recrawl=FIXED)).values()
    assert healthy + throttled == 100 and throttled > 13  # first come, first served



def test_a_duplicates_next_lease_asks_for_the_low_storage_tier():
    for cfg, tier in ((CFG, "low"), (replace(CFG, recrawl=FIXED), "standard")):
        h = HostFrontier(H, cfg, seed=1)
        lease, _ = visit(h, H + "/d", 0.0, text_sha256="t1")
        assert lease.storage_tier == "standard"
        h.duplicate(lease.url_id, lease.url_version, Dup.NEAR, True, lease.issued_at)
        u = h.urls[lease.url_id]
        nxt = poll_page(h, u.next_fetch_at)
        assert nxt.url == H + "/d" and nxt.storage_tier == tier
