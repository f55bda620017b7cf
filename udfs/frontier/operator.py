"""Flink shell of the frontier: adapts `HostFrontier` to keyed state and timers.

`Intake` (not keyed) decodes discovered URLs, completions and index events (read
back for their duplicate flags), normalizes and regroups links by their real
host_key, and dead-letters what it cannot read.
`FrontierFunction` (keyed by host_key, thread mode) keeps each host's state in
Flink keyed state — the host's fields in one value, its URLs in a map (a big
host: a resident window plus a cold queue) — with a cache of live `HostFrontier`
objects in front, bounded in hosts and URLs, rebuilt from state on a miss (after a
restore the cache starts empty). Each call ends by writing back what changed and
arming one event-time timer at the host's `next_wake`.

Time: the crawl clock (`crawl_now`): event time, driven by the clock stream the
job joins to this operator's input (jobs/frontier.py, KafkaIO.clock), never
behind the wall clock. The core takes `now` as an input, so the virtual-clock
tests drive the same rules, and a clock topic drives the job itself.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from pyflink.common import Row, Types
from pyflink.datastream import KeyedProcessFunction, OutputTag, ProcessFunction
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from udfs.config import Config, ConfigError, host_policy_settings
from udfs.config.policies import frontier_config
from udfs.core.addresses import AddressPolicy
from udfs.core.control import Command, HostCommand, apply_command
from udfs.core.frontier import (
    Acceptance,
    HostFrontier,
    Kind,
    url_from_saved,
)
from udfs.core.frontier.hearing import FetcherHearing
from udfs.core.frontier.recent import RecentUrls
from udfs.core.recrawl import Dup
from udfs.core.shards import ShardQueue, Transfer, shard_trap_policy
from udfs.core.traps import DailyBudget
from udfs.core.urlfilters import load_filters
from udfs.core.urls import UrlPolicy, split_host_key
from udfs.flink import collector
from udfs.flink.runtime import BYTES, ROW_KEY_VALUE
from udfs.frontier.metrics import FrontierMetrics
from udfs.frontier.pipeline import (
    DuplicateFeedback,
    NewUrl,
    discovered_records,
    duplicate_feedback,
    fetch_result,
    fresh_links,
    index_event,
    intake,
    lease_record,
    ms,
    transfer_from_record,
    transfer_record,
)
from udfs.wire import records
from udfs.wire.avro import AvroDecodeError, registry
from udfs.wire.deadletter import dead_letter

log = logging.getLogger(__name__)

# The payloads are pickled here (pickle.dumps) and typed as byte arrays, which cross
# into and out of Python as they are: typed PICKLED_BYTE_ARRAY, PyFlink would pickle
# the pickle again at each hop (bench/bench_state_calls.py: a keyed hop's CPU with each).
# A record's type between two operators is neither in their ids nor in their state, so
# a checkpoint or savepoint of a build that pickled them twice restores.
# Both are (key, value), keyed in the JVM (udfs.flink.runtime.keyed_by_first): the keyed
# function gets the value. A host's input is its kind (one letter) before the pickle.
HOST_INPUT = Types.ROW_NAMED(["host_key", "input"], [Types.STRING(), BYTES])
INDEX_INPUT = Types.ROW_NAMED(["body_key", "event"], [Types.STRING(), BYTES])
TICK = "T"  # HOST_INPUT kind of a crawl-clock tick
DEAD_LETTERS = OutputTag("dead-letters", ROW_KEY_VALUE)
DISCOVERED = OutputTag("discovered", ROW_KEY_VALUE)
REPLIES = OutputTag("control-replies", ROW_KEY_VALUE)
SHARDS = OutputTag("shards", ROW_KEY_VALUE)  # a hot host's owner ↔ shards (exactly-once)
INDEX = OutputTag("index", INDEX_INPUT)


def host_row(host_key: str, kind: str, payload: Any) -> Row:
    """A HOST_INPUT row: to the owner of `host_key`, an input of `kind` (D: discovered
    URLs, C: a completion, F: duplicate feedback, K: a command, S: a shard's move)."""
    return Row(host_key, kind.encode() + pickle.dumps(payload))


def tick_row(_: Any = None) -> Row:
    """The HOST_INPUT row of a crawl-clock tick (only its watermark matters)."""
    return Row("", TICK.encode())


def transfer_row(reg: Any, t: Transfer) -> Row:
    """A hot host's move as a shards-topic row, keyed by the key that receives it."""
    return Row(t.target.encode(), records.SHARDS.encode(reg, transfer_record(t)))


def _now() -> float:
    return time.time()


# Watermarks past this are end-of-input markers (Long.MAX), not a clock reading.
_CLOCK_LIMIT_MS = 2**62


def crawl_now(watermark_ms: int) -> float:
    """The crawl clock: the event-time watermark (driven by the clock stream), never
    behind the wall clock — a lagging watermark must not shorten a politeness gap."""
    wall = _now()
    if watermark_ms <= 0 or watermark_ms >= _CLOCK_LIMIT_MS:
        return wall
    return max(wall, watermark_ms / 1000.0)


def parallel_subtasks(ctx) -> int:
    """The operator's parallelism. In thread mode PyFlink 2.2's runtime context asks the
    JVM for getNumberOfParallelSubtasks, which Flink 2 moved to getTaskInfo()."""
    try:
        return ctx.get_number_of_parallel_subtasks()
    except AttributeError:
        return ctx._runtime_context.getTaskInfo().getNumberOfParallelSubtasks()


class Intake(ProcessFunction):
    """Row(key, value, topic, partition, offset) → HOST_INPUT rows (host_row).

    Links are normalized with the configured drop list (urls.drop_query_params; one its
    memory of recent URLs holds is normalized already, and taken as it is), and
    a URL whose host is an IP literal the address policy refuses (fetch.allowed_networks)
    is never queued: it goes to the dead-letter topic as ADDRESS_BLOCKED, counted in
    the metric urls_refused_address. The user's URL filters (urls.filters) run here
    first; what they drop is counted in urls_filtered_total{filter}. Every discovered
    URL passes here (seeds, links, sitemap entries, redirect targets and robots.txt
    Sitemap lines alike). A rediscovery of a URL sent to its host within
    frontier.intake_recent_s that could change nothing there is not sent again
    (udfs/core/frontier/recent.py), counted in urls_rediscovered_at_intake."""

    def __init__(self, cfg_data: dict[str, Any]) -> None:
        self.cfg_data = cfg_data

    def open(self, runtime_context) -> None:
        cfg = Config(self.cfg_data)
        self.discovered_topic = cfg.topic("discovered")
        self.completions_topic = cfg.topic("completions")
        self.index_topic = cfg.topic("index")
        self.control_topic = cfg.topic("control")
        self.shards_topic = cfg.topic("shards")
        self.url_policy = UrlPolicy.from_names(cfg["urls.drop_query_params"])
        self.address_policy = AddressPolicy.from_networks(cfg["fetch.allowed_networks"])
        self.filters = load_filters(cfg["urls.filters"])
        self.reg = registry()
        group = runtime_context.get_metrics_group()
        self.refused_address = group.counter("urls_refused_address")
        # Rediscoveries not sent to their hosts again (udfs/core/frontier/recent.py).
        settings = frontier_config(cfg)
        self.recent = RecentUrls(settings.intake_recent_urls, settings.intake_recent_s)
        self.rediscovered = group.counter("urls_rediscovered_at_intake")
        # URLs dropped by the user's filters, by filter (a fixed, configured set).
        self.filtered = {name: group.add_group("filter", name).counter("urls_filtered_total")
                         for name, _ in self.filters}
        self.dead_letter_group = group
        self.dead_letters: dict[str, Any] = {}  # by reason (error type): a fixed set

    def _dead(self, row, reason: str, error_type: str, **kw):
        counter = self.dead_letters.get(error_type)
        if counter is None:
            counter = self.dead_letters[error_type] = self.dead_letter_group.add_group(
                "reason", error_type).counter("dead_letters_total")
        counter.inc()
        key = None if row[0] is None else bytes(row[0])
        return DEAD_LETTERS, Row(key, dead_letter(
            self.reg, stage="frontier.intake", reason=reason, error_type=error_type,
            payload=bytes(row[1]), now_ms=ms(_now()), source_topic=row[2],
            source_partition=row[3], source_offset=row[4], key=key, **kw))

    def process_element(self, row, ctx):
        topic = row[2]
        data = bytes(row[1])
        try:
            # The completions topic also holds, just before a completion, the URLs its
            # fetch found when they were too many to go inside it (udfs/fetcher/operator.py):
            # told apart by the writer's schema.
            if topic == self.discovered_topic or (
                    topic == self.completions_topic and
                    records.DISCOVERED.wrote(self.reg, data)):
                discovered = records.DISCOVERED.decode(self.reg, data)
                yield from self._urls(row, discovered)
            elif topic == self.index_topic:  # the index's duplicate checks, to the URL's owner
                event = records.INDEX.decode(self.reg, data)
                feedback = duplicate_feedback(event)
                if feedback is not None:
                    yield host_row(event["host_key"], "F", feedback)
            elif topic == self.control_topic:  # an operator's command, to the host's owner
                command = records.CONTROL.decode(self.reg, data)
                yield host_row(command["host_key"], "K", command)
            elif topic == self.shards_topic:  # to a hot host's shard, or back to its owner
                t = transfer_from_record(records.SHARDS.decode(self.reg, data))
                yield host_row(t.target, "S", t)
            else:
                completion = records.COMPLETIONS.decode(self.reg, data)
                # The URLs its fetch found (completion v4) to the other hosts first, then
                # the completion (its `discovered` emptied) with its own host's URLs
                # beside it, admitted in the same call just before it (a call fewer per
                # page).
                own = completion["host_key"]
                own_links: list[NewUrl] = []
                for found in records.found_records(completion):
                    yield from self._urls(row, found, own, own_links)
                completion["discovered"] = []
                yield host_row(own, "C", (completion, own_links))
        except AvroDecodeError as exc:
            yield self._dead(row, str(exc), type(exc).__name__)

    def _fresh(self, links: list[NewUrl]) -> list[NewUrl]:
        """The links whose host has not had them lately (udfs/core/frontier/recent.py);
        the others, which it would answer with urls_known or the same refusal, counted."""
        fresh = fresh_links(self.recent, links, _now())
        if len(fresh) < len(links):
            self.rediscovered.inc(len(links) - len(fresh))
        return fresh

    def _urls(self, row, discovered: records.DiscoveredUrls, own: str | None = None,
              own_links: list[NewUrl] | None = None):
        """Rows of one DiscoveredUrls record: to each host its URLs, dead letters for the
        refused ones. The URLs of host `own` go to `own_links` instead, when given."""
        found = intake(discovered, self.url_policy, self.address_policy, self.filters,
                       self.recent)
        for host_key, links in found.groups.items():
            if self.recent.max_urls:
                links = self._fresh(links)
                if not links:
                    continue
            if host_key == own and own_links is not None:
                own_links.extend(links)
            else:
                yield host_row(host_key, "D", links)
        for url, name, error in found.filtered:
            self.filtered[name].inc()
            if error is not None:  # the filter raised: its bug, kept for its author
                yield self._dead(row, f"URL filter {name} raised {error}",
                                 "UrlFilterError", url=url)
        for url in found.invalid:
            yield self._dead(row, "not an http(s) URL", "InvalidUrl", url=url)
        for url, reason in found.refused:
            self.refused_address.inc()
            yield self._dead(row, f"address blocked by the SSRF policy: {reason}",
                             "ADDRESS_BLOCKED", url=url, host_key=split_host_key(url)[0])


def _discover(h: HostFrontier, links: list[NewUrl], now: float) -> None:
    """Admit URLs of host `h` that the intake has checked (see intake)."""
    for link in links:
        h.discover(link["url"], now, depth=link["depth"], priority=link["priority"],
                   is_seed=link["is_seed"], redirect_hops=link["redirect_hops"],
                   kind=link["kind"], checked=True, lastmod=link["lastmod"],
                   changefreq=link["changefreq"])


class FrontierFunction(KeyedProcessFunction):
    """One host per key: discovery, leases, completions, timers."""

    def __init__(self, cfg_data: dict[str, Any]) -> None:
        self.cfg_data = cfg_data

    def open(self, ctx) -> None:
        cfg = frontier_config(self.cfg_data)
        # frontier.daily_fetch_budget is the job's: each subtask leases its share of it
        # per UTC day (counted in this task's memory; see the defaults file).
        share = -(-cfg.daily_fetch_budget // max(1, parallel_subtasks(ctx)))
        self.cfg = replace(cfg, daily_fetch_budget=share)
        self.fetch_budget = DailyBudget()
        self.shard_traps = shard_trap_policy(cfg.traps, cfg.host_shards)
        self.reg = registry()
        bytes_ = Types.PICKLED_BYTE_ARRAY()
        self.host_state = ctx.get_state(ValueStateDescriptor("host", bytes_))
        # Every URL of the host by url_id (resident or cold), the ids in memory (big
        # hosts only) and the cold queue's segments: see udfs/core/coldqueue.py.
        self.url_state = ctx.get_map_state(MapStateDescriptor("urls", Types.STRING(), bytes_))
        self.resident = ctx.get_map_state(MapStateDescriptor("resident", Types.STRING(),
                                                             Types.BOOLEAN()))
        self.segments = ctx.get_map_state(MapStateDescriptor("cold", Types.STRING(), bytes_))
        # The host's robots.txt body, apart from its value, which every call rewrites.
        self.robots_body = ctx.get_state(ValueStateDescriptor("robots_body", bytes_))
        self.cache: OrderedDict[str, HostFrontier] = OrderedDict()
        self.cached_urls = 0  # URLs held by the cached hosts
        # Hosts restored from state written by a build that lacked some of this
        # build's fields (a savepoint upgrade that added one): a metric, and a log
        # line per distinct set of added fields.
        self.restored_with_added = ctx.get_metrics_group().counter(
            "hosts_restored_with_added_fields")
        self.metrics = FrontierMetrics(ctx.get_metrics_group())
        self.added_reported: set[frozenset[str]] = set()
        # The timer each cached host has armed and not yet seen fire, so that a call
        # that ends with the same wake time does not ask the JVM for it again.
        self.armed: dict[str, int] = {}
        # What this subtask heard from the fetcher (completions of any of its hosts, at
        # the times the fetcher wrote them): an expiry spends an attempt only if the
        # fetcher was alive when its lease was issued (udfs/core/frontier/hearing.py).
        # In memory: a restored subtask takes the fetcher as alive until its first call.
        self.hearing = FetcherHearing()
        # The job's interpreter (thread mode: every Python operator of this JVM): the
        # young generation collected less often (udfs/flink/collector.py). Nothing is
        # frozen: the interpreter may outlive this operator (a task restarted here).
        collector.settle(freeze=False)

    def close(self) -> None:
        self.metrics.batch.flush()
        # The interpreter outlives this operator (thread mode): what it holds goes now,
        # not whenever the collector finds the operator in a cycle.
        self.cache.clear()
        self.armed.clear()

    def _now(self, ctx) -> float:
        """The crawl clock: a virtual clock's watermark (`crawl_now`), or else this
        machine's wall clock, by which the processing-time timers fire too."""
        if self.cfg.clock_topic:
            return crawl_now(ctx.timer_service().current_watermark())
        return _now()

    # -- state ----------------------------------------------------------------------

    def _host(self, key: str) -> HostFrontier:
        h = self.cache.get(key)
        if h is not None:
            self.cache.move_to_end(key)
            return h
        h = HostFrontier.load(key, self.host_state.value(), self.cfg, self.url_state,
                              self.resident, self.segments, self.url_state.items,
                              self.resident.keys, self.robots_body)
        if h.added_fields:
            self.restored_with_added.inc()
            if h.added_fields not in self.added_reported:
                self.added_reported.add(h.added_fields)
                log.warning("host state of %s was written by a build without the fields "
                            "%s; they took their defaults", key, ", ".join(sorted(h.added_fields)))
        h.observer = self.metrics
        self.cache[key] = h
        self.cached_urls += len(h.urls)
        return h

    def _save(self, h: HostFrontier, before: int, now: float) -> None:
        self.metrics.sized(h, now)
        self.host_state.update(h.save(self.url_state, self.resident, self.segments,
                                      self.robots_body))
        self.cached_urls += len(h.urls) - before
        # Bounded by hosts and by URLs; a dropped host's state is already in Flink.
        while len(self.cache) > 1 and (len(self.cache) > self.cfg.cache_hosts or
                                       self.cached_urls > self.cfg.cache_urls):
            key, old = self.cache.popitem(last=False)
            self.cached_urls -= len(old.urls)
            self.armed.pop(key, None)

    def _finish(self, h: HostFrontier, before: int, now: float, ctx):
        """Grant what the host allows now, save, and arm the next timer."""
        self.hearing.started(now)  # (only its first call counts)
        for _ in range(self.cfg.max_grants_per_call):
            lease = h.poll(now, self.fetch_budget, self.hearing)
            if lease is None:
                break
            if lease.kind is not Kind.ROBOTS and h.gate.state.fetched_at is not None:
                self.metrics.robots_aged(now - h.gate.state.fetched_at)
            yield Row(h.host_key.encode(), records.LEASES.encode(self.reg, lease_record(lease)))
        h.maybe_pull(now)
        moves, h.shards.outbox = h.shards.outbox, []
        for t in moves:  # a hot host's moves to and from its shards
            yield SHARDS, transfer_row(self.reg, t)
        self._save(h, before, now)
        self.metrics.batch.due()
        wake = h.next_wake(now)
        if wake is None:
            return
        at = max(ms(wake), ms(now) + 1)
        if self.armed.get(h.host_key) == at:  # already armed for then, not yet fired
            return
        self.armed[h.host_key] = at
        if self.cfg.clock_topic:  # a virtual clock: fires when its watermark passes
            ctx.timer_service().register_event_time_timer(at)
        else:  # the wall clock: on time to the millisecond, not at the next tick
            ctx.timer_service().register_processing_time_timer(at)

    # -- inputs -----------------------------------------------------------------------

    def process_element(self, value, ctx):
        kind = chr(value[0])  # a HOST_INPUT's value (host_row); its key is the host's
        if kind == TICK:  # the clock's own records: only their watermarks matter
            self.metrics.batch.due()  # (and they bring a quiet subtask's counts out)
            return
        now = self._now(ctx)
        payload = pickle.loads(memoryview(value)[1:])
        if kind == "S" and payload.kind != "REFILL":  # to one of a hot host's shards
            yield from self._shard(payload, now)
            return
        host_key = ctx.get_current_key()
        if kind == "K" and payload["command"] in ("SHOW", "SHOW_URL") and \
                host_key not in self.cache and self.host_state.value() is None:
            # A question about a host this crawl does not know: answered, no state made.
            yield REPLIES, self._control(HostFrontier(host_key, self.cfg), payload, now)
            return
        h = self._host(host_key)
        before = len(h.urls)
        if kind == "D":
            _discover(h, payload, now)
        elif kind == "F":
            feedback: DuplicateFeedback = payload
            h.duplicate(feedback["url_id"], feedback["url_version"], Dup(feedback["dup"]),
                        feedback["new_page"], now)
        elif kind == "K":
            yield REPLIES, self._control(h, payload, now)
        elif kind == "S":  # a shard's answer to this owner's pull
            h.take_refill(payload, now)
        else:
            # (completion, its own host's URLs). A completion alone, as builds before
            # them sent it, is taken too: defensive, since checkpoints are aligned and
            # keep no row in transit between the intake and here.
            completion: records.Completion
            completion, own_links = payload if isinstance(payload, tuple) else (payload, [])
            _discover(h, own_links, now)
            self.hearing.heard(min(now, completion["fetched_at_ms"] / 1000.0))
            result = h.complete(fetch_result(completion), now)
            if result.verdict is Acceptance.ACCEPTED:
                if result.index:
                    if result.state is None:  # the core sets it on every accepted page
                        raise RuntimeError(f"accepted {result.url} without its state")
                    event = index_event(result.state, completion,
                                        result.change)
                    yield INDEX, Row(event["body_sha256"] or event["url_id"],
                                     pickle.dumps(event))
                for host_key, rec in discovered_records(result.discovered, result.url,
                                                        ms(now)):
                    yield DISCOVERED, Row(host_key.encode(),
                                          records.DISCOVERED.encode(self.reg, rec))
        yield from self._finish(h, before, now, ctx)

    def _shard(self, t: Transfer, now: float):
        """A shard of a hot host (key host_key#n): keeps the URLs the owner puts, answers
        its pulls. It never leases, so it has no timers."""
        q = ShardQueue(t.host_key, t.shard, self.host_state.value(), self.url_state,
                       self.segments, bucket_s=self.cfg.cold_bucket_s,
                       traps=self.shard_traps, count=self.metrics.event)
        if t.kind == "PUT":
            q.put(t.urls, lambda saved: url_from_saved(saved).next_fetch_at, now)
        else:  # PULL
            yield SHARDS, transfer_row(self.reg, q.pull(t.want))
        self.host_state.update(q.state())
        self.metrics.batch.due()  # (the shard's admissions, on a subtask of shards only)

    def _control(self, h: HostFrontier, record: records.HostCommandRecord, now: float) -> Row:
        """Apply an operator's command (udfs/core/control.py) and encode the reply."""
        import json

        try:
            settings = host_policy_settings(record["settings"]) if record["settings"] else {}
            reply = apply_command(h, HostCommand(
                record["command_id"], record["host_key"], Command(record["command"]),
                record["version"], settings, record["url"]), now, self.cfg.host)
            ok, applied, error, detail = reply.ok, reply.applied, reply.error, reply.detail
        except (ConfigError, ValueError) as exc:  # refused: the host is unchanged
            ok, applied, error, detail = False, False, str(exc), {}
        return Row(record["command_id"].encode(), records.REPLIES.encode(self.reg, {
            "command_id": record["command_id"], "host_key": h.host_key, "ok": ok,
            "applied": applied, "error": error, "detail_json": json.dumps(detail, default=str),
            "replied_at_ms": ms(now)}, check=True))

    def on_timer(self, timestamp: int, ctx):
        now = crawl_now(timestamp)
        key = ctx.get_current_key()
        if self.armed.get(key) == timestamp:
            del self.armed[key]
        h = self._host(key)
        yield from self._finish(h, len(h.urls), now, ctx)
