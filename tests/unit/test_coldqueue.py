"""Bounded memory for a hot host: the cold queue, and a host past max_resident_urls
driven on a virtual clock through the same save/load path the frontier job uses."""

from __future__ import annotations

import io
import pickle
from dataclasses import replace

import pytest

from udfs.core.coldqueue import ColdQueue, DictKeyValue
from udfs.core.frontier import (
    FetchResult,
    FrontierConfig,
    HostFrontier,
    Kind,
    Outcome,
    UrlStatus,
    url_from_saved,
)

H = "http://hot.test"
CAP = 100


class CountingKV(DictKeyValue):
    def __init__(self) -> None:
        super().__init__()
        self.puts = 0

    def put(self, key, value):
        self.puts += 1
        super().put(key, value)


def test_cold_queue_returns_buckets_in_due_order_and_writes_each_segment_once():
    segments, urls = CountingKV(), DictKeyValue()
    q = ColdQueue(segments, urls, bucket_s=100.0, segment_size=1000)
    for i in range(2500):
        q.add(f"late{i}", {"n": i}, due=250.0)
    for i in range(10):
        q.add(f"early{i}", {"n": i}, due=5.0)
    q.flush()
    assert len(q) == 2510 and q.earliest() == 0.0
    assert segments.puts == 4  # 3 segments of bucket 2, 1 of bucket 0: one write each
    assert q.take(5, until=50.0) == [(f"early{i}", {"n": i}) for i in range(5)]
    got = q.take(1000, until=50.0)  # bucket 2 starts at 200: not yet
    assert [uid for uid, _ in got] == [f"early{i}" for i in range(5, 10)]
    assert q.earliest() == 200.0
    got = q.take(3000, until=300.0)
    assert [uid for uid, _ in got] == [f"late{i}" for i in range(2500)]  # FIFO in a bucket
    assert len(q) == 0 and q.earliest() is None and len(segments) == 0


def cfg(**kw) -> FrontierConfig:
    base = FrontierConfig(max_resident_urls=CAP, cold_bucket_s=600.0, lease_timeout_s=60.0)
    return replace(base, host=replace(base.host, min_gap_s=0.01, max_in_flight=4,
                                      duration_factor=0.0), **kw)


class Slot:
    """A ValueState: the host's robots.txt body; counts its writes."""

    def __init__(self) -> None:
        self.stored = None
        self.writes = 0

    def value(self):
        return self.stored

    def update(self, value) -> None:
        self.writes += 1
        self.stored = pickle.loads(pickle.dumps(value))  # what keyed state gives back


class Stores:
    """The frontier job's five pieces of keyed state, as dicts."""

    def __init__(self) -> None:
        self.host = None
        self.urls, self.resident, self.segments = DictKeyValue(), DictKeyValue(), DictKeyValue()
        self.robots = Slot()

    def save(self, h: HostFrontier) -> None:
        self.host = pickle.loads(pickle.dumps(
            h.save(self.urls, self.resident, self.segments, self.robots)))

    def load(self, c: FrontierConfig) -> HostFrontier:
        return HostFrontier.load(H, self.host, c, self.urls, self.resident, self.segments,
                                 self.urls.items, self.resident.keys, self.robots)


def answer(lease, outcome=Outcome.OK) -> FetchResult:
    if lease.kind is Kind.ROBOTS:
        return FetchResult(lease.lease_id, lease.url_id, lease.url_version, Outcome.OK,
                           Kind.ROBOTS, lease.attempt, http_status=200,
                           robots_body=b"User-agent: *\nAllow: /\n")
    return FetchResult(lease.lease_id, lease.url_id, lease.url_version, outcome, lease.kind,
                       lease.attempt, http_status=200, body_sha256="b" * 64,
                       text_sha256=lease.url_id * 4)


def crawl(stores: Stores, c: FrontierConfig, now: float, until: float, *,
          rebuild_every: int = 0, max_steps: int = 200_000):
    """Lease and answer on a virtual clock, saving after each step like the job does;
    returns (page leases, largest resident window seen, now)."""
    h = stores.load(c)
    leases, largest, steps = [], 0, 0
    while now < until and steps < max_steps:
        steps += 1
        lease = h.poll(now)
        if lease is not None:
            h.complete(answer(lease), now)
            if lease.kind is Kind.PAGE:
                leases.append(lease)
        largest = max(largest, len(h.urls))
        assert h.check_invariants() == []
        stores.save(h)
        if rebuild_every and steps % rebuild_every == 0:
            h = stores.load(c)  # dropped from the cache, rebuilt from keyed state
        wake = h.next_wake(now)
        if lease is None:
            if wake is None:
                break
            now = max(now + 0.001, wake)
    return leases, largest, now, h


@pytest.mark.parametrize("rebuild_every", [0, 37])
def test_a_host_with_many_urls_stays_within_its_window_and_leases_each_url_once(rebuild_every):
    c, stores = cfg(), Stores()
    h = stores.load(c)
    urls = [f"{H}/p/{i}" for i in range(3000)]
    for url in urls:
        assert h.discover(url, 0.0, checked=True).accepted
    assert len(h.urls) == CAP and h.window.big and len(h.window.store) == 3000 - CAP
    assert h.discover(urls[-1], 0.0, checked=True).reason == "known"  # a cold URL is known
    assert h.pending() == 3000
    stores.save(h)
    assert len(stores.resident) == CAP and len(stores.urls) == 3000

    leases, largest, now, h = crawl(stores, c, 0.0, until=3600.0,
                                    rebuild_every=rebuild_every)
    assert largest <= CAP
    assert sorted(lease.url for lease in leases) == sorted(urls)  # each exactly once
    assert all(lease.url_version == 1 for lease in leases)
    # Fetched URLs wait for their recrawl in the cold queue, not in memory.
    assert len(h.urls) < CAP and len(h.window.store) + len(h.urls) == 3000
    assert {url_from_saved(saved).status for saved in stores.urls.values()} == \
        {UrlStatus.FETCHED}


def test_recrawls_come_back_from_the_cold_queue_when_due():
    c, stores = cfg(), Stores()
    h = stores.load(c)
    for i in range(300):
        h.discover(f"{H}/p/{i}", 0.0, checked=True)
    stores.save(h)
    first, _, now, h = crawl(stores, c, 0.0, until=600.0)
    assert len(first) == 300
    interval = c.recrawl.max_interval_s
    again, largest, _, h = crawl(stores, c, now + interval, until=now + interval + 600.0)
    assert sorted(lease.url for lease in again) == sorted(lease.url for lease in first)
    assert all(lease.url_version == 2 for lease in again) and largest <= CAP


def test_a_small_host_never_touches_the_cold_queue():
    c, stores = cfg(), Stores()
    h = stores.load(c)
    for i in range(CAP - 10):
        h.discover(f"{H}/p/{i}", 0.0, checked=True)
    stores.save(h)
    leases, _, _, h = crawl(stores, c, 0.0, until=600.0)
    assert len(leases) == CAP - 10 and not h.window.big
    assert len(stores.segments) == 0 and len(stores.resident) == 0


def test_cold_urls_that_are_due_displace_resident_ones_that_are_not():
    # A window full of URLs not due for a day must not starve cold URLs due now.
    c, stores = cfg(), Stores()
    h = stores.load(c)
    t = 0.0
    for i in range(CAP):
        h.discover(f"{H}/later/{i}", t, checked=True)
    for u in h.urls.values():
        h.queue.enqueue(u, t + 86400.0)  # (white-box: as if a robots re-check were pending)
    for i in range(50):
        h.discover(f"{H}/now/{i}", t, checked=True)
    assert len(h.window.store) == 50
    stores.save(h)
    leases, largest, _, _ = crawl(stores, c, t, until=t + 300.0)
    assert {lease.url for lease in leases} == {f"{H}/now/{i}" for i in range(50)}
    assert largest <= CAP


class _NoClassesUnpickler(pickle.Unpickler):
    """Loads builtin data only: any class reference (ours or not) fails."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"state refers to the class {module}.{name}")


def _reload(value):
    data = pickle.dumps(value)  # what PICKLED_BYTE_ARRAY keyed state stores
    assert b"udfs" not in data
    return _NoClassesUnpickler(io.BytesIO(data)).load()


def test_keyed_state_holds_builtin_values_only_and_restores():
    """A savepoint must not name a class of ours (renaming UrlStatus or moving a module
    would make it unreadable): the host value, every URL, resident ids and cold segments
    are builtin data, and the host restores from them."""
    c, stores = cfg(), Stores()
    h = stores.load(c)
    for i in range(3 * CAP):
        h.discover(f"{H}/p/{i}", 0.0, checked=True)
    robots = h.poll(0.0)
    h.complete(answer(robots), 0.5)
    page = h.poll(h.pacer.next_allowed_at)
    stores.save(h)
    assert h.window.big and page is not None and page.lease_id in h.in_flight
    plain = Stores()
    plain.host = _reload(stores.host)
    for src, dst in ((stores.urls, plain.urls), (stores.resident, plain.resident),
                     (stores.segments, plain.segments)):
        dst.update({k: _reload(v) for k, v in src.items()})
    r = plain.load(c)
    assert r.in_flight[page.lease_id].kind is Kind.PAGE and r.gate.state.status.value == "RULES"
    assert r.urls[page.url_id].status.value == "LEASED" and r.check_invariants() == []
    assert r.complete(answer(r.in_flight[page.lease_id]), 2.0).verdict.value == "accepted"


def test_state_written_with_enum_members_still_restores():
    """The previous build stored enum members (pickled by class path): still readable."""
    from dataclasses import fields

    from udfs.core.frontier import URL_FIELD_NAMES

    c, stores = cfg(), Stores()
    h = stores.load(c)
    h.discover(f"{H}/a", 0.0, checked=True)
    lease = h.poll(0.0)  # robots.txt, in flight
    old = h.host_state()
    old["in_flight"] = {k: {f.name: getattr(v, f.name) for f in fields(v)}
                        for k, v in h.in_flight.items()}
    old["robots"] = {f.name: getattr(h.gate.state, f.name) for f in fields(h.gate.state)}
    old_urls = {uid: dict(zip(URL_FIELD_NAMES, (getattr(u, n) for n in URL_FIELD_NAMES),
                              strict=True)) for uid, u in h.urls.items()}
    assert any(isinstance(v["status"], UrlStatus) for v in old_urls.values())
    r = HostFrontier.restore({**old, "urls": old_urls}, c)
    assert r.in_flight[lease.lease_id].kind is Kind.ROBOTS and r.check_invariants() == []
    assert all(isinstance(u.status, UrlStatus) for u in r.urls.values())


def test_robots_body_is_kept_apart_and_written_only_when_it_changes():
    """The host's value (rewritten on every call) holds no robots.txt body: that is in
    a value of its own, written when the body changes, and read back on a rebuild."""
    c, stores = cfg(), Stores()
    h = stores.load(c)
    h.discover(f"{H}/private/x", 0.0, checked=True)
    h.discover(f"{H}/a", 0.0, checked=True)
    robots = h.poll(0.0)
    assert robots.kind is Kind.ROBOTS
    body = "User-agent: *\nDisallow: /private/\n" + "# filler\n" * 20_000
    h.complete(FetchResult(robots.lease_id, robots.url_id, robots.url_version, Outcome.OK,
                           Kind.ROBOTS, robots.attempt, http_status=200,
                           robots_body=body.encode()), 0.0)
    stores.save(h)
    assert "body" not in stores.host["robots"]
    assert stores.robots.stored == (body,) and stores.robots.writes == 1
    assert len(pickle.dumps(stores.host)) < 5_000 < len(body)
    for step in range(3):  # calls that do not touch robots.txt write only the host's value
        lease = h.poll(1.0 + step)
        if lease is not None:
            h.complete(answer(lease), 1.0 + step)
        stores.save(h)
    assert stores.robots.writes == 1
    r = stores.load(c)  # rebuilt from keyed state (after an eviction or a restore)
    assert r.gate.state.body == body and r.added_fields == frozenset()
    assert r.check_invariants() == []
    assert r.gate.parsed is not None  # the rules in force again
    assert not r.gate.parsed.is_allowed("FlinkCrawler", f"{H}/private/x")
    assert r.gate.parsed.is_allowed("FlinkCrawler", f"{H}/a")
    stores.save(r)
    assert stores.robots.writes == 1  # read back, unchanged: not written again


def test_state_with_the_robots_body_in_the_host_value_restores_and_moves_it():
    """State written before the body was kept apart: restored from the host's value,
    moved to its own value at the next write, with no added field reported."""
    c, stores = cfg(), Stores()
    h = stores.load(c)
    h.discover(f"{H}/a", 0.0, checked=True)
    robots = h.poll(0.0)
    h.complete(answer(robots), 0.0)
    old = pickle.loads(pickle.dumps(h.save(stores.urls, stores.resident, stores.segments)))
    assert old["robots"]["body"] == "User-agent: *\nAllow: /\n"  # no slot: in the value
    stores.host = old
    r = stores.load(c)
    assert r.gate.state.body == "User-agent: *\nAllow: /\n" and r.added_fields == frozenset()
    assert stores.robots.writes == 0
    stores.save(r)
    assert "body" not in stores.host["robots"]
    assert stores.robots.stored == ("User-agent: *\nAllow: /\n",)
    assert stores.load(c).gate.state.body == "User-agent: *\nAllow: /\n"
