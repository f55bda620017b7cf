"""The index stages of the frontier job: exact duplicates by body SHA-256, then near
duplicates by SimHash bands, before an index event is published.

Both are keyed functions on pickled index events (dicts, as frontier.pipeline.index_event
makes them), keyed in the JVM by the key each stage puts before the event
(udfs.flink.runtime.keyed_by_first): a function gets the event alone. The last band
encodes the event for the index topic.
"""

from __future__ import annotations

import pickle

from pyflink.common import Row, Types
from pyflink.datastream import KeyedProcessFunction
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from udfs.core.fingerprints import band_keys, from_signed64, hamming
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


# Fingerprints a band subtask keeps in memory with their buckets (about 270 bytes each,
# tracemalloc: 18 MB, 70 MB for the four bands of a frontier slot): enough for a crawl
# of some 65,000 pages a band subtask; past it, a bucket not in memory is read from
# state on each event that falls in it.
_MAX_CACHED = 1 << 16


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
        self.seen = ctx.get_map_state(MapStateDescriptor("fingerprints", Types.STRING(),
                                                         Types.LONG()))
        # The number of fingerprints in `seen`: read when a bucket is first met, so that
        # an empty bucket (the usual case) is not asked for its entries.
        self.size = ctx.get_state(ValueStateDescriptor("size", Types.INT()))
        # Buckets this subtask has read or written, whole ({url_id: simhash}, as `seen`
        # holds them): each read of `seen` is a call into the JVM in thread mode, and an
        # entry another. Only this subtask writes its keys, so a bucket kept here stays
        # current (every write below goes to both); a restored subtask starts empty.
        self.buckets: dict[str, dict[str, int]] = {}
        self.cached = 0  # fingerprints in `buckets`
        # Counted once, where an event leaves the last band.
        self.near = ctx.get_metrics_group().counter("near_duplicates_total") \
            if self.band == self.k else None

    def _bucket(self, key: str) -> dict[str, int]:
        """The bucket of the current key, from memory or else from state (kept in memory
        while there is room)."""
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = dict(self.seen.items()) if self.size.value() else {}
            if self.cached + len(bucket) <= _MAX_CACHED:
                self.buckets[key] = bucket
                self.cached += len(bucket)
        return bucket

    def process_element(self, value, ctx):
        event: IndexEvent = pickle.loads(value)
        # The key the stage before routed it by (cheaper than asking the JVM for it).
        key = near_key(event, self.band, self.k)
        if event["simhash"] is not None and key.startswith("b"):
            fp = from_signed64(event["simhash"])
            bucket = self._bucket(key)
            url_id = event["url_id"]
            if event["near_duplicate_of"] is None:
                for other_id, other in bucket.items():
                    if other_id != url_id and hamming(fp, from_signed64(other)) <= self.k:
                        event["near_duplicate_of"] = other_id
                        break
            if len(bucket) < self.max_bucket and url_id not in bucket:
                self.seen.put(url_id, event["simhash"])
                self.size.update(len(bucket) + 1)
                bucket[url_id] = event["simhash"]
                if self.buckets.get(key) is bucket:
                    self.cached += 1
                    if self.cached > _MAX_CACHED:  # no room to grow: read from state again
                        del self.buckets[key]
                        self.cached -= len(bucket)
        if self.band < self.k:
            yield Row(near_key(event, self.band + 1, self.k), pickle.dumps(event))
        else:
            if event["near_duplicate_of"] is not None and self.near is not None:
                self.near.inc()
            yield Row(event["url_id"].encode(), INDEX.encode(self.reg, event))
