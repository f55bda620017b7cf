"""The fetcher's back queues on a virtual clock: when a granted lease may be sent."""

from __future__ import annotations

import random

import pytest

from udfs.core.backqueue import REPORTED, BackQueues, LeaseTiming, Skip
from udfs.core.politeness import Pace

H = "http://h.example"
PACE = Pace(gap_s=1.0, duration_factor=10.0, max_gap_s=120.0, max_in_flight=1)


def lease(lid: str, nb: float = 0.0, prev: str | None = None, *, issued: float = 0.0,
          expires: float = 300.0, pace: Pace = PACE, host: str = H, seq: int = 0
          ) -> LeaseTiming:
    return LeaseTiming(lid, host, issued, nb, expires, prev, pace, seq)


def queues(started_at: float = 0.0) -> BackQueues:
    return BackQueues(started_at, hold_s=3.0, fetch_s=60.0)


def test_a_head_waits_for_its_not_before_and_then_goes():
    q = queues()
    a = lease("a", nb=2.0)
    assert q.admit(a, 0.5) is None
    assert q.wait(a, 0.5) == 1.5
    assert q.wait(a, 2.0) == 0.0


def test_the_gap_counts_from_the_real_end_of_the_previous_request():
    q = queues()
    a, b = lease("a", nb=0.0), lease("b", nb=1.0, prev="a")
    assert q.admit(a, 0.0) is None and q.admit(b, 0.0) is None
    q.begin(a, 0.0)
    assert q.wait(b, 1.0) is None  # a is still in flight (limit 1)
    q.end(a, 1.5, duration_s=0.05)  # ended late: b waits a gap after the end
    assert q.wait(b, 1.5) == pytest.approx(1.0)
    q2 = queues()
    c, d = lease("c"), lease("d", nb=1.0, prev="c")
    q2.admit(c, 0.0), q2.admit(d, 0.0)
    q2.begin(c, 0.0)
    q2.end(c, 0.3, duration_s=0.3)  # slow: 10 x 0.3 s = 3 s
    assert q2.wait(d, 0.3) == pytest.approx(3.0)


def test_the_slots_history_is_on_the_local_clock_and_a_wall_clock_step_moves_no_gap():
    """not_before against the crawl clock (`now`), the gap after the last request against
    the local one: the wall clock an hour ahead or behind of where it was at the
    request's end leaves the gap as it was, and not_before still counts on its own clock."""
    wall, mono = 1_000_000.0, 50.0  # two clocks, far apart
    for step in (3600.0, -3600.0):
        q = BackQueues(0.0, hold_s=3.0, fetch_s=60.0)
        a = lease("a", nb=wall, expires=wall + 7200)
        # (its not_before passed on the crawl clock either way)
        b = lease("b", nb=wall + min(step, 0.0), prev="a", expires=wall + 7200)
        assert q.admit(a, wall, mono) is None and q.admit(b, wall, mono) is None
        assert q.wait(a, wall, mono) == 0.0
        q.begin(a, mono)
        q.end(a, mono + 0.05, duration_s=0.05)
        # 0.4 s later on the local clock, the wall clock has jumped by `step`.
        assert q.wait(b, wall + 0.45 + step, mono + 0.45) == pytest.approx(0.6)
        assert q.start_at(b, wall + 0.45 + step, mono + 0.45) == \
            pytest.approx(wall + 1.05 + step)
        assert q.wait(b, wall + 1.05 + step, mono + 1.05) == 0.0
    q = BackQueues(0.0, hold_s=3.0, fetch_s=60.0)
    c = lease("c", nb=wall + 2.0, expires=wall + 7200)
    assert q.admit(c, wall, mono) is None
    assert q.wait(c, wall, mono) == pytest.approx(2.0)  # not_before: the crawl clock's
    q.end(c, mono, duration_s=0.0, retry_until=mono + 30.0, throttled=False)
    assert q.wait(c, wall, mono + 1.0) is Skip.TOO_EARLY  # a Retry-After on the local clock


def test_replayed_duplicate_and_orphaned_leases_are_not_sent():
    q = queues(started_at=100.0)
    assert q.admit(lease("old", issued=99.0), 100.5) is Skip.REPLAYED
    head = lease("h", issued=101.0)
    assert q.admit(head, 101.0) is None
    assert q.admit(head, 101.1) is Skip.DUPLICATE
    # A follower of a lease this incarnation never saw (it went to the one before).
    assert q.admit(lease("f", issued=101.0, prev="old"), 101.2) is Skip.UNKNOWN_PREDECESSOR
    assert q.admit(lease("g", issued=101.0, prev="h"), 101.2) is None
    assert Skip.REPLAYED not in REPORTED and Skip.DUPLICATE not in REPORTED
    assert Skip.UNKNOWN_PREDECESSOR in REPORTED


def test_a_lease_reported_not_sent_is_not_sent_when_a_copy_comes_later():
    """A copy of a lease arrives before its predecessor (another partition, at-least-once
    delivery): it is refused and reported NOT_SENT, and the frontier takes it back. The
    predecessor then arrives, and the original of the refused lease: a duplicate, not
    sent; a follower of the refused one is refused too."""
    q = queues()
    a, b = lease("a"), lease("b", nb=1.0, prev="a")
    assert q.admit(b, 0.0) is Skip.UNKNOWN_PREDECESSOR
    assert q.admit(a, 0.1) is None
    assert q.admit(b, 0.2) is Skip.DUPLICATE
    assert q.admit(lease("c", nb=2.0, prev="b"), 0.3) is Skip.UNKNOWN_PREDECESSOR


def test_retry_after_throttle_expiry_and_hold_limits():
    q = queues()
    a, b = lease("a"), lease("b", nb=1.0, prev="a")
    q.admit(a, 0.0), q.admit(b, 0.0)
    q.begin(a, 0.0)
    q.end(a, 0.1, 0.05, retry_until=2.0)
    assert q.wait(b, 0.1) == pytest.approx(1.9)  # the Retry-After window
    q.end(b, 0.2, 0.01, retry_until=10.0)
    c = lease("c", prev="b")
    assert q.wait(c, 0.2) is Skip.TOO_EARLY  # held at most hold_s
    assert q.start_at(c, 0.2) == 10.0  # the hint the NOT_SENT report carries
    # A 429 halts leases granted before the frontier saw it (throttle_seq 0).
    q3 = queues()
    x, y = lease("x"), lease("y", nb=1.0, prev="x")
    q3.admit(x, 0.0), q3.admit(y, 0.0)
    q3.begin(x, 0.0)
    q3.end(x, 0.1, 0.05, throttled=True)
    assert q3.wait(y, 5.0) is Skip.HALTED
    z = lease("z", nb=5.0, prev="y", seq=1)  # granted after the frontier saw the 429
    q3.admit(z, 4.0)
    assert q3.wait(z, 5.0) == 0.0
    # A start that would run past the lease's expiry is not made.
    late = lease("late", nb=250.0, expires=300.0, host="http://other.example")
    q3.admit(late, 249.0)
    assert q3.wait(late, 249.0) is Skip.TOO_LATE


def test_two_in_flight_hosts_start_one_gap_apart():
    pace = Pace(0.5, 10.0, 120.0, 2)
    q = queues()
    a, b, c = (lease(x, pace=pace, prev=p) for x, p in (("a", None), ("b", "a"), ("c", "b")))
    for x in (a, b, c):
        q.admit(x, 0.0)
    q.begin(a, 0.0)
    assert q.wait(b, 0.0) == pytest.approx(0.5)
    q.begin(b, 0.5)
    assert q.wait(c, 1.0) is None  # two in flight


def test_forget_idle_drops_quiet_slots_only():
    q = queues()
    a = lease("a")
    q.admit(a, 0.0)
    q.begin(a, 0.0)
    assert q.forget_idle(1000.0, 60.0) == 0  # in flight
    q.end(a, 1.0, 0.1)
    assert q.forget_idle(30.0, 60.0) == 0 and q.forget_idle(100.0, 60.0) == 1
    # A follower of a forgotten lease is then not sent (safely).
    assert q.admit(lease("b", prev="a"), 100.0) is Skip.UNKNOWN_PREDECESSOR


def test_random_schedules_never_break_the_pace():
    """Leases arrive early, late, duplicated and out of order; requests of random length:
    every start the queue allows is at least gap_after(previous duration) after the
    previous end, and never beside another request on a one-at-a-time host."""
    rng = random.Random(7)
    for trial in range(200):
        q = queues()
        pace = Pace(rng.choice([0.1, 0.5, 1.0]), 10.0, 5.0, 1)
        ids = [f"l{i}" for i in range(12)]
        leases = [lease(x, nb=i * pace.gap_s * rng.random(), pace=pace,
                        prev=None if i == 0 else ids[i - 1]) for i, x in enumerate(ids)]
        arrivals = sorted((rng.random() * 3, x) for x in leases + rng.sample(leases, 3))
        now, waiting, running, last_end, last_dur = 0.0, [], None, None, 0.0
        for when, x in arrivals:
            if q.admit(x, when) is None:
                waiting.append(x)
        steps = 0
        while (waiting or running) and steps < 10_000:
            steps += 1
            if running is not None:
                x, ends = running
                now = max(now, ends)
                dur = rng.random() * 0.2
                q.end(x, now, dur)
                last_end, last_dur, running = now, dur, None
                continue
            verdicts = [(q.wait(x, now), x) for x in waiting]
            go = [x for v, x in verdicts if v == 0.0]
            if go:
                x = go[0]
                if last_end is not None:
                    assert now >= last_end + pace.gap_after(last_dur) - 1e-9, trial
                q.begin(x, now)
                waiting.remove(x)
                running = (x, now + rng.random() * 0.3)
                continue
            waits = [v for v, _ in verdicts if isinstance(v, float)]
            waiting = [x for v, x in verdicts if not isinstance(v, Skip)]
            if not waits:
                break
            now += min(waits)
        assert steps < 10_000
