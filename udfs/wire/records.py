"""The topic records as typed classes: one TypedDict per Avro record, newest version.

fastavro reads and writes plain dicts; a TypedDict is a dict to Python and a class to
mypy, so the records are typed from decode to encode at no cost per record (a
dataclass would add a copy each way on the path of every page). The classes are
written by hand and checked against `schemas/*.avsc` by tests/unit/test_typed_records.py:
the same fields, the same types, nullable where the schema is, and enum fields whose
symbols are those of the schema. A new schema version fails that test until its class
here follows it.

Enum fields are strings on the wire. Where the core has the enum, the field is
`Annotated[str, TheEnum]` (the test compares the enum's values with the schema's
symbols); where it has none, a Literal of the symbols.

`Stream` pairs a schema name with its class: `LEASES.decode(reg, data)` is a
LeaseRecord, `LEASES.encode(reg, record)` takes one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Generic, TypedDict, TypeVar, cast

from udfs.core.control import Command
from udfs.core.parse import group_by_host
from udfs.core.records import DiscoverySource, Kind, Outcome
from udfs.core.recrawl import Change
from udfs.core.shards import TransferKind
from udfs.wire.avro import TOPIC_SCHEMAS, SchemaRegistry

FetchKind = Annotated[str, Kind]
FetchOutcome = Annotated[str, Outcome]
ChangeKind = Annotated[str, Change]
HostCommandType = Annotated[str, Command]


class DiscoveredLink(TypedDict):
    url: str
    lastmod_ms: int | None
    priority: float | None
    changefreq: str | None


class FoundUrls(TypedDict):
    """completion v4's `discovered` entry: URLs of one target host that the fetch found
    (its parent is the completion's url, its time the completion's fetched_at_ms)."""

    host_key: str
    source: DiscoverySource
    depth: int
    links: list[DiscoveredLink]


class DiscoveredUrls(TypedDict):
    """discovered: URLs found on one page (or by the frontier), all of one target host."""

    host_key: str | None
    source: DiscoverySource
    parent_url: str | None
    depth: int
    redirect_hops: int
    discovered_at_ms: int
    links: list[DiscoveredLink]


def plain_link(url: str) -> DiscoveredLink:
    """A link with no sitemap metadata."""
    return {"url": url, "lastmod_ms": None, "priority": None, "changefreq": None}


def links_record(host_key: str, source: DiscoverySource, parent: str | None, depth: int,
                 now_ms: int, links: list[DiscoveredLink], hops: int = 0) -> DiscoveredUrls:
    """One DiscoveredUrls record: `links` all of `host_key`, found at `parent`."""
    return {"host_key": host_key, "source": source, "parent_url": parent, "depth": depth,
            "redirect_hops": hops, "discovered_at_ms": now_ms, "links": links}


# The links one DiscoveredUrls record holds, at most about this many bytes encoded: Kafka
# refuses a record over the producer's max.request.size (1 MiB by default) and a job
# whose send fails restarts, while one sitemap may list 50,000 URLs of one host.
MAX_LINK_BYTES = 512 * 1024


def _link_size(link: DiscoveredLink) -> int:
    return len(link["url"].encode()) + len((link["changefreq"] or "").encode()) + 40


def links_records(host_key: str, source: DiscoverySource, parent: str | None, depth: int,
                  now_ms: int, links: list[DiscoveredLink], hops: int = 0,
                  max_bytes: int = MAX_LINK_BYTES) -> list[DiscoveredUrls]:
    """`links` (all of `host_key`) in as many records as keep each under `max_bytes` of
    links, in order. A link is counted at its URL's and changefreq's UTF-8 bytes plus
    40, more than Avro spends on their lengths and the optional fields."""
    records: list[DiscoveredUrls] = []
    run: list[DiscoveredLink] = []
    size = 0
    for link in links:
        n = _link_size(link)
        if run and size + n > max_bytes:
            records.append(links_record(host_key, source, parent, depth, now_ms, run, hops))
            run, size = [], 0
        run.append(link)
        size += n
    if run or not records:
        records.append(links_record(host_key, source, parent, depth, now_ms, run, hops))
    return records


def host_of(record: DiscoveredUrls) -> str:
    """The record's key on its topic: its host_key, which every record this code builds
    has (an older producer's record may lack it: the frontier's intake regroups those)."""
    key = record["host_key"]
    if key is None:
        raise ValueError("a DiscoveredUrls record without host_key has no topic key")
    return key


def page_links(page_url: str, depth: int, urls: Iterable[str], now_ms: int
               ) -> list[DiscoveredUrls]:
    """The records of one page's links (source LINK, one record per target host, more
    if it has very many: MAX_LINK_BYTES), as the fetcher sends them; `depth` is the
    page's."""
    return [record for host_key, host_urls in group_by_host(urls).items()
            for record in links_records(host_key, "LINK", page_url, depth + 1, now_ms,
                                        [plain_link(u) for u in host_urls])]


def link_bytes(links: list[DiscoveredLink]) -> int:
    """What `links` count against MAX_LINK_BYTES (see links_records)."""
    return sum(map(_link_size, links))


def attach_found(completion: Completion, found: list[DiscoveredUrls]
                 ) -> list[DiscoveredUrls]:
    """Put the URLs a fetch `found` into its completion (v4 `discovered`) when they fit
    in MAX_LINK_BYTES of links, and return what must go before the completion as records
    of their own instead: nothing, or all of them when they do not fit (a sitemap of
    many thousand entries), so that no record passes Kafka's size limit."""
    if not found or sum(link_bytes(d["links"]) for d in found) > MAX_LINK_BYTES:
        completion["discovered"] = []
        return found
    completion["discovered"] = [
        {"host_key": host_of(d), "source": d["source"], "depth": d["depth"],
         "links": d["links"]} for d in found]
    return []


def found_records(completion: Completion) -> list[DiscoveredUrls]:
    """A v4 completion's `discovered` entries as the DiscoveredUrls records they stand
    for: found at the completion's url, at its fetched_at_ms."""
    return [links_record(f["host_key"], f["source"], completion["url"], f["depth"],
                         completion["fetched_at_ms"], f["links"])
            for f in completion["discovered"]]


class LeaseRecord(TypedDict):
    """lease: the frontier's grant of one fetch."""

    lease_id: str
    url_id: str
    url_version: int
    attempt: int
    issued_at_ms: int
    expires_at_ms: int
    url: str
    host_key: str
    kind: FetchKind
    depth: int
    etag: str | None
    last_modified: str | None
    not_before_ms: int
    prev_lease_id: str | None
    gap_s: float
    duration_factor: float
    max_gap_s: float
    max_in_flight: int
    storage_tier: str
    throttle_seq: int


class Completion(TypedDict):
    """completion: the fetcher's answer to one lease."""

    lease_id: str
    url_id: str
    url_version: int
    attempt: int
    url: str
    host_key: str
    kind: FetchKind
    outcome: FetchOutcome
    http_status: int | None
    fetched_at_ms: int
    fetch_duration_ms: int
    retry_after: str | None
    redirect_location: str | None
    etag: str | None
    last_modified: str | None
    content_type: str | None
    body_sha256: str | None
    body_bytes: int | None
    object_key: str | None
    text_sha256: str | None
    simhash: int | None
    canonical_url: str | None
    noindex: bool
    nofollow: bool
    links_count: int
    body: bytes | None
    error: str | None
    warc_filename: str | None
    warc_offset: int | None
    warc_length: int | None
    discovered: list[FoundUrls]


class IndexEvent(TypedDict):
    """index_event: one accepted 2xx page, unique per (url_id, url_version)."""

    event_id: str
    url_id: str
    url_version: int
    url: str
    host_key: str
    fetched_at_ms: int
    http_status: int
    content_type: str | None
    object_key: str | None
    body_sha256: str | None
    body_bytes: int | None
    text_sha256: str | None
    simhash: int | None
    canonical_url: str | None
    noindex: bool
    change: ChangeKind
    duplicate_of: str | None
    near_duplicate_of: str | None
    warc_filename: str | None
    warc_offset: int | None
    warc_length: int | None


class DeadLetter(TypedDict):
    """dead_letter: a record no stage could process, kept whole with the reason."""

    stage: str
    reason: str
    error_type: str
    source_topic: str | None
    source_partition: int | None
    source_offset: int | None
    key: bytes | None
    payload: bytes | None
    url: str | None
    host_key: str | None
    at_ms: int


class HostCommandRecord(TypedDict):
    """host_command: an operator's command to one host."""

    command_id: str
    host_key: str
    command: HostCommandType
    version: int
    settings: dict[str, str]
    url: str | None
    issued_at_ms: int


class HostReply(TypedDict):
    """host_reply: the host owner's answer to a command."""

    command_id: str
    host_key: str
    ok: bool
    applied: bool
    error: str | None
    detail_json: str
    replied_at_ms: int


class ShardUrl(TypedDict):
    url: str
    state: bytes


class ShardTransfer(TypedDict):
    """shard_transfer: a hot host's URLs moving between its owner and a shard."""

    kind: TransferKind
    host_key: str
    shard: int
    want: int
    remaining: int
    urls: list[ShardUrl]


R = TypeVar("R", DiscoveredUrls, LeaseRecord, Completion, IndexEvent, DeadLetter,
            HostCommandRecord, HostReply, ShardTransfer)


class Stream(Generic[R]):
    """One topic's records: the schema's name and the class its records are."""

    def __init__(self, schema: str, record: type[R]) -> None:
        self.schema = schema
        self.record: type[R] = record

    def decode(self, reg: SchemaRegistry, data: bytes) -> R:
        """Bytes of any version of the schema, read as its newest (AvroDecodeError if not)."""
        # fastavro built the dict from the newest schema, which the class is tested against.
        return cast(R, reg.decode(self.schema, data))

    def wrote(self, reg: SchemaRegistry, data: bytes) -> bool:
        """Whether `data` was written with (some version of) this stream's schema: its
        header alone is read. A topic may carry more than one kind of record (the
        completions topic: links too many for their completion, just before it)."""
        return reg.writer_name(data) == self.schema

    def encode(self, reg: SchemaRegistry, record: R, *, check: bool = False) -> bytes:
        """Single-object encoding with the newest version. `check`: validate first (for
        records from outside; the typed ones this code builds need no check per record)."""
        return reg.encode(self.schema, record, check=check)


# Each topic's schema name is the registry's (TOPIC_SCHEMAS, by the config's topic keys).
DISCOVERED = Stream(TOPIC_SCHEMAS["discovered"], DiscoveredUrls)
LEASES = Stream(TOPIC_SCHEMAS["leases"], LeaseRecord)
COMPLETIONS = Stream(TOPIC_SCHEMAS["completions"], Completion)
INDEX = Stream(TOPIC_SCHEMAS["index"], IndexEvent)
DEAD_LETTERS = Stream(TOPIC_SCHEMAS["deadletter"], DeadLetter)
CONTROL = Stream(TOPIC_SCHEMAS["control"], HostCommandRecord)
REPLIES = Stream(TOPIC_SCHEMAS["replies"], HostReply)
SHARDS = Stream(TOPIC_SCHEMAS["shards"], ShardTransfer)

# The config's topic keys → their streams.
STREAMS: dict[str, Stream[Any]] = {
    "discovered": DISCOVERED, "leases": LEASES, "completions": COMPLETIONS, "index": INDEX,
    "deadletter": DEAD_LETTERS, "control": CONTROL, "replies": REPLIES, "shards": SHARDS,
}
