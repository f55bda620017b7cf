"""What the jobs report about themselves: fetch outcome classes and the fetcher's
politeness self-check. Pure: the operators feed it times and records and export what
it counts as Flink metrics (no per-host series: bounded label sets only).

The self-check is an oracle inside the fetcher, independent of the back queues that
enforce the pace (udfs/core/backqueue.py): per host it records when this fetcher's
requests start and end, and counts a breach when a request starts

* while the host already has `max_in_flight` requests of ours in flight
  (`in_flight`),
* sooner than the lease's `gap_s` after the previous request's start, for a
  one-at-a-time host (`gap`: the policy's gap or Crawl-delay, divided by the
  allowance — the floor every later rule only lengthens), or
* inside a Retry-After window a 429/503 answer of the host opened (`retry_after`).

It sees one fetcher subtask (a host's leases all go to one: they are keyed by host).
It must read 0; the request-log oracle of the tests (crawler/testkit/oracle.py) judges the
same rules from the server's side.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

# Fetch outcome classes (SPEC section 9 and the list), a fixed label set.
OUTCOME_CLASSES = ("2xx", "304", "3xx", "404_410", "other_4xx", "429", "503", "other_5xx",
                   "dns", "connect", "timeout", "refused_address", "too_large",
                   "unsupported_type", "parse_error", "parse_timeout", "not_sent", "other")

_BY_OUTCOME = {"OK": "2xx", "NOT_MODIFIED": "304", "REDIRECT": "3xx", "GONE": "404_410",
               "CLIENT_ERROR": "other_4xx", "DNS_ERROR": "dns", "CONNECT_ERROR": "connect",
               "TIMEOUT": "timeout", "ADDRESS_BLOCKED": "refused_address",
               "TOO_LARGE": "too_large", "UNSUPPORTED_TYPE": "unsupported_type",
               "PARSE_ERROR": "parse_error", "PARSE_TIMEOUT": "parse_timeout",
               "NOT_SENT": "not_sent"}


def outcome_class(outcome: str, http_status: int | None) -> str:
    """The class of a completion (its FetchOutcome and HTTP status)."""
    if outcome == "THROTTLED":
        return "503" if http_status == 503 else "429"
    if outcome == "SERVER_ERROR":
        return "503" if http_status == 503 else "other_5xx"
    return _BY_OUTCOME.get(outcome, "other")


BREACHES = ("in_flight", "gap", "retry_after")
_EPSILON_S = 1e-6


@dataclass
class _Host:
    in_flight: int = 0
    last_start: float | None = None
    blocked_until: float = 0.0
    seen: float = 0.0


class PolitenessSelfCheck:
    """Per host: our requests in flight, the last start, a Retry-After window."""

    def __init__(self, max_hosts: int = 100_000) -> None:
        self.hosts: OrderedDict[str, _Host] = OrderedDict()
        self.max_hosts = max_hosts
        self.breaches = dict.fromkeys(BREACHES, 0)
        self.starts = 0

    def _host(self, key: str, now: float) -> _Host:
        h = self.hosts.get(key)
        if h is None:
            h = self.hosts[key] = _Host()
            # Bounded: the oldest idle host goes (one without requests in flight; its
            # last start is older than any gap a newer lease could ask for).
            if len(self.hosts) > self.max_hosts:
                for old, state in self.hosts.items():
                    if state.in_flight == 0 and old != key:
                        del self.hosts[old]
                        break
        else:
            self.hosts.move_to_end(key)
        h.seen = now
        return h

    def start(self, host: str, now: float, gap_s: float, max_in_flight: int) -> list[str]:
        """A request to `host` starts now under a lease's pace; the rules it breaks."""
        h = self._host(host, now)
        found = []
        if h.in_flight >= max_in_flight:
            found.append("in_flight")
        if max_in_flight == 1 and h.last_start is not None and \
                now - h.last_start < gap_s - _EPSILON_S:
            found.append("gap")
        if now < h.blocked_until - _EPSILON_S:
            found.append("retry_after")
        h.in_flight += 1
        h.last_start = now
        self.starts += 1
        for kind in found:
            self.breaches[kind] += 1
        return found

    def end(self, host: str, now: float, retry_until: float | None = None) -> None:
        """A request to `host` ended now; `retry_until`: the end of a Retry-After window
        its answer opened."""
        h = self._host(host, now)
        h.in_flight = max(0, h.in_flight - 1)
        if retry_until is not None:
            h.blocked_until = max(h.blocked_until, retry_until)
