"""Shared by the unit tests: the synthetic web on loopback for those that talk HTTP, and
the collector left as the test process has it."""

import pytest

from crawler.testkit.synthetic_web import SyntheticWeb, build_sites


@pytest.fixture(scope="module")
def web():
    server = SyntheticWeb(build_sites(14, seed=2))
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _collector_untouched(request, monkeypatch):
    """The jobs' operators settle the collector when they open (udfs/flink/collector.py):
    in this process that would freeze the tests' objects and change the thresholds for
    every test after. Only test_collector.py calls the real one."""
    if request.module.__name__.rpartition(".")[2] != "test_collector":
        from udfs.flink import collector

        monkeypatch.setattr(collector, "settle", lambda freeze=True: None)
