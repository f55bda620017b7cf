"""The frontier job's metrics: what `HostFrontier` reports to its observer, in Flink's
metric groups (exported to Prometheus by the jobs' reporter)."""

from __future__ import annotations

import math
import uuid
from typing import Any

from udfs.core.frontier import GAUGES, HostFrontier
from udfs.flink.counters import CounterBatch

# Eligibility lag buckets (seconds), Prometheus-histogram style: each bucket counts the
# leases granted at most that long after their URL came due (cumulative, so that
# histogram_quantile() reads percentiles off them).
LAG_BUCKETS_S = (1, 5, 30, 60, 300, 600, 1800, 3600, 21600, 86400)
# The age of the robots.txt a page lease was granted under (robots.cache_ttl_s bounds it).
ROBOTS_AGE_BUCKETS_S = (60, 600, 3600, 21600, 86400, 172800)


def _histogram(batch: CounterBatch, group, bucket_name: str, buckets: tuple[float, ...]
               ) -> list[tuple[float, Any]]:
    """Cumulative bucket counters {le} (+Inf included) of a Prometheus-style histogram."""
    return [(b, batch.counter(group.add_group("le", "+Inf" if b == math.inf else str(b)),
                              bucket_name)) for b in (*buckets, math.inf)]


class FrontierMetrics:
    """The frontier's metrics (a `FrontierObserver`): every counted event of the hosts'
    schedulers as frontier_events_total{event}, and the eligibility lag of page leases
    as eligibility_lag_seconds_bucket{priority_class, le} with its _count. Label values
    are event names and fixed buckets: no per-host series. The counters are batched
    (udfs/flink/counters.py): the operator calls `batch.due()`."""

    def __init__(self, group) -> None:
        self.group = group
        self.batch = b = CounterBatch()
        self.events: dict[str, Any] = {}
        self.lag: dict[bool, list[tuple[float, Any]]] = {}
        self.lag_count: dict[bool, Any] = {}
        for high, name in ((True, "high"), (False, "normal")):
            cls = group.add_group("priority_class", name)
            self.lag[high] = _histogram(b, cls, "eligibility_lag_seconds_bucket",
                                        LAG_BUCKETS_S)
            self.lag_count[high] = b.counter(cls, "eligibility_lag_seconds_count")
        self.robots_age = _histogram(b, group, "robots_age_seconds_bucket",
                                     ROBOTS_AGE_BUCKETS_S)
        self.robots_age_count = b.counter(group, "robots_age_seconds_count")
        # The frontier's size (udfs/core/frontier/config.py GAUGES): counters moved up and down
        # by each host's change, so they read as gauges (Flink exports counters as such).
        self.size = [b.counter(group, name) for name in GAUGES]
        self.epoch = uuid.uuid4().hex  # this incarnation: counts restart from zero

    def event(self, name: str) -> None:
        counter = self.events.get(name)
        if counter is None:
            counter = self.events[name] = self.batch.counter(
                self.group.add_group("event", name), "frontier_events_total")
        counter.inc()

    def leased(self, lag_s: float, high_value: bool) -> None:
        self.lag_count[high_value].inc()
        _observe(self.lag[high_value], lag_s)

    def robots_aged(self, age_s: float) -> None:
        self.robots_age_count.inc()
        _observe(self.robots_age, age_s)

    def sized(self, h: HostFrontier, now: float) -> None:
        """Move the size gauges by what changed in this host since it was last counted
        by this incarnation (a host not counted yet adds its whole share)."""
        new = h.gauges(now)
        old = h.counted[1] if h.counted is not None and h.counted[0] == self.epoch else \
            (0,) * len(new)
        for counter, was, now_is in zip(self.size, old, new, strict=True):
            if was != now_is:
                counter.inc(now_is - was)
        h.counted = (self.epoch, new)


def _observe(buckets: list[tuple[float, Any]], value: float) -> None:
    for bound, counter in buckets:
        if value <= bound:
            counter.inc()
