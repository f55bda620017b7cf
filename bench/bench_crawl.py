"""The whole crawl on the synthetic web, beside Scrapy on the same web, same politeness.

    python bench/bench_crawl.py [--sites 200,2000] [--seconds 120] [--gap 0.2]
                                [--page-bytes 20000] [--checkpoint-ms 10000]
                                [--warmup 0] [--pages 450,540 ...]
                                [--variant KEY=VALUE[,KEY=VALUE...]] ...

For each web size, both crawl a fresh synthetic web (same seed) for the same time with
one request in flight per host, the same delay between requests and robots.txt obeyed;
the window is measured from `--warmup` seconds after each crawler's first request.
Figures: pages/s (HTML pages fetched with 200), the machine CPU they cost (user +
system seconds of every process of the crawler: for this one both jobs' JVMs and
Python workers and the Kafka broker; for Scrapy its process) per page, and the
politeness oracle's violations over each crawler's own request log. The synthetic web
serves from the benchmark's own process for both and is not counted; its serving
thread's CPU per page is shown apart, with what the machine's cores leave a crawler per
page at twice Scrapy's rate once the web server has had its share. Its pages are made
once per web into files under .cache/synthetic-web (PageStore; 1.2 GB and about 10 s
of two cores for 200 sites, ten times that for 2,000) and read back per request, so
that making them takes no CPU from the crawler under test. Scrapy runs from
its own virtualenv under .cache (installed from PyPI on first use), resolving the .test
names to 127.0.0.1. `--variant` runs this crawler once more per variant, with those
settings over the defaults, reported beside the default run. Needs the local stack
(`./dev up`).

    python bench/bench_crawl.py --against REV [--pairs 2] [--settings KEY=VALUE,...] ...

compares this checkout with another build instead of with Scrapy: a git worktree of
revision REV (sharing this checkout's .cache and local stack), run alternately with
this one, `--pairs` times each per web size, each run in a fresh process of its own
checkout (both jobs' Python workers included, through PYTHONPATH); each pair's first
run alternates between the builds. REV needs `bench_crawl.run_ours` (any revision since
35f3d83), and with `--warmup` or `--pages` a run_ours that takes them (since 106c33e).
Each build crawls its own synthetic web (crawler/testkit/synthetic_web.py of its
checkout): a REV before c338ee2 serves pages of LOREM words alone, every 20 KB page a
near-duplicate of the others, and so measures another web than this checkout's; a REV
before 926f478 makes each page as it serves it, without a PageStore, on the cores both
crawl on (either is said on the console and in the section's notes).
`--settings` applies settings over the defaults in this checkout's runs only: with
`--against HEAD` (a clean tree), settings against the defaults on the same build,
alternating, which `--variant` (run once, after the default run) does not do.
Written to its own section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._results import CpuMeter, EventMeter, ThreadMeter, broker_pid, record  # noqa: E402
from crawler.run import JobProcess, publish_seeds, synthetic_overrides  # noqa: E402
from crawler.testkit.oracle import Request, count_violations  # noqa: E402
from crawler.testkit.synthetic_web import PageStore, SyntheticWeb, build_sites  # noqa: E402
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
        for url in open(sys.argv[2][1:]).read().split():
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


def timed_window(web: SyntheticWeb, seconds: int,
                 meters: list[CpuMeter | ThreadMeter | EventMeter], alive,
                 warmup: float = 0.0,
                 each_second: Callable[[float], None] | None = None) -> tuple[float, float]:
    """From `warmup` seconds after the first request the web sees, `seconds` of
    crawling: (t0, t1), with the CPU meters running over exactly that window.
    `each_second`, if given, is called after each sample with the seconds since t0."""
    start = time.monotonic()
    while not web.log and time.monotonic() - start < 180 and alive():
        time.sleep(0.2)
    first = time.monotonic()
    while time.monotonic() - first < warmup and alive():
        time.sleep(0.5)
    for meter in meters:
        meter.start()
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds and alive():
        time.sleep(1)
        for meter in meters:
            meter.sample()
        if each_second is not None:
            each_second(time.monotonic() - t0)
    return t0, time.monotonic()


# More sites than this share crawled out by a window's end: the rate measured there is
# the web's size, not the crawler's pace.
DRY_SHARE = 0.05


def crawled_out(web: SyntheticWeb, until: float) -> int:
    """Sites every page ("/p/<i>") of which had been served by `until`."""
    served: dict[str, set[str]] = {}
    for r in list(web.log):
        if r.start <= until and r.status == 200 and r.path.startswith("/p/") and \
                r.path[3:].isdigit():
            served.setdefault(r.host, set()).add(r.path)
    return sum(1 for s in web.site_list
               if len(served.get(web.host_key(s), ())) >= s.pages)


def served_pages(web: SyntheticWeb, since: float, until: float) -> int:
    """HTML pages the web served with 200 from `since` to `until` (its clock)."""
    return sum(1 for r in list(web.log) if since <= r.start <= until and r.status == 200
               and not r.is_robots and not r.path.startswith("/sitemap"))


@dataclasses.dataclass(frozen=True)
class TracePoint:
    """A run's figures so far, `seconds` into its window: pages served, and each part's
    CPU seconds and, of them, its JIT compilers' (run_ours' `trace`)."""

    seconds: float
    pages: int
    cpu: dict[str, float]
    jit: dict[str, float]


def pages_and_violations(web: SyntheticWeb, gap: float, since: float, until: float):
    """(pages fetched in [since, until], violations, by kind). Raises if the web ran out
    of pages by `until` (DRY_SHARE): such a run measures the web, not the crawler."""
    dry = crawled_out(web, until)
    if dry > DRY_SHARE * len(web.site_list):
        raise RuntimeError(
            f"the synthetic web ran out of pages: {dry} of {len(web.site_list)} sites had "
            "every page fetched by the measured window's end, so its rate is the web's "
            "size, not the crawler's pace; measure with more pages a site (--pages)")
    pages = served_pages(web, since, until)
    v = web.violations("FlinkCrawler", gap)
    if sum(v.values()):
        keep_violating_hosts(web, gap)
    return pages, sum(v.values()), v


VIOLATIONS_DIR = ROOT / ".cache" / "bench-violations"


def keep_violating_hosts(web: SyntheticWeb, gap: float, user_agent: str = "FlinkCrawler",
                         folder: Path = VIOLATIONS_DIR) -> Path:
    """The whole request log of every host the oracle found a violation at, one JSON
    line a request (times as the web server saw them, its monotonic clock), with the
    host's rules and kinds first: a violation is rare, and its run's web is gone when
    the bench prints the count. Returns the file, named by the time of the run."""
    rules = web.host_rules(gap)
    by_host: dict[str, list[Request]] = {}
    for r in list(web.log):
        by_host.setdefault(r.host, []).append(r)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{len(rules)}-sites.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        for host, requests in by_host.items():
            kinds = count_violations(requests, {host: rules[host]}, user_agent)
            if not sum(kinds.values()):
                continue
            out.write(json.dumps({"host": host, "kinds": kinds,
                                  "min_gap_s": rules[host].min_gap_s}) + "\n")
            for r in sorted(requests, key=lambda r: r.start):
                out.write(json.dumps(dataclasses.asdict(r)) + "\n")
    print(f"politeness violations: the requests of the hosts concerned are in {path}",
          file=sys.stderr, flush=True)
    return path


PAGES = (90, 115)  # run_ours' pages per site (a random count in this range), as before
# The command's: enough for a 200-site crawl of 60 + 120 s at twice Scrapy's pace here
# (300-360 ran out on 2026-12-07: at 337 pages/s, some 300 a site in those 180 s).
CLI_PAGES = (450, 540)


# The synthetic webs' pages, made once per web (seed, sites, page size) and served from
# files: about 1.9 GB for 200 sites of 450-540 pages of 20 KB, 19 GB for 2,000.
PAGES_DIR = ROOT / ".cache" / "synthetic-web"


def synthetic_web(sites: int, pages: tuple[int, int], page_bytes: int) -> SyntheticWeb:
    """A fresh synthetic web (seed 11) whose ordinary pages come from a PageStore:
    making a 20 KB page took the server about 0.4 ms of the cores the crawler under test
    runs on, and a burst of requests queued behind it (crawler/testkit/synthetic_web.py,
    PageStore). Both crawlers are served alike."""
    web_sites = build_sites(sites, seed=11, pages=pages)
    print(f"synthetic web: {sites} sites, pages in {PAGES_DIR} (made on first use)",
          flush=True)
    return SyntheticWeb(web_sites, page_bytes=page_bytes,
                        store=PageStore.open_or_build(PAGES_DIR, web_sites, page_bytes))


def run_ours(sites: int, seconds: int, gap: float, workdir: Path, page_bytes: int,
             checkpoint_ms: int, extra: tuple[str, ...] = (), *, warmup: float = 0.0,
             pages: tuple[int, int] = PAGES, jit: dict[str, float] | None = None,
             server: dict[str, float] | None = None,
             processes: dict[str, float] | None = None,
             events: dict[str, float] | None = None,
             trace: list[TracePoint] | None = None, trace_step: float = 20.0):
    """One crawl of a fresh synthetic web: ((pages, violations, by kind), seconds, CPU
    seconds by part). `jit`, if given, receives each part's JIT compiler seconds (part
    of its CPU seconds); `server`, the web server's CPU seconds (`serving`);
    `processes`, each job's CPU seconds by kind of process ("fetcher Python", ...);
    `events`, the frontier's counted events (urls_admitted, ...) over the window;
    `trace`, every `trace_step` seconds of the window, the figures so far (TracePoint)."""
    web = synthetic_web(sites, pages, page_bytes)
    web.start()
    base = load_config(env={})
    suffix = time.strftime("%H%M%S")
    overrides = [f"topics.{k}.name=bench-{suffix}.{base.topic(k)}" for k in TOPIC_KEYS]
    overrides += synthetic_overrides(web, workdir, gap)
    overrides.append(f"flink.checkpoint_interval_ms={checkpoint_ms}")
    overrides.append(f"flink.checkpoint_dir={workdir / 'checkpoints'}")  # gone with it
    overrides += extra
    cfg = load_config(env={}, overrides=overrides)
    from crawler.stack.local import drop_topics, ensure_topics

    ensure_topics(cfg)
    jobs = [JobProcess(n, overrides, workdir / f"{n}.log") for n in ("frontier", "fetcher")]
    for job in jobs:
        job.start()
    publish_seeds(cfg, [web.host_key(s) + "/" for s in web.site_list])
    # One meter per part (each job's process tree: its JVM, Python workers and parser
    # processes; the broker), so each part's CPU per page shows beside the total.
    meters = {j.name: CpuMeter([j.proc.pid]) for j in jobs}
    broker = broker_pid()
    if broker:
        meters["kafka"] = CpuMeter([broker])
    serving = ThreadMeter(web.thread_id or 0)
    counted = EventMeter(cfg["metrics.frontier_port"])

    def traced(elapsed: float) -> None:
        if trace is not None and elapsed >= trace_step * (len(trace) + 1):
            now = time.monotonic()  # pages since the window's start, as the CPU figures
            trace.append(TracePoint(elapsed, served_pages(web, now - elapsed, now),
                                    {n: m.seconds() for n, m in meters.items()},
                                    {n: m.jit() for n, m in meters.items()}))

    try:
        t0, t1 = timed_window(web, seconds, [*meters.values(), serving, counted],
                              lambda: all(j.alive() for j in jobs), warmup, traced)
        parts = {name: m.seconds() for name, m in meters.items()}
        if server is not None:
            server["serving"] = serving.seconds()
        if jit is not None:
            # (the broker's too: one started shortly before compiles its hot paths in
            # the first size's window, some 0.6 ms a page in one run here)
            jit.update({name: m.jit() for name, m in meters.items()})
        if events is not None:
            events.update(counted.counts())
        if processes is not None:
            processes.update({f"{j.name} {kind}": cpu for j in jobs
                              for kind, cpu in meters[j.name].by_process().items()})
    finally:
        for job in jobs:
            job.stop()
        web.stop()
        if web.store is not None:
            web.store.close()
        drop_topics(cfg)
    return pages_and_violations(web, gap, t0, t1), t1 - t0, parts


def run_scrapy(sites: int, seconds: int, gap: float, workdir: Path, page_bytes: int, *,
               warmup: float = 0.0, pages: tuple[int, int] = PAGES,
               server: dict[str, float] | None = None):
    web = synthetic_web(sites, pages, page_bytes)
    web.start()
    spider = workdir / "spider.py"
    spider.write_text(SPIDER)
    seeds = workdir / "seeds.txt"
    seeds.write_text("\n".join(web.host_key(s) + "/" for s in web.site_list))
    proc = subprocess.Popen([str(scrapy_python()), str(spider),
                             f"{gap},{int(seconds + warmup + 60)}",
                             f"@{seeds}"], cwd=workdir, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    meter, serving = CpuMeter([proc.pid]), ThreadMeter(web.thread_id or 0)
    try:
        t0, t1 = timed_window(web, seconds, [meter, serving], lambda: proc.poll() is None,
                              warmup)
        cpu = meter.seconds()
        if server is not None:
            server["serving"] = serving.seconds()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        web.stop()
        if web.store is not None:
            web.store.close()
    return pages_and_violations(web, gap, t0, t1), t1 - t0, cpu


def server_ms(server: dict[str, float], pages: int) -> float:
    """The synthetic web's serving thread's CPU ms per page of one run."""
    return 1000 * server.get("serving", 0.0) / max(pages, 1)


def budget_at(rate: float, serving_ms: float) -> str:
    """What this machine's cores leave a crawler per page at `rate` pages/s, once the web
    server has had its share (`serving_ms` a page): the most CPU per page at which that
    rate is possible here at all."""
    cores = os.cpu_count() or 1
    left = 1000 * cores / max(rate, 1e-9) - serving_ms
    return f"{left:.1f} ({cores} cores at {rate:,.1f} pages/s, less {serving_ms:.1f} " \
        "for the web server)"


WINDOW = "seconds measured (after a warm-up of) / gap / page size / pages per site / " \
    "our checkpoint interval"


def window_row(seconds: int, warmup: float, gap: float, page_bytes: int, checkpoint_ms: int,
               pages: dict[int, tuple[int, int]]) -> str:
    ranges = {f"{lo}–{hi}" for lo, hi in pages.values()}
    per_site = ranges.pop() if len(ranges) == 1 else ", ".join(
        f"{lo}–{hi} ({sites:,} sites)" for sites, (lo, hi) in pages.items())
    return (f"{seconds} s ({warmup:g} s) / {gap} s / {page_bytes:,} bytes / "
            f"{per_site} / {checkpoint_ms / 1000:g} s")


def pages_by_size(given: list[str], sizes: list[int]) -> dict[int, tuple[int, int]]:
    """--pages as {sites: (lo, hi)}: one LO,HI for every size, or one per size in the
    order of --sites. ValueError with the reason otherwise."""
    if len(given) not in (1, len(sizes)):
        raise ValueError(f"one LO,HI for every size or one per size ({len(sizes)}), "
                         f"got {len(given)}")
    if len(given) > 1 and len(set(sizes)) < len(sizes):
        raise ValueError("one per size needs sizes that differ")
    ranges = []
    for text in given:
        try:
            lo, hi = (int(x) for x in text.split(","))
        except ValueError:
            raise ValueError(f"LO,HI (whole numbers), got {text}") from None
        if not 1 <= lo <= hi:
            raise ValueError(f"1 <= LO <= HI, got {text}")
        ranges.append((lo, hi))
    return {sites: ranges[i if len(ranges) > 1 else 0] for i, sites in enumerate(sizes)}


def per_page(parts: dict[str, float], pages: int) -> str:
    """CPU seconds by part as ms per page: "frontier 5.6, fetcher 7.4, kafka 0.5"."""
    return ", ".join(f"{name} {1000 * cpu / max(pages, 1):.1f}" for name, cpu in parts.items())


def cpu_by_part(parts: dict[str, float], pages: int) -> str:
    """The total ms per page, then by part: "13.5 (frontier 5.6, fetcher 7.4, kafka 0.5)"."""
    return f"{1000 * sum(parts.values()) / max(pages, 1):.1f} ({per_page(parts, pages)})"


# One run of run_ours in a fresh process, in the checkout it is started from (cwd).
ONE_RUN = """
import json, sys
from pathlib import Path
sys.path.insert(0, ".")
from bench.bench_crawl import run_ours
a = json.loads(sys.argv[1])
more = {k: tuple(v) if k == "pages" else v for k, v in a["more"].items()}
(pages, v, kinds), secs, parts = run_ours(a["sites"], a["seconds"], a["gap"],
    Path(a["workdir"]), a["page_bytes"], a["checkpoint_ms"], tuple(a["extra"]), **more)
print(json.dumps({"pages": pages, "violations": v, "kinds": kinds, "seconds": secs,
                  "parts": parts}))
"""


def run_checkout(checkout: Path, workdir: Path, **kw) -> dict:
    """run_ours of the code in `checkout`, in a process of its own (see ONE_RUN)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}  # process-mode workers too
    # Its own process group, jobs included: a run past its time is stopped whole, so
    # that no job of it runs on beside (and is counted in) the runs after it.
    proc = subprocess.Popen([sys.executable, "-c", ONE_RUN, json.dumps(
        {**kw, "workdir": str(workdir)})], cwd=checkout, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(
            timeout=kw["seconds"] + kw["more"].get("warmup", 0) + 900)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"a run in {checkout} did not end in time") from None
    lines = stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"a run in {checkout} failed ({proc.returncode}): "
                           f"{stderr.strip()[-2000:]}")
    return json.loads(lines[-1])


def web_difference(rev: str, bench_source: str, web_source: str) -> str | None:
    """How the synthetic web `rev`'s runs crawl differs from this checkout's, given its
    bench_crawl.py and synthetic_web.py; None when it does not."""
    if "def _vocabulary(" not in web_source:
        return (f"{rev}'s runs crawl its own synthetic web, of LOREM-only pages (all "
                "near-duplicates of one another), not this checkout's (pages on topics, "
                "c338ee2)")
    if "PageStore" not in bench_source:
        return (f"{rev}'s runs make each page as they serve it (no PageStore, 926f478): "
                "its web server takes more of the machine's CPU and answers a burst of "
                "requests later, which the 10x rule turns into longer gaps")
    return None


def violations_cell(run: dict) -> str:
    """A run's violation count, with its kinds when there are any ("1 (gap 1)")."""
    kinds = {k: n for k, n in (run.get("kinds") or {}).items() if n}
    return str(run["violations"]) + (
        f" ({', '.join(f'{k} {n}' for k, n in kinds.items())})" if kinds else "")


def against(rev: str, sizes: list[int], pairs: int, base: dict, warmup: float,
            pages: dict[int, tuple[int, int]], settings: tuple[str, ...] = (),
            other_web: str | None = None) -> None:
    """This checkout against revision `rev`, alternating, `pairs` runs each per size;
    `settings` (KEY=VALUE) over the defaults in this checkout's runs only; `other_web`:
    why the two builds crawl different webs, if they do (each runs its own)."""
    # Passed only when asked for, so that a revision from before them still runs.
    more = {sites: {k: v for k, v in (("warmup", warmup), ("pages", pages[sites]))
                    if v != {"warmup": 0.0, "pages": PAGES}[k]} for sites in sizes}
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    here = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                          check=True, capture_output=True, text=True).stdout.strip()
    rows = [(WINDOW, window_row(base["seconds"], warmup, base["gap"], base["page_bytes"],
                                base["checkpoint_ms"], pages)),
            ("builds", f"this checkout ({here}"
                       + (f", with {','.join(settings)}" if settings else "")
                       + f") against {sha}, alternating, {pairs} runs each")]
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "rev"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f",
                        str(other), sha], check=True, capture_output=True)
        try:
            for shared in (".cache", ".state"):  # the connector jars; the running stack
                (other / shared).symlink_to(ROOT / shared)
            if (other / "setup.py").exists():  # its compiled part, as ./dev setup builds it
                subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                               cwd=other, check=True, capture_output=True)
            for sites in sizes:
                runs: dict[str, list[dict]] = {"this": [], sha: []}
                order = [("this", ROOT), (sha, other)]
                for i in range(pairs):  # this, REV, REV, this, ...: drift falls on both
                    for name, checkout in (order if i % 2 == 0 else order[::-1]):
                        runs[name].append(run_checkout(
                            checkout, Path(tmp) / f"{name}-{sites}-{i}", sites=sites,
                            extra=list(settings) if name == "this" else [],
                            more=more[sites],
                            **base))
                rate = {name: [r["pages"] / r["seconds"] for r in rs]
                        for name, rs in runs.items()}
                for name, rs in runs.items():
                    label = "this checkout" if name == "this" else sha
                    rows += [
                        (f"{sites} sites, {label}: pages/s",
                         ", ".join(f"{x:,.1f}" for x in rate[name])),
                        (f"{sites} sites, {label}: CPU ms per page (by part)", "; ".join(
                            cpu_by_part(r["parts"], r["pages"]) for r in rs)),
                        (f"{sites} sites, {label}: politeness violations",
                         ", ".join(violations_cell(r) for r in rs)),
                    ]
                cpu = {name: sum(sum(r["parts"].values()) for r in rs) /
                       max(sum(r["pages"] for r in rs), 1) for name, rs in runs.items()}
                rows += [(f"{sites} sites: ratio this / {sha}, pages/s (mean of runs)",
                          f"{sum(rate['this']) / max(sum(rate[sha]), 1e-9):.2f}"),
                         (f"{sites} sites: ratio this / {sha}, CPU per page (all runs)",
                          f"{cpu['this'] / max(cpu[sha], 1e-9):.2f}")]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(other)], capture_output=True)
    record("crawl_against", "The whole crawl, this build against an earlier one", rows,
           notes=("Both builds crawl the same synthetic web (seed) with the same settings "
                  if other_web is None else f"Not the same web: {other_web}. Both builds "
                  "crawl with the same seed and settings ") +
                 "(but those of --settings, in this checkout's runs: the builds row), "
                 "one after the other, alternating, so that the machine's drift falls on "
                 "both. CPU: user + system seconds of both jobs' process trees and the "
                 "Kafka broker over each measured window, divided by its pages.")


def _check_settings(ap: argparse.ArgumentParser, flag: str, settings: tuple[str, ...]
                    ) -> None:
    """One line and exit 2 for settings the jobs would refuse, before anything starts."""
    from udfs.config.loader import load_config

    if not all("=" in kv for kv in settings):
        ap.error(f"{flag} {','.join(settings)}: expected KEY=VALUE[,KEY=VALUE...]")
    try:
        load_config(env={}, overrides=settings)
    except ValueError as exc:  # (ConfigError is one)
        ap.error(f"{flag}: {exc}")


def add_into(total: dict, part: dict) -> None:
    """Add `part`'s figures into `total`, key by key (one run's into a size's sums)."""
    for key, value in part.items():
        total[key] = total.get(key, 0) + value


def merged_runs(runs: list) -> tuple[tuple[int, int, dict[str, int]], float, dict[str, float]]:
    """Several run_ours results of one size as one: pages, violations and their kinds,
    seconds and CPU seconds by part, summed."""
    pages = violations = 0
    seconds = 0.0
    kinds: dict[str, int] = {}
    parts: dict[str, float] = {}
    for (n, v, k), secs, p in runs:
        pages, violations, seconds = pages + n, violations + v, seconds + secs
        add_into(kinds, k)
        add_into(parts, p)
    return (pages, violations, kinds), seconds, parts


def pair_ratios(ours: list[tuple[int, float, float]],
                theirs: list[tuple[int, float, float]]) -> str:
    """Each pair's ratios, this crawler's over Scrapy's, from (pages, seconds, CPU s) of
    each run: "1.62x at 1.05x; 1.48x at 1.12x"."""
    out = []
    for (n, secs, cpu), (m, their_secs, their_cpu) in zip(ours, theirs, strict=True):
        rate = (n / secs) / max(m / their_secs, 1e-9)
        per_page = (cpu / max(n, 1)) / max(their_cpu / max(m, 1), 1e-9)
        out.append(f"{rate:.2f}x at {per_page:.2f}x")
    return "; ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sites", default="200,2000", help="comma-separated web sizes")
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--gap", type=float, default=0.2)
    ap.add_argument("--page-bytes", type=int, default=20_000)
    ap.add_argument("--checkpoint-ms", type=int, default=10_000,
                    help="this crawler's checkpoint interval (the shipped default: 10 s)")
    ap.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE,...",
                    help="also run this crawler with these settings (repeatable)")
    ap.add_argument("--warmup", type=float, default=0.0,
                    help="seconds of crawling before the measured window (the JVMs' JIT "
                         "compiles most of its code in the first minute and goes on for "
                         "about three: bench_warmup.py)")
    ap.add_argument("--pages", action="append", metavar="LO,HI",
                    help="pages per site, a random count in this range (a longer window "
                         "needs more: a run whose web ran out stops with an error); once "
                         "for every size, or once per size in the order of --sites "
                         f"(default {CLI_PAGES[0]},{CLI_PAGES[1]})")
    ap.add_argument("--against", metavar="REV",
                    help="compare with the build at this git revision instead of Scrapy")
    ap.add_argument("--pairs", type=int, default=None,
                    help="runs of each crawler (or, with --against, of each build) per web "
                         "size, alternating (default: 1 beside Scrapy, 2 with --against)")
    ap.add_argument("--settings", metavar="KEY=VALUE,...",
                    help="with --against: these settings in this checkout's runs only "
                         "(--against HEAD: settings against the defaults, alternating)")
    args = ap.parse_args()
    if args.pairs is None:
        args.pairs = 2 if args.against is not None else 1
    if args.pairs < 1:
        ap.error(f"--pairs: at least 1, got {args.pairs}")
    if args.warmup < 0:
        ap.error(f"--warmup: seconds, at least 0, got {args.warmup}")
    sizes = [int(x) for x in args.sites.split(",")]
    try:
        pages = pages_by_size(args.pages or [f"{CLI_PAGES[0]},{CLI_PAGES[1]}"], sizes)
    except ValueError as exc:
        ap.error(f"--pages: {exc}")
    settings = tuple(args.settings.split(",")) if args.settings is not None else ()
    if args.settings is not None and args.against is None:
        ap.error("--settings: only with --against (use --against HEAD for this build)")
    if args.settings is not None:
        _check_settings(ap, "--settings", settings)
    if args.against is not None:
        if args.variant:
            ap.error("--against and --variant: one comparison at a time")
        if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet",
                           f"{args.against}^{{commit}}"], capture_output=True).returncode:
            ap.error(f"--against: {args.against} is not a commit of this repository")
        source = subprocess.run(["git", "-C", str(ROOT), "show",
                                 f"{args.against}:bench/bench_crawl.py"],
                                capture_output=True, text=True).stdout
        if "def run_ours(" not in source:
            ap.error(f"--against: {args.against} has no bench_crawl.run_ours to run")
        if (args.warmup or set(pages.values()) != {PAGES}) and \
                "warmup: float" not in source:
            ap.error(f"--against: {args.against}'s run_ours takes no --warmup or --pages")
        web = subprocess.run(["git", "-C", str(ROOT), "show",
                              f"{args.against}:crawler/testkit/synthetic_web.py"],
                             capture_output=True, text=True).stdout
        other_web = web_difference(args.against, source, web)
        if other_web:
            print(f"note: {other_web}", flush=True)
        against(args.against, sizes, args.pairs,
                {"seconds": args.seconds, "gap": args.gap, "page_bytes": args.page_bytes,
                 "checkpoint_ms": args.checkpoint_ms}, args.warmup, pages, settings,
                other_web)
        return
    variants = [tuple(v.split(",")) for v in args.variant]
    for v in variants:
        _check_settings(ap, "--variant", v)
    scrapy_python()  # install first, outside the timed part
    rows = [(WINDOW, window_row(args.seconds, args.warmup, args.gap, args.page_bytes,
                                args.checkpoint_ms, pages))]
    for sites in sizes:
        ours_results: list = []  # run_ours's, in time order
        theirs_runs: list[tuple[int, float, float]] = []  # (pages, seconds, CPU s) a run
        theirs_v = 0
        theirs_kinds: dict[str, int] = {}
        jit: dict[str, float] = {}
        processes: dict[str, float] = {}
        events: dict[str, float] = {}
        ours_server: dict[str, float] = {}
        theirs_server: dict[str, float] = {}
        other_runs: list[list] = [[] for _ in variants]
        for pair in range(args.pairs):
            with tempfile.TemporaryDirectory() as tmp:
                # Alternating (this crawler first, then Scrapy first: ABBA), so that the
                # machine's drift between runs falls on both alike.
                for crawler in (("ours", "scrapy") if pair % 2 == 0 else ("scrapy", "ours")):
                    if crawler == "ours":
                        run_jit: dict[str, float] = {}
                        run_server: dict[str, float] = {}
                        run_processes: dict[str, float] = {}
                        run_events: dict[str, float] = {}
                        ours_results.append(run_ours(
                            sites, args.seconds, args.gap, Path(tmp) / "ours",
                            args.page_bytes, args.checkpoint_ms, warmup=args.warmup,
                            pages=pages[sites], jit=run_jit, server=run_server,
                            processes=run_processes, events=run_events))
                        for total, part in ((jit, run_jit), (ours_server, run_server),
                                            (processes, run_processes),
                                            (events, run_events)):
                            add_into(total, part)
                    else:
                        server: dict[str, float] = {}
                        (n, v, kinds), secs, cpu = run_scrapy(
                            sites, args.seconds, args.gap, Path(tmp), args.page_bytes,
                            warmup=args.warmup, pages=pages[sites], server=server)
                        theirs_runs.append((n, secs, cpu))
                        theirs_v += v
                        add_into(theirs_kinds, kinds)
                        add_into(theirs_server, server)
                for i, v in enumerate(variants):
                    other_runs[i].append(run_ours(
                        sites, args.seconds, args.gap, Path(tmp) / f"variant{i}",
                        args.page_bytes, args.checkpoint_ms, v, warmup=args.warmup,
                        pages=pages[sites]))
        other = [(v, merged_runs(runs)) for v, runs in zip(variants, other_runs, strict=True)]
        start = len(rows)  # this size's rows, printed once it is done
        (ours, ours_v, ours_kinds), ours_s, ours_parts = merged_runs(ours_results)
        ours_runs = [(n, secs, sum(parts.values()))
                     for (n, _v, _kinds), secs, parts in ours_results]
        ours_cpu = sum(ours_parts.values())
        theirs = sum(r[0] for r in theirs_runs)
        theirs_cpu = sum(r[2] for r in theirs_runs)
        ours_rate = ours / ours_s
        theirs_rate = theirs / sum(r[1] for r in theirs_runs)
        ours_ms, theirs_ms = 1000 * ours_cpu / max(ours, 1), 1000 * theirs_cpu / max(theirs, 1)
        runs_note = f", {args.pairs} runs" if args.pairs > 1 else ""
        rows += [
            (f"{sites} sites: this crawler pages/s",
             f"{ours_rate:,.1f} ({ours:,} pages{runs_note})"),
            (f"{sites} sites: Scrapy pages/s",
             f"{theirs_rate:,.1f} ({theirs:,} pages{runs_note})"),
            (f"{sites} sites: ratio (pages/s)", f"{ours_rate / max(theirs_rate, 1e-9):.2f}"),
            (f"{sites} sites: this crawler CPU ms per page (all processes)",
             f"{ours_ms:.1f} ({ours_cpu:.0f} CPU s)"),
            (f"{sites} sites: this crawler CPU ms per page by part",
             per_page(ours_parts, ours)),
            (f"{sites} sites: the jobs' CPU ms per page by process",
             per_page(dict(sorted(processes.items(), key=lambda kv: -kv[1])), ours)),
            (f"{sites} sites: of which the JVMs' JIT compilers (C1, C2)",
             f"{1000 * sum(jit.values()) / max(ours, 1):.1f} ({per_page(jit, ours)})"),
            (f"{sites} sites: the frontier's events per page (the most frequent)",
             ", ".join(f"{name} {count / max(ours, 1):.2f}" for name, count in
                       sorted(events.items(), key=lambda kv: -kv[1])[:6]) or "not scraped"),
            (f"{sites} sites: Scrapy CPU ms per page", f"{theirs_ms:.1f} ({theirs_cpu:.0f} CPU s)"),
            (f"{sites} sites: the web server's CPU ms per page (counted for neither)",
             f"{server_ms(ours_server, ours):.1f} in this crawler's runs, "
             f"{server_ms(theirs_server, theirs):.1f} in Scrapy's"),
            (f"{sites} sites: CPU ms per page this crawler may spend at 2x Scrapy's pages/s",
             budget_at(2 * theirs_rate, server_ms(ours_server, ours))),
            (f"{sites} sites: politeness violations, this crawler", f"{ours_v} {ours_kinds}"),
            (f"{sites} sites: politeness violations, Scrapy", f"{theirs_v} {theirs_kinds}"),
        ]
        if args.pairs > 1:
            rows.append((f"{sites} sites: each pair, this crawler against Scrapy (in time "
                         "order): pages/s ratio, CPU per page ratio",
                         pair_ratios(ours_runs, theirs_runs)))
        for v, ((got, violations, _kinds), secs, parts) in other:  # (not `pages`: the range)
            rate = got / secs
            rows += [
                (f"{sites} sites, {','.join(v)}: pages/s (ratio to Scrapy)",
                 f"{rate:,.1f} ({rate / max(theirs_rate, 1e-9):.2f})"),
                (f"{sites} sites, {','.join(v)}: CPU ms per page (by part)",
                 f"{cpu_by_part(parts, got)}; violations {violations}"),
            ]
        for name, value in rows[start:]:  # at once: a later size's failure keeps them
            print(f"  {name}: {value}", flush=True)
    record("crawl", "The whole crawl vs Scrapy on the synthetic web", rows,
           notes="Same web (seed), same per-host politeness settings: 1 in flight, the same "
                 "delay, robots.txt obeyed. The oracle holds both to each host's own policy, "
                 "including robots.txt Crawl-delay (1.5 s on some sites) and Retry-After, "
                 "neither of which Scrapy implements: its violations come from there, and so "
                 "does part of its rate. This crawler: look-ahead leases, back queues in the "
                 "fetcher, leases and completions at once through Kafka, index events "
                 "exactly-once (committed at each checkpoint); Scrapy schedules in memory, in one "
                 "process, and keeps nothing across a crash. CPU: user + system seconds of "
                 "every process of each crawler over the measured window, divided by its "
                 "pages; the web server (this process) is not counted for either. It serves "
                 "pages made beforehand into files (PageStore), so that making them takes none "
                 "of the cores the crawler under test runs on. Its own CPU per page is shown "
                 "apart, and so is what the machine's cores leave a crawler per "
                 "page at twice Scrapy's rate once the web server has had its share: a "
                 "crawler that spends more cannot reach that rate on this machine. By "
                 "process: each job's JVM (the frontier's Python runs inside it, thread "
                 "mode), its Python process (in a local run the fetcher's process-mode UDF "
                 "worker runs there, loopback) and the others (the fetcher's parser "
                 "processes). With --pairs N each crawler runs N times a size, "
                 "alternating (this crawler first, then Scrapy first), and each figure is "
                 "over all its runs; a last row gives each pair's ratios.")


if __name__ == "__main__":
    main()
