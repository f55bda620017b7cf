"""Fault injection in the fetcher, for recovery tests: all off unless `faults.*` is set.

    faults.crash_after_response  regex: the fetcher's task fails after the response
                                 for a matching URL arrived and before its completion
                                 is written (Flink restarts it from a checkpoint)
    faults.drop_completion       regex: the completion of a matching URL is never
                                 written (as if lost); its lease expires and is re-let
    faults.parse_delay_s         every page's parse stalls this long (a stuck parser:
                                 the parser process sleeps, holding its place in the
                                 parse stage, udfs/parser/stage.py; without a stage,
                                 the caller's event loop is blocked)
    faults.marker_dir            each crash and drop happens once per URL: a file
                                 here remembers it across restarts of the task

The crash and the drop need `marker_dir` (a restarted task forgets its memory, so
without it a crash would repeat on every replay). Outside tests nothing here runs:
`fault_injector` builds none when every fault is off.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class InjectedCrash(RuntimeError):
    """Raised on purpose by faults.crash_after_response."""


@dataclass(frozen=True)
class FaultInjector:
    crash_after_response: re.Pattern[str] | None
    drop_completion: re.Pattern[str] | None
    parse_delay_s: float
    marker_dir: Path | None

    def _first_time(self, fault: str, url: str) -> bool:
        """True once per (fault, URL), across processes: an exclusive create of a marker."""
        assert self.marker_dir is not None
        self.marker_dir.mkdir(parents=True, exist_ok=True)
        name = f"{fault}-{hashlib.sha256(url.encode()).hexdigest()[:24]}"
        try:
            fd = os.open(self.marker_dir / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(f"{url}\n{time.time():.3f}\n")
        return True

    def after_response(self, url: str) -> None:
        """Crash (raise InjectedCrash) if `url` is to crash the fetcher and has not yet."""
        if self.crash_after_response is not None and \
                self.crash_after_response.search(url) and self._first_time("crash", url):
            raise InjectedCrash(f"faults.crash_after_response: crashing after the "
                                f"response for {url}")

    def drops_completion(self, url: str) -> bool:
        """True if the completion of `url` is to be lost (once per URL)."""
        return self.drop_completion is not None and \
            bool(self.drop_completion.search(url)) and self._first_time("drop", url)

    def stall_parse(self) -> None:
        if self.parse_delay_s > 0:
            time.sleep(self.parse_delay_s)  # blocks the caller, as a stuck parse does


def fault_injector(faults: Mapping[str, Any]) -> FaultInjector | None:
    """The injector the `faults` section asks for, or None when every fault is off
    (outside recovery tests)."""
    crash, drop = faults["crash_after_response"], faults["drop_completion"]
    delay = float(faults["parse_delay_s"])
    if not crash and not drop and delay <= 0:
        return None
    marker = Path(faults["marker_dir"]) if faults["marker_dir"] else None
    if (crash or drop) and marker is None:
        raise ValueError("faults.crash_after_response and faults.drop_completion need "
                         "faults.marker_dir (each fault happens once per URL)")
    return FaultInjector(re.compile(crash) if crash else None,
                         re.compile(drop) if drop else None, delay, marker)


def injected(marker_dir: str | Path, fault: str) -> list[tuple[str, float]]:
    """(URL, epoch seconds) of each fault of kind `fault` ("crash" or "drop") injected."""
    out = []
    for path in sorted(Path(marker_dir).glob(f"{fault}-*")):
        url, at = path.read_text().splitlines()[:2]
        out.append((url, float(at)))
    return out
