"""A real Prometheus server (the Debian package's /usr/bin/prometheus, installed by
`./dev setup`) scrapes both jobs' reporters while they crawl a small synthetic web, and
PromQL over its HTTP API must agree with what went through the topics: fetches by
outcome class, robots.txt fetches, pages parsed and indexed, bytes stored; the
politeness self-check reads 0; the eligibility lag is a histogram; and every metric
family the jobs export is there. All traffic stays on 127.0.0.1: Prometheus listens and
scrapes there, the web is served there and the jobs fetch nothing else."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from kafka import KafkaConsumer

from crawler.run import JobProcess, publish_seeds, synthetic_overrides
from crawler.testkit.synthetic_web import Site, SyntheticWeb
from tests.integration.conftest import free_port
from udfs.config import TOPIC_KEYS, load_config
from udfs.core.selfcheck import OUTCOME_CLASSES, outcome_class
from udfs.fetcher.pipeline import PARSE_BUCKETS_S
from udfs.wire.avro import registry

PROMETHEUS = Path("/usr/bin/prometheus")
REG = registry()
OP = "flink_taskmanager_job_task_operator_"  # Flink's scope prefix; groups become labels
# Every family each job exports (names as Prometheus stores them: Flink puts the
# group keys of the labels before the metric's own name).
FAMILIES = {
    "frontier": ["event_frontier_events_total",
                 "priority_class_le_eligibility_lag_seconds_bucket",
                 "priority_class_eligibility_lag_seconds_count",
                 "reason_dead_letters_total", "urls_refused_address", "index_events_total",
                 "exact_duplicates_total", "near_duplicates_total", "frontier_hosts",
                 "frontier_urls_pending", "frontier_urls_cold", "frontier_hosts_backoff",
                 "frontier_hosts_robots_blocked", "frontier_hosts_paused",
                 "le_robots_age_seconds_bucket", "robots_age_seconds_count"],
    "fetcher": ["outcome_fetches_total", "outcome_robots_fetches_total",
                "requests_started_total", "bytes_fetched_total", "bytes_stored_total",
                "rule_politeness_breaches_total", "le_parse_seconds_bucket",
                "parse_seconds_count", "parse_microseconds_sum", "parse_backlog",
                "kind_parse_limit_hits_total"],
}
# Not in FAMILIES: hosts_restored_with_added_fields, counted only when a job restores
# hosts saved by an older build (a counter appears once it is first incremented).


# Flink's reporter rewrites le="+Inf" as "_Inf" (and "0.25" as "0_25"); the scrape
# puts them back with the rules every scrape config of the jobs needs (README: "Metrics").
LE_RELABEL = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "infra/monitoring/relabel.yml").read_text())


class PrometheusServer:
    """/usr/bin/prometheus on a free 127.0.0.1 port with its own storage, scraping
    `targets` (job name → port on 127.0.0.1) every second."""

    def __init__(self, folder: Path, targets: dict[str, int]) -> None:
        self.port = free_port()
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                  "scrape_configs": [{"job_name": job, "scrape_timeout": "1s",
                                      "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                                      "metric_relabel_configs": LE_RELABEL}
                                     for job, port in targets.items()]}
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.log = folder / "prometheus.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(PROMETHEUS), f"--config.file={folder / 'prometheus.yml'}",
                 f"--storage.tsdb.path={folder / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not self._ready():
            assert self.proc.poll() is None and time.monotonic() < deadline, \
                f"Prometheus did not start: {self.log.read_text()[-2000:]}"
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                return True
        except OSError:
            return False

    def query(self, promql: str) -> list[dict]:
        """An instant query's result vector (each: metric labels, value)."""
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": promql}))
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, promql: str) -> float | None:
        """The value of a query that yields one sample (None: no series)."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def total(prom: PrometheusServer, job: str, name: str, **labels: str) -> float | None:
    """sum() over subtasks of one family of a job, restricted to `labels`."""
    match = "".join(f',{k}="{v}"' for k, v in labels.items())
    return prom.value(f'sum({OP}{name}{{job="{job}"{match}}})')


def wait_until(check, timeout_s: float, jobs: list[JobProcess], what: str):
    """Poll `check` (None: not yet) each second; its value, or fail with the last one."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last is not None and last[0]:
            return last[1]
        dead = [j.report() for j in jobs if not j.alive()]
        assert not dead, dead
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_prometheus_scrapes_a_crawl_and_agrees_with_the_topics(cfg, fresh_topics, tmp_path):
    assert PROMETHEUS.exists(), (
        f"{PROMETHEUS} is missing: install the Prometheus server with `./dev setup` "
        "(apt-get install prometheus)")
    # Two small sites that finish within seconds: robots.txt with a sitemap index, and
    # no robots.txt (404) with exact and near duplicate pages. No throttling, no traps.
    web = SyntheticWeb([Site("site0.test", 5, "rules", 0, 2, frozenset()),
                        Site("site1.test", 5, "missing", 0, 2, frozenset({"dups"}))])
    web.start()
    topic = dict(zip(TOPIC_KEYS, fresh_topics(*TOPIC_KEYS), strict=True))
    ports = {"frontier": free_port(), "fetcher": free_port()}
    overrides = [f"topics.{k}.name={n}" for k, n in topic.items()]
    overrides += synthetic_overrides(web, tmp_path, 0.3) + [
        "flink.restart_strategy=none", f"metrics.frontier_port={ports['frontier']}",
        f"metrics.fetcher_port={ports['fetcher']}"]
    run_cfg = load_config(env={}, overrides=overrides)
    jobs = [JobProcess(name, overrides, tmp_path / f"{name}.log")
            for name in ("frontier", "fetcher")]
    prom = consumer = None
    try:
        for job in jobs:
            job.start()
        prom = PrometheusServer(tmp_path / "prometheus", ports)
        # An IP-literal seed is refused at intake (a dead letter, urls_refused_address):
        # nothing connects to it.
        publish_seeds(run_cfg, [web.host_key(s) + "/" for s in web.site_list]
                      + ["http://127.0.0.9:9/"])
        consumer = KafkaConsumer(
            topic["completions"], topic["index"],
            bootstrap_servers=cfg["kafka.bootstrap_servers"], auto_offset_reset="earliest",
            enable_auto_commit=False, isolation_level="read_committed",
            consumer_timeout_ms=200)
        comps: list[dict] = []
        events: list[dict] = []

        def read_topics() -> int:
            for m in consumer:
                if m.topic == topic["completions"]:
                    if REG.writer_name(m.value) == "completion":  # not a links record
                        comps.append(REG.decode("completion", m.value))
                else:
                    events.append(REG.decode("index_event", m.value))
            return len(comps)

        # Quiet: every page of both sites indexed and no completion for 5 s (revisits
        # are a day away), and Prometheus has scraped the final values.
        site0 = web.host_key(web.site_list[0])
        quiet = {"n": -1, "since": time.monotonic()}

        def settled():
            n = read_topics()
            if n != quiet["n"]:
                quiet.update(n=n, since=time.monotonic())
            indexed = {e["url"] for e in events}
            done = {site0 + "/", *(f"{site0}/p/{i}" for i in range(5))} <= indexed
            stable = time.monotonic() - quiet["since"] >= 5
            fetched = total(prom, "fetcher", "outcome_fetches_total")
            # The frontier's series are scraped on their own schedule: a clean-clone CI
            # once read its index_events_total before its first scrape (None).
            counted = total(prom, "frontier", "index_events_total")
            return (done and stable and fetched == n and counted is not None,
                    (n, fetched, len(indexed), counted))

        wait_until(settled, 150, jobs, "a quiet crawl, every completion scraped")

        # (a) Fetches agree with the topics. The fetcher counts every completion it
        # writes, robots.txt and sitemap fetches and NOT_SENT included, and its sinks
        # are at-least-once without a restart here: per outcome class, fetches_total
        # equals the completions topic, and robots_fetches_total its ROBOTS records.
        # Index events are the accepted 2xx completions of pages (none is a duplicate
        # or stale in a run without faults or restarts), so the 2xx fetches are the
        # index events plus the 2xx robots.txt and sitemap fetches; every one of those
        # pages was parsed once.
        by_class = {c: 0 for c in OUTCOME_CLASSES}
        robots_by_class = {c: 0 for c in OUTCOME_CLASSES}
        for c in comps:
            cls = outcome_class(c["outcome"], c["http_status"])
            by_class[cls] += 1
            robots_by_class[cls] += c["kind"] == "ROBOTS"
        for cls in OUTCOME_CLASSES:
            assert total(prom, "fetcher", "outcome_fetches_total", outcome=cls) == \
                by_class[cls], cls
            assert total(prom, "fetcher", "outcome_robots_fetches_total", outcome=cls) == \
                robots_by_class[cls], cls
        ok_pages = [c for c in comps if c["outcome"] == "OK" and c["kind"] == "PAGE"]
        index_events = len(events)
        sitemaps_ok = sum(c["outcome"] == "OK" and c["kind"] == "SITEMAP" for c in comps)
        assert by_class["2xx"] > 0 and robots_by_class["2xx"] == 1  # site0's robots.txt
        assert prom.value(
            f'sum({OP}outcome_fetches_total{{job="fetcher",outcome="2xx"}})'
            f' - sum({OP}outcome_robots_fetches_total{{job="fetcher",outcome="2xx"}})'
        ) == index_events + sitemaps_ok
        assert len(ok_pages) == index_events
        assert total(prom, "frontier", "index_events_total") == index_events
        assert total(prom, "fetcher", "parse_seconds_count") == index_events
        parse_bucket = f'{OP}le_parse_seconds_bucket{{job="fetcher"}}'
        assert {s["metric"]["le"] for s in prom.query(parse_bucket)} == {
            *(str(b) for b in PARSE_BUCKETS_S), "+Inf"}
        assert total(prom, "fetcher", "le_parse_seconds_bucket", le="+Inf") == index_events
        assert total(prom, "fetcher", "parse_microseconds_sum") > 0
        assert total(prom, "fetcher", "parse_backlog") == 0
        # Objects are content-addressed in a fresh folder: each distinct body once.
        stored = {c["body_sha256"]: c["body_bytes"] for c in ok_pages}
        assert total(prom, "fetcher", "bytes_stored_total") == sum(stored.values()) > 0
        assert total(prom, "fetcher", "bytes_fetched_total") == sum(
            c["body_bytes"] or 0 for c in comps)

        # (b) The politeness self-check: one series per rule, all 0.
        breaches = prom.query(f'{OP}rule_politeness_breaches_total{{job="fetcher"}}')
        assert sorted(s["metric"]["rule"] for s in breaches) == ["gap", "in_flight",
                                                                 "retry_after"]
        assert total(prom, "fetcher", "rule_politeness_breaches_total") == 0

        # (c) The eligibility lag: every lease counted, cumulative buckets up to +Inf, and
        # histogram_quantile reads a percentile off them (as a dashboard would).
        lag_count = total(prom, "frontier", "priority_class_eligibility_lag_seconds_count")
        assert lag_count is not None and lag_count > 0
        bucket = f'{OP}priority_class_le_eligibility_lag_seconds_bucket{{job="frontier"}}'
        les = {s["metric"]["le"] for s in prom.query(bucket)}
        assert "+Inf" in les and len(les) >= 5, les
        assert total(prom, "frontier", "priority_class_le_eligibility_lag_seconds_bucket",
                     le="+Inf") == lag_count
        p99 = prom.value(f"histogram_quantile(0.99, sum by (le) ({bucket}))")
        assert p99 is not None and 0 <= p99 <= 86400

        # The frontier's size: both sites are hosts; every URL known and not leased
        # (nothing is in flight once quiet) is pending; no host is paused or in backoff.
        hosts = {c["host_key"] for c in comps}
        assert total(prom, "frontier", "frontier_hosts") == len(hosts) == 2
        assert total(prom, "frontier", "frontier_urls_pending") >= index_events
        assert total(prom, "frontier", "frontier_hosts_paused") == 0
        # Each page lease was granted under a robots.txt fetched within the minute (a
        # 404 for robots.txt counts as fetched: no restrictions).
        assert total(prom, "frontier", "robots_age_seconds_count") == total(
            prom, "frontier", "le_robots_age_seconds_bucket", le="60") > 0

        # (d) Every family each job exports is stored, from that job's target.
        for job, names in FAMILIES.items():
            found = {s["metric"]["__name__"] for s in prom.query(
                f'group by (__name__) ({{job="{job}",__name__=~"{OP}.*"}})')}
            missing = [n for n in names if OP + n not in found]
            assert not missing, (job, missing, sorted(found)[:80])
        seen = {k: v for k, v in by_class.items() if v}
        print(f"prometheus: {len(comps)} completions {seen}, "
              f"{index_events} index events, lag count {lag_count}, p99 {p99}")
    finally:
        if prom is not None:
            prom.stop()
        for job in jobs:
            job.stop()
        if consumer is not None:
            consumer.close()
        web.stop()
    assert prom.proc.returncode is not None  # no Prometheus left running
