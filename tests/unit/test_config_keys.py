"""Every key of udfs/config/crawler-default.yaml does what its comment says, in the code that
consumes it as the jobs and tools build it ("a key nothing reads is removed").

EFFECTS maps each key (topics.*.<field> for the five streams) to a probe: a function of
a Config that runs the real consumer and returns what it observed —

* the frontier job's operators (`Intake` and `FrontierFunction`, taken from the graph
  jobs/frontier.py builds) driven on a virtual clock, keyed state in dicts, timers fired
  in order, answers fed back as completions; its `AuditWriter` the same way;
* the fetcher job's `FetchFunction` (from jobs/fetcher.py) against an HTTP server, a DNS
  server and a never-accepting socket, all on 127.0.0.1;
* both jobs' `main()` with the Flink configuration `udfs.flink.runtime.make_env` really builds
  (a local JVM gateway, started once per module) and the Kafka tables `KafkaIO` declares
  (the table environment records the SQL; nothing runs);
* the local stack's and the session cluster's command lines and generated files, the
  topics `crawl topics create` would make and the S3 requests the store would send
  (recorded, never sent).

The test runs a probe for the defaults and for one changed, valid value, and asserts
the results differ and, where it is cheap, that the changed result is the one the
comment promises. No service is needed; no traffic leaves 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gzip
import hashlib
import heapq
import importlib
import json
import os
import pickle
import re
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from udfs.config import TOPIC_KEYS, Config, load_config, load_defaults
from udfs.core.parse import group_by_host
from udfs.core.urls import split_host_key
from udfs.wire import records as wire_records
from udfs.wire.records import DISCOVERED, found_records, plain_link

# Import-time noise of third-party packages: PyFlink's table package about its own
# deprecated methods, httplib2 (under PyFlink's Beam runner) about pyparsing's.
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*has been deprecated since version:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:httplib2"),
]

DAY = 86400.0
T0 = 20_000 * DAY + 1000.0  # the virtual crawl clock starts here (a UTC day began 1000 s ago)
H = "http://a.test"
OTHER = "http://b.test"
ROBOTS_OK = b"User-agent: *\nAllow: /\n"
LOOPBACK_NETS = ['fetch.allowed_networks=["127.0.0.0/8"]']


# -- the world the probes run in: servers on 127.0.0.1, folders ---------------------------


PAGE_HTML = ('<html><head><title>p</title></head><body><p>a page</p>'
             '<a href="/next?utm_source=x&amp;id=1">next</a>'
             '<a href="/p;jsessionid=abc?ID=2">p</a></body></html>')


def _sitemap(pad: int) -> bytes:
    """A urlset of three entries after an XML comment of `pad` bytes."""
    entries = "".join(f"<url><loc>http://a.test/s{i}</loc></url>" for i in range(3))
    return ('<?xml version="1.0" encoding="UTF-8"?>'
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<!--{'x' * pad}-->{entries}</urlset>").encode()


class Site:
    """An HTTP server on 127.0.0.1 (its own thread and event loop) with the pages the
    fetch probes need; it records the headers of every request."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.stalls: list[tuple[str, float, float]] = []  # (Host header, start, end)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner, self.port = asyncio.run_coroutine_threadsafe(
            self._start(), self.loop).result(10)

    async def _start(self):
        app = web.Application()
        routes = [("/page", self.page), ("/bytes/{n}", self.bytes_), ("/gzip/{n}", self.gzip_),
                  ("/text/{n}", self.text),
                  ("/robots/{n}", self.robots), ("/sitemap/{n}", self.sitemap),
                  ("/sitemap-gz/{n}", self.sitemap_gz), ("/stall/{ms}", self.stall),
                  ("/drip/{count}/{ms}", self.drip), ("/hostile/{kind}/{n}", self.hostile)]
        for path, handler in routes:
            app.router.add_get(path, handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]

    async def page(self, request):
        self.headers.append(dict(request.headers))
        return web.Response(text=PAGE_HTML, content_type="text/html")

    async def text(self, request):
        """n words of prose-like text (a fixed draw from 500 made-up words)."""
        import random

        rng = random.Random(7)
        vocab = ["".join(rng.choice("etaoinshrdlcumwfgypbvk") for _ in range(rng.randint(2, 9)))
                 for _ in range(500)]
        words = " ".join(rng.choice(vocab) for _ in range(int(request.match_info["n"])))
        return web.Response(text=f"<html><body><p>{words}</p></body></html>",
                            content_type="text/html")

    async def bytes_(self, request):
        return web.Response(body=b"<html>" + b"a" * int(request.match_info["n"]),
                            content_type="text/html")

    async def gzip_(self, request):
        body = gzip.compress(b"<html>" + b"a" * int(request.match_info["n"]))
        return web.Response(body=body, content_type="text/html",
                            headers={"Content-Encoding": "gzip"})

    async def robots(self, request):
        return web.Response(body=ROBOTS_OK + b"#" * int(request.match_info["n"]),
                            content_type="text/plain")

    async def sitemap(self, request):
        return web.Response(body=_sitemap(int(request.match_info["n"])),
                            content_type="application/xml")

    async def sitemap_gz(self, request):  # a .xml.gz file: gzip is the content, not an encoding
        return web.Response(body=gzip.compress(_sitemap(int(request.match_info["n"]))),
                            content_type="application/gzip")

    async def stall(self, request):
        start = time.monotonic()
        await asyncio.sleep(int(request.match_info["ms"]) / 1000)
        self.stalls.append((request.host.split(":")[0], start, time.monotonic()))
        return web.Response(text=PAGE_HTML, content_type="text/html")

    async def hostile(self, request):
        """Pages for the parse limits: n links, n bytes before a link, n elements (a
        large tree), or n text nodes 250 elements deep (CPU-heavy text extraction)."""
        n = int(request.match_info["n"])
        body = {"links": lambda: "".join(f'<a href="/l/{i}">l</a>' for i in range(n)),
                "late": lambda: "<p>" + "x" * n + '</p><a href="/late">late</a>',
                "tree": lambda: "<b>w</b>" * n,
                "deep": lambda: "<div>" * 250 + "<b>w</b>" * n}[request.match_info["kind"]]()
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")

    async def drip(self, request):
        resp = web.StreamResponse(headers={"Content-Type": "text/html"})
        await resp.prepare(request)
        try:
            for _ in range(int(request.match_info["count"])):
                await asyncio.sleep(int(request.match_info["ms"]) / 1000)
                await resp.write(b"<p>more</p>")
            await resp.write_eof()
        except ConnectionResetError:  # the client gave up (a timeout probe)
            pass
        return resp

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class Blackhole:
    """A listening socket on 127.0.0.1 whose accept queue is full: a connect never completes."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.fill = []
        for _ in range(3):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", self.port))
            self.fill.append(c)
        time.sleep(0.05)

    def close(self) -> None:
        for s in [*self.fill, self.sock]:
            s.close()


@dataclass
class World:
    tmp: Path
    cwd: Path  # the working directory of every probe: relative defaults (.state) land here
    cache: Path  # CRAWL_CACHE_DIR: a fake Kafka connector jar for two versions
    site: Site
    dns: Any  # tests.unit.test_ttl_resolver.DnsServer
    blackhole: Blackhole
    runs: int = 0

    def fresh_dir(self, name: str) -> Path:
        self.runs += 1
        path = self.tmp / f"{name}-{self.runs}"
        path.mkdir(parents=True)
        return path

    def config_file(self, cfg: Config) -> Path:
        text = cfg.to_yaml()
        path = self.tmp / "configs" / f"{hashlib.sha1(text.encode()).hexdigest()[:16]}.yaml"
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return path

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.site.port}{path}"

    def dns_override(self) -> str:
        return f'fetch.dns_servers=["127.0.0.1:{self.dns.port}"]'


CONNECTOR_VERSIONS = ("5.0.0-2.2", "4.0.1-2.0")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    from tests.unit.test_ttl_resolver import DnsServer

    tmp = tmp_path_factory.mktemp("config-keys")
    cache = tmp / "cache"
    for version in CONNECTOR_VERSIONS:
        jar = cache / "jars" / f"flink-sql-connector-kafka-{version}.jar"
        jar.parent.mkdir(parents=True, exist_ok=True)
        jar.write_bytes(b"")
    (tmp / "cwd").mkdir()
    mp = pytest.MonkeyPatch()
    # The local JVM gateway's log goes here (never into the pyflink package), and the
    # jobs find their connector jar here, whatever this machine has cached.
    mp.setenv("FLINK_LOG_DIR", str(tmp / "flink-logs"))
    mp.setenv("CRAWL_CACHE_DIR", str(cache))
    mp.delenv("FLINK_REST", raising=False)
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in list(os.environ):
        if name.startswith("CRAWL__") or name == "CRAWL_CONFIG":
            mp.delenv(name)
    site, dns, hole = Site(), DnsServer(), Blackhole()
    try:
        yield World(tmp, tmp / "cwd", cache, site, dns, hole)
    finally:
        site.stop()
        dns.stop()
        hole.close()
        mp.undo()


# -- the jobs' main(): the real graph code with a recording table environment -------------


@dataclass
class JobTrace:
    make_env: dict[str, Any] = field(default_factory=dict)  # what the job passed to make_env
    flink: dict[str, str] = field(default_factory=dict)  # the configuration make_env built
    parallelism: int | None = None
    sql: list[str] = field(default_factory=list)
    table_config: dict[str, str] = field(default_factory=dict)
    functions: list[Any] = field(default_factory=list)  # user functions in the graph
    async_timeout_ms: int | None = None
    executed: str | None = None

    def tables(self) -> dict[str, dict[str, str]]:
        out = {}
        for sql in self.sql:
            name = re.search(r"CREATE TABLE (\w+)", sql)
            if name:
                out[name.group(1)] = dict(re.findall(r"'([\w.\-]+)' = '([^']*)'", sql))
        return out

    def function(self, cls: type) -> Any:
        """A fresh copy of the job's function of type `cls`, as a new task gets it."""
        (fn,) = [f for f in self.functions if isinstance(f, cls)]
        return copy.deepcopy(fn)


class _Recorder:
    """Any DataStream / table / config call: recorded, returns another recorder."""

    def __init__(self, trace: JobTrace) -> None:
        self._trace = trace

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            from pyflink.datastream.functions import Function

            self._trace.functions += [a for a in args if isinstance(a, Function)]
            return _Recorder(self._trace)
        return call


class _TableEnv(_Recorder):
    def execute_sql(self, sql: str) -> None:
        self._trace.sql.append(sql)

    def get_config(self):
        trace = self._trace

        class Conf:
            def set(self, key, value):
                trace.table_config[key] = value
        return Conf()


class _Env(_Recorder):
    def execute(self, name: str = "") -> None:
        self._trace.executed = name


class _Async:
    def __init__(self, trace: JobTrace) -> None:
        self.trace = trace

    def unordered_wait(self, stream, function, timeout, **kwargs):
        self.trace.functions.append(function)
        self.trace.async_timeout_ms = timeout.to_milliseconds()
        return _Recorder(self.trace)


# The Flink configuration keys whose value changes from one environment to the next.
_VOLATILE = ("python.loopback-server.address",)
_TRACES: dict[tuple[str, str, bool], JobTrace] = {}


def run_job(name: str, cfg: Config, world: World, *, real_env: bool = False) -> JobTrace:
    """jobs/<name>.py's main() on `cfg` (passed as --config, as `crawl run` passes it).

    `real_env`: the job's make_env call really runs (JVM gateway) and its Flink
    configuration is read back; otherwise make_env only records its arguments."""
    memo = (name, cfg.to_yaml(), real_env)
    if memo in _TRACES:
        return _TRACES[memo]
    from pyflink.table import StreamTableEnvironment

    import udfs.flink.runtime

    module = importlib.import_module(f"jobs.{name}")
    trace = JobTrace()

    def make_env(c, **kwargs):
        trace.make_env = kwargs
        if real_env:
            env = udfs.flink.runtime.make_env(c, **kwargs)
            conf = env._j_stream_execution_environment.getConfiguration()
            trace.flink = {k: v for k, v in dict(conf.toMap()).items() if k not in _VOLATILE}
            trace.parallelism = env.get_parallelism()
        return _Env(trace)

    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(None):
        mp.chdir(world.cwd)
        mp.setattr(module, "make_env", make_env)
        mp.setattr(StreamTableEnvironment, "create", staticmethod(lambda env: _TableEnv(trace)))
        if hasattr(module, "restoring"):  # asks the JVM for its configuration
            mp.setattr(module, "restoring", lambda env: False)
        if hasattr(module, "AsyncDataStream"):
            mp.setattr(module, "AsyncDataStream", _Async(trace))
        for adapter in ("keyed_by_first", "side_output"):  # call the JVM: the stream itself
            if hasattr(module, adapter):
                mp.setattr(module, adapter, lambda ds, *_: ds)
        if hasattr(module, "execute"):  # its pinned ids are the JVM's graph's
            mp.setattr(module, "execute", lambda env, name, *_: env.execute(name))
        module.main(["--config", str(world.config_file(cfg))])
    _TRACES[memo] = trace
    return trace


# -- Flink's runtime context, keyed state and timers, for the operators ---------------------


class _Counter:
    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        self.count += n


class _Metrics:
    """A metric group: counters and gauges by (name, labels), one registry shared by the
    group and its subgroups (add_group(key, value) adds a label, as Flink's does)."""

    def __init__(self, registry: dict | None = None, labels: tuple = ()) -> None:
        self.registry = {} if registry is None else registry
        self.labels = labels
        # What an operator holds back before Flink sees it (batched counters): handed
        # over before a read, as the operator does within a second.
        self.flushers: list[Callable[[], None]] = []

    def add_group(self, key: str, value: str | None = None) -> _Metrics:
        return _Metrics(self.registry, (*self.labels, (key, value)))

    def counter(self, name: str) -> _Counter:
        return self.registry.setdefault((name, self.labels), _Counter())

    def gauge(self, name: str, fn) -> None:
        self.registry[(name, self.labels)] = fn

    def read(self, name: str, **labels: str) -> int:
        """A counter's count or a gauge's value (0 if never created)."""
        for flush in self.flushers:
            flush()
        metric = self.registry.get((name, tuple(labels.items())))
        return 0 if metric is None else metric() if callable(metric) else metric.count


class _ValueState:
    """Keyed ValueState of pickled values (PICKLED_BYTE_ARRAY), one per current key."""

    def __init__(self, keys) -> None:
        self.keys_, self.data = keys, {}

    def value(self):
        raw = self.data.get(self.keys_.key)
        return None if raw is None else pickle.loads(raw)

    def update(self, value) -> None:
        self.data[self.keys_.key] = pickle.dumps(value)

    def clear(self) -> None:
        self.data.pop(self.keys_.key, None)


class _MapState:
    def __init__(self, keys) -> None:
        self.keys_, self.data = keys, {}

    def _map(self) -> dict:
        return self.data.setdefault(self.keys_.key, {})

    def get(self, k):
        raw = self._map().get(k)
        return None if raw is None else pickle.loads(raw)

    def put(self, k, v) -> None:
        self._map()[k] = pickle.dumps(v)

    def remove(self, k) -> None:
        self._map().pop(k, None)

    def contains(self, k) -> bool:
        return k in self._map()

    def items(self):
        return [(k, pickle.loads(v)) for k, v in list(self._map().items())]

    def keys(self):
        return list(self._map())

    def clear(self) -> None:
        self.data.pop(self.keys_.key, None)


class RuntimeContext:
    """What the operators' open() asks of Flink."""

    def __init__(self, keys=None, parallelism: int = 1, attempt: int = 0) -> None:
        self.keys_, self.parallelism, self.attempt = keys, parallelism, attempt
        self.state: dict[str, Any] = {}
        self.metrics = _Metrics()

    def get_state(self, descriptor):
        return self.state.setdefault(descriptor.name, _ValueState(self.keys_))

    def get_map_state(self, descriptor):
        return self.state.setdefault(descriptor.name, _MapState(self.keys_))

    def get_metrics_group(self) -> _Metrics:
        return self.metrics

    def get_number_of_parallel_subtasks(self) -> int:
        return self.parallelism

    def get_attempt_number(self) -> int:
        return self.attempt


class _Timers:
    def __init__(self, job: FrontierJob) -> None:
        self.job = job

    def current_watermark(self) -> int:
        return int(round(self.job.now * 1000))

    def register_event_time_timer(self, ts: int) -> None:
        self.job.timers.add((int(ts), self.job.key))

    # The virtual clock is the only clock here: wall-clock timers fire on it too.
    register_processing_time_timer = register_event_time_timer


class _Ctx:
    def __init__(self, job: FrontierJob) -> None:
        self.job, self.timers = job, _Timers(job)

    def timer_service(self) -> _Timers:
        return self.timers

    def get_current_key(self) -> str:
        return self.job.key


# -- the frontier job's operators on a virtual clock -------------------------------------


@dataclass(frozen=True)
class Answer:
    """How a lease is answered (a Completion record, as the fetcher would write it)."""

    outcome: str = "OK"
    status: int | None = 200
    after_s: float = 0.0  # when the completion arrives, after the lease was issued
    duration_s: float = 0.0  # the fetch's duration, as reported
    retry_after: str | None = None
    location: str | None = None
    text: str = "same"  # the page's extracted text: its hash decides CHANGED / UNCHANGED
    body: bytes | None = None  # robots.txt
    links: tuple[str, ...] = ()  # the page's links, inside its completion (v4)


def answer_ok(lease: dict, job: FrontierJob) -> Answer | None:
    return Answer()


def answer_none(lease: dict, job: FrontierJob) -> Answer | None:
    return None


def robots_with(body: bytes) -> Callable[[dict, FrontierJob], Answer | None]:
    return lambda lease, job: Answer(body=body)


def completion_record(lease: dict, a: Answer, now: float) -> dict[str, Any]:
    ok_page = a.outcome == "OK" and lease["kind"] != "ROBOTS"
    text = hashlib.sha256(a.text.encode()).hexdigest() if ok_page else None
    body_sha = hashlib.sha256((lease["url"] + a.text).encode()).hexdigest() if ok_page else None
    return {
        "lease_id": lease["lease_id"], "url_id": lease["url_id"],
        "url_version": lease["url_version"], "attempt": lease["attempt"], "url": lease["url"],
        "host_key": lease["host_key"], "kind": lease["kind"], "outcome": a.outcome,
        "http_status": a.status, "fetched_at_ms": int(now * 1000),
        "fetch_duration_ms": int(a.duration_s * 1000), "retry_after": a.retry_after,
        "redirect_location": a.location, "etag": None, "last_modified": None,
        "content_type": "text/html" if ok_page else None, "body_sha256": body_sha,
        "body_bytes": 10 if ok_page else None,
        "object_key": f"raw/{body_sha[:2]}/{body_sha}.gz" if body_sha else None,
        "text_sha256": text, "simhash": None, "canonical_url": None, "noindex": False,
        "nofollow": False, "links_count": 0,
        "body": (a.body if a.body is not None else ROBOTS_OK) if lease["kind"] == "ROBOTS"
        and a.outcome == "OK" else None,
        "error": None,
        "discovered": [
            {"host_key": host, "source": "LINK", "depth": lease["depth"] + 1,
             "links": [plain_link(u) for u in urls]}
            for host, urls in group_by_host(a.links).items()],
    }


class FrontierJob:
    """Intake → key_by(host_key) → FrontierFunction, as jobs/frontier.py wires them, with
    the job's feedback loop (its discovered output is its discovered input)."""

    def __init__(self, cfg: Config, world: World, respond=answer_ok, robots=None,
                 parallelism: int = 1, lookahead: bool = False,
                 duplicates: frozenset[str] = frozenset()) -> None:
        from udfs.frontier.operator import FrontierFunction, Intake
        from udfs.wire.avro import registry

        # The frontier's own schedule, one lease at a time (no look-ahead), so that a
        # lease's grant is its use: the politeness keys' probes read request times off
        # the grants. The look-ahead keys' probes set the look-ahead themselves.
        set_here = cfg.changed()
        if not lookahead:
            cfg = load_config(env={}, overrides=[
                *(f"{k}={json.dumps(v)}" for k, v in set_here.items()),
                "frontier.lookahead_s=0", "frontier.max_lookahead_leases=0"])
        trace = run_job("frontier", cfg, world)
        self.intake, self.fn = trace.function(Intake), trace.function(FrontierFunction)
        self.reg = registry()
        self.topics = {k: cfg.topic(k) for k in TOPIC_KEYS}
        self.respond, self.robots = respond, robots or robots_with(ROBOTS_OK)
        # Pages the index's duplicate check flags: their index events come back through
        # the index topic as the job reads it (with the next completion, as a commit would).
        self.duplicates = duplicates
        self.now, self.key = T0, None
        self.timers: set[tuple[int, str]] = set()
        self.events: list[tuple[float, int, dict]] = []
        self.leases: list[dict] = []
        self.dead: list[dict] = []
        self.transfers: list[tuple[float, dict]] = []  # (time, ShardTransfer) sent
        self.lose_transfer: Callable[[dict], bool] = lambda rec: False
        self._seq = 0
        self.ctx = _Ctx(self)
        self.runtime = RuntimeContext(self, parallelism)
        self.intake_runtime = RuntimeContext(self, parallelism)
        self.intake.open(self.intake_runtime)
        self.fn.open(self.runtime)
        self.runtime.metrics.flushers.append(self.fn.metrics.batch.flush)

    @contextlib.contextmanager
    def clock(self) -> Iterator[FrontierJob]:
        """The operator's wall clock is the virtual one (the crawl clock is never behind it)."""
        import udfs.frontier.operator as op

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(op, "_now", lambda: self.now)
            yield self

    # inputs

    def discover(self, urls: list[str], source: str = "SEED", depth: int = 0,
                 priority: float | None = None, hops: int = 0,
                 stream: str = "discovered") -> None:
        """A DiscoveredUrls record on `stream` (the fetcher sends a page's on completions)."""
        record = {"host_key": None, "source": source, "parent_url": None, "depth": depth,
                  "redirect_hops": hops, "discovered_at_ms": int(self.now * 1000),
                  "links": [{"url": u, "lastmod_ms": None, "priority": priority} for u in urls]}
        self._send(stream, b"k", self.reg.encode("discovered", record))

    def _send(self, stream: str, key: bytes, value: bytes) -> None:
        from pyflink.common import Row

        from udfs.frontier.operator import DEAD_LETTERS

        self._seq += 1
        for out in self.intake.process_element(
                Row(key, value, self.topics[stream], 0, self._seq), None):
            if isinstance(out, tuple):
                assert out[0] == DEAD_LETTERS
                self.dead.append(self.reg.decode("dead_letter", bytes(out[1][1])))
                continue
            self.key = out[0]  # keyed by the row's first field (keyed_by_first)
            self._collect(self.fn.process_element(out[1], self.ctx))

    def _collect(self, outputs) -> None:
        from udfs.frontier.operator import DISCOVERED, INDEX, SHARDS

        moves: list[tuple[bytes, bytes]] = []  # delivered once this element is done
        for out in outputs:
            if isinstance(out, tuple):  # a side output
                if out[0] == DISCOVERED:  # written to crawl.discovered, read back
                    self._send("discovered", bytes(out[1][0]), bytes(out[1][1]))
                elif out[0] == SHARDS:  # a hot host's move: read back next, unless lost
                    rec = self.reg.decode("shard_transfer", bytes(out[1][1]))
                    self.transfers.append((round(self.now - T0, 3), rec))
                    if not self.lose_transfer(rec):
                        moves.append((bytes(out[1][0]), bytes(out[1][1])))
                elif out[0] == INDEX:
                    event = pickle.loads(out[1][1])
                    if event["url"] in self.duplicates:
                        event["duplicate_of"] = "0000000000000000"
                        self._send("index", event["url_id"].encode(),
                                   self.reg.encode("index_event", event))
                continue
            lease = self.reg.decode("lease", bytes(out[1]))
            self.leases.append(lease)
            answer = (self.robots if lease["kind"] == "ROBOTS" else self.respond)(lease, self)
            if answer is not None:
                self._seq += 1
                heapq.heappush(self.events, (self.now + answer.after_s, self._seq,
                                             completion_record(lease, answer,
                                                               self.now + answer.after_s)))
        for key, value in moves:
            self._send("shards", key, value)

    def run(self, until_s: float) -> FrontierJob:
        """Completions and timers in time order until T0 + until_s."""
        until = T0 + until_s
        for _ in range(100_000):
            t_event = self.events[0][0] if self.events else float("inf")
            t_timer = min(self.timers)[0] / 1000 if self.timers else float("inf")
            if min(t_event, t_timer) > until:
                break
            if t_event <= t_timer:
                when, _, rec = heapq.heappop(self.events)
                self.now = max(self.now, when)
                self._send("completions", rec["host_key"].encode(),
                           self.reg.encode("completion", rec))
            else:
                ts, key = min(self.timers)
                self.timers.discard((ts, key))
                self.now, self.key = max(self.now, ts / 1000), key
                self._collect(self.fn.on_timer(ts, self.ctx))
        else:
            raise AssertionError("the virtual crawl did not settle")
        self.now = max(self.now, until)
        return self

    # what it did

    def grants(self, url: str | None = None, kind: str = "PAGE") -> list[float]:
        return [round(lease["issued_at_ms"] / 1000 - T0, 3) for lease in self.leases
                if lease["kind"] == kind and (url is None or lease["url"] == url)]

    def leased(self) -> list[str]:
        return sorted({lease["url"] for lease in self.leases if lease["kind"] == "PAGE"})

    def keyed(self, name: str, key: str) -> Any:
        state = self.runtime.state[name]
        saved, self.key = self.key, key
        try:
            return state.value() if isinstance(state, _ValueState) else dict(state.items())
        finally:
            self.key = saved


def crawl(cfg: Config, world: World, records: list[dict], until_s: float,
          respond=answer_ok, robots=None, lookahead: bool = False,
          duplicates: frozenset[str] = frozenset()) -> FrontierJob:
    job = FrontierJob(cfg, world, respond, robots, lookahead=lookahead,
                      duplicates=duplicates)
    with job.clock():
        for rec in records:
            job.discover(**rec)
        job.run(until_s)
    return job


def seeds(*paths: str, source: str = "SEED", host: str = H, **kw) -> dict:
    return {"urls": [host + p for p in paths], "source": source, **kw}


def gaps(times: list[float], digits: int = 3) -> list[float]:
    return [round(b - a, digits) for a, b in zip(times, times[1:], strict=False)]


def page_index(lease: dict, job: FrontierJob) -> int:
    return sum(1 for x in job.leases if x["kind"] == "PAGE") - 1


# -- the fetcher job's FetchFunction against 127.0.0.1 ---------------------------------------


@dataclass
class Fetched:
    outcome: str
    status: int | None
    body_bytes: int | None
    dests: tuple[str, ...]
    links: tuple[str, ...]
    keys: tuple[bytes, ...] = ()  # each row's Kafka key, beside dests


class FetcherJob:
    """The FetchFunction jobs/fetcher.py puts in its graph, opened as a task would be.
    An S3 store's requests are answered by a recorder: nothing is sent."""

    def __init__(self, cfg: Config, world: World, attempt: int = 0) -> None:
        from udfs.fetcher.operator import FetchFunction
        from udfs.wire.avro import registry

        self.trace = run_job("fetcher", cfg, world)
        self.fn = self.trace.function(FetchFunction)
        self.reg = registry()
        self.s3: list[tuple[str, str, str]] = []  # (method, url, authorization)
        self.s3_headers: list[tuple[str, dict]] = []
        self.runtime = RuntimeContext(attempt=attempt)
        self.leases = 0
        self.fn.open(self.runtime)
        client = getattr(self.fn.store, "client", None)
        if client is not None:
            record_s3(client, self.s3, self.s3_headers)

    async def fetch(self, url: str, kind: str = "PAGE", not_before_in_s: float = 0.0,
                    storage_tier: str = "standard") -> Fetched:
        rows = await self.fn.async_invoke(
            (b"k", self.lease(url, kind, not_before_in_s, storage_tier)))
        return await self.finish(rows)

    def lease(self, url: str, kind: str = "PAGE", not_before_in_s: float = 0.0,
              storage_tier: str = "standard") -> bytes:
        """An encoded LeaseRecord for `url`, due now (+ not_before_in_s)."""
        now_ms = int(time.time() * 1000) + 1
        self.leases += 1
        lease = {"lease_id": f"L-{self.leases}", "url_id": "0123456789abcdef", "url_version": 1,
                 "attempt": 1, "issued_at_ms": now_ms, "expires_at_ms": now_ms + 290_000,
                 "url": url, "host_key": split_host_key(url)[0], "kind": kind, "depth": 0,
                 "etag": None, "last_modified": None,
                 "not_before_ms": now_ms + int(not_before_in_s * 1000),
                 "storage_tier": storage_tier}
        return self.reg.encode("lease", lease)

    async def finish(self, rows: list) -> Fetched:
        """Wait for the engine to finish every lease; the first completion and the links."""
        while self.fn.engine.active():  # the engine fetches on its own loop
            self.fn.engine.check()
            await asyncio.sleep(0.005)
        self.fn.engine.check()
        rows = [*rows, *self.fn.engine.drain()]
        # Each row's kind: "C" a completion (with the URLs its fetch found, v4), "D" URLs
        # too many to go inside it (on the completions topic too, just before their
        # completion and with its key), "X" a dead letter.
        dests = tuple("D" if r[0] == "C" and DISCOVERED.wrote(self.reg, bytes(r[2])) else r[0]
                      for r in rows)
        comps = [self.reg.decode("completion", bytes(r[2]))
                 for r, kind in zip(rows, dests, strict=True) if kind == "C"]
        found = [self.reg.decode("discovered", bytes(r[2]))
                 for r, kind in zip(rows, dests, strict=True) if kind == "D"]
        found += [d for comp in comps for d in found_records(comp)]
        c = comps[0] if comps else {"outcome": "(no completion)", "http_status": None,
                                    "body_bytes": None}
        links = tuple(sorted(link["url"] for d in found for link in d["links"]))
        return Fetched(c["outcome"], c["http_status"], c["body_bytes"], dests, links,
                       tuple(bytes(r[1]) for r in rows))

    async def close(self) -> None:
        self.fn.close()


def fetch_once(cfg: Config, world: World, url: str, kind: str = "PAGE",
               window_s: float | None = None, job: FetcherJob | None = None,
               cwd: Path | None = None, storage_tier: str = "standard") -> Any:
    """One lease through FetchFunction.async_invoke; "pending" if `window_s` passes first.
    Runs in `cwd` (default: the world's), where a relative storage.local_dir lands."""
    job = job or FetcherJob(cfg, world)

    async def go():
        fetch = job.fetch(url, kind, storage_tier=storage_tier)
        try:
            if window_s is None:
                return await fetch
            return await asyncio.wait_for(fetch, window_s)
        except TimeoutError:
            return "pending"
        finally:
            await job.close()

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd or world.cwd)
        return asyncio.run(go())


def record_s3(client, log: list, headers: list | None = None) -> None:
    """Answer every request of a boto3 S3 client here (HEAD: 404, others: 200), recorded
    (and, with `headers`, each request's headers)."""
    from botocore.awsrequest import AWSResponse

    class Raw:
        def stream(self, **kwargs):
            yield b""

    def before_send(request, **kwargs):
        auth = request.headers.get("Authorization", b"")
        log.append((request.method, request.url, auth.decode() if isinstance(auth, bytes)
                    else auth))
        if headers is not None:
            headers.append((request.method, dict(request.headers)))
        return AWSResponse(request.url, 404 if request.method == "HEAD" else 200, {}, Raw())

    client.meta.events.register("before-send.s3", before_send)


# -- the frontier job's audit writer on a virtual clock -------------------------------------


class AuditJob:
    """The AuditWriter jobs/frontier.py puts in its graph, opened as a task would be, fed
    completions of one Kafka partition on a virtual processing-time clock (it is also
    the operator's context and timer service). An S3 store's requests are answered by
    a recorder: nothing is sent."""

    def __init__(self, cfg: Config, world: World) -> None:
        from udfs.frontier.audit import AuditWriter
        from udfs.wire.avro import registry

        self.fn = run_job("frontier", cfg, world).function(AuditWriter)
        self.reg = registry()
        self.key, self.offset = "crawl.completions#0", 0
        self.now_ms = int(T0 * 1000)
        self.timers: set[int] = set()
        self.s3: list[tuple[str, str, str]] = []
        self.fn.open(RuntimeContext(self))
        client = getattr(self.fn.store, "client", None)
        if client is not None:
            record_s3(client, self.s3)

    def timer_service(self) -> AuditJob:
        return self

    def current_processing_time(self) -> int:
        return self.now_ms

    def register_processing_time_timer(self, ts: int) -> None:
        self.timers.add(ts)

    def send(self, url: str) -> None:
        from pyflink.common import Row

        from udfs.wire.avro import load_examples

        rec = {**load_examples(self.reg.latest("completion"))[0], "url": url,
               "fetched_at_ms": self.now_ms}
        self.fn.process_element1(Row(b"k", self.reg.encode("completion", rec),
                                     "crawl.completions", 0, self.offset), self)
        self.offset += 1

    def advance(self, seconds: float) -> None:
        """Fire the timers due within `seconds`, in order, then move the clock there."""
        until = self.now_ms + int(seconds * 1000)
        while self.timers and min(self.timers) <= until:
            self.now_ms = min(self.timers)
            self.timers.discard(self.now_ms)
            self.fn.on_timer(self.now_ms, self)
        self.now_ms = until


def audit_counts(folder: Path) -> list[int]:
    """Records in each audit object under `folder`, in name (offset) order."""
    from udfs.core.audit import decode_records

    return [len(decode_records(p.read_bytes()))
            for p in sorted(folder.rglob("audit/**/*.jsonl.gz"))]


DEFAULTS_FILE = load_defaults()
HOLD_S = DEFAULTS_FILE["fetch"]["hold_s"]

# -- the probes ----------------------------------------------------------------------------
# Each takes (cfg, world) and returns what the consumer of the key did.


def p_in_flight(cfg, w):
    """Page leases in flight at once to one host (none answered) after 10 s."""
    job = crawl(cfg, w, [seeds("/1", "/2", "/3", "/4", "/5")], 10, answer_none)
    return len(job.grants())


def p_grant_gaps(cfg, w):
    """Seconds between page leases of one host, each fetch answered at once."""
    return gaps(crawl(cfg, w, [seeds("/1", "/2", "/3")], 100).grants())


def p_gaps_after_slow_fetches(cfg, w):
    """Seconds between page leases when each fetch takes 1 s."""
    slow = lambda lease, job: Answer(after_s=1.0, duration_s=1.0)  # noqa: E731
    return gaps(crawl(cfg, w, [seeds("/1", "/2", "/3")], 200, slow).grants())


def p_wait_after_429(cfg, w):
    """Seconds from a page answered 429 (no Retry-After) to the next page lease."""
    def respond(lease, job):
        return Answer("THROTTLED", 429) if page_index(lease, job) == 0 else Answer()
    return round(gaps(crawl(cfg, w, [seeds("/1", "/2")], 2000, respond).grants())[0], 1)


def p_waits_under_429s(cfg, w):
    """Seconds between page leases while every answer is 429 (no Retry-After)."""
    always = lambda lease, job: Answer("THROTTLED", 429)  # noqa: E731
    return gaps(crawl(cfg, w, [seeds("/1")], 3000, always).grants(), 1)[:5]


def p_allowance(cfg, w):
    """Seconds between page leases: four 429s (Retry-After: 1), then good answers."""
    def respond(lease, job):
        return Answer("THROTTLED", 429, retry_after="1") if page_index(lease, job) < 4 \
            else Answer()
    paths = [f"/{i}" for i in range(10)]
    return gaps(crawl(cfg, w, [seeds(*paths)], 300, respond).grants())


def p_pages_in_a_day(cfg, w):
    """Page leases granted within the first minute of a UTC day (8 due pages)."""
    paths = [f"/{i}" for i in range(8)]
    return len(crawl(cfg, w, [seeds(*paths)], 60).grants())


def p_lease_lifetime(cfg, w):
    """expires_at - issued_at of the first page lease, in the lease record the job writes."""
    job = crawl(cfg, w, [seeds("/1")], 5, answer_none)
    first = next(lease for lease in job.leases if lease["kind"] == "PAGE")
    return (first["expires_at_ms"] - first["issued_at_ms"]) / 1000


def p_lookahead(cfg, w):
    """How long before its not_before the second page lease of a host was granted (s)."""
    job = crawl(cfg, w, [seeds("/1", "/2", "/3")], 10, answer_none, lookahead=True)
    pages = [lease for lease in job.leases if lease["kind"] == "PAGE"]
    return round((pages[1]["not_before_ms"] - pages[1]["issued_at_ms"]) / 1000, 1)


def p_leases_out(cfg, w):
    """Page leases of one host out at once when none comes back (within 20 s)."""
    job = crawl(cfg, w, [seeds(*(f"/{i}" for i in range(16)))], 20, answer_none,
                lookahead=True)
    return sum(1 for lease in job.leases if lease["kind"] == "PAGE")


def p_hold(cfg, w):
    """The outcome of a lease whose not_before is 2 s away (held, or refused: NOT_SENT)."""
    job = FetcherJob(cfg, w)

    async def go():
        try:
            return (await job.fetch(w.url("/page"), not_before_in_s=2.0)).outcome
        finally:
            await job.close()

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(w.cwd)
        return asyncio.run(go())


def p_one_address(cfg, w):
    """Three host names on one address (127.0.0.1), a 300 ms page each, leased at once:
    (the most requests to the address at once, the shortest gap between two starts)."""
    cfg = load_config(env={}, overrides=[
        *(f"{k}={json.dumps(v)}" for k, v in cfg.changed().items()),
        "fetch.static_hosts=[a.test=127.0.0.1,b.test=127.0.0.1,c.test=127.0.0.1]"])
    job = FetcherJob(cfg, w)
    names = ("a.test", "b.test", "c.test")
    before = len(w.site.stalls)

    async def go():
        try:
            await asyncio.gather(*(job.fetch(w.url("/stall/300", name)) for name in names))
        finally:
            await job.close()

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(w.cwd)
        asyncio.run(go())
    seen = sorted((start, end) for host, start, end in w.site.stalls[before:]
                  if host in names)
    assert len(seen) == 3, seen
    most = max(sum(1 for s, e in seen if s <= start < e) for start, _ in seen)
    return most, round(min(b[0] - a[0] for a, b in zip(seen, seen[1:], strict=False)), 2)


def p_attempts_unanswered(cfg, w):
    """The attempt numbers of one page's leases when none is answered (40 minutes), while
    another host's are (the fetcher is heard from: the expiries are the page's own)."""
    def respond(lease, job):
        return Answer() if lease["url"].startswith(OTHER) else None
    job = crawl(cfg, w, [seeds("/1"), seeds(*(f"/{i}" for i in range(3000)), host=OTHER)],
                2400, respond)
    return [lease["attempt"] for lease in job.leases
            if lease["kind"] == "PAGE" and lease["url"].startswith(H + "/")]


def p_attempts_fetcher_silent(cfg, w):
    """The attempt numbers of one page's leases when the fetcher answers nothing at all
    (40 minutes: down, or cut off)."""
    job = crawl(cfg, w, [seeds("/1")], 2400, answer_none)
    return [lease["attempt"] for lease in job.leases if lease["kind"] == "PAGE"]


def p_leases_under_5xx(cfg, w):
    """Leases of one page that always answers 500, within an hour."""
    fail = lambda lease, job: Answer("SERVER_ERROR", 500)  # noqa: E731
    return len(crawl(cfg, w, [seeds("/1")], 3600, fail).grants())


def p_retry_wait(cfg, w):
    """Seconds from a 500 to the page's next lease."""
    def respond(lease, job):
        return Answer("SERVER_ERROR", 500) if page_index(lease, job) == 0 else Answer()
    return round(gaps(crawl(cfg, w, [seeds("/1")], 3000, respond).grants(H + "/1"))[0], 1)


def p_redirect_followed(cfg, w):
    """Is the target of a redirect (one hop) leased? (the job feeds it back to itself)"""
    def respond(lease, job):
        if lease["url"] == H + "/from":
            return Answer("REDIRECT", 301, location=H + "/to")
        return Answer()
    return H + "/to" in crawl(cfg, w, [seeds("/from")], 60, respond).leased()


def p_after_ssrf_refusal(cfg, w):
    """Seconds from a fetch refused by the SSRF policy to the host's next page lease."""
    def respond(lease, job):
        return Answer("ADDRESS_BLOCKED", None) if page_index(lease, job) == 0 else Answer()
    job = crawl(cfg, w, [seeds("/1", "/2")], 3 * DAY, respond)
    return round(gaps(job.grants())[0])


def p_host_goes_big(cfg, w):
    """Is the host 'big' (a memory window plus a cold queue) in keyed state, with 40 URLs?"""
    paths = [f"/{i}" for i in range(40)]
    job = crawl(cfg, w, [seeds(*paths)], 1, answer_none)
    return job.keyed("host", H)["big"]


def p_window_after_retry_after(cfg, w):
    """A big host's page answered 429 with Retry-After: 7200 — is it still in memory
    (the 'resident' keyed state), or moved to the cold queue?"""
    def respond(lease, job):
        return Answer("THROTTLED", 429, retry_after="7200") if page_index(lease, job) == 0 \
            else None
    paths = [f"/{i}" for i in range(40)]
    job = crawl(cfg, w, [seeds(*paths)], 10, respond)
    first = next(lease for lease in job.leases if lease["kind"] == "PAGE")
    return first["url_id"] in job.keyed("resident", H)


def p_sharding(cfg, w):
    """A host of 40 URLs: (URLs its owner put in shards, shards used, URLs in the first
    refill, URLs leased in 60 s)."""
    job = crawl(cfg, w, [seeds(*[f"/{i}" for i in range(40)])], 60)
    puts = [rec for _, rec in job.transfers if rec["kind"] == "PUT"]
    refills = [rec for _, rec in job.transfers if rec["kind"] == "REFILL"]
    return (sum(len(rec["urls"]) for rec in puts), len({rec["shard"] for rec in puts}),
            len(refills[0]["urls"]) if refills else None, len(job.leased()))


def p_pull_after_a_lost_answer(cfg, w):
    """The first shard answer is lost: seconds from the first pull to the next."""
    job = FrontierJob(cfg, w, answer_none)
    lost: list[dict] = []
    job.lose_transfer = lambda rec: rec["kind"] == "REFILL" and not lost and (
        lost.append(rec) or True)
    with job.clock():
        job.discover([H + f"/{i}" for i in range(20)])
        job.run(600)
    pulls = [t for t, rec in job.transfers if rec["kind"] == "PULL"]
    return round(pulls[1] - pulls[0])


def p_grants_per_call(cfg, w):
    """A host of 40 URLs, 40 in flight allowed, no gap, no answers: the leases of its
    first grants, by grant time (one call of the operator each)."""
    job = crawl(cfg, w, [seeds(*[f"/{i}" for i in range(40)])], 1, answer_none)
    return sorted(Counter(job.grants()).values(), reverse=True)[:3]


def p_near_duplicate_bucket(cfg, w):
    """Three pages whose SimHashes share band 0's value, through the job's band-0
    operator: B within distance 3 of A, C within 3 of B and 6 of A. What each is
    flagged a near duplicate of."""
    import pickle

    from udfs.core.fingerprints import band_keys, to_signed64
    from udfs.frontier.index import NearDuplicateBand, near_key

    (band0,) = [f for f in run_job("frontier", cfg, w).functions
                if isinstance(f, NearDuplicateBand) and f.band == 0]
    band0 = copy.deepcopy(band0)

    class Keys:
        key = None

    keys = Keys()
    band0.open(RuntimeContext(keys))
    a = 0
    b = a ^ 0b111  # three low bits
    c = b ^ (0b111 << 8)
    assert len({band_keys(fp)[0] for fp in (a, b, c)}) == 1  # one bucket of band 0
    out = []
    ids = {name: name.encode().hex().rjust(16, "0") for name in "abc"}  # url_ids
    for name, fp in (("a", a), ("b", b), ("c", c)):
        event = {"url_id": ids[name], "simhash": to_signed64(fp), "near_duplicate_of": None}
        keys.key = near_key(event, 0)
        (row,) = band0.process_element(pickle.dumps(event), None)
        near = pickle.loads(row[1])["near_duplicate_of"]
        out.append(None if near is None else {v: k for k, v in ids.items()}[near])
    return out


def p_live_hosts(cfg, w):
    """The hosts the frontier operator keeps live after 3 hosts of 600 URLs each."""
    hosts = ["http://a.test", "http://b.test", "http://c.test"]
    records = [seeds(*[f"/p{i}" for i in range(600)], host=h) for h in hosts]
    job = crawl(cfg, w, records, 0, answer_none)
    return list(job.fn.cache)


def p_rediscoveries(cfg, w):
    """(Rediscoveries the intake kept from the host, rediscoveries the host counted) of a
    link found again 100 s and 800 s after its first discovery."""
    job = FrontierJob(cfg, w)
    with job.clock():
        for at in (0, 100, 800):
            job.run(at)
            job.discover([H + "/a"], source="LINK", depth=1)
        job.run(900)
    return (job.intake_runtime.metrics.read("urls_rediscovered_at_intake"),
            job.runtime.metrics.read("frontier_events_total", event="urls_known"))


def revisits(source: str, depth: int = 0, priority: float | None = None, until_days: float = 3,
             answer: Callable[[int], Answer] = lambda n: Answer(), duplicate: bool = False,
             duplicate_siblings: int = 0):
    """Days between the leases of one URL answered by `answer(n)` (n: its n-th answer);
    `duplicate`: the index flags it a duplicate of another URL's page;
    `duplicate_siblings`: that many other pages of its host are flagged so."""
    def probe(cfg, w):
        url = H + "/r"
        siblings = [f"/d{i}" for i in range(duplicate_siblings)]

        def respond(lease, job):
            return answer(len(job.grants(lease["url"])) - 1)
        job = crawl(cfg, w, [seeds(*siblings, "/r", source=source, depth=depth,
                                   priority=priority)],
                    until_days * DAY, respond,
                    duplicates=frozenset({H + p for p in siblings} |
                                         ({url} if duplicate else set())))
        return gaps([t / DAY for t in job.grants(url)], 2)
    probe.__doc__ = (f"Days between revisits of a {source} URL (depth {depth}, priority "
                     f"hint {priority}{', a duplicate' if duplicate else ''}, "
                     f"{duplicate_siblings} duplicate pages on its host) within "
                     f"{until_days} days.")
    return probe


def leased_of(*records: dict, until_s: float = 60, count: bool = False):
    def probe(cfg, w):
        leased = crawl(cfg, w, list(records), until_s).leased()
        return len(leased) if count else [u.removeprefix(H) for u in leased]
    probe.__doc__ = "The pages leased within a minute of discovering " + ", ".join(
        f"{r['source']}{'@' + str(r.get('depth')) if r.get('depth') else ''} "
        f"{' '.join(u.removeprefix(H) for u in r['urls'][:3])}" for r in records)
    return probe


PRIVATE_ROBOTS = b"User-agent: FlinkCrawler\nDisallow: /private\n\nUser-agent: *\nDisallow:\n"


def p_user_agent(cfg, w):
    """Pages leased under a robots.txt group for FlinkCrawler, and the User-Agent header
    the fetcher sends."""
    job = crawl(cfg, w, [seeds("/private", "/public")], 60,
                robots=robots_with(PRIVATE_ROBOTS))
    before = len(w.site.headers)
    fetch_once(cfg, w, w.url("/page"))
    sent = [h.get("User-Agent") for h in w.site.headers[before:]]
    return [u.removeprefix(H) for u in job.leased()], sent


def p_robots_fetches(cfg, w):
    """robots.txt leases within 5500 s of a host whose pages come 1000 s apart."""
    paths = [f"/{i}" for i in range(6)]
    return len(crawl(cfg, w, [seeds(*paths)], 5500).grants(kind="ROBOTS"))


def p_robots_redirect(cfg, w):
    """Pages leased when robots.txt redirects to a file that disallows /private."""
    def robots(lease, job):
        if lease["url"].endswith("/robots.txt"):
            return Answer("REDIRECT", 301, location=H + "/robots-moved.txt")
        return Answer(body=b"User-agent: *\nDisallow: /private\n")
    job = crawl(cfg, w, [seeds("/private", "/public")], 60, robots=robots)
    return [u.removeprefix(H) for u in job.leased()]


def p_robots_retries(cfg, w):
    """Seconds between robots.txt leases while it answers 500."""
    fail = lambda lease, job: Answer("SERVER_ERROR", 500)  # noqa: E731
    job = crawl(cfg, w, [seeds("/1")], 1500, robots=fail)
    return gaps(job.grants(kind="ROBOTS"), 0)[:3]


def crawl_delay_gaps(delay: int):
    def probe(cfg, w):
        robots = robots_with(f"User-agent: *\nCrawl-delay: {delay}\n".encode())
        return gaps(crawl(cfg, w, [seeds("/1", "/2", "/3")], 100, robots=robots).grants())
    probe.__doc__ = (f"Seconds between page leases of a host whose robots.txt says "
                     f"Crawl-delay: {delay}.")
    return probe


def p_query_params(cfg, w):
    """The URL the frontier leases for a seed with tracking parameters, and the links the
    fetcher reports from a page."""
    job = crawl(cfg, w, [{"urls": [H + "/p;jsessionid=abc?utm_source=x&id=1"],
                          "source": "SEED"}], 10)
    fetched = fetch_once(cfg, w, w.url("/page"))
    base = w.url("")
    return job.leased(), [u.replace(base, "") for u in fetched.links]


class SkipCalendar:
    """A user's URL filter (urls.filters): drops every /calendar/ URL."""

    def filter(self, url: str, link: Any) -> str | None:
        return None if "/calendar/" in url else url


def p_url_filters(cfg, w):
    """The URLs the frontier leases for a seed of three pages, one under /calendar/."""
    job = crawl(cfg, w, [{"urls": [H + "/a", H + "/calendar/2026", H + "/b"],
                          "source": "SEED"}], 10)
    return sorted(job.leased())


def p_ip_literal(cfg, w):
    """A page on 127.0.0.1: the fetcher's outcome, and the frontier intake's refusals."""
    job = crawl(cfg, w, [{"urls": [w.url("/page")], "source": "SEED"}], 1)
    fetched = fetch_once(cfg, w, w.url("/page"))
    return fetched.outcome, [d["error_type"] for d in job.dead]


def fetch_outcome(path: str, kind: str = "PAGE", host: str = "127.0.0.1",
                  window_s: float | None = None, port: str = "site"):
    def probe(cfg, w):
        url = w.url(path, host) if port == "site" else f"http://{host}:{w.blackhole.port}{path}"
        got = fetch_once(cfg, w, url, kind, window_s)
        return got if got == "pending" else (got.outcome, got.status, got.body_bytes)
    probe.__doc__ = f"(outcome, status, body bytes) of the fetcher's {kind} fetch of {host}{path}"
    return probe


def p_total_timeout(cfg, w):
    """A page sent in 6 pieces 0.08 s apart; and the fetcher's bound on one lease (s)."""
    job = FetcherJob(cfg, w)
    got = fetch_once(cfg, w, w.url("/drip/6/80"), job=job)
    return got.outcome, job.fn.guard_s


def p_sitemaps(cfg, w):
    """(outcome, entries) of the fetcher's read of a 1.5 MB sitemap, and of a .xml.gz
    sitemap of a few KB that decompresses to 1.9 MB of XML (its 3 entries at the end)."""
    plain = fetch_once(cfg, w, w.url("/sitemap/1500000"), "SITEMAP")
    packed = fetch_once(cfg, w, w.url("/sitemap-gz/1900000"), "SITEMAP")
    return (plain.outcome, len(plain.links)), (packed.outcome, len(packed.links))


def dns_cached(host: str, after_s: float):
    def probe(cfg, w):
        job = FetcherJob(cfg, w)
        got = fetch_once(cfg, w, w.url("/page", host), job=job)
        return got.outcome, job.fn.cache.cached(host, time.monotonic() + after_s) is not None
    probe.__doc__ = (f"The fetcher's outcome for {host}, and whether its DNS answer is still "
                     f"cached {after_s:.0f} s later.")
    return probe


def p_dns_servers(cfg, w):
    """The DNS servers the fetcher's resolver asks (and, when they are all on 127.0.0.1,
    the outcome of a fetch of a name only they know)."""
    job = FetcherJob(cfg, w)

    async def servers():
        session = await job.fn._session()
        try:
            return session.connector._resolver._make_dns().nameservers
        except OSError as exc:  # no /etc/resolv.conf
            return [f"system resolver: {exc}"]
        finally:
            await job.close()

    names = asyncio.run(servers())
    if names and all(n.startswith("Do53:127.0.0.1@") for n in names):
        return names, fetch_once(cfg, w, w.url("/page", "a.test")).outcome
    return names, "not asked (servers off this machine)"


def p_crash(cfg, w):
    """Does the fetcher task fail after a page's response (an injected crash)?"""
    _clear(cfg["faults.marker_dir"])
    from udfs.fetcher.faults import InjectedCrash

    try:
        return fetch_once(cfg, w, w.url("/page")).outcome
    except InjectedCrash:
        return "InjectedCrash"


def p_completion_written(cfg, w):
    """Is a page's completion written (dest "C") by the fetcher?"""
    _clear(cfg["faults.marker_dir"])
    return "C" in fetch_once(cfg, w, w.url("/page")).dests


def p_parse_stall(cfg, w):
    """Did one page's fetch, store and parse take 0.25 s or more?"""
    job = FetcherJob(cfg, w)

    async def go():
        try:
            # Warm up (imports, and a parser process) away from the host's politeness gap.
            await job.fetch(w.url("/bytes/10", "localhost"))
            await job.fn.parser.parse(b"<p>warm</p>", "http://warm.test/", [])
            start = time.monotonic()
            await job.fetch(w.url("/page"))
            return time.monotonic() - start >= 0.25
        finally:
            await job.close()

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(w.cwd)
        return asyncio.run(go())


def p_fault_memory(cfg, w):
    """A completion to drop, fetched by a task and again by its restarted task."""
    _clear(cfg["faults.marker_dir"])
    try:
        first = fetch_once(cfg, w, w.url("/page"))
    except ValueError as exc:
        return f"refused at open: {exc}"
    again = fetch_once(cfg, w, w.url("/page"), job=FetcherJob(cfg, w, attempt=1))
    return "C" in first.dests, "C" in again.dests


def p_links(path: str):
    def probe(cfg, w):
        got = fetch_once(cfg, w, w.url(path))
        return got.outcome, len(got.links)
    probe.__doc__ = f"(outcome, links kept) of the fetch of {path}"
    return probe


class DropNextLinks:
    """A user's parse filter (parse.filters): drops a page's links to /next."""

    def filter(self, url: str, parse: Any, page: Any) -> Any:
        from dataclasses import replace

        return replace(parse, links=tuple(u for u in parse.links if "/next" not in u))


def p_page_links(cfg, w):
    """The links the fetcher sends to the frontier for /page (its parser processes
    run the parse filters)."""
    base = w.url("")
    return tuple(u.replace(base, "") for u in fetch_once(cfg, w, w.url("/page")).links)


def p_parsers(cfg, w):
    """Parser processes the fetcher task started for three pages fetched at once."""
    job = FetcherJob(cfg, w)

    async def go():
        try:
            await asyncio.gather(*(job.fetch(w.url(f"/page?n={i}")) for i in range(3)))
            return job.fn.parser.started
        finally:
            await job.close()

    return asyncio.run(go())


def p_parse_backpressure(cfg, w):
    """Did the fetcher take a second lease at once while the first page was being parsed?"""
    job = FetcherJob(cfg, w)

    async def go():
        try:
            rows = await job.fn.async_invoke((b"k", job.lease(w.url("/page"))))
            while job.fn.parser.waiting == 0:
                await asyncio.sleep(0.01)
            start = time.monotonic()
            rows += await job.fn.async_invoke((b"k", job.lease(w.url("/page?second"))))
            took = time.monotonic() - start
            await job.finish(rows)
            return took < 0.3
        finally:
            await job.close()

    return asyncio.run(go())


def _clear(folder: str) -> None:
    if folder:
        for f in Path(folder).glob("*"):
            f.unlink()


def p_bodies(cfg, w):
    """Where a fetched page's raw body and a completion's audit record go: files under
    the working directory, or the S3 requests each store sends (method and URL)."""
    job = FetcherJob(cfg, w)
    where = w.fresh_dir("bodies")
    fetch_once(cfg, w, w.url("/page"), job=job, cwd=where)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(where)
        audit = AuditJob(cfg, w)
        audit.send(w.url("/page"))
        audit.advance(DEFAULTS_FILE["audit"]["flush_s"] + 1)
    files = sorted(str(p.relative_to(where)) for p in where.rglob("*.gz"))
    return (type(job.fn.store).__name__, files, [(m, u) for m, u, _ in job.s3],
            type(audit.fn.store).__name__, [(m, u) for m, u, _ in audit.s3])


def p_gzip_level(cfg, w):
    """Bytes stored for one page of 8,000 words: its body object, and the WARC file."""
    where = w.fresh_dir("gzip")
    fetch_once(cfg, w, w.url("/text/8000"), cwd=where)
    return tuple(sum(p.stat().st_size for p in where.rglob(pattern))
                 for pattern in ("raw/**/*.gz", "warc/**/*.warc.gz"))


def p_warc(cfg, w):
    """The WARC files the fetcher publishes for three fetches of one page (the third after
    400 s on the writer's clock and a tick of the job): per file its folder, name and
    record types; every file's record types in order; the folder of the file being
    written after the first fetch."""
    import tempfile

    from warcio.archiveiterator import ArchiveIterator

    where = w.fresh_dir("warc")
    temp_dirs = [Path(tempfile.gettempdir()) / "crawl-warc", w.tmp / "warc-temp"]
    temp: list[str] = []

    async def go():
        job = FetcherJob(cfg, w)
        try:
            await job.fetch(w.url("/page"))
            writer = job.fn.warc
            if writer is not None:
                temp.extend(d.name for d in temp_dirs if list(d.glob(f".tmp-*{writer.host}*")))
            await job.fetch(w.url("/page"))
            if writer is not None:
                writer.clock = lambda: time.time() + 400
                job.fn._warc_checked = float("-inf")  # the next call is a tick's
                await job.fn.async_invoke((b"", b""))
                job.fn._warc_roll.result(10)
            await job.fetch(w.url("/page"))
        finally:
            await job.close()

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(where)
        asyncio.run(go())
    files, types = [], []
    for p in sorted(where.rglob("*.warc.gz")):
        with open(p, "rb") as fh:
            kinds = [r.rec_headers.get_header("WARC-Type") for r in ArchiveIterator(fh)]
        rel = p.relative_to(where)
        files.append((str(rel.parent), rel.name, kinds))
        types += kinds
    return {"files": files, "types": types, "temp": temp}


def p_audit_flushes(cfg, w):
    """Records in each audit object the frontier job's AuditWriter has written: after
    five completions of one partition a second apart, 25 s later, and 60 s after that."""
    where = w.fresh_dir("audit")
    seen = []
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(where)
        job = AuditJob(cfg, w)
        for i in range(5):
            job.send(f"{H}/p{i}")
            job.advance(1)
        for step in (0, 25, 60):
            job.advance(step)
            seen.append(audit_counts(where))
    return seen


def p_s3(cfg, w):
    """The S3 requests the fetcher's store sends for a page (method, URL), the credential
    and region they are signed with, and which secret signs them."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", "probe-default-key")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "probe-default-secret")
        mp.setenv("PROBE_OTHER_KEY", "probe-other-key")
        mp.setenv("PROBE_OTHER_SECRET", "probe-other-secret")
        job = FetcherJob(cfg, w)
        fetch_once(cfg, w, w.url("/page"), job=job)
        secret = job.fn.store.client._request_signer._credentials.get_frozen_credentials()
    scopes = sorted({m.group(1) for *_, auth in job.s3
                     if (m := re.search(r"Credential=([^/]+/)\d+/([^/]+)", auth))})
    regions = sorted({m.group(1) for *_, auth in job.s3
                      if (m := re.search(r"Credential=[^/]+/\d+/([^/]+)/", auth))})
    requests = [(m, re.sub(r"[0-9a-f]{64}", "<sha>", u)) for m, u, _ in job.s3]
    return requests, scopes, regions, secret.secret_key


def p_s3_tiers(cfg, w):
    """The storage class of the body PUT for a page leased at each storage tier."""
    out = {}
    for tier in ("standard", "low"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("AWS_ACCESS_KEY_ID", "probe-default-key")
            mp.setenv("AWS_SECRET_ACCESS_KEY", "probe-default-secret")
            job = FetcherJob(cfg, w)
            fetch_once(cfg, w, w.url("/page"), job=job, storage_tier=tier)
        # The body's PUT (the WARC file and its index go in the bucket's default class).
        puts = [h for (m, h), (_, u, _) in zip(job.s3_headers, job.s3, strict=True)
                if m == "PUT" and "/raw/" in u]
        out[tier] = [v.decode() if isinstance(v, bytes) else v
                     for v in (h.get("x-amz-storage-class") for h in puts)]
    return out


def p_s3_service(cfg, w):
    """The S3 requests, and the port the local SeaweedFS gateway is started on."""
    s3 = local_stack(cfg, w)["s3_cmd"]
    return p_s3(cfg, w)[0], [a for a in s3 if a.startswith("-s3.port=")]


def p_bucket(cfg, w):
    """The bucket the store writes to, and the one `crawl local up` creates."""
    import crawler.stack.local as local
    from udfs.storage.objectstore import s3_client

    made: list = []

    def hooked(c):
        client = s3_client(c)
        record_s3(client, made)
        return client

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(local, "s3_client", hooked)
        local.ensure_bucket(cfg)
    return p_s3(cfg, w)[0], [(m, u) for m, u, _ in made]


def local_stack(cfg: Config, world: World) -> dict[str, Any]:
    """The local stack's command lines and the broker's server.properties (nothing starts)."""
    import crawler.stack.local as local

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(world.cwd)
        mp.setattr(local.deps, "ensure_kafka", lambda version: None)
        mp.setattr(local, "_weed_binary", lambda: "weed")
        stack = local.LocalStack(cfg)
        kafka, s3 = stack.services
        (kafka.data).mkdir(parents=True, exist_ok=True)
        (kafka.data / "meta.properties").touch()  # formatted: no java run here
        kafka.prepare()
        props = [line for line in kafka.properties.read_text().splitlines()
                 if "listeners" in line or "voters" in line]
        return {"kafka_ports": kafka.ports(), "kafka_cmd": kafka.command(),
                "kafka_props": props, "s3_cmd": s3.command(), "s3_ports": s3.ports(),
                "state_dir": stack.state_dir}


def p_kafka_service(cfg, w):
    """The local broker's command line (heap, classpath) and listeners."""
    s = local_stack(cfg, w)
    return s["kafka_cmd"], s["kafka_props"], s["kafka_ports"]


def p_s3_service_cmd(cfg, w):
    """The local SeaweedFS server's command line (every port) and the ports it checks."""
    s = local_stack(cfg, w)
    return [a for a in s["s3_cmd"] if "port" in a], s["s3_ports"]


def cluster_conf(cfg: Config, world: World) -> dict[str, Any]:
    from crawler.stack.cluster import Cluster

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(world.cwd)
        cluster = Cluster(cfg)
        cluster.prepare()
        conf = yaml.safe_load((cluster.root / "conf" / "config.yaml").read_text())
        return {"conf": conf, "rest": cluster.rest, "ports": cluster.jobmanager.ports(),
                "root": cluster.root}


def p_cluster(cfg, w):
    """The session cluster's conf/config.yaml, REST address and JobManager ports."""
    c = cluster_conf(cfg, w)
    return c["conf"], c["rest"], c["ports"]


def cli_up(cfg: Config, world: World) -> list[tuple[str, float]]:
    """`crawl local up` and `crawl cluster up`: (service, ready timeout) of each start."""
    import crawler.cli as cli
    import crawler.stack.local as local

    started: list[tuple[str, float]] = []

    def start(self, timeout_s):
        started.append((self.name, timeout_s))
        return f"{self.name}: started"

    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(None):
        mp.chdir(world.cwd)
        mp.setattr(local._Service, "start", start)
        mp.setattr(local, "ensure_bucket", lambda c: "bucket")
        mp.setattr(local, "ensure_topics", lambda c: [])
        mp.setattr(local.deps, "ensure_kafka", lambda version: None)
        config = str(world.config_file(cfg))
        assert cli.main(["local", "up", "--config", config]) == 0
        assert cli.main(["cluster", "up", "--config", config]) == 0
    return started


def p_taskmanagers(cfg, w):
    """The services `crawl cluster up` starts."""
    return [name for name, _ in cli_up(cfg, w) if name.startswith("taskmanager")]


def p_ready_timeouts(cfg, w):
    """How long `crawl local up` and `crawl cluster up` wait for each service."""
    return sorted(set(cli_up(cfg, w)))


class _Admin:
    """kafka.admin.KafkaAdminClient, recorded: the broker has no topics yet."""

    made: list[_Admin] = []

    def __init__(self, **kwargs) -> None:
        self.kwargs, self.created = kwargs, []
        _Admin.made.append(self)

    def describe_topics(self):
        return [{"name": t.name, "partitions": [0] * t.num_partitions} for t in self.created]

    def create_topics(self, topics) -> None:
        self.created += topics

    def close(self) -> None:
        pass


class _Producer:
    made: list[_Producer] = []

    def __init__(self, **kwargs) -> None:
        self.kwargs, self.sent = kwargs, []
        _Producer.made.append(self)

    def send(self, topic, value, key=None):
        self.sent.append(topic)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def kafka_tools(cfg: Config) -> tuple[_Admin, _Producer]:
    """`crawl topics create` (ensure_topics) and `crawl seed` (publish_seeds), recorded."""
    import kafka
    import kafka.admin

    from crawler.run import publish_seeds
    from crawler.stack.local import ensure_topics

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kafka.admin, "KafkaAdminClient", _Admin)
        mp.setattr(kafka, "KafkaProducer", _Producer)
        ensure_topics(cfg)
        publish_seeds(cfg, ["http://a.test/"])
    return _Admin.made[-1], _Producer.made[-1]


def p_topics_created(cfg, w):
    """{topic: (partitions, retention.ms)} that `crawl topics create` creates."""
    admin, _ = kafka_tools(cfg)
    return {t.name: (t.num_partitions, t.topic_configs["retention.ms"]) for t in admin.created}


def p_topic_wiring(cfg, w):
    """Topics each job reads and writes, that ensure_topics creates and `crawl seed` sends to."""
    out = {}
    for name in ("frontier", "fetcher"):
        out[name] = sorted(
            f"{'reads' if t.startswith('src_') else 'writes'} {opts['topic']} "
            f"{opts.get('properties.group.id') or opts.get('sink.transactional-id-prefix')}"
            for t, opts in run_job(name, cfg, w).tables().items() if "topic" in opts)
    admin, producer = kafka_tools(cfg)
    out["created"] = sorted(t.name for t in admin.created)
    out["seeded"] = sorted(producer.sent)
    return out


def p_brokers(cfg, w):
    """The brokers the jobs' tables, the tools and the local broker use."""
    jobs = sorted({opts.get("properties.bootstrap.servers") for name in ("frontier", "fetcher")
                   for opts in run_job(name, cfg, w).tables().values()} - {None})
    admin, producer = kafka_tools(cfg)
    return (jobs, admin.kwargs["bootstrap_servers"], producer.kwargs["bootstrap_servers"],
            local_stack(cfg, w)["kafka_props"])


def p_group_ids(cfg, w):
    """Consumer group ids of the jobs' Kafka sources."""
    return sorted({opts["properties.group.id"] for name in ("frontier", "fetcher")
                   for opts in run_job(name, cfg, w).tables().values()
                   if "properties.group.id" in opts})


def p_tool_timeouts(cfg, w):
    """request_timeout_ms of `crawl topics create`'s admin client and `crawl seed`'s producer."""
    admin, producer = kafka_tools(cfg)
    return admin.kwargs["request_timeout_ms"], producer.kwargs["request_timeout_ms"]


def p_source_fetches(cfg, w):
    """Per job, what each Kafka source asks of a broker per fetch (min bytes, max wait)."""
    return {name: sorted({(opts.get("properties.fetch.min.bytes"),
                           opts.get("properties.fetch.max.wait.ms"))
                          for t, opts in run_job(name, cfg, w).tables().items()
                          if t.startswith("src_")})
            for name in ("frontier", "fetcher")}


def p_producer_linger(cfg, w):
    """Per job, the linger.ms of each Kafka sink, by its delivery guarantee."""
    return {name: sorted({(opts.get("sink.delivery-guarantee"), opts.get("properties.linger.ms"))
                          for t, opts in run_job(name, cfg, w).tables().items()
                          if t.startswith("sink")})
            for name in ("frontier", "fetcher")}


def p_clock(cfg, w):
    """The frontier job's crawl-clock table and its sources' idle timeout."""
    trace = run_job("frontier", cfg, w)
    return trace.tables()["crawl_clock"], trace.table_config


def p_flink(cfg, w):
    """The Flink configuration (and parallelism) make_env builds for each job."""
    return {name: (run_job(name, cfg, w, real_env=True).flink,
                   run_job(name, cfg, w, real_env=True).parallelism)
            for name in ("frontier", "fetcher")}


def p_state_dir(cfg, w):
    """Where the jobs checkpoint and log RocksDB (a job started by hand, without a
    FLINK_LOG_DIR), and the local stack's and cluster's folders."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("FLINK_LOG_DIR", raising=False)
        trace = run_job("fetcher", cfg, w, real_env=True)
    return (trace.flink.get("execution.checkpointing.dir"),
            trace.flink.get("state.backend.rocksdb.log.dir"),
            str(local_stack(cfg, w)["state_dir"]), str(cluster_conf(cfg, w)["root"]))


# -- the table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    key: str
    old: Any
    new: Any


@dataclass(frozen=True)
class Effect:
    probe: Callable[[Config, World], Any]
    changed: Any  # the changed value, or a function of (world, key) giving it
    expect: Callable[[Any, Any, Change], bool] | None = None  # (default, changed result)
    claim: str = ""  # what the comment promises, for the failure message
    base: tuple[str, ...] | Callable[[World], list[str]] = ()  # overrides for both runs


def flink_is(job: str, conf_key: str, value: str) -> Callable[[Any, Any, Change], bool]:
    return lambda d, c, ch: c[job][0].get(conf_key) == value


def both_jobs(conf_key: str, value: str) -> Callable[[Any, Any, Change], bool]:
    return lambda d, c, ch: all(c[j][0].get(conf_key) == value for j in ("frontier", "fetcher"))


def duration_ms(text: str) -> float:
    """A Flink duration ("500ms", "20 s", "1 min") in milliseconds."""
    m = re.fullmatch(r"\s*([\d.]+)\s*(ms|s|min)?\s*", text or "")
    assert m, f"not a duration: {text!r}"
    return float(m.group(1)) * {"ms": 1, "s": 1000, "min": 60000, None: 1}[m.group(2)]


def both_durations(conf_key: str, ms: float) -> Callable[[Any, Any, Change], bool]:
    return lambda d, c, ch: all(duration_ms(c[j][0].get(conf_key)) == ms
                                for j in ("frontier", "fetcher"))


def within(lo: float, hi: float) -> Callable[[Any, Any, Change], bool]:
    return lambda d, c, ch: lo <= c <= hi


def marker(w: World) -> list[str]:
    folder = w.tmp / "fault-markers"
    folder.mkdir(exist_ok=True)
    return [f"faults.marker_dir={folder}"]


def dns_base(w: World) -> list[str]:
    return [*LOOPBACK_NETS, w.dns_override()]


S3_BASE = ('storage.backend="s3"',)
BIG = ("frontier.max_resident_urls=16",)
TOPIC_NAME = lambda w, key: "renamed." + key.split(".")[1]  # noqa: E731


def _renamed(d, c, ch: Change) -> bool:
    """Every use of the old topic name (reads, writes, creation, seeds) now uses the new one."""
    return ch.old in repr(d) and all(
        sorted(s.replace(ch.old, ch.new) for s in d[part]) == c[part] for part in d)


EFFECTS: dict[str, Effect] = {
    # kafka
    "kafka.bootstrap_servers": Effect(
        p_brokers, "127.0.0.1:29092",
        lambda d, c, ch: c[0] == [ch.new] and c[1] == c[2] == ch.new
        and any("PLAINTEXT://127.0.0.1:29092" in line for line in c[3]),
        "the jobs, the tools and the local broker all use the configured brokers"),
    "kafka.group_id_prefix": Effect(
        p_group_ids, "other", lambda d, c, ch: c and all(g.startswith("other.") for g in c),
        "every consumer group id of the jobs starts with the prefix"),
    "kafka.request_timeout_ms": Effect(p_tool_timeouts, 5000,
                                       lambda d, c, ch: c == (5000, 5000)),
    "kafka.fetch_min_bytes": Effect(
        p_source_fetches, 65536,
        lambda d, c, ch: all(c[j] and all(least == "65536" for least, _ in c[j])
                             for j in ("frontier", "fetcher")),
        "every Kafka source of both jobs asks for at least this many bytes per fetch"),
    "kafka.fetch_max_wait_ms": Effect(
        p_source_fetches, 50,
        lambda d, c, ch: all(c[j] and all(wait == "50" for _, wait in c[j])
                             for j in ("frontier", "fetcher")),
        "every Kafka source of both jobs lets a broker hold a fetch this long"),
    "kafka.linger_ms": Effect(
        p_producer_linger, 20,
        lambda d, c, ch: ("at-least-once", "20") in c["fetcher"]
        and ("at-least-once", "20") in c["frontier"]
        and all(lg == "20" for j in c for g, lg in c[j] if g == "at-least-once"),
        "every at-least-once Kafka sink of both jobs lingers this long"),
    # topics: the five streams
    "topics.*.name": Effect(p_topic_wiring, TOPIC_NAME, _renamed,
                            "the jobs read and write, and the tools create, the named topic"),
    "topics.*.partitions": Effect(
        p_topics_created, 7,
        lambda d, c, ch: c[load_config(env={})[ch.key.rsplit(".", 1)[0] + ".name"]][0] == 7),
    "topics.*.retention_ms": Effect(
        p_topics_created, 12345,
        lambda d, c, ch: c[load_config(env={})[ch.key.rsplit(".", 1)[0] + ".name"]][1]
        == "12345"),
    # urls
    "urls.drop_query_params": Effect(
        p_query_params, ["ID"],
        lambda d, c, ch: c == (["http://a.test/p;jsessionid=abc?utm_source=x"],
                               ["/next?utm_source=x", "/p;jsessionid=abc"]),
        "names are case-insensitive; query and path parameters with these names are dropped",
        base=tuple(LOOPBACK_NETS)),
    "urls.filters": Effect(
        p_url_filters, ["tests.unit.test_config_keys:SkipCalendar"],
        lambda d, c, ch: any("/calendar/" in u for u in d)
        and not any("/calendar/" in u for u in c) and len(c) == len(d) - 1,
        "a URL the filter drops is never leased; the others are"),
    # robots
    "robots.user_agent": Effect(
        p_user_agent, "OtherBot",
        lambda d, c, ch: d == (["/public"], ["FlinkCrawler"])
        and c == (["/private", "/public"], ["OtherBot"]),
        "the robots.txt group naming the token is obeyed; the token is the User-Agent",
        base=tuple(LOOPBACK_NETS)),
    "robots.cache_ttl_s": Effect(p_robots_fetches, 3600.0, lambda d, c, ch: c == 2,
                                 base=("politeness.min_gap_s=1000",)),
    "robots.max_redirects": Effect(p_robots_redirect, 0,
                                   lambda d, c, ch: c == ["/private", "/public"]),
    "robots.retry_base_s": Effect(p_robots_retries, 600.0, lambda d, c, ch: c[0] == 600),
    "robots.retry_max_s": Effect(p_robots_retries, 100.0, lambda d, c, ch: c[:2] == [60, 100]),
    "robots.crawl_delay": Effect(crawl_delay_gaps(5), "ignore",
                                 lambda d, c, ch: d == [5.0, 5.0] and c == [1.0, 1.0]),
    "robots.crawl_delay_cap_s": Effect(crawl_delay_gaps(10), 2.0,
                                       lambda d, c, ch: c == [2.0, 2.0]),
    # politeness
    "politeness.max_in_flight": Effect(p_in_flight, 3, lambda d, c, ch: (d, c) == (1, 3)),
    "politeness.min_gap_s": Effect(p_grant_gaps, 5.0, lambda d, c, ch: c == [5.0, 5.0]),
    "politeness.duration_factor": Effect(p_gaps_after_slow_fetches, 2.0,
                                         lambda d, c, ch: c == [3.0, 3.0]),
    "politeness.max_gap_s": Effect(p_gaps_after_slow_fetches, 3.0,
                                   lambda d, c, ch: d == [11.0, 11.0] and c == [4.0, 4.0]),
    "politeness.backoff_base_s": Effect(p_wait_after_429, 300.0, within(150, 300)),
    "politeness.backoff_max_s": Effect(p_waits_under_429s, 40.0,
                                       lambda d, c, ch: max(c) <= 40 < max(d)),
    "politeness.allowance_cut": Effect(p_allowance, 0.25,
                                       lambda d, c, ch: (d[1], c[1]) == (2.0, 4.0)),
    "politeness.allowance_min": Effect(p_allowance, 0.5,
                                       lambda d, c, ch: max(c) <= 2.0 < max(d)),
    "politeness.allowance_recovery": Effect(
        p_allowance, 2.0,
        lambda d, c, ch: d[5:8] == [8.0, 6.4, 5.12] and c[5:8] == [5.0, 2.5, 1.25]),
    "politeness.daily_budget": Effect(p_pages_in_a_day, 3, lambda d, c, ch: (d, c) == (8, 3)),
    # frontier
    "frontier.lease_timeout_s": Effect(p_lease_lifetime, 120.0, lambda d, c, ch: c == 120.0),
    "frontier.lookahead_s": Effect(p_lookahead, 0.0, lambda d, c, ch: d > 0.0 and c == 0.0,
                                   "a follower is granted up to lookahead_s before its time"),
    "frontier.max_lookahead_leases": Effect(p_leases_out, 0,
                                            lambda d, c, ch: d == 1 + DEFAULTS_FILE["frontier"]
                                            ["max_lookahead_leases"] and c == 1,
                                            "leases out per host: in-flight limit + this"),
    "frontier.max_lease_attempts": Effect(p_attempts_unanswered, 1,
                                          lambda d, c, ch: (d, c) == ([1, 2, 3], [1])),
    "frontier.max_retries": Effect(p_leases_under_5xx, 0, lambda d, c, ch: (d, c) == (4, 1)),
    "frontier.retry_base_s": Effect(p_retry_wait, 600.0, within(300, 600)),
    "frontier.max_redirect_hops": Effect(p_redirect_followed, 0,
                                         lambda d, c, ch: (d, c) == (True, False)),
    "frontier.daily_fetch_budget": Effect(p_pages_in_a_day, 2, lambda d, c, ch: c == 2),
    "frontier.address_block_s": Effect(p_after_ssrf_refusal, 600.0, within(600, 610)),
    "frontier.max_resident_urls": Effect(p_host_goes_big, 16,
                                         lambda d, c, ch: (d, c) == (False, True)),
    "frontier.cold_bucket_s": Effect(p_window_after_retry_after, 86400.0,
                                     lambda d, c, ch: (d, c) == (False, True), base=BIG),
    "frontier.shard_above_urls": Effect(
        p_sharding, 10, lambda d, c, ch: d == (0, 0, None, 40) and c[0] == 30 and c[3] == 40,
        "past the threshold, new URLs go to shards; every URL is still leased"),
    "frontier.host_shards": Effect(
        p_sharding, 2, lambda d, c, ch: d[1] > 2 and c[1] == 2 and c[3] == 40,
        base=("frontier.shard_above_urls=10",)),
    "frontier.shard_refill_urls": Effect(
        p_sharding, 1, lambda d, c, ch: d[2] > 1 and c[2] == 1 and c[3] == 40,
        base=("frontier.shard_above_urls=10",)),
    "frontier.shard_pull_timeout_s": Effect(
        p_pull_after_a_lost_answer, 30.0, lambda d, c, ch: (d, c) == (120, 30),
        base=("frontier.shard_above_urls=10",)),
    "frontier.clock_idle_ms": Effect(
        p_clock, 5000,
        lambda d, c, ch: c[1] == {"table.exec.source.idle-timeout": "5000 ms"}),
    "frontier.clock_topic": Effect(
        p_clock, "crawl.clock",
        lambda d, c, ch: c[0].get("connector") == "kafka" and c[0].get("topic") == "crawl.clock"),
    "frontier.max_grants_per_call": Effect(
        p_grants_per_call, 5, lambda d, c, ch: (d, c) == ([16, 16, 8], [5, 5, 5]),
        base=("politeness.max_in_flight=40", "politeness.min_gap_s=0",
              "politeness.duration_factor=0")),
    "frontier.near_duplicate_bucket": Effect(
        p_near_duplicate_bucket, 1, lambda d, c, ch: (d, c) == ([None, "a", "b"],
                                                               [None, "a", None]),
        "past the bucket's size, a page is compared, not remembered"),
    "frontier.cache_urls": Effect(
        p_live_hosts, 1000,
        lambda d, c, ch: d == ["http://a.test", "http://b.test", "http://c.test"]
        and c == ["http://c.test"]),
    "frontier.cache_hosts": Effect(
        p_live_hosts, 2,
        lambda d, c, ch: d == ["http://a.test", "http://b.test", "http://c.test"]
        and c == ["http://b.test", "http://c.test"]),
    "frontier.intake_recent_urls": Effect(
        p_rediscoveries, 0, lambda d, c, ch: (d, c) == ((1, 1), (0, 2)),
        "0: every URL goes to its host"),
    "frontier.intake_recent_s": Effect(
        p_rediscoveries, 1000.0, lambda d, c, ch: (d, c) == ((1, 1), (2, 0)),
        "not sent again within intake_recent_s"),
    # recrawl (days between revisits)
    "recrawl.min_interval_s": Effect(
        revisits("LINK", 1, until_days=6, answer=lambda n: Answer(text=f"v{n}")), 129600.0,
        lambda d, c, ch: c[:2] == [2.0, 1.5], base=("recrawl.max_interval_s=172800",)),
    "recrawl.max_interval_s": Effect(revisits("LINK", 1, until_days=31), 864000.0,
                                     lambda d, c, ch: (d, c[0]) == ([30.0], 10.0)),
    "recrawl.high_value_interval_s": Effect(revisits("SEED", until_days=3), 172800.0,
                                            lambda d, c, ch: c == [2.0]),
    "recrawl.high_value_priority": Effect(revisits("LINK", 1, until_days=3), 0.5,
                                          lambda d, c, ch: (d, c) == ([], [1.0, 1.0])),
    "recrawl.tombstone_interval_s": Effect(
        revisits("SEED", until_days=91, answer=lambda n: Answer("GONE", 404)), 864000.0,
        lambda d, c, ch: d == [90.0] and c[0] == 10.0),
    "recrawl.failed_visit_interval_s": Effect(
        revisits("SEED", until_days=8, answer=lambda n: Answer("SERVER_ERROR", 500)),
        172800.0, lambda d, c, ch: round(d[0]) == 7 and round(c[0]) == 2,
        base=("frontier.max_retries=0",)),
    "recrawl.seed_priority": Effect(revisits("SEED", until_days=3), 0.5,
                                    lambda d, c, ch: (d, c) == ([1.0, 1.0], [])),
    "recrawl.link_priority": Effect(revisits("LINK", 1, until_days=3), 0.9,
                                    lambda d, c, ch: (d, c) == ([], [1.0, 1.0])),
    "recrawl.depth_decay": Effect(revisits("SITEMAP", 2, 1.0, until_days=3), 0.5,
                                  lambda d, c, ch: (d, c) == ([1.0, 1.0], [])),
    "recrawl.learned_priority": Effect(revisits("SEED", until_days=9, duplicate=True), False,
                                       lambda d, c, ch: (d, c[:2]) == ([4.0, 4.0], [1.0, 1.0])),
    "recrawl.duplicate_interval_factor": Effect(
        revisits("SEED", until_days=9, duplicate=True), 2.0,
        lambda d, c, ch: (d, c) == ([4.0, 4.0], [2.0, 2.0, 2.0, 2.0])),
    "recrawl.duplicate_host_share": Effect(
        revisits("SEED", until_days=9, duplicate_siblings=20), 1.0,
        lambda d, c, ch: d[-1] == 4.0 and set(c) == {1.0}),
    # traps
    "traps.max_depth": Effect(leased_of(seeds("/"), seeds("/deep", source="LINK", depth=3)), 2,
                              lambda d, c, ch: (d, c) == (["/", "/deep"], ["/"])),
    "traps.max_url_length": Effect(leased_of(seeds("/", "/" + "x" * 130)), 100,
                                   lambda d, c, ch: c == ["/"]),
    "traps.max_query_params": Effect(leased_of(seeds("/", "/q?a=1&b=2&c=3")), 2,
                                     lambda d, c, ch: c == ["/"]),
    "traps.max_segment_repeats": Effect(leased_of(seeds("/", "/x/y/x/y")), 1,
                                        lambda d, c, ch: c == ["/"]),
    "traps.template_budget": Effect(
        leased_of(seeds(*[f"/item/{i}" for i in range(20)]), count=True), 5,
        lambda d, c, ch: (d, c) == (20, 5)),
    "traps.template_sample_every": Effect(
        leased_of(seeds(*[f"/item/{i}" for i in range(25)]), count=True), 2,
        lambda d, c, ch: (d, c) == (5, 15), base=("traps.template_budget=5",)),
    "traps.max_templates_per_host": Effect(
        leased_of(seeds(*[f"/{t}/{i}" for t in "abcde" for i in (1, 2)]), count=True), 2,
        lambda d, c, ch: (d, c) == (10, 7), base=("traps.template_budget=3",)),
    # fetch
    "fetch.allowed_networks": Effect(
        p_ip_literal, ["127.0.0.0/8"],
        lambda d, c, ch: d == ("ADDRESS_BLOCKED", ["ADDRESS_BLOCKED"]) and c == ("OK", [])),
    "fetch.static_hosts": Effect(
        fetch_outcome("/page", host="site.test"), ["site.test=127.0.0.1"],
        lambda d, c, ch: d[0] == "DNS_ERROR" and c[0] == "OK", base=dns_base),
    "fetch.connect_timeout_s": Effect(
        fetch_outcome("/", window_s=0.6, port="blackhole"), 0.2,
        lambda d, c, ch: d == "pending" and c[0] == "TIMEOUT", base=tuple(LOOPBACK_NETS)),
    "fetch.read_timeout_s": Effect(fetch_outcome("/stall/400"), 0.1,
                                   lambda d, c, ch: (d[0], c[0]) == ("OK", "TIMEOUT"),
                                   base=tuple(LOOPBACK_NETS)),
    "fetch.total_timeout_s": Effect(p_total_timeout, 0.25,
                                    lambda d, c, ch: d == ("OK", 90.0 + HOLD_S)
                                    and c == ("TIMEOUT", 30.25 + HOLD_S),
                                    base=tuple(LOOPBACK_NETS)),
    "fetch.max_body_bytes": Effect(fetch_outcome("/bytes/20000"), 4096,
                                   lambda d, c, ch: (d[0], c[0]) == ("OK", "TOO_LARGE"),
                                   base=tuple(LOOPBACK_NETS)),
    "fetch.max_decompressed_bytes": Effect(fetch_outcome("/gzip/20000"), 4096,
                                           lambda d, c, ch: (d[0], c[0]) == ("OK", "TOO_LARGE"),
                                           base=tuple(LOOPBACK_NETS)),
    "fetch.max_robots_bytes": Effect(
        fetch_outcome("/robots/600000", kind="ROBOTS"), 1048576,
        lambda d, c, ch: d[2] == 524288 and c[2] == 600000 + len(ROBOTS_OK),
        base=tuple(LOOPBACK_NETS)),
    "fetch.max_sitemap_bytes": Effect(
        p_sitemaps, 1048576,
        lambda d, c, ch: d == (("OK", 3), ("OK", 3)) and c[0] == ("TOO_LARGE", 0)
        and c[1][1] == 0,
        "a sitemap is read up to max_sitemap_bytes both ways: a plain one past it is "
        "TOO_LARGE, and a .xml.gz file is decompressed by the sitemap parser up to the "
        "same limit (so entries past 1 MiB of XML are not read)",
        base=tuple(LOOPBACK_NETS)),
    "fetch.dns_ttl_min_s": Effect(dns_cached("a.test", 100), 200.0,
                                  lambda d, c, ch: (d[1], c[1]) == (False, True), base=dns_base),
    "fetch.dns_ttl_max_s": Effect(dns_cached("chain.test", 200), 100.0,
                                  lambda d, c, ch: (d[1], c[1]) == (True, False), base=dns_base),
    "fetch.dns_negative_ttl_s": Effect(dns_cached("nx.test", 100), 300.0,
                                       lambda d, c, ch: (d, c) == (("DNS_ERROR", False),
                                                                   ("DNS_ERROR", True)),
                                       base=dns_base),
    "fetch.dns_servers": Effect(
        p_dns_servers, lambda w, key: [f"127.0.0.1:{w.dns.port}"],
        lambda d, c, ch: c[0] == [f"Do53:127.0.0.1@{ch.new[0].split(':')[1]}"] and c[1] == "OK",
        base=tuple(LOOPBACK_NETS)),
    "fetch.dns_timeout_s": Effect(fetch_outcome("/page", host="delayed.test"), 0.2,
                                  lambda d, c, ch: (d[0], c[0]) == ("CONNECT_ERROR", "DNS_ERROR"),
                                  base=dns_base),
    "fetch.bundle_size": Effect(p_flink, 50,
                                flink_is("fetcher", "python.fn-execution.bundle.size", "50")),
    "fetch.bundle_time_ms": Effect(p_flink, 40,
                                   flink_is("fetcher", "python.fn-execution.bundle.time", "40")),
    "fetch.ip_min_gap_s": Effect(p_one_address, 0.5,
                                 lambda d, c, ch: d[1] < 0.2 and c[1] >= 0.49,
                                 "requests to one address start at least this far apart",
                                 base=tuple(LOOPBACK_NETS)),
    "fetch.ip_max_in_flight": Effect(p_one_address, 1,
                                     lambda d, c, ch: d[0] == 3 and c[0] == 1,
                                     "at most this many requests to one address at once",
                                     base=tuple(LOOPBACK_NETS)),
    "fetch.hold_s": Effect(p_hold, 1.6, lambda d, c, ch: (d, c) == ("OK", "NOT_SENT"),
                           "a lease whose turn is further away than hold_s is not sent",
                           # (hold_s must exceed the look-ahead: a shorter one for both)
                           base=(*LOOPBACK_NETS, "frontier.lookahead_s=1.5")),
    # faults
    "faults.crash_after_response": Effect(p_crash, "/page",
                                          lambda d, c, ch: (d, c) == ("OK", "InjectedCrash"),
                                          base=lambda w: [*LOOPBACK_NETS, *marker(w)]),
    "faults.drop_completion": Effect(p_completion_written, "/page",
                                     lambda d, c, ch: (d, c) == (True, False),
                                     base=lambda w: [*LOOPBACK_NETS, *marker(w)]),
    "faults.parse_delay_s": Effect(p_parse_stall, 0.3, lambda d, c, ch: (d, c) == (False, True),
                                   base=tuple(LOOPBACK_NETS)),
    "faults.marker_dir": Effect(
        p_fault_memory, lambda w, key: str(w.tmp / "fault-markers-2"),
        lambda d, c, ch: d.startswith("refused at open") and c == (False, True),
        "each drop happens once per URL, remembered across a task restart",
        base=(*LOOPBACK_NETS, 'faults.drop_completion="/page"')),
    # parse
    "parse.workers": Effect(p_parsers, 3, lambda d, c, ch: (d, c) == (2, 3),
                            "each fetcher task runs that many parser processes",
                            base=(*LOOPBACK_NETS, "faults.parse_delay_s=0.5")),
    "parse.cpu_limit_s": Effect(p_links("/hostile/deep/30000"), 0.2,
                                lambda d, c, ch: d[0] == "OK" and c == ("PARSE_TIMEOUT", 0),
                                "a page past its CPU time ends as PARSE_TIMEOUT",
                                base=tuple(LOOPBACK_NETS)),
    "parse.memory_limit_mb": Effect(p_links("/hostile/tree/600000"), 128,
                                    lambda d, c, ch: (d[0], c[0]) == ("OK", "PARSE_TIMEOUT"),
                                    "a page past the parser's memory ends as PARSE_TIMEOUT",
                                    base=tuple(LOOPBACK_NETS)),
    "parse.max_bytes": Effect(p_links("/hostile/late/3000"), 2048,
                              lambda d, c, ch: (d, c) == (("OK", 1), ("OK", 0)),
                              "the body past max_bytes is not parsed",
                              base=tuple(LOOPBACK_NETS)),
    "parse.max_links": Effect(p_links("/hostile/links/40"), 3,
                              lambda d, c, ch: (d, c) == (("OK", 40), ("OK", 3)),
                              base=tuple(LOOPBACK_NETS)),
    "parse.filters": Effect(
        p_page_links, ["tests.unit.test_config_keys:DropNextLinks"],
        lambda d, c, ch: any("/next" in u for u in d)
        and c == tuple(u for u in d if "/next" not in u) and len(c) == len(d) - 1,
        "a link the filter drops is not sent to the frontier; the others are",
        base=tuple(LOOPBACK_NETS)),
    "parse.max_waiting": Effect(p_parse_backpressure, 1, lambda d, c, ch: (d, c) == (True, False),
                                "no new lease is taken while max_waiting pages wait",
                                base=(*LOOPBACK_NETS, "faults.parse_delay_s=0.6")),
    # storage
    "storage.backend": Effect(
        p_bodies, "s3",
        lambda d, c, ch: d[0] == d[3] == "LocalStore" and c[0] == c[3] == "S3Store"
        and not c[1] and [m for m, u in c[2] if "/raw/" in u] == ["HEAD", "PUT"]
        and [u.rsplit(".", 1)[1] for m, u in c[2] if m == "PUT" and "/crawl/warc/" in u]
        == ["gz", "cdxj"]
        and [m for m, _ in c[4]] == ["PUT"] and "/crawl/audit/day" in c[4][0][1],
        "bodies, WARC files and the audit trail go to S3", base=tuple(LOOPBACK_NETS)),
    "storage.local_dir": Effect(
        p_bodies, "bodies",
        lambda d, c, ch: [f.split("/")[2] for f in d[1]] == ["audit", "raw", "warc"]
        and all(f.startswith(".state/objects/") for f in d[1])
        and [f.split("/")[:2] for f in c[1]] == [["bodies", "audit"], ["bodies", "raw"],
                                                 ["bodies", "warc"]],
        "bodies, WARC files and the audit trail go under the folder",
        base=tuple(LOOPBACK_NETS)),
    "storage.gzip_level": Effect(
        p_gzip_level, 1, lambda d, c, ch: 0 < d[0] < c[0] and 0 < d[1] < c[1],
        "bodies and WARC records are compressed less (more bytes) at level 1",
        base=tuple(LOOPBACK_NETS)),
    # warc
    "warc.enabled": Effect(
        p_warc, False, lambda d, c, ch: d["files"] and not c["files"] and not c["temp"],
        "no WARC is written", base=tuple(LOOPBACK_NETS)),
    "warc.prefix": Effect(
        p_warc, "archive/crawl-1/",
        lambda d, c, ch: {f[0] for f in d["files"]} == {".state/objects/warc"}
        and {f[0] for f in c["files"]} == {".state/objects/archive/crawl-1"},
        "files and their indexes go under the prefix", base=tuple(LOOPBACK_NETS)),
    "warc.file_prefix": Effect(
        p_warc, "TEST-CRAWL",
        lambda d, c, ch: all(f[1].startswith("CC-MAIN-2") for f in d["files"])
        and all(f[1].startswith("TEST-CRAWL-2") for f in c["files"]),
        "file names start with it", base=tuple(LOOPBACK_NETS)),
    "warc.max_file_bytes": Effect(
        p_warc, 1000,
        lambda d, c, ch: len(d["files"]) == 2 and len(c["files"]) == 3
        and all(f[2][0] == "warcinfo" and len(f[2]) == 3 for f in c["files"]),
        "a file is published once it holds that many bytes, never splitting a record",
        base=tuple(LOOPBACK_NETS)),
    "warc.max_file_age_s": Effect(
        p_warc, 500.0,
        lambda d, c, ch: len(d["files"]) == 2 and len(c["files"]) == 1,
        "a file is published once it is that old (checked at the job's ticks)",
        base=tuple(LOOPBACK_NETS)),
    "warc.temp_dir": Effect(
        p_warc, lambda w, key: str(w.tmp / "warc-temp"),
        lambda d, c, ch: d["temp"] == ["crawl-warc"] and c["temp"] == ["warc-temp"],
        "the file being written is there", base=tuple(LOOPBACK_NETS)),
    "warc.dedup_entries": Effect(
        p_warc, 0,
        lambda d, c, ch: d["types"].count("revisit") == 2 and "revisit" not in c["types"],
        "a repeated payload is a revisit record, unless no digest is remembered",
        base=tuple(LOOPBACK_NETS)),
    # audit
    "audit.flush_records": Effect(
        p_audit_flushes, 2,
        lambda d, c, ch: d == [[], [], [5]] and c == [[2, 2], [2, 2], [2, 2, 1]],
        "a full buffer is written at once; its rest when flush_s has passed"),
    "audit.flush_s": Effect(
        p_audit_flushes, 10.0, lambda d, c, ch: d == [[], [], [5]] and c == [[], [5], [5]],
        "a buffer is written flush_s seconds after its first record arrived"),
    # s3
    "s3.endpoint_url": Effect(
        p_s3_service, "http://127.0.0.1:18444",
        lambda d, c, ch: all(u.startswith("http://127.0.0.1:18444/") for _, u in c[0])
        and c[1] == ["-s3.port=18444"], base=(*LOOPBACK_NETS, *S3_BASE)),
    "s3.bucket": Effect(
        p_bucket, "other-bucket",
        lambda d, c, ch: all("/other-bucket/" in u + "/" for _, u in c[0] + c[1]),
        base=(*LOOPBACK_NETS, *S3_BASE)),
    "s3.low_tier_storage_class": Effect(
        p_s3_tiers, "GLACIER_IR",
        lambda d, c, ch: d == {"standard": [None], "low": ["STANDARD_IA"]}
        and c == {"standard": [None], "low": ["GLACIER_IR"]}, base=(*LOOPBACK_NETS, *S3_BASE)),
    "s3.region": Effect(p_s3, "eu-west-1", lambda d, c, ch: c[2] == ["eu-west-1"],
                        base=(*LOOPBACK_NETS, *S3_BASE)),
    "s3.path_style": Effect(
        p_s3, False,
        lambda d, c, ch: all(".amazonaws.com/crawl/" in u for _, u in d[0])
        and all("//crawl.s3" in u for _, u in c[0]),
        "true: path-style (host/bucket/key)",
        base=(*LOOPBACK_NETS, *S3_BASE, 's3.endpoint_url=""')),
    "s3.access_key_env": Effect(p_s3, "PROBE_OTHER_KEY",
                                lambda d, c, ch: c[1] == ["probe-other-key/"],
                                base=(*LOOPBACK_NETS, *S3_BASE)),
    "s3.secret_key_env": Effect(p_s3, "PROBE_OTHER_SECRET",
                                lambda d, c, ch: c[3] == "probe-other-secret",
                                base=(*LOOPBACK_NETS, *S3_BASE)),
    # flink
    "flink.parallelism": Effect(p_flink, 3, lambda d, c, ch: all(
        c[j][1] == 3 for j in ("frontier", "fetcher"))),
    "flink.max_parallelism": Effect(p_flink, 256,
                                    both_jobs("pipeline.max-parallelism", "256")),
    "flink.checkpoint_interval_ms": Effect(
        p_flink, 20000, both_durations("execution.checkpointing.interval", 20000)),
    "flink.checkpoint_dir": Effect(p_flink, "s3://bucket/ckpt",
                                   both_jobs("execution.checkpointing.dir", "s3://bucket/ckpt")),
    "flink.state_backend": Effect(p_flink, "hashmap",
                                  both_jobs("state.backend.type", "hashmap")),
    "flink.rocksdb_uncompressed_levels": Effect(
        p_flink, 0, both_jobs("state.backend.rocksdb.compression.per.level",
                              ";".join(["SNAPPY_COMPRESSION"] * 7))),
    "flink.rocksdb_bloom_bits_per_key": Effect(
        p_flink, 0, lambda d, c, ch: all(
            (d[j][0].get("state.backend.rocksdb.use-bloom-filter"),
             d[j][0].get("state.backend.rocksdb.bloom-filter.bits-per-key"),
             c[j][0].get("state.backend.rocksdb.use-bloom-filter")) ==
            ("true", "10.0", "false") for j in ("frontier", "fetcher"))),
    "flink.restart_strategy": Effect(p_flink, "none", both_jobs("restart-strategy.type", "none")),
    "flink.checkpoints_retained": Effect(
        p_flink, 5, both_jobs("execution.checkpointing.num-retained", "5")),
    "flink.restart_attempts": Effect(p_flink, 3,
                                     both_jobs("restart-strategy.fixed-delay.attempts", "3")),
    "flink.restart_delay_ms": Effect(p_flink, 500,
                                     both_durations("restart-strategy.fixed-delay.delay", 500)),
    "flink.jars": Effect(p_flink, ["/opt/extra/one.jar"],
                         both_jobs("pipeline.jars", "file:///opt/extra/one.jar")),
    "flink.python_executable": Effect(p_flink, "/usr/bin/python3",
                                      both_jobs("python.executable", "/usr/bin/python3")),
    "flink.kafka_connector_version": Effect(
        p_flink, CONNECTOR_VERSIONS[1],
        lambda d, c, ch: all(c[j][0].get("pipeline.jars", "").endswith(
            f"flink-sql-connector-kafka-{CONNECTOR_VERSIONS[1]}.jar") for j in c)),
    "flink.local_rest_port": Effect(p_flink, 18990, lambda d, c, ch: all(
        c[j][0].get("rest.port") == "18990" and c[j][0].get("rest.bind-address") == "127.0.0.1"
        and "rest.port" not in d[j][0] for j in c)),
    # cluster
    "metrics.frontier_port": Effect(p_flink, 9350, lambda d, c, ch: (
        c["frontier"][0].get("metrics.reporter.prom.port") == "9350"
        and "metrics.reporter.prom.port" not in c["fetcher"][0]), base=("metrics.fetcher_port=0",)),
    "metrics.fetcher_port": Effect(p_flink, 9351, lambda d, c, ch: (
        c["fetcher"][0].get("metrics.reporter.prom.port") == "9351"
        and d["fetcher"][0].get("metrics.reporter.prom.factory.class", "").endswith(
            "PrometheusReporterFactory"))),
    "cluster.rest_port": Effect(p_cluster, 18181,
                                lambda d, c, ch: c[0]["rest.port"] == 18181
                                and c[1] == "127.0.0.1:18181"),
    "cluster.rpc_port": Effect(p_cluster, 16223,
                               lambda d, c, ch: c[0]["jobmanager.rpc.port"] == 16223),
    "cluster.taskmanagers": Effect(p_taskmanagers, 3,
                                   lambda d, c, ch: len(d) == 2 and len(c) == 3),
    "cluster.task_slots": Effect(p_cluster, 2,
                                 lambda d, c, ch: c[0]["taskmanager.numberOfTaskSlots"] == 2),
    "cluster.taskmanager_mb": Effect(
        p_cluster, 3072, lambda d, c, ch: c[0]["taskmanager.memory.process.size"] == "3072m"),
    "cluster.jobmanager_mb": Effect(
        p_cluster, 2048, lambda d, c, ch: c[0]["jobmanager.memory.process.size"] == "2048m"),
    "cluster.metrics_ports": Effect(
        p_cluster, "9300-9302", lambda d, c, ch: c[0]["metrics.reporter.prom.port"] == "9300-9302"
        and d[0]["metrics.reporter.prom.port"] == "9260-9279"
        and c[0]["metrics.reporter.prom.factory.class"].endswith("PrometheusReporterFactory")),
    # local
    "local.state_dir": Effect(
        p_state_dir, "elsewhere/state",
        lambda d, c, ch: all("/cwd/elsewhere/state" in p for p in c)),
    "local.kafka_version": Effect(p_kafka_service, "4.0.0",
                                  lambda d, c, ch: any("kafka-4.0.0/lib" in a for a in c[0])),
    "local.kafka_controller_port": Effect(
        p_kafka_service, 19193,
        lambda d, c, ch: any("CONTROLLER://127.0.0.1:19193" in line for line in c[1])),
    "local.kafka_heap_mb": Effect(p_kafka_service, 256,
                                  lambda d, c, ch: "-Xmx256m" in c[0] and "-Xms256m" in c[0]),
    "local.s3_master_port": Effect(p_s3_service_cmd, 19433,
                                   lambda d, c, ch: "-master.port=19433" in c[0]),
    "local.s3_master_grpc_port": Effect(p_s3_service_cmd, 29433,
                                        lambda d, c, ch: "-master.port.grpc=29433" in c[0]),
    "local.s3_volume_port": Effect(p_s3_service_cmd, 18480,
                                   lambda d, c, ch: "-volume.port=18480" in c[0]),
    "local.s3_volume_grpc_port": Effect(p_s3_service_cmd, 28480,
                                        lambda d, c, ch: "-volume.port.grpc=28480" in c[0]),
    "local.s3_filer_port": Effect(p_s3_service_cmd, 18988,
                                  lambda d, c, ch: "-filer.port=18988" in c[0]),
    "local.s3_filer_grpc_port": Effect(p_s3_service_cmd, 28988,
                                       lambda d, c, ch: "-filer.port.grpc=28988" in c[0]),
    "local.s3_grpc_port": Effect(p_s3_service_cmd, 28433,
                                 lambda d, c, ch: "-s3.port.grpc=28433" in c[0]),
    "local.ready_timeout_s": Effect(p_ready_timeouts, 30,
                                    lambda d, c, ch: {t for _, t in c} == {30}),
}


# -- the tests ------------------------------------------------------------------------------


def leaf_keys(node: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in node.items():
        out += leaf_keys(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]
    return out


def _matches(pattern: str, key: str) -> bool:
    p, k = pattern.split("."), key.split(".")
    return len(p) == len(k) and all(a in ("*", b) for a, b in zip(p, k, strict=True))


def effect_for(key: str) -> Effect | None:
    if key in EFFECTS:
        return EFFECTS[key]
    found = [e for pattern, e in EFFECTS.items() if _matches(pattern, key)]
    return found[0] if found else None


KEYS = leaf_keys(load_defaults())


def test_the_table_covers_exactly_the_keys_of_the_defaults_file():
    missing = [k for k in KEYS if effect_for(k) is None]
    stale = [p for p in EFFECTS if not any(_matches(p, k) for k in KEYS)]
    assert not missing, (f"keys of udfs/config/crawler-default.yaml without a probe in EFFECTS: "
                         f"{missing}; add one that shows what changing the key changes")
    assert not stale, (f"probes in EFFECTS for keys that are not in "
                       f"udfs/config/crawler-default.yaml (any more): {stale}; remove them")


_RESULTS: dict[tuple[Any, str], Any] = {}


def _observe(effect: Effect, cfg: Config, world: World) -> Any:
    memo = (effect.probe, cfg.to_yaml())
    if memo not in _RESULTS:
        _RESULTS[memo] = effect.probe(cfg, world)
    return _RESULTS[memo]


def _render(value: Any) -> str:
    return f"{value!r}"[:1500]


@pytest.mark.parametrize("key", KEYS)
def test_changing_the_key_changes_what_its_consumer_does(key, world):
    effect = effect_for(key)
    assert effect is not None, f"{key}: no probe in EFFECTS (see the coverage test)"
    base = effect.base(world) if callable(effect.base) else list(effect.base)
    value = effect.changed(world, key) if callable(effect.changed) else effect.changed
    default = load_config(env={}, overrides=base)
    changed = load_config(env={}, overrides=[*base, f"{key}={json.dumps(value)}"])
    assert changed[key] != default[key], f"{key}: the table's changed value is the default"
    before, after = _observe(effect, default, world), _observe(effect, changed, world)
    what = (effect.probe.__doc__ or effect.probe.__name__).strip()
    assert before != after, (
        f"{key}: changing it from {default[key]!r} to {value!r} changes nothing the code "
        f"does. Observed ({what}): {_render(before)} both times. Either wire the key to "
        f"what its comment in udfs/config/crawler-default.yaml promises, or remove it.")
    if effect.expect is not None:
        ok = effect.expect(before, after, Change(key, default[key], changed[key]))
        assert ok, (
            f"{key}={value!r} does not have the effect its comment states"
            f"{': ' + effect.claim if effect.claim else ''}. Observed ({what}): with the "
            f"default {_render(before)}; changed {_render(after)}")


def test_the_fetchers_gap_counts_the_servers_time_not_our_parsing(world):
    """The fetcher's back queue applies the duration rule (gap = duration_factor x the
    request's duration) to the request's own duration, the completion's
    fetch_duration_ms, not to the time the fetcher then spends storing and parsing:
    a 0.4 s parse stall must not become a 4 s gap for the host."""
    cfg = load_config(env={}, overrides=[*LOOPBACK_NETS, "faults.parse_delay_s=0.4"])
    job = FetcherJob(cfg, world)
    url = world.url("/page")
    start = time.monotonic()
    fetch_once(cfg, world, url, job=job)
    assert time.monotonic() - start >= 0.4  # the stall happened
    slot = job.fn.turns.queues.slots[split_host_key(url)[0]]
    assert slot.last_duration < 0.3, slot


def test_a_hosts_turn_ends_with_the_answer_not_after_our_storing_and_parsing(world):
    """The gap before a host's (and its address's) next request runs from the end of
    the answer, not from the end of the fetcher's own work on it: with every parse
    stalled 0.4 s, the host's slot and the address's gate heard the request end before
    the stall, so a slow parse no longer delays the host's next request."""
    cfg = load_config(env={}, overrides=[*LOOPBACK_NETS, "faults.parse_delay_s=0.4",
                                         "fetch.ip_min_gap_s=0.1"])
    job = FetcherJob(cfg, world)
    url = world.url("/page")
    fetched = fetch_once(cfg, world, url, job=job)
    done = time.monotonic()  # the slot's and the gate's clock
    assert fetched.outcome == "OK", fetched
    slot = job.fn.turns.queues.slots[split_host_key(url)[0]]
    address = job.fn.turns.ip_gate.addresses["127.0.0.1"]
    assert slot.last_end is not None and done - slot.last_end >= 0.35, (done, slot)
    assert done - address.last_end >= 0.35, (done, address)
    assert slot.in_flight == 0, slot


def test_a_pages_urls_go_inside_its_completion_or_just_before_it_under_its_key(world):
    """A completion the frontier reads never comes without the URLs its page gave: they
    are inside it (completion v4). URLs too many for one Kafka record go before it
    instead, to the completions topic, under the fetched host's key (one partition, one
    producer: its order holds through a crash). On a topic of their own they could be
    lost to a kill -9 after the completion was sent, for the restored fetcher does not
    send a lease again. A sitemap's entries of another host too."""
    cfg = load_config(env={}, overrides=list(LOOPBACK_NETS))
    host = split_host_key(world.url("/page"))[0].encode()
    for url, kind in ((world.url("/page"), "PAGE"), (world.url("/sitemap/0"), "SITEMAP")):
        fetched = fetch_once(cfg, world, url, kind=kind)
        assert fetched.outcome == "OK" and fetched.links, (url, fetched)
        assert fetched.dests == ("C",) and fetched.keys == (host,), fetched
        with pytest.MonkeyPatch.context() as mp:  # as if they passed Kafka's limit
            mp.setattr(wire_records, "MAX_LINK_BYTES", 10)
            spilled = fetch_once(cfg, world, url, kind=kind)
        assert spilled.links == fetched.links, (fetched, spilled)
        assert spilled.dests[-1] == "C" and set(spilled.dests[:-1]) == {"D"}, spilled
        assert set(spilled.keys) == {host}, spilled


def test_the_frontier_takes_a_pages_urls_from_the_completions_topic(world):
    """The URLs the fetcher sends before a completion, on the completions topic, are
    queued as if read from the discovered topic (told apart by their schema), and no
    dead letter is written for them."""
    cfg = load_config(env={}, overrides=list(LOOPBACK_NETS))
    job = crawl(cfg, world, [seeds("/a", source="LINK", stream="completions"),
                             seeds("/b", source="LINK")], 10)
    assert job.leased() == [H + "/a", H + "/b"] and job.dead == []


def test_the_frontier_takes_the_urls_inside_a_completion(world):
    """A completion's own URLs (v4), of its host and of another, are queued with its
    depth + 1, as if they had come as DiscoveredUrls records."""
    cfg = load_config(env={}, overrides=list(LOOPBACK_NETS))

    def respond(lease: dict, job: FrontierJob) -> Answer:
        links = (H + "/b", "http://b.test/c") if lease["url"] == H + "/a" else ()
        return Answer(links=links)

    job = crawl(cfg, world, [seeds("/a")], 20, respond=respond)
    assert job.leased() == [H + "/a", H + "/b", "http://b.test/c"] and job.dead == []
    assert {lease["url"]: lease["depth"] for lease in job.leases
            if lease["kind"] == "PAGE"} == {H + "/a": 0, H + "/b": 1, "http://b.test/c": 1}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_a_fetcher_that_answers_nothing_spends_no_lease_attempts(world):
    """A fetcher down or cut off for longer than max_lease_attempts lease timeouts: the
    page is re-let after each expiry (never parked for a week) and its attempt is never
    spent, since nothing was heard from the fetcher after the lease was issued."""
    attempts = p_attempts_fetcher_silent(load_config(env={}), world)
    assert len(attempts) >= 5 and set(attempts) == {1}, attempts
