"""A small crawl (both jobs, real Kafka, the S3 server, the synthetic web on loopback)
with parse.max_links=1, then:

* every index event names its WARC record: one S3 GET with Range of [offset,
  offset+length) of the named object is one whole gzip'd response record of that URL,
  whose payload digest is the stored body's; pywb's indexer indexes the published files
  as we do;
* `crawl reparse` with the default max_links, run while the fetcher is stopped, sends
  the links the crawl did not keep to crawl.discovered, with no request to the web
  server, no completion and no index event; the frontier leases the new URLs."""

from __future__ import annotations

import io
import os
import time
import uuid

import pytest
from kafka import KafkaConsumer
from kafka.admin import NewTopic

from crawler.cli import main as crawl
from crawler.run import JobProcess, publish_seeds, synthetic_overrides
from crawler.testkit.synthetic_web import Site, SyntheticWeb
from tests.integration.conftest import STARTUP_S, free_port
from udfs.config import TOPIC_KEYS, load_config
from udfs.core.parse import parse_html
from udfs.storage.bodies import open_store
from udfs.storage.warc import parse_cdxj, sha256_b32
from udfs.wire.avro import registry
from udfs.wire.records import found_records

REG = registry()


def read_all(cfg, topic: str, schema: str) -> list[dict]:
    """The records of `topic` written with `schema` (the completions topic also holds
    the URLs pages gave)."""
    consumer = KafkaConsumer(topic, bootstrap_servers=cfg["kafka.bootstrap_servers"],
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             isolation_level="read_committed", consumer_timeout_ms=1500)
    try:
        return [REG.decode(schema, m.value) for m in consumer
                if REG.writer_name(m.value) == schema]
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def crawled(cfg, tmp_path_factory):
    """The crawl, quiet, its fetcher stopped (the frontier still running)."""
    tmp = tmp_path_factory.mktemp("warcloc")
    web = SyntheticWeb([Site("loc0.test", 10, "missing", 0, 2, frozenset())])
    web.start()
    suffix = uuid.uuid4().hex[:8]
    topics = {k: f"test.loc-{k}.{suffix}" for k in TOPIC_KEYS}
    from crawler.stack.local import LocalStack

    admin = LocalStack(cfg).admin()
    admin.create_topics([NewTopic(t, 1, 1) for t in topics.values()])
    settings = [f"topics.{k}.name={n}" for k, n in topics.items()]
    settings += synthetic_overrides(web, tmp, 0.2) + [
        "storage.backend=s3", f"warc.prefix=warc/test-{suffix}/", "warc.max_file_age_s=2",
        f"local.state_dir={tmp / 'state'}", "flink.restart_strategy=none"]
    run_cfg = load_config(env={}, overrides=settings)
    jobs = {name: JobProcess(name, [*settings, "parse.max_links=1",
                                    f"metrics.frontier_port={free_port()}",
                                    f"metrics.fetcher_port={free_port()}"],
                             tmp / f"{name}.log") for name in ("frontier", "fetcher")}
    store = open_store(run_cfg)
    try:
        for job in jobs.values():
            job.start()
        publish_seeds(run_cfg, [web.host_key(web.site_list[0]) + "/"])
        # Quiet: index events unchanged for 4 s, and every event's file published.
        deadline, seen, since = time.monotonic() + STARTUP_S + 60, -1, time.monotonic()
        while True:
            assert time.monotonic() < deadline, \
                ["the crawl did not settle", *(j.report() for j in jobs.values())]
            assert all(j.alive() for j in jobs.values()), [j.report() for j in jobs.values()]
            events = read_all(cfg, topics["index"], "index_event")
            if len(events) != seen:
                seen, since = len(events), time.monotonic()
            published = set(store.list_objects(f"warc/test-{suffix}/"))
            if events and time.monotonic() - since >= 4 and \
                    {e["warc_filename"] for e in events} <= published:
                break
            time.sleep(1)
        jobs["fetcher"].stop()
        yield {"cfg": cfg, "run_cfg": run_cfg, "settings": settings, "topics": topics,
               "web": web, "store": store, "events": events, "tmp": tmp,
               "prefix": f"warc/test-{suffix}/", "frontier": jobs["frontier"]}
    finally:
        for job in jobs.values():
            job.stop()
        web.stop()
        admin.delete_topics(list(topics.values()))
        admin.close()
        keys = list(store.list_objects(f"warc/test-{suffix}/"))
        if keys:
            store.client.delete_objects(Bucket=cfg["s3.bucket"],
                                        Delete={"Objects": [{"Key": k} for k in keys]})


def test_each_index_event_reads_back_its_record_with_one_ranged_get(crawled):
    from warcio.archiveiterator import ArchiveIterator

    store, events = crawled["store"], crawled["events"]
    assert len({e["event_id"] for e in events}) == len(events) >= 2
    for e in events:
        assert e["warc_filename"].startswith(crawled["prefix"]), e
        resp = store.client.get_object(
            Bucket=crawled["cfg"]["s3.bucket"], Key=e["warc_filename"],
            Range=f"bytes={e['warc_offset']}-{e['warc_offset'] + e['warc_length'] - 1}")
        member = resp["Body"].read()
        assert len(member) == e["warc_length"]
        records = []
        for rec in ArchiveIterator(io.BytesIO(member)):
            records.append((rec.rec_headers.get_header("WARC-Type"),
                            rec.rec_headers.get_header("WARC-Target-URI"),
                            rec.rec_headers.get_header("WARC-Payload-Digest"),
                            rec.content_stream().read()))
        [(kind, uri, digest, payload)] = records  # one whole record, nothing after it
        assert (kind, uri) == ("response", e["url"])
        assert digest == sha256_b32(hex_digest=e["body_sha256"])
        assert payload == store.get_body(e["object_key"])


def test_our_cdxj_equals_pywbs_index_of_the_published_files(crawled, tmp_path):
    from tests.unit.test_warc import pywb_index

    store = crawled["store"]
    files = [k for k in store.list_objects(crawled["prefix"]) if k.endswith(".warc.gz")]
    assert files
    for key in files:
        local = tmp_path / key.rsplit("/", 1)[-1]
        local.write_bytes(store.get_object(key))
        ours = parse_cdxj(store.get_object(key[: -len(".warc.gz")] + ".cdxj"))
        assert ours and ours == pywb_index(local)


def test_reparse_sends_the_links_the_crawl_did_not_keep_without_a_request(
        crawled, capsys, monkeypatch):
    cfg, topics, web = crawled["cfg"], crawled["topics"], crawled["web"]
    for name in list(os.environ):
        if name.startswith("CRAWL__") or name == "CRAWL_CONFIG":
            monkeypatch.delenv(name)
    before = {t: len(read_all(cfg, topics[t], s)) for t, s in
              [("completions", "completion"), ("index", "index_event")]}
    first = read_all(cfg, topics["discovered"], "discovered")
    # The links the crawl kept: the fetcher sent them with the pages' completions.
    # (inside them since completion v4; as records of their own before one when too many)
    kept = {link["url"] for d in read_all(cfg, topics["completions"], "discovered")
            if d["source"] == "LINK" for link in d["links"]}
    kept |= {link["url"] for c in read_all(cfg, topics["completions"], "completion")
             for d in found_records(c) if d["source"] == "LINK" for link in d["links"]}
    assert kept
    requests = len(web.log)

    flags = [a for s in crawled["settings"] for a in ("--set", s)]
    assert crawl(["reparse", "--dry-run", *flags]) == 0  # (max_links: the default)
    assert "would send" in capsys.readouterr().out
    assert len(read_all(cfg, topics["discovered"], "discovered")) == len(first)
    assert crawl(["reparse", *flags]) == 0
    out = capsys.readouterr().out
    assert "parsed; " in out and "sent to " + topics["discovered"] in out, out

    assert len(web.log) == requests  # the reparse asked the web server nothing
    # Every link of every indexed page, as the parser sees the served bytes.
    site = web.site_list[0]
    expect: set[str] = set()
    for e in crawled["events"]:
        path = e["url"].split(str(web.port), 1)[1]
        expect |= set(parse_html(web.body_for(site, path), e["url"]).links)
    again = read_all(cfg, topics["discovered"], "discovered")[len(first):]
    sent = {link["url"] for d in again for link in d["links"]}
    assert all(d["source"] == "LINK" for d in again)
    assert sent == expect and sent - kept, (sent, kept)
    # No completion, no index event: the frontier's index stays one event per version.
    assert len(read_all(cfg, topics["completions"], "completion")) == before["completions"]
    events = read_all(cfg, topics["index"], "index_event")
    assert len(events) == before["index"] == len({e["event_id"] for e in events})
    # The links the crawl had not kept entered the frontier: it leases some of them.
    new = sent - kept - {e["url"] for e in crawled["events"]}
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        assert crawled["frontier"].alive()
        leased = {le["url"] for le in read_all(cfg, topics["leases"], "lease")}
        if leased & new:
            break
        time.sleep(1)
    assert leased & new, (new, leased)
