"""The index stages of the frontier job: exact duplicates by body SHA-256, then near
duplicates by SimHash bands, before an index event is published.

Both are keyed functions on pickled index events (dicts, as frontier.pipeline.index_event
makes them); the last band encodes the event for the index topic.
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

    def process_element(self, row, ctx):
        event: IndexEvent = pickle.loads(row[1])
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


# Band values whose bucket size a band subtask keeps in memory (a band of k = 3 has
# 65,536 values; more only for a smaller k, whose bands are wider).
_MAX_SIZES = 1 << 17


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
        self.size = ctx.get_state(ValueStateDescriptor("size", Types.INT()))
        # `size` of each band value this subtask has read or written: each read is a call
        # into the JVM and a state-backend get, and most buckets are seen again. Only
        # this subtask writes its keys, and a restored one starts with nothing here.
        # A band value has 64 / (k + 1) bits (16 for k = 3): a bounded dict.
        self.sizes: dict[str, int] = {}
        # Counted once, where an event leaves the last band.
        self.near = ctx.get_metrics_group().counter("near_duplicates_total") \
            if self.band == self.k else None

    def process_element(self, row, ctx):
        event: IndexEvent = pickle.loads(row[1])
        if event["simhash"] is not None and row[0].startswith("b"):
            fp = from_signed64(event["simhash"])
            # `size` counts what `seen` holds (both change together): an empty bucket, the
            # usual case, is neither scanned nor asked for the URL (each a call into the
            # JVM in thread mode).
            size = self.sizes.get(row[0])
            if size is None:
                size = self.size.value() or 0
            if size and event["near_duplicate_of"] is None:
                for other_id, other in self.seen.items():
                    if other_id != event["url_id"] and hamming(fp, from_signed64(other)) <= \
                            self.k:
                        event["near_duplicate_of"] = other_id
                        break
            if size < self.max_bucket and not (size and self.seen.contains(event["url_id"])):
                self.seen.put(event["url_id"], event["simhash"])
                size += 1
                self.size.update(size)
            if row[0] in self.sizes or len(self.sizes) < _MAX_SIZES:  # never left stale
                self.sizes[row[0]] = size
        if self.band < self.k:
            yield Row(near_key(event, self.band + 1, self.k), pickle.dumps(event))
        else:
            if event["near_duplicate_of"] is not None and self.near is not None:
                self.near.inc()
            yield Row(event["url_id"].encode(), INDEX.encode(self.reg, event))
