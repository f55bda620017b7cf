"""A stalled parser in the fetcher: backpressure keeps memory bounded while fetching slows.

    python bench/bench_backpressure.py [--leases 3000] [--seconds 60]
                                       [--runs 0:1000,0.1:1000,0:200,0.1:200]

The real fetcher job (MiniCluster, process mode, exactly-once sinks) reads a backlog of
--leases page leases for a synthetic web on loopback, once per run DELAY:BUNDLE —
a parse delay (`faults.parse_delay_s`: every page's parse blocks the fetcher's event
loop that long, as a stuck CPU-bound parse does) and the Python bundle size
(`fetch.bundle_size`: a checkpoint waits for the bundle in the worker to finish) —
one after the other in the same run. Sampled every
second: completions committed to Kafka, and the resident memory of the job's whole
process tree (client, JVM, Python workers). Bounded memory means the backlog stays in
Kafka: the async operator holds at most its capacity of fetches, and the Kafka source
reads only what downstream accepts. Needs the local stack (`./dev up`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402

from bench._results import record, tree_pids  # noqa: E402
from crawler.local import ensure_topics  # noqa: E402
from crawler.run import JobProcess, synthetic_overrides  # noqa: E402
from crawler.synthetic_web import SyntheticWeb, build_sites  # noqa: E402
from udfs.avro import registry  # noqa: E402
from udfs.config import TOPIC_KEYS, load_config  # noqa: E402

REG = registry()
SITES = 30


def tree_rss_mib(root: int) -> tuple[float, float]:
    """(RSS of `root` and all its descendants, of the Python workers among them), MiB."""
    total = workers = 0.0
    for pid in tree_pids([root]):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        kb = next((int(line.split()[1]) for line in status.splitlines()
                   if line.startswith("VmRSS:")), 0)
        total += kb / 1024
        if b"pyflink.fn_execution" in cmd or b"beam" in cmd:
            workers += kb / 1024
    return total, workers


def leases(web: SyntheticWeb, count: int, lease_s: float):
    now_ms = int(time.time() * 1000)
    sites = web.site_list
    for i in range(count):
        hk = web.host_key(sites[i % len(sites)])
        page = (i // len(sites)) % sites[i % len(sites)].pages
        yield hk, {"lease_id": f"{hk}#{i}", "url_id": uuid.uuid4().hex[:16], "url_version": 1,
                   "attempt": 1, "issued_at_ms": now_ms, "expires_at_ms": now_ms +
                   int(lease_s * 1000), "url": f"{hk}/p/{page}", "host_key": hk,
                   "kind": "PAGE", "depth": 1, "etag": None, "last_modified": None}


def measure(web: SyntheticWeb, count: int, seconds: int, delay: float, bundle: int
            ) -> dict:
    base_cfg = load_config(env={})
    tag = uuid.uuid4().hex[:8]
    work = Path(tempfile.gettempdir()) / f"bench-backpressure-{tag}"
    overrides = [f"topics.{k}.name=bench-{tag}.{base_cfg.topic(k)}" for k in TOPIC_KEYS]
    overrides += synthetic_overrides(web, work, 0.0) + [
        f"faults.parse_delay_s={delay}", f"fetch.bundle_size={bundle}",
        "flink.restart_strategy=none",
        f"flink.checkpoint_dir={work / 'checkpoints'}"]
    cfg = load_config(env={}, overrides=overrides)
    ensure_topics(cfg)
    servers = cfg["kafka.bootstrap_servers"]
    producer = KafkaProducer(bootstrap_servers=servers, linger_ms=20)
    lease_s = seconds + 600  # no lease expires during the run
    for hk, rec in leases(web, count, lease_s):
        producer.send(cfg.topic("leases"), REG.encode("lease", rec), key=hk.encode())
    producer.flush()
    producer.close()
    completions = KafkaConsumer(cfg.topic("completions"), bootstrap_servers=servers,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                isolation_level="read_committed", consumer_timeout_ms=200)
    job = JobProcess("fetcher", overrides, work / "fetcher.log")
    job.start()
    started = time.monotonic()
    done, first, samples = 0, None, []
    deadline = started + seconds + 180  # bounded: job start-up plus the window
    while time.monotonic() < deadline and done < count:
        if not job.alive():
            raise SystemExit(f"the fetcher job died; see {work / 'fetcher.log'}")
        done += sum(1 for _ in completions)
        if done and first is None:
            first = time.monotonic()
        samples.append((done, *tree_rss_mib(job.proc.pid)))
        if first is not None and time.monotonic() - first >= seconds:
            break
        time.sleep(1)
    end = time.monotonic()
    job.stop()
    completions.close()
    if first is None:
        raise SystemExit(f"no completion within the time limit; see {work / 'fetcher.log'}")
    running = [s for s in samples if s[1] > 0]
    return {"window": end - first, "done": done, "rate": done / max(end - first, 1e-9),
            "first_after": first - started, "end_after": end - started,
            "rss_peak": max(s[1] for s in running),
            "rss_last": running[-1][1], "workers_peak": max(s[2] for s in running),
            "backlog_left": count - done}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--leases", type=int, default=3000)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--runs", default="0:1000,0.1:1000,0:200,0.1:200",
                    help="DELAY:BUNDLE pairs (parse delay s, bundle size), measured in turn")
    args = ap.parse_args()
    web = SyntheticWeb(build_sites(SITES, seed=7, pages=(100, 100)))
    web.start()
    try:
        runs = {}
        for pair in args.runs.split(","):
            delay, bundle = pair.split(":")
            runs[(float(delay), int(bundle))] = measure(web, args.leases, args.seconds,
                                                        float(delay), int(bundle))
    finally:
        web.stop()
    rows = [("backlog", f"{args.leases:,} page leases on {SITES} loopback sites")]
    for (d, b), r in runs.items():
        name = f"delay {d:g} s, bundle {b}"
        rows += [
            (f"{name}: completions/s", f"{r['rate']:,.1f} ({r['done']:,} in {r['window']:.0f} s"
                                       f" from the first; {r['backlog_left']:,} left in Kafka)"),
            (f"{name}: first / last completion committed",
             f"{r['first_after']:.0f} / {r['end_after']:.0f} s after start"),
            (f"{name}: job RSS peak / last", f"{r['rss_peak']:,.0f} / {r['rss_last']:,.0f} MiB"),
            (f"{name}: Python workers RSS peak", f"{r['workers_peak']:,.0f} MiB"),
        ]
    record("backpressure", "A stalled parser: the fetch stage slows, memory stays bounded",
           rows, notes="The fetcher job alone in a MiniCluster (process mode, async "
                       "capacity 200, 1 s checkpoints), this "
                       "machine's 2 cores shared with the synthetic web. RSS is the job's "
                       "whole process tree sampled once a second while the job runs; "
                       "'left in Kafka' is the part of the backlog not completed when "
                       "the window closed.")


if __name__ == "__main__":
    main()
