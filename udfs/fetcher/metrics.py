"""The fetcher job's metrics, in Flink's metric groups (exported to Prometheus)."""

from __future__ import annotations

from typing import Any

from udfs.core.parsefilters import filter_names
from udfs.core.selfcheck import BREACHES, OUTCOME_CLASSES, PolitenessSelfCheck, outcome_class
from udfs.fetcher.pipeline import PARSE_BUCKETS_S, PageStats
from udfs.wire.records import Completion


class FetcherMetrics:
    """The fetcher's metrics: fetches and robots.txt fetches by outcome class, bytes
    fetched and stored, requests started, the politeness self-check's breaches by
    rule (it must read 0), the parse time per page as a histogram, the pages
    waiting to be parsed, the parses cut short by a limit, by kind, and the pages on
    which a parse filter raised, by filter (parse.filters: a fixed set). Totals kept
    here and exported as gauges: the engine's thread counts them, and PyFlink reads
    gauges on its own thread at each bundle's end (counters there are thread-bound).
    Label sets are fixed: no per-host series."""

    def __init__(self, group: Any, parse_filters: list[str], selfcheck: PolitenessSelfCheck,
                 warc: Any = None) -> None:
        self.selfcheck = selfcheck
        self.outcomes = dict.fromkeys(OUTCOME_CLASSES, 0)
        self.robots_outcomes = dict.fromkeys(OUTCOME_CLASSES, 0)
        self.fetched_bytes = 0
        self.pages = PageStats()
        for name in OUTCOME_CLASSES:
            outcome = group.add_group("outcome", name)
            outcome.gauge("fetches_total", lambda name=name: self.outcomes[name])
            outcome.gauge("robots_fetches_total", lambda name=name: self.robots_outcomes[name])
        # A Prometheus histogram from gauges: cumulative _bucket{le} (+Inf: every page)
        # and _count; the sum in microseconds, as gauges carry integers only.
        for i, le in enumerate((*(str(b) for b in PARSE_BUCKETS_S), "+Inf")):
            group.add_group("le", le).gauge(
                "parse_seconds_bucket", lambda i=i: self.pages.buckets[i])
        group.gauge("parse_seconds_count", lambda: self.pages.parsed)
        group.gauge("parse_microseconds_sum", lambda: self.pages.parse_us)
        group.gauge("parse_backlog", lambda: self.pages.backlog)
        for kind in self.pages.limit_hits:
            group.add_group("kind", kind).gauge(
                "parse_limit_hits_total", lambda kind=kind: self.pages.limit_hits[kind])
        for name in filter_names(parse_filters):
            group.add_group("filter", name).gauge(
                "parse_filter_errors_total",
                lambda name=name: self.pages.filter_errors.get(name, 0))
        group.gauge("bytes_stored_total", lambda: self.pages.stored_bytes)
        for rule in BREACHES:
            group.add_group("rule", rule).gauge(
                "politeness_breaches_total", lambda rule=rule: self.selfcheck.breaches[rule])
        group.gauge("requests_started_total", lambda: self.selfcheck.starts)
        group.gauge("bytes_fetched_total", lambda: self.fetched_bytes)
        if warc is not None:
            w = warc.stats
            group.gauge("warc_records_total", lambda: w.records)
            group.gauge("warc_revisits_total", lambda: w.revisits)
            group.gauge("warc_files_published_total", lambda: w.files_published)
            group.gauge("warc_bytes_published_total", lambda: w.bytes_published)
            group.gauge("warc_write_microseconds_sum", lambda: w.write_us)

    def count(self, completion: Completion) -> None:
        """One completion: its outcome class and its bytes."""
        cls = outcome_class(completion["outcome"], completion["http_status"])
        self.outcomes[cls] += 1
        if completion["kind"] == "ROBOTS":
            self.robots_outcomes[cls] += 1
        self.fetched_bytes += completion["body_bytes"] or 0

