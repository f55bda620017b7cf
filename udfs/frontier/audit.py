"""Flink shell of the fetch audit trail: every completion the frontier job reads is
written to object storage (udfs/core/audit.py), which outlives the completions topic.

`AuditWriter` is keyed by the completion's Kafka partition ("topic#partition"). It
buffers audit records in keyed state (a map by offset, with the buffer's size and
deadline beside it) and writes the buffer as objects — one per UTC day of fetch —
when it holds audit.flush_records records, or audit.flush_s seconds after its first
record arrived (a processing-time timer), whichever comes first; then clears it.
Its second input, a tick a second (`KafkaIO.ticks`), carries nothing: it keeps the
task running when the completions source ends (a `--bounded` run), since Flink drops
the pending processing-time timers, and the state, of a task whose inputs all ended.

Why no audit entry is lost or counted twice:

* Flink checkpoints the Kafka source's offsets and this keyed state (buffer and
  timers) as one consistent cut. A buffer is cleared only after its objects are
  written (a failed write fails the task), so at any checkpoint C every completion
  before C's offsets is in an object written before C or in C's buffer.
* A crash, or a restore from C or any older checkpoint, restarts from that cut:
  its buffer comes back, its timer with it, and every completion after its offsets
  is read again and buffered again. Objects written since are never deleted; the
  replay writes the same records again.
* Writing again never loses nor doubles: an object's name follows from its content
  (day, first and last offset, digest), so the same records give the same object and
  a put replaces it whole; a replay whose age-triggered flush cut the batch elsewhere
  writes objects that overlap the earlier ones, and a reader keeps one record per
  Kafka position (`udfs.core.audit.dedupe`).
* A completion delivered twice by the fetcher (at-least-once) is two Kafka records:
  both are kept (the trail records what was delivered), and `crawl audit` shows them
  as one fetch with a delivery count (`udfs.core.audit.fetches`).
* The URLs of a page that had too many to go inside its completion, which share the
  completions topic (just before the completion), are not fetches: they are passed
  over, by their schema.
* An unreadable record is not audited here: the frontier's intake sends it whole to
  the dead-letter topic, which is never dropped.

At a job's end (cancel, a crash, `flink stop --savepointPath` as `crawl upgrade` does)
the buffer — at most audit.flush_records records, at most audit.flush_s seconds old —
stays in the last checkpoint or savepoint, with the Kafka offsets before it; the
restart from there, which the frontier's own state needs anyway, restores it and its
timer fires. Not so for a job started afresh without its state (never start the
frontier so), nor for `flink stop --drain`: draining ends every input, and Flink then
drops the pending timers and the state of the finished task, so the buffer is lost
(the completions topic still holds those records until its retention passes). A
bounded run (`--bounded`, tests) keeps its audit task alive on the ticks, so every
buffer is written within audit.flush_s while the job runs; a test that stops the job
sooner sets audit.flush_records=1.
"""

from __future__ import annotations

import logging
import pickle
from typing import Any

from pyflink.common import Types
from pyflink.datastream import DataStream, KeyedCoProcessFunction
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from udfs.config import Config
from udfs.core.audit import audit_objects, audit_record
from udfs.flink.runtime import KafkaIO
from udfs.wire.avro import AvroDecodeError, registry
from udfs.wire.records import COMPLETIONS, DISCOVERED

log = logging.getLogger(__name__)


def partition_key(row: Any) -> str:
    """The key of a Kafka source row Row(key, value, topic, partition, offset)."""
    return f"{row[2]}#{row[3]}"


class AuditWriter(KeyedCoProcessFunction):
    """Keyed by "topic#partition": buffers the partition's audit records, writes them.
    Input 1: Kafka rows of the completions topic; input 2: ticks (ignored)."""

    def __init__(self, cfg_data: dict[str, Any]) -> None:
        self.cfg_data = cfg_data

    def open(self, ctx) -> None:
        from udfs.storage.bodies import open_store

        cfg = Config(self.cfg_data)
        self.flush_records = cfg["audit.flush_records"]
        self.flush_ms = int(round(cfg["audit.flush_s"] * 1000))
        self.store = open_store(cfg)
        self.reg = registry()
        bytes_ = Types.PICKLED_BYTE_ARRAY()
        self.pending = ctx.get_map_state(MapStateDescriptor("audit-pending", Types.LONG(),
                                                            bytes_))
        # (records buffered, when the buffer is due): a count beside the map, so that a
        # record costs one map put and no scan of the buffer.
        self.meta = ctx.get_state(ValueStateDescriptor("audit-buffer", bytes_))
        metrics = ctx.get_metrics_group()
        self.records_written = metrics.counter("audit_records_written")
        self.objects_written = metrics.counter("audit_objects_written")
        self.unreadable = metrics.counter("audit_unreadable_completions")

    # No output: each returns None, which Flink reads as no records.
    def process_element1(self, row, ctx) -> None:
        data = bytes(row[1])
        if DISCOVERED.wrote(self.reg, data):
            # URLs too many for their completion (sent just before it), should one
            # pass audit_trail's filter: passed over, not counted unreadable.
            return
        try:
            completion = COMPLETIONS.decode(self.reg, data)
        except AvroDecodeError:
            self.unreadable.inc()  # the intake dead-letters it, whole
            return
        self.pending.put(int(row[4]), pickle.dumps(audit_record(completion, row[2], row[3],
                                                                row[4])))
        count, due = self.meta.value() or (0, None)
        count += 1
        if count >= self.flush_records:
            self._flush()
            return
        if due is None:
            timers = ctx.timer_service()
            due = timers.current_processing_time() + self.flush_ms
            timers.register_processing_time_timer(due)
        self.meta.update((count, due))

    def process_element2(self, tick, ctx) -> None:
        pass

    def on_timer(self, timestamp: int, ctx) -> None:
        meta = self.meta.value()
        # A timer of a buffer already written because it was full: the current buffer
        # (if any) has its own, later timer.
        if meta is not None and meta[1] is not None and timestamp >= meta[1]:
            self._flush()

    def _flush(self) -> None:
        records = [pickle.loads(v) for _, v in self.pending.items()]
        objects = audit_objects(records)
        for name, data in objects:
            self.store.put_object(name, data)  # raises: the task fails, the state stays
        self.records_written.inc(len(records))
        self.objects_written.inc(len(objects))
        self.pending.clear()
        self.meta.clear()


def audit_trail(completions: DataStream, kafka: KafkaIO, cfg: Config) -> DataStream:
    """The audit branch of the frontier job: Kafka rows of the completions topic in.
    The URLs pages gave, which share that topic, are dropped in the JVM first: at
    2,000 sites they were several records a page, each a call into Python."""
    return kafka.without_schema(completions, "discovered").connect(kafka.ticks()) \
        .key_by(partition_key, lambda _: "", key_type=Types.STRING()) \
        .process(AuditWriter(dict(cfg.data))).uid("frontier-audit-trail") \
        .name("fetch audit trail")
