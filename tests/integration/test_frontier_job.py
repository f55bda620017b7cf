"""The frontier job on a MiniCluster with real Kafka: seeds in, robots.txt leases first,
page leases after robots.txt is answered, one index event per accepted version,
dead letters for what cannot be read or is refused by the address policy, the
configured drop list of query parameters, and the daily fetch budget."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from kafka import KafkaConsumer, KafkaProducer

from crawler.run import JobProcess
from tests.integration.conftest import STARTUP_S, free_port, metric, wait_for_metric
from udfs.wire.avro import load_examples, registry

REG = registry()
HOSTS = ["http://a.test", "http://b.test", "http://c.test"]


class Topic:
    def __init__(self, cfg, name, job=None):
        self.job = job  # the JobProcess writing the topic: reported on a timeout
        self.consumer = KafkaConsumer(name, bootstrap_servers=cfg["kafka.bootstrap_servers"],
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      isolation_level="read_committed",
                                      consumer_timeout_ms=500)
        self.seen: list = []

    def wait(self, schema, predicate, timeout_s=STARTUP_S):
        """Read until predicate(records) holds; returns the records (key, decoded)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.seen.extend((m.key, REG.decode(schema, m.value)) for m in self.consumer)
            if predicate(self.seen):
                return self.seen
        report = f"\n{self.job.report()}" if self.job is not None else ""
        raise AssertionError(f"timed out; have {self.seen}{report}")


def completion_for(lease, **fields):
    base = load_examples(REG.latest("completion"))[0]
    return {**base, "lease_id": lease["lease_id"], "url_id": lease["url_id"],
            "url_version": lease["url_version"], "attempt": lease["attempt"], "url": lease["url"],
            "host_key": lease["host_key"], "kind": lease["kind"], "etag": None,
            "fetched_at_ms": int(time.time() * 1000), **fields}


def test_frontier_job_end_to_end_on_kafka(cfg, fresh_topics, other_topics, tmp_path):
    disc, leases, comps, index, dlq = fresh_topics("disc", "leases", "comps", "index", "dlq",
                                                   partitions=2)
    port = free_port()
    overrides = [f"topics.discovered.name={disc}", f"topics.leases.name={leases}",
                 f"topics.completions.name={comps}", f"topics.index.name={index}",
                 f"topics.deadletter.name={dlq}", "flink.checkpoint_interval_ms=1000",
                 "flink.restart_strategy=none", "politeness.min_gap_s=0.2",
                 # Only "ref" is dropped: utm_source is kept (a URL of its own).
                 "urls.drop_query_params=[ref]", "frontier.daily_fetch_budget=6",
                 # One lease at a time, so that the rounds below are exact (the
                 # look-ahead has its own tests).
                 "frontier.lookahead_s=0", "frontier.max_lookahead_leases=0",
                 f"metrics.frontier_port={port}"]
    # Its own process group, output to a log file (a pipe nobody reads could fill up).
    overrides += other_topics
    job = JobProcess("frontier", overrides, tmp_path / "frontier.log")
    job.start()
    try:
        producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
        for host in HOSTS:
            seed = {"host_key": host, "source": "SEED", "parent_url": None, "depth": 0,
                    "redirect_hops": 0, "discovered_at_ms": 0,
                    "links": [{"url": host + "/", "lastmod_ms": None, "priority": None},
                              {"url": host.upper() + ":80/page#x", "lastmod_ms": None,
                               "priority": None}]}
            if host == HOSTS[2]:
                seed["links"] += [{"url": host + u, "lastmod_ms": None, "priority": None}
                                  for u in ("/page?ref=abc", "/page?utm_source=x", "/extra")]
            producer.send(disc, REG.encode("discovered", seed), key=host.encode())
        # An IP-literal seed in a forbidden range: refused at intake, never leased.
        literal = {"host_key": None, "source": "SEED", "parent_url": None, "depth": 0,
                   "redirect_hops": 0, "discovered_at_ms": 0,
                   "links": [{"url": "http://2130706433:9/", "lastmod_ms": None,
                              "priority": None}]}
        producer.send(disc, REG.encode("discovered", literal))
        producer.send(disc, b"garbage", key=b"x")
        bad_url = {"host_key": None, "source": "LINK", "parent_url": None, "depth": 1,
                   "redirect_hops": 0, "discovered_at_ms": 0,
                   "links": [{"url": "javascript:void(0)", "lastmod_ms": None, "priority": None}]}
        producer.send(disc, REG.encode("discovered", bad_url))
        producer.flush()

        lease_topic = Topic(cfg, leases, job)
        got = lease_topic.wait("lease", lambda s: len(s) >= 3)
        robots = {rec["host_key"]: (key, rec) for key, rec in got}
        assert set(robots) == set(HOSTS)
        assert all(rec["kind"] == "ROBOTS" and key == rec["host_key"].encode()
                   for key, rec in robots.values())
        letters = Topic(cfg, dlq, job).wait("dead_letter", lambda s: len(s) >= 3)
        assert sorted(rec["error_type"] for _, rec in letters) == [
            "ADDRESS_BLOCKED", "AvroDecodeError", "InvalidUrl"]
        (blocked,) = [rec for _, rec in letters if rec["error_type"] == "ADDRESS_BLOCKED"]
        assert blocked["url"] == "http://127.0.0.1:9/" and "loopback" in blocked["reason"]

        for host, (_, lease) in robots.items():
            body = b"User-agent: *\nDisallow: /page\n" if host == HOSTS[0] else b""
            producer.send(comps, REG.encode("completion", completion_for(
                lease, kind="ROBOTS", outcome="OK", http_status=200, body=body)),
                key=host.encode())
        producer.flush()
        def page_leases(records):
            return [rec for _, rec in records if rec["kind"] == "PAGE"]

        first_round = page_leases(lease_topic.wait("lease", lambda s: len(page_leases(s)) >= 3))
        # One request in flight per host: one page each, until it completes.
        assert sorted(r["url"] for r in first_round) == [
            "http://a.test/", "http://b.test/", "http://c.test/"]
        assert all(r["url_version"] == 1 and r["attempt"] == 1 for r in first_round)
        for lease in first_round:
            done = REG.encode("completion", completion_for(lease, outcome="OK", http_status=200))
            producer.send(comps, done, key=lease["host_key"].encode())
            if lease["host_key"] == HOSTS[1]:
                producer.send(comps, done, key=lease["host_key"].encode())  # delivered twice
        producer.flush()
        # a.test disallows /page: never leased; b and c lease their (normalized) /page.
        second = page_leases(lease_topic.wait("lease", lambda s: len(page_leases(s)) >= 5))
        assert sorted(r["url"] for r in second[3:]) == ["http://b.test/page",
                                                        "http://c.test/page"]
        index_topic = Topic(cfg, index, job)
        index_topic.wait("index_event", lambda s: len(s) >= 3)
        time.sleep(3)  # room for a duplicate (wrong) event to show up
        events = index_topic.wait("index_event", lambda s: len(s) >= 3)
        assert sorted(rec["event_id"] for _, rec in events) == sorted(
            f"{r['url_id']}:1" for r in first_round)
        assert all(key == rec["url_id"].encode() for key, rec in events)
        # All three pages carry the same body hash: the first owns it, the others point to it.
        assert sum(rec["duplicate_of"] is None for _, rec in events) == 1
        # Same SimHash too: the SimHash bands flag the later two as near-duplicates.
        ids = {rec["url_id"] for _, rec in events}
        flags = [rec["near_duplicate_of"] for _, rec in events]
        assert flags.count(None) == 1
        assert all(f in ids for f in flags if f is not None)
        assert all(f != rec["url_id"] for (_, rec), f in zip(events, flags, strict=True))

        # c.test/page?ref=abc was the same URL as /page (ref is dropped), while
        # /page?utm_source=x is a URL of its own: it is c's next lease.
        for lease in second[3:]:
            producer.send(comps, REG.encode("completion", completion_for(
                lease, outcome="OK", http_status=200, body_sha256="c" * 64)),
                key=lease["host_key"].encode())
        producer.flush()
        third = page_leases(lease_topic.wait("lease", lambda s: len(page_leases(s)) >= 6))
        assert third[5]["url"] == "http://c.test/page?utm_source=x"
        producer.send(comps, REG.encode("completion", completion_for(
            third[5], outcome="OK", http_status=200, body_sha256="d" * 64)), key=b"http://c.test")
        producer.flush()
        # The daily budget (6 pages) is spent: c.test/extra is due but not leased.
        time.sleep(5)
        final = page_leases(lease_topic.wait("lease", lambda s: True, timeout_s=2))
        assert len(final) == 6 and all(r["host_key"] != "http://127.0.0.1:9" for _, r in
                                       lease_topic.seen)

        # Flink's Prometheus reporter serves the frontier's metrics: its events, the
        # eligibility lag of every page lease, dead letters by reason.
        samples = wait_for_metric(port, "frontier_events_total", lambda v: v == 6,
                                  event="leases_granted")
        assert metric(samples, "frontier_events_total", event="robots_leases") == 3
        assert metric(samples, "eligibility_lag_seconds_count") == 6
        assert metric(samples, "eligibility_lag_seconds_bucket", le="86400") == 6
        assert metric(samples, "dead_letters_total", reason="AvroDecodeError") == 1
        assert metric(samples, "dead_letters_total", reason="ADDRESS_BLOCKED") == 1
        # Six index events, the first round's three sharing one body and one SimHash.
        samples = wait_for_metric(port, "index_events_total", lambda v: v == 6)
        assert metric(samples, "exact_duplicates_total") >= 2
        assert metric(samples, "near_duplicates_total") >= 2
        print("frontier metric names:", sorted({n for n, _ in samples if n.endswith((
            "_total", "_bucket", "_count")) and "Kafka" not in n}))
        # RocksDB's LOG files (one per state instance, named after its path) go with
        # this job's own Flink log, not to a folder every job shares and none removes.
        logs = list((job.flink_log_dir / "rocksdb").glob("*_LOG"))
        assert logs and all(f"{job.tmp_dir.name}_" in p.name for p in logs), logs
    finally:
        job.stop()


# The frontier's graph as Flink will run it: for each operator, its id (its pinned id, or
# its uid's hash, or for an operator with neither, a hash of where it stands in the
# graph), its name and its kind, printed instead of run.
_OPERATOR_IDS = """
import json, sys
from pyflink.java_gateway import get_gateway
import jobs.frontier
import udfs.flink.runtime

def ids(env, graph):
    hashes = get_gateway().jvm.org.apache.flink.streaming.api.graph.StreamGraphHasherV2() \
        .traverseStreamGraphAndGenerateHashes(graph)
    out = []
    for node in graph.getStreamNodes().toArray():
        op = node.getUserHash() or bytes(b & 0xff for b in hashes.get(node.getId())).hex()
        factory = node.getOperatorFactory().getClass().getSimpleName()
        out.append((op, node.getOperatorName(), factory, node.getTransformationUID()))
    print("IDS " + json.dumps(out), flush=True)

udfs.flink.runtime.run_graph = ids
jobs.frontier.main(sys.argv[1:])
"""

# The ids of the frontier's operators that keep state, as of 83d9759 and since: its
# Kafka and clock sources, its keyed functions (uids), its Kafka sinks' writers and
# committers (pinned: jobs/frontier.py PINNED_IDS).
FRONTIER_OPERATOR_IDS = """
    cbc357ccb763df2852fee8c4fc7d55f2 6cdc5bb954874d922eaee11a8e7b5dd5
    2963852293169ba90d9d1e7d6308db5c 1171dea6747ab509fdaefbe74f7195af
    2fa5fc7df17f61cb0e1946288970d799 5c4ca2fea30dcf09bf3ee40c495fe808
    6dc0226b15c44c9c2e1f9ea1a65fd400 9ce3bd126e3245d1a4b04a024fb08a3f
    a97e14312730794757ba17e66686b24d 9f597aaa34dc3651d312b2a0e46e82ec
    881defaa7068857ec714b87b2ee55ddd 7735e382274d1ab45c35eefa26713f14
    7521420b98e359c39aa0a0a7d0ddc276 86cceb62edc38d2968d06b458ba67265
    5de4df6df425303a9b6afc0dd9facdbb 3c3d6531f6c2755ee9cadaf037da3799
    88fe84198ca8e351367f57879f5cddef 3b545bd5fcdbbdc531507ce12b093c06
    6f4831f0b857fc76b901b198b1e1c43e e1f4e2bc69906b4fbe6709ffd6adff4b
    0fee2e5fcfc75300a38a9e2cbbbb27bb b93bfbf0342949e6d7dfee62f8675109
    d3e20f57b40a0340380c5bf4994dde28 097fcb659f1f8012e811db1ee620cfdb
    ada2b2d3a4c06e6728d2d90a9a1da95d b69acf5beaf867918616906b1c57741b
    c1f595ac21dbcb9a7c812a2b7a1142d0
"""

# Operators that keep no state (Table API conversions and projections, PyFlink's maps):
# a savepoint holds nothing for them, and Flink skips what it has of them on a restore,
# so their ids may move.
_STATELESS = ("CodeGenOperatorFactory", "WatermarkAssignerOperatorFactory")
_STATELESS_NAMES = ("TableToDataStream", "ConstraintEnforcer[", "*anonymous_datastream_source",
                    "without_", "crawl clock", "_stream_key_by_map_operator", "Map")


def test_the_frontier_restores_the_checkpoints_of_the_builds_before_it():
    """A checkpoint or savepoint holds each operator's state under the operator's id, and
    the frontier's state is never skipped on a restore: a build whose graph gives one
    stateful operator another id cannot start from an earlier build's savepoint. The
    Kafka sources and sinks (offsets, transactions) come from the Table API and have no
    uid: Flink derives their ids from the graph's shape, so removing or adding an
    operator before them (a Python map, a side output, a SQL filter) moves them.
    Measured on 2026-12-04: a build without PyFlink's key and side-output maps failed
    with "Cannot map checkpoint/savepoint state for operator b69acf5b... to the new
    program" (the dead-letter sink). The sinks' ids are pinned since (setUidHash:
    jobs/frontier.py PINNED_IDS); the ids of operators that keep no state may move,
    since Flink skips a savepoint's empty state for an id it does not find. A change of
    the graph must keep the stateful ids or say in its release how to cross over."""
    done = subprocess.run([sys.executable, "-c", _OPERATOR_IDS, "--set", "flink.parallelism=2"],
                          capture_output=True, text=True, timeout=300)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("IDS ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-3000:]
    nodes = json.loads(lines[0][4:])
    stateful = {op: name for op, name, factory, uid in nodes
                if uid or not (factory in _STATELESS or name.startswith(_STATELESS_NAMES))}
    expected = set(FRONTIER_OPERATOR_IDS.split())
    gone = sorted(expected - set(stateful))
    new = sorted(f"{op} ({name})" for op, name in stateful.items() if op not in expected)
    assert not gone and not new, f"ids no longer in the graph: {gone}; new ids: {new}"
