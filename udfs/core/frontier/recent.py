"""URLs the frontier's intake passed on lately: a rediscovery that cannot change
anything at its host is not sent there again.

Most links a crawl finds point to URLs it already knows (a site's menus, its other
pages); each one would cost its host a call that ends in `urls_known` (a state read
and write, a record through the job's shuffle). As StormCrawler's status updater
caches the URLs it has already stored as discovered, the intake remembers, per
subtask and in memory only, the URLs it sent to their hosts within the last
`ttl_s` seconds, with the most that could still matter about them (the rules of
`Admitter.discover`, admission.py):

- a known URL takes a priority hint higher than its own, and a sitemap's lastmod that
  makes it due;
- a URL not admitted was refused by a rule of its depth (traps.check_url), of its
  redirect hops (max_redirect_hops), of its text alone (the other trap rules: the same
  answer every time), or by the day's template budget.

So a URL is passed on again when it is new to the memory or its entry is older than
`ttl_s`, or it comes with a smaller depth or fewer redirect hops than each one sent, with a
priority hint (a page's links carry none; the hint's effect depends on the URL's own
priority, which only its host knows), a lastmod, or as a seed. What is not passed on is
what its host would have answered with `urls_known` or the same refusal: the only
difference a host can see is that a URL refused for the day's template budget is offered
again only after `ttl_s`, and its counts of those answers, which the intake counts
instead (urls_rediscovered_at_intake).

Nothing here is in Flink's state: a restarted or rescaled intake starts empty and
passes everything on once more, and within one incarnation every record it sends
reaches its host (the job's channels lose nothing), so no URL is lost to it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class RecentUrls:
    """At most `max_urls` URLs, each for `ttl_s` seconds after it was last passed on
    fresh (the oldest entries go first). `max_urls` 0: every URL is passed on."""

    __slots__ = ("max_urls", "ttl_s", "_sent")

    def __init__(self, max_urls: int, ttl_s: float) -> None:
        if max_urls < 0 or ttl_s < 0:
            raise ValueError(f"max_urls and ttl_s must be >= 0, got {max_urls}, {ttl_s}")
        self.max_urls, self.ttl_s = max_urls, ttl_s
        # url -> [sent at, the (depth, redirect hops) sent of which none is both as deep
        # and with as many hops as another], in the order entries were (re)made: the
        # oldest first.
        self._sent: OrderedDict[str, list[Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sent)

    def __contains__(self, url: object) -> bool:
        """Whether `url` is remembered, fresh or not: a URL passed on once, so one that
        normalization gives back unchanged (the intake then need not normalize it)."""
        return url in self._sent

    def passes(self, url: str, now: float, *, priority: float | None = None, depth: int = 0,
               redirect_hops: int = 0, lastmod: float | None = None,
               is_seed: bool = False) -> bool:
        """Whether this discovery of normalized `url` goes on to its host (recorded if so)."""
        if self.max_urls == 0:
            return True
        sent = self._sent
        entry = sent.get(url)
        here = (depth, redirect_hops)
        if entry is not None and now - entry[0] < self.ttl_s:
            # A rule refuses a URL past a depth or past a number of hops, so a discovery
            # at least as deep and with at least as many hops as one sent gets the same
            # answer (or the URL is known).
            # (A loop, not any() over a generator: this runs for every link a crawl finds.)
            shallower = True
            for d, h in entry[1]:
                if d <= depth and h <= redirect_hops:
                    shallower = False
                    break
            if priority is None and lastmod is None and not is_seed and not shallower:
                return False
            if shallower:
                entry[1] = (here, *((d, h) for d, h in entry[1]
                                    if d < depth or h < redirect_hops))
            return True
        if entry is not None:  # stale: made anew, at the young end
            del sent[url]
        sent[url] = [now, (here,)]
        self._expire(now)
        return True

    def _expire(self, now: float) -> None:
        sent = self._sent
        while len(sent) > self.max_urls:
            sent.popitem(last=False)
        while sent:
            url, entry = next(iter(sent.items()))
            if now - entry[0] < self.ttl_s:
                break
            del sent[url]
