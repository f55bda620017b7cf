"""The frontier's intake per page: its links normalized, checked and sorted to their hosts.

    python bench/bench_intake.py [--pages 5000]

Each page's links go through `intake` and `fresh_links` (udfs/frontier/pipeline.py: the
intake's memory of what it passed on lately, RecentUrls), as the frontier's Intake
operator does for every completion and DiscoveredUrls record. Two webs: the
benchmarks' synthetic web (200 sites of some 330 pages, as bench_crawl's was, about 7
links a page, most to random pages of the same site) and a site shaped as real ones are
(100 links a page: 60 in its menus and footer, the same on every page, 40 to random
pages among its 5,000). Links come as the fetcher's parser sends them, absolute and
normalized. Measured: CPU µs a page and a link once the memory is warm, with the links
the memory holds taken as they are (`normalized=recent`) against every link normalized
again (`normalized=()`), in alternating rounds on the same pages. No services needed.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._results import record  # noqa: E402
from udfs.config import load_defaults  # noqa: E402
from udfs.core.addresses import AddressPolicy  # noqa: E402
from udfs.core.frontier.recent import RecentUrls  # noqa: E402
from udfs.core.urls import UrlPolicy  # noqa: E402
from udfs.frontier.pipeline import fresh_links, intake  # noqa: E402
from udfs.wire.records import DiscoveredUrls, links_record, plain_link  # noqa: E402


def synthetic_pages(n: int, rng: random.Random) -> list[list[str]]:
    """Links of pages like bench_crawl's synthetic web (crawler/testkit/synthetic_web.py):
    four random pages of the site, the next page, one page of another site."""
    sites, per_site = 200, 330
    out = []
    for _ in range(n):
        s, i = rng.randrange(sites), rng.randrange(per_site)
        links = [f"http://site-{s:04d}.test:8080/p/{rng.randrange(per_site)}" for _ in range(4)]
        links.append(f"http://site-{s:04d}.test:8080/p/{(i + 1) % per_site}")
        links.append(f"http://site-{rng.randrange(sites):04d}.test:8080/p/"
                     f"{rng.randrange(per_site)}")
        out.append(links)
    return out


def real_site_pages(n: int, rng: random.Random) -> list[list[str]]:
    """Links of pages of a site as real ones are: 60 menu and footer links on every page,
    40 to random articles among 5,000."""
    base = "https://www.news-site.example"
    menu = [f"{base}/section/{k}/" for k in range(40)] + \
        [f"{base}/about/{k}" for k in range(20)]
    return [menu + [f"{base}/article/{rng.randrange(5000)}-some-words-of-its-title"
                    for _ in range(40)] for _ in range(n)]


def as_records(pages: list[list[str]]) -> list[DiscoveredUrls]:
    return [links_record("", "LINK", None, 1, 0, [plain_link(u) for u in links])
            for links in pages]


def sort_page(rec: DiscoveredUrls, policy: UrlPolicy, address: AddressPolicy,
              recent: RecentUrls, now: float, shortcut: bool) -> int:
    """One record through the intake as its operator takes it; the links passed on."""
    found = intake(rec, policy, address, (), recent if shortcut else ())
    return sum(len(fresh_links(recent, links, now)) for links in found.groups.values())


def measure(warm: list[DiscoveredUrls], records: list[DiscoveredUrls], rounds: int
            ) -> dict[str, float]:
    defaults = load_defaults()
    policy = UrlPolicy.from_names(defaults["urls"]["drop_query_params"])
    address = AddressPolicy.from_networks(defaults["fetch"]["allowed_networks"])
    recent = RecentUrls(defaults["frontier"]["intake_recent_urls"],
                        defaults["frontier"]["intake_recent_s"])
    links = sum(len(r["links"]) for r in records)
    for r in warm:  # other pages of the same web first: the memory of a crawl under way
        sort_page(r, policy, address, recent, 0.0, True)
    held = sum(1 for r in records for link in r["links"] if link["url"] in recent)
    best = {True: float("inf"), False: float("inf")}
    for k in range(2 * rounds):  # alternating, each from the same memory; the least kept
        shortcut, memory = k % 2 == 0, copy.deepcopy(recent)
        t0 = time.process_time()
        for r in records:
            sort_page(r, policy, address, memory, 1.0, shortcut)
        best[shortcut] = min(best[shortcut], time.process_time() - t0)
    return {"pages": len(records), "links": links, "held": held / links,
            "with": best[True], "without": best[False]}


def rows_of(name: str, m: dict[str, float]) -> list[tuple[str, str]]:
    pages, links = m["pages"], m["links"]
    return [
        (f"{name}: pages / links a page / links the memory holds",
         f"{pages:,} / {links / pages:.0f} / {100 * m['held']:.0f}%"),
        (f"{name}: CPU µs a page, held links as they are / all normalized again",
         f"{1e6 * m['with'] / pages:.1f} / {1e6 * m['without'] / pages:.1f} "
         f"({m['without'] / m['with']:.2f}x)"),
        (f"{name}: CPU µs a link, held links as they are / all normalized again",
         f"{1e6 * m['with'] / links:.2f} / {1e6 * m['without'] / links:.2f}"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=5_000, help="pages of each web (5,000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds each way (3)")
    args = ap.parse_args()
    if args.pages < 1 or args.rounds < 1:
        ap.error("--pages and --rounds must be at least 1")
    rng = random.Random(7)
    rows = []
    for name, pages in (("synthetic web", synthetic_pages),
                        ("a real site's shape", real_site_pages)):
        warm, measured = (as_records(pages(args.pages, rng)) for _ in range(2))
        rows += rows_of(name, measure(warm, measured, args.rounds))
    record("intake", "The frontier's intake: a page's links", rows,
           "One core, pure Python, the default configuration (urls.drop_query_params, "
           "fetch.allowed_networks, frontier.intake_recent_urls and intake_recent_s); no "
           "URL filters. `held`: the measured pages' links that the intake's memory holds when "
           "a round starts (as many other pages of the same web went through it first; "
           "each round starts from a copy of that memory). The intake takes such a link as "
           "it is: the memory holds only URLs it normalized, and normalizing is idempotent "
           "(tests/unit/test_urls.py). The least CPU of the rounds each way.")


if __name__ == "__main__":
    main()
