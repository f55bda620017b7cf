"""Flink shell of the fetch audit trail: every completion the frontier job reads is
written to object storage (udfs/core/audit.py), which outlives the completions topic.

`AuditWriter` is keyed by the completion's Kafka partition ("topic#partition"). It
buffers audit records in keyed state (a map by offset, with the buffer's size and
deadline beside it) and writes the buffer as objects — one per UTC day of fetch —
when it holds audit.flush_records records, or audit.flush_s seconds after its first
record arrived (a processing-time timer), whichever comes first; then clears it.
Its input is the frontier's intake, which decodes every record of the completions
topic anyway: for each completion it yields the audit record beside the row it sends
the host (`audit_row`), keyed by the partition as it is, so a completion is neither
decoded twice nor sent into Python a second time. The intake also reads the crawl
clock, which never ends: this task keeps running when the completions source ends (a
`--bounded` run), since Flink drops the pending processing-time timers, and the
state, of a task whose inputs all ended.

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
* An unreadable record is not audited: the frontier's intake sends it whole to the
  dead-letter topic, which is never dropped.
* The intake is between the source and this task: a checkpoint's barrier passes it
  after the records before it, so the cut above still holds; a partition's records
  come through one intake subtask, in their order.

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

from pyflink.common import Row, Types
from pyflink.datastream import DataStream, KeyedProcessFunction, OutputTag
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from udfs.config import Config
from udfs.core.audit import audit_objects, audit_record
from udfs.flink.runtime import BYTES, keyed, side_output
from udfs.wire.records import Completion

log = logging.getLogger(__name__)


# The intake's side output to the writer: (topic#partition, Row(offset, the audit record
# pickled, as the writer keeps it)).
AUDIT_INPUT = Types.ROW_NAMED(["offset", "record"], [Types.LONG(), BYTES])
AUDIT = OutputTag("audit", Types.ROW([Types.STRING(), AUDIT_INPUT]))


def partition_key(row: Any) -> str:
    """The key of a Kafka source row Row(key, value, topic, partition, offset)."""
    return f"{row[2]}#{row[3]}"


def audit_row(completion: Completion, row: Any) -> tuple[OutputTag, Row]:
    """What the intake yields for the writer: `completion`, decoded from the Kafka source
    row `row`, keyed by its partition."""
    record = audit_record(completion, row[2], row[3], row[4])
    return AUDIT, Row(partition_key(row), Row(int(row[4]), pickle.dumps(record)))


class AuditWriter(KeyedProcessFunction):
    """Keyed by "topic#partition": buffers the partition's audit records, writes them.
    Input: Row(offset, pickled audit record), from the intake (`audit_row`)."""

    def __init__(self, cfg_data: dict[str, Any]) -> None:
        self.cfg_data = cfg_data

    def open(self, ctx) -> None:
        from udfs.storage.bodies import open_store

        cfg = Config(self.cfg_data)
        self.flush_records = cfg["audit.flush_records"]
        self.flush_ms = int(round(cfg["audit.flush_s"] * 1000))
        self.store = open_store(cfg)
        bytes_ = Types.PICKLED_BYTE_ARRAY()
        self.pending = ctx.get_map_state(MapStateDescriptor("audit-pending", Types.LONG(),
                                                            bytes_))
        # (records buffered, when the buffer is due): a count beside the map, so that a
        # record costs one map put and no scan of the buffer.
        self.meta = ctx.get_state(ValueStateDescriptor("audit-buffer", bytes_))
        metrics = ctx.get_metrics_group()
        self.records_written = metrics.counter("audit_records_written")
        self.objects_written = metrics.counter("audit_objects_written")

    # No output: returns None, which Flink reads as no records.
    def process_element(self, value, ctx) -> None:
        self.pending.put(value[0], bytes(value[1]))
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


def audit_trail(intake: DataStream, cfg: Config) -> DataStream:
    """The audit branch of the frontier job: the intake's AUDIT side output in."""
    return keyed(side_output(intake, AUDIT), AUDIT_INPUT) \
        .process(AuditWriter(dict(cfg.data))).uid("frontier-audit-trail") \
        .name("fetch audit trail")
