"""Flink shell of the relay job: routes each record to the main output or the dead letters."""

from __future__ import annotations

import time

from pyflink.datastream import OutputTag, ProcessFunction

from udfs.avro import registry
from udfs.deadletter import upgrade_record
from udfs.runtime import BYTES

DEAD_LETTERS = OutputTag("dead-letters", BYTES)


class RelayFunction(ProcessFunction):
    """Decode with any known version of `schema`, re-encode with the newest one."""

    def __init__(self, schema: str, source_topic: str) -> None:
        self.schema = schema
        self.source_topic = source_topic

    def open(self, runtime_context) -> None:
        self.reg = registry()
        registry().latest(self.schema)  # an unknown schema name fails the job at start

    def process_element(self, value, ctx):
        ok, out = upgrade_record(self.reg, self.schema, bytes(value), stage="relay.decode",
                                 source_topic=self.source_topic,
                                 now_ms=int(time.time() * 1000))
        if ok:
            yield out
        else:
            yield DEAD_LETTERS, out
