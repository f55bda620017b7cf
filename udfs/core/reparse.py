"""`crawl reparse`, pure part: which WARC records to parse again, and the records that
carry their links back to the frontier.

A reparse reads a crawl's published WARC files, never a site: each page's newest
response record (or identical-payload revisit, whose payload is in the response record
it refers to) is parsed again with the configured parser settings and parse filters
(parse.filters, udfs/core/parsefilters.py), and its links go to
crawl.discovered as DiscoveredUrls records of the same shape the fetcher sends (source
LINK, one record per target host, depth = the fetch's depth + 1). The frontier keeps
each URL once, so links it already knows change nothing and new ones are crawled.

No completion is sent: see README, "crawl reparse", for why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from udfs.core.fetching import HTML_TYPES

# Index lines of records that may hold a page to parse: a 200 response of an HTML type
# (or none, as the fetcher accepts: no mime field, or "unk" in older indexes), or a
# revisit of a 200 (identical payload).
PARSEABLE_MIMES = (*HTML_TYPES, "", "unk", "warc/revisit")


@dataclass(frozen=True)
class Entry:
    """One CDXJ line of a published file: the record's URL, its 14-digit timestamp, where
    it is, its type (from the mime: "warc/revisit" is a revisit), status and digest."""

    url: str
    timestamp: str
    key: str  # the WARC file's object key
    offset: int
    length: int
    mime: str
    status: str
    digest: str

    @property
    def revisit(self) -> bool:
        return self.mime == "warc/revisit"


def entry(key: str, timestamp: str, data: dict[str, Any]) -> Entry:
    """An Entry from a CDXJ line's fields (warc_tool reads them) and its file's key."""
    return Entry(data["url"], timestamp, key, int(data["offset"]), int(data["length"]),
                 data.get("mime", ""), data.get("status", "-"), data.get("digest", "-"))


def in_window(timestamp: str, since: str | None, until: str | None) -> bool:
    """Whether a 14-digit timestamp is within [since, until]; each bound is a prefix of
    one (YYYYMMDD, YYYYMMDDhh, ... YYYYMMDDhhmmss), `until` including all it names."""
    if since is not None and timestamp < since.ljust(14, "0"):
        return False
    return until is None or timestamp <= until.ljust(14, "9")


def select(entries: Iterable[Entry], since: str | None = None,
           until: str | None = None) -> list[Entry]:
    """The record to parse of each URL: its newest (timestamp, then file key) 200 record
    of an HTML type or an identical-payload revisit, within [since, until]; robots.txt
    files are never pages. In URL order."""
    best: dict[str, Entry] = {}
    for e in entries:
        if e.status != "200" or e.mime not in PARSEABLE_MIMES:
            continue
        if urlsplit(e.url).path == "/robots.txt" or not in_window(e.timestamp, since, until):
            continue
        old = best.get(e.url)
        if old is None or (e.timestamp, e.key) > (old.timestamp, old.key):
            best[e.url] = e
    return [best[u] for u in sorted(best)]


def response_lookup(entries: Iterable[Entry]) -> dict[tuple[str, str], Entry]:
    """Response records by (URL, timestamp): what a revisit's WARC-Refers-To-Target-URI
    and WARC-Refers-To-Date name."""
    return {(e.url, e.timestamp): e for e in entries if not e.revisit}

