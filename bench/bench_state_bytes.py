"""Bytes of frontier state per known URL: the RocksDB checkpoint of a frontier that
holds 1 million (and 10 million) URLs.

    python bench/bench_state_bytes.py                       # 1 M URLs (~3 min)
    python bench/bench_state_bytes.py --urls 1000000,10000000
    python bench/bench_state_bytes.py --set flink.rocksdb_uncompressed_levels=0

The real frontier job (MiniCluster, RocksDB, incremental checkpoints, one retained)
is given --urls URLs of realistic length (60 to 90 characters) on --hosts hosts, plus
one hot host holding --hot-share of them (past frontier.max_resident_urls, so its
cold queue is in the figure). Nothing answers its robots.txt leases: every URL stays
queued, as most of a 10-billion-URL frontier is. Once the job has committed the
offset of every record it was sent (so a completed checkpoint holds them all), and
two more checkpoints have passed (older files released), the figure is the size of
the files the newest checkpoint references (its folder, the shared SST files, the
task-owned files), divided by the URLs. The SST files are as RocksDB left them: no
compaction is forced. Needs the local stack (`./dev up`).
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402

from bench._results import record  # noqa: E402
from crawler.run import JobProcess  # noqa: E402
from crawler.stack.local import ensure_topics  # noqa: E402
from udfs.config import TOPIC_KEYS, ConfigError, load_config  # noqa: E402
from udfs.wire.avro import registry  # noqa: E402

REG = registry()
LINKS_PER_RECORD = 1000  # keeps a record ~100 KB, under Kafka's 1 MB default


def host_urls(host: str, count: int):
    for i in range(count):
        yield (f"{host}/articles/2026/{i % 12 + 1:02d}/{i % 28 + 1:02d}/"
               f"story-{i}-{uuid.uuid5(uuid.NAMESPACE_URL, str(i)).hex[:12]}.html")


def records(urls: int, hosts: int, hot_share: float):
    """(host, DiscoveredUrls record) batches: a hot host, the rest spread evenly."""
    hot = int(urls * hot_share)
    plan = [("https://www.hot-host.bench.example", hot)]
    per, extra = divmod(urls - hot, hosts)
    plan += [(f"https://www.h{h}.bench.example", per + (h < extra)) for h in range(hosts)]
    for host, count in plan:
        batch = []
        for url in host_urls(host, count):
            batch.append({"url": url, "lastmod_ms": None, "priority": None})
            if len(batch) == LINKS_PER_RECORD:
                yield host, batch
                batch = []
        if batch:
            yield host, batch


def logical_url_bytes() -> int:
    """Bytes of one queued URL's map entry before RocksDB: its value as the job pickles
    it (the layout tuple) and its url_id key."""
    from udfs.core.fingerprints import url_id
    from udfs.core.frontier import UrlState, url_to_saved

    url = next(host_urls("https://www.h1.bench.example", 1))
    uid = url_id(url)
    return len(pickle.dumps(url_to_saved(UrlState(uid, url, next_fetch_at=1.7e9,
                                                  depth=1)))) + len(uid)


def checkpoint_bytes(root: Path) -> tuple[int, int]:
    """(bytes the newest completed checkpoint references, its number) under `root`
    (<root>/<job id>/chk-N, shared, taskowned); shared files of older checkpoints are
    gone once they are subsumed (one retained)."""
    done = [p for p in root.glob("*/chk-*") if (p / "_metadata").exists()]
    if not done:
        return 0, -1
    newest = max(done, key=lambda p: int(p.name.split("-")[1]))
    job = newest.parent
    size = sum(f.stat().st_size for d in (newest, job / "shared", job / "taskowned")
               if d.exists() for f in d.rglob("*") if f.is_file())
    return size, int(newest.name.split("-")[1])


def measure(urls: int, hosts: int, hot_share: float, timeout_s: float,
            settings: tuple[str, ...] = ()) -> dict[str, float]:
    base = load_config(env={})
    tag = uuid.uuid4().hex[:8]
    cp_root = Path(tempfile.gettempdir()) / f"bench-state-{tag}"
    overrides = [f"topics.{k}.name=bench-{tag}.{base.topic(k)}" for k in TOPIC_KEYS]
    overrides += ["flink.state_backend=rocksdb", "flink.checkpoint_interval_ms=5000",
                  "flink.checkpoints_retained=1", "flink.restart_strategy=none",
                  f"flink.checkpoint_dir={cp_root}", *settings]
    cfg = load_config(env={}, overrides=overrides)
    ensure_topics(cfg)
    servers = cfg["kafka.bootstrap_servers"]
    log = Path(tempfile.gettempdir()) / f"bench-state-{tag}.log"
    job = JobProcess("frontier", overrides, log)
    job.start()
    producer = KafkaProducer(bootstrap_servers=servers, linger_ms=50, batch_size=1 << 20,
                             max_request_size=4 << 20, compression_type="gzip")
    sent = 0
    started = time.monotonic()
    for host, links in records(urls, hosts, hot_share):
        rec = {"host_key": host, "source": "LINK", "parent_url": host + "/", "depth": 1,
               "redirect_hops": 0, "discovered_at_ms": int(time.time() * 1000),
               "links": links}
        producer.send(cfg.topic("discovered"), REG.encode("discovered", rec),
                      key=host.encode())
        sent += len(links)
    producer.flush()
    producer.close()
    produced_s = time.monotonic() - started

    topic = cfg.topic("discovered")
    watcher = KafkaConsumer(bootstrap_servers=servers,
                            group_id=f"{cfg['kafka.group_id_prefix']}.frontier",
                            enable_auto_commit=False)
    parts = [TopicPartition(topic, p) for p in watcher.partitions_for_topic(topic)]
    ends = watcher.end_offsets(parts)
    deadline = time.monotonic() + timeout_s
    while True:  # bounded: every offset committed, or the deadline
        if not job.alive():
            raise SystemExit(f"the frontier job died; see {log}\n{job.report()}")
        committed = {tp: watcher.committed(tp) or 0 for tp in parts}
        if all(committed[tp] >= ends[tp] for tp in parts):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"not all records committed within {timeout_s:.0f} s: "
                             f"{sum(committed.values()):,} of {sum(ends.values()):,}")
        time.sleep(2)
    ingested_s = time.monotonic() - started
    watcher.close()
    _, at = checkpoint_bytes(cp_root)
    while checkpoint_bytes(cp_root)[1] < at + 2 and time.monotonic() < deadline:
        time.sleep(1)
    size, _ = checkpoint_bytes(cp_root)
    job.stop()
    return {"urls": sent, "bytes": size, "produced_s": produced_s, "ingested_s": ingested_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--urls", default="1000000", help="comma-separated URL counts")
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--hot-share", type=float, default=0.1,
                    help="share of the URLs on one hot host")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run, at most")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting for the frontier job, e.g. "
                         "flink.rocksdb_uncompressed_levels=0 (repeatable)")
    args = ap.parse_args()
    try:
        load_config(env={}, overrides=args.set)
    except ConfigError as exc:  # the configuration's own message, before anything starts
        ap.error(f"--set: {exc}")
    try:
        counts = [int(n) for n in args.urls.split(",")]
    except ValueError:
        ap.error(f"--urls: whole numbers, comma-separated, got {args.urls}")
    if not all(1000 <= n <= 50_000_000 for n in counts):
        ap.error(f"--urls: each from 1,000 to 50,000,000, got {args.urls}")
    if not 1 <= args.hosts <= 1_000_000 or not 0 <= args.hot_share < 1:
        ap.error("--hosts from 1 to 1,000,000; --hot-share from 0 to below 1")
    rows = [("one queued URL, logical (pickled value + url_id key)",
             f"{logical_url_bytes()} B, for an URL of "
             f"{len(next(host_urls('https://www.h1.bench.example', 1)))} characters")]
    for n in counts:
        r = measure(n, args.hosts, args.hot_share, args.timeout, tuple(args.set))
        label = f"{r['urls'] / 1e6:g} M URLs"
        rows += [
            (f"{label}: checkpoint bytes", f"{r['bytes'] / 1e6:,.1f} MB"),
            (f"{label}: bytes per URL", f"{r['bytes'] / r['urls']:,.0f}"),
            (f"{label}: ingest", f"{r['urls'] / r['ingested_s']:,.0f} URLs/s "
                                 f"({r['ingested_s']:,.0f} s to the last committed offset)"),
        ]
    record("state_bytes", "Frontier state per known URL (RocksDB checkpoint)", rows,
           notes=f"{args.hosts:,} hosts plus one hot host with {args.hot_share:.0%} of the "
                 "URLs (its cold queue included); every URL queued, none fetched. The "
                 "spec's figure is 200 B per URL. Sizes as RocksDB left its SST files "
                 "(compressed blocks, no forced compaction). These URLs are regular (one "
                 "path pattern per host), so they compress better than a real web's: "
                 "the logical size is the bound to plan with.")


if __name__ == "__main__":
    main()
