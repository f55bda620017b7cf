"""Adaptive revisit intervals, freshness classes and URL priority. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

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

    @classmethod
    def from_config(cls, section: dict[str, Any]) -> RecrawlPolicy:
        return cls(**{k: section[k] for k in cls.__dataclass_fields__ if k in section})


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
