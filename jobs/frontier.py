"""The frontier job: discovered URLs, completions, operators' host commands and (read
back) its own index events and hot hosts' shard moves in; leases, index events,
discovered URLs (redirect targets, robots.txt sitemaps), command replies and shard
moves out. Thread mode.

    python -m jobs.frontier [--config FILE] [--set KEY=VALUE ...] [--bounded]
    flink run -py jobs/frontier.py -pyfs udfs,schemas -- --set ...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from udfs.config import load_config
from udfs.config.policies import frontier_config
from udfs.flink.runtime import (
    ROW_KEY_VALUE,
    KafkaIO,
    execute,
    keyed_by_first,
    make_env,
    side_output,
)
from udfs.frontier.audit import audit_trail
from udfs.frontier.index import ContentDedup, NearDuplicateBand
from udfs.frontier.operator import (
    DEAD_LETTERS,
    DISCOVERED,
    HOST_INPUT,
    INDEX,
    INDEX_INPUT,
    REPLIES,
    SHARDS,
    FrontierFunction,
    Intake,
    tick_row,
)

# The ids of the Kafka sinks' operators as builds up to 7afa9a0 gave them (Flink derived
# them from the graph, which had a Python operator before each keyed exchange and
# behind each side output): kept, so that a savepoint of those builds restores.
# tests/integration/test_frontier_job.py checks the id of every operator that keeps state.
PINNED_IDS = {
    "sink1: Writer": "3c3d6531f6c2755ee9cadaf037da3799",  # leases
    "sink1: Committer": "88fe84198ca8e351367f57879f5cddef",
    "sink2: Writer": "3b545bd5fcdbbdc531507ce12b093c06",  # discovered
    "sink2: Committer": "6f4831f0b857fc76b901b198b1e1c43e",
    "sink3: Writer": "e1f4e2bc69906b4fbe6709ffd6adff4b",  # replies
    "sink3: Committer": "0fee2e5fcfc75300a38a9e2cbbbb27bb",
    "sink4: Writer": "b93bfbf0342949e6d7dfee62f8675109",  # shards
    "sink4: Committer": "d3e20f57b40a0340380c5bf4994dde28",
    "sink5: Writer": "097fcb659f1f8012e811db1ee620cfdb",  # index
    "sink5: Committer": "ada2b2d3a4c06e6728d2d90a9a1da95d",
    "sink6: Writer": "b69acf5beaf867918616906b1c57741b",  # dead letters
    "sink6: Committer": "c1f595ac21dbcb9a7c812a2b7a1142d0",
}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="frontier", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", default=[], metavar="FILE")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--bounded", action="store_true",
                    help="stop at the offsets that are latest at start (tests)")
    ap.add_argument("--from-checkpoint", metavar="PATH",
                    help="start from this savepoint or retained checkpoint (a local run; "
                    "on a cluster use flink run -s)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, overrides=args.set)
    print(cfg.log_line("frontier"), flush=True)  # what this job was configured with
    settings = frontier_config(cfg)  # the frontier section, typed

    env = make_env(cfg, thread_mode=True, restore_from=args.from_checkpoint,
                   metrics_port=cfg["metrics.frontier_port"])
    env.get_config().set_auto_watermark_interval(200)
    kafka = KafkaIO(env, cfg)
    discovered = kafka.source(cfg.topic("discovered"), "frontier", bounded=args.bounded,
                              ingestion_time=True)
    completions = kafka.source(cfg.topic("completions"), "frontier", bounded=args.bounded,
                               ingestion_time=True)
    # The index topic read back: its duplicate flags reach the URL's owner (committed
    # events only, so this feedback is exactly as durable as the index).
    feedback = kafka.source(cfg.topic("index"), "frontier", bounded=args.bounded,
                            ingestion_time=True)
    # Operators' commands to one host (crawl host ..., crawl url show): applied by the
    # host's owner, in its keyed state; replayed from the checkpoint like any input.
    control = kafka.source(cfg.topic("control"), "frontier", bounded=args.bounded,
                           ingestion_time=True)
    # A hot host's URLs between its owner and its shards (udfs/core/shards.py), written
    # by this job exactly-once below: read committed, so a move is seen once, and only
    # with the checkpoint that recorded the sender's side of it.
    shards = kafka.source(cfg.topic("shards"), "frontier", bounded=args.bounded,
                          ingestion_time=True)
    records = discovered.union(completions, feedback, control, shards) \
        .process(Intake(dict(cfg.data)),
                 output_type=HOST_INPUT).uid("frontier-intake").name("decode and normalize")
    # The crawl clock: its watermark fires the hosts' event-time timers even when no
    # record arrives (wall-clock ticks, or a topic's timestamps for a virtual clock).
    ticks = kafka.clock(cfg["frontier.clock_topic"]) \
        .map(tick_row, output_type=HOST_INPUT).name("crawl clock")
    # Every keyed stream here is keyed in the JVM by the key its rows carry in front
    # (keyed_by_first), and side outputs are read there (side_output): PyFlink's own
    # key_by and get_side_output each add a call into Python a record.
    frontier = keyed_by_first(records.union(ticks)) \
        .process(FrontierFunction(dict(cfg.data)), output_type=ROW_KEY_VALUE) \
        .uid("frontier-hosts").name("frontier")
    # Index events: exact duplicates by body hash, then one hop per SimHash band.
    index = keyed_by_first(side_output(frontier, INDEX)) \
        .process(ContentDedup(), output_type=INDEX_INPUT).uid("frontier-content-dedup") \
        .name("exact duplicates")
    for band in range(4):
        last = band == 3
        index = keyed_by_first(index) \
            .process(NearDuplicateBand(band, max_bucket=settings.near_duplicate_bucket),
                     output_type=ROW_KEY_VALUE if last else INDEX_INPUT) \
            .uid(f"frontier-near-duplicates-{band}").name(f"near duplicates, band {band}")
    # The fetch audit trail: every completion into object storage, where it outlives the
    # completions topic (udfs/frontier/audit.py).
    audit_trail(completions, kafka, cfg)

    # Leases and the URLs the frontier found itself go out at once (at-least-once): a
    # lease from an epoch a restore forgets is harmless (the fetcher paces the host by
    # its own clock and history; a completion counts once per URL version), while one
    # waiting for the checkpoint would pace the host by checkpoints. Index events stay
    # exactly-once: unique per (url_id, url_version).
    kafka.sink(frontier, cfg.topic("leases"), exactly_once=False)
    kafka.sink(side_output(frontier, DISCOVERED), cfg.topic("discovered"),
               exactly_once=False)
    # Replies at once: the CLI waits for them; a replayed command is answered again.
    kafka.sink(side_output(frontier, REPLIES), cfg.topic("replies"),
               exactly_once=False)
    kafka.sink(side_output(frontier, SHARDS), cfg.topic("shards"), exactly_once=True,
               transactional_id_prefix=f"frontier-{cfg.topic('shards')}")
    kafka.sink(index, cfg.topic("index"), exactly_once=True,
               transactional_id_prefix=f"frontier-{cfg.topic('index')}")
    kafka.sink(side_output(records, DEAD_LETTERS), cfg.topic("deadletter"),
               exactly_once=True, transactional_id_prefix=f"frontier-{cfg.topic('deadletter')}")
    kafka.attach()
    execute(env, "crawl frontier", PINNED_IDS)


if __name__ == "__main__":
    main(sys.argv[1:])
