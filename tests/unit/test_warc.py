"""WARC records, file names, rolling, the CDXJ index, the writer's publishing, and
`crawl warc` on a local store (udfs/storage/warc.py, udfs/storage/warc_writer.py,
crawler/warc_tool.py).
HTTP only on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web

from crawler import warc_tool
from crawler.cli import main
from crawler.testkit.warcref import warcio_record
from udfs.core.addresses import AddressPolicy
from udfs.core.fetching import DnsCache, FetchLimits
from udfs.core.frontier import Kind, Outcome
from udfs.fetcher.client import fetch, make_session
from udfs.storage.bodies import LocalStore
from udfs.storage.warc import (
    PROFILE_IDENTICAL,
    PROFILE_NOT_MODIFIED,
    Exchange,
    Fetch,
    RollPolicy,
    build_records,
    cdxj,
    file_name,
    index_name,
    parse_cdxj,
    parse_file_name,
    read_record,
    record_id,
    sha256_b32,
    surt,
)
from udfs.storage.warc_writer import WarcWriter, index_members

T = 1_764_567_890_123  # ms
PAGE = b"<html><body><a href='/x'>x</a></body></html>"


def exchange(status=200, payload=PAGE, reason="OK", headers=None, **kw) -> Exchange:
    return Exchange("GET", "/a?b=1", [("Host", "a.test"), ("User-Agent", "Bot/1")],
                    "HTTP/1.1", status, reason,
                    headers or [("Content-Type", "text/html; charset=utf-8"),
                                ("Set-Cookie", "a=1"), ("set-cookie", "b=2")],
                    payload, **kw)


def one(url="http://a.test/a?b=1", lease="L-1", attempt=1, ms=T, **kw) -> Fetch:
    return Fetch(url, lease, 3, attempt, ms, exchange(**kw))


def parsed(member: bytes):
    rec, payload = read_record(member)
    return rec.rec_headers, rec.http_headers, payload


def writer(tmp_path: Path, max_bytes=10**9, age=300.0, clock=None, **kw):
    store = LocalStore(tmp_path / "store")
    w = WarcWriter(store, prefix="warc/", file_prefix="CC-MAIN",
                   policy=RollPolicy(max_bytes, age), temp_dir=str(tmp_path / "tmp"),
                   host=kw.pop("host", "box-t0-abc123"), clock=clock or (lambda: T / 1000),
                   **kw)
    return store, w


# -- records ----------------------------------------------------------------------------------


def test_a_fetch_is_a_response_and_a_request_record_with_headers_as_received():
    resp, req = build_records(one())
    assert (resp.rec_type, req.rec_type) == ("response", "request")
    h, http, payload = parsed(resp.data)
    assert h.protocol == "WARC/1.1" and h.get_header("WARC-Type") == "response"
    assert h.get_header("WARC-Target-URI") == "http://a.test/a?b=1"
    assert h.get_header("WARC-Date") == "2025-12-01T05:44:50.123Z"
    assert http.statusline == "200 OK"
    assert http.headers == [("Content-Type", "text/html; charset=utf-8"),
                            ("Set-Cookie", "a=1"), ("set-cookie", "b=2")]  # order, repeats
    assert payload == PAGE
    # The payload digest is the body's SHA-256 as WARC writes it (and as the crawler
    # stores it, hex, in body_sha256).
    assert h.get_header("WARC-Payload-Digest") == sha256_b32(PAGE) == \
        sha256_b32(hex_digest=hashlib.sha256(PAGE).hexdigest())
    rh, rhttp, _ = parsed(req.data)
    assert rh.get_header("WARC-Concurrent-To") == h.get_header("WARC-Record-ID")
    assert rhttp.to_str().startswith("GET /a?b=1 HTTP/1.1\r\nHost: a.test\r\n")


def test_record_ids_follow_from_the_fetch_so_a_rebuild_is_identical():
    a, b = build_records(one()), build_records(one())
    assert [r.record_id for r in a] == [r.record_id for r in b]
    assert [r.data for r in a] == [r.data for r in b]  # byte for byte
    assert a[0].record_id == record_id("L-1", 3, 1, "response")
    other = build_records(one(attempt=2))
    assert {r.record_id for r in other}.isdisjoint(r.record_id for r in a)
    assert len({r.record_id for r in a}) == 2


def test_a_304_is_a_revisit_server_not_modified_without_payload():
    rev, _req = build_records(one(status=304, reason="Not Modified", payload=b""))
    h, http, payload = parsed(rev.data)
    assert h.get_header("WARC-Type") == "revisit" and rev.mime == "warc/revisit"
    assert h.get_header("WARC-Profile") == PROFILE_NOT_MODIFIED
    assert http.get_statuscode() == "304" and payload == b""


def test_an_identical_payload_is_a_revisit_pointing_at_the_first_record():
    first = build_records(one())[0]
    ref = (first.record_id, "http://a.test/a?b=1", "2025-12-01T05:44:50.123Z")
    rev = build_records(one(url="http://a.test/copy", lease="L-2"), refers_to=ref)[0]
    h, http, payload = parsed(rev.data)
    assert h.get_header("WARC-Type") == "revisit"
    assert h.get_header("WARC-Profile") == PROFILE_IDENTICAL
    assert h.get_header("WARC-Refers-To") == first.record_id
    assert h.get_header("WARC-Refers-To-Target-URI") == "http://a.test/a?b=1"
    assert h.get_header("WARC-Payload-Digest") == sha256_b32(PAGE)
    assert payload == b"" and http.get_statuscode() == "200"


def test_transfer_coding_removed_by_the_client_is_said_and_unread_bodies_are_truncated():
    chunked = one(headers=[("Content-Type", "text/html"), ("Transfer-Encoding", "chunked")])
    _h, http, payload = parsed(build_records(chunked)[0].data)
    assert http.get_header("Transfer-Encoding") is None
    assert http.get_header("X-Archive-Orig-Transfer-Encoding") == "chunked"
    assert payload == PAGE
    h, _http, payload = parsed(build_records(one(status=404, reason="Not Found", payload=b"",
                                                 truncated="unspecified"))[0].data)
    assert h.get_header("WARC-Truncated") == "unspecified" and payload == b""


REF = ("<urn:uuid:0d9f6a5e-1111-5222-8333-444455556666>", "http://a.test/a?b=1",
       "2025-12-01T05:44:50.123Z")


@pytest.mark.parametrize("case,fetch,refers_to", [
    ("a page", one(), None),
    ("with the peer's address and a depth", replace(one(ip="127.0.0.1"), depth=2), None),
    ("an empty body, unread", one(status=404, reason="Not Found", payload=b"",
                                  truncated="unspecified"), None),
    ("a body cut at the limit", one(truncated="length"), None),
    ("chunked", one(headers=[("Content-Type", "text/html"),
                             ("Transfer-Encoding", "chunked")]), None),
    ("no reason phrase", one(reason=""), None),
    ("a 304", one(status=304, reason="Not Modified", payload=b""), None),
    ("an identical payload", one(url="http://a.test/copy", lease="L-2"), REF),
    ("an identical payload, cut", one(truncated="length"), REF),
    ("a header value that is not ASCII",
     one(headers=[("Content-Type", "text/html"),
                  ("Content-Disposition", "attachment; filename=café.html"),
                  ("X-Title", "naïve")]), None),
    ("a URL that is not ASCII", one(url="http://a.test/caf\u00e9"), None),
])
def test_records_are_the_bytes_warcio_writes(case, fetch, refers_to):
    main, req = build_records(fetch, refers_to=refers_to)
    kind = "response" if main.rec_type == "response" else "revisit"
    assert gzip.decompress(main.data) == warcio_record(fetch, kind, refers_to), case
    assert gzip.decompress(req.data) == warcio_record(fetch, "request"), case
    h, _http, payload = parsed(main.data)  # and warcio reads them back whole
    assert h.get_header("WARC-Type") == kind
    assert payload == (fetch.exchange.payload if kind == "response" else b"")


# -- names, rolling, index ----------------------------------------------------------------


def test_file_names_follow_common_crawl():
    name = file_name("CC-MAIN", T, 7, "ip-10-0-0-1.ec2.internal-t3-abc123")
    assert name == "CC-MAIN-20251201054450-00007-ip-10-0-0-1.ec2.internal-t3-abc123.warc.gz"
    assert parse_file_name("warc/" + name) == {
        "prefix": "CC-MAIN", "ts": "20251201054450", "serial": "00007",
        "host": "ip-10-0-0-1.ec2.internal-t3-abc123"}
    assert file_name("X", T, 1, "a b/c") .endswith("-00001-a_b_c.warc.gz")
    assert index_name("warc/" + name) == "warc/" + name[: -len(".warc.gz")] + ".cdxj"


def test_roll_policy():
    p = RollPolicy(max_bytes=1000, max_age_s=60)
    assert not p.due(999, opened_s=100, now_s=159.9)
    assert p.due(1000, opened_s=100, now_s=100)
    assert p.due(1, opened_s=100, now_s=160)


def test_surt_keys_as_pywb_sorts_them():
    assert surt("http://www.Example.com/a/B?z=1&a=2") == "com,example)/a/b?a=2&z=1"
    assert surt("https://example.com:8443/") == "com,example:8443)/"
    assert surt("http://example.com:80") == "com,example)/"


def test_cdxj_lists_responses_and_revisits_sorted(tmp_path):
    store, w = writer(tmp_path)
    w.write(one(url="http://b.test/", lease="L-1"))
    w.write(one(url="http://a.test/z", lease="L-2", payload=b"other"))
    w.write(one(url="http://a.test/copy", lease="L-3"))  # same payload as L-1: revisit
    key = w.publish()
    lines = parse_cdxj(store.get_object(index_name(key)))
    assert [k for k, _, _ in lines] == ["test,a)/copy", "test,a)/z", "test,b)/"]
    copy = lines[0][2]
    assert copy["mime"] == "warc/revisit" and copy["status"] == "200"
    assert copy["digest"] == sha256_b32(PAGE)
    assert set(copy) == {"url", "mime", "status", "digest", "length", "offset", "filename"}
    assert copy["filename"] == key.rsplit("/", 1)[1]
    # Each line's (offset, length) reads back its record alone, in one ranged read.
    for _k, _ts, data in lines:
        member = store.get_range(key, int(data["offset"]), int(data["length"]))
        h, _http, _p = parsed(member)
        assert h.get_header("WARC-Target-URI") == data["url"]
    assert cdxj([]) == b""


# -- the writer ---------------------------------------------------------------------------


def test_write_returns_where_the_response_or_revisit_record_is(tmp_path):
    store, w = writer(tmp_path)
    first = w.write(Fetch("http://a.test/1", "L-1", 3, 1, T, exchange(), depth=4))
    copy = w.write(one(url="http://a.test/copy", lease="L-2"))  # a revisit of L-1's payload
    gone = w.write(one(url="http://a.test/304", lease="L-3", status=304,
                       reason="Not Modified", payload=b""))
    key = w.publish()
    assert {first.key, copy.key, gone.key} == {key}
    assert first.offset > 0 and first.offset + first.length < copy.offset  # request between
    lines = {d["url"]: d for _, _, d in parse_cdxj(store.get_object(index_name(key)))}
    for loc, url, kind in [(first, "http://a.test/1", "response"),
                           (copy, "http://a.test/copy", "revisit"),
                           (gone, "http://a.test/304", "revisit")]:
        assert (int(lines[url]["offset"]), int(lines[url]["length"])) == \
            (loc.offset, loc.length)
        assert key.endswith("/" + lines[url]["filename"])
        h, _http, _payload = parsed(store.get_range(loc.key, loc.offset, loc.length))
        assert (h.get_header("WARC-Type"), h.get_header("WARC-Target-URI")) == (kind, url)
    h, _http, payload = parsed(store.get_range(first.key, first.offset, first.length))
    assert h.get_header("Crawl-Depth") == "4" and payload == PAGE
    assert parsed(store.get_range(copy.key, copy.offset, copy.length))[0].get_header(
        "Crawl-Depth") is None  # a fetch without a depth (not from a lease)


def test_a_file_is_in_the_store_only_once_published_and_whole(tmp_path):
    store, w = writer(tmp_path)
    w.write(one())
    assert list(store.list_objects("")) == []  # being written: only in temp_dir
    assert [p.name.startswith(".tmp-CC-MAIN-") for p in (tmp_path / "tmp").iterdir()] == [True]
    key = w.publish()
    assert key == "warc/CC-MAIN-20251201054450-00000-box-t0-abc123.warc.gz"
    assert sorted(store.list_objects("warc/")) == [index_name(key), key]
    assert list((tmp_path / "tmp").iterdir()) == []
    verdict = warc_tool.verify(store, "warc/")
    assert verdict.problems == [] and (verdict.files, verdict.records) == (1, 3)
    assert w.publish() is None  # nothing open: nothing published


def test_a_writer_that_dies_before_publishing_leaves_nothing_that_looks_complete(tmp_path):
    store, w = writer(tmp_path)
    w.write(one())
    w._fh.flush()  # the process dies here: the temp file stays, half-named
    assert list(store.list_objects("warc/")) == []
    assert warc_tool.list_files(store, "warc/") == []


def test_files_roll_by_size_never_splitting_a_record(tmp_path):
    store, w = writer(tmp_path, max_bytes=1500)
    for i in range(4):
        w.write(one(lease=f"L-{i}", payload=PAGE + str(i).encode()))
    w.publish()
    files = warc_tool.list_files(store, "warc/")
    assert len(files) >= 2 and all(f.indexed for f in files)
    assert sum(f.indexed for f in files) == 4
    assert [parse_file_name(f.key)["serial"] for f in files] == \
        [f"{i:05d}" for i in range(len(files))]
    assert warc_tool.verify(store, "warc/").problems == []


def test_files_roll_by_age_at_a_tick(tmp_path):
    now = [T / 1000]
    store, w = writer(tmp_path, age=60, clock=lambda: now[0])
    w.write(one())
    now[0] += 59
    assert w.roll_if_due() is None
    now[0] += 1
    assert w.roll_if_due() is not None
    w.write(one(lease="L-2"))
    w.close()
    assert len(warc_tool.list_files(store, "warc/")) == 2


def test_dedup_is_bounded_and_zero_turns_it_off(tmp_path):
    store, w = writer(tmp_path, dedup_entries=0)
    w.write(one(lease="L-1"))
    w.write(one(lease="L-2"))
    assert w.stats.revisits == 0
    store, w = writer(tmp_path / "b", dedup_entries=1)
    w.write(one(lease="L-1"))
    w.write(one(lease="L-2", payload=b"other"))  # pushes L-1's digest out
    w.write(one(lease="L-3", payload=b"other"))  # remembered: a revisit
    w.write(one(lease="L-4"))  # forgotten: written in full again
    assert w.stats.revisits == 1


def test_verify_finds_a_bad_index_line_a_missing_line_and_a_corrupt_file(tmp_path):
    store, w = writer(tmp_path)
    w.write(one(url="http://a.test/1", lease="L-1"))
    w.write(one(url="http://a.test/2", lease="L-2", payload=b"two"))
    key = w.publish()
    idx = index_name(key)
    lines = store.get_object(idx).decode().splitlines()
    bad = lines[0].replace('"digest": "sha256:', '"digest": "sha256:X')
    store.put_object(idx, (bad + "\n").encode())  # one line wrong, one gone
    problems = warc_tool.verify(store, "warc/").problems
    assert any("index line for http://a.test/1" in p for p in problems), problems
    assert any("http://a.test/2 at offset" in p and "not in the index" in p
               for p in problems), problems
    data = bytearray(store.get_object(key))
    data[-60] ^= 0xFF
    store.put_object(key, bytes(data))
    assert warc_tool.verify(store, "warc/").problems


# -- the client keeps the exchange ---------------------------------------------------------


def test_the_client_keeps_the_wire_payload_and_headers_as_received():
    body = b"<html>" + b"a" * 5000
    gz = gzip.compress(body)

    async def go():
        async def handler(request):
            if request.path == "/gz":
                return web.Response(body=gz, content_type="text/html",
                                    headers={"Content-Encoding": "gzip", "X-Two": "1"})
            if request.path == "/slow":
                resp = web.StreamResponse(headers={"Content-Type": "text/html"})
                await resp.prepare(request)
                await resp.write(b"<html>first part")
                await asyncio.sleep(3)
                return resp
            if request.path == "/chunked":
                resp = web.StreamResponse(headers={"Content-Type": "text/html"})
                resp.enable_chunked_encoding()
                await resp.prepare(request)
                await resp.write(body)
                await resp.write_eof()
                return resp
            return web.Response(status=404, text="no such page")

        app = web.Application()
        app.router.add_get("/{p}", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        limits = replace(FetchLimits(), total_timeout_s=5.0, read_timeout_s=0.5)
        cache = DnsCache(AddressPolicy.from_networks(["127.0.0.0/8"]), limits)
        try:
            async with make_session(cache, limits) as session:
                return [await fetch(session, f"http://127.0.0.1:{port}/{p}", Kind.PAGE,
                                    limits, "Bot/1", keep_exchange=True)
                        for p in ("gz", "chunked", "missing", "slow")]
        finally:
            await runner.cleanup()

    gzr, chunked, missing, slow = asyncio.run(go())
    assert gzr.outcome is Outcome.OK and gzr.body == body
    ex = gzr.exchange
    assert ex.payload == gz  # as received: still gzip'd
    assert ("Content-Encoding", "gzip") in ex.response_headers
    assert ex.status == 200 and ex.version == "HTTP/1.1" and ex.reason == "OK"
    assert ex.method == "GET" and ex.target == "/gz" and ex.ip == "127.0.0.1"
    assert ("User-Agent", "Bot/1") in ex.request_headers
    assert chunked.exchange.payload == body
    assert ("Transfer-Encoding", "chunked") in chunked.exchange.response_headers
    assert missing.exchange.status == 404 and missing.exchange.truncated == "unspecified"
    # An answer cut short by a timeout keeps what came, marked so.
    assert slow.outcome is Outcome.TIMEOUT and slow.exchange.truncated == "time"
    assert slow.exchange.payload == b"<html>first part" and slow.exchange.status == 200
    # The record keeps the gzip'd payload (its digest is the wire bytes'); warcio's
    # reader decodes Content-Encoding for its content stream.
    rec, payload = read_record(build_records(Fetch("http://x/gz", "L", 1, 1, T, ex))[0].data)
    assert rec.rec_headers.get_header("WARC-Payload-Digest") == sha256_b32(gz)
    assert payload == body


# -- crawl warc ------------------------------------------------------------------------------


def test_crawl_warc_ls_get_verify_on_a_local_store(tmp_path, capsys):
    store, w = writer(tmp_path)
    w.write(one(url="http://a.test/a?b=1", lease="L-1", ms=T))
    w.write(one(url="http://a.test/a?b=1", lease="L-2", ms=T + 5000, payload=b"newer"))
    w.publish()
    flags = ["--set", f"storage.local_dir={tmp_path / 'store'}",
             "--set", f"local.state_dir={tmp_path / 'state'}"]
    assert main(["warc", "ls", *flags]) == 0
    out = capsys.readouterr().out
    assert "2 indexed records" in out and "1 file in" in out
    assert main(["warc", "ls", "--json", *flags]) == 0
    assert json.loads(capsys.readouterr().out)[0]["indexed_records"] == 2
    assert main(["warc", "get", "http://a.test/a?b=1", *flags]) == 0
    out = capsys.readouterr().out
    assert "WARC-Type: response" in out and out.rstrip().endswith("newer")
    assert main(["warc", "get", "http://a.test/a?b=1", "--raw", *flags]) == 0
    assert capsys.readouterr().out.startswith("WARC/1.1\r\n")
    assert main(["warc", "get", "http://a.test/none", *flags]) == 1
    assert "no record of http://a.test/none" in capsys.readouterr().err
    assert main(["warc", "verify", *flags]) == 0
    assert ": OK" in capsys.readouterr().out


@pytest.mark.parametrize("n", [200])
def test_writing_a_fetch_costs_little(tmp_path, n):
    """The writer's own time per fetch of a 30 KB page (request and response records,
    gzip, written to the temp file): the figure in README-warc.md."""
    import time

    store, w = writer(tmp_path)
    page = b"".join(b"<p>some text of a page, line %d of it</p>\n" % i for i in range(700))
    start = time.perf_counter()
    for i in range(n):
        w.write(one(lease=f"L-{i}", payload=page + str(i).encode()))
    per_fetch_ms = (time.perf_counter() - start) / n * 1000
    w.close()
    print(f"WARC writing: {per_fetch_ms:.2f} ms per fetch of {len(page)} bytes")
    assert per_fetch_ms < 50  # loose: a shared CI machine


def test_a_rolled_file_is_put_in_the_background_and_a_failed_put_fails_the_writer(tmp_path):
    import threading
    import time

    now = [T / 1000]
    store, w = writer(tmp_path, age=60, clock=lambda: now[0])
    release, calls = threading.Event(), []
    real_put = store.put_file

    def slow_put(key, path):
        calls.append(key)
        assert release.wait(10)
        if len(calls) == 2:
            raise OSError("the bucket is gone")
        real_put(key, path)

    store.put_file = slow_put
    w.write(one(lease="L-1"))
    now[0] += 60
    first = w.roll_if_due()  # its put waits...
    w.write(one(lease="L-2", payload=b"two"))  # ...while the next file is written
    assert calls == [first] and w.stats.files_published == 0
    release.set()
    now[0] += 60
    w.roll_if_due()  # waits for the first put; L-2's file: its put fails
    with pytest.raises(OSError, match="the bucket is gone"):
        for i in range(100):
            w.write(one(lease=f"L-x{i}", payload=b"more %d" % i))
            time.sleep(0.01)
    assert [f.key for f in warc_tool.list_files(store, "warc/")] == [first]


# -- recovering a dead writer's file ---------------------------------------------------------

KILLED_WRITER = """
import os, signal, sys
sys.path.insert(0, {root!r})
from tests.unit.test_warc import one, writer
from pathlib import Path
store, w = writer(Path({tmp!r}), store_id="crawl-A")
for loc in (w.write(one(url="http://a.test/1", lease="L-1")),
            w.write(one(url="http://a.test/2", lease="L-2", payload=b"two"))):
    print(loc.key, loc.offset, loc.length, flush=True)  # what their completions announce
w._fh.write(b"\\x1f\\x8b\\x08\\x00half a record")  # dies mid-record
w._fh.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_writers_file_is_recovered_whole_records_only_and_once(tmp_path):
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER.format(root=root,
                                                                       tmp=str(tmp_path))],
                          capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    announced = [(k, int(o), int(n)) for k, o, n in map(str.split, proc.stdout.splitlines())]
    left = list((tmp_path / "tmp").glob(".tmp-*.warc.gz"))
    assert len(left) == 1
    store = LocalStore(tmp_path / "store")
    assert warc_tool.list_files(store, "warc/") == []
    # Another crawl's writer leaves it alone; this crawl's publishes it, cut after the
    # last whole record, under the name it was being written as.
    _, other = writer(tmp_path, store_id="crawl-B")
    assert other.recover() == []
    _, w = writer(tmp_path, store_id="crawl-A")
    keys = w.recover()
    assert keys == ["warc/" + left[0].name[len(".tmp-"):]]
    verdict = warc_tool.verify(store, "warc/")
    assert verdict.problems == [] and verdict.records == 5 and verdict.index_lines == 2
    assert [d["url"] for _, _, d in parse_cdxj(store.get_object(index_name(keys[0])))] == \
        ["http://a.test/1", "http://a.test/2"]
    assert list((tmp_path / "tmp").iterdir()) == []
    assert w.recover() == []  # once
    # The locations the dead writer announced (in its completions) are true of the
    # published file: one ranged read each is that fetch's whole response record.
    assert [k for k, _, _ in announced] == keys * 2
    for (key, offset, length), url in zip(announced, ["http://a.test/1", "http://a.test/2"],
                                          strict=True):
        h, _http, _payload = parsed(store.get_range(key, offset, length))
        assert h.get_header("WARC-Type") == "response"
        assert h.get_header("WARC-Target-URI") == url


def test_crawl_warc_recover_publishes_what_a_stopped_fetcher_left(tmp_path, capsys):
    from udfs.config import load_config
    from udfs.storage.warc_writer import store_identity

    sets = [f"storage.local_dir={tmp_path / 'store'}", f"warc.temp_dir={tmp_path / 'tmp'}",
            f"local.state_dir={tmp_path / 'state'}"]
    cfg = load_config([], overrides=sets)
    _, dead = writer(tmp_path, store_id=store_identity(cfg))
    dead.write(one())
    dead._fh.close()  # its process is gone: the lock with it
    flags = [a for s in sets for a in ("--set", s)]
    assert main(["warc", "recover", *flags]) == 0
    assert "1 file left by fetchers that stopped published" in capsys.readouterr().out
    assert main(["warc", "verify", *flags]) == 0


def test_a_live_writers_file_is_not_recovered(tmp_path):
    _, live = writer(tmp_path, store_id="crawl-A")
    live.write(one())
    _, w = writer(tmp_path, store_id="crawl-A")
    assert w.recover() == []
    assert live.publish() is not None


def test_another_writers_recovery_the_moment_a_file_is_opened_leaves_it_alone(
        tmp_path, monkeypatch):
    """Two tasks share a temp_dir; one recovers just as the other opens a file (after
    the open, before anything else): the file is not taken for a dead writer's (it was,
    unlocked, and deleted under its writer, whose records were then lost)."""
    import udfs.storage.warc_writer as module

    store, live = writer(tmp_path, store_id="crawl-A")
    _, other = writer(tmp_path, store_id="crawl-A")
    recovered: list[list[str]] = []
    real_open = open

    def open_then_recover(path, *args, **kwargs):
        fh = real_open(path, *args, **kwargs)
        if str(path).endswith(".warc.gz") and args and "w" in args[0]:
            recovered.append(other.recover())
        return fh

    monkeypatch.setattr(module, "open", open_then_recover, raising=False)
    live.write(one())
    monkeypatch.undo()
    assert recovered == [[]]
    key = live.publish()
    assert key is not None and [f.key for f in warc_tool.list_files(store, "warc/")] == [key]
    verdict = warc_tool.verify(store, "warc/")
    assert verdict.problems == [] and verdict.records == 3


def test_verify_finds_a_record_published_twice(tmp_path):
    store, w = writer(tmp_path)
    w.write(one(lease="L-1"))
    w.publish()
    w.write(one(lease="L-1"))  # the same fetch again (same lease, version, attempt)
    w.publish()
    problems = warc_tool.verify(store, "warc/").problems
    assert len(problems) == 2 and all("is also at CC-MAIN-" in p for p in problems), problems


def test_recovery_runs_beside_the_writes(tmp_path):
    import threading

    _, dead = writer(tmp_path, store_id="crawl-A")
    dead.write(one(lease="L-0"))
    dead._fh.close()  # its process is gone: the lock with it
    store, w = writer(tmp_path, store_id="crawl-A", host="box-t0-def456")
    release = threading.Event()
    real_put = store.put_file
    store.put_file = lambda key, path: (release.wait(10), real_put(key, path))
    w.start_recovery()
    w.write(one(lease="L-1", payload=b"one"))  # not held up by the recovery's put
    release.set()
    w.close()
    assert [f.indexed for f in warc_tool.list_files(store, "warc/")] == [1, 1]
    assert warc_tool.verify(store, "warc/").problems == []


# -- our index against pywb's indexer ----------------------------------------------------------


def pywb_index(path: Path) -> list[tuple[str, str, dict]]:
    """The CDXJ lines webrecorder's indexer (cdxj-indexer, pywb's `cdx-indexer`) writes for
    one file, sorted, parsed."""
    import io

    # (cdxj-indexer: pyproject's dev extra, installed by `./dev setup`)
    from cdxj_indexer.main import write_cdx_index

    out = io.StringIO()
    write_cdx_index(out, [str(path)], {"sort": True})
    return parse_cdxj(out.getvalue().encode())


def test_our_cdxj_equals_pywbs_indexer_on_the_same_file(tmp_path):
    store, w = writer(tmp_path)
    w.write(one(url="http://www.b.test:8080/Path?z=1&a=2", lease="L-1"))
    w.write(one(url="http://a.test/z", lease="L-2", payload=b"other"))
    w.write(one(url="http://a.test/copy", lease="L-3"))  # identical payload: revisit
    w.write(one(url="http://a.test/nm", lease="L-4", status=304, reason="Not Modified",
                payload=b""))
    w.write(one(url="http://a.test/e", lease="L-5", status=404, reason="Not Found",
                payload=b"", truncated="unspecified"))
    w.write(Fetch("http://a.test/gz", "L-6", 1, 1, T + 1000, exchange(
        payload=gzip.compress(PAGE), headers=[("Content-Type", "text/html"),
                                              ("Content-Encoding", "gzip")]), depth=1))
    # A bare redirect, no Content-Type: no "mime" field (the e2e crawl's /loop/ pages).
    w.write(Fetch("http://a.test/r", "L-7", 1, 1, T + 2000, exchange(
        status=302, reason="Found", payload=b"", headers=[("Location", "/a")])))
    key = w.publish()
    ours = parse_cdxj(store.get_object(index_name(key)))
    theirs = pywb_index(store.root / key)
    assert len(ours) == 7 and "mime" not in next(d for _, _, d in ours if d["status"] == "302")
    fields = [(k, ts, d["offset"], d["length"], d["filename"]) for k, ts, d in ours]
    assert fields == [(k, ts, d["offset"], d["length"], d["filename"]) for k, ts, d in theirs]
    assert ours == theirs  # every field of every line, digests, mimes and statuses included
    # A dead writer's file is indexed again from its records when it is recovered: the
    # same lines.
    with open(store.root / key, "rb") as fh:
        again, _end = index_members(fh, key.rsplit("/", 1)[-1])
    assert parse_cdxj(cdxj(again)) == theirs
