"""`crawl reparse` on a local store: which records are parsed again, the DiscoveredUrls
records their links become, and the command's arguments (udfs/core/reparse.py,
crawler/reparse.py). No network: the records are written by the WARC writer here."""

from __future__ import annotations

import sys

import pytest

from crawler.cli import main
from crawler.reparse import reparse
from tests.unit.test_warc import T, writer
from udfs.config import load_config
from udfs.core.reparse import Entry, in_window, select
from udfs.storage.warc import Exchange, Fetch
from udfs.wire.avro import registry

HTML = [("Content-Type", "text/html; charset=utf-8")]


def page(links: list[str]) -> bytes:
    return ("<html><body>" + "".join(f'<a href="{u}">x</a>' for u in links)
            + "</body></html>").encode()


def fetch(url: str, lease: str, payload: bytes, status: int = 200, headers=HTML,
          ms: int = T, depth: int | None = 2, **kw) -> Fetch:
    return Fetch(url, lease, 1, 1, ms, Exchange("GET", "/", [("Host", "a.test")], "HTTP/1.1",
                                                status, "OK", headers, payload, **kw),
                 depth=depth)


def settings(tmp_path, *extra: str) -> list[str]:
    return [f"storage.local_dir={tmp_path / 'store'}", f"local.state_dir={tmp_path / 'state'}",
            *extra]


def crawl_store(tmp_path):
    """A crawl's published WARC file: pages with links on two hosts, an older and a newer
    fetch of one page, a copy (revisit), a 304, robots.txt, an image, an error page."""
    store, w = writer(tmp_path)
    w.write(fetch("http://a.test/", "L-1", page(["/1", "/2", "/3", "http://b.test/x"])))
    w.write(fetch("http://a.test/old", "L-2", page(["/gone"]), ms=T))
    w.write(fetch("http://a.test/old", "L-3", page(["/4"]), ms=T + 5000))
    w.write(fetch("http://a.test/copy", "L-4", page(["/1", "/2", "/3", "http://b.test/x"]),
                  depth=5))  # the same payload as L-1: a revisit, parsed as itself
    w.write(fetch("http://a.test/nm", "L-5", b"", status=304))
    w.write(fetch("http://a.test/robots.txt", "L-6", b"User-agent: *\n",
                  headers=[("Content-Type", "text/html")]))
    w.write(fetch("http://a.test/img", "L-7", b"GIF89a", headers=[("Content-Type",
                                                                   "image/gif")]))
    w.write(fetch("http://a.test/err", "L-8", b"", status=500, truncated="unspecified"))
    w.write(fetch("http://a.test/nodepth", "L-9", page(["/5"]), depth=None))
    w.publish()
    return store


def test_reparse_sends_each_pages_links_as_the_fetcher_does(tmp_path):
    store = crawl_store(tmp_path)
    cfg = load_config([], overrides=settings(tmp_path))
    sent: list[tuple[str, dict]] = []
    report = reparse(cfg, store, lambda k, r: sent.append((k, r)), now_ms=42)
    by_parent: dict[str, list[dict]] = {}
    for key, rec in sent:
        assert key == rec["host_key"]
        registry().encode("discovered", rec)  # valid DiscoveredUrls v3
        by_parent.setdefault(rec["parent_url"], []).append(rec)
    assert sorted(by_parent) == ["http://a.test/", "http://a.test/copy", "http://a.test/nodepth",
                                 "http://a.test/old"]
    links = {p: sorted(u["url"] for r in rs for u in r["links"]) for p, rs in by_parent.items()}
    assert links["http://a.test/"] == ["http://a.test/1", "http://a.test/2", "http://a.test/3",
                                       "http://b.test/x"]
    # The newest fetch of a page only; a revisit's links resolve against its own URL.
    assert links["http://a.test/old"] == ["http://a.test/4"]
    assert links["http://a.test/copy"] == links["http://a.test/"]
    home = by_parent["http://a.test/"]
    assert {r["host_key"] for r in home} == {"http://a.test", "http://b.test"}
    assert all(r["source"] == "LINK" and r["depth"] == 3 and r["discovered_at_ms"] == 42
               for r in home)
    assert {r["depth"] for r in by_parent["http://a.test/copy"]} == {6}
    assert {r["depth"] for r in by_parent["http://a.test/nodepth"]} == {1}
    assert (report.selected, report.parsed, report.records, report.no_depth) == (4, 4, 6, 1)
    assert len(report.distinct) == 6
    assert "4 parsed" in report.summary(False, "t") and "1 pages without" in \
        report.summary(False, "t")


def test_a_higher_max_links_finds_the_links_a_crawl_did_not_keep(tmp_path):
    store = crawl_store(tmp_path)
    few = reparse(load_config([], overrides=settings(tmp_path, "parse.max_links=1")),
                  store, None)
    many = reparse(load_config([], overrides=settings(tmp_path)), store, None)
    assert few.links == 4 and many.links == 10
    assert ("http://a.test/", 1, True) in few.pages and ("http://a.test/", 4, False) in \
        many.pages


def test_since_until_and_the_file_filter(tmp_path):
    store = crawl_store(tmp_path)
    cfg = load_config([], overrides=settings(tmp_path))
    # L-3 (5 s after the others, 2025-12-01 05:44:55) alone from 05:44:55 on.
    later = reparse(cfg, store, None, since="20251201054455")
    assert [p[0] for p in later.pages] == ["http://a.test/old"]
    before = reparse(cfg, store, None, until="20251201054454")
    assert "http://a.test/old" in [p[0] for p in before.pages]  # its older fetch
    assert reparse(cfg, store, None, until="20251130").selected == 0
    with pytest.raises(FileNotFoundError, match="no published WARC file X.warc.gz"):
        reparse(cfg, store, None, files=["X.warc.gz"])
    assert in_window("20251201054455", "2025120105", "20251201")
    assert not in_window("20251201054455", "2026", None)


def test_select_takes_the_newest_parseable_record_per_url():
    e = [Entry("http://a/", "20250101000000", "f1", 0, 1, "text/html", "200", "d"),
         Entry("http://a/", "20250102000000", "f1", 5, 1, "text/html", "200", "d"),
         Entry("http://a/", "20250103000000", "f2", 9, 1, "warc/revisit", "304", "-"),
         Entry("http://b/", "20250101000000", "f1", 7, 1, "application/pdf", "200", "d")]
    assert select(e) == [e[1]]


def test_dry_run_sends_nothing_and_bad_arguments_exit_2(tmp_path, capsys):
    crawl_store(tmp_path)
    flags = [a for s in settings(tmp_path) for a in ("--set", s)]
    assert main(["reparse", "--dry-run", *flags]) == 0
    out = capsys.readouterr().out
    assert "http://a.test/  4 links" in out and "would send" in out
    assert main(["reparse", "--dry-run", "--file", "none.warc.gz", *flags]) == 1
    assert "no published WARC file none.warc.gz" in capsys.readouterr().err
    for bad, said in [(["--since", "2025-12"], "--since '2025-12'"),
                      (["--until", "2025120"], "--until '2025120'"),
                      (["--since", "2026", "--until", "2025"], "is after --until"),
                      (["--file", "warc/x.warc.gz"], "without its folder")]:
        assert main(["reparse", *bad, *flags]) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1


REPARSE_FILTERS = '''
from dataclasses import replace

class DropB:
    """Drops links to b.test and adds /from-filter (resolved against the page)."""
    def filter(self, url, parse, page):
        return replace(parse, links=(*[u for u in parse.links if "b.test" not in u],
                                     "/from-filter"))

class FailOnOld:
    def filter(self, url, parse, page):
        if url.endswith("/old"):
            raise KeyError("old")
        return parse
'''


def test_reparse_applies_the_parse_filters(tmp_path, monkeypatch):
    (tmp_path / "reparse_filters.py").write_text(REPARSE_FILTERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    store = crawl_store(tmp_path)
    plain = reparse(load_config([], overrides=settings(tmp_path)), store, None)
    cfg = load_config([], overrides=settings(
        tmp_path, 'parse.filters=["reparse_filters:FailOnOld", "reparse_filters:DropB"]'))
    sent: list[dict] = []
    report = reparse(cfg, store, lambda k, r: sent.append(r))
    links = {}
    for rec in sent:
        links.setdefault(rec["parent_url"], []).extend(u["url"] for u in rec["links"])
    assert "http://b.test/x" in plain.distinct and "http://b.test/x" not in report.distinct
    assert sorted(links["http://a.test/"]) == [
        "http://a.test/1", "http://a.test/2", "http://a.test/3", "http://a.test/from-filter"]
    # FailOnOld raised on /old: DropB did not run there; the page's links still went out.
    assert links["http://a.test/old"] == ["http://a.test/4"]
    assert report.filter_errors == [("http://a.test/old", "FailOnOld", "KeyError: 'old'")]
    assert "a parse filter raised on 1 pages (first: FailOnOld on http://a.test/old" in \
        report.summary(False, "t")
    sys.modules.pop("reparse_filters", None)


def test_reparse_reads_a_page_as_far_as_the_fetchers_parser_does():
    from crawler.reparse import parse_page
    from udfs.core.urls import UrlPolicy

    body = b"<a href='/near'>n</a>" + b" " * 5000 + b"<a href='/far'>f</a>"
    def links(*settings: str) -> list[str]:
        cfg = load_config([], overrides=list(settings))
        return parse_page(body, "http://a.test/", [], cfg, UrlPolicy(()))[0].links

    assert links("parse.max_bytes=4096") == ["http://a.test/near"]  # cut where it says
    assert links() == ["http://a.test/near", "http://a.test/far"]
