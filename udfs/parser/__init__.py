"""The fetcher's parse stage: a pool of parser processes with CPU-time and memory limits."""
