"""Offline checks of infra/monitoring: the alert rules (promtool), the dashboard (its
generator), and the metric names both use against the ones the jobs register.

promtool comes with Debian's `prometheus` package, which `./dev setup` installs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from udfs.core.selfcheck import BREACHES, OUTCOME_CLASSES
from udfs.frontier.metrics import LAG_BUCKETS_S

ROOT = Path(__file__).resolve().parents[2]
MON = ROOT / "infra" / "monitoring"
ALERTS = MON / "alerts.yml"
ALERTS_TEST = MON / "alerts_test.yml"
DASHBOARD_JSON = MON / "crawler-dashboard.json"
UDFS = ROOT / "udfs"

OP = "flink_taskmanager_job_task_operator_"
# The jobs' own metrics as Flink's Prometheus reporter names them: scope prefix, then
# each key-value group's key, then the metric. Value: (group key, metric) as the jobs
# register them (add_group(key, value).counter/gauge(metric)).
JOB_METRICS = {
    f"{OP}outcome_fetches_total": ("outcome", "fetches_total"),
    f"{OP}rule_politeness_breaches_total": ("rule", "politeness_breaches_total"),
    f"{OP}requests_started_total": (None, "requests_started_total"),
    f"{OP}bytes_fetched_total": (None, "bytes_fetched_total"),
    f"{OP}event_frontier_events_total": ("event", "frontier_events_total"),
    f"{OP}priority_class_le_eligibility_lag_seconds_bucket":
        ("le", "eligibility_lag_seconds_bucket"),
    f"{OP}priority_class_eligibility_lag_seconds_count":
        ("priority_class", "eligibility_lag_seconds_count"),
    f"{OP}reason_dead_letters_total": ("reason", "dead_letters_total"),
    f"{OP}index_events_total": (None, "index_events_total"),
    f"{OP}exact_duplicates_total": (None, "exact_duplicates_total"),
    f"{OP}near_duplicates_total": (None, "near_duplicates_total"),
    f"{OP}frontier_hosts": (None, "frontier_hosts"),
    f"{OP}frontier_urls_pending": (None, "frontier_urls_pending"),
    f"{OP}frontier_urls_cold": (None, "frontier_urls_cold"),
    f"{OP}frontier_hosts_backoff": (None, "frontier_hosts_backoff"),
    f"{OP}frontier_hosts_robots_blocked": (None, "frontier_hosts_robots_blocked"),
    f"{OP}frontier_hosts_paused": (None, "frontier_hosts_paused"),
    f"{OP}le_robots_age_seconds_bucket": ("le", "robots_age_seconds_bucket"),
    f"{OP}robots_age_seconds_count": (None, "robots_age_seconds_count"),
    f"{OP}outcome_robots_fetches_total": ("outcome", "robots_fetches_total"),
    f"{OP}bytes_stored_total": (None, "bytes_stored_total"),
    f"{OP}le_parse_seconds_bucket": ("le", "parse_seconds_bucket"),
    f"{OP}parse_seconds_count": (None, "parse_seconds_count"),
    f"{OP}parse_microseconds_sum": (None, "parse_microseconds_sum"),
    f"{OP}parse_backlog": (None, "parse_backlog"),
}
# Flink's own: checkpoint statistics of the JobManager, and the Kafka source's FLIP-33
# backlog gauge (flink-connector-kafka registers it on the source reader's group).
FLINK_METRICS = {
    "flink_jobmanager_job_numberOfFailedCheckpoints",
    "flink_jobmanager_job_numberOfCompletedCheckpoints",
    "flink_jobmanager_job_lastCheckpointDuration",
    f"{OP}pendingRecords",
}
KNOWN = set(JOB_METRICS) | FLINK_METRICS
METRIC = re.compile(r"\bflink_[A-Za-z0-9_]+")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not on PATH: run ./dev setup (Debian package prometheus)")
    return path


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD_JSON.read_text())
    return [t["expr"] for p in doc["panels"] for t in p["targets"]]


def udfs_source() -> str:
    return "\n".join(p.read_text() for p in sorted(UDFS.rglob("*.py")))


# -- alert rules -------------------------------------------------------------------


def test_promtool_checks_the_alert_rules():
    proc = subprocess.run([promtool(), "check", "rules", str(ALERTS)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


def test_promtool_unit_tests_of_the_alert_rules_pass():
    proc = subprocess.run([promtool(), "test", "rules", str(ALERTS_TEST)],
                          capture_output=True, text=True, timeout=120, cwd=MON)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_promtool_tests_catch_a_broken_rule(tmp_path):
    # The same tests against rules whose breach alert can never fire must fail.
    broken = ALERTS.read_text().replace(
        "flink_taskmanager_job_task_operator_rule_politeness_breaches_total\n          ) > 0",
        "flink_taskmanager_job_task_operator_rule_politeness_breaches_total\n          ) > 1e9")
    assert broken != ALERTS.read_text()
    (tmp_path / "alerts.yml").write_text(broken)
    shutil.copy(ALERTS_TEST, tmp_path / "alerts_test.yml")
    proc = subprocess.run([promtool(), "test", "rules", "alerts_test.yml"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode != 0
    assert "CrawlerPolitenessBreach" in proc.stdout + proc.stderr


def test_the_alerts_are_the_ones_the_operators_are_told_about():
    names = [r["alert"] for r in alert_rules()]
    assert names == ["CrawlerPolitenessBreach", "CrawlerEligibilityLagHigh",
                     "Crawler429ShareRising", "CrawlerConsumerLagGrowing",
                     "CrawlerCheckpointsFailing", "CrawlerDeadLetters"]
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert len(rule["annotations"]["summary"]) > 20, rule["alert"]
        assert len(rule["annotations"]["description"]) > 150, rule["alert"]
    (breach,) = [r for r in alert_rules() if r["alert"] == "CrawlerPolitenessBreach"]
    assert breach["labels"]["severity"] == "critical" and "for" not in breach


def test_every_alert_has_a_firing_and_a_quiet_test_case():
    doc = yaml.safe_load(ALERTS_TEST.read_text())
    assert doc["rule_files"] == ["alerts.yml"]
    firing: dict[str, int] = {}
    quiet: dict[str, int] = {}
    for case in doc["tests"]:
        for t in case.get("alert_rule_test", []):
            assert "exp_alerts" in t, f"{t['alertname']} at {t['eval_time']}: say exp_alerts"
            into = firing if t["exp_alerts"] else quiet
            into[t["alertname"]] = into.get(t["alertname"], 0) + 1
    names = {r["alert"] for r in alert_rules()}
    assert set(firing) == names, names - set(firing)
    assert set(quiet) == names, names - set(quiet)


def test_test_series_use_the_metric_names_the_rules_read():
    doc = yaml.safe_load(ALERTS_TEST.read_text())
    series = {METRIC.match(s["series"]).group(0)
              for case in doc["tests"] for s in case["input_series"]}
    used = {m for r in alert_rules() for m in METRIC.findall(r["expr"])}
    assert used <= series, used - series
    assert series <= KNOWN, series - KNOWN


# -- dashboard ---------------------------------------------------------------------


def test_the_committed_dashboard_is_what_dashboard_py_generates(tmp_path):
    out = tmp_path / "dashboard.json"
    proc = subprocess.run([sys.executable, str(MON / "dashboard.py"), str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == DASHBOARD_JSON.read_text(), \
        "crawler-dashboard.json is stale: run python infra/monitoring/dashboard.py"


def test_the_dashboard_has_stable_ids_a_datasource_variable_and_its_panels():
    doc = json.loads(DASHBOARD_JSON.read_text())
    assert doc["uid"] == "crawler-overview"
    (var,) = doc["templating"]["list"]
    assert (var["name"], var["type"], var["query"]) == ("datasource", "datasource", "prometheus")
    ids = [p["id"] for p in doc["panels"]]
    assert ids == list(range(1, len(ids) + 1))
    for p in doc["panels"]:
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])
        assert p["targets"] and p["description"], p["title"]
    # No two panels overlap on the grid.
    cells = [(x, y) for p in doc["panels"] for g in [p["gridPos"]]
             for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])]
    assert len(cells) == len(set(cells))
    titles = " | ".join(p["title"] for p in doc["panels"]).lower()
    for topic in ["politeness breaches", "429/503", "outcome", "eligibility lag", "leases",
                  "bytes fetched", "duplicate", "dead letters", "pendingrecords",
                  "checkpoints", "refusals"]:
        assert topic in titles, topic


def test_every_dashboard_query_parses_as_promql(tmp_path):
    # promtool has no expression checker: wrap each query in a recording rule.
    rules = [{"record": f"dashboard:query_{i}",
              "expr": expr.replace("$__rate_interval", "5m")}
             for i, expr in enumerate(dashboard_exprs())]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    proc = subprocess.run([promtool(), "check", "rules", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- metric names, both files against the jobs -----------------------------------------


def used_metrics() -> dict[str, set[str]]:
    return {"alerts.yml": {m for r in alert_rules() for m in METRIC.findall(r["expr"])},
            "crawler-dashboard.json": {m for e in dashboard_exprs() for m in METRIC.findall(e)}}


def test_every_metric_name_in_alerts_and_dashboard_is_known():
    for where, names in used_metrics().items():
        assert names, where
        assert names <= KNOWN, f"{where}: {sorted(names - KNOWN)}"
    # The dashboard shows every metric the jobs export, bar the histograms' counts and sum.
    shown = used_metrics()["crawler-dashboard.json"]
    assert set(JOB_METRICS) - shown == {f"{OP}priority_class_eligibility_lag_seconds_count",
                                        f"{OP}robots_age_seconds_count",
                                        f"{OP}parse_seconds_count",
                                        f"{OP}parse_microseconds_sum"}


def test_the_known_job_metrics_are_the_ones_the_jobs_register():
    # A rename in the operators must show up here, not as an empty panel.
    source = udfs_source()
    for name, (key, metric) in JOB_METRICS.items():
        assert f'"{metric}"' in source, name
        if key is not None:
            assert re.search(rf'add_group\(\s*"{key}"', source), name


def label_values(exprs: list[str], label: str) -> set[str]:
    """Values a selector matches exactly or lists in an =~ alternation of plain names."""
    found: set[str] = set()
    for expr in exprs:
        for op, value in re.findall(rf'\b{label}\s*(=~|=)\s*"([^"]*)"', expr):
            parts = value.split("|") if op == "=~" else [value]
            found |= {p for p in parts if re.fullmatch(r"[A-Za-z0-9_+]+", p)}
    return found


def test_label_values_in_the_queries_are_ones_the_jobs_emit():
    exprs = [r["expr"] for r in alert_rules()] + dashboard_exprs()
    assert label_values(exprs, "outcome") <= set(OUTCOME_CLASSES)
    assert "429" in label_values(exprs, "outcome")
    assert label_values(exprs, "rule") <= set(BREACHES)
    events = label_values(exprs, "event")
    counted = {name for part in (UDFS / "core" / "frontier").glob("*.py")
               for name in re.findall(r'_count\("(\w+)"\)', part.read_text())}
    assert events and events <= counted, events - counted
    # The lag alert's threshold is a bucket boundary: a quantile past it is exact enough.
    assert 600 in LAG_BUCKETS_S and "> 600" in alert_rules()[1]["expr"]
    test_doc = yaml.safe_load(ALERTS_TEST.read_text())
    les = {m for case in test_doc["tests"] for s in case["input_series"]
           for m in re.findall(r'\ble="([^"]+)"', s["series"])}
    assert les == {str(b) for b in LAG_BUCKETS_S} | {"+Inf"}
