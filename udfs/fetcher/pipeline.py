"""One lease in, one completion and its discovered URLs out: fetch, store, parse.

The fetcher job's async operator calls `process_lease` for each LeaseRecord and
emits the Completion record and DiscoveredUrls records it returns. Redirect
targets are reported in the completion (`redirect_location`); the frontier,
which knows the hop count, turns them into discovered URLs.

Discovered records carry one target host each. A sitemap file found in a
sitemap index is sent with source ROBOTS_SITEMAP, the source that marks a URL
as a sitemap file (as for Sitemap: lines of robots.txt).
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from udfs.core.fetching import FetchLimits
from udfs.core.fingerprints import to_signed64
from udfs.core.parse import LimitKind, ParsedPage, group_by_host, parse_html
from udfs.core.records import DiscoverySource, Kind, Outcome
from udfs.core.sitemaps import SitemapResult, parse_sitemap
from udfs.core.urls import UrlPolicy, normalize_url
from udfs.fetcher.client import FetchResponse, fetch
from udfs.fetcher.faults import FaultInjector
from udfs.storage.bodies import ObjectStore
from udfs.wire.records import Completion, DiscoveredUrls, LeaseRecord, links_records, page_links

# Parse-time buckets (seconds) of the parse_seconds histogram: an HTML page parses in
# milliseconds; a slow one (a huge or pathological page) in up to seconds.
PARSE_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class PageStats:
    """What the fetcher counts about the pages it stores and parses (one per fetcher
    task, shared by its leases; updated on the fetch engine's thread, read as gauges).

    `buckets[i]`: pages parsed within PARSE_BUCKETS_S[i] seconds, cumulative as
    Prometheus histograms are (the last, +Inf, counts every page); `parse_us`: the
    parse times' sum in microseconds (gauges carry integers only). `stored_bytes`: body
    bytes of objects written to storage (a body already stored is not written again).
    `backlog`: pages whose body has arrived and whose parse has not ended yet (being
    stored, waiting for a parser process, or in one). `limit_hits`: pages and sitemaps
    whose parse hit a limit, by kind (udfs.core.parse.LimitKind: timeout, memory, crash).
    `filter_errors`: pages on which a parse filter (parse.filters) raised, by filter."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(PARSE_BUCKETS_S) + 1))
    parsed: int = 0
    parse_us: int = 0
    stored_bytes: int = 0
    backlog: int = 0
    limit_hits: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((k.value for k in LimitKind), 0))
    filter_errors: dict[str, int] = field(default_factory=dict)

    def parse_took(self, seconds: float) -> None:
        self.parsed += 1
        self.parse_us += int(seconds * 1_000_000)
        for i in range(bisect.bisect_left(PARSE_BUCKETS_S, seconds), len(self.buckets)):
            self.buckets[i] += 1


@dataclass
class FetchContext:
    session: aiohttp.ClientSession
    store: ObjectStore
    limits: FetchLimits
    user_agent: str
    clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)
    max_links: int = 5000
    faults: FaultInjector | None = None
    url_policy: UrlPolicy | None = None  # urls.drop_query_params
    stats: PageStats = field(default_factory=PageStats)  # the task's, for its metrics
    # The task's parse stage (udfs/parser/stage.py: parser processes under the `parse`
    # limits, and the parse filters; sitemaps too). None: pages and sitemaps are parsed
    # in this process, on the caller's loop, with no parse filters (unit tests and tools
    # only; the fetcher job always has a stage).
    parser: Any = None
    warc: Any = None  # the task's WarcWriter (udfs/storage/warc_writer.py); None: no WARC kept
    # Set by process_lease: (filter name, "Type: message") when a parse filter raised on
    # this lease's page (the fetcher sends a dead letter; the page is kept).
    parse_filter_error: tuple[str, str] | None = None
    # Awaited once the answer's last byte is read, before it is stored and parsed: the
    # fetcher ends the host's (and the address's) turn there, so our own storing and
    # parsing never stretch a host's gap (udfs/fetcher/turns.py Turns.release).
    on_response: Callable[[FetchResponse], Awaitable[None]] | None = None


async def process_lease(lease: LeaseRecord, ctx: FetchContext
                        ) -> tuple[Completion, list[DiscoveredUrls]]:
    """(Completion record, DiscoveredUrls records) for one LeaseRecord."""
    kind = Kind(lease["kind"])
    url = lease["url"]
    resp = await fetch(ctx.session, url, kind, ctx.limits, ctx.user_agent,
                       lease["etag"], lease["last_modified"],
                       keep_exchange=ctx.warc is not None)
    if ctx.on_response is not None:
        await ctx.on_response(resp)
    now_ms = ctx.clock_ms()
    where = None  # the WARC record's location (udfs.storage.warc.Location)
    # The WARC writer's SHA-256 and compression of the payload, for the body store when
    # the payload is the page's body (no Content-Encoding): hashed and compressed once.
    digest = piece = None
    if ctx.warc is not None and resp.exchange is not None:
        # Every answer with a status is kept, on the writer's thread (gzip and disk off
        # this loop); the completion leaves only once its records are in the file.
        from udfs.storage.warc import Fetch

        record = Fetch(url, lease["lease_id"], lease["url_version"], lease["attempt"],
                       now_ms, resp.exchange, depth=lease["depth"])
        resp.exchange = None  # (nor held past the write, below)
        where = await asyncio.wrap_future(ctx.warc.submit(ctx.warc.write, record))
        if kind is Kind.PAGE and record.exchange.payload == resp.body:
            digest, piece = record.payload_sha256, record.payload_piece
        del record
    h = resp.headers
    completion: Completion = {
        "lease_id": lease["lease_id"], "url_id": lease["url_id"],
        "url_version": lease["url_version"], "attempt": lease["attempt"], "url": url,
        "host_key": lease["host_key"], "kind": kind.value, "outcome": resp.outcome.value,
        "http_status": resp.status, "fetched_at_ms": now_ms,
        "fetch_duration_ms": int(resp.duration_s * 1000),
        "retry_after": h.get("Retry-After"),
        "redirect_location": normalize_url(h["Location"], url, ctx.url_policy)
        if h.get("Location") else None,
        "etag": h.get("Etag"), "last_modified": h.get("Last-Modified"),
        "content_type": h.get("Content-Type"), "body_sha256": None, "body_bytes": None,
        "object_key": None, "text_sha256": None, "simhash": None, "canonical_url": None,
        "noindex": False, "nofollow": False, "links_count": 0, "body": None,
        "error": resp.error,
        # Where its response (or revisit) record is: one ranged read (completion v3).
        "warc_filename": where.key if where else None,
        "warc_offset": where.offset if where else None,
        "warc_length": where.length if where else None,
        "discovered": [],  # (v4) the operator puts what the fetch found here
    }
    discovered: list[DiscoveredUrls] = []
    if resp.outcome is not Outcome.OK:
        return completion, discovered
    body = resp.body
    completion["body_bytes"] = len(body)
    if kind is Kind.ROBOTS:
        completion["body"] = body
        return completion, discovered
    if kind is Kind.SITEMAP:
        if ctx.parser is not None:  # in a parser process: off this loop, under its limits
            result = await ctx.parser.parse_sitemap(body, url, ctx.limits.max_sitemap_bytes)
            if result.limit is not None:
                ctx.stats.limit_hits[result.limit.value] += 1
            sitemap = result.sitemap or SitemapResult(
                "unknown", errors=[result.error or "the sitemap was not parsed"])
        else:
            sitemap = parse_sitemap(body, base_url=url, url_policy=ctx.url_policy,
                                    max_bytes=ctx.limits.max_sitemap_bytes)
        source: DiscoverySource = "ROBOTS_SITEMAP" if sitemap.kind == "sitemapindex" \
            else "SITEMAP"
        meta = {e.url: e for e in sitemap.entries}
        for host_key, urls in group_by_host(e.url for e in sitemap.entries).items():
            discovered.extend(links_records(host_key, source, url, lease["depth"], now_ms, [
                {"url": u, "lastmod_ms": meta[u].lastmod_ms, "priority": meta[u].priority,
                 "changefreq": meta[u].changefreq} for u in urls]))
        completion["links_count"] = len(sitemap.entries)
        if sitemap.errors:
            completion["error"] = "; ".join(sitemap.errors)[:1000]
        return completion, discovered
    # A page: keep the raw bytes first (blocking I/O off the event loop), so a parse
    # that fails loses nothing; then parse, in the task's parser processes.
    stats = ctx.stats
    stats.backlog += 1
    try:
        sha, key, written = await asyncio.get_running_loop().run_in_executor(
            None, ctx.store.put_body, body, lease["storage_tier"], digest, piece)
        if written:
            stats.stored_bytes += len(body)
        page: ParsedPage | None
        if ctx.parser is not None:
            result = await ctx.parser.parse(body, url, [(str(k), str(v)) for k, v in h.items()])
            seconds, page = result.seconds, result.page
            if result.limit is not None:
                stats.limit_hits[result.limit.value] += 1
            if result.filter_error is not None:
                ctx.parse_filter_error = result.filter_error
                name = result.filter_error[0]
                stats.filter_errors[name] = stats.filter_errors.get(name, 0) + 1
        else:
            if ctx.faults is not None:
                ctx.faults.stall_parse()
            started = time.perf_counter()
            page = parse_html(body, url, headers=h, user_agent=ctx.user_agent,
                              max_links=ctx.max_links, url_policy=ctx.url_policy)
            seconds = time.perf_counter() - started
        stats.parse_took(seconds)
    finally:
        stats.backlog -= 1
    completion.update({"body_sha256": sha, "object_key": key})
    if page is None:
        # A parse limit (PARSE_TIMEOUT: CPU, memory, a dead parser) or a parser error
        # (PARSE_ERROR): the page is stored, nothing is extracted; the fetcher also
        # writes a dead letter naming the URL and the reason.
        completion.update({
            "outcome": (Outcome.PARSE_TIMEOUT if result.limit is not None
                        else Outcome.PARSE_ERROR).value, "error": result.error})
        return completion, discovered
    completion.update({
        "text_sha256": page.text_sha256,
        "simhash": to_signed64(page.simhash), "canonical_url": page.canonical_url,
        "noindex": page.noindex, "nofollow": page.nofollow, "links_count": len(page.links),
        "error": page.error,
    })
    discovered += page_links(url, lease["depth"], page.links, now_ms)
    return completion, discovered
