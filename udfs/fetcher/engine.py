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


class FetchEngine:
    """Runs `work(item)` for each submitted item on its own thread and loop, at most
    `capacity` at once; `drain()` returns the results finished so far (each `work` call
    returns a list). An exception in a `work` call is kept and raised by the next
    `check()`: the task fails as if the fetch function itself had raised."""

    def __init__(self, work: Callable[[Any], Awaitable[list]], capacity: int) -> None:
        self.work = work
        self.capacity = capacity
        self.failure: BaseException | None = None
        self._outbox: deque = deque()
        self._active = 0
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task] = set()  # the loop holds tasks weakly
        self.loop = asyncio.new_event_loop()
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

    def submit(self, item: Any) -> bool:
        """Start work on `item` if the engine has room (else False: try again later)."""
        with self._lock:
            if self._active >= self.capacity:
                return False
            self._active += 1
        # The coroutine is made on the loop: one handed over as the engine closes is
        # then never made, rather than made and never awaited.
        self.loop.call_soon_threadsafe(self._start, item)
        return True

    def _start(self, item: Any) -> None:
        task = self.loop.create_task(self._one(item))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def submit_when_room(self, item: Any, poll_s: float = 0.005) -> None:
        """Wait (without blocking the caller's event loop) until the engine has room."""
        while not self.submit(item):
            self.check()
            await asyncio.sleep(poll_s)

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

        if self.loop.is_running():
            self.loop.call_soon_threadsafe(stop)
            self._thread.join(timeout=5)
