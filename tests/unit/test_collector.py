"""udfs/flink/collector.py: the collector settings of the crawl's Python processes."""

from __future__ import annotations

import gc

import pytest

from udfs.flink import collector


@pytest.fixture
def restored_gc():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_settle_freezes_what_is_alive_and_raises_only_the_young_threshold(restored_gc):
    gc.set_threshold(700, 7, 9)
    gc.unfreeze()
    alive = [[i] for i in range(1000)]  # tracked containers, alive across the call
    collector.settle()
    assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, 7, 9)
    assert gc.get_freeze_count() >= len(alive)
    assert not any(x is alive for x in gc.get_objects())  # frozen: no generation holds it


def test_cycles_are_still_collected_after_settle(restored_gc):
    import weakref

    collector.settle()

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the collector frees it
    gone = weakref.ref(a)
    del a, b
    gc.collect(0)
    assert gone() is None
