"""Fault injection (udfs/fetcher/faults.py) and the fetcher's replay guard."""

from __future__ import annotations

import time

import pytest

from udfs.config import load_config
from udfs.fetcher.faults import FaultInjector, InjectedCrash, fault_injector, injected


def faults(tmp_path, **kw) -> FaultInjector | None:
    return fault_injector(load_config(env={}, overrides=[
        f"faults.{k}={v}" for k, v in {"marker_dir": str(tmp_path), **kw}.items()])["faults"])


def test_off_by_default():
    assert fault_injector(load_config(env={})["faults"]) is None


def test_crash_after_response_once_per_url_across_instances(tmp_path):
    f = faults(tmp_path, crash_after_response=r"/p/9$")
    f.after_response("http://a.test/p/1")  # no match: no crash
    with pytest.raises(InjectedCrash, match="/p/9"):
        f.after_response("http://a.test/p/9")
    # A restarted task (a new injector on the same marker folder) does not crash again.
    faults(tmp_path, crash_after_response=r"/p/9$").after_response("http://a.test/p/9")
    with pytest.raises(InjectedCrash):
        f.after_response("http://b.test/p/9")  # another URL: its own crash
    assert sorted(u for u, _ in injected(tmp_path, "crash")) == sorted(
        ["http://a.test/p/9", "http://b.test/p/9"])
    assert injected(tmp_path, "drop") == []


def test_drop_completion_once_per_url(tmp_path):
    f = faults(tmp_path, drop_completion=r"/p/7$")
    assert f.drops_completion("http://a.test/p/7")
    assert not f.drops_completion("http://a.test/p/7")  # the re-let lease completes
    assert not f.drops_completion("http://a.test/p/8")
    [(url, at)] = injected(tmp_path, "drop")
    assert url == "http://a.test/p/7" and abs(at - time.time()) < 60


def test_crash_and_drop_need_a_marker_folder():
    cfg = load_config(env={}, overrides=["faults.drop_completion=x"])
    with pytest.raises(ValueError, match="marker_dir"):
        fault_injector(cfg["faults"])


def test_parse_delay_stalls(tmp_path):
    f = faults(tmp_path, parse_delay_s=0.05)
    t = time.monotonic()
    f.stall_parse()
    assert time.monotonic() - t >= 0.05


def test_a_restarted_fetcher_skips_leases_issued_before_it_restarted():
    from udfs.core.backqueue import BackQueues, LeaseTiming, Skip
    from udfs.core.politeness import Pace

    def lease(issued: float) -> LeaseTiming:
        return LeaseTiming(f"l{issued}", "http://h.example", issued, 0.0, 300.0, None, Pace())

    first = BackQueues(float("-inf"), hold_s=5.0, fetch_s=60.0)  # a fresh start
    assert first.admit(lease(1.000), 2.0) is None  # fetch everything
    restarted = BackQueues(1.001, hold_s=5.0, fetch_s=60.0)
    assert restarted.admit(lease(1.000), 2.0) is Skip.REPLAYED  # maybe sent before
    assert restarted.admit(lease(1.001), 2.0) is None  # issued since
