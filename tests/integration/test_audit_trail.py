"""The fetch audit trail outlives the completions topic: the frontier job (a MiniCluster,
--bounded) copies each completion into object storage (the local S3 server), the topic's
records are then deleted from the broker, and `crawl audit URL` still shows every fetch."""

from __future__ import annotations

import json
import os
import time
import uuid

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from crawler.cli import main as crawl
from crawler.run import JobProcess
from tests.integration.conftest import STARTUP_S
from tests.integration.test_frontier_job import REG, completion_for
from udfs.core.audit import PREFIX, decode_records, dedupe
from udfs.core.urls import split_host_key
from udfs.storage.bodies import S3Store
from udfs.storage.objectstore import s3_client


class BoundedJob(JobProcess):
    def command(self) -> list[str]:
        return [*super().command(), "--bounded"]


def records_left(cfg, topic: str, partitions: int) -> int:
    consumer = KafkaConsumer(bootstrap_servers=cfg["kafka.bootstrap_servers"],
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=2000)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        return sum(1 for _ in consumer)
    finally:
        consumer.close()


def test_crawl_audit_shows_fetches_after_the_completions_topic_rolled_over(
        cfg, admin, fresh_topics, other_topics, tmp_path, capsys, monkeypatch):
    disc, leases, index, dlq = fresh_topics("disc", "leases", "index", "dlq")
    suffix = uuid.uuid4().hex[:8]
    # A completions topic whose records expire within a minute (a rolled-over topic).
    comps = f"test.audit-comps.{suffix}"
    admin.create_topics([NewTopic(comps, 2, 1, topic_configs={
        "retention.ms": "60000", "segment.ms": "10000"})])
    page, other = f"http://audit-{suffix}.test/page", f"http://other-{suffix}.test/"
    store = S3Store(s3_client(cfg), cfg["s3.bucket"])
    overrides = [f"topics.discovered.name={disc}", f"topics.leases.name={leases}",
                 f"topics.completions.name={comps}", f"topics.index.name={index}",
                 f"topics.deadletter.name={dlq}", "flink.checkpoint_interval_ms=1000",
                 "flink.restart_strategy=none", f"local.state_dir={tmp_path / 'state'}",
                 "storage.backend=s3",
                 # Two records make an object; the third is written by its 1 s timer.
                 "audit.flush_records=2", "audit.flush_s=1"]
    overrides += other_topics
    job = BoundedJob("frontier", overrides, tmp_path / "frontier.log")
    try:
        # A 503, its retry and a 200 of the page, and another URL. --bounded: the job
        # reads what is in the topic when it starts.
        producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
        now_ms = int(time.time() * 1000)
        sent = [completion_for({"lease_id": f"L-{i}", "url_id": "0a1b2c3d4e5f6071",
                                "url_version": 1, "attempt": i + 1, "url": url,
                                "host_key": split_host_key(url)[0],
                                "kind": "PAGE"}, **fields, fetched_at_ms=now_ms + i)
                for i, (url, fields) in enumerate([
                    (page, {"outcome": "SERVER_ERROR", "http_status": 503,
                            "error": "503 Service Unavailable", "object_key": None,
                            "body_sha256": None}),
                    (page, {"outcome": "SERVER_ERROR", "http_status": 503,
                            "error": "503 Service Unavailable", "object_key": None,
                            "body_sha256": None}),
                    (page, {"outcome": "OK", "http_status": 200}),
                    (other, {"outcome": "OK", "http_status": 200})])]
        for c in sent:
            producer.send(comps, REG.encode("completion", c), key=c["host_key"].encode())
        producer.send(comps, b"not avro", key=b"x")  # dead-lettered, not audited
        producer.flush()
        producer.close()
        job.start()

        prefix = f"{PREFIX}day="
        deadline = time.monotonic() + STARTUP_S
        written: list[str] = []
        while time.monotonic() < deadline and job.alive():
            written = [k for k in store.list_objects(prefix) if f"/{comps}/" in k]
            if _audited(store, written) >= len(sent):
                break
            time.sleep(1)
        assert job.alive(), job.report()
        assert _audited(store, written) == len(sent), written
    finally:
        job.stop()
    try:
        # The topic rolls over: its log starts past every record (what retention does at
        # the broker's next check).
        ends = KafkaConsumer(bootstrap_servers=cfg["kafka.bootstrap_servers"]).end_offsets(
            [TopicPartition(comps, p) for p in range(2)])
        admin.delete_records(ends)
        assert records_left(cfg, comps, 2) == 0

        for name in list(os.environ):
            if name.startswith("CRAWL__") or name == "CRAWL_CONFIG":
                monkeypatch.delenv(name)
        # Normalized as the frontier does: case of the host, default port, fragment.
        assert crawl(["audit", f"HTTP://AUDIT-{suffix.upper()}.test:80/page#x",
                      "--set", "storage.backend=s3", "--days", "1"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0] == f"{page}: 3 fetches recorded in the last day"
        assert [line.split()[2:4] for line in out[1:]] == [
            ["SERVER_ERROR", "503"], ["SERVER_ERROR", "503"], ["OK", "200"]]
        assert crawl(["audit", other, "--json", "--set", "storage.backend=s3"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [(f["outcome"], f["lease_id"], f["topic"]) for f in doc["fetches"]] == [
            ("OK", "L-3", comps)]
    finally:
        admin.delete_topics([comps])
        keys = [k for k in store.list_objects(PREFIX) if f"/{comps}/" in k]
        if keys:
            store.client.delete_objects(Bucket=cfg["s3.bucket"],
                                        Delete={"Objects": [{"Key": k} for k in keys]})


def _audited(store: S3Store, keys: list[str]) -> int:
    return len(dedupe(r for k in keys for r in decode_records(store.get_object(k))))
