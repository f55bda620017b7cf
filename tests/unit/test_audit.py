"""The fetch audit trail: records, objects, day partitions, the reader's de-duplication,
and the writer's promise — no crash, restore or replay loses or double-counts a fetch."""

from __future__ import annotations

import copy
import datetime as dt
import gzip
import json
import os
import random

import pytest
from pyflink.common import Row

from udfs.config import load_config
from udfs.core.audit import (
    FIELDS,
    audit_objects,
    audit_record,
    day_of,
    day_prefixes,
    decode_records,
    dedupe,
    describe,
    fetches,
    history,
    object_name,
)
from udfs.storage.bodies import LocalStore
from udfs.wire.avro import load_examples, registry
from udfs.wire.records import COMPLETIONS, DISCOVERED, links_record, plain_link

REG = registry()
EXAMPLES = load_examples(REG.latest("completion"))
DAY_MS = 86_400_000
# 2026-12-01T00:00:00Z
D1 = int(dt.datetime(2026, 12, 1, tzinfo=dt.UTC).timestamp() * 1000)


def completion(url: str = "https://example.com/a", at_ms: int = D1 + 1000, **kw) -> dict:
    return {**EXAMPLES[0], "url": url, "fetched_at_ms": at_ms, **kw}


def rec(offset: int, at_ms: int = D1 + 1000, partition: int = 0, url: str =
        "https://example.com/a", **kw) -> dict:
    return audit_record(completion(url, at_ms, lease_id=f"L-{offset}", **kw),
                        "crawl.completions", partition, offset)


# -- the record -------------------------------------------------------------------------


def test_record_keeps_what_an_operator_asks_and_not_the_body():
    robots = EXAMPLES[2]  # a robots.txt completion carries its body
    r = audit_record(robots, "crawl.completions", 3, 42)
    assert robots["body"] and "body" not in r and "simhash" not in r
    assert {k: r[k] for k in FIELDS} == {k: robots[k] for k in FIELDS}
    assert (r["topic"], r["partition"], r["offset"]) == ("crawl.completions", 3, 42)
    for field in ("url", "url_id", "url_version", "attempt", "lease_id", "host_key",
                  "outcome", "http_status", "fetched_at_ms", "fetch_duration_ms",
                  "body_sha256", "object_key", "etag", "last_modified", "error"):
        assert field in r
    assert len(json.dumps(r)) < 1000  # compact


def test_every_field_is_a_field_of_the_completion_schema():
    names = {f["name"] for f in REG.latest("completion").schema["fields"]}
    assert set(FIELDS) <= names


# -- day partitions and object names -------------------------------------------------------


def test_day_is_the_utc_day_of_the_fetch():
    assert day_of(D1) == "2026-12-01"
    assert day_of(D1 - 1) == "2026-11-30"
    assert day_of(D1 + DAY_MS - 1) == "2026-12-01"
    assert day_prefixes(D1 / 1000 + 5, 3) == [
        "audit/day=2026-12-01/", "audit/day=2026-11-30/", "audit/day=2026-11-29/"]


def test_object_name_is_day_topic_partition_offsets_and_digest():
    name = object_name("2026-12-01", "crawl.completions", 3, 100, 150, b"x")
    assert name.startswith("audit/day=2026-12-01/crawl.completions/"
                           "p00003-o00000000000000000100-o00000000000000000150-")
    assert name.endswith(".jsonl.gz") and len(name.rsplit("-", 1)[1]) == len("0" * 12) + 9
    assert object_name("2026-12-01", "crawl.completions", 3, 100, 150, b"y") != name


def test_a_flush_writes_one_object_per_day_in_offset_order():
    records = [rec(7, D1 + DAY_MS + 5), rec(5, D1 - 10), rec(6, D1 + 10), rec(4, D1 + 20)]
    objects = audit_objects(records)
    assert [n.split("/")[1] for n, _ in objects] == ["day=2026-11-30", "day=2026-12-01",
                                                     "day=2026-12-02"]
    name, data = objects[1]
    assert "-o00000000000000000004-o00000000000000000006-" in name
    assert [r["offset"] for r in decode_records(data)] == [4, 6]
    assert gzip.decompress(data).count(b"\n") == 2  # JSON lines


def test_objects_are_deterministic():
    records = [rec(i, D1 + i) for i in range(20)]
    shuffled = random.Random(1).sample(records, len(records))
    assert audit_objects(records) == audit_objects(shuffled) == audit_objects(
        copy.deepcopy(records))


# -- reading: one entry per Kafka record, one line per fetch -------------------------------


def test_overlapping_objects_of_a_replay_count_each_record_once():
    records = [rec(i, D1 + i * 10) for i in range(100, 201)]
    first_run = audit_objects(records[:51])  # flushed by age at 150, then a crash
    replay = audit_objects(records[:80]) + audit_objects(records[80:])  # cut elsewhere
    got = history([d for _, d in first_run + replay + first_run], "https://example.com/a")
    assert [f["offset"] for f in got] == list(range(100, 201))
    assert all(f["deliveries"] == 1 for f in got)


def test_same_offset_in_a_recreated_topic_is_another_record():
    a, b = rec(0, D1), rec(0, D1 + 5)
    b["lease_id"] = "L-other"
    assert len(dedupe([a, b, a])) == 2


def test_a_completion_delivered_twice_is_one_fetch_with_two_deliveries():
    first, again = rec(10, D1), rec(11, D1)
    again["lease_id"] = first["lease_id"]
    retry = rec(12, D1 + 60_000, attempt=3)
    got = fetches(dedupe([again, first, retry]))
    assert [(f["offset"], f["deliveries"]) for f in got] == [(10, 2), (12, 1)]
    assert "(delivered 2 times)" in describe(got[0])


def test_history_is_the_urls_fetches_oldest_first():
    data = [d for _, d in audit_objects(
        [rec(1, D1 + 50), rec(2, D1 + 10, url="https://example.com/b"), rec(3, D1 + 20)])]
    got = history(data, "https://example.com/a")
    assert [f["offset"] for f in got] == [3, 1]
    assert history(data, "https://example.com/none") == []
    line = describe(got[0])
    assert line.startswith("2026-12-01T00:00:00.020Z  PAGE  OK  200  v7  attempt 2")
    assert "body raw/2c/" in line and 'etag "abd"' in line


# -- the writer: a crash, a restore from an older checkpoint, a replay ---------------------


class Task:
    """AuditWriter as a Flink task runs it: keyed state in dicts (snapshot = checkpoint),
    processing-time timers on a virtual clock, one key per Kafka partition."""

    def __init__(self, cfg, store_dir, state=None, timers=None):
        from udfs.frontier.audit import AuditWriter, partition_key

        self.partition_key = partition_key
        self.state = state if state is not None else {"map": {}, "value": {}}
        self.timers = set(timers or ())
        self.now_ms, self.key = D1, None
        self.fn = AuditWriter(dict(load_config(env={}, overrides=[
            *cfg, "storage.backend=local", f"storage.local_dir={store_dir}"]).data))
        self.fn.open(self)

    # runtime context
    def get_map_state(self, descriptor):
        task = self

        class S:
            def _m(self):
                return task.state["map"].setdefault(task.key, {})

            def put(self, k, v):
                self._m()[k] = v

            def items(self):
                return list(self._m().items())

            def clear(self):
                task.state["map"].pop(task.key, None)
        return S()

    def get_state(self, descriptor):
        task = self

        class S:
            def value(self):
                return task.state["value"].get(task.key)

            def update(self, v):
                task.state["value"][task.key] = v

            def clear(self):
                task.state["value"].pop(task.key, None)
        return S()

    def get_metrics_group(self):
        counts = self.counts = {}

        class C:
            def __init__(self, name):
                self.name = name

            def inc(self, n=1):
                counts[self.name] = counts.get(self.name, 0) + n

        class G:
            def counter(self, name):
                return C(name)
        return G()

    # context and timer service
    def timer_service(self):
        return self

    def current_processing_time(self):
        return self.now_ms

    def register_processing_time_timer(self, ts):
        self.timers.add((ts, self.key))

    def checkpoint(self):
        return copy.deepcopy(self.state), set(self.timers)

    def read(self, row):
        self.key = self.partition_key(row)
        self.fn.process_element1(row, self)

    def advance(self, ms):
        until = self.now_ms + ms
        while self.timers and min(self.timers)[0] <= until:
            ts, self.key = min(self.timers)
            self.timers.discard((ts, self.key))
            self.now_ms = ts
            self.fn.on_timer(ts, self)
        self.now_ms = until


def kafka_log(n: int, partitions: int = 2) -> list[Row]:
    """n records across partitions: completions, a few fetched just before midnight,
    some unreadable, one delivered twice; and pages' URLs, which the fetcher sends on
    the completions topic before their completion (not fetches: never audited)."""
    rows, offsets = [], [0] * partitions
    for i in range(n):
        p = i % partitions
        if i % 17 == 5:
            value = b"garbage"
        elif i % 13 == 4:
            value = REG.encode("discovered", links_record(
                "example.com", "LINK", f"https://example.com/{i % 7}", 1, D1,
                [plain_link("https://example.com/x")]))
        else:
            value = REG.encode("completion", completion(
                f"https://example.com/{i % 7}", D1 - 30_000 + i * 700, lease_id=f"L-{i}"))
        rows.append(Row(b"k", value, "crawl.completions", p, offsets[p]))
        offsets[p] += 1 + (i % 3 == 0)  # transaction markers leave gaps
    rows.append(Row(b"k", rows[10][1], "crawl.completions", rows[10][3], offsets[rows[10][3]]))
    return rows


def trail(store_dir) -> list[dict]:
    store = LocalStore(store_dir)
    return dedupe(r for k in store.list_objects("audit/")
                  for r in decode_records(store.get_object(k)))


@pytest.mark.parametrize("seed", range(12))
def test_no_crash_or_restore_loses_or_doubles_an_entry(tmp_path, seed):
    rnd = random.Random(seed)
    cfg = [f"audit.flush_records={rnd.choice([1, 3, 10, 1000])}",
           f"audit.flush_s={rnd.choice([0.5, 2.0, 60.0])}"]
    log = kafka_log(120)
    readable = [r for r in log if COMPLETIONS.wrote(REG, r[1])]
    task = Task(cfg, tmp_path)
    checkpoints = [(0, task.checkpoint())]
    pos, crashes = 0, 0
    while pos < len(log):
        task.read(log[pos])
        pos += 1
        task.advance(rnd.choice([0, 10, 300, 900]))
        if rnd.random() < 0.15:
            checkpoints.append((pos, task.checkpoint()))
        # A crash (at least one a run): restore from one of the retained checkpoints.
        if crashes < 4 and (rnd.random() < 0.05 or (crashes == 0 and pos == 60)):
            crashes += 1
            pos, (state, timers) = rnd.choice(checkpoints[-3:])
            task = Task(cfg, tmp_path, copy.deepcopy(state), timers)
            task.now_ms += rnd.choice([0, 5000])
    task.advance(120_000)  # the last buffer's timer
    got = trail(tmp_path)
    assert sorted((r["partition"], r["offset"]) for r in got) == sorted(
        (r[3], r[4]) for r in readable)
    by_offset = {(r[3], r[4]): REG.decode("completion", bytes(r[1])) for r in readable}
    assert all(r["lease_id"] == by_offset[(r["partition"], r["offset"])]["lease_id"]
               for r in got)
    # The duplicate delivery of one completion: two records, one fetch.
    assert len(fetches(got)) == len(readable) - 1


def test_pages_urls_on_the_completions_topic_are_passed_over(tmp_path):
    """The URLs the fetcher sends before a completion are neither audited nor counted
    as unreadable completions (only the garbage is)."""
    task = Task(["audit.flush_records=1000", "audit.flush_s=5"], tmp_path)
    log = kafka_log(60, partitions=1)
    assert any(DISCOVERED.wrote(REG, r[1]) for r in log)
    for row in log:
        task.read(row)
    task.advance(10_000)
    assert task.counts.get("audit_unreadable_completions", 0) == \
        sum(1 for r in log if r[1] == b"garbage")
    assert len(trail(tmp_path)) == sum(1 for r in log if COMPLETIONS.wrote(REG, r[1]))


def test_the_buffer_waits_in_state_until_it_is_full_or_due(tmp_path):
    task = Task(["audit.flush_records=3", "audit.flush_s=5"], tmp_path)
    log = [r for r in kafka_log(12, partitions=1) if COMPLETIONS.wrote(REG, r[1])]
    task.read(log[0])
    task.read(log[1])
    assert trail(tmp_path) == [] and len(task.state["map"]["crawl.completions#0"]) == 2
    task.read(log[2])  # full: written at once
    assert len(trail(tmp_path)) == 3 and task.state["map"] == {} and task.state["value"] == {}
    task.read(log[3])
    task.advance(4999)
    assert len(trail(tmp_path)) == 3
    task.advance(1)  # due 5 s after it arrived
    assert len(trail(tmp_path)) == 4
    task.read(log[4])
    task.read(log[5])
    task.read(log[6])  # written when full; its timer, when it fires, finds nothing to do
    task.advance(10_000)
    assert len(trail(tmp_path)) == 7


# -- crawl audit --------------------------------------------------------------------------


def test_crawl_audit_prints_the_history_of_the_normalized_url(tmp_path, capsys, monkeypatch):
    import time

    from crawler.cli import main

    for name in list(os.environ):
        if name.startswith("CRAWL__") or name == "CRAWL_CONFIG":
            monkeypatch.delenv(name)
    store = LocalStore(tmp_path / "objects")
    now_ms = int(time.time() * 1000)
    records = [rec(1, now_ms - 3 * DAY_MS), rec(2, now_ms - 1000),
               rec(3, now_ms - 500, url="https://example.com/b")]
    for name, data in audit_objects(records):
        store.put_object(name, data)
    args = ["--set", f"storage.local_dir={tmp_path / 'objects'}"]
    # Normalized as the frontier does: case, default port, fragment, a tracking parameter.
    assert main(["audit", "HTTPS://Example.COM:443/a?utm_source=x#top", *args]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "https://example.com/a: 2 fetches recorded"
    assert len(out) == 3 and all("OK  200" in line for line in out[1:])
    assert main(["audit", "https://example.com/a", "--days", "2", "--json", *args]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["url"] == "https://example.com/a"
    assert [f["offset"] for f in doc["fetches"]] == [2]
    assert main(["audit", "https://example.com/never", *args]) == 1
    assert capsys.readouterr().out == "https://example.com/never: 0 fetches recorded\n"


def test_crawl_audit_says_in_one_line_when_storage_cannot_be_read(capsys, monkeypatch):
    from crawler.cli import main

    for name in list(os.environ):
        if name.startswith("CRAWL__") or name == "CRAWL_CONFIG":
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # Nothing listens on this loopback port: the S3 client's connection is refused.
    assert main(["audit", "https://example.com/", "--set", "storage.backend=s3",
                 "--set", "s3.endpoint_url=http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("crawl audit: cannot read the audit trail in s3://crawl: ")
    assert len(err.splitlines()) == 1
