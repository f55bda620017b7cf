"""The frontier's RocksDB compression, side by side: the whole crawl on the synthetic
web (bench_crawl's, 2,000 sites by default) with every level Snappy-compressed (Flink's
default) and with the top `flink.rocksdb_uncompressed_levels` levels plain.

    python bench/bench_rocksdb_compression.py [--sites 2000] [--seconds 120] [--levels 2]

The runs alternate (plain, compressed, plain, compressed with --rounds 2) so a drift
in the machine's load falls on both. Figures: pages/s and CPU ms per page by part
(each job's process tree, the broker), politeness violations by the oracle. A
py-spy/async-profiler look at the frontier's JVM showed RocksDB's compaction and flush
threads at ~45 % of its samples, a third of them in Snappy. Needs the local stack
(`./dev up`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._results import record  # noqa: E402
from bench.bench_crawl import run_ours  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sites", type=int, default=2000)
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--levels", type=int, default=2, help="uncompressed top levels to compare")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    runs = {f"{args.levels} plain levels": f"flink.rocksdb_uncompressed_levels={args.levels}",
            "all levels Snappy": "flink.rocksdb_uncompressed_levels=0"}
    totals: dict[str, list] = {k: [0, 0.0, {}, 0] for k in runs}
    for _ in range(args.rounds):
        for name, setting in runs.items():
            with tempfile.TemporaryDirectory() as tmp:
                (pages, violations, _kinds), secs, parts = run_ours(
                    args.sites, args.seconds, 0.2, Path(tmp) / "ours", 20_000, 10_000,
                    extra=(setting,))
            t = totals[name]
            t[0] += pages
            t[1] += secs
            for part, cpu in parts.items():
                t[2][part] = t[2].get(part, 0.0) + cpu
            t[3] += violations
    rows = [("sites / seconds per run / rounds", f"{args.sites} / {args.seconds} / {args.rounds}")]
    rate = {}
    for name, (pages, secs, parts, violations) in totals.items():
        rate[name] = pages / secs
        cpu = sum(parts.values())
        rows += [(f"{name}: pages/s", f"{pages / secs:,.1f} ({pages:,} pages)"),
                 (f"{name}: CPU ms per page (all processes)", f"{1000 * cpu / max(pages, 1):.1f}"),
                 (f"{name}: CPU ms per page by part", ", ".join(
                     f"{p} {1000 * c / max(pages, 1):.1f}" for p, c in parts.items())),
                 (f"{name}: politeness violations", str(violations))]
    plain, snappy = rate[f"{args.levels} plain levels"], rate["all levels Snappy"]
    rows.append(("ratio of pages/s, plain top levels / all Snappy",
                 f"{plain / max(snappy, 1e-9):.2f}"))
    record("rocksdb_compression", "RocksDB compression of the top levels, the whole crawl",
           rows, notes="Same web, same politeness (gap 0.2 s, 20 KB pages, 10 s "
           "checkpoints), the two settings alternating in one run. Each checkpoint flushes "
           "RocksDB's memtables (Flink writes no WAL), and the frontier rewrites a host's "
           "record at each event, so compaction rewrites the top levels all the time.")


if __name__ == "__main__":
    main()
