"""The crawl at rest: what both jobs and the broker spend when there is nothing to fetch.

    python bench/bench_rest.py [--settle 120] [--seconds 60] [--checkpoint-ms 10000]

Both jobs start on a synthetic web of 2 plain sites of 5 pages (robots.txt with rules,
a sitemap; no trap, throttling or slow page), crawl it out, and then idle: no lease to
grant, no page to fetch, their sources polling Kafka and their clocks ticking. After
the web has seen no request for 30 s and `--settle` seconds more (the JVMs' JIT
compilers quiet down), the CPU of each job's processes and of the Kafka broker is
measured over `--seconds`: milliseconds of CPU per second, that is thousandths of a
core, by process and, inside each JVM, by kind of thread (the names Flink and Kafka
give them, digits folded). This is the part of a crawl's CPU that does not grow with
its pages: bench_crawl.py divides it among them too. The jobs checkpoint every
`--checkpoint-ms` (the shipped default, 10 s; `./dev crawl` and the synthetic web's
settings take 1 s). Needs the local stack (`./dev up`).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._results import (  # noqa: E402
    CpuMeter,
    broker_pid,
    record,
    thread_seconds,
    tree_pids,
)
from crawler.run import JobProcess, publish_seeds, synthetic_overrides  # noqa: E402
from crawler.testkit.synthetic_web import Site, SyntheticWeb  # noqa: E402
from udfs.config import TOPIC_KEYS, load_config  # noqa: E402

QUIET_S = 30.0  # no request for this long: the web is crawled out
CRAWL_LIMIT_S = 300.0  # a web of ten pages is crawled out well before this


def by_thread_kind(before: dict[tuple[int, int], tuple[str, float]],
                   after: dict[tuple[int, int], tuple[str, float]], pid: int) -> Counter[str]:
    """CPU seconds of one process's threads between two readings (`thread_seconds`), by
    name, digits folded."""
    kinds: Counter[str] = Counter()
    for (p, tid), (name, cpu) in after.items():
        if p == pid:
            kinds[re.sub(r"[0-9]+", "#", name)] += cpu - before.get((p, tid), (name, 0.0))[1]
    return kinds


def java_pid(root: int) -> int | None:
    """The JVM a job's Python process started (PyFlink's local gateway)."""
    for pid in sorted(tree_pids([root])):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                return pid
        except OSError:
            continue
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settle", type=float, default=120.0,
                    help="seconds idle before measuring, once the web is crawled out (120)")
    ap.add_argument("--seconds", type=float, default=60.0, help="seconds measured (60)")
    ap.add_argument("--checkpoint-ms", type=int, default=10_000,
                    help="both jobs' checkpoint interval (the shipped default: 10,000)")
    args = ap.parse_args()
    if args.settle < 0 or args.seconds <= 0 or args.checkpoint_ms < 100:
        ap.error("--settle must be at least 0, --seconds more than 0 and --checkpoint-ms "
                 "at least 100")
    broker = broker_pid()
    if broker is None:
        ap.error("the local stack's Kafka broker is not running: ./dev up first")
    web = SyntheticWeb([Site(f"site{i}.test", pages=5, robots="rules", throttle_every=0,
                              retry_after_s=0, features=frozenset()) for i in range(2)],
                        page_bytes=20_000)
    web.start()
    workdir = Path(tempfile.mkdtemp(prefix="bench-rest-"))
    base = load_config(env={})
    suffix = time.strftime("%H%M%S")
    overrides = [f"topics.{k}.name=bench-rest-{suffix}.{base.topic(k)}" for k in TOPIC_KEYS]
    overrides += synthetic_overrides(web, workdir, 0.2)
    # (after the synthetic web's settings, which checkpoint every second)
    overrides.append(f"flink.checkpoint_interval_ms={args.checkpoint_ms}")
    overrides.append(f"flink.checkpoint_dir={workdir / 'checkpoints'}")
    cfg = load_config(env={}, overrides=overrides)
    from crawler.stack.local import drop_topics, ensure_topics

    ensure_topics(cfg)
    jobs = [JobProcess(n, overrides, workdir / f"{n}.log") for n in ("frontier", "fetcher")]
    try:
        for job in jobs:
            job.start()
        publish_seeds(cfg, [web.host_key(s) + "/" for s in web.site_list])
        start = last_seen = time.monotonic()
        seen = 0
        while time.monotonic() - last_seen < QUIET_S:
            if not all(j.alive() for j in jobs):
                raise SystemExit("a job ended:\n" + "\n".join(j.report() for j in jobs))
            if time.monotonic() - start > CRAWL_LIMIT_S:
                raise SystemExit(f"the web was not crawled out in {CRAWL_LIMIT_S:.0f} s")
            if len(web.log) != seen or seen == 0:
                seen, last_seen = len(web.log), time.monotonic()
            time.sleep(1)
        print(f"crawled out: {seen} requests; idle for {args.settle:.0f} s more", flush=True)
        time.sleep(args.settle)
        meters = {j.name: CpuMeter([j.proc.pid]) for j in jobs}
        meters["kafka"] = CpuMeter([broker])
        jvms = {j.name: java_pid(j.proc.pid) for j in jobs}
        jvms["kafka"] = broker
        pids = {p for p in jvms.values() if p is not None}
        for m in meters.values():
            m.start()
        threads0, t0 = thread_seconds(pids), time.monotonic()
        while time.monotonic() - t0 < args.seconds:
            time.sleep(1)
            for m in meters.values():
                m.sample()
        span = time.monotonic() - t0
        threads1 = thread_seconds(pids)
        requests_during = len(web.log) - seen
        # (read while the jobs run: a stopped job's processes read as no CPU at all)
        cpu = {name: (m.seconds(), m.by_process(), m.jit()) for name, m in meters.items()}
    finally:
        for job in jobs:
            job.stop()
        web.stop()
        drop_topics(cfg)
        shutil.rmtree(workdir, ignore_errors=True)  # (a failed job's log was printed above)

    def rate(seconds: float) -> str:
        return f"{1000 * seconds / span:.1f}"

    total = sum(c[0] for c in cpu.values())
    rows = [("seconds measured / idle before (after the last request) / requests meanwhile / "
             "checkpoint interval",
             f"{span:.0f} s / {args.settle + QUIET_S:.0f} s / {requests_during} / "
             f"{args.checkpoint_ms / 1000:g} s"),
            ("all: CPU ms per second (thousandths of a core)", rate(total))]
    for name, (seconds, by_process, jit) in cpu.items():
        parts = ", ".join(f"{kind} {rate(c)}" for kind, c in
                          sorted(by_process.items(), key=lambda kv: -kv[1]) if c > 0)
        rows.append((f"{name}: CPU ms per second (by process)",
                     f"{rate(seconds)} ({parts}; JIT compilers {rate(jit)})"))
    for name, pid in jvms.items():
        if pid is None:
            continue
        kinds = by_thread_kind(threads0, threads1, pid)
        top = ", ".join(f"{kind} {rate(cpu)}" for kind, cpu in kinds.most_common(8) if cpu > 0)
        rows.append((f"{name}'s JVM: the busiest kinds of thread, CPU ms per second", top))
    record("rest", "The crawl at rest: both jobs and the broker with nothing to fetch", rows,
           "The default configuration (but the checkpoint interval: the first row) on "
           "the local stack; each job in its own MiniCluster, as `crawl run` starts them. The "
           "broker's figure includes what any other client of the local stack asked of it "
           "meanwhile (nothing else runs in a bench). Thread names are Flink's and Kafka's, cut "
           "to 15 characters by Linux.")


if __name__ == "__main__":
    main()
