"""Flink shell of the fetcher: an AsyncFunction around `process_lease` (process mode).

Each lease becomes zero or more Row(dest, key, value): dest "C" a completion
(key host_key), "D" a discovered-URLs record (key its target host_key), "X" a
dead letter. The aiohttp session is made on the first call, inside the
operator's event loop.

The function hands each lease to the fetch engine (`udfs.fetch_engine`: its own thread
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
from typing import Any
from urllib.parse import urlsplit

from pyflink.common import Row, Types
from pyflink.datastream.functions import AsyncFunction

from udfs.avro import AvroDecodeError, registry
from udfs.config import Config
from udfs.core.addresses import AddressPolicy
from udfs.core.backqueue import REPORTED, BackQueues, LeaseTiming, Skip
from udfs.core.fetching import DnsCache
from udfs.core.ipgate import IpGate, IpPolicy
from udfs.core.politeness import Pace, parse_retry_after
from udfs.core.selfcheck import BREACHES, OUTCOME_CLASSES, PolitenessSelfCheck, outcome_class
from udfs.core.urls import UrlPolicy
from udfs.deadletter import dead_letter
from udfs.settings import fault_injector, fetch_limits, parse_limits

FETCH_OUTPUT = Types.ROW_NAMED(["dest", "key", "value"], [
    Types.STRING(), Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.PRIMITIVE_ARRAY(Types.BYTE())])

# Slots of hosts quiet this long are dropped (their history is older than any gap).
IDLE_SLOT_S = 900.0


def lease_timing(lease: dict[str, Any]) -> LeaseTiming:
    """The back queue's view of a LeaseRecord (milliseconds to seconds)."""
    return LeaseTiming(
        lease["lease_id"], lease["host_key"], lease["issued_at_ms"] / 1000.0,
        lease["not_before_ms"] / 1000.0, lease["expires_at_ms"] / 1000.0,
        lease["prev_lease_id"],
        Pace(lease["gap_s"], lease["duration_factor"], lease["max_gap_s"],
             lease["max_in_flight"]), lease["throttle_seq"])


def not_sent(lease: dict[str, Any], reason: Skip, now: float, start_at: float | None
             ) -> dict[str, Any]:
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
        from udfs.storage import open_store

        cfg = Config(self.cfg_data)
        self.reg = registry()
        self.limits = fetch_limits(cfg)
        self.user_agent = cfg["robots.user_agent"]
        self.store = open_store(cfg)
        self.cache = DnsCache(AddressPolicy.from_networks(cfg["fetch.allowed_networks"]),
                              self.limits,
                              dict(e.split("=", 1) for e in cfg["fetch.static_hosts"]))
        self.session = None
        self.faults = fault_injector(cfg)
        self.url_policy = UrlPolicy.from_names(cfg["urls.drop_query_params"])
        # A restarted task (attempt > 0) or a job restored from a savepoint replays the
        # leases read since its checkpoint: the incarnation before may have sent them.
        replays = self.restored or runtime_context.get_attempt_number() > 0
        self.queues = BackQueues(time.time() if replays else float("-inf"),
                                 hold_s=cfg["fetch.hold_s"],
                                 fetch_s=self.limits.total_timeout_s + 1.0)
        self.turns: dict[str, asyncio.Condition] = {}  # per host, in the operator's loop
        # The second politeness key, on the server's address (udfs/core/ipgate.py).
        self.ip_gate = IpGate(IpPolicy(cfg["fetch.ip_min_gap_s"], cfg["fetch.ip_max_in_flight"]))
        self.ip_turns: dict[str, asyncio.Condition] = {}
        self.ip_resolver = None  # shares self.cache with the session's resolver
        self.calls = 0
        # No lease is worked on longer than its hold, its fetch and a margin: past that
        # it is given up (it expires at the frontier and is re-let).
        self.guard_s = cfg["fetch.hold_s"] + self.limits.total_timeout_s + 30.0
        from udfs.fetch_engine import FetchEngine

        self.engine = FetchEngine(self._guarded, capacity=self.connections)
        # The task's parser processes (udfs/parse_stage.py), started on first use.
        from udfs.parse_stage import ParseStage

        self.parser = ParseStage(
            parse_limits(cfg), self.user_agent, self.url_policy,
            parse_delay_s=self.faults.parse_delay_s if self.faults is not None else 0.0,
            filters=cfg["parse.filters"])
        self.warc = self._warc_writer(cfg, runtime_context)
        if self.warc is not None:  # what writers of this crawl that died here left
            self.warc.start_recovery()
        self._warc_roll = None  # the last age check handed to the writer
        self._warc_checked = time.monotonic()
        self._metrics(runtime_context.get_metrics_group(), cfg["parse.filters"])

    def _warc_writer(self, cfg: Config, runtime_context):
        """The task's WARC writer (warc.enabled), one per subtask: its files are named
        after this host, the subtask and a token of this incarnation (never reused)."""
        if not cfg["warc.enabled"]:
            return None
        import socket
        import uuid

        from udfs.warc import RollPolicy
        from udfs.warc_writer import WarcWriter, store_identity

        subtask = getattr(runtime_context, "get_index_of_this_subtask", lambda: 0)()
        return WarcWriter(
            self.store, prefix=cfg["warc.prefix"], file_prefix=cfg["warc.file_prefix"],
            policy=RollPolicy(cfg["warc.max_file_bytes"], cfg["warc.max_file_age_s"]),
            temp_dir=cfg["warc.temp_dir"],
            host=f"{socket.gethostname()}-t{subtask}-{uuid.uuid4().hex[:6]}",
            dedup_entries=cfg["warc.dedup_entries"], operator=self.user_agent,
            store_id=store_identity(cfg))

    def _warc_tick(self) -> None:
        """At most once a second: have the writer publish its file if it is old enough
        (the writer's thread does it); a failed publish fails the task here."""
        if self.warc is None:
            return
        roll = self._warc_roll
        if roll is not None and roll.done() and roll.exception() is not None:
            raise roll.exception()
        now = time.monotonic()
        if now - self._warc_checked >= 1.0 and (roll is None or roll.done()):
            self._warc_checked = now
            self._warc_roll = self.warc.submit(self.warc.roll_if_due)

    def _metrics(self, group, parse_filters: list[str]) -> None:
        """The fetcher's metrics: fetches and robots.txt fetches by outcome class, bytes
        fetched and stored, requests started, the politeness self-check's breaches by
        rule (it must read 0), the parse time per page as a histogram, the pages
        waiting to be parsed, the parses cut short by a limit, by kind, and the pages on
        which a parse filter raised, by filter (parse.filters: a fixed set). Totals kept
        here and exported as gauges: the engine's thread counts them, and PyFlink reads
        gauges on its own thread at each bundle's end (counters there are thread-bound).
        Label sets are fixed: no per-host series."""
        from udfs.fetch_pipeline import PARSE_BUCKETS_S, PageStats

        self.selfcheck = PolitenessSelfCheck()
        self.outcomes = dict.fromkeys(OUTCOME_CLASSES, 0)
        self.robots_outcomes = dict.fromkeys(OUTCOME_CLASSES, 0)
        self.fetched_bytes = 0
        self.pages = PageStats()
        for name in OUTCOME_CLASSES:
            outcome = group.add_group("outcome", name)
            outcome.gauge("fetches_total", lambda name=name: self.outcomes[name])
            outcome.gauge("robots_fetches_total", lambda name=name: self.robots_outcomes[name])
        # A Prometheus histogram from gauges: cumulative _bucket{le} (+Inf: every page)
        # and _count; the sum in microseconds, as gauges carry integers only.
        for i, le in enumerate((*(str(b) for b in PARSE_BUCKETS_S), "+Inf")):
            group.add_group("le", le).gauge(
                "parse_seconds_bucket", lambda i=i: self.pages.buckets[i])
        group.gauge("parse_seconds_count", lambda: self.pages.parsed)
        group.gauge("parse_microseconds_sum", lambda: self.pages.parse_us)
        group.gauge("parse_backlog", lambda: self.pages.backlog)
        for kind in self.pages.limit_hits:
            group.add_group("kind", kind).gauge(
                "parse_limit_hits_total", lambda kind=kind: self.pages.limit_hits[kind])
        from udfs.core.parsefilters import filter_names

        for name in filter_names(parse_filters):
            group.add_group("filter", name).gauge(
                "parse_filter_errors_total",
                lambda name=name: self.pages.filter_errors.get(name, 0))
        group.gauge("bytes_stored_total", lambda: self.pages.stored_bytes)
        for rule in BREACHES:
            group.add_group("rule", rule).gauge(
                "politeness_breaches_total", lambda rule=rule: self.selfcheck.breaches[rule])
        group.gauge("requests_started_total", lambda: self.selfcheck.starts)
        group.gauge("bytes_fetched_total", lambda: self.fetched_bytes)
        if self.warc is not None:
            w = self.warc.stats
            group.gauge("warc_records_total", lambda: w.records)
            group.gauge("warc_revisits_total", lambda: w.revisits)
            group.gauge("warc_files_published_total", lambda: w.files_published)
            group.gauge("warc_bytes_published_total", lambda: w.bytes_published)
            group.gauge("warc_write_microseconds_sum", lambda: w.write_us)

    def _count(self, completion: dict[str, Any]) -> None:
        cls = outcome_class(completion["outcome"], completion["http_status"])
        self.outcomes[cls] += 1
        if completion["kind"] == "ROBOTS":
            self.robots_outcomes[cls] += 1
        self.fetched_bytes += completion["body_bytes"] or 0

    async def _session(self):
        if self.session is None:
            from udfs.fetch_client import make_session

            self.session = make_session(self.cache, self.limits, limit=self.connections)
        return self.session

    def _dead(self, raw: bytes, reason: str, error_type: str) -> Row:
        return Row("X", None, dead_letter(self.reg, stage="fetcher.decode", reason=reason,
                                          error_type=error_type, payload=raw,
                                          now_ms=int(time.time() * 1000)))

    def _page_dead(self, lease: dict[str, Any], raw: bytes, stage: str, reason: str,
                   error_type: str) -> Row:
        """A dead letter about one lease's page, keyed by its host, the lease as payload."""
        return Row("X", lease["host_key"].encode(), dead_letter(
            self.reg, stage=stage, reason=reason, error_type=error_type, payload=raw,
            url=lease["url"], host_key=lease["host_key"], now_ms=int(time.time() * 1000)))

    def _skipped(self, lease: dict[str, Any], timing: LeaseTiming, reason: Skip) -> list:
        if reason not in REPORTED:
            return []  # replayed (it expires and is re-let) or a duplicate record
        now = time.time()
        record = not_sent(lease, reason, now, self.queues.start_at(timing, now))
        self._count(record)
        return [Row("C", lease["host_key"].encode(),
                    self.reg.encode("completion", record, check=False))]

    def _turn(self, host: str) -> asyncio.Condition:
        turn = self.turns.get(host)
        if turn is None:
            turn = self.turns[host] = asyncio.Condition()
        return turn

    async def _wait_turn(self, timing: LeaseTiming) -> Skip | None:
        """Hold the lease until the host's slot lets it start, then start it."""
        turn = self._turn(timing.host_key)
        async with turn:
            while True:
                now = time.time()
                verdict = self.queues.wait(timing, now)
                if isinstance(verdict, Skip):
                    return verdict
                if verdict == 0.0:
                    self.queues.begin(timing, now)
                    return None
                try:  # woken early when a request of the host ends
                    await asyncio.wait_for(turn.wait(), verdict)
                except TimeoutError:
                    pass

    def _ip_turn(self, address: str) -> asyncio.Condition:
        turn = self.ip_turns.get(address)
        if turn is None:
            turn = self.ip_turns[address] = asyncio.Condition()
        return turn

    async def _wait_address(self, lease: dict[str, Any], timing: LeaseTiming
                            ) -> tuple[str | None, Skip | None]:
        """Hold a request its host allows until its server's address allows it too, then
        count it there: (the address, None). (None, None): the name does not resolve to
        an allowed address (the fetch fails without connecting). (None, TOO_LATE): the
        address's turn would come too close to the lease's expiry."""
        from udfs.fetch_client import GuardedResolver

        if self.ip_resolver is None:
            self.ip_resolver = GuardedResolver(self.cache)
        try:
            answers = await self.ip_resolver.resolve(urlsplit(lease["url"]).hostname or "")
        except OSError:
            return None, None
        address = answers[0]["host"]
        # Held no longer than a lease is held for its host (fetch.hold_s), and never
        # so long that the fetch could outlive the lease.
        deadline = min(time.time() + self.queues.hold_s,
                       timing.expires_at - self.queues.fetch_s)
        turn = self._ip_turn(address)
        async with turn:
            while True:
                now = time.time()
                wait = self.ip_gate.wait(address, now)
                if wait == 0.0:
                    self.ip_gate.begin(address, now)
                    return address, None
                if now + (wait or 0.0) > deadline:
                    return None, Skip.TOO_LATE
                try:  # woken early when a request to the address ends
                    await asyncio.wait_for(turn.wait(), deadline - now if wait is None
                                           else wait)
                except TimeoutError:
                    pass

    async def _release(self, timing: LeaseTiming, started: float,
                       completion: dict | None, sent: bool = True) -> None:
        """The request is over: its host's next request may follow after the gap. The
        gap runs from now (after storing and parsing: never shorter than from the
        response), and the duration rule uses the request's own duration — the one the
        completion reports and the frontier plans from — not our store and parse time.
        `sent=False`: the host's turn was taken but no request went out (the address's
        turn came too late): the slot is free again, with no gap to add."""
        now = time.time()
        if not sent:
            self.queues.cancel(timing, now)
        elif completion is None:  # the fetch raised: all we know is the time it took
            outcome, retry_after, duration = "OTHER_ERROR", None, now - started
        else:
            outcome, retry_after = completion["outcome"], completion["retry_after"]
            duration = completion["fetch_duration_ms"] / 1000
        if sent:
            throttled = outcome == "THROTTLED"
            retry_until = parse_retry_after(retry_after, now) if throttled else None
            self.queues.end(timing, now, duration, throttled=throttled,
                            retry_until=retry_until)
            self.selfcheck.end(timing.host_key, now, retry_until)
        turn = self._turn(timing.host_key)
        async with turn:
            turn.notify_all()

    async def async_invoke(self, value):
        """Hand the lease to the engine (a tick: nothing) and return what it has done."""
        self.engine.check()
        self._warc_tick()
        if len(value[1]):
            # Backpressure from the parse stage: while parse.max_waiting pages wait for a
            # parser, no new lease is taken (the engine's loop keeps fetching the others).
            while self.parser.full():
                self.engine.check()
                await asyncio.sleep(0.01)
            await self.engine.submit_when_room(value)
        return self.engine.drain()

    async def _guarded(self, value) -> list:
        """One lease, on the engine's loop, bounded in time."""
        try:
            async with asyncio.timeout(self.guard_s):
                return await self._invoke(value)
        except TimeoutError:
            return []  # the lease expires and is re-let; nothing is lost

    async def _invoke(self, value):
        from udfs.fetch_pipeline import FetchContext, process_lease

        raw = bytes(value[1])
        try:
            lease = self.reg.decode("lease", raw)
        except AvroDecodeError as exc:
            return [self._dead(raw, str(exc), type(exc).__name__)]
        timing = lease_timing(lease)
        now = time.time()
        self.calls += 1
        if self.calls % 1000 == 0:
            self.queues.forget_idle(now, IDLE_SLOT_S)
            self.turns = {k: v for k, v in self.turns.items() if k in self.queues.slots}
            self.ip_gate.forget_idle(now, max(IDLE_SLOT_S, self.ip_gate.policy.min_gap_s))
            self.ip_turns = {k: v for k, v in self.ip_turns.items()
                             if k in self.ip_gate.addresses}
        skip = self.queues.admit(timing, now)
        if skip is None:
            skip = await self._wait_turn(timing)
        if skip is not None:
            return self._skipped(lease, timing, skip)
        address = None
        if self.ip_gate.policy.on:  # the host allows it; its server's address must too
            try:
                address, skip = await self._wait_address(lease, timing)
            except BaseException:  # cancelled (the lease's guard): nothing was sent
                await asyncio.shield(self._release(timing, time.time(), None, sent=False))
                raise
            if skip is not None:  # not sent: the host's slot is free again at once
                await self._release(timing, time.time(), None, sent=False)
                return self._skipped(lease, timing, skip)
        started = time.time()
        self.selfcheck.start(timing.host_key, started, timing.pace.gap_s,
                             timing.pace.max_in_flight)
        completion = None
        try:
            remaining = timing.expires_at - started
            limits = self.limits if remaining > self.limits.total_timeout_s + 1 else \
                replace(self.limits, total_timeout_s=max(0.1, remaining - 1.0))
            ctx = FetchContext(await self._session(), self.store, limits, self.user_agent,
                               faults=self.faults, url_policy=self.url_policy,
                               stats=self.pages, warc=self.warc, parser=self.parser,
                               max_links=self.parser.limits.max_links)
            completion, discovered = await process_lease(lease, ctx)
            if self.faults is not None:
                self.faults.after_response(lease["url"])
        finally:
            await self._release(timing, started, completion)
            if address is not None:
                self.ip_gate.end(address, time.time())
                turn = self._ip_turn(address)
                async with turn:
                    turn.notify_all()
        host = lease["host_key"]
        self._count(completion)
        # Written as completion v3 (the WARC record's location, PARSE_TIMEOUT): the frontier
        # is upgraded first (README, "Upgrading across completion v3").
        out = [Row("C", host.encode(), self.reg.encode("completion", completion, check=False))]
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
        if self.faults is not None and self.faults.drops_completion(lease["url"]):
            out = []
        out += [Row("D", d["host_key"].encode(), self.reg.encode("discovered", d, check=False))
                for d in discovered]
        return out

    def timeout(self, value):
        return []  # the lease expires and is re-let; nothing is lost

    def close(self) -> None:
        if self.session is not None:
            try:
                asyncio.run_coroutine_threadsafe(self.session.close(),
                                                 self.engine.loop).result(5)
            except Exception:  # the engine's loop may already be gone
                pass
        self.engine.close()
        self.parser.close()
        if self.warc is not None:  # after the engine: no record is handed over any more
            self.warc.close()  # publishes the open file
