"""An operator's controls of one host, applied by the host's owner (`HostFrontier`).

`crawl host pause|resume|set|reset|show` and `crawl url show` send a `HostCommand`
to the frontier job's control topic, keyed by host_key; the frontier applies it in
that host's keyed state, between two of its own decisions, so a command can never
race the scheduler. Commands apply in the order the host's control-topic partition
holds them (one partition per host: the topic is keyed by host_key), never by the
senders' clocks, which may disagree. A restore from a checkpoint re-reads exactly the
commands its state had not applied yet (Flink keeps source offsets and state
together); a record written twice (a producer's retry, a resent command) carries the
same command_id and is applied once. Each applied change counts up the host's
`control_version`; a negotiated allowance (`set`) replaces only that host's policy
fields and counts up its `policy_version`.

Pure: everything takes the host and `now`; the operator only adapts it to the topics.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from udfs.core.frontier import HostFrontier, UrlState, UrlStatus
from udfs.core.politeness import HostPolicy
from udfs.core.robots_state import Verdict

# The per-host policy keys an operator may set: HostPolicy's fields but its version.
POLICY_KEYS = tuple(k for k in HostPolicy.__dataclass_fields__ if k != "policy_version")


class Command(StrEnum):
    PAUSE = "PAUSE"
    RESUME = "RESUME"
    SET = "SET"
    RESET = "RESET"
    SHOW = "SHOW"
    SHOW_URL = "SHOW_URL"


CHANGES = frozenset({Command.PAUSE, Command.RESUME, Command.SET, Command.RESET})
REMEMBERED_COMMANDS = 16  # ids of the last applied changes: a record written twice


@dataclass(frozen=True)
class HostCommand:
    command_id: str
    host_key: str
    command: Command
    version: int  # when the sender issued it (epoch ms); informational, not an order
    settings: dict[str, Any] = field(default_factory=dict)  # SET: typed policy fields
    url: str | None = None  # SHOW_URL


@dataclass
class Reply:
    ok: bool
    applied: bool = False
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def apply_command(h: HostFrontier, cmd: HostCommand, now: float, defaults: HostPolicy
                  ) -> Reply:
    """Apply one command to its host and describe the host (or URL) afterwards.
    `defaults`: the configured policy, what `reset` goes back to."""
    if cmd.command is Command.SHOW_URL:
        if not cmd.url:
            return Reply(False, error="SHOW_URL needs a url")
        return Reply(True, detail=describe_url(h, cmd.url, now))
    if cmd.command in CHANGES:
        if cmd.command_id in h.commands:
            detail = describe_host(h, now)
            detail["note"] = f"{cmd.command_id} was applied already: not applied again"
            return Reply(True, applied=False, detail=detail)
        if cmd.command is Command.SET:
            unknown = sorted(set(cmd.settings) - set(POLICY_KEYS))
            if unknown or not cmd.settings:
                return Reply(False, error=f"not per-host policy keys: {unknown}; allowed: "
                             f"{', '.join(POLICY_KEYS)}" if unknown else "SET needs settings")
            h.set_policy(h.pacer.policy.override(cmd.settings, h.pacer.policy.policy_version + 1))
        elif cmd.command is Command.RESET:
            h.pacer.policy = replace(defaults, policy_version=h.pacer.policy.policy_version + 1)
            h.paused = False
        else:
            h.paused = cmd.command is Command.PAUSE
        h.control_version += 1
        h.commands = [*h.commands[-(REMEMBERED_COMMANDS - 1):], cmd.command_id]
        h._count(f"control_{cmd.command.value.lower()}")
        return Reply(True, applied=True, detail=describe_host(h, now))
    return Reply(True, detail=describe_host(h, now))


def _in(at: float | None, now: float) -> float | None:
    """Seconds from now (negative: in the past), rounded for reading."""
    return None if at is None else round(at - now, 3)


def describe_host(h: HostFrontier, now: float) -> dict[str, Any]:
    """What `crawl host show` prints: the host's controls, policy, pace, robots,
    leases, queue and budget, and its last fetch outcomes."""
    by_status: dict[str, int] = {s.value: 0 for s in UrlStatus}
    due = 0
    for u in h.urls.values():
        by_status[u.status.value] += 1
        if u.status is not UrlStatus.LEASED and u.next_fetch_at <= now:
            due += 1
    r, pacer = h.gate.state, h.pacer
    pace = pacer.pace()
    return {
        "host_key": h.host_key, "now": now, "paused": h.paused,
        "known": bool(h.urls or h.in_flight or r.fetched_at is not None or h.window.big),
        "control_version": h.control_version,
        "policy": {k: getattr(pacer.policy, k) for k in (*POLICY_KEYS, "policy_version")},
        "pace": {"gap_s": pace.gap_s, "max_in_flight": pace.max_in_flight,
                 "allowance": pacer.allowance, "crawl_delay_s": pacer.crawl_delay},
        "next_allowed_in_s": _in(h.ready_at(now), now),
        "backoff_in_s": _in(pacer.backoff_until, now) if pacer.backoff_until > now else None,
        "backoff_exponent": pacer.backoff_exponent,
        "robots": {"status": r.status.value,
                   "age_s": None if r.fetched_at is None else round(now - r.fetched_at, 3),
                   "expires_in_s": _in(r.expires_at, now) if r.fetched_at is not None else None,
                   "failures": r.failures},
        "in_flight": [{"url": lease.url, "kind": lease.kind.value,
                       "not_before_in_s": _in(lease.not_before, now)}
                      for lease in sorted(h.in_flight.values(),
                                          key=lambda x: (x.not_before, x.lease_id))],
        "urls": {"resident": len(h.urls), "by_status": by_status, "due": due,
                 "cold": h.window.cold(),
                 # a hot host's shards (udfs/core/shards.py): URLs each holds, as the
                 # owner counts them (its puts, less what their answers returned)
                 "sharded": sum(h.shards.sharded.values()), "shards": len(h.shards.sharded)},
        "budget_left_today": h.budget.remaining(now, pacer.policy.daily_budget),
        "dup_share": round(h.ends.dup_share, 3),
        "recent": [{"at_in_s": _in(at, now), "kind": kind, "outcome": outcome,
                    "http_status": status} for at, kind, outcome, status in h.ends.recent],
    }


def describe_url(h: HostFrontier, url: str, now: float) -> dict[str, Any]:
    """What `crawl url show` prints: the URL's state and why it waits."""
    url_id, u = h.find(url)
    out: dict[str, Any] = {"url": url, "url_id": url_id, "host_key": h.host_key,
                           "known": u is not None, "why": why_waiting(h, u, now)}
    if u is not None:
        out.update({
            "status": u.status.value, "version": u.version,
            "accepted_version": u.accepted_version, "attempt": u.attempt,
            "next_fetch_in_s": _in(u.next_fetch_at, now),
            "last_fetch_age_s": None if u.last_fetch_at is None else
            round(now - u.last_fetch_at, 3),
            "interval_s": u.interval_s, "priority": u.priority, "score": h.queue.score(u),
            "depth": u.depth, "failure_count": u.failure_count, "park_reason": u.park_reason,
            "duplicate": u.dup, "lease_id": u.lease_id, "cold": url_id not in h.urls})
    return out


def span(seconds: float) -> str:
    """A duration for reading: 45 s, 12.5 min, 3.0 h, 30.0 d."""
    s = abs(seconds)
    return (f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else
            f"{s / 3600:.1f} h" if s < 172800 else f"{s / 86400:.1f} d")


def why_waiting(h: HostFrontier, u: UrlState | None, now: float) -> str:
    """One sentence: why this URL is not being fetched now (the first reason that holds,
    in the order the scheduler checks them)."""
    if u is None:
        return "not known to the frontier (never discovered, or refused at admission)"
    if u.status is UrlStatus.LEASED:
        lease = h.in_flight.get(u.lease_id or "")
        when = "" if lease is None else f", may start in {max(0.0, lease.not_before - now):.1f} s"
        return f"leased to the fetcher ({u.lease_id}{when})"
    if h.paused:
        return "its host is paused by an operator (crawl host resume)"
    if u.next_fetch_at > now:
        state = {UrlStatus.TOMBSTONE: "gone (404/410); next check",
                 UrlStatus.PARKED: f"parked ({u.park_reason}); next try",
                 UrlStatus.FETCHED: "fetched; next visit"}.get(u.status, "next try")
        return f"{state} in {span(u.next_fetch_at - now)}"
    if h.gate.blocking(now):
        return "waiting for the host's robots.txt"
    if h.gate.verdict(u.url, now) is Verdict.DISALLOWED:
        return "disallowed by the host's robots.txt; checked again when it is refetched"
    if h.pacer.backoff_until > now:
        return (f"its host is backing off for {span(h.pacer.backoff_until - now)} "
                "(429/503 or errors)")
    if h.budget.remaining(now, h.pacer.policy.daily_budget) == 0:
        return "its host's daily budget is spent"
    start = h.ready_at(now)
    if start > now + h.cfg.lookahead_s or len(h.in_flight) >= h.pacer.lease_limit():
        return (f"due; waiting for the host's politeness (next request in "
                f"{max(0.0, start - now):.1f} s, {len(h.in_flight)} leases out)")
    mine = h.queue.score(u)
    ahead = sum(1 for o in h.urls.values() if o is not u and o.status is not UrlStatus.LEASED
                and o.next_fetch_at <= now and h.queue.score(o) > mine)
    return f"due; {ahead} due URLs of its host are ahead of it in the queue"
