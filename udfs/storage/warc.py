"""Every fetch kept as WARC/1.1, pure part: records, file names, rolling, the CDXJ index.

A fetch that reached a server (it has an HTTP status) becomes two records, written as
warcio's writer writes them (here, without its per-record objects: `build_records`) and
gzip'd one record per gzip member (so any record can be read alone from its
offset; a response's payload is compressed apart from its headers, in the same member,
so that the body store can reuse it: udfs/storage/deflate.py):

* `request`: the request line and the headers as aiohttp sent them;
* `response`: the status line and the headers as received, then the payload as
  received on the wire (Content-Encoding kept: a gzip'd body stays gzip'd). What is not
  quite "as received", and is said in the record:
  - aiohttp removes chunked transfer coding before we see the body, so a
    `Transfer-Encoding` header is kept as `X-Archive-Orig-Transfer-Encoding` (pywb's
    convention) and the payload is the de-chunked body;
  - a body that was not read (the client reads bodies of OK answers only: an error
    page, a redirect's body) or was refused as too large is absent, and the record says
    `WARC-Truncated: unspecified` (not read) or `length` (over fetch.max_body_bytes);
* `revisit` instead of `response` for a 304 answer (profile server-not-modified) and
  for a payload whose digest this writer has already written in a response record
  (profile identical-payload-digest, pointing at that record).

Digests: WARC-Payload-Digest and WARC-Block-Digest are SHA-256 in base32, as warcio
writes digests ("sha256:" + base32); for an identity-coded page the payload digest is
the stored body's SHA-256 (`body_sha256`) in that form (`sha256_b32`).

Record ids are UUIDs derived from what identifies the fetch — lease id, URL version,
attempt — and the record's role, so building a fetch's records again gives the same
ids (and, with the same inputs, the same bytes).

Files: `<prefix>-<YYYYMMDDhhmmss>-<serial>-<host>.warc.gz`, Common Crawl's scheme from
its first crawls (CC-MAIN-20130516093810-00000-ip-10-60-113-184.ec2.internal.warc.gz:
the time the file was opened, a five-digit serial of the writer, the writing host),
here with the host made unique per fetcher subtask and task incarnation
(`<hostname>-t<subtask>-<token>`), so two writers never name a file alike. Each file
starts with a `warcinfo` record. Its index, `<name without .warc.gz>.cdxj`, has one
line per response and revisit record, pywb's CDXJ: `<SURT> <YYYYMMDDhhmmss> {json}`
with url, mime, status, digest, length, offset, filename, sorted.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import hashlib
import io
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from warcio.recordbuilder import RecordBuilder
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from udfs.storage import deflate

WARC_VERSION = "WARC/1.1"
PROFILE_IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
PROFILE_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
# Namespace of the record ids (a fixed random UUID: ids are ours, not someone else's).
ID_NAMESPACE = uuid.UUID("6f1c2a52-8d5e-4a53-9b1e-2f4f0c6d9a17")
SOFTWARE = "flink-crawler (warcio)"
# A named field of ours on response and revisit records: the fetch's depth from a seed.
DEPTH_FIELD = "Crawl-Depth"
END_OF_RECORD = b"\r\n\r\n"  # after a record's block (WARC/1.1 section 4)


def sha256_b32(data: bytes | None = None, hex_digest: str | None = None) -> str:
    """A SHA-256 as WARC digests are written: "sha256:" + base32 (of `data`, or of a
    hex digest already computed, such as a completion's body_sha256)."""
    if hex_digest is not None:
        raw = bytes.fromhex(hex_digest)
    elif data is not None:
        raw = hashlib.sha256(data).digest()
    else:
        raise ValueError("sha256_b32 needs data or a hex digest")
    return _as_warc_digest(raw)


def _as_warc_digest(raw: bytes) -> str:
    """A SHA-256 digest's bytes as WARC digests are written."""
    return "sha256:" + base64.b32encode(raw).decode()


# The payload digest of a record with no payload (every request record's).
_EMPTY_DIGEST = sha256_b32(b"")


def record_id(lease_id: str, url_version: int, attempt: int, role: str) -> str:
    """The WARC-Record-ID of one record of one fetch: the same fetch, the same id."""
    name = f"{lease_id}\x00{url_version}\x00{attempt}\x00{role}"
    return f"<urn:uuid:{uuid.uuid5(ID_NAMESPACE, name)}>"


def warc_date(ms: int) -> str:
    """WARC-Date of a time in milliseconds (WARC/1.1 allows fractions of a second)."""
    t = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def timestamp14(ms: int | float) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y%m%d%H%M%S")


# -- one fetch ------------------------------------------------------------------------------


@dataclass
class Exchange:
    """An HTTP exchange as the fetch client saw it (udfs/fetcher/client.py)."""

    method: str
    target: str  # the request target: path and query
    request_headers: list[tuple[str, str]]
    version: str  # "HTTP/1.1"
    status: int
    reason: str
    response_headers: list[tuple[str, str]]  # as received: order, case and repeats kept
    payload: bytes = b""  # as received, transfer coding removed
    truncated: str | None = None  # WARC-Truncated: None, "length" or "unspecified"
    ip: str | None = None


@dataclass
class Fetch:
    """One fetch to keep: what identifies it, and its exchange."""

    url: str
    lease_id: str
    url_version: int
    attempt: int
    fetched_at_ms: int
    exchange: Exchange
    depth: int | None = None  # the lease's depth from a seed (written as Crawl-Depth)
    # Set by WarcWriter.write, for the body store to reuse when the payload is the body
    # it stores (no Content-Encoding): the payload's SHA-256 (hex), and the payload
    # compressed once (a udfs/storage/deflate.py piece) when a response record holds it.
    payload_sha256: str | None = None
    payload_piece: bytes | None = None


@dataclass(frozen=True)
class Location:
    """Where one record is: the object key of its WARC file (warc.prefix + the file's
    name, the CDXJ's `filename`), and its gzip member's offset and length in that file:
    one ranged read of [offset, offset + length) is the whole record."""

    key: str
    offset: int
    length: int


@dataclass
class Record:
    """One record as written: its gzip member and what its index line needs."""

    rec_type: str
    record_id: str
    data: bytes  # the gzip member
    url: str = ""
    date_ms: int = 0
    status: int | None = None
    mime: str = ""
    digest: str | None = None
    payload_piece: bytes | None = None  # a response's payload, compressed once


def _response_headers(ex: Exchange) -> list[tuple[str, str]]:
    return [("X-Archive-Orig-Transfer-Encoding", v) if k.lower() == "transfer-encoding"
            else (k, v) for k, v in ex.response_headers]


def _header(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    name = name.lower()
    return next((v for k, v in headers if k.lower() == name), None)


def _serialized(rec) -> bytes:
    """One record as warcio writes it (digests and length checked by it)."""
    out = io.BytesIO()
    WARCWriter(out, gzip=False, warc_version=WARC_VERSION).write_record(rec)
    return out.getvalue()


def _gzip_member(rec, level: int = 6) -> bytes:
    """One record as its own gzip member (storage.gzip_level; warcio's own wrapper uses
    9, several times slower than the default 6)."""
    data = _serialized(rec)
    return deflate.gzip_of(data, level)


_BUILDER = RecordBuilder(warc_version=WARC_VERSION)

# What warcio's writer gives each record type as its Content-Type (RecordBuilder).
_CONTENT_TYPES = {"response": "application/http; msgtype=response",
                  "revisit": "application/http; msgtype=response",
                  "request": "application/http; msgtype=request"}


def http_block(first_line: str, headers: Sequence[tuple[str, str]]) -> bytes:
    """An HTTP message's start line and headers as a WARC record's block begins with
    them, byte for byte as warcio writes them (StatusAndHeaders.compute_headers_buffer):
    ASCII, each line ended by CRLF, then an empty line; a header value that is not ASCII
    is percent-encoded as warcio does it (RFC 8187), by warcio itself."""
    text = first_line + "\r\n" if first_line else ""
    text += "".join(f"{k}: {v}\r\n" for k, v in headers)
    try:
        return text.encode("ascii") + b"\r\n"
    except UnicodeEncodeError:  # rare: warcio's own encoding of such headers
        protocol, _, status = first_line.partition(" ")
        http = StatusAndHeaders(status, list(headers), protocol=protocol)
        http.compute_headers_buffer()
        return http.headers_buff


def _warc_head(rec_type: str, url: str, fields: Sequence[tuple[str, str]],
               length: int) -> bytes:
    """A record's WARC header block, fields in the order warcio's RecordBuilder and
    WARCWriter put them: the caller's, then WARC-Type, WARC-Target-URI, Content-Type
    and Content-Length (UTF-8, as warcio writes WARC headers)."""
    lines = [WARC_VERSION]
    lines += [f"{k}: {v}" for k, v in fields]
    lines.append(f"WARC-Type: {rec_type}")
    if url:
        lines.append(f"WARC-Target-URI: {url}")
    lines += [f"Content-Type: {_CONTENT_TYPES[rec_type]}", f"Content-Length: {length}",
              "", ""]
    return "\r\n".join(lines).encode("utf-8")


def _member(head: bytes, level: int) -> bytes:
    """A record with no payload after its HTTP headers (`head`: the whole record but its
    end) as one gzip member."""
    data = head + END_OF_RECORD
    return deflate.gzip_of(data, level)


def _response_member(head: bytes, payload: bytes, level: int) -> tuple[bytes, bytes | None]:
    """A response record's gzip member (`head`: its WARC and HTTP headers), and its
    payload's piece (deflate.py): the payload compressed apart from the headers before
    it and the record's end after it, so that the body store can use the same piece
    (one compression for both)."""
    if not payload:
        return _member(head, level), None
    body = deflate.piece(payload, level)
    pieces = (deflate.piece(head, level), body, deflate.stored(END_OF_RECORD))
    crc = deflate.crc32(END_OF_RECORD, deflate.crc32(payload, deflate.crc32(head)))
    return deflate.member(pieces, crc, len(head) + len(payload) + len(END_OF_RECORD)), body


def _block_digest(block: bytes, payload: bytes = b"") -> str:
    h = hashlib.sha256(block)
    h.update(payload)  # (not concatenated first: no copy of the payload)
    return _as_warc_digest(h.digest())


def build_records(f: Fetch, refers_to: tuple[str, str, str] | None = None,
                  gzip_level: int = 6, payload_sha256: str | None = None) -> list[Record]:
    """The records of one fetch: [response or revisit, request].

    `refers_to`: (record id, URI, WARC-Date) of the response record whose payload this
    one repeats: the response becomes a revisit (identical-payload-digest). A 304
    answer is a revisit (server-not-modified) in any case. `payload_sha256`: the
    payload's SHA-256 (hex), if the caller has it already.

    Written here rather than through warcio's writer (a third of the records' CPU
    beside their compression; tests/unit/test_warc.py holds the two to the same bytes),
    which still reads them."""
    ex = f.exchange
    date = warc_date(f.fetched_at_ms)
    resp_id = record_id(f.lease_id, f.url_version, f.attempt, "response")
    req_id = record_id(f.lease_id, f.url_version, f.attempt, "request")
    common = [("WARC-Date", date)]
    if ex.ip:
        common.append(("WARC-IP-Address", ex.ip))
    # Our own named field (WARC/1.1 section 5: readers ignore fields they do not know):
    # the fetch's depth from a seed, for `crawl reparse`'s discovered URLs.
    extra = [(DEPTH_FIELD, str(f.depth))] if f.depth is not None else []
    status = f"{ex.status} {ex.reason}".strip()
    http = http_block(f"{ex.version} {status}" if ex.version else status,
                      _response_headers(ex))
    mime = (_header(ex.response_headers, "Content-Type") or "").split(";")[0].strip().lower()
    payload_digest = sha256_b32(ex.payload) if payload_sha256 is None \
        else sha256_b32(hex_digest=payload_sha256)
    if ex.status == 304 or refers_to is not None:
        fields = [("WARC-Record-ID", resp_id), *common, *extra]
        if ex.status == 304:
            fields += [("WARC-Profile", PROFILE_NOT_MODIFIED),
                       ("WARC-Refers-To-Target-URI", f.url)]
            digest = None
        else:
            if refers_to is None:  # not a 304, so a revisit of an earlier response
                raise ValueError("a revisit needs the record it refers to")
            digest = payload_digest
            fields += [("WARC-Profile", PROFILE_IDENTICAL), ("WARC-Refers-To", refers_to[0]),
                       ("WARC-Refers-To-Target-URI", refers_to[1]),
                       ("WARC-Refers-To-Date", refers_to[2]),
                       ("WARC-Payload-Digest", digest)]
            if ex.truncated:
                fields.append(("WARC-Truncated", ex.truncated))
        # A revisit carries the HTTP headers only (warcio writes no payload for it).
        fields.append(("WARC-Block-Digest", _block_digest(http)))
        head = _warc_head("revisit", f.url, fields, len(http)) + http
        main = Record("revisit", resp_id, _member(head, gzip_level), f.url, f.fetched_at_ms,
                      ex.status, "warc/revisit", digest)
    else:
        fields = [("WARC-Record-ID", resp_id), *common, *extra,
                  ("WARC-Payload-Digest", payload_digest),
                  ("WARC-Block-Digest", _block_digest(http, ex.payload))]
        if ex.truncated:
            fields.append(("WARC-Truncated", ex.truncated))
        head = _warc_head("response", f.url, fields, len(http) + len(ex.payload)) + http
        member, piece = _response_member(head, ex.payload, gzip_level)
        main = Record("response", resp_id, member, f.url, f.fetched_at_ms, ex.status, mime,
                      payload_digest, piece)
    req_http = http_block(f"{ex.method} {ex.target} {ex.version}", ex.request_headers)
    req_fields = [("WARC-Record-ID", req_id), *common, ("WARC-Concurrent-To", resp_id),
                  ("WARC-Block-Digest", _block_digest(req_http)),
                  ("WARC-Payload-Digest", _EMPTY_DIGEST)]
    req_head = _warc_head("request", f.url, req_fields, len(req_http)) + req_http
    return [main, Record("request", req_id, _member(req_head, gzip_level), f.url,
                         f.fetched_at_ms)]


def warcinfo_record(filename: str, opened_ms: int, info: dict[str, str],
                    gzip_level: int = 6) -> Record:
    """The first record of a file (its id follows from the file's name)."""
    rid = f"<urn:uuid:{uuid.uuid5(ID_NAMESPACE, 'warcinfo' + chr(0) + filename)}>"
    body = "".join(f"{k}: {v}\r\n" for k, v in info.items() if v).encode()
    rec = _BUILDER.create_warc_record(
        "", "warcinfo", payload=io.BytesIO(body), length=len(body),
        warc_headers_dict={"WARC-Record-ID": rid, "WARC-Date": warc_date(opened_ms),
                           "WARC-Filename": filename,
                           "Content-Type": "application/warc-fields"})
    return Record("warcinfo", rid, _gzip_member(rec, gzip_level), date_ms=opened_ms)


# -- files -----------------------------------------------------------------------------------


_NAME = re.compile(r"^(?P<prefix>[A-Za-z0-9_.]+(?:-[A-Za-z0-9_.]+)*?)-(?P<ts>\d{14})-"
                   r"(?P<serial>\d{5,})-(?P<host>[A-Za-z0-9_.-]+)\.warc\.gz$")


def safe_host(name: str) -> str:
    """A hostname as a file name part: letters, digits, dot, dash, underscore."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "host"


def file_name(prefix: str, opened_ms: int, serial: int, host: str) -> str:
    """Common Crawl's `CC-MAIN-<YYYYMMDDhhmmss>-<serial:05>-<host>.warc.gz`."""
    return f"{prefix}-{timestamp14(opened_ms)}-{serial:05d}-{safe_host(host)}.warc.gz"


def parse_file_name(name: str) -> dict[str, str] | None:
    m = _NAME.match(name.rsplit("/", 1)[-1])
    return m.groupdict() if m else None


def index_name(warc_key: str) -> str:
    """The CDXJ object beside a WARC file."""
    return warc_key[: -len(".warc.gz")] + ".cdxj" if warc_key.endswith(".warc.gz") \
        else warc_key + ".cdxj"


@dataclass
class RollPolicy:
    """When a file is closed and published: once it holds `max_bytes` (a record is never
    split: a file ends after the record that reaches the limit) or is `max_age_s` old."""

    max_bytes: int
    max_age_s: float

    def due(self, size: int, opened_s: float, now_s: float) -> bool:
        return size >= self.max_bytes or now_s - opened_s >= self.max_age_s


# -- the index -------------------------------------------------------------------------------


def surt(url: str) -> str:
    """The SURT key pywb sorts and looks up by: host reversed with commas and "www."
    dropped, lower case, default port dropped, ")" then path and query (query
    parameters sorted), no scheme or fragment. (The surt package's default
    canonicalization, for http(s) URLs as the crawler normalizes them.)"""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.lower()
    host = (parts.hostname or "").lower().strip(".")
    if host.startswith("www."):
        host = host[4:]
    key = ",".join(reversed(host.split("."))) if host else ""
    port = parts.port if parts.port is not None else None
    if port is not None and port != {"http": 80, "https": 443}.get(parts.scheme):
        key += f":{port}"
    path = parts.path or "/"
    query = "&".join(sorted(parts.query.split("&"))) if parts.query else ""
    return (key + ")" + path + ("?" + query if query else "")).lower()


@dataclass
class IndexEntry:
    url: str
    date_ms: int
    mime: str
    status: int | None
    digest: str | None
    length: int
    offset: int
    filename: str
    rec_type: str = "response"

    def line(self) -> str:
        # As pywb's indexer (cdxj-indexer) writes it: a record without a payload digest
        # (a 304's revisit) has no "digest" field, one without a Content-Type (a bare
        # redirect) no "mime" field.
        data = {"url": self.url, **({"mime": self.mime} if self.mime else {}),
                "status": str(self.status) if self.status is not None else "-",
                **({"digest": self.digest} if self.digest else {}),
                "length": str(self.length), "offset": str(self.offset),
                "filename": self.filename}
        return f"{surt(self.url)} {timestamp14(self.date_ms)} {json.dumps(data)}"


def cdxj(entries: Iterable[IndexEntry]) -> bytes:
    """The index of a file: one line per response and revisit record, sorted as pywb
    expects (by SURT key, then time)."""
    lines = sorted(e.line() for e in entries if e.rec_type in ("response", "revisit"))
    return "".join(line + "\n" for line in lines).encode()


def parse_cdxj(data: bytes) -> list[tuple[str, str, dict]]:
    out = []
    for line in data.decode().splitlines():
        if line.strip():
            key, ts, rest = line.split(" ", 2)
            out.append((key, ts, json.loads(rest)))
    return out


# -- reading ---------------------------------------------------------------------------------


def read_record(member: bytes):
    """The one record in a gzip member (bytes from its offset, `length` long): warcio's
    parsed record, its content read: (record, payload bytes)."""
    from warcio.archiveiterator import ArchiveIterator

    for rec in ArchiveIterator(io.BytesIO(member)):
        return rec, rec.content_stream().read()
    raise ValueError("no record")


def decode_member(member: bytes) -> bytes:
    return gzip.decompress(member)


@dataclass
class Dedup:
    """Payload digests already written in response records by this writer, with the
    record they are in (id, URI, date), the newest `limit` kept."""

    limit: int
    seen: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def get(self, digest: str) -> tuple[str, str, str] | None:
        return self.seen.get(digest)

    def add(self, digest: str, ref: tuple[str, str, str]) -> None:
        if self.limit <= 0:
            return
        self.seen[digest] = ref
        while len(self.seen) > self.limit:
            del self.seen[next(iter(self.seen))]
