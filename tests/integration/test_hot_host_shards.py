"""A hot host's queue partitioned over shards in a real frontier job (udfs/core/shards.py):
past frontier.shard_above_urls the owner puts new URLs in shards (keys host#n, their
own keyed state), pulls them back as its queue runs low, through the shards topic
(exactly-once, read committed), and every URL is leased once, by the owner alone."""

from __future__ import annotations

import time
from collections import Counter

from kafka import KafkaConsumer, KafkaProducer

from crawler.run import JobProcess
from tests.integration.conftest import free_port, metric, wait_for_metric
from tests.integration.test_frontier_job import Topic, completion_for
from udfs.wire.avro import registry

REG = registry()
HOST = "http://hot.test"
URLS = 120


def test_a_hot_hosts_backlog_goes_through_its_shards(cfg, fresh_topics, tmp_path):
    disc, leases, comps, index, dlq, shards = fresh_topics(
        "disc", "leases", "comps", "index", "dlq", "shards", partitions=2)
    port = free_port()
    overrides = [f"topics.discovered.name={disc}", f"topics.leases.name={leases}",
                 f"topics.completions.name={comps}", f"topics.index.name={index}",
                 f"topics.deadletter.name={dlq}", f"topics.shards.name={shards}",
                 "flink.checkpoint_interval_ms=1000", "flink.restart_strategy=none",
                 "politeness.min_gap_s=0.02", "politeness.duration_factor=0",
                 "frontier.shard_above_urls=20",
                 "frontier.host_shards=4", "frontier.shard_refill_urls=10",
                 f"metrics.frontier_port={port}"]
    job = JobProcess("frontier", overrides, tmp_path / "frontier.log")
    job.start()
    try:
        producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
        producer.send(disc, REG.encode("discovered", {
            "host_key": HOST, "source": "SEED", "parent_url": None, "depth": 0,
            "redirect_hops": 0, "discovered_at_ms": 0,
            "links": [{"url": f"{HOST}/p/{i}", "lastmod_ms": None, "priority": None}
                      for i in range(URLS)]}), key=HOST.encode())
        producer.flush()
        lease_topic = Topic(cfg, leases, job)
        lease_topic.wait("lease", lambda s: len(s) >= 1)  # the job is up: robots.txt first
        answered: set[str] = set()
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            for _, lease in lease_topic.wait("lease", lambda s: True):  # what has come
                if lease["lease_id"] in answered:
                    continue
                answered.add(lease["lease_id"])
                fields = {"kind": "ROBOTS", "body": b""} if lease["kind"] == "ROBOTS" else {}
                producer.send(comps, REG.encode("completion", completion_for(
                    lease, outcome="OK", http_status=200, **fields)), key=HOST.encode())
            producer.flush()
            pages = [rec for _, rec in lease_topic.seen if rec["kind"] == "PAGE"]
            if len({p["url"] for p in pages}) == URLS:
                break
        pages = [rec for _, rec in lease_topic.seen if rec["kind"] == "PAGE"]
        assert sorted({p["url"] for p in pages}) == sorted(f"{HOST}/p/{i}" for i in range(URLS))
        # Once each: no URL leased twice (a lease is never re-let here: all answered).
        assert Counter(p["url"] for p in pages).most_common(1)[0][1] == 1
        assert all(p["url_version"] == 1 and p["host_key"] == HOST for p in pages)

        # What travelled: the backlog past the threshold went out to shards host#0..3 and
        # came back in refills, each answering a pull; committed records only.
        moves = KafkaConsumer(shards, bootstrap_servers=cfg["kafka.bootstrap_servers"],
                              auto_offset_reset="earliest", isolation_level="read_committed",
                              consumer_timeout_ms=2000)
        raw = list(moves)
        records = [(m.key.decode(), REG.decode("shard_transfer", m.value)) for m in raw]
        t0 = raw[0].timestamp
        print("shard moves (s after the first, kind, shard, URLs):", [
            (round((m.timestamp - t0) / 1000, 1), r["kind"], r["shard"], len(r["urls"]))
            for m, (_, r) in zip(raw, records, strict=True)])
        puts = [(k, r) for k, r in records if r["kind"] == "PUT"]
        refills = [(k, r) for k, r in records if r["kind"] == "REFILL"]
        assert sum(len(r["urls"]) for _, r in puts) == URLS - 20
        assert {k for k, _ in puts} <= {f"{HOST}#{n}" for n in range(4)}
        assert all(k == f"{HOST}#{r['shard']}" for k, r in puts)
        assert sum(len(r["urls"]) for _, r in refills) == URLS - 20
        assert all(k == HOST and len(r["urls"]) <= 10 for k, r in refills)
        samples = wait_for_metric(port, "frontier_events_total", lambda v: v == URLS - 20,
                                  event="urls_sharded")
        assert metric(samples, "frontier_events_total", event="urls_unsharded") == URLS - 20
        # The owner admitted the first 20, its shards the rest (each new to its shard,
        # within its share of the template budget).
        assert metric(samples, "frontier_events_total", event="urls_admitted") == URLS
    finally:
        job.stop()
