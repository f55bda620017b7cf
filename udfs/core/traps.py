"""Crawler-trap rules: limits on a URL itself, on URL-template growth, and per-host daily budgets.

Each rule returns a `TrapReason` (or None), a short stable string that metrics
and dead letters carry. The stateless checks look at one URL; the template
and daily budgets keep small per-host state that the frontier holds in keyed
state (the classes here are plain data with methods that take `now`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from udfs.core.urls import split_host_key

DAY_S = 86400


class TrapReason(StrEnum):
    DEPTH = "depth"
    URL_LENGTH = "url_length"
    QUERY_PARAMS = "query_params"
    REPEATED_SEGMENTS = "repeated_segments"
    TEMPLATE_BUDGET = "template_budget"
    HOST_DAILY_BUDGET = "host_daily_budget"


@dataclass(frozen=True)
class TrapPolicy:
    """Limits from the `traps` configuration section."""

    max_depth: int = 16
    max_url_length: int = 2048
    max_query_params: int = 16
    max_segment_repeats: int = 3
    template_budget: int = 5000
    template_sample_every: int = 100
    max_templates_per_host: int = 5000


def check_url(url: str, depth: int, policy: TrapPolicy) -> TrapReason | None:
    """The first limit a normalized URL at `depth` links from its seed breaks, if any."""
    if depth > policy.max_depth:
        return TrapReason.DEPTH
    if len(url) > policy.max_url_length:
        return TrapReason.URL_LENGTH
    _, rest = split_host_key(url)
    path, _, query = rest.partition("?")
    if query and query.count("&") + 1 > policy.max_query_params:
        return TrapReason.QUERY_PARAMS
    segments = [s for s in path.split("/") if s]
    if len(set(segments)) < len(segments) and \
            max(Counter(segments).values()) > policy.max_segment_repeats:
        return TrapReason.REPEATED_SEGMENTS
    return None


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX_ID = re.compile(r"(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}")
_DIGITS = re.compile(r"\d+")


def _collapse(text: str) -> str:
    text = _UUID.sub("{uuid}", text)
    text = _HEX_ID.sub("{hex}", text)
    return _DIGITS.sub("{n}", text)


def url_template(url: str) -> str:
    """The URL's shape: digits, hex ids and UUIDs collapsed; query names kept in order.

    /cal/2026/11/30?view=day&sid=9f8e7d6c5b4a → /cal/{n}/{n}/{n}?view=day&sid={hex}
    """
    _, rest = split_host_key(url)
    path, sep, query = rest.partition("?")
    if not sep:
        return _collapse(path)
    params = []
    for part in query.split("&"):
        name, eq, value = part.partition("=")
        params.append(f"{name}{eq}{_collapse(value)}")
    return f"{_collapse(path)}?{'&'.join(params)}"


@dataclass
class TemplateBudget:
    """Per-host count of new URLs admitted per URL template today.

    A template that spends its budget is paused: only one new URL in
    `template_sample_every` is admitted (sampled), the host's other templates
    are unaffected. Bounded: past `max_templates_per_host` templates a day,
    new templates share one overflow budget.
    """

    day: int = -1
    counts: dict[str, int] = field(default_factory=dict)

    OVERFLOW = "{overflow}"

    def saved(self) -> dict[str, Any]:
        """As plain data for keyed state (a copy: the budget goes on changing)."""
        return {"day": self.day, "counts": dict(self.counts)}

    @classmethod
    def from_saved(cls, saved: dict[str, Any]) -> TemplateBudget:
        return cls(saved["day"], dict(saved["counts"]))

    def admit(self, url: str, now: float, policy: TrapPolicy) -> TrapReason | None:
        today = int(now // DAY_S)
        if today != self.day:
            self.day, self.counts = today, {}
        key = url_template(url)
        if key not in self.counts and len(self.counts) >= policy.max_templates_per_host:
            key = self.OVERFLOW
        n = self.counts.get(key, 0) + 1
        self.counts[key] = n
        if n <= policy.template_budget:
            return None
        over = n - policy.template_budget
        return None if over % policy.template_sample_every == 0 else TrapReason.TEMPLATE_BUDGET


@dataclass
class DailyBudget:
    """Pages granted to one host on one UTC day, against a daily limit."""

    day: int = -1
    used: int = 0

    def spent(self, now: float) -> int:
        """Pages granted today."""
        return self.used if int(now // DAY_S) == self.day else 0

    def remaining(self, now: float, limit: int) -> int:
        return max(0, limit - self.spent(now))

    def take(self, now: float, limit: int) -> TrapReason | None:
        """Spend one page of today's budget, or say why not."""
        today = int(now // DAY_S)
        if today != self.day:
            self.day, self.used = today, 0
        if self.used >= limit:
            return TrapReason.HOST_DAILY_BUDGET
        self.used += 1
        return None
