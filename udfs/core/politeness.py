"""Per-host politeness: the policy, the gap after a fetch, Retry-After and backoff.

Pure functions of the policy, the host's counters and `now` (seconds). The
host scheduler's pacer (`frontier/pacer.py`) applies them; nothing else decides when a
host may be contacted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Any


@dataclass(frozen=True)
class HostPolicy:
    """How hard one host may be crawled. Global defaults come from the `politeness` section;
    a per-host override replaces fields and carries its own `policy_version`."""

    max_in_flight: int = 1
    min_gap_s: float = 1.0
    # Mercator: wait this many times the last fetch's duration (if longer than min_gap_s).
    duration_factor: float = 10.0
    max_gap_s: float = 120.0
    backoff_base_s: float = 30.0
    backoff_max_s: float = 3600.0
    # After a 429/503 the host's allowance is multiplied by this (gaps grow, concurrency
    # shrinks) and recovers by allowance_recovery per successful fetch, up to 1.
    allowance_cut: float = 0.5
    allowance_min: float = 0.1
    allowance_recovery: float = 1.25
    daily_budget: int = 100_000
    policy_version: int = 0

    def override(self, fields: dict[str, Any], version: int) -> HostPolicy:
        """A negotiated per-host policy: only this host's fields change, versioned."""
        unknown = set(fields) - set(self.__dataclass_fields__) - {"policy_version"}
        if unknown:
            raise ValueError(f"unknown host policy fields: {sorted(unknown)}")
        if version <= self.policy_version:
            raise ValueError(f"policy_version {version} is not newer than {self.policy_version}")
        return replace(self, **fields, policy_version=version)


@dataclass(frozen=True, slots=True)
class Pace:
    """A host's pace as it stands now: what the frontier grants with every lease and the
    fetcher enforces at request time (the same rule on both sides: `gap_after`).

    `gap_s` is the shortest wait after a request before the next one starts (the policy's
    gap or the Crawl-delay, divided by the allowance); after a request that took d
    seconds the wait is `duration_factor` * d when that is longer (Mercator's rule), but
    at most `max_gap_s`. `max_in_flight` requests may run at once."""

    gap_s: float = 1.0
    duration_factor: float = 10.0
    max_gap_s: float = 120.0
    max_in_flight: int = 1

    def gap_after(self, duration_s: float = 0.0) -> float:
        """Seconds to wait after a request of `duration_s` before the next one starts."""
        return min(max(self.gap_s, self.duration_factor * duration_s), self.max_gap_s)


def host_pace(policy: HostPolicy, allowance: float, crawl_delay_s: float = 0.0) -> Pace:
    """The pace of a host with this policy, allowance and (honoured) Crawl-delay."""
    scale = 1.0 / max(allowance, policy.allowance_min)
    base = max(policy.min_gap_s, crawl_delay_s)
    return Pace(base * scale, policy.duration_factor * scale,
                max(policy.max_gap_s, base) * scale, effective_in_flight(policy, allowance))


def effective_gap(policy: HostPolicy, allowance: float, crawl_delay_s: float = 0.0,
                  fetch_duration_s: float = 0.0) -> float:
    """Seconds to wait after a request before the next one to the same host."""
    return host_pace(policy, allowance, crawl_delay_s).gap_after(fetch_duration_s)


def effective_in_flight(policy: HostPolicy, allowance: float) -> int:
    """Concurrent requests allowed now: the policy's limit scaled down by the allowance."""
    return max(1, int(policy.max_in_flight * max(allowance, policy.allowance_min)))


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Retry-After (RFC 9110 10.2.3) as an absolute time: delay-seconds or an HTTP-date."""
    seconds = retry_after_seconds(value, now)
    return None if seconds is None else now + seconds


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """Retry-After as seconds from `now` (the wall clock, for an HTTP-date): exact for
    delay-seconds, so another clock can take the window without a rounding error."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def backoff_delay(policy: HostPolicy, exponent: int, unit: float) -> float:
    """Jittered exponential backoff: base * 2^exponent, capped, times a jitter in [0.5, 1].

    `unit` is a uniform draw in [0, 1) supplied by the caller (see `Jitter`).
    """
    raw = min(policy.backoff_max_s, policy.backoff_base_s * (2 ** min(exponent, 30)))
    return float(raw * (0.5 + 0.5 * unit))


class Jitter:
    """A tiny deterministic generator of uniform draws whose whole state is one integer
    (cheap to keep in keyed state and to snapshot): splitmix64 over a counter."""

    __slots__ = ("state",)

    def __init__(self, seed: int | str) -> None:
        import hashlib

        if isinstance(seed, str):
            seed = int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=8).digest(), "big")
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def random(self) -> float:
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return ((z ^ (z >> 31)) >> 11) / float(1 << 53)


def cut_allowance(policy: HostPolicy, allowance: float) -> float:
    return max(policy.allowance_min, allowance * policy.allowance_cut)


def recover_allowance(policy: HostPolicy, allowance: float) -> float:
    return min(1.0, allowance * policy.allowance_recovery)
