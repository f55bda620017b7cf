"""HTML parsing for the fetcher: links, canonical, robots directives, extracted text.

Pure and bounded: the body is cut at `max_bytes` before parsing, at most
`max_links` links are kept, and nothing is fetched (no DTDs, no entities). CPU time
and memory are bounded outside: the fetcher runs `parse_html` in parser processes
under `ParseLimits` (udfs/parser/stage.py); the rules of those limits are here.
Links are resolved against <base href> and normalized with `normalize_url`;
page-level nofollow (meta robots or X-Robots-Tag) keeps the page's links out of
discovery, and rel="nofollow" drops single links. The extracted text (no
script, style, noscript or template) gives the change-detection hash and the
SimHash.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from lxml import etree, html

from udfs.core.fingerprints import simhash64, text_hash
from udfs.core.urls import UrlPolicy, normalize_url, split_host_key

_CHARSET = re.compile(r"charset\s*=\s*[\"']?([A-Za-z0-9._:-]+)", re.I)
_LINK_XPATH = etree.XPath("//a[@href] | //area[@href]")
_TEXT_XPATH = etree.XPath(
    "//text()[not(ancestor::script or ancestor::style or ancestor::noscript "
    "or ancestor::template or ancestor::head)]")


@dataclass
class ParsedPage:
    links: list[str] = field(default_factory=list)  # normalized, deduplicated, in page order
    canonical_url: str | None = None
    noindex: bool = False
    nofollow: bool = False
    text: str = ""
    text_sha256: str = ""
    simhash: int = 0
    title: str | None = None
    truncated: bool = False  # the body or the link list was cut at its limit
    error: str | None = None


def _directives(values: Iterable[str], user_agent: str) -> set[str]:
    """noindex/nofollow/none from meta robots contents or X-Robots-Tag values.

    A value may be scoped to a crawler ("otherbot: noindex"); only unscoped values
    and those naming our user agent apply.
    """
    out: set[str] = set()
    ua = user_agent.lower()
    for value in values:
        scope, sep, rest = value.partition(":")
        if sep and scope.strip() and " " not in scope.strip() and "," not in scope:
            if scope.strip().lower() != ua:
                continue
            value = rest
        out |= {d.strip().lower() for d in value.split(",") if d.strip()}
    if "none" in out:
        out |= {"noindex", "nofollow"}
    return out


def header_values(headers: Mapping[str, str] | Iterable[tuple[str, str]], name: str
                  ) -> list[str]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [v for k, v in items if k.lower() == name.lower()]


def charset_of(content_type: str | None) -> str | None:
    m = _CHARSET.search(content_type or "")
    return m.group(1) if m else None


def parse_html(body: bytes, url: str, *,
               headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
               user_agent: str = "FlinkCrawler", max_bytes: int = 5 * 1024 * 1024,
               max_links: int = 5000, url_policy: UrlPolicy | None = None) -> ParsedPage:
    """Parse one HTML page fetched from `url`. Never raises; problems go to `error`.

    Links and the canonical URL are normalized with `url_policy` (the configured
    query parameters to drop; None drops nothing)."""
    headers = headers or {}
    page = ParsedPage()
    if len(body) > max_bytes:
        body, page.truncated = body[:max_bytes], True
    robots = _directives(header_values(headers, "X-Robots-Tag"), user_agent)
    content_type = next(iter(header_values(headers, "Content-Type")), None)
    try:
        parser = html.HTMLParser(encoding=charset_of(content_type), remove_comments=True,
                                 remove_pis=True, no_network=True)
        root = html.document_fromstring(body, parser=parser) if body.strip() else None
    except (etree.ParserError, etree.XMLSyntaxError, ValueError, LookupError) as exc:
        page.error = f"unparseable HTML: {exc}"
        root = None
    if root is None:
        page.noindex = "noindex" in robots
        page.nofollow = "nofollow" in robots
        page.text_sha256, page.simhash = text_hash(""), simhash64("")
        return page

    metas = [m.get("content", "") for m in root.iter("meta")
             if (m.get("name") or "").lower() in ("robots", user_agent.lower())]
    robots |= _directives(metas, user_agent)
    page.noindex = "noindex" in robots
    page.nofollow = "nofollow" in robots

    base = url
    for b in root.iter("base"):
        if b.get("href"):
            base = normalize_url(b.get("href").strip(), url, url_policy) or url
            break
    for link in root.iter("link"):
        rels = (link.get("rel") or "").lower().split()
        if "canonical" in rels and link.get("href"):
            page.canonical_url = normalize_url(link.get("href").strip(), base, url_policy)
            break
    title = root.find(".//title")
    if title is not None and title.text:
        page.title = " ".join(title.text.split())[:1000]

    if not page.nofollow:
        seen: set[str] = set()
        for a in _LINK_XPATH(root):
            if "nofollow" in (a.get("rel") or "").lower().split():
                continue
            target = normalize_url(a.get("href").strip(), base, url_policy)
            if target is None or target in seen:
                continue
            if len(page.links) >= max_links:
                page.truncated = True
                break
            seen.add(target)
            page.links.append(target)

    page.text = " ".join(" ".join(_TEXT_XPATH(root)).split())
    page.text_sha256 = text_hash(page.text, normalized=True)  # (joined just above)
    page.simhash = simhash64(page.text)
    return page


def group_by_host(urls: Iterable[str]) -> dict[str, list[str]]:
    """Links grouped per target host_key (one discovered record per host), order kept."""
    groups: dict[str, list[str]] = {}
    for u in urls:
        groups.setdefault(split_host_key(u)[0], []).append(u)
    return groups


# -- the parse stage's limits (udfs/parser/stage.py runs parse_html under them) ------------

class LimitKind(StrEnum):
    """Why a page's parse was cut short (the label of parse_limit_hits_total)."""

    TIMEOUT = "timeout"  # past its CPU time (or its wall-clock cap)
    MEMORY = "memory"  # MemoryError under the parser's address-space limit
    CRASH = "crash"  # the parser process died (a signal, an abort, an OOM kill)


@dataclass(frozen=True)
class ParseLimits:
    """From the `parse` configuration section."""

    workers: int = 2
    cpu_limit_s: float = 5.0
    memory_limit_mb: int = 1024
    max_bytes: int = 5 * 1024 * 1024
    max_links: int = 5000
    max_waiting: int = 64

    @property
    def wall_cap_s(self) -> float:
        """Wall-clock seconds after which a parse ends whatever CPU it used (a parser
        starved of CPU by other work, or stalled)."""
        return 3 * self.cpu_limit_s + 5.0


def parse_deadline(cpu_used_s: float, wall_s: float, limits: ParseLimits) -> float | None:
    """While a page is being parsed: None when it has run past its limit (CPU time, or the
    wall-clock cap), else the wall-clock seconds to wait before looking again (no sooner
    than its CPU could reach the limit: CPU time grows no faster than wall time)."""
    if cpu_used_s >= limits.cpu_limit_s or wall_s >= limits.wall_cap_s:
        return None
    return max(0.01, min(limits.cpu_limit_s - cpu_used_s, limits.wall_cap_s - wall_s))


def limit_error(kind: LimitKind, limits: ParseLimits, detail: str = "") -> str:
    """The completion's `error` for a page whose parse hit a limit (outcome PARSE_TIMEOUT)."""
    what = {LimitKind.TIMEOUT: f"parse went past its limit of {limits.cpu_limit_s:g} s CPU "
                               f"({limits.wall_cap_s:g} s wall)",
            LimitKind.MEMORY: f"parse went past its memory limit of "
                              f"{limits.memory_limit_mb} MB",
            LimitKind.CRASH: "the parser process died"}[kind]
    return f"{what}: {detail}" if detail else what
