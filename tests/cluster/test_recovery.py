"""Recovery on a real Flink session cluster (crawl cluster), mid-crawl of the synthetic
web: kill -9 of the TaskManager running the frontier, then of the one running the
fetcher, a savepoint upgrade of the frontier and a rescale of the frontier from 1 to
2 — the procedures `crawl upgrade` / `crawl rescale` run. Afterwards: every reachable
allowed page indexed, no (url_id, url_version) indexed twice, 0 politeness
violations across the disruptions, and no host left waiting on a timer that never
fired (the last pages arrive after the last disruption)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from crawler.cluster import Cluster
from crawler.local import LocalStack
from crawler.run import Watcher, publish_seeds, synthetic_overrides
from crawler.synthetic_web import SyntheticWeb, build_sites
from udfs.config import TOPIC_KEYS, load_config

MIN_GAP_S = 0.2


def taskmanager_pid(cluster: Cluster, job: str) -> int:
    """PID of the TaskManager that runs `job`'s first vertex (from the REST API and the
    ResourceID each TaskManager logs at start)."""
    jid = cluster.running_job(job)
    vertex = cluster.job_detail(jid)["vertices"][0]["id"]
    placed = cluster.get_json(f"/jobs/{jid}/vertices/{vertex}/taskmanagers")["taskmanagers"]
    resource = placed[0]["taskmanager-id"]
    for tm in cluster.taskmanagers():
        if tm.pid() is not None and f"ResourceID: {resource}" in tm.logfile.read_text():
            return tm.pid()
    raise AssertionError(f"no TaskManager process logged ResourceID {resource}")


def wait_running(cluster: Cluster, job: str, timeout_s: float = 180) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jid = cluster.running_job(job)
        detail = cluster.job_detail(jid) if jid else None
        if detail and detail["state"] == "RUNNING" and \
                all(v["status"] == "RUNNING" for v in detail["vertices"]):
            return jid
        time.sleep(1)
    raise AssertionError(f"{job} not running again within {timeout_s} s")


@pytest.mark.timeout(1500)
def test_crawl_survives_kill_9_savepoint_upgrade_and_rescale(cfg, fresh_topics, tmp_path):
    web = SyntheticWeb(build_sites(12, seed=5, pages=(25, 35)),
                       log_path=str(tmp_path / "web.jsonl"))
    web.start()
    names = fresh_topics(*TOPIC_KEYS, partitions=2)
    overrides = [f"topics.{k}.name={n}" for k, n in zip(TOPIC_KEYS, names, strict=True)]
    overrides += synthetic_overrides(web, tmp_path, MIN_GAP_S) + [
        "traps.template_budget=120", "traps.template_sample_every=1000",
        "frontier.retry_base_s=5", "frontier.lease_timeout_s=30", "fetch.total_timeout_s=20"]
    run_cfg = load_config(env={}, overrides=overrides)
    job_args = [a for o in overrides for a in ("--set", o)]
    cluster = Cluster(cfg, LocalStack(cfg, state_dir=tmp_path / "state"))
    sites = {web.host_key(s): s for s in web.site_list}
    expected = {hk + p for hk, s in sites.items()
                for p in ["/", *(f"/p/{i}" for i in range(s.pages))]}
    watcher = None
    disruptions: list[str] = []
    try:
        cluster.up(2)
        cluster.submit("frontier", job_args)
        cluster.submit("fetcher", job_args)
        sent, bad = publish_seeds(run_cfg, [hk + "/" for hk in sites])
        assert sent == len(sites) and bad == []
        watcher = Watcher(run_cfg)

        def indexed() -> int:
            return len(expected & watcher.poll().urls)

        def wait_for(fraction: float, timeout_s: float = 400) -> None:
            deadline = time.monotonic() + timeout_s
            while indexed() < fraction * len(expected):
                assert time.monotonic() < deadline, f"stuck at {indexed()} of {len(expected)}"
                time.sleep(1)

        for fraction, job in ((0.2, "frontier"), (0.3, "fetcher")):
            wait_for(fraction)
            pid = taskmanager_pid(cluster, job)
            os.kill(pid, signal.SIGKILL)
            disruptions.append(f"kill -9 of the {job}'s taskmanager (pid {pid}) "
                               f"at {indexed()} pages")
            replacement = [tm for tm in cluster.taskmanagers() if tm.pid() is None][0]
            replacement.start(120)  # capacity back, as an operator would
            wait_running(cluster, "frontier")
            wait_running(cluster, "fetcher")

        wait_for(0.45)
        savepoint, _ = cluster.upgrade("frontier", job_args)
        disruptions.append(f"savepoint upgrade at {indexed()} pages ({savepoint})")
        wait_running(cluster, "frontier")

        wait_for(0.65)
        _, jid = cluster.upgrade("frontier", job_args, parallelism=2)
        disruptions.append(f"rescale 1 -> 2 at {indexed()} pages")
        wait_running(cluster, "frontier")
        assert {v["parallelism"] for v in cluster.job_detail(jid)["vertices"]} == {2}

        wait_for(1.0, timeout_s=600)
    finally:
        if watcher:
            watcher.poll()
            watcher.close()
        cluster.down(log=lambda line: None)
        web.stop()

    events = watcher.events
    ids = [e["event_id"] for e in events]
    duplicates = len(ids) - len(set(ids))
    violations = web.violations(run_cfg["robots.user_agent"], MIN_GAP_S)
    print(f"cluster recovery: {len(expected)} pages, {len(events)} index events, "
          f"{duplicates} duplicates, violations {violations}; " + "; ".join(disruptions))
    assert expected <= watcher.progress.urls
    assert duplicates == 0, "an (url_id, url_version) was indexed twice"
    assert violations == dict.fromkeys(violations, 0), violations
