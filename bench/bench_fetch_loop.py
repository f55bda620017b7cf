"""The fetcher's CPU per fetch on asyncio's event loop against uvloop's (the fetch
engine's loop, udfs/fetcher/engine.py): the fetcher's own `fetch` (SSRF-guarded session,
the exchange kept for the WARC records) of the synthetic web's 20 KB pages from a
server on loopback in another process, so that only the client's CPU is counted.

    python bench/bench_fetch_loop.py [--fetches 4000] [--rounds 3] [--concurrency 50]

Each round runs both loops, each in a fresh process, in alternating order (a slower
minute falls on both); the best round of each is reported. No services needed.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import queue
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._results import record  # noqa: E402
from crawler.run import free_port  # noqa: E402

HOSTS = 200  # names of the synthetic web's kind, all on 127.0.0.1 (fetch.static_hosts)
WARM = 300  # fetches before the measured ones: connections open, code paths warm


def _serve(port: int) -> None:
    from aiohttp import web

    from crawler.testkit.synthetic_web import SyntheticWeb, build_sites

    site_web = SyntheticWeb(build_sites(20, pages=(300, 360)), page_bytes=20_000)
    bodies = [site_web.body_for(s, f"/p/{i}") for s in site_web.site_list for i in range(5)]

    async def page(request: web.Request) -> web.Response:
        body = bodies[hash(request.path) % len(bodies)]
        return web.Response(body=body, content_type="text/html")

    app = web.Application()
    app.router.add_get("/{path:.*}", page)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


async def _client(n: int, concurrency: int, port: int) -> tuple[float, float]:
    from udfs.core.addresses import AddressPolicy
    from udfs.core.fetching import DnsCache, FetchLimits
    from udfs.core.records import Kind
    from udfs.fetcher.client import fetch, make_session

    limits = FetchLimits()
    cache = DnsCache(AddressPolicy.from_networks(["127.0.0.0/8"]), limits,
                     {f"s{i}.test": "127.0.0.1" for i in range(HOSTS)})
    slots = asyncio.Semaphore(concurrency)

    async def one(session, i: int) -> None:
        async with slots:
            r = await fetch(session, f"http://s{i % HOSTS}.test:{port}/p/{i}", Kind.PAGE,
                            limits, "bench", keep_exchange=True)
            if r.status != 200:
                raise RuntimeError(f"fetch {i}: {r.outcome} {r.error}")

    async with make_session(cache, limits, limit=HOSTS) as session:
        await asyncio.gather(*(one(session, i) for i in range(WARM)))
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.wait_for(asyncio.gather(*(one(session, i) for i in range(n))), 300)
        return time.perf_counter() - t0, time.process_time() - c0


def _run(kind: str, n: int, concurrency: int, port: int, out) -> None:
    if kind == "uvloop":
        import uvloop

        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        out.put(loop.run_until_complete(_client(n, concurrency, port)))
    finally:
        loop.close()


def _wait_listening(port: int, server, seconds: float = 60.0) -> None:
    """Until the server accepts a connection (bounded; a dead server fails at once)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not server.is_alive():
            raise SystemExit(f"the page server ended (exit code {server.exitcode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"the page server did not listen within {seconds:.0f} s")


def _result(client, out, seconds: float = 600.0) -> tuple[float, float]:
    """The client's (seconds, CPU seconds), or a clear failure as soon as it dies."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            return out.get(timeout=1)
        except queue.Empty:
            if not client.is_alive():
                raise SystemExit(f"a client run failed (exit code {client.exitcode})") from None
    raise SystemExit(f"a client run took over {seconds:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fetches", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=50)
    args = ap.parse_args()
    for name in ("fetches", "rounds", "concurrency"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: at least 1, got {getattr(args, name)}")
    ctx = mp.get_context("spawn")
    port = free_port()
    server = ctx.Process(target=_serve, args=(port,), daemon=True)
    server.start()
    _wait_listening(port, server)
    runs: dict[str, list[tuple[float, float]]] = {"asyncio": [], "uvloop": []}
    try:
        for r in range(args.rounds):
            for kind in ("asyncio", "uvloop") if r % 2 == 0 else ("uvloop", "asyncio"):
                out = ctx.Queue()
                client = ctx.Process(target=_run, args=(kind, args.fetches, args.concurrency,
                                                        port, out))
                client.start()
                try:
                    runs[kind].append(_result(client, out))
                finally:
                    client.join(60)
                    if client.is_alive():
                        client.terminate()
    finally:
        server.terminate()
    n = args.fetches
    best = {k: min(v, key=lambda t: t[1]) for k, v in runs.items()}
    cpu = {k: 1000 * c / n for k, (_, c) in best.items()}
    rows = [("fetches per round / rounds / concurrent / hosts",
             f"{n:,} / {args.rounds} / {args.concurrency} / {HOSTS}")]
    for kind in ("asyncio", "uvloop"):
        secs, _ = best[kind]
        rows.append((f"{kind}: client CPU per fetch (rounds)",
                     f"{cpu[kind]:.3f} ms ("
                     + ", ".join(f"{1000 * c / n:.3f}" for _, c in runs[kind])
                     + f"); {n / secs:,.0f} fetches/s"))
    rows.append(("uvloop / asyncio, CPU per fetch (best rounds)",
                 f"{cpu['uvloop'] / cpu['asyncio']:.2f}"))
    record("fetch_loop", "The fetcher's CPU per fetch: asyncio's loop against uvloop's", rows,
           notes="The client process's CPU (user + system) over the measured fetches only; "
                 "the server runs in a process of its own and is not counted. Keep-alive "
                 "connections, as the crawl keeps them to hosts it revisits within seconds.")


if __name__ == "__main__":
    main()
