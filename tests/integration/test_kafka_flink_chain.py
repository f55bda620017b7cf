"""The real chain: KafkaSource → PyFlink (MiniCluster) → KafkaSink, with checkpointing on."""

from __future__ import annotations

import subprocess
import sys
import time

from kafka import KafkaConsumer, KafkaProducer

from udfs.avro import MAGIC, load_examples, registry

REG = registry()


def _read_all(cfg, topic: str, expect: int, timeout_s: float = 30.0) -> list[bytes]:
    consumer = KafkaConsumer(topic, bootstrap_servers=cfg["kafka.bootstrap_servers"],
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             isolation_level="read_committed", consumer_timeout_ms=2000)
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expect and time.monotonic() < deadline:
            out.extend(m.value for m in consumer)
    finally:
        consumer.close()
    return out


def test_relay_job_moves_avro_records_and_dead_letters_bad_ones(cfg, fresh_topics):
    source, target, dlq = fresh_topics("in", "out", "dlq")
    examples = load_examples(REG.latest("discovered"))
    records = [{**examples[i % len(examples)], "depth": i} for i in range(60)]
    bad = [b"not avro at all", MAGIC + b"\x01" * 8 + b"\x00", REG.encode(
        "dead_letter", load_examples(REG.latest("dead_letter"))[0])]
    producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
    for r in records[:30]:
        producer.send(source, REG.encode("discovered", r))
    for b in bad:
        producer.send(source, b)
    for r in records[30:]:
        producer.send(source, REG.encode("discovered", r))
    producer.flush()
    producer.close()

    job = subprocess.run(
        [sys.executable, "-m", "jobs.relay", "--from", source, "--to", target,
         "--schema", "discovered", "--bounded",
         "--set", f"topics.deadletter.name={dlq}",
         "--set", "flink.restart_strategy=none",
         "--set", "flink.checkpoint_interval_ms=500"],
        capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]

    # Exactly-once sinks: the records are visible to read_committed consumers
    # only because checkpoints completed and committed the transactions.
    got = [REG.decode("discovered", v) for v in _read_all(cfg, target, len(records))]
    assert sorted(got, key=lambda r: r["depth"]) == records

    letters = [REG.decode("dead_letter", v) for v in _read_all(cfg, dlq, len(bad))]
    assert sorted(x["payload"] for x in letters) == sorted(bad)
    reasons = {x["payload"]: x["reason"] for x in letters}
    assert "missing C3 01 marker" in reasons[bad[0]]
    assert "unknown writer schema fingerprint" in reasons[bad[1]]
    assert "written as dead_letter v1, expected discovered" in reasons[bad[2]]
    assert all(x["stage"] == "relay.decode" and x["source_topic"] == source for x in letters)
