"""Sitemaps (sitemaps.org protocol 0.9): urlset, sitemapindex, plain text, gzip.

`parse_sitemap` never raises. It enforces the protocol's limits per file
(50,000 URLs, 50 MB uncompressed, gzip included), keeps lastmod, and on
malformed XML returns the entries read before the error together with the
error. Entities are never expanded and nothing is loaded from the network
(no billion laughs, no XXE). Whitespace and a UTF-8 BOM before the content
(blank lines before `<?xml ...?>`) are skipped: real sites serve them, other
sitemap readers accept them (crawler-commons skips leading whitespace), and
libxml2 refuses a declaration after anything but a BOM. Every <loc> goes through
`normalize_url` with the caller's `UrlPolicy`, so sitemap URLs get the same dedup
keys as links found in pages.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from lxml import etree

from udfs.core.urls import UrlPolicy, normalize_url

MAX_URLS = 50_000
MAX_BYTES = 50 * 1024 * 1024  # 52,428,800 bytes uncompressed, the protocol's own figure
_CHUNK = 64 * 1024
# A plain-text line longer than this (32 times the protocol's 2,048-character URL
# limit) is skipped without being buffered whole.
MAX_TEXT_LINE = 64 * 1024
_BOM = b"\xef\xbb\xbf"

_W3C_DATE = re.compile(
    r"^(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?"
    r"\s*(Z|z|[+-]\d{2}:?\d{2})?)?)?)?$")


@dataclass(frozen=True)
class SitemapEntry:
    url: str  # normalized
    lastmod_ms: int | None = None
    priority: float | None = None
    changefreq: str | None = None


@dataclass
class SitemapResult:
    kind: str  # "urlset", "sitemapindex", "text" or "unknown"
    entries: list[SitemapEntry] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: int = 0  # <loc> values that were not valid http(s) URLs (or were off-host)

    @property
    def ok(self) -> bool:
        return not self.errors


def parse_lastmod(text: str | None) -> int | None:
    """A W3C Datetime (YYYY, YYYY-MM, YYYY-MM-DD, with time and zone) as epoch ms, else None."""
    if not text:
        return None
    m = _W3C_DATE.match(text.strip())
    if not m:
        return None
    year, month, day, hh, mm, ss, frac, tz = m.groups()
    try:
        dt = datetime(int(year), int(month or 1), int(day or 1), int(hh or 0), int(mm or 0),
                      int(ss or 0), int((frac or "0")[:6].ljust(6, "0")), tzinfo=UTC)
    except ValueError:
        return None
    offset = 0
    if tz and tz not in ("Z", "z"):
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = sign * (int(digits[:2]) * 60 + int(digits[2:]))
    return int(dt.timestamp() * 1000) - offset * 60_000


def _priority(text: str | None) -> float | None:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and 0.0 <= value <= 1.0 else None


def _decompressed_chunks(data: bytes, result: SitemapResult, limit: int = MAX_BYTES
                         ) -> Iterator[bytes]:
    """The body in chunks, gunzipped if gzip, cut at `limit` bytes uncompressed.

    Exactly `limit` is allowed (by default the protocol's 50 MB); leading whitespace
    counts, as it is part of the file. Nothing else in this module caps a file's size.
    """
    if data[:2] == b"\x1f\x8b":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        total = 0
        try:
            for i in range(0, len(data), _CHUNK):
                src = data[i:i + _CHUNK]
                while src:
                    # At most _CHUNK bytes out per call: a gzip bomb never inflates
                    # in memory beyond what is parsed.
                    out = inflater.decompress(src, _CHUNK)
                    src = inflater.unconsumed_tail
                    total += len(out)
                    if total > limit:
                        yield out[:len(out) - (total - limit)]
                        result.errors.append(
                            f"more than {_size(limit)} uncompressed; the rest was ignored")
                        return
                    if out:
                        yield out
                    if inflater.eof:
                        return
        except zlib.error as exc:
            result.errors.append(f"corrupt gzip: {exc}")
            return
        result.errors.append("truncated gzip stream")
        return
    if len(data) > limit:
        result.errors.append(f"more than {_size(limit)}; the rest was ignored")
        data = data[:limit]
    for i in range(0, len(data), _CHUNK):
        yield data[i:i + _CHUNK]


def _local(tag: object) -> str:
    if not isinstance(tag, str):
        return ""
    return tag.rsplit("}", 1)[-1].lower()


def _skip_leading_space(chunks: Iterator[bytes]) -> tuple[bool, bytes]:
    """(whether a UTF-8 BOM was seen, the first content bytes) after leading whitespace.

    Skips ASCII whitespace, one UTF-8 BOM and the whitespace after it, across chunk
    boundaries (a gzip stream may inflate to a lone BOM or a run of blank chunks),
    holding at most one chunk. The other chunks stay in `chunks`. b"" if nothing
    but whitespace was there.
    """
    bom = False
    head = b""
    for chunk in chunks:
        head = (head + chunk).lstrip()
        if not bom and head.startswith(_BOM):
            bom = True
            head = head[len(_BOM):].lstrip()
        # Wait for more bytes when the head may be the start of a BOM split in two.
        if head and (bom or not _BOM.startswith(head)):
            break
    return bom, head


def _add(result: SitemapResult, loc: str | None, base: str | None, host: str | None,
         lastmod: str | None = None, priority: str | None = None,
         changefreq: str | None = None, *, url_policy: UrlPolicy | None = None) -> bool:
    """Append an entry; False once the URL limit is reached.

    `url_policy` is the caller's, passed to normalize_url as is (None drops nothing).
    """
    if len(result.entries) >= MAX_URLS:
        if not any("50,000" in e for e in result.errors):
            result.errors.append("more than 50,000 URLs; the rest were ignored")
        return False
    url = normalize_url(loc.strip(), base, policy=url_policy) if loc else None
    if url is None or (host is not None and not url.startswith(host + "/")):
        result.skipped += 1
        return True
    result.entries.append(SitemapEntry(url, parse_lastmod(lastmod), _priority(priority),
                                       changefreq.strip().lower() if changefreq else None))
    return True


_FIELDS = ("loc", "lastmod", "priority", "changefreq")


def _parse_xml(chunks: Iterator[bytes], result: SitemapResult, base: str | None,
               host: str | None, url_policy: UrlPolicy | None) -> None:
    # End events only: an entry's fields are the direct children of a <url> or
    # <sitemap> that is itself a child of the root (so image:loc and other
    # extensions nested deeper never replace the page's own <loc>).
    parser = etree.XMLPullParser(
        events=("end",), resolve_entities=False, load_dtd=False, no_network=True,
        huge_tree=False, remove_comments=True, remove_pis=True)
    root = None
    try:
        for chunk in chunks:
            parser.feed(chunk)
            for _, elem in parser.read_events():
                if root is None:
                    root = elem.getroottree().getroot()
                    name = _local(root.tag)
                    result.kind = name if name in ("urlset", "sitemapindex") else "unknown"
                    if elem.getroottree().docinfo.internalDTD is not None:
                        result.errors.append("DOCTYPE with an internal subset; entities "
                                             "were not expanded")
                parent = elem.getparent()
                if parent is not root or elem is root:
                    continue
                if _local(elem.tag) in ("url", "sitemap"):
                    fields: dict[str, str] = {}
                    for child in elem:
                        name = _local(child.tag)
                        if name in _FIELDS and name not in fields:
                            # An unexpanded entity reference makes the value meaningless.
                            bad = any(isinstance(c, etree._Entity) for c in child)
                            fields[name] = "" if bad else "".join(child.itertext())
                    if not _add(result, fields.get("loc"), base, host, fields.get("lastmod"),
                                fields.get("priority"), fields.get("changefreq"),
                                url_policy=url_policy):
                        return
                elem.clear()  # keep memory flat on 50 MB files, whatever the elements
                while elem.getprevious() is not None:
                    del root[0]
        parser.close()
    except etree.XMLSyntaxError as exc:
        result.errors.append(f"malformed XML: {exc}")
    if root is None and not result.errors:
        result.errors.append("no XML element found")
    if result.kind == "unknown":
        result.errors.append("root element is neither urlset nor sitemapindex")


def _parse_text(chunks: Iterator[bytes], result: SitemapResult, base: str | None,
                host: str | None, url_policy: UrlPolicy | None) -> None:
    """One URL per line; a line longer than MAX_TEXT_LINE is skipped and counted.

    Buffering such a line whole would hold up to 50 MB, and growing one bytes
    object chunk by chunk took quadratic time (36 s for one gzipped 49 MB line).
    """
    result.kind = "text"
    pending = b""  # the current line so far, never more than MAX_TEXT_LINE
    overlong = False  # the current line passed MAX_TEXT_LINE: skip to its end

    def line(raw: bytes) -> bool:
        text = raw.decode("utf-8", "replace").strip()
        return not text or _add(result, text, base, host, url_policy=url_policy)

    for chunk in chunks:
        *complete, tail = chunk.split(b"\n")
        for piece in complete:
            if overlong or len(pending) + len(piece) > MAX_TEXT_LINE:
                result.skipped += 1
            elif not line(pending + piece):
                return
            pending, overlong = b"", False
        if not overlong:
            if len(pending) + len(tail) > MAX_TEXT_LINE:
                pending, overlong = b"", True
            else:
                pending += tail
    if overlong:
        result.skipped += 1
    elif pending:
        line(pending)


def _size(limit: int) -> str:
    return "50 MB" if limit == MAX_BYTES else f"{limit:,} bytes"


def parse_sitemap(data: bytes, *, base_url: str | None = None,
                  same_host: str | None = None,
                  url_policy: UrlPolicy | None = None,
                  max_bytes: int = MAX_BYTES) -> SitemapResult:
    """Entries of one sitemap file (XML urlset / sitemapindex, plain text, optionally gzip).

    `base_url` resolves relative <loc> values; `same_host` (a host_key) keeps only
    URLs of that host and counts the others as skipped. `url_policy` is passed to
    every `normalize_url` call, so the configured query-parameter drop list
    (`urls.drop_query_params`) gives sitemap URLs the same identity as links found in
    pages; None drops nothing, as in normalize_url. `max_bytes` caps the file's
    uncompressed size (the fetcher passes fetch.max_sitemap_bytes; at most 50 MB).
    """
    result = SitemapResult("unknown")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        result.errors.append(f"expected bytes, got {type(data).__name__}")
        return result
    chunks = _decompressed_chunks(bytes(data), result, min(max_bytes, MAX_BYTES))
    bom, head = _skip_leading_space(chunks)

    def rest(first: bytes) -> Iterator[bytes]:
        yield first
        yield from chunks

    if head.startswith(b"<"):
        # libxml2 refuses an XML declaration after anything but a BOM, so the
        # whitespace is not fed; the BOM is (in one piece with the head), since it
        # decides the encoding even over the declaration's.
        _parse_xml(rest(_BOM + head if bom else head), result, base_url, same_host, url_policy)
    elif head:
        _parse_text(rest(head), result, base_url, same_host, url_policy)
    else:
        result.errors.append("empty sitemap")
    return result
