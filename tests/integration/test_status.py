"""`crawl status` from another process against a running `crawl run`: its jobs through
their MiniClusters' REST API, rates from their reporters, consumer lag from Kafka."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import STARTUP_S, free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _crawl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "crawler.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_status_of_a_running_crawl_from_another_process(cfg, tmp_path):
    ports = [f"metrics.frontier_port={free_port()}", f"metrics.fetcher_port={free_port()}"]
    log = tmp_path / "run.log"
    with log.open("w") as out:
        run = subprocess.Popen(
            [sys.executable, "-m", "crawler.cli", "run", "--sites", "3", "--max-pages",
             "100000", "--duration", str(STARTUP_S + 120),
             *(a for p in ports for a in ("--set", p))],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        run_id = None
        deadline = time.monotonic() + 30
        while run_id is None and time.monotonic() < deadline and run.poll() is None:
            m = re.search(r"^run id (\S+):", log.read_text(), re.M)
            run_id = m.group(1) if m else None
            time.sleep(0.5)
        assert run_id, log.read_text()

        # Wait until both jobs run, have checkpointed and the fetcher has fetched.
        status: dict = {}
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            proc = _crawl("status", "--run", run_id, "--json", "--interval", "2")
            assert proc.returncode == 0, proc.stderr
            status = json.loads(proc.stdout)
            m = status["metrics"]
            if (all(j["state"] == "RUNNING" and j["checkpoint"]
                    for j in status["jobs"].values())
                    and m and sum(m["fetches"]["total"].values()) > 0
                    and m["index_events"]["total"]
                    and all(d.get("topics") for d in status["consumer_lag"].values())):
                break
            time.sleep(2)
        else:
            raise AssertionError(f"status never showed a crawl: {status}\n{log.read_text()}")

        assert status["source"]["run_id"] == run_id
        assert status["source"]["topics"]["leases"] == f"run-{run_id}.crawl.leases"
        for job in ("frontier", "fetcher"):
            j = status["jobs"][job]
            assert j["checkpoint"]["age_s"] < 15, j  # checkpoints every second in a run
        m = status["metrics"]
        assert m["fetches"]["rate"] is not None  # two scrapes: rates by outcome
        assert m["fetches"]["total"].get("2xx", 0) > 0
        assert sum(m["politeness_breaches"].values()) == 0
        assert m["eligibility_lag"]["normal"]["count"] > 0
        assert m["eligibility_lag"]["normal"]["p50_s"] is not None
        lag = status["consumer_lag"]
        assert set(lag["frontier"]["topics"]) >= {f"run-{run_id}.crawl.discovered",
                                                  f"run-{run_id}.crawl.completions"}
        leases = lag["fetcher"]["topics"][f"run-{run_id}.crawl.leases"]
        assert leases["committed"] is not None and leases["end"] >= leases["committed"]
        assert lag["fetcher"]["group"] == f"{cfg['kafka.group_id_prefix']}.fetcher"
        hosts = status["busiest_hosts"]
        assert hosts["records"] > 0 and ".test:" in hosts["hosts"][0][0]

        text = _crawl("status", "--run", run_id, "--interval", "0")
        assert text.returncode == 0, text.stderr
        assert "frontier  RUNNING" in text.stdout and "consumer lag" in text.stdout

        gone = _crawl("status", "--run", "no-such-run")
        assert gone.returncode == 1 and "nothing is running" in gone.stderr
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGTERM)
        try:
            run.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(10)
    # The live line shows the same collection's lag and checkpoint age.
    assert re.search(r"lag \d+", log.read_text()), log.read_text()[-2000:]
