"""The synthetic web: many virtual hosts on one loopback port, and its request log.

Every site is a name under .test (reserved, never resolvable on the internet)
served by Host header from 127.0.0.1; the crawler reaches them through
`fetch.static_hosts` and `fetch.allowed_networks` (loopback allowed only by
that configuration). Deterministic for a seed. Behaviours, spread over the
sites: robots.txt with rules, 404, 500 until it recovers, a redirect, a huge
file, and Crawl-delay; sitemaps (plain and gzip, with an index); 429 with
Retry-After; redirects and a redirect loop; a calendar trap and session-id
links; ETag / Last-Modified with 304; identical and near-duplicate pages; a
slow page, a huge page and a gzip bomb. Opt-in (`build_sites(hostile=N)`): hostile
sites, whose pages attack the parser (HOSTILE_PAGES).

Every request is logged with monotonic start and end times; `violations()`
judges the log with the politeness oracle.

    python -m crawler.testkit.synthetic_web --port 18600 --sites 20 --log web.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import multiprocessing
import os
import pickle
import random
import string
import threading
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from functools import lru_cache
from pathlib import Path

from aiohttp import web

from crawler.testkit.oracle import HostRules, Request, count_violations
from udfs.core.robots import parse_robots

ROBOTS_KINDS = ("rules", "rules", "missing", "error_then_ok", "redirect", "huge", "delay")
LOREM = ("crawler frontier politeness robots sitemap lease fetch parse index kafka flink "
         "host page link queue budget trap calendar session duplicate change").split()


@dataclass(frozen=True)
class Site:
    name: str
    pages: int
    robots: str
    throttle_every: int  # every Nth page request answers 429 (0: never)
    retry_after_s: int
    features: frozenset[str]

    def robots_txt(self) -> str:
        body = "User-agent: *\nDisallow: /private/\nDisallow: /*?sessionid=\n" \
               "Sitemap: /sitemap_index.xml\n"
        if self.robots == "delay":
            body = "User-agent: *\nCrawl-delay: 1.5\nDisallow: /private/\n"
        if self.robots == "huge":
            filler = "".join(f"Disallow: /filler/{i}/\n" for i in range(30_000))
            body += filler  # ~ 700 KB: only the first 512 KiB is read
        return body


def build_sites(count: int, seed: int = 1, pages: tuple[int, int] = (5, 30),
                boilerplate: int = 0, hostile: int = 0) -> list[Site]:
    """`count` sites with 'pages' pages each (a random count in that range); site 0 also
    links to evil.test, a name that resolves to a non-allowed address (SSRF bait).
    `boilerplate`: that many more sites, duplicate-heavy: four in five of their pages
    serve the same bytes (a catalogue page linking every page of the site).
    `hostile`: that many more sites (after those) whose home page links to the
    HOSTILE_PAGES, besides ordinary pages."""
    rng = random.Random(seed)
    all_features = ["calendar", "session", "redirects", "loop", "dups", "etag", "slow",
                    "huge", "bomb", "http_date"]
    sites = []
    for i in range(count):
        feats = set(f for j, f in enumerate(all_features) if (i + j) % 3 == 0)
        if i == 0:
            feats.add("ssrf")
        robots = ROBOTS_KINDS[i % len(ROBOTS_KINDS)]
        # (a Crawl-delay site is not throttled too: its allowance, halved by each 429,
        # would stretch its 1.5 s gap for minutes past every other site's last page)
        throttle_every = 7 if i % 5 == 2 and robots != "delay" else 0
        if robots == "delay" or throttle_every:
            feats -= {"calendar", "slow"}  # slow sites get no trap, or they never finish
        sites.append(Site(f"site{i}.test", pages=rng.randint(*pages), robots=robots,
                          throttle_every=throttle_every, retry_after_s=2,
                          features=frozenset(feats)))
    for i in range(count, count + boilerplate):
        sites.append(Site(f"site{i}.test", pages=rng.randint(*pages), robots="rules",
                          throttle_every=0, retry_after_s=2,
                          features=frozenset({"boilerplate"})))
    start = count + boilerplate
    for i in range(start, start + hostile):
        sites.append(Site(f"site{i}.test", pages=rng.randint(*pages), robots="missing",
                          throttle_every=0, retry_after_s=2,
                          features=frozenset({"hostile"})))
    return sites


def _nested_divs() -> bytes:
    return b"<html><body>" + b"<div>" * 100_000 + b"deep" + b"</div>" * 100_000 + \
        b"</body></html>"


def _attribute_page() -> bytes:
    # 92,000 attributes on one element, each value with an entity: 13 s of CPU in lxml's
    # HTML parser (parse_html) on this machine, quiet.
    attrs = b" ".join(b'data-a%d="%s&amp;%d"' % (i, b"v" * 30, i) for i in range(92_000))
    return b"<html><body><div " + attrs + b">attributes</div></body></html>"


def _slow_text_page() -> bytes:
    # 250 elements deep, then 200,000 text nodes: lxml builds the tree at once, but the
    # text extraction's ancestor test (no script/style/...) walks the depth for every
    # node: 3.3 s of CPU in parse_html on this machine, quiet.
    return b"<html><body>" + b"<div>" * 250 + b"<b>w</b>" * 200_000 + b"</body></html>"


# Pages of a hostile site that attack the parser, by path: deeply nested tags (100,000
# <div>; libxml2 stops at its depth limit, so this one parses at once), a 5 MB page of
# attributes on one element, a page that makes lxml's text extraction slow.
HOSTILE_PAGES = {"/hostile/nested": _nested_divs, "/hostile/attrs": _attribute_page,
                 "/hostile/slow": _slow_text_page}


@lru_cache(maxsize=len(HOSTILE_PAGES))
def hostile_body(path: str) -> bytes:
    return HOSTILE_PAGES[path]()


def is_boilerplate(site: Site, path: str) -> bool:
    """A page of a duplicate-heavy site that serves the site's one catalogue page."""
    return "boilerplate" in site.features and path.startswith("/p/") and \
        int(path.split("/")[2]) % 5 != 0


SSRF_NAME = "evil.test"
SSRF_ADDRESS = "127.0.0.2"  # loopback, but outside the 127.0.0.1/32 the crawl allows


def _page_links(site: Site, i: int, sites: list[Site], port: int) -> list[str]:
    r = random.Random(f"{site.name}/{i}")
    links = [f"/p/{r.randrange(site.pages)}" for _ in range(4)]
    links.append(f"/p/{(i + 1) % site.pages}")  # every page reachable by a chain
    if i % 4 == 0:
        links.append(f"/private/{i}")
    other = sites[r.randrange(len(sites))]
    links.append(f"http://{other.name}:{port}/p/{r.randrange(other.pages)}")
    if "calendar" in site.features and i == 0:
        links.append("/cal/2026/11/30")
    if "session" in site.features:
        links.append(f"/p/{i}?sessionid={r.getrandbits(48):012x}")
    if "redirects" in site.features and i % 3 == 0:
        links.append(f"/r/{(i + 2) % site.pages}")
    if "loop" in site.features and i == 0:
        links.append("/loop/a")
    if "dups" in site.features and i == 0:
        links += ["/dup/a", "/dup/b", "/near/a", "/near/b"]
    if "ssrf" in site.features and i == 0:
        links.append(f"http://{SSRF_NAME}:{port}/steal")
    for extra in ("slow", "huge", "bomb"):
        if extra in site.features and i == 1:
            links.append(f"/{extra}")
    if "hostile" in site.features and i == 0:
        links += list(HOSTILE_PAGES)
    return links


def _html(title: str, text: str, links: list[str]) -> bytes:
    anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    return (f"<!DOCTYPE html><html><head><title>{title}</title></head>"
            f"<body><h1>{title}</h1><p>{text}</p><nav>{anchors}</nav></body></html>").encode()


def _retry_after_seconds(value: str) -> float:
    if value.strip().isdigit():
        return float(value)
    when = parsedate_to_datetime(value)
    return max(0.0, when.timestamp() - time.time())


def _redirect(status: int, location: str) -> web.Response:
    return web.Response(status=status, headers={"Location": location})


@lru_cache(maxsize=1)
def _gzip_bomb() -> bytes:
    """64 MB of spaces in a ~64 KB gzip body."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return comp.compress(b"<html><body>") + comp.compress(b" " * (64 * 1024 * 1024)) + \
        comp.flush()


@lru_cache(maxsize=1)
def _vocabulary() -> list[str]:
    """20,000 made-up words of 3 to 9 letters, the same for every seed (about 25 ms)."""
    r = random.Random("synthetic web vocabulary")
    return ["".join(r.choices(string.ascii_lowercase, k=r.randint(3, 9)))
            for _ in range(20_000)]


def _text(seed: str, words: int = 120) -> str:
    """A page's text: words of its own topic (300 of the vocabulary's) with the LOREM
    words shared by every page about a fifth of the time. Drawn from LOREM alone, as
    they once were, long pages converge on one SimHash: half the pairs of 20 KB pages
    were within 3 bits, so every page of a bench crawl was a near-duplicate and took
    the frontier's duplicate feedback. On topics, 120 such pages are 9 bits apart at the
    least, 23 on average (tests/unit/test_synthetic_web.py)."""
    r = random.Random(seed)
    return " ".join(r.choices(r.sample(_vocabulary(), 300) + LOREM * 4, k=words))


class SyntheticWeb:
    """The server; run it in a thread (`start`/`stop`) or as a process (`main`)."""

    def __init__(self, sites: list[Site], *, port: int = 0, log_path: str | None = None,
                 page_bytes: int | None = None, store: PageStore | None = None) -> None:
        """`page_bytes`: pages of about this size (more text); default about 1 KB.
        `store`: these sites' ordinary pages, made beforehand (PageStore.open_or_build,
        the same sites and page_bytes); without it each is made when first asked for."""
        self.store = store
        self.sites = {s.name: s for s in sites}
        self.page_words = 120 if page_bytes is None else max(120, page_bytes * 2 // 15)
        self._bodies: dict[tuple[str, str], bytes] = {}
        self.site_list = sites
        self.port = port
        self.log_path = log_path
        self.log: list[Request] = []
        self._counts: dict[str, int] = {}
        self._robots_errors: dict[str, int] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.thread_id: int | None = None  # the serving thread's OS id (its CPU, measured)
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._log_file = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115

    def host_key(self, site: Site) -> str:
        """scheme://authority the crawler sees for a site (the server's port included)."""
        return f"http://{site.name}:{self.port}"

    def static_hosts(self) -> list[str]:
        """`fetch.static_hosts` entries: every site to 127.0.0.1, evil.test to 127.0.0.2."""
        return [f"{s.name}=127.0.0.1" for s in self.site_list] + \
            [f"{SSRF_NAME}={SSRF_ADDRESS}"]

    # -- serving -----------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        start = time.monotonic()
        name = (request.host or "").split(":")[0].lower()
        site = self.sites.get(name)
        status, retry_after = 404, None
        try:
            if site is None:
                response: web.StreamResponse = web.Response(status=404, text="no such site")
            else:
                response = await self._route(site, request)
            status = response.status
            if status == 429:
                retry_after = _retry_after_seconds(response.headers.get("Retry-After", "0"))
            return response
        finally:
            self._record(name, request.path_qs, start, status, retry_after)

    def _record(self, name: str, path: str, start: float, status: int,
                retry_after: float | None) -> None:
        req = Request(f"http://{name}:{self.port}", path in ("/robots.txt", "/robots-real.txt"),
                      path,
                      start, time.monotonic(), status, retry_after)
        with self._lock:
            self.log.append(req)
            if self._log_file is not None:
                self._log_file.write(json.dumps(req.__dict__) + "\n")
                self._log_file.flush()

    async def _route(self, site: Site, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == "/robots.txt":
            return self._robots(site)
        if path == "/robots-real.txt" and site.robots == "redirect":
            return web.Response(text=site.robots_txt(), content_type="text/plain")
        if site.throttle_every:
            with self._lock:
                n = self._counts[site.name] = self._counts.get(site.name, 0) + 1
            if n % site.throttle_every == 0:
                wait = str(site.retry_after_s)
                if "http_date" in site.features:  # the other form RFC 9110 allows
                    wait = formatdate(time.time() + site.retry_after_s + 1, usegmt=True)
                return web.Response(status=429, headers={"Retry-After": wait})
        if path == "/sitemap_index.xml":
            body = ('<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/'
                    f'sitemap/0.9"><sitemap><loc>{self.host_key(site)}/sitemap-1.xml.gz</loc>'
                    "</sitemap></sitemapindex>")
            return web.Response(text=body, content_type="application/xml")
        if path == "/sitemap-1.xml.gz":
            urls = "".join(f"<url><loc>{self.host_key(site)}/p/{i}</loc></url>"
                           for i in range(site.pages))
            xml = ('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/'
                   f'sitemap/0.9">{urls}</urlset>').encode()
            return web.Response(body=gzip.compress(xml), content_type="application/gzip")
        if path == "/":
            return self._page(site, request, 0, "Home")
        if path.startswith("/p/") and path[3:].isdigit() and int(path[3:]) < site.pages:
            return self._page(site, request, int(path[3:]), f"Page {path[3:]}")
        if path == "/near/child" and "dups" in site.features:  # linked only from /near/b
            return web.Response(body=_html("Child", _text(f"{site.name}/child"), ["/"]),
                                content_type="text/html")
        if path.startswith("/private/"):
            return web.Response(text="private: robots.txt disallows this", content_type="text/html")
        if path.startswith("/cal/") and "calendar" in site.features:
            y, m, d = (int(x) for x in path.split("/")[2:5])
            nxt = f"/cal/{y}/{m}/{d + 1}" if d < 28 else f"/cal/{y}/{m + 1}/1"
            return web.Response(body=_html(f"Calendar {y}-{m}-{d}", "nothing on this day",
                                           [nxt, f"/cal/{y + 1}/{m}/{d}"]),
                                content_type="text/html")
        if path.startswith("/r/") and "redirects" in site.features:
            return _redirect(301, f"/p/{path[3:]}")
        if path in ("/loop/a", "/loop/b") and "loop" in site.features:
            return _redirect(302, "/loop/b" if path.endswith("a") else "/loop/a")
        if path.startswith(("/dup/", "/near/")) and "dups" in site.features:
            return web.Response(body=self.body_for(site, path), content_type="text/html")
        if path == "/slow" and "slow" in site.features:
            await asyncio.sleep(3)
            return web.Response(body=_html("Slow", _text("slow"), ["/"]), content_type="text/html")
        if path == "/huge" and "huge" in site.features:
            return await self._huge(request)
        if path in HOSTILE_PAGES and "hostile" in site.features:
            return web.Response(body=hostile_body(path), content_type="text/html")
        if path == "/bomb" and "bomb" in site.features:
            return web.Response(body=_gzip_bomb(), headers={"Content-Encoding": "gzip",
                                                            "Content-Type": "text/html"})
        return web.Response(status=404, text="not found")

    def _robots(self, site: Site) -> web.Response:
        if site.robots == "missing":
            return web.Response(status=404, text="no robots.txt")
        if site.robots == "error_then_ok":
            with self._lock:
                n = self._robots_errors[site.name] = self._robots_errors.get(site.name, 0) + 1
            if n <= 2:
                return web.Response(status=500, text="temporarily broken")
        if site.robots == "redirect":
            return _redirect(301, "/robots-real.txt")
        return web.Response(text=site.robots_txt(), content_type="text/plain")

    def body_for(self, site: Site, path: str) -> bytes:
        """The exact bytes served for a page path ("/", "/p/<i>", "/dup/*", "/near/*")."""
        if path.startswith(("/dup/", "/near/")):
            # Long, and the near twin's one word more is its own first word again: few
            # of its 4-grams are new, so the twins stay within SimHash's 3 bits (an
            # unrelated word in a 400-word text moved some pairs 4 or 5 bits apart).
            text = _text(f"{site.name}/dup", 3000)
            if path == "/near/b":  # one word more than its near twin
                text = text.split(" ", 1)[0] + " " + text
            return _html("Duplicate", text, ["/near/child"] if path == "/near/b" else ["/"])
        if is_boilerplate(site, path):
            return _html("Catalogue", _text(f"{site.name}/boilerplate", self.page_words),
                         [f"/p/{k}" for k in range(site.pages)])
        body = self._bodies.get((site.name, path))
        if body is None and self.store is not None:
            body = self.store.get(site.name, path, self.port)
        if body is None:
            body = self._page_body(site, path)
            if len(self._bodies) < 200_000:
                self._bodies[(site.name, path)] = body
        return body

    def _page_body(self, site: Site, path: str) -> bytes:
        """An ordinary page ("/" or "/p/<i>"), made from its seed (about 0.4 ms of CPU
        for a 20 KB page)."""
        i = 0 if path == "/" else int(path.split("/")[2])
        # (the home page has /p/0's links but a text of its own: not its near twin)
        return _html("Home" if path == "/" else f"Page {i}",
                     _text(f"{site.name}/{'home' if path == '/' else i}", self.page_words),
                     _page_links(site, i, self.site_list, self.port))

    def _page(self, site: Site, request: web.Request, i: int, title: str) -> web.Response:
        body = self.body_for(site, "/" if title == "Home" else f"/p/{i}")
        headers = {}
        if "etag" in site.features:
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            headers = {"ETag": etag, "Last-Modified": "Sun, 29 Nov 2026 10:00:00 GMT"}
            if request.headers.get("If-None-Match") == etag:
                return web.Response(status=304, headers=headers)
        return web.Response(body=body, content_type="text/html", headers=headers)

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/html"})
        await resp.prepare(request)
        chunk = b"<p>" + b"x" * 65_000 + b"</p>"
        try:
            for _ in range(320):  # ~20 MB unless the client hangs up first
                await resp.write(chunk)
        except (ConnectionError, RuntimeError):
            pass  # the crawler stopped reading at its size limit, as it should
        return resp

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> int:
        """Serve from a background thread; returns the port."""
        if any("bomb" in site.features for site in self.site_list):
            # Built now, not on the serving loop: a quarter second of compression there
            # would stall every site (every fetch in flight would look 0.5 s slow, and
            # their hosts' gaps, 10x a request's duration, would grow with it).
            _gzip_bomb()
        self._thread = threading.Thread(target=self._run, name="synthetic-web", daemon=True)
        self._thread.start()
        if not self._ready.wait(15):
            raise RuntimeError("synthetic web did not start")
        return self.port

    def _run(self) -> None:
        self.thread_id = threading.get_native_id()
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self.port = self._runner.addresses[0][1]  # the port actually bound
        self._ready.set()
        self._loop.run_forever()

    def stop(self) -> None:
        if self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        fut.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if self._log_file is not None:
            self._log_file.close()

    # -- judging --------------------------------------------------------------------------

    def host_rules(self, min_gap_s: float = 1.0) -> dict[str, HostRules]:
        rules = {}
        for s in self.site_list:
            robots = None if s.robots == "missing" else parse_robots(s.robots_txt())
            gap = max(min_gap_s, 1.5 if s.robots == "delay" else 0.0)
            rules[self.host_key(s)] = HostRules(1, gap, robots)
        return rules

    def violations(self, user_agent: str, min_gap_s: float = 1.0) -> dict[str, int]:
        with self._lock:
            log = list(self.log)
        return count_violations(log, self.host_rules(min_gap_s), user_agent)


# The port a PageStore's pages are made with. No server here listens on port 1, so
# ".test:1/" occurs in a stored page only in its links to other sites (and to the SSRF
# bait), and becomes the serving port's when the page is read back.
_STORE_PORT = 1


class PageStore:
    """Every ordinary page of a synthetic web ("/" and "/p/<i>" of each site), made once
    into files and read back per request: the bytes SyntheticWeb would make.

    Why: the bench's web server shares the machine's two cores with the crawler under
    test, and one event loop serves every site. Making a 20 KB page took it about 0.4 ms
    of CPU, two thirds of its CPU per page; a burst of requests then queued behind the
    pages being made, and a crawler that spaces a host's requests by their duration (the
    10x rule) slowed down for a delay no real site of that size would have. The files'
    name follows from the sites, the page size and two of the pages themselves, so that
    a change to how pages are made makes a new store."""

    def __init__(self, parts: list[Path], index: dict[tuple[str, str], tuple[int, int, int]]
                 ) -> None:
        self._fds = [os.open(p, os.O_RDONLY) for p in parts]
        self._index = index  # (site, path) -> (part, offset, length)

    def __len__(self) -> int:
        return len(self._index)

    def get(self, site_name: str, path: str, port: int) -> bytes | None:
        """The page as served on `port`, or None if the store does not hold it."""
        at = self._index.get((site_name, path))
        if at is None:
            return None
        part, offset, length = at
        body = os.pread(self._fds[part], length, offset)
        if port == _STORE_PORT:
            return body
        return body.replace(b".test:%d/" % _STORE_PORT, b".test:%d/" % port)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []

    @classmethod
    def open_or_build(cls, directory: str | Path, sites: list[Site],
                      page_bytes: int | None = None, workers: int = 2) -> PageStore:
        """The store of these sites' pages in `directory`, made first if it is not there
        (by `workers` processes: about 0.2 s of the machine per 1,000 pages of 20 KB)."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        maker = SyntheticWeb(sites, port=_STORE_PORT, page_bytes=page_bytes)
        stem = store_name(sites, maker)
        index_path = folder / f"{stem}.idx"
        parts = [folder / f"{stem}-{n}.bin" for n in range(max(1, workers))]
        if not index_path.exists():  # written last: the parts are whole once it is
            chunks = [sites[n::len(parts)] for n in range(len(parts))]
            # (fork: a spawned pool leaves multiprocessing's resource tracker running)
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(len(parts), mp_context=ctx) as pool:
                found = pool.map(_make_pages, [sites] * len(parts), chunks,
                                 [page_bytes] * len(parts), parts)
                index = {key: (n, offset, length)
                         for n, part in enumerate(found) for key, (offset, length) in part.items()}
            tmp = index_path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(index, protocol=pickle.HIGHEST_PROTOCOL))
            os.replace(tmp, index_path)
        index = pickle.loads(index_path.read_bytes())
        # The parts the store was made with, whatever `workers` is now.
        made = 1 + max((part for part, _, _ in index.values()), default=0)
        return cls([folder / f"{stem}-{n}.bin" for n in range(made)], index)


def store_name(sites: list[Site], maker: SyntheticWeb) -> str:
    """The file stem of a web's page store: the same in every process for the same web.
    Each site by its fields, its features sorted: a frozenset's order (and so its repr)
    follows the process's string hash seed, and a name made from it was new in every run,
    each run making and keeping another store (1.2 GB for 200 sites, 12.6 for 2,000)."""
    web = [(s.name, s.pages, s.robots, s.throttle_every, s.retry_after_s,
            sorted(s.features)) for s in sites]
    digest = hashlib.sha256(repr((web, maker.page_words)).encode())
    for site in (sites[0], sites[-1]):
        digest.update(maker._page_body(site, "/"))
    return f"pages-{digest.hexdigest()[:16]}"


def _make_pages(sites: list[Site], mine: list[Site], page_bytes: int | None, path: Path
                ) -> dict[tuple[str, str], tuple[int, int]]:
    """Make the ordinary pages of `mine` (of the web `sites`) into the file `path`; their
    (offset, length) there."""
    maker = SyntheticWeb(sites, port=_STORE_PORT, page_bytes=page_bytes)
    index: dict[tuple[str, str], tuple[int, int]] = {}
    offset = 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        for site in mine:
            for page in ["/", *(f"/p/{i}" for i in range(site.pages))]:
                body = maker._page_body(site, page)
                fh.write(body)
                index[(site.name, page)] = (offset, len(body))
                offset += len(body)
    os.replace(tmp, path)
    return index


def load_log(path: str | Path) -> list[Request]:
    with open(path, encoding="utf-8") as fh:
        return [Request(**json.loads(line)) for line in fh if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(prog="synthetic_web", description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=18600)
    ap.add_argument("--sites", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log", help="append every request as a JSON line to this file")
    ap.add_argument("--hostile", type=int, default=0,
                    help="this many more sites whose pages attack the parser")
    args = ap.parse_args()
    server = SyntheticWeb(build_sites(args.sites, args.seed, hostile=args.hostile),
                          port=args.port, log_path=args.log)
    server.start()
    print(f"synthetic web: {args.sites} sites on 127.0.0.1:{server.port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
