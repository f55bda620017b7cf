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


# The frontier's graph as Flink will run it: the id of every operator (its uid's hash, or
# for the Table API's sources and sinks, which have no uid, a hash of where it stands in
# the graph), printed instead of run.
_OPERATOR_IDS = """
import json, sys
from pyflink.datastream import StreamExecutionEnvironment
import jobs.frontier

def ids(env, name=None):
    graph = env._generate_stream_graph(clear_transformations=False).getJobGraph()
    out = []
    for vertex in graph.getVerticesAsArray():
        for pair in list(vertex.getOperatorIDs()):
            user = pair.getUserDefinedOperatorID()
            op = user.get() if user.isPresent() else pair.getGeneratedOperatorID()
            out.append((op.toString(), vertex.getName()))
    print("IDS " + json.dumps(out), flush=True)

StreamExecutionEnvironment.execute = ids
jobs.frontier.main(sys.argv[1:])
"""

# The frontier's operator ids as of 83d9759 (the build that last landed) and since.
FRONTIER_OPERATOR_IDS = """
    040241d18de9a6ff8e3f34ff35de8173 097fcb659f1f8012e811db1ee620cfdb
    0fee2e5fcfc75300a38a9e2cbbbb27bb 1171dea6747ab509fdaefbe74f7195af
    1ac90c6c50ae971e48bbe3e6fa388e20 28e6d4aa7078e4f334b37b73aef0da9e
    2963852293169ba90d9d1e7d6308db5c 2d123af4288eeceb3d5c71430ccf14b7
    2fa5fc7df17f61cb0e1946288970d799 31b58356b32c73d2c8917ef863548cb3
    36b919e5cf8fa2395a14e16ea9fa68c2 37f8b256c56da56e0fcadbcccada0204
    39f1316a57ad48e0f350646b6209ca5f 3b545bd5fcdbbdc531507ce12b093c06
    3c3d6531f6c2755ee9cadaf037da3799 3c826681eff1ad82b28d14f87a1e4aa6
    3df18b7199ca3c1e4a74ca4ed05fe339 422ec7c8ad3eb59c2f5c112ecd866985
    4455df8be00fc5fb452d69490fea2a28 44629ac073dee186ccecbbb827af70f2
    5206d8d510a21f00f3da60ff576fed85 5c353122751fb552b1a97e6509a0748f
    5c4ca2fea30dcf09bf3ee40c495fe808 5de4df6df425303a9b6afc0dd9facdbb
    5ea93d16d57d55ed3c511670e5d6b44b 6c12e67192bdf9f0fdb9c6f3a306704c
    6cdc5bb954874d922eaee11a8e7b5dd5 6dc0226b15c44c9c2e1f9ea1a65fd400
    6f4831f0b857fc76b901b198b1e1c43e 7046a2ef792c972ed66622fdb8f595b1
    70e03e87fab72c126dcc0e47a503ba64 7521420b98e359c39aa0a0a7d0ddc276
    7735e382274d1ab45c35eefa26713f14 7f77772ef4be4a34e78a34dfe61cdfa1
    86cceb62edc38d2968d06b458ba67265 881defaa7068857ec714b87b2ee55ddd
    88fe84198ca8e351367f57879f5cddef 9275516841fe47d97cdd0ef9959d8f16
    9832da92262c4655abd1e13b2a0354df 9ce3bd126e3245d1a4b04a024fb08a3f
    9f597aaa34dc3651d312b2a0e46e82ec a321f10b2afc1186e06cae86d7af371e
    a97e14312730794757ba17e66686b24d aac2f4755640575b37728c86885837ac
    acd29bfa50266d39ac083f278158e19c ada2b2d3a4c06e6728d2d90a9a1da95d
    b69acf5beaf867918616906b1c57741b b6f130713a5eabc9a9f97c8aaa2044ee
    b93bfbf0342949e6d7dfee62f8675109 b9816b0bbb5bb885bab56115fd2c7c4f
    c14f8aca17973b6e3344b49e754f7bd9 c1f595ac21dbcb9a7c812a2b7a1142d0
    c6faed23bf681e19b3ec9c30db2da027 cb5d8ec89084074c663ab58a1710914f
    cbc357ccb763df2852fee8c4fc7d55f2 d3e20f57b40a0340380c5bf4994dde28
    da31655a8d44781ae60952cf3185d619 da99297be29e3703700bfba9c700180a
    db8866e23ff33be2270b0a6046f80853 e1f4e2bc69906b4fbe6709ffd6adff4b
    ea703f211a4544edb9a1fe0e17eb8d59 ed99bcc09e0ce7c83435c5126765498b
    ef3ca9690d53161c8ab42c584d571394 f3bc45d4ef29c553b9d4a14015a89959
    fab99784b5132f49ae82f791af78a108 fb82e555929bda3aa395859f0cd20f56
    fe5d329cfc60ed39b5d9afcd06eaac54
"""


def test_the_frontier_restores_the_checkpoints_of_the_builds_before_it():
    """A checkpoint or savepoint holds each operator's state under the operator's id, and
    the frontier's state is never skipped on a restore: a build whose graph gives one
    stateful operator another id cannot start from an earlier build's savepoint. The
    Kafka sources and sinks (offsets, transactions) come from the Table API and have no
    uid: their ids follow from the graph's shape, so removing or adding an operator
    anywhere (a Python map, a side output, a SQL filter) can change them. Measured on
    2026-12-04: a build without PyFlink's key and side-output maps failed with "Cannot
    map checkpoint/savepoint state for operator b69acf5b... to the new program" (the
    dead-letter sink). A change of the graph must keep these ids (Flink's setUidHash
    pins an operator to its old id) or say in its release how to cross over."""
    done = subprocess.run([sys.executable, "-c", _OPERATOR_IDS, "--set", "flink.parallelism=2"],
                          capture_output=True, text=True, timeout=300)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("IDS ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-3000:]
    now = {op: vertex for op, vertex in json.loads(lines[0][4:])}
    expected = set(FRONTIER_OPERATOR_IDS.split())
    gone = sorted(expected - set(now))
    new = sorted(f"{op} in {now[op][:120]}" for op in set(now) - expected)
    assert not gone and not new, f"ids no longer in the graph: {gone}; new ids: {new}"
