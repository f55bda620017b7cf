"""Flink shell of the fetcher: an AsyncFunction around `process_lease` (process mode).

Each lease becomes zero or more Row(dest, key, value): dest "C" a completion
(key host_key), "D" a discovered-URLs record (key its target host_key), "X" a
dead letter. The aiohttp session is made on the first call, inside the
operator's event loop.

Three guards keep politeness when the frontier cannot know: a lease that has
expired is not fetched (the frontier has re-let it or will); a host that
answered 429 with Retry-After is not contacted again from this fetcher until
the wait is over (a lost completion must not lead to an early request); and
after a task restart, a lease issued before the restart is not fetched
(`replayed_lease`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from pyflink.common import Row, Types
from pyflink.datastream.functions import AsyncFunction

from udfs.avro import AvroDecodeError, registry
from udfs.config import Config
from udfs.core.addresses import AddressPolicy
from udfs.core.fetching import DnsCache, FetchLimits
from udfs.core.politeness import parse_retry_after
from udfs.core.urls import UrlPolicy
from udfs.deadletter import dead_letter
from udfs.faults import FaultInjector

FETCH_OUTPUT = Types.ROW_NAMED(["dest", "key", "value"], [
    Types.STRING(), Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.PRIMITIVE_ARRAY(Types.BYTE())])


def replayed_lease(lease: dict[str, Any], restarted_at_ms: int | None) -> bool:
    """A lease issued before this task restarted: the failed task may have sent its
    request already, and sending it again now could come sooner after that one than the
    host's gap (a Crawl-delay of 30 s against a restart of a few seconds). It is left to
    expire; the frontier re-lets it with the gap respected. Costs one lease timeout of
    delay for the URLs in flight at a crash; nothing is lost."""
    return restarted_at_ms is not None and lease["issued_at_ms"] < restarted_at_ms


class FetchFunction(AsyncFunction):
    def __init__(self, cfg_data: dict[str, Any], connections: int = 200) -> None:
        self.cfg_data = cfg_data
        self.connections = connections

    def open(self, runtime_context) -> None:
        from udfs.storage import open_store

        cfg = Config(self.cfg_data)
        self.reg = registry()
        self.limits = FetchLimits.from_config(cfg["fetch"])
        self.user_agent = cfg["robots.user_agent"]
        self.store = open_store(cfg)
        self.cache = DnsCache(AddressPolicy.from_networks(cfg["fetch.allowed_networks"]),
                              self.limits,
                              dict(e.split("=", 1) for e in cfg["fetch.static_hosts"]))
        self.session = None
        self.blocked_until: dict[str, float] = {}  # host_key → epoch seconds
        self.faults = FaultInjector.from_config(cfg["faults"])
        self.url_policy = UrlPolicy.from_names(cfg["urls.drop_query_params"])
        # A restarted task (attempt > 0) replays the leases read since the last
        # checkpoint; it may already have fetched them just before it failed.
        self.restarted_at_ms = int(time.time() * 1000) \
            if runtime_context.get_attempt_number() > 0 else None

    async def _session(self):
        if self.session is None:
            from udfs.fetch_client import make_session

            self.session = make_session(self.cache, self.limits, limit=self.connections)
        return self.session

    def _dead(self, raw: bytes, reason: str, error_type: str) -> Row:
        return Row("X", None, dead_letter(self.reg, stage="fetcher.decode", reason=reason,
                                          error_type=error_type, payload=raw,
                                          now_ms=int(time.time() * 1000)))

    async def async_invoke(self, value):
        from udfs.fetch_pipeline import FetchContext, process_lease

        raw = bytes(value[1])
        try:
            lease = self.reg.decode("lease", raw)
        except AvroDecodeError as exc:
            return [self._dead(raw, str(exc), type(exc).__name__)]
        if replayed_lease(lease, self.restarted_at_ms):
            return []  # the frontier re-lets it at expiry, with the host's gap respected
        host = lease["host_key"]
        wait = self.blocked_until.get(host, 0.0) - time.time()
        if wait > 0:
            await asyncio.sleep(wait)
        remaining = lease["expires_at_ms"] / 1000.0 - time.time()
        if remaining <= 1.0:
            return []  # expired (or about to): the frontier re-lets it
        limits = self.limits if remaining > self.limits.total_timeout_s + 1 else \
            replace(self.limits, total_timeout_s=remaining - 1.0)
        ctx = FetchContext(await self._session(), self.store, limits, self.user_agent,
                           faults=self.faults, url_policy=self.url_policy)
        completion, discovered = await process_lease(lease, ctx)
        if self.faults is not None:
            self.faults.after_response(lease["url"])
        if completion["http_status"] == 429:
            until = parse_retry_after(completion["retry_after"], time.time())
            if until is not None:
                self.blocked_until[host] = max(self.blocked_until.get(host, 0.0), until)
        out = [Row("C", host.encode(), self.reg.encode("completion", completion, check=False))]
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
                asyncio.get_event_loop().run_until_complete(self.session.close())
            except Exception:  # the operator's loop may already be gone
                pass
