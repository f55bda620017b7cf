"""The parse stage: parser processes under CPU, memory, size and link limits; the rules of
those limits on made-up numbers (no clock), the stage with real processes."""

from __future__ import annotations

import asyncio
import os
import platform
import signal
import time

import psutil
import pytest

from crawler.testkit.procstat import cpu_seconds, minor_faults
from udfs.core.parse import LimitKind, ParseLimits, limit_error, parse_deadline
from udfs.parser.stage import ParseStage, _cpu_clock

# 250 nested <div>s and then 200,000 text nodes: lxml parses it at once, but the text
# extraction's ancestor test walks 250 levels per node (seconds of CPU; measured 8.6 s).
SLOW_PAGE = b"<html><body>" + b"<div>" * 250 + b"<b>w</b>" * 200_000 + b"</body></html>"
GOOD_PAGE = b"<html><body><a href='/x'>x</a><a href='/y'>y</a> hello</body></html>"


def test_the_deadline_ends_a_parse_at_its_cpu_limit_or_its_wall_cap():
    limits = ParseLimits(cpu_limit_s=2.0)
    assert limits.wall_cap_s == 11.0
    assert parse_deadline(0.0, 0.0, limits) == 2.0  # CPU cannot reach 2 s sooner
    assert parse_deadline(1.5, 3.0, limits) == 0.5  # starved of CPU: look again later
    assert parse_deadline(2.0, 2.1, limits) is None  # its CPU is spent
    assert parse_deadline(0.3, 11.0, limits) is None  # past the wall-clock cap
    assert parse_deadline(1.999, 1.0, limits) == 0.01  # never a busy loop
    assert "2 s CPU" in limit_error(LimitKind.TIMEOUT, limits)
    assert "1024 MB" in limit_error(LimitKind.MEMORY, limits)
    assert limit_error(LimitKind.CRASH, limits, "killed by signal 11").endswith("signal 11")


def test_limits_come_from_the_parse_section():
    from udfs.config import load_config
    from udfs.config.policies import parse_limits

    cfg = load_config(env={}, overrides=[
        "parse.workers=3", "parse.cpu_limit_s=1.5", "parse.memory_limit_mb=256",
        "parse.max_bytes=2048", "parse.max_links=7", "parse.max_waiting=9"])
    assert parse_limits(cfg) == ParseLimits(3, 1.5, 256, 2048, 7, 9)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def stage_factory():
    made: list[ParseStage] = []

    def make(**kw) -> ParseStage:
        stage = ParseStage(ParseLimits(**kw), "FlinkCrawler")
        made.append(stage)
        return stage

    yield make
    for stage in made:
        stage.close()


def test_a_page_parses_in_a_parser_process_with_its_links_and_text_hash(stage_factory):
    stage = stage_factory(workers=1)
    result = run(stage.parse(GOOD_PAGE, "http://a.test/", [("Content-Type", "text/html")]))
    assert result.limit is None and result.error is None
    assert result.page.links == ["http://a.test/x", "http://a.test/y"]
    assert result.page.text_sha256 and result.page.simhash
    assert stage.started == 1


def test_links_and_bytes_are_cut_at_their_limits(stage_factory):
    stage = stage_factory(workers=1, max_links=3, max_bytes=2048)
    many = b"<html><body>" + b"".join(b'<a href="/p/%d">p</a>' % i for i in range(50))
    assert len(run(stage.parse(many, "http://a.test/", [])).page.links) == 3
    late = b"<html><body>" + b"<p>filler</p>" * 400 + b'<a href="/late">late</a>'
    page = run(stage.parse(late, "http://a.test/", [])).page
    assert page.links == [] and page.truncated  # the link lies past max_bytes


def test_a_page_past_its_cpu_limit_ends_as_a_timeout_and_its_parser_is_replaced(
        stage_factory):
    stage = stage_factory(workers=1, cpu_limit_s=0.5)

    async def go():
        slow = await stage.parse(SLOW_PAGE, "http://slow.test/", [])
        after = await stage.parse(GOOD_PAGE, "http://a.test/", [])
        return slow, after

    slow, after = run(go())
    assert slow.limit is LimitKind.TIMEOUT and slow.page is None
    assert "0.5 s CPU" in slow.error
    assert after.limit is None and len(after.page.links) == 2  # a fresh parser
    assert stage.started == 2


def test_a_page_past_the_memory_limit_ends_as_a_memory_hit(stage_factory):
    stage = stage_factory(workers=1, memory_limit_mb=128)
    body = b"<html><body>" + b"<b>w</b>" * 600_000  # 4.8 MB
    result = run(stage.parse(body, "http://big.test/", []))
    assert result.limit is LimitKind.MEMORY and "128 MB" in result.error
    assert run(stage.parse(GOOD_PAGE, "http://a.test/", [])).page is not None


def test_a_parser_that_dies_mid_page_is_a_crash_and_the_next_page_parses(stage_factory):
    stage = stage_factory(workers=1, cpu_limit_s=60)

    async def go():
        task = asyncio.ensure_future(stage.parse(SLOW_PAGE, "http://poison.test/", []))
        while stage.waiting == 0 or not stage._live:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        (parser,) = stage._live
        os.kill(parser.proc.pid, signal.SIGSEGV)
        crashed = await task
        return crashed, await stage.parse(GOOD_PAGE, "http://a.test/", [])

    crashed, after = run(go())
    assert crashed.limit is LimitKind.CRASH
    assert "signal 11" in crashed.error
    assert after.page is not None and stage.started == 2


def big_sitemap(n: int) -> bytes:
    entries = "".join(f"<url><loc>/item/{i}?utm_source=s&amp;k={i}</loc></url>\n"
                      for i in range(n))
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            f'{entries}</urlset>\n').encode()


def test_a_sitemap_is_read_in_a_parser_process_with_the_drop_list():
    from udfs.core.sitemaps import parse_sitemap
    from udfs.core.urls import UrlPolicy

    policy = UrlPolicy.from_names(["utm_*"])
    stage = ParseStage(ParseLimits(workers=1), "FlinkCrawler", policy)
    try:
        body = big_sitemap(300)
        result = run(stage.parse_sitemap(body, "http://a.test/sitemap.xml", 50_000_000))
        assert result.limit is None and result.page is None and stage.started == 1
        here = parse_sitemap(body, base_url="http://a.test/sitemap.xml", url_policy=policy)
        assert result.sitemap == here and result.sitemap.kind == "urlset"
        assert result.sitemap.entries[7].url == "http://a.test/item/7?k=7"
        cut = run(stage.parse_sitemap(body, "http://a.test/sitemap.xml", 1000))
        assert cut.sitemap is not None and cut.sitemap.errors  # max_bytes reaches the parser
        assert len(cut.sitemap.entries) < 300
    finally:
        stage.close()


def test_a_sitemap_over_the_cpu_limit_ends_without_entries_and_the_next_one_parses(
        stage_factory):
    stage = stage_factory(workers=1, cpu_limit_s=0.1)
    slow = run(stage.parse_sitemap(big_sitemap(50_000), "http://a.test/s.xml", 50_000_000))
    assert slow.limit is LimitKind.TIMEOUT and slow.sitemap is None
    assert "0.1 s CPU" in slow.error
    after = run(stage.parse_sitemap(big_sitemap(3), "http://a.test/s.xml", 50_000_000))
    assert after.sitemap is not None and len(after.sitemap.entries) == 3
    assert stage.started == 2 and not stage.waiting


def test_the_event_loop_runs_on_while_pages_parse_and_full_bounds_the_wait(stage_factory):
    stage = stage_factory(workers=1, cpu_limit_s=1.0, max_waiting=2)

    async def go():
        ticks = 0
        first = asyncio.ensure_future(stage.parse(SLOW_PAGE, "http://slow.test/", []))
        second = asyncio.ensure_future(stage.parse(GOOD_PAGE, "http://a.test/", []))
        await asyncio.sleep(0)
        full_seen = stage.full()
        start = time.monotonic()
        while not (first.done() and second.done()):
            await asyncio.sleep(0.01)
            ticks += 1
        return ticks, time.monotonic() - start, full_seen, await first, await second

    ticks, took, full_seen, first, second = run(go())
    assert full_seen and not stage.full()
    assert first.limit is LimitKind.TIMEOUT and second.page is not None
    assert ticks >= took / 0.01 * 0.5  # the loop was never held by the parse


STAGE_FILTERS = """
import os, time
from dataclasses import replace

BUILT = 0

class Mark:
    \"\"\"Drops /y links and adds one naming the process it ran in and how many times
    this class was built there.\"\"\"
    def __init__(self):
        global BUILT
        BUILT += 1
    def filter(self, url, parse, page):
        return replace(parse, links=(*[u for u in parse.links if "/y" not in u],
                                     f"/pid/{os.getpid()}/built/{BUILT}"),
                       text=parse.text.upper())

class Broken:
    def filter(self, url, parse, page):
        raise ValueError(f"no luck with {url}")

class Spin:
    def filter(self, url, parse, page):
        while True:
            pass
"""


@pytest.fixture
def stage_filters(tmp_path, monkeypatch):
    """A parse filter module outside the package; the parser processes find it through the
    task's sys.path (as they find a user's module in a job)."""
    (tmp_path / "stage_filters.py").write_text(STAGE_FILTERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "stage_filters"


def filtered_stage(made, filters, **kw) -> ParseStage:
    stage = ParseStage(ParseLimits(**kw), "FlinkCrawler", filters=filters)
    made.append(stage)
    return stage


@pytest.fixture
def stages():
    made: list[ParseStage] = []
    yield made
    for stage in made:
        stage.close()


def test_the_parse_filters_run_in_the_parser_process_loaded_once(stage_filters, stages):
    from udfs.core.fingerprints import text_hash

    stage = filtered_stage(stages, ["stage_filters:Mark"], workers=1)

    async def go():
        return [await stage.parse(GOOD_PAGE, f"http://a.test/{i}", []) for i in range(2)]

    results = run(go())
    (parser,) = stage._live
    assert parser.proc.pid != os.getpid()
    for i, result in enumerate(results):
        assert result.filter_error is None
        # /y dropped, the added link names the parser process and one build of the class
        assert result.page.links == ["http://a.test/x",
                                     f"http://a.test/pid/{parser.proc.pid}/built/1"], i
        assert result.page.text_sha256 == text_hash("X Y HELLO")  # the filtered text
    # Without filters: the same page as before this feature.
    plain = filtered_stage(stages, [], workers=1)
    page = run(plain.parse(GOOD_PAGE, "http://a.test/", [])).page
    assert page.links == ["http://a.test/x", "http://a.test/y"]
    assert page.text_sha256 == text_hash("x y hello")


def test_a_raising_filter_is_reported_and_the_page_kept(stage_filters, stages):
    stage = filtered_stage(stages, ["stage_filters:Mark", "stage_filters:Broken"], workers=1)
    result = run(stage.parse(GOOD_PAGE, "http://a.test/", []))
    assert result.limit is None and result.error is None
    assert result.filter_error == ("Broken", "ValueError: no luck with http://a.test/")
    assert result.page.links[0] == "http://a.test/x" and len(result.page.links) == 2


def test_a_slow_filter_counts_against_the_pages_cpu_limit(stage_filters, stages):
    stage = filtered_stage(stages, ["stage_filters:Spin"], workers=1, cpu_limit_s=0.5)
    result = run(stage.parse(GOOD_PAGE, "http://a.test/", []))
    assert result.limit is LimitKind.TIMEOUT and result.page is None


def test_a_parser_whose_filters_do_not_load_says_why(stages):
    stage = filtered_stage(stages, ["no_such_filter_module:X"], workers=1)
    with pytest.raises(RuntimeError, match="cannot import no_such_filter_module"):
        run(stage.parse(GOOD_PAGE, "http://a.test/", []))


HOLDER = """
import asyncio, sys, time
from udfs.core.parse import ParseLimits
from udfs.parser.stage import ParseStage
from tests.unit.test_parse_stage import SLOW_PAGE

async def main():
    stage = ParseStage(ParseLimits(workers=1, cpu_limit_s=120), "FlinkCrawler")
    task = asyncio.ensure_future(stage.parse(SLOW_PAGE * 4, "http://slow.test/", []))
    while not stage._live:
        await asyncio.sleep(0.01)
    (parser,) = stage._live
    await asyncio.sleep(0.3)
    print(parser.proc.pid, flush=True)
    await task

asyncio.run(main())
"""


def test_a_parser_dies_with_its_task_even_inside_a_long_parse(tmp_path):
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        parser_pid = int(holder.stdout.readline())
        os.kill(parser_pid, 0)  # alive, parsing
        holder.kill()  # the task's process dies at once (kill -9)
        holder.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(parser_pid, 0)
            except ProcessLookupError:
                break
            try:  # reaped by init, or a zombie until then
                if psutil.Process(parser_pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        else:
            os.kill(parser_pid, signal.SIGKILL)
            raise AssertionError("the parser outlived its task")
    finally:
        if holder.poll() is None:
            holder.kill()


def test_a_parsers_cpu_time_is_its_user_plus_system_time_and_zero_once_gone():
    from udfs.parser.stage import _Parser

    parser = _Parser(ParseLimits(), "test-agent", (), 0.0)
    ticks = os.sysconf("SC_CLK_TCK")

    def from_proc() -> float:
        return cpu_seconds(parser.proc.pid)

    try:
        assert parser.clock is not None  # Linux: its CPU-time clock, not /proc read by psutil
        before = from_proc()
        assert before > 0  # its imports before "ready"
        # /proc counts whole ticks (user and system apart); the clock, nanoseconds.
        assert before - 2 / ticks <= parser.cpu_s() <= from_proc() + 2 / ticks
        parser.clock = None  # where there is no such clock: psutil, from /proc
        eps = 1e-9  # psutil divides user and system ticks apart: a rounding apart
        assert before - eps <= parser.cpu_s() <= from_proc() + eps
    finally:
        parser.kill()
    assert parser.cpu_s() == 0.0
    parser.clock = _cpu_clock(os.getpid())
    assert parser.clock is not None and parser.cpu_s() > 0  # a live one's clock is read


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc thresholds")
@pytest.mark.parametrize("keep_heap", [True, False])
def test_a_parsers_heap_stays_mapped_between_pages(keep_heap):
    """With glibc's own thresholds a parser's heap grows and shrinks by hundreds of KB a
    page (about 50 page faults a 100 KB page; a 20 KB one no longer, since SimHash's C
    loop makes no arrays); the parser keeps it (none to a few a page). glibc only:
    elsewhere mallopt does nothing, or there is none."""
    from crawler.testkit.synthetic_web import SyntheticWeb, build_sites

    web = SyntheticWeb(build_sites(10, seed=11, pages=(40, 50)), page_bytes=100_000)
    pages = [(web.body_for(s, f"/p/{i}"), f"http://{s.name}/p/{i}")
             for s in web.site_list for i in range(15)]
    stage = ParseStage(ParseLimits(workers=1), "FlinkCrawler", keep_heap=keep_heap)

    async def go() -> float:
        for body, url in pages[:30]:  # the heap grows to what a page needs
            await stage.parse(body, url, [])
        (parser,) = stage._live
        before = minor_faults(parser.proc.pid)
        for body, url in pages[30:]:
            assert (await stage.parse(body, url, [])).page is not None
        return (minor_faults(parser.proc.pid) - before) / len(pages[30:])

    try:
        per_page = run(go())
    finally:
        stage.close()
    print(f"{per_page:.1f} page faults a page")
    if keep_heap:
        assert per_page < 20
    else:  # the baseline this guards against (glibc's own thresholds on this machine)
        assert per_page > 25
