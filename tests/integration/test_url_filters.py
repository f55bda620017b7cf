"""A user's URL filters, from a module outside this package, in a real frontier job: the
URLs they drop are never leased, a rewrite is leased as rewritten, a filter that raises
costs only its URL (a dead letter), and urls_filtered_total counts each filter."""

from __future__ import annotations

import os
import textwrap

from kafka import KafkaProducer

from crawler.run import JobProcess
from tests.integration.conftest import free_port, metric, wait_for_metric
from tests.integration.test_frontier_job import Topic, completion_for
from udfs.wire.avro import registry

REG = registry()

FILTERS = textwrap.dedent('''
    class SkipPaths:
        def __init__(self, pattern):
            self.pattern = pattern
        def filter(self, url, link):
            return None if self.pattern in url else url

    class LowerCasePaths:
        """A rewrite: the path in lower case."""
        def filter(self, url, link):
            scheme, _, rest = url.partition("://")
            host, slash, path = rest.partition("/")
            return f"{scheme}://{host}{slash}{path.lower()}"

    class Fragile:
        def filter(self, url, link):
            if "boom" in url:
                raise KeyError("a bug in the filter")
            return url
''')


def test_user_filters_in_the_frontier_job(cfg, fresh_topics, other_topics, tmp_path, monkeypatch):
    (tmp_path / "site_filters.py").write_text(FILTERS)
    # Outside the package: the job finds it the way a user's module is found (PYTHONPATH
    # here; installed, or shipped with -pyfs, on a cluster).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    disc, leases, comps, index, dlq = fresh_topics("disc", "leases", "comps", "index", "dlq")
    port = free_port()
    overrides = [f"topics.discovered.name={disc}", f"topics.leases.name={leases}",
                 f"topics.completions.name={comps}", f"topics.index.name={index}",
                 f"topics.deadletter.name={dlq}", "flink.checkpoint_interval_ms=1000",
                 "flink.restart_strategy=none", "politeness.min_gap_s=0.1",
                 'urls.filters=["site_filters:SkipPaths pattern=/private/", '
                 '"site_filters:LowerCasePaths", "site_filters:Fragile"]',
                 f"metrics.frontier_port={port}"]
    overrides += other_topics
    job = JobProcess("frontier", overrides, tmp_path / "frontier.log")
    job.start()
    try:
        host = "http://f.test"
        urls = ["/", "/private/a", "/Mixed/Case", "/boom", "/kept"]
        producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
        producer.send(disc, REG.encode("discovered", {
            "host_key": host, "source": "SEED", "parent_url": None, "depth": 0,
            "redirect_hops": 0, "discovered_at_ms": 0,
            "links": [{"url": host + u, "lastmod_ms": None, "priority": None}
                      for u in urls]}), key=host.encode())
        producer.flush()
        lease_topic = Topic(cfg, leases, job)
        (_, robots), = lease_topic.wait("lease", lambda s: len(s) >= 1)
        assert robots["kind"] == "ROBOTS"
        producer.send(comps, REG.encode("completion", completion_for(
            robots, kind="ROBOTS", outcome="OK", http_status=200, body=b"")),
            key=host.encode())
        producer.flush()

        # Three pages are left after the chain; each is answered as it comes.
        def pages(records):
            return [rec for _, rec in records if rec["kind"] == "PAGE"]

        answered: set[str] = set()
        while len(answered) < 3:
            for lease in pages(lease_topic.wait("lease", lambda s: len(pages(s)) > len(
                    answered))):
                if lease["lease_id"] not in answered:
                    answered.add(lease["lease_id"])
                    producer.send(comps, REG.encode("completion", completion_for(
                        lease, outcome="OK", http_status=200)), key=host.encode())
            producer.flush()
        assert sorted(r["url"] for r in pages(lease_topic.seen)) == [
            "http://f.test/", "http://f.test/kept", "http://f.test/mixed/case"]

        letters = Topic(cfg, dlq, job).wait("dead_letter", lambda s: len(s) >= 1)
        (letter,) = [rec for _, rec in letters]
        assert letter["error_type"] == "UrlFilterError"
        assert letter["url"] == "http://f.test/boom"
        assert "Fragile raised KeyError" in letter["reason"]
        samples = wait_for_metric(port, "urls_filtered_total", lambda v: v == 1,
                                  filter="SkipPaths")
        assert metric(samples, "urls_filtered_total", filter="Fragile") == 1
        assert metric(samples, "urls_filtered_total", filter="LowerCasePaths") == 0
        assert metric(samples, "dead_letters_total", reason="UrlFilterError") == 1
    finally:
        job.stop()
