"""The crawl's Grafana dashboard, as code: `python infra/monitoring/dashboard.py` writes
crawler-dashboard.json beside this file (committed; tests/infra checks it is current).

Plain dicts, no Grafana library: panels are listed once below (title, unit, queries)
and laid out two to a row in that order. Uids and panel ids are fixed, so a
re-import updates the same dashboard and links to a panel keep working.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("crawler-dashboard.json")
UID = "crawler-overview"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# Flink's Prometheus reporter prefixes every operator metric with its scope.
OP = "flink_taskmanager_job_task_operator_"
FETCHES = f"{OP}outcome_fetches_total"
LAG_BUCKET = f"{OP}priority_class_le_eligibility_lag_seconds_bucket"
EVENTS = f"{OP}event_frontier_events_total"
THROTTLED = '{outcome=~"429|503"}'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # or "stat"
    stack: bool = False
    thresholds: tuple[tuple[float | None, str], ...] = ((None, "green"),)
    extra: dict[str, Any] = field(default_factory=dict)


def q(expr: str, legend: str) -> Query:
    return Query(" ".join(expr.split()), legend)


def rate(metric: str, by: str, selector: str = "", window: str = "$__rate_interval") -> str:
    return f"sum by ({by}) (rate({metric}{selector}[{window}]))"


PANELS: tuple[Panel, ...] = (
    Panel("Politeness breaches (must be 0)",
          "The fetcher's self-check: requests that broke a host's in-flight limit, gap or "
          "Retry-After window, by rule. Anything but 0 is a bug (alert "
          "CrawlerPolitenessBreach).",
          "short",
          (q(f"sum by (rule) ({OP}rule_politeness_breaches_total)", "{{rule}}"),),
          kind="stat", thresholds=((None, "green"), (1, "red"))),
    Panel("429/503 share of fetches",
          "Share of fetches answered 429 or 503 (sites asking us to slow down), "
          "per fetcher job (alert Crawler429ShareRising above 5% and rising).",
          "percentunit",
          (q(f"{rate(FETCHES, 'job_name', THROTTLED)} / {rate(FETCHES, 'job_name')}",
             "{{job_name}}"),),
          thresholds=((None, "green"), (0.05, "orange"))),
    Panel("Fetch rate by outcome class",
          "Completed fetches per second by outcome class (robots.txt fetches included).",
          "reqps",
          (q(rate(FETCHES, "outcome"), "{{outcome}}"),),
          stack=True),
    Panel("Bytes fetched and requests started",
          "Body bytes received and newly stored per second, and requests sent per second.",
          "Bps",
          (q(f"sum(rate({OP}bytes_fetched_total[$__rate_interval]))", "bytes/s"),
           q(f"sum(rate({OP}bytes_stored_total[$__rate_interval]))", "bytes stored/s"),
           q(f"sum(rate({OP}requests_started_total[$__rate_interval]))", "requests/s")),
          extra={"overrides": [{
              "matcher": {"id": "byName", "options": "requests/s"},
              "properties": [{"id": "unit", "value": "reqps"},
                             {"id": "custom.axisPlacement", "value": "right"}]}]}),
    Panel("Eligibility lag p50 / p99 by priority class",
          "Seconds from a URL's due time to its lease (alert CrawlerEligibilityLagHigh "
          "when p99 is over 10 minutes).",
          "s",
          tuple(q(f"histogram_quantile({p}, sum by (priority_class, le) "
                  f"(rate({LAG_BUCKET}[$__rate_interval])))",
                  f"p{int(p * 100)} {{{{priority_class}}}}")
                for p in (0.5, 0.99)),
          thresholds=((None, "green"), (600, "red"))),
    Panel("Leases: grants, expiries, re-lets",
          "Leases per second the frontier granted (robots.txt leases apart), let expire "
          "and granted again after an expiry.",
          "ops",
          (q(rate(EVENTS, "event",
                  '{event=~"leases_granted|robots_leases|leases_expired|leases_relet"}'),
             "{{event}}"),)),
    Panel("Frontier: admissions, URL dedup, throttling",
          "URLs admitted, rediscoveries of known URLs (URL dedup hits), completions "
          "accepted, and hosts throttled by a 429/503.",
          "ops",
          (q(rate(EVENTS, "event",
                  '{event=~"urls_admitted|urls_known|completions_accepted|throttled"}'),
             "{{event}}"),)),
    Panel("Frontier: trap and budget refusals",
          "URLs refused by a trap rule (refused_<rule>) and budget events (host or global "
          "daily budget spent, leases deferred).",
          "ops",
          (q(rate(EVENTS, "event",
                  '{event=~"refused_.+|host_budget_exhausted|global_budget_exhausted'
                  '|budget_deferred"}'),
             "{{event}}"),),
          stack=True),
    Panel("Index events and duplicate rates",
          "Index events per second, and the share flagged byte-identical (exact) or "
          "SimHash-near to another URL's page.",
          "percentunit",
          (q(f"sum(rate({OP}exact_duplicates_total[$__rate_interval])) "
             f"/ sum(rate({OP}index_events_total[$__rate_interval]))", "exact duplicates"),
           q(f"sum(rate({OP}near_duplicates_total[$__rate_interval])) "
             f"/ sum(rate({OP}index_events_total[$__rate_interval]))", "near duplicates"),
           q(f"sum(rate({OP}index_events_total[$__rate_interval]))", "index events/s")),
          extra={"overrides": [{
              "matcher": {"id": "byName", "options": "index events/s"},
              "properties": [{"id": "unit", "value": "ops"},
                             {"id": "custom.axisPlacement", "value": "right"}]}]}),
    Panel("Dead letters by reason",
          "Records the frontier's intake sent to the dead-letter topic, per interval, by "
          "reason (alert CrawlerDeadLetters).",
          "short",
          (q(f"sum by (reason) (increase({OP}reason_dead_letters_total[$__rate_interval]))",
             "{{reason}}"),),
          stack=True),
    Panel("Frontier size",
          "Hosts the frontier holds, URLs not leased (resident or cold) and URLs in cold "
          "queues, summed over its subtasks (counted per host as it is touched; after a "
          "restore, from its next event or timer).",
          "short",
          (q(f"sum({OP}frontier_hosts)", "hosts"),
           q(f"sum({OP}frontier_urls_pending)", "URLs pending"),
           q(f"sum({OP}frontier_urls_cold)", "URLs in cold queues"))),
    Panel("Hosts in backoff, blocked by robots.txt 5xx, paused",
          "Hosts backing off after 429/503 or errors, hosts whose robots.txt is "
          "unreachable with no earlier copy (nothing else fetched), and hosts an "
          "operator paused (crawl host pause).",
          "short",
          (q(f"sum({OP}frontier_hosts_backoff)", "in backoff"),
           q(f"sum({OP}frontier_hosts_robots_blocked)", "robots.txt 5xx"),
           q(f"sum({OP}frontier_hosts_paused)", "paused"))),
    Panel("robots.txt: fetch outcomes and age at lease",
          "robots.txt fetches per second by outcome class, and the p99 age of the "
          "robots.txt a page lease was granted under (robots.cache_ttl_s bounds it).",
          "reqps",
          (q(rate(f"{OP}outcome_robots_fetches_total", "outcome"), "{{outcome}}"),
           q(f"histogram_quantile(0.99, sum by (le) "
             f"(rate({OP}le_robots_age_seconds_bucket[$__rate_interval])))", "age p99")),
          extra={"overrides": [{
              "matcher": {"id": "byName", "options": "age p99"},
              "properties": [{"id": "unit", "value": "s"},
                             {"id": "custom.axisPlacement", "value": "right"}]}]}),
    Panel("Parser: time per page and backlog",
          "p50/p99 time per HTML page in the parse stage (parser processes of each "
          "fetcher task), and pages fetched whose parse has not ended (bounded by "
          "parse.max_waiting per task).",
          "s",
          (q(f"histogram_quantile(0.5, sum by (le) "
             f"(rate({OP}le_parse_seconds_bucket[$__rate_interval])))", "p50"),
           q(f"histogram_quantile(0.99, sum by (le) "
             f"(rate({OP}le_parse_seconds_bucket[$__rate_interval])))", "p99"),
           q(f"sum({OP}parse_backlog)", "backlog")),
          extra={"overrides": [{
              "matcher": {"id": "byName", "options": "backlog"},
              "properties": [{"id": "unit", "value": "short"},
                             {"id": "custom.axisPlacement", "value": "right"}]}]}),
    Panel("Kafka consumer lag (pendingRecords)",
          "Records the jobs' Kafka sources have not read yet, by job and source (alert "
          "CrawlerConsumerLagGrowing when it keeps growing).",
          "short",
          (q(f"sum by (job_name, operator_name) ({OP}pendingRecords)",
             "{{job_name}} {{operator_name}}"),)),
    Panel("Checkpoints: duration and failures",
          "Duration of each job's last checkpoint, and checkpoints failed per interval "
          "(alert CrawlerCheckpointsFailing).",
          "ms",
          (q("max by (job_name) (flink_jobmanager_job_lastCheckpointDuration)",
             "duration {{job_name}}"),
           q("sum by (job_name) (increase(flink_jobmanager_job_numberOfFailedCheckpoints"
             "[$__rate_interval]))", "failed {{job_name}}"),
           q("sum by (job_name) (increase(flink_jobmanager_job_numberOfCompletedCheckpoints"
             "[$__rate_interval]))", "completed {{job_name}}")),
          extra={"overrides": [{
              "matcher": {"id": "byRegexp", "options": "^(failed|completed) .*"},
              "properties": [{"id": "unit", "value": "short"},
                             {"id": "custom.axisPlacement", "value": "right"}]}]}),
)

WIDTH, HEIGHT = 12, 8  # half of Grafana's 24-column grid


def panel_json(panel: Panel, panel_id: int) -> dict[str, Any]:
    """One panel; its id also fixes its place: two to a row, in PANELS order."""
    index = panel_id - 1
    steps = [{"color": color, "value": value} for value, color in panel.thresholds]
    defaults: dict[str, Any] = {"unit": panel.unit,
                                "thresholds": {"mode": "absolute", "steps": steps}}
    if panel.kind == "timeseries":
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                              "showPoints": "never",
                              "stacking": {"mode": "normal" if panel.stack else "none",
                                           "group": "A"}}
    options: dict[str, Any]
    if panel.kind == "stat":
        defaults["color"] = {"mode": "thresholds"}
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "colorMode": "background", "graphMode": "none", "textMode": "value_and_name"}
    else:
        options = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                   "tooltip": {"mode": "multi", "sort": "desc"}}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"x": (index % 2) * WIDTH, "y": (index // 2) * HEIGHT,
                    "w": WIDTH, "h": HEIGHT},
        "fieldConfig": {"defaults": defaults, "overrides": panel.extra.get("overrides", [])},
        "options": options,
        "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": t.expr,
                     "legendFormat": t.legend, "range": True}
                    for i, t in enumerate(panel.queries)],
    }


def dashboard() -> dict[str, Any]:
    """The whole dashboard, ready for Grafana's import or its dashboard sidecar."""
    return {
        "uid": UID,
        "title": "Crawler",
        "description": "The crawl's Flink jobs: fetches, politeness, frontier, index, "
                       "dead letters, Kafka lag, checkpoints (infra/monitoring).",
        "tags": ["crawler", "flink"],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,  # shared crosshair
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "refresh": 1,
            "regex": "",
            "options": [],
        }]},
        "annotations": {"list": []},
        "links": [],
        "panels": [panel_json(p, i) for i, p in enumerate(PANELS, start=1)],
    }


def render() -> str:
    """The committed file's exact text (sorted keys: diffs stay small)."""
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUT
    out.write_text(render(), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
