"""The fetcher job: leases in; completions (each after the URLs its page gave, on the
same topic) and dead letters out.
Process mode (Python async I/O runs only there).

    python -m jobs.fetcher [--config FILE] [--set KEY=VALUE ...]
    flink run -py jobs/fetcher.py -pyfs udfs,schemas -- --set ...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyflink.common import Time
from pyflink.datastream import AsyncDataStream

from udfs.config import load_config
from udfs.fetcher.operator import FETCH_OUTPUT, FetchFunction
from udfs.flink.runtime import KafkaIO, make_env, restoring


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="fetcher", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", default=[], metavar="FILE")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--bounded", action="store_true",
                    help="stop at the offsets that are latest at start (tests)")
    ap.add_argument("--from-checkpoint", metavar="PATH",
                    help="start from this savepoint or retained checkpoint (a local run; "
                    "on a cluster use flink run -s)")
    ap.add_argument("--capacity", type=int, default=1000,
                    help="leases held or fetched at once per slot")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, overrides=args.set)
    print(cfg.log_line("fetcher"), flush=True)  # what this job was configured with

    env = make_env(cfg, bundle_size=cfg["fetch.bundle_size"],
                   bundle_time_ms=cfg["fetch.bundle_time_ms"],
                   restore_from=args.from_checkpoint,
                   metrics_port=cfg["metrics.fetcher_port"],
                   # Nothing of this job's state is needed to be safe or lose nothing
                   # (its leases are re-let, its outputs idempotent; its sources' offsets
                   # are also committed to Kafka): a restore into a graph that dropped an
                   # operator skips that operator's state rather than fail.
                   skip_unclaimed_state=True)
    kafka = KafkaIO(env, cfg)
    leases = kafka.source(cfg.topic("leases"), "fetcher", bounded=args.bounded)
    if not args.bounded:  # ticks collect finished fetches when no lease arrives
        leases = leases.union(kafka.ticks())
    # No operator timeout: PyFlink starts a thread per element to time it out. The
    # function bounds each lease itself (FetchFunction.guard_s).
    results = AsyncDataStream.unordered_wait(
        leases, FetchFunction(dict(cfg.data), connections=args.capacity,
                              restored=restoring(env)),
        Time.milliseconds(0), capacity=args.capacity, output_type=FETCH_OUTPUT) \
        .uid("fetcher-fetch").name("fetch, store, parse")

    # At-least-once: a completion or a discovered URL counts when it arrives, not when
    # this job's checkpoint commits (both are idempotent at the frontier: completions by
    # (url_id, url_version), discoveries by URL), so a host's pace is not the checkpoint's.
    # A page's URLs are inside its completion (v4); those too many for one record go
    # just before it, under its key and through this one sink (the fetch task's own
    # producer, idempotent): whoever reads the completion has read the URLs
    # (udfs/fetcher/operator.py). Each row goes to its topic by its dest, chosen in the JVM.
    for dest, topic in (("C", "completions"), ("X", "deadletter")):
        kafka.sink(results, cfg.topic(topic), exactly_once=False, dest=dest)
    kafka.attach()
    env.execute("crawl fetcher")


if __name__ == "__main__":
    main(sys.argv[1:])
