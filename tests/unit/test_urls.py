"""URL normalization: WHATWG conformance data, RFC 3986 section 5.4, our own rules, properties."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.config import load_config, load_defaults
from udfs.core.urls import NO_DROPS, UrlPolicy, host_key, normalize_url, split_host_key

DATA = Path(__file__).parent / "data"
WHATWG = json.loads((DATA / "whatwg_http_urls.json").read_text(encoding="utf-8"))
# The drop list of the defaults file, as the jobs build it from their configuration.
CONFIGURED = UrlPolicy.from_names(load_config(env={})["urls.drop_query_params"])
UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def rfc3986_escapes(text: str) -> str:
    """RFC 3986 6.2.2: decode unreserved escapes, upper-case the others (written for the test)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "%" and re.fullmatch(r"[0-9A-Fa-f]{2}", text[i + 1:i + 3]):
            ch = chr(int(text[i + 1:i + 3], 16))
            out.append(ch if ch in UNRESERVED else text[i:i + 3].upper())
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@pytest.mark.parametrize("case", WHATWG, ids=lambda c: repr(c["input"])[:60])
def test_whatwg_url_data(case):
    got = normalize_url(case["input"], case["base"], policy=NO_DROPS)
    expect = case["expect"]
    if expect is None:
        assert got is None, f"{case['kind']}: must be rejected"
        return
    path = rfc3986_escapes(expect["path"]) or "/"
    query = rfc3986_escapes(expect["query"])
    assert got == f"{expect['scheme']}://{expect['host']}{path}{query}"


def test_whatwg_data_covers_each_kind():
    kinds = {c["kind"].split()[0] for c in WHATWG}
    assert {"http", "failure", "other"} <= kinds and len(WHATWG) > 700


RFC3986_BASE = "http://a/b/c/d;p?q"
# RFC 3986 section 5.4.1 (normal) and 5.4.2 (abnormal) examples. Where the RFC's
# answer is not an http URL of its own ("g:h") normalize_url rejects it; a
# fragment is dropped, and an empty path becomes "/".
RFC3986_EXAMPLES = [
    ("g:h", None), ("g", "http://a/b/c/g"), ("./g", "http://a/b/c/g"),
    ("g/", "http://a/b/c/g/"), ("/g", "http://a/g"), ("//g", "http://g/"),
    ("?y", "http://a/b/c/d;p?y"), ("g?y", "http://a/b/c/g?y"), ("#s", "http://a/b/c/d;p?q"),
    ("g#s", "http://a/b/c/g"), ("g?y#s", "http://a/b/c/g?y"), (";x", "http://a/b/c/;x"),
    ("g;x", "http://a/b/c/g;x"), ("g;x?y#s", "http://a/b/c/g;x?y"), ("", "http://a/b/c/d;p?q"),
    (".", "http://a/b/c/"), ("./", "http://a/b/c/"), ("..", "http://a/b/"),
    ("../", "http://a/b/"), ("../g", "http://a/b/g"), ("../..", "http://a/"),
    ("../../", "http://a/"), ("../../g", "http://a/g"),
    # 5.4.2 abnormal examples
    ("../../../g", "http://a/g"), ("../../../../g", "http://a/g"), ("/./g", "http://a/g"),
    ("/../g", "http://a/g"), ("g.", "http://a/b/c/g."), (".g", "http://a/b/c/.g"),
    ("g..", "http://a/b/c/g.."), ("..g", "http://a/b/c/..g"), ("./../g", "http://a/b/g"),
    ("./g/.", "http://a/b/c/g/"), ("g/./h", "http://a/b/c/g/h"), ("g/../h", "http://a/b/c/h"),
    ("g;x=1/./y", "http://a/b/c/g;x=1/y"), ("g;x=1/../y", "http://a/b/c/y"),
    ("g?y/./x", "http://a/b/c/g?y/./x"), ("g?y/../x", "http://a/b/c/g?y/../x"),
    ("g#s/./x", "http://a/b/c/g"), ("g#s/../x", "http://a/b/c/g"),
    # "http:g": RFC 3986 strict parsers give "http:g"; WHATWG (browsers) resolve it
    # against a base of the same special scheme, as the RFC's backward-compatible
    # loophole allows.
    ("http:g", "http://a/b/c/g"),
]


@pytest.mark.parametrize("ref, expect", RFC3986_EXAMPLES)
def test_rfc3986_resolution_examples(ref, expect):
    assert normalize_url(ref, RFC3986_BASE) == expect


@pytest.mark.parametrize("raw, expect", [
    # lower-case scheme and host, default port dropped, userinfo and fragment dropped
    ("HTTP://User:Pw@WWW.Example.COM:80/A#Frag", "http://www.example.com/A"),
    ("https://example.com:443", "https://example.com/"),
    ("https://example.com:8443/", "https://example.com:8443/"),
    # IDN to punycode
    ("http://bücher.example/", "http://xn--bcher-kva.example/"),
    # dot segments, percent-encoding of unreserved characters decoded, others upper-cased
    ("http://example.com/a/./b/../c", "http://example.com/a/c"),
    ("http://example.com/%7Euser/%41%2f%3a", "http://example.com/~user/A%2F%3A"),
    ("http://example.com/a?b=%7e%2f", "http://example.com/a?b=~%2F"),
    ("http://example.com/caf%c3%a9", "http://example.com/caf%C3%A9"),
    ("http://example.com/café", "http://example.com/caf%C3%A9"),
    # query order and repeated keys kept; only the drop list is removed
    ("http://example.com/?b=2&a=1&b=3", "http://example.com/?b=2&a=1&b=3"),
    ("http://example.com/?utm_source=x&id=7&UTM_Medium=y&fbclid=z",
     "http://example.com/?id=7"),
    ("http://example.com/p?gclid=1&PHPSESSID=2", "http://example.com/p"),
    ("http://example.com/p;jsessionid=0123ABC?x=1", "http://example.com/p?x=1"),
    ("http://example.com/p;v=2?x=1", "http://example.com/p;v=2?x=1"),
    ("http://example.com/p?", "http://example.com/p?"),
    ("http://example.com/p?utm_x", "http://example.com/p"),
    # not http(s), or not a URL at all
    ("ftp://example.com/", None), ("javascript:alert(1)", None), ("mailto:a@b.c", None),
    ("", None), ("http://", None), ("http://exa mple.com/", None), ("data:text/html,x", None),
])
def test_our_normalization_rules(raw, expect):
    assert normalize_url(raw, policy=CONFIGURED) == expect


def test_drop_list_comes_from_configuration():
    assert CONFIGURED.drops("utm_campaign") and CONFIGURED.drops("JSESSIONID")
    assert not CONFIGURED.drops("id")
    custom = UrlPolicy.from_names(["ref"])
    assert normalize_url("http://e.com/?ref=1&utm_source=2", policy=custom) == \
        "http://e.com/?utm_source=2"
    # No policy drops nothing: the core reads no configuration file of its own.
    assert normalize_url("http://e.com/?utm_source=2") == "http://e.com/?utm_source=2"


def test_the_core_reads_no_configuration():
    """udfs.core must not import the configuration (it would read the defaults file and
    tie the core to it: the import cycle config -> robots -> urls -> config)."""
    import ast
    import pathlib

    core = pathlib.Path(__file__).resolve().parents[2] / "udfs" / "core"
    for path in core.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "udfs.config", f"{path.name} imports udfs.config"
            if isinstance(node, ast.Import):
                assert all(a.name != "udfs.config" for a in node.names), path.name
    assert load_defaults()["urls"]["drop_query_params"]


def test_non_strings_give_none():
    assert normalize_url(None) is None  # type: ignore[arg-type]
    assert normalize_url("/x", base=5) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("url, key", [
    ("https://Example.com:443/x?y", "https://example.com"),
    ("http://example.com:8080/", "http://example.com:8080"),
    ("http://[::1]:80/", "http://[::1]"),
    ("http://xn--bcher-kva.example/a", "http://xn--bcher-kva.example"),
])
def test_host_key(url, key):
    assert host_key(url) == key
    assert split_host_key(normalize_url(url))[0] == key


@pytest.mark.parametrize("bad", ["ftp://x/", "not a url", "mailto:x@y"])
def test_host_key_rejects(bad):
    with pytest.raises(ValueError):
        host_key(bad)


def test_split_host_key():
    assert split_host_key("http://a.com/p?q=1") == ("http://a.com", "/p?q=1")


@pytest.mark.parametrize("raw, normalized", [
    ("http://a.b/%%41a", "http://a.b/%%41a"),  # not "%Aa": the escape of byte 0xAA
    ("http://a.b/%4%31", "http://a.b/%4%31"),  # not "%41"
    ("http://a.b/%%%41%41", "http://a.b/%%%41A"),
    ("http://a.b/%7e%41%2f%7E", "http://a.b/~A%2F~"),
    ("http://a.b/x?q=%%62c", "http://a.b/x?q=%%62c"),
])
def test_decoding_an_escape_never_makes_another(raw, normalized):
    assert normalize_url(raw) == normalized
    assert normalize_url(normalized) == normalized


URL_ALPHABET = st.sampled_from(list("abcXYZ019-._~!$&'()*+,;=:@/?#[]% ") + [
    "%41", "%7e", "%2F", "%zz", "é", "ü", "\t", "\n", "..", "./", "\\", "utm_a=1", "&"])


@settings(max_examples=400, deadline=None)
@given(scheme=st.sampled_from(["http://", "https://", "HTTP://", "", "//", "ftp://"]),
       host=st.sampled_from(["example.com", "EXAMPLE.com:80", "bücher.de", "[::1]", "1.2.3.4",
                             "a..b", "", "xn--nxasmq6b.com", "user@host.org"]),
       rest=st.lists(URL_ALPHABET, max_size=25).map("".join),
       base=st.sampled_from([None, "http://base.org/a/b?c", "https://x.y/"]))
def test_normalize_is_idempotent_and_never_raises(scheme, host, rest, base):
    once = normalize_url(scheme + host + rest, base)
    if once is not None:
        assert normalize_url(once) == once
        assert once.startswith(("http://", "https://"))
        assert "#" not in once


# The configured drop list: the frontier's intake takes a URL it has passed on before as
# it is (udfs/frontier/pipeline.py, intake), which holds only if normalizing with the
# crawl's policy gives such a URL back unchanged.
DEFAULT_POLICY = UrlPolicy.from_names(load_defaults()["urls"]["drop_query_params"])


@settings(max_examples=400, deadline=None)
@given(scheme=st.sampled_from(["http://", "HTTP://", "https://"]),
       host=st.sampled_from(["example.com", "EXAMPLE.com:80", "bücher.de", "1.2.3.4"]),
       rest=st.lists(st.sampled_from(list("ab/?&=;%.") + [
           "utm_source=x", "utm_", "jsessionid=1", "%75tm_a=1", ";jsessionid=9", "%3B",
           "%41", "%7e", "sid=2", "gclid", "?", "&&"]), max_size=20).map("".join))
def test_normalize_with_the_configured_drops_is_idempotent(scheme, host, rest):
    once = normalize_url(scheme + host + "/" + rest, policy=DEFAULT_POLICY)
    if once is not None:
        assert normalize_url(once, policy=DEFAULT_POLICY) == once


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.one_of(st.none(), st.text(max_size=50)))
def test_arbitrary_text_never_raises(raw, base):
    result = normalize_url(raw, base)
    assert result is None or normalize_url(result) == result
