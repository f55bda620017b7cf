"""The capacity model reproduces the design's published figures."""

from __future__ import annotations

import pytest

from crawler.cli import main
from udfs.config import load_config
from udfs.core.capacity import load_assumptions, plan


def figures(path=None):
    return {f.name: f.value for f in plan(load_assumptions(path))}


def test_published_figures():
    f = figures()
    assert round(f["average fetch rate"]) == 11_574
    assert f["peak fetch rate"] == 25_000
    assert f["revisit fetches per day"] == pytest.approx(430e6)  # 100 M + 9.9 B / 30
    assert f["ingress per day (at most)"] == pytest.approx(200)  # TB/day
    assert f["ingress, average"] == pytest.approx(2.31, abs=0.005)  # GB/s
    assert f["URL state"] == pytest.approx(1.94)  # TB before replication (194 B measured)
    assert f["RocksDB Bloom filter bits per URL"] == pytest.approx(9.585, abs=0.001)  # 1% → 9.58
    assert f["RocksDB Bloom filters, all URLs"] == pytest.approx(11.98, abs=0.01)  # GB
    assert f["fingerprint collision pairs"] == pytest.approx(2.71, abs=0.01)  # ~2.7 at 10^10
    assert round(f["back queues, peak"]) == 25_000  # pages/s × 1 s gap
    assert round(f["connections in flight, average"]) == 11_574  # Little's law, 1 s latency
    # measured per slot: 81 fetched pages/s (200 KB kept), 50 parsed pages/s (200 KB)
    assert f["fetcher slots at peak"] == 309 and f["parser slots at peak"] == 500
    assert f["frontier slots at peak"] == 30  # 25,000 / 860 measured grants per slot
    # 2 M cached URLs at 1,440 B and 10,000 hosts at 3,650 B (measured), per slot
    assert f["frontier host cache per slot, full"] == pytest.approx(2.7162, abs=0.001)
    assert f["frontier host caches at peak, full"] == pytest.approx(30 * 2.7162, abs=0.05)


def test_the_plans_cache_is_the_crawls_default_cache():
    """The plan's cache per frontier slot is the one the frontier job is configured with."""
    a, cfg = load_assumptions(), load_config(env={})
    assert a.frontier_cache_urls == cfg["frontier.cache_urls"]
    assert a.frontier_cache_hosts == cfg["frontier.cache_hosts"]


def test_assumptions_file_changes_the_plan(tmp_path):
    mine = tmp_path / "a.yaml"
    mine.write_text("politeness_gap_s: 2\nfetch_latency_s: 0.5\nknown_urls: 20000000000\n"
                    "frontier_grants_per_s_per_slot: 3000\nfrontier_cache_urls: 500000\n")
    f = figures(mine)
    assert round(f["back queues, peak"]) == 50_000
    assert round(f["connections in flight, peak"]) == 12_500
    assert f["fingerprint collision pairs"] == pytest.approx(4 * 2.71, abs=0.05)
    assert f["frontier slots at peak"] == 9  # the goal of 3,000 grants per slot
    assert f["frontier host cache per slot, full"] == pytest.approx(
        (500_000 * 1440 + 10_000 * 3650) / 2 ** 30)


@pytest.mark.parametrize("text, message", [
    ("nonsense: 1\n", "unknown assumptions"),
    ("known_urls: -5\n", "must be a positive number"),
    ("bloom_fp_rate: 2\n", "below 1"),
    ("- 1\n", "expected a mapping"),
])
def test_bad_assumptions_are_refused(tmp_path, text, message, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_assumptions(bad)
    assert main(["plan", "--assumptions", str(bad)]) == 2
    assert message.split()[0] in capsys.readouterr().err


def test_cli_prints_the_table_and_json(capsys):
    assert main(["plan"]) == 0
    assert "430,000,000" in capsys.readouterr().out
    assert main(["plan", "--json"]) == 0
    assert '"revisit fetches per day"' in capsys.readouterr().out
