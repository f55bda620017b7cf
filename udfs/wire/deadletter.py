"""Dead letters: a record no stage could process, kept whole with the reason. Pure Python."""

from __future__ import annotations

from udfs.wire.avro import AvroDecodeError, SchemaRegistry
from udfs.wire.records import DEAD_LETTERS, DeadLetter


def dead_letter(reg: SchemaRegistry, *, stage: str, reason: str, error_type: str,
                payload: bytes | None, now_ms: int, source_topic: str | None = None,
                source_partition: int | None = None, source_offset: int | None = None,
                key: bytes | None = None, url: str | None = None,
                host_key: str | None = None) -> bytes:
    """The encoded DeadLetter record for one failed input."""
    record: DeadLetter = {
        "stage": stage, "reason": reason, "error_type": error_type,
        "source_topic": source_topic, "source_partition": source_partition,
        "source_offset": source_offset,
        "key": key, "payload": None if payload is None else bytes(payload),
        "url": url, "host_key": host_key, "at_ms": now_ms,
    }
    return DEAD_LETTERS.encode(reg, record, check=True)


def upgrade_record(reg: SchemaRegistry, schema: str, payload: bytes, *, stage: str,
                   source_topic: str | None, now_ms: int, source_partition: int | None = None,
                   source_offset: int | None = None, key: bytes | None = None
                   ) -> tuple[bool, bytes]:
    """Re-encode a record of `schema` (any version) with its newest version.

    Returns (True, record bytes) or (False, dead-letter bytes naming the reason).
    """
    try:
        record = reg.decode(schema, payload)
    except AvroDecodeError as exc:
        return False, dead_letter(reg, stage=stage, reason=str(exc),
                                  error_type=type(exc).__name__, payload=payload,
                                  now_ms=now_ms, source_topic=source_topic,
                                  source_partition=source_partition, source_offset=source_offset,
                                  key=key)
    return True, reg.encode(schema, record, check=False)
