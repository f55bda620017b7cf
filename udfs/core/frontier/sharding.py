"""A hot host's shards, from its owner's side (udfs/core/shards.py keeps the shards).

Past shard_above_urls known URLs, an owner sends new URLs to its shards rather than
keeping them; when its own backlog runs low it pulls a batch back. The owner counts
what each shard holds, keeps at most one pull out, and queues the transfers to send in
`outbox` (the caller empties it after each call; it is never part of the state).
"""

from __future__ import annotations

from collections.abc import Callable

from udfs.core.frontier.config import FrontierConfig
from udfs.core.records import UrlState, url_to_saved
from udfs.core.shards import Transfer, shard_of


class ShardLink:
    """What one host's owner knows of its shards."""

    __slots__ = ("host_key", "cfg", "_count", "sharded", "pull_out", "put_since_pull",
                 "unleased", "outbox")

    def __init__(self, host_key: str, cfg: FrontierConfig,
                 count: Callable[[str], None]) -> None:
        self.host_key = host_key
        self.cfg = cfg
        self._count = count
        self.sharded: dict[int, int] = {}  # shard → URLs it holds, by the owner's count
        self.pull_out: list[float] | None = None  # [shard, sent at]
        # shard → URLs sent to it since this owner last asked it for some: the answer
        # counts only what came before the question (the topic keeps the order).
        self.put_since_pull: dict[int, int] = {}
        self.unleased = 0  # of this owner's URLs, those never leased (while it has shards)
        self.outbox: list[Transfer] = []

    def full(self, known: int) -> bool:
        """Does a new URL of a host that knows `known` go to a shard?"""
        return bool(self.cfg.shard_above_urls) and known >= self.cfg.shard_above_urls

    def send(self, u: UrlState) -> None:
        """Put a new URL in its shard."""
        n = shard_of(u.url, self.cfg.host_shards)
        put = next((t for t in self.outbox if t.kind == "PUT" and t.shard == n), None)
        if put is None:
            put = Transfer("PUT", self.host_key, n)
            self.outbox.append(put)
        put.urls.append((u.url, url_to_saved(u)))
        self.sharded[n] = self.sharded.get(n, 0) + 1
        if n in self.put_since_pull:
            self.put_since_pull[n] += 1
        self._count("urls_sharded")

    def maybe_pull(self, now: float, due: Callable[[], float | None],
                   cold: Callable[[], float | None]) -> None:
        """Ask a shard for URLs when this owner's backlog runs low: fewer than
        shard_refill_urls never-leased URLs, or nothing due (`due`: when the first
        resident URL is, `cold`: the first cold one) within a cold bucket (so a miscount
        can only make it pull early). One pull out at a time."""
        if not self.sharded:
            return
        if self.unleased >= self.cfg.shard_refill_urls:
            first, first_cold = due(), cold()
            soon = now + self.cfg.cold_bucket_s
            if (first is not None and first <= soon) or \
                    (first_cold is not None and first_cold <= soon):
                return
        if self.pull_out is not None and now < self.pull_out[1] + self.cfg.shard_pull_timeout_s:
            return
        n = max(sorted(self.sharded), key=lambda k: self.sharded[k])
        self.pull_out = [n, now]
        self.put_since_pull[n] = 0
        self.outbox.append(Transfer("PULL", self.host_key, n, want=self.cfg.shard_refill_urls))
        self._count("shard_pulls")

    def answered(self, t: Transfer) -> None:
        """A shard's answer came: what it still holds; its pull is no longer out.

        The shard answered with what it held when it read the pull; the URLs put to it
        after that pull was sent reach it later, so they are added to its count. Taking
        the answer alone dropped a shard that said 0 while such a URL was on its way, and
        that URL was never pulled. Miscounts left can only make a pull come early: a URL
        counted twice (added to a PUT still in the outbox when the pull was sent), or a
        late answer to a pull asked again after its timeout (too low, until the newer
        question's answer, which comes after it, sets the count again)."""
        held = t.remaining + self.put_since_pull.get(t.shard, 0)
        if held:
            self.sharded[t.shard] = held
        else:
            self.sharded.pop(t.shard, None)
        if self.pull_out is not None and int(self.pull_out[0]) == t.shard:
            self.pull_out = None

    def retry_at(self) -> float | None:
        """When to ask again if the pull out has no answer by then."""
        return None if self.pull_out is None else \
            self.pull_out[1] + self.cfg.shard_pull_timeout_s
