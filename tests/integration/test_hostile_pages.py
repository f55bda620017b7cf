"""The hostile page set against the fetcher job (MiniCluster, process mode, real Kafka,
the synthetic web on loopback): each hostile page ends with PARSE_TIMEOUT or a clean
outcome, the pages of other hosts complete, and the job keeps running."""

from __future__ import annotations

import time

from kafka import KafkaProducer

from crawler.run import JobProcess
from crawler.status import get_json
from crawler.testkit.synthetic_web import HOSTILE_PAGES, SyntheticWeb, build_sites
from tests.integration.conftest import STARTUP_S, free_port, metric, wait_for_metric
from tests.integration.test_fetcher_job import REG, _lease, _read, fetcher_overrides


def test_hostile_pages_end_cleanly_and_other_hosts_are_fetched(cfg, fresh_topics, tmp_path):
    sites = build_sites(5, seed=4, hostile=len(HOSTILE_PAGES))
    web = SyntheticWeb(sites)
    web.start()
    leases, comps, disc, dlq = fresh_topics("leases", "comps", "disc", "dlq")
    port, rest = free_port(), free_port()
    overrides = fetcher_overrides(web, tmp_path, (leases, comps, disc, dlq), port) + [
        "parse.cpu_limit_s=1.0", "parse.workers=2", f"flink.local_rest_port={rest}"]
    job = JobProcess("fetcher", overrides, tmp_path / "fetcher.log")
    job.start()
    try:
        hostile = [s for s in sites if "hostile" in s.features]
        others = [s for s in sites if "hostile" not in s.features]
        # One hostile page per hostile host (each lease a head of its host), then one
        # ordinary page per other host.
        bad = {f"H{i}": web.host_key(s) + path
               for i, (s, path) in enumerate(zip(hostile, HOSTILE_PAGES, strict=True))}
        good = {f"G{i}": web.host_key(s) + "/p/0" for i, s in enumerate(others)}
        producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
        for lease_id, url in [*bad.items(), *good.items()]:
            hk = url.rsplit("/", 2)[0]  # http://siteN.test:port
            producer.send(leases, REG.encode("lease", _lease(url, hk, "PAGE", lease_id)),
                          key=hk.encode())
        producer.flush()
        start = time.monotonic()

        got = _read(cfg, comps, "completion", lambda s: len(s) >= len(bad) + len(good),
                    timeout_s=STARTUP_S)
        by_lease = {rec["lease_id"]: rec for _, rec in got}
        for lease_id, url in bad.items():
            rec = by_lease[lease_id]
            assert rec["url"] == url
            assert rec["outcome"] in ("OK", "PARSE_TIMEOUT"), rec
            assert rec["object_key"] and (tmp_path / "objects" / rec["object_key"]).exists()
        slow = next(by_lease[k] for k, u in bad.items() if u.endswith("/hostile/slow"))
        assert slow["outcome"] == "PARSE_TIMEOUT" and "CPU" in slow["error"]
        assert slow["links_count"] == 0 and slow["text_sha256"] is None
        for lease_id in good:
            assert by_lease[lease_id]["outcome"] == "OK", by_lease[lease_id]
            assert by_lease[lease_id]["links_count"] > 0
        # The page past its limit is recorded in a dead letter, with its URL and reason.
        letters = _read(cfg, dlq, "dead_letter", lambda s: len(s) >= 1, timeout_s=30.0)
        timed_out = [k for k, rec in by_lease.items() if rec["outcome"] == "PARSE_TIMEOUT"]
        assert sorted(rec["url"] for _, rec in letters) == sorted(bad[k] for k in timed_out)
        assert all(rec["stage"] == "fetcher.parse" and "limit" in rec["reason"]
                   for _, rec in letters)
        samples = wait_for_metric(port, "parse_limit_hits_total", lambda v: v >= 1,
                                  kind="timeout")
        assert metric(samples, "outcome_fetches_total", outcome="parse_timeout") == \
            len(timed_out)
        assert metric(samples, "parse_seconds_count") == len(bad) + len(good)
        # The job never failed: it still runs, and fetches a page sent after all this.
        assert job.alive(), "the fetcher job ended"
        late = web.host_key(others[0]) + "/p/1"
        producer.send(leases, REG.encode("lease", _lease(late, web.host_key(others[0]),
                                                         "PAGE", "LATE")),
                      key=web.host_key(others[0]).encode())
        producer.flush()
        got = _read(cfg, comps, "completion",
                    lambda s: any(rec["lease_id"] == "LATE" for _, rec in s), timeout_s=30.0)
        assert next(rec for _, rec in got if rec["lease_id"] == "LATE")["outcome"] == "OK"
        # No checkpoint waited past the stage's bound (3 x cpu_limit_s + 5 s = 8 s here:
        # the longest a full stage keeps a bundle open), loosely: Flink's own figures.
        base = f"127.0.0.1:{rest}"
        (jid,) = [j["jid"] for j in get_json(base, "/jobs/overview")["jobs"]]
        cps = get_json(base, f"/jobs/{jid}/checkpoints")
        longest_s = cps["summary"]["end_to_end_duration"]["max"] / 1000
        assert cps["counts"]["completed"] >= 3 and longest_s < 8 + 4, cps["summary"]
        ends = [(u.rsplit("/", 1)[1], by_lease[k]["outcome"]) for k, u in bad.items()]
        print(f"hostile pages: {ends}; all completions within {time.monotonic() - start:.1f} s;"
              f" longest checkpoint {longest_s:.2f} s of {cps['counts']['completed']}")
    finally:
        job.stop()
        web.stop()
