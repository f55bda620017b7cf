"""The frontier job alone on Kafka: leases per second with fetches short-circuited.

    python bench/bench_frontier_job.py [--hosts 2000] [--urls 100] [--seconds 90]
                                       [--backends hashmap,rocksdb] [--parallelism 1,2]

The real frontier job (MiniCluster, thread mode, keyed state, exactly-once index
sink) against a stand-in fetcher in this process that answers every lease as soon as
it reads it: robots.txt with "allow all", pages with 200 and no links. Seeds: --hosts
hosts with --urls URLs each. Politeness is opened up (gap 0, 8 in flight per host) so
that the figure is the frontier's own rate, not the hosts' allowance; leases and
completions travel at once (at-least-once topics), so a host's loop is lease ->
answer -> completion -> next lease, not a checkpoint round trip. Figures per state
backend and parallelism, measured one after the other in the same run (the ratios
are the figures to trust on a noisy machine): leases/s over the measured window,
leases/s per slot, completions the frontier accepted (from the index topic), and
machine CPU per lease (the job's processes, the Kafka broker and the stand-in).
Needs the local stack (`./dev up`).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402

from bench._results import CpuMeter, broker_pid, record  # noqa: E402
from crawler.run import JobProcess  # noqa: E402
from crawler.stack.local import drop_topics, ensure_topics  # noqa: E402
from udfs.config import TOPIC_KEYS, load_config  # noqa: E402
from udfs.wire.avro import load_examples, registry  # noqa: E402

REG = registry()


def seeds(hosts: int, urls: int):
    for h in range(hosts):
        host = f"http://h{h}.bench.test"
        links = [{"url": f"{host}/p/{i}", "lastmod_ms": None, "priority": None}
                 for i in range(urls)]
        yield host, {"host_key": host, "source": "SEED", "parent_url": None, "depth": 0,
                     "redirect_hops": 0, "discovered_at_ms": 0, "links": links}


def answer(lease: dict, base: dict) -> dict:
    """The stand-in fetcher's completion: robots allows all; a page is 200, no links."""
    done = {**base, "lease_id": lease["lease_id"], "url_id": lease["url_id"],
            "url_version": lease["url_version"], "attempt": lease["attempt"],
            "url": lease["url"], "host_key": lease["host_key"], "kind": lease["kind"],
            "outcome": "OK", "http_status": 200, "etag": None,
            "fetched_at_ms": int(time.time() * 1000), "links_count": 0}
    if lease["kind"] == "ROBOTS":
        done["body"] = b"User-agent: *\nAllow: /\n"
    else:
        done["body_sha256"] = done["text_sha256"] = uuid.uuid4().hex * 2
        # A distinct page's SimHash (the example's one shared by every page made each
        # near-duplicate band one hot key: a worst case, not a crawl).
        done["simhash"] = random.getrandbits(64) - (1 << 63)
    return done


def measure(hosts: int, urls: int, seconds: int, backend: str,
            parallelism: int) -> dict[str, float]:
    """One run of the frontier job on fresh topics with `backend` at `parallelism`."""
    base_cfg = load_config(env={})
    tag = uuid.uuid4().hex[:8]
    overrides = [f"topics.{k}.name=bench-{tag}.{base_cfg.topic(k)}" for k in TOPIC_KEYS]
    overrides += ["politeness.min_gap_s=0", "politeness.max_in_flight=8",
                  "politeness.duration_factor=0", "flink.checkpoint_interval_ms=1000",
                  "flink.restart_strategy=none", f"flink.state_backend={backend}",
                  f"flink.parallelism={parallelism}",
                  f"flink.checkpoint_dir={Path(tempfile.gettempdir()) / ('bench-cp-' + tag)}"]
    cfg = load_config(env={}, overrides=overrides)
    ensure_topics(cfg)
    servers = cfg["kafka.bootstrap_servers"]
    producer = KafkaProducer(bootstrap_servers=servers, linger_ms=20, batch_size=256 * 1024)
    leases = KafkaConsumer(cfg.topic("leases"), bootstrap_servers=servers,
                           auto_offset_reset="earliest", enable_auto_commit=False,
                           isolation_level="read_committed", consumer_timeout_ms=200,
                           max_poll_records=5000)
    base = load_examples(REG.latest("completion"))[0]
    log = Path(tempfile.gettempdir()) / f"bench-frontier-{tag}.log"
    job = JobProcess("frontier", overrides, log)
    job.start()
    meter = CpuMeter([pid for pid in (job.proc.pid, broker_pid(), os.getpid()) if pid])
    job_meter = CpuMeter([job.proc.pid])  # the frontier job's processes alone
    for host, rec in seeds(hosts, urls):
        producer.send(cfg.topic("discovered"), REG.encode("discovered", rec), key=host.encode())
    producer.flush()

    robots = pages = 0
    first = None
    start = time.monotonic()
    deadline = start + seconds + 180  # bounded: job start-up plus the window
    while time.monotonic() < deadline:
        if not job.alive():
            raise SystemExit(f"the frontier job died; see {log}\n{job.report()}")
        for m in leases:
            lease = REG.decode("lease", m.value)
            if first is None:
                first = time.monotonic()
                meter.start()
                job_meter.start()
            if lease["kind"] == "ROBOTS":
                robots += 1
            else:
                pages += 1
            producer.send(cfg.topic("completions"), REG.encode("completion", answer(lease, base)),
                          key=m.key)
            if time.monotonic() - first >= seconds:
                break
        producer.flush()
        if first is not None and time.monotonic() - first >= seconds:
            break
        if pages >= hosts * urls:
            break
    window = time.monotonic() - (first or start)
    cpu = meter.seconds() if first is not None else 0.0
    job_cpu = job_meter.seconds() if first is not None else 0.0
    job.stop()
    leases.close()
    producer.close()
    accepted = KafkaConsumer(cfg.topic("index"), bootstrap_servers=servers,
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             consumer_timeout_ms=3000, enable_auto_commit=False)
    indexed = sum(1 for _ in accepted)
    accepted.close()
    drop_topics(cfg)
    return {"window": window, "robots": robots, "pages": pages, "indexed": indexed,
            "cpu": cpu, "job_cpu": job_cpu}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=2000)
    ap.add_argument("--urls", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=90)
    ap.add_argument("--backends", default="hashmap,rocksdb",
                    help="state backends to compare, comma-separated, measured in turn")
    ap.add_argument("--parallelism", default="1",
                    help="frontier parallelisms to compare, comma-separated (each backend)")
    args = ap.parse_args()
    backends = args.backends.split(",")
    if not set(backends) <= {"hashmap", "rocksdb"}:
        ap.error(f"--backends: hashmap and/or rocksdb, got {args.backends}")
    try:
        levels = [int(p) for p in args.parallelism.split(",")]
    except ValueError:
        ap.error(f"--parallelism: whole numbers, comma-separated, got {args.parallelism}")
    if not all(1 <= p <= 8 for p in levels):
        ap.error(f"--parallelism: each from 1 to 8 on one machine, got {args.parallelism}")
    runs = {(b, p): measure(args.hosts, args.urls, args.seconds, b, p)
            for p in levels for b in backends}
    rows = [("hosts x URLs", f"{args.hosts:,} x {args.urls:,} = {args.hosts * args.urls:,}")]
    rate = {}
    for (b, p), r in runs.items():
        total = r["robots"] + r["pages"]
        rate[b, p] = total / r["window"]
        label = f"{b}, p={p}"
        rows += [
            (f"{label}: measured window", f"{r['window']:.1f} s from the first lease"),
            (f"{label}: leases (robots + pages)",
             f"{total:,} ({r['robots']:,} + {r['pages']:,})"),
            (f"{label}: leases/s (per slot)", f"{rate[b, p]:,.0f} ({rate[b, p] / p:,.0f})"),
            (f"{label}: CPU per lease, machine (the frontier job's own)",
             f"{1000 * r['cpu'] / max(total, 1):.2f} ms "
             f"({1000 * r['job_cpu'] / max(total, 1):.2f} ms)"),
            (f"{label}: index events (accepted pages)", f"{r['indexed']:,}"),
        ]
    for p in levels:
        if len(backends) == 2:
            a, b = backends
            rows.append((f"ratio {b} / {a} at p={p} (leases/s)",
                         f"{rate[b, p] / rate[a, p]:.2f}"))
    for b in backends:
        for p in levels[1:]:
            rows.append((f"{b}: p={p} / p={levels[0]} (leases/s)",
                         f"{rate[b, p] / rate[b, levels[0]]:.2f}"))
    record("frontier_job", "The frontier job alone: leases/s, fetches short-circuited", rows,
           notes="One MiniCluster (thread mode) on this 2-core machine, checkpoints every "
                 "1 s, exactly-once index sink; the stand-in fetcher and the Kafka broker "
                 "share the machine, so a second slot competes with them for the same two "
                 "cores. A host has at most 8 leases out (8 in flight), each answered as "
                 "soon as the stand-in reads it. Runs one after the other; RocksDB with "
                 "incremental checkpoints.")


if __name__ == "__main__":
    main()
