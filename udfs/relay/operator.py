"""Flink shell of the relay job: routes each record to the main output or the dead letters."""

from __future__ import annotations

import time
from collections.abc import Sequence

from pyflink.common import Row
from pyflink.datastream import OutputTag, ProcessFunction

from udfs.flink.runtime import ROW_KEY_VALUE
from udfs.wire.avro import registry
from udfs.wire.deadletter import upgrade_record

DEAD_LETTERS = OutputTag("dead-letters", ROW_KEY_VALUE)


class RelayFunction(ProcessFunction):
    """Decode with any known version of one of `schemas`, re-encode with its newest one.
    A topic may hold several kinds (crawl.completions: completion, and the discovered
    URLs the fetcher sends before it): each record is read as the schema its header
    names if that is one of them, else as the first (whose error the dead letter gives).

    In: Row(key, value, topic, partition, offset). Out: Row(key, value), key kept.
    """

    def __init__(self, schemas: Sequence[str]) -> None:
        self.schemas = tuple(schemas)

    def open(self, runtime_context) -> None:
        self.reg = registry()
        for name in self.schemas:  # an unknown schema name fails the job at start
            self.reg.latest(name)

    def process_element(self, value, ctx):
        key = None if value[0] is None else bytes(value[0])
        data = bytes(value[1])
        schema = self.reg.writer_name(data)
        if schema not in self.schemas:
            schema = self.schemas[0]
        ok, out = upgrade_record(self.reg, schema, data, stage="relay.decode",
                                 source_topic=value[2], source_partition=value[3],
                                 source_offset=value[4], key=key,
                                 now_ms=int(time.time() * 1000))
        if ok:
            yield Row(key, out)
        else:
            yield DEAD_LETTERS, Row(key, out)
