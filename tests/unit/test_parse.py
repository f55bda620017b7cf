"""HTML parsing: links, base, canonical, robots directives, text, limits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.core.fingerprints import simhash64, text_hash
from udfs.core.parse import group_by_host, parse_html
from udfs.core.urls import UrlPolicy

URL = "http://h.example/dir/page.html"

PAGE = b"""<!DOCTYPE html><html><head><title> A  Title </title>
<link rel="canonical" href="/canonical">
<script>var x = "<a href='/in-script'>";</script><style>a{}</style></head>
<body><p>Hello <b>world</b></p>
<a href="rel">r</a> <a href="/abs#frag">a</a> <a href="/abs">dup</a>
<a href="http://other.example/x?utm_source=y&id=1">o</a>
<a href="javascript:void(0)">j</a> <a href="mailto:a@b.c">m</a>
<a href="/skip" rel="nofollow">nf</a> <area href="/area">
<noscript>no script text</noscript></body></html>"""


def test_links_text_and_canonical():
    p = parse_html(PAGE, URL, url_policy=UrlPolicy.from_names(["utm_*"]))
    assert p.links == ["http://h.example/dir/rel", "http://h.example/abs",
                       "http://other.example/x?id=1", "http://h.example/area"]
    # The drop list is the caller's (urls.drop_query_params): none, nothing dropped.
    assert "http://other.example/x?utm_source=y&id=1" in parse_html(PAGE, URL).links
    assert p.canonical_url == "http://h.example/canonical"
    assert p.title == "A Title"
    assert "Hello world" in p.text and "var x" not in p.text and "no script" not in p.text
    assert p.text_sha256 == text_hash(p.text) and p.simhash == simhash64(p.text)
    assert not p.noindex and not p.nofollow and p.error is None


def test_base_href():
    body = b'<html><head><base href="http://cdn.example/base/"></head><a href="x">x</a></html>'
    assert parse_html(body, URL).links == ["http://cdn.example/base/x"]


def test_meta_robots_and_x_robots_tag():
    meta = b'<html><head><meta name="robots" content="noindex, nofollow"></head>' \
           b'<a href="/x">x</a></html>'
    p = parse_html(meta, URL)
    assert p.noindex and p.nofollow and p.links == []
    none = b'<meta name="ROBOTS" content="none"><a href="/x">x</a>'
    assert parse_html(none, URL).nofollow
    ours = b'<meta name="flinkcrawler" content="nofollow"><a href="/x">x</a>'
    assert parse_html(ours, URL).nofollow
    assert not parse_html(ours, URL, user_agent="OtherBot").nofollow
    body = b'<a href="/x">x</a>'
    assert parse_html(body, URL, headers={"X-Robots-Tag": "noindex"}).noindex
    assert parse_html(body, URL, headers={"x-robots-tag": "flinkcrawler: nofollow"}).nofollow
    assert not parse_html(body, URL, headers={"X-Robots-Tag": "googlebot: noindex"}).noindex


def test_charsets():
    latin = "<p>café</p>".encode("latin-1")
    assert "café" in parse_html(latin, URL, headers={"Content-Type":
                                                     "text/html; charset=ISO-8859-1"}).text
    meta = '<meta charset="windows-1252"><p>naïve</p>'.encode("cp1252")
    assert "naïve" in parse_html(meta, URL).text
    assert "日本" in parse_html("<p>日本</p>".encode(), URL,
                                headers={"Content-Type": "text/html; charset=utf-8"}).text


def test_malformed_html_still_gives_links_and_limits_are_kept():
    broken = b"<html><body><a href='/a'>a<div><a href=/b>b</p></a><table><a href='/c'"
    assert parse_html(broken, URL).links[:2] == ["http://h.example/a", "http://h.example/b"]
    many = b"".join(b'<a href="/p%d">x</a>' % i for i in range(100))
    p = parse_html(many, URL, max_links=10)
    assert len(p.links) == 10 and p.truncated
    big = b"<p>" + b"x" * 1000 + b"</p>" + b'<a href="/late">l</a>'
    p = parse_html(big, URL, max_bytes=500)
    assert p.truncated and p.links == []
    assert parse_html(b"", URL).text == "" and parse_html(b"", URL).links == []


def test_group_by_host():
    groups = group_by_host(["http://a.example/1", "http://b.example/2", "http://a.example/3"])
    assert groups == {"http://a.example": ["http://a.example/1", "http://a.example/3"],
                      "http://b.example": ["http://b.example/2"]}


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.sampled_from([None, "text/html; charset=utf-8",
                                                  "text/html; charset=bogus-enc"]))
def test_never_raises(body, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    p = parse_html(body, URL, headers=headers)
    assert all(link.startswith("http") for link in p.links)
