"""Host controls against a running `crawl run`, from another process, as an operator
uses them: `crawl host pause` stops every request to that host within seconds and
`crawl host set ... politeness.min_gap_s=3` spaces every later request to another host
by 3 s or more — judged from the synthetic web's own request log, not our counters —
`resume` brings the host back, and `crawl host show` / `crawl url show` answer. The
commands find the run by its id (what `crawl run` prints); nobody copies topic names."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crawler.testkit.synthetic_web import load_log
from tests.integration.conftest import STARTUP_S, free_port

pytestmark = pytest.mark.integration
CRAWL = str(Path(sys.executable).with_name("crawl"))
SETTLE_S = 12.0  # leases already out when a command applies: in flight + look-ahead,
# used at the pace of the fetches, which a slow machine (2026-12-02: ~7 s) stretches


def crawl_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([CRAWL, *args], capture_output=True, text=True, timeout=timeout)


def page_starts(log_path: Path, host: str, since: float = 0.0) -> list[float]:
    return sorted(r.start for r in load_log(log_path)
                  if r.host == host and not r.is_robots and r.start >= since)


def applied_at(reply: dict) -> float:
    """When the frontier applied a command (its reply's wall-clock time), on this
    machine's monotonic clock."""
    return time.monotonic() - (time.time() - reply["replied_at_ms"] / 1000.0)


def wait_for(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


def test_pause_set_resume_show_against_a_running_crawl(cfg, tmp_path):
    out_path = tmp_path / "run.out"
    with out_path.open("w") as out:
        run = subprocess.Popen(
            [CRAWL, "run", "--sites", "6", "--max-pages", "100000",
             "--duration", str(STARTUP_S + 240),
             "--set", f"metrics.frontier_port={free_port()}",
             "--set", f"metrics.fetcher_port={free_port()}"],
            stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        run_id = wait_for(lambda: (m := re.search(r"run id (\S+):", out_path.read_text()))
                          and m.group(1), 120, "crawl run to start")
        log_path = Path(cfg["local.state_dir"]).resolve() / "runs" / run_id / "web.jsonl"

        def busy_hosts() -> list[str]:
            if not log_path.exists():
                return []
            counts: dict[str, int] = {}
            for r in load_log(log_path):
                if not r.is_robots and r.status == 200:
                    counts[r.host] = counts.get(r.host, 0) + 1
            hosts = sorted(h for h, n in counts.items() if n >= 3)
            return hosts if len(hosts) >= 2 else []

        paused, slowed = wait_for(busy_hosts, STARTUP_S, "two hosts with pages fetched")[:2]
        # Each command is timed from when the frontier applied it (its reply's time, on
        # this machine's monotonic clock, which the server's log uses too): not from when
        # it was sent, which a loaded frontier may read seconds later, nor from when the
        # CLI returns, after a checkpoint has held it.
        res = crawl_cli("host", "pause", paused, "--run", run_id, "--json")
        assert res.returncode == 0, res.stderr
        reply = json.loads(res.stdout)
        assert reply["applied"] and reply["durable"] and reply["detail"]["paused"]
        paused_at = applied_at(reply)
        res = crawl_cli("host", "set", slowed, "politeness.min_gap_s=3", "--run", run_id,
                        "--json")
        assert res.returncode == 0, res.stderr
        reply = json.loads(res.stdout)
        assert reply["applied"] and reply["durable"]
        assert reply["detail"]["policy"]["min_gap_s"] == 3.0
        assert reply["run_id"] == run_id
        slowed_at = applied_at(reply)
        time.sleep(40)

        # From the server's log: nothing for the paused host once its leases already out
        # are used; the slowed host's requests at least 3 s apart.
        assert page_starts(log_path, paused, paused_at + SETTLE_S) == []
        later = page_starts(log_path, slowed, slowed_at + SETTLE_S)
        assert len(later) >= 5, later
        gaps = [b - a for a, b in zip(later, later[1:], strict=False)]
        assert min(gaps) >= 3.0, gaps

        res = crawl_cli("host", "show", paused, "--run", run_id)
        assert res.returncode == 0, res.stderr
        assert "PAUSED" in res.stdout and "robots.txt: " in res.stdout
        assert "last outcomes: " in res.stdout and "OK 200 (page" in res.stdout
        res = crawl_cli("url", "show", paused + "/", "--run", run_id)
        assert res.returncode == 0, res.stderr
        assert "why: " in res.stdout
        resumed = time.monotonic()
        res = crawl_cli("host", "resume", paused, "--run", run_id)
        assert res.returncode == 0, res.stderr
        assert f"resume {paused}: done; kept in a checkpoint" in res.stdout, res.stdout
        wait_for(lambda: page_starts(log_path, paused, resumed), 20,
                 "requests to the resumed host")
        # A host this crawl does not know: answered from an empty host.
        res = crawl_cli("host", "show", "http://no-such-host.test", "--run", run_id)
        assert res.returncode == 0 and "not known to this crawl yet" in res.stdout
        assert "URLs: 0 in memory" in res.stdout
    finally:
        run.terminate()
        try:
            run.wait(90)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait(30)
    text = out_path.read_text()
    assert "summary:" in text, text[-2000:]
    violations = re.search(r"politeness violations (\{[^}]*\})", text)
    assert violations and all(v == "0" for v in re.findall(r": (\d+)", violations.group(1))), \
        text[-2000:]
