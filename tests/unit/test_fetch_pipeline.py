"""One lease through fetch, storage and parsing, against the synthetic web on loopback;
the records it produces must be valid Avro for their topics."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from udfs.core.addresses import AddressPolicy
from udfs.core.fetching import DnsCache, FetchLimits
from udfs.core.fingerprints import url_id
from udfs.core.records import Kind, Lease
from udfs.fetcher.client import make_session
from udfs.fetcher.pipeline import FetchContext, process_lease
from udfs.frontier.pipeline import lease_record
from udfs.storage.bodies import LocalStore
from udfs.storage.warc import RollPolicy, read_record
from udfs.storage.warc_writer import WarcWriter
from udfs.wire.avro import registry
from udfs.wire.records import LeaseRecord

LIMITS = replace(FetchLimits(), read_timeout_s=1.0, total_timeout_s=5.0)
REG = registry()


def lease(url: str, host_key: str, kind: str = "PAGE", depth: int = 0) -> LeaseRecord:
    return lease_record(Lease("L1", url_id(url), 3, 1, 0.0, 300.0, url, host_key, Kind(kind),
                              depth))


def run_leases(web, tmp_path, leases, warc=None, store=None, parser=None):
    static = dict(e.split("=", 1) for e in web.static_hosts())
    cache = DnsCache(AddressPolicy.from_networks(["127.0.0.0/8"]), LIMITS, static)

    async def go():
        async with make_session(cache, LIMITS) as session:
            ctx = FetchContext(session, store or LocalStore(tmp_path), LIMITS, "FlinkCrawler",
                               clock_ms=lambda: 1_000, warc=warc, parser=parser)
            return [await process_lease(le, ctx) for le in leases]

    return asyncio.run(go())


def test_page_completion_and_links_grouped_per_host(web, tmp_path):
    s = web.site_list[0]
    hk = web.host_key(s)
    [(completion, discovered)] = run_leases(web, tmp_path, [lease(hk + "/p/0", hk, depth=2)])
    assert completion["outcome"] == "OK" and completion["http_status"] == 200
    assert completion["url_version"] == 3 and completion["object_key"].startswith("raw/")
    assert (tmp_path / completion["object_key"]).exists()
    assert completion["text_sha256"] and completion["links_count"] > 0
    hosts = [d["host_key"] for d in discovered]
    assert len(hosts) == len(set(hosts)) and hk in hosts  # one record per target host
    assert all(d["depth"] == 3 and d["source"] == "LINK" for d in discovered)
    REG.decode("completion", REG.encode("completion", completion))
    for d in discovered:
        REG.decode("discovered", REG.encode("discovered", d))


def test_a_page_is_hashed_and_compressed_once_for_its_warc_record_and_raw_object(
        web, tmp_path):
    s = web.site_list[0]
    hk = web.host_key(s)
    given: list[tuple[str | None, bytes | None]] = []

    class Store(LocalStore):  # a real store that notes what it was handed
        def put_body(self, body, tier="standard", sha256_hex=None, compressed=None):
            given.append((sha256_hex, compressed))
            return super().put_body(body, tier, sha256_hex, compressed)

    store = Store(tmp_path)
    w = WarcWriter(store, prefix="warc/", file_prefix="T", policy=RollPolicy(10**9, 300.0),
                   temp_dir=str(tmp_path / "tmp"), host="box")
    try:
        [(c, _)] = run_leases(web, tmp_path, [lease(hk + "/p/0", hk)], warc=w, store=store)
    finally:
        w.close()
    assert c["outcome"] == "OK" and c["warc_filename"]
    member = store.get_range(c["warc_filename"], c["warc_offset"], c["warc_length"])
    raw_object = (tmp_path / c["object_key"]).read_bytes()
    # The body's compressed piece (deflate.py: 10-byte gzip header, then the piece, an
    # empty final block and the 8-byte trailer) is inside the WARC record too.
    piece = raw_object[10:-10]
    assert len(piece) > 100 and piece in member
    assert given == [(c["body_sha256"], piece)]  # the writer's own, handed over
    assert read_record(member)[1] == store.get_body(c["object_key"]) == \
        web.body_for(s, "/p/0")


def test_sitemaps_read_by_the_parse_stage_give_what_this_process_would(web, tmp_path):
    """The fetcher's sitemaps are parsed in its parser processes: the same records as a
    parse in this process."""
    from udfs.core.parse import ParseLimits
    from udfs.parser.stage import ParseStage

    s = web.site_list[0]
    hk = web.host_key(s)
    leases = [lease(hk + "/sitemap_index.xml", hk, "SITEMAP"),
              lease(hk + "/sitemap-1.xml.gz", hk, "SITEMAP")]
    stage = ParseStage(ParseLimits(workers=1), "FlinkCrawler")
    try:
        staged = run_leases(web, tmp_path, leases, parser=stage)
        assert stage.started == 1 and stage.waiting == 0
    finally:
        stage.close()
    here = run_leases(web, tmp_path, leases)
    for c, _ in (*staged, *here):
        del c["fetch_duration_ms"]  # (the server's)
    assert staged == here
    assert len(staged[1][1][0]["links"]) == s.pages


def test_robots_redirect_and_sitemaps(web, tmp_path):
    s = next(x for x in web.site_list if x.robots == "rules")
    hk = web.host_key(s)
    r = next(x for x in web.site_list if "redirects" in x.features)
    rk = web.host_key(r)
    results = run_leases(web, tmp_path, [
        lease(hk + "/robots.txt", hk, "ROBOTS"),
        lease(rk + "/r/1", rk),
        lease(hk + "/sitemap_index.xml", hk, "SITEMAP"),
        lease(hk + "/sitemap-1.xml.gz", hk, "SITEMAP"),
    ])
    (robots, _), (redirect, none), (index, idx_links), (sitemap, sm_links) = results
    assert robots["outcome"] == "OK" and b"Disallow" in robots["body"]
    assert redirect["outcome"] == "REDIRECT" and redirect["redirect_location"] == rk + "/p/1"
    assert none == []  # the frontier, which counts hops, discovers redirect targets
    assert idx_links[0]["source"] == "ROBOTS_SITEMAP"
    assert idx_links[0]["links"][0]["url"] == hk + "/sitemap-1.xml.gz"
    assert [d["source"] for d in sm_links] == ["SITEMAP"]
    assert len(sm_links[0]["links"]) == s.pages
    for c, ds in results:
        REG.encode("completion", c)
        for d in ds:
            REG.encode("discovered", d)


@pytest.mark.parametrize("parse_cpu_s", [None, 0.1])
def test_a_sitemap_larger_than_the_page_limit_is_read_whole(tmp_path, parse_cpu_s):
    """A 50,000-URL sitemap of ~20 MB (twice fetch.max_body_bytes of 10 MiB) served on
    loopback is fetched and parsed in full: sitemaps have their own 50 MB limit. The
    configured drop list reaches sitemap entries. Parsed by a parse stage whose CPU
    limit it passes (parse_cpu_s), it ends OK with no entries and the limit as its error."""
    from aiohttp import web as aioweb

    from udfs.core.parse import ParseLimits
    from udfs.core.urls import UrlPolicy
    from udfs.parser.stage import ParseStage

    entries = "".join(f"<url><loc>http://big.test/item/{i}?utm_source=s&amp;pad={'x' * 330}"
                      f"</loc></url>\n" for i in range(50_000))
    body = ('\n\n<?xml version="1.0" encoding="UTF-8"?>\n'  # blank lines first, as served
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            f'{entries}</urlset>\n').encode()
    assert len(body) > 2 * FetchLimits().max_body_bytes - 1_000_000

    async def handler(request):
        return aioweb.Response(body=body, content_type="application/xml")

    async def go():
        app = aioweb.Application()
        app.router.add_get("/sitemap.xml", handler)
        runner = aioweb.AppRunner(app)
        await runner.setup()
        site = aioweb.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        limits = replace(FetchLimits(), total_timeout_s=30.0)
        cache = DnsCache(AddressPolicy.from_networks(["127.0.0.1/32"]), limits,
                         {"big.test": "127.0.0.1"})
        try:
            async with make_session(cache, limits) as session:
                ctx = FetchContext(session, LocalStore(tmp_path), limits, "FlinkCrawler",
                                   url_policy=UrlPolicy.from_names(["utm_*"]), parser=stage)
                url = f"http://big.test:{port}/sitemap.xml"
                return await process_lease(lease(url, f"http://big.test:{port}",
                                                 kind="SITEMAP"), ctx)
        finally:
            await runner.cleanup()

    stage = None if parse_cpu_s is None else \
        ParseStage(ParseLimits(workers=1, cpu_limit_s=parse_cpu_s), "FlinkCrawler")
    try:
        completion, discovered = asyncio.run(go())
    finally:
        if stage is not None:
            stage.close()
    if stage is not None:
        assert completion["outcome"] == "OK" and "0.1 s CPU" in completion["error"]
        assert completion["links_count"] == 0 and discovered == []
        return
    assert completion["outcome"] == "OK" and completion["error"] is None
    assert completion["links_count"] == 50_000
    links = [link["url"] for d in discovered for link in d["links"]]
    assert len(links) == 50_000 and all("utm_source" not in u for u in links)
