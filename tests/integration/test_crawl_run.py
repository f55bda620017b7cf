"""`crawl run` as a user runs it, with the default configuration and seeds that are
every IP-literal form of 127.0.0.1 and ::1 pointing at a tripwire on loopback: the
tripwire must see no connection, the run must end cleanly and its summary must show
the refusals. The same run checks that every way of configuring (CRAWL_CONFIG, a
CRAWL__ variable, --config, --set) reaches both jobs it starts."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from crawler.run import Watcher
from tests.integration.conftest import STARTUP_S
from tests.unit.test_ssrf import Tripwire, loopback_forms
from udfs.config import TOPIC_KEYS, load_config

RUN_ID = re.compile(r"run id (\S+):")


class TripwireThread:
    """The unit tests' tripwire (TCP listeners counting connections) in its own loop."""

    def __init__(self) -> None:
        self.wire = Tripwire()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Tripwire:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.wire.start(), self.loop).result(10)
        return self.wire

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.wire.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_ip_literal_seeds_never_reach_loopback_and_every_config_source_reaches_both_jobs(
        cfg, tmp_path):
    env_file = tmp_path / "from-env.yaml"
    env_file.write_text("politeness:\n  max_gap_s: 111\n", encoding="utf-8")
    cli_file = tmp_path / "from-cli.yaml"
    cli_file.write_text("fetch:\n  dns_timeout_s: 7.5\n", encoding="utf-8")
    with TripwireThread() as wire:
        # Every form except the name: localhost is a name, refused by the fetcher.
        forms = [u for u in loopback_forms(wire.port) if "localhost" not in u]
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("\n".join(forms) + "\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("CRAWL__") and k != "CRAWL_CONFIG"}
        env.update(CRAWL_CONFIG=str(env_file), CRAWL__RECRAWL__SEED_PRIORITY="0.9")
        crawl = Path(sys.executable).with_name("crawl")
        # Up to --duration; ended with Ctrl-C (SIGINT) as soon as every refusal is
        # committed, which on a loaded machine (two tests at a time in CI) can take
        # longer than a fixed duration allows for the jobs to start.
        proc = subprocess.Popen(
            [str(crawl), "--config", str(cli_file), "run", "--seeds", str(seeds),
             "--duration", str(STARTUP_S + 60), "--set", "frontier.clock_idle_ms=1500"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        watcher = None
        try:
            deadline = time.monotonic() + STARTUP_S + 60
            while time.monotonic() < deadline and proc.poll() is None:
                seen = list(lines)
                run_id = next((m.group(1) for m in map(RUN_ID.match, seen) if m), None)
                # (its topics exist once it has seeded)
                if watcher is None and run_id and any(x.startswith("seeded ") for x in seen):
                    base = load_config(env={})
                    watcher = Watcher(load_config(env={}, overrides=[
                        f"topics.{k}.name=run-{run_id}.{base.topic(k)}" for k in TOPIC_KEYS]))
                if watcher and watcher.poll().refused.get("ADDRESS_BLOCKED", 0) >= len(forms):
                    proc.send_signal(signal.SIGINT)
                    break
                time.sleep(1)
            rc = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
            if watcher is not None:
                watcher.close()
        reader.join(10)
        connections = wire.connections
    out = "".join(lines)
    assert rc in (0, 130), out  # 130: ended by the SIGINT above, after its summary
    assert connections == 0
    # Every seed was refused at intake (one dead letter each), none leased.
    summary = next(line for line in out.splitlines() if line.startswith("summary:"))
    refused = re.search(r"'ADDRESS_BLOCKED': (\d+)", summary)
    assert refused and int(refused.group(1)) == len(forms), out
    assert " 0 pages indexed from 0 hosts" in summary, summary
    logs = Path(re.search(r"job logs in (\S+)", out).group(1))
    for job in ("frontier", "fetcher"):
        settings = next(json.loads(line) for line in
                        (logs / f"{job}.log").read_text(encoding="utf-8").splitlines()
                        if line.startswith('{"event": "settings"'))
        changed = settings["changed"]
        assert changed["politeness.max_gap_s"] == 111.0, (job, changed)  # CRAWL_CONFIG
        assert changed["fetch.dns_timeout_s"] == 7.5, (job, changed)  # --config
        assert changed["recrawl.seed_priority"] == 0.9, (job, changed)  # CRAWL__
        assert changed["frontier.clock_idle_ms"] == 1500, (job, changed)  # --set
