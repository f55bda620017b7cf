"""The state codec of a host: its durable state as plain data, and back.

Records are kept by field name, not as pickled classes, so a savepoint restores into
code that added or retired a field (`_from_fields`); the URLs are kept in the layouts
of udfs/core/records.py. The keys of `host_state` are the savepoint format: renaming
one breaks every savepoint written before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import fields, replace
from enum import Enum
from functools import cache
from operator import attrgetter
from typing import Any, Protocol, get_type_hints

from udfs.core.coldqueue import KeyValue
from udfs.core.frontier.admission import Admitter
from udfs.core.frontier.cold import ColdWindow
from udfs.core.frontier.completion import Completions
from udfs.core.frontier.leasing import LeaseBook
from udfs.core.frontier.pacer import Pacer
from udfs.core.frontier.queue import UrlQueue
from udfs.core.frontier.robots_gate import UNSTORED, RobotsGate
from udfs.core.frontier.sharding import ShardLink
from udfs.core.politeness import HostPolicy
from udfs.core.records import Lease, is_layout, saved_from_values, url_from_saved
from udfs.core.robots_state import RobotsState
from udfs.core.traps import DailyBudget, TemplateBudget


class HostParts(Protocol):
    """What the codec reads and fills: a host (HostFrontier) and its parts."""

    host_key: str
    stats: dict[str, int]
    pacer: Pacer
    gate: RobotsGate
    queue: UrlQueue
    window: ColdWindow
    leases: LeaseBook
    ends: Completions
    shards: ShardLink
    door: Admitter
    budget: DailyBudget
    paused: bool
    control_version: int
    commands: list[str]
    counted: tuple[str, tuple[int, ...]] | None
    added_fields: frozenset[str]


class Slot(Protocol):
    """One stored value (a Flink ValueState): the host's robots.txt body."""

    def value(self) -> Any: ...

    def update(self, value: Any) -> None: ...


def host_state(h: HostParts) -> dict[str, Any]:
    """The host's durable state except its URLs, as plain data (one keyed value)."""
    pacer, gate, ends, shards = h.pacer, h.gate, h.ends, h.shards
    return {
        "host_key": h.host_key, "policy": _fields_of(pacer.policy),
        "robots": _fields_of(gate.state), "robots_version": gate.version,
        "robots_lease": None if gate.lease is None else _fields_of(gate.lease),
        "robots_follow": gate.follow, "robots_hops": gate.hops,
        "next_allowed_at": pacer.next_allowed_at, "backoff_until": pacer.backoff_until,
        "plan_at": pacer.plan_at, "heads_only": pacer.heads_only,
        "throttles": pacer.throttles, "last_duration_s": pacer.last_duration_s,
        "backoff_exponent": pacer.backoff_exponent, "allowance": pacer.allowance,
        "dup_share": ends.dup_share, "paused": h.paused,
        "control_version": h.control_version, "commands": list(h.commands),
        "recent": list(ends.recent),
        "counted": h.counted,
        "in_flight": _leases_out(h.leases),
        "expired_spent": dict(h.leases.expired_spent),
        "budget": _fields_of(h.budget),
        "templates": h.door.templates.saved(),
        "lease_seq": h.leases.seq, "rng": pacer.rng.state, "stats": dict(h.stats),
        "sharded": dict(shards.sharded), "pull_out": shards.pull_out,
        "put_since_pull": dict(shards.put_since_pull),
        "unleased": shards.unleased,
        "big": h.window.big, "cold_index": h.window.index(),
    }


def restore(h: HostParts, snap: dict[str, Any]) -> None:
    """Fill a new host from a snapshot; the queue is derived from the URL states.

    State written by other code restores: a field added since (at the top level or in
    a record) takes the value a new host has, a retired one is ignored; the added ones
    are listed in `added_fields`."""
    pacer, gate, ends, shards = h.pacer, h.gate, h.ends, h.shards
    fresh = host_state(h)
    added = {k for k in fresh if k not in snap}
    snap = {**fresh, **snap}
    pacer.policy = _from_fields(HostPolicy, snap["policy"], added, "policy")
    gate.state = _from_fields(RobotsState, snap["robots"], added, "robots")
    gate.version = snap["robots_version"]
    gate.lease = _from_fields(Lease, snap["robots_lease"], added, "robots_lease")
    gate.follow = snap["robots_follow"]
    gate.hops = snap["robots_hops"]
    pacer.next_allowed_at, pacer.backoff_until = snap["next_allowed_at"], snap["backoff_until"]
    pacer.plan_at, pacer.heads_only = snap["plan_at"], snap["heads_only"]
    pacer.throttles, pacer.last_duration_s = snap["throttles"], snap["last_duration_s"]
    pacer.backoff_exponent, pacer.allowance = snap["backoff_exponent"], snap["allowance"]
    ends.dup_share = snap["dup_share"]
    h.paused, h.control_version = snap["paused"], snap["control_version"]
    h.commands = list(snap["commands"])
    ends.recent = [tuple(r) for r in snap["recent"]]
    h.counted = None if snap["counted"] is None else \
        (snap["counted"][0], tuple(snap["counted"][1]))
    h.leases.out = {k: _from_fields(Lease, v, added, "in_flight")
                    for k, v in snap["in_flight"].items()}
    h.budget = replace(_from_fields(DailyBudget, snap["budget"], added, "budget"))
    h.added_fields = frozenset(added)
    templates = snap["templates"]
    if isinstance(templates, TemplateBudget):  # written before field-named state
        templates = templates.saved()
    h.door.templates = TemplateBudget.from_saved(templates)
    h.leases.seq = snap["lease_seq"]
    h.leases.expired_spent = {k: (v[0], v[1]) for k, v in snap["expired_spent"].items()}
    pacer.rng.state = snap["rng"]
    h.stats = dict(snap.get("stats", {}))
    h.window.big, h.window.saved_index = snap.get("big", False), snap.get("cold_index")
    shards.sharded = {int(k): v for k, v in snap["sharded"].items()}
    shards.pull_out = None if snap["pull_out"] is None else list(snap["pull_out"])
    shards.put_since_pull = {int(k): v for k, v in snap["put_since_pull"].items()}
    shards.unleased = snap["unleased"]
    gate.reparse()
    pacer.crawl_delay = gate.crawl_delay()
    restored = sorted(((k, url_from_saved(saved), saved) for k, saved in snap["urls"].items()),
                      key=lambda t: (t[1].next_fetch_at, t[0]))
    # Sorted, so that the rebuilt queue does not depend on the snapshot's dict order.
    for k, u, saved in restored:
        kept = saved if isinstance(saved, tuple) and not is_layout(saved) else None
        h.queue.restored(k, u, kept)
    h.queue.dirty.clear()


def load(h: HostParts, saved: dict[str, Any] | None, urls: KeyValue, resident: KeyValue,
         segments: KeyValue, all_urls: Callable[[], Iterable[tuple[str, Any]]],
         resident_ids: Callable[[], Iterable[str]], robots: Slot | None = None) -> None:
    """Fill a new host from keyed storage (nothing saved: it stays new): a big host
    loads only its resident window, a small one all its URLs. `robots`: where `save`
    keeps the robots.txt body apart (state written before it was kept apart has the
    body in the host's value; the next save moves it)."""
    if saved is not None:
        if saved.get("big"):
            window = {uid: urls.get(uid) for uid in resident_ids()}
            window = {uid: v for uid, v in window.items() if v is not None}
        else:
            window = dict(all_urls())
        stored: object = UNSTORED
        kept = saved.get("robots")
        if robots is not None and isinstance(kept, dict) and "body" not in kept:
            value = robots.value()
            stored = None if value is None else value[0]
            saved = {**saved, "robots": {**kept, "body": stored}}
        restore(h, {**saved, "urls": window})
        h.gate.stored_body = stored
    h.window.attach(segments, urls)


def save(h: HostParts, urls: KeyValue, resident: KeyValue, segments: KeyValue,
         robots: Slot | None = None) -> dict[str, Any]:
    """Write what changed since the last save; returns the host's own value to store.

    `urls`: url_id → URL by field name (every URL, resident or cold); `resident`: the
    ids in memory (kept only once the host is big); `segments`: the cold queue;
    `robots`: the robots.txt body (up to 512 KiB), written only when it changed, so
    that the host's own value, rewritten on every call, stays small. Without it the
    body stays in the host's value.
    """
    if h.window.store is None:
        h.window.attach(segments, urls)
    for uid, saved in h.queue.changed():
        if saved is None:
            urls.remove(uid)
        else:  # in a named layout: a savepoint survives added or retired fields
            urls.put(uid, saved_from_values(saved))
    assert h.window.store is not None
    h.window.store.flush()
    added, removed = h.window.changes()
    for uid in added:
        resident.put(uid, True)
    for uid in removed:
        resident.remove(uid)
    snap = host_state(h)
    if robots is not None:
        body = snap["robots"].pop("body")
        if body is not h.gate.stored_body:
            robots.update((body,))
            h.gate.stored_body = body
    return snap


@cache
def _enum_fields(cls: type) -> dict[str, type[Enum]]:
    """The fields of a dataclass whose type is one of our enums (kept by value in state)."""
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)
            if isinstance(hints[f.name], type) and issubclass(hints[f.name], Enum)}


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


@cache
def _field_values(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    """A record's field values in `_field_names` order, in one call (every host's value
    is rebuilt on every call of the frontier, some hundred fields)."""
    names = _field_names(cls)
    get = attrgetter(*names)
    return get if len(names) > 1 else lambda record: (get(record),)


def _fields_of(record: Any) -> dict[str, Any]:
    """A dataclass record as {field name: value}, enums by their value: keyed state holds
    builtin types only, so renaming or moving a class of ours never breaks a savepoint."""
    cls: type = type(record)
    return {name: value.value if isinstance(value, Enum) else value
            for name, value in zip(_field_names(cls), _field_values(cls)(record), strict=True)}


def _leases_out(book: LeaseBook) -> dict[str, dict[str, Any]]:
    """The leases out by field name. A lease (frozen) does not change while it is out,
    and a host's value is rebuilt on every call: each lease's dict is made once and
    kept in the book (`saved_out`) while the lease is out (the same lease object: a
    restore or a re-let makes a new one). The dicts are shared with earlier values:
    no caller may change one."""
    kept, fresh = book.saved_out, {}
    for lease_id, lease in book.out.items():
        hit = kept.get(lease_id)
        fresh[lease_id] = hit if hit is not None and hit[0] is lease else \
            (lease, _fields_of(lease))
    book.saved_out = fresh
    return {lease_id: fields for lease_id, (_, fields) in fresh.items()}


def _from_fields(cls: type, saved: Any, added: set[str] | None = None, where: str = ""
                 ) -> Any:
    """Rebuild a record saved by field name: unknown (retired) fields are ignored, missing
    (added) ones take their defaults and are noted in `added` as "where.name"; enums are
    read back from their values (or taken as they are, from state written before enums
    were stored by value). A record pickled whole by older code passes as is."""
    if saved is None or isinstance(saved, cls):
        return saved
    names = {f.name for f in fields(cls)}
    if added is not None:
        added.update(f"{where}.{n}" for n in names if n not in saved)
    values = {k: v for k, v in saved.items() if k in names}
    for name, enum in _enum_fields(cls).items():
        if values.get(name) is not None:
            values[name] = enum(values[name])
    return cls(**values)
