"""Relay job: copy a topic's Avro records into another topic, upgraded to the newest schema.

Use it to rewrite a topic after a schema change, or to validate operator input
before it enters the crawl: every record that cannot be read goes to the
dead-letter topic with its reason, key, partition and offset. Record keys are kept.
It is also the smoke test of the real chain (Flink's Kafka connector → Python →
Kafka connector, exactly-once, checkpointing on).

    python -m jobs.relay --from TOPIC --to TOPIC --schema NAME [--bounded]
    flink run -py jobs/relay.py -pyfs udfs,schemas -- --from ... --to ... --schema ...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from udfs.config import load_config
from udfs.flink.runtime import ROW_KEY_VALUE, KafkaIO, make_env
from udfs.relay.operator import DEAD_LETTERS, RelayFunction
from udfs.wire.avro import registry


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="relay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="source", required=True, help="topic to read")
    ap.add_argument("--to", dest="target", required=True, help="topic to write")
    ap.add_argument("--schema", required=True,
                    help="schema name of the records, e.g. discovered; several, comma-"
                    "separated, for a topic of several kinds (crawl.completions: "
                    "completion,discovered)")
    ap.add_argument("--bounded", action="store_true",
                    help="stop at the offsets that are latest at start")
    ap.add_argument("--config", action="append", default=[], metavar="FILE")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    schemas = [name.strip() for name in args.schema.split(",")]
    unknown = [name for name in schemas if name not in registry().names()]
    if unknown:
        ap.error(f"--schema: no schema named {', '.join(unknown)} "
                 f"(known: {', '.join(registry().names())})")
    cfg = load_config(args.config, overrides=args.set)

    env = make_env(cfg)
    kafka = KafkaIO(env, cfg)
    raw = kafka.source(args.source, group=f"relay.{args.source}", bounded=args.bounded)
    routed = raw.process(RelayFunction(schemas), output_type=ROW_KEY_VALUE) \
        .uid("relay-decode").name("decode and upgrade")
    prefix = f"relay-{args.source}-{args.target}"
    kafka.sink(routed, args.target, exactly_once=True, transactional_id_prefix=prefix)
    kafka.sink(routed.get_side_output(DEAD_LETTERS), cfg.topic("deadletter"),
               exactly_once=True, transactional_id_prefix=f"{prefix}-dlq")
    kafka.attach()
    env.execute(f"relay {args.source} -> {args.target}")


if __name__ == "__main__":
    main(sys.argv[1:])
