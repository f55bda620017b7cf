"""The synthetic web on loopback: its behaviours, its request log and the oracle over it.

Traffic goes only to 127.0.0.1 (the virtual host is chosen by the Host header)."""

from __future__ import annotations

import gzip
import time

from crawler.testkit.synthetic_web import SyntheticWeb, build_sites


def _get(web, site, path, headers=None):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": site.name, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def site_with(web, **want):
    for s in web.site_list:
        if all((getattr(s, k) == v) if k != "feature" else v in s.features
               for k, v in want.items()):
            return s
    raise LookupError(want)


def test_robots_variants(web):
    rules = site_with(web, robots="rules")
    status, _, body = _get(web, rules, "/robots.txt")
    assert status == 200 and b"Disallow: /private/" in body
    assert _get(web, site_with(web, robots="missing"), "/robots.txt")[0] == 404
    flaky = site_with(web, robots="error_then_ok")
    assert [_get(web, flaky, "/robots.txt")[0] for _ in range(3)] == [500, 500, 200]
    redirect = site_with(web, robots="redirect")
    status, headers, _ = _get(web, redirect, "/robots.txt")
    assert status == 301 and headers["Location"] == "/robots-real.txt"
    assert len(_get(web, site_with(web, robots="huge"), "/robots.txt")[2]) > 512 * 1024


def test_pages_sitemaps_etag_redirects_and_hostile_pages(web):
    s = site_with(web, feature="etag")
    status, headers, body = _get(web, s, "/p/0")
    assert status == 200 and b"<a href=" in body
    assert _get(web, s, "/p/0", {"If-None-Match": headers["ETag"]})[0] == 304
    s = site_with(web, robots="rules")
    status, _, body = _get(web, s, "/sitemap-1.xml.gz")
    assert status == 200 and f"{web.host_key(s)}/p/0".encode() in gzip.decompress(body)
    loop = site_with(web, feature="loop")
    assert _get(web, loop, "/loop/a")[1]["Location"] == "/loop/b"
    bomb = site_with(web, feature="bomb")
    status, headers, body = _get(web, bomb, "/bomb")
    assert headers["Content-Encoding"] == "gzip" and len(body) < 1024 * 1024
    assert _get(web, site_with(web, feature="calendar"), "/cal/2026/11/30")[0] == 200


def test_throttled_site_answers_429_with_retry_after(web):
    s = next(s for s in web.site_list if s.throttle_every)
    statuses = [_get(web, s, f"/p/{i % s.pages}")[0] for i in range(s.throttle_every)]
    assert statuses.count(429) == 1


def test_the_log_feeds_the_oracle(web):
    polite = SyntheticWeb(build_sites(3, seed=5))
    polite.start()
    try:
        s = site_with(polite, robots="rules")
        _get(polite, s, "/robots.txt")
        time.sleep(1.05)
        _get(polite, s, "/p/0")
        assert sum(polite.violations("FlinkCrawler").values()) == 0
        _get(polite, s, "/p/1")  # no gap
        _get(polite, s, "/private/1")  # disallowed
        v = polite.violations("FlinkCrawler")
        assert v["gap"] == 2 and v["disallowed"] == 1
        other = next(x for x in polite.site_list if x.robots != "missing" and x is not s)
        _get(polite, other, "/p/0")  # before its robots.txt
        assert polite.violations("FlinkCrawler")["before_robots"] == 1
    finally:
        polite.stop()


def test_a_duplicate_heavy_site_serves_one_catalogue_for_four_pages_in_five():
    sites = build_sites(3, seed=5, boilerplate=1)
    assert len(sites) == 4 and build_sites(3, seed=5) == sites[:3]  # the others unchanged
    heavy = sites[-1]
    assert heavy.features == frozenset({"boilerplate"}) and heavy.throttle_every == 0
    web = SyntheticWeb(sites)
    web.start()
    try:
        bodies = {p: _get(web, heavy, p)[2] for p in ("/", "/p/1", "/p/2", "/p/4", "/p/5")}
    finally:
        web.stop()
    assert bodies["/p/1"] == bodies["/p/2"] == bodies["/p/4"] == web.body_for(heavy, "/p/1")
    assert len({bodies["/"], bodies["/p/1"], bodies["/p/5"]}) == 3
    # The catalogue links every page of the site: nothing becomes unreachable.
    assert all(f'href="/p/{k}"'.encode() in bodies["/p/1"] for k in range(heavy.pages))


def test_the_hostile_set_is_opt_in_and_serves_pages_that_attack_the_parser():
    from crawler.testkit.synthetic_web import HOSTILE_PAGES

    sites = build_sites(3, seed=5, hostile=1)
    assert len(sites) == 4 and build_sites(3, seed=5) == sites[:3]  # the others unchanged
    assert not any("hostile" in s.features for s in build_sites(30, seed=5, boilerplate=2))
    web = SyntheticWeb(sites)
    web.start()
    try:
        bad = sites[3]
        _, _, home = _get(web, bad, "/")
        assert all(path.encode() in home for path in HOSTILE_PAGES)
        status, _, nested = _get(web, bad, "/hostile/nested")
        assert status == 200 and nested.count(b"<div>") == 100_000
        status, _, attrs = _get(web, bad, "/hostile/attrs")
        assert status == 200 and 4_500_000 < len(attrs) < 5_242_880  # whole under max_bytes
        assert attrs.count(b'="') > 90_000
        status, _, slow = _get(web, bad, "/hostile/slow")
        assert status == 200 and slow.count(b"<b>w</b>") == 200_000
        assert _get(web, sites[0], "/hostile/slow")[0] == 404  # only hostile sites
    finally:
        web.stop()


def test_pages_are_distinct_documents_and_the_near_twins_are_near():
    """A bench crawl's web is no web of near-duplicates: 20 KB pages of different paths
    and sites are more than SimHash's 3 bits apart, while /near/a and /near/b (one word
    apart) are within them and /dup/a and /dup/b are the same page."""
    from itertools import combinations

    from udfs.core.fingerprints import hamming
    from udfs.core.parse import parse_html

    web = SyntheticWeb(build_sites(6, seed=2, pages=(40, 50)), page_bytes=20_000)
    pages = [(s, p) for s in web.site_list for p in ["/", *(f"/p/{i}" for i in range(19))]]
    fps = [parse_html(web.body_for(s, p), f"http://{s.name}{p}").simhash for s, p in pages]
    distances = [hamming(a, b) for a, b in combinations(fps, 2)]
    assert len(distances) == 7140 and min(distances) > 3, min(distances)
    assert sum(distances) / len(distances) > 16
    # Every near pair of the webs the integration, e2e and cluster tests crawl.
    webs = [build_sites(50, seed=7, pages=(90, 115), boilerplate=1),
            build_sites(12, seed=5, pages=(15, 20)), build_sites(8, seed=3, pages=(25, 35)),
            build_sites(6, seed=4), build_sites(200, seed=11)]
    twins = {s.name: s for sites in webs for s in sites if "dups" in s.features}.values()
    small = SyntheticWeb(list(twins))
    assert len(twins) >= 60
    for site in twins:
        near = [parse_html(small.body_for(site, p), "http://x.test/").simhash
                for p in ("/near/a", "/near/b")]
        assert hamming(*near) <= 3, site.name
        assert small.body_for(site, "/dup/a") == small.body_for(site, "/dup/b")


def test_a_page_store_serves_the_bytes_the_web_would_make(tmp_path):
    """The bench's stored pages (PageStore) must be the pages themselves, links to other
    sites on the serving port included: a wrong offset, a missed page or a port left as
    stored fails here."""
    from crawler.testkit.synthetic_web import PageStore

    sites = build_sites(5, seed=3, pages=(3, 7))
    store = PageStore.open_or_build(tmp_path, sites, page_bytes=3000, workers=2)
    plain = SyntheticWeb(sites, port=18_600, page_bytes=3000)
    served = SyntheticWeb(sites, port=18_600, page_bytes=3000, store=store)
    paths = [(s, p) for s in sites for p in ["/", *(f"/p/{i}" for i in range(s.pages))]]
    assert len(store) == len(paths)
    for site, path in paths:
        want = plain.body_for(site, path)
        assert store.get(site.name, path, 18_600) == want, (site.name, path)
        assert served.body_for(site, path) == want
    assert b".test:18600/p/" in b"".join(store.get(s.name, "/", 18_600) for s in sites)
    assert store.get(sites[0].name, f"/p/{sites[0].pages}", 18_600) is None  # no such page
    # Made once: a second open reads the same files (all of its parts, with another
    # count of workers asked for); another page size is another store.
    files = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    again = PageStore.open_or_build(tmp_path, sites, page_bytes=3000, workers=1)
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == files
    assert all(again.get(s.name, p, 18_600) == plain.body_for(s, p) for s, p in paths)
    PageStore.open_or_build(tmp_path, sites, page_bytes=4000, workers=2).close()
    assert len(list(tmp_path.glob("*.idx"))) == 2
    for s in (store, again):
        s.close()


def test_a_page_store_is_found_again_by_another_process():
    """A store's name follows from the web alone, not from the process: a name made from
    repr(sites) followed each process's string hash seed (the order of a site's features
    in their frozenset), so every bench run made and kept a store of its own."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = ("import hashlib; from crawler.testkit.synthetic_web import SyntheticWeb, "
              "build_sites, store_name; s = build_sites(40, seed=11, pages=(3, 4)); "
              "print(store_name(s, SyntheticWeb(s, port=1)), "
              "hashlib.sha256(repr(s).encode()).hexdigest())")
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin"},
                           cwd=root).stdout.split() for seed in ("1", "2", "3")]
    assert len({r[1] for r in runs}) > 1  # the sites' repr does differ between processes
    assert len({r[0] for r in runs}) == 1  # the store's name does not
