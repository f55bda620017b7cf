"""The capacity model: the design's arithmetic, derived from a file of assumptions.

Every figure is a plain formula of the assumptions (no measurement happens
here); `crawl plan` prints them. Tests check the design's published figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

ASSUMPTIONS_PATH = Path(__file__).resolve().parent.parent / "capacity-assumptions.yaml"
DAY_S = 86400


@dataclass(frozen=True)
class Assumptions:
    known_urls: float
    fetches_per_day: float
    peak_fetches_per_s: float
    avg_body_bytes: float
    high_value_urls: float
    high_value_interval_days: float
    other_interval_days: float
    url_state_bytes: float
    replication: float
    bloom_fp_rate: float
    fingerprint_bits: int
    politeness_gap_s: float
    fetch_latency_s: float
    fetcher_pages_per_s_per_slot: float
    parser_pages_per_s_per_slot: float
    frontier_grants_per_s_per_slot: float
    frontier_cache_urls: float
    frontier_cache_hosts: float
    python_bytes_per_cached_url: float
    python_bytes_per_cached_host: float


def load_assumptions(path: str | Path | None = None) -> Assumptions:
    """Defaults, overridden by the keys of `path`; unknown keys and non-numbers refused."""
    data: dict[str, Any] = yaml.safe_load(ASSUMPTIONS_PATH.read_text(encoding="utf-8"))
    if path is not None:
        extra = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(extra, dict):
            raise ValueError(f"{path}: expected a mapping of assumptions")
        unknown = set(extra) - set(data)
        if unknown:
            raise ValueError(f"{path}: unknown assumptions {sorted(unknown)}")
        data.update(extra)
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"assumption {key} must be a positive number, got {value!r}")
    if data["bloom_fp_rate"] >= 1:
        raise ValueError("assumption bloom_fp_rate must be below 1")
    return Assumptions(**{f.name: data[f.name] for f in fields(Assumptions)})


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    formula: str


def plan(a: Assumptions) -> list[Figure]:
    avg_rate = a.fetches_per_day / DAY_S
    revisits = a.high_value_urls / a.high_value_interval_days + \
        (a.known_urls - a.high_value_urls) / a.other_interval_days
    ingress_day = a.fetches_per_day * a.avg_body_bytes
    state = a.known_urls * a.url_state_bytes
    bloom_bits = -math.log(a.bloom_fp_rate) / math.log(2) ** 2
    bloom_bytes = a.known_urls * bloom_bits / 8
    collisions = a.known_urls ** 2 / (2 * 2 ** a.fingerprint_bits)
    frontier_slots = math.ceil(a.peak_fetches_per_s / a.frontier_grants_per_s_per_slot)
    # Python objects in the TaskManager's process (thread mode): not in the JVM heap,
    # not in RocksDB's managed memory; the TaskManager's size must leave room for it.
    cache = (a.frontier_cache_urls * a.python_bytes_per_cached_url +
             a.frontier_cache_hosts * a.python_bytes_per_cached_host)
    return [
        Figure("average fetch rate", avg_rate, "fetches/s", "fetches_per_day / 86,400"),
        Figure("peak fetch rate", a.peak_fetches_per_s, "fetches/s", "assumed"),
        Figure("revisit fetches per day", revisits, "fetches/day",
               "high_value_urls / high_interval + (known - high_value) / other_interval"),
        Figure("revisits as share of the fetch budget", revisits / a.fetches_per_day, "ratio",
               "revisits / fetches_per_day"),
        Figure("ingress per day (at most)", ingress_day / 1e12, "TB/day",
               "fetches_per_day × avg_body_bytes"),
        Figure("ingress, average", ingress_day / DAY_S / 1e9, "GB/s", "ingress per day / 86,400"),
        Figure("ingress, peak", a.peak_fetches_per_s * a.avg_body_bytes / 1e9, "GB/s",
               "peak rate × avg_body_bytes"),
        Figure("URL state", state / 1e12, "TB", "known_urls × url_state_bytes"),
        Figure("URL state, replicated", state * a.replication / 1e12, "TB",
               "URL state × replication"),
        # RocksDB's per-file Bloom filters over the URL state answer "definitely new"
        # (flink.rocksdb_bloom_bits_per_key): their bits per key for bloom_fp_rate.
        Figure("RocksDB Bloom filter bits per URL", bloom_bits, "bits", "-ln(p) / (ln 2)²"),
        Figure("RocksDB Bloom filters, all URLs", bloom_bytes / 1e9, "GB",
               "known_urls × bits per URL / 8"),
        Figure("fingerprint collision pairs", collisions, "pairs", "n² / (2 × 2^bits)"),
        Figure("back queues (hosts in rotation), average", avg_rate * a.politeness_gap_s,
               "queues", "average rate × politeness gap"),
        Figure("back queues, peak", a.peak_fetches_per_s * a.politeness_gap_s, "queues",
               "peak rate × politeness gap"),
        Figure("connections in flight, average", avg_rate * a.fetch_latency_s, "connections",
               "Little's law: rate × fetch latency"),
        Figure("connections in flight, peak", a.peak_fetches_per_s * a.fetch_latency_s,
               "connections", "Little's law at peak"),
        Figure("frontier slots at peak", frontier_slots, "slots",
               "peak rate (one lease grant per fetch) / frontier grants per slot"),
        Figure("frontier host cache per slot, full", cache / 2 ** 30, "GiB (Python)",
               "cache_urls × bytes per cached URL + cache_hosts × bytes per host"),
        Figure("frontier host caches at peak, full", frontier_slots * cache / 2 ** 30,
               "GiB (Python)", "frontier slots at peak × host cache per slot"),
        Figure("fetcher slots at peak", math.ceil(a.peak_fetches_per_s /
                                                  a.fetcher_pages_per_s_per_slot), "slots",
               "peak rate / fetcher pages per slot"),
        Figure("parser slots at peak", math.ceil(a.peak_fetches_per_s /
                                                 a.parser_pages_per_s_per_slot), "slots",
               "peak rate / parser pages per slot"),
    ]


def render(figures: list[Figure]) -> str:
    width = max(len(f.name) for f in figures)
    lines = []
    for f in figures:
        if f.value >= 100 or float(f.value).is_integer():
            value = f"{f.value:,.0f}"
        else:
            value = f"{f.value:,.3f}" if f.value < 10 else f"{f.value:,.2f}"
        lines.append(f"{f.name:<{width}}  {value:>16} {f.unit:<12} {f.formula}")
    return "\n".join(lines)
