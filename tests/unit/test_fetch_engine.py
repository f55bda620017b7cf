"""The fetch engine: work runs on its own loop, results are collected, room is bounded."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from udfs.fetcher.engine import FetchEngine


def test_results_come_back_by_drain_and_room_is_bounded():
    held = threading.Event()  # no work ends before the room check (else "fast" may free it)

    async def work(item):
        while not held.is_set():
            await asyncio.sleep(0.005)
        if item == "slow":
            await asyncio.sleep(0.3)
        return [f"done {item}"]

    engine = FetchEngine(work, capacity=2)
    try:
        assert engine.submit("slow") and engine.submit("fast")
        assert not engine.submit("third")  # full: the caller waits for room
        held.set()
        deadline = time.monotonic() + 10  # generous: a loaded machine (CI) is slow
        got = []
        while len(got) < 2 and time.monotonic() < deadline:
            got += engine.drain()
            time.sleep(0.01)
        assert got == ["done fast", "done slow"]  # a slow one holds back nothing else
        assert engine.active() == 0 and engine.submit("third")
    finally:
        engine.close()


def test_submit_when_room_waits_without_blocking_its_loop():
    async def work(item):
        await asyncio.sleep(0.05)
        return [item]

    engine = FetchEngine(work, capacity=1)

    async def go():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        t = asyncio.ensure_future(ticker())
        for i in range(4):
            await engine.submit_when_room(i)
        t.cancel()
        return ticks

    try:
        assert asyncio.run(go()) > 5  # the caller's loop kept running while it waited
    finally:
        engine.close()


def test_a_failure_in_work_is_raised_by_the_next_check():
    async def work(item):
        raise RuntimeError("crash after the response")

    engine = FetchEngine(work, capacity=4)
    try:
        engine.submit("x")
        deadline = time.monotonic() + 2
        while engine.active() and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(RuntimeError, match="crash"):
            engine.check()
        assert engine.drain() == []
    finally:
        engine.close()


def test_close_drops_work_in_progress():
    async def work(item):
        await asyncio.sleep(30)
        return [item]

    engine = FetchEngine(work, capacity=4)
    engine.submit("held")
    time.sleep(0.05)  # under way
    start = time.monotonic()
    engine.close()
    assert time.monotonic() - start < 5 and engine.drain() == []
