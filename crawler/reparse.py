"""`crawl reparse`: parse a crawl's stored responses again and send their links to the
frontier, without contacting any site (udfs/core/reparse.py has the rules).

Reads the published WARC files under `warc.prefix` in the crawl's store (one ranged
read per record, through their CDXJ indexes), parses each selected page with the
configured parser settings (`parse.max_links`, `urls.drop_query_params`,
`robots.user_agent`) and parse filters (`parse.filters`, loaded once per run, applied as
in the fetcher's parser processes) and sends DiscoveredUrls records to crawl.discovered
(at least once, like the fetcher's). A parse filter that raises leaves that page as the
filters before it returned it; the summary counts such pages and names the first.
`--dry-run` reads and parses, and sends nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from crawler import warc_tool
from udfs.core.parse import ParsedPage
from udfs.core.parsefilters import ParseFilter, load_filters, parse_and_filter
from udfs.core.reparse import Entry, entry, response_lookup, select
from udfs.core.urls import UrlPolicy
from udfs.storage.warc import DEPTH_FIELD, parse_cdxj, read_record, timestamp14
from udfs.storage.warc_writer import _date_ms
from udfs.wire.records import DISCOVERED, DiscoveredUrls, host_of, page_links


def parse_page(body: bytes, url: str, headers: list[tuple[str, str]], cfg: Any,
               policy: UrlPolicy, chain: list[tuple[str, ParseFilter]] | None = None
               ) -> tuple[ParsedPage, tuple[str, str] | None]:
    """The page parsed and filtered as the fetcher's parser processes do, with the
    fetcher's settings: (the page, (filter, error) if one raised)."""
    return parse_and_filter(body, url, headers, user_agent=cfg["robots.user_agent"],
                            policy=policy, max_bytes=cfg["parse.max_bytes"],
                            max_links=cfg["parse.max_links"], chain=chain or ())


@dataclass
class Report:
    files: int = 0
    index_lines: int = 0
    selected: int = 0
    parsed: int = 0
    links: int = 0
    distinct: set[str] = field(default_factory=set)
    records: int = 0  # DiscoveredUrls records (sent, or that would be)
    no_depth: int = 0  # records written before Crawl-Depth: depth 0 assumed
    skipped: dict[str, int] = field(default_factory=dict)
    pages: list[tuple[str, int, bool]] = field(default_factory=list)  # url, links, cut
    # pages on which a parse filter raised: (url, filter, "Type: message")
    filter_errors: list[tuple[str, str, str]] = field(default_factory=list)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def summary(self, dry_run: bool, topic: str) -> str:
        sent = "would send" if dry_run else "sent"
        skipped = ", ".join(f"{n} {r}" for r, n in sorted(self.skipped.items())) or "none"
        line = (f"{self.files} WARC files, {self.index_lines} index lines, {self.selected} "
                f"pages selected, {self.parsed} parsed; {self.links} links "
                f"({len(self.distinct)} distinct URLs) in {self.records} DiscoveredUrls "
                f"records {sent} to {topic}; skipped: {skipped}")
        if self.no_depth:
            line += f"; {self.no_depth} pages without {DEPTH_FIELD} (depth 0 assumed)"
        if self.filter_errors:
            url, name, error = self.filter_errors[0]
            line += (f"; a parse filter raised on {len(self.filter_errors)} pages "
                     f"(first: {name} on {url}: {error})")
        return line


def _entries(store: Any, prefix: str, only: Iterable[str]) -> tuple[list[Entry], int]:
    """Every index line of the published files (of `only`, by file name, if given)."""
    names = set(only)
    out, files = [], 0
    for f in warc_tool.list_files(store, prefix):
        if f.indexed is None or (names and f.key.rsplit("/", 1)[-1] not in names):
            continue
        files += 1
        out += [entry(f.key, ts, data) for _k, ts, data in
                parse_cdxj(store.get_object(f.index_key))]
    return out, files


def reparse(cfg: Any, store: Any, send: Callable[[str, DiscoveredUrls], None] | None, *,
            since: str | None = None, until: str | None = None,
            files: Iterable[str] = (), now_ms: int | None = None) -> Report:
    """Parse the selected pages of the crawl's WARC files; `send(host_key, record)` each
    DiscoveredUrls record (None: a dry run)."""
    prefix = cfg["warc.prefix"]
    policy = UrlPolicy.from_names(cfg["urls.drop_query_params"])
    chain = load_filters(cfg["parse.filters"])
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    report = Report()
    entries, report.files = _entries(store, prefix, files)
    if files and report.files < len(set(files)):
        known = {f.key.rsplit("/", 1)[-1] for f in warc_tool.list_files(store, prefix)}
        missing = sorted(set(files) - known)
        raise FileNotFoundError(f"no published WARC file {missing[0]} under {prefix}")
    report.index_lines = len(entries)
    responses = response_lookup(entries)
    chosen = select(entries, since, until)
    report.selected = len(chosen)
    for e in chosen:
        rec, payload = read_record(store.get_range(e.key, e.offset, e.length))
        h = rec.rec_headers
        if h.get_header("WARC-Truncated"):
            report.skip("truncated")
            continue
        depth_text = h.get_header(DEPTH_FIELD)
        if e.revisit:  # identical payload: the body is in the response record it names
            ref = responses.get((h.get_header("WARC-Refers-To-Target-URI") or "",
                                 _ts(h.get_header("WARC-Refers-To-Date"))))
            if ref is None:
                report.skip("revisits whose response record is not in these files")
                continue
            _ref_rec, payload = read_record(store.get_range(ref.key, ref.offset, ref.length))
        headers = list(rec.http_headers.headers) if rec.http_headers else []
        page, failure = parse_page(payload, e.url, headers, cfg, policy, chain)
        if failure is not None:
            report.filter_errors.append((e.url, *failure))
        report.parsed += 1
        if depth_text is None:
            report.no_depth += 1
        depth = int(depth_text) if depth_text and depth_text.isdigit() else 0
        report.links += len(page.links)
        report.distinct.update(page.links)
        report.pages.append((e.url, len(page.links), page.truncated))
        for record in page_links(e.url, depth, page.links, now_ms):
            report.records += 1
            if send is not None:
                send(host_of(record), record)
    return report


def _ts(warc_date: str | None) -> str:
    """A WARC-Date as the index's 14-digit timestamp."""
    if not warc_date:
        return ""
    return timestamp14(_date_ms(warc_date))


def kafka_sender(cfg: Any) -> tuple[Callable[[str, DiscoveredUrls], None], Callable[[], None]]:
    """(send, close) of DiscoveredUrls records to the crawl's discovered topic, keyed by
    host_key; close flushes (and raises if a record was not delivered)."""
    from kafka import KafkaProducer

    from udfs.wire.avro import registry

    reg = registry()
    topic = cfg.topic("discovered")
    producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"],
                             request_timeout_ms=cfg["kafka.request_timeout_ms"], acks="all")
    futures = []

    def send(host_key: str, record: DiscoveredUrls) -> None:
        futures.append(producer.send(topic, DISCOVERED.encode(reg, record, check=True),
                                     key=host_key.encode()))

    def close() -> None:
        try:
            producer.flush()
            for f in futures:
                f.get(timeout=cfg["kafka.request_timeout_ms"] / 1000)
        finally:
            producer.close()

    return send, close
