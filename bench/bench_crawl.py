"""The whole crawl on the synthetic web, beside Scrapy on the same web, same politeness.

    python bench/bench_crawl.py [--sites 50] [--seconds 120] [--gap 0.2]

Both crawl a fresh synthetic web (same seed) for the same time with one request in
flight per host, the same delay between requests and robots.txt obeyed. Figures:
pages/s (HTML pages fetched with 200) and the politeness oracle's violations over
each crawler's own request log. Scrapy runs from its own virtualenv under .cache
(installed from PyPI on first use), resolving the .test names to 127.0.0.1.
Needs the local stack (`./dev up`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._results import record  # noqa: E402
from crawler.run import JobProcess, Watcher, publish_seeds, synthetic_overrides  # noqa: E402
from crawler.synthetic_web import SyntheticWeb, build_sites  # noqa: E402
from udfs.config import TOPIC_KEYS, load_config  # noqa: E402

SPIDER = r'''
import sys
from twisted.internet import defer
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer
import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor

@implementer(IResolverSimple)
class TestResolver:
    """Every .test name is 127.0.0.1 (the synthetic web); nothing else resolves."""
    def __init__(self, reactor=None): pass
    @classmethod
    def from_crawler(cls, crawler, reactor): return cls()
    def install_on_reactor(self):
        from twisted.internet import reactor
        reactor.installResolver(self)
    def getHostByName(self, name, timeout=None):
        if name == "evil.test":  # the SSRF bait: where the crawler maps it too
            return defer.succeed("127.0.0.2")
        if name.endswith(".test"):
            return defer.succeed("127.0.0.1")
        return defer.fail(OSError("not resolvable here: " + name))

class Site(scrapy.Spider):
    name = "site"
    links = LinkExtractor(allow_domains=None)
    async def start(self):
        for url in sys.argv[2:]:
            yield scrapy.Request(url)
    def parse(self, response):
        if not hasattr(response, "text"):
            return
        for link in self.links.extract_links(response):
            if ".test:" in link.url:
                yield response.follow(link.url, self.parse)

gap, seconds = float(sys.argv[1].split(",")[0]), int(sys.argv[1].split(",")[1])
process = CrawlerProcess(settings={
    "ROBOTSTXT_OBEY": True, "CONCURRENT_REQUESTS": 256, "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
    "DOWNLOAD_DELAY": gap, "DOWNLOAD_DELAY_JITTER": 0, "DEPTH_LIMIT": 16,
    "CLOSESPIDER_TIMEOUT": seconds, "LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False,
    "TWISTED_DNS_RESOLVER": "__main__.TestResolver", "USER_AGENT": "FlinkCrawler",
    "DOWNLOAD_MAXSIZE": 10 * 1024 * 1024, "COOKIES_ENABLED": False,
})
process.crawl(Site)
process.start()
'''


def scrapy_python() -> Path:
    venv = ROOT / ".cache" / "bench-scrapy"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "scrapy==2.19.0"], check=True)
    return py


def pages_and_violations(web: SyntheticWeb, gap: float, since: float, until: float):
    log = [r for r in web.log if since <= r.start <= until]
    pages = sum(1 for r in log if r.status == 200 and not r.is_robots
                and not r.path.startswith(("/sitemap",)))
    v = web.violations("FlinkCrawler", gap)
    return pages, sum(v.values()), v


def run_ours(sites: int, seconds: int, gap: float, workdir: Path):
    web = SyntheticWeb(build_sites(sites, seed=11, pages=(90, 115)))
    web.start()
    base = load_config(env={})
    suffix = time.strftime("%H%M%S")
    overrides = [f"topics.{k}.name=bench-{suffix}.{base.topic(k)}" for k in TOPIC_KEYS]
    overrides += synthetic_overrides(web, workdir, gap)
    cfg = load_config(env={}, overrides=overrides)
    from crawler.local import ensure_topics

    ensure_topics(cfg)
    jobs = [JobProcess(n, overrides, workdir / f"{n}.log") for n in ("frontier", "fetcher")]
    for job in jobs:
        job.start()
    publish_seeds(cfg, [web.host_key(s) + "/" for s in web.site_list])
    watcher = Watcher(cfg)
    start = time.monotonic()
    # Count from the first request the web sees (the jobs take a while to start).
    while not web.log and time.monotonic() - start < 120:
        time.sleep(0.5)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        watcher.poll()
        time.sleep(1)
    t1 = time.monotonic()
    for job in jobs:
        job.stop()
    watcher.close()
    web.stop()
    return pages_and_violations(web, gap, t0, t1), t1 - t0


def run_scrapy(sites: int, seconds: int, gap: float, workdir: Path):
    web = SyntheticWeb(build_sites(sites, seed=11, pages=(90, 115)))
    web.start()
    spider = workdir / "spider.py"
    spider.write_text(SPIDER)
    seeds = [web.host_key(s) + "/" for s in web.site_list]
    t0 = time.monotonic()
    subprocess.run([str(scrapy_python()), str(spider), f"{gap},{seconds}", *seeds],
                   cwd=workdir, timeout=seconds + 120, capture_output=True)
    t1 = time.monotonic()
    web.stop()
    return pages_and_violations(web, gap, t0, t1), t1 - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sites", type=int, default=50)
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--gap", type=float, default=0.2)
    args = ap.parse_args()
    scrapy_python()  # install first, outside the timed part
    with tempfile.TemporaryDirectory() as tmp:
        (ours, ours_v, ours_kinds), ours_s = run_ours(args.sites, args.seconds, args.gap,
                                                      Path(tmp) / "ours")
        (theirs, theirs_v, theirs_kinds), theirs_s = run_scrapy(args.sites, args.seconds,
                                                                args.gap, Path(tmp))
    rows = [
        ("sites / gap / seconds", f"{args.sites} / {args.gap} s / {args.seconds} s"),
        ("this crawler: pages/s", f"{ours / ours_s:,.1f} ({ours:,} pages)"),
        ("this crawler: politeness violations", f"{ours_v} {ours_kinds}"),
        ("Scrapy: pages/s", f"{theirs / theirs_s:,.1f} ({theirs:,} pages)"),
        ("Scrapy: politeness violations", f"{theirs_v} {theirs_kinds}"),
        ("ratio this crawler / Scrapy (pages/s)",
         f"{(ours / ours_s) / max(theirs / theirs_s, 1e-9):.2f}"),
    ]
    record("crawl", "The whole crawl vs Scrapy on the synthetic web", rows,
           notes="Same web (seed), same per-host politeness settings: 1 in flight, the same "
                 "delay, robots.txt obeyed. The oracle holds both to each host's own policy, "
                 "including robots.txt Crawl-delay (1.5 s on some sites) and Retry-After, "
                 "neither of which Scrapy implements: its violations come from there, and so "
                 "does part of its rate. This crawler's leases and completions pass through "
                 "Kafka with exactly-once checkpoints (1 s), which paces each host; Scrapy "
                 "schedules in memory, in one process, and keeps nothing across a crash.")


if __name__ == "__main__":
    main()
