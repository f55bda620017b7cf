"""Python memory of the frontier's host cache: bytes per cached host and per cached URL.

    python bench/bench_cache_memory.py                  # ~6 min
    python bench/bench_cache_memory.py --urls-per-host 100,1000

The frontier job keeps live hosts in memory, per subtask, up to frontier.cache_hosts
hosts and frontier.cache_urls URLs (udfs/frontier/operator.py). That memory is Python
objects inside the TaskManager's process (the frontier runs in thread mode): neither
the JVM heap nor RocksDB's managed memory, so the TaskManager's size must leave room
for it. This measures it with the frontier's own classes, no Flink: each figure comes
from a fresh child process that builds hosts (URLs of 60 to 90 characters, as
bench_state_bytes.py) and reports its resident set before and after (what the machine
pays: objects plus the allocator's slack) and tracemalloc's count of the live
objects (measured in a second child: tracing costs memory of its own).

The hosts are built three ways: URLs as discovered (queued); every URL crawled once on a
virtual clock (fetched: its ETag, Last-Modified, content and text hashes kept, a revisit
scheduled); and the fetched hosts saved to keyed state and loaded back, as the cache
holds a host it read from Flink's state. The keyed state here is a SQLite file standing
for RocksDB: like Flink's MapState in thread mode, it keeps its values out of Python's
objects (a host keeps its map of URLs to read cold URLs from), so they are not counted.
The per-URL figure of a set of hosts is (memory − hosts × the empty host's memory) / URLs.
The URLs' paths are random, so each is a URL template of its own in the host's trap
budget (up to traps.max_templates_per_host a day): about 130 B of each figure, where a
real site's few templates cost next to nothing. The figures are an upper bound in that.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import pickle
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._results import record  # noqa: E402
from udfs.core.frontier.config import FrontierConfig  # noqa: E402
from udfs.core.frontier.host import HostFrontier  # noqa: E402
from udfs.core.records import FetchResult, Kind, Outcome  # noqa: E402

MODES = ("queued", "fetched", "reloaded")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class FileKeyValue:
    """One keyed map (the MapState verbs) in a SQLite file, its values pickled."""

    _db: sqlite3.Connection | None = None

    def __init__(self, name: str) -> None:
        if FileKeyValue._db is None:
            folder = tempfile.mkdtemp(prefix="cache-memory-")
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            FileKeyValue._db = sqlite3.connect(Path(folder) / "state.db")
            FileKeyValue._db.execute("PRAGMA journal_mode=OFF")
            FileKeyValue._db.execute("CREATE TABLE kv (ns TEXT, k TEXT, v BLOB, "
                                     "PRIMARY KEY (ns, k))")
        self.db, self.ns = FileKeyValue._db, name

    def get(self, key: str) -> object:
        row = self.db.execute("SELECT v FROM kv WHERE ns=? AND k=?", (self.ns, key)).fetchone()
        return None if row is None else pickle.loads(row[0])

    def put(self, key: str, value: object) -> None:
        self.db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?, ?)",
                        (self.ns, key, pickle.dumps(value)))

    def remove(self, key: str) -> None:
        self.db.execute("DELETE FROM kv WHERE ns=? AND k=?", (self.ns, key))

    def items(self):
        for k, v in self.db.execute("SELECT k, v FROM kv WHERE ns=?", (self.ns,)):
            yield k, pickle.loads(v)

    def keys(self):
        for (k,) in self.db.execute("SELECT k FROM kv WHERE ns=?", (self.ns,)):
            yield k


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * PAGE_SIZE


def _urls(host_key: str, count: int, rng: random.Random) -> list[str]:
    words = "abcdefghijklmnopqrstuvwxyz0123456789-"
    out = []
    for i in range(count):
        path = "".join(rng.choice(words) for _ in range(rng.randint(60, 90) - len(host_key)
                                                         - 8))
        out.append(f"{host_key}/{path}/{i:06d}")
    return out


def _answer(lease) -> FetchResult:
    """What the fetcher reports for a lease: robots.txt allowing all, or a page."""
    if lease.kind is Kind.ROBOTS:
        return FetchResult(lease.lease_id, lease.url_id, lease.url_version, Outcome.OK,
                           Kind.ROBOTS, lease.attempt, http_status=200,
                           robots_body=b"User-agent: *\nAllow: /\n")
    return FetchResult(lease.lease_id, lease.url_id, lease.url_version, Outcome.OK,
                       lease.kind, lease.attempt, http_status=200,
                       etag=f'"{random.getrandbits(64):016x}"',
                       last_modified="Sat, 05 Dec 2026 03:00:00 GMT",
                       body_sha256=f"{random.getrandbits(256):064x}",
                       text_sha256=f"{random.getrandbits(256):064x}")


def _crawl(h: HostFrontier, pages: int, now: float, max_steps: int) -> None:
    """Lease and answer each of the host's `pages` URLs once, on a virtual clock."""
    fetched: set[str] = set()
    for _ in range(max_steps):
        lease = h.poll(now)
        if lease is not None:
            h.complete(_answer(lease), now)
            if lease.kind is Kind.PAGE:
                fetched.add(lease.url_id)
                if len(fetched) == pages:
                    return
            continue
        wake = h.next_wake(now)
        if wake is None:
            break
        now = max(now + 0.001, wake)
    raise RuntimeError(f"{h.host_key}: {len(fetched)} of {pages} pages crawled")


def build(hosts: int, per_host: int, mode: str) -> list[HostFrontier]:
    cfg = FrontierConfig()
    rng = random.Random(7)
    out = []
    for i in range(hosts):
        key = f"http://host{i:05d}.example.com"
        h = HostFrontier(key, cfg)
        for url in _urls(key, per_host, rng):
            assert h.discover(url, 0.0, checked=True).accepted
        if mode != "queued":
            _crawl(h, per_host, 0.0, max_steps=20 * (per_host + 10))
        if mode == "reloaded":
            urls, resident, segments = (FileKeyValue(f"{key} {part}")
                                        for part in ("urls", "resident", "segments"))
            saved = pickle.loads(pickle.dumps(h.save(urls, resident, segments)))
            h = HostFrontier.load(key, saved, cfg, urls, resident, segments, urls.items,
                                  resident.keys)
        out.append(h)
    return out


def child(hosts: int, per_host: int, mode: str, traced: bool) -> dict[str, float]:
    # Warm what the first host would allocate once (imports, caches, tables).
    build(1, 10, mode)
    gc.collect()
    if traced:
        tracemalloc.start()
    before_rss, before_traced = _rss(), tracemalloc.get_traced_memory()[0]
    kept = build(hosts, per_host, mode)
    gc.collect()
    used = (tracemalloc.get_traced_memory()[0] - before_traced if traced
            else _rss() - before_rss)
    return {"bytes": used, "urls": sum(len(h.urls) for h in kept), "hosts": len(kept)}


def measure(hosts: int, per_host: int, mode: str, traced: bool) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", str(hosts), str(per_host),
                          mode, "traced" if traced else "rss"],
                         capture_output=True, text=True, timeout=900, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"child {hosts}x{per_host} {mode}: {out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        hosts, per_host, mode, how = argv[1:5]
        print(json.dumps(child(int(hosts), int(per_host), mode, how == "traced")))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--urls-per-host", default="100,2000",
                   help="comma-separated URLs per host (each set of hosts holds ~200k URLs)")
    p.add_argument("--empty-hosts", type=int, default=5000,
                   help="hosts without URLs, for the per-host figure")
    args = p.parse_args(argv)
    try:
        sizes = [int(x) for x in args.urls_per_host.split(",")]
        if not sizes or min(sizes) < 1 or max(sizes) > FrontierConfig().max_resident_urls:
            raise ValueError
    except ValueError:
        print("bench_cache_memory: --urls-per-host: whole numbers from 1 to "
              f"{FrontierConfig().max_resident_urls} (max_resident_urls)", file=sys.stderr)
        return 2
    rows: list[tuple[str, str]] = []
    empty = {how: measure(args.empty_hosts, 0, "queued", how == "traced")["bytes"]
             / args.empty_hosts for how in ("rss", "traced")}
    rows.append(("an empty cached host: resident set / live objects",
                 f"{empty['rss']:,.0f} B / {empty['traced']:,.0f} B"))
    worst = 0.0
    for per_host in sizes:
        hosts = max(1, 200_000 // per_host)
        for mode in MODES:
            per_url = {}
            for how in ("rss", "traced"):
                m = measure(hosts, per_host, mode, how == "traced")
                per_url[how] = (m["bytes"] - m["hosts"] * empty[how]) / m["urls"]
            worst = max(worst, per_url["rss"])
            rows.append((f"a cached URL, {mode}, {hosts:,} hosts of {per_host:,}: "
                         "resident set / live objects",
                         f"{per_url['rss']:,.0f} B / {per_url['traced']:,.0f} B"))
    cfg = FrontierConfig()
    full = cfg.cache_urls * worst + cfg.cache_hosts * empty["rss"]
    rows.append((f"a full cache at the defaults ({cfg.cache_urls:,} URLs, "
                 f"{cfg.cache_hosts:,} hosts), the largest per-URL figure",
                 f"{full / 2**30:,.2f} GiB per frontier subtask"))
    record("cache_memory", "Python memory of the frontier's host cache", rows,
           notes="Resident set: what the process grew by (objects and the allocator's "
           "slack); live objects: tracemalloc's count. `crawl plan` takes its "
           "python_bytes_per_cached_url and python_bytes_per_cached_host from the "
           "resident-set figures. Each URL here is a URL template of its own (random paths): "
           "about 130 B of each per-URL figure, which a real site's few templates do not "
           "cost.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
