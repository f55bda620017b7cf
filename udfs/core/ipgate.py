"""IP-level politeness: a second politeness key on the server's address (pure, takes `now`).

A thousand host names on one shared-hosting server are a thousand hosts to the
frontier, each with its own gap and in-flight limit, but one machine to its operator.
With `fetch.ip_min_gap_s` or `fetch.ip_max_in_flight` set, the fetcher holds a request
that its host's slot already allows until the server's address allows it too: at
least `min_gap_s` after the end of the last request to the address (and after the
last start, which spaces concurrent requests), and at most `max_in_flight` requests to
it at once (SPEC section 4, the optional per-IP limit). The gap counts from an end, as
a host's does: the server sees a request end before we do and the next start after we
send it, so no delay on the way can make the gap it sees shorter.

It only ever delays a request, never starts one sooner, so the per-host rules (the
frontier's tokens, the fetcher's back queues) hold as before. The address is the first
one the fetcher's resolver answers for the name (the DNS cache: aiohttp connects
through the same cache). The gate lives in each fetcher subtask, and leases are keyed
by host, so names on one address that land on different subtasks share the limit per
subtask: a server sees at most parallelism × the allowance (README, "Pace and
politeness").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IpPolicy:
    min_gap_s: float = 0.0  # between two request starts to one address; 0: no gap rule
    max_in_flight: int = 0  # requests to one address at once; 0: no limit

    @property
    def on(self) -> bool:
        return self.min_gap_s > 0 or self.max_in_flight > 0


@dataclass
class _Address:
    in_flight: int = 0
    last_start: float = float("-inf")
    last_end: float = float("-inf")
    last_used: float = 0.0


class IpGate:
    """Every address this fetcher incarnation has sent requests to."""

    def __init__(self, policy: IpPolicy) -> None:
        self.policy = policy
        self.addresses: dict[str, _Address] = {}

    def _get(self, address: str) -> _Address:
        a = self.addresses.get(address)
        if a is None:
            a = self.addresses[address] = _Address()
        return a

    def wait(self, address: str, now: float) -> float | None:
        """Seconds until a request to `address` may start (0: now); None: the address has
        its limit of requests in flight (ask again when one ends)."""
        a = self._get(address)
        a.last_used = now
        if self.policy.max_in_flight and a.in_flight >= self.policy.max_in_flight:
            return None
        return max(0.0, max(a.last_start, a.last_end) + self.policy.min_gap_s - now)

    def begin(self, address: str, now: float) -> None:
        a = self._get(address)
        a.in_flight += 1
        a.last_start = max(a.last_start, now)
        a.last_used = now

    def end(self, address: str, now: float) -> None:
        a = self._get(address)
        a.in_flight = max(0, a.in_flight - 1)
        a.last_end = max(a.last_end, now)
        a.last_used = now

    def forget_idle(self, now: float, idle_s: float) -> None:
        """Drop addresses with nothing in flight and unused for `idle_s` (bounded memory;
        past the gap, a forgotten address is as free as a new one)."""
        if idle_s < self.policy.min_gap_s:
            raise ValueError("an address must be kept at least for its gap")
        self.addresses = {k: a for k, a in self.addresses.items()
                          if a.in_flight or now - a.last_used < idle_s}
