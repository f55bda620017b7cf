"""RocksDB's Bloom filter on the frontier's intake, side by side: a hot host's new URLs
with flink.rocksdb_bloom_bits_per_key 0 (Flink's default) and N.

    python bench/bench_rocksdb_bloom.py [--known 200000] [--new 100000] [--bits 10]
                                        [--rounds 1]

The real frontier job (MiniCluster, RocksDB, 1 s checkpoints) on fresh topics. One
host is seeded with --known URLs; with frontier.max_resident_urls at its floor, all but
a few are kept cold in keyed state (the host's URL map in RocksDB), as a big host's are
(its trap rules' template budget raised: /p/{n} is a catalogue here).
Its robots.txt lease is never answered, so nothing is leased and the intake is all the
job does. Once every known URL is admitted and a few checkpoints have flushed them into
SST files, --new URLs of the same host are sent: each is looked up in the URL map (a
miss, which a Bloom filter can answer without reading the file's blocks) and written.
Figures per setting: new URLs admitted per second and CPU of the job's processes per
URL, over the window from the first new record sent to the last URL admitted (read off
the job's frontier_events_total metric). The runs alternate (0, N, 0, N with
--rounds 2), so a drift in the machine's load falls on both. Needs the local stack
(`./dev up`).
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kafka import KafkaProducer  # noqa: E402

from bench._results import CpuMeter, record  # noqa: E402
from crawler.run import JobProcess  # noqa: E402
from crawler.stack.local import drop_topics, ensure_topics  # noqa: E402
from crawler.status import by_label, scrape  # noqa: E402
from udfs.config import TOPIC_KEYS, load_config  # noqa: E402
from udfs.wire.avro import registry  # noqa: E402
from udfs.wire.records import DISCOVERED, links_record, plain_link  # noqa: E402

HOST = "http://hot.bench.test"
BATCH = 1000  # links per DiscoveredUrls record
REG = registry()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def send(producer: KafkaProducer, topic: str, first: int, count: int) -> None:
    for start in range(first, first + count, BATCH):
        urls = [f"{HOST}/p/{i}" for i in range(start, min(start + BATCH, first + count))]
        record_ = links_record(HOST, "LINK", None, 1, int(time.time() * 1000),
                               [plain_link(u) for u in urls])
        producer.send(topic, DISCOVERED.encode(REG, record_), key=HOST.encode())
    producer.flush()


def admitted(port: int) -> float:
    samples = scrape(port)
    if samples is None:
        return -1.0
    return by_label(samples, "event_frontier_events_total", "event").get("urls_admitted", 0.0)


def wait_admitted(job: JobProcess, port: int, want: int, timeout_s: float, log: Path) -> float:
    """Poll the job's metrics until `want` URLs were admitted; the time it happened."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not job.alive():
            raise SystemExit(f"the frontier job died; see {log}\n{job.report()}")
        if admitted(port) >= want:
            return time.monotonic()
        time.sleep(0.2)
    raise SystemExit(f"{want} URLs not admitted within {timeout_s:.0f} s; see {log}")


def measure(bits: float, known: int, new: int) -> dict[str, float]:
    base = load_config(env={})
    tag = uuid.uuid4().hex[:8]
    port = free_port()
    overrides = [f"topics.{k}.name=bench-{tag}.{base.topic(k)}" for k in TOPIC_KEYS]
    overrides += ["flink.state_backend=rocksdb", "flink.checkpoint_interval_ms=1000",
                  "flink.restart_strategy=none", f"flink.rocksdb_bloom_bits_per_key={bits}",
                  "frontier.max_resident_urls=16", f"metrics.frontier_port={port}",
                  # one URL template (/p/{n}) for every URL: a catalogue, not a trap
                  f"traps.template_budget={known + new}",
                  f"flink.checkpoint_dir={Path(tempfile.gettempdir()) / ('bench-cp-' + tag)}"]
    cfg = load_config(env={}, overrides=overrides)
    ensure_topics(cfg)
    producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"], linger_ms=20,
                             batch_size=512 * 1024, max_request_size=8 * 1024 * 1024)
    log = Path(tempfile.gettempdir()) / f"bench-bloom-{tag}.log"
    job = JobProcess("frontier", overrides, log)
    job.start()
    try:
        topic = cfg.topic("discovered")
        send(producer, topic, 0, known)
        wait_admitted(job, port, known, 600, log)
        time.sleep(5)  # a few checkpoints: the known URLs are flushed into SST files
        meter = CpuMeter([job.proc.pid])
        meter.start()
        started = time.monotonic()
        send(producer, topic, known, new)
        done = wait_admitted(job, port, known + new, 600, log)
        cpu = meter.seconds()
    finally:
        job.stop()
        producer.close()
        drop_topics(cfg)
    window = done - started
    return {"rate": new / window, "cpu_us": cpu / new * 1e6, "window": window}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--known", type=int, default=200_000)
    ap.add_argument("--new", type=int, default=100_000)
    ap.add_argument("--bits", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    if args.known < 1 or args.new < 1 or args.bits <= 0 or args.rounds < 1:
        ap.error("--known, --new, --bits and --rounds must be positive")
    runs: dict[float, list[dict[str, float]]] = {0.0: [], args.bits: []}
    for _ in range(args.rounds):
        for bits in (0.0, args.bits):
            result = measure(bits, args.known, args.new)
            print(f"bits {bits:g}: {result['rate']:.0f} new URLs/s, "
                  f"{result['cpu_us']:.0f} us CPU per URL ({result['window']:.1f} s)")
            runs[bits].append(result)

    def mean(bits: float, key: str) -> float:
        return sum(r[key] for r in runs[bits]) / len(runs[bits])

    off_rate, on_rate = mean(0.0, "rate"), mean(args.bits, "rate")
    off_cpu, on_cpu = mean(0.0, "cpu_us"), mean(args.bits, "cpu_us")
    rows = [
        ("known URLs (cold, in RocksDB) / new URLs sent", f"{args.known:,} / {args.new:,}"),
        ("new URLs/s, no Bloom filter", f"{off_rate:,.0f}"),
        (f"new URLs/s, Bloom filter {args.bits:g} bits per key", f"{on_rate:,.0f}"),
        ("ratio (Bloom / none)", f"{on_rate / off_rate:.2f}x"),
        ("job CPU us per new URL, no Bloom filter", f"{off_cpu:,.0f}"),
        (f"job CPU us per new URL, Bloom filter {args.bits:g} bits", f"{on_cpu:,.0f}"),
        ("rounds (alternating)", str(args.rounds)),
    ]
    record("rocksdb_bloom", "RocksDB's Bloom filter on a hot host's intake", rows)


if __name__ == "__main__":
    main()
