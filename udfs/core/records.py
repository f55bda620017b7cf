"""The frontier's records: URL states, leases, fetch results and their enums.

Both sides of the crawl speak these: the frontier grants `Lease`s and keeps a `UrlState`
per URL; the fetcher answers each lease with a `FetchResult` (an `Outcome`). The URL
layouts at the end are how a `UrlState` is kept in keyed state across builds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from operator import attrgetter
from typing import Any, Literal, Protocol

from udfs.core.politeness import Pace
from udfs.core.recrawl import Change


class UrlStatus(StrEnum):
    QUEUED = "QUEUED"  # new, or waiting for a retry / re-lease
    LEASED = "LEASED"
    FETCHED = "FETCHED"  # visited; queued for its revisit
    TOMBSTONE = "TOMBSTONE"  # 404/410; revisited rarely, never re-created
    PARKED = "PARKED"  # repeated failure; revisited after a long interval, never dropped


class Kind(StrEnum):
    PAGE = "PAGE"
    ROBOTS = "ROBOTS"
    SITEMAP = "SITEMAP"  # read as a sitemap by the fetcher; scheduled like a page


class Outcome(StrEnum):
    """Classified fetch results (the Completion record's FetchOutcome)."""

    OK = "OK"
    NOT_MODIFIED = "NOT_MODIFIED"
    REDIRECT = "REDIRECT"
    GONE = "GONE"
    CLIENT_ERROR = "CLIENT_ERROR"
    THROTTLED = "THROTTLED"
    SERVER_ERROR = "SERVER_ERROR"
    DNS_ERROR = "DNS_ERROR"
    CONNECT_ERROR = "CONNECT_ERROR"
    TIMEOUT = "TIMEOUT"
    ADDRESS_BLOCKED = "ADDRESS_BLOCKED"
    TOO_LARGE = "TOO_LARGE"
    UNSUPPORTED_TYPE = "UNSUPPORTED_TYPE"
    PARSE_ERROR = "PARSE_ERROR"
    OTHER_ERROR = "OTHER_ERROR"
    # The fetcher did not send the lease and knows no one did (udfs/core/backqueue.py):
    # the URL goes back to the queue at once, without spending an attempt.
    NOT_SENT = "NOT_SENT"
    # The page was fetched and stored but its parse went past a parser limit (CPU time,
    # memory) or killed the parser (completion v3): visited, nothing kept, a trap trigger
    # of its host (event trap_parse_timeout), revisited after the failed-visit interval.
    PARSE_TIMEOUT = "PARSE_TIMEOUT"


# How URLs were found (the DiscoveredUrls record's source). ROBOTS_SITEMAP and
# SEED_SITEMAP mark sitemap files: read as sitemaps, not indexed.
DiscoverySource = Literal["SEED", "LINK", "SITEMAP", "REDIRECT", "ROBOTS_SITEMAP",
                          "UNKNOWN", "SEED_SITEMAP"]


RETRYABLE = frozenset({Outcome.SERVER_ERROR, Outcome.DNS_ERROR, Outcome.CONNECT_ERROR,
                       Outcome.TIMEOUT, Outcome.OTHER_ERROR})
HOST_TROUBLE = frozenset({Outcome.SERVER_ERROR, Outcome.DNS_ERROR, Outcome.CONNECT_ERROR,
                          Outcome.TIMEOUT})



@dataclass(slots=True)
class UrlState:
    url_id: str
    url: str
    version: int = 0
    accepted_version: int = 0  # highest version whose completion was accepted
    status: UrlStatus = UrlStatus.QUEUED
    attempt: int = 0  # attempts of the current version (expired leases)
    relet: bool = False  # the next lease re-lets an expired one (same version)
    next_fetch_at: float = 0.0
    last_fetch_at: float | None = None
    interval_s: float = 0.0
    priority: float = 0.5
    depth: int = 0
    redirect_hops: int = 0  # redirects that led to this URL (the hop limit counts them)
    kind: Kind = Kind.PAGE  # SITEMAP: read as a sitemap file
    etag: str | None = None
    last_modified: str | None = None
    content_hash: str | None = None
    text_hash: str | None = None
    failure_count: int = 0
    park_reason: str | None = None
    lease_id: str | None = None
    token: int = 0  # identifies the URL's live queue entry
    dup: int = 0  # a recrawl.Dup: what the index's duplicate checks said of its last copy


@dataclass(frozen=True, slots=True)
class Lease:
    lease_id: str
    url_id: str
    url_version: int
    attempt: int
    issued_at: float
    expires_at: float
    url: str
    host_key: str
    kind: Kind = Kind.PAGE
    depth: int = 0
    etag: str | None = None
    last_modified: str | None = None
    # When the lease may be used, the lease granted just before it if that one was
    # still out (None: a head, see udfs/core/backqueue.py), and the host's pace and
    # throttle count at the grant: what the fetcher enforces.
    not_before: float = 0.0
    prev_lease_id: str | None = None
    gap_s: float = 1.0
    duration_factor: float = 10.0
    max_gap_s: float = 120.0
    max_in_flight: int = 1
    throttle_seq: int = 0
    # "low" for a page the index found to duplicate another URL's at its last visit:
    # the fetcher stores its body in a colder class (recrawl.learned_priority).
    storage_tier: str = "standard"

    @property
    def pace(self) -> Pace:
        return Pace(self.gap_s, self.duration_factor, self.max_gap_s, self.max_in_flight)


@dataclass(frozen=True)
class FetchResult:
    """What the fetcher reports for one lease (the Completion record, in core terms)."""

    lease_id: str
    url_id: str
    url_version: int
    outcome: Outcome
    kind: Kind = Kind.PAGE
    attempt: int = 1
    http_status: int | None = None
    fetch_duration_s: float = 0.0
    retry_after: str | None = None
    redirect_location: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    body_sha256: str | None = None
    text_sha256: str | None = None
    robots_body: str | bytes | None = None
    fetched_at: float | None = None  # when the request ended, on the fetcher's clock
    detail: str | None = None  # the error text; for NOT_SENT, why (a backqueue.Skip)


class Acceptance(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"  # this version was already accepted: the existing result stands
    STALE = "stale"  # an older round, or a lease this state does not know


@dataclass
class CompletionResult:
    verdict: Acceptance
    index: bool = False  # emit an index event (an accepted 2xx with a body)
    change: Change | None = None
    url: str | None = None
    discovered: list[tuple[str, int, int, DiscoverySource]] = field(default_factory=list)
    # (url, depth, redirect_hops, source) for redirect targets and robots sitemaps
    reason: str = ""
    state: UrlState | None = None  # the URL after an accepted completion (it may be cold)


class FrontierObserver(Protocol):
    """Hears what a host's scheduler does, for metrics (no decision depends on it)."""

    def event(self, name: str) -> None:
        """One more of a counted event (the names of `HostFrontier.stats`)."""

    def leased(self, lag_s: float, high_value: bool) -> None:
        """A page lease granted `lag_s` after its URL came due (eligibility lag)."""


@dataclass(frozen=True)
class Admission:
    accepted: bool
    url_id: str | None
    reason: str  # "new", "known", or the trap/limit that refused it


URL_FIELD_NAMES = tuple(f.name for f in fields(UrlState))
url_values = attrgetter(*URL_FIELD_NAMES)
_URL_FIELD_SET = frozenset(URL_FIELD_NAMES)

# How a URL is kept in keyed state: a tuple (layout number, value, value, ...), enums
# by value, in the field order its layout names. The names are written once, here, not
# in each of billions of records (a dict by field name pickled to ~440 B for a queued
# URL; this tuple to ~190 B). A build that adds, retires or reorders a UrlState field
# appends a layout and never edits an old one: savepoints written by older builds name
# theirs, and are read by name (an added field takes its default, a retired one is
# ignored). URLs saved as dicts by field name (the builds before layouts) still load.
URL_LAYOUTS: dict[int, tuple[str, ...]] = {
    1: ("url_id", "url", "version", "accepted_version", "status", "attempt", "relet",
        "next_fetch_at", "last_fetch_at", "interval_s", "priority", "depth",
        "redirect_hops", "kind", "etag", "last_modified", "content_hash", "text_hash",
        "failure_count", "park_reason", "lease_id", "token"),
    2: ("url_id", "url", "version", "accepted_version", "status", "attempt", "relet",
        "next_fetch_at", "last_fetch_at", "interval_s", "priority", "depth",
        "redirect_hops", "kind", "etag", "last_modified", "content_hash", "text_hash",
        "failure_count", "park_reason", "lease_id", "token", "dup"),
}
URL_LAYOUT = max(URL_LAYOUTS)
if URL_LAYOUTS[URL_LAYOUT] != URL_FIELD_NAMES:  # pragma: no cover - a developer's slip
    raise RuntimeError("UrlState's fields changed: append their new order to URL_LAYOUTS "
                       "(udfs/core/records.py), so that old savepoints still load")
_STATUS_AT = URL_FIELD_NAMES.index("status")
_KIND_AT = URL_FIELD_NAMES.index("kind")


def url_to_saved(u: UrlState) -> tuple[Any, ...]:
    """A URL state as keyed state stores it (see URL_LAYOUTS and url_from_saved)."""
    return saved_from_values(url_values(u))


def saved_from_values(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """`url_values` of a URL state in its keyed-state layout."""
    saved = [URL_LAYOUT, *values]
    saved[1 + _STATUS_AT] = values[_STATUS_AT].value
    saved[1 + _KIND_AT] = values[_KIND_AT].value
    return tuple(saved)


def is_layout(saved: Any) -> bool:
    """Is this a URL saved in a layout (not a plain tuple of values or a dict)?"""
    return isinstance(saved, tuple) and bool(saved) and isinstance(saved[0], int)


def url_from_saved(saved: tuple[Any, ...] | dict[str, Any]) -> UrlState:
    """A URL state from keyed state (a layout tuple, or a dict by field name from the
    builds before layouts) or from an in-process snapshot (a plain tuple of values)."""
    if isinstance(saved, tuple) and is_layout(saved):
        names = URL_LAYOUTS.get(saved[0])
        if names is None:
            raise ValueError(f"URL state in layout {saved[0]}, which this build does not "
                             f"know (newest {URL_LAYOUT}): written by a newer build")
        if saved[0] == URL_LAYOUT:
            u = UrlState(*saved[1:])
            u.status, u.kind = UrlStatus(u.status), Kind(u.kind)
            return u
        saved = dict(zip(names, saved[1:], strict=True))
    if isinstance(saved, dict):
        u = UrlState(**{k: v for k, v in saved.items() if k in _URL_FIELD_SET})
        u.status, u.kind = UrlStatus(u.status), Kind(u.kind)
        return u
    return UrlState(*saved)
