"""The fetcher's engine: its own event loop, apart from PyFlink's bundles.

PyFlink's Python async operator hands leases to the worker in bundles and ends a
bundle (and so lets a checkpoint through, and the bundle's results out) only once every
call in it has returned. A lease held for its host's turn, or one slow site, would
then hold back every other fetch's completion. So the fetch function only hands each
lease to this engine and returns at once whatever the engine has finished since
(completions, discovered URLs, dead letters): leases flow in and results flow out with
every call, and no bundle waits for a fetch. A tick stream keeps results flowing when
no lease arrives.

What the engine holds is not in Flink's state: when the task fails or stops, the leases
it holds are dropped, unsent or with their results unsent; they expire at the frontier
and are re-let (at-least-once, as the lease timeout already promises), and the
incarnation after never sends a lease issued before it started (udfs/core/backqueue.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import uvloop


class Room:
    """Wakes coroutines, on any thread's loop, that wait for room another thread frees.

    `wait(has_room)` returns once `has_room()` is true; it is checked again after every
    `notify()`, under the same lock, so a notify between a check and the wait is never
    lost. Every waiter wakes on each notify: callers keep the waiters few (the fetch
    function lets one lease at a time wait). It replaces polling: a thousand leases that
    each looked every few milliseconds kept the fetcher's process busy, and its GIL held,
    while they waited."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: list[asyncio.Future] = []

    async def wait(self, has_room: Callable[[], bool]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if has_room():
                    return
                woken = loop.create_future()
                self._waiters.append(woken)
            try:
                await woken
            finally:
                with self._lock:
                    if woken in self._waiters:  # cancelled before any notify
                        self._waiters.remove(woken)

    def notify(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for woken in waiters:
            try:
                woken.get_loop().call_soon_threadsafe(_resolve, woken)
            except RuntimeError:  # its loop is closed: nobody waits there any more
                pass


def _resolve(woken: asyncio.Future) -> None:
    if not woken.done():
        woken.set_result(None)


class FetchEngine:
    """Runs `work(item)` for each submitted item on its own thread and loop, at most
    `capacity` at once; `drain()` returns the results finished so far (each `work` call
    returns a list). An exception in a `work` call is kept and raised by the next
    `check()`: the task fails as if the fetch function itself had raised. `room` is
    notified whenever a `work` call ends (others may notify it too: the parse stage)."""

    def __init__(self, work: Callable[[Any], Awaitable[list]], capacity: int) -> None:
        self.work = work
        self.capacity = capacity
        self.failure: BaseException | None = None
        self._outbox: deque = deque()
        self._active = 0
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task] = set()  # the loop holds tasks weakly
        self.room = Room()
        # libuv's loop (uvloop): the loop's own work per fetch (its selector, transports,
        # timers, handles) in C rather than in Python, under the GIL every fetch shares:
        # about a quarter less client CPU per fetch (bench/bench_fetch_loop.py).
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="fetch-engine", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _one(self, item: Any) -> None:
        try:
            out = await self.work(item)
        except BaseException as exc:  # noqa: BLE001 - handed to the task's thread
            self.failure = self.failure or exc
            out = []
        with self._lock:
            self._outbox.extend(out)
            self._active -= 1
        self.room.notify()

    def submit(self, item: Any) -> bool:
        """Start work on `item` if the engine has room (else False: try again later)."""
        with self._lock:
            if self._active >= self.capacity:
                return False
            self._active += 1
        # The coroutine is made on the loop: one handed over as the engine closes is
        # then never made, rather than made and never awaited.
        try:
            self.loop.call_soon_threadsafe(self._start, item)
        except RuntimeError:  # the engine is closed: dropped, its lease expires, re-let
            with self._lock:
                self._active -= 1
        return True

    def _start(self, item: Any) -> None:
        task = self.loop.create_task(self._one(item))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def submit_when_room(self, item: Any,
                               ready: Callable[[], bool] = lambda: True) -> None:
        """Wait (without blocking the caller's event loop, and without polling) until
        the engine has room and `ready()` holds, then submit `item`. A failed `work`
        call is raised here at once."""
        while True:
            await self.room.wait(lambda: self.failure is not None or
                                 (self.active() < self.capacity and ready()))
            self.check()
            if self.submit(item):
                return

    def drain(self) -> list:
        with self._lock:
            out = list(self._outbox)
            self._outbox.clear()
        return out

    def active(self) -> int:
        with self._lock:
            return self._active

    def check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def close(self) -> None:
        """Stop the loop; work still running is dropped (its leases expire and are re-let)."""
        def stop() -> None:
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.loop.call_soon(self.loop.stop)  # after the cancelled tasks' last step

        if self.loop.is_closed():
            return
        # Queued even when the thread has not reached run_forever yet: the loop then
        # starts, runs it and stops (checking is_running instead left that loop running).
        self.loop.call_soon_threadsafe(stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            # Closed here, not when the collector finds it (uvloop logs an open loop
            # then). A thread's late hand-over to a cancelled task is dropped by asyncio;
            # a submit after this is dropped (see submit).
            self.loop.close()
