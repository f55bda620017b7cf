"""The intake's memory of URLs it sent lately (udfs/core/frontier/recent.py): what it
keeps from a host is what the host would have answered with `urls_known` or the same
refusal."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from udfs.config import load_defaults
from udfs.config.policies import frontier_config
from udfs.core.frontier import HostFrontier, Kind
from udfs.core.frontier.recent import RecentUrls

H = "http://h.example"
T0 = 1_700_000_000.0


def test_a_rediscovery_within_the_ttl_is_kept_back_and_passes_again_after_it():
    r = RecentUrls(10, ttl_s=600)
    assert r.passes(H + "/a", T0, depth=2)
    assert not r.passes(H + "/a", T0 + 599, depth=2)
    assert not r.passes(H + "/a", T0 + 599, depth=3, redirect_hops=1)
    assert r.passes(H + "/a", T0 + 600, depth=2)  # its entry is made anew
    assert not r.passes(H + "/a", T0 + 1199, depth=2)


@pytest.mark.parametrize("what", [
    {"priority": 0.1}, {"depth": 1}, {"redirect_hops": 0}, {"lastmod": T0 - 5},
    {"is_seed": True}])
def test_what_could_change_the_host_passes_within_the_ttl(what):
    r = RecentUrls(10, ttl_s=600)
    assert r.passes(H + "/a", T0, priority=0.5, depth=2, redirect_hops=1)
    assert r.passes(H + "/a", T0 + 1, **{"depth": 2, "redirect_hops": 1, **what})
    assert not r.passes(H + "/a", T0 + 2, depth=2, redirect_hops=1)


def test_a_discovery_is_kept_back_only_behind_one_as_shallow_in_both_depth_and_hops():
    """Sent (depth 0, 3 hops) then (4, 0): either may have been refused, so (2, 2) passes;
    (4, 3) is behind both, (5, 1) behind the second."""
    r = RecentUrls(10, ttl_s=600)
    assert r.passes(H + "/a", T0, depth=0, redirect_hops=3)
    assert r.passes(H + "/a", T0 + 1, depth=4, redirect_hops=0)
    assert r.passes(H + "/a", T0 + 2, depth=2, redirect_hops=2)
    assert not r.passes(H + "/a", T0 + 3, depth=4, redirect_hops=3)
    assert not r.passes(H + "/a", T0 + 3, depth=5, redirect_hops=1)
    assert r.passes(H + "/a", T0 + 4, depth=0, redirect_hops=0)
    assert not r.passes(H + "/a", T0 + 5, depth=0, redirect_hops=2)


def test_the_oldest_entries_go_first_past_the_bound_and_expired_ones_are_dropped():
    r = RecentUrls(3, ttl_s=600)
    for i in range(4):
        assert r.passes(f"{H}/{i}", T0 + i)
    assert len(r) == 3
    assert r.passes(H + "/0", T0 + 10)  # dropped for the bound: passes again
    assert not r.passes(H + "/3", T0 + 10)
    assert r.passes(H + "/x", T0 + 602.5)  # /2 (sent at T0 + 2) and older expire
    assert len(r) == 3  # /3, /0 (at T0 + 10) and /x


def test_no_memory_passes_everything():
    r = RecentUrls(0, ttl_s=600)
    assert all(r.passes(H + "/a", T0) for _ in range(3))
    assert len(r) == 0


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="max_urls"):
        RecentUrls(-1, 600)


def _cfg():
    cfg = frontier_config(load_defaults())
    # The day's template budget is the one rule whose answer changes with time alone
    # (the module's docstring): out of the way here.
    traps = replace(cfg.traps, max_depth=3, template_budget=10**9)
    return replace(cfg, traps=traps, max_redirect_hops=2, lookahead_s=0.0,
                   max_lookahead_leases=0)


@pytest.mark.parametrize("seed", range(20))
def test_a_host_given_only_what_passes_ends_as_one_given_everything(seed):
    """Random rediscoveries (depths and redirect hops past their limits, priority hints,
    sitemap lastmods, seeds), with leases granted between them: the host that gets only
    what the memory passes ends with the same URLs, in the same states, and the same
    counts but those of rediscoveries (urls_known and repeated refusals), as the host
    that gets every discovery."""
    rng = random.Random(seed)
    cfg = _cfg()
    everything, filtered = HostFrontier(H, cfg, seed=1), HostFrontier(H, cfg, seed=1)
    recent = RecentUrls(rng.choice([8, 1000]), ttl_s=rng.choice([30.0, 600.0]))
    now, kept = T0, 0
    for _ in range(1500):
        now += rng.expovariate(1.0)
        if rng.random() < 0.1:  # leases granted (URLs leased, their due times moved)
            for host in (everything, filtered):
                host.poll(now)
            continue
        url = f"{H}/p{rng.randrange(40)}"
        found = {"depth": rng.randrange(5), "redirect_hops": rng.randrange(4),
                 "priority": rng.choice([None, None, rng.random()]),
                 "lastmod": now - rng.randrange(1, 10**6) if rng.random() < 0.05 else None,
                 "is_seed": rng.random() < 0.02}
        everything.discover(url, now, checked=True, kind=Kind.PAGE, **found)
        if recent.passes(url, now, **found):
            filtered.discover(url, now, checked=True, kind=Kind.PAGE, **found)
        else:
            kept += 1

    def state(host):
        return {uid: (u.url, u.priority, u.depth, u.redirect_hops, u.status,
                      u.next_fetch_at) for uid, u in host.urls.items()}

    assert kept > 20  # the memory did keep rediscoveries back
    assert state(filtered) == state(everything)
    # What was kept back the host would have counted as known or refused again.
    answers = ("urls_known", "refused_depth", "refused_redirect_hops")
    assert sum(filtered.stats.pop(a, 0) for a in answers) + kept == \
        sum(everything.stats.pop(a, 0) for a in answers)
    assert filtered.stats == everything.stats
