"""The cyclic garbage collector's settings for the crawl's long-lived Python processes.

Measured in the crawl (200 sites, about 340 pages/s, collector time by thread CPU):
with Python's thresholds (700, 10, 10) the fetcher's process collected about twelve
times a second and spent 1.2 CPU s a minute in it, the frontier's interpreter 0.5;
with a young generation of 20,000, 0.26 and 0.06 (about 0.07 ms of CPU a page less).
Almost everything a page allocates dies by reference counting; what the young
collections find is the few cycles (exceptions' tracebacks, asyncio's futures), which
now wait a second or two longer. No module imports Flink here: the parser processes
use it too.
"""

from __future__ import annotations

import gc

# Allocations (less deallocations) between two collections of the young generation.
YOUNG_THRESHOLD = 20_000


def settle(freeze: bool = True) -> None:
    """Collect the young generation every YOUNG_THRESHOLD allocations (the older
    generations keep their ratios); with `freeze`, first move what is alive now out of
    the collector's reach for good (no collection walks it again, and none would ever
    free it). Freeze only in a process whose live objects now live as long as it does
    (the fetcher's worker, a parser process), not in an interpreter that outlives its
    operators (thread mode: the frontier's JVM keeps its interpreter across a task's
    restarts, and a frozen operator in a cycle would never be freed)."""
    if freeze:
        gc.collect()
        gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
