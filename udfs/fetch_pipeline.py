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
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from udfs.core.fetching import FetchLimits
from udfs.core.fingerprints import to_signed64
from udfs.core.frontier import Kind, Outcome
from udfs.core.parse import group_by_host, parse_html
from udfs.core.sitemaps import parse_sitemap
from udfs.core.urls import UrlPolicy, normalize_url
from udfs.faults import FaultInjector
from udfs.fetch_client import fetch
from udfs.storage import ObjectStore


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


def _discovered(host_key: str, source: str, parent: str, depth: int, now_ms: int,
                links: list[dict[str, Any]]) -> dict[str, Any]:
    return {"host_key": host_key, "source": source, "parent_url": parent, "depth": depth,
            "redirect_hops": 0, "discovered_at_ms": now_ms, "links": links}


async def process_lease(lease: dict[str, Any], ctx: FetchContext
                        ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(Completion record, DiscoveredUrls records) for one LeaseRecord."""
    kind = Kind(lease["kind"])
    url = lease["url"]
    resp = await fetch(ctx.session, url, kind, ctx.limits, ctx.user_agent,
                       lease.get("etag"), lease.get("last_modified"))
    now_ms = ctx.clock_ms()
    h = resp.headers
    completion: dict[str, Any] = {
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
    }
    discovered: list[dict[str, Any]] = []
    if resp.outcome is not Outcome.OK:
        return completion, discovered
    body = resp.body
    completion["body_bytes"] = len(body)
    if kind is Kind.ROBOTS:
        completion["body"] = body
        return completion, discovered
    if kind is Kind.SITEMAP:
        result = parse_sitemap(body, base_url=url, url_policy=ctx.url_policy,
                               max_bytes=ctx.limits.max_sitemap_bytes)
        source = "ROBOTS_SITEMAP" if result.kind == "sitemapindex" else "SITEMAP"
        for host_key, urls in group_by_host(e.url for e in result.entries).items():
            meta = {e.url: e for e in result.entries}
            discovered.append(_discovered(host_key, source, url, lease["depth"], now_ms, [
                {"url": u, "lastmod_ms": meta[u].lastmod_ms, "priority": meta[u].priority,
                 "changefreq": meta[u].changefreq} for u in urls]))
        completion["links_count"] = len(result.entries)
        if result.errors:
            completion["error"] = "; ".join(result.errors)[:1000]
        return completion, discovered
    # A page: keep the raw bytes (blocking I/O off the event loop), then parse.
    sha, key, _ = await asyncio.get_running_loop().run_in_executor(
        None, ctx.store.put_body, body, lease.get("storage_tier", "standard"))
    if ctx.faults is not None:
        ctx.faults.stall_parse()
    page = parse_html(body, url, headers=h, user_agent=ctx.user_agent,
                      max_links=ctx.max_links, url_policy=ctx.url_policy)
    completion.update({
        "body_sha256": sha, "object_key": key, "text_sha256": page.text_sha256,
        "simhash": to_signed64(page.simhash), "canonical_url": page.canonical_url,
        "noindex": page.noindex, "nofollow": page.nofollow, "links_count": len(page.links),
        "error": page.error,
    })
    for host_key, urls in group_by_host(page.links).items():
        discovered.append(_discovered(host_key, "LINK", url, lease["depth"] + 1, now_ms,
                                      [{"url": u, "lastmod_ms": None, "priority": None}
                                       for u in urls]))
    return completion, discovered
