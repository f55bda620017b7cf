"""The crawl bench's record of a politeness violation: the hosts' whole request logs."""

from __future__ import annotations

import json

import pytest

from bench.bench_crawl import (
    crawled_out,
    keep_violating_hosts,
    merged_runs,
    pages_and_violations,
    pages_by_size,
    pair_ratios,
    violations_cell,
    window_row,
)
from crawler.testkit.oracle import Request
from crawler.testkit.synthetic_web import SyntheticWeb, build_sites

pytestmark = pytest.mark.unit


def test_the_violating_hosts_requests_are_kept_and_only_theirs(tmp_path) -> None:
    web = SyntheticWeb(build_sites(2, seed=3))  # not started: its log is filled here
    bad, good = (web.host_key(s) for s in web.site_list)
    robots = [Request(h, True, "/robots.txt", 0.0, 0.01, 404) for h in (bad, good)]
    web.log.extend(robots + [
        Request(good, False, "/", 5.0, 5.01, 200), Request(good, False, "/a", 6.0, 6.01, 200),
        Request(bad, False, "/", 5.0, 5.01, 200),
        Request(bad, False, "/a", 5.1, 5.11, 200)])  # 0.1 s after the one before it
    path = keep_violating_hosts(web, 0.2, folder=tmp_path / "kept")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["host"] == bad and lines[0]["kinds"]["gap"] == 1
    assert lines[0]["min_gap_s"] >= 0.2
    assert [r["path"] for r in lines[1:]] == ["/robots.txt", "/", "/a"]
    assert all(r.get("host", bad) == bad for r in lines)


def test_a_run_whose_web_ran_out_of_pages_is_refused() -> None:
    # A site whose every page was fetched by the window's end counts as crawled out; past
    # DRY_SHARE of the sites, the run measured the web's size, not the crawler's pace.
    web = SyntheticWeb(build_sites(2, seed=3, pages=(3, 3)))  # not started
    done, busy = (web.host_key(s) for s in web.site_list)
    web.log.extend([Request(h, True, "/robots.txt", 0.0, 0.01, 404) for h in (done, busy)]
                   + [Request(done, False, f"/p/{i}", 1.0 + 2 * i, 1.01 + 2 * i, 200)
                      for i in range(3)]
                   + [Request(busy, False, "/p/0", 1.0, 1.01, 200),
                      Request(busy, False, "/p/1", 7.0, 7.01, 404),  # not served
                      Request(busy, False, "/p/2?x=1", 9.5, 9.51, 200)])
    assert crawled_out(web, 4.0) == 0  # its third page came at 5.0
    assert crawled_out(web, 10.0) == 1
    assert pages_and_violations(web, 0.2, 0.0, 4.0)[:2] == (3, 0)
    with pytest.raises(RuntimeError, match="ran out of pages: 1 of 2 sites"):
        pages_and_violations(web, 0.2, 0.0, 10.0)


def test_a_runs_violations_cell_names_their_kinds() -> None:
    assert violations_cell({"violations": 0, "kinds": {"gap": 0}}) == "0"
    assert violations_cell({"violations": 3, "kinds": {"gap": 1, "retry_after": 2,
                                                       "disallowed": 0}}) == \
        "3 (gap 1, retry_after 2)"
    assert violations_cell({"violations": 1}) == "1"  # a build whose run said no kinds



def test_a_build_without_the_page_store_is_said_to_crawl_another_web() -> None:
    """--against an older build: its web is named when it differs from this checkout's
    (its pages' words, or pages made as they are served), and only then. The older
    sources are this checkout's with the mark of each change taken out (a clone for CI
    may not hold the history)."""
    from bench.bench_crawl import ROOT, web_difference

    bench = (ROOT / "bench" / "bench_crawl.py").read_text()
    web = (ROOT / "crawler" / "testkit" / "synthetic_web.py").read_text()
    assert web_difference("HEAD", bench, web) is None
    no_store = bench.replace("PageStore", "")
    assert "no PageStore" in (web_difference("e88fe67", no_store, web) or "")
    lorem = web.replace("def _vocabulary(", "def _words(")
    assert "LOREM-only" in (web_difference("bad46ab", no_store, lorem) or "")


def test_each_pair_beside_scrapy_gives_its_own_ratios_and_runs_sum() -> None:
    ours = [(300, 100.0, 150.0), (200, 100.0, 120.0)]  # (pages, seconds, CPU s)
    theirs = [(200, 100.0, 100.0), (200, 100.0, 80.0)]
    assert pair_ratios(ours, theirs) == "1.50x at 1.00x; 1.00x at 1.50x"
    runs = [((300, 1, {"gap": 1}), 100.0, {"frontier": 50.0}),
            ((200, 0, {"gap": 0}), 90.0, {"frontier": 40.0, "kafka": 5.0})]
    assert merged_runs(runs) == (
        (500, 1, {"gap": 1}), 190.0, {"frontier": 90.0, "kafka": 5.0})


def test_pages_per_site_are_given_once_for_all_sizes_or_once_per_size() -> None:
    # A longer warm-up needs more pages a site on a small web than on a large one.
    assert pages_by_size(["450,540"], [200, 2000]) == {200: (450, 540), 2000: (450, 540)}
    both = pages_by_size(["1000,1200", "450,540"], [200, 2000])
    assert both == {200: (1000, 1200), 2000: (450, 540)}
    assert "1000–1200 (200 sites), 450–540 (2,000 sites)" in window_row(
        120, 240, 0.2, 20_000, 10_000, both)
    assert " / 450–540 / " in window_row(120, 60, 0.2, 20_000, 10_000, {200: (450, 540)})
    for given, sizes, reason in ((["1,2", "3,4", "5,6"], [200, 2000], "one per size (2)"),
                                 (["9,3"], [200], "1 <= LO <= HI"),
                                 (["a,b"], [200], "whole numbers"),
                                 (["1,2", "3,4"], [200, 200], "sizes that differ")):
        with pytest.raises(ValueError, match=reason.replace("(", r"\(").replace(")", r"\)")):
            pages_by_size(given, sizes)


def test_the_warmup_bench_takes_each_interval_and_window_from_the_trace() -> None:
    from bench.bench_crawl import TracePoint
    from bench.bench_warmup import at, between, interval_row

    trace = [TracePoint(30.0, 3000, {"frontier": 6.0, "kafka": 1.0}, {"frontier": 3.0}),
             TracePoint(60.0, 9000, {"frontier": 12.0, "kafka": 2.0}, {"frontier": 3.6})]
    assert between(None, trace[0]) == (30.0, 3000, {"frontier": 6.0, "kafka": 1.0},
                                       {"frontier": 3.0})
    secs, pages, cpu, jit = between(trace[0], trace[1])
    assert (secs, pages) == (30.0, 6000) and cpu == {"frontier": 6.0, "kafka": 1.0}
    assert jit == pytest.approx({"frontier": 0.6})
    assert at(trace, 0) is None and at(trace, 58) is trace[1]
    # 200 pages/s; 7 CPU s over 6,000 pages; the JIT 0.6 s of it, 20 ms a second.
    assert interval_row(secs, pages, cpu, jit) == (
        "200.0 pages/s; 1.17 ms a page, of which JIT 0.10; JIT ms a second: frontier 20")
