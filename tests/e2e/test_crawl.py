"""The whole crawl: both jobs (local MiniClusters), real Kafka, the synthetic web on
loopback — 50 sites, about 5,000 pages, every behaviour of the synthetic web — and
the assertions of the pipeline issue, judged from the web's own request log."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections import Counter
from itertools import pairwise

import pytest

from crawler.run import JobProcess, Watcher, publish_seeds, synthetic_overrides
from crawler.testkit.synthetic_web import SSRF_ADDRESS, SyntheticWeb, build_sites
from crawler.warc_tool import verify
from tests.unit.test_warc import pywb_index
from udfs.config import TOPIC_KEYS, load_config
from udfs.core.recrawl import updated_dup_share
from udfs.storage.bodies import LocalStore
from udfs.storage.warc import parse_cdxj, read_record, sha256_b32
from udfs.storage.warc_writer import recovering_writer

MIN_GAP_S = 0.2
DUP_PAGES = ("/dup/a", "/dup/b", "/near/a", "/near/b")
TEMPLATE_BUDGET = 120  # above a site's /p/{n} count, far below the calendar's
REVISIT_S = 60  # recrawl.high_value_interval_s (its least): how often seeds are fetched again


class Tripwire:
    """A listener on the SSRF bait's address: any connection is a failure."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((SSRF_ADDRESS, port))
        self.sock.listen()
        self.sock.settimeout(0.5)
        self.connections = 0
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()
            except OSError:
                continue

    def close(self) -> None:
        self.stopped = True
        self.sock.close()


@pytest.mark.timeout(1500)
def test_crawl_of_the_synthetic_web(cfg, fresh_topics, tmp_path):
    web = SyntheticWeb(build_sites(50, seed=7, pages=(90, 115), boilerplate=1),
                       log_path=str(tmp_path / "web.jsonl"))
    web.start()
    tripwire = Tripwire(web.port)
    names = fresh_topics(*TOPIC_KEYS, partitions=2)
    overrides = [f"topics.{k}.name={n}" for k, n in zip(TOPIC_KEYS, names, strict=True)]
    overrides += synthetic_overrides(web, tmp_path, MIN_GAP_S) + [
        "flink.restart_strategy=none", f"traps.template_budget={TEMPLATE_BUDGET}",
        "traps.template_sample_every=1000", f"recrawl.high_value_interval_s={REVISIT_S}",
        "frontier.retry_base_s=5"]
    run_cfg = load_config(env={}, overrides=overrides)
    jobs = [JobProcess(n, overrides, tmp_path / f"{n}.log") for n in ("frontier", "fetcher")]
    sites = {web.host_key(s): s for s in web.site_list}
    expected = {hk + p for hk, s in sites.items()
                for p in ["/", *(f"/p/{i}" for i in range(s.pages))]}
    expected |= {hk + p for hk, s in sites.items() if "dups" in s.features
                 for p in ("/dup/a", "/dup/b", "/near/a", "/near/b", "/near/child")}
    etag_homes = {hk + "/" for hk, s in sites.items() if "etag" in s.features}
    assert len(sites) >= 50 and len(expected) >= 5000
    # Seeds are high-value, revisited every REVISIT_S — unless the index's duplicate checks
    # flag them (exact or near), then every four (recrawl.learned_priority). The
    # duplicate pages are seeds too, beside every home page.
    dup_seeds = [hk + p for hk, s in sites.items() if "dups" in s.features
                 for p in DUP_PAGES]
    # The duplicate-heavy site (four in five pages one catalogue): pages that are not
    # duplicates are seeds too, revisited four times less often once the host's recent
    # new pages are mostly duplicates.
    (heavy,) = [hk for hk, s in sites.items() if "boilerplate" in s.features]
    heavy_seeds = [heavy + f"/p/{i}" for i in range(5, 45, 5)]
    seed_urls = {hk + "/" for hk in sites} | set(dup_seeds) | set(heavy_seeds)
    assert dup_seeds

    def revalidated() -> bool:  # a recrawl answered 304 on some ETag site's home page
        return any(r.status == 304 and r.host + r.path in etag_homes for r in list(web.log))

    # The web's log is on this process's monotonic clock, events on the wall clock.
    mono_offset = time.time() - time.monotonic()

    def flagged_since(events: list[dict]) -> dict[str, float]:
        """Seed → when its first fetch flagged as a duplicate ended (monotonic)."""
        out: dict[str, float] = {}
        for e in events:
            if e["url"] in seed_urls and (e["duplicate_of"] or e["near_duplicate_of"]):
                at = e["fetched_at_ms"] / 1000 - mono_offset
                out[e["url"]] = min(out.get(e["url"], at), at)
        return out

    def fetch_starts(log: list, urls: set[str]) -> dict[str, list[float]]:
        """When each of `urls` was fetched (200 or 304), in order."""
        starts: dict[str, list[float]] = {}
        for r in log:
            if r.host + r.path in urls and r.status in (200, 304):
                starts.setdefault(r.host + r.path, []).append(r.start)
        return {url: sorted(s) for url, s in starts.items()}

    def seed_gaps(events: list[dict], log: list) -> dict[bool, list[float]]:
        """Seconds between a seed's successive fetches: of flagged seeds (True) from
        their flagged fetch on, of the others (False)."""
        flagged = flagged_since(events)
        gaps: dict[bool, list[float]] = {True: [], False: []}
        for url, starts in fetch_starts(log, seed_urls).items():
            if url.startswith(heavy + "/"):
                continue  # (its own check, below)
            since = flagged.get(url, float("-inf")) - 5.0  # about the flagged fetch's start
            gaps[url in flagged] += [b - a for a, b in pairwise(starts) if a >= since]
        return gaps

    def heavy_gaps(events: list[dict], log: list) -> list[float]:
        """Gaps between fetches of the duplicate-heavy site's unflagged seeds, from when
        its share of duplicate new pages (as the frontier counts it) passed 0.6 on."""
        share, since = 0.0, None
        for e in sorted(events, key=lambda e: e["fetched_at_ms"]):
            if e["host_key"] == heavy and e["change"] == "NEW":
                share = updated_dup_share(share, bool(e["duplicate_of"] or
                                                      e["near_duplicate_of"]))
                if share >= 0.6:
                    since = e["fetched_at_ms"] / 1000 - mono_offset + 10.0  # + feedback
                    break
        if since is None:
            return []
        clean = set(heavy_seeds) - set(flagged_since(events))
        return [b - a for s in fetch_starts(log, clean).values() for a, b in pairwise(s)
                if a >= since]

    watcher = None
    try:
        for job in jobs:
            job.start()
        sent, bad = publish_seeds(run_cfg, sorted(seed_urls))
        assert sent == len(seed_urls) and bad == []
        watcher = Watcher(run_cfg)
        deadline = time.monotonic() + 900
        # (and three flagged seeds revisited since their flag: 4 × REVISIT_S at least)
        while time.monotonic() < deadline and not (
                expected <= watcher.poll().urls and revalidated() and
                len(seed_gaps(watcher.events, list(web.log))[True]) >= 3 and
                heavy_gaps(watcher.events, list(web.log))):
            assert all(j.alive() for j in jobs), [j.report() for j in jobs]
            time.sleep(2)
        missing = expected - watcher.progress.urls
        assert not missing, f"never indexed: {sorted(missing)[:20]} ({len(missing)})"
    finally:
        for job in jobs:
            job.stop()
        if watcher:
            watcher.poll()
            watcher.close()
        web.stop()
        tripwire.close()

    log = list(web.log)
    events = watcher.events
    # Exactly once per (url_id, url_version); 0 politeness violations (gap, concurrency,
    # Retry-After in seconds and as an HTTP-date, robots.txt first, disallowed paths).
    ids = [e["event_id"] for e in events]
    assert len(ids) == len(set(ids)), "an (url_id, url_version) was indexed twice"
    violations = web.violations(run_cfg["robots.user_agent"], MIN_GAP_S)
    assert violations == dict.fromkeys(violations, 0), violations
    throttled = {sites[r.host].features >= {"http_date"} for r in log if r.status == 429}
    assert throttled == {True, False}, "both Retry-After forms were exercised"

    # A host whose robots.txt answers 5xx gets nothing else until it recovers.
    for hk, s in sites.items():
        if s.robots == "error_then_ok":
            reqs = sorted((r for r in log if r.host == hk), key=lambda r: r.start)
            assert [r.status for r in reqs[:3]] == [500, 500, 200]
            assert all(r.path == "/robots.txt" for r in reqs[:3])

    # Redirect loops end; traps stay within their budgets; session ids never reach a request.
    # (A 429 on a throttled site is no hop of the loop: the URL waits and is asked again.)
    loops = Counter(r.host + r.path for r in log
                    if r.path.startswith("/loop/") and r.status not in (429, 503))
    assert loops and max(loops.values()) <= 2
    calendar = Counter(r.host for r in log if r.path.startswith("/cal/"))
    assert calendar and max(calendar.values()) <= TEMPLATE_BUDGET + 1
    assert not any("sessionid" in r.path for r in log)

    # Stored objects hold exactly what was served; identical pages share one object.
    store = LocalStore(tmp_path / "objects")
    latest = {}
    for e in events:
        latest[e["url"]] = e
    for url, e in latest.items():
        hk, path = url.split("/", 3)[:3], "/" + url.split("/", 3)[3]
        host = "/".join(hk)
        if path == "/" or path.startswith(("/p/", "/dup/", "/near/a", "/near/b")):
            assert store.get_body(e["object_key"]) == web.body_for(sites[host], path), url
    # Every index event names its WARC record: one ranged read of the published file is
    # that record, its payload digest the stored body's (the fetcher's last open file is
    # published by recovery first, as `crawl run` does when it stops the jobs).
    recovering_writer(run_cfg, store).recover()
    for e in events:
        member = store.get_range(e["warc_filename"], e["warc_offset"], e["warc_length"])
        h = read_record(member)[0].rec_headers
        assert h.get_header("WARC-Target-URI") == e["url"], e
        assert h.get_header("WARC-Payload-Digest") == sha256_b32(hex_digest=e["body_sha256"])
    # Every published file passes warcio's check; its CDXJ lists every response and
    # revisit record (and nothing else) and equals pywb's indexer's; no record twice.
    verdict = verify(store, run_cfg["warc.prefix"])
    assert verdict.files >= 1 and verdict.problems == [], verdict.problems[:5]
    for key in [k for k in store.list_objects(run_cfg["warc.prefix"])
                if k.endswith(".warc.gz")]:
        local = tmp_path / key.rsplit("/", 1)[-1]
        local.write_bytes(store.get_object(key))
        assert parse_cdxj(store.get_object(key[: -len(".warc.gz")] + ".cdxj")) == \
            pywb_index(local), key
    for hk, s in sites.items():
        if "dups" in s.features:
            keys = {latest[hk + p]["object_key"] for p in ("/dup/a", "/dup/b", "/near/a")}
            assert len(keys) == 1
            near_b = latest[hk + "/near/b"]
            assert near_b["object_key"] not in keys
            # Near-duplicates are flagged, and their links still followed (/near/child).
            assert near_b["near_duplicate_of"] is not None or any(
                latest[hk + p]["near_duplicate_of"] == near_b["url_id"]
                for p in ("/dup/a", "/dup/b", "/near/a"))
            assert hk + "/near/child" in latest

    # Duplicate feedback: a seed the index flagged (its events read back by the
    # frontier) is revisited about four times less often, from its first flagged fetch
    # on, than the seeds never flagged; every one was indexed (above).
    gaps = seed_gaps(events, log)
    assert any(url in flagged_since(events) for url in dup_seeds), "no duplicate was flagged"
    assert gaps[True] and gaps[False], gaps
    assert statistics.median(gaps[True]) >= 2 * statistics.median(gaps[False]), gaps
    # The duplicate-heavy host: its pages that are no duplicates are spaced out too
    # (every revisit of the host waits four intervals), and all its pages were indexed.
    spaced = heavy_gaps(events, log)
    assert spaced and min(spaced) >= 3 * REVISIT_S, spaced

    # A recrawl sent If-None-Match, got 304, and wrote neither an object nor an event.
    assert revalidated()
    for home in etag_homes:
        assert sum(e["url"] == home for e in events) == 1

    # SSRF: the name that resolves to a non-allowed address was never connected to.
    assert tripwire.connections == 0
    assert not any(r.path == "/steal" for r in log)
    print(f"e2e: {len(events)} index events, {len(log)} requests, {len(sites)} sites, "
          f"outcomes {watcher.progress.outcomes}, violations {violations}, seed revisit "
          f"gap medians: flagged {statistics.median(gaps[True]):.0f} s "
          f"({len(gaps[True])} gaps), others {statistics.median(gaps[False]):.0f} s; "
          f"duplicate-heavy host's clean seeds after its share passed 0.6: {spaced}")
