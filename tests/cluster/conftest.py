"""Cluster tests need the local stack, like the integration tests."""

from tests.integration.conftest import admin, cfg, fresh_topics  # noqa: F401
