"""A hot host in the frontier job: far more URLs than its resident window, so most of
them go through the cold queue in keyed state (spill, flush, load back) — and every
URL is still leased exactly once and indexed once."""

from __future__ import annotations

from kafka import KafkaProducer

from crawler.run import JobProcess
from tests.integration.conftest import STARTUP_S
from tests.integration.test_frontier_job import REG, Topic, completion_for

HOST = "http://hot.test"
URLS = 1000
WINDOW = 50


def test_a_host_with_twenty_times_its_window_is_crawled_exactly_once(cfg, fresh_topics,
                                                                      other_topics, tmp_path):
    disc, leases, comps, index, dlq = fresh_topics("disc", "leases", "comps", "index", "dlq")
    overrides = [f"topics.discovered.name={disc}", f"topics.leases.name={leases}",
                 f"topics.completions.name={comps}", f"topics.index.name={index}",
                 f"topics.deadletter.name={dlq}", "flink.checkpoint_interval_ms=1000",
                 "flink.restart_strategy=none", f"frontier.max_resident_urls={WINDOW}",
                 "frontier.cold_bucket_s=600", "politeness.min_gap_s=0",
                 "politeness.duration_factor=0", "politeness.max_in_flight=40"]
    overrides += other_topics
    job = JobProcess("frontier", overrides, tmp_path / "frontier.log")
    job.start()
    try:
        producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
        links = [{"url": f"{HOST}/p/{i}", "lastmod_ms": None, "priority": None}
                 for i in range(URLS)]
        seed = {"host_key": HOST, "source": "SEED", "parent_url": None, "depth": 0,
                "redirect_hops": 0, "discovered_at_ms": 0, "links": links}
        producer.send(disc, REG.encode("discovered", seed), key=HOST.encode())
        producer.flush()

        lease_topic = Topic(cfg, leases, job)
        answered: set[str] = set()

        def answer_all(records) -> bool:
            for _, lease in records:
                if lease["lease_id"] in answered:
                    continue
                answered.add(lease["lease_id"])
                if lease["kind"] == "ROBOTS":
                    extra = {"body": b"User-agent: *\nAllow: /\n"}
                else:  # distinct pages: no duplicate flags
                    extra = {"body_sha256": lease["url_id"] * 4,
                             "simhash": int(lease["url_id"][:15], 16)}
                producer.send(comps, REG.encode("completion", completion_for(
                    lease, outcome="OK", http_status=200, **extra)),
                    key=lease["host_key"].encode())
            producer.flush()
            return sum(1 for _, r in records if r["kind"] == "PAGE") >= URLS

        got = lease_topic.wait("lease", answer_all, timeout_s=STARTUP_S + 120)
        pages = [r for _, r in got if r["kind"] == "PAGE"]
        assert sorted(r["url"] for r in pages) == sorted(link["url"] for link in links)
        assert {(r["url_version"], r["attempt"]) for r in pages} == {(1, 1)}
        events = Topic(cfg, index, job).wait("index_event", lambda s: len(s) >= URLS,
                                             timeout_s=120)
        assert sorted(rec["event_id"] for _, rec in events) == sorted(
            f"{r['url_id']}:1" for r in pages)
    finally:
        job.stop()


def test_a_virtual_clock_drives_the_frontier_timers_through_the_clock_stream(cfg, fresh_topics,
                                                                             other_topics,
                                                                             tmp_path):
    # The same event-time path as the wall clock, fed from a topic: jump 400 s ahead
    # and the unanswered robots.txt lease (valid 300 s) expires at once and is re-let.
    disc, leases, comps, index, dlq, clock = fresh_topics(
        "disc", "leases", "comps", "index", "dlq", "clock")
    overrides = [f"topics.discovered.name={disc}", f"topics.leases.name={leases}",
                 f"topics.completions.name={comps}", f"topics.index.name={index}",
                 f"topics.deadletter.name={dlq}", "flink.checkpoint_interval_ms=1000",
                 "flink.restart_strategy=none", f"frontier.clock_topic={clock}",
                 "frontier.lease_timeout_s=300"]
    overrides += other_topics
    job = JobProcess("frontier", overrides, tmp_path / "frontier.log")
    job.start()
    try:
        producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
        seed = {"host_key": HOST, "source": "SEED", "parent_url": None, "depth": 0,
                "redirect_hops": 0, "discovered_at_ms": 0,
                "links": [{"url": f"{HOST}/", "lastmod_ms": None, "priority": None}]}
        producer.send(disc, REG.encode("discovered", seed), key=HOST.encode())
        producer.flush()
        lease_topic = Topic(cfg, leases, job)
        (_, first), = lease_topic.wait("lease", lambda s: len(s) >= 1)
        assert first["kind"] == "ROBOTS"
        virtual_ms = first["issued_at_ms"] + 400_000

        def ticked_until_relet(records) -> bool:
            producer.send(clock, b"tick", timestamp_ms=virtual_ms)
            producer.flush()
            return len(records) >= 2

        got = lease_topic.wait("lease", ticked_until_relet, timeout_s=60)
        again = got[1][1]
        assert again["kind"] == "ROBOTS" and again["lease_id"] != first["lease_id"]
        # Re-let when the lease expired in virtual time (300 s), seconds of wall time later.
        assert again["issued_at_ms"] >= first["expires_at_ms"]
        assert again["expires_at_ms"] - again["issued_at_ms"] == 300_000
    finally:
        job.stop()
