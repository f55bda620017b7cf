"""Integration tests run against the local stack (`./dev up`, or `./dev test` starts it)."""

from __future__ import annotations

import uuid

import pytest

from crawler.stack.local import LocalStack
from udfs.config import Config, load_config

# The longest a job is given from its launch to its first output: a MiniCluster and its
# Python workers starting on two cores that another test's jobs share. Measured up to
# ~105 s on a machine whose hypervisor took part of its CPU (a Python loop 2-3x its
# usual time), ~35 s on an idle one. Every wait that includes a job's start gives at
# least this (plus, where it times more than the start, that too), so a slow start fails
# no test on its own.
STARTUP_S = 240.0


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


@pytest.fixture
def other_topics(fresh_topics) -> list[str]:
    """Overrides that give a frontier job fresh control, replies and shards topics, for a
    test that names only the topics it reads and writes: on the shared defaults, jobs of
    tests running side by side would read each other's commands and share their
    exactly-once shards sink's transactional ids (each job's start fences the producer
    the other holds)."""
    keys = ("control", "replies", "shards")
    return [f"topics.{k}.name={n}" for k, n in zip(keys, fresh_topics(*keys), strict=True)]


def free_port() -> int:
    """A port for a job or server to listen on (outside the ephemeral range)."""
    from crawler.run import free_port as pick

    return pick()


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """One scrape of a Prometheus text endpoint on 127.0.0.1: (name, labels) → value
    (parsed as `crawl status` parses it); raises OSError when nothing answers."""
    import urllib.request

    from crawler.status import parse_metrics

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return parse_metrics(r.read().decode())


def metric(samples: dict, suffix: str, **labels: str) -> float | None:
    """The sum of the samples whose name ends with `suffix` and that carry `labels`
    (over subtasks; None when there is none)."""
    found = [v for (name, ls), v in samples.items() if name.endswith(suffix)
             and set(labels.items()) <= ls]
    return sum(found) if found else None


def wait_for_metric(port: int, suffix: str, predicate, timeout_s: float = 60.0,
                    **labels: str) -> dict:
    """Scrape until the metric's value satisfies `predicate`; the last scrape."""
    import time

    deadline = time.monotonic() + timeout_s
    samples: dict = {}
    while time.monotonic() < deadline:
        try:
            samples = scrape(port)
        except OSError:
            samples = {}
        value = metric(samples, suffix, **labels)
        if value is not None and predicate(value):
            return samples
        time.sleep(1.0)
    raise AssertionError(f"{suffix}{labels} never satisfied the check; last scrape: "
                         f"{sorted(k[0] for k in samples)[:40]}")
