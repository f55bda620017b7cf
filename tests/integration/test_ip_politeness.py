"""IP-level politeness on the synthetic web, whose every site is a host name on one
address (127.0.0.1): with fetch.ip_min_gap_s and fetch.ip_max_in_flight set, the web
server's own request log shows every request to the address at least the gap after the
previous one ended and never two at once, and the per-host oracle still finds nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from crawler.testkit.oracle import address_violations
from crawler.testkit.synthetic_web import load_log
from tests.integration.conftest import STARTUP_S, free_port

pytestmark = pytest.mark.integration
CRAWL = str(Path(sys.executable).with_name("crawl"))
IP_GAP_S = 0.25


def test_host_names_on_one_address_share_its_allowance(cfg):
    # Until 120 pages are indexed (about 30 s at the address's 4 requests/s), given the
    # jobs' start on a loaded machine as well.
    proc = subprocess.run(
        [CRAWL, "run", "--sites", "6", "--max-pages", "120",
         "--duration", str(STARTUP_S + 120),
         "--set", f"fetch.ip_min_gap_s={IP_GAP_S}", "--set", "fetch.ip_max_in_flight=1",
         "--set", f"metrics.frontier_port={free_port()}",
         "--set", f"metrics.fetcher_port={free_port()}"],
        capture_output=True, text=True, timeout=STARTUP_S + 240)
    out = proc.stdout
    assert proc.returncode == 0, out[-2000:] + proc.stderr[-2000:]
    run_id = re.search(r"run id (\S+):", out).group(1)
    log = load_log(Path(cfg["local.state_dir"]).resolve() / "runs" / run_id / "web.jsonl")
    hosts = {r.host for r in log}
    starts = sorted(r.start for r in log)
    shortest = min(b - a for a, b in zip(starts, starts[1:], strict=False))
    per_ip = address_violations(log, IP_GAP_S, 1)
    print(f"ip politeness: {len(log)} requests to {len(hosts)} host names on 127.0.0.1, "
          f"shortest time between starts {shortest:.3f} s, {per_ip}")
    # Six hosts at a 0.5 s gap each would ask for 12 requests/s; the address allows 4.
    assert len(hosts) >= 6 and len(log) >= 30
    assert per_ip == {"ip_gap": 0, "ip_concurrency": 0}, per_ip
    violations = re.search(r"politeness violations (\{[^}]*\})", out)
    assert violations and all(v == "0" for v in re.findall(r": (\d+)", violations.group(1)))
    # The address's allowance bounds the rate: at most one start per gap.
    assert (len(starts) - 1) * IP_GAP_S <= starts[-1] - starts[0]
