"""The crawl rules as plain Python: no Flink import, every time-dependent call takes `now`.

URL normalization, robots.txt, sitemaps, SSRF policy, traps, the per-host
scheduler, leases, recrawl and dedup land here (see the web-standards and
frontier-core issues); Flink operators in udfs/ only adapt them.
"""
