"""Fixed versus learned priority in the scheduling simulation, same seeds, same fetch count.

Each seed runs `crawl simulate`'s world twice (crawler/testkit/simulate.py, every fault on):
once with recrawl.learned_priority off (each host's queue ordered by discovery value,
then due time) and once on (pages seen to change first, duplicates and failures later,
duplicate pages and duplicate-heavy hosts revisited 4x later). Pages change on their own
clocks; every tenth host is duplicate-heavy (four in five pages are one boilerplate).

Reported per policy: freshness (the share of stored copies that are current, sampled
every virtual minute), wasted fetches (page fetches that found the page unchanged), the
pages covered, and the duplicate-heavy hosts' fetches beyond their first visit of each
page (revisits), with the politeness oracle's violations and the lost URLs.

    python bench/bench_priority.py                 # 5 seeds x 2 policies, ~4 min
    python bench/bench_priority.py --seeds 2 --fetches 20000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._results import record  # noqa: E402
from crawler.testkit.simulate import SimConfig, simulate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--hosts", type=int, default=30)
    ap.add_argument("--fetches", type=int, default=40_000)
    args = ap.parse_args()
    if not (1 <= args.seeds <= 50 and 2 <= args.hosts <= 5000 and
            1000 <= args.fetches <= 2_000_000):
        ap.error("--seeds 1..50, --hosts 2..5000, --fetches 1000..2000000")
    rows: list[tuple[str, str]] = []
    totals = {p: {"fresh": 0.0, "wasted": 0.0, "covered": 0, "dup_revisits": 0,
                  "dup_fetches": 0, "dup_covered": 0} for p in ("fixed", "learned")}
    bad = 0
    start = time.perf_counter()
    for seed in range(1, args.seeds + 1):
        line = []
        for name, learned in (("fixed", False), ("learned", True)):
            r = simulate(SimConfig(hosts=args.hosts, fetches=args.fetches, seed=seed,
                                   learned_priority=learned))
            dup = r["duplicate_heavy_hosts"]
            t = totals[name]
            t["fresh"] += r["freshness"]
            t["wasted"] += r["wasted_fetch_share"]
            t["covered"] += r["pages_covered"]
            t["dup_fetches"] += dup["fetches"]
            t["dup_covered"] += dup["pages_covered"]
            t["dup_revisits"] += dup["fetches"] - dup["pages_covered"]
            bad += r["violations"] + r["lost_urls"] + r["double_completions"]
            line.append(f"{name}: fresh {r['freshness']:.2%}, wasted "
                        f"{r['wasted_fetch_share']:.1%}, covered {r['pages_covered']:,}, "
                        f"dup-heavy {dup['fetches']:,} fetches / {dup['pages_covered']:,} "
                        f"pages, violations {r['violations']}, lost {r['lost_urls']}")
        rows.append((f"seed {seed}", "<br>".join(line)))
        print(f"seed {seed}: " + " | ".join(line), flush=True)
    n = args.seeds
    f, g = totals["fixed"], totals["learned"]
    rows += [
        ("freshness, mean (fixed → learned)",
         f"{f['fresh'] / n:.2%} → {g['fresh'] / n:.2%}"),
        ("wasted fetches, mean (fixed → learned)",
         f"{f['wasted'] / n:.1%} → {g['wasted'] / n:.1%}"),
        ("pages covered, total (fixed → learned)", f"{f['covered']:,} → {g['covered']:,}"),
        ("duplicate-heavy hosts: fetches / pages covered / revisits (fixed → learned)",
         f"{f['dup_fetches']:,} / {f['dup_covered']:,} / {f['dup_revisits']:,} → "
         f"{g['dup_fetches']:,} / {g['dup_covered']:,} / {g['dup_revisits']:,}"),
        ("violations + lost URLs + double completions, all runs", str(bad)),
        ("wall time", f"{time.perf_counter() - start:.0f} s"),
    ]
    record("priority", f"Fixed vs learned priority (simulation, {args.hosts} hosts, "
           f"{args.fetches:,} fetches per run)", rows,
           "Same seed and fetch count for both policies; every fault of the simulation on. "
           "A duplicate-heavy host is politeness-bound either way, so its fetch count "
           "hardly moves; what changes is what they buy: its revisits of duplicates "
           "give way to pages it had not covered yet.")
    if bad:
        raise SystemExit(f"{bad} violations, lost URLs or double completions")


if __name__ == "__main__":
    main()
