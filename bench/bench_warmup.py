"""How long the crawl takes to warm up: its CPU per page and its JVMs' JIT compilers over
one long crawl, interval by interval.

    python bench/bench_warmup.py [--sites 200] [--seconds 420] [--step 30]
                                 [--pages 1500,1800] [--window 60,180]

One crawl of a fresh synthetic web (bench_crawl.py's: seed 11, 20 KB pages, gap 0.2 s,
the shipped 10 s checkpoints), measured from its first request for `--seconds`, every
`--step` seconds: pages/s, machine CPU ms per page (both jobs' process trees and the
Kafka broker) and, of it, the JVMs' JIT compilers (C1, C2 threads), by part. Then the
same figures over two windows of equal length: `--window` (bench_crawl.py's, 60 s of
warm-up then 120 s) and the one right after it. A JVM compiles its hot code as the
crawl first runs it; a crawl runs for days, so the figure that matters to an operator is
the later one, and the difference is what a short window charges the crawl for starting.
Needs the local stack (`./dev up`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._results import record  # noqa: E402
from bench.bench_crawl import TracePoint, pages_by_size, run_ours  # noqa: E402

PARTS = ("frontier", "fetcher", "kafka")


def between(a: TracePoint | None, b: TracePoint) -> tuple[float, int, dict[str, float],
                                                          dict[str, float]]:
    """(seconds, pages, CPU s by part, JIT s by part) from `a` (None: the window's
    start) to `b`."""
    if a is None:
        return b.seconds, b.pages, dict(b.cpu), dict(b.jit)
    return (b.seconds - a.seconds, b.pages - a.pages,
            {k: v - a.cpu.get(k, 0.0) for k, v in b.cpu.items()},
            {k: v - a.jit.get(k, 0.0) for k, v in b.jit.items()})


def at(trace: list[TracePoint], seconds: float) -> TracePoint | None:
    """The trace's point nearest `seconds` into the window (None: its start)."""
    if seconds <= 0:
        return None
    return min(trace, key=lambda p: abs(p.seconds - seconds))


def interval_row(secs: float, pages: int, cpu: dict[str, float],
                 jit: dict[str, float]) -> str:
    """pages/s; CPU ms a page (the JIT's part); JIT ms a second by part."""
    n = max(pages, 1)
    return (f"{pages / secs:,.1f} pages/s; {1000 * sum(cpu.values()) / n:.2f} ms a page, "
            f"of which JIT {1000 * sum(jit.values()) / n:.2f}; JIT ms a second: "
            + ", ".join(f"{k} {1000 * jit.get(k, 0.0) / secs:.0f}" for k in PARTS if k in jit))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sites", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=420)
    ap.add_argument("--step", type=float, default=30.0)
    ap.add_argument("--pages", default="1500,1800", metavar="LO,HI",
                    help="pages per site (a long crawl of few sites needs many)")
    ap.add_argument("--window", default="60,180", metavar="FROM,TO",
                    help="the short window, seconds after the first request (bench_crawl's)")
    args = ap.parse_args()
    try:
        pages = pages_by_size([args.pages], [args.sites])[args.sites]
    except ValueError as exc:
        ap.error(f"--pages: {exc}")
    try:
        lo, hi = (float(x) for x in args.window.split(","))
    except ValueError:
        ap.error(f"--window: FROM,TO (seconds), got {args.window}")
    if not 0 <= lo < hi or hi + (hi - lo) > args.seconds:
        ap.error(f"--window: 0 <= FROM < TO and TO + (TO - FROM) <= --seconds "
                 f"({args.seconds}), got {args.window}")
    if args.step <= 0 or args.step > hi - lo:
        ap.error(f"--step: seconds, more than 0 and at most the window, got {args.step}")
    trace: list[TracePoint] = []
    with tempfile.TemporaryDirectory() as tmp:
        (total, violations, kinds), secs, _parts = run_ours(
            args.sites, args.seconds, 0.2, Path(tmp), 20_000, 10_000, pages=pages,
            trace=trace, trace_step=args.step)
    if len(trace) < 2:
        raise SystemExit(f"the crawl ended after {secs:.0f} s, before a trace (see the "
                         "jobs' logs)")
    rows = [("sites / pages per site / seconds from the first request / step",
             f"{args.sites} / {pages[0]}–{pages[1]} / {secs:.0f} s / {args.step:g} s"),
            ("politeness violations", f"{violations} {kinds}")]
    before = None
    for point in trace:
        rows.append((f"{0 if before is None else before.seconds:.0f}–{point.seconds:.0f} s",
                     interval_row(*between(before, point))))
        before = point
    later = (hi, hi + (hi - lo))
    short = between(at(trace, lo), at(trace, hi))
    long = between(at(trace, later[0]), at(trace, later[1]))
    ms = [1000 * sum(cpu.values()) / max(n, 1) for _s, n, cpu, _jit in (short, long)]
    rows += [(f"window {lo:.0f}–{hi:.0f} s (bench_crawl's)", interval_row(*short)),
             (f"window {later[0]:.0f}–{later[1]:.0f} s", interval_row(*long)),
             ("CPU per page, the later window against the earlier",
              f"{ms[1] / max(ms[0], 1e-9):.2f} ({ms[1]:.2f} against {ms[0]:.2f} ms)")]
    record("warmup", "The crawl warming up: CPU per page and the JVMs' JIT over time", rows,
           notes="One crawl of a fresh synthetic web, 20 KB pages, gap 0.2 s, the shipped "
                 "10 s checkpoints; each row covers the interval since the row before, "
                 "seconds from the crawl's first request. CPU: user + system seconds of "
                 "both jobs' process trees and the Kafka broker, per page served; JIT: of "
                 "it, the JVMs' C1 and C2 compiler threads. The two windows are of equal "
                 "length, the first bench_crawl.py's.")


if __name__ == "__main__":
    main()
