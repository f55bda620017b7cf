"""Politeness when leases and completions travel at once (at-least-once) and the fetcher
paces hosts itself: both jobs crawl the synthetic web while every lease and completion
record is delivered twice, and the frontier is killed (kill -9) and restored from its
last checkpoint — older than what the fetcher has seen: the fetcher keeps running with
leases the restored frontier never granted — and later the fetcher is killed and
restored too. The web's own request log must show zero violations of every kind,
every page indexed, and no (url_id, url_version) twice. (A restore from a checkpoint
older than the last completed one would repeat index events that checkpoint committed:
Flink's exactly-once sinks hold from the latest checkpoint only.)"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from crawler.run import JobProcess, Watcher, publish_seeds, synthetic_overrides
from crawler.testkit.synthetic_web import SyntheticWeb, build_sites
from udfs.config import TOPIC_KEYS, load_config

MIN_GAP_S = 0.3
DUPLICATE = ("dup", b"1")


class Duplicator:
    """Sends every record of some topics a second time, 0-2 s later (at-least-once
    delivery at its worst); the copies carry a header so they are not copied again."""

    def __init__(self, cfg, topics: list[str]) -> None:
        self.consumer = KafkaConsumer(*topics, bootstrap_servers=cfg["kafka.bootstrap_servers"],
                                      auto_offset_reset="earliest", enable_auto_commit=False)
        self.producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
        self.copies = 0
        self.stopped = False
        self.rng = random.Random(5)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        pending: list[tuple[float, object]] = []
        while not self.stopped:
            # poll, not the consumer's iterator: that one returns only after 200 ms
            # without a record, and copies waited for such a lull (up to 3.4 s late)
            for batch in self.consumer.poll(timeout_ms=100).values():
                pending += [(time.monotonic() + self.rng.random() * 2, m) for m in batch
                            if DUPLICATE not in (m.headers or [])]
            now = time.monotonic()
            for _due, m in [p for p in pending if p[0] <= now]:
                self.producer.send(m.topic, m.value, key=m.key, headers=[DUPLICATE])
                self.copies += 1
            pending = [p for p in pending if p[0] > now]

    def stop(self) -> None:
        self.stopped = True
        self.thread.join(10)
        self.producer.flush()
        self.producer.close()
        self.consumer.close()


def checkpoints(root: Path) -> list[Path]:
    """Completed checkpoints under a job's checkpoint folder, oldest first."""
    done = [p for p in root.glob("*/chk-*") if (p / "_metadata").exists()]
    return sorted(done, key=lambda p: int(p.name.split("-")[1]))


def wait_for(predicate, timeout_s: float, jobs: list[JobProcess], what: str,
             detail=lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        assert all(j.alive() for j in jobs), [j.report() for j in jobs]
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}{detail()}")


def missing_detail(expected: set[str], watcher: Watcher, web: SyntheticWeb,
                   phases: list[tuple[str, float]]) -> str:
    """The pages not indexed yet, with their leases, completions and requests (wall-clock
    ms, as in lease ids) and when each fault came: what a timeout needs to say whether a
    page was never leased, leased and never sent, sent and its completion lost, or
    refused by the frontier."""
    missing = sorted(expected - watcher.progress.urls)
    wall = time.time() - time.monotonic()  # the web's log is on the monotonic clock
    account = {u: {
        "leases": [(r["url_version"], r["attempt"], r["kind"], r["lease_id"][-20:],
                    r["prev_lease_id"] and r["prev_lease_id"][-20:])
                   for r in watcher.leases if r["url"] == u],
        "completions": [(c["url_version"], c["attempt"], c["outcome"], c["lease_id"][-20:],
                         c["fetched_at_ms"], c["error"]) for c in watcher.completions
                        if c["url"] == u],
        "requests": [(int((q.start + wall) * 1000), q.status) for q in list(web.log)
                     if q.host + q.path == u]} for u in missing[:5]}
    return (f"; {len(missing)} not indexed; faults at {[(n, int(t * 1000)) for n, t in phases]}"
            f"; the first ones: {account}")


@pytest.mark.timeout(900)
def test_duplicated_records_and_restores_from_older_checkpoints_keep_politeness(
        cfg, fresh_topics, tmp_path):
    web = SyntheticWeb(build_sites(8, seed=3, pages=(25, 35)),
                       log_path=str(tmp_path / "web.jsonl"))
    web.start()
    names = fresh_topics(*TOPIC_KEYS, partitions=2)
    topic = dict(zip(TOPIC_KEYS, names, strict=True))
    overrides = [f"topics.{k}.name={n}" for k, n in topic.items()]
    overrides += synthetic_overrides(web, tmp_path, MIN_GAP_S) + [
        "flink.restart_strategy=none", "frontier.lease_timeout_s=20",
        "fetch.total_timeout_s=10", "frontier.retry_base_s=2", "flink.checkpoints_retained=3",
        # Every host is a "hot" one here: past 10 URLs its queue goes through its shards
        # (udfs/core/shards.py), so the restores below also cut moves in flight.
        "frontier.shard_above_urls=10", "frontier.host_shards=3",
        "frontier.shard_refill_urls=8",
        # Not what this test is about, and minutes of its run at the default: the
        # backoff of a host whose robots.txt answers 5xx first (15-30 s, then 30-60 s).
        "politeness.backoff_base_s=2"]
    ck = {n: tmp_path / f"checkpoints-{n}" for n in ("frontier", "fetcher")}
    jobs = {n: JobProcess(n, [*overrides, f"flink.checkpoint_dir={ck[n]}"],
                          tmp_path / f"{n}.log") for n in ("frontier", "fetcher")}
    run_cfg = load_config(env={}, overrides=overrides)
    sites = {web.host_key(s): s for s in web.site_list}
    expected = {hk + p for hk, s in sites.items()
                for p in ["/", *(f"/p/{i}" for i in range(s.pages))]}
    watcher = duplicator = None
    phases: list[tuple[str, float]] = []  # (fault, wall-clock time)
    try:
        for job in jobs.values():
            job.start()
        duplicator = Duplicator(cfg, [topic["leases"], topic["completions"]])
        publish_seeds(run_cfg, [hk + "/" for hk in sites])
        watcher = Watcher(run_cfg, keep_records=True)
        live = list(jobs.values())
        wait_for(lambda: len(watcher.poll().urls) >= len(expected) // 4 and
                 len(checkpoints(ck["frontier"])) >= 1, 300, live, "a quarter of the pages")

        # kill -9 of the frontier; restore it from its last checkpoint while the fetcher
        # keeps running with the leases the lost epoch granted.
        jobs["frontier"].kill()
        phases.append(("frontier killed", time.time()))
        older = checkpoints(ck["frontier"])[-1]
        jobs["frontier"] = JobProcess("frontier", jobs["frontier"].overrides,
                                      tmp_path / "frontier-2.log", from_checkpoint=str(older))
        jobs["frontier"].start()
        live = list(jobs.values())
        wait_for(lambda: len(watcher.poll().urls) >= len(expected) // 2 and
                 len(checkpoints(ck["fetcher"])) >= 1, 300, live, "half of the pages")

        # kill -9 of the fetcher; restore it from its last checkpoint: it reads again the
        # leases since, which the killed one may have sent, and must not send them.
        jobs["fetcher"].kill()
        phases.append(("fetcher killed", time.time()))
        jobs["fetcher"] = JobProcess(
            "fetcher", jobs["fetcher"].overrides, tmp_path / "fetcher-2.log",
            from_checkpoint=str(checkpoints(ck["fetcher"])[-1]))
        jobs["fetcher"].start()
        live = list(jobs.values())
        wait_for(lambda: expected <= watcher.poll().urls, 420, live, "every page",
                 lambda: missing_detail(expected, watcher, web, phases))
    finally:
        if duplicator:
            duplicator.stop()
        for job in jobs.values():
            job.stop()
        if watcher:
            watcher.poll()
            watcher.close()
        web.stop()

    violations = web.violations(run_cfg["robots.user_agent"], MIN_GAP_S)
    assert violations == dict.fromkeys(violations, 0), violations
    ids = [e["event_id"] for e in watcher.events]
    assert len(ids) == len(set(ids)), "an (url_id, url_version) was indexed twice"
    assert duplicator.copies > 100
    moves = KafkaConsumer(topic["shards"], bootstrap_servers=cfg["kafka.bootstrap_servers"],
                          auto_offset_reset="earliest", isolation_level="read_committed",
                          consumer_timeout_ms=2000)
    from udfs.wire.avro import registry

    kinds = [registry().decode("shard_transfer", m.value)["kind"] for m in moves]
    moves.close()
    assert kinds.count("PUT") > 0 and kinds.count("REFILL") > 0, kinds
    not_sent = watcher.progress.outcomes.get("NOT_SENT", 0)
    print(f"pace faults: {len(ids)} index events, {len(web.log)} requests, "
          f"{duplicator.copies} duplicated records, restored from {older.name}, "
          f"outcomes {watcher.progress.outcomes} (NOT_SENT {not_sent}), shard moves "
          f"{dict((k, kinds.count(k)) for k in ('PUT', 'PULL', 'REFILL'))}")
