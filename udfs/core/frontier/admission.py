"""Which URLs enter a host's queue: discovery and a hot host's refills.

A discovered URL is known already (URL dedup by url_id, probing on a 64-bit collision),
refused by a trap rule (udfs/core/traps.py), or admitted with its first priority and
revisit interval; an admitted URL goes to memory, to the cold queue when the window is
full (cold.py), or to a shard when the host is hot (sharding.py).
"""

from __future__ import annotations

from collections.abc import Callable

from udfs.core.fingerprints import url_ids
from udfs.core.frontier.cold import ColdWindow
from udfs.core.frontier.config import FrontierConfig
from udfs.core.frontier.queue import UrlQueue
from udfs.core.frontier.sharding import ShardLink
from udfs.core.records import Admission, Kind, UrlState, UrlStatus, url_from_saved
from udfs.core.recrawl import discovery_priority, hinted_interval, sitemap_says_changed
from udfs.core.shards import Transfer
from udfs.core.traps import TemplateBudget, check_url
from udfs.core.urls import split_host_key


class Admitter:
    """The door of one host's queue."""

    __slots__ = ("host_key", "cfg", "queue", "window", "shards", "_count", "templates")

    def __init__(self, host_key: str, cfg: FrontierConfig, queue: UrlQueue,
                 window: ColdWindow, shards: ShardLink, count: Callable[[str], None]) -> None:
        self.host_key = host_key
        self.cfg = cfg
        self.queue, self.window, self.shards = queue, window, shards
        self._count = count
        self.templates = TemplateBudget()  # URLs admitted per path template, today

    def known(self) -> int:
        """URLs this owner holds: resident and cold (not those in its shards)."""
        return len(self.queue) + self.window.cold()

    def find(self, url: str) -> tuple[str, UrlState | None]:
        """The URL's id and state; probing on a 64-bit id collision (full URL compared)."""
        for uid in url_ids(url):
            u = self.queue.urls.get(uid)
            if u is None:
                u = self.window.get(uid)
            if u is None or u.url == url:
                return uid, u
            self._count("url_id_collisions")
        raise RuntimeError(f"no free url_id for {url} after probing")  # pragma: no cover

    def discover(self, url: str, now: float, *, depth: int = 0, priority: float | None = None,
                 is_seed: bool = False, redirect_hops: int = 0, checked: bool = False,
                 kind: Kind = Kind.PAGE, lastmod: float | None = None,
                 changefreq: str | None = None) -> Admission:
        """Admit a normalized URL of this host, unless known or refused by a trap rule.

        `checked` says the caller already routed the URL by its host_key. A sitemap's
        `lastmod` (seconds) newer than a known URL's last fetch makes it due now; its
        `changefreq` sets a new URL's first revisit interval."""
        if not checked and split_host_key(url)[0] != self.host_key:
            raise ValueError(f"{url} does not belong to {self.host_key}")
        uid, known = self.find(url)
        if known is not None:
            self._count("urls_known")  # URL dedup: a rediscovery, nothing admitted
            resident = uid in self.queue.urls  # (a cold URL is left as it is until loaded)
            if priority is not None and priority > known.priority and resident:
                known.priority = priority
                self.queue.dirty.add(uid)
            if resident and sitemap_says_changed(lastmod, known.last_fetch_at) and \
                    known.status is not UrlStatus.LEASED and known.next_fetch_at > now:
                self._count("sitemap_changed_due")
                self.queue.enqueue(known, now)
            return Admission(False, uid, "known")
        reason: str | None = check_url(url, depth, self.cfg.traps)
        if reason is None and redirect_hops > self.cfg.max_redirect_hops:
            reason = "redirect_hops"
        # Past shard_above_urls a new URL goes to a shard, and this owner does not hold
        # its shards' URLs: it cannot tell a rediscovered one from a new one, so the
        # shard keeps the template budget (udfs/core/shards.py) and counts the admission.
        sharded = self.shards.full(self.known())
        if reason is None and not sharded:
            reason = self.templates.admit(url, now, self.cfg.traps)
        if reason is not None:
            self._count(f"refused_{reason}")
            return Admission(False, None, str(reason))
        value = discovery_priority(priority, depth, is_seed, self.cfg.recrawl)
        u = UrlState(uid, url, priority=value, depth=depth, redirect_hops=redirect_hops,
                     kind=kind, interval_s=hinted_interval(changefreq, value, self.cfg.recrawl))
        if sharded:
            u.next_fetch_at = now
            self.shards.send(u)
            return Admission(True, uid, "sharded")
        if self.cfg.shard_above_urls:
            self.shards.unleased += 1
        if not self.window.place(u, now):
            self._count("urls_spilled")
        self._count("urls_admitted")
        return Admission(True, uid, "new")

    def take_refill(self, t: Transfer, now: float) -> int:
        """A shard's answer: take its URLs into this owner's queue (a URL this owner
        knows already is a copy, dropped). Returns how many were taken."""
        self.shards.answered(t)
        taken = 0
        for url, saved in t.urls:
            uid, have = self.find(url)
            if have is not None:
                self._count("urls_known")
                continue
            u = url_from_saved(saved)
            u.url_id = uid
            if u.version == 0:
                self.shards.unleased += 1
            self.window.place(u, u.next_fetch_at)
            self._count("urls_unsharded")
            taken += 1
        return taken
