"""Sitemaps: the sitemaps.org examples, limits, gzip, malformed and hostile input."""

from __future__ import annotations

import gzip
import time
import zlib
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.core.sitemaps import (
    MAX_BYTES,
    MAX_TEXT_LINE,
    MAX_URLS,
    parse_lastmod,
    parse_sitemap,
)
from udfs.core.urls import UrlPolicy, normalize_url

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
                            b"<priority>2</priority>", b"\n \t", b"\xef\xbb\xbf", b"\xef\xbb"])


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


def test_whitespace_and_bom_before_the_xml_declaration():
    # Blank lines before <?xml ...?> are common on real sites; libxml2 alone refuses them.
    doc = SITEMAPS_ORG_URLSET
    expected = [e.url for e in parse_sitemap(doc).entries]
    bom = b"\xef\xbb\xbf"
    split_bom = b" " * (64 * 1024 - 1) + bom  # the BOM straddles the first chunk boundary
    for lead in (b"\n", b"\r\n\r\n", b" \t\n  ", bom + b"\n", bom + b"\r\n \t",
                 b"\n" + bom + b"\n", b"\n" * 200_000, split_bom + b"\n"):
        for data in (lead + doc, gzip.compress(lead + doc)):
            r = parse_sitemap(data)
            assert r.ok and r.kind == "urlset", (lead[:8], r.errors)
            assert [e.url for e in r.entries] == expected
    # The BOM is still what decides the encoding (libxml2 puts it above the declaration).
    latin = '<?xml version="1.0" encoding="ISO-8859-1"?><urlset><url><loc>http://a.test/é</loc>' \
            "</url></urlset>".encode()
    for data in (bom + latin, bom + b"\n\n" + latin, gzip.compress(bom + b" \n" + latin)):
        assert [e.url for e in parse_sitemap(data).entries] == ["http://a.test/%C3%A9"]
    # A plain-text sitemap with a BOM keeps its first URL too.
    r = parse_sitemap(bom + b"\n http://a.test/1\nhttp://a.test/2")
    assert [e.url for e in r.entries] == ["http://a.test/1", "http://a.test/2"] and r.skipped == 0


def test_leading_whitespace_keeps_the_protections():
    xxe = (b'\n\n<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
           b"<urlset><url><loc>http://a.com/&e;</loc><lastmod>&e;</lastmod></url></urlset>")
    r = parse_sitemap(xxe)
    assert r.entries == [] and "DOCTYPE" in r.errors[0] and all("root:" not in e for e in r.errors)
    small = (b'\xef\xbb\xbf\r\n<!DOCTYPE x [<!ENTITY e "boom">]><urlset>'
             b"<url><loc>http://a.com/&e;</loc></url><url><loc>http://a.com/ok</loc></url></urlset>")
    r = parse_sitemap(small)
    assert [e.url for e in r.entries] == ["http://a.com/ok"] and r.skipped == 1
    # 200 MB of blank lines gzip to ~200 KB: read up to 50 MB, in flat memory, then refused.
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\n" * (1024 * 1024)
    bomb = b"".join([*(comp.compress(block) for _ in range(200)),
                     comp.compress(b"<urlset><url><loc>http://a.com/x</loc></url></urlset>"),
                     comp.flush()])
    start = time.monotonic()
    r = parse_sitemap(bomb)
    assert time.monotonic() - start < 10
    assert r.entries == [] and any("50 MB" in e for e in r.errors)
    assert "empty sitemap" in r.errors


_HEAD = (b'<?xml version="1.0" encoding="UTF-8"?>\n'
         b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n')
_TAIL = b"</urlset>"  # no newline after it: a cut of even one byte breaks the closing tag
_SLUG = b"a-rather-long-product-name-" * 36  # 936 bytes: URLs near 1,000 characters


def _urlset_of_size(total: int) -> Iterator[bytes]:
    """The pieces of a 50,000-URL urlset of exactly `total` bytes.

    Each entry is a ~960-character URL (the protocol allows up to 2,048), a lastmod
    and whitespace padding inside <url>, so 50,000 of them come to 50 MB.
    """
    per, extra = divmod(total - len(_HEAD) - len(_TAIL), MAX_URLS)
    yield _HEAD
    for i in range(MAX_URLS):
        start = b"<url><loc>https://h.example/%05d/%s</loc><lastmod>2024-05-01</lastmod>" % (
            i, _SLUG)
        pad = per - len(start) - len(b"</url>\n") + (i < extra)
        yield start + b" " * pad + b"</url>\n"
    yield _TAIL


def _gzipped(pieces: Iterator[bytes]) -> bytes:
    comp = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join([*(comp.compress(p) for p in pieces), comp.flush()])


def test_a_50_mb_sitemap_is_read_in_full_and_one_byte_more_is_cut():
    # sitemaps.org: 50,000 URLs and 52,428,800 bytes uncompressed per file, both allowed.
    assert MAX_BYTES == 52_428_800 and MAX_URLS == 50_000
    first = "https://h.example/00000/" + _SLUG.decode()
    last = "https://h.example/49999/" + _SLUG.decode()
    at_limit = _gzipped(_urlset_of_size(MAX_BYTES))
    assert len(gzip.decompress(at_limit)) == MAX_BYTES
    plain = b"".join(_urlset_of_size(MAX_BYTES))
    for data in (at_limit, plain):
        r = parse_sitemap(data)
        assert r.ok and r.kind == "urlset" and r.skipped == 0, r.errors
        assert len(r.entries) == MAX_URLS
        assert r.entries[0].url == first and r.entries[-1].url == last
        assert r.entries[-1].lastmod_ms == ms("2024-05-01T00:00:00+00:00")
    del plain
    # One byte over: cut at 52,428,800 bytes, in "</urlset>", with an error that says so
    # (the plain-bytes cut is in test_size_limit_and_gzip_bomb; one parse here is ~1.5 s).
    r = parse_sitemap(_gzipped(_urlset_of_size(MAX_BYTES + 1)))
    assert len(r.entries) == MAX_URLS and r.entries[-1].url == last
    assert any("more than 50 MB uncompressed" in e for e in r.errors)
    assert any("malformed XML" in e for e in r.errors)


def test_url_policy_is_the_callers():
    xml = b"<urlset><url><loc>https://a.test/p?utm_source=x&amp;id=1</loc></url>" \
          b"<url><loc>/q?utm_source=x&amp;id=2</loc></url></urlset>"
    index = b"<sitemapindex><sitemap><loc>https://a.test/p?utm_source=x&amp;id=1</loc>" \
            b"</sitemap><sitemap><loc>/q?utm_source=x&amp;id=2</loc></sitemap></sitemapindex>"
    text = b"https://a.test/p?utm_source=x&id=1\n/q?utm_source=x&id=2\n"
    for data in (xml, gzip.compress(xml), index, text, gzip.compress(text)):
        def urls(policy: UrlPolicy | None, data: bytes = data) -> list[str]:
            r = parse_sitemap(data, base_url="https://a.test/sitemap.xml", url_policy=policy)
            return [e.url for e in r.entries]

        assert urls(UrlPolicy.from_names(["utm_*"])) == ["https://a.test/p?id=1",
                                                         "https://a.test/q?id=2"]
        assert urls(UrlPolicy()) == ["https://a.test/p?utm_source=x&id=1",
                                     "https://a.test/q?utm_source=x&id=2"]
        # No policy: what normalize_url does without one.
        assert urls(None)[0] == normalize_url("https://a.test/p?utm_source=x&id=1")


def test_an_overlong_text_line_is_skipped_in_linear_time():
    long_url = b"http://a.test/" + b"a" * (MAX_TEXT_LINE - 14)
    assert len(long_url) == MAX_TEXT_LINE
    r = parse_sitemap(b"http://a.test/1\n" + long_url + b"\n" + long_url + b"a\nhttp://a.test/2")
    assert [e.url for e in r.entries] == ["http://a.test/1", long_url.decode(), "http://a.test/2"]
    assert r.skipped == 1
    # One 49 MB line (a 50 KB gzip) took 36 s when it was buffered whole; skipped now.
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    data = b"".join([comp.compress(b"http://a.test/1\nhttp://a.test/"),
                     *(comp.compress(b"a" * (1024 * 1024)) for _ in range(49)),
                     comp.compress(b"\nhttp://a.test/2\n"), comp.flush()])
    start = time.monotonic()
    r = parse_sitemap(data)
    assert time.monotonic() - start < 5
    assert [e.url for e in r.entries] == ["http://a.test/1", "http://a.test/2"]
    assert r.skipped == 1 and r.ok
