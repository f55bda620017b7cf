"""The near-duplicate band stage (udfs/frontier/index.py) on counting stand-ins for
Flink's keyed state: what it flags, what it keeps, and which state calls it makes (each
one a call into the JVM in thread mode)."""

from __future__ import annotations

import pickle
from collections import Counter
from typing import Any

import pytest

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

    def clear(self) -> None:
        self.calls.count["clear"] += 1
        self.data.pop(self.calls.key, None)


class MapState:
    def __init__(self, calls: Calls) -> None:
        self.calls, self.data = calls, {}

    def _map(self) -> dict:
        return self.data.setdefault(self.calls.key, {})

    def items(self):
        self.calls.count["items"] += 1
        return list(self._map().items())

    def put(self, k: str, v: Any) -> None:
        self.calls.count["put"] += 1
        self._map()[k] = v

    def clear(self) -> None:
        self.calls.count["clear"] += 1
        self.data.pop(self.calls.key, None)


class Context:
    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def get_state(self, descriptor) -> ValueState:
        return ValueState(self.calls)

    def get_map_state(self, descriptor) -> MapState:
        return MapState(self.calls)

    def get_metrics_group(self) -> Any:
        raise AssertionError("band 0 keeps no metric")


def uid(name: str) -> str:
    """A url_id (16 hex digits) per name."""
    return name.encode().hex().rjust(16, "0")


def packed(*entries: tuple[str, int]) -> bytes:
    """A bucket as state keeps it: each fingerprint (little-endian), then its url_id's
    8 bytes."""
    return b"".join(fp.to_bytes(8, "little") + bytes.fromhex(uid(name))
                    for name, fp in entries)


def key_of(fp: int) -> str:
    return near_key({"simhash": to_signed64(fp), "url_id": uid("x")}, 0)


def run(band: NearDuplicateBand, calls: Calls, name: str, fp: int) -> str | None:
    event = {"url_id": uid(name), "simhash": to_signed64(fp), "near_duplicate_of": None}
    calls.key = near_key(event, 0)
    (row,) = band.process_element(pickle.dumps(event), None)
    near = pickle.loads(row[1])["near_duplicate_of"]
    if near is None:
        return None
    names = {uid(n): n for n in ("a", "b", "c", "d", "e", "far", "far2", "far3")}
    return names[near]


def test_band_flags_near_pages_and_reads_a_bucket_once():
    calls = Calls()
    band = NearDuplicateBand(0, max_bucket=2)
    band.open(Context(calls))
    a = 0
    b = a ^ 0b111  # 3 bits from a
    c = b ^ (0b111 << 8)  # 3 from b, 6 from a
    far = 1 << 63  # another bucket of band 0
    assert band_keys(a)[0] == band_keys(b)[0] == band_keys(c)[0] != band_keys(far)[0]

    assert run(band, calls, "a", a) is None
    # The first page of a bucket: the bucket is read (and the layout before asked),
    # the page stored, nothing compared.
    assert calls.count == Counter(value=2, update=1)
    assert run(band, calls, "far", far) is None
    assert calls.count == Counter(value=4, update=2)

    assert run(band, calls, "b", b) == "a"
    assert run(band, calls, "c", c) == "b"  # (a: 6 bits away; the bucket is full at 2)
    assert run(band, calls, "a", a) == "b"  # a page again: never its own near duplicate
    # Each bucket was read once; a write per fingerprint kept (a, far, b: c not kept).
    assert calls.count == Counter(value=4, update=3)
    assert band.packed.data == {key_of(a): packed(("a", a), ("b", b)),
                                key_of(far): packed(("far", far))}


def test_a_restored_band_reads_a_bucket_from_state_once():
    calls = Calls()
    band = NearDuplicateBand(0, max_bucket=2)
    band.open(Context(calls))
    a = 0
    b, c, d, e = a ^ 0b1, a ^ 0b11, a ^ 0b111, a ^ 0b1111  # all in a's bucket of band 0
    assert run(band, calls, "a", a) is None
    assert run(band, calls, "b", b) == "a"
    assert run(band, calls, "c", c) == "a"  # the bucket is full (2): c is not kept
    assert calls.count == Counter(value=2, update=2)

    # A restored subtask (the same keyed state, nothing in memory) reads the bucket
    # once, and still keeps no more than the bucket holds.
    restored = NearDuplicateBand(0, max_bucket=2)
    restored.open(Context(calls))
    restored.packed = band.packed
    assert run(restored, calls, "d", d) == "a"
    assert run(restored, calls, "e", e) == "b"  # (a: 4 bits away)
    assert calls.count == Counter(value=3, update=2)
    assert band.packed.data[key_of(a)] == packed(("a", a), ("b", b))


def test_buckets_past_the_memory_bound_are_read_from_state_and_stay_right(monkeypatch):
    import udfs.frontier.index as index

    monkeypatch.setattr(index, "_MAX_CACHED_BYTES", 32)  # two fingerprints
    calls = Calls()
    band = NearDuplicateBand(0, max_bucket=3)
    band.open(Context(calls))
    a, far = 0, 1 << 63
    assert run(band, calls, "a", a) is None  # in memory: 1 fingerprint
    assert run(band, calls, "far", far) is None  # in memory: 2
    assert run(band, calls, "far2", far ^ 1) == "far"  # 3: far's bucket leaves memory
    assert band.cached == 16 and list(band.buckets) == [key_of(a)]
    before = calls.count["value"]
    assert run(band, calls, "far3", far ^ 0b11) == "far"  # read from state again
    assert calls.count["value"] == before + 1
    assert band.packed.data[key_of(far)] == packed(("far", far), ("far2", far ^ 1),
                                                   ("far3", far ^ 0b11))
    assert run(band, calls, "b", a ^ 0b1) == "a"  # a's bucket stays current in memory
    assert band.buckets[key_of(a)] == packed(("a", a), ("b", 1))
    assert band.cached == 32


def test_a_bucket_in_the_layout_before_is_packed_and_moved_on_first_read():
    # A savepoint of a build that kept a map entry per fingerprint, and its size.
    calls = Calls()
    band = NearDuplicateBand(0, max_bucket=3)
    band.open(Context(calls))
    a = 0
    band.seen.data[key_of(a)] = {uid("a"): to_signed64(a), uid("far"): to_signed64(-1)}
    band.size.data[key_of(a)] = 2
    assert run(band, calls, "b", a ^ 0b11) == "a"
    assert band.packed.data[key_of(a)] == packed(("a", a), ("far", (1 << 64) - 1),
                                                 ("b", 0b11))
    assert key_of(a) not in band.seen.data and key_of(a) not in band.size.data
    assert calls.count["items"] == 1
    assert run(band, calls, "c", a ^ 0b111) == "a"  # from memory now
    assert calls.count["items"] == 1


def test_an_event_without_a_url_id_of_16_hex_digits_is_refused():
    band = NearDuplicateBand(0)
    band.open(Context(Calls()))
    event = {"url_id": "a", "simhash": 0, "near_duplicate_of": None}
    with pytest.raises(ValueError, match="16 hex digits"):
        list(band.process_element(pickle.dumps(event), None))


def test_a_bucket_is_scanned_alike_in_python_and_by_numpy(monkeypatch):
    import random

    import udfs.frontier.index as index

    rng = random.Random(5)
    kinds = set()
    for n in (0, 1, 2, 47, 48, 49, 300):
        fp = rng.getrandbits(64)
        # Near and far fingerprints, the page's own id among them now and then.
        entries = [(fp ^ (1 << rng.randrange(64)) ^ (1 << rng.randrange(64))
                    if rng.random() < 0.05 else rng.getrandbits(64), rng.getrandbits(64))
                   for _ in range(n)]
        own = entries[n // 2][1] if n and rng.random() < 0.5 else rng.getrandbits(64)
        bucket = b"".join(f.to_bytes(8, "little") + w.to_bytes(8, "little")
                          for f, w in entries)
        expected = (next((w for f, w in entries
                          if w != own and (f ^ fp).bit_count() <= 3), None),
                    any(w == own for _f, w in entries))
        kinds.add(expected[0] is not None)
        for threshold in (0, 10_000):  # NumPy for every bucket, then Python for every one
            monkeypatch.setattr(index, "_SCAN_IN_PYTHON", threshold)
            assert index._scan(bucket, fp, own, 3, True) == expected
            assert index._scan(bucket, fp, own, 3, False) == (None, expected[1])
    assert kinds == {True, False}  # buckets with a near fingerprint and without
