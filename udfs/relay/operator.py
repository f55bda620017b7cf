"""Flink shell of the relay job: routes each record to the main output or the dead letters."""

from __future__ import annotations

import time

from pyflink.common import Row
from pyflink.datastream import OutputTag, ProcessFunction

from udfs.flink.runtime import ROW_KEY_VALUE
from udfs.wire.avro import registry
from udfs.wire.deadletter import upgrade_record

DEAD_LETTERS = OutputTag("dead-letters", ROW_KEY_VALUE)


class RelayFunction(ProcessFunction):
    """Decode with any known version of `schema`, re-encode with the newest one.

    In: Row(key, value, topic, partition, offset). Out: Row(key, value), key kept.
    """

    def __init__(self, schema: str) -> None:
        self.schema = schema

    def open(self, runtime_context) -> None:
        self.reg = registry()
        registry().latest(self.schema)  # an unknown schema name fails the job at start

    def process_element(self, value, ctx):
        key = None if value[0] is None else bytes(value[0])
        ok, out = upgrade_record(self.reg, self.schema, bytes(value[1]), stage="relay.decode",
                                 source_topic=value[2], source_partition=value[3],
                                 source_offset=value[4], key=key,
                                 now_ms=int(time.time() * 1000))
        if ok:
            yield Row(key, out)
        else:
            yield DEAD_LETTERS, Row(key, out)
