"""The near-duplicate band stage (udfs/frontier/index.py) on counting stand-ins for
Flink's keyed state: what it flags, what it keeps, and which state calls it makes (each
one a call into the JVM in thread mode)."""

from __future__ import annotations

import pickle
from collections import Counter
from typing import Any

from udfs.core.fingerprints import band_keys, to_signed64
from udfs.frontier.index import NearDuplicateBand, near_key


class Calls:
    def __init__(self) -> None:
        self.key: str | None = None
        self.count: Counter[str] = Counter()


class ValueState:
    def __init__(self, calls: Calls) -> None:
        self.calls, self.data = calls, {}

    def value(self) -> Any:
        self.calls.count["value"] += 1
        return self.data.get(self.calls.key)

    def update(self, v: Any) -> None:
        self.calls.count["update"] += 1
        self.data[self.calls.key] = v


class MapState:
    def __init__(self, calls: Calls) -> None:
        self.calls, self.data = calls, {}

    def _map(self) -> dict:
        return self.data.setdefault(self.calls.key, {})

    def items(self):
        self.calls.count["items"] += 1
        return list(self._map().items())

    def contains(self, k: str) -> bool:
        self.calls.count["contains"] += 1
        return k in self._map()

    def put(self, k: str, v: Any) -> None:
        self.calls.count["put"] += 1
        self._map()[k] = v


class Context:
    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def get_state(self, descriptor) -> ValueState:
        return ValueState(self.calls)

    def get_map_state(self, descriptor) -> MapState:
        return MapState(self.calls)

    def get_metrics_group(self) -> Any:
        raise AssertionError("band 0 keeps no metric")


def run(band: NearDuplicateBand, calls: Calls, url_id: str, fp: int) -> str | None:
    event = {"url_id": url_id, "simhash": to_signed64(fp), "near_duplicate_of": None}
    calls.key = near_key(event, 0)
    (row,) = band.process_element(pickle.dumps(event), None)
    return pickle.loads(row[1])["near_duplicate_of"]


def test_band_flags_near_pages_and_asks_an_empty_bucket_nothing():
    calls = Calls()
    band = NearDuplicateBand(0, max_bucket=2)
    band.open(Context(calls))
    a = 0
    b = a ^ 0b111  # 3 bits from a
    c = b ^ (0b111 << 8)  # 3 from b, 6 from a
    far = 1 << 63  # another bucket of band 0
    assert band_keys(a)[0] == band_keys(b)[0] == band_keys(c)[0] != band_keys(far)[0]

    assert run(band, calls, "a", a) is None
    # The first page of a bucket: its size is read, the page stored, nothing scanned.
    assert calls.count == Counter(value=1, put=1, update=1)
    assert run(band, calls, "far", far) is None
    assert calls.count == Counter(value=2, put=2, update=2)

    assert run(band, calls, "b", b) == "a"
    assert run(band, calls, "c", c) == "b"  # (a: 6 bits away; the bucket is full at 2)
    assert run(band, calls, "a", a) == "b"  # a page again: never its own near duplicate
    # The buckets were met once each: never scanned or asked for a URL in the state.
    assert calls.count == Counter(value=2, put=3, update=3)  # a, far, b: c not kept
    assert band.seen.data == {near_key({"simhash": 0, "url_id": "a"}, 0): {"a": 0, "b": b},
                              near_key({"simhash": to_signed64(far), "url_id": "far"}, 0):
                                  {"far": to_signed64(far)}}
    assert band.size.data == {near_key({"simhash": 0, "url_id": "a"}, 0): 2,
                              near_key({"simhash": to_signed64(far), "url_id": "far"}, 0): 1}


def test_a_restored_band_reads_a_bucket_from_state_once():
    calls = Calls()
    band = NearDuplicateBand(0, max_bucket=2)
    band.open(Context(calls))
    a = 0
    b, c, d, e = a ^ 0b1, a ^ 0b11, a ^ 0b111, a ^ 0b1111  # all in a's bucket of band 0
    assert run(band, calls, "a", a) is None
    assert run(band, calls, "b", b) == "a"
    assert run(band, calls, "c", c) == "a"  # the bucket is full (2): c is not kept
    assert calls.count == Counter(value=1, put=2, update=2)

    # A restored subtask (the same keyed state, nothing in memory) reads the bucket
    # once, and still keeps no more than the bucket holds.
    restored = NearDuplicateBand(0, max_bucket=2)
    restored.open(Context(calls))
    restored.seen, restored.size = band.seen, band.size
    assert run(restored, calls, "d", d) == "a"
    assert run(restored, calls, "e", e) == "b"  # (a: 4 bits away)
    assert calls.count == Counter(value=2, items=1, put=2, update=2)
    assert set(band.seen.data[near_key({"simhash": 0, "url_id": "a"}, 0)]) == {"a", "b"}


def test_buckets_past_the_memory_bound_are_read_from_state_and_stay_right(monkeypatch):
    import udfs.frontier.index as index

    monkeypatch.setattr(index, "_MAX_CACHED", 2)
    calls = Calls()
    band = NearDuplicateBand(0, max_bucket=3)
    band.open(Context(calls))
    a, far = 0, 1 << 63
    assert run(band, calls, "a", a) is None  # in memory: 1 fingerprint
    assert run(band, calls, "far", far) is None  # in memory: 2
    assert run(band, calls, "far2", far ^ 1) == "far"  # 3: far's bucket leaves memory
    assert band.cached == 1 and list(band.buckets) == [near_key(
        {"simhash": 0, "url_id": "a"}, 0)]
    before = calls.count["items"]
    assert run(band, calls, "far3", far ^ 0b11) == "far"  # read from state again
    assert calls.count["items"] == before + 1
    assert set(band.seen.data[near_key({"simhash": to_signed64(far), "url_id": "x"}, 0)]) \
        == {"far", "far2", "far3"}
    assert run(band, calls, "b", a ^ 0b1) == "a"  # a's bucket stays current in memory
    assert band.buckets[near_key({"simhash": 0, "url_id": "a"}, 0)] == {"a": 0, "b": 1}
    assert band.cached == 2
