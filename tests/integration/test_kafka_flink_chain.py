"""The real chain: Flink's Kafka connector → PyFlink (MiniCluster) → Kafka, checkpointing on.

The relay job reads and writes through the Table API connector (record keys,
partition and offset available to Python); the DataStream KafkaSource/KafkaSink
wrappers are exercised by a pass-through job of their own."""

from __future__ import annotations

import subprocess
import sys
import time

from kafka import KafkaConsumer, KafkaProducer

from udfs.wire.avro import MAGIC, load_examples, registry

REG = registry()


def _read_all(cfg, topic: str, expect: int, timeout_s: float = 30.0, keys: bool = False
              ) -> list:
    consumer = KafkaConsumer(topic, bootstrap_servers=cfg["kafka.bootstrap_servers"],
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             isolation_level="read_committed", consumer_timeout_ms=2000)
    out: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expect and time.monotonic() < deadline:
            out.extend((m.key, m.value) if keys else m.value for m in consumer)
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
    key = b"http://example.com"
    for r in records[:30]:
        producer.send(source, REG.encode("discovered", r), key=key)
    for b in bad:
        producer.send(source, b, key=b"bad")
    for r in records[30:]:
        producer.send(source, REG.encode("discovered", r), key=key)
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
    got = _read_all(cfg, target, len(records), keys=True)
    assert {k for k, _ in got} == {key}  # record keys are kept
    assert sorted((REG.decode("discovered", v) for _, v in got),
                  key=lambda r: r["depth"]) == records

    letters = [REG.decode("dead_letter", v) for v in _read_all(cfg, dlq, len(bad))]
    assert sorted(x["payload"] for x in letters) == sorted(bad)
    reasons = {x["payload"]: x["reason"] for x in letters}
    assert "missing C3 01 marker" in reasons[bad[0]]
    assert "unknown writer schema fingerprint" in reasons[bad[1]]
    assert "written as dead_letter v1, expected discovered" in reasons[bad[2]]
    assert all(x["stage"] == "relay.decode" and x["source_topic"] == source for x in letters)
    # Where each came from, to replay it: its key, partition and offset (30, 31, 32).
    assert all(x["key"] == b"bad" and x["source_partition"] == 0 for x in letters)
    assert sorted(x["source_offset"] for x in letters) == [30, 31, 32]


PASS_THROUGH = """
import sys
from udfs.config import load_config
from udfs.flink.runtime import BYTES, kafka_sink, kafka_source_stream, make_env
source, target = sys.argv[1], sys.argv[2]
cfg = load_config(env={}, overrides=["flink.restart_strategy=none",
                                     "flink.checkpoint_interval_ms=500"])
env = make_env(cfg)
ds = kafka_source_stream(env, cfg, source, "pass-through", bounded=True)
ds = ds.map(lambda b: bytes(b), output_type=BYTES)
ds.sink_to(kafka_sink(cfg, target, exactly_once=True, transactional_id_prefix="pt-" + target))
env.execute("pass-through")
"""


def test_datastream_kafka_source_and_sink(cfg, fresh_topics):
    source, target = fresh_topics("ds-in", "ds-out")
    producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
    values = [REG.encode("discovered", {**load_examples(REG.latest("discovered"))[0], "depth": i})
              for i in range(25)]
    for v in values:
        producer.send(source, v)
    producer.flush()
    producer.close()
    job = subprocess.run([sys.executable, "-c", PASS_THROUGH, source, target],
                         capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    assert sorted(_read_all(cfg, target, len(values))) == sorted(values)


WITHOUT_SCHEMA = """
import sys
from pyflink.common import Types
from udfs.config import load_config
from udfs.flink.runtime import KafkaIO, make_env
cfg = load_config(env={}, overrides=["flink.restart_strategy=none"])
env = make_env(cfg)
kafka = KafkaIO(env, cfg)
rows = kafka.without_schema(kafka.source(sys.argv[1], "without", bounded=True), "discovered")
with rows.map(lambda r: bytes(r[1]).hex(), output_type=Types.STRING()).execute_and_collect() \\
        as values:
    for value in values:
        print("KEPT", value, flush=True)
"""


def test_the_jvm_filter_drops_exactly_the_records_of_a_schema(cfg, fresh_topics):
    """KafkaIO.without_schema (the audit trail's filter of the URLs pages gave on the
    completions topic): every version of the schema is dropped in the JVM; records of
    other schemas, and bytes that are no record at all, pass."""
    (topic,) = fresh_topics("without")
    discovered = [REG.encode("discovered", rec, version=v.version, check=False)
                  for v in REG.versions("discovered")
                  for rec in load_examples(v)[:1]]
    completion = REG.encode("completion", load_examples(REG.latest("completion"))[0])
    others = [completion, b"garbage", MAGIC, MAGIC + b"\xff" * 8 + b"x"]
    producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
    for v in [*discovered, *others]:
        producer.send(topic, v)
    producer.flush()
    producer.close()
    job = subprocess.run([sys.executable, "-c", WITHOUT_SCHEMA, topic],
                         capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    kept = [bytes.fromhex(line.split()[1]) for line in job.stdout.splitlines()
            if line.startswith("KEPT")]
    assert len(discovered) == len(REG.versions("discovered")) >= 3
    assert sorted(kept) == sorted(others)
