"""The whole crawl: both jobs, Kafka, the synthetic web. Every reachable allowed page is
indexed, no (url_id, url_version) twice, and the politeness oracle counts no violation."""

from __future__ import annotations

import time

from crawler.run import JobProcess, Watcher, publish_seeds, synthetic_overrides
from crawler.synthetic_web import SyntheticWeb, build_sites
from udfs.config import TOPIC_KEYS, load_config

MIN_GAP_S = 0.2


def test_crawl_of_the_synthetic_web(cfg, fresh_topics, tmp_path):
    web = SyntheticWeb(build_sites(6, seed=7), log_path=str(tmp_path / "web.jsonl"))
    web.start()
    names = fresh_topics(*TOPIC_KEYS, partitions=2)
    overrides = [f"topics.{k}.name={n}" for k, n in zip(TOPIC_KEYS, names, strict=True)]
    overrides += synthetic_overrides(web, tmp_path, MIN_GAP_S) + ["flink.restart_strategy=none"]
    run_cfg = load_config(env={}, overrides=overrides)
    jobs = [JobProcess(n, overrides, tmp_path / f"{n}.log") for n in ("frontier", "fetcher")]
    expected = {web.host_key(s) + p for s in web.site_list
                for p in ["/", *(f"/p/{i}" for i in range(s.pages))]}
    watcher = None
    try:
        for job in jobs:
            job.start()
        sent, bad = publish_seeds(run_cfg, [web.host_key(s) + "/" for s in web.site_list])
        assert sent == len(web.site_list) and bad == []
        watcher = Watcher(run_cfg)
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline and not expected <= watcher.poll().urls:
            assert all(j.alive() for j in jobs), [j.log_path.read_text()[-2000:] for j in jobs]
            time.sleep(1)
        missing = expected - watcher.progress.urls
        assert not missing, f"never indexed: {sorted(missing)[:20]} ({len(missing)})"
    finally:
        for job in jobs:
            job.stop()
        if watcher:
            watcher.poll()
            watcher.close()
        web.stop()
    ids = [e["event_id"] for e in watcher.events]
    assert len(ids) == len(set(ids)), "an (url_id, url_version) was indexed twice"
    violations = web.violations(run_cfg["robots.user_agent"], MIN_GAP_S)
    assert violations == dict.fromkeys(violations, 0), violations
    # /private/ was requested only from sites without robots.txt rules (404 = allow all).
    ruled = {web.host_key(s) for s in web.site_list if s.robots != "missing"}
    assert not any(r.path.startswith("/private/") and r.host in ruled for r in web.log)
    assert any(r.path.startswith("/private/") for r in web.log if r.host not in ruled)
    print(f"e2e: {len(ids)} index events, {len(web.log)} requests, "
          f"outcomes {watcher.progress.outcomes}, violations {violations}")
