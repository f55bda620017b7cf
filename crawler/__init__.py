"""Tooling around the jobs: the `crawl` command, the local stack, dependency downloads."""
