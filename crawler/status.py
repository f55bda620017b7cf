"""`crawl status`: one screen for a running crawl, local or on a cluster.

Where it looks (crawler.runs): a live `crawl run` (its run file: its topics, each
job's REST port and metrics port), else the configured crawl on the session cluster
(cluster.rest_port, or FLINK_REST). What it reads, and from where:

- jobs, their state, the last completed checkpoint and its age: Flink's REST API
  (/jobs/overview, /jobs/<id>/checkpoints); for a run without REST ports, process
  liveness only;
- fetches by outcome, index events, frontier events, eligibility lag (percentiles
  from the histogram's buckets), dead letters, politeness breaches, the frontier's
  size gauges: the jobs' Prometheus reporters, scraped twice `interval_s` apart for
  rates (totals since the job started otherwise);
- consumer lag per topic: Kafka's end offsets minus the offsets Flink's Kafka sources
  committed for each job's consumer group (on checkpoints, so lag includes what was
  read since the last one);
- the busiest hosts: leases per host among the leases topic's records of the last
  minute (at most `LEASE_SAMPLE` records per partition, the newest). No metric is
  per host, by design; this is a sample of the topic, labelled as such.

Every field the sources cannot give is None (shown "n/a"), never a guess.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from udfs.config import TOPIC_KEYS, Config

JOBS = ("frontier", "fetcher")
JOB_NAMES = {"frontier": "crawl frontier", "fetcher": "crawl fetcher"}
# Each job's Kafka source topics (stream keys), read with group <prefix>.<job>.
SOURCE_TOPICS = {"frontier": ("discovered", "completions", "index", "control"),
                 "fetcher": ("leases",)}
PREFIX = "flink_taskmanager_job_task_operator_"
FRONTIER_GAUGES = ("frontier_hosts", "frontier_urls_pending", "frontier_urls_cold",
                   "frontier_hosts_backoff", "frontier_hosts_robots_blocked")
# Frontier events shown as rates on the screen (all of them are in --json).
KEY_EVENTS = ("leases_granted", "completions_accepted", "urls_admitted", "throttled")
LEASE_WINDOW_S = 60
LEASE_SAMPLE = 5000
LIVE_STATES = ("RUNNING", "RESTARTING", "CREATED", "INITIALIZING", "RECONCILING",
               "FAILING", "CANCELLING")

Samples = dict[tuple[str, frozenset], float]

# -- the reporter's text format ------------------------------------------------------------

_LINE = re.compile(r"([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> Samples:
    """Prometheus text exposition → {(name, frozenset of (label, value)): value}."""
    out: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.fullmatch(line.strip())
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out[(m.group(1), frozenset(_LABEL.findall(m.group(2) or "")))] = value
    return out


def scrape(port: int, host: str = "127.0.0.1", timeout_s: float = 2.0) -> Samples | None:
    """One scrape of a reporter; None when nothing answers there."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout_s) as r:
            return parse_metrics(r.read().decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None


def total(samples: Samples, name: str) -> float | None:
    """The sum over subtasks (every label set) of `PREFIX + name`; None when absent."""
    found = [v for (n, _), v in samples.items() if n == PREFIX + name]
    return sum(found) if found else None


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    """`PREFIX + name` summed by one label's values (over subtasks and other labels)."""
    out: dict[str, float] = {}
    for (n, labels), v in samples.items():
        if n == PREFIX + name:
            key = dict(labels).get(label)
            if key is not None:
                out[key] = out.get(key, 0.0) + v
    return out


def le_bound(text: str) -> float:
    """A bucket's `le` as exported: Flink's reporter turns characters outside
    [A-Za-z0-9_:] into `_` ("+Inf" → "_Inf", "0.25" → "0_25")."""
    if text in ("+Inf", "_Inf", "Inf", "inf"):
        return math.inf
    return float(text.replace("_", "."))


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The q-quantile of a histogram from its cumulative buckets (upper bound, count),
    as Prometheus's histogram_quantile: linear within the bucket it falls in; in the
    +Inf bucket, the highest finite bound. None for an empty histogram."""
    bs = sorted(buckets)
    if not bs or bs[-1][1] <= 0:
        return None
    if bs[-1][0] != math.inf:
        raise ValueError("a histogram needs its +Inf bucket")
    rank = q * bs[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in bs:
        if count >= rank:
            if bound == math.inf:
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower  # pragma: no cover (the +Inf bucket holds every observation)


def lag_histograms(samples: Samples) -> dict[str, list[tuple[float, float]]]:
    """Eligibility lag buckets by priority class: [(upper bound, cumulative count)]."""
    out: dict[str, dict[float, float]] = {}
    for (n, labels), v in samples.items():
        if n == PREFIX + "priority_class_le_eligibility_lag_seconds_bucket":
            d = dict(labels)
            if "priority_class" in d and "le" in d:
                per = out.setdefault(d["priority_class"], {})
                bound = le_bound(d["le"])
                per[bound] = per.get(bound, 0.0) + v
    return {cls: sorted(b.items()) for cls, b in out.items()}


def _delta(new: Mapping[str, float], old: Mapping[str, float] | None, dt: float
           ) -> dict[str, float] | None:
    """Per-key rates between two scrapes; None without a first scrape or after a counter
    went back (a job restarted between them)."""
    if old is None or dt <= 0:
        return None
    rates = {k: (v - old.get(k, 0.0)) / dt for k, v in new.items()}
    return None if any(r < 0 for r in rates.values()) else rates


def metrics_summary(now: Samples, before: Samples | None, dt: float) -> dict[str, Any]:
    """What the screen shows from the reporters: totals, rates (with two scrapes), the
    eligibility lag's percentiles (between the scrapes when leases were granted then,
    else since the start), and the frontier's gauges (None when not exported)."""
    def counted(name: str, label: str | None) -> dict[str, Any]:
        get = (lambda s: by_label(s, name, label)) if label else \
            (lambda s: {"all": t} if (t := total(s, name)) is not None else {})
        cur = get(now)
        rates = _delta(cur, get(before) if before is not None else None, dt)
        if label is None:
            return {"total": cur.get("all"),
                    "rate": rates.get("all") if rates and cur else None}
        return {"total": cur, "rate": rates}

    lag: dict[str, Any] = {}
    hist_now = lag_histograms(now)
    hist_before = lag_histograms(before) if before is not None else {}
    for cls, buckets in hist_now.items():
        old = dict(hist_before.get(cls, []))
        window = [(b, c - old.get(b, 0.0)) for b, c in buckets]
        recent = before is not None and window[-1][1] > 0 and all(c >= 0 for _, c in window)
        use = window if recent else buckets
        # The count is that of the leases the percentiles are read from.
        lag[cls] = {"count": use[-1][1], "over": f"last {dt:.0f} s" if recent
                    else "since start", "p50_s": quantile(0.5, use),
                    "p99_s": quantile(0.99, use)}
    return {
        "fetches": counted("outcome_fetches_total", "outcome"),
        "index_events": counted("index_events_total", None),
        "frontier_events": counted("event_frontier_events_total", "event"),
        "dead_letters": by_label(now, "reason_dead_letters_total", "reason"),
        "politeness_breaches": by_label(now, "rule_politeness_breaches_total", "rule"),
        "eligibility_lag": lag,
        "frontier": {g.removeprefix("frontier_"): total(now, g) for g in FRONTIER_GAUGES},
    }


# -- Kafka ---------------------------------------------------------------------------------


def lag_table(ends: Mapping[tuple[str, int], int], committed: Mapping[tuple[str, int], int],
              begins: Mapping[tuple[str, int], int] | None = None) -> dict[str, dict]:
    """Per topic: end offset, committed offset and lag, summed over partitions. A
    partition with no committed offset counts from its beginning (the source starts
    at the earliest offset); `committed` is None for a topic with no commit at all."""
    out: dict[str, dict] = {}
    for (topic, part), end in ends.items():
        row = out.setdefault(topic, {"end": 0, "committed": None, "lag": 0})
        row["end"] += end
        c = committed.get((topic, part))
        if c is not None:
            row["committed"] = (row["committed"] or 0) + c
        start = c if c is not None else (begins or {}).get((topic, part), 0)
        row["lag"] += max(0, end - start)
    return out


def _group_offsets(admin, group: str, tps: list) -> dict:
    """The group's committed offsets of `tps` (kafka-python 3's list_group_offsets,
    else the 2.x name)."""
    if hasattr(admin, "list_group_offsets"):
        return admin.list_group_offsets({group: tps}).get(group, {})
    return admin.list_consumer_group_offsets(group, partitions=tps)


def consumer_lag(cfg: Config, timeout_s: float = 5.0) -> dict[str, Any]:
    """Each job's lag per source topic: {job: {topic: {end, committed, lag}}}; a topic
    that does not exist is left out; {"error": ...} when Kafka does not answer."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    servers = cfg["kafka.bootstrap_servers"]
    ms = int(timeout_s * 1000)
    try:
        admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=ms,
                                 client_id="crawl-status")
    except KafkaError as exc:
        return {"error": f"Kafka at {servers}: {exc}"}
    consumer = None
    try:
        consumer = KafkaConsumer(bootstrap_servers=servers, request_timeout_ms=ms + 1000,
                                 isolation_level="read_committed", client_id="crawl-status",
                                 enable_auto_commit=False)
        existing = consumer.topics()
        out: dict[str, Any] = {}
        for job, keys in SOURCE_TOPICS.items():
            group = f"{cfg['kafka.group_id_prefix']}.{job}"
            topics = [cfg.topic(k) for k in keys if cfg.topic(k) in existing]
            tps = [TopicPartition(t, p) for t in topics
                   for p in sorted(consumer.partitions_for_topic(t) or ())]
            if not tps:
                out[job] = {}
                continue
            ends = consumer.end_offsets(tps)
            begins = consumer.beginning_offsets(tps)
            offsets = _group_offsets(admin, group, tps)
            committed = {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()
                         if om is not None and om.offset is not None and om.offset >= 0}
            table = lag_table({(tp.topic, tp.partition): e for tp, e in ends.items()},
                              committed,
                              {(tp.topic, tp.partition): b for tp, b in begins.items()})
            out[job] = {"group": group, "topics": table}
        return out
    except KafkaError as exc:
        return {"error": f"Kafka at {servers}: {exc}"}
    finally:
        admin.close()
        if consumer is not None:
            consumer.close()


def busiest_hosts(cfg: Config, window_s: int = LEASE_WINDOW_S, per_partition: int = LEASE_SAMPLE,
                  top: int = 5, timeout_s: float = 3.0) -> dict[str, Any]:
    """Hosts with the most leases among the leases topic's records of the last
    `window_s` (the newest `per_partition` of each partition at most)."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    from udfs.wire.avro import registry
    from udfs.wire.records import LEASES

    topic = cfg.topic("leases")
    reg = registry()
    try:
        consumer = KafkaConsumer(bootstrap_servers=cfg["kafka.bootstrap_servers"],
                                 isolation_level="read_committed", enable_auto_commit=False,
                                 client_id="crawl-status", consumer_timeout_ms=500)
    except KafkaError as exc:
        return {"error": str(exc)}
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            return {"window_s": window_s, "records": 0, "hosts": []}
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        ends = consumer.end_offsets(tps)
        since = consumer.offsets_for_times(
            {tp: int((time.time() - window_s) * 1000) for tp in tps})
        consumer.assign(tps)
        want = {}
        for tp in tps:
            found = since.get(tp)
            if found is None or found.offset >= ends[tp]:
                continue
            consumer.seek(tp, max(found.offset, ends[tp] - per_partition))
            want[tp] = ends[tp]
        counts: Counter[str] = Counter()
        records = 0
        deadline = time.monotonic() + timeout_s
        while want and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=300)
            for tp, msgs in batch.items():
                for m in msgs:
                    if m.offset >= want.get(tp, 0):
                        continue
                    records += 1
                    try:
                        counts[LEASES.decode(reg, m.value)["host_key"]] += 1
                    except Exception:  # noqa: BLE001 an unreadable record: not a lease
                        continue
            want = {tp: end for tp, end in want.items() if consumer.position(tp) < end}
        return {"window_s": window_s, "records": records,
                "hosts": [[h, n] for h, n in counts.most_common(top)]}
    except KafkaError as exc:
        return {"error": str(exc)}
    finally:
        consumer.close()


# -- Flink's REST API ----------------------------------------------------------------------


def get_json(base: str, path: str, timeout_s: float = 2.0) -> Any:
    try:
        with urllib.request.urlopen(f"http://{base}{path}", timeout=timeout_s) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def job_info(base: str, overview: Mapping[str, Any], now_ms: float) -> dict[str, Any]:
    """One job's state and last completed checkpoint, from its overview entry."""
    jid = overview["jid"]
    info: dict[str, Any] = {"state": overview["state"], "jid": jid, "rest": base,
                            "uptime_s": overview.get("duration", 0) / 1000,
                            "checkpoint": None, "checkpoints_failed": None}
    cp = get_json(base, f"/jobs/{jid}/checkpoints")
    if cp:
        info["checkpoints_failed"] = cp.get("counts", {}).get("failed")
        info["checkpoints_completed"] = cp.get("counts", {}).get("completed")
        last = (cp.get("latest") or {}).get("completed")
        if last:
            info["checkpoint"] = {
                "id": last["id"], "duration_ms": last.get("end_to_end_duration"),
                "age_s": max(0.0, (now_ms - last["latest_ack_timestamp"]) / 1000)}
    return info


def pick_job(jobs: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    """The job named `name` to report: a live one if any, else the newest."""
    named = [j for j in jobs if j.get("name") == name]
    named.sort(key=lambda j: (j.get("state") in LIVE_STATES, j.get("start-time", 0)),
               reverse=True)
    return named[0] if named else None


# -- where the crawl runs --------------------------------------------------------------------


@dataclass
class Target:
    """A crawl to report on: a `crawl run`, or the configured crawl on a Flink cluster."""

    kind: str  # "run" | "cluster"
    cfg: Config
    where: str
    run: Any = None  # crawler.runs.RunInfo
    rest: dict[str, str] = field(default_factory=dict)  # job → host:port ("*": all)
    metrics_ports: dict[str, list[int]] = field(default_factory=dict)


def _port_range(text: str) -> list[int]:
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+))?\s*", str(text or ""))
    if not m:
        return []
    lo = int(m.group(1))
    return list(range(lo, int(m.group(2) or lo) + 1))


def find_target(cfg: Config, run: Any) -> tuple[Target | None, str]:
    """The crawl to report on, and where it looked (for "nothing is running")."""
    if run is not None:
        rest = {job: f"127.0.0.1:{port}" for job, port in run.rest_ports.items()}
        ports = {job: [p] for job in JOBS if (p := cfg[f"metrics.{job}_port"])}
        return Target("run", cfg, f"crawl run {run.run_id} (pid {run.pid})", run, rest,
                      ports), ""
    base = os.environ.get("FLINK_REST") or f"127.0.0.1:{cfg['cluster.rest_port']}"
    runs = Path(cfg["local.state_dir"]) / "runs"
    looked = f"no live crawl run under {runs}, no Flink REST API at {base}"
    overview = get_json(base, "/jobs/overview")
    if overview is None:
        return None, looked
    names = set(JOB_NAMES.values())
    if not any(j.get("name") in names and j.get("state") in LIVE_STATES
               for j in overview.get("jobs", [])):
        return None, (f"no live crawl run under {runs}; the Flink cluster at {base} runs "
                      "no crawl job")
    try:  # the session cluster's reporters (a key of newer configurations)
        ports = _port_range(cfg["cluster.metrics_ports"])
    except KeyError:
        ports = []
    host = base.split(":")[0]
    return Target("cluster", cfg, f"Flink cluster at {base}", None, {"*": base},
                  {"*": ports} if host in ("127.0.0.1", "localhost") else {}), ""


def collect_jobs(target: Target) -> dict[str, Any]:
    now_ms = time.time() * 1000
    out: dict[str, Any] = {}
    for job in JOBS:
        base = target.rest.get(job) or target.rest.get("*")
        overview = get_json(base, "/jobs/overview") if base else None
        entry = pick_job(overview.get("jobs", []), JOB_NAMES[job]) if overview else None
        if entry is not None:
            out[job] = job_info(base, entry, now_ms)
        elif target.kind == "run" and target.run is not None:
            # No REST answer: the run's process is what is known.
            out[job] = {"state": ("STARTING" if base else "UNKNOWN (no REST port)")
                        if target.run.alive() else "STOPPED", "rest": base,
                        "checkpoint": None}
        else:
            out[job] = {"state": "NOT RUNNING", "rest": base, "checkpoint": None}
    return out


def scrape_all(ports: Iterable[int]) -> tuple[Samples | None, list[int]]:
    """All reporters' samples merged (each series carries its own labels), and the
    ports that answered."""
    merged: Samples = {}
    answered = []
    for port in ports:
        s = scrape(port, timeout_s=1.0)
        if s is not None:
            answered.append(port)
            merged.update(s)
    return (merged if answered else None), answered


def collect(target: Target, interval_s: float = 3.0, hosts: bool = True) -> dict[str, Any]:
    """Everything `crawl status` shows, as plain data (the --json output)."""
    ports = sorted({p for ps in target.metrics_ports.values() for p in ps})
    first, _ = scrape_all(ports) if interval_s > 0 else (None, [])
    t0 = time.monotonic()
    jobs = collect_jobs(target)
    lag = consumer_lag(target.cfg)
    busiest = busiest_hosts(target.cfg) if hosts else None
    if first is not None:
        time.sleep(max(0.0, interval_s - (time.monotonic() - t0)))
    dt = time.monotonic() - t0
    second, answered = scrape_all(ports)
    metrics = metrics_summary(second, first, dt) if second is not None else None
    run = target.run
    return {
        "source": {"kind": target.kind, "where": target.where,
                   "run_id": run.run_id if run else None,
                   "topics": {k: target.cfg.topic(k) for k in TOPIC_KEYS}},
        "collected_at": time.time(),
        "jobs": jobs,
        "metrics_ports": ports, "metrics_answered": answered,
        "metrics": metrics,
        "consumer_lag": lag,
        "busiest_hosts": busiest,
    }


# -- the screen ----------------------------------------------------------------------------


def _n(v: float | None, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.1f}{unit}"
    return f"{int(v):,}{unit}"


def _secs(v: float | None) -> str:
    if v is None:
        return "n/a"
    if v < 90:
        return f"{v:.1f} s"
    if v < 5400:
        return f"{v / 60:.0f} min"
    return f"{v / 3600:.1f} h"


def _rates(section: Mapping[str, Any], keys: Sequence[str] | None = None, top: int = 8) -> str:
    totals: Mapping[str, float] = section.get("total") or {}
    rates = section.get("rate")
    names = [k for k in keys if k in totals] if keys else \
        sorted((k for k in totals if totals[k]), key=lambda k: -totals[k])[:top]
    if not names:
        return "none yet"
    if rates is None:
        return "  ".join(f"{k} {_n(totals[k])}" for k in names)
    return "  ".join(f"{k} {rates.get(k, 0.0):.1f}/s ({_n(totals[k])})" for k in names)


def render(status: Mapping[str, Any]) -> str:
    src = status["source"]
    lines = [f"crawl status: {src['where']}; topics {src['topics']['index']}, ..."]
    lines.append("jobs")
    for job, j in status["jobs"].items():
        cp = j.get("checkpoint")
        ckpt = (f"checkpoint #{cp['id']} {_secs(cp['age_s'])} ago ({cp['duration_ms']} ms)"
                if cp else "no completed checkpoint")
        failed = j.get("checkpoints_failed")
        up = f"up {_secs(j['uptime_s'])}  " if j.get("uptime_s") is not None else ""
        lines.append(f"  {job:9s} {j['state']:10s} {up}{ckpt}"
                     + (f"  failed checkpoints {failed}" if failed else ""))
    m = status.get("metrics")
    if m is None:
        ports = ", ".join(map(str, status["metrics_ports"]))
        why = (f"no reporter answered on 127.0.0.1 ports {ports}" if ports else
               "no reporter ports known: this cluster's configuration has no "
               "cluster.metrics_ports" if src["kind"] == "cluster" else
               "the run's metrics ports are 0")
        lines.append(f"metrics   n/a ({why})")
    else:
        f = m["fetches"]
        rate_all = sum(f["rate"].values()) if f.get("rate") else None
        lines.append(f"fetches   {_n(rate_all, '/s')} (total {_n(sum(f['total'].values()))})"
                     f": {_rates(f)}")
        ie = m["index_events"]
        lines.append(f"index     {_n(ie['rate'], '/s')} (total {_n(ie['total'])})"
                     f"   frontier: {_rates(m['frontier_events'], KEY_EVENTS)}")
        lag = "   ".join(f"{cls} p50 {_secs(v['p50_s'])} p99 {_secs(v['p99_s'])} "
                         f"({v['over']}, {_n(v['count'])} leases)"
                         for cls, v in sorted(m["eligibility_lag"].items())) or "n/a"
        lines.append(f"eligibility lag  {lag}")
        fr = m["frontier"]
        lines.append("frontier  " + "  ".join(f"{k.replace('_', ' ')} {_n(v)}"
                                              for k, v in fr.items()))
        breaches = sum(m["politeness_breaches"].values())
        dead = m["dead_letters"]
        lines.append(f"politeness breaches {_n(breaches)}"
                     + ("" if not breaches else f" {m['politeness_breaches']}")
                     + f"   dead letters {_n(sum(dead.values()))}"
                     + ("" if not dead else " (" + ", ".join(
                         f"{k} {_n(v)}" for k, v in sorted(dead.items())) + ")"))
    lag = status["consumer_lag"]
    if "error" in lag:
        lines.append(f"consumer lag  n/a ({lag['error']})")
    else:
        stream = {t: k for k, t in src["topics"].items()}  # shorter than a run's topics
        lines.append("consumer lag, records (end offset - committed offset; Flink commits "
                     "on checkpoints)")
        for job, d in lag.items():
            topics = d.get("topics", {}) if d else {}
            cells = "  ".join(f"{stream.get(t, t)} {_n(r['lag'])}"
                              + ("" if r["committed"] is not None else " (no commit)")
                              for t, r in topics.items()) or "no topics"
            lines.append(f"  {job:9s} {cells}")
    b = status.get("busiest_hosts")
    if b is not None:
        if "error" in b:
            lines.append(f"busiest hosts  n/a ({b['error']})")
        else:
            hosts = ", ".join(f"{h} {n}" for h, n in b["hosts"]) or "none"
            lines.append(f"busiest hosts (leases in the last {b['window_s']} s, "
                         f"{b['records']} records read): {hosts}")
    return "\n".join(lines)


def live_part(status: Mapping[str, Any]) -> str:
    """The part of `crawl run`'s live line that comes from this collection: the
    jobs' consumer lag and the age of their last checkpoints."""
    lag = status.get("consumer_lag") or {}
    parts = []
    if "error" not in lag:
        total_lag = sum(r["lag"] for d in lag.values() if d
                        for r in d.get("topics", {}).values())
        parts.append(f"lag {total_lag}")
    ages = [j["checkpoint"]["age_s"] for j in (status.get("jobs") or {}).values()
            if j.get("checkpoint")]
    if ages:
        parts.append(f"ckpt {max(ages):.0f}s ago")
    return "  ".join(parts)
