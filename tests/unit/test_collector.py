"""udfs/flink/collector.py: the collector settings of the crawl's Python processes."""

from __future__ import annotations

import gc
import weakref

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


def test_settle_without_freeze_leaves_every_object_to_the_collector(restored_gc):
    gc.set_threshold(700, 7, 9)
    gc.unfreeze()
    alive = [[i] for i in range(10)]
    collector.settle(freeze=False)
    assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, 7, 9)
    assert gc.get_freeze_count() == 0
    assert any(x is alive for x in gc.get_objects())


class _Node:
    other: _Node


def test_a_cycle_is_collected_by_the_allocations_that_follow_settle(restored_gc):
    """No explicit collection: the young generation's own threshold frees the cycle."""
    collector.settle()
    assert gc.isenabled()
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a cycle: only the collector frees it
    gone = weakref.ref(a)
    del a, b
    kept = [[i] for i in range(collector.YOUNG_THRESHOLD * 2)]  # tracked, alive
    assert gone() is None
    assert len(kept) == collector.YOUNG_THRESHOLD * 2
