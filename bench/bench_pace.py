"""A host's pace: how close the crawl comes to each host's politeness ceiling.

    python bench/bench_pace.py [--seconds 60] [--dev-seconds 120]

1. One site of fast pages, min_gap 1 s, the default configuration (10 s checkpoints):
   pages fetched per second once robots.txt is in (the ceiling is 1/s).
2. `crawl run` as `./dev crawl` runs it (the bundled synthetic web, gap 0.5 s): from
   30 s on, requests per second against the politeness ceiling of the hosts still
   being crawled (each host's 1 / max(gap, Crawl-delay), counted while the host has a
   request still to come; and the same less the Retry-After waits the throttling
   sites asked for), from the web's own request log.

Needs the local stack (`./dev up`). Figures go to bench/RESULTS.md (section pace).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._results import record  # noqa: E402
from crawler.run import JobProcess, publish_seeds  # noqa: E402
from crawler.testkit.synthetic_web import Site, SyntheticWeb  # noqa: E402
from udfs.config import TOPIC_KEYS, load_config  # noqa: E402


def one_site(seconds: int, workdir: Path) -> tuple[float, int, float]:
    """(pages/s after robots.txt, pages, seconds measured) for one 1 s-gap site."""
    site = Site("pace.test", pages=2000, robots="rules", throttle_every=0, retry_after_s=2,
                features=frozenset())
    web = SyntheticWeb([site])
    web.start()
    base = load_config(env={})
    suffix = time.strftime("%H%M%S")
    overrides = [f"topics.{k}.name=pace-{suffix}.{base.topic(k)}" for k in TOPIC_KEYS]
    # Only what makes the synthetic web reachable; politeness and checkpoints as shipped.
    overrides += ["fetch.allowed_networks=[127.0.0.1/32]",
                  f"fetch.static_hosts=[{','.join(web.static_hosts())}]",
                  f"storage.local_dir={workdir / 'objects'}"]
    cfg = load_config(env={}, overrides=overrides)
    from crawler.stack.local import drop_topics, ensure_topics

    ensure_topics(cfg)
    jobs = [JobProcess(n, overrides, workdir / f"{n}.log") for n in ("fetcher", "frontier")]
    try:
        for job in jobs:
            job.start()
        publish_seeds(cfg, [web.host_key(site) + "/"])
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not any(
                not r.is_robots for r in list(web.log)):
            time.sleep(0.2)
        time.sleep(seconds)
    finally:
        for job in jobs:
            job.stop()
        web.stop()
        drop_topics(cfg)
    pages = sorted(r.start for r in web.log if not r.is_robots and r.status == 200)
    if len(pages) < 2:
        return 0.0, len(pages), 0.0
    window = [t for t in pages if t <= pages[0] + seconds]
    return (len(window) - 1) / (window[-1] - window[0]), len(window), window[-1] - window[0]


def dev_crawl(seconds: int, window_s: float = 30.0) -> dict[str, float]:
    """`crawl run` in the window of `window_s` from its 30th second, over the hosts
    crawled through the whole window: requests/s, and two ceilings:
    each host at 1 / max(gap, Crawl-delay), and the same less the waits its own
    Retry-After answers asked for (a 429 with Retry-After 2 s costs 2 s, not one gap)."""
    out = subprocess.run([sys.executable, "-m", "crawler.cli", "run", "--max-pages", "100000",
                          "--duration", str(seconds)], capture_output=True, text=True,
                         timeout=seconds + 300, cwd=ROOT)
    logs = Path(re.search(r"job logs in (\S+)", out.stdout).group(1))
    rows = [json.loads(line) for line in (logs / "web.jsonl").read_text().splitlines()]
    t0 = min(r["start"] for r in rows)
    start, end = t0 + 30, t0 + 30 + window_s
    delays = _site_delays()
    # Crawled through the window: requests in its first and its last 5 s (a host whose
    # pages ran out, or whose robots.txt is still failing, has no pace to keep).
    early = {r["host"] for r in rows if start <= r["start"] < start + 5}
    late = {r["host"] for r in rows if end - 5 <= r["start"] < end}
    busy = early & late
    gaps = {h: max(0.5, delays.get(h.split("//")[1].split(":")[0], 0.0)) for h in busy}
    waited = {h: 0.0 for h in busy}
    for r in rows:
        if r["host"] in busy and r.get("retry_after") and start <= r["end"] < end:
            waited[r["host"]] += max(0.0, min(r["retry_after"], end - r["end"]) - gaps[r["host"]])
    reqs = [r for r in rows if r["host"] in busy and start <= r["start"] < end]
    return {"rate": len(reqs) / window_s, "requests": len(reqs), "window": window_s,
            "hosts": len(busy), "ceiling": sum(1 / g for g in gaps.values()),
            "ceiling_retry_after": sum((window_s - waited[h]) / g
                                       for h, g in gaps.items()) / window_s}


def _site_delays() -> dict[str, float]:
    from crawler.testkit.synthetic_web import build_sites

    return {s.name: 1.5 if s.robots == "delay" else 0.0 for s in build_sites(8)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--dev-seconds", type=int, default=120)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rate, pages, span = one_site(args.seconds, Path(tmp))
    dev = dev_crawl(args.dev_seconds)
    rows = [
        ("one site, min_gap 1 s, default config: pages/s after robots.txt",
         f"{rate:.2f} ({pages} pages in {span:.0f} s; ceiling 1.00)"),
        ("crawl run (./dev crawl), 30 s after its first request: requests/s",
         f"{dev['rate']:.2f} ({dev['requests']} in {dev['window']:.0f} s, "
         f"{dev['hosts']} hosts crawled through the window)"),
        ("crawl run: politeness ceiling of those hosts (1 / gap or Crawl-delay)",
         f"{dev['ceiling']:.2f}/s"),
        ("crawl run: share of that ceiling", f"{dev['rate'] / max(dev['ceiling'], 1e-9):.0%}"),
        ("crawl run: ceiling less the Retry-After waits the sites asked for",
         f"{dev['ceiling_retry_after']:.2f}/s"),
        ("crawl run: share of that ceiling",
         f"{dev['rate'] / max(dev['ceiling_retry_after'], 1e-9):.0%}"),
    ]
    record("pace", "A host's pace against its politeness ceiling", rows,
           notes="Leases are granted ahead (frontier.lookahead_s, max_lookahead_leases) and "
                 "the fetcher's back queues enforce each gap at request time; leases and "
                 "completions travel at once (at-least-once topics), so a host's pace no "
                 "longer waits for checkpoints. The ceiling counts the hosts crawled through the "
                 "whole window (requests in its first and its last 5 s), each at 1/gap "
                 "(Crawl-delay 1.5 s where robots.txt asks it); the second one also takes "
                 "out the Retry-After waits of the throttling sites (a 429 every 7th "
                 "request, Retry-After 2 s). The rest of the gap: after each 429 the host's "
                 "allowance is halved and regained over a few fetches, and the look-ahead "
                 "leases already out keep the pace they were granted with.")


if __name__ == "__main__":
    main()
