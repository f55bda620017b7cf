"""The parse stage: HTML pages and sitemaps parsed in parser processes, never on the
fetch engine's loop.

Each fetcher task owns `parse.workers` long-lived parser processes (this module run as
`python -m udfs.parser.stage`, started with subprocess: a plain exec of the task's own
interpreter, which works the same inside PyFlink's Python worker, where the
multiprocessing start methods would re-import the Beam harness's main module). A page
goes to an idle parser over a pipe (length-prefixed pickles) and comes back as a
ParsedPage; the fetch engine's coroutine awaits it on a thread of this stage
(`run_in_executor`), so its event loop keeps fetching while pages are parsed.

Limits (udfs.core.parse.ParseLimits, the `parse` configuration section):

* CPU time: the thread that waits for a parser reads the process's CPU time (user +
  system: its CPU-time clock, or psutil where it has none) and kills it once the page
  has used `cpu_limit_s` (or after the wall-clock cap); a new parser replaces it.
  The page ends as PARSE_TIMEOUT.
* memory: each parser runs under RLIMIT_AS = `memory_limit_mb`; a MemoryError ends
  the page as PARSE_TIMEOUT and the parser is replaced (its heap may be in pieces).
* a parser that dies (a signal, an abort) ends the page as PARSE_TIMEOUT too, its
  exit status in the error; the next page gets a new parser.
* `max_bytes` of the body and `max_links` links: parse_html's own bounds.
* `max_waiting`: pages waiting for (or in) a parser; the fetcher takes no new lease
  while `full()`.

A sitemap file (`parse_sitemap`) goes the same way, under the same CPU, memory and
crash limits (up to fetch.max_sitemap_bytes, 50 MB: seconds of XML and URL
normalization that would otherwise stall every fetch on the loop); its result is a
SitemapResult, and a limit hit leaves it with no entries and the limit in `error`.

The user's parse filters (`parse.filters`, udfs/core/parsefilters.py) run in the parser
process right after parse_html, under the same limits; each process loads them once,
when it starts. A filter that raised is reported in the ParseResult (`filter_error`)
beside the page, which keeps what the filters before it returned.

Nothing here fails the task: every page gets a ParseResult. A parser is SIGKILLed
when its task's process dies (PR_SET_PDEATHSIG), even in the middle of a parse.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from queue import SimpleQueue
from typing import Any

import psutil

from udfs.core.parse import (
    LimitKind,
    ParsedPage,
    ParseLimits,
    limit_error,
    parse_deadline,
)
from udfs.core.sitemaps import SitemapResult
from udfs.core.urls import UrlPolicy

_LEN = struct.Struct("!I")


@dataclass
class ParseResult:
    """One page's parse: `page` (None when a limit was hit), the limit hit (`limit`,
    with the completion's error text in `error`), and the seconds it held a parser; for
    a sitemap file, `sitemap` in place of `page`."""

    page: ParsedPage | None
    limit: LimitKind | None = None
    error: str | None = None
    seconds: float = 0.0
    # (filter name, "Type: message") when a parse filter raised on this page
    filter_error: tuple[str, str] | None = None
    sitemap: SitemapResult | None = None


def _write_frame(f, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_LEN.pack(len(data)))
    f.write(data)
    f.flush()


def _read_exact(f, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = f.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _libc_function(name: str) -> Any:
    """A function of the C library this process runs on, None where it has none."""
    import ctypes

    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None


def _cpu_clock(pid: int) -> int | None:
    """The CPU-time clock of process `pid` (POSIX clock_getcpuclockid), None where there
    is none: read with clock_gettime in well under a microsecond, where psutil parses
    /proc/<pid>/stat in about 20 (twice a page)."""
    import ctypes

    getter, clock = _libc_function("clock_getcpuclockid"), ctypes.c_int()
    if getter is None or getter(pid, ctypes.byref(clock)) != 0:
        return None
    return clock.value


class _Parser:
    """One parser process and the parent's end of its pipes."""

    def __init__(self, limits: ParseLimits, user_agent: str, drop_params: tuple[str, ...],
                 parse_delay_s: float, filters: tuple[str, ...] = (),
                 keep_heap: bool = True) -> None:
        env = dict(os.environ)
        # The task's import path (PyFlink's worker adds the job's files to sys.path).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "udfs.parser.stage", str(limits.memory_limit_mb),
             str(os.getpid()), "keep-heap" if keep_heap else "glibc-heap"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True)
        self.ps = psutil.Process(self.proc.pid)  # our child: its pid is not reused before wait()
        self.clock = _cpu_clock(self.proc.pid)
        if self.proc.stdout is None or self.proc.stdin is None:  # pragma: no cover
            raise RuntimeError("the parser process has no pipes")
        self.fd = self.proc.stdout.fileno()
        self.buf = bytearray()
        _write_frame(self.proc.stdin, (user_agent, drop_params, limits.max_bytes,
                                       limits.max_links, parse_delay_s, filters))
        # Ready once its imports (the parse filters' included) are done: their CPU time
        # is not charged to a page.
        reply = self.receive(60.0)
        if reply != ("ready", None):
            self.kill()
            why = reply[1] if isinstance(reply, tuple) and reply[0] == "failed" \
                else self.exit_detail()
            raise RuntimeError(f"a parser process did not start ({why})")

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the process has used; 0.0 when it is gone."""
        if self.clock is not None:
            try:
                return time.clock_gettime(self.clock)
            except OSError:  # it has ended
                return 0.0
        try:
            times = self.ps.cpu_times()  # its own, not its children's
        except psutil.Error:
            return 0.0
        return times.user + times.system

    def send(self, job: tuple) -> None:
        _write_frame(self.proc.stdin, job)

    def receive(self, timeout_s: float) -> tuple | None | bool:
        """The reply if it arrives within `timeout_s` (None: not yet; False: the process
        closed its end, i.e. died)."""
        end = time.monotonic() + timeout_s
        while True:
            if len(self.buf) >= _LEN.size:
                (n,) = _LEN.unpack_from(self.buf)
                if len(self.buf) >= _LEN.size + n:
                    data = bytes(self.buf[_LEN.size:_LEN.size + n])
                    del self.buf[:_LEN.size + n]
                    return pickle.loads(data)
            left = end - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return False
            self.buf += chunk

    def exit_detail(self) -> str:
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "no answer"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignored
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass


class ParseStage:
    """The parser processes of one fetcher task and the threads that wait for them."""

    def __init__(self, limits: ParseLimits, user_agent: str,
                 url_policy: UrlPolicy | None = None, parse_delay_s: float = 0.0,
                 filters: Sequence[str] = (),
                 on_free: Callable[[], None] | None = None, keep_heap: bool = True) -> None:
        self.limits = limits
        self.on_free = on_free  # called whenever a page or sitemap leaves the stage
        self.user_agent = user_agent
        self.filters = tuple(filters)  # parse.filters entries, loaded by each parser
        self.drop_params = tuple(url_policy.drop_params) if url_policy else ()
        self.parse_delay_s = parse_delay_s
        self.keep_heap = keep_heap  # False: glibc's own malloc thresholds (a benchmark's baseline)
        self.executor = ThreadPoolExecutor(limits.workers, thread_name_prefix="parse")
        # One slot per parser: a thread takes one, (re)starts its process if needed.
        self._idle: SimpleQueue[_Parser | None] = SimpleQueue()
        for _ in range(limits.workers):
            self._idle.put(None)
        self._live: set[_Parser] = set()
        self._lock = threading.Lock()
        self.waiting = 0  # pages handed to the stage and not yet back
        self.started = 0  # parser processes started (replacements included)
        self.closed = False

    def full(self) -> bool:
        """True while `max_waiting` pages wait for (or are in) a parser."""
        return self.waiting >= self.limits.max_waiting

    async def parse(self, body: bytes, url: str, headers: list[tuple[str, str]]
                    ) -> ParseResult:
        """Parse one page in a parser process; the caller's loop runs on meanwhile."""
        return await self._submit(("page", bytes(body[:self.limits.max_bytes]),
                                   len(body) > self.limits.max_bytes, url, headers))

    async def parse_sitemap(self, body: bytes, url: str, max_bytes: int) -> ParseResult:
        """Read one sitemap file (udfs.core.sitemaps.parse_sitemap, relative URLs against
        `url`, at most `max_bytes` uncompressed) in a parser process."""
        return await self._submit(("sitemap", bytes(body), url, max_bytes))

    async def _submit(self, job: tuple) -> ParseResult:
        with self._lock:
            self.waiting += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self.executor, self._run, job)
        finally:
            with self._lock:
                self.waiting -= 1
            if self.on_free is not None:
                self.on_free()

    def _start(self) -> _Parser:
        parser = _Parser(self.limits, self.user_agent, self.drop_params, self.parse_delay_s,
                         self.filters, self.keep_heap)
        with self._lock:
            self._live.add(parser)
            self.started += 1
        return parser

    def _drop(self, parser: _Parser) -> None:
        parser.kill()
        with self._lock:
            self._live.discard(parser)

    def _run(self, job: tuple) -> ParseResult:
        """On a stage thread: one page through one parser, under the limits."""
        parser = self._idle.get()
        started = time.monotonic()
        try:
            if self.closed:
                raise RuntimeError("the parse stage is closed")
            if parser is None or parser.proc.poll() is not None:
                if parser is not None:
                    self._drop(parser)
                parser = self._start()
            live = parser  # this page's parser (`parser`: what goes back to the idle queue)
            cpu0 = live.cpu_s()
            try:
                live.send(job)
                reply: Any = None
                while reply is None:
                    wait = parse_deadline(live.cpu_s() - cpu0,
                                          time.monotonic() - started, self.limits)
                    if wait is None:
                        self._drop(live)
                        parser = None
                        return self._hit(LimitKind.TIMEOUT, started)
                    reply = live.receive(wait)
            except (BrokenPipeError, ConnectionError, OSError, EOFError,
                    pickle.UnpicklingError):
                reply = False
            if reply is False:
                detail = live.exit_detail()
                self._drop(live)
                parser = None
                return self._hit(LimitKind.CRASH, started, detail)
            status, value = reply
            if status == "memory":
                self._drop(live)  # it exits after this answer; a fresh one next
                parser = None
                return self._hit(LimitKind.MEMORY, started, value)
            if status == "error":
                return ParseResult(None, None, f"parser error: {value}",
                                   time.monotonic() - started)
            if job[0] == "sitemap":
                return ParseResult(None, seconds=time.monotonic() - started, sitemap=value)
            page, filter_error = value
            return ParseResult(page, seconds=time.monotonic() - started,
                               filter_error=filter_error)
        finally:
            self._idle.put(parser)

    def _hit(self, kind: LimitKind, started: float, detail: str = "") -> ParseResult:
        return ParseResult(None, kind, limit_error(kind, self.limits, detail),
                           time.monotonic() - started)

    def close(self) -> None:
        """Kill the parsers (a page being parsed ends as a crash nobody reads)."""
        self.closed = True
        with self._lock:
            live = list(self._live)
            self._live.clear()
        for parser in live:
            parser.kill()
        self.executor.shutdown(wait=False, cancel_futures=True)


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when the thread that started it ends (a task killed
    with -9 leaves no parser behind, even one inside a long parse)."""
    import signal

    prctl = _libc_function("prctl")
    if prctl is None:  # not Linux: the parser still ends at EOF
        return
    prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent ended before prctl took effect
        os._exit(0)


# glibc's malloc in a parser: blocks from 4 MB are mapped apart (returned at once when
# freed), smaller ones come from the heap, which gives back its free top only past 32
# MB. With glibc's own thresholds a parser's heap grew and shrank by hundreds of KB a
# page (SimHash's arrays, lxml's tree): ~90 page faults a page, a quarter of its CPU
# (bench/RESULTS.md, parse stage). What stays mapped is bounded by RLIMIT_AS.
MMAP_THRESHOLD = 4 << 20
TRIM_THRESHOLD = 32 << 20


def _keep_heap() -> None:
    """Set the malloc thresholds above (glibc only; elsewhere malloc is left as it is)."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return
    mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    mallopt(-1, TRIM_THRESHOLD)  # M_TRIM_THRESHOLD


def _child(memory_mb: int, parent: int, keep_heap: bool = True) -> None:
    """A parser process: pages in on stdin, ParsedPages out on stdout, until EOF."""
    import resource
    import signal

    _die_with_parent(parent)
    if keep_heap:
        _keep_heap()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the task stops it, not a Ctrl-C
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed may corrupt the replies

    from udfs.core.parse import parse_html
    from udfs.core.parsefilters import load_filters, parse_and_filter
    from udfs.core.sitemaps import parse_sitemap

    def read() -> Any:
        head = _read_exact(inp, _LEN.size)
        if head is None:
            return None
        data = _read_exact(inp, _LEN.unpack(head)[0])
        return None if data is None else pickle.loads(data)

    setup = read()
    if setup is None:
        return
    user_agent, drop_params, max_bytes, max_links, delay_s, entries = setup
    policy = UrlPolicy(tuple(drop_params)) if drop_params else None
    try:
        chain = load_filters(entries)  # once per process, not per page
    except Exception as exc:  # noqa: BLE001 - the parent reports it
        _write_frame(out, ("failed", f"parse.filters: {exc}"[:1000]))
        return
    parse_html(b"<p>warm</p>", "http://warm.test/")  # lxml's first call costs too
    from udfs.flink import collector

    collector.settle()  # (the imports frozen; the young generation collected less often)
    _write_frame(out, ("ready", None))
    while True:
        try:
            job = read()
        except MemoryError:  # the page alone does not fit: the parse would not either
            job = None
            _write_frame(out, ("memory", "MemoryError reading the page"))
        if job is None:
            return
        try:
            if delay_s > 0:
                time.sleep(delay_s)  # faults.parse_delay_s: a stalled parser
            if job[0] == "sitemap":
                _, body, url, sitemap_bytes = job
                reply: tuple = ("ok", parse_sitemap(body, base_url=url, url_policy=policy,
                                                    max_bytes=sitemap_bytes))
            else:
                _, body, cut, url, headers = job
                page, failure = parse_and_filter(body, url, headers, user_agent=user_agent,
                                                 policy=policy, max_bytes=max_bytes,
                                                 max_links=max_links, chain=chain)
                page.truncated = page.truncated or cut
                page.text = ""  # not sent back: the hash and SimHash carry it
                reply = ("ok", (page, failure))
        except MemoryError:
            reply = ("memory", "MemoryError")
        except Exception as exc:  # noqa: BLE001 - reported, the page is skipped
            reply = ("error", f"{type(exc).__name__}: {exc}"[:500])
        job = body = None  # freed before the reply is written
        try:
            _write_frame(out, reply)
        except MemoryError:
            os._exit(3)
        if reply[0] == "memory":
            return


if __name__ == "__main__":
    _child(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:4] != ["glibc-heap"])
