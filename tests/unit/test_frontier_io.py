"""Topic records ↔ frontier core: every record the frontier emits is valid Avro."""

from __future__ import annotations

import pytest

from udfs.config import load_config
from udfs.core.addresses import AddressPolicy
from udfs.core.frontier import FrontierConfig, HostFrontier, Kind, Outcome
from udfs.core.frontier.recent import RecentUrls
from udfs.core.records import DiscoverySource
from udfs.core.urls import UrlPolicy
from udfs.frontier.pipeline import (
    discovered_records,
    fetch_result,
    index_event,
    intake,
    lease_record,
)
from udfs.wire.avro import load_examples, registry
from udfs.wire.records import DiscoveredUrls, links_record, plain_link

REG = registry()


def test_intake_normalizes_regroups_and_flags_sitemaps():
    record = {"host_key": "http://wrong.example", "source": "ROBOTS_SITEMAP", "parent_url": None,
              "depth": 2, "redirect_hops": 1, "discovered_at_ms": 0, "links": [
                  {"url": "HTTP://A.example:80/x#f", "lastmod_ms": None, "priority": 0.7,
                   "changefreq": None},
                  {"url": "https://b.example/y?utm_source=z", "lastmod_ms": 5, "priority": None,
                   "changefreq": None},
                  {"url": "javascript:alert(1)", "lastmod_ms": None, "priority": None,
                   "changefreq": None}]}
    found = intake(record, UrlPolicy.from_names(load_config()["urls.drop_query_params"]))
    groups, invalid = found.groups, found.invalid
    assert set(groups) == {"http://a.example", "https://b.example"}
    a = groups["http://a.example"][0]
    assert a["url"] == "http://a.example/x" and a["kind"] is Kind.SITEMAP and a["depth"] == 2
    assert a["redirect_hops"] == 1 and a["priority"] == 0.7 and not a["is_seed"]
    assert groups["https://b.example"][0]["url"] == "https://b.example/y"
    assert invalid == ["javascript:alert(1)"]
    # The drop list is the caller's: without one, nothing is dropped.
    kept = intake(record).groups["https://b.example"][0]["url"]
    assert kept == "https://b.example/y?utm_source=z"


def test_intake_takes_a_url_it_passed_on_before_as_it_is():
    """A link the intake's memory holds (RecentUrls: normalized URLs only) is not
    normalized again; the result is the same as normalizing it."""
    policy = UrlPolicy.from_names(load_config()["urls.drop_query_params"])
    raw = ["HTTP://A.example:80/x#f", "http://a.example/x", "https://b.example/y?utm_source=z",
           "https://b.example/y", "http://a.example/%7euser/;jsessionid=1",
           "http://a.example/~user/", "javascript:alert(1)", "http://127.0.0.1/"]
    record = _links(*raw)
    address = AddressPolicy.from_networks([])
    recent = RecentUrls(100, ttl_s=600)
    first = intake(record, policy, address)
    for links in first.groups.values():
        for link in links:  # (two links here are one URL: its second passes no more)
            recent.passes(link["url"], 0.0)
    assert "http://a.example/x" in recent and "HTTP://A.example:80/x#f" not in recent
    again = intake(record, policy, address, normalized=recent)
    assert again == first
    # What the memory holds is taken as it is: a URL put there that normalizing would
    # change shows that the intake did not normalize it.
    odd = intake(_links("http://a.example/./x"), policy, address,
                 normalized={"http://a.example/./x"})
    assert odd.groups["http://a.example"][0]["url"] == "http://a.example/./x"


def _links(*urls: str, source: DiscoverySource = "LINK") -> DiscoveredUrls:
    record = links_record("", source, None, 0, 0, [plain_link(u) for u in urls])
    record["host_key"] = None  # an old producer's: the intake finds the hosts
    return record


# Every IP-literal form the WHATWG parser turns into a forbidden address.
FORBIDDEN_LITERALS = [
    ("http://127.0.0.1:8080/x", "loopback"), ("http://2130706433/", "loopback"),
    ("http://0x7f000001/", "loopback"), ("http://127.1/", "loopback"),
    ("http://0177.0.0.1/", "loopback"), ("http://127.0.0.2/", "loopback"),
    ("http://[::1]:8080/", "loopback"), ("http://[::ffff:127.0.0.1]/", "loopback"),
    ("http://[0:0:0:0:0:ffff:7f00:1]/", "loopback"), ("http://10.0.0.1/", "private"),
    ("http://167772161/", "private"), ("http://192.168.1.1/", "private"),
    ("http://172.16.5.4/", "private"), ("http://169.254.169.254/latest/", "cloud-metadata"),
    ("http://0xa9fea9fe/", "cloud-metadata"), ("http://[fd00:ec2::254]/", "cloud-metadata"),
    ("http://169.254.1.1/", "link-local"), ("http://[fe80::1]/", "link-local"),
    ("http://100.64.0.1/", "cgnat"), ("http://224.0.0.1/", "multicast"),
    ("http://[ff02::1]/", "multicast"), ("http://240.0.0.1/", "reserved"),
    ("http://192.0.2.1/", "reserved"), ("http://0.0.0.0/", "unspecified"),
    ("http://255.255.255.255/", "broadcast"), ("http://[fd12::1]/", "private"),
    ("http://[64:ff9b::a00:1]/", "private"), ("http://[2002:a00:1::]/", "private"),
]


@pytest.mark.parametrize("raw,cls", FORBIDDEN_LITERALS)
@pytest.mark.parametrize("source", ["SEED", "LINK", "SITEMAP", "REDIRECT", "ROBOTS_SITEMAP"])
def test_intake_refuses_forbidden_ip_literals_from_every_source(raw, cls, source):
    found = intake(_links(raw, "http://public.example/", source=source),
                   address_policy=AddressPolicy.from_networks([]))
    assert list(found.groups) == ["http://public.example"]
    ((url, reason),) = found.refused
    assert cls in reason and "://" in url


def test_intake_admits_allowed_or_public_literals_and_names():
    allow_loopback = AddressPolicy.from_networks(["127.0.0.0/8"])
    found = intake(_links("http://127.0.0.1:9/", "http://93.184.216.34/",
                          "http://[2606:4700::1]/", "http://localhost/"),
                   address_policy=allow_loopback)
    assert found.refused == [] and len(found.groups) == 4
    # A name is not judged here: its addresses are checked when resolved and connected to.
    assert intake(_links("http://localhost/"),
                  address_policy=AddressPolicy.from_networks([])).refused == []


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
    page = h.poll(h.pacer.next_allowed_at)
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
