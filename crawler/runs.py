"""Finding a running crawl from another terminal.

`crawl run` gives each crawl topics of its own (`run-<id>.crawl.*`) and writes
`<local.state_dir>/runs/<id>/run.json` (its process id and the settings its jobs
got) while it runs. `crawl status`, `crawl host` and `crawl url show` read it, so an
operator never copies topic names: with `--run ID` they use that run, without it the
newest live run, and with no live run the configuration as given (the crawl on the
local session cluster, or a deployment, whose topics are the configured ones).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from udfs.config import Config, load_config

RUN_FILE = "run.json"


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    pid: int
    started_at: float
    overrides: tuple[str, ...]  # the --set list the run's jobs were started with
    config_files: tuple[str, ...]
    run_dir: Path
    # Each job's Flink REST API on 127.0.0.1 (its local MiniCluster), by job name;
    # empty for a run recorded before runs had them.
    rest_ports: Mapping[str, int] = field(default_factory=dict)

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # someone else's process: it exists
            return True
        return True


def record_run(run_dir: Path, run_id: str, overrides: Sequence[str],
               config_files: Sequence[str], rest_ports: Mapping[str, int] | None = None
               ) -> Path:
    """Write the run's file (atomically: a reader never sees half of it). `rest_ports`:
    the port of each job's REST API (job name → port), for `crawl status`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RUN_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({
        "run_id": run_id, "pid": os.getpid(), "started_at": time.time(),
        "overrides": list(overrides), "rest_ports": dict(rest_ports or {}),
        "config_files": [str(Path(f).resolve()) for f in config_files]}), encoding="utf-8")
    tmp.replace(path)
    return path


def forget_run(run_dir: Path) -> None:
    (run_dir / RUN_FILE).unlink(missing_ok=True)


def _read(path: Path) -> RunInfo | None:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        return RunInfo(d["run_id"], int(d["pid"]), float(d["started_at"]),
                       tuple(d["overrides"]), tuple(d["config_files"]), path.parent,
                       {str(k): int(v) for k, v in d.get("rest_ports", {}).items()})
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a run file being replaced, or not ours


def live_runs(state_dir: Path) -> list[RunInfo]:
    """The runs whose process is alive, newest first."""
    runs = [r for p in (state_dir / "runs").glob(f"*/{RUN_FILE}")
            if (r := _read(p)) is not None and r.alive()]
    return sorted(runs, key=lambda r: r.started_at, reverse=True)


class RunNotFound(LookupError):
    pass


def find_run(state_dir: Path, run_id: str | None) -> RunInfo | None:
    """`run_id`'s live run (RunNotFound if it is not running), else the newest live
    run, else None."""
    runs = live_runs(state_dir)
    if run_id is None:
        return runs[0] if runs else None
    for r in runs:
        if r.run_id == run_id:
            return r
    known = ", ".join(r.run_id for r in runs) or "none"
    raise RunNotFound(f"no running crawl with run id {run_id!r} (running: {known})")


def crawl_config(config_files: Sequence[str], overrides: Sequence[str], run_id: str | None
                 ) -> tuple[Config, RunInfo | None]:
    """The configuration of the crawl a command talks to: a live `crawl run`'s own
    settings (its topics) under the user's, or the user's alone."""
    base = load_config(config_files, overrides=overrides)
    run = find_run(Path(base["local.state_dir"]), run_id)
    if run is None:
        return base, None
    return load_config([*run.config_files, *config_files],
                       overrides=[*run.overrides, *overrides]), run
