"""A standalone Flink session cluster on loopback, from the apache-flink pip distribution,
and the job procedures an operator runs on any Flink cluster: submit, savepoint,
upgrade (stop with a savepoint, resubmit the current code from it) and rescale.

    crawl cluster up [--taskmanagers N] | down | status
    crawl submit frontier|fetcher [--parallelism N] [--from-savepoint PATH]
    crawl savepoint JOB | crawl upgrade JOB [--build DIR] | crawl rescale JOB N

Each procedure is the plain `flink` CLI command the README lists, run with this
cluster's configuration; `FLINK_REST` (host:port) points them at another cluster.
Every process binds to 127.0.0.1; PID files and logs (RocksDB's too) live under
<local.state_dir>/cluster, the processes' working files (io.tmp.dirs) in a folder of the
cluster's own in /tmp, which `down` removes. The JobManager and each TaskManager are
services like the local Kafka broker (crawler/stack/local.py): started in the foreground
of their own process group and session, stopped by PID, never twice. A TaskManager's
Python workers (process mode: pyflink-udf-runner.sh, beam_boot, the SDK worker) are in its
process group; they outlive a TaskManager killed alone (kill -9), re-parented to init.
Every process of the cluster, workers included, inherits CLUSTER_ENV=<the cluster's
folder> in its environment: `down` finds such strays by it and ends them too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

from crawler.stack.local import LocalStack, ServiceStatus, StackError, _alive, _Service
from udfs.config import Config
from udfs.flink import TMP_BASE

JOB_NAMES = {"frontier": "crawl frontier", "fetcher": "crawl fetcher"}
# Jobs whose Python runs inside the TaskManager JVM (pemja, thread mode). One
# interpreter serves the whole JVM and imports a module once: a TaskManager that ran
# one build of such a job keeps running that build's code for any later job. An
# upgrade therefore restarts the TaskManagers that ran the old job.
THREAD_MODE_JOBS = frozenset({"frontier"})
_RESOURCE_ID = re.compile(r"ResourceID: (\S+)")
# In the environment of every process of a cluster (and so of its TaskManagers'
# Python workers, which inherit the TaskManager's): the cluster's folder.
CLUSTER_ENV = "CRAWL_FLINK_CLUSTER"


def pyflink_home() -> Path:
    import pyflink

    return Path(pyflink.__file__).resolve().parent


class _FlinkService(_Service):
    """A Flink process of the session cluster (shares the cluster's home and config)."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.name = name
        self.cluster = cluster
        super().__init__(cluster.stack)
        self.dir = cluster.root / name
        self.pidfile = self.dir / f"{name}.pid"
        self.logfile = self.dir / f"{name}.log"

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.cluster.flink_env(self.dir)}

    def address(self) -> str:
        return f"http://{self.cluster.rest}"

    def prepare(self) -> None:
        self.cluster.tmp_dir.mkdir(parents=True, exist_ok=True)  # Flink will not make it


class JobManagerService(_FlinkService):
    def ports(self) -> list[tuple[str, str, int]]:
        return [("cluster.rest_port", "127.0.0.1", self.cluster.cfg["cluster.rest_port"]),
                ("cluster.rpc_port", "127.0.0.1", self.cluster.cfg["cluster.rpc_port"])]

    def command(self) -> list[str]:
        return [str(pyflink_home() / "bin" / "jobmanager.sh"), "start-foreground"]

    def ready(self) -> bool:
        return self.cluster.overview() is not None


class TaskManagerService(_FlinkService):
    def __init__(self, cluster: Cluster, index: int) -> None:
        super().__init__(cluster, f"taskmanager-{index}")
        self.index = index
        self._log_start = 0  # where this process's lines begin in its (appended) log

    def ports(self) -> list[tuple[str, str, int]]:
        return []  # RPC and data ports are picked free by Flink, on 127.0.0.1

    def command(self) -> list[str]:
        return [str(pyflink_home() / "bin" / "taskmanager.sh"), "start-foreground"]

    def prepare(self) -> None:
        super().prepare()
        self._log_start = self.logfile.stat().st_size if self.logfile.exists() else 0

    def resource_id(self) -> str | None:
        """The id this TaskManager registered with (it logs it at start), if running."""
        if self.pid() is None or not self.logfile.exists():
            return None
        with self.logfile.open("rb") as fh:
            fh.seek(self._log_start)
            found = _RESOURCE_ID.findall(fh.read().decode("utf-8", "replace"))
        return found[-1] if found else None

    def kill(self) -> int | None:
        """kill -9 of this TaskManager with its Python workers (its process group), as
        when its container dies; returns the PID, or None if it was not running."""
        pid = self.pid()
        if pid is None:
            return None
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            return pid
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        return pid

    def ready(self) -> bool:
        rid = self.resource_id()
        listed = (self.cluster.get_json("/taskmanagers") or {}).get("taskmanagers", [])
        return rid is not None and any(tm["id"] == rid for tm in listed)


class Cluster:
    def __init__(self, cfg: Config, stack: LocalStack | None = None) -> None:
        self.cfg = cfg
        self.stack = stack or LocalStack(cfg)
        self.root = self.stack.state_dir / "cluster"
        self.rest = os.environ.get("FLINK_REST") or f"127.0.0.1:{cfg['cluster.rest_port']}"
        self.jobmanager = JobManagerService(self, "jobmanager")

    # -- files ----------------------------------------------------------------------

    def flink_env(self, log_dir: Path) -> dict[str, str]:
        return {"FLINK_CONF_DIR": str(self.root / "conf"), "FLINK_LIB_DIR": str(self.root / "lib"),
                "FLINK_LOG_DIR": str(log_dir), "FLINK_PID_DIR": str(log_dir),
                "FLINK_HOME": str(pyflink_home()), CLUSTER_ENV: str(self.root)}

    def prepare(self) -> None:
        """conf/config.yaml (loopback only) and lib/ (the distribution's jars, plus
        flink-python on the TaskManager classpath so that a second thread-mode job in
        one TaskManager JVM loads on Java 17 — FLINK-37727, GUIDE section 2)."""
        home = pyflink_home()
        lib = self.root / "lib"
        lib.mkdir(parents=True, exist_ok=True)
        for jar in [*(home / "lib").glob("*.jar"), *(home / "opt").glob("flink-python-*.jar")]:
            link = lib / jar.name
            if not link.exists():
                link.symlink_to(jar)
        conf = self.root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        for f in (home / "conf").iterdir():
            if f.name.startswith("log4j") or f.name.startswith("logback"):
                (conf / f.name).write_bytes(f.read_bytes())
        java_opts = _java_opts(home / "conf" / "config.yaml")
        settings = {
            "jobmanager.rpc.address": "127.0.0.1",
            "jobmanager.rpc.port": self.cfg["cluster.rpc_port"],
            "jobmanager.bind-host": "127.0.0.1",
            "jobmanager.memory.process.size": f"{self.cfg['cluster.jobmanager_mb']}m",
            "taskmanager.host": "127.0.0.1",
            "taskmanager.bind-host": "127.0.0.1",
            "taskmanager.numberOfTaskSlots": self.cfg["cluster.task_slots"],
            "taskmanager.memory.process.size": f"{self.cfg['cluster.taskmanager_mb']}m",
            "rest.address": "127.0.0.1",
            "rest.bind-address": "127.0.0.1",
            "rest.port": self.cfg["cluster.rest_port"],
            "blob.server.port": "0",
            # A killed TaskManager is noticed in seconds, not the default 50 s.
            "heartbeat.interval": 2000,
            "heartbeat.timeout": 10000,
            "classloader.parent-first-patterns.additional": "pemja.",
            "execution.checkpointing.savepoint-dir": self.savepoint_dir().as_uri(),
            # RocksDB's LOG files (by default beside the Flink log; a job run from
            # udfs.flink.runtime would otherwise put them under the client's state folder).
            "state.backend.rocksdb.log.dir": str(self.root / "rocksdb-logs"),
            # Where a `flink` command run by hand with this configuration logs (ours set
            # FLINK_LOG_DIR; the default is the log/ folder of the installed package).
            "env.log.dir": str(self.root / "client"),
            "env.java.opts.all": java_opts,
            # Every process's working files (a TaskManager's tm_<id> folder with its
            # RocksDB instances, blobs, unpacked jars) in a folder of the cluster's own,
            # which `down` removes: in /tmp itself, a process killed or stopped by a
            # signal left them.
            "io.tmp.dirs": str(self.tmp_dir),
        }
        if self.cfg["cluster.metrics_ports"]:
            # Flink's Prometheus reporter, from the distribution's plugins folder
            # (FLINK_PLUGINS_DIR, $FLINK_HOME/plugins/metrics-prometheus): each process
            # takes the first free port of the range.
            settings["metrics.reporter.prom.factory.class"] = \
                "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"
            settings["metrics.reporter.prom.port"] = self.cfg["cluster.metrics_ports"]
        (conf / "config.yaml").write_text(
            "".join(f"{k}: {json.dumps(v) if isinstance(v, str) else v}\n"
                    for k, v in settings.items()))

    @property
    def tmp_dir(self) -> Path:
        """Flink's io.tmp.dirs for every process of this cluster and its clients: a folder
        of this cluster's own in /tmp (short, as udfs.flink.TMP_BASE says why), named by
        its state folder."""
        tag = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:10]
        return TMP_BASE / f"crawl-cluster-{tag}"

    def savepoint_dir(self) -> Path:
        return (self.root / "savepoints").resolve()

    # -- lifecycle ------------------------------------------------------------------

    def taskmanagers(self, count: int | None = None) -> list[TaskManagerService]:
        if count is None:  # the ones with a PID file
            count = len(list(self.root.glob("taskmanager-*/taskmanager-*.pid")))
        return [TaskManagerService(self, i) for i in range(count)]

    def up(self, taskmanagers: int, log: Callable[[str], None] = print) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.prepare()
        timeout = self.cfg["local.ready_timeout_s"]
        ports = self.cfg["cluster.metrics_ports"]
        if ports:
            first, last = map(int, ports.split("-"))
            if last - first + 1 < taskmanagers + 1:  # Flink logs it and goes without
                log(f"cluster.metrics_ports {ports} has fewer ports than the cluster's "
                    f"{taskmanagers + 1} processes: some will run without a reporter")
        log(self.jobmanager.start(timeout))
        for tm in self.taskmanagers(taskmanagers):
            log(tm.start(timeout))

    def down(self, log: Callable[[str], None] = print) -> None:
        """Stop the TaskManagers (each with its process group: its Python workers), the
        JobManager, then any process left that carries this cluster's CLUSTER_ENV — the
        workers of a TaskManager that was killed alone, a client still running; then
        remove the processes' working files (`tmp_dir`)."""
        for tm in reversed(self.taskmanagers()):
            log(tm.stop())
        log(self.jobmanager.stop())
        strays = self.kill_strays()
        if strays:
            log(f"stopped {len(strays)} leftover process(es) of this cluster: "
                + ", ".join(map(str, strays)))
        shutil.rmtree(self.tmp_dir, ignore_errors=True)  # nothing of the cluster runs

    def processes(self) -> list[int]:
        """Live processes of this cluster, found by CLUSTER_ENV in their environment."""
        return cluster_processes(self.root)

    def kill_strays(self, grace_s: float = 5.0) -> list[int]:
        """SIGTERM, then SIGKILL, each live process of this cluster (see `processes`);
        returns their PIDs. Each round looks them up again: a PID is only signalled
        while its environment names this cluster."""
        killed: list[int] = []
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            pids = self.processes()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    continue
                if pid not in killed:
                    killed.append(pid)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and any(_alive(p) for p in pids):
                time.sleep(0.2)
        return killed

    def status(self) -> list[ServiceStatus]:
        return [self.jobmanager.status(), *(tm.status() for tm in self.taskmanagers())]

    # -- REST ---------------------------------------------------------------------------

    def get_json(self, path: str) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://{self.rest}{path}", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def overview(self) -> dict | None:
        return self.get_json("/overview")

    def running_job(self, job: str) -> str | None:
        """The id of the running (or restarting) job named for `job`."""
        jobs = (self.get_json("/jobs/overview") or {}).get("jobs", [])
        live = [j for j in jobs if j["name"] == JOB_NAMES[job] and
                j["state"] in ("RUNNING", "RESTARTING", "CREATED", "INITIALIZING")]
        return live[0]["jid"] if live else None

    def job_detail(self, jid: str) -> dict | None:
        return self.get_json(f"/jobs/{jid}")

    # -- procedures (the flink CLI) -----------------------------------------------------

    def flink(self, *args: str, timeout_s: float = 600, build: Path | None = None) -> str:
        env = {**os.environ, **self.flink_env(self.root / "client")}
        if build is not None:  # the job's client imports this build's packages first
            env["PYTHONPATH"] = os.pathsep.join(
                [str(build), *filter(None, [os.environ.get("PYTHONPATH")])])
        (self.root / "client").mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([str(pyflink_home() / "bin" / "flink"), *args], env=env,
                              capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise FlinkCommandError(f"flink {' '.join(args[:2])} failed ({proc.returncode}):\n"
                                    f"{cli_failure(proc.stdout + proc.stderr)}")
        return proc.stdout

    def submit(self, job: str, job_args: Sequence[str], *, parallelism: int | None = None,
               savepoint: str | None = None, build: Path | None = None) -> str:
        """`flink run -d` of jobs/<job>.py with `job_args` (--config/--set); returns the
        job id. `build`: a directory holding another build of the code (jobs/, udfs/,
        schemas/) to run instead of this one; its job script is submitted and its
        packages come first on the Python path (the client's, and the workers' through
        python.pythonpath, which udfs.flink.runtime derives from where it was imported)."""
        if job not in JOB_NAMES:
            raise StackError(f"no job {job!r}; jobs: {', '.join(JOB_NAMES)}")
        if self.running_job(job):
            raise StackError(f"{job} is already running ({self.running_job(job)}); "
                             "use `crawl upgrade` or `crawl rescale`")
        root = build.resolve() if build else Path(__file__).resolve().parents[2]
        script = root / "jobs" / f"{job}.py"
        if not script.is_file():
            raise StackError(f"no {script}: --build must hold jobs/, udfs/ and schemas/")
        args = ["run", "-d", "-m", self.rest, "-pyclientexec", sys.executable,
                "-pyexec", sys.executable]
        if savepoint:
            args += ["-s", savepoint]
            if job == "fetcher":  # its state is all disposable (jobs/fetcher.py)
                args += ["--allowNonRestoredState"]
        extra = []
        if parallelism:
            args += ["-p", str(parallelism)]
            extra = ["--set", f"flink.parallelism={parallelism}"]
        args += ["-py", str(script), *job_args, *extra]
        self.flink(*args, build=build)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            jid = self.running_job(job)
            if jid:
                return jid
            time.sleep(0.5)
        raise StackError(f"{job} was submitted but is not running after 120 s")

    def savepoint(self, job: str) -> str:
        """`flink savepoint JOBID DIR`; returns the savepoint's path."""
        jid = self._require(job)
        out = self.flink("savepoint", "-m", self.rest, jid, self.savepoint_dir().as_uri())
        return _savepoint_path(out)

    def stop_with_savepoint(self, job: str) -> str:
        """`flink stop --savepointPath DIR JOBID`; returns the savepoint's path."""
        jid = self._require(job)
        out = self.flink("stop", "-m", self.rest, "--savepointPath",
                         self.savepoint_dir().as_uri(), jid)
        return _savepoint_path(out)

    def job_taskmanagers(self, job: str) -> list[TaskManagerService]:
        """This cluster's TaskManagers that run a task of `job`."""
        jid = self._require(job)
        ids = {placed["taskmanager-id"]
               for v in (self.job_detail(jid) or {}).get("vertices", [])
               for placed in (self.get_json(f"/jobs/{jid}/vertices/{v['id']}/taskmanagers")
                              or {}).get("taskmanagers", [])}
        return [tm for tm in self.taskmanagers() if tm.resource_id() in ids]

    def upgrade(self, job: str, job_args: Sequence[str], parallelism: int | None = None,
                build: Path | None = None, log: Callable[[str], None] = print
                ) -> tuple[str, str]:
        """Stop with a savepoint and resubmit the current code (or `build`) from it:
        (savepoint, new id). The job keeps its parallelism unless `parallelism` is given
        (a rescale). For a thread-mode job, the TaskManagers that ran it are restarted
        in between (THREAD_MODE_JOBS); other jobs on them fail over from their last
        checkpoint."""
        if parallelism is None:
            detail = self.job_detail(self._require(job)) or {}
            parallelism = max((v["parallelism"] for v in detail.get("vertices", [])),
                              default=None)
        stale = self.job_taskmanagers(job) if job in THREAD_MODE_JOBS else []
        path = self.stop_with_savepoint(job)
        deadline = time.monotonic() + 60
        while self.running_job(job) and time.monotonic() < deadline:
            time.sleep(0.5)
        for tm in stale:  # a fresh JVM imports the new code
            log(tm.stop())
            log(tm.start(self.cfg["local.ready_timeout_s"]))
        try:
            return path, self.resubmit(job, job_args, path, parallelism=parallelism,
                                       build=build, log=log)
        except StackError as exc:  # the job is stopped: say how to start it again
            resume = (f"crawl submit {job} --from-savepoint {path}"
                      + (f" --parallelism {parallelism}" if parallelism else "")
                      + (f" --build {build}" if build else ""))
            raise StackError(f"{job} stopped with savepoint {path}, but resubmitting it "
                             f"failed; to start it from there: {resume} (and the same "
                             f"--config/--set)\n{exc}") from exc

    def resubmit(self, job: str, job_args: Sequence[str], savepoint: str, *,
                 parallelism: int | None, build: Path | None, attempts: int = 2,
                 log: Callable[[str], None] = print) -> str:
        """`submit` from `savepoint` of a job just stopped, once more if the flink client
        failed and no job of that name runs: an upgrade has stopped the job, and a
        failure of its client alone (in CI once, while translating the job's plan)
        must not leave the crawl without it."""
        for attempt in range(1, attempts + 1):
            try:
                return self.submit(job, job_args, parallelism=parallelism,
                                   savepoint=savepoint, build=build)
            except FlinkCommandError as exc:
                if attempt == attempts or self.running_job(job):
                    raise
                log(f"{job}: submitting it from {savepoint} failed (attempt {attempt} of "
                    f"{attempts}); again:\n{exc}")
        raise AssertionError("unreachable")  # the last attempt returned or raised

    def _require(self, job: str) -> str:
        jid = self.running_job(job)
        if jid is None:
            raise StackError(f"{job} is not running on {self.rest}")
        return jid


def cluster_processes(root: Path) -> list[int]:
    """PIDs of the live processes (not this one, nor its ancestors) whose environment has
    CLUSTER_ENV=`root`."""
    me = psutil.Process()
    spared = {me.pid, *(p.pid for p in me.parents())}
    found = []
    for proc in psutil.process_iter():
        if proc.pid in spared:
            continue
        try:
            environ = proc.environ()
        except psutil.Error:  # gone, a zombie, or not ours to read
            continue
        if environ.get(CLUSTER_ENV) == str(root) and _alive(proc.pid):
            found.append(proc.pid)
    return sorted(found)


class FlinkCommandError(StackError):
    """The flink CLI exited with an error; the message holds what it printed."""


_STACK_FRAME = re.compile(r"^\s+(at \S|\.\.\. \d+ more$)")


def without_java_frames(text: str) -> str:
    """`text` without the lines of Java stack frames ("at ...", "... N more"): what is
    left of an exception is its messages and every "Caused by" line."""
    return "\n".join(line for line in text.splitlines() if not _STACK_FRAME.match(line))


def cli_failure(output: str, limit: int = 6000) -> str:
    """What a failed `flink` command printed, without the Java stack frames: its messages
    and every "Caused by" line, which come before pages of frames (a job's Python
    traceback, then the JVM's), the newest `limit` characters of them."""
    return without_java_frames(output)[-limit:]


def _savepoint_path(cli_output: str) -> str:
    for line in cli_output.splitlines():
        for marker in ("Savepoint completed. Path: ", "Savepoint stored in "):
            if marker in line:
                return line.split(marker, 1)[1].strip().rstrip(".")
    raise StackError(f"no savepoint path in the flink CLI's output:\n{cli_output[-2000:]}")


def _java_opts(config_yaml: Path) -> str:
    """The distribution's JVM options (Java 17 --add-opens), kept as they are."""
    import yaml

    data = yaml.safe_load(config_yaml.read_text()) or {}
    return str(((data.get("env") or {}).get("java") or {}).get("opts", {}).get("all", ""))
