"""Integration tests run against the local stack (`./dev up`, or `./dev test` starts it)."""

from __future__ import annotations

import uuid

import pytest

from crawler.local import LocalStack
from udfs.config import Config, load_config


@pytest.fixture(scope="session")
def cfg() -> Config:
    cfg = load_config(env={})
    stopped = [s.name for s in LocalStack(cfg).status() if not s.running]
    if stopped:
        pytest.fail(f"the local stack is not running ({', '.join(stopped)} stopped); "
                    "start it with `./dev up` (or run the suite with `./dev test`)")
    return cfg


@pytest.fixture
def admin(cfg):
    client = LocalStack(cfg).admin()
    yield client
    client.close()


@pytest.fixture
def fresh_topics(admin):
    """Create uniquely named topics for one test and delete them afterwards."""
    from kafka.admin import NewTopic

    created: list[str] = []

    def make(*names: str, partitions: int = 1) -> list[str]:
        suffix = uuid.uuid4().hex[:8]
        topics = [f"test.{n}.{suffix}" for n in names]
        admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
        created.extend(topics)
        return topics

    yield make
    if created:
        admin.delete_topics(created)
