"""The user's URL filter chain (udfs/core/urlfilters.py) and its place in the intake."""

from __future__ import annotations

import re
import sys
import textwrap

import pytest

from udfs.config import ConfigError, load_config
from udfs.core.urlfilters import FilterError, Link, load_filters, parse_entry, run_chain
from udfs.core.urls import normalize_url
from udfs.frontier.pipeline import intake

pytestmark = pytest.mark.unit

MODULE = textwrap.dedent('''
    class SkipPaths:
        """Drops URLs whose path contains `pattern`."""
        def __init__(self, pattern="/calendar/"):
            self.pattern = pattern
        def filter(self, url, link):
            return None if self.pattern in url else url

    class MaxDepth:
        def __init__(self, depth=2):
            self.depth = depth
        def filter(self, url, link):
            return url if link.depth <= self.depth else None

    class ToHttps:
        """A rewrite: every URL of http://a.test becomes its https twin, in capitals."""
        def filter(self, url, link):
            return url.replace("http://a.test", "HTTPS://A.TEST") if "a.test" in url else url

    class Broken:
        def filter(self, url, link):
            raise RuntimeError("bug in the filter")

    class NoFilterMethod:
        pass
''')


@pytest.fixture
def userfilters(tmp_path, monkeypatch):
    """A filter module outside this package, importable as `userfilters`."""
    (tmp_path / "userfilters.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "userfilters"
    sys.modules.pop("userfilters", None)


def record(*urls: str, depth: int = 1, source: str = "LINK") -> dict:
    return {"host_key": None, "source": source, "parent_url": "http://p.test/", "depth": depth,
            "redirect_hops": 0, "discovered_at_ms": 0,
            "links": [{"url": u, "lastmod_ms": None, "priority": None, "changefreq": None}
                      for u in urls]}


def test_entry_syntax():
    assert parse_entry("pkg.mod:Cls") == ("pkg.mod", "Cls", {})
    assert parse_entry("pkg.mod.Cls depth=3 pattern=/x/ on=true") == (
        "pkg.mod", "Cls", {"depth": 3, "pattern": "/x/", "on": True})
    for bad in ("Cls", "pkg.mod:Cls depth", "pkg.mod:Cls 3=x", "not a name:X", ""):
        with pytest.raises(FilterError):
            parse_entry(bad)


def test_loading_errors_name_the_entry_and_the_reason(userfilters):
    for entry, reason in (("nowhere_module:X", "cannot import nowhere_module"),
                          ("userfilters:Missing", "has no Missing"),
                          ("userfilters:NoFilterMethod", "no method filter(url, link)"),
                          ("userfilters:SkipPaths colour=red", "SkipPaths(colour) failed")):
        with pytest.raises(FilterError, match=re.escape(reason)):
            load_filters([entry])


def test_a_bad_entry_is_refused_when_the_configuration_is_read(userfilters):
    assert load_config([], overrides=['urls.filters=["userfilters:SkipPaths"]'])[
        "urls.filters"] == ["userfilters:SkipPaths"]
    with pytest.raises(ConfigError, match="urls.filters: 'userfilters:Nope'"):
        load_config([], overrides=['urls.filters=["userfilters:Nope"]'])


def test_chain_drops_rewrites_and_stops_at_the_first_drop(userfilters):
    chain = load_filters(["userfilters:ToHttps", "userfilters:SkipPaths pattern=/cal/",
                          "userfilters:MaxDepth depth=2"])
    link = Link("LINK", None, 1)
    # The rewrite is normalized again before the next filter sees it.
    assert run_chain(chain, "http://a.test/x", link, normalize_url).url == "https://a.test/x"
    dropped = run_chain(chain, "http://b.test/cal/2026", link, normalize_url)
    assert dropped.url is None and dropped.dropped_by == "SkipPaths" and dropped.error is None
    deep = run_chain(chain, "http://b.test/x", Link("LINK", None, 3), normalize_url)
    assert deep.url is None and deep.dropped_by == "MaxDepth"
    assert run_chain(chain, "http://b.test/x", link, normalize_url).url == "http://b.test/x"


def test_a_filter_that_raises_drops_only_that_url(userfilters):
    verdict = run_chain(load_filters(["userfilters:Broken"]), "http://a.test/", Link(
        "SEED", None, 0), normalize_url)
    assert verdict.url is None and verdict.dropped_by == "Broken"
    assert verdict.error == "RuntimeError: bug in the filter"


def test_intake_groups_by_the_host_after_a_rewrite_and_reports_drops(userfilters):
    chain = load_filters(["userfilters:ToHttps", "userfilters:SkipPaths pattern=/cal/"])
    found = intake(record("http://a.test/p", "http://b.test/cal/1", "http://b.test/q",
                          "javascript:void(0)"), filters=chain)
    assert {k: [x["url"] for x in v] for k, v in found.groups.items()} == {
        "https://a.test": ["https://a.test/p"], "http://b.test": ["http://b.test/q"]}
    assert found.filtered == [("http://b.test/cal/1", "SkipPaths", None)]
    assert found.invalid == ["javascript:void(0)"]
    # No chain: nothing filtered, as before.
    plain = intake(record("http://b.test/cal/1"))
    assert plain.filtered == [] and list(plain.groups) == ["http://b.test"]
