"""Flink shell of the fetcher: an AsyncFunction around `process_lease` (process mode).

Each lease becomes zero or more Row(dest, key, value): dest "C" for the completions
topic, "X" a dead letter. A fetched lease's completion holds what the fetch found
(its links, a sitemap's entries: completion v4 `discovered`), so the frontier never
reads a completion without the URLs found with it. (On a topic of their own the URLs
could be lost to a kill -9 after the completion was sent: the restored fetcher does
not send that lease again, and the frontier has marked it done.) URLs too many for
one Kafka record (over 512 KB of links, a big sitemap) go instead as discovered-URLs
records just before the completion, keyed by the lease's host_key like it: one
partition, in that order, through one idempotent producer; what that order does not
cover, a send error: README, "Pace and politeness". The aiohttp session is made on
the first call, inside the operator's event loop.

The function hands each lease to the fetch engine (`udfs.fetcher.engine`: its own thread
and event loop, so that no PyFlink bundle waits for a fetch) and returns at once what
the engine has finished since; a tick record (an empty value) only collects those.
When a lease is sent is decided by the back queues (`udfs.core.backqueue`): each
host's slot in this incarnation holds a lease until its not_before, the gap after
the previous request's real end, the host's in-flight limit and any Retry-After,
and refuses leases it cannot place safely (issued before a restart, following a
lease an earlier incarnation had, halted by a 429/503, too early or too late). A
lease is held waiting for at most `fetch.hold_s`; a refused lease is reported NOT_SENT
when this incarnation knows no one sent it, so the frontier takes it back at once.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import aiohttp
from pyflink.common import Row, Types
from pyflink.datastream.functions import AsyncFunction

from udfs.config import Config
from udfs.config.policies import fetch_limits, parse_limits
from udfs.core.addresses import AddressPolicy
from udfs.core.backqueue import REPORTED, BackQueues, LeaseTiming, Skip
from udfs.core.fetching import DnsCache
from udfs.core.ipgate import IpGate, IpPolicy
from udfs.core.politeness import Pace
from udfs.core.urls import UrlPolicy
from udfs.fetcher.faults import fault_injector
from udfs.fetcher.turns import Answer, Turns
from udfs.flink import collector
from udfs.wire.avro import AvroDecodeError, registry
from udfs.wire.deadletter import dead_letter
from udfs.wire.records import (
    COMPLETIONS,
    DISCOVERED,
    LEASES,
    Completion,
    LeaseRecord,
    attach_found,
)

if TYPE_CHECKING:
    from udfs.fetcher.client import FetchResponse

FETCH_OUTPUT = Types.ROW_NAMED(["dest", "key", "value"], [
    Types.STRING(), Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.PRIMITIVE_ARRAY(Types.BYTE())])

# Slots of hosts quiet this long are dropped (their history is older than any gap). A
# memory bound, not a politeness one: a slot with a request in flight or a wait pending
# is never dropped (BackQueues.forget_idle), and a lease that follows a forgotten one
# is not sent.
IDLE_SLOT_S = 900.0
# Seconds a lease's guard allows for storing its body and writing its WARC records.
STORE_MARGIN_S = 10.0


def lease_timing(lease: LeaseRecord) -> LeaseTiming:
    """The back queue's view of a LeaseRecord (milliseconds to seconds)."""
    return LeaseTiming(
        lease["lease_id"], lease["host_key"], lease["issued_at_ms"] / 1000.0,
        lease["not_before_ms"] / 1000.0, lease["expires_at_ms"] / 1000.0,
        lease["prev_lease_id"],
        Pace(lease["gap_s"], lease["duration_factor"], lease["max_gap_s"],
             lease["max_in_flight"]), lease["throttle_seq"])


def not_sent(lease: LeaseRecord, reason: Skip, now: float, start_at: float | None
             ) -> Completion:
    """The Completion record of a lease this fetcher did not send (and knows no one did);
    retry_after: seconds until the host could be asked, as far as this fetcher knows."""
    wait = None if start_at is None or start_at <= now + 1 else str(math.ceil(start_at - now))
    return {
        "lease_id": lease["lease_id"], "url_id": lease["url_id"],
        "url_version": lease["url_version"], "attempt": lease["attempt"], "url": lease["url"],
        "host_key": lease["host_key"], "kind": lease["kind"], "outcome": "NOT_SENT",
        "http_status": None, "fetched_at_ms": int(now * 1000), "fetch_duration_ms": 0,
        "retry_after": wait, "redirect_location": None, "etag": None, "last_modified": None,
        "content_type": None, "body_sha256": None, "body_bytes": None, "object_key": None,
        "text_sha256": None, "simhash": None, "canonical_url": None, "noindex": False,
        "nofollow": False, "links_count": 0, "body": None, "error": reason.value,
        "warc_filename": None, "warc_offset": None, "warc_length": None, "discovered": [],
    }


class FetchFunction(AsyncFunction):
    """`restored`: the job was started from a savepoint or checkpoint (an upgrade or a
    rescale): as after a task restart, leases issued before this task started may have
    been sent by the job before it, so they are not sent (they expire and are re-let)."""

    def __init__(self, cfg_data: dict[str, Any], connections: int = 200,
                 restored: bool = False) -> None:
        self.cfg_data = cfg_data
        self.connections = connections
        self.restored = restored

    def open(self, runtime_context) -> None:
        from udfs.storage.bodies import open_store

        cfg = Config(self.cfg_data)
        self.reg = registry()
        self.limits = fetch_limits(cfg)
        self.user_agent = cfg["robots.user_agent"]
        self.store = open_store(cfg)
        self.cache = DnsCache(AddressPolicy.from_networks(cfg["fetch.allowed_networks"]),
                              self.limits,
                              dict(e.split("=", 1) for e in cfg["fetch.static_hosts"]))
        self.session: aiohttp.ClientSession | None = None  # made on the first lease
        self.faults = fault_injector(cfg["faults"])
        self.url_policy = UrlPolicy.from_names(cfg["urls.drop_query_params"])
        # A restarted task (attempt > 0) or a job restored from a savepoint replays the
        # leases read since its checkpoint: the incarnation before may have sent them.
        replays = self.restored or runtime_context.get_attempt_number() > 0
        queues = BackQueues(time.time() if replays else float("-inf"),
                            hold_s=cfg["fetch.hold_s"], fetch_s=self.limits.total_timeout_s + 1.0)
        # The second politeness key, on the server's address (udfs/core/ipgate.py).
        ip_gate = IpGate(IpPolicy(cfg["fetch.ip_min_gap_s"], cfg["fetch.ip_max_in_flight"]))
        self.turns = Turns(queues, ip_gate, self.cache)  # waited for on the engine's loop
        self.calls = 0
        # No lease is worked on longer than its hold, its fetch, its parse (the parse
        # limits' wall-clock cap) and a margin for storing the body and its WARC records:
        # past that it is given up (it expires at the frontier and is re-let). The parse
        # term follows parse.cpu_limit_s, so a slow parse within its limit ends with its
        # own outcome (PARSE_TIMEOUT) rather than at this guard.
        parsing = parse_limits(cfg)
        self.guard_s = cfg["fetch.hold_s"] + self.limits.total_timeout_s + \
            parsing.wall_cap_s + STORE_MARGIN_S
        from udfs.fetcher.engine import FetchEngine

        self.engine = FetchEngine(self._guarded, capacity=self.connections)
        # The task's parser processes (udfs/parser/stage.py), started on first use.
        from udfs.parser.stage import ParseStage

        self.parser = ParseStage(
            parsing, self.user_agent, self.url_policy,
            parse_delay_s=self.faults.parse_delay_s if self.faults is not None else 0.0,
            filters=cfg["parse.filters"], on_free=self.engine.room.notify)
        # Made on the first lease, on PyFlink's loop: one lease at a time waits for room.
        self._admission: asyncio.Lock | None = None
        self.warc = self._warc_writer(cfg, runtime_context)
        if self.warc is not None:  # what writers of this crawl that died here left
            self.warc.start_recovery()
        self._warc_roll = None  # the last age check handed to the writer
        self._warc_checked = time.monotonic()
        from udfs.fetcher.metrics import FetcherMetrics

        self.metrics = FetcherMetrics(runtime_context.get_metrics_group(), cfg["parse.filters"],
                                      self.turns.selfcheck, self.warc)
        # What is alive now (modules, Beam's harness, this task's parts) lives as long as
        # the process: out of the collector's generations, its full collections no longer
        # walk it. They took ~110 ms each (about one a 10 s at 200 sites), each a stall of
        # every fetch in flight, whose durations (10x) then space their hosts. And the
        # young generation is collected less often (udfs/flink/collector.py).
        collector.settle()

    def _warc_writer(self, cfg: Config, runtime_context):
        """The task's WARC writer (warc.enabled), one per subtask: its files are named
        after this host, the subtask and a token of this incarnation (never reused)."""
        if not cfg["warc.enabled"]:
            return None
        import socket
        import uuid

        from udfs.storage.warc import RollPolicy
        from udfs.storage.warc_writer import WarcWriter, store_identity

        subtask = getattr(runtime_context, "get_index_of_this_subtask", lambda: 0)()
        return WarcWriter(
            self.store, prefix=cfg["warc.prefix"], file_prefix=cfg["warc.file_prefix"],
            policy=RollPolicy(cfg["warc.max_file_bytes"], cfg["warc.max_file_age_s"]),
            temp_dir=cfg["warc.temp_dir"],
            host=f"{socket.gethostname()}-t{subtask}-{uuid.uuid4().hex[:6]}",
            dedup_entries=cfg["warc.dedup_entries"], operator=self.user_agent,
            store_id=store_identity(cfg), gzip_level=cfg["storage.gzip_level"])

    def _warc_tick(self) -> None:
        """At most once a second: have the writer publish its file if it is old enough
        (the writer's thread does it); a failed publish fails the task here."""
        if self.warc is None:
            return
        now = time.monotonic()
        if now - self._warc_checked < 1.0:  # (every lease comes here: only the clock)
            return
        roll = self._warc_roll
        if roll is not None and roll.done() and roll.exception() is not None:
            raise roll.exception()
        if roll is None or roll.done():
            self._warc_checked = now
            self._warc_roll = self.warc.submit(self.warc.roll_if_due)

    async def _session(self):
        if self.session is None:
            from udfs.fetcher.client import make_session

            self.session = make_session(self.cache, self.limits, limit=self.connections)
        return self.session

    def _dead(self, raw: bytes, reason: str, error_type: str) -> Row:
        return Row("X", None, dead_letter(self.reg, stage="fetcher.decode", reason=reason,
                                          error_type=error_type, payload=raw,
                                          now_ms=int(time.time() * 1000)))

    def _page_dead(self, lease: LeaseRecord, raw: bytes, stage: str, reason: str,
                   error_type: str) -> Row:
        """A dead letter about one lease's page, keyed by its host, the lease as payload."""
        return Row("X", lease["host_key"].encode(), dead_letter(
            self.reg, stage=stage, reason=reason, error_type=error_type, payload=raw,
            url=lease["url"], host_key=lease["host_key"], now_ms=int(time.time() * 1000)))

    def _skipped(self, lease: LeaseRecord, timing: LeaseTiming, reason: Skip) -> list[Row]:
        if reason not in REPORTED:
            return []  # replayed (it expires and is re-let) or a duplicate record
        now, local = self.turns.clock()
        record = not_sent(lease, reason, now, self.turns.queues.start_at(timing, now, local))
        self.metrics.count(record)
        return [Row("C", lease["host_key"].encode(), COMPLETIONS.encode(self.reg, record))]

    async def async_invoke(self, value):
        """Hand the lease to the engine (a tick: nothing) and return what it has done."""
        self.engine.check()
        self._warc_tick()
        if len(value[1]):
            # Backpressure from the engine (`connections` leases held or fetched) and the
            # parse stage (while parse.max_waiting pages wait for a parser no new lease is
            # taken; the engine's loop keeps fetching the others). The leases PyFlink hands
            # over meanwhile queue on the lock, in order, and only its holder waits for room.
            if self._admission is None:
                self._admission = asyncio.Lock()
            async with self._admission:
                await self.engine.submit_when_room(value, ready=lambda: not self.parser.full())
        return self.engine.drain()

    async def _guarded(self, value) -> list:
        """One lease, on the engine's loop, bounded in time."""
        try:
            async with asyncio.timeout(self.guard_s):
                return await self._invoke(value)
        except TimeoutError:
            return []  # the lease expires and is re-let; nothing is lost

    async def _invoke(self, value):
        from udfs.fetcher.pipeline import FetchContext, process_lease

        raw = bytes(value[1])
        try:
            lease = LEASES.decode(self.reg, raw)
        except AvroDecodeError as exc:
            return [self._dead(raw, str(exc), type(exc).__name__)]
        timing = lease_timing(lease)
        self.calls += 1
        if self.calls % 1000 == 0:
            self.turns.forget_idle(IDLE_SLOT_S)
        skip = self.turns.queues.admit(timing, *self.turns.clock())
        if skip is None:
            skip = await self.turns.wait_host(timing)
        if skip is not None:
            return self._skipped(lease, timing, skip)
        address = None
        if self.turns.ip_gate.policy.on:  # the host allows it; its server's address too
            try:
                address, skip = await self.turns.wait_address(lease, timing)
            except BaseException:  # cancelled (the lease's guard): nothing was sent
                await asyncio.shield(self.turns.release(timing, 0.0, None, sent=False))
                raise
            if skip is not None:  # not sent: the host's slot is free again at once
                await self.turns.release(timing, 0.0, None, sent=False)
                return self._skipped(lease, timing, skip)
        started = time.time()  # the crawl clock, as the lease's expiry
        begun = self.turns.started(timing)  # the local clock, as the host's slot
        completion: Completion | None = None
        released = False

        async def end_turns(resp: FetchResponse | None) -> None:
            """The request is over (the answer read, or the fetch failed): the host's
            and the address's next requests may follow after their gaps."""
            nonlocal released
            released = True
            linger = 0.0 if resp is None else resp.linger_s
            await self.turns.release(timing, begun, None if resp is None
                                     else Answer.of(resp), linger_s=linger)
            if address is not None:
                await self.turns.release_address(address, linger)

        try:
            remaining = timing.expires_at - started
            limits = self.limits if remaining > self.limits.total_timeout_s + 1 else \
                replace(self.limits, total_timeout_s=max(0.1, remaining - 1.0))
            ctx = FetchContext(await self._session(), self.store, limits, self.user_agent,
                               faults=self.faults, url_policy=self.url_policy,
                               stats=self.metrics.pages, warc=self.warc, parser=self.parser,
                               max_links=self.parser.limits.max_links,
                               on_response=end_turns)
            completion, discovered = await process_lease(lease, ctx)
            if self.faults is not None:
                self.faults.after_response(lease["url"])
        finally:
            if not released:  # the fetch itself raised, or was cancelled
                await end_turns(None)
        host = lease["host_key"].encode()
        self.metrics.count(completion)
        # What the page gave goes inside its completion (v4); only links too many for
        # one Kafka record go as records of their own, just before it (the module's
        # docstring). Upgrade the frontier first (README, "Upgrading across completion v4").
        out = [Row("C", host, DISCOVERED.encode(self.reg, d))
               for d in attach_found(completion, discovered)]
        if self.faults is not None and self.faults.drops_completion(lease["url"]):
            return out  # a recovery test's fault: the completion is lost, URLs and all
        out.append(Row("C", host, COMPLETIONS.encode(self.reg, completion)))
        if completion["outcome"] in ("PARSE_TIMEOUT", "PARSE_ERROR"):
            # A page the parser could not finish: recorded and skipped, its URL and reason
            # in a dead letter (the body is in storage).
            out.append(self._page_dead(lease, raw, "fetcher.parse", completion["error"] or "",
                                       completion["outcome"]))
        if ctx.parse_filter_error is not None:
            # A parse filter raised: the page was kept (as the filters before it left it);
            # the filter's bug goes to its author with the URL.
            name, error = ctx.parse_filter_error
            out.append(self._page_dead(lease, raw, "fetcher.parse_filter",
                                       f"parse filter {name} raised {error}",
                                       "ParseFilterError"))
        return out

    def timeout(self, value):
        return []  # the lease expires and is re-let; nothing is lost

    def close(self) -> None:
        if self.session is not None and not self.engine.loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(self.session.close(),
                                                 self.engine.loop).result(5)
            except Exception:  # the engine's loop may already be gone
                pass
            self.session = None
        self.engine.close()
        self.parser.close()
        if self.warc is not None:  # after the engine: no record is handed over any more
            self.warc.close()  # publishes the open file
