"""Sitemaps: the sitemaps.org examples, limits, gzip, malformed and hostile input."""

from __future__ import annotations

import gzip
import time
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.core.sitemaps import MAX_BYTES, MAX_URLS, parse_lastmod, parse_sitemap

# The urlset and sitemap index examples of sitemaps.org's protocol page.
SITEMAPS_ORG_URLSET = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
   <url>
      <loc>http://www.example.com/</loc>
      <lastmod>2005-01-01</lastmod>
      <changefreq>monthly</changefreq>
      <priority>0.8</priority>
   </url>
   <url>
      <loc>http://www.example.com/catalog?item=12&amp;desc=vacation_hawaii</loc>
      <changefreq>weekly</changefreq>
   </url>
   <url>
      <loc>http://www.example.com/catalog?item=73&amp;desc=vacation_new_zealand</loc>
      <lastmod>2004-12-23</lastmod>
      <changefreq>weekly</changefreq>
   </url>
   <url>
      <loc>http://www.example.com/catalog?item=74&amp;desc=vacation_newfoundland</loc>
      <lastmod>2004-12-23T18:00:15+00:00</lastmod>
      <priority>0.3</priority>
   </url>
   <url>
      <loc>http://www.example.com/catalog?item=83&amp;desc=vacation_usa</loc>
      <lastmod>2004-11-23</lastmod>
   </url>
</urlset>
"""

SITEMAPS_ORG_INDEX = b"""<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
   <sitemap>
      <loc>http://www.example.com/sitemap1.xml.gz</loc>
      <lastmod>2004-10-01T18:23:17+00:00</lastmod>
   </sitemap>
   <sitemap>
      <loc>http://www.example.com/sitemap2.xml.gz</loc>
      <lastmod>2005-01-01</lastmod>
   </sitemap>
</sitemapindex>
"""


def ms(iso: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def test_sitemaps_org_urlset():
    r = parse_sitemap(SITEMAPS_ORG_URLSET)
    assert r.ok and r.kind == "urlset" and r.skipped == 0
    assert [e.url for e in r.entries] == [
        "http://www.example.com/",
        "http://www.example.com/catalog?item=12&desc=vacation_hawaii",
        "http://www.example.com/catalog?item=73&desc=vacation_new_zealand",
        "http://www.example.com/catalog?item=74&desc=vacation_newfoundland",
        "http://www.example.com/catalog?item=83&desc=vacation_usa",
    ]
    assert [e.lastmod_ms for e in r.entries] == [
        ms("2005-01-01T00:00:00+00:00"), None, ms("2004-12-23T00:00:00+00:00"),
        ms("2004-12-23T18:00:15+00:00"), ms("2004-11-23T00:00:00+00:00")]
    assert [e.priority for e in r.entries] == [0.8, None, None, 0.3, None]
    assert [e.changefreq for e in r.entries] == ["monthly", "weekly", "weekly", None, None]


def test_sitemaps_org_index_and_gzip():
    for data in (SITEMAPS_ORG_INDEX, gzip.compress(SITEMAPS_ORG_INDEX)):
        r = parse_sitemap(data)
        assert r.ok and r.kind == "sitemapindex"
        assert [(e.url, e.lastmod_ms) for e in r.entries] == [
            ("http://www.example.com/sitemap1.xml.gz", ms("2004-10-01T18:23:17+00:00")),
            ("http://www.example.com/sitemap2.xml.gz", ms("2005-01-01T00:00:00+00:00"))]
    assert len(parse_sitemap(gzip.compress(SITEMAPS_ORG_URLSET)).entries) == 5


def test_plain_text_sitemap():
    text = b"http://www.example.com/a\r\n\nhttp://www.example.com/b\nnot a url\nftp://x/y\n" \
           b"http://www.example.com/c"
    r = parse_sitemap(text)
    assert r.kind == "text" and r.ok
    assert [e.url for e in r.entries] == [
        "http://www.example.com/a", "http://www.example.com/b", "http://www.example.com/c"]
    assert r.skipped == 2


def test_relative_locs_bom_and_same_host_filter():
    data = "\ufeff<urlset><url><loc> /a </loc></url><url><loc>http://other.org/b</loc></url>" \
           "<url><loc>https://h.example/c</loc></url></urlset>".encode()
    r = parse_sitemap(data, base_url="https://h.example/sitemap.xml", same_host="https://h.example")
    assert [e.url for e in r.entries] == ["https://h.example/a", "https://h.example/c"]
    assert r.skipped == 1


def test_url_limit_per_file():
    body = b"".join(b"<url><loc>http://h.example/p%d</loc></url>" % i
                    for i in range(MAX_URLS + 5))
    r = parse_sitemap(b"<urlset>" + body + b"</urlset>")
    assert len(r.entries) == MAX_URLS and r.entries[-1].url == f"http://h.example/p{MAX_URLS - 1}"
    assert any("50,000" in e for e in r.errors)
    text = b"\n".join(b"http://h.example/t%d" % i for i in range(MAX_URLS + 1))
    assert len(parse_sitemap(text).entries) == MAX_URLS


def test_size_limit_and_gzip_bomb():
    # 200 MB of XML gzips to well under 1 MB; only the first 50 MB is read.
    filler = b"<ext>" + b"a" * 1000 + b"</ext>"
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [comp.compress(b"<urlset><url><loc>http://h.example/first</loc></url>")]
    block = filler * 1024
    parts += [comp.compress(block) for _ in range(200)]
    parts.append(comp.compress(b"<url><loc>http://h.example/late</loc></url></urlset>"))
    parts.append(comp.flush())
    bomb = b"".join(parts)
    assert len(bomb) < 1024 * 1024
    start = time.monotonic()
    r = parse_sitemap(bomb)
    assert time.monotonic() - start < 30
    assert [e.url for e in r.entries] == ["http://h.example/first"]
    assert any("50 MB" in e for e in r.errors)
    plain = b"<urlset><url><loc>http://h.example/x</loc></url>" + filler * (MAX_BYTES // 1011 + 100)
    r = parse_sitemap(plain + b"<url><loc>http://h.example/y</loc></url></urlset>")
    assert [e.url for e in r.entries] == ["http://h.example/x"]
    assert any("50 MB" in e for e in r.errors)


def test_malformed_xml_keeps_what_was_read():
    data = SITEMAPS_ORG_URLSET[:SITEMAPS_ORG_URLSET.index(b"item=74") + 20]
    r = parse_sitemap(data)
    assert len(r.entries) == 3 and r.errors and "malformed XML" in r.errors[0]
    r = parse_sitemap(b"<urlset><url><loc>http://a.com/1</loc></url><url><loc>http://a.com/2<")
    assert [e.url for e in r.entries] == ["http://a.com/1"] and r.errors
    assert parse_sitemap(b"<html><body>hi</body></html>").errors
    assert parse_sitemap(b"").errors and parse_sitemap(b"   \n").errors
    assert parse_sitemap(b"\x1f\x8b\x08garbage").errors
    assert parse_sitemap(gzip.compress(SITEMAPS_ORG_URLSET)[:-30]).errors
    assert parse_sitemap("text").errors  # type: ignore[arg-type]


def test_billion_laughs_and_external_entities_are_not_expanded():
    entities = b"".join(
        b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
        for i in range(1, 10))
    laughs = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">' + entities +
              b"]><urlset><url><loc>http://a.com/&lol9;</loc></url>"
              b"<url><loc>http://a.com/ok</loc></url></urlset>")
    start = time.monotonic()
    r = parse_sitemap(laughs)
    # Refused or left unexpanded, quickly, and never a URL built from the entity.
    assert time.monotonic() - start < 2
    assert r.errors and all("lol" not in e.url for e in r.entries)
    small = (b'<!DOCTYPE x [<!ENTITY e "boom">]><urlset><url><loc>http://a.com/&e;</loc></url>'
             b"<url><loc>http://a.com/ok</loc></url></urlset>")
    r = parse_sitemap(small)
    assert [e.url for e in r.entries] == ["http://a.com/ok"] and r.skipped == 1
    assert "DOCTYPE" in r.errors[0]
    xxe = (b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
           b"<urlset><url><loc>http://a.com/&e;</loc></url></urlset>")
    r = parse_sitemap(xxe)
    assert r.entries == [] and all("root:" not in e for e in r.errors)


def test_lastmod_formats():
    assert parse_lastmod("2005") == ms("2005-01-01T00:00:00+00:00")
    assert parse_lastmod("2005-02") == ms("2005-02-01T00:00:00+00:00")
    assert parse_lastmod("2005-02-03T04:05+02:00") == ms("2005-02-03T04:05:00+02:00")
    assert parse_lastmod("2005-02-03T04:05:06.5Z") == ms("2005-02-03T04:05:06.500000+00:00")
    assert parse_lastmod("2005-02-03T04:05:06-0530") == ms("2005-02-03T04:05:06-05:30")
    for bad in (None, "", "yesterday", "2005-13-01", "2005-02-30", "05-01-01"):
        assert parse_lastmod(bad) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000))
def test_never_raises_on_bytes(data):
    r = parse_sitemap(data)
    assert r.kind in ("urlset", "sitemapindex", "text", "unknown")


XML_BITS = st.sampled_from([b"<urlset>", b"</urlset>", b"<url>", b"</url>", b"<loc>", b"</loc>",
                            b"http://a.com/x", b"<lastmod>2005-01-01</lastmod>", b"&amp;", b"&x;",
                            b"<sitemapindex>", b"<sitemap>", b"<!DOCTYPE a>", b"\x00", b"<![CDATA[",
                            b"]]>", b"<?xml version='1.0'?>", b"\xff\xfe",
                            b"<priority>2</priority>"])


@settings(max_examples=300, deadline=None)
@given(st.lists(XML_BITS, max_size=40).map(b"".join), st.booleans())
def test_never_raises_on_sitemap_like_bytes(data, zipped):
    r = parse_sitemap(gzip.compress(data) if zipped else data)
    assert all(e.url.startswith("http") for e in r.entries)
    assert all(e.priority is None or 0 <= e.priority <= 1 for e in r.entries)


def test_extensions_nested_in_an_entry_do_not_replace_its_loc():
    data = (b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
            b'xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">'
            b"<url><image:image><image:loc>http://a.com/i.jpg</image:loc></image:image>"
            b"<loc>http://a.com/page</loc></url></urlset>")
    r = parse_sitemap(data)
    assert r.ok and [e.url for e in r.entries] == ["http://a.com/page"]
