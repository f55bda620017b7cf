"""Partition skew of the frontier over a 10-billion-URL web, sampled, not materialized.

Host sizes (URLs per host) follow a power law, P(n) ∝ n^-β on [1, n_max]: the shape
Huberman and Adamic found for pages per site in the Alexa and Infoseek crawls
("Growth dynamics of the World-Wide Web", Nature 401, 1999; their fits put β between
about 1.7 and 1.9 over several decades). The default fits β to the spec's figures
instead — 10 billion URLs over 1 billion hosts, a mean of 10, with the largest host at
n_max = 10^8 — which gives β ≈ 2.1; `--beta 1.8` runs the published exponent (the
same 10 billion URLs then sit on fewer, larger hosts: the harder case).

Every host at or above --exact-from URLs is drawn one by one, named, and mapped to its
key group and subtask exactly as Flink maps the frontier's key (udfs/core/partitioning,
checked against Flink's own classes); the hundreds of millions of smaller hosts are
summed per key group (a Poisson count of hosts, a normal sum of their URLs: each key
group holds ~10^5 of them). Per subtask it reports URLs held (keyed state) and
lease-rate demand: each host asks for n / (URLs / fetches per day) leases a second,
capped by its politeness ceiling (1 request per --gap seconds).

"After" is the partitioned queue of SPEC section 10 as the frontier job builds it
(udfs/core/shards.py): a host past frontier.shard_above_urls keeps that many URLs at
its owner (key host_key) and spreads the rest by URL hash over frontier.host_shards
shard keys (host_key#0, host_key#1, ...), which Flink places like any key; the
tokens, and so the lease demand, stay with the owner. Both figures default to the
defaults file's (--shard-above, --host-shards override them). The owner also keeps
the URLs it has fetched, for their revisits; politeness bounds them (at most one a
gap, 86,400 a day at 1 s), and the model leaves them out.

    python bench/bench_skew.py              # ~1 min
    python bench/bench_skew.py --beta 1.8
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._results import record  # noqa: E402
from udfs.config import load_config  # noqa: E402
from udfs.core.partitioning import host_key_group, operator_index_for_key_group  # noqa: E402
from udfs.core.shards import shard_key  # noqa: E402

PARALLELISMS = (32, 128, 512, 1024)


def moment(k: int, beta: float, lo: float, hi: float) -> float:
    """E[n^k] of the continuous power law n^-beta on [lo, hi]."""
    z = (lo ** (1 - beta) - hi ** (1 - beta)) / (beta - 1)
    e = k + 1 - beta
    if abs(e) < 1e-12:
        return math.log(hi / lo) / z
    return (hi ** e - lo ** e) / (e * z)


def tail_share(beta: float, lo: float, hi: float, t: float) -> float:
    """P(n >= t)."""
    return (t ** (1 - beta) - hi ** (1 - beta)) / (lo ** (1 - beta) - hi ** (1 - beta))


def fit_beta(mean: float, n_max: float) -> float:
    """The exponent whose power law on [1, n_max] has this mean (bisection)."""
    lo, hi = 1.01, 4.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if moment(1, mid, 1, n_max) > mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def sample_tail(rng: np.random.Generator, count: int, beta: float, t: float,
                hi: float) -> np.ndarray:
    """`count` draws of the power law restricted to [t, hi] (inverse CDF)."""
    u = rng.random(count)
    a, b = t ** (1 - beta), hi ** (1 - beta)
    return (a - u * (a - b)) ** (1 / (1 - beta))


def key_groups(keys: list[str], max_p: int) -> np.ndarray:
    """Each key's key group, hashed once (the costly part: ~5 µs a key in Python)."""
    return np.fromiter((host_key_group(k, max_p) for k in keys), dtype=np.int64,
                       count=len(keys))


def per_key_group(groups: np.ndarray, values: np.ndarray, max_p: int) -> np.ndarray:
    return np.bincount(groups, weights=values, minlength=max_p)


def subtask_of_group(max_p: int, p: int) -> np.ndarray:
    return np.array([operator_index_for_key_group(max_p, p, g) for g in range(max_p)])


def per_subtask(by_group: np.ndarray, index: np.ndarray, p: int) -> np.ndarray:
    return np.bincount(index, weights=by_group, minlength=p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--urls", type=float, default=1e10)
    ap.add_argument("--hosts", type=float, default=1e9,
                    help="hosts (ignored with --beta: then urls / mean)")
    ap.add_argument("--n-max", type=float, default=1e8, help="URLs of the largest host")
    ap.add_argument("--beta", type=float, help="power-law exponent (default: fitted)")
    ap.add_argument("--fetches-per-day", type=float, default=1e9)
    ap.add_argument("--gap", type=float, default=1.0, help="politeness: s between requests")
    ap.add_argument("--max-parallelism", type=int, default=4096)
    ap.add_argument("--exact-from", type=float, default=1000,
                    help="hosts with at least this many URLs are drawn one by one")
    defaults = load_config(env={})
    ap.add_argument("--shard-above", type=float, default=defaults["frontier.shard_above_urls"],
                    help="after: URLs a host's owner keeps before it uses its shards")
    ap.add_argument("--host-shards", type=int, default=defaults["frontier.host_shards"],
                    help="after: shards of a hot host")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    for name, value, low in [("--urls", args.urls, 1), ("--hosts", args.hosts, 1),
                             ("--n-max", args.n_max, 2), ("--gap", args.gap, 0.01),
                             ("--exact-from", args.exact_from, 2),
                             ("--shard-above", args.shard_above, 1),
                             ("--host-shards", args.host_shards, 1),
                             ("--fetches-per-day", args.fetches_per_day, 1)]:
        if not value >= low:
            ap.error(f"{name} must be at least {low}, got {value}")
    if args.beta is not None and not 1.05 <= args.beta <= 4:
        ap.error(f"--beta must be between 1.05 and 4, got {args.beta}")
    if not max(PARALLELISMS) <= args.max_parallelism <= 32768:
        ap.error(f"--max-parallelism must be from {max(PARALLELISMS)} to 32768")
    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    max_p, n_max, t = args.max_parallelism, args.n_max, args.exact_from
    if args.beta is None:
        beta, hosts = fit_beta(args.urls / args.hosts, n_max), args.hosts
    else:
        beta = args.beta
        hosts = args.urls / moment(1, beta, 1, n_max)
    rate_per_url = args.fetches_per_day / 86400 / args.urls  # leases/s one URL asks for
    ceiling = 1 / args.gap

    # The many small hosts, per key group: Poisson counts, normal sums (their demand is
    # far under the ceiling, so it is linear in URLs).
    p_tail = tail_share(beta, 1, n_max, t)
    small_hosts = hosts * (1 - p_tail)
    mu = moment(1, beta, 1, t)
    var = moment(2, beta, 1, t) - mu ** 2
    counts = rng.poisson(small_hosts / max_p, size=max_p).astype(float)
    small_urls = rng.normal(counts * mu, np.sqrt(counts * var))

    # The large hosts, one by one, with names Flink hashes.
    n_big = int(rng.poisson(hosts * p_tail))
    sizes = np.floor(sample_tail(rng, n_big, beta, t, n_max))
    names = [f"https://host-{i}.example" for i in range(n_big)]
    groups = key_groups(names, max_p)
    big_urls = per_key_group(groups, sizes, max_p)
    demand_by_host = np.minimum(sizes * rate_per_url, ceiling)
    big_demand = per_key_group(groups, demand_by_host, max_p)
    urls_before = small_urls + big_urls
    demand = small_urls * rate_per_url + big_demand

    # After: the owner of a host past shard_above keeps that many URLs; the rest are
    # spread by URL hash over its shard keys (even shares); demand stays put.
    sharded = sizes > args.shard_above
    shard_keys, shard_sizes = [], []
    k = args.host_shards
    for i in np.flatnonzero(sharded):
        shard_keys += [shard_key(names[i], j) for j in range(k)]
        shard_sizes += [(sizes[i] - args.shard_above) / k] * k
    unsharded = np.where(sharded, args.shard_above, sizes)
    urls_after = small_urls + per_key_group(groups, unsharded, max_p) + \
        per_key_group(key_groups(shard_keys, max_p), np.array(shard_sizes), max_p)

    total_urls = float(urls_before.sum())
    rows = [
        ("web", f"{total_urls / 1e9:,.2f} billion URLs over {hosts / 1e9:,.3f} billion "
                f"hosts, P(n) ∝ n^-{beta:.3f} on [1, {n_max:,.0f}]"),
        ("largest hosts drawn", ", ".join(f"{s:,.0f}" for s in sorted(sizes)[-3:][::-1])
         + f" URLs; {n_big:,} hosts of {t:,.0f}+ URLs drawn one by one"),
        ("demand", f"{args.fetches_per_day / 86400:,.0f} leases/s wanted, "
                   f"{float(demand.sum()):,.0f}/s under the politeness cap (a host at most "
                   f"{ceiling:g}/s); max parallelism {max_p:,}; after: {int(sharded.sum()):,} "
                   f"hosts past {args.shard_above:,.0f} URLs, the rest of each over "
                   f"{k} shards ({len(shard_keys):,} shard keys)"),
    ]
    for p in PARALLELISMS:
        index = subtask_of_group(max_p, p)
        u_b, u_a = per_subtask(urls_before, index, p), per_subtask(urls_after, index, p)
        d = per_subtask(demand, index, p)
        rows.append((f"p={p}: URLs per subtask, mean / max (max/mean) before",
                     f"{u_b.mean() / 1e6:,.1f} M / {u_b.max() / 1e6:,.1f} M "
                     f"({u_b.max() / u_b.mean():.2f})"))
        rows.append((f"p={p}: the same after partitioning hot hosts' queues",
                     f"{u_a.mean() / 1e6:,.1f} M / {u_a.max() / 1e6:,.1f} M "
                     f"({u_a.max() / u_a.mean():.2f})"))
        rows.append((f"p={p}: lease demand per subtask, mean / max (max/mean)",
                     f"{d.mean():,.1f} / {d.max():,.1f} per s ({d.max() / d.mean():.2f})"))
    print(f"({time.perf_counter() - started:.0f} s)")
    section = "skew" if args.beta is None else f"skew-beta-{args.beta:g}"
    record(section, "Partition skew of the frontier on a 10-billion-URL web "
           + ("(β fitted to 1 billion hosts)" if args.beta is None else f"(β = {args.beta:g})"),
           rows, notes="Key groups and subtasks as Flink assigns them (murmur hash of the "
           "key's hashCode, key group ranges per subtask). The lease demand is what the "
           "hosts ask for, capped by politeness; a hot host's demand stays with its one "
           "owner after partitioning (tokens from one owner), so only the URL (state) "
           "skew changes. 'After' places URLs as the frontier job's hot-host shards do "
           "(udfs/core/shards.py: frontier.shard_above_urls at the owner, the rest over "
           "frontier.host_shards shard keys); fetched URLs kept by the owner for their "
           "revisits are left out.")


if __name__ == "__main__":
    main()
