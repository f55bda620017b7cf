"""robots.txt conformance: RFC 9309's examples and Google's robotstxt test cases.

Google's cases come from google/robotstxt's robots_test.cc, converted by hand
into (robots.txt, user agent, URL, expected) rows; each row names its test.
Three of Google's expectations contradict RFC 9309 2.2.2 (octets outside
US-ASCII and %-encoded unreserved characters compare equal to their other
form): we follow the RFC there and assert the RFC's answer (DEVIATIONS below).
"""

from __future__ import annotations

import pytest

from udfs.core.robots import encode_path, is_allowed, parse_robots, path_of, valid_user_agent

FOOBOT_DISALLOW_ALL = "user-agent: FooBot\ndisallow: /\n"
GROUPS = (
    "allow: /foo/bar/\n\nuser-agent: FooBot\ndisallow: /\nallow: /x/\nuser-agent: BarBot\n"
    "disallow: /\nallow: /y/\n\n\nallow: /w/\nuser-agent: BazBot\n\nuser-agent: FooBot\n"
    "allow: /z/\ndisallow: /\n")
CASE_UPPER = "USER-AGENT: FooBot\nALLOW: /x/\nDISALLOW: /\n"
CASE_LOWER = "user-agent: FooBot\nallow: /x/\ndisallow: /\n"
CASE_CAMEL = "uSeR-aGeNt: FooBot\nAlLoW: /x/\ndIsAlLoW: /\n"
UA_UPPER = "User-Agent: FOO BAR\nAllow: /x/\nDisallow: /\n"
UA_LOWER = "User-Agent: foo bar\nAllow: /x/\nDisallow: /\n"
UA_CAMEL = "User-Agent: FoO bAr\nAllow: /x/\nDisallow: /\n"
GLOBAL = "user-agent: *\nallow: /\nuser-agent: FooBot\ndisallow: /\n"
ONLY_SPECIFIC = ("user-agent: FooBot\nallow: /\nuser-agent: BarBot\ndisallow: /\n"
                 "user-agent: BazBot\ndisallow: /\n")
XY = "http://foo.bar/x/y"
PAGE = "http://foo.bar/x/page.html"


def doc(allow: str) -> str:
    return f"user-agent: FooBot\ndisallow: /\nallow: {allow}\n"


def long_line_cases() -> list[tuple]:
    max_line = 2083 * 8
    robots = "user-agent: FooBot\n"
    longline = "/x/"
    while len(longline) < max_line - len(longline[:3]) - len("disallow: ") + 1:
        longline += "a"
    robots += f"disallow: {longline}/qux\n"
    rows = [("LineTooLong", robots, "FooBot", "http://foo.bar/fux", True),
            ("LineTooLong", robots, "FooBot", f"http://foo.bar{longline}/fux", False)]
    robots = "user-agent: FooBot\ndisallow: /\n"
    a, b = "/x/", "/x/"
    while len(a) < max_line - 3 - len("allow: ") + 1:
        a += "a"
        b += "b"
    robots += f"allow: {a}/qux\nallow: {b}/qux\n"
    rows += [("LineTooLong", robots, "FooBot", "http://foo.bar/", False),
             ("LineTooLong", robots, "FooBot", f"http://foo.bar{a}/qux", True),
             ("LineTooLong", robots, "FooBot", f"http://foo.bar{b}/fux", True)]
    return rows


GOOGLE_CASES = [
    ("SystemTest", "", "FooBot", "", True),
    ("SystemTest", FOOBOT_DISALLOW_ALL, "", "", True),
    ("SystemTest", FOOBOT_DISALLOW_ALL, "FooBot", "", False),
    ("SystemTest", "", "", "", True),
    ("LineSyntax_Line", "user-agent: FooBot\ndisallow: /\n", "FooBot", XY, False),
    ("LineSyntax_Line", "foo: FooBot\nbar: /\n", "FooBot", XY, True),
    ("LineSyntax_Line", "user-agent FooBot\ndisallow /\n", "FooBot", XY, False),
    ("LineSyntax_Groups", GROUPS, "FooBot", "http://foo.bar/x/b", True),
    ("LineSyntax_Groups", GROUPS, "FooBot", "http://foo.bar/z/d", True),
    ("LineSyntax_Groups", GROUPS, "FooBot", "http://foo.bar/y/c", False),
    ("LineSyntax_Groups", GROUPS, "BarBot", "http://foo.bar/y/c", True),
    ("LineSyntax_Groups", GROUPS, "BarBot", "http://foo.bar/w/a", True),
    ("LineSyntax_Groups", GROUPS, "BarBot", "http://foo.bar/z/d", False),
    ("LineSyntax_Groups", GROUPS, "BazBot", "http://foo.bar/z/d", True),
    ("LineSyntax_Groups", GROUPS, "FooBot", "http://foo.bar/foo/bar/", False),
    ("LineSyntax_Groups", GROUPS, "BarBot", "http://foo.bar/foo/bar/", False),
    ("LineSyntax_Groups", GROUPS, "BazBot", "http://foo.bar/foo/bar/", False),
]
for robots in ("User-agent: BarBot\nSitemap: https://foo.bar/sitemap\nUser-agent: *\nDisallow: /\n",
               "User-agent: FooBot\nInvalid-Unknown-Line: unknown\nUser-agent: *\nDisallow: /\n"):
    GOOGLE_CASES += [("Groups_OtherRules", robots, "FooBot", "http://foo.bar/", False),
                     ("Groups_OtherRules", robots, "BarBot", "http://foo.bar/", False)]
for robots in (CASE_UPPER, CASE_LOWER, CASE_CAMEL):
    GOOGLE_CASES += [("REPLineNamesCaseInsensitive", robots, "FooBot", XY, True),
                     ("REPLineNamesCaseInsensitive", robots, "FooBot", "http://foo.bar/a/b", False)]
for agent in ("Foo", "foo"):
    for robots in (UA_UPPER, UA_LOWER, UA_CAMEL):
        GOOGLE_CASES += [("UserAgentValueCaseInsensitive", robots, agent, XY, True),
                         ("UserAgentValueCaseInsensitive", robots, agent,
                          "http://foo.bar/a/b", False)]
UP_TO_SPACE = "User-Agent: *\nDisallow: /\nUser-Agent: Foo Bar\nAllow: /x/\nDisallow: /\n"
GOOGLE_CASES += [
    ("AcceptUserAgentUpToFirstSpace", UP_TO_SPACE, "Foo", XY, True),
    ("AcceptUserAgentUpToFirstSpace", UP_TO_SPACE, "Foo Bar", XY, False),
    ("GlobalGroups_Secondary", "", "FooBot", XY, True),
    ("GlobalGroups_Secondary", GLOBAL, "FooBot", XY, False),
    ("GlobalGroups_Secondary", GLOBAL, "BarBot", XY, True),
    ("GlobalGroups_Secondary", ONLY_SPECIFIC, "QuxBot", XY, True),
    ("AllowDisallow_Value_CaseSensitive", "user-agent: FooBot\ndisallow: /x/\n", "FooBot", XY,
     False),
    ("AllowDisallow_Value_CaseSensitive", "user-agent: FooBot\ndisallow: /X/\n", "FooBot", XY,
     True),
    ("LongestMatch", "user-agent: FooBot\ndisallow: /x/page.html\nallow: /x/\n", "FooBot", PAGE,
     False),
    ("LongestMatch", "user-agent: FooBot\nallow: /x/page.html\ndisallow: /x/\n", "FooBot", PAGE,
     True),
    ("LongestMatch", "user-agent: FooBot\nallow: /x/page.html\ndisallow: /x/\n", "FooBot",
     "http://foo.bar/x/", False),
    ("LongestMatch", "user-agent: FooBot\ndisallow: \nallow: \n", "FooBot", PAGE, True),
    ("LongestMatch", "user-agent: FooBot\ndisallow: /\nallow: /\n", "FooBot", PAGE, True),
    ("LongestMatch", "user-agent: FooBot\ndisallow: /x\nallow: /x/\n", "FooBot",
     "http://foo.bar/x", False),
    ("LongestMatch", "user-agent: FooBot\ndisallow: /x\nallow: /x/\n", "FooBot",
     "http://foo.bar/x/", True),
    ("LongestMatch", "user-agent: FooBot\ndisallow: /x/page.html\nallow: /x/page.html\n",
     "FooBot", PAGE, True),
    ("LongestMatch", "user-agent: FooBot\nallow: /page\ndisallow: /*.html\n", "FooBot",
     "http://foo.bar/page.html", False),
    ("LongestMatch", "user-agent: FooBot\nallow: /page\ndisallow: /*.html\n", "FooBot",
     "http://foo.bar/page", True),
    ("LongestMatch", "user-agent: FooBot\nallow: /x/page.\ndisallow: /*.html\n", "FooBot", PAGE,
     True),
    ("LongestMatch", "user-agent: FooBot\nallow: /x/page.\ndisallow: /*.html\n", "FooBot",
     "http://foo.bar/x/y.html", False),
    ("LongestMatch", "User-agent: *\nDisallow: /x/\nUser-agent: FooBot\nDisallow: /y/\n",
     "FooBot", "http://foo.bar/x/page", True),
    ("LongestMatch", "User-agent: *\nDisallow: /x/\nUser-agent: FooBot\nDisallow: /y/\n",
     "FooBot", "http://foo.bar/y/page", False),
    ("Encoding", "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar?qux=taz&baz=http://foo.bar?tar&par\n",
     "FooBot", "http://foo.bar/foo/bar?qux=taz&baz=http://foo.bar?tar&par", True),
    ("Encoding", "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/ツ\n", "FooBot",
     "http://foo.bar/foo/bar/%E3%83%84", True),
    ("Encoding", "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/ツ\n", "FooBot",
     "http://foo.bar/foo/bar/ツ", False),
    ("Encoding", "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/%E3%83%84\n", "FooBot",
     "http://foo.bar/foo/bar/%E3%83%84", True),
    ("Encoding", "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/%E3%83%84\n", "FooBot",
     "http://foo.bar/foo/bar/ツ", False),
    ("Encoding", "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/%62%61%7A\n", "FooBot",
     "http://foo.bar/foo/bar/baz", False),
    ("Encoding", "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/%62%61%7A\n", "FooBot",
     "http://foo.bar/foo/bar/%62%61%7A", True),
]
SPECIAL_1 = "User-agent: FooBot\nDisallow: /foo/bar/quz\nAllow: /foo/*/qux\n"
SPECIAL_2 = "User-agent: FooBot\nDisallow: /foo/bar$\nAllow: /foo/bar/qux\n"
SPECIAL_3 = "User-agent: FooBot\n# Disallow: /\nDisallow: /foo/quz#qux\nAllow: /\n"
INDEX = "User-Agent: *\nAllow: /allowed-slash/index.html\nDisallow: /\n"
GOOGLE_CASES += [
    ("SpecialCharacters", SPECIAL_1, "FooBot", "http://foo.bar/foo/bar/quz", False),
    ("SpecialCharacters", SPECIAL_1, "FooBot", "http://foo.bar/foo/quz", True),
    ("SpecialCharacters", SPECIAL_1, "FooBot", "http://foo.bar/foo//quz", True),
    ("SpecialCharacters", SPECIAL_1, "FooBot", "http://foo.bar/foo/bax/quz", True),
    ("SpecialCharacters", SPECIAL_2, "FooBot", "http://foo.bar/foo/bar", False),
    ("SpecialCharacters", SPECIAL_2, "FooBot", "http://foo.bar/foo/bar/qux", True),
    ("SpecialCharacters", SPECIAL_2, "FooBot", "http://foo.bar/foo/bar/", True),
    ("SpecialCharacters", SPECIAL_2, "FooBot", "http://foo.bar/foo/bar/baz", True),
    ("SpecialCharacters", SPECIAL_3, "FooBot", "http://foo.bar/foo/bar", True),
    ("SpecialCharacters", SPECIAL_3, "FooBot", "http://foo.bar/foo/quz", False),
    ("IndexHTMLisDirectory", INDEX, "foobot", "http://foo.com/allowed-slash/", True),
    ("IndexHTMLisDirectory", INDEX, "foobot", "http://foo.com/allowed-slash/index.htm", False),
    ("IndexHTMLisDirectory", INDEX, "foobot", "http://foo.com/allowed-slash/index.html", True),
    ("IndexHTMLisDirectory", INDEX, "foobot", "http://foo.com/anyother-url", False),
    *long_line_cases(),
]
DOC_CHECKS = {
    "/fish": ({"/fish", "/fish.html", "/fish/salmon.html", "/fishheads", "/fishheads/yummy.html",
               "/fish.html?id=anything"}, {"/bar", "/Fish.asp", "/catfish", "/?id=fish"}),
    "/fish*": ({"/fish", "/fish.html", "/fish/salmon.html", "/fishheads", "/fishheads/yummy.html",
                "/fish.html?id=anything"}, {"/bar", "/Fish.bar", "/catfish", "/?id=fish"}),
    "/fish/": ({"/fish/", "/fish/salmon", "/fish/?salmon", "/fish/salmon.html",
                "/fish/?id=anything"}, {"/bar", "/fish", "/fish.html", "/Fish/Salmon.html"}),
    "/*.php": ({"/filename.php", "/folder/filename.php", "/folder/filename.php?parameters",
                "//folder/any.php.file.html", "/filename.php/", "/index?f=filename.php/"},
               {"/bar", "/php/", "/index?php", "/windows.PHP"}),
    "/*.php$": ({"/filename.php", "/folder/filename.php"},
                {"/bar", "/filename.php?parameters", "/filename.php/", "/filename.php5", "/php/",
                 "/filename?php", "/aaaphpaaa", "//windows.PHP"}),
    "/fish*.php": ({"/fish.php", "/fishheads/catfish.php?parameters"}, {"/bar", "/Fish.PHP"}),
}
for pattern, (allowed, denied) in DOC_CHECKS.items():
    GOOGLE_CASES += [("DocumentationChecks", doc(pattern), "FooBot", f"http://foo.bar{p}", True)
                     for p in sorted(allowed)]
    GOOGLE_CASES += [("DocumentationChecks", doc(pattern), "FooBot", f"http://foo.bar{p}", False)
                     for p in sorted(denied)]
GOOGLE_CASES += [
    ("DocumentationChecks", "user-agent: FooBot\nallow: /p\ndisallow: /\n", "FooBot",
     "http://example.com/page", True),
    ("DocumentationChecks", "user-agent: FooBot\nallow: /folder\ndisallow: /folder\n", "FooBot",
     "http://example.com/folder/page", True),
    ("DocumentationChecks", "user-agent: FooBot\nallow: /page\ndisallow: /*.htm\n", "FooBot",
     "http://example.com/page.htm", False),
    ("DocumentationChecks", "user-agent: FooBot\nallow: /$\ndisallow: /\n", "FooBot",
     "http://example.com/", True),
    ("DocumentationChecks", "user-agent: FooBot\nallow: /$\ndisallow: /\n", "FooBot",
     "http://example.com/page.html", False),
]

# Where Google's expectation contradicts RFC 9309 2.2.2, the RFC's answer (all three
# compare a raw or %-encoded form with its equivalent: the RFC says they are equal).
DEVIATIONS = {
    ("Allow: /foo/bar/ツ\n", "http://foo.bar/foo/bar/ツ"): True,
    ("Allow: /foo/bar/%E3%83%84\n", "http://foo.bar/foo/bar/ツ"): True,
    ("Allow: /foo/bar/%62%61%7A\n", "http://foo.bar/foo/bar/baz"): True,
}


def _expected(robots: str, url: str, google: bool) -> bool:
    for (tail, dev_url), rfc in DEVIATIONS.items():
        if robots.endswith(tail) and url == dev_url:
            return rfc
    return google


@pytest.mark.parametrize("name, robots, agent, url, expected", GOOGLE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(GOOGLE_CASES)])
def test_google_matching_cases(name, robots, agent, url, expected):
    assert is_allowed(robots, agent, url) is _expected(robots, url, expected)


def test_google_case_count_and_deviations():
    deviating = [c for c in GOOGLE_CASES if _expected(c[1], c[3], c[4]) != c[4]]
    assert len(GOOGLE_CASES) == 145 and len(deviating) == 3


@pytest.mark.parametrize("token, valid", [
    ("Foobot", True), ("Foobot-Bar", True), ("Foo_Bar", True), ("", False), ("ツ", False),
    ("Foobot*", False), (" Foobot ", False), ("Foobot/2.1", False), ("Foobot Bar", False),
])
def test_google_valid_user_agents(token, valid):
    assert valid_user_agent(token) is valid


LINES = ["User-Agent: foo", "Allow: /some/path", "User-Agent: bar", "", "", "Disallow: /"]


@pytest.mark.parametrize("text", [
    "\n".join(LINES) + "\n", "\r\n".join(LINES) + "\r\n", "\r".join(LINES) + "\r",
    "\n".join(LINES),
    "User-Agent: foo\nAllow: /some/path\r\nUser-Agent: bar\n\r\n\nDisallow: /",
])
def test_google_line_endings_and_numbers(text):
    stats = parse_robots(text.encode()).stats
    assert (stats.directives, stats.last_line) == (4, 6)


@pytest.mark.parametrize("data, valid, unknown", [
    (b"\xef\xbb\xbfUser-Agent: foo\nAllow: /AnyValue\n", 2, 0),
    (b"\xef\xbbUser-Agent: foo\nAllow: /AnyValue\n", 2, 0),
    (b"\xefUser-Agent: foo\nAllow: /AnyValue\n", 2, 0),
    (b"\xef\x11\xbfUser-Agent: foo\nAllow: /AnyValue\n", 1, 1),
    (b"User-Agent: foo\n\xef\xbb\xbfAllow: /AnyValue\n", 1, 1),
])
def test_google_byte_order_mark(data, valid, unknown):
    stats = parse_robots(data).stats
    assert (stats.directives, stats.unknown) == (valid, unknown)


def test_bom_in_text_input_is_skipped_too():
    assert not is_allowed("\ufeffUser-Agent: foo\nDisallow: /\n", "foo", "http://a/x")


@pytest.mark.parametrize("robots", [
    "User-Agent: foo\nAllow: /some/path\nUser-Agent: bar\n\n\nSitemap: http://foo.bar/sitemap.xml\n",
    "Sitemap: http://foo.bar/sitemap.xml\nUser-Agent: foo\nAllow: /some/path\n"
    "User-Agent: bar\n\n\n",
])
def test_google_sitemap_anywhere(robots):
    parsed = parse_robots(robots)
    assert parsed.sitemaps == ["http://foo.bar/sitemap.xml"]
    assert parsed.sitemap_urls("http://foo.bar/robots.txt") == ["http://foo.bar/sitemap.xml"]


@pytest.mark.parametrize("url, path", [
    ("", "/"), ("http://www.example.com", "/"), ("http://www.example.com/", "/"),
    ("http://www.example.com/a", "/a"), ("http://www.example.com/a/", "/a/"),
    ("http://www.example.com/a/b?c=http://d.e/", "/a/b?c=http://d.e/"),
    ("http://www.example.com/a/b?c=d&e=f#fragment", "/a/b?c=d&e=f"), ("example.com", "/"),
    ("example.com/", "/"), ("example.com/a", "/a"), ("example.com/a/", "/a/"),
    ("example.com/a/b?c=d&e=f#fragment", "/a/b?c=d&e=f"), ("a", "/"), ("a/", "/"),
    ("/a", "/a"), ("a/b", "/b"), ("example.com?a", "/?a"), ("example.com/a;b#c", "/a;b"),
    ("//a/b/c", "/b/c"),
])
def test_google_path_params_query(url, path):
    assert path_of(url) == path


@pytest.mark.parametrize("raw, escaped", [
    ("http://www.example.com", "http://www.example.com"), ("/a/b/c", "/a/b/c"),
    ("á", "%C3%A1"), ("%aa", "%AA"),
])
def test_google_escape_pattern(raw, escaped):
    assert encode_path(raw) == escaped


# --- RFC 9309 section 5 ---------------------------------------------------------------

RFC_5_1 = """User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot


EOF
"""


@pytest.mark.parametrize("agent, path, allowed", [
    # "*": every crawler without a group of its own
    ("otherbot", "/example/index.html", False), ("otherbot", "/images/logo.gif", False),
    ("otherbot", "/publications/logo.gif", True), ("otherbot", "/about", True),
    ("otherbot", "/images/logo.gif?v=2", True),
    # foobot: only two URL prefixes
    ("foobot", "/example/page.html", True), ("foobot", "/example/allowed.gif", True),
    ("foobot", "/", False), ("foobot", "/publications/", False),
    # barbot and bazbot share one group; the * rules do not apply to them
    ("barbot", "/example/page.html", False), ("bazbot", "/example/page.html", False),
    ("barbot", "/example/other.gif", True), ("bazbot", "/images/logo.gif", True),
    # quxbot: an empty group at the end: everything allowed
    ("quxbot", "/example/page.html", True), ("quxbot", "/images/logo.gif", True),
])
def test_rfc9309_simple_example(agent, path, allowed):
    assert is_allowed(RFC_5_1, agent, f"https://www.example.com{path}") is allowed


def test_rfc9309_longest_match_example():
    robots = "User-Agent: foobot\nAllow: /example/page/\nDisallow: /example/page/disallowed.gif\n"
    assert is_allowed(robots, "foobot", "http://e.com/example/page/")
    assert is_allowed(robots, "foobot", "http://e.com/example/page/ok.gif")
    assert not is_allowed(robots, "foobot", "http://e.com/example/page/disallowed.gif")


@pytest.mark.parametrize("pattern, url_path", [
    # RFC 9309 2.2.2's table: each pattern matches the path in its encoded form.
    ("/foo/bar?baz=quz", "/foo/bar?baz=quz"),
    ("/foo/bar?baz=https://foo.bar", "/foo/bar?baz=https://foo.bar"),
    ("/foo/bar/ツ", "/foo/bar/%E3%83%84"),
    ("/foo/bar/%E3%83%84", "/foo/bar/%E3%83%84"),
    ("/foo/bar/%62%61%7A", "/foo/bar/baz"),
])
def test_rfc9309_encoding_table(pattern, url_path):
    robots = f"User-Agent: *\nDisallow: /\nAllow: {pattern}\n"
    assert is_allowed(robots, "anybot", f"http://foo.bar{url_path}")


def test_merged_groups_and_500_kib():
    # Groups naming the same agent are merged, wherever they are in the file.
    robots = ("User-agent: a\nDisallow: /x\n\nUser-agent: b\nDisallow: /\n\n"
              "User-agent: A\nDisallow: /y\n")
    assert not is_allowed(robots, "a", "http://h/x") and not is_allowed(robots, "a", "http://h/y")
    assert is_allowed(robots, "a", "http://h/z")
    # A rule at ~500 KiB is still parsed; one past the cap is ignored.
    filler = "# " + "x" * 1000 + "\n"
    body = "User-agent: *\n" + filler * 500 + "Disallow: /late\n"
    assert len(body.encode()) < 512 * 1024 and not is_allowed(body, "bot", "http://h/late")
    huge = "User-agent: *\n" + filler * 600 + "Disallow: /too-late\n"
    assert is_allowed(huge, "bot", "http://h/too-late")
    assert parse_robots(huge).stats.truncated
