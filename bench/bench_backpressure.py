"""The parse stage under hostile pages and a stalled parser: do other hosts notice?

    python bench/bench_backpressure.py [--seconds 60] [--sites 12] [--stall 0.1]

Three crawls, one after the other in one run, each with both real jobs (frontier in
thread mode, fetcher in process mode, MiniClusters, 1 s checkpoints) against a fresh
synthetic web on loopback, seeded with every site's home page:

1. `clean`: --sites ordinary sites and three more ordinary ones;
2. `hostile`: the same --sites sites and three hostile ones (crawler/testkit/synthetic_web.py
   HOSTILE_PAGES: 100,000 nested divs, a 5 MB page of attributes, a page that makes
   lxml's text extraction take seconds), parse limits as shipped (and, first, the CPU
   parse_html takes on each hostile page in the benchmark's own process, no limits);
3. `stall`: the sites of `clean`, every page's parse stalled --stall seconds
   (`faults.parse_delay_s`, the stall of the old benchmark's 210 s figure).

Measured per crawl, in a window of --seconds from the first page request: the page
requests per second to the first --sites sites (from the web's own request log; every
crawl has as many hosts, so the ratio isolates what the hostile pages or the stall
cost), the time from the jobs' start to the first completion in Kafka, the fetcher
job's longest checkpoint (end to end, from its REST API), the outcome of
each hostile page, and the peak RSS of the jobs' process trees (JVMs, Python workers,
parser processes; sampled every second). Traffic stays on 127.0.0.1; every loop is
bounded in time. Needs the local stack (`./dev up`). Figures go to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import psutil  # noqa: E402
from kafka import KafkaConsumer  # noqa: E402

from bench._results import record, tree_pids  # noqa: E402
from crawler.run import JobProcess, free_port, publish_seeds, synthetic_overrides  # noqa: E402
from crawler.stack.local import drop_topics, ensure_topics  # noqa: E402
from crawler.testkit.synthetic_web import HOSTILE_PAGES, SyntheticWeb, build_sites  # noqa: E402
from udfs.config import TOPIC_KEYS, load_config  # noqa: E402
from udfs.wire.avro import registry  # noqa: E402

REG = registry()
OLD_FIRST_COMMIT_S = 210  # bench/RESULTS.md before the parse stage: 0.1 s stall


def tree_rss_mib(roots: list[int]) -> float:
    total = 0
    for pid in tree_pids(roots):
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


def longest_checkpoint_s(rest_port: int) -> float | None:
    """The longest end-to-end checkpoint of the job behind this MiniCluster REST port."""
    try:
        base = f"http://127.0.0.1:{rest_port}"
        with urllib.request.urlopen(f"{base}/jobs", timeout=5) as r:
            jobs = [j["id"] for j in json.load(r)["jobs"] if j["status"] == "RUNNING"]
        worst = None
        for job in jobs:
            with urllib.request.urlopen(f"{base}/jobs/{job}/checkpoints", timeout=5) as r:
                summary = json.load(r).get("summary", {})
            ms = summary.get("end_to_end_duration", {}).get("max")
            if ms is not None:
                worst = max(worst or 0.0, ms / 1000)
        return worst
    except (OSError, ValueError, KeyError):
        return None


def unlimited_parse_cpu() -> dict[str, float]:
    """CPU seconds parse_html takes on each hostile page in this process, no limits."""
    from crawler.testkit.synthetic_web import hostile_body
    from udfs.core.parse import parse_html

    out = {}
    for path in HOSTILE_PAGES:
        body = hostile_body(path)
        start = time.process_time()
        parse_html(body, "http://hostile.test/")
        out[path.rsplit("/", 1)[1]] = time.process_time() - start
    return out


def crawl(name: str, sites: int, hostile: bool, stall: float, seconds: int) -> dict:
    """One crawl of `sites` ordinary sites and len(HOSTILE_PAGES) more: hostile ones, or
    (hostile=False) ordinary ones, so that every crawl has the same number of hosts and
    only the first `sites` sites' pages are counted."""
    extra = len(HOSTILE_PAGES)
    web = SyntheticWeb(build_sites(sites, seed=7, pages=(60, 100), hostile=extra) if hostile
                       else build_sites(sites + extra, seed=7, pages=(60, 100)))
    web.start()
    counted = {web.host_key(s) for s in web.site_list[:sites]}
    tag = uuid.uuid4().hex[:8]
    work = Path(tempfile.gettempdir()) / f"bench-backpressure-{tag}"
    base = load_config(env={})
    ports = {job: free_port() for job in ("frontier", "fetcher")}
    overrides = [f"topics.{k}.name=bench-{tag}.{base.topic(k)}" for k in TOPIC_KEYS]
    overrides += synthetic_overrides(web, work, 0.5) + [
        "flink.restart_strategy=none", f"flink.checkpoint_dir={work / 'checkpoints'}",
        f"faults.parse_delay_s={stall}"]
    cfg = load_config(env={}, overrides=overrides)
    ensure_topics(cfg)
    completions = KafkaConsumer(cfg.topic("completions"),
                                bootstrap_servers=cfg["kafka.bootstrap_servers"],
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                consumer_timeout_ms=200)
    jobs = {job: JobProcess(job, [*overrides, f"flink.local_rest_port={port}"],
                            work / f"{job}.log") for job, port in ports.items()}
    hostile_hosts = {web.host_key(s) for s in web.site_list if "hostile" in s.features}
    outcomes: dict[str, str] = {}
    started = time.monotonic()
    first_completion = None
    rss_peak = 0.0
    worst_checkpoint = 0.0
    try:
        for job in jobs.values():
            job.start()
        publish_seeds(cfg, [web.host_key(s) + "/" for s in web.site_list])
        deadline = started + 240  # start-up, bounded
        while time.monotonic() < deadline:
            pages = [r for r in list(web.log) if not r.is_robots and r.path.startswith("/p/")]
            if pages and pages[0].start + seconds <= time.monotonic():
                break
            if not all(job.alive() for job in jobs.values()):
                raise SystemExit(f"a job died; see {work}\n" + "\n".join(
                    job.report() for job in jobs.values() if not job.alive()))
            for msg in completions:
                if REG.writer_name(msg.value) != "completion":
                    continue  # URLs too many for their completion, sent before it
                rec = REG.decode("completion", msg.value)
                if first_completion is None and rec["outcome"] != "NOT_SENT":
                    first_completion = time.monotonic() - started
                if rec["url"].rsplit("/", 2)[0] in hostile_hosts and "/hostile/" in rec["url"]:
                    outcomes[rec["url"].rsplit("/", 1)[1]] = rec["outcome"]
            rss_peak = max(rss_peak, tree_rss_mib([j.proc.pid for j in jobs.values()]))
            worst_checkpoint = max(worst_checkpoint,
                                   longest_checkpoint_s(ports["fetcher"]) or 0.0)
            time.sleep(1)
    finally:
        for job in jobs.values():
            job.stop()
        completions.close()
        web.stop()
        drop_topics(cfg)
    pages = sorted(r.start for r in web.log if not r.is_robots and r.status == 200
                   and r.host in counted)
    if not pages:
        raise SystemExit(f"{name}: no page fetched; see {work}")
    window = [t for t in pages if t <= pages[0] + seconds]
    return {"rate": len(window) / seconds, "pages": len(window),
            "first": first_completion, "checkpoint": worst_checkpoint, "rss": rss_peak,
            "hostile": outcomes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--sites", type=int, default=12)
    ap.add_argument("--stall", type=float, default=0.1)
    args = ap.parse_args()
    cpu = unlimited_parse_cpu()
    runs = {"clean": crawl("clean", args.sites, False, 0.0, args.seconds),
            "hostile": crawl("hostile", args.sites, True, 0.0, args.seconds),
            "stall": crawl("stall", args.sites, False, args.stall, args.seconds)}
    clean = runs["clean"]
    rows = [("web", f"{args.sites} ordinary sites counted and {len(HOSTILE_PAGES)} more "
                    f"(hostile in the hostile crawl, ordinary in the others), 60-100 pages, "
                    f"gap 0.5 s, on loopback; window {args.seconds} s from the first page "
                    f"request")]
    for name, r in runs.items():
        rows.append((f"{name}: pages/s of the counted sites",
                     f"{r['rate']:.2f} ({r['pages']} pages; ratio to clean "
                     f"{r['rate'] / clean['rate']:.2f})"))
    rows.append(("hostile pages: parse_html CPU without limits", ", ".join(
        f"{page}: {seconds:.2f} s" for page, seconds in sorted(cpu.items()))))
    rows.append(("hostile pages' outcomes (parse.cpu_limit_s 5)", ", ".join(
        f"{page}: {outcome}" for page, outcome in sorted(runs["hostile"]["hostile"].items()))
        or "none completed in the window"))
    for name, r in runs.items():
        first = "none" if r["first"] is None else f"{r['first']:.0f} s"
        rows.append((f"{name}: first completion in Kafka after the jobs' start",
                     first + (f" (before the parse stage, 0.1 s stall: {OLD_FIRST_COMMIT_S} s)"
                              if name == "stall" else "")))
        rows.append((f"{name}: fetcher's longest checkpoint", f"{r['checkpoint']:.2f} s"))
        rows.append((f"{name}: peak RSS of both jobs' process trees", f"{r['rss']:,.0f} MiB"))
    record("backpressure", "The parse stage: hostile pages and a stalled parser beside "
                           "other hosts' fetching", rows,
           notes="Both jobs as `crawl run` starts them (frontier thread mode, fetcher "
                 "process mode, 1 s checkpoints), one crawl after the other, on this "
                 "machine's 2 cores shared with the synthetic web and Kafka. Pages/s counts "
                 "only the first sites' page requests (the web's request log); each crawl "
                 "has as many hosts, so the ratios say what hostile pages or a stalled "
                 "parser cost the others. The "
                 "first completion includes the jobs' start-up (the old 210 s figure was "
                 "from a 3,000-lease backlog with exactly-once sinks, before the fetch "
                 "engine and the parse stage). RSS: every process of both jobs, parser "
                 "processes included, sampled once a second.")


if __name__ == "__main__":
    main()
