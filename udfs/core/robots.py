"""robots.txt (RFC 9309): the parser and matcher (robots_state.py: when to fetch it).

Matching follows RFC 9309 and, where the RFC leaves room, Google's open-source
reference parser (which its test suite checks): group selection by product
token, case-insensitive; groups for the same agent merged; the longest
matching pattern wins and Allow wins a tie; `*` and a final `$`; percent-
encoding equivalence; a BOM, CR / LF / CRLF line ends, unknown lines that do
not end a group; at least 500 KiB parsed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from udfs.core.urls import normalize_url

# RFC 9309 2.5: crawlers MUST parse at least 500 KiB.
MAX_ROBOTS_BYTES = 512 * 1024
# Google's parser keeps 8 * 2083 - 1 characters of a line and drops the rest.
MAX_LINE_CHARS = 8 * 2083 - 1

_USER_AGENT_KEYS = {"user-agent", "useragent", "user agent"}
_ALLOW_KEYS = {"allow"}
# Common misspellings seen in the wild, accepted as Google's parser does.
_DISALLOW_KEYS = {"disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw"}
_SITEMAP_KEYS = {"sitemap", "site-map"}
_CRAWL_DELAY_KEYS = {"crawl-delay", "crawldelay"}
_LINE_END = re.compile(r"\r\n|\r|\n")
_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]*")  # RFC 9309 2.2.1: the product token
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_BOM = b"\xef\xbb\xbf"


def valid_user_agent(token: str) -> bool:
    """Is `token` a product token a crawler may obey groups for (RFC 9309 2.2.1)?"""
    return bool(token) and _PRODUCT_TOKEN.fullmatch(token) is not None


def encode_path(text: str) -> str:
    """A path or pattern in the one form both sides are compared in.

    Non-ASCII characters and controls are percent-encoded as UTF-8, escapes of
    unreserved characters are decoded and other escapes upper-cased (RFC 9309
    2.2.2 with RFC 3986 2.1 and 6.2.2), so "/a/ツ", "/a/%e3%83%84" and
    "/a/%E3%83%84" compare equal, and so do "/%62az" and "/baz".
    """
    if text.isascii() and "%" not in text and text.isprintable() and " " not in text:
        return text
    out = []
    for ch in text:
        if ch.isascii() and ch.isprintable() and ch != " ":
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    encoded = "".join(out)

    def repl(m: re.Match[str]) -> str:
        value = int(m.group(1), 16)
        return chr(value) if value in _UNRESERVED else "%" + m.group(1).upper()

    return _ESCAPE.sub(repl, encoded)


def path_of(url: str) -> str:
    """Path, params and query of a URL (no fragment); "/" when it has none.

    Accepts what crawlers pass in practice: absolute URLs, "//host/path",
    "host/path" and bare paths, as Google's reference parser does.
    """
    start = 0
    if url.startswith("//"):
        start = 2
    else:
        early = min((i for i in (url.find(c) for c in "/?;") if i >= 0), default=-1)
        proto = url.find("://")
        if proto >= 0 and not (0 <= early < proto):
            start = proto + 3
    candidates = [i for i in (url.find(c, start) for c in "/?;") if i >= 0]
    path_start = min(candidates) if candidates else -1
    hash_pos = url.find("#", start)
    if path_start < 0 or (0 <= hash_pos < path_start):
        return "/"
    end = hash_pos if hash_pos >= 0 else len(url)
    path = url[path_start:end]
    return path if path.startswith("/") else "/" + path


@dataclass(frozen=True)
class Rule:
    allow: bool
    pattern: str  # normalized with encode_path
    line: int


@dataclass
class Group:
    agents: list[str] = field(default_factory=list)  # product tokens, lower-case; "*" global
    rules: list[Rule] = field(default_factory=list)
    crawl_delay: float | None = None


@dataclass(frozen=True)
class ParseStats:
    """What the parser saw (useful for diagnostics and Google's line-counting tests)."""

    directives: int
    unknown: int
    last_line: int
    truncated: bool


class _RuleSet:
    """Merged rules of the groups that apply to one agent, indexed for fast longest match.

    A pattern can only match a path that starts with its literal head (the text
    before its first "*"), so every rule is filed under that head and a check
    looks up the path's prefixes of the lengths present: O(distinct head
    lengths) dictionary probes plus the few wildcard rules whose head matched,
    instead of a scan of every rule.
    """

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.prefix: dict[str, bool] = {}  # literal pattern → allow (True if any Allow)
        self.exact: dict[str, bool] = {}  # literal pattern that ended with "$"
        merged: dict[str, bool] = {}
        for rule in rules:
            p = rule.pattern
            if not p:
                continue  # "Disallow:" with no value restricts nothing
            if "*" in p or ("$" in p[:-1]):
                merged[p] = merged.get(p, False) or rule.allow
            elif p.endswith("$"):
                self.exact[p[:-1]] = self.exact.get(p[:-1], False) or rule.allow
            else:
                self.prefix[p] = self.prefix.get(p, False) or rule.allow
            if rule.allow and p.endswith("/index.html"):
                # Google: allowing ".../index.html" allows the directory URL ".../" too.
                self.exact[p[: -len("index.html")]] = True
        # Wildcard rules by literal head; each list longest first, Allow first on ties.
        self.wild: dict[str, list[tuple[int, bool, str]]] = {}
        for p, allow in merged.items():
            head = p.split("*", 1)[0]
            self.wild.setdefault(head, []).append((len(p), allow, p))
        for entries in self.wild.values():
            entries.sort(key=lambda t: (-t[0], not t[1]))
        self.prefix_lengths = sorted({len(p) for p in self.prefix}, reverse=True)
        self.head_lengths = sorted({len(h) for h in self.wild})
        self.empty = not (self.prefix or self.exact or self.wild)

    def allowed(self, path: str) -> bool:
        if self.empty:
            return True
        best_len, best_allow = -1, True
        n = len(path)
        for length in self.prefix_lengths:
            if length <= n:
                allow = self.prefix.get(path[:length])
                if allow is not None:
                    best_len, best_allow = length, allow
                    break
        allow = self.exact.get(path)
        if allow is not None and (n + 1 > best_len or (n + 1 == best_len and allow)):
            best_len, best_allow = n + 1, allow
        for head_len in self.head_lengths:
            if head_len > n:
                break
            for length, allow, pattern in self.wild.get(path[:head_len], ()):
                if length < best_len or (length == best_len and (best_allow or not allow)):
                    break
                if _compile(pattern).match(path):
                    best_len, best_allow = length, allow
                    break
        return best_allow


@lru_cache(maxsize=65536)
def _compile(pattern: str) -> re.Pattern[str]:
    """A wildcard pattern as a regex, compiled on first use (most are never needed)."""
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    parts = [re.escape(part) for part in re.sub(r"\*+", "*", body).split("*")]
    return re.compile(".*".join(parts) + (r"\Z" if anchored else ""), re.DOTALL)


class RobotsTxt:
    """A parsed robots.txt file."""

    def __init__(self, groups: list[Group], sitemaps: list[str], stats: ParseStats) -> None:
        self.groups = groups
        self.sitemaps = sitemaps
        self.stats = stats
        self._cache: dict[str, tuple[_RuleSet, float | None]] = {}

    def _for_agent(self, user_agent: str) -> tuple[_RuleSet, float | None]:
        hit = self._cache.get(user_agent)
        if hit is None:
            ua = user_agent.lower()
            specific = [g for g in self.groups if ua and ua in g.agents]
            chosen = specific or [g for g in self.groups if "*" in g.agents]
            delays = [g.crawl_delay for g in chosen if g.crawl_delay is not None]
            hit = (_RuleSet(r for g in chosen for r in g.rules), max(delays) if delays else None)
            if len(self._cache) < 64:
                self._cache[user_agent] = hit
        return hit

    def is_allowed(self, user_agent: str, url: str) -> bool:
        """May `user_agent` (our product token) fetch `url`? Paths are compared encoded."""
        return self._for_agent(user_agent)[0].allowed(encode_path(path_of(url)))

    def crawl_delay(self, user_agent: str) -> float | None:
        """The Crawl-delay of the group that applies to `user_agent`, in seconds, if any."""
        return self._for_agent(user_agent)[1]

    def sitemap_urls(self, robots_url: str) -> list[str]:
        """Sitemap lines as absolute normalized URLs (relative ones resolved against robots_url)."""
        out: list[str] = []
        for value in self.sitemaps:
            url = normalize_url(value, robots_url)
            if url is not None and url not in out:
                out.append(url)
        return out


def _to_text(data: str | bytes) -> tuple[str, bool]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        truncated = len(raw) > MAX_ROBOTS_BYTES
        raw = raw[:MAX_ROBOTS_BYTES]
        for n in (3, 2, 1):  # a whole or partial UTF-8 BOM at the start is skipped
            if raw[:n] == _BOM[:n]:
                raw = raw[n:]
                break
        return raw.decode("utf-8", errors="replace"), truncated
    text = data
    if len(text) > MAX_ROBOTS_BYTES:  # a cheap bound first; characters are >= 1 byte
        text = text[:MAX_ROBOTS_BYTES]
    encoded = text.encode("utf-8", errors="surrogatepass")
    truncated = len(data) > len(text) or len(encoded) > MAX_ROBOTS_BYTES
    if len(encoded) > MAX_ROBOTS_BYTES:
        text = encoded[:MAX_ROBOTS_BYTES].decode("utf-8", errors="ignore")
    return text.removeprefix("\ufeff"), truncated


def _key_value(line: str) -> tuple[str, str] | None:
    if ":" in line:
        key, _, value = line.partition(":")
        return key.strip().lower(), value.strip()
    # Google: a missing colon is accepted when the line is exactly two words.
    parts = line.split()
    if len(parts) == 2:
        return parts[0].lower(), parts[1]
    return None


def _agent_token(value: str) -> str:
    if value.startswith("*") and (len(value) == 1 or value[1].isspace()):
        return "*"
    token = _PRODUCT_TOKEN.match(value)  # matches every string (it may match nothing)
    return token.group(0).lower() if token else ""


def _parse(data: str | bytes) -> RobotsTxt:
    text, truncated = _to_text(data)
    groups: list[Group] = []
    sitemaps: list[str] = []
    current: Group | None = None
    collecting_agents = False
    directives = unknown = last_line = 0
    for number, line in enumerate(_LINE_END.split(text), start=1):
        line = line[:MAX_LINE_CHARS].split("#", 1)[0].strip()
        if not line:
            continue
        kv = _key_value(line)
        if kv is None:
            unknown += 1
            last_line = number
            continue
        key, value = kv
        last_line = number
        if key in _USER_AGENT_KEYS:
            directives += 1
            if current is None or not collecting_agents:
                current = Group()
                groups.append(current)
                collecting_agents = True
            token = _agent_token(value)
            if token:
                current.agents.append(token)
        elif key in _ALLOW_KEYS or key in _DISALLOW_KEYS:
            directives += 1
            if current is not None:
                current.rules.append(Rule(key in _ALLOW_KEYS, encode_path(value), number))
                collecting_agents = False
        elif key in _CRAWL_DELAY_KEYS:
            directives += 1
            if current is not None:
                try:
                    delay = float(value)
                except ValueError:
                    delay = -1.0
                if delay >= 0 and delay == delay and delay != float("inf"):
                    current.crawl_delay = delay
                collecting_agents = False
        elif key in _SITEMAP_KEYS:
            directives += 1
            if value:
                sitemaps.append(value)
        else:
            unknown += 1  # unknown lines neither end nor start a group
    return RobotsTxt(groups, sitemaps, ParseStats(directives, unknown, last_line, truncated))


@lru_cache(maxsize=256)
def _parse_cached(data: str | bytes) -> RobotsTxt:
    return _parse(data)


def parse_robots(data: str | bytes) -> RobotsTxt:
    """Parse robots.txt content (text or raw bytes); never raises. Results are cached."""
    if not isinstance(data, (str, bytes)):
        data = bytes(data)
    return _parse_cached(data)


def is_allowed(robots_txt: str | bytes, user_agent: str, url: str) -> bool:
    """RFC 9309: may `user_agent` fetch `url` under this robots.txt content?"""
    return parse_robots(robots_txt).is_allowed(user_agent, url)
