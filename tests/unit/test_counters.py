"""Batched Flink counters (udfs/flink/counters.py): increments summed in Python, handed
to the JVM's counter at most once per period, none lost."""

from __future__ import annotations

from udfs.flink.counters import CounterBatch


class JvmCounter:
    """Stands for a Flink counter: records every call into the JVM."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def inc(self, n: int = 1) -> None:
        self.calls.append(n)


class Group:
    def __init__(self) -> None:
        self.made: dict[str, JvmCounter] = {}

    def counter(self, name: str) -> JvmCounter:
        return self.made.setdefault(name, JvmCounter())


def test_increments_reach_the_counter_once_per_period_and_none_is_lost():
    now = [100.0]
    batch = CounterBatch(period_s=1.0, clock=lambda: now[0])
    group = Group()
    leases, size = batch.counter(group, "leases"), batch.counter(group, "size")
    for _ in range(500):
        leases.inc()
    size.inc(7)
    size.dec(3)
    batch.due()
    assert group.made["leases"].calls == [] and group.made["size"].calls == []
    now[0] += 0.999
    batch.due()
    assert group.made["leases"].calls == []
    now[0] += 0.001
    batch.due()
    assert group.made["leases"].calls == [500] and group.made["size"].calls == [4]
    leases.inc(2)
    now[0] += 5.0
    batch.due()
    batch.due()  # nothing pending: no call
    assert group.made["leases"].calls == [500, 2] and group.made["size"].calls == [4]
    leases.inc()
    batch.flush()  # the operator's close: whatever is pending, at once
    assert group.made["leases"].calls == [500, 2, 1]
