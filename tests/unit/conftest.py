"""Shared by the unit tests that talk HTTP to the synthetic web on loopback."""

import pytest

from crawler.testkit.synthetic_web import SyntheticWeb, build_sites


@pytest.fixture(scope="module")
def web():
    server = SyntheticWeb(build_sites(14, seed=2))
    server.start()
    yield server
    server.stop()
