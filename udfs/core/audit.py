"""The fetch audit trail, pure part: one compact record per completion, the objects they
are written in, and how a reader gets each fetch back exactly once.

The completions topic expires (topics.completions.retention_ms); the audit trail does
not (SPEC section 10: fetch audit records are never dropped). It lives in object storage
beside the bodies, one gzip'd JSON-lines object per flush of a buffer, partitioned by
the UTC day of the fetch:

    audit/day=2026-12-01/<topic>/p00003-o00000000000000000100-o00000000000000000150-<digest>.jsonl.gz

Each record carries the Kafka position of the completion it came from (topic,
partition, offset). An object's name follows from its content alone — the day, the
position of its first and last record and a digest of its bytes — and its bytes follow
from the Kafka records it holds (sorted keys, gzip without a timestamp): writing the
same records again writes the same object, and a replay that cuts its batches
elsewhere writes objects that overlap. A reader keeps one record per position
(`dedupe`), so neither loses or double-counts a fetch. Why the writer never loses one:
udfs/frontier/audit.py.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PREFIX = "audit/"

# What an operator asks "what happened to this URL" about; not the body (a robots.txt
# completion carries one) nor the SimHash.
FIELDS = ("url", "url_id", "url_version", "attempt", "lease_id", "host_key", "kind",
          "outcome", "http_status", "fetched_at_ms", "fetch_duration_ms", "retry_after",
          "redirect_location", "etag", "last_modified", "content_type", "body_sha256",
          "body_bytes", "object_key", "text_sha256", "canonical_url", "noindex", "nofollow",
          "links_count", "error")
POSITION = ("topic", "partition", "offset")


def audit_record(completion: Mapping[str, Any], topic: str, partition: int, offset: int
                 ) -> dict[str, Any]:
    """The audit record of one Completion (a decoded crawl.completions record) read at
    (topic, partition, offset)."""
    rec = {f: completion.get(f) for f in FIELDS}
    rec.update(topic=topic, partition=int(partition), offset=int(offset))
    return rec


def day_of(fetched_at_ms: int) -> str:
    """The UTC day of a fetch, YYYY-MM-DD."""
    return dt.datetime.fromtimestamp(fetched_at_ms / 1000, dt.UTC).strftime("%Y-%m-%d")


def day_prefix(day: str) -> str:
    return f"{PREFIX}day={day}/"


def day_prefixes(now_s: float, days: int) -> list[str]:
    """The prefixes of the last `days` UTC days up to and including today's."""
    today = dt.datetime.fromtimestamp(now_s, dt.UTC).date()
    return [day_prefix((today - dt.timedelta(days=n)).isoformat()) for n in range(days)]


def encode_records(records: Sequence[dict[str, Any]]) -> bytes:
    """gzip'd JSON lines, deterministic: the same records give the same bytes."""
    text = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n"
                   for r in records)
    return gzip.compress(text.encode(), compresslevel=6, mtime=0)


def decode_records(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(data).decode().splitlines()
            if line.strip()]


def object_name(day: str, topic: str, partition: int, first: int, last: int, data: bytes
                ) -> str:
    # Zero-padded, so names sort by position; the digest keeps a topic that was
    # deleted and created again (its offsets start over) from overwriting older objects.
    digest = hashlib.sha256(data).hexdigest()[:12]
    return (f"{day_prefix(day)}{topic}/p{partition:05d}-o{first:020d}-o{last:020d}-"
            f"{digest}.jsonl.gz")


def audit_objects(records: Iterable[dict[str, Any]]) -> list[tuple[str, bytes]]:
    """(name, bytes) of the objects one flush writes: the records by day of fetch, and
    within a day by (topic, partition), each in offset order."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((day_of(r["fetched_at_ms"]), r["topic"], r["partition"]),
                          []).append(r)
    out = []
    for (day, topic, partition), group in sorted(groups.items()):
        group.sort(key=lambda r: r["offset"])
        data = encode_records(group)
        out.append((object_name(day, topic, partition, group[0]["offset"],
                                group[-1]["offset"], data), data))
    return out


def identity(r: dict[str, Any]) -> tuple[Any, ...]:
    """One Kafka record: its position, and what tells two records apart at the same
    position of a topic that was deleted and created again."""
    return (r["topic"], r["partition"], r["offset"], r["lease_id"], r["fetched_at_ms"])


def dedupe(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per Kafka record (replays write some twice), in fetch order."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records:
        seen.setdefault(identity(r), r)
    return sorted(seen.values(), key=lambda r: (r["fetched_at_ms"], r["topic"],
                                                r["partition"], r["offset"]))


def fetches(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per fetch: records of the same fetch delivered more than once (the
    fetcher's at-least-once completions, at other offsets) are merged, with
    `deliveries` counting them. Input: `dedupe`d records."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records:
        key = tuple(r[f] for f in FIELDS)
        if key in merged:
            merged[key]["deliveries"] += 1
        else:
            merged[key] = {**r, "deliveries": 1}
    return list(merged.values())


def history(objects: Iterable[bytes], url: str) -> list[dict[str, Any]]:
    """The fetches of `url` (normalized, as leased) recorded in `objects`, oldest first."""
    return fetches(dedupe(r for data in objects for r in decode_records(data)
                          if r["url"] == url))


def describe(f: dict[str, Any]) -> str:
    """One line of `crawl audit` for one fetch."""
    when = dt.datetime.fromtimestamp(f["fetched_at_ms"] / 1000, dt.UTC)
    parts = [when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
             f["kind"], f["outcome"],
             str(f["http_status"]) if f["http_status"] is not None else "-",
             f"v{f['url_version']}", f"attempt {f['attempt']}", f"lease {f['lease_id']}",
             f"{f['fetch_duration_ms']} ms"]
    for label, key in (("body", "object_key"), ("sha256", "body_sha256"), ("etag", "etag"),
                       ("last-modified", "last_modified"), ("to", "redirect_location"),
                       ("retry-after", "retry_after"), ("error", "error")):
        if f.get(key) not in (None, ""):
            parts.append(f"{label} {f[key]}")
    if f.get("deliveries", 1) > 1:
        parts.append(f"(delivered {f['deliveries']} times)")
    return "  ".join(parts)
