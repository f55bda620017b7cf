"""`crawl local up | status | down` on a second stack of its own (other ports, other folder)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from crawler.cli import main
from crawler.stack.local import topic_partitions

OFFSET = 500  # every port of the main stack + 500, so both can run at once
PORTS = {
    "kafka.bootstrap_servers": f"127.0.0.1:{19092 + OFFSET}",
    "local.kafka_controller_port": 19093 + OFFSET,
    "s3.endpoint_url": f"http://127.0.0.1:{18333 + OFFSET}",
    "local.s3_grpc_port": 28333 + OFFSET,
    "local.s3_master_port": 19333 + OFFSET,
    "local.s3_master_grpc_port": 29333 + OFFSET,
    "local.s3_volume_port": 18380 + OFFSET,
    "local.s3_volume_grpc_port": 28380 + OFFSET,
    "local.s3_filer_port": 18888 + OFFSET,
    "local.s3_filer_grpc_port": 28888 + OFFSET,
}


def _procs_naming(marker: str) -> list[int]:
    pids = []
    for proc in psutil.process_iter():
        try:
            cmd = " ".join(proc.cmdline())
            state = proc.status()
        except psutil.Error:  # gone, a zombie, or not ours to read
            continue
        if marker in cmd and state != psutil.STATUS_ZOMBIE and proc.pid != os.getpid():
            pids.append(proc.pid)
    return pids


def _pids(state: Path) -> dict[str, int]:
    return {name: int((state / name / f"{name}.pid").read_text())
            for name in ("kafka", "s3") if (state / name / f"{name}.pid").exists()}


def test_up_twice_status_down_and_restart(tmp_path, capsys):
    state = tmp_path / "state"
    args = [a for k, v in PORTS.items() for a in ("--set", f"{k}={v}")]
    args += ["--set", "topics.discovered.partitions=3",
             "--set", "topics.index.retention_ms=3600000"]
    cli = lambda *a: main([*args, *a, "--state-dir", str(state)])  # noqa: E731
    try:
        assert cli("local", "up") == 0
        first = _pids(state)
        assert set(first) == {"kafka", "s3"}
        assert "crawl.discovered: created, 3 partitions" in capsys.readouterr().out

        admin = KafkaAdminClient(bootstrap_servers=PORTS["kafka.bootstrap_servers"])
        try:
            parts = topic_partitions(admin)
            assert parts["crawl.discovered"] == 3 and parts["crawl.deadletter"] == 1
            res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC,
                                                         "crawl.index")])
            assert "3600000" in repr(res)
        finally:
            admin.close()

        # A second `up` starts nothing: same PIDs, still one broker.
        assert cli("local", "up") == 0
        assert _pids(state) == first
        assert "already running" in capsys.readouterr().out
        assert len([p for p in _procs_naming(str(state / "kafka")) if p == first["kafka"]]) == 1
        assert cli("local", "status") == 0

        assert cli("local", "down") == 0
        assert _procs_naming(str(state)) == []
        assert _pids(state) == {}
        assert cli("local", "status") == 3

        # A restart keeps the formatted storage and the topics.
        assert cli("local", "up") == 0
        out = capsys.readouterr().out
        assert "crawl.discovered: exists, 3 partitions" in out
        assert "bucket crawl: exists" in out
    finally:
        main([*args, "local", "down", "--state-dir", str(state)])
    assert _procs_naming(str(state)) == []
