"""`crawl run`'s progress: the pace against the politeness ceiling of the hosts crawled."""

from __future__ import annotations

from crawler.run import Progress


def test_pace_counts_recent_fetches_against_the_hosts_with_recent_leases():
    p = Progress(started=0.0)
    for i in range(30):  # 3 requests/s over the last 10 s
        p.fetched_at.append(90.0 + i / 3)
    p.host_pace["http://a.test"] = (95.0, 0.5, 1)  # 2/s
    p.host_pace["http://b.test"] = (99.0, 1.0, 2)  # 2 in flight, 1 s apart: 2/s
    p.host_pace["http://idle.test"] = (50.0, 0.1, 1)  # no lease for 50 s: not counted
    rate, ceiling = p.pace(now=100.0)
    assert rate == 3.0 and ceiling == 4.0
    assert Progress(started=0.0).pace(now=5.0) == (0.0, 0.0)
