"""A host's URL queue: its resident URLs, ordered by due time, then by value.

Two heaps: `_due` by due time, and `_ready` (URLs already due) by queue priority, due
time and depth. A URL has one live entry, named by its `token`; re-queueing it gives it
a new token and leaves the old entries stale, dropped when they surface. The queue also
remembers which URLs changed since the last save or snapshot (both incremental).
"""

from __future__ import annotations

import heapq
from typing import Any

from udfs.core.records import UrlState, UrlStatus, url_values
from udfs.core.recrawl import Dup, RecrawlPolicy, queue_priority


class UrlQueue:
    """The resident URLs of one host (url_id → state) and their order."""

    __slots__ = ("recrawl", "urls", "_due", "_ready", "_seq", "dirty", "_snap")

    def __init__(self, recrawl: RecrawlPolicy) -> None:
        self.recrawl = recrawl
        self.urls: dict[str, UrlState] = {}
        self._due: list[tuple[float, int, str]] = []
        self._ready: list[tuple[float, float, int, int, str]] = []
        self._seq = 0
        # Changed since the last save (`changed`) or snapshot (`snapshot`).
        self.dirty: set[str] = set()
        self._snap: dict[str, tuple[Any, ...]] = {}

    def __len__(self) -> int:
        return len(self.urls)

    def enqueue(self, u: UrlState, due: float) -> None:
        """(Re-)queue a resident URL at `due`; it changed."""
        self.dirty.add(u.url_id)
        self._seq += 1
        u.token = self._seq
        u.next_fetch_at = due
        heapq.heappush(self._due, (due, self._seq, u.url_id))

    def loaded(self, uid: str, u: UrlState) -> None:
        """A URL read back from the cold queue, queued at its own due time (unchanged)."""
        self.urls[uid] = u
        self._seq += 1
        u.token = self._seq
        heapq.heappush(self._due, (u.next_fetch_at, self._seq, uid))

    def _live(self, seq: int, url_id: str) -> UrlState | None:
        u = self.urls.get(url_id)
        return u if u is not None and u.token == seq and u.status is not UrlStatus.LEASED \
            else None

    def score(self, u: UrlState) -> float:
        """The URL's place in the host's queue: see recrawl.queue_priority."""
        return queue_priority(u.priority, u.interval_s, fetched=u.last_fetch_at is not None,
                              failures=u.failure_count,
                              tombstone=u.status is UrlStatus.TOMBSTONE, dup=Dup(u.dup),
                              policy=self.recrawl)

    def _promote(self, now: float) -> None:
        """Move entries that are due into the ready heap (best value first)."""
        due = self._due
        while due and due[0][0] <= now:
            when, seq, url_id = heapq.heappop(due)
            u = self._live(seq, url_id)
            if u is not None:
                heapq.heappush(self._ready, (-self.score(u), when, u.depth, seq, url_id))

    def pop_ready(self, now: float) -> UrlState | None:
        """The most valuable URL that is due, out of the queue (None: none is due)."""
        self._promote(now)
        while self._ready:
            _, _, _, seq, url_id = heapq.heappop(self._ready)
            u = self._live(seq, url_id)
            if u is not None:
                return u
        return None

    def earliest_due(self) -> float | None:
        """When the first queued URL comes due (None: nothing queued)."""
        while self._ready:
            if self._live(self._ready[0][3], self._ready[0][4]) is not None:
                return self._ready[0][1]
            heapq.heappop(self._ready)
        while self._due:
            if self._live(self._due[0][1], self._due[0][2]) is not None:
                return self._due[0][0]
            heapq.heappop(self._due)
        return None

    def unleased(self) -> int:
        """Resident URLs not held by a lease."""
        return sum(1 for u in self.urls.values() if u.status is not UrlStatus.LEASED)

    def changed(self) -> list[tuple[str, tuple[Any, ...] | None]]:
        """URL states changed since the last call, as (url_id, fields) for a keyed map
        (None: removed); the incremental counterpart of `snapshot`."""
        out = [(uid, url_values(self.urls[uid]) if uid in self.urls else None)
               for uid in self.dirty]
        self.dirty.clear()
        return out

    def snapshot(self) -> dict[str, tuple[Any, ...]]:
        """URL states as tuples (immutable, so unchanged ones are shared between snapshots)."""
        cache = self._snap
        for uid in self.dirty:
            u = self.urls.get(uid)
            if u is None:
                cache.pop(uid, None)
            else:
                cache[uid] = url_values(u)
        self.dirty.clear()
        return dict(cache)

    def restored(self, uid: str, u: UrlState, values: tuple[Any, ...] | None) -> None:
        """A URL from a snapshot (`values`: its snapshot tuple, kept for the next one)."""
        self.urls[uid] = u
        if values is not None:
            self._snap[uid] = values
        if u.status is not UrlStatus.LEASED:
            self.enqueue(u, u.next_fetch_at)

    def problems(self, in_flight: set[str]) -> list[str]:
        """Every URL is queued exactly once or held by a live lease: none can be lost."""
        problems = []
        live = {seq for _, seq, _ in self._due} | {e[3] for e in self._ready}
        for u in self.urls.values():
            if u.status is UrlStatus.LEASED:
                if u.lease_id not in in_flight:
                    problems.append(f"{u.url} is LEASED without a live lease")
            elif u.token not in live:
                problems.append(f"{u.url} is {u.status} but not queued")
        return problems
