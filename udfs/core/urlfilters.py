"""A chain of URL filters: the user's own rules for which discovered URLs to queue.

StormCrawler's URLFilter, in Python: a filter is any object with a method
`filter(url, link) -> str | None`. It receives a URL already normalized (WHATWG
parse, RFC 3986 normalization, the drop list of urls.drop_query_params applied) and
its `Link` context; it returns the URL to keep (the same one, or a rewrite of it) or
None to drop it. Filters run in the configured order; the first that drops a URL
ends its chain. A rewritten URL is normalized again before the next filter sees it,
and the URL that leaves the chain is queued under its own host (a rewrite may change
the host).

The chain runs at the frontier's intake, on every discovered URL (seeds, links,
sitemap entries, redirect targets, robots.txt Sitemap lines), before the SSRF address
check and before the host's own rules (robots.txt, trap limits, daily budget), which
no filter can loosen. Configured by `urls.filters` (udfs/config/crawler-default.yaml), each
entry "module:Class" or "module.Class" followed by optional key=value parameters
given to the class as keyword arguments (values read as YAML scalars).

A filter that raises is a bug in the filter, not in the URL: the URL is dropped,
counted by reason (the exception's type) and sent to the dead-letter topic with the
message, and the crawl goes on.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import yaml


@dataclass(frozen=True)
class Link:
    """What a filter knows about a discovered URL besides the URL itself."""

    source: str  # SEED, LINK, SITEMAP, ROBOTS_SITEMAP, REDIRECT (DiscoveredUrls.source)
    parent_url: str | None  # the page, sitemap or redirect it was found on
    depth: int  # link hops from a seed


class UrlFilter(Protocol):
    def filter(self, url: str, link: Link) -> str | None: ...


METHOD = "filter(url, link)"


class FilterError(ValueError):
    """A `urls.filters` (or `parse.filters`) entry that cannot be loaded; the message says
    which and why."""


_ENTRY = re.compile(r"^(?P<target>[A-Za-z_][\w.]*(?::[A-Za-z_]\w*)?)(?P<params>(?:\s+\S+)*)\s*$")


def parse_entry(entry: str) -> tuple[str, str, dict[str, Any]]:
    """("module", "Class", params) of one `urls.filters` or `parse.filters` entry, or
    FilterError."""
    m = _ENTRY.match(entry.strip())
    if not m:
        raise FilterError(f"{entry!r} is not 'module:Class [key=value ...]'")
    target = m["target"]
    if ":" in target:
        module, cls = target.split(":")
    else:
        module, _, cls = target.rpartition(".")
        if not module:
            raise FilterError(f"{entry!r} names no module: write 'module:Class'")
    params: dict[str, Any] = {}
    for item in m["params"].split():
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise FilterError(f"{entry!r}: parameter {item!r} is not key=value")
        try:
            params[key] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            params[key] = value
    return module, cls, params


def load_filter(entry: str) -> UrlFilter:
    """Import and build one filter; FilterError with the reason if it cannot be."""
    built: UrlFilter = build(entry, METHOD)
    return built


def build(entry: str, method: str) -> Any:
    """Import and build the object of one filter entry, which must have `method` (given
    as "name(arg, ...)": its name and arguments); FilterError with the reason if not.
    Shared by the URL filters and the parse filters (udfs/core/parsefilters.py)."""
    name, _, args = method.partition("(")
    arity = len([a for a in args.rstrip(")").split(",") if a.strip()])
    module_name, cls_name, params = parse_entry(entry)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module's own error at import
        raise FilterError(f"{entry!r}: cannot import {module_name}: "
                          f"{type(exc).__name__}: {exc}") from None
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise FilterError(f"{entry!r}: module {module_name} has no {cls_name}")
    try:
        instance = cls(**params)
    except Exception as exc:
        raise FilterError(f"{entry!r}: {cls_name}({', '.join(params)}) failed: "
                          f"{type(exc).__name__}: {exc}") from None
    bound = getattr(instance, name, None)
    if not callable(bound) or len(inspect.signature(bound).parameters) != arity:
        raise FilterError(f"{entry!r}: {cls_name} has no method {method}")
    return instance


def load_filters(entries: Sequence[str]) -> list[tuple[str, UrlFilter]]:
    """(name, filter) for each entry, in order; the name is the class's (for metrics)."""
    return build_chain(entries, METHOD)


def check_entries(entries: Sequence[str]) -> str | None:
    """The configuration rule: None if every entry loads, else the first reason."""
    return chain_problem(entries, METHOD)


def build_chain(entries: Sequence[str], method: str) -> list[tuple[str, Any]]:
    """(class name, object) of each entry, in order, each built by `build`."""
    return [(parse_entry(e)[1], build(e, method)) for e in entries]


def chain_problem(entries: Sequence[str], method: str) -> str | None:
    """None if every entry builds, else the first entry's reason (a configuration
    rule: shared by urls.filters and parse.filters)."""
    try:
        build_chain(entries, method)
    except FilterError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Verdict:
    url: str | None  # what to queue; None: dropped
    dropped_by: str | None = None  # the filter's name, when dropped
    error: str | None = None  # "Type: message" when the filter raised


def run_chain(chain: Sequence[tuple[str, UrlFilter]], url: str, link: Link,
              normalize: Any) -> Verdict:
    """Pass `url` through the chain. `normalize(url) -> str | None` re-normalizes a
    rewrite (a rewrite that is not an http(s) URL drops it)."""
    for name, f in chain:
        try:
            out = f.filter(url, link)
        except Exception as exc:  # the filter's bug: drop this URL, keep the crawl
            return Verdict(None, name, f"{type(exc).__name__}: {exc}")
        if out is None:
            return Verdict(None, name)
        if out != url:
            out = normalize(out)
            if out is None:
                return Verdict(None, name)
        url = out
    return Verdict(url)
