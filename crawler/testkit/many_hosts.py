"""Many hosts in one process: the frontier as the simulator and the benchmarks drive it.

`Frontier` keeps a `HostFrontier` per host behind one ready-heap keyed by each host's
wake time, as the Flink frontier operator does with keyed state and one timer per key;
`LocalShards` is the shards topic in memory, delivered at once. Neither runs in a job.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from udfs.core.coldqueue import DictKeyValue
from udfs.core.frontier import (
    Admission,
    CompletionResult,
    FetchResult,
    FrontierConfig,
    HostFrontier,
    Lease,
    url_from_saved,
)
from udfs.core.recrawl import Dup
from udfs.core.shards import ShardQueue, Transfer, shard_key, shard_trap_policy
from udfs.core.traps import DailyBudget, TrapPolicy
from udfs.core.urls import split_host_key


class LocalShards:
    """The shards topic in memory: owners' outboxes delivered to shards and back at
    once (the simulator and unit tests; the frontier job uses Kafka)."""

    def __init__(self, bucket_s: float = 3600.0, traps: TrapPolicy | None = None) -> None:
        self.bucket_s = bucket_s
        self.traps = traps  # a shard's share of the trap policy (shard_trap_policy)
        self.shards: dict[str, ShardQueue] = {}
        self.stores: dict[str, tuple[dict, dict]] = {}
        self.delivered = 0
        self.events: Counter[str] = Counter()  # what the shards counted, by event name

    def _count(self, name: str) -> None:
        self.events[name] += 1

    def shard(self, host_key: str, n: int) -> ShardQueue:
        key = shard_key(host_key, n)
        q = self.shards.get(key)
        if q is None:
            urls, segments = DictKeyValue(), DictKeyValue()
            self.stores[key] = (urls, segments)
            q = self.shards[key] = ShardQueue(host_key, n, None, urls, segments,
                                              bucket_s=self.bucket_s, traps=self.traps,
                                              count=self._count)
        return q

    def receive(self, t: Transfer, now: float) -> Transfer | None:
        """A shard takes one transfer from its owner; a pull's answer is returned."""
        self.delivered += 1
        q = self.shard(t.host_key, t.shard)
        if t.kind == "PUT":
            q.put(t.urls, lambda s: url_from_saved(s).next_fetch_at, now)
        elif t.kind == "PULL":
            return q.pull(t.want)
        return None

    def deliver(self, h: HostFrontier, now: float) -> None:
        """Carry host `h`'s outbox until nothing is left to send (pulls answered)."""
        while h.shards.outbox:
            out, h.shards.outbox = h.shards.outbox, []
            for t in out:
                answer = self.receive(t, now)
                if answer is not None:
                    h.take_refill(answer, now)

    def total(self) -> int:
        return sum(len(q) for q in self.shards.values())


class Frontier:
    """Many hosts behind one ready-heap keyed by each host's wake time (simulator, benches)."""

    def __init__(self, cfg: FrontierConfig, seed: int = 0) -> None:
        self.cfg = cfg
        self.seed = seed
        self.hosts: dict[str, HostFrontier] = {}
        self.budget = DailyBudget()
        self._heap: list[tuple[float, int, str]] = []
        self._wake: dict[str, int] = {}  # host → seq of its live heap entry
        self._wake_at: dict[str, float] = {}  # host → time of its live heap entry
        self._seq = 0
        self._touched: set[str] = set()  # hosts changed since the last snapshot
        self._snap_hosts: dict[str, dict[str, Any]] = {}
        # Hot hosts' shards, in memory (the job's shards topic, delivered at once).
        self.shards = LocalShards(cfg.cold_bucket_s,
                                  shard_trap_policy(cfg.traps, cfg.host_shards))

    def _exchange(self, h: HostFrontier, now: float) -> None:
        h.maybe_pull(now)
        if h.shards.outbox:
            self.shards.deliver(h, now)

    def host(self, host_key: str) -> HostFrontier:
        h = self.hosts.get(host_key)
        if h is None:
            h = self.hosts[host_key] = HostFrontier(host_key, self.cfg, self.seed)
        return h

    def _reschedule(self, h: HostFrontier, now: float, *, earlier_only: bool = False) -> None:
        """Put the host on the ready-heap at its next wake time.

        `earlier_only`: keep an existing earlier entry (waking early is harmless: the poll
        finds nothing and reschedules), so a burst of discoveries adds no heap entries.
        """
        self._touched.add(h.host_key)
        key = h.host_key
        if earlier_only and key in self._wake and self._wake_at[key] <= now:
            return
        when = h.next_wake(now)
        if when is None:
            self._wake.pop(key, None)
            return
        if earlier_only and key in self._wake and self._wake_at[key] <= when:
            return
        self._seq += 1
        self._wake[key] = self._seq
        self._wake_at[key] = when
        heapq.heappush(self._heap, (when, self._seq, key))

    def discover(self, url: str, now: float, **kw: Any) -> Admission:
        h = self.host(split_host_key(url)[0])
        result = h.discover(url, now, checked=True, **kw)
        self._exchange(h, now)
        self._touched.add(h.host_key)
        if result.accepted or kw.get("lastmod") is not None:  # (a sitemap can make it due)
            self._reschedule(h, now, earlier_only=True)
        return result

    def poll(self, now: float, limit: int | None = None) -> Iterator[Lease]:
        """Leases every ready host may have now (one per host per wake)."""
        granted = 0
        heap = self._heap
        while heap and heap[0][0] <= now and (limit is None or granted < limit):
            _, seq, key = heapq.heappop(heap)
            if self._wake.get(key) != seq:
                continue
            h = self.hosts[key]
            lease = h.poll(now, self.budget)
            self._exchange(h, now)
            self._reschedule(h, now)
            if lease is not None:
                granted += 1
                yield lease

    def complete(self, r: FetchResult, host_key: str, now: float) -> CompletionResult:
        h = self.hosts[host_key]
        out = h.complete(r, now)
        self._exchange(h, now)
        self._reschedule(h, now)
        return out

    def duplicate(self, host_key: str, url_id: str, url_version: int, dup: Dup,
                  new_page: bool, now: float) -> bool:
        h = self.hosts[host_key]
        changed = h.duplicate(url_id, url_version, dup, new_page, now)
        self._touched.add(host_key)
        self._reschedule(h, now)
        return changed

    def next_wake(self) -> float | None:
        while self._heap and self._wake.get(self._heap[0][2]) != self._heap[0][1]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def snapshot(self) -> dict[str, Any]:
        for key in self._touched:
            self._snap_hosts[key] = self.hosts[key].snapshot()
        self._touched.clear()
        return {"hosts": {k: self._snap_hosts[k] for k in self.hosts},
                "budget": replace(self.budget)}

    @classmethod
    def restore(cls, snap: dict[str, Any], cfg: FrontierConfig, seed: int, now: float
                ) -> Frontier:
        f = cls(cfg, seed)
        f.budget = replace(snap["budget"])
        for key, hs in snap["hosts"].items():
            f.hosts[key] = HostFrontier.restore(hs, cfg)
            f._snap_hosts[key] = hs
            f._reschedule(f.hosts[key], now)
        f._touched.clear()
        return f
