"""IP-level politeness on a virtual clock: the gate, the back queue's cancel, the oracle."""

from __future__ import annotations

import pytest

from crawler.testkit.oracle import Request, address_violations
from udfs.core.backqueue import BackQueues, LeaseTiming
from udfs.core.ipgate import IpGate, IpPolicy
from udfs.core.politeness import Pace

pytestmark = pytest.mark.unit
IP = "203.0.113.7"


def test_the_gap_runs_from_the_last_end_and_start_and_other_addresses_are_free():
    gate = IpGate(IpPolicy(min_gap_s=0.5))
    assert gate.wait(IP, 10.0) == 0.0
    gate.begin(IP, 10.0)
    assert gate.wait(IP, 10.2) == pytest.approx(0.3)  # from the start
    assert gate.wait("198.51.100.1", 10.2) == 0.0
    gate.end(IP, 10.3)
    assert gate.wait(IP, 10.5) == pytest.approx(0.3)  # from the end
    assert gate.wait(IP, 10.8) == 0.0


def test_the_in_flight_limit_waits_for_an_end():
    gate = IpGate(IpPolicy(max_in_flight=2))
    gate.begin(IP, 0.0)
    gate.begin(IP, 0.0)
    assert gate.wait(IP, 1.0) is None  # ask again when one ends
    gate.end(IP, 1.5)
    assert gate.wait(IP, 1.5) == 0.0


def test_off_by_default_and_idle_addresses_are_forgotten_not_busy_ones():
    assert not IpPolicy().on and IpPolicy(min_gap_s=0.1).on and IpPolicy(max_in_flight=1).on
    gate = IpGate(IpPolicy(min_gap_s=1.0))
    gate.begin("a", 0.0)
    gate.end("a", 0.5)
    gate.begin("b", 0.0)
    gate.forget_idle(100.0, 10.0)
    assert set(gate.addresses) == {"b"}
    with pytest.raises(ValueError):
        gate.forget_idle(100.0, 0.5)  # shorter than the gap: a forgotten address would
        # be free too soon


def test_a_cancelled_request_frees_the_hosts_place_in_flight_keeping_the_gap():
    queues = BackQueues(float("-inf"), hold_s=5.0, fetch_s=1.0)
    lease = LeaseTiming("L1", "http://a.test", 0.0, 0.0, 100.0, None, Pace(gap_s=2.0))
    assert queues.admit(lease, 0.0) is None and queues.wait(lease, 0.0) == 0.0
    queues.begin(lease, 0.0)
    queues.cancel(lease, 0.5)
    follower = LeaseTiming("L2", "http://a.test", 0.0, 0.0, 100.0, "L1", Pace(gap_s=2.0))
    assert queues.admit(follower, 0.5) is None
    # Not in flight any more (no None: no wait for an end), and the gap begin set is
    # kept: erring on the polite side.
    assert queues.wait(follower, 0.5) == pytest.approx(1.5)
    assert queues.slots["http://a.test"].in_flight == 0


def test_the_oracle_counts_per_address_gaps_and_overlaps():
    def req(host, start, end):
        return Request(host, False, "/", start, end, 200)

    fine = [req("http://a.test", 0.0, 0.1), req("http://b.test", 0.35, 0.4),
            req("http://c.test", 0.65, 0.7)]
    assert address_violations(fine, 0.25, 1) == {"ip_gap": 0, "ip_concurrency": 0}
    # b starts inside a (one at once, broken); c starts 0.2 s after b ended (gap broken).
    bad = [req("http://a.test", 0.0, 0.4), req("http://b.test", 0.1, 0.2),
           req("http://c.test", 0.6, 0.7)]
    assert address_violations(bad, 0.25, 1) == {"ip_gap": 1, "ip_concurrency": 1}
    assert address_violations(bad, 0.0, 0) == {"ip_gap": 0, "ip_concurrency": 0}
