"""A host's bounded memory: the window of its URLs kept resident, the rest cold.

With a cold queue attached (udfs/core/coldqueue.py), a host past max_resident_urls
("big") keeps in memory only the URLs it may lease within one cold bucket, and those in
flight; every other URL waits in keyed storage and is loaded back, a batch at a time,
when it comes due. The window also records which URLs entered and left memory: the
keyed state's list of what to load when the host is rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from udfs.core.coldqueue import ColdIndex, ColdQueue, KeyValue
from udfs.core.frontier.config import FrontierConfig
from udfs.core.frontier.queue import UrlQueue
from udfs.core.records import UrlState, UrlStatus, url_from_saved, url_to_saved

ROOM_SCAN_EVERY_S = 60.0  # a full window with cold URLs due: look for room this often


class ColdWindow:
    """Which of a host's URLs are in memory (`queue`) and which are cold (`store`)."""

    __slots__ = ("cfg", "queue", "_count", "store", "big", "added", "removed", "saved_index",
                 "_last_room_scan")

    def __init__(self, cfg: FrontierConfig, queue: UrlQueue,
                 count: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.queue = queue
        self._count = count
        self.store: ColdQueue | None = None
        self.big = False
        self.added: set[str] = set()
        self.removed: set[str] = set()
        self.saved_index: dict[str, Any] | None = None  # the store's index, as restored
        self._last_room_scan = float("-inf")

    def attach(self, segments: KeyValue, urls: KeyValue) -> None:
        """Give the host storage for the URLs that do not fit in memory: `urls` maps
        url_id → saved URL (the same map the resident URLs are saved to), `segments`
        holds the cold queue's order."""
        saved = self.saved_index or {}
        index = ColdIndex({int(b): list(w) for b, w in saved.get("buckets", {}).items()},
                          saved.get("count", 0))
        self.store = ColdQueue(segments, urls, index, bucket_s=self.cfg.cold_bucket_s)

    def index(self) -> dict[str, Any] | None:
        """The cold queue's index as plain data (part of the host's own value)."""
        if self.store is None:
            return None
        return {"buckets": {b: list(w) for b, w in self.store.index.buckets.items()},
                "count": self.store.index.count}

    def cold(self) -> int:
        """URLs in the cold queue."""
        return len(self.store) if self.big and self.store is not None else 0

    def get(self, uid: str) -> UrlState | None:
        """A cold URL's state (None: not cold)."""
        if not self.big or self.store is None:
            return None
        saved = self.store.get(uid)
        return None if saved is None else url_from_saved(saved)

    def earliest(self) -> float | None:
        """When the first cold URL comes due."""
        return self.store.earliest() if self.big and self.store is not None else None

    def changes(self) -> tuple[set[str], set[str]]:
        """URL ids that entered / left memory since the last call (only while big)."""
        out = self.added, self.removed
        self.added, self.removed = set(), set()
        return out

    def place(self, u: UrlState, due: float) -> bool:
        """Queue a URL new to this host at `due`: resident while the window has room,
        else cold. True when it is resident."""
        if self.store is not None and len(self.queue) >= self.cfg.max_resident_urls:
            if not self.big:
                self.big = True
                self.added |= set(self.queue.urls)
                self._count("hosts_spilling")
            u.next_fetch_at = due
            self.store.add(u.url_id, url_to_saved(u), due)
            return False
        self.queue.urls[u.url_id] = u
        if self.big:
            self.added.add(u.url_id)
        self.queue.enqueue(u, due)
        return True

    def _spill(self, u: UrlState) -> None:
        """Move a queued URL out of memory, to the cold queue (its heap entries go stale)."""
        assert self.store is not None
        del self.queue.urls[u.url_id]
        self.queue.dirty.discard(u.url_id)
        self.store.add(u.url_id, url_to_saved(u), u.next_fetch_at)
        self.removed.add(u.url_id)
        self.added.discard(u.url_id)
        self._count("urls_spilled")

    def maybe_spill(self, u: UrlState, now: float) -> None:
        """A big host keeps in memory only what it may lease within one cold bucket."""
        if self.big and u.status is not UrlStatus.LEASED and u.url_id in self.queue.urls and \
                u.next_fetch_at > now + self.cfg.cold_bucket_s:
            self._spill(u)

    def _refill_possible(self, leases_out: int) -> bool:
        """Room for a batch (a quarter of the window), or nothing queued at all."""
        cap = self.cfg.max_resident_urls
        room = cap - len(self.queue)
        return room > 0 and (room >= cap // 4 or len(self.queue) == leases_out)

    def wake(self, leases_out: int) -> float | None:
        """When the cold queue needs the host awake: its first bucket, if it can load."""
        if not self.big or self.store is None or not len(self.store):
            return None
        return self.store.earliest() if self._refill_possible(leases_out) else None

    def _make_room(self, now: float) -> None:
        """Cold URLs are due but the window is full: spill resident URLs that are not
        due within a bucket (rarely: at most once a minute)."""
        if now - self._last_room_scan < ROOM_SCAN_EVERY_S:
            return
        self._last_room_scan = now
        horizon = now + self.cfg.cold_bucket_s
        for u in [u for u in self.queue.urls.values()
                  if u.status is not UrlStatus.LEASED and u.next_fetch_at > horizon]:
            self._spill(u)

    def refill(self, now: float, leases_out: int) -> None:
        """Load cold URLs that are due soon, while the window has room (in batches)."""
        store = self.store
        if not self.big or store is None or not len(store):
            return
        earliest = store.earliest()
        if earliest is None or earliest > now:
            return
        if not self._refill_possible(leases_out):
            self._make_room(now)
            if not self._refill_possible(leases_out):
                return
        room = self.cfg.max_resident_urls - len(self.queue)
        for uid, saved in store.take(room, now + self.cfg.cold_bucket_s):
            self.queue.loaded(uid, url_from_saved(saved))
            self.added.add(uid)
            self.removed.discard(uid)
            self._count("urls_loaded")
