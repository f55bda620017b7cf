"""The fetch engine: work runs on its own loop, results are collected, room is bounded."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from udfs.fetcher.engine import FetchEngine, Room


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


def test_a_submit_waiting_for_ready_looks_again_only_when_notified():
    """No polling: while nothing frees room, the waiter is not woken (the polling it
    replaces looked every 5 ms); a notify from another thread lets it through."""
    async def work(item):
        return [item]

    engine = FetchEngine(work, capacity=4)
    looks = 0
    ready = False

    def parser_has_room() -> bool:
        nonlocal looks
        looks += 1
        return ready

    async def go():
        nonlocal ready
        waiter = asyncio.ensure_future(engine.submit_when_room("x", parser_has_room))
        await asyncio.sleep(0.3)
        seen = (looks, waiter.done())
        ready = True
        threading.Thread(target=engine.room.notify).start()  # as the parse stage does
        await asyncio.wait_for(waiter, 10)
        return seen

    try:
        assert asyncio.run(go()) == (1, False)
        deadline = time.monotonic() + 10
        got: list = []
        while not got and time.monotonic() < deadline:
            got += engine.drain()
            time.sleep(0.01)
        assert got == ["x"]
    finally:
        engine.close()


def test_a_failure_wakes_a_submit_waiting_for_room_and_is_raised_there():
    release = threading.Event()

    async def work(item):
        while not release.is_set():
            await asyncio.sleep(0.01)
        raise RuntimeError("crash while the engine was full")

    engine = FetchEngine(work, capacity=1)

    async def go():
        assert engine.submit("held")
        waiter = asyncio.ensure_future(engine.submit_when_room("next"))
        await asyncio.sleep(0.05)
        release.set()
        with pytest.raises(RuntimeError, match="crash while"):
            await asyncio.wait_for(waiter, 10)

    try:
        asyncio.run(go())
    finally:
        engine.close()


def test_room_loses_no_notify_between_a_check_and_the_wait():
    """Another thread frees room 2,000 times, each while the waiter may be between its
    check and its wait; the waiter takes every unit (a lost notify would hang it)."""
    room = Room()
    lock = threading.Lock()
    units = 0
    rounds = 2000

    def has_room() -> bool:
        return units > 0

    def free() -> None:
        nonlocal units
        for _ in range(rounds):
            with lock:
                units += 1
            room.notify()
            time.sleep(0)

    async def take_all() -> int:
        nonlocal units
        taken = 0
        while taken < rounds:
            await room.wait(has_room)
            with lock:
                units -= 1
            taken += 1
        return taken

    async def go() -> int:
        freer = threading.Thread(target=free)
        freer.start()
        try:
            return await asyncio.wait_for(take_all(), 30)
        finally:
            freer.join(10)

    assert asyncio.run(go()) == rounds


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


def test_close_before_the_loop_runs_stops_it_and_closes_it():
    class LateEngine(FetchEngine):  # its thread reaches run_forever after close()
        def _run(self) -> None:
            time.sleep(0.2)
            super()._run()

    async def work(item):
        return [item]

    engine = LateEngine(work, capacity=1)
    assert not engine.loop.is_running()
    engine.close()
    engine._thread.join(timeout=5)
    assert not engine._thread.is_alive(), "the loop was left running"
    assert engine.loop.is_closed()
    assert engine.submit("late") and engine.active() == 0  # dropped, as at a task's end
    engine.close()  # twice is harmless
