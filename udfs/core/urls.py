"""URL normalization: parse as browsers do (WHATWG), then RFC 3986 section 6 normalization.

`normalize_url` is the one place that decides whether two strings are the same
URL; every later stage (dedup keys, host_key, robots paths, traps) trusts it.
Parsing is done by ada (the WHATWG URL parser behind Node.js): it resolves
relative references, lower-cases scheme and host, converts IDNs to punycode,
drops default ports and removes dot segments. On top of that we decode
percent-encoded unreserved characters, upper-case the remaining escapes, drop
the fragment and userinfo, and remove only the query parameters the
drop list of the `UrlPolicy` the caller passes names (the shells build it from
`urls.drop_query_params`; this module reads no configuration); everything else
in the query keeps its order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ada_url import URL
from ada_url import join_url as _ada_join
from ada_url import normalize_url as _ada_normalize

_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


@dataclass(frozen=True)
class UrlPolicy:
    """Which query parameters are tracking or session noise (names, case-insensitive).

    A name ending in "*" is a prefix ("utm_*"). Path parameters of the form
    ";name=value" are dropped for the same names (";jsessionid=...").
    """

    drop_params: tuple[str, ...] = ()
    # Derived from drop_params at construction.
    _exact: frozenset[str] = field(init=False, repr=False, compare=False)
    _prefixes: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        exact = {p.lower() for p in self.drop_params if not p.endswith("*")}
        prefixes = tuple(p[:-1].lower() for p in self.drop_params if p.endswith("*"))
        object.__setattr__(self, "_exact", frozenset(exact))
        object.__setattr__(self, "_prefixes", prefixes)

    def drops(self, name: str) -> bool:
        n = name.lower()
        return n in self._exact or (bool(self._prefixes) and n.startswith(self._prefixes))

    @classmethod
    def from_names(cls, names: Iterable[str]) -> UrlPolicy:
        return cls(tuple(names))


NO_DROPS = UrlPolicy()


_HEX = frozenset("0123456789ABCDEFabcdef")


def _fix_escapes(text: str) -> str:
    """Decode %XX of unreserved characters; upper-case every other escape. An escape whose
    character would complete a new one with a stray "%" before it ("%%41a" would become
    "%Aa", the escape of byte 0xAA) stays an escape: another URL, and not idempotent."""
    if "%" not in text:
        return text
    out: list[str] = []
    done = 0
    for m in _ESCAPE.finditer(text):
        out.append(text[done:m.start()])
        done = m.end()
        value = int(m.group(1), 16)
        char = chr(value)
        if value in _UNRESERVED and not (char in _HEX and _ends_a_stray_escape(out)):
            out.append(char)
        else:
            out.append("%" + m.group(1).upper())
    out.append(text[done:])
    return "".join(out)


def _ends_a_stray_escape(out: list[str]) -> bool:
    """Whether the text so far ends in "%" or "%" and one hex digit (a hex digit after it
    would make an escape)."""
    tail = "".join(out[-4:])[-2:]  # (every other piece is an escape's: 1 or 3 characters)
    return tail[-1:] == "%" or (len(tail) == 2 and tail[0] == "%" and tail[1] in _HEX)


def _drop_path_params(path: str, policy: UrlPolicy) -> str:
    """Remove ";name=value" path parameters the policy names (e.g. ;jsessionid=...)."""
    if ";" not in path or not policy.drop_params:
        return path
    segments = []
    for segment in path.split("/"):
        if ";" in segment:
            head, *params = segment.split(";")
            kept = [p for p in params if not policy.drops(p.split("=", 1)[0])]
            segment = ";".join([head, *kept])
        segments.append(segment)
    return "/".join(segments)


def _filter_query(query: str, policy: UrlPolicy) -> str:
    """The query without dropped parameters, order and repeated keys kept ("" if none left)."""
    if not policy.drop_params:
        return query
    parts = query.split("&")
    kept = [p for p in parts if not policy.drops(_fix_escapes(p.split("=", 1)[0]))]
    if len(kept) == len(parts):
        return query
    return "&".join(kept)


def normalize_url(raw: str, base: str | None = None, policy: UrlPolicy | None = None
                  ) -> str | None:
    """The normalized absolute http(s) URL of `raw` (resolved against `base`), else None.

    `policy` names the query (and path) parameters to drop; None drops nothing. Every
    stage that decides a URL's identity (the frontier's intake, the parser, seeds,
    sitemaps) passes the configured policy. Never raises: anything that is not a valid
    http(s) URL gives None.
    """
    if not isinstance(raw, str) or (base is not None and not isinstance(base, str)):
        return None
    try:
        href = _ada_join(base, raw) if base is not None else _ada_normalize(raw)
    except (ValueError, UnicodeError):
        return None
    # ada returns the WHATWG serialization, so plain string splitting is exact:
    # special schemes always have "//" and a path, "#" and "?" inside a path
    # or query are percent-encoded, and "@" inside userinfo too.
    if href.startswith("http://"):
        scheme, rest = "http://", href[7:]
    elif href.startswith("https://"):
        scheme, rest = "https://", href[8:]
    else:
        return None
    rest = rest.split("#", 1)[0]
    slash = rest.find("/")
    authority, path_query = (rest, "/") if slash < 0 else (rest[:slash], rest[slash:])
    host = authority.rsplit("@", 1)[-1]
    if not host or host.startswith(":"):
        return None
    path, sep, query = path_query.partition("?")
    policy = NO_DROPS if policy is None else policy
    fixed = _fix_escapes(path)
    path = _drop_path_params(fixed, policy)
    if sep:
        if query:
            query = _filter_query(_fix_escapes(query), policy)
            sep = "?" if query else ""
        # else: an empty query is not the same resource as no query; keep the "?"
    url = f"{scheme}{host}{path or '/'}{sep}{query}"
    if path is not fixed and any(s in (".", "..") for s in path.split("/")):
        # A dropped parameter left a dot segment ("/.;jsessionid=1" is "/."): resolved
        # now, or normalizing this URL again would give another one (not idempotent).
        return normalize_url(url, policy=policy)
    return url


def host_key(url: str) -> str:
    """scheme://authority of a URL (lower-case host, default port dropped).

    Raises ValueError for anything that is not an http(s) URL.
    """
    try:
        parsed = URL(url)
    except (ValueError, UnicodeError):
        raise ValueError(f"not a URL: {url!r}") from None
    if parsed.protocol not in ("http:", "https:") or not parsed.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    return f"{parsed.protocol}//{parsed.host}"


def split_host_key(url: str) -> tuple[str, str]:
    """(host_key, path-and-query) of a normalized URL, without parsing it again."""
    scheme_end = url.index("//") + 2
    slash = url.find("/", scheme_end)
    if slash < 0:
        return url, "/"
    return url[:slash], url[slash:]
