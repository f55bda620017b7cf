"""The fetcher task's waiting room (udfs/fetcher/turns.py): a request we cut short
holds its host and its address for its linger too."""

from __future__ import annotations

import asyncio
import time

from udfs.core.addresses import AddressPolicy
from udfs.core.backqueue import BackQueues, LeaseTiming
from udfs.core.fetching import DnsCache, FetchLimits
from udfs.core.ipgate import IpGate, IpPolicy
from udfs.core.politeness import Pace
from udfs.fetcher.turns import Turns

HOST = "http://h.test"
ADDRESS = "127.0.0.1"


def turns() -> Turns:
    cache = DnsCache(AddressPolicy.from_networks(["127.0.0.0/8"]), FetchLimits(), {})
    return Turns(BackQueues(started_at=0.0, hold_s=60.0, fetch_s=30.0),
                 IpGate(IpPolicy(min_gap_s=0.25, max_in_flight=1)), cache)


def timing(lease_id: str) -> LeaseTiming:
    return LeaseTiming(lease_id, HOST, issued_at=1.0, not_before=0.0, expires_at=4e9,
                       prev_lease_id=None, pace=Pace(gap_s=0.5, duration_factor=0.0))


def test_a_request_cut_short_adds_its_linger_to_the_host_gap_and_the_address_gap():
    async def scenario(linger: float) -> tuple[float, float, float]:
        t = turns()
        first = timing("a")
        assert t.queues.admit(first, *t.clock()) is None
        begun = t.started(first)  # the local clock, as the slot's and the gate's times
        t.queues.begin(first, begun)
        t.ip_gate.begin(ADDRESS, begun)
        await t.release(first, begun, None, linger_s=linger)
        await t.release_address(ADDRESS, linger)
        now = t.ip_gate.addresses[ADDRESS].last_end - linger  # when release ran
        return now, t.queues.delay(timing("b"), time.time(), now), t.ip_gate.wait(ADDRESS, now)

    now, host_wait, address_wait = asyncio.run(scenario(0.0))
    assert abs(host_wait - 0.5) < 0.05 and abs(address_wait - 0.25) < 0.05
    now, host_wait, address_wait = asyncio.run(scenario(0.2))
    assert abs(host_wait - 0.7) < 0.05 and abs(address_wait - 0.45) < 0.05


def test_a_hosts_held_leases_wait_in_line_and_a_request_end_wakes_only_the_first():
    """Leases held for one host start in the order they came, each a gap after the
    previous request's end, and a request's end has the slot looked at again by the
    first of them only (before, by every lease held for the host: 11 a page)."""
    gap = 0.1

    async def scenario() -> tuple[list[str], list[float], int]:
        t = turns()
        looked: list[str] = []
        wait = t.queues.wait

        def counted(lease: LeaseTiming, now: float, local: float | None = None):
            looked.append(lease.lease_id)
            return wait(lease, now, local)

        t.queues.wait = counted  # type: ignore[method-assign]
        leases = [LeaseTiming(f"L{i}", HOST, issued_at=1.0, not_before=0.0, expires_at=4e9,
                              prev_lease_id=f"L{i - 1}" if i else None,
                              pace=Pace(gap_s=gap, duration_factor=0.0)) for i in range(6)]
        starts: list[tuple[str, float]] = []

        async def one(lease: LeaseTiming) -> None:
            assert t.queues.admit(lease, time.time()) is None
            assert await t.wait_host(lease) is None
            starts.append((lease.lease_id, time.monotonic()))

        tasks = []
        for lease in leases:
            tasks.append(asyncio.create_task(one(lease)))
            await asyncio.sleep(0)  # they come in order
        await asyncio.sleep(0.05)
        assert [s[0] for s in starts] == ["L0"]  # the others wait for its end
        woken = []
        for i, lease in enumerate(leases):
            while len(starts) <= i:
                await asyncio.sleep(0.005)
            before = len(looked)
            await t.release(lease, starts[i][1], None)
            await asyncio.sleep(0.02)  # every lease woken by the end has looked by now
            woken.append(len(looked) - before)
        await asyncio.gather(*tasks)
        times = [s[1] for s in starts]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        return [s[0] for s in starts], gaps, max(woken)

    order, gaps, woken = asyncio.run(scenario())
    assert order == [f"L{i}" for i in range(6)]
    assert min(gaps) >= gap, gaps
    assert woken == 1, woken


def test_a_step_of_the_wall_clock_shortens_no_gap(monkeypatch):
    """The gap after a request's end is kept on the monotonic clock: the wall clock
    jumping ahead (NTP, a resumed VM) between a request's end and the next start does
    not let the next request out early (it did while the slot kept wall-clock times)."""
    gap = 0.3
    step = [0.0]  # how far the wall clock has jumped
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + step[0])

    async def scenario() -> float:
        t = turns()
        first, second = (LeaseTiming(i, HOST, issued_at=1.0, not_before=0.0, expires_at=4e9,
                                     prev_lease_id=p, pace=Pace(gap_s=gap, duration_factor=0.0))
                         for i, p in (("a", None), ("b", "a")))
        for lease in (first, second):
            assert t.queues.admit(lease, time.time()) is None
        assert await t.wait_host(first) is None
        await t.release(first, t.started(first), None)
        ended = time.monotonic()
        step[0] = 3600.0  # an hour ahead, at once
        assert await t.wait_host(second) is None
        assert not any(t.selfcheck.breaches.values()), t.selfcheck.breaches
        return time.monotonic() - ended

    assert asyncio.run(scenario()) >= gap - 0.001
