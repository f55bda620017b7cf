"""Markers by folder: tests/unit → unit, tests/integration → integration, tests/e2e → e2e.

And what a test run leaves behind fails it (see `pytest_sessionfinish`): a process it
started that still runs at the end (a Flink JVM, a PyFlink worker of a killed
TaskManager, a broker of a test's own stack, ...), or a file it wrote inside the
virtualenv (logs belong under a state folder; bytecode caches are fine).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

_HERE = Path(__file__).parent
ROOT = _HERE.parent
# Every process this test run starts inherits RUN_ENV=<a token of this run>: that is
# how a process re-parented to init (the Python workers of a killed TaskManager) is
# still known as ours at the end, and another run's processes are not. A run started
# inside a run appends its token ("outer:inner"): its processes are the outer's too.
RUN_ENV = "CRAWL_TEST_RUN"
# Under pytest-xdist each worker checks its own session; what it finds is left in this
# folder (made by the controlling session) for the controller to report and fail on.
REPORTS_ENV = "CRAWL_TEST_REPORTS"
LEFTOVER_GRACE_S = 15.0  # for processes that are on their way out as the session ends
_GATEWAY = "org.apache.flink.client.python.PythonGatewayServer"
# psutil's process states, as the letters of /proc/<pid>/stat that the checks use.
_STATES = {psutil.STATUS_RUNNING: "R", psutil.STATUS_SLEEPING: "S",
           psutil.STATUS_DISK_SLEEP: "D", psutil.STATUS_STOPPED: "T",
           psutil.STATUS_TRACING_STOP: "t", psutil.STATUS_ZOMBIE: "Z",
           psutil.STATUS_DEAD: "X", psutil.STATUS_IDLE: "I"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).relative_to(_HERE).parts[0]
        if folder in ("unit", "integration", "e2e", "infra", "cluster"):
            item.add_marker(getattr(pytest.mark, folder))


# -- what the run leaves behind ---------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start: float  # when it started (epoch seconds): with the pid, a process's identity
    cmdline: str
    run: str | None  # the value of RUN_ENV in its environment

    def of_run(self, token: str) -> bool:
        return self.run is not None and token in self.run.split(":")


def processes() -> dict[int, Proc]:
    """Every process we can see (psutil), by pid."""
    found: dict[int, Proc] = {}
    attrs = ["ppid", "status", "create_time", "cmdline", "environ"]
    for proc in psutil.process_iter(attrs, ad_value=None):
        info = proc.info
        try:
            pgid, sid = os.getpgid(proc.pid), os.getsid(proc.pid)
        except OSError:  # gone meanwhile
            continue
        if info["ppid"] is None or info["create_time"] is None:
            continue
        run = (info["environ"] or {}).get(RUN_ENV)  # None: not ours to read, or unset
        found[proc.pid] = Proc(proc.pid, info["ppid"], pgid, sid,
                               _STATES.get(info["status"], "?"), info["create_time"],
                               " ".join(info["cmdline"] or ()), run)
    return found


def _stack_pids() -> set[int]:
    """The local stack's services (Kafka, S3): `./dev test` starts them before pytest
    and stops them after it."""
    pids = set()
    for state in {ROOT / ".state", Path.cwd() / ".state"}:
        for pidfile in state.glob("*/*.pid"):
            try:
                pids.add(int(pidfile.read_text().strip()))
            except (OSError, ValueError):
                pass
    return pids


def leftovers(token: str, before: set[tuple[int, int]], me: int | None = None,
              procs: dict[int, Proc] | None = None) -> list[Proc]:
    """Processes of this run (`token`) still running that did not run at its start
    (`before`: (pid, start) pairs): those that inherited RUN_ENV=`token`, those that
    descend from this process (`me`), and orphans (re-parented to init) in this
    process's session whose command line names this checkout or pyflink. Not: the
    local stack's services, processes of another run (another token), nor the PyFlink
    gateway JVM of this process (it ends with it)."""
    me = os.getpid() if me is None else me
    procs = processes() if procs is None else procs
    stack = _stack_pids()
    my_sid = procs[me].sid if me in procs else os.getsid(0)

    def descends(p: Proc) -> bool:
        seen = set()
        while p.ppid not in seen and p.ppid in procs:
            if p.ppid == me:
                return True
            seen.add(p.ppid)
            p = procs[p.ppid]
        return False

    found = []
    for p in procs.values():
        if p.pid == me or (p.pid, p.start) in before or p.state in ("Z", "X") \
                or p.pid in stack or p.pgid in stack:
            continue
        if p.ppid == me and _GATEWAY in p.cmdline:
            continue
        if p.of_run(token) or (p.run is None and descends(p)):
            found.append(p)
        elif p.run is None and p.ppid == 1 and p.sid == my_sid and \
                (str(ROOT) in p.cmdline or "pyflink" in p.cmdline):
            found.append(p)
    return sorted(found, key=lambda p: p.pid)


def venv_changes(venv: Path, reference: Path) -> list[str]:
    """Files in `venv` created or modified after `reference` was, but bytecode caches."""
    proc = subprocess.run(
        ["find", str(venv), "-name", "__pycache__", "-prune", "-o", "!", "-type", "d",
         "!", "-name", "*.pyc", "(", "-newer", str(reference), "-o", "-cnewer",
         str(reference), ")", "-print"], capture_output=True, text=True)
    return sorted(line for line in proc.stdout.splitlines() if line)


@dataclass
class _Run:
    token: str
    before: set[tuple[int, int]]
    venv: Path | None
    reference: Path | None
    report: list[str]


_RUN = pytest.StashKey[_Run]()


def _hcl2_cache_outside_venv() -> None:
    """python-hcl2 caches its compiled grammar beside its own module (inside the
    virtualenv) on first use (tests/infra): point it at the download cache instead."""
    try:
        import hcl2.parser
    except ImportError:
        return
    from crawler.stack.deps import cache_dir

    if hasattr(hcl2.parser, "PARSER_FILE"):
        cache_dir().mkdir(parents=True, exist_ok=True)
        hcl2.parser.PARSER_FILE = cache_dir() / "hcl2-lark-cache.bin"


def pytest_sessionstart(session: pytest.Session) -> None:
    _hcl2_cache_outside_venv()
    # A PyFlink JVM started in this process (a test that builds a job's environment)
    # logs under the state folder, not into the installed package's log/ folder.
    os.environ.setdefault("FLINK_LOG_DIR", str(_HERE.parent / ".state" / "flink-logs"))
    token = uuid.uuid4().hex
    os.environ[RUN_ENV] = ":".join(filter(None, [os.environ.get(RUN_ENV), token]))
    before = {(p.pid, p.start) for p in processes().values()}
    venv = Path(sys.prefix).resolve() if sys.prefix != sys.base_prefix else None
    reference = None
    if venv is not None:
        fd, name = tempfile.mkstemp(prefix="crawl-test-run-")
        os.close(fd)
        reference = Path(name)
        time.sleep(0.01)  # a file written in the same clock tick is not "newer"
    if not hasattr(session.config, "workerinput"):  # a session of its own, or xdist's controller
        os.environ[REPORTS_ENV] = tempfile.mkdtemp(prefix="crawl-test-reports-")
    session.config.stash[_RUN] = _Run(token, before, venv, reference, [])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = session.config.stash.get(_RUN, None)
    if run is None:
        return
    report = run.report
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while (left := leftovers(run.token, run.before)) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left:
        killed = set()
        for p in leftovers(run.token, run.before):  # looked up again just before
            if p.of_run(run.token):  # so that the next run starts clean
                try:
                    os.kill(p.pid, signal.SIGKILL)
                    killed.add(p.pid)
                except ProcessLookupError:
                    pass
        report.append(f"{len(left)} process(es) started by this test run still running "
                      "after it:")
        report += [f"  pid {p.pid} (ppid {p.ppid}, pgid {p.pgid}, sid {p.sid})"
                   f"{' [killed now]' if p.pid in killed else ''}: {p.cmdline[:300]}"
                   for p in left]
    if run.venv is not None and run.reference is not None:
        changed = venv_changes(run.venv, run.reference)
        run.reference.unlink(missing_ok=True)
        if changed:
            report.append(f"{len(changed)} file(s) written inside {run.venv} by this test "
                          "run (logs and state belong under a state folder):")
            report += [f"  {f}" for f in changed[:30]]
            if len(changed) > 30:
                report.append(f"  ... and {len(changed) - 30} more")
    worker = getattr(session.config, "workerinput", None)
    reports = Path(os.environ.get(REPORTS_ENV, "/nonexistent"))
    if worker is not None:  # an xdist worker: its controller reports and fails
        if report and reports.is_dir():
            (reports / f"{worker['workerid']}.txt").write_text("\n".join(report))
    elif reports.is_dir():
        for found in sorted(reports.glob("*.txt")):
            report += [f"(xdist {found.stem}) {line}" for line in found.read_text().splitlines()]
        shutil.rmtree(reports, ignore_errors=True)
    if report and session.exitstatus in (pytest.ExitCode.OK,
                                         pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    run = config.stash.get(_RUN, None)
    if run is not None and run.report:
        terminalreporter.section("left behind by this test run", sep="=", red=True)
        for line in run.report:
            terminalreporter.write_line(line)
