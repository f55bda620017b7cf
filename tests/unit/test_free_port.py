"""The listening ports `crawl run` and the tests pick for jobs: never one picked before in
this process, nor one the configuration names (a job binds its port only as it starts)."""

from __future__ import annotations

import random
import socket

from crawler import run
from crawler.run import LISTEN_PORTS, free_port


def test_no_port_is_handed_out_twice_and_avoided_ports_are_not_handed_out(monkeypatch):
    # A range of 6 ports, one of them avoided and one bound: every pick differs, and once
    # the range is used up the pick fails instead of handing one out again.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        base = taken.getsockname()[1]
    ports = range(base, base + 6)
    monkeypatch.setattr(run, "LISTEN_PORTS", ports)
    monkeypatch.setattr(run, "_PICKED", set())
    monkeypatch.setattr(random, "randrange", lambda n: 0)  # the same start every time
    with socket.socket() as bound:
        try:
            bound.bind(("127.0.0.1", base + 1))
        except OSError:  # (taken by someone else meanwhile: busy either way)
            pass
        picks = []
        try:
            for _ in range(6):
                picks.append(free_port(avoid={base + 2}))
        except OSError as exc:
            assert "no free port" in str(exc)
    assert len(picks) == len(set(picks)) and picks
    assert base + 1 not in picks and base + 2 not in picks
    assert set(picks) <= set(ports)


def test_the_range_is_below_the_ephemeral_ports():
    assert LISTEN_PORTS.stop <= 32768
