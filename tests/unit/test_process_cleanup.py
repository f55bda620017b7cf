"""What a run leaves behind: `crawl cluster down` ends every process of its cluster (a
killed TaskManager's orphaned Python workers included), and the test session's own
check (tests/conftest.py) finds the processes and virtualenv files a run leaves."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from crawler.stack.cluster import CLUSTER_ENV, Cluster
from crawler.stack.local import LocalStack, _alive, _cmdline
from tests import conftest
from udfs.config import load_config

ROOT = Path(__file__).resolve().parent.parent.parent


def orphan(env: dict[str, str], *args: str) -> int:
    """A `sleep` whose parent has exited (re-parented to init, in a session of its own),
    as a killed TaskManager's Python worker is; its pid."""
    out = subprocess.run(["sh", "-c", 'sleep 60 "$@" >/dev/null 2>&1 & echo $!', "sh", *args],
                         env=env, capture_output=True, text=True, start_new_session=True,
                         check=True)
    pid = int(out.stdout)
    deadline = time.monotonic() + 5
    while not _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pid


def end(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_gone(pid: int, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def test_a_zombie_is_not_alive_and_a_gone_process_has_no_command_line():
    child = subprocess.Popen(["sleep", "60.5"])
    try:
        assert _alive(child.pid)
        # Popen returns once the child has begun its exec (vfork), and the kernel sets
        # the new command line a moment later: on a busy machine it may still read "".
        deadline = time.monotonic() + 5
        while _cmdline(child.pid) == "" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _cmdline(child.pid) == "sleep 60.5"
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # a zombie until reaped: still not alive
            if psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.02)
        assert not _alive(child.pid)  # (which reaps it: it is our child)
        assert _cmdline(child.pid) == ""
    finally:
        end(child.pid)
        try:
            child.wait(5)
        except ChildProcessError:
            pass


@pytest.fixture
def cluster(tmp_path) -> Cluster:
    cfg = load_config(env={})
    return Cluster(cfg, LocalStack(cfg, state_dir=tmp_path / "state"))


def test_down_ends_orphans_of_its_cluster_only(cluster, tmp_path):
    mine = orphan({**os.environ, CLUSTER_ENV: str(cluster.root)})
    other = orphan({**os.environ, CLUSTER_ENV: str(tmp_path / "other" / "cluster")})
    try:
        assert cluster.processes() == [mine]
        lines: list[str] = []
        cluster.down(log=lines.append)
        assert wait_gone(mine)
        assert _alive(other)
        assert any(str(mine) in line for line in lines), lines
        assert cluster.processes() == []
    finally:
        end(mine, other)


def test_taskmanager_kill_ends_its_workers(cluster):
    """A TaskManager is the leader of its process group; its workers are in that group."""
    tm = cluster.taskmanagers(1)[0]
    tm.dir.mkdir(parents=True)
    # The "TaskManager" names its folder in its command line, as the real one does.
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & wait", str(tm.dir)],
                              start_new_session=True)
    tm.pidfile.write_text(f"{leader.pid}\n")
    time.sleep(0.2)
    workers = [p.pid for p in conftest.processes().values()
               if p.pgid == leader.pid and p.pid != leader.pid]
    assert tm.pid() == leader.pid and workers
    try:
        assert tm.kill() == leader.pid
        leader.wait(10)
        assert all(wait_gone(w) for w in workers)
        assert tm.pid() is None and tm.kill() is None
    finally:
        end(leader.pid, *workers)


def test_leftovers_finds_this_runs_processes_only():
    before = {(p.pid, p.start) for p in conftest.processes().values()}
    token = "run-a"
    ours = orphan({**os.environ, conftest.RUN_ENV: token})
    theirs = orphan({**os.environ, conftest.RUN_ENV: "run-b"})
    nested = orphan({**os.environ, conftest.RUN_ENV: "run-a:run-c"})  # a run inside ours
    unmarked = orphan({k: v for k, v in os.environ.items() if k != conftest.RUN_ENV})
    child = subprocess.Popen(["sleep", "60"],
                             env={k: v for k, v in os.environ.items() if k != conftest.RUN_ENV})
    try:
        found = {p.pid for p in conftest.leftovers(token, before)}
        # Ours by its marker (an orphan), and a child of this process without one.
        assert ours in found and child.pid in found and nested in found
        assert theirs not in found and unmarked not in found
        # Processes running at the start are never counted.
        now = {(p.pid, p.start) for p in conftest.processes().values()}
        assert conftest.leftovers(token, now) == []
    finally:
        end(ours, theirs, nested, unmarked, child.pid)
        child.wait()


def test_venv_changes_lists_new_files_but_bytecode(tmp_path):
    venv = tmp_path / "venv"
    (venv / "lib" / "__pycache__").mkdir(parents=True)
    (venv / "lib" / "old.py").write_text("")
    time.sleep(0.05)
    reference = tmp_path / "reference"
    reference.touch()
    time.sleep(0.05)
    (venv / "lib" / "__pycache__" / "x.cpython-311.pyc").write_text("")
    (venv / "lib" / "y.pyc").write_text("")
    (venv / "log").mkdir()
    (venv / "log" / "flink-python.log").write_text("x")
    assert conftest.venv_changes(venv, reference) == [str(venv / "log" / "flink-python.log")]


@pytest.mark.parametrize("workers", [None, "2"])
def test_session_fails_on_a_leftover_process(tmp_path, workers):
    """A whole pytest run whose test leaves a process: exit status 1, the pid listed,
    and the process killed; also on xdist workers (the fast lane), where the worker that
    ran the test finds the process and its controller fails the run."""
    pidfile = tmp_path / "orphan.pid"
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import tests.conftest as checks
        from tests.conftest import (pytest_sessionfinish, pytest_sessionstart,  # noqa
                                    pytest_terminal_summary)

        checks.LEFTOVER_GRACE_S = 0.5
    """))
    (tmp_path / "test_leak.py").write_text(textwrap.dedent(f"""
        import subprocess

        def test_leaks():
            out = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
                                 capture_output=True, text=True, start_new_session=True)
            open({str(pidfile)!r}, "w").write(out.stdout)
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    xdist = ["-n", workers] if workers else []
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *xdist, str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    pid = int(pidfile.read_text())
    try:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "1 passed" in proc.stdout
        assert "left behind by this test run" in proc.stdout
        assert f"pid {pid} " in proc.stdout and "sleep 60" in proc.stdout
        assert wait_gone(pid)
    finally:
        end(pid)


# -- Flink's working files: out of /tmp, and removed when their job has ended -----------


def _dead_pid() -> int:
    """The PID of a process that has exited (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait(10)
    return child.pid


def test_sweep_removes_the_folders_of_jobs_that_are_gone_only(tmp_path):
    from udfs.flink.runtime import sweep_tmp_dirs

    for name in ("crawl-flink-111", "crawl-flink-222", "crawl-flink-x", "other-333"):
        (tmp_path / name / "minicluster_x").mkdir(parents=True)
    (tmp_path / "crawl-flink-444").write_text("a file, not a job's folder")
    gone = sweep_tmp_dirs(tmp_path, alive=lambda pid: pid == 111)
    assert gone == [tmp_path / "crawl-flink-222"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "crawl-flink-111", "crawl-flink-444", "crawl-flink-x", "other-333"]
    assert sweep_tmp_dirs(tmp_path / "absent") == []


@pytest.fixture
def fresh_jvm(monkeypatch):
    """This process as one whose PyFlink JVM has not started: what local_tmp_dir sets
    is undone after the test, and nothing is registered to run at exit."""
    import pyflink.java_gateway

    from udfs.flink import runtime

    monkeypatch.setattr(pyflink.java_gateway, "_gateway", None)
    monkeypatch.delenv("PYFLINK_GATEWAY_PORT", raising=False)
    monkeypatch.setenv("JVM_ARGS", "-Xss2m")
    at_exit: list = []
    monkeypatch.setattr(runtime.atexit, "register", lambda f, *a, **k: at_exit.append(
        (f, a, k)))
    return at_exit


def test_a_local_jvm_keeps_its_working_files_in_a_folder_named_by_its_job(fresh_jvm,
                                                                         tmp_path):
    from udfs.flink.runtime import local_tmp_dir

    dead = tmp_path / f"crawl-flink-{_dead_pid()}"
    (dead / "minicluster_x").mkdir(parents=True)
    mine = local_tmp_dir(tmp_path)
    assert mine == tmp_path / f"crawl-flink-{os.getpid()}" and mine.is_dir()
    assert not dead.exists()  # a killed job's folder, swept by the next one
    assert os.environ["JVM_ARGS"] == f"-Xss2m -Djava.io.tmpdir={mine}"
    # Removed at a normal exit.
    assert [(f.__name__, a) for f, a, _ in fresh_jvm] == [("rmtree", (mine,))]


@pytest.mark.parametrize("situation", ["a flink run client", "a JVM already running",
                                       "java.io.tmpdir set by the user"])
def test_a_jvm_not_ours_to_start_is_left_as_it_is(fresh_jvm, monkeypatch, tmp_path,
                                                  situation):
    import pyflink.java_gateway

    from udfs.flink.runtime import local_tmp_dir

    if situation == "a flink run client":
        monkeypatch.setenv("PYFLINK_GATEWAY_PORT", "25333")
    elif situation == "a JVM already running":
        monkeypatch.setattr(pyflink.java_gateway, "_gateway", object())
    else:
        monkeypatch.setenv("JVM_ARGS", "-Djava.io.tmpdir=/somewhere")
    before = os.environ["JVM_ARGS"]
    assert local_tmp_dir(tmp_path) is None
    assert os.environ["JVM_ARGS"] == before and fresh_jvm == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ending", ["stop", "kill"])
def test_a_job_process_removes_its_working_files_when_it_ends(tmp_path, monkeypatch,
                                                              ending):
    """JobProcess removes the job's folder once the job's process group has ended,
    however it ended (the job's JVM, which writes there, is in that group)."""
    import udfs.flink
    from crawler.run import JobProcess

    monkeypatch.setattr(udfs.flink, "TMP_BASE", tmp_path)
    job = JobProcess("fetcher", [], tmp_path / "fetcher.log")
    assert job.tmp_dir is None
    # The job writes into its folder from a child of its own, as its JVM does.
    script = textwrap.dedent(f"""
        import os, subprocess, time
        where = "{tmp_path}/crawl-flink-" + str(os.getpid())
        subprocess.Popen(["sh", "-c", f"mkdir -p {{where}}/minicluster_1 && sleep 60"])
        time.sleep(60)
    """)
    monkeypatch.setattr(JobProcess, "command", lambda self: [sys.executable, "-c", script])
    job.start()
    try:
        assert job.tmp_dir == tmp_path / f"crawl-flink-{job.proc.pid}"
        deadline = time.monotonic() + 10
        while not (job.tmp_dir / "minicluster_1").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(p.name for p in job.tmp_dir.iterdir()) == ["minicluster_1"]
        job.stop() if ending == "stop" else job.kill()
        assert not job.tmp_dir.exists()
    finally:
        job.kill()


def test_a_session_cluster_keeps_its_working_files_in_a_folder_of_its_own(cluster,
                                                                        tmp_path):
    other = Cluster(cluster.cfg, LocalStack(cluster.cfg, state_dir=tmp_path / "other"))
    assert cluster.tmp_dir.name.startswith("crawl-cluster-")
    assert cluster.tmp_dir != other.tmp_dir
    cluster.prepare()
    conf = (cluster.root / "conf" / "config.yaml").read_text()
    assert f'io.tmp.dirs: "{cluster.tmp_dir}"' in conf.splitlines()
    tm = cluster.taskmanagers(1)[0]
    tm.dir.mkdir(parents=True)
    try:
        tm.prepare()  # before a process starts: Flink refuses a missing io.tmp.dirs folder
        (cluster.tmp_dir / "tm_127.0.0.1:1-a" / "localState").mkdir(parents=True)
        cluster.down(log=lambda line: None)
        assert not cluster.tmp_dir.exists()
    finally:
        shutil.rmtree(cluster.tmp_dir, ignore_errors=True)
