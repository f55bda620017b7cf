"""Web-standards layer throughput: normalize_url, is_allowed, sitemap parsing, and
parse_html (the parser's pages per second on one core: `crawl plan`'s parser figure),
and the CPU a fetcher spends keeping one page (its WARC records and its raw/ copy: part
of `crawl plan`'s fetcher figure, which grows with the body).

    python bench/bench_standards.py

Each figure is measured beside a stdlib baseline in the same run (urljoin,
urllib.robotparser, a whole-tree lxml parse) so the ratio is what to compare.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import os
import random
import sys
import time
import urllib.robotparser
import zlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from urllib.parse import urljoin

import numpy as np
from lxml import etree
from zlib_ng import zlib_ng

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._results import record, timed  # noqa: E402
from crawler.testkit.procstat import minor_faults  # noqa: E402
from crawler.testkit.synthetic_web import SyntheticWeb, build_sites  # noqa: E402
from crawler.testkit.warcref import warcio_record  # noqa: E402
from udfs.core.fingerprints import (  # noqa: E402
    _hashes_of_4grams,
    _majority,
    _token_codes,
    simhash64,
    simhash64_numpy,
)
from udfs.core.parse import ParseLimits, parse_html  # noqa: E402
from udfs.core.robots import parse_robots  # noqa: E402
from udfs.core.sitemaps import parse_sitemap  # noqa: E402
from udfs.core.urls import normalize_url  # noqa: E402
from udfs.parser.stage import ParseStage  # noqa: E402
from udfs.storage import warc  # noqa: E402
from udfs.storage.deflate import FAST_LEVELS, gzip_of, piece, piece_by  # noqa: E402
from udfs.storage.warc import Exchange, Fetch, build_records  # noqa: E402

rng = random.Random(7)


def sample_urls(n: int) -> list[tuple[str, str]]:
    words = ["news", "2026", "a", "B", "%7Euser", "caf%c3%a9", "..", ".", "item", "x y", "ü"]
    out = []
    for _ in range(n):
        path = "/".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        query = "&".join(f"{rng.choice(['id', 'utm_source', 'p', 'q'])}={rng.randint(0, 999)}"
                         for _ in range(rng.randint(0, 3)))
        raw = rng.choice([f"/{path}", f"../{path}", f"HTTP://Host{rng.randint(0, 99)}.Example:80/"
                          f"{path}", f"https://xn--bcher-kva.example/{path}#frag"])
        out.append((raw + (f"?{query}" if query else ""), "http://base.example/dir/page.html"))
    return out


def bench_urls() -> list[tuple[str, str]]:
    urls = sample_urls(20_000)

    def ours():
        for raw, base in urls:
            normalize_url(raw, base)

    def stdlib():
        for raw, base in urls:
            urljoin(base, raw)

    calls, secs = timed(ours, min_seconds=2)
    ours_rate = calls * len(urls) / secs
    calls, secs = timed(stdlib, min_seconds=2)
    base_rate = calls * len(urls) / secs
    return [("normalize_url (WHATWG parse + RFC 3986 normalization)", f"{ours_rate:,.0f} URLs/s"),
            ("urllib.parse.urljoin only (no normalization), same URLs", f"{base_rate:,.0f} URLs/s"),
            ("ratio ours / urljoin", f"{ours_rate / base_rate:.2f}")]


def robots_file(target_bytes: int) -> str:
    lines = ["User-agent: *", "Crawl-delay: 1"]
    size = 0
    i = 0
    while size < target_bytes:
        kind = rng.choice(["Disallow", "Allow"])
        pattern = f"/section{i % 500}/sub{i}/" + rng.choice(["", "*.pdf$", "*?sort=", "page"])
        line = f"{kind}: {pattern}"
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines) + "\n"


def bench_robots() -> list[tuple[str, str]]:
    paths = [f"http://h.example/section{rng.randint(0, 600)}/sub{rng.randint(0, 20000)}/"
             f"{rng.choice(['a.pdf', 'page', 'x?sort=1', ''])}" for _ in range(5000)]
    rows = []
    for label, size in (("small (2 KiB)", 2 * 1024), ("500 KiB", 500 * 1024)):
        text = robots_file(size)
        parsed = parse_robots(text)
        parsed.is_allowed("FlinkCrawler", paths[0])  # build the agent's rule index once

        def ours(parsed=parsed):
            for p in paths:
                parsed.is_allowed("FlinkCrawler", p)

        rp = urllib.robotparser.RobotFileParser()
        rp.parse(text.splitlines())

        def stdlib(rp=rp):
            for p in paths[:500]:
                rp.can_fetch("FlinkCrawler", p)

        calls, secs = timed(ours, min_seconds=2)
        ours_rate = calls * len(paths) / secs
        calls, secs = timed(stdlib, min_seconds=2, max_rounds=20)
        base_rate = calls * 500 / secs
        from udfs.core.robots import _parse  # uncached, to time the parse itself

        pc, ps = timed(lambda t=text: _parse(t).is_allowed("FlinkCrawler", "/"),
                       min_seconds=1, max_rounds=50)
        rows += [(f"is_allowed, {label} robots.txt, parsed once", f"{ours_rate:,.0f} checks/s"),
                 (f"urllib.robotparser.can_fetch, {label}", f"{base_rate:,.0f} checks/s"),
                 (f"ratio ours / robotparser, {label}", f"{ours_rate / base_rate:,.1f}"),
                 (f"parse + index {label}", f"{ps / pc * 1000:,.1f} ms per file")]
    return rows


def bench_sitemaps() -> list[tuple[str, str]]:
    n = 50_000
    body = b"".join(b"<url><loc>https://h.example/p/%d?x=%d</loc><lastmod>2026-11-%02dT10:00:00Z"
                    b"</lastmod><priority>0.5</priority></url>\n" % (i, i * 7, i % 28 + 1)
                    for i in range(n))
    xml = b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">' \
        + body + b"</urlset>"
    zipped = gzip.compress(xml)

    def ours():
        assert len(parse_sitemap(zipped).entries) == n

    def naive():
        root = etree.fromstring(gzip.decompress(zipped))
        assert len(root.findall(".//{*}loc")) == n

    calls, secs = timed(ours, min_seconds=2, max_rounds=20)
    ours_rate = calls * n / secs
    calls, secs = timed(naive, min_seconds=2, max_rounds=50)
    naive_rate = calls * n / secs
    return [("parse_sitemap, 50,000-URL gzip urlset (normalized, lastmod parsed)",
             f"{ours_rate:,.0f} URLs/s"),
            ("lxml whole-tree parse + findall loc (no normalization)", f"{naive_rate:,.0f} URLs/s"),
            ("ratio ours / naive", f"{ours_rate / naive_rate:.2f}")]


def html_page(target_bytes: int, seed: int = 3) -> bytes:
    """A page of about target_bytes: head, nav, paragraphs of words, a link every ~400
    bytes (half on its own site, half elsewhere), in nested divs, as a CMS writes them."""
    r = random.Random(seed)
    words = [("".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(2, 9))))
             for _ in range(2000)]
    parts = ['<!doctype html><html><head><meta charset="utf-8"><title>A page</title>'
             '<link rel="canonical" href="https://site.example/a/page"></head><body>'
             '<nav><ul>' + "".join(f'<li><a href="/s/{i}">{words[i]}</a></li>'
                                   for i in range(20)) + '</ul></nav><main>']
    size, n = sum(map(len, parts)), 0
    while size < target_bytes:
        n += 1
        text = " ".join(r.choice(words) for _ in range(50))
        host = "site.example" if n % 2 else f"other{n % 37}.example"
        chunk = (f'<div class="c"><div class="p"><p>{text} <a href="https://{host}/p/{n}'
                 f'?ref={n % 5}">{r.choice(words)}</a>.</p></div></div>')
        parts.append(chunk)
        size += len(chunk)
    parts.append("</main></body></html>")
    return "".join(parts).encode()


def bench_parse() -> list[tuple[str, str]]:
    rows = []
    for size in (20_000, 200_000):
        body = html_page(size)
        links = len(parse_html(body, "https://site.example/a/page").links)
        calls, secs = timed(lambda b=body: parse_html(b, "https://site.example/a/page"),
                            min_seconds=2, max_rounds=2000)
        rows.append((f"parse_html, {len(body) // 1000} KB page ({links} links kept)",
                     f"{calls / secs:,.1f} pages/s ({secs / calls * 1000:.2f} ms per page)"))
    return rows


_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.int64)


def _majority_by_histograms(hashes, count: int) -> int:
    """SimHash's bit majority as udfs/core/fingerprints.py counted it before
    2026-12-06: a histogram of each byte position's values times a 256 x 8 bit table."""
    columns = np.ascontiguousarray(hashes.astype(">u8").view(np.uint8).reshape(-1, 8).T)
    sums = np.concatenate([np.bincount(columns[j], minlength=256) @ _BYTE_BITS
                           for j in range(8)])
    return int.from_bytes(np.packbits(sums > count / 2).tobytes(), "big")


_ASCII_WORD = np.zeros(256, dtype=bool)
_ASCII_WORD[list(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")] = True


def _ascii_codes_by_mask(text: str):
    """An ASCII text's token string as udfs/core/fingerprints.py read it before
    2026-12-06: a NumPy mask of word characters over the lower-cased bytes."""
    raw = np.frombuffer(text.lower().encode("ascii"), dtype=np.uint8)
    return raw[_ASCII_WORD[raw]].astype(np.uint64)


def _best_us(calls: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Microseconds a call of each, the best of two rounds that alternate between them,
    so that a slower minute hits both."""
    us: dict[str, float] = {}
    for _round in range(2):
        for name, fn in calls.items():
            count, secs = timed(fn, min_seconds=1, max_rounds=20000)
            us[name] = min(us.get(name, 1e9), secs / count * 1e6)
    return us


def bench_majority() -> list[tuple[str, str]]:
    """SimHash's bit majority (udfs/core/fingerprints.py `_majority`, eight bits a word)
    beside the byte histograms it replaced, on the 4-gram hashes of a synthetic-web page
    and of a 200 KB CMS-like page's text; and an ASCII text's token string beside the
    NumPy mask it replaced."""
    web = SyntheticWeb(build_sites(5, pages=(300, 360)), page_bytes=20_000)
    texts = {"synthetic web's 20 KB page": web.body_for(web.site_list[0], "/p/3"),
             "200 KB CMS-like page": html_page(200_000)}
    rows = []
    for label, body in texts.items():
        text = etree.HTML(body).xpath("string()")
        hashes = _hashes_of_4grams(_token_codes(text))
        assert _majority(hashes, len(hashes)) == _majority_by_histograms(hashes, len(hashes))
        us = _best_us({"lanes": lambda h=hashes: _majority(h, len(h)),
                       "histograms": lambda h=hashes: _majority_by_histograms(h, len(h))})
        rows.append((f"SimHash bit majority, {label} ({len(hashes):,} 4-grams): eight bits "
                     "a word against byte histograms",
                     f"{us['lanes']:.0f} vs {us['histograms']:.0f} us "
                     f"({us['histograms'] / us['lanes']:.2f}x)"))
        assert simhash64(text) == simhash64_numpy(text)
        us = _best_us({"c": lambda t=text: simhash64(t),
                       "numpy": lambda t=text: simhash64_numpy(t)})
        rows.append((f"SimHash whole, {label}: the C loop (udfs/core/_simhash.c) against "
                     "NumPy, token string included",
                     f"{us['c']:.0f} vs {us['numpy']:.0f} us ({us['numpy'] / us['c']:.2f}x)"))
        if not text.lower().isascii():
            continue  # the token string of other text goes by the code-point table
        assert (_token_codes(text) == _ascii_codes_by_mask(text)).all()
        us = _best_us({"translate": lambda t=text: _token_codes(t),
                       "mask": lambda t=text: _ascii_codes_by_mask(t)})
        rows.append((f"SimHash token string, {label} ({len(text):,} ASCII characters): "
                     "bytes.translate against a NumPy mask",
                     f"{us['translate']:.0f} vs {us['mask']:.0f} us "
                     f"({us['mask'] / us['translate']:.2f}x)"))
    return rows


def _exchange(body: bytes) -> Exchange:
    return Exchange(method="GET", target="/a/page", request_headers=[("Host", "site.example")],
                    version="HTTP/1.1", status=200, reason="OK",
                    response_headers=[("Content-Type", "text/html; charset=utf-8"),
                                      ("Content-Length", str(len(body)))], payload=body)


def keep_page(body: bytes) -> int:
    """What the fetcher does with one fetched body besides fetching and parsing it: its
    SHA-256, its WARC response and request records (one gzip member each, level 6), and
    its content-addressed raw/ copy (gzip level 6, udfs/storage/bodies.py), which takes
    the payload's SHA-256 and compressed piece (udfs/storage/deflate.py). Bytes written."""
    sha = hashlib.sha256(body).hexdigest()
    f = Fetch("https://site.example/a/page", "L1", 1, 0, 1_700_000_000_000, _exchange(body))
    records = build_records(f, payload_sha256=sha)
    raw_copy = gzip_of(body, 6, records[0].payload_piece)
    return sum(len(r.data) for r in records) + len(raw_copy)


def keep_page_twice(body: bytes) -> int:
    """The same code with the payload hashed and compressed apart for each, as before
    one compression served both: the response record gzip'd whole (as the other records
    still are), and the raw/ copy hashed and gzip'd on its own."""
    whole = warc._response_member
    warc._response_member = lambda head, payload, level: (
        gzip_of(head + payload + warc.END_OF_RECORD, level), None)
    try:
        f = Fetch("https://site.example/a/page", "L1", 1, 0, 1_700_000_000_000,
                  _exchange(body))
        records = build_records(f)
    finally:
        warc._response_member = whole
    sha = hashlib.sha256(body).hexdigest()
    return len(sha) + sum(len(r.data) for r in records) + len(gzip_of(body, 6))


def bench_keep() -> list[tuple[str, str]]:
    rows = []
    for size in (20_000, 200_000):
        body = html_page(size)
        both = {}
        for _round in range(2):  # alternating, so a slower minute hits both
            for name, fn in (("once", keep_page), ("twice", keep_page_twice)):
                calls, secs = timed(lambda b=body, fn=fn: fn(b), min_seconds=1,
                                    max_rounds=2000)
                both.setdefault(name, []).append(secs / calls * 1000)
        once, twice = min(both["once"]), min(both["twice"])
        rows.append((f"keep a page (SHA-256, WARC records, raw/ copy), {len(body) // 1000} KB",
                     f"{1000 / once:,.1f} pages/s ({once:.2f} ms per page; compressed "
                     f"twice: {twice:.2f} ms, {twice / once:.2f}x)"))
    return rows


def bench_warc_records() -> list[tuple[str, str]]:
    """A fetch's two WARC records (gzip level 6), as build_records writes them against
    through warcio's writer (crawler/testkit/warcref.py: the same bytes), on the
    synthetic web's pages."""
    web = SyntheticWeb(build_sites(4, seed=11, pages=(60, 60)), page_bytes=20_000)
    fetches = [Fetch(f"http://{s}.test/p/{i}", f"L{i}", 1, 1, 1_700_000_000_000 + i,
                     _exchange(web.body_for(s, f"/p/{i}")), depth=1)
               for s in web.site_list for i in range(1, 41)]

    def ours() -> None:
        for f in fetches:
            build_records(f)

    def warcio() -> None:
        for f in fetches:
            gzip_of(warcio_record(f, "response"), 6)
            gzip_of(warcio_record(f, "request"), 6)

    best = {name: [] for name in ("ours", "warcio")}
    for _round in range(3):  # alternating, so a slower minute hits both
        for name, fn in (("ours", ours), ("warcio", warcio)):
            started = time.process_time()
            fn()
            best[name].append((time.process_time() - started) / len(fetches) * 1e6)
    a, b = min(best["ours"]), min(best["warcio"])
    return [("WARC records of a fetch, synthetic web's 20 KB pages: written here against "
             "through warcio's writer (the same bytes, gzip level 6)",
             f"{a:.0f} vs {b:.0f} us per page ({b / a:.2f}x)")]


def bench_deflate() -> list[tuple[str, str]]:
    """The fetcher's deflate at levels 6, 3 and 1 (udfs/storage/deflate.py: zlib-ng at
    4-9, ISA-L at 1-3) beside zlib-ng's own level (at 1 and 3) and the standard
    library's zlib at the same level, on the same pages: time and compression ratio."""
    web = SyntheticWeb(build_sites(20, pages=(300, 360)), page_bytes=20_000)
    pages = {"synthetic web's 20 KB": [web.body_for(s, f"/p/{i}") for s in web.site_list
                                         for i in range(5)],
             "20 KB CMS-like": [html_page(20_000, seed) for seed in range(20)],
             "200 KB CMS-like": [html_page(200_000, seed) for seed in range(4)]}
    rows = []
    for label, bodies in pages.items():
        for level in (6, 3, 1):
            libs = {"ours": piece, "zlib-ng": partial(piece_by, zlib_ng),
                    "zlib": partial(piece_by, zlib)}
            if level not in FAST_LEVELS:
                del libs["zlib-ng"]  # ours is zlib-ng's own level there
            ms: dict[str, float] = {}
            ratio: dict[str, float] = {}
            for _round in range(2):  # alternating, so a slower minute hits both
                for name, fn in libs.items():
                    calls, secs = timed(
                        lambda fn=fn, lv=level, bs=bodies: [fn(b, lv) for b in bs],
                        min_seconds=1, max_rounds=2000)
                    ms[name] = min(ms.get(name, 1e9), secs / calls / len(bodies) * 1000)
                    ratio[name] = (sum(map(len, bodies))
                                   / sum(len(fn(b, level)) for b in bodies))
            lib = "ISA-L" if level in FAST_LEVELS else "zlib-ng"
            names = " against ".join(n if n != "ours" else f"ours ({lib})" for n in libs)
            rows.append((f"deflate level {level}, {label} pages: {names}",
                         " vs ".join(f"{ms[n]:.3f}" for n in libs) + " ms per page, ratio "
                         + " vs ".join(f"{ratio[n]:.2f}" for n in libs)))
    return rows


def _stage_run(keep_heap: bool, pages: list[tuple[bytes, str]]) -> tuple[float, float, float]:
    """(parser CPU ms, this process's CPU ms, parser page faults) per page, one parser."""
    stage = ParseStage(ParseLimits(workers=1), "FlinkCrawler", keep_heap=keep_heap)

    async def go() -> tuple[float, float, float]:
        for body, url in pages[:50]:  # warm: imports done, the heap grown
            await stage.parse(body, url, [])
        (parser,) = stage._live
        c0, m0 = parser.cpu_s(), os.times()
        faults0 = minor_faults(parser.proc.pid)
        for body, url in pages[50:]:
            await stage.parse(body, url, [("Content-Type", "text/html")])
        c1, m1 = parser.cpu_s(), os.times()
        n = len(pages) - 50
        return ((c1 - c0) / n * 1000,
                (m1.user + m1.system - m0.user - m0.system) / n * 1000,
                (minor_faults(parser.proc.pid) - faults0) / n)

    try:
        return asyncio.run(go())
    finally:
        stage.close()


def bench_parse_stage() -> list[tuple[str, str]]:
    """The fetcher's parse stage (udfs/parser/stage.py): 20 KB pages of the synthetic web
    through one parser process, its heap kept (the default) against glibc's own malloc
    thresholds, alternating; beside parse_html in this process."""
    web = SyntheticWeb(build_sites(40, seed=11, pages=(300, 360)), page_bytes=20_000)
    pages = [(web.body_for(s, f"/p/{i}"), f"http://{s.name}/p/{i}")
             for s in web.site_list for i in range(30)]
    t0 = time.process_time()
    for body, url in pages:
        parse_html(body, url)
    alone = (time.process_time() - t0) / len(pages) * 1000
    runs: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    for _round in range(2):
        for keep in (True, False):
            runs[keep].append(_stage_run(keep, pages))
    best = {k: min(v) for k, v in runs.items()}
    (kc, kp, kf), (gc_, gp, gf) = best[True], best[False]
    return [("parse stage, synthetic web's 20 KB pages: parser CPU per page, heap kept "
             "against glibc's thresholds",
             f"{kc:.2f} vs {gc_:.2f} ms ({gc_ / kc:.2f}x); parse_html alone {alone:.2f} ms"),
            ("parse stage: page faults per page in the parser, heap kept against glibc's",
             f"{kf:.1f} vs {gf:.1f}"),
            ("parse stage: the fetcher's own CPU per page handing a page over and back",
             f"{kp:.2f} ms (with glibc's thresholds in the parser: {gp:.2f} ms)")]


def main() -> None:
    rows = (bench_urls() + bench_robots() + bench_sitemaps() + bench_parse()
            + bench_majority() + bench_keep() + bench_warc_records() + bench_deflate()
            + bench_parse_stage())
    record("standards", "Web-standards layer (udfs/core: urls, robots, sitemaps, parse)", rows,
           notes="Single core, pure Python over ada-url (C++) and lxml (C). robotparser is "
                 "timed on the first 500 paths only (it scans every rule per check). Deflate: "
                 "what the fetcher stores with (udfs/storage/deflate.py: ISA-L at levels "
                 "1-3, zlib-ng at 4-9) beside zlib-ng's own level and the standard "
                 "library's zlib on the same pages, the best of two alternating rounds "
                 "each.")


if __name__ == "__main__":
    main()
