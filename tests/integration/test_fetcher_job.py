"""The fetcher job on a MiniCluster with real Kafka against the synthetic web on loopback
(reachable only because the test allows 127.0.0.0/8 and maps the .test names to it)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from kafka import KafkaConsumer, KafkaProducer

from crawler.run import JobProcess
from crawler.testkit.synthetic_web import SyntheticWeb, build_sites
from tests.integration.conftest import STARTUP_S, free_port, metric, wait_for_metric
from udfs.core.fingerprints import url_id
from udfs.wire.avro import registry

REG = registry()


def _lease(url, host_key, kind="PAGE", lease_id="L", expires_in_s=300):
    now = int(time.time() * 1000)
    return {"lease_id": lease_id, "url_id": url_id(url), "url_version": 1, "attempt": 1,
            "issued_at_ms": now, "expires_at_ms": now + expires_in_s * 1000, "url": url,
            "host_key": host_key, "kind": kind, "depth": 0, "etag": None,
            "last_modified": None}


def fetcher_overrides(web, tmp_path, topics: tuple[str, str, str, str], port: int
                      ) -> list[str]:
    """The fetcher job's settings for a test: its topics (leases, completions,
    discovered, dead letters), 1 s checkpoints, no restarts, the synthetic web's names on
    loopback, objects and the open WARC file under tmp_path, metrics on `port`."""
    leases, comps, disc, dlq = topics
    return [f"topics.leases.name={leases}", f"topics.completions.name={comps}",
            f"topics.discovered.name={disc}", f"topics.deadletter.name={dlq}",
            "flink.checkpoint_interval_ms=1000", "flink.restart_strategy=none",
            "fetch.allowed_networks=[127.0.0.0/8]",
            f"fetch.static_hosts=[{','.join(web.static_hosts())}]",
            f"storage.local_dir={tmp_path / 'objects'}", f"warc.temp_dir={tmp_path / 'warc-temp'}",
            f"metrics.fetcher_port={port}"]


def _read(cfg, topic, schema, until, timeout_s=STARTUP_S):
    """(key, record) of the records of `topic` written with `schema` (every record, as
    bytes, if None), in topic order, once `until` holds for them. The completions topic
    also holds the URLs of pages that had too many for their completion."""
    consumer = KafkaConsumer(topic, bootstrap_servers=cfg["kafka.bootstrap_servers"],
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             isolation_level="read_committed", consumer_timeout_ms=500)
    seen: list = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen.extend((m.key, m.value if schema is None else REG.decode(schema, m.value))
                    for m in consumer if schema is None or REG.writer_name(m.value) == schema)
        if until(seen):
            consumer.close()
            return seen
    consumer.close()
    raise AssertionError(f"timed out waiting on {topic}; have {seen}")


def test_fetcher_job_fetches_stores_and_reports(cfg, fresh_topics, tmp_path):
    web = SyntheticWeb(build_sites(6, seed=4))
    web.start()
    leases, comps, disc, dlq = fresh_topics("leases", "comps", "disc", "dlq")
    port = free_port()
    overrides = fetcher_overrides(web, tmp_path, (leases, comps, disc, dlq), port)
    # Its own process group, output to a log file (a pipe nobody reads could fill up).
    job = JobProcess("fetcher", overrides, tmp_path / "fetcher.log")
    job.start()
    try:
        site = next(s for s in web.site_list if s.robots == "rules")
        hk = web.host_key(site)
        producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
        sent = [_lease(hk + "/robots.txt", hk, "ROBOTS", "L1"),
                _lease(hk + "/p/0", hk, "PAGE", "L2"),
                _lease(hk + "/p/1", hk, "PAGE", "L3", expires_in_s=0)]  # expired: not fetched
        for lease in sent:
            producer.send(leases, REG.encode("lease", lease), key=hk.encode())
        producer.send(leases, b"not a lease")
        producer.flush()

        got = _read(cfg, comps, "completion", lambda s: len(s) >= 3)
        # Flink's working files (the MiniCluster's folder) are in a folder of the job's
        # own, not loose in /tmp, where a job stopped by a signal would leave them.
        assert list(job.tmp_dir.glob("minicluster_*")), list(job.tmp_dir.iterdir())
        by_lease = {rec["lease_id"]: (key, rec) for key, rec in got}
        assert set(by_lease) == {"L1", "L2", "L3"}
        # The expired lease is not sent, and said so: the frontier takes it back at once.
        _, late = by_lease["L3"]
        assert late["outcome"] == "NOT_SENT" and "expiry" in late["error"]
        _, robots = by_lease["L1"]
        assert robots["outcome"] == "OK" and b"Disallow: /private/" in robots["body"]
        key, page = by_lease["L2"]
        assert key == hk.encode() and page["outcome"] == "OK" and page["links_count"] > 0
        assert (tmp_path / "objects" / page["object_key"]).exists()
        # The page's URLs: inside its completion (v4), one entry per target host, and
        # nothing else on the topic (few links fit in the record).
        found = page["discovered"]
        assert found and all(f["source"] == "LINK" and f["depth"] == 1 for f in found)
        assert any(f["host_key"] == hk for f in found)
        assert sum(len(f["links"]) for f in found) <= page["links_count"]
        everything = _read(cfg, comps, None, lambda s: len(s) >= 3)
        assert [REG.writer_name(v) for _, v in everything] == ["completion"] * 3
        letters = _read(cfg, dlq, "dead_letter", lambda s: len(s) >= 1)
        assert letters[0][1]["stage"] == "fetcher.decode"
        # Only loopback was contacted, and only for the two live leases.
        assert sorted(r.path for r in web.log) == ["/p/0", "/robots.txt"]
        # Flink's Prometheus reporter serves the fetcher's metrics: outcomes by class,
        # requests, bytes, and the politeness self-check, which reads 0.
        # (suffixes from the group key on: "fetches_total" alone would match
        # outcome_robots_fetches_total too)
        samples = wait_for_metric(port, "outcome_fetches_total", lambda v: v == 2,
                                  outcome="2xx")
        assert metric(samples, "outcome_fetches_total", outcome="not_sent") == 1
        assert metric(samples, "outcome_robots_fetches_total", outcome="2xx") == 1
        assert metric(samples, "bytes_stored_total") == page["body_bytes"]
        assert metric(samples, "parse_seconds_count") == 1
        assert metric(samples, "requests_started_total") == 2
        assert metric(samples, "bytes_fetched_total") == page["body_bytes"] + robots[
            "body_bytes"]
        for rule in ("in_flight", "gap", "retry_after"):
            assert metric(samples, "politeness_breaches_total", rule=rule) == 0
        print("fetcher metric names:", sorted({n for n, _ in samples if n.endswith("_total")
                                               and "Kafka" not in n}))
    finally:
        job.stop()
        web.stop()
    assert not job.tmp_dir.exists()  # removed with the job


# jobs/fetcher.py's graph as Flink plans it, printed instead of run.
_PLAN = """
import sys
from pyflink.datastream import StreamExecutionEnvironment
import jobs.fetcher

def plan(env, name=None):
    print("PLAN " + env.get_execution_plan().replace("\\n", " "), flush=True)

StreamExecutionEnvironment.execute = plan
jobs.fetcher.main(sys.argv[1:])
"""


def test_a_pages_urls_and_its_completion_leave_through_the_fetch_tasks_own_producer():
    """The order of a page's URLs sent before its completion (too many to go inside it)
    holds through a crash only if both leave through one Kafka producer: the fetch
    subtask's own completions sink, every edge between them FORWARD at one parallelism
    (no rebalance that could send them to two sink subtasks), at a parallelism above 1
    too."""
    done = subprocess.run([sys.executable, "-c", _PLAN, "--set", "flink.parallelism=3"],
                          capture_output=True, text=True, timeout=300)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("PLAN ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-3000:]
    nodes = {n["id"]: n for n in json.loads(lines[0][5:])["nodes"]}
    (fetch,) = [n for n in nodes.values() if n["contents"] == "fetch, store, parse"]

    def path_to_fetch(node: dict) -> list[tuple[dict, str]] | None:
        """The (node, ship strategy into it) edges from the fetch operator to `node`."""
        for pred in node.get("predecessors", []):
            before = nodes[pred["id"]]
            if before is fetch:
                return [(node, pred["ship_strategy"])]
            rest = path_to_fetch(before)
            if rest is not None:
                return [*rest, (node, pred["ship_strategy"])]
        return None

    writers = [n for n in nodes.values() if n["contents"].endswith(": Writer")]
    paths = {w["id"]: path_to_fetch(w) for w in writers}
    (completions,) = [p for p in paths.values()
                      if p and any("(dest = 'C')" in n["contents"] for n, _ in p)]
    assert [s for _, s in completions] == ["FORWARD"] * len(completions), completions
    assert {n["parallelism"] for n, _ in completions} == {fetch["parallelism"]} == {3}
