"""A checkpoint of an earlier build's frontier, whose near-duplicate bands kept a bucket
as a MapState of fingerprints (d628a08, the last build with that layout), restored into
this build's frontier, which keeps a bucket as one packed value (udfs/frontier/index.py,
`_moved_from_map`): a page fingerprinted before the upgrade must still flag its near twin
completed after it. The earlier build runs from a git worktree of this repository."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer

from crawler.run import JobProcess
from tests.integration.test_frontier_job import Topic, completion_for
from tests.integration.test_pace_faults import checkpoints
from udfs.core.fingerprints import to_signed64
from udfs.wire.avro import registry

REG = registry()
ROOT = Path(__file__).resolve().parents[2]
MAP_LAYOUT_BUILD = "d628a08"
S1 = 0x0123_4567_89AB_CDEF
S2 = 0xFEDC_0000_7654_3210  # 32 bits away from S1: no band in common


@pytest.fixture
def earlier_tree(tmp_path) -> Iterator[Path]:
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e",
                       f"{MAP_LAYOUT_BUILD}^{{commit}}"], capture_output=True).returncode:
        pytest.skip(f"needs the repository's history ({MAP_LAYOUT_BUILD}): a shallow clone")
    tree = tmp_path / "earlier"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree),
                    MAP_LAYOUT_BUILD], check=True, capture_output=True)
    try:
        (tree / ".cache").symlink_to(ROOT / ".cache")  # the connector jars
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       capture_output=True)


@pytest.mark.timeout(600)
def test_near_duplicate_buckets_of_the_map_layout_survive_an_upgrade(
        cfg, fresh_topics, other_topics, earlier_tree, tmp_path, monkeypatch):
    disc, leases, comps, index, dlq = fresh_topics("disc", "leases", "comps", "index", "dlq",
                                                   partitions=2)
    ck = tmp_path / "checkpoints"
    overrides = [f"topics.discovered.name={disc}", f"topics.leases.name={leases}",
                 f"topics.completions.name={comps}", f"topics.index.name={index}",
                 f"topics.deadletter.name={dlq}", "flink.checkpoint_interval_ms=1000",
                 "flink.restart_strategy=none", "politeness.min_gap_s=0.2",
                 "frontier.lookahead_s=0", "frontier.max_lookahead_leases=0",
                 f"flink.checkpoint_dir={ck}", *other_topics]
    producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
    lease_topic, index_topic = Topic(cfg, leases), Topic(cfg, index)
    answered: set[str] = set()

    def seed(host: str, paths: list[str]) -> None:
        rec = {"host_key": host, "source": "SEED", "parent_url": None, "depth": 0,
               "redirect_hops": 0, "discovered_at_ms": 0,
               "links": [{"url": host + p, "lastmod_ms": None, "priority": None}
                         for p in paths]}
        producer.send(disc, REG.encode("discovered", rec), key=host.encode())
        producer.flush()

    def crawl(pages: dict[str, tuple[int, str]], job: JobProcess, events: int) -> dict:
        """Answer every lease (robots.txt: empty; a page: its SimHash, and a body and text
        hash of its own, so that no page is an exact duplicate) until `events` index
        events are committed; they are returned by URL."""
        lease_topic.job = index_topic.job = job
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            lease_topic.wait("lease", lambda s: True, timeout_s=1)
            for _, lease in lease_topic.seen:
                if lease["lease_id"] in answered:
                    continue
                if lease["kind"] == "ROBOTS":
                    done = completion_for(lease, kind="ROBOTS", outcome="OK",
                                          http_status=200, body=b"")
                else:
                    simhash, digit = pages[lease["url"]]
                    done = completion_for(lease, outcome="OK", http_status=200,
                                          simhash=to_signed64(simhash), body_sha256=digit * 64,
                                          text_sha256=digit * 64)
                producer.send(comps, REG.encode("completion", done),
                              key=lease["host_key"].encode())
                answered.add(lease["lease_id"])
            producer.flush()
            index_topic.wait("index_event", lambda s: True, timeout_s=1)
            if len(index_topic.seen) >= events:
                return {rec["url"]: rec for _, rec in index_topic.seen}
        raise AssertionError(f"timed out; index events {index_topic.seen}\n{job.report()}")

    earlier = JobProcess("frontier", overrides, tmp_path / "earlier.log")
    # The job as the earlier checkout runs it: its packages first on the path, in the
    # launcher and in the embedded interpreter (whose path names the checkout the job
    # starts from: udfs/flink/runtime.py). The job takes both when it starts.
    with monkeypatch.context() as m:
        m.setenv("PYTHONPATH", str(earlier_tree))
        m.chdir(earlier_tree)
        earlier.start()
    try:
        seed("http://a.test", ["/", "/x"])
        before = crawl({"http://a.test/": (S1, "1"), "http://a.test/x": (S1 ^ 1 << 5, "2")},
                       earlier, 2)
        a_id = before["http://a.test/"]["url_id"]
        assert before["http://a.test/x"]["near_duplicate_of"] == a_id, before
        # The index events are committed with the checkpoint that holds the bands' state
        # of both pages; two more, so that the last one surely has it.
        seen = len(checkpoints(ck))
        deadline = time.monotonic() + 60
        while len(checkpoints(ck)) < seen + 2 and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        earlier.kill()
    upgraded = JobProcess("frontier", overrides, tmp_path / "upgraded.log",
                          from_checkpoint=str(checkpoints(ck)[-1]))
    upgraded.start()
    try:
        pages = {"http://b.test/": (S1 ^ 1 << 40, "3"), "http://c.test/": (S2, "4")}
        seed("http://b.test", ["/"])
        seed("http://c.test", ["/"])
        after = crawl(pages, upgraded, 4)
        # b's fingerprint shares three bands with a's, kept by the earlier build only.
        assert after["http://b.test/"]["near_duplicate_of"] == a_id, after
        assert after["http://c.test/"]["near_duplicate_of"] is None, after
        # A bucket made by this build after the upgrade flags as well.
        pages["http://d.test/"] = (S2 ^ 1 << 62, "5")
        seed("http://d.test", ["/"])
        after = crawl(pages, upgraded, 5)
        assert after["http://d.test/"]["near_duplicate_of"] == after["http://c.test/"]["url_id"]
    finally:
        upgraded.stop()
        producer.close()
