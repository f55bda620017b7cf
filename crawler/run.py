"""`crawl seed` and `crawl run`: publish seeds, run both jobs locally, watch the crawl.

`crawl run` with no seeds crawls the bundled synthetic web (virtual .test hosts on
127.0.0.1), so a newcomer sees a real crawl on a fresh machine. Loopback is
reachable only because run adds `fetch.allowed_networks=[127.0.0.0/8]` and maps
the .test names with `fetch.static_hosts` — explicitly, and only for that case.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from udfs.config import Config, load_config
from udfs.core.parse import group_by_host
from udfs.core.records import DiscoverySource
from udfs.core.urls import UrlPolicy, normalize_url
from udfs.flink import job_tmp_dir
from udfs.wire.avro import registry
from udfs.wire.records import DISCOVERED, links_records, plain_link

# What an operator may seed: pages, and sitemap files (the frontier reads those as
# sitemaps and seeds their entries; see udfs/frontier/pipeline.py).
SEED_SOURCES = ("SEED", "SEED_SITEMAP")


def url_lines(path: str | os.PathLike[str]) -> list[str]:
    """The entries of a file of URLs: one per line, blank lines and # comments skipped."""
    with open(path, encoding="utf-8-sig") as fh:  # a BOM (some editors write one) is not a URL
        return [s for line in fh if (s := line.strip()) and not s.startswith("#")]


def publish_seeds(cfg: Config, urls: Iterable[str], source: DiscoverySource = "SEED"
                  ) -> tuple[int, list[str]]:
    """Send seeds to crawl.discovered, one record per host (key host_key). `source`:
    "SEED" for pages, "SEED_SITEMAP" for sitemap files.

    Returns (URLs sent, inputs that are not http(s) URLs)."""
    from kafka import KafkaProducer

    if source not in SEED_SOURCES:
        raise ValueError(f"source must be one of {', '.join(SEED_SOURCES)}, got {source!r}")
    reg = registry()
    policy = UrlPolicy.from_names(cfg["urls.drop_query_params"])
    good, bad = [], []
    for raw in urls:
        raw = raw.strip()
        if not raw or raw.startswith("#"):
            continue
        url = normalize_url(raw, policy=policy)
        (good if url else bad).append(url or raw)
    if not good:  # nothing to send: no connection to Kafka either
        return 0, bad
    producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"],
                             request_timeout_ms=cfg["kafka.request_timeout_ms"])
    try:
        now = int(time.time() * 1000)
        for host_key, host_urls in group_by_host(good).items():
            for record in links_records(host_key, source, None, 0, now,
                                        [plain_link(u) for u in host_urls]):
                producer.send(cfg.topic("discovered"),
                              DISCOVERED.encode(reg, record, check=True),
                              key=host_key.encode())
        producer.flush()
    finally:
        producer.close()
    return len(good), bad


FLINK_LOG_TAIL_BYTES = 4 << 20  # what a report reads of a long run's Flink log: its end
JOB_LOG_TAIL_BYTES = 1 << 20  # and of the job's own log


def _tail_lines(path: Path, limit: int) -> list[str]:
    """The whole lines in the last `limit` bytes of a file."""
    with path.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - limit))
        data = f.read()
    lines = data.decode(errors="replace").splitlines()
    return lines[1:] if size > limit else lines  # the first may be cut


def _trouble(line: str) -> bool:
    """A line of Flink's log worth a report: a warning or an error (but the harmless
    collisions of metric names every sink logs), or a checkpoint declined or expired."""
    if " WARN " in line or " ERROR " in line:
        return "Name collision" not in line
    return "checkpoint" in line.lower() and any(
        w in line for w in ("Declin", "decline", "expired", "failed", "Failed"))


@dataclass
class JobProcess:
    """One job (`python -m jobs.<name>`) in its own process group, log to a file.

    The job gets the configuration the CLI used: `config_files` as --config (absolute
    paths) and `overrides` as --set; CRAWL_CONFIG and CRAWL__SECTION__KEY reach it through
    the inherited environment. Its load_config applies them in the CLI's order:
    defaults < CRAWL_CONFIG < --config files < CRAWL__ variables < --set."""

    name: str
    overrides: Sequence[str]
    log_path: Path
    config_files: Sequence[str | os.PathLike[str]] = ()
    from_checkpoint: str | None = None  # restore the job from this checkpoint or savepoint
    proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        return [sys.executable, "-m", f"jobs.{self.name}",
                *[a for f in self.config_files for a in ("--config", str(Path(f).resolve()))],
                *[a for o in self.overrides for a in ("--set", o)],
                *(["--from-checkpoint", self.from_checkpoint] if self.from_checkpoint else [])]

    def kill(self) -> None:
        """kill -9 of the whole job (its JVM and Python workers): a crash, nothing cleaned
        by the job; its Flink working files (`tmp_dir`) are removed here, as a
        supervisor would."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self._remove_tmp()

    @property
    def tmp_dir(self) -> Path | None:
        """The job's local Flink working files (its JVM's java.io.tmpdir: the MiniCluster's
        folder, RocksDB's instances, unpacked jars; udfs.flink.job_tmp_dir), once it has
        started; removed when it has ended."""
        return None if self.proc is None else job_tmp_dir(self.proc.pid)

    def _remove_tmp(self, grace_s: float = 10.0) -> None:
        """Remove `tmp_dir` once no process of the job's group is left (a JVM still
        shutting down may write there), waiting at most `grace_s`."""
        if self.proc is not None:
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                try:
                    os.killpg(self.proc.pid, 0)
                except (ProcessLookupError, PermissionError):
                    break
                time.sleep(0.1)
        if self.tmp_dir is not None:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)

    @property
    def flink_log_dir(self) -> Path:
        """Flink's own log of the job's MiniCluster, in a folder beside the job's log: a
        folder per job, since PyFlink's launcher names the file by user and machine only
        and truncates it when a JVM starts (two jobs would write over each other)."""
        return self.log_path.with_name(f"{self.log_path.stem}-flink")

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # The job inherits this environment (CRAWL_CONFIG and CRAWL__* included).
        env = {**os.environ, "FLINK_LOG_DIR": str(self.flink_log_dir)}
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=env)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def report(self, chars: int = 2000, flink_lines: int = 12) -> str:
        """What a run or test that gave up waiting on the job should print: whether it
        runs, the end of its log, and from Flink's log how its checkpoints went (the
        index and other exactly-once outputs appear only when one completes) and its
        last warnings and errors."""
        from crawler.stack.cluster import without_java_frames

        state = "running" if self.alive() else (
            "not started" if self.proc is None else f"ended with {self.proc.returncode}")
        # Its last `chars` characters but for Java stack frames: a job that failed ends
        # its log with pages of them, after the messages that say why.
        log = without_java_frames("\n".join(_tail_lines(
            self.log_path, JOB_LOG_TAIL_BYTES)))[-chars:].rstrip() \
            if self.log_path.exists() else "(no log)"
        lines: list[str] = []
        for path in sorted(self.flink_log_dir.glob("*.log")):
            lines += _tail_lines(path, FLINK_LOG_TAIL_BYTES)
        completed = [x for x in lines if "Completed checkpoint" in x]
        triggered = [x for x in lines if "Triggering checkpoint" in x]
        trouble = [x[:400] for x in lines if _trouble(x)]
        return "\n".join([
            f"job {self.name}: {state}; its log ends:", log,
            f"Flink's log (at most its last {FLINK_LOG_TAIL_BYTES >> 20} MB): "
            f"{len(triggered)} checkpoints triggered, {len(completed)} completed",
            *[x[:300] for x in (triggered[-1:] + completed[-1:])],
            f"its last {flink_lines} warnings, errors and checkpoint failures:",
            *trouble[-flink_lines:]])

    def stop(self) -> None:
        """SIGTERM to the job's process group, SIGKILL if it has not ended in 20 s; then
        its Flink working files are removed."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._remove_tmp()


@dataclass
class Progress:
    started: float = field(default_factory=time.monotonic)
    pages: int = 0  # index events
    completions: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)
    leases: int = 0
    urls: set[str] = field(default_factory=set)
    # Dead letters by error_type: URLs refused at intake (ADDRESS_BLOCKED, InvalidUrl)
    # and records no stage could read.
    refused: dict[str, int] = field(default_factory=dict)
    # The pace: when fetches came back (a window of them), and each host's latest lease
    # (when it was read, its pace): the politeness ceiling of the hosts being crawled.
    fetched_at: deque = field(default_factory=lambda: deque(maxlen=100_000))
    host_pace: dict[str, tuple[float, float, int]] = field(default_factory=dict)

    def pace(self, now: float | None = None, window_s: float = 10.0) -> tuple[float, float]:
        """(requests/s over the last `window_s`, the politeness ceiling of the hosts with a
        lease in that window: each host's max_in_flight / gap)."""
        now = time.monotonic() if now is None else now
        since = now - window_s
        while self.fetched_at and self.fetched_at[0] < since - 60:
            self.fetched_at.popleft()
        span = min(window_s, max(now - self.started, 1e-9))
        rate = sum(1 for t in self.fetched_at if t >= since) / span
        ceiling = sum(n / max(gap, 1e-3) for seen, gap, n in self.host_pace.values()
                      if seen >= since)
        return rate, ceiling

    def line(self, violations: int | None, status: str = "") -> str:
        """The live line; `status`: what `crawl status`'s collection adds (LiveStatus)."""
        secs = time.monotonic() - self.started
        errors = sum(v for k, v in self.outcomes.items() if k not in ("OK", "NOT_MODIFIED"))
        v = "" if violations is None else f"  politeness violations {violations}"
        rate, ceiling = self.pace()
        share = f" ({rate / ceiling:4.0%})" if ceiling else ""
        return (f"[{secs:6.1f}s] pages {self.pages:5d}  rate {self.pages / max(secs, 1):5.1f}/s"
                f"  pace {rate:5.1f}/s of {ceiling:5.1f}/s{share}"
                f"  hosts {len(self.hosts):3d}  leases {self.leases:5d}"
                f"  in flight {max(0, self.leases - self.completions):3d}"
                f"  errors {errors:3d}  throttled {self.outcomes.get('THROTTLED', 0)}"
                f"  refused {sum(self.refused.values())}{v}"
                + (f"  {status}" if status else ""))

    def summary(self, violations: dict[str, int] | None) -> str:
        return (f"summary: {self.pages} pages indexed from {len(self.hosts)} hosts in "
                f"{time.monotonic() - self.started:.0f} s; outcomes {self.outcomes}"
                f"; refused {self.refused}"
                + (f"; politeness violations {violations}" if violations is not None else ""))


class LiveStatus:
    """`crawl status`'s collection for the live line (the jobs' consumer lag and the age
    of their last checkpoints, from Kafka and their REST APIs), refreshed every
    `every_s` in a background thread so that the line never waits for it."""

    def __init__(self, cfg: Config, rest_ports: dict[str, int], every_s: float = 2.0) -> None:
        import threading

        from crawler.status import Target

        self.target = Target("run", cfg, "", None,
                             {job: f"127.0.0.1:{port}" for job, port in rest_ports.items()})
        self.every_s = every_s
        self.text = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="live-status", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        from crawler.status import collect_jobs, consumer_lag, live_part

        while not self._stop.is_set():
            try:
                self.text = live_part({"jobs": collect_jobs(self.target),
                                       "consumer_lag": consumer_lag(self.target.cfg)})
            except Exception:  # noqa: BLE001 the live line goes on without it
                self.text = ""
            self._stop.wait(self.every_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


class Watcher:
    """Reads the index, lease, completion and dead-letter topics from the start
    (committed data only)."""

    def __init__(self, cfg: Config, keep_records: bool = False) -> None:
        from kafka import KafkaConsumer

        self.reg = registry()
        self.topics = {cfg.topic("index"): "index_event", cfg.topic("leases"): "lease",
                       cfg.topic("completions"): "completion",
                       cfg.topic("deadletter"): "dead_letter"}
        self.consumer = KafkaConsumer(
            *self.topics, bootstrap_servers=cfg["kafka.bootstrap_servers"],
            auto_offset_reset="earliest", enable_auto_commit=False,
            isolation_level="read_committed", consumer_timeout_ms=200)
        self.progress = Progress()
        self.events: list[dict] = []
        self.keep_records = keep_records
        # in topic order per partition, if keep_records (a test's account of a URL)
        self.leases: list[dict] = []
        self.completions: list[dict] = []

    def poll(self) -> Progress:
        p = self.progress
        for m in self.consumer:
            schema = self.topics[m.topic]
            if schema == "completion" and DISCOVERED.wrote(self.reg, m.value):
                continue  # URLs too many for their completion, sent just before it
            rec = self.reg.decode(schema, m.value)
            if schema == "index_event":
                p.pages += 1
                p.urls.add(rec["url"])
                self.events.append(rec)
            elif schema == "lease":
                p.leases += 1
                p.hosts.add(rec["host_key"])
                p.host_pace[rec["host_key"]] = (time.monotonic(), rec["gap_s"],
                                                rec["max_in_flight"])
                if self.keep_records:
                    self.leases.append(rec)
            elif schema == "dead_letter":
                kind = rec["error_type"] or "unknown"
                p.refused[kind] = p.refused.get(kind, 0) + 1
            else:
                p.completions += 1
                if self.keep_records:
                    self.completions.append(rec)
                p.outcomes[rec["outcome"]] = p.outcomes.get(rec["outcome"], 0) + 1
                if rec["outcome"] != "NOT_SENT":
                    p.fetched_at.append(time.monotonic())
        return p

    def close(self) -> None:
        self.consumer.close()


# Listening ports for a run's jobs come from below Linux's ephemeral range (32768 and
# up): a port picked there can be taken by any outgoing connection (a Kafka client's)
# between the pick and the job's bind, and a job whose REST port is taken fails to start.
LISTEN_PORTS = range(20000, 32768)


# Ports this process has handed out: never handed out twice, since the first may not be
# bound yet (a job binds its port seconds after the pick, and a pick only tests the bind).
_PICKED: set[int] = set()


def free_port(avoid: Collection[int] = ()) -> int:
    """A TCP port free on 127.0.0.1 now, outside the ephemeral range (the job binds it
    moments later), never one this process picked before nor one in `avoid` (ports the
    configuration names but nothing may have bound yet): only another process picking
    the same port could race it."""
    import random
    import socket

    start = random.randrange(len(LISTEN_PORTS))
    for i in range(len(LISTEN_PORTS)):
        port = LISTEN_PORTS[(start + i) % len(LISTEN_PORTS)]
        if port in _PICKED or port in avoid:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _PICKED.add(port)
            return port
    raise OSError(f"no free port in {LISTEN_PORTS.start}-{LISTEN_PORTS.stop - 1}")


def synthetic_overrides(web, state_dir: Path, min_gap_s: float) -> list[str]:
    """What makes the synthetic web crawlable, and quick: 127.0.0.1 allowed explicitly
    (only that address: the web's SSRF bait resolves to 127.0.0.2 and stays refused).
    The objects and the fetcher's open WARC file go under `state_dir` (a stopped job
    leaves that file open: in the system's temp folder it would outlive the run)."""
    return ["fetch.allowed_networks=[127.0.0.1/32]",
            f"fetch.static_hosts=[{','.join(web.static_hosts())}]",
            f"storage.local_dir={state_dir / 'objects'}",
            f"warc.temp_dir={state_dir / 'warc-temp'}",
            f"politeness.min_gap_s={min_gap_s}", "robots.retry_base_s=1.0",
            "flink.checkpoint_interval_ms=1000"]


def _publish_warc_left(cfg) -> None:
    """The fetcher's open WARC file is not closed when its job is stopped (its Python
    workers end with the job's process group): publish it now (udfs/storage/warc_writer.py)."""
    if cfg is None or not cfg["warc.enabled"]:
        return
    try:
        from udfs.storage.bodies import open_store
        from udfs.storage.warc_writer import recovering_writer

        keys = recovering_writer(cfg, open_store(cfg)).recover()
        if keys:
            print(f"WARC: {len(keys)} file(s) of the stopped fetcher published", flush=True)
    except Exception as exc:  # the crawl's result does not depend on it; say so
        print(f"WARC: the stopped fetcher's open file was not published: {exc} "
              "(`crawl warc recover` retries)", flush=True)


def run(cfg_files: Sequence[str], overrides: Sequence[str], seeds_file: str | None,
        max_pages: int, duration_s: float, sites: int, state_dir: str | None,
        sitemaps_file: str | None = None) -> int:
    """A local crawl: the seeds of `seeds_file` and the sitemaps of `sitemaps_file`, or
    the synthetic web when neither is given. The CLI has validated the arguments."""
    from crawler.stack.local import LocalStack
    from crawler.testkit.synthetic_web import SyntheticWeb, build_sites
    from udfs.config import TOPIC_KEYS

    # Ctrl-C and SIGTERM both end the run cleanly (a shell may have started us with
    # SIGINT ignored, as it does for background jobs).
    def _interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    # Everything that can be refused is read before anything starts: the inputs, and
    # the run's configuration (each run is a new crawl with new jobs: topics of its own).
    base_cfg = load_config(cfg_files, overrides=overrides)
    seeds = url_lines(seeds_file) if seeds_file else []
    sitemaps = url_lines(sitemaps_file) if sitemaps_file else []
    synthetic = not (seeds_file or sitemaps_file)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    extra = [f"topics.{k}.name=run-{run_id}.{base_cfg.topic(k)}" for k in TOPIC_KEYS]
    extra += list(overrides)
    cfg = load_config(cfg_files, overrides=extra)
    stack = LocalStack(base_cfg, state_dir=state_dir)
    started_stack = not all(s.running for s in stack.status())
    stack.up(log=lambda line: print(line, flush=True))
    run_dir = stack.state_dir / "runs" / run_id
    web = None
    jobs: list[JobProcess] = []
    watcher = None
    live = None
    try:
        if synthetic:
            run_dir.mkdir(parents=True, exist_ok=True)
            # Sites of 60-100 pages: enough for the crawl to show each host's pace.
            web = SyntheticWeb(build_sites(sites, pages=(60, 100)),
                               log_path=str(run_dir / "web.jsonl"))
            web.start()
            seeds = [web.host_key(s) + "/" for s in web.site_list]
            extra = synthetic_overrides(web, run_dir, 0.5) + extra
            print(f"synthetic web: {len(web.site_list)} sites on 127.0.0.1:{web.port}"
                  " (loopback allowed for this run only)", flush=True)
        cfg = load_config(cfg_files, overrides=extra)
        from crawler.runs import record_run
        from crawler.stack.local import ensure_topics

        # Other terminals find this crawl by it (crawl status, crawl host, crawl url show).
        # Each job's MiniCluster serves Flink's REST API on a free loopback port.
        # Not a port the configuration gives a job's metrics reporter: the reporter binds
        # it only as its job starts (CI once had the fetcher's REST port picked as the
        # frontier's metrics port, and the fetcher failed to start).
        configured = {cfg["metrics.frontier_port"], cfg["metrics.fetcher_port"]}
        rest_ports = {name: free_port(avoid=configured) for name in ("frontier", "fetcher")}
        record_run(run_dir, run_id, extra, cfg_files, rest_ports=rest_ports)
        print(f"run id {run_id}: from another terminal, crawl status / crawl host show "
              f"HOST_KEY / crawl url show URL find this crawl", flush=True)

        for line in ensure_topics(cfg):
            print(line, flush=True)
        jobs = [JobProcess(name, [*extra, f"flink.local_rest_port={port}"],
                           run_dir / f"{name}.log", config_files=cfg_files)
                for name, port in rest_ports.items()]
        for job in jobs:
            job.start()
        sent, bad = publish_seeds(cfg, seeds)
        sent_maps, bad_maps = publish_seeds(cfg, sitemaps, source="SEED_SITEMAP")
        print(f"seeded {sent} URLs" + (f" and {sent_maps} sitemaps" if sitemaps else "")
              + (f"; not URLs: {bad + bad_maps}" if bad or bad_maps else ""), flush=True)
        watcher = Watcher(cfg)
        live = LiveStatus(cfg, rest_ports)
        deadline = time.monotonic() + duration_s
        last = 0.0
        while time.monotonic() < deadline:
            progress = watcher.poll()
            if time.monotonic() - last >= 2:
                violations = sum(web.violations(cfg["robots.user_agent"], 0.5).values()) \
                    if web else None
                print(progress.line(violations, live.text), flush=True)
                last = time.monotonic()
            if progress.pages >= max_pages:
                break
            dead = [j for j in jobs if not j.alive()]
            if dead:
                print(f"job stopped unexpectedly: {[j.name for j in dead]}; see {run_dir}",
                      *(j.report() for j in dead), sep="\n", flush=True)
                return 1
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted; stopping", flush=True)
        return 130
    finally:
        from crawler.runs import forget_run

        forget_run(run_dir)
        if live is not None:
            live.close()
        for job in jobs:
            job.stop()
        _publish_warc_left(cfg)
        summary = watcher.poll() if watcher else None
        if watcher:
            watcher.close()
        if web is not None:
            web.stop()
        if summary is not None:
            v = web.violations(base_cfg["robots.user_agent"], 0.5) if web else None
            print(summary.summary(v), flush=True)
            where = cfg["storage.local_dir"] if cfg["storage.backend"] == "local" else \
                "s3://" + cfg["s3.bucket"]
            print(f"output: topics {cfg.topic('index')} and {cfg.topic('deadletter')} on "
                  f"{cfg['kafka.bootstrap_servers']}; raw pages and the fetch audit trail "
                  f"under {where}; job logs in {run_dir}", flush=True)
        if started_stack:
            stack.down(log=lambda line: print(line, flush=True))
