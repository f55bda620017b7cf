"""`crawl status`'s pieces: the reporter's text, percentiles from buckets, rates, lag
arithmetic, the screen, and how a run is found."""

from __future__ import annotations

import math
import os

import pytest

from crawler.run import Progress
from crawler.runs import find_run, record_run
from crawler.status import (
    PREFIX,
    by_label,
    lag_table,
    le_bound,
    live_part,
    metrics_summary,
    parse_metrics,
    quantile,
    render,
    total,
)

P = PREFIX
TEXT = f"""\
# HELP {P}outcome_fetches_total fetches_total (scope: taskmanager_job_task_operator_outcome)
# TYPE {P}outcome_fetches_total gauge
{P}outcome_fetches_total{{job_name="crawl fetcher",outcome="2xx",subtask_index="0",}} 10.0
{P}outcome_fetches_total{{job_name="crawl fetcher",outcome="2xx",subtask_index="1",}} 5.0
{P}outcome_fetches_total{{job_name="crawl fetcher",outcome="404_410",subtask_index="0",}} 2.0
{P}rule_politeness_breaches_total{{rule="gap",subtask_index="0",}} 0.0
{P}index_events_total{{subtask_index="0",}} 7.0
{P}index_events_total{{subtask_index="1",}} 1.0
{P}reason_dead_letters_total{{reason="InvalidUrl",subtask_index="0",}} 3.0
{P}event_frontier_events_total{{event="leases_granted",subtask_index="0",}} 20.0
{P}frontier_hosts{{subtask_index="0",}} 4.0
{P}frontier_hosts{{subtask_index="1",}} 3.0
{P}priority_class_eligibility_lag_seconds_count{{priority_class="normal",}} 10.0
""" + "".join(
    f'{P}priority_class_le_eligibility_lag_seconds_bucket{{le="{le}",priority_class="normal",}}'
    f" {n}\n" for le, n in (("1", 4.0), ("5", 8.0), ("30", 10.0), ("_Inf", 10.0)))


def test_the_reporter_text_is_parsed_and_summed_over_subtasks():
    s = parse_metrics(TEXT)
    assert by_label(s, "outcome_fetches_total", "outcome") == {"2xx": 15.0, "404_410": 2.0}
    assert total(s, "index_events_total") == 8.0
    assert total(s, "frontier_hosts") == 7.0
    assert total(s, "frontier_urls_cold") is None  # not exported: n/a, not 0
    assert by_label(s, "rule_politeness_breaches_total", "rule") == {"gap": 0.0}
    assert parse_metrics("# only comments\n\ngarbage line here\n") == {}


def test_le_labels_as_flink_exports_them():
    assert le_bound("_Inf") == math.inf and le_bound("+Inf") == math.inf
    assert le_bound("0_25") == 0.25 and le_bound("30") == 30.0


def test_quantile_interpolates_within_the_bucket_as_histogram_quantile_does():
    buckets = [(1.0, 4.0), (5.0, 8.0), (30.0, 10.0), (math.inf, 10.0)]
    assert quantile(0.5, buckets) == pytest.approx(1.0 + 4.0 * (5 - 4) / 4)  # 2.0
    assert quantile(0.25, buckets) == pytest.approx(2.5 / 4)  # the first bucket from 0
    assert quantile(0.99, buckets) == pytest.approx(5 + 25 * (9.9 - 8) / 2)
    # in the +Inf bucket: the highest finite bound
    assert quantile(0.99, [(1.0, 1.0), (math.inf, 10.0)]) == 1.0
    assert quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]) is None
    assert quantile(0.5, []) is None
    with pytest.raises(ValueError):
        quantile(0.5, [(1.0, 3.0)])


def _scrape(fetched: float, indexed: float, lag: tuple[float, float, float, float]) -> dict:
    les = ("1", "5", "30", "_Inf")
    buckets = "".join(
        f'{P}priority_class_le_eligibility_lag_seconds_bucket{{le="{le}",'
        f'priority_class="normal",}} {n}\n' for le, n in zip(les, lag, strict=True))
    return parse_metrics(f'{P}outcome_fetches_total{{outcome="2xx",}} {fetched}\n'
                         f"{P}index_events_total{{}} {indexed}\n" + buckets)


def test_rates_come_from_two_scrapes_and_lag_from_the_window_between_them():
    before = _scrape(10, 8, (4, 8, 10, 10))
    now = _scrape(16, 8, (4, 8, 16, 16))  # six leases since, all in (5, 30]
    m = metrics_summary(now, before, 2.0)
    assert m["fetches"] == {"total": {"2xx": 16.0}, "rate": {"2xx": 3.0}}
    assert m["index_events"] == {"total": 8.0, "rate": 0.0}
    lag = m["eligibility_lag"]["normal"]
    # The count is the window's: the six leases the percentiles come from.
    assert lag["over"] == "last 2 s" and 5 < lag["p50_s"] <= 30 and lag["count"] == 6
    one = metrics_summary(parse_metrics(TEXT), None, 0.0)
    assert one["fetches"]["rate"] is None and one["fetches"]["total"]["2xx"] == 15.0
    assert one["eligibility_lag"]["normal"]["over"] == "since start"
    assert one["eligibility_lag"]["normal"]["p50_s"] == pytest.approx(2.0)
    assert one["frontier"]["hosts"] == 7.0 and one["frontier"]["urls_pending"] is None
    assert one["dead_letters"] == {"InvalidUrl": 3.0}
    # counters that went back (a job restarted between the scrapes): no rate, not < 0;
    # and no lease between them: the lag since the start
    back = metrics_summary(before, now, 2.0)
    assert back["fetches"]["rate"] is None
    assert back["eligibility_lag"]["normal"]["over"] == "since start"


def test_consumer_lag_is_end_minus_committed_summed_over_partitions():
    ends = {("t", 0): 100, ("t", 1): 50, ("u", 0): 7}
    committed = {("t", 0): 90, ("t", 1): 50}
    table = lag_table(ends, committed, {("u", 0): 2})
    assert table["t"] == {"end": 150, "committed": 140, "lag": 10}
    # no commit yet: everything from the beginning is still to read
    assert table["u"] == {"end": 7, "committed": None, "lag": 5}


STATUS = {
    "source": {"kind": "run", "where": "crawl run 1 (pid 2)", "run_id": "1",
               "topics": {"index": "run-1.crawl.index", "discovered": "run-1.crawl.discovered",
                          "leases": "run-1.crawl.leases"}},
    "jobs": {"frontier": {"state": "RUNNING", "uptime_s": 61.0,
                          "checkpoint": {"id": 7, "age_s": 1.5, "duration_ms": 12},
                          "checkpoints_failed": 0},
             "fetcher": {"state": "STOPPED", "checkpoint": None}},
    "metrics_ports": [9250, 9251], "metrics_answered": [9250, 9251],
    "metrics": metrics_summary(parse_metrics(TEXT), None, 0.0),
    "consumer_lag": {"frontier": {"group": "crawl.frontier", "topics": {
        "run-1.crawl.discovered": {"end": 5, "committed": 3, "lag": 2}}},
        "fetcher": {"group": "crawl.fetcher", "topics": {
            "run-1.crawl.leases": {"end": 4, "committed": None, "lag": 4}}}},
    "busiest_hosts": {"window_s": 60, "records": 9, "hosts": [["http://a.test", 6]]},
}


def test_the_screen_shows_each_section_and_n_a_for_what_is_missing():
    text = render(STATUS)
    lines = text.splitlines()
    assert len(lines) <= 24
    assert "frontier  RUNNING" in text and "checkpoint #7 1.5 s ago" in text
    assert "fetcher   STOPPED" in text and "no completed checkpoint" in text
    assert "2xx 15" in text and "404_410 2" in text
    assert "hosts 7" in text and "urls pending n/a" in text
    assert "politeness breaches 0" in text and "dead letters 3 (InvalidUrl 3)" in text
    assert "  frontier  discovered 2" in text and "  fetcher   leases 4 (no commit)" in text
    assert "leases in the last 60 s" in text and "http://a.test 6" in text
    blind = render({**STATUS, "metrics": None, "consumer_lag": {"error": "Kafka down"}})
    assert "metrics   n/a (no reporter answered on 127.0.0.1 ports 9250, 9251)" in blind
    cluster = render({**STATUS, "source": {**STATUS["source"], "kind": "cluster"},
                      "metrics": None, "metrics_ports": []})
    assert "no reporter ports known: this cluster's configuration has no " \
        "cluster.metrics_ports" in cluster
    assert "consumer lag  n/a (Kafka down)" in blind


def test_the_live_line_takes_lag_and_checkpoint_age_from_the_same_collection():
    assert live_part(STATUS) == "lag 6  ckpt 2s ago"
    assert live_part({"consumer_lag": {"error": "x"}, "jobs": {}}) == ""
    p = Progress(started=0.0)
    assert p.line(None, live_part(STATUS)).endswith("refused 0  lag 6  ckpt 2s ago")
    assert p.line(0).endswith("politeness violations 0")


def test_a_run_records_its_rest_ports_for_other_terminals(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    record_run(run_dir, "r1", ["a=1"], [], rest_ports={"frontier": 4001, "fetcher": 4002})
    run = find_run(tmp_path, "r1")
    assert run is not None and run.pid == os.getpid()
    assert dict(run.rest_ports) == {"frontier": 4001, "fetcher": 4002}
    record_run(run_dir, "r1", [], [])  # the older call, without ports
    assert dict(find_run(tmp_path, None).rest_ports) == {}
