"""`crawl warc ls | get URL | verify`: the WARC files of a crawl, read from its store.

The files and their CDXJ indexes are under `warc.prefix` in the store the
configuration names (storage.backend); only published files are there (the fetcher
puts a file whole, then its index).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from udfs.storage.warc import index_name, parse_cdxj, read_record


@dataclass
class WarcFile:
    key: str
    size: int
    indexed: int | None  # response and revisit records in its CDXJ; None: no index
    index_key: str


def list_files(store: Any, prefix: str) -> list[WarcFile]:
    """The published WARC files under `prefix`, in name (time) order."""
    keys = list(store.list_objects(prefix))
    present = set(keys)
    out = []
    for key in keys:
        if not key.endswith(".warc.gz") or key.rsplit("/", 1)[-1].startswith(".tmp-"):
            continue
        idx = index_name(key)
        indexed = len(parse_cdxj(store.get_object(idx))) if idx in present else None
        out.append(WarcFile(key, store.size(key), indexed, idx))
    return out


def _entries(store: Any, files: list[WarcFile]) -> Iterator[tuple[WarcFile, str, dict]]:
    for f in files:
        if f.indexed is None:
            continue
        for _key, ts, data in parse_cdxj(store.get_object(f.index_key)):
            yield f, ts, data


def newest(store: Any, prefix: str, url: str) -> tuple[WarcFile, str, dict] | None:
    """The newest index entry of `url` (a response or a revisit), with its file."""
    best = None
    for f, ts, data in _entries(store, list_files(prefix=prefix, store=store)):
        if data.get("url") == url and (best is None or (ts, f.key) > (best[1], best[0].key)):
            best = (f, ts, data)
    return best


def read_entry(store: Any, f: WarcFile, data: dict) -> bytes:
    """The gzip member of one record: one ranged read."""
    return store.get_range(f.key, int(data["offset"]), int(data["length"]))


def render_record(member: bytes) -> str:
    """A record for a terminal: WARC headers, HTTP headers, then the payload as text."""
    rec, payload = read_record(member)
    parts = [rec.rec_headers.to_str().rstrip("\r\n")]
    if rec.http_headers is not None:
        parts.append(rec.http_headers.to_str().rstrip("\r\n"))
    text = payload.decode("utf-8", "replace")
    return "\n\n".join(parts) + "\n\n" + text


@dataclass
class Verdict:
    files: int = 0
    records: int = 0
    index_lines: int = 0
    problems: list[str] = field(default_factory=list)


def _local_copy(store: Any, key: str) -> tuple[str, bool]:
    """A path to read the file from: the local store's own file, else a temporary copy."""
    root = getattr(store, "root", None)
    if root is not None:
        return os.fspath(root / key), False
    fd, path = tempfile.mkstemp(suffix=".warc.gz")
    with os.fdopen(fd, "wb") as fh:
        fh.write(store.get_object(key))
    return path, True


def check_file(path: str) -> tuple[dict[int, tuple[str, str, str | None, str]], list[str]]:
    """warcio's check of one file (every record read whole, its digests compared), and
    its records by offset: (type, target URI, payload digest, record id)."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    records: dict[int, tuple[str, str, str | None, str]] = {}
    problems: list[str] = []
    try:
        with open(path, "rb") as fh:
            it = ArchiveIterator(fh, check_digests=True)
            for rec in it:
                stream = rec.content_stream()
                while stream.read(1024 * 1024):
                    pass
                h = rec.rec_headers
                records[it.get_record_offset()] = (
                    h.get_header("WARC-Type"), h.get_header("WARC-Target-URI") or "",
                    h.get_header("WARC-Payload-Digest"), h.get_header("WARC-Record-ID"))
                if rec.digest_checker.passed is False:
                    problems += [f"offset {it.get_record_offset()}: {p}"
                                 for p in rec.digest_checker.problems]
    except ArchiveLoadFailed as exc:
        problems.append(f"unreadable: {' '.join(str(exc).split())}")
    return records, problems


def verify(store: Any, prefix: str) -> Verdict:
    """Every file passes warcio's check; every CDXJ line points at a record of its file
    with that URL and digest; every response and revisit record has its line; no record
    id is in two places (ids follow from the fetch: a record published twice)."""
    v = Verdict()
    ids: dict[str, str] = {}
    for f in list_files(store, prefix):
        v.files += 1
        name = f.key.rsplit("/", 1)[-1]
        path, temporary = _local_copy(store, f.key)
        try:
            records, problems = check_file(path)
        finally:
            if temporary:
                os.unlink(path)
        v.records += len(records)
        v.problems += [f"{name}: {p}" for p in problems]
        for offset, rec in records.items():
            where = f"{name} offset {offset}"
            if rec[3] in ids:
                v.problems.append(f"{where}: record {rec[3]} ({rec[0]} {rec[1]}) is also "
                                  f"at {ids[rec[3]]}")
            ids.setdefault(rec[3], where)
        if f.indexed is None:
            v.problems.append(f"{name}: no index ({f.index_key.rsplit('/', 1)[-1]})")
            continue
        listed = set()
        for _key, _ts, data in parse_cdxj(store.get_object(f.index_key)):
            v.index_lines += 1
            offset = int(data["offset"])
            listed.add(offset)
            rec = records.get(offset)
            if data.get("filename") != name:
                v.problems.append(f"{name}: index line for {data.get('url')} names "
                                  f"{data.get('filename')}")
            if rec is None:
                v.problems.append(f"{name}: index line for {data.get('url')}: no record "
                                  f"at offset {offset}")
            elif rec[1] != data.get("url") or (rec[2] or "-") != data.get("digest", "-"):
                v.problems.append(f"{name}: index line for {data.get('url')} at offset "
                                  f"{offset}: the record there is {rec[0]} {rec[1]} {rec[2]}")
        for offset, rec in records.items():
            if rec[0] in ("response", "revisit") and offset not in listed:
                v.problems.append(f"{name}: {rec[0]} {rec[1]} at offset {offset} is not "
                                  "in the index")
    return v


def ls_json(files: list[WarcFile]) -> str:
    return json.dumps([{"key": f.key, "bytes": f.size, "indexed_records": f.indexed}
                       for f in files])
