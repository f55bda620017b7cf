"""The user's parse filter chain (udfs/core/parsefilters.py): loading, order, what a
filter's result changes, a filter that raises, and `crawl reparse` applying it."""

from __future__ import annotations

import re
import sys
import textwrap

import pytest

from udfs.config import ConfigError, load_config
from udfs.core.fingerprints import simhash64, text_hash
from udfs.core.parse import parse_html
from udfs.core.parsefilters import (
    FilterError,
    Page,
    Parse,
    apply_chain,
    filter_names,
    load_filters,
)
from udfs.core.urls import UrlPolicy

pytestmark = pytest.mark.unit

MODULE = textwrap.dedent('''
    from dataclasses import replace

    class DropLinks:
        """Drops links containing `pattern`."""
        def __init__(self, pattern="/print/"):
            self.pattern = pattern
        def filter(self, url, parse, page):
            return replace(parse, links=tuple(u for u in parse.links
                                              if self.pattern not in u))

    class AddLink:
        """Adds a link (relative, with a tracking parameter) and records the links it saw."""
        seen = []
        def __init__(self, href="/added?utm_source=x"):
            self.href = href
        def filter(self, url, parse, page):
            AddLink.seen.append(parse.links)
            return replace(parse, links=(*parse.links, self.href, "mailto:a@b.test"))

    class StripBoilerplate:
        """Removes the text after 'Footer', and marks pages with an X-Noindex header."""
        def filter(self, url, parse, page):
            noindex = parse.noindex or any(k.lower() == "x-noindex" for k, _ in page.headers)
            return replace(parse, text=parse.text.split("Footer")[0].strip(),
                           noindex=noindex)

    class NoFollowIfBody:
        """nofollow on pages whose body mentions `word`."""
        def __init__(self, word):
            self.word = word.encode()
        def filter(self, url, parse, page):
            return replace(parse, nofollow=self.word in page.body)

    class Broken:
        def filter(self, url, parse, page):
            raise RuntimeError("bug in the filter")

    class ReturnsNone:
        def filter(self, url, parse, page):
            return None

    class UrlFilterShape:
        def filter(self, url, link):
            return url
''')

HTML = b"""<html><head><title>T</title></head><body>
<a href="/a">a</a><a href="/print/a">print</a><a href="http://b.test/x">b</a>
<p>Main text.</p><p>Footer: links and legal</p></body></html>"""
URL = "http://a.test/page"
HEADERS = (("Content-Type", "text/html"),)
POLICY = UrlPolicy.from_names(["utm_*"])


@pytest.fixture
def userfilters(tmp_path, monkeypatch):
    """A filter module outside this package, importable as `userparsefilters`."""
    (tmp_path / "userparsefilters.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "userparsefilters"
    sys.modules.pop("userparsefilters", None)


def parsed(body: bytes = HTML):
    return parse_html(body, URL, headers=dict(HEADERS), url_policy=POLICY)


def run(entries, page=None, headers=HEADERS, body=HTML, max_links=5000):
    page = page or parsed(body)
    failure = apply_chain(load_filters(entries), URL, page, Page(headers, body), POLICY,
                          max_links)
    return page, failure


def test_loading_errors_name_the_entry_and_the_reason(userfilters):
    for entry, reason in (("nowhere_module:X", "cannot import nowhere_module"),
                          ("userparsefilters:Missing", "has no Missing"),
                          ("userparsefilters:UrlFilterShape",
                           "no method filter(url, parse, page)"),
                          ("userparsefilters:DropLinks colour=red", "DropLinks(colour) failed"),
                          ("userparsefilters:NoFollowIfBody", "NoFollowIfBody() failed"),
                          ("userparsefilters:DropLinks pattern", "is not key=value")):
        with pytest.raises(FilterError, match=re.escape(reason)):
            load_filters([entry])
    chain = load_filters(["userparsefilters:DropLinks pattern=/x/",
                          "userparsefilters.AddLink"])
    assert [name for name, _ in chain] == ["DropLinks", "AddLink"]
    assert chain[0][1].pattern == "/x/"
    assert filter_names(["m:A", "m:B x=1", "m:A x=2"]) == ["A", "B"]


def test_a_bad_entry_is_refused_when_the_configuration_is_read(userfilters):
    assert load_config([], overrides=['parse.filters=["userparsefilters:DropLinks"]'])[
        "parse.filters"] == ["userparsefilters:DropLinks"]
    assert load_config([], overrides=[])["parse.filters"] == []
    with pytest.raises(ConfigError, match="parse.filters: 'userparsefilters:Nope'"):
        load_config([], overrides=['parse.filters=["userparsefilters:Nope"]'])
    with pytest.raises(ConfigError, match="no method filter"):
        load_config([], overrides=['parse.filters=["userparsefilters:UrlFilterShape"]'])


def test_an_empty_chain_changes_nothing():
    page, failure = run([])
    assert failure is None and page == parsed()


def test_filters_run_in_order_and_added_links_are_normalized(userfilters):
    chain = load_filters(["userparsefilters:DropLinks", "userparsefilters:AddLink"])
    page = parsed()
    assert apply_chain(chain, URL, page, Page(HEADERS, HTML), POLICY) is None
    # AddLink saw DropLinks' result; its relative link was resolved and its tracking
    # parameter dropped; the mailto: link is not an http(s) URL.
    assert chain[1][1].seen == [("http://a.test/a", "http://b.test/x")]
    assert page.links == ["http://a.test/a", "http://b.test/x", "http://a.test/added"]
    # The other order: DropLinks sees AddLink's link too.
    page, _ = run(["userparsefilters:AddLink href=/print/new", "userparsefilters:DropLinks"])
    assert page.links == ["http://a.test/a", "http://b.test/x"]


def test_added_links_are_deduplicated_and_cut_at_max_links(userfilters):
    page, failure = run(["userparsefilters:AddLink href=/a"])
    assert failure is None and page.links.count("http://a.test/a") == 1
    assert not page.truncated
    page, _ = run(["userparsefilters:AddLink href=/z"], max_links=3)
    assert page.links == ["http://a.test/a", "http://a.test/print/a", "http://b.test/x"]
    assert page.truncated


def test_a_text_rewrite_changes_the_hashes_and_headers_are_seen(userfilters):
    before = parsed()
    page, failure = run(["userparsefilters:StripBoilerplate"],
                        headers=(*HEADERS, ("X-Noindex", "1")))
    assert failure is None
    assert page.text == "a print b Main text."
    assert page.text_sha256 == text_hash("a print b Main text.") != before.text_sha256
    assert page.simhash == simhash64("a print b Main text.")
    assert page.noindex and not before.noindex
    assert page.links == before.links and page.title == "T"


def test_nofollow_from_a_filter_sends_no_links(userfilters):
    page, _ = run(["userparsefilters:NoFollowIfBody word=legal"])
    assert page.nofollow and page.links == []
    page, _ = run(["userparsefilters:NoFollowIfBody word=absent"])
    assert not page.nofollow and len(page.links) == 3


def test_a_filter_that_raises_keeps_what_the_filters_before_it_returned(userfilters):
    before = parsed()
    page, failure = run(["userparsefilters:DropLinks", "userparsefilters:Broken",
                         "userparsefilters:AddLink"])
    assert failure == ("Broken", "RuntimeError: bug in the filter")
    # DropLinks' work stays; AddLink, after the failure, did not run.
    assert page.links == ["http://a.test/a", "http://b.test/x"]
    assert page.text_sha256 == before.text_sha256
    page, failure = run(["userparsefilters:ReturnsNone", "userparsefilters:DropLinks"])
    assert failure == ("ReturnsNone", "TypeError: filter returned NoneType, not a Parse")
    assert page.links == before.links  # parse_html's result: the first filter failed


def test_a_memory_error_in_a_filter_is_the_parsers_memory_limit():
    class Hungry:
        def filter(self, url, parse, page):
            raise MemoryError

    with pytest.raises(MemoryError):
        apply_chain([("Hungry", Hungry())], URL, parsed(), Page(HEADERS, HTML))


def test_a_changed_canonical_url_is_normalized():
    class Canon:
        def __init__(self, to):
            self.to = to

        def filter(self, url, parse: Parse, page):
            from dataclasses import replace
            return replace(parse, canonical_url=self.to)

    page = parsed()
    assert apply_chain([("Canon", Canon("/c?utm_source=x"))], URL, page,
                       Page(HEADERS, HTML), POLICY) is None
    assert page.canonical_url == "http://a.test/c"
    page = parsed()
    apply_chain([("Canon", Canon("javascript:x"))], URL, page, Page(HEADERS, HTML), POLICY)
    assert page.canonical_url is None
