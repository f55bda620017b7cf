"""Translation between the topic records (Avro dicts, milliseconds) and the frontier core
(objects, seconds). Pure: the Flink frontier operator calls these and nothing else
decides anything here."""

from __future__ import annotations

import pickle
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from udfs.core.addresses import AddressPolicy, url_address_refusal
from udfs.core.frontier.recent import RecentUrls
from udfs.core.parse import group_by_host
from udfs.core.records import DiscoverySource, FetchResult, Kind, Lease, Outcome, UrlState
from udfs.core.recrawl import Change, Dup
from udfs.core.shards import Transfer
from udfs.core.urlfilters import Link, UrlFilter, run_chain
from udfs.core.urls import UrlPolicy, normalize_url, split_host_key
from udfs.wire.records import (
    Completion,
    DiscoveredUrls,
    IndexEvent,
    LeaseRecord,
    ShardTransfer,
    links_records,
    plain_link,
)

# The sources that mark a URL as a sitemap file (read as a sitemap, not indexed): a
# robots.txt Sitemap line or a sitemap index entry, and an operator's sitemap seed.
SITEMAP_SOURCES = ("ROBOTS_SITEMAP", "SEED_SITEMAP")
SEED_SOURCES = ("SEED", "SEED_SITEMAP")


def ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def lease_record(lease: Lease) -> LeaseRecord:
    return {"lease_id": lease.lease_id, "url_id": lease.url_id,
            "url_version": lease.url_version, "attempt": lease.attempt,
            "issued_at_ms": ms(lease.issued_at), "expires_at_ms": ms(lease.expires_at),
            "url": lease.url, "host_key": lease.host_key, "kind": lease.kind.value,
            "depth": lease.depth, "etag": lease.etag, "last_modified": lease.last_modified,
            "not_before_ms": ms(lease.not_before), "prev_lease_id": lease.prev_lease_id,
            "gap_s": lease.gap_s, "duration_factor": lease.duration_factor,
            "max_gap_s": lease.max_gap_s, "max_in_flight": lease.max_in_flight,
            "throttle_seq": lease.throttle_seq, "storage_tier": lease.storage_tier}


def fetch_result(c: Completion) -> FetchResult:
    return FetchResult(
        c["lease_id"], c["url_id"], c["url_version"], Outcome(c["outcome"]), Kind(c["kind"]),
        c["attempt"], c["http_status"], c["fetch_duration_ms"] / 1000.0, c["retry_after"],
        c["redirect_location"], c["etag"], c["last_modified"], c["body_sha256"],
        c["text_sha256"], c["body"], c["fetched_at_ms"] / 1000.0, c["error"])


def index_event(u: UrlState, c: Completion, change: Change | None) -> IndexEvent:
    """The IndexEvent of an accepted 2xx; unique per (url_id, url_version)."""
    return {"event_id": f"{c['url_id']}:{c['url_version']}", "url_id": c["url_id"],
            "url_version": c["url_version"], "url": u.url, "host_key": c["host_key"],
            "fetched_at_ms": c["fetched_at_ms"], "http_status": c["http_status"] or 200,
            "content_type": c["content_type"], "object_key": c["object_key"],
            "body_sha256": c["body_sha256"], "body_bytes": c["body_bytes"],
            "text_sha256": c["text_sha256"], "simhash": c["simhash"],
            "canonical_url": c["canonical_url"], "noindex": c["noindex"],
            "change": (change or Change.CHANGED).value, "duplicate_of": None,
            "near_duplicate_of": None, "warc_filename": c["warc_filename"],
            "warc_offset": c["warc_offset"], "warc_length": c["warc_length"]}


class DuplicateFeedback(TypedDict):
    """What the index's duplicate checks tell a URL's owner (to FrontierFunction)."""

    url_id: str
    url_version: int
    dup: int  # a recrawl.Dup
    new_page: bool


class NewUrl(TypedDict):
    """One link of an intake group, normalized, for its host's HostFrontier.discover."""

    url: str
    depth: int
    redirect_hops: int
    priority: float | None
    is_seed: bool
    kind: Kind
    lastmod: float | None  # epoch seconds
    changefreq: str | None


def duplicate_feedback(event: IndexEvent) -> DuplicateFeedback | None:
    """What an index event read back from the index topic tells its URL's owner: that
    the page duplicates another URL's (exact or near), and whether it was a new page;
    None for a page that duplicates nothing."""
    if event["duplicate_of"] is not None:
        dup = Dup.EXACT
    elif event["near_duplicate_of"] is not None:
        dup = Dup.NEAR
    else:
        return None
    return {"url_id": event["url_id"], "url_version": event["url_version"],
            "dup": int(dup), "new_page": event["change"] == Change.NEW.value}


def discovered_records(found: list[tuple[str, int, int, DiscoverySource]],
                       parent: str | None, now_ms: int) -> list[tuple[str, DiscoveredUrls]]:
    """(host_key, DiscoveredUrls) records for URLs the frontier itself found (redirect
    targets, robots.txt sitemaps), one record per (source, target host)."""
    out: list[tuple[str, DiscoveredUrls]] = []
    by_kind: dict[tuple[DiscoverySource, int, int], list[str]] = {}
    for url, depth, hops, source in found:
        by_kind.setdefault((source, depth, hops), []).append(url)
    for (source, depth, hops), urls in by_kind.items():
        for host_key, host_urls in group_by_host(urls).items():
            out += [(host_key, record) for record in links_records(
                host_key, source, parent, depth, now_ms, [plain_link(u) for u in host_urls],
                hops)]
    return out


@dataclass
class Intake:
    """A DiscoveredUrls record's links, normalized and grouped by their real host_key
    (producers may be wrong about it), the raw URLs that are not http(s) URLs, and the
    URLs whose host is an IP literal the address policy refuses (url, reason): those are
    never queued, so never leased (the fetcher would refuse them too)."""

    groups: dict[str, list[NewUrl]] = field(default_factory=dict)
    invalid: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    # URLs a filter of urls.filters dropped: (url, filter name, error if it raised)
    filtered: list[tuple[str, str, str | None]] = field(default_factory=list)


def intake(record: DiscoveredUrls, url_policy: UrlPolicy | None = None,
           address_policy: AddressPolicy | None = None,
           filters: Sequence[tuple[str, UrlFilter]] = (),
           normalized: Container[str] = ()) -> Intake:
    """Sort one DiscoveredUrls record's links (see `Intake`). `url_policy`: the query
    parameters to drop (urls.drop_query_params); `address_policy`: fetch.allowed_networks;
    `filters`: the user's URL filter chain (urls.filters, udfs/core/urlfilters.py).
    `normalized`: URLs that normalize_url gave with this `url_policy`: a link among them
    is taken as it is, since normalizing is idempotent (a crawl's links are mostly
    such rediscoveries, and the intake's own memory of them, RecentUrls, holds only
    normalized URLs). The filters and the address policy still see every link."""
    out = Intake()
    groups = out.groups
    kind = Kind.SITEMAP if record["source"] in SITEMAP_SOURCES else Kind.PAGE
    context = Link(record["source"], record["parent_url"], record["depth"]) if filters \
        else None
    for link in record["links"]:
        raw = link["url"]
        url = raw if raw in normalized else normalize_url(raw, policy=url_policy)
        if url is None:
            out.invalid.append(link["url"])
            continue
        if context is not None:
            verdict = run_chain(filters, url, context,
                                lambda u: normalize_url(u, policy=url_policy))
            if verdict.url is None:
                out.filtered.append((url, verdict.dropped_by or "", verdict.error))
                continue
            url = verdict.url
        if address_policy is not None:
            reason = url_address_refusal(url, address_policy)
            if reason is not None:
                out.refused.append((url, reason))
                continue
        groups.setdefault(split_host_key(url)[0], []).append({
            "url": url, "depth": record["depth"], "redirect_hops": record["redirect_hops"],
            "priority": link["priority"], "is_seed": record["source"] in SEED_SOURCES,
            "kind": kind, "lastmod": None if link["lastmod_ms"] is None else
            link["lastmod_ms"] / 1000.0, "changefreq": link["changefreq"]})
    return out


def fresh_links(recent: RecentUrls, links: list[NewUrl], now: float) -> list[NewUrl]:
    """The links of one host that `recent` passes on (recorded there as sent); the others
    are rediscoveries their host would answer with urls_known or the same refusal."""
    return [link for link in links if recent.passes(
        link["url"], now, priority=link["priority"], depth=link["depth"],
        redirect_hops=link["redirect_hops"], lastmod=link["lastmod"],
        is_seed=link["is_seed"])]


def transfer_record(t: Transfer) -> ShardTransfer:
    """A ShardTransfer record (schema shard_transfer.v1) of a hot host's move."""
    return {"kind": t.kind, "host_key": t.host_key, "shard": t.shard, "want": t.want,
            "remaining": t.remaining,
            "urls": [{"url": url, "state": pickle.dumps(saved)} for url, saved in t.urls]}


def transfer_from_record(record: ShardTransfer) -> Transfer:
    return Transfer(record["kind"], record["host_key"], record["shard"],
                    [(u["url"], pickle.loads(u["state"])) for u in record["urls"]],
                    want=record["want"], remaining=record["remaining"])

