"""When the fetcher may send a lease: its host's turn, then its server address's turn.

The rules are the core's (udfs/core/backqueue.py for a host's slot, udfs/core/ipgate.py
for an address); this module waits for them on the fetch engine's event loop, one
asyncio.Condition per host and per address, woken early when a request there ends. A
host's held leases queue in line (the order they came) in front of its condition, so a
request's end wakes the first of them, not every lease held for the host. The
politeness self-check (udfs/core/selfcheck.py) hears every start and end.

Clocks: a lease's times are on the crawl clock (this machine's wall clock, as the
frontier's); what this process itself saw (its requests' starts and ends, the gaps
after them, an address's turns, the self-check) is kept on its monotonic clock, which
a step of the wall clock (NTP, a resumed VM) does not move.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from udfs.core.backqueue import BackQueues, LeaseTiming, Skip
from udfs.core.fetching import DnsCache
from udfs.core.ipgate import IpGate
from udfs.core.politeness import retry_after_seconds
from udfs.core.selfcheck import PolitenessSelfCheck
from udfs.wire.records import LeaseRecord


class Answer(NamedTuple):
    """What the host's slot needs of a request that ended: its outcome (THROTTLED opens
    a Retry-After window), the Retry-After header, and its duration in seconds as the
    completion reports it (whole milliseconds: the duration the frontier plans from)."""

    outcome: str
    retry_after: str | None
    duration_s: float

    @classmethod
    def of(cls, resp: Any) -> Answer:
        """The answer of a udfs.fetcher.client.FetchResponse."""
        return cls(resp.outcome.value, resp.headers.get("Retry-After"),
                   int(resp.duration_s * 1000) / 1000)


def clocks() -> tuple[float, float]:
    """(the crawl clock, the local monotonic clock), in seconds, read together."""
    return time.time(), time.monotonic()


class Turns:
    """The fetcher task's waiting room: hosts' slots and servers' addresses."""

    clock = staticmethod(clocks)  # (the crawl clock, the local clock)

    def __init__(self, queues: BackQueues, ip_gate: IpGate, cache: DnsCache) -> None:
        self.queues = queues
        self.ip_gate = ip_gate
        self.cache = cache
        self.selfcheck = PolitenessSelfCheck()
        # Per host: the line its held leases wait in (first come, first served), and
        # the condition the first of them waits on for the slot.
        self.hosts: dict[str, tuple[asyncio.Lock, asyncio.Condition]] = {}
        self.addresses: dict[str, asyncio.Condition] = {}
        self.resolver: Any = None  # a GuardedResolver over `cache`, made on first use

    def forget_idle(self, idle_s: float) -> None:
        """Drop the slots, lines and conditions of hosts and addresses quiet for `idle_s`."""
        now = self.clock()[1]
        self.queues.forget_idle(now, idle_s)
        self.hosts = {k: v for k, v in self.hosts.items() if k in self.queues.slots}
        self.ip_gate.forget_idle(now, max(idle_s, self.ip_gate.policy.min_gap_s))
        self.addresses = {k: v for k, v in self.addresses.items()
                          if k in self.ip_gate.addresses}

    def _host(self, host: str) -> tuple[asyncio.Lock, asyncio.Condition]:
        """The host's line and its condition."""
        turn = self.hosts.get(host)
        if turn is None:
            turn = self.hosts[host] = (asyncio.Lock(), asyncio.Condition())
        return turn

    def _address(self, address: str) -> asyncio.Condition:
        turn = self.addresses.get(address)
        if turn is None:
            turn = self.addresses[address] = asyncio.Condition()
        return turn

    async def wait_host(self, timing: LeaseTiming) -> Skip | None:
        """Hold the lease until the host's slot lets it start, then start it.

        A lease the slot refuses at sight (too early, too late, halted) is refused at
        once; the others wait in the host's line, in the order they came (the
        frontier's grant order), and only the first of it waits for the slot. The line
        only saves wake-ups: the slot's rules are checked, under the host's condition,
        by every lease before it starts, wherever it stood in line."""
        verdict = self.queues.wait(timing, *self.clock())
        if isinstance(verdict, Skip):
            return verdict
        line, turn = self._host(timing.host_key)
        async with line, turn:
            while True:
                now, local = self.clock()
                verdict = self.queues.wait(timing, now, local)
                if isinstance(verdict, Skip):
                    return verdict
                if verdict == 0.0:
                    self.queues.begin(timing, local)
                    return None
                try:  # woken early when a request of the host ends
                    async with asyncio.timeout(verdict):  # (no task per wait, as wait_for makes)
                        await turn.wait()
                except TimeoutError:
                    pass

    async def wait_address(self, lease: LeaseRecord, timing: LeaseTiming
                           ) -> tuple[str | None, Skip | None]:
        """Hold a request its host allows until its server's address allows it too, then
        count it there: (the address, None). (None, None): the name does not resolve to
        an allowed address (the fetch fails without connecting). (None, TOO_LATE): the
        address's turn would come too close to the lease's expiry."""
        from udfs.fetcher.client import GuardedResolver

        if self.resolver is None:
            self.resolver = GuardedResolver(self.cache)
        try:
            answers = await self.resolver.resolve(urlsplit(lease["url"]).hostname or "")
        except OSError:
            return None, None
        address = answers[0]["host"]
        # Held no longer than a lease is held for its host (fetch.hold_s), and never
        # so long that the fetch could outlive the lease.
        now, local = self.clock()
        # On the local clock, as the gate's own times are.
        deadline = local + min(self.queues.hold_s,
                               timing.expires_at - self.queues.fetch_s - now)
        turn = self._address(address)
        async with turn:
            while True:
                local = self.clock()[1]
                wait = self.ip_gate.wait(address, local)
                if wait == 0.0:
                    self.ip_gate.begin(address, local)
                    return address, None
                if local + (wait or 0.0) > deadline:
                    return None, Skip.TOO_LATE
                try:  # woken early when a request to the address ends
                    async with asyncio.timeout(deadline - local if wait is None else wait):
                        await turn.wait()
                except TimeoutError:
                    pass

    def started(self, timing: LeaseTiming) -> float:
        """The request goes out now (the self-check counts it): now on the local clock,
        what `release` takes as `started`."""
        local = self.clock()[1]
        self.selfcheck.start(timing.host_key, local, timing.pace.gap_s,
                             timing.pace.max_in_flight)
        return local

    async def release(self, timing: LeaseTiming, started: float, answer: Answer | None,
                      sent: bool = True, linger_s: float = 0.0) -> None:
        """The request is over: its host's next request may follow after the gap. The
        fetcher calls this when the answer's last byte has been read (before storing
        and parsing it, which are ours, not the server's), so the gap runs from now,
        plus `linger_s` for a request we cut short (the server may still be at it:
        FetchResponse.linger_s); the duration rule uses the request's own duration, the
        one the completion reports and the frontier plans from. `answer` None: the
        fetch raised, and all we know is the time it took. `sent=False`: the host's
        turn was taken but no request went out (the address's turn came too late): the
        slot is free again, with no gap to add. `started`: what `started` returned (the
        local clock)."""
        wall, local = self.clock()
        now = local + linger_s
        if not sent:
            self.queues.cancel(timing, now)
        else:
            if answer is None:
                answer = Answer("OTHER_ERROR", None, now - started)
            throttled = answer.outcome == "THROTTLED"
            # A Retry-After (seconds, or an HTTP date on the crawl clock) as a local time.
            seconds = retry_after_seconds(answer.retry_after, wall + linger_s) \
                if throttled else None
            retry_until = None if seconds is None else now + seconds
            self.queues.end(timing, now, answer.duration_s, throttled=throttled,
                            retry_until=retry_until)
            self.selfcheck.end(timing.host_key, now, retry_until)
        turn = self._host(timing.host_key)[1]
        async with turn:
            turn.notify_all()

    async def release_address(self, address: str, linger_s: float = 0.0) -> None:
        """The request to `address` is over: its next one may follow after its gap, from
        now plus `linger_s` (see release)."""
        self.ip_gate.end(address, self.clock()[1] + linger_s)
        turn = self._address(address)
        async with turn:
            turn.notify_all()
