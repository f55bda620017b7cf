"""Relay job: copy a topic's Avro records into another topic, upgraded to the newest schema.

Use it to rewrite a topic after a schema change, or to validate operator input
before it enters the crawl: every record that cannot be read goes to the
dead-letter topic with its reason. It is also the smoke test of the real chain
(KafkaSource → Python → KafkaSink, exactly-once, checkpointing on).

    python -m jobs.relay --from TOPIC --to TOPIC --schema NAME [--bounded]
    flink run -py jobs/relay.py -pyfs udfs,schemas -- --from ... --to ... --schema ...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from udfs.config import load_config
from udfs.relay import DEAD_LETTERS, RelayFunction
from udfs.runtime import BYTES, kafka_sink, kafka_source_stream, make_env


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="relay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="source", required=True, help="topic to read")
    ap.add_argument("--to", dest="target", required=True, help="topic to write")
    ap.add_argument("--schema", required=True, help="schema name of the records, e.g. discovered")
    ap.add_argument("--bounded", action="store_true",
                    help="stop at the offsets that are latest at start")
    ap.add_argument("--config", action="append", default=[], metavar="FILE")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, overrides=args.set)

    env = make_env(cfg)
    raw = kafka_source_stream(env, cfg, args.source, group=f"relay.{args.source}",
                              bounded=args.bounded).uid("relay-source")
    routed = raw.process(RelayFunction(args.schema, args.source), output_type=BYTES) \
        .uid("relay-decode").name("decode and upgrade")
    prefix = f"relay-{args.source}-{args.target}"
    routed.sink_to(kafka_sink(cfg, args.target, exactly_once=True,
                              transactional_id_prefix=prefix)).uid("relay-sink")
    routed.get_side_output(DEAD_LETTERS).sink_to(
        kafka_sink(cfg, cfg.topic("deadletter"), exactly_once=True,
                   transactional_id_prefix=f"{prefix}-dlq")).uid("relay-deadletter-sink")
    env.execute(f"relay {args.source} -> {args.target}")


if __name__ == "__main__":
    main(sys.argv[1:])
