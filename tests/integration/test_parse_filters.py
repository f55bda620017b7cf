"""A user's parse filters, from a module outside this package, in a real fetcher job
(MiniCluster, process mode, real Kafka, the synthetic web on loopback): they run in the
task's parser processes, a link they drop never reaches crawl.discovered and a link
they add does, and a filter that raises costs nothing but a dead letter and a count in
parse_filter_errors_total (the page's completion and links still go out)."""

from __future__ import annotations

import os
import textwrap

from kafka import KafkaProducer

from crawler.run import JobProcess
from crawler.testkit.synthetic_web import SyntheticWeb, build_sites
from tests.integration.conftest import free_port, metric, wait_for_metric
from tests.integration.test_fetcher_job import REG, _lease, _read, fetcher_overrides
from udfs.wire.records import found_records

FILTERS = textwrap.dedent('''
    from dataclasses import replace

    class DropLinks:
        def __init__(self, pattern):
            self.pattern = pattern
        def filter(self, url, parse, page):
            return replace(parse, links=tuple(u for u in parse.links
                                              if self.pattern not in u))

    class Fragile:
        def filter(self, url, parse, page):
            if url.endswith("/p/1"):
                raise KeyError("a bug in the filter")
            return parse

    class AddLink:
        """Adds /from-parse-filter (relative: resolved against the page)."""
        def filter(self, url, parse, page):
            return replace(parse, links=(*parse.links, "/from-parse-filter"))
''')


def test_user_parse_filters_in_the_fetcher_job(cfg, fresh_topics, tmp_path, monkeypatch):
    (tmp_path / "site_parse_filters.py").write_text(FILTERS)
    # Outside the package: the job (and so its parser processes) finds it the way a
    # user's module is found (PYTHONPATH here; installed, or -pyfs, on a cluster).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    web = SyntheticWeb(build_sites(6, seed=4))
    web.start()
    leases, comps, disc, dlq = fresh_topics("leases", "comps", "disc", "dlq")
    port = free_port()
    overrides = fetcher_overrides(web, tmp_path, (leases, comps, disc, dlq), port) + [
        "parse.workers=1",
        'parse.filters=["site_parse_filters:DropLinks pattern=/cal/", '
        '"site_parse_filters:Fragile", "site_parse_filters:AddLink"]']
    job = JobProcess("fetcher", overrides, tmp_path / "fetcher.log")
    job.start()
    try:
        # Two hosts, one page each: site0's /p/0 links to a /cal/ page; /p/1 of another
        # site is the page Fragile raises on.
        a, b = web.site_list[0], web.site_list[1]
        hk_a, hk_b = web.host_key(a), web.host_key(b)
        home, fragile = hk_a + "/p/0", hk_b + "/p/1"
        producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"])
        for lease_id, url, hk in (("A", home, hk_a), ("B", fragile, hk_b)):
            producer.send(leases, REG.encode("lease", _lease(url, hk, "PAGE", lease_id)),
                          key=hk.encode())
        producer.flush()

        got = _read(cfg, comps, "completion", lambda s: len(s) >= 2)
        by_lease = {rec["lease_id"]: rec for _, rec in got}
        assert by_lease["A"]["outcome"] == by_lease["B"]["outcome"] == "OK"
        # A page's URLs ride inside its completion (v4; few links here, so none spill
        # into records of their own).
        links: dict[str, list[str]] = {home: [], fragile: []}
        for rec in by_lease.values():
            for found in found_records(rec):
                links[found["parent_url"]].extend(u["url"] for u in found["links"])
        # The page without a filter error: /cal/ dropped, AddLink's link resolved and sent.
        assert not any("/cal/" in u for u in links[home]), links[home]
        assert hk_a + "/from-parse-filter" in links[home]
        assert any(u.startswith(hk_a + "/p/") for u in links[home])
        assert by_lease["A"]["links_count"] == len(links[home])
        # Fragile raised on /p/1: AddLink (after it) did not run; its links still went out.
        assert not any(u.endswith("/from-parse-filter") for u in links[fragile])
        assert any(u.startswith(hk_b + "/p/") for u in links[fragile])
        assert by_lease["B"]["links_count"] == len(links[fragile])

        letters = _read(cfg, dlq, "dead_letter", lambda s: len(s) >= 1, timeout_s=30.0)
        (letter,) = [rec for _, rec in letters]
        assert letter["stage"] == "fetcher.parse_filter"
        assert letter["error_type"] == "ParseFilterError"
        assert letter["url"] == fragile and letter["host_key"] == hk_b
        assert "Fragile raised KeyError" in letter["reason"]
        assert REG.decode("lease", letter["payload"])["lease_id"] == "B"
        samples = wait_for_metric(port, "parse_filter_errors_total", lambda v: v == 1,
                                  filter="Fragile")
        assert metric(samples, "parse_filter_errors_total", filter="DropLinks") == 0
        assert metric(samples, "parse_filter_errors_total", filter="AddLink") == 0
        assert metric(samples, "outcome_fetches_total", outcome="2xx") == 2
        # Only loopback was contacted, for the two pages.
        assert sorted(r.path for r in web.log) == ["/p/0", "/p/1"]
    finally:
        job.stop()
        web.stop()
