"""The fetcher's held leases: memory and CPU per lease held for its host's turn.

    python bench/bench_held_leases.py                 # ~1 min, no services
    python bench/bench_held_leases.py --leases 2200,22000

The fetcher job holds each lease it reads until its host's turn comes (the gap after
the host's last request, its not_before, a Retry-After), up to fetch.hold_s, inside the
fetch engine, up to the job's --capacity leases per slot (jobs/fetcher.py, 1,000 by
default), leases being fetched included. The frontier lets out more than that at
2,000 hosts a slot (11 a host by default); holding them all would take a larger
--capacity (README, "Pace and politeness": no gain measured on this machine). This
measures what a held lease costs, with the job's own FetchFunction (opened as a
task would open it, no Flink): leases of hosts that have 11 each (--per-host), chained
as the frontier grants them and due a minute ahead, are handed to it; each figure
comes from a fresh child process and is (after − before) / leases of its resident set
(what the machine pays) and of tracemalloc's count of live objects (a second child:
tracing costs memory of its own). No request is sent: no lease's turn comes before
the child ends.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


class _Group:
    """A metric group that takes every registration (Flink's, for open())."""

    def add_group(self, *args):
        return self

    def gauge(self, *args):
        return None

    def counter(self, *args):
        return self


class _Runtime:
    def get_metrics_group(self) -> _Group:
        return _Group()

    def get_attempt_number(self) -> int:
        return 0

    def get_index_of_this_subtask(self) -> int:
        return 0


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def child(leases: int, per_host: int, trace: bool) -> dict:
    """Open a FetchFunction, hand it `leases` leases due a minute ahead, `per_host` of
    each host; bytes per lease and seconds of CPU per lease handed over."""
    import gc
    import tracemalloc

    from udfs.config import load_config
    from udfs.fetcher.operator import FetchFunction
    from udfs.wire.avro import registry

    work = tempfile.mkdtemp(prefix="held-leases-")
    atexit.register(shutil.rmtree, work, True)  # (the process's cwd: removed at its end)
    os.chdir(work)
    cfg = load_config(env={}, overrides=[
        "fetch.hold_s=120", "frontier.lookahead_s=2.5", "warc.enabled=false",
        f"storage.local_dir={work}/bodies"])
    fn = FetchFunction(dict(cfg.data), connections=leases + 10)  # the engine's room
    fn.open(_Runtime())
    reg = registry()
    now_ms = int(time.time() * 1000) + 1
    raw = []
    for i in range(leases):  # each host's leases chained, as the frontier grants them
        host, seq = divmod(i, per_host)
        raw.append(reg.encode("lease", {
            "lease_id": f"held{host}.test:80#{seq}@{now_ms}", "url_id": f"{i:016x}",
            "url_version": 1, "attempt": 1, "issued_at_ms": now_ms,
            "expires_at_ms": now_ms + 290_000, "url": f"http://held{host}.test/p/{seq}",
            "host_key": f"http://held{host}.test:80", "kind": "PAGE", "depth": 1,
            "etag": None, "last_modified": None,
            "prev_lease_id": f"held{host}.test:80#{seq - 1}@{now_ms}" if seq else None,
            "not_before_ms": now_ms + 60_000 + seq * 200, "storage_tier": "standard"}))
    hosts = -(-leases // per_host)

    async def hand_over() -> float:
        cpu = time.process_time()
        for value in raw:
            await fn.async_invoke((b"k", value))
        # until the engine's loop has taken every lease to its host's wait
        while len(fn.turns.hosts) < hosts or sum(
                line.locked() + len(line._waiters or ()) for line, _ in fn.turns.hosts.values()
        ) < leases:
            await asyncio.sleep(0.05)
        return time.process_time() - cpu

    gc.collect()
    if trace:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0] if trace else _rss()
    cpu_s = asyncio.run(hand_over())
    gc.collect()
    after = tracemalloc.get_traced_memory()[0] if trace else _rss()
    held = fn.engine.active()
    fn.engine.close()
    return {"bytes_per_lease": (after - before) / leases, "held": held,
            "cpu_us_per_lease": cpu_s / leases * 1e6}


def measure(leases: int, per_host: int, trace: bool) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(leases),
                          "--per-host", str(per_host)] +
                         (["--trace"] if trace else []), capture_output=True, text=True,
                         timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leases", default="2200,22000",
                    help="held leases per measurement, comma-separated")
    ap.add_argument("--per-host", type=int, default=11,
                    help="leases of each host (the frontier's default lets out 11: one in "
                    "flight, ten ahead)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.per_host, args.trace)))
        return
    try:
        counts = [int(n) for n in args.leases.split(",")]
    except ValueError:
        ap.error(f"--leases {args.leases}: not a list of whole numbers")
    if not counts or min(counts) < 1:
        ap.error(f"--leases {args.leases}: each count must be at least 1")
    if args.per_host < 1:
        ap.error(f"--per-host {args.per_host}: must be at least 1")

    from _results import record

    rows = []
    for n in counts:
        rss, objs = measure(n, args.per_host, False), measure(n, args.per_host, True)
        assert rss["held"] == n and objs["held"] == n, (rss, objs)
        rows += [
            (f"{n:,} held: resident set per lease", f"{rss['bytes_per_lease']:,.0f} B"),
            (f"{n:,} held: live Python objects per lease (tracemalloc)",
             f"{objs['bytes_per_lease']:,.0f} B"),
            (f"{n:,} held: the worker's CPU to take a lease in and hold it",
             f"{rss['cpu_us_per_lease']:.0f} µs"),
        ]
    record("held_leases", "The fetcher's held leases: memory per lease held for its turn",
           rows, notes="The job's FetchFunction opened without Flink, "
           f"{args.per_host} leases of each host, due a minute ahead (nothing is sent). "
           "The job's --capacity times the resident set per lease is what a full "
           "engine holds.")


if __name__ == "__main__":
    main()
