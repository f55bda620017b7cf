"""The politeness oracle: violations in a request log, judged independently of the frontier.

Used by the scheduling simulation and by the synthetic web's request log. A
violation is: a gap between two requests to a one-at-a-time host below its
policy, more requests in progress than the host allows, a request started
after a 429 arrived and before its Retry-After ended, a page requested before
robots.txt was answered (2xx or 4xx), or a path the host's robots.txt
disallows for our user agent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from udfs.core.robots import RobotsTxt

KINDS = ("gap", "concurrency", "retry_after", "before_robots", "disallowed")


@dataclass(frozen=True)
class Request:
    host: str  # host_key
    is_robots: bool
    path: str  # path and query
    start: float
    end: float
    status: int
    retry_after: float | None = None  # seconds, from a 429 answer


@dataclass(frozen=True)
class HostRules:
    """What the host asked for: the oracle's ground truth."""

    max_in_flight: int = 1
    min_gap_s: float = 1.0
    robots: RobotsTxt | None = None  # None: no robots.txt rules (e.g. it answers 404)


def count_violations(requests: Iterable[Request], rules: Mapping[str, HostRules],
                     user_agent: str) -> dict[str, int]:
    out = dict.fromkeys(KINDS, 0)
    by_host: dict[str, list[Request]] = {}
    for r in requests:
        by_host.setdefault(r.host, []).append(r)
    for key, reqs in by_host.items():
        host = rules[key]
        reqs.sort(key=lambda r: r.start)
        robots_ok_at: float | None = None
        windows: list[tuple[float, float]] = []  # (429 received, Retry-After ends)
        active: list[float] = []
        prev_start: float | None = None
        for r in reqs:
            active = [e for e in active if e > r.start]
            if len(active) >= host.max_in_flight:
                out["concurrency"] += 1
            active.append(r.end)
            if host.max_in_flight == 1 and prev_start is not None and \
                    r.start - prev_start < host.min_gap_s - 1e-9:
                out["gap"] += 1
            prev_start = r.start
            if any(got <= r.start < until - 1e-9 for got, until in windows):
                out["retry_after"] += 1
            if r.status == 429 and r.retry_after:
                windows.append((r.end, r.end + r.retry_after))
            if r.is_robots:
                if robots_ok_at is None and (200 <= r.status < 300 or 400 <= r.status < 500):
                    robots_ok_at = r.end
                continue
            if robots_ok_at is None or r.start < robots_ok_at:
                out["before_robots"] += 1
            if host.robots is not None and not host.robots.is_allowed(user_agent,
                                                                      key + r.path):
                out["disallowed"] += 1
    return out


def address_violations(requests: Iterable[Request], min_gap_s: float, max_in_flight: int
                       ) -> dict[str, int]:
    """IP-level politeness (fetch.ip_min_gap_s, fetch.ip_max_in_flight) over requests
    that all reached one address, as the server saw them: a request that started sooner
    than `min_gap_s` after the last end before it, and one that started while
    `max_in_flight` others were being served (0: no rule)."""
    out = {"ip_gap": 0, "ip_concurrency": 0}
    active: list[float] = []
    last_end = float("-inf")
    for r in sorted(requests, key=lambda r: r.start):
        last_end = max([last_end, *(e for e in active if e <= r.start)])
        active = [e for e in active if e > r.start]
        if max_in_flight and len(active) >= max_in_flight:
            out["ip_concurrency"] += 1
        if r.start - last_end < min_gap_s - 1e-9:
            out["ip_gap"] += 1
        active.append(r.end)
    return out
