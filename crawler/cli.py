"""`crawl`: the one command of the crawler. Run `crawl --help` or `crawl <command> --help`."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from udfs.config import ENV_CONFIG_FILE, Config, ConfigError, load_config

if TYPE_CHECKING:
    from crawler.runs import RunInfo

_DESCRIPTION = """\
A polite, recoverable web crawler on Apache Flink and Kafka.

Configuration: every default is in udfs/config/crawler-default.yaml. Override with
--config FILE (or CRAWL_CONFIG=FILE), CRAWL__SECTION__KEY=value environment
variables, and --set section.key=value flags, in that order. --config and --set
go before or after the command; every process a command starts gets them too.

A bad argument, file or value stops the command before anything starts: one line
on stderr naming it, exit status 2.
"""

_EPILOG = """\
examples:
  crawl local up                 start Kafka and S3 on loopback, create the topics
  crawl local status             what runs where
  crawl local down               stop what `local up` started
  crawl config show --set flink.parallelism=4
  crawl run --max-pages 100      crawl the bundled synthetic web, with progress
  crawl run --seeds my-seeds.txt --sitemaps my-sitemaps.txt
  crawl seed https://example.com/ --set kafka.bootstrap_servers=broker:9092
  crawl seed --sitemap https://example.com/sitemap.xml
  crawl audit https://example.com/ --days 7   what happened to this URL
  crawl warc get https://example.com/         the newest WARC record of this URL
  crawl reparse --dry-run --set parse.max_links=10000   what a reparse would send
  crawl schemas                  schema compatibility and the published-version lock
  crawl cluster up               a Flink session cluster on loopback
  crawl submit frontier          run a job on it; then savepoint / upgrade / rescale it
"""


# -- input validation --------------------------------------------------------------------
# The project's rule: a bad command-line argument is one line and exit 2, before anything
# starts. Each check returns that line (without the "crawl <command>: " prefix) or None;
# each command's `check` runs them in order and main() runs it before the command.


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _first(problems: Iterable[str | None]) -> str | None:
    """The first problem of a lazily evaluated sequence of checks."""
    return next((p for p in problems if p), None)


def _label(flag: str, value: object) -> str:
    return f"{flag}{value}" if flag.endswith("=") else f"{flag} {value}"


def check_file(flag: str, path: str | os.PathLike[str] | None) -> str | None:
    """A file that must exist and be readable."""
    if path is None:
        return None
    try:
        with open(path, "rb"):
            return None
    except FileNotFoundError:
        why = "no such file"
    except IsADirectoryError:
        why = "is a directory, not a file"
    except PermissionError:
        why = "not readable (permission denied)"
    except OSError as exc:
        why = _one_line(exc.strerror or str(exc)).lower()
    return f"{_label(flag, path)}: {why}"


def check_url(flag: str, raw: str) -> str | None:
    from udfs.core.urls import normalize_url

    return None if normalize_url(raw) else f"{_label(flag, raw)}: not an http(s) URL"


def check_url_file(flag: str, path: str | None) -> str | None:
    """A readable UTF-8 file of URLs, one per line, with at least one http(s) URL (the
    lines that are not are reported and skipped when it is used)."""
    from crawler.run import url_lines
    from udfs.core.urls import normalize_url

    if path is None:
        return None
    problem = check_file(flag, path)
    if problem:
        return problem
    try:
        lines = url_lines(path)
    except UnicodeDecodeError:
        return f"{_label(flag, path)}: not UTF-8 text"
    if not any(normalize_url(line) for line in lines):
        return f"{_label(flag, path)}: no http(s) URL in it (one URL per line, # comments)"
    return None


def check_at_least(flag: str, value: int | None, lo: int) -> str | None:
    if value is None or value >= lo:
        return None
    return f"{_label(flag, value)}: must be at least {lo}"


def check_seconds(flag: str, value: float | None) -> str | None:
    if value is None or (math.isfinite(value) and value > 0):
        return None
    return f"{_label(flag, f'{value:g}')}: must be a positive number of seconds"


def check_state_dir(flag: str, path: str | None) -> str | None:
    """A folder that may not exist yet (it is created), but is not a file."""
    if path is None or not Path(path).exists() or Path(path).is_dir():
        return None
    return f"{_label(flag, path)}: not a directory"


def check_build(flag: str, path: Path | None, job: str) -> str | None:
    """Another build of the code: a folder with jobs/<job>.py, udfs/ and schemas/."""
    if path is None:
        return None
    if not path.is_dir():
        return f"{_label(flag, path)}: no such directory"
    missing = [f"{d}/" for d in ("jobs", "udfs", "schemas") if not (path / d).is_dir()]
    if missing:
        return (f"{_label(flag, path)}: lacks {', '.join(missing)} "
                "(a build holds jobs/, udfs/ and schemas/)")
    if not (path / "jobs" / f"{job}.py").is_file():
        return f"{_label(flag, path)}: no jobs/{job}.py"
    return None


def check_savepoint(flag: str, path: str | None) -> str | None:
    # Only a local path of our own cluster can be checked here: a cluster named by
    # FLINK_REST reads its own file system, and s3:// is read by the cluster.
    if path is None or os.environ.get("FLINK_REST"):
        return None
    parts = urlsplit(path)
    if parts.scheme not in ("", "file"):
        return None
    local = Path(parts.path if parts.scheme else path)
    return None if local.exists() else f"{_label(flag, path)}: no such savepoint"


def _parse_faults(text: str) -> tuple[str, ...]:
    from crawler.testkit.simulate import FAULTS

    return FAULTS if text == "all" else tuple(
        f for f in text.split(",") if f and f != "none")


def check_faults(flag: str, text: str) -> str | None:
    from crawler.testkit.simulate import FAULTS

    unknown = set(_parse_faults(text)) - set(FAULTS)
    if not unknown:
        return None
    return f"{_label(flag, text)}: unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}"


def check_assumptions(flag: str, path: str | None) -> str | None:
    import yaml

    from udfs.core.capacity import load_assumptions

    if path is None:
        return None
    problem = check_file(flag, path)
    if problem:
        return problem
    try:
        load_assumptions(path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        what = _one_line(getattr(exc, "problem", None) or str(exc))
        return f"{_label(flag, path)}: not valid YAML: {what}{where}"
    except (OSError, ValueError) as exc:
        # load_assumptions names the file itself in some messages.
        message = _one_line(str(exc)).removeprefix(f"{path}: ")
        return f"{_label(flag, path)}: {message}"
    return None


def _derived_overrides(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(override, flag): the keys a command's own flags set, which must pass the key's
    rules too (submit and rescale hand `flink.parallelism=N` to the job)."""
    if args.command in ("submit", "rescale") and args.parallelism:
        flag = "--parallelism" if args.command == "submit" else "parallelism"
        return [(f"flink.parallelism={args.parallelism}", _label(flag, args.parallelism))]
    if args.command == "cluster" and args.taskmanagers:
        return [(f"cluster.taskmanagers={args.taskmanagers}",
                 _label("--taskmanagers", args.taskmanagers))]
    return []


def check_config(args: argparse.Namespace) -> str | None:
    """CRAWL_CONFIG, the --config files, CRAWL__ variables and --set: every command."""
    env_file = os.environ.get(ENV_CONFIG_FILE)
    problem = _first([check_file(f"{ENV_CONFIG_FILE}=", env_file) if env_file else None,
                      *(check_file("--config", f) for f in args.config)])
    if problem:
        return problem
    try:
        load_config(args.config, overrides=args.set)
    except ConfigError as exc:
        return f"configuration error: {_one_line(str(exc))}"
    for override, flag in _derived_overrides(args):
        try:
            load_config(args.config, overrides=[*args.set, override])
        except ConfigError as exc:
            return f"{flag}: {_one_line(str(exc)).replace(f' (from --set {override})', '')}"
    return None


def _check_nothing(args: argparse.Namespace) -> str | None:
    return None


def _check_local(args: argparse.Namespace) -> str | None:
    return check_state_dir("--state-dir", args.state_dir)


def _check_cluster(args: argparse.Namespace) -> str | None:
    return check_at_least("--taskmanagers", args.taskmanagers, 1)


def _check_job(args: argparse.Namespace) -> str | None:
    """submit / savepoint / upgrade / rescale."""
    flag = "--parallelism" if args.command == "submit" else "parallelism"
    return (check_at_least(flag, getattr(args, "parallelism", None), 1)
            or check_savepoint("--from-savepoint", getattr(args, "from_savepoint", None))
            or check_build("--build", getattr(args, "build", None), args.job))


def _check_seed(args: argparse.Namespace) -> str | None:
    if not (args.urls or args.file or args.sitemap):
        return "give URLs, --file F or --sitemap URL"
    return (_first(check_url("URL", u) for u in args.urls)
            or _first(check_url("--sitemap", u) for u in args.sitemap)
            or check_url_file("--file", args.file))


def _check_run(args: argparse.Namespace) -> str | None:
    return (check_url_file("--seeds", args.seeds)
            or check_url_file("--sitemaps", args.sitemaps)
            or check_at_least("--max-pages", args.max_pages, 1)
            or check_seconds("--duration", args.duration)
            or check_at_least("--sites", args.sites, 1)
            or check_state_dir("--state-dir", args.state_dir))


def _check_audit(args: argparse.Namespace) -> str | None:
    # --days lists one storage prefix a day: past ten years, read everything (no --days).
    if args.days is not None and args.days > 3660:
        return f"--days {args.days}: must be at most 3660 (leave it out to read every day)"
    return check_url("URL", args.url) or check_at_least("--days", args.days, 1)


def _check_host(args: argparse.Namespace) -> str | None:
    from crawler.control import host_key_of
    from udfs.config import ConfigError, host_policy_settings

    if host_key_of(args.host) is None:
        return f"HOST_KEY {args.host!r}: give the host as scheme://host[:port]"
    if args.action != "set" and args.settings:
        return f"{args.action} takes no settings (got {' '.join(args.settings)})"
    if args.action == "set":
        if not args.settings:
            return "set needs at least one politeness.KEY=VALUE"
        bad = [s for s in args.settings if "=" not in s]
        if bad:
            return f"{bad[0]!r}: settings look like politeness.min_gap_s=3"
        try:
            host_policy_settings(dict(s.split("=", 1) for s in args.settings),
                                 "the command line")
        except ConfigError as exc:
            return str(exc)
    return check_at_least("--timeout", args.timeout, 1)


def _check_warc(args: argparse.Namespace) -> str | None:
    if args.action == "get":
        if args.url is None:
            return "get needs a URL"
        return check_url("URL", args.url)
    if args.url is not None:
        return f"{args.action} takes no URL (got {args.url})"
    if args.raw:
        return f"--raw is for get, not {args.action}"
    return None


def _crawl_config(args: argparse.Namespace) -> tuple[Config, RunInfo | None] | None:
    """The configuration of the crawl a command acts on (--config, --set, --run: the
    running one by default) and its run, or None once the reason is printed."""
    from crawler.runs import RunNotFound, crawl_config

    try:
        return crawl_config(args.config, args.set, args.run)
    except RunNotFound as exc:
        print(f"crawl {args.command}: {exc}", file=sys.stderr)
        return None


def _cmd_warc(args: argparse.Namespace) -> int:
    """The WARC files of the crawl's store: list them, print a URL's record, verify."""
    from crawler import warc_tool
    from udfs.core.urls import UrlPolicy, normalize_url
    from udfs.storage.bodies import open_store

    found = _crawl_config(args)
    if found is None:
        return 2
    cfg, _run = found
    store, prefix = open_store(cfg), cfg["warc.prefix"]
    where = f"s3://{cfg['s3.bucket']}/{prefix}" if cfg["storage.backend"] == "s3" else \
        os.path.join(cfg["storage.local_dir"], prefix)
    try:
        if args.action == "recover":
            from udfs.storage.warc_writer import recovering_writer

            keys = recovering_writer(cfg, store).recover()
            for key in keys:
                print(key)
            print(f"{len(keys)} file{'s' if len(keys) != 1 else ''} left by fetchers that "
                  f"stopped published to {where}")
            return 0
        if args.action == "ls":
            files = warc_tool.list_files(store, prefix)
            if args.json:
                print(warc_tool.ls_json(files))
                return 0
            for f in files:
                indexed = "no index" if f.indexed is None else f"{f.indexed} indexed records"
                print(f"{f.key}  {f.size} bytes  {indexed}")
            print(f"{len(files)} file{'s' if len(files) != 1 else ''} in {where}, "
                  f"{sum(f.size for f in files)} bytes")
            return 0
        if args.action == "get":
            url = normalize_url(args.url,
                                policy=UrlPolicy.from_names(cfg["urls.drop_query_params"]))
            found = warc_tool.newest(store, prefix, url or args.url)
            if found is None:
                print(f"crawl warc: no record of {url} in {where}", file=sys.stderr)
                return 1
            f, _ts, data = found
            member = warc_tool.read_entry(store, f, data)
            if args.raw:
                from udfs.storage.warc import decode_member

                sys.stdout.buffer.write(decode_member(member))
            else:
                print(f"# {f.key} offset {data['offset']} length {data['length']}")
                print(warc_tool.render_record(member))
            return 0
        verdict = warc_tool.verify(store, prefix)
    except Exception as exc:  # storage unreachable, no bucket, no permission: one line
        print(f"crawl warc: cannot read {where}: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    for problem in verdict.problems:
        print(problem)
    print(f"{verdict.files} files, {verdict.records} records, {verdict.index_lines} index "
          f"lines in {where}: {'OK' if not verdict.problems else 'PROBLEMS'}")
    return 0 if not verdict.problems else 1


def _check_reparse(args: argparse.Namespace) -> str | None:
    for flag, value in (("--since", args.since), ("--until", args.until)):
        if value is not None and (not value.isdigit() or not 4 <= len(value) <= 14
                                  or len(value) % 2):
            return f"{flag} {value!r}: give a UTC time as YYYY[MM[DD[hh[mm[ss]]]]]"
    if args.since and args.until and args.since.ljust(14, "0") > args.until.ljust(14, "9"):
        return f"--since {args.since} is after --until {args.until}"
    bad = next((f for f in args.file if "/" in f or not f.endswith(".warc.gz")), None)
    if bad is not None:
        return f"--file {bad!r}: give a WARC file's name as `crawl warc ls` shows it, " \
            "without its folder (NAME.warc.gz)"
    return None


def _cmd_reparse(args: argparse.Namespace) -> int:
    """Parse the crawl's stored pages again; their links to the discovered topic."""
    from crawler.reparse import kafka_sender, reparse
    from udfs.storage.bodies import open_store

    found = _crawl_config(args)
    if found is None:
        return 2
    cfg, _run = found
    store = open_store(cfg)
    send, close = (None, None) if args.dry_run else kafka_sender(cfg)
    try:
        report = reparse(cfg, store, send, since=args.since, until=args.until,
                         files=args.file)
        if close is not None:
            close()
    except FileNotFoundError as exc:
        print(f"crawl reparse: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # storage or Kafka unreachable: one line
        print(f"crawl reparse: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    if args.dry_run or args.list:
        for url, links, cut in report.pages:
            print(f"{url}  {links} links{' (cut at parse.max_links)' if cut else ''}")
    print(report.summary(args.dry_run, cfg.topic("discovered")))
    return 0


def _check_url_show(args: argparse.Namespace) -> str | None:
    return check_url("URL", args.url) or check_at_least("--timeout", args.timeout, 1)


def _control(args: argparse.Namespace, host_key: str, command: str, **kw) -> int:
    """Send one command to the running crawl's frontier and print its reply."""
    import json

    from crawler.control import NoReply, send_command

    found = _crawl_config(args)
    if found is None:
        return 2
    cfg, run = found
    try:
        reply = send_command(cfg, host_key, command, timeout_s=args.timeout, **kw)
    except NoReply as exc:
        print(f"crawl {args.command}: {exc}", file=sys.stderr)
        return 1
    if not reply["ok"]:
        print(f"crawl {args.command}: refused by the frontier: {reply['error']}",
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**reply, "run_id": run.run_id if run else None}, default=str))
    else:
        args.render(reply)
    return 0


def _cmd_host(args: argparse.Namespace) -> int:
    from crawler.control import host_key_of, render_host

    host_key = host_key_of(args.host)
    assert host_key is not None  # validated

    def render(reply: dict) -> None:
        if args.action != "show":
            done = "done" if reply["applied"] else "applied already (a record seen twice)"
            kept = "kept in a checkpoint" if reply.get("durable") else (
                f"not in a checkpoint within {args.timeout:.0f} s: a restore before the "
                "next one replays it from the control topic")
            print(f"{args.action} {host_key}: {done}; {kept}")
        print(render_host(reply["detail"]))

    args.render = render
    settings = dict(s.split("=", 1) for s in args.settings) if args.action == "set" else None
    return _control(args, host_key, args.action.upper(), settings=settings,
                    durable=args.action != "show")


def _cmd_url(args: argparse.Namespace) -> int:
    from crawler.control import host_key_of, render_url
    from udfs.core.urls import UrlPolicy, normalize_url

    cfg = load_config(args.config, overrides=args.set)
    url = normalize_url(args.url, policy=UrlPolicy.from_names(cfg["urls.drop_query_params"]))
    host_key = host_key_of(url or args.url)
    assert url is not None and host_key is not None  # validated
    args.render = lambda reply: print(render_url(reply["detail"]))
    return _control(args, host_key, "SHOW_URL", url=url)


def _check_status(args: argparse.Namespace) -> str | None:
    if math.isfinite(args.interval) and 0 <= args.interval <= 60:
        return None
    return (f"--interval {args.interval:g}: must be 0 to 60 seconds "
            "(0: one scrape, totals only)")


def _cmd_status(args: argparse.Namespace) -> int:
    import json

    from crawler.runs import RunNotFound, crawl_config
    from crawler.status import collect, find_target, render

    try:
        cfg, run = crawl_config(args.config, args.set, args.run)
    except RunNotFound as exc:
        print(f"crawl status: nothing is running: {exc}", file=sys.stderr)
        return 1
    target, looked = find_target(cfg, run)
    if target is None:
        print(f"crawl status: nothing is running: {looked}", file=sys.stderr)
        return 1
    status = collect(target, interval_s=args.interval, hosts=not args.no_hosts)
    print(json.dumps(status, default=str) if args.json else render(status), flush=True)
    return 0


def _check_plan(args: argparse.Namespace) -> str | None:
    return check_assumptions("--assumptions", args.assumptions)


def _check_simulate(args: argparse.Namespace) -> str | None:
    return (check_at_least("--hosts", args.hosts, 1)
            or check_at_least("--fetches", args.fetches, 1)
            or check_faults("--faults", args.faults))


def validate(args: argparse.Namespace) -> str | None:
    """The first problem with the parsed arguments of a command, or None: its own
    arguments, then the configuration every command reads."""
    check: Callable[[argparse.Namespace], str | None] = getattr(args, "check", _check_nothing)
    return check(args) or check_config(args)


def _cmd_local(args: argparse.Namespace) -> int:
    from crawler.stack.local import LocalStack

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
    from crawler.stack.cluster import Cluster

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
    from crawler.stack.cluster import Cluster

    cfg = load_config(args.config, overrides=args.set)
    cluster = Cluster(cfg)
    # Absolute paths: the flink client runs the job's script, not from our folder.
    job_args = [a for f in args.config for a in ("--config", str(Path(f).resolve()))] + \
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
    from crawler.stack import deps

    cfg = load_config(args.config, overrides=args.set)
    print(f"cache folder: {deps.cache_dir()}")
    print(f"kafka broker: {deps.ensure_kafka(cfg['local.kafka_version'])}")
    print(f"kafka connector: {deps.ensure_connector(cfg['flink.kafka_connector_version'])}")
    return 0


def _cmd_topics(args: argparse.Namespace) -> int:
    from crawler.stack.local import ensure_topics, topic_partitions

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
    from udfs.wire.avro import check_lock, check_registry, registry

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

    figures = plan(load_assumptions(args.assumptions))  # checked by check_assumptions
    if args.json:
        print(json.dumps({f.name: {"value": f.value, "unit": f.unit} for f in figures},
                         indent=2))
    else:
        print(render(figures))
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from crawler.testkit.simulate import SimConfig, main_line

    line = main_line(SimConfig(hosts=args.hosts, fetches=args.fetches, seed=args.seed,
                               faults=_parse_faults(args.faults)))
    print(line)
    import json

    result = json.loads(line)
    ok = result["violations"] == 0 and result["lost_urls"] == 0 and \
        result["double_completions"] == 0
    return 0 if ok else 1


def _cmd_seed(args: argparse.Namespace) -> int:
    from crawler.run import publish_seeds, url_lines

    cfg = load_config(args.config, overrides=args.set)
    urls = list(args.urls) + (url_lines(args.file) if args.file else [])
    sent, bad = publish_seeds(cfg, urls)
    sent_maps, _ = publish_seeds(cfg, args.sitemap, source="SEED_SITEMAP")  # all checked
    print(f"seeded {sent} URLs" + (f" and {sent_maps} sitemaps" if args.sitemap else "")
          + f" to {cfg.topic('discovered')}")
    for raw in bad:  # lines of --file (arguments were checked)
        print(f"not an http(s) URL, skipped: {raw}", file=sys.stderr)
    return 0 if sent or sent_maps else 1


def _cmd_audit(args: argparse.Namespace) -> int:
    """A URL's fetch history from the audit trail in object storage (never from Kafka)."""
    import json
    import time

    from udfs.core.audit import PREFIX, day_prefixes, describe, history
    from udfs.core.urls import UrlPolicy, normalize_url
    from udfs.storage.bodies import open_store

    cfg = load_config(args.config, overrides=args.set)
    # The URL as the frontier leased it: normalized with the configured drop list.
    url = normalize_url(args.url, policy=UrlPolicy.from_names(cfg["urls.drop_query_params"]))
    store = open_store(cfg)
    prefixes = day_prefixes(time.time(), args.days) if args.days else [PREFIX]
    try:
        found = history((store.get_object(k) for p in prefixes for k in store.list_objects(p)),
                        url)
    except Exception as exc:  # storage unreachable, no bucket, no permission: one line
        where = f"s3://{cfg['s3.bucket']}" if cfg["storage.backend"] == "s3" else \
            cfg["storage.local_dir"]
        print(f"crawl audit: cannot read the audit trail in {where}: "
              f"{_one_line(str(exc))}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"url": url, "fetches": found}, indent=1))
    else:
        since = "" if not args.days else " in the last day" if args.days == 1 else \
            f" in the last {args.days} days"
        print(f"{url}: {len(found)} fetch{'es' if len(found) != 1 else ''} recorded{since}")
        for f in found:
            print("  " + describe(f))
    return 0 if found else 1


def _cmd_run(args: argparse.Namespace) -> int:
    from crawler.run import run

    return run(args.config, args.set, args.seeds, args.max_pages, args.duration, args.sites,
               args.state_dir, sitemaps_file=args.sitemaps)


BUILD_HELP = ("run another build of the code: a directory with jobs/, udfs/ and schemas/ "
              "(default: this checkout)")
_CONFIG_HELP = "YAML file overriding defaults (repeatable; later files win)"
_SET_HELP = "override one key, e.g. --set kafka.bootstrap_servers=h:9092"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crawl", description=_DESCRIPTION, epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", default=[], metavar="FILE",
                        help=_CONFIG_HELP)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=_SET_HELP)
    # The same two after the command (`crawl run --set k=v`), in their own dests so
    # they add to those before it instead of replacing them; parse_args() merges them.
    after = argparse.ArgumentParser(add_help=False)
    after.add_argument("--config", action="append", dest="config_after",
                       default=argparse.SUPPRESS, metavar="FILE", help=_CONFIG_HELP)
    after.add_argument("--set", action="append", dest="set_after",
                       default=argparse.SUPPRESS, metavar="KEY=VALUE", help=_SET_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, **kw) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[after], **kw)

    p = command("local", help="start, stop or inspect the local Kafka broker and S3 server",
                description="A single-node KRaft Kafka broker and a SeaweedFS S3 server on "
                "loopback, for development and tests. `up` downloads what it needs once, "
                "formats Kafka's storage on first start, waits until both are ready, and "
                "creates the topics and the bucket; running it again starts nothing new. "
                "`down` stops only the processes `up` started (by PID file). "
                "`status` exits 0 when both run, 3 otherwise.")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--state-dir", metavar="DIR",
                   help="folder for data, logs and PID files (default: local.state_dir)")
    p.set_defaults(func=_cmd_local, check=_check_local)

    p = command("cluster", help="start, stop or inspect a local Flink session cluster",
                description="A standalone Flink session cluster (one JobManager, "
                "cluster.taskmanagers TaskManagers) on 127.0.0.1, from the apache-flink "
                "pip distribution, for the recovery procedures and their tests. State, "
                "logs, savepoints and PID files under <local.state_dir>/cluster. "
                "`status` exits 0 when the JobManager runs, 3 otherwise.")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--taskmanagers", type=int, metavar="N",
                   help="TaskManagers to start (default: cluster.taskmanagers)")
    p.set_defaults(func=_cmd_cluster, check=_check_cluster)

    jobs = ["frontier", "fetcher"]
    p = command("submit", help="submit a job to the session cluster (flink run -d)",
                description="Run jobs/<job>.py detached on the cluster at "
                "cluster.rest_port (or FLINK_REST=host:port), with this command's "
                "--config and --set passed to the job.")
    p.add_argument("job", choices=jobs)
    p.add_argument("--parallelism", type=int, metavar="N")
    p.add_argument("--from-savepoint", metavar="PATH", help="restore from this savepoint")
    p.add_argument("--build", type=Path, metavar="DIR", help=BUILD_HELP)
    p.set_defaults(func=_cmd_job, check=_check_job)
    p = command("savepoint", help="take a savepoint of a running job (flink savepoint)",
                description="Trigger a savepoint of the running job into "
                "<local.state_dir>/cluster/savepoints and print its path.")
    p.add_argument("job", choices=jobs)
    p.set_defaults(func=_cmd_job, check=_check_job)
    p = command("upgrade", help="stop a job with a savepoint and resubmit it from it",
                description="flink stop --savepointPath, then flink run -s with the "
                "current code and this command's --config/--set: the upgrade path.")
    p.add_argument("job", choices=jobs)
    p.add_argument("--build", type=Path, metavar="DIR", help=BUILD_HELP)
    p.set_defaults(func=_cmd_job, check=_check_job)
    p = command("rescale", help="change a job's parallelism through a savepoint",
                description="As `upgrade`, resubmitting with parallelism N (keyed "
                "state is redistributed by key group; each host keeps one owner).")
    p.add_argument("job", choices=jobs)
    p.add_argument("parallelism", type=int)
    p.set_defaults(func=_cmd_job, check=_check_job)

    p = command("deps", help="download the Kafka broker and the Flink Kafka connector jar",
                description="Fetch org.apache.kafka:kafka_2.13 with its runtime "
                "dependencies and the shaded flink-sql-connector-kafka jar from Maven "
                "Central into the cache folder (CRAWL_CACHE_DIR, default .cache). "
                "Idempotent.")
    p.set_defaults(func=_cmd_deps)

    p = command("topics", help="create the configured topics, or list the broker's topics",
                description="`create` makes every topic of the `topics` section that is "
                "missing, with its partitions and retention; `list` shows the topics.")
    p.add_argument("action", choices=["create", "list"])
    p.set_defaults(func=_cmd_topics)

    p = command("config", help="print the effective configuration, or check it",
                description="`show` prints the configuration after every override; "
                "`check` only validates it (exit 2 with the key on error).")
    p.add_argument("action", choices=["show", "check"])
    p.set_defaults(func=_cmd_config)

    p = command("seed", help="publish seed URLs and sitemaps to the discovered topic",
                description="Normalize the URLs and send them to crawl.discovered, one "
                "record per host, keyed by host_key: pages with source SEED, sitemaps "
                "(--sitemap) with source SEED_SITEMAP (the frontier reads them as "
                "sitemaps and seeds their entries). An argument that is not an http(s) "
                "URL stops the command (exit 2); such lines of --file are reported and "
                "skipped.")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--file", metavar="F", help="a file of URLs, one per line (# comments)")
    p.add_argument("--sitemap", action="append", default=[], metavar="URL",
                   help="a sitemap (or sitemap index) URL to read as seeds (repeatable)")
    p.set_defaults(func=_cmd_seed, check=_check_seed)

    p = command("run", help="run a crawl locally: stack, both jobs, seeds, progress",
                description="Starts the local stack (if needed), the frontier and "
                "fetcher jobs (local MiniClusters), publishes the seeds and shows "
                "progress until --max-pages or --duration or Ctrl-C, then stops "
                "everything it started and prints a summary and where the output is. "
                "Without --seeds or --sitemaps it crawls the bundled synthetic web on "
                "127.0.0.1 (loopback is allowed for that run only).")
    p.add_argument("--seeds", metavar="F", help="file of seed URLs, one per line "
                   "(default: synthetic web)")
    p.add_argument("--sitemaps", metavar="F", help="file of sitemap URLs, one per line, "
                   "read as seeds (source SEED_SITEMAP)")
    p.add_argument("--max-pages", type=int, default=500,
                   help="stop after this many pages (default 500)")
    p.add_argument("--duration", type=float, default=600.0, metavar="SECONDS",
                   help="stop after this long (default 600)")
    p.add_argument("--sites", type=int, default=8, help="synthetic web sites (default 8)")
    p.add_argument("--state-dir", metavar="DIR", help="local stack folder")
    p.set_defaults(func=_cmd_run, check=_check_run)

    p = command("audit", help="print a URL's fetch history from the audit trail",
                description="Every recorded fetch of URL (normalized as the frontier "
                "does), oldest first: time, kind, outcome, HTTP status, URL version, "
                "attempt, lease, duration, body object, validators, error. Read from the "
                "audit trail the frontier job writes to object storage (storage.backend), "
                "so it works after the completions topic has expired. A completion "
                "delivered more than once shows as one fetch with its delivery count. "
                "Exit 1 when no fetch is recorded.")
    p.add_argument("url", metavar="URL")
    p.add_argument("--json", action="store_true",
                   help="print {url, fetches: [audit records]} as JSON")
    p.add_argument("--days", type=int, metavar="N",
                   help="only the last N UTC days, today included (default: all)")
    p.set_defaults(func=_cmd_audit, check=_check_audit)

    run_help = ("the id of a running `crawl run` (run-<ID>.* topics); default: the newest "
                "one running, else the configured topics (the local cluster, a deployment)")
    def reply_options(p: argparse.ArgumentParser) -> None:
        """What every command to the running frontier takes."""
        p.add_argument("--run", metavar="ID", help=run_help)
        p.add_argument("--json", action="store_true", help="print the reply as JSON")
        p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                       help="wait this long for the frontier's reply (default 30)")

    p = command("host", help="show, pause, resume or re-pace one host of a running crawl",
                description="Commands to one host's owner in the frontier job, through "
                "the control topic; applied in the host's keyed state between two of its "
                "scheduling decisions, kept across restarts and savepoints, answered on "
                "the replies topic. `show`: robots.txt, policy and its version, pace, "
                "backoff, leases in flight, URLs by state, budget, last outcomes. `pause`: "
                "no new lease (leases already out, at most in-flight + look-ahead, finish "
                "within seconds). `resume`. `set HOST politeness.KEY=VALUE ...`: this "
                "host's policy only (keys of the politeness section, checked like the "
                "configuration), a new policy version. `reset`: the configured policy, "
                "not paused.")
    p.add_argument("action", choices=["show", "pause", "resume", "set", "reset"])
    p.add_argument("host", metavar="HOST_KEY", help="scheme://host[:port]")
    p.add_argument("settings", nargs="*", metavar="politeness.KEY=VALUE")
    reply_options(p)
    p.set_defaults(func=_cmd_host, check=_check_host)

    p = command("url", help="show one URL's state in a running crawl, and why it waits",
                description="Asks the URL's host owner in the frontier job: status, "
                "version, next fetch, interval, priority and queue score, failures, "
                "duplicate flag, and the first reason it is not being fetched now "
                "(leased, host paused, not due, robots.txt, backoff, budget, politeness, "
                "other URLs ahead).")
    p.add_argument("action", choices=["show"])
    p.add_argument("url", metavar="URL")
    reply_options(p)
    p.set_defaults(func=_cmd_url, check=_check_url_show)

    p = command("warc", help="list, read and verify the WARC files of a crawl",
                description="The WARC files the fetcher publishes (warc.* settings) in the "
                "crawl's store (storage.backend; with --run, that crawl's settings). `ls`: "
                "each file, its size and the records its CDXJ index lists. `get URL`: the "
                "newest response or revisit record of URL (normalized as the frontier "
                "does): WARC headers, HTTP headers and payload, or --raw the record as "
                "stored (uncompressed WARC). `verify`: warcio's check of every file "
                "(digests, structure) and that each CDXJ line points at a record with "
                "that URL and digest, every response and revisit record has a line, and no "
                "record id is found twice; exit 1 on a problem. `get` exits 1 when the URL "
                "has no record. `recover`: publish the files that fetchers of this crawl "
                "which stopped without closing (kill -9, SIGTERM) left in warc.temp_dir "
                "on this machine, each cut after its last whole record (`crawl run` does "
                "it when it stops).")
    p.add_argument("action", choices=["ls", "get", "verify", "recover"])
    p.add_argument("url", metavar="URL", nargs="?", help="for get: the URL")
    p.add_argument("--raw", action="store_true", help="get: the record as stored")
    p.add_argument("--json", action="store_true", help="ls: print JSON")
    p.add_argument("--run", metavar="ID", help=run_help)
    p.set_defaults(func=_cmd_warc, check=_check_warc)

    p = command("reparse", help="parse a crawl's stored pages again; new links to the "
                "frontier", description="Reads the crawl's published WARC files (warc.* "
                "settings, the store of storage.backend; with --run, that crawl's "
                "settings) and never a site: each page's newest 200 response record (or "
                "identical-payload revisit) of an HTML type is parsed again with the "
                "configured settings (parse.max_links, urls.drop_query_params), and its "
                "links are sent to the discovered topic in records of the fetcher's shape (source "
                "LINK, depth from the record's Crawl-Depth + 1). The frontier keeps each "
                "URL once: links it knows change nothing, new ones are crawled. No "
                "completion is sent, so no index event is made again (README, `crawl "
                "reparse`). Prints what it read, parsed and sent; exit 1 if the store or "
                "Kafka cannot be reached.")
    p.add_argument("--run", metavar="ID", help=run_help)
    p.add_argument("--dry-run", action="store_true",
                   help="read and parse, send nothing; list each page and its links count")
    p.add_argument("--since", metavar="TIME",
                   help="only records fetched at or after this UTC time, YYYY[MM[DD[hh[mm[ss]]]]]")
    p.add_argument("--until", metavar="TIME",
                   help="only records fetched at or before this UTC time (the whole of it)")
    p.add_argument("--file", action="append", default=[], metavar="NAME",
                   help="only this WARC file (its name as `crawl warc ls` shows it; "
                   "repeatable)")
    p.add_argument("--list", action="store_true", help="list each page and its links count")
    p.set_defaults(func=_cmd_reparse, check=_check_reparse)

    p = command("status", help="one screen for a running crawl: jobs, checkpoints, rates, "
                "lag", description="Finds the running crawl (a `crawl run`, by --run or the "
                "newest; else the configured crawl on the Flink cluster at cluster.rest_port "
                "or FLINK_REST) and shows its jobs and their state, the last checkpoint and "
                "its age (Flink's REST API), fetches by outcome, index events, frontier "
                "events, eligibility lag p50/p99, the frontier's size, politeness breaches "
                "and dead letters (the jobs' Prometheus reporters, scraped twice --interval "
                "apart for rates), consumer lag per topic (Kafka offsets) and the busiest "
                "hosts (leases in the last minute). What a source cannot give shows as "
                "n/a. Exit 0 when a crawl is running, 1 when nothing is (one line saying "
                "where it looked).")
    p.add_argument("--run", metavar="ID", help=run_help)
    p.add_argument("--json", action="store_true", help="print the same data as JSON")
    p.add_argument("--interval", type=float, default=3.0, metavar="SECONDS",
                   help="seconds between the two scrapes rates come from (default 3; 0: "
                   "one scrape, totals only)")
    p.add_argument("--no-hosts", action="store_true",
                   help="skip reading the leases topic for the busiest hosts")
    p.set_defaults(func=_cmd_status, check=_check_status)

    p = command("plan", help="print the capacity model derived from assumptions",
                description="The design's arithmetic from a YAML of assumptions "
                "(defaults: udfs/capacity-assumptions.yaml): fetch rates, revisits per "
                "day, ingress, URL state, Bloom filter size, fingerprint collisions, "
                "back queues, connections in flight (Little's law), fetcher and parser "
                "slots.")
    p.add_argument("--assumptions", metavar="FILE",
                   help="YAML overriding some assumptions (unknown keys are refused)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_cmd_plan, check=_check_plan)

    p = command("simulate", help="run the deterministic scheduling simulation",
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
                   "duplicate_completion, duplicate_lease, lease_expiry, robots_5xx, crash "
                   "(of the frontier), fetcher_crash")
    p.set_defaults(func=_cmd_simulate, check=_check_simulate)

    p = command("schemas", help="check the Avro schemas' compatibility and version lock",
                description="Every schema's newest version must read data written with "
                "each earlier version, and published versions must be unchanged "
                "(schemas/fingerprints.lock).")
    p.set_defaults(func=_cmd_schemas)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed command line; --config and --set after the command come after (and win
    over) those before it."""
    args = build_parser().parse_args(argv)
    args.config = [*args.config, *vars(args).pop("config_after", [])]
    args.set = [*args.set, *vars(args).pop("set_after", [])]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    problem = validate(args)
    if problem:
        print(f"crawl {args.command}: {problem}", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except ConfigError as exc:  # validated above; a command's own derived settings
        print(f"crawl {args.command}: configuration error: {_one_line(str(exc))}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a clear one-line error for the known failure types
        from crawler.stack.deps import DependencyError
        from crawler.stack.local import StackError

        if isinstance(exc, (StackError, DependencyError)):
            print(f"crawl: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
