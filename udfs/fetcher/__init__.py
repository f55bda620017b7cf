"""The fetcher job's Flink shell: the async fetch function, its engine, the HTTP client,
DNS, the hosts' and addresses' turns, metrics, fault injection."""
