"""Adaptive revisit intervals, freshness classes and URL priority. Pure functions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum, StrEnum

DAY_S = 86400.0


class Freshness(StrEnum):
    HIGH = "high"  # high-value pages: revisited daily
    NORMAL = "normal"  # everything else: adaptive, starting at the longest interval


class Change(StrEnum):
    NEW = "NEW"
    CHANGED = "CHANGED"
    UNCHANGED = "UNCHANGED"


@dataclass(frozen=True)
class RecrawlPolicy:
    """From the `recrawl` configuration section (seconds)."""

    min_interval_s: float = DAY_S
    max_interval_s: float = 30 * DAY_S
    high_value_interval_s: float = DAY_S
    high_value_priority: float = 0.8
    tombstone_interval_s: float = 90 * DAY_S
    failed_visit_interval_s: float = 7 * DAY_S
    seed_priority: float = 1.0
    link_priority: float = 0.5
    depth_decay: float = 0.8
    learned_priority: bool = True
    duplicate_interval_factor: float = 4.0
    duplicate_host_share: float = 0.5


def freshness(priority: float, policy: RecrawlPolicy) -> Freshness:
    return Freshness.HIGH if priority >= policy.high_value_priority else Freshness.NORMAL


def initial_interval(priority: float, policy: RecrawlPolicy) -> float:
    if freshness(priority, policy) is Freshness.HIGH:
        return policy.high_value_interval_s
    return policy.max_interval_s


def next_interval(interval: float, change: Change, priority: float,
                  policy: RecrawlPolicy) -> float:
    """×2 when unchanged, ÷2 when changed, clamped to [min, max]; high-value stays daily."""
    if freshness(priority, policy) is Freshness.HIGH:
        return policy.high_value_interval_s
    if change is Change.UNCHANGED:
        interval *= 2
    elif change is Change.CHANGED:
        interval /= 2
    return min(policy.max_interval_s, max(policy.min_interval_s, interval))


def classify_change(old_text_hash: str | None, new_text_hash: str | None,
                    not_modified: bool = False) -> Change:
    """Compare extracted-text hashes (not raw HTML: ads and timestamps change it)."""
    if not_modified:
        return Change.UNCHANGED
    if old_text_hash is None:
        return Change.NEW
    return Change.UNCHANGED if old_text_hash == new_text_hash else Change.CHANGED


def discovery_priority(hint: float | None, depth: int, is_seed: bool,
                       policy: RecrawlPolicy) -> float:
    """A new URL's value in [0, 1]: the producer's hint (sitemap priority, operator input)
    or the default for seeds and links, decayed by link depth."""
    base = hint if hint is not None else (policy.seed_priority if is_seed else
                                          policy.link_priority)
    return round(max(0.0, min(1.0, base)) * policy.depth_decay ** max(0, depth - 1), 6)


# -- learned priority: what the crawl observed steers the queue and the revisits ---------

class Dup(IntEnum):
    """What the index's duplicate checks said of a URL's last indexed copy."""

    NONE = 0
    NEAR = 1  # SimHash within the Hamming threshold of another URL's page
    EXACT = 2  # byte-identical to another URL's page


# A URL's score is its value times these factors, each in (0, 1].
_FAILURE_FACTOR = 0.5  # per consecutive failure
_TOMBSTONE_FACTOR = 0.25
_DUPLICATE_FACTOR = 0.5
# The share of a host's recent new pages that were duplicates: an exponentially
# weighted mean over about the last 1 / weight new pages.
DUP_SHARE_WEIGHT = 0.05


def change_rate(interval_s: float, fetched: bool, policy: RecrawlPolicy) -> float:
    """How often the URL changes, in [0, 1], from its learned revisit interval: 1 at the
    shortest interval (changes every visit), 0 at the longest (static). Before the first
    fetch nothing is observed: a new page ranks with a static one of the same value, and
    after a page seen to change (refreshing a stale copy is worth more than a new copy;
    the simulation measures it)."""
    if not fetched:
        return 0.0
    lo, hi = policy.min_interval_s, policy.max_interval_s
    if hi <= lo:
        return 0.5
    clamped = min(hi, max(lo, interval_s))
    return math.log(hi / clamped) / math.log(hi / lo)


def queue_priority(value: float, interval_s: float, *, fetched: bool, failures: int,
                   tombstone: bool, dup: Dup, policy: RecrawlPolicy) -> float:
    """The order of a URL in its host's queue (higher first; ties by due time): its value
    (seed, link depth, hints), raised when it was seen to change, lowered by failures, a
    tombstone and a duplicate flag. With `learned_priority` off, the value alone (the
    fixed order)."""
    if not policy.learned_priority:
        return value
    # A page seen to change at least as often as the middle of the interval range gains
    # up to half its value again; faster changers gain no more (under a fixed budget the
    # fastest-changing pages are not worth more fetches: Cho & Garcia-Molina, 2003).
    score = value * (1.0 + 0.5 * min(1.0, 2.0 * change_rate(interval_s, fetched, policy)))
    if failures:
        score *= _FAILURE_FACTOR ** min(failures, 8)
    if tombstone:
        score *= _TOMBSTONE_FACTOR
    if dup:
        score *= _DUPLICATE_FACTOR
    return score


def host_priority(allowance: float, dup_share: float, policy: RecrawlPolicy) -> float:
    """A host's weight where hosts compete for one budget, in [0, 1]: a throttled host
    (allowance cut by 429/503) and a host whose new pages are mostly duplicates weigh
    less. It only orders: every host is still crawled within its politeness."""
    if not policy.learned_priority:
        return 1.0
    weight = max(0.0, min(1.0, allowance))
    if dup_share >= policy.duplicate_host_share:
        weight *= 1.0 - 0.5 * dup_share
    return weight


def budget_wait(spent: int, budget: int, now: float, weight: float) -> float | None:
    """When a URL of this weight (its queue priority × its host's weight) may spend a
    share of the day's fetch budget shared by many hosts: None for now, else the time
    to ask again. The budget is paced over the UTC day: while what was spent runs
    ahead of the day's clock by more than the URL's weight (as a share of the budget),
    it waits until the clock catches up. Weight 1 and above (seeds, changing pages of
    healthy hosts) never wait; low-value URLs of throttled or duplicate-heavy hosts wait
    first, so a tight budget goes to the URLs that earn it."""
    day_start = now // DAY_S * DAY_S
    ahead = spent / budget - (now - day_start) / DAY_S
    if ahead <= weight:
        return None
    return day_start + (spent / budget - weight) * DAY_S


def revisit_after(interval_s: float, dup: Dup, host_dup_share: float,
                  policy: RecrawlPolicy) -> float:
    """Seconds until a fetched page's next visit: its learned interval, spaced out by
    `duplicate_interval_factor` when the page is a duplicate or its host's new pages are
    mostly duplicates (never past the longest interval, never skipped: coverage stays)."""
    if policy.learned_priority and (
            dup or host_dup_share >= policy.duplicate_host_share):
        return max(interval_s, min(policy.max_interval_s,
                                   interval_s * policy.duplicate_interval_factor))
    return interval_s


def updated_dup_share(share: float, duplicate: bool) -> float:
    """The host's duplicate share after one more new page."""
    return (1.0 - DUP_SHARE_WEIGHT) * share + (DUP_SHARE_WEIGHT if duplicate else 0.0)


# Sitemap <changefreq> values → the revisit interval a new URL starts with (clamped to
# the policy's bounds); "always" and "hourly" mean as often as the policy allows.
CHANGEFREQ_S = {"always": 0.0, "hourly": 3600.0, "daily": DAY_S, "weekly": 7 * DAY_S,
                "monthly": 30 * DAY_S, "yearly": 365 * DAY_S, "never": 365 * DAY_S}


def hinted_interval(changefreq: str | None, priority: float,
                    policy: RecrawlPolicy) -> float:
    """A new URL's first revisit interval: a sitemap's changefreq when it gives one (a
    hint: later visits adapt as usual), else by its value (`initial_interval`)."""
    hint = CHANGEFREQ_S.get((changefreq or "").strip().lower())
    if hint is None or freshness(priority, policy) is Freshness.HIGH:
        return initial_interval(priority, policy)
    return min(policy.max_interval_s, max(policy.min_interval_s, hint))


def sitemap_says_changed(lastmod_s: float | None, last_fetch_at: float | None) -> bool:
    """A sitemap entry's lastmod is newer than our last fetch: the page is due now."""
    return lastmod_s is not None and last_fetch_at is not None and lastmod_s > last_fetch_at
