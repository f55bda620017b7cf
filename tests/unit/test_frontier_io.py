"""Topic records ↔ frontier core: every record the frontier emits is valid Avro."""

from __future__ import annotations

from udfs.avro import load_examples, registry
from udfs.core.frontier import FrontierConfig, HostFrontier, Kind, Outcome
from udfs.frontier_io import discovered_records, fetch_result, index_event, intake, lease_record

REG = registry()


def test_intake_normalizes_regroups_and_flags_sitemaps():
    record = {"host_key": "http://wrong.example", "source": "ROBOTS_SITEMAP", "parent_url": None,
              "depth": 2, "redirect_hops": 1, "discovered_at_ms": 0, "links": [
                  {"url": "HTTP://A.example:80/x#f", "lastmod_ms": None, "priority": 0.7},
                  {"url": "https://b.example/y?utm_source=z", "lastmod_ms": 5, "priority": None},
                  {"url": "javascript:alert(1)", "lastmod_ms": None, "priority": None}]}
    groups, invalid = intake(record)
    assert set(groups) == {"http://a.example", "https://b.example"}
    a = groups["http://a.example"][0]
    assert a["url"] == "http://a.example/x" and a["kind"] is Kind.SITEMAP and a["depth"] == 2
    assert a["redirect_hops"] == 1 and a["priority"] == 0.7 and not a["is_seed"]
    assert groups["https://b.example"][0]["url"] == "https://b.example/y"
    assert invalid == ["javascript:alert(1)"]


def test_lease_completion_index_round_trip_through_avro():
    h = HostFrontier("http://h.example", FrontierConfig())
    h.discover("http://h.example/a", 0.0)
    robots = h.poll(0.0)
    REG.encode("lease", lease_record(robots))
    completion = {**load_examples(REG.latest("completion"))[2], "lease_id": robots.lease_id,
                  "url_id": robots.url_id, "url_version": robots.url_version,
                  "host_key": "http://h.example", "url": robots.url}
    res = h.complete(fetch_result(completion), 0.1)
    assert res.verdict.value == "accepted"
    page = h.poll(h.next_allowed_at)
    record = lease_record(page)
    assert REG.decode("lease", REG.encode("lease", record)) == record
    done = {**load_examples(REG.latest("completion"))[0], "lease_id": page.lease_id,
            "url_id": page.url_id, "url_version": page.url_version, "attempt": page.attempt,
            "url": page.url, "host_key": page.host_key}
    result = h.complete(fetch_result(done), page.issued_at + 1)
    assert result.index and fetch_result(done).outcome is Outcome.OK
    event = index_event(h.urls[page.url_id], done, result.change)
    assert event["event_id"] == f"{page.url_id}:{page.url_version}"
    assert REG.decode("index_event", REG.encode("index_event", event)) == event


def test_discovered_records_group_per_source_and_host():
    found = [("http://a.example/1", 0, 1, "REDIRECT"), ("http://a.example/2", 0, 1, "REDIRECT"),
             ("http://b.example/s.xml", 0, 0, "ROBOTS_SITEMAP")]
    recs = discovered_records(found, "http://h.example/old", 42)
    assert [(k, r["source"], len(r["links"])) for k, r in recs] == [
        ("http://a.example", "REDIRECT", 2), ("http://b.example", "ROBOTS_SITEMAP", 1)]
    for _, r in recs:
        REG.encode("discovered", r)
