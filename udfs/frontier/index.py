"""The index stages of the frontier job: exact duplicates by body SHA-256, then near
duplicates by SimHash bands, before an index event is published.

Both are keyed functions on pickled index events (dicts, as frontier.pipeline.index_event
makes them), keyed in the JVM by the key each stage puts before the event
(udfs.flink.runtime.keyed_by_first): a function gets the event alone. The last band
encodes the event for the index topic.
"""

from __future__ import annotations

import pickle
import struct

import numpy as np
from pyflink.common import Row, Types
from pyflink.datastream import KeyedProcessFunction
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from udfs.core.fingerprints import band_keys, from_signed64
from udfs.wire.avro import registry
from udfs.wire.records import INDEX, IndexEvent


class ContentDedup(KeyedProcessFunction):
    """Keyed by body SHA-256: the first URL seen with a body owns it; later URLs with
    byte-identical bodies are marked duplicate_of it (their own metadata is kept)."""

    def open(self, ctx) -> None:
        self.first = ctx.get_state(ValueStateDescriptor("first_url_id", Types.STRING()))
        group = ctx.get_metrics_group()
        self.events = group.counter("index_events_total")
        self.duplicates = group.counter("exact_duplicates_total")

    def process_element(self, value, ctx):
        event: IndexEvent = pickle.loads(value)
        owner = self.first.value()
        self.events.inc()
        if owner is None:
            self.first.update(event["url_id"])
        elif owner != event["url_id"]:
            event["duplicate_of"] = owner
            self.duplicates.inc()
        yield Row(near_key(event, 0), pickle.dumps(event))


def near_key(event: IndexEvent, band: int, k: int = 3) -> str:
    """The key of an index event for near-duplicate band `band` (its band value), or its
    url_id when it has no SimHash (then it passes the band unchanged)."""
    if event["simhash"] is None:
        return "u:" + event["url_id"]
    return f"b{band}:{band_keys(from_signed64(event['simhash']), k)[band][1]}"


# A bucket is one value in keyed state: its fingerprints packed, 16 bytes each (the
# SimHash as a little-endian word, then the url_id's 8 bytes), in the order they came.
# One read brings a whole bucket into Python, where it is compared at once (by NumPy
# when large). A map entry per fingerprint, as before, cost a call into the JVM per
# entry read: py-spy put those reads at 13% of a 200-site crawl's frontier samples after
# five minutes, with the band stages at 1.2 ms a page against 0.3 in the first three.
# Each new fingerprint rewrites its bucket: up to near_duplicate_bucket x 16 bytes (16 KB
# at the default 1,000); a full bucket is no longer written.
_ENTRY_BYTES = 16
# Bytes of buckets a band subtask keeps in memory (written through to its keyed state,
# which only it writes): 16 MiB, about a million fingerprints, 64 MiB for the four bands
# of a frontier slot. Past it, a bucket not in memory is read from state on each event
# that falls in it (one read).
_MAX_CACHED_BYTES = 16 << 20


def _id_word(url_id: str) -> int:
    """A url_id (16 hex digits, fingerprints.url_id) as the word a bucket keeps."""
    if len(url_id) != 16:
        raise ValueError(f"a url_id is 16 hex digits, got {url_id!r}")
    return int.from_bytes(bytes.fromhex(url_id), "little")


def _url_id(word: int) -> str:
    return word.to_bytes(8, "little").hex()


def _entry(fp: int, id_word: int) -> bytes:
    """One fingerprint as a bucket keeps it."""
    return fp.to_bytes(8, "little") + id_word.to_bytes(8, "little")


# Buckets up to this many fingerprints are scanned in Python, larger ones by NumPy: its
# calls cost about 10 us a bucket however small, a Python loop 0.15 us a fingerprint.
_SCAN_IN_PYTHON = 48


def _scan(bucket: bytes, fp: int, own: int, k: int, find: bool) -> tuple[int | None, bool]:
    """(the first fingerprint's url_id word within distance k of `fp` whose id is not
    `own`, if `find`; whether `own` is in the bucket)."""
    if len(bucket) <= _SCAN_IN_PYTHON * _ENTRY_BYTES:
        near, has = None, False
        for other, word in struct.iter_unpack("<QQ", bucket):
            if word == own:
                has = True
            elif find and near is None and (other ^ fp).bit_count() <= k:
                near = word
        return near, has
    words = np.frombuffer(bucket, dtype="<u8")
    fps, ids = words[0::2], words[1::2]
    found = None
    if find:
        hits = np.flatnonzero((np.bitwise_count(fps ^ np.uint64(fp)) <= k) & (ids != own))
        if len(hits):
            found = int(ids[hits[0]])
    return found, bool((ids == own).any())


class NearDuplicateBand(KeyedProcessFunction):
    """One SimHash band (Manku et al.): keyed by the band's value, it remembers the
    fingerprints seen with that value and flags the event near_duplicate_of the first
    within Hamming distance k. The k + 1 bands run one after another; together they see
    every pair within distance k. The flag never drops links; the frontier reads it back
    from the index topic and spaces out the page's revisits (HostFrontier.duplicate)."""

    def __init__(self, band: int, k: int = 3, max_bucket: int = 1000) -> None:
        # k, and so the number of bands, is fixed: each band is an operator with its own
        # uid, so another k is another job graph than the one a savepoint maps onto.
        # max_bucket: frontier.near_duplicate_bucket.
        self.band, self.k, self.max_bucket = band, k, max_bucket

    def open(self, ctx) -> None:
        self.reg = registry()
        self.packed = ctx.get_state(ValueStateDescriptor("bucket",
                                                         Types.PICKLED_BYTE_ARRAY()))
        # The layout of builds before the packed bucket (a map url_id -> SimHash and its
        # size), still declared so that their savepoints restore: a bucket found there
        # is packed and moved on first read.
        self.seen = ctx.get_map_state(MapStateDescriptor("fingerprints", Types.STRING(),
                                                         Types.LONG()))
        self.size = ctx.get_state(ValueStateDescriptor("size", Types.INT()))
        # Buckets this subtask has read or written, packed as in state: only this subtask
        # writes its keys, so a bucket kept here stays current (every write goes to both);
        # a restored subtask starts empty.
        self.buckets: dict[str, bytes] = {}
        self.cached = 0  # bytes in `buckets`
        # Counted once, where an event leaves the last band.
        self.near = ctx.get_metrics_group().counter("near_duplicates_total") \
            if self.band == self.k else None

    def _bucket(self, key: str) -> bytes:
        """The bucket of the current key, from memory or else from state (kept in memory
        while there is room)."""
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.packed.value()
            if bucket is None:
                bucket = self._moved_from_map()
            if self.cached + len(bucket) <= _MAX_CACHED_BYTES:
                self.buckets[key] = bucket
                self.cached += len(bucket)
        return bucket

    def _moved_from_map(self) -> bytes:
        """The current key's bucket in the layout before (empty if none), packed and
        moved into the packed value."""
        if not self.size.value():
            return b""
        entries = list(self.seen.items())
        bucket = b"".join(_entry(from_signed64(fp), _id_word(url_id))
                          for url_id, fp in entries)
        self.packed.update(bucket)
        self.seen.clear()
        self.size.clear()
        return bucket

    def process_element(self, value, ctx):
        event: IndexEvent = pickle.loads(value)
        # The key the stage before routed it by (cheaper than asking the JVM for it).
        key = near_key(event, self.band, self.k)
        if event["simhash"] is not None and key.startswith("b"):
            fp = from_signed64(event["simhash"])
            own = _id_word(event["url_id"])
            bucket = self._bucket(key)
            near, has = _scan(bucket, fp, own, self.k, event["near_duplicate_of"] is None)
            if near is not None:
                event["near_duplicate_of"] = _url_id(near)
            if len(bucket) < self.max_bucket * _ENTRY_BYTES and not has:
                grown = bucket + _entry(fp, own)
                self.packed.update(grown)
                if self.buckets.get(key) is bucket:
                    if self.cached + _ENTRY_BYTES <= _MAX_CACHED_BYTES:
                        self.buckets[key] = grown
                        self.cached += _ENTRY_BYTES
                    else:  # no room to grow: read from state again
                        del self.buckets[key]
                        self.cached -= len(bucket)
        if self.band < self.k:
            yield Row(near_key(event, self.band + 1, self.k), pickle.dumps(event))
        else:
            if event["near_duplicate_of"] is not None and self.near is not None:
                self.near.inc()
            yield Row(event["url_id"].encode(), INDEX.encode(self.reg, event))
