"""The cold part of a host's queue: URLs kept out of memory, in keyed storage.

A host with a million pending URLs must not hold them all in memory. Its scheduler
keeps a bounded resident window (the URLs it may lease soon, and those in flight);
every other URL lives here: its saved state in one keyed map (url_id → saved URL),
its place in the queue in another (segment key → url_ids). Segments are grouped by
due-time bucket, so URLs come back roughly in due order (FIFO within a bucket), a
bucket at a time, and a URL due in thirty days is not loaded today.

Storage is injected: plain dicts in tests and in the simulator, Flink MapState in the
frontier job. Both only need get / put / remove; appends are buffered and written
once per segment by `flush`, so a batch of discoveries costs one write per segment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class KeyValue(Protocol):
    def get(self, key: str) -> Any: ...

    def put(self, key: str, value: Any) -> None: ...

    def remove(self, key: str) -> None: ...


class DictKeyValue(dict[str, Any]):
    """A dict with the MapState verbs (tests, simulator)."""

    def put(self, key: str, value: Any) -> None:
        self[key] = value

    def remove(self, key: str) -> None:
        self.pop(key, None)


@dataclass
class ColdIndex:
    """Where the cold segments are: kept with the host's state (small: one entry per bucket)."""

    # bucket → [first segment, last segment, entries in the last segment]
    buckets: dict[int, list[int]] = field(default_factory=dict)
    count: int = 0


def segment_key(bucket: int, segment: int) -> str:
    return f"{bucket:012d}:{segment:08d}"


class ColdQueue:
    def __init__(self, segments: KeyValue, urls: KeyValue, index: ColdIndex | None = None,
                 *, bucket_s: float = 3600.0, segment_size: int = 1000) -> None:
        self.segments = segments
        self.urls = urls
        self.index = index if index is not None else ColdIndex()
        self.bucket_s = bucket_s
        self.segment_size = segment_size
        self._appends: dict[str, list[str]] = {}  # segment key → url_ids not yet written

    def __len__(self) -> int:
        return self.index.count

    def get(self, url_id: str) -> Any:
        """The saved state of a URL in the url map (cold, or written by its resident owner)."""
        return self.urls.get(url_id)

    def earliest(self) -> float | None:
        """A lower bound of the earliest due time here (the start of the first bucket)."""
        return min(self.index.buckets) * self.bucket_s if self.index.buckets else None

    def add(self, url_id: str, saved: Any, due: float) -> None:
        """Keep a URL cold: its state in the url map, its id in its due bucket."""
        self.urls.put(url_id, saved)
        bucket = int(due // self.bucket_s)
        where = self.index.buckets.get(bucket)
        if where is None:
            where = self.index.buckets[bucket] = [0, 0, 0]
        elif where[2] >= self.segment_size:
            where[1], where[2] = where[1] + 1, 0
        key = segment_key(bucket, where[1])
        pending = self._appends.get(key)
        if pending is None:
            pending = self._appends[key] = []
        pending.append(url_id)
        where[2] += 1
        self.index.count += 1

    def flush(self) -> None:
        """Write the buffered appends, one write per touched segment."""
        for key, ids in self._appends.items():
            self.segments.put(key, (self.segments.get(key) or []) + ids)
        self._appends.clear()

    def take(self, limit: int, until: float) -> list[tuple[str, Any]]:
        """Remove and return up to `limit` (url_id, saved) of buckets starting by `until`,
        earliest bucket first."""
        self.flush()
        out: list[tuple[str, Any]] = []
        for bucket in sorted(self.index.buckets):
            if len(out) >= limit or bucket * self.bucket_s > until:
                break
            where = self.index.buckets[bucket]
            while len(out) < limit:
                key = segment_key(bucket, where[0])
                ids = self.segments.get(key) or []
                room = limit - len(out)
                taken, rest = ids[:room], ids[room:]
                for uid in taken:
                    saved = self.urls.get(uid)
                    if saved is not None:
                        out.append((uid, saved))
                self.index.count -= len(taken)
                if rest:
                    self.segments.put(key, rest)
                    break
                self.segments.remove(key)
                if where[0] == where[1]:
                    del self.index.buckets[bucket]
                    break
                where[0] += 1
        return out
