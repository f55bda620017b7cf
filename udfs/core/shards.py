"""A hot host's queue, partitioned: the owner keeps the tokens, shards keep the backlog.

SPEC section 10: a host with half of all pending URLs has a fixed quota; its queue may
be partitioned, but its tokens come from one owner. The frontier keys a host's state
by its host_key, so without this a host with a hundred million URLs puts all of them
in one key group, on one subtask (bench/bench_skew.py measures the skew).

* **Owner** (`HostFrontier`, key = host_key): everything that grants leases: robots.txt,
  politeness, in-flight leases, backoff, budgets, and the URLs it has taken in. Once it
  knows `frontier.shard_above_urls` URLs, a new URL (past the stateless trap rules, which
  the owner applies) is not kept: it goes to shard `shard_of(url)` of
  `frontier.host_shards`, in the owner's outbox.
* **Shard** (`ShardQueue`, key = host_key#n): URLs only, in due order (a cold queue,
  udfs/core/coldqueue.py). It never leases: it answers the owner's pulls with its
  earliest URLs and forgets them. It keeps the template budget (`traps.template_budget`)
  of the URLs put to it: the owner does not hold its shards' URLs, so it cannot tell a
  rediscovered URL from a new one, and charging it there would spend a hot host's
  budget on links it already knows. Each shard has `shard_trap_policy`'s share of it,
  charged only for URLs new to that shard.
* **Pulls.** When the owner's own pending URLs fall below `frontier.shard_refill_urls`,
  it asks the shard it believes holds the most for that many (one pull out at a time;
  asked again after `frontier.shard_pull_timeout_s` if no answer came).

What moves between owner and shards travels on the shards topic, written
exactly-once and read committed, keyed by the receiving key: a transfer is visible
only with the checkpoint that recorded the sender's change, so a restore rolls back
both sides together, and no URL is lost or doubled by a failure. Politeness cannot
be touched by any of this: only the owner grants leases, from its own tokens.

A URL may still exist twice for a while in one case: rediscovered by the owner while
its refill is on its way (the shard has forgotten it, the owner does not know it yet),
it goes back to its shard. The owner drops such a copy when it comes back
(`HostFrontier.take_refill` de-duplicates by URL), so it is never leased twice.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from udfs.core.coldqueue import ColdIndex, ColdQueue, KeyValue
from udfs.core.fingerprints import url_ids
from udfs.core.records import url_from_saved
from udfs.core.traps import TemplateBudget, TrapPolicy

SHARD_SEP = "#"  # host_key#n: a host_key never holds "#" (no fragment in an authority)


def shard_key(host_key: str, shard: int) -> str:
    return f"{host_key}{SHARD_SEP}{shard}"


def split_shard_key(key: str) -> tuple[str, int] | None:
    """(host_key, shard) of a shard's key; None for an owner's key (a host_key)."""
    host, sep, n = key.rpartition(SHARD_SEP)
    return (host, int(n)) if sep and n.isdigit() else None


def shard_trap_policy(traps: TrapPolicy, shards: int) -> TrapPolicy:
    """The trap policy one of a host's `shards` applies: its share of each template's daily
    budget (URLs spread over shards by hash, so evenly on average; rounded up)."""
    return replace(traps, template_budget=max(1, math.ceil(traps.template_budget / shards)))


def shard_of(url: str, shards: int) -> int:
    """The shard a URL of a hot host lives in: stable across builds and processes."""
    digest = hashlib.blake2b(url.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


# PUT: URLs the owner gives a shard; PULL: the owner asks a shard for some; REFILL: a
# shard's answer, with its URLs (to the owner).
TransferKind = Literal["PUT", "PULL", "REFILL"]


@dataclass
class Transfer:
    """One message between an owner and a shard (the shards topic's record)."""

    kind: TransferKind
    host_key: str
    shard: int
    urls: list[tuple[str, Any]] = field(default_factory=list)  # (url, saved URL state)
    want: int = 0  # PULL: how many URLs
    remaining: int = 0  # REFILL: URLs the shard still holds after this one

    @property
    def target(self) -> str:
        """The key that receives it."""
        return self.host_key if self.kind == "REFILL" else shard_key(self.host_key, self.shard)


def _no_count(_: str) -> None:
    return None


class ShardQueue:
    """One shard of a hot host: URLs in due order, stored in the shard key's keyed state
    (the same maps a host uses: url_id → saved URL, and the cold queue's segments), and
    the template budget of the URLs put to it (`traps`: `shard_trap_policy`'s share; None
    admits every new URL). `count` takes the frontier's event names (urls_known,
    urls_admitted, refused_template_budget) as a host's admissions do."""

    def __init__(self, host_key: str, shard: int, saved: dict[str, Any] | None,
                 urls: KeyValue, segments: KeyValue, *, bucket_s: float = 3600.0,
                 traps: TrapPolicy | None = None,
                 count: Callable[[str], None] = _no_count) -> None:
        self.host_key, self.shard = host_key, shard
        index = (saved or {}).get("cold_index") or {}
        self.urls = urls
        self.queue = ColdQueue(segments, urls, ColdIndex(
            {int(b): list(w) for b, w in index.get("buckets", {}).items()},
            index.get("count", 0)), bucket_s=bucket_s)
        budget = (saved or {}).get("templates")  # absent in state written before it
        self.templates = TemplateBudget.from_saved(budget) if budget else TemplateBudget()
        self.traps = traps
        self._count = count
        self.duplicates = 0

    def __len__(self) -> int:
        return len(self.queue)

    def put(self, items: list[tuple[str, Any]], due_of: Callable[[Any], float],
            now: float) -> int:
        """Keep these URLs (url, saved state); `due_of(saved)` is a URL's due time. A URL
        already here is not added twice, and a new one only within its template's budget
        for the day of `now`. Returns how many were added."""
        added = 0
        for url, saved in items:
            for uid in url_ids(url):  # probing on a 64-bit id collision, as hosts do
                have = self.urls.get(uid)
                if have is None or _url_of(have) == url:
                    break
            if have is not None:
                self.duplicates += 1
                self._count("urls_known")
                continue
            if self.traps is not None:
                reason = self.templates.admit(url, now, self.traps)
                if reason is not None:
                    self._count(f"refused_{reason}")
                    continue
            self.queue.add(uid, saved, due_of(saved))
            self._count("urls_admitted")
            added += 1
        self.queue.flush()
        return added

    def pull(self, want: int) -> Transfer:
        """Give the owner up to `want` URLs, earliest due first, and forget them."""
        taken = self.queue.take(want, float("inf"))
        for uid, _ in taken:
            self.urls.remove(uid)
        return Transfer("REFILL", self.host_key, self.shard,
                        [(_url_of(saved), saved) for _, saved in taken],
                        remaining=len(self.queue))

    def state(self) -> dict[str, Any]:
        """The shard's own value in keyed state (next to its URL maps)."""
        return {"shard_of": self.host_key, "shard": self.shard, "cold_index": {
            "buckets": {b: list(w) for b, w in self.queue.index.buckets.items()},
            "count": self.queue.index.count},
            "templates": self.templates.saved()}


def _url_of(saved: Any) -> str:
    return url_from_saved(saved).url
