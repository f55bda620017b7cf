"""A chain of parse filters: the user's own rules for what a parsed page yields.

StormCrawler's ParseFilter, in Python: a filter is any object with a method
`filter(url, parse, page) -> Parse`. It receives the page's URL, what parsing gave
(`Parse`, frozen: the links, the extracted text, the title, the canonical URL and the
noindex/nofollow directives) and the page it came from (`Page`: the response headers
and the body bytes the parser read); it returns a `Parse`, the same one or a changed
copy (`dataclasses.replace(parse, links=...)`). Filters run in the configured order,
each seeing what the one before returned. Configured by `parse.filters`
(udfs/config/crawler-default.yaml), with the entry syntax of `urls.filters`
(udfs/core/urlfilters.py): "module:Class" or "module.Class" followed by optional
key=value parameters given to the class as keyword arguments.

What a filter's result changes (nothing else leaves the parser):

* links: what the fetcher sends to the frontier. Each link a filter returns is resolved
  against the page URL and normalized (urls.drop_query_params) before the next filter
  sees it; links that are not http(s) URLs are dropped, duplicates removed (first
  kept), and at most parse.max_links kept (the page is then marked truncated). The
  completion's links_count counts them. The frontier's own rules and the URL filters
  (urls.filters) still apply to every link at its intake.
* text: the completion's text_sha256 and simhash are computed from the text the chain
  returns (e.g. boilerplate removed), so change detection and near-duplicate checks
  see the filtered text. The text itself is not sent anywhere.
* canonical_url, noindex, nofollow: the completion's fields (a canonical URL is
  normalized like a link; one that is not an http(s) URL becomes None). A result with
  nofollow sends no links, as a nofollow page does without filters.
* title: read by later filters only; no record carries it.

Where: in the fetcher's parser processes (udfs/parser/stage.py), right after
parse_html, so a filter's time counts against the page's CPU limit
(parse.cpu_limit_s) and its memory against parse.memory_limit_mb; and in `crawl
reparse`, so a reparse applies the same chain. Each parser process loads the chain
once, when it starts. An empty chain changes nothing: the built-in rules (robots
directives, rel=nofollow, canonical, the drop list) are parse_html's own.

A filter that raises (or returns something that is not a Parse) is a bug in the
filter, not in the page: the page keeps what the filters before it returned (parse_html's
result when it is the first), the rest of the chain is skipped for that page, and the
page's outcome is what parsing gave (its completion and links are sent as usual). The
fetcher counts it in parse_filter_errors_total{filter} and sends a dead letter (stage
fetcher.parse_filter, error type ParseFilterError, the exception in the reason), and the
crawl goes on (a MemoryError is the parser's memory limit, not a filter error: the
page ends as PARSE_TIMEOUT, as without filters). Why not fail the page or drop its
links: one filter's bug would then cost every page it touches, though each was fetched
and parsed; the dead letter keeps the URL for the filter's author, and the page is
parsed again at its next visit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from udfs.core.fingerprints import simhash64, text_hash
from udfs.core.parse import ParsedPage, parse_html
from udfs.core.urlfilters import FilterError, build, build_chain, chain_problem, parse_entry
from udfs.core.urls import UrlPolicy, normalize_url

__all__ = ["FilterError", "Page", "Parse", "ParseFilter", "apply_chain", "check_entries",
           "load_filters"]

METHOD = "filter(url, parse, page)"


@dataclass(frozen=True)
class Parse:
    """What parsing gave; a filter returns one (see the module's docstring for what
    each field changes)."""

    links: tuple[str, ...]  # normalized, deduplicated, in page order
    text: str  # the extracted text (no script, style, ...), whitespace collapsed
    title: str | None
    canonical_url: str | None
    noindex: bool
    nofollow: bool


@dataclass(frozen=True)
class Page:
    """The page a Parse came from, read-only."""

    headers: tuple[tuple[str, str], ...]  # the response headers, in order
    body: bytes  # the bytes the parser read (cut at parse.max_bytes)


class ParseFilter(Protocol):
    def filter(self, url: str, parse: Parse, page: Page) -> Parse: ...


def load_filter(entry: str) -> ParseFilter:
    """Import and build one filter; FilterError with the reason if it cannot be."""
    built: ParseFilter = build(entry, METHOD)
    return built


def load_filters(entries: Sequence[str]) -> list[tuple[str, ParseFilter]]:
    """(name, filter) for each entry, in order; the name is the class's (for metrics)."""
    return build_chain(entries, METHOD)


def filter_names(entries: Sequence[str]) -> list[str]:
    """The names load_filters gives the entries (without importing anything)."""
    return list(dict.fromkeys(parse_entry(e)[1] for e in entries))


def check_entries(entries: Sequence[str]) -> str | None:
    """The configuration rule: None if every entry loads, else the first reason."""
    return chain_problem(entries, METHOD)


def _links(links: Sequence[str], url: str, policy: UrlPolicy | None, max_links: int
           ) -> tuple[tuple[str, ...], bool]:
    """A filter's links resolved, normalized, deduplicated and cut: (links, cut)."""
    if isinstance(links, str):
        raise TypeError("links must be a sequence of URLs, not one string")
    out: dict[str, None] = {}
    for link in links:
        if not isinstance(link, str):
            raise TypeError(f"a link is {type(link).__name__}, not str")
        target = normalize_url(link, url, policy)
        if target is not None:
            out[target] = None
    kept = tuple(out)
    return kept[:max_links], len(kept) > max_links


def apply_chain(chain: Sequence[tuple[str, ParseFilter]], url: str, parsed: ParsedPage,
                page: Page, url_policy: UrlPolicy | None = None, max_links: int = 5000
                ) -> tuple[str, str] | None:
    """Run the chain on one page and write its result into `parsed` (its links, text,
    text hash, SimHash, title, canonical URL, directives, truncated). None, or (the
    filter's name, "Type: message") when a filter raised: `parsed` then holds what the
    filters before it returned."""
    current = Parse(tuple(parsed.links), parsed.text, parsed.title, parsed.canonical_url,
                    parsed.noindex, parsed.nofollow)
    failure = None
    cut = False
    for name, f in chain:
        try:
            out = f.filter(url, current, page)
            if not isinstance(out, Parse):
                raise TypeError(f"filter returned {type(out).__name__}, not a Parse")
            if out.links != current.links:
                links, was_cut = _links(out.links, url, url_policy, max_links)
                out = replace(out, links=links)
            else:
                was_cut = False
            if out.canonical_url != current.canonical_url and out.canonical_url is not None:
                out = replace(out, canonical_url=normalize_url(out.canonical_url, url,
                                                               url_policy))
            if not isinstance(out.text, str):
                raise TypeError(f"text is {type(out.text).__name__}, not str")
        except MemoryError:  # the parser's memory limit, not the filter's bug
            raise
        except Exception as exc:  # the filter's bug: keep the page, skip the rest
            failure = (name, f"{type(exc).__name__}: {exc}"[:1000])
            break
        current, cut = out, cut or was_cut
    if current.text != parsed.text:
        parsed.text_sha256, parsed.simhash = text_hash(current.text), simhash64(current.text)
    parsed.text = current.text
    parsed.links = [] if current.nofollow else list(current.links)
    parsed.title = current.title
    parsed.canonical_url = current.canonical_url
    parsed.noindex, parsed.nofollow = bool(current.noindex), bool(current.nofollow)
    parsed.truncated = parsed.truncated or cut
    return failure


def parse_and_filter(body: bytes, url: str, headers: Sequence[tuple[str, str]], *,
                     user_agent: str, policy: UrlPolicy | None, max_bytes: int,
                     max_links: int, chain: Sequence[tuple[str, ParseFilter]] = ()
                     ) -> tuple[ParsedPage, tuple[str, str] | None]:
    """One page through parse_html and then the chain, as the fetcher's parser processes
    and `crawl reparse` both run it: (the page, (filter, error) if a filter raised)."""
    page = parse_html(body, url, headers=headers, user_agent=user_agent, max_bytes=max_bytes,
                      max_links=max_links, url_policy=policy)
    if not chain:
        return page, None
    return page, apply_chain(chain, url, page, Page(tuple((k, v) for k, v in headers),
                                                    body[:max_bytes]), policy, max_links)
