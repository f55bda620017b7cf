"""`crawl`: the one command of the crawler. Run `crawl --help` or `crawl <command> --help`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from udfs.config import ConfigError, load_config

_DESCRIPTION = """\
A polite, recoverable web crawler on Apache Flink and Kafka.

Configuration: every default is in udfs/crawler-default.yaml. Override with
--config FILE (or CRAWL_CONFIG=FILE), CRAWL__SECTION__KEY=value environment
variables, and --set section.key=value flags, in that order.
"""

_EPILOG = """\
examples:
  crawl local up                 start Kafka and S3 on loopback, create the topics
  crawl local status             what runs where
  crawl local down               stop what `local up` started
  crawl config show --set flink.parallelism=4
  crawl run --max-pages 100      crawl the bundled synthetic web, with progress
  crawl seed https://example.com/ --set kafka.bootstrap_servers=broker:9092
  crawl schemas                  schema compatibility and the published-version lock
  crawl cluster up               a Flink session cluster on loopback
  crawl submit frontier          run a job on it; then savepoint / upgrade / rescale it
"""


def _cmd_local(args: argparse.Namespace) -> int:
    from crawler.local import LocalStack

    cfg = load_config(args.config, overrides=args.set)
    stack = LocalStack(cfg, state_dir=args.state_dir)
    if args.action == "up":
        stack.up()
    elif args.action == "down":
        stack.down()
    else:
        statuses = stack.status()
        print(f"state folder: {stack.state_dir}")
        for st in statuses:
            state = f"running (pid {st.pid})" if st.running else "stopped"
            extra = f"  {st.detail}" if st.detail else ""
            print(f"{st.name:6} {state:22} {st.address}{extra}")
        return 0 if all(st.running for st in statuses) else 3
    return 0


def _cmd_cluster(args: argparse.Namespace) -> int:
    from crawler.cluster import Cluster

    cfg = load_config(args.config, overrides=args.set)
    cluster = Cluster(cfg)
    if args.action == "up":
        cluster.up(args.taskmanagers or cfg["cluster.taskmanagers"])
    elif args.action == "down":
        cluster.down()
    else:
        statuses = cluster.status()
        for st in statuses:
            state = f"running (pid {st.pid})" if st.running else "stopped"
            print(f"{st.name:14} {state:22} {st.address}")
        overview = cluster.overview()
        if overview:
            print(f"slots {overview['slots-available']}/{overview['slots-total']} free, "
                  f"jobs running {overview['jobs-running']}")
        return 0 if statuses[0].running else 3
    return 0


def _cmd_job(args: argparse.Namespace) -> int:
    """submit / savepoint / upgrade / rescale: the flink CLI on the session cluster."""
    from crawler.cluster import Cluster

    cfg = load_config(args.config, overrides=args.set)
    cluster = Cluster(cfg)
    job_args = [a for f in args.config for a in ("--config", f)] + \
        [a for o in args.set for a in ("--set", o)]
    if args.command == "submit":
        jid = cluster.submit(args.job, job_args, parallelism=args.parallelism,
                             savepoint=args.from_savepoint, build=args.build)
        print(f"{args.job}: running as {jid}")
    elif args.command == "savepoint":
        print(f"{args.job}: savepoint {cluster.savepoint(args.job)}")
    else:
        parallelism = args.parallelism if args.command == "rescale" else None
        path, jid = cluster.upgrade(args.job, job_args, parallelism=parallelism,
                                    build=getattr(args, "build", None))
        print(f"{args.job}: stopped with savepoint {path}; running as {jid}"
              + (f" with parallelism {parallelism}" if parallelism else ""))
    return 0


def _cmd_deps(args: argparse.Namespace) -> int:
    from crawler import deps

    cfg = load_config(args.config, overrides=args.set)
    print(f"cache folder: {deps.cache_dir()}")
    print(f"kafka broker: {deps.ensure_kafka(cfg['local.kafka_version'])}")
    print(f"kafka connector: {deps.ensure_connector(cfg['flink.kafka_connector_version'])}")
    return 0


def _cmd_topics(args: argparse.Namespace) -> int:
    from crawler.local import ensure_topics, topic_partitions

    cfg = load_config(args.config, overrides=args.set)
    if args.action == "create":
        for line in ensure_topics(cfg):
            print(line)
        return 0
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cfg["kafka.bootstrap_servers"],
                             request_timeout_ms=cfg["kafka.request_timeout_ms"])
    try:
        for name, partitions in sorted(topic_partitions(admin).items()):
            if not name.startswith("__"):
                print(f"{name}\t{partitions} partitions")
    finally:
        admin.close()
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, overrides=args.set)
    if args.action == "show":
        sys.stdout.write(cfg.to_yaml())
    else:
        print("configuration is valid")
    return 0


def _cmd_schemas(args: argparse.Namespace) -> int:
    from udfs.avro import check_lock, check_registry, registry

    reg = registry()
    problems = check_registry(reg) + check_lock(reg)
    for name in reg.names():
        versions = reg.versions(name)
        print(f"{name:12} v{versions[-1].version}  fingerprint {versions[-1].fingerprint_hex}"
              f"  ({len(versions)} version{'s' if len(versions) > 1 else ''})")
    for p in problems:
        print(f"PROBLEM: {p}", file=sys.stderr)
    return 1 if problems else 0


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    from udfs.core.capacity import load_assumptions, plan, render

    try:
        figures = plan(load_assumptions(args.assumptions))
    except (OSError, ValueError) as exc:
        print(f"crawl plan: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({f.name: {"value": f.value, "unit": f.unit} for f in figures},
                         indent=2))
    else:
        print(render(figures))
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from crawler.simulate import FAULTS, SimConfig, main_line

    faults = FAULTS if args.faults == "all" else tuple(
        f for f in args.faults.split(",") if f and f != "none")
    unknown = set(faults) - set(FAULTS)
    if unknown:
        print(f"crawl simulate: unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}",
              file=sys.stderr)
        return 2
    line = main_line(SimConfig(hosts=args.hosts, fetches=args.fetches, seed=args.seed,
                               faults=faults))
    print(line)
    import json

    result = json.loads(line)
    ok = result["violations"] == 0 and result["lost_urls"] == 0 and \
        result["double_completions"] == 0
    return 0 if ok else 1


def _cmd_seed(args: argparse.Namespace) -> int:
    from crawler.run import publish_seeds

    cfg = load_config(args.config, overrides=args.set)
    urls = list(args.urls)
    if args.file:
        urls += open(args.file, encoding="utf-8").read().splitlines()
    if not urls:
        print("crawl seed: give URLs or --file", file=sys.stderr)
        return 2
    sent, bad = publish_seeds(cfg, urls)
    print(f"seeded {sent} URLs to {cfg.topic('discovered')}")
    for raw in bad:
        print(f"not an http(s) URL, skipped: {raw}", file=sys.stderr)
    return 0 if sent else 1


def _cmd_run(args: argparse.Namespace) -> int:
    from crawler.run import run

    return run(args.config, args.set, args.seeds, args.max_pages, args.duration, args.sites,
               args.state_dir)


BUILD_HELP = ("run another build of the code: a directory with jobs/, udfs/ and schemas/ "
              "(default: this checkout)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crawl", description=_DESCRIPTION, epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", default=[], metavar="FILE",
                        help="YAML file overriding defaults (repeatable; later files win)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one key, e.g. --set kafka.bootstrap_servers=h:9092")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("local", help="start, stop or inspect the local Kafka broker and S3 server",
                       description="A single-node KRaft Kafka broker and a SeaweedFS S3 server on "
                       "loopback, for development and tests. `up` downloads what it needs once, "
                       "formats Kafka's storage on first start, waits until both are ready, and "
                       "creates the topics and the bucket; running it again starts nothing new. "
                       "`down` stops only the processes `up` started (by PID file). "
                       "`status` exits 0 when both run, 3 otherwise.")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--state-dir", metavar="DIR",
                   help="folder for data, logs and PID files (default: local.state_dir)")
    p.set_defaults(func=_cmd_local)

    p = sub.add_parser("cluster", help="start, stop or inspect a local Flink session cluster",
                       description="A standalone Flink session cluster (one JobManager, "
                       "cluster.taskmanagers TaskManagers) on 127.0.0.1, from the apache-flink "
                       "pip distribution, for the recovery procedures and their tests. State, "
                       "logs, savepoints and PID files under <local.state_dir>/cluster. "
                       "`status` exits 0 when the JobManager runs, 3 otherwise.")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--taskmanagers", type=int, metavar="N",
                   help="TaskManagers to start (default: cluster.taskmanagers)")
    p.set_defaults(func=_cmd_cluster)

    jobs = ["frontier", "fetcher"]
    p = sub.add_parser("submit", help="submit a job to the session cluster (flink run -d)",
                       description="Run jobs/<job>.py detached on the cluster at "
                       "cluster.rest_port (or FLINK_REST=host:port), with this command's "
                       "--config and --set passed to the job.")
    p.add_argument("job", choices=jobs)
    p.add_argument("--parallelism", type=int, metavar="N")
    p.add_argument("--from-savepoint", metavar="PATH", help="restore from this savepoint")
    p.add_argument("--build", type=Path, metavar="DIR", help=BUILD_HELP)
    p.set_defaults(func=_cmd_job)
    p = sub.add_parser("savepoint", help="take a savepoint of a running job (flink savepoint)",
                       description="Trigger a savepoint of the running job into "
                       "<local.state_dir>/cluster/savepoints and print its path.")
    p.add_argument("job", choices=jobs)
    p.set_defaults(func=_cmd_job)
    p = sub.add_parser("upgrade", help="stop a job with a savepoint and resubmit it from it",
                       description="flink stop --savepointPath, then flink run -s with the "
                       "current code and this command's --config/--set: the upgrade path.")
    p.add_argument("job", choices=jobs)
    p.add_argument("--build", type=Path, metavar="DIR", help=BUILD_HELP)
    p.set_defaults(func=_cmd_job)
    p = sub.add_parser("rescale", help="change a job's parallelism through a savepoint",
                       description="As `upgrade`, resubmitting with parallelism N (keyed "
                       "state is redistributed by key group; each host keeps one owner).")
    p.add_argument("job", choices=jobs)
    p.add_argument("parallelism", type=int)
    p.set_defaults(func=_cmd_job)

    p = sub.add_parser("deps", help="download the Kafka broker and the Flink Kafka connector jar",
                       description="Fetch org.apache.kafka:kafka_2.13 with its runtime "
                       "dependencies and the shaded flink-sql-connector-kafka jar from Maven "
                       "Central into the cache folder (CRAWL_CACHE_DIR, default .cache). "
                       "Idempotent.")
    p.set_defaults(func=_cmd_deps)

    p = sub.add_parser("topics", help="create the configured topics, or list the broker's topics",
                       description="`create` makes every topic of the `topics` section that is "
                       "missing, with its partitions and retention; `list` shows the topics.")
    p.add_argument("action", choices=["create", "list"])
    p.set_defaults(func=_cmd_topics)

    p = sub.add_parser("config", help="print the effective configuration, or check it",
                       description="`show` prints the configuration after every override; "
                       "`check` only validates it (exit 2 with the key on error).")
    p.add_argument("action", choices=["show", "check"])
    p.set_defaults(func=_cmd_config)

    p = sub.add_parser("seed", help="publish seed URLs to the discovered topic",
                       description="Normalize the URLs and send them to crawl.discovered, one "
                       "record per host, keyed by host_key. Inputs that are not http(s) URLs "
                       "are reported and skipped.")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--file", metavar="F", help="a file of URLs, one per line (# comments)")
    p.set_defaults(func=_cmd_seed)

    p = sub.add_parser("run", help="run a crawl locally: stack, both jobs, seeds, progress",
                       description="Starts the local stack (if needed), the frontier and "
                       "fetcher jobs (local MiniClusters), publishes the seeds and shows "
                       "progress until --max-pages or --duration or Ctrl-C, then stops "
                       "everything it started and prints a summary and where the output is. "
                       "Without --seeds it crawls the bundled synthetic web on 127.0.0.1 "
                       "(loopback is allowed for that run only).")
    p.add_argument("--seeds", metavar="F", help="file of seed URLs (default: synthetic web)")
    p.add_argument("--max-pages", type=int, default=200, help="stop after this many pages")
    p.add_argument("--duration", type=float, default=600.0, metavar="SECONDS",
                   help="stop after this long (default 600)")
    p.add_argument("--sites", type=int, default=8, help="synthetic web sites (default 8)")
    p.add_argument("--state-dir", metavar="DIR", help="local stack folder")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("plan", help="print the capacity model derived from assumptions",
                       description="The design's arithmetic from a YAML of assumptions "
                       "(defaults: udfs/capacity-assumptions.yaml): fetch rates, revisits per "
                       "day, ingress, URL state, Bloom filter size, fingerprint collisions, "
                       "back queues, connections in flight (Little's law), fetcher and parser "
                       "slots.")
    p.add_argument("--assumptions", metavar="FILE",
                   help="YAML overriding some assumptions (unknown keys are refused)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser("simulate", help="run the deterministic scheduling simulation",
                       description="The frontier core against a synthetic web on a virtual "
                       "clock, with injected faults; prints one JSON line (fetches, "
                       "violations, lost_urls, double_completions, eligibility lag). The same "
                       "seed gives the same line. Exit 1 if any invariant is broken.")
    p.add_argument("--hosts", type=int, default=1000, help="number of hosts (default 1000)")
    p.add_argument("--fetches", type=int, default=100_000,
                   help="stop after this many requests (default 100000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--faults", default="all", metavar="LIST",
                   help="comma-separated faults, 'all' (default) or 'none': lost_completion, "
                   "duplicate_completion, lease_expiry, robots_5xx, crash")
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("schemas", help="check the Avro schemas' compatibility and version lock",
                       description="Every schema's newest version must read data written with "
                       "each earlier version, and published versions must be unchanged "
                       "(schemas/fingerprints.lock).")
    p.set_defaults(func=_cmd_schemas)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"crawl: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a clear one-line error for the known failure types
        from crawler.deps import DependencyError
        from crawler.local import StackError

        if isinstance(exc, (StackError, DependencyError)):
            print(f"crawl: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
