"""Flink counters incremented in Python and handed to the JVM in batches.

In thread mode every `counter.inc()` is a call from Python into the JVM, which costs
more than most of the work it counts (the frontier's lag histograms move up to a dozen
buckets per lease). A `CounterBatch` sums the increments in Python and passes each
counter's sum on at most once per `period_s`, when its owner calls `due()`: the
frontier calls it at the end of every call of a host and on every crawl-clock tick,
so its metrics trail the work by at most a second plus the time to the subtask's next
record, timer or tick.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class BatchedCounter:
    """A Flink counter's pending increments (its `inc` and `dec` never call the JVM)."""

    __slots__ = ("counter", "pending")

    def __init__(self, counter: Any) -> None:
        self.counter = counter
        self.pending = 0

    def inc(self, n: int = 1) -> None:
        self.pending += n

    def dec(self, n: int = 1) -> None:
        self.pending -= n


class CounterBatch:
    """The batched counters of one operator instance."""

    def __init__(self, period_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.period_s = period_s
        self.clock = clock
        self.counters: list[BatchedCounter] = []
        self.flushed_at = clock()

    def counter(self, group: Any, name: str) -> BatchedCounter:
        """`group.counter(name)`, batched."""
        batched = BatchedCounter(group.counter(name))
        self.counters.append(batched)
        return batched

    def due(self) -> None:
        """Flush if the last flush is `period_s` old."""
        if self.clock() - self.flushed_at >= self.period_s:
            self.flush()

    def flush(self) -> None:
        for c in self.counters:
            if c.pending:
                n, c.pending = c.pending, 0
                c.counter.inc(n)
        self.flushed_at = self.clock()
