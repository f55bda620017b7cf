"""Shared by the benchmarks: print figures and record them in bench/RESULTS.md.

Each benchmark owns one section of RESULTS.md (between HTML comment markers),
replaced on every run, with the command that produced it and the machine.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import time
from pathlib import Path

import psutil

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = """# Benchmark results

Figures from the benchmarks in this folder, each section written by the command
it names. Machines here are noisy: compare the ratios within one section (they
are measured side by side in one run), not absolute figures across sections.
"""


def timed(fn, *, min_seconds: float = 1.0, max_rounds: int = 1_000_000) -> tuple[int, float]:
    """Call fn() repeatedly for at least min_seconds (bounded); (calls, seconds)."""
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds or calls >= max_rounds:
            return calls, elapsed


def record(name: str, title: str, rows: list[tuple[str, str]], notes: str = "") -> None:
    """Print rows and replace the section `name` of RESULTS.md."""
    command = "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    width = max(len(k) for k, _ in rows)
    print(f"## {title}")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    body = (f"<!-- {name}:start -->\n## {title}\n\n`{command}` on "
            f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}\n\n| measure | value |\n| --- | --- |\n{table}\n"
            + (f"\n{notes}\n" if notes else "") + f"<!-- {name}:end -->")
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else HEADER
    pattern = re.compile(rf"<!-- {re.escape(name)}:start -->.*?<!-- {re.escape(name)}:end -->",
                         re.DOTALL)
    text = pattern.sub(lambda _: body, text) if pattern.search(text) else \
        text.rstrip("\n") + "\n\n" + body
    RESULTS.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def tree_pids(roots: list[int]) -> set[int]:
    """The processes in the trees under `roots` (roots included)."""
    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        if proc.info["ppid"] is not None:
            children.setdefault(proc.info["ppid"], []).append(proc.pid)
    out, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out


def cpu_seconds(pids: set[int]) -> float:
    """User + system CPU seconds used so far by these processes (live ones; a process
    that has exited is counted by its parent's cutime once reaped)."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()  # its own, not its children's
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _task_cpu(pid: int, tid: int | str) -> tuple[str, float] | None:
    """(name, user + system CPU seconds so far) of one thread, from Linux /proc."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat", encoding="latin-1") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return stat[stat.index("(") + 1:stat.rindex(")")], \
        (int(fields[11]) + int(fields[12])) / _TICK


def thread_seconds(pids: set[int]) -> dict[tuple[int, int], tuple[str, float]]:
    """(name, CPU seconds so far) of every thread of these processes, by (pid, thread
    id): Linux /proc; empty elsewhere."""
    out: dict[tuple[int, int], tuple[str, float]] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            got = _task_cpu(pid, tid)
            if got is not None:
                out[(pid, int(tid))] = got
    return out


def jit_seconds(pids: set[int]) -> dict[tuple[int, int], float]:
    """CPU seconds so far of the JVMs' JIT compiler threads (C1, C2) among these
    processes, by (pid, thread id): Linux /proc; empty elsewhere."""
    return {key: cpu for key, (name, cpu) in thread_seconds(pids).items()
            if name.startswith(("C1 CompilerThre", "C2 CompilerThre"))}


class ThreadMeter:
    """CPU seconds of one thread of this process between start() and the last sample()
    (the synthetic web's serving thread: not part of either crawler's figures)."""

    def __init__(self, tid: int) -> None:
        self.tid = tid
        self.base = self.last = 0.0

    def _read(self) -> float:
        got = _task_cpu(os.getpid(), self.tid)
        return self.last if got is None else got[1]

    def start(self) -> None:
        self.base = self.last = self._read()

    def sample(self) -> None:
        self.last = self._read()

    def seconds(self) -> float:
        self.sample()
        return self.last - self.base


class EventMeter:
    """The frontier's event counters (urls_admitted, leases_granted, ...) between
    start() and counts(), scraped from its metrics port: the work a page brought into
    the frontier, beside the CPU it cost there. Empty when either scrape failed (a
    count since the job's start would pass for the window's)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.base: dict[str, float] | None = None

    def _read(self) -> dict[str, float] | None:
        from crawler.status import by_label, scrape

        samples = scrape(self.port)
        return None if samples is None else \
            by_label(samples, "event_frontier_events_total", "event")

    def start(self) -> None:
        self.base = self._read()

    def sample(self) -> None:
        """Nothing: a scrape costs the frontier's JVM CPU, so it is read at the ends only."""

    def counts(self) -> dict[str, float]:
        last = self._read()
        if self.base is None or last is None:
            return {}
        return {k: v - self.base.get(k, 0.0) for k, v in last.items()}


class CpuMeter:
    """Machine CPU of a set of process trees between start() and stop(): re-reads the
    trees at each sample (workers come and go), keeping each process's last figure.
    Apart, the part of it the JVMs' JIT compilers took (a compiler thread that ends
    between samples loses its last second: the figure is a lower bound), and the split
    by kind of process (`by_process`)."""

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self.base: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.kinds: dict[int, str] = {}  # pid -> "JVM", "Python" (a root) or "others"
        self.jit_base: dict[tuple[int, int], float] = {}
        self.jit_last: dict[tuple[int, int], float] = {}

    def _sample(self) -> dict[int, float]:
        got = {pid: cpu_seconds({pid}) for pid in tree_pids(self.roots)}
        for pid in got.keys() - self.kinds.keys():
            self.kinds[pid] = _process_kind(pid, self.roots)
        return got

    def start(self) -> None:
        self.base = self._sample()
        self.last = dict(self.base)
        self.jit_base = jit_seconds(set(self.base))
        self.jit_last = dict(self.jit_base)

    def sample(self) -> None:
        self.last.update(self._sample())
        self.jit_last.update(jit_seconds(set(self.last)))

    def seconds(self) -> float:
        self.sample()
        return sum(v - self.base.get(pid, 0.0) for pid, v in self.last.items())

    def by_process(self) -> dict[str, float]:
        """Of seconds() (as of the last sample): CPU seconds by kind of process. A job
        started by `python -m jobs.<name>` is its "Python" (in a local run, PyFlink's
        process-mode UDF worker runs inside it, loopback), its "JVM" (a thread-mode
        job's Python runs in there) and "others" (the fetcher's parser processes)."""
        out: dict[str, float] = {}
        for pid, v in self.last.items():
            kind = self.kinds.get(pid, "others")
            out[kind] = out.get(kind, 0.0) + v - self.base.get(pid, 0.0)
        return out

    def jit(self) -> float:
        """Of seconds(): the JIT compiler threads' CPU seconds (as of the last sample)."""
        return sum(v - self.jit_base.get(k, 0.0) for k, v in self.jit_last.items())


def _process_kind(pid: int, roots: list[int]) -> str:
    """"JVM" for any java process (a meter's root too: the broker's), else "Python" for
    a root (a job's `python -m jobs.<name>`), else "others"."""
    try:
        name = psutil.Process(pid).name()
    except psutil.Error:
        name = ""
    if name == "java":
        return "JVM"
    return "Python" if pid in roots else "others"


def broker_pid() -> int | None:
    """The local stack's Kafka broker process, if it is running (its CPU is the crawl's)."""
    from crawler.stack.local import LocalStack
    from udfs.config import load_config

    for st in LocalStack(load_config(env={})).status():
        if st.name == "kafka" and st.running:
            return st.pid
    return None
