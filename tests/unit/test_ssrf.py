"""No connection to a forbidden address by any path, whatever the URL's host form.

Loopback forms are fetched against a real tripwire server on 127.0.0.1 (and ::1 when
this machine has it) that counts every TCP connection it accepts: it must count none.
Every other range goes through sockets whose connect fails the test if it is ever
reached, so no packet leaves for a non-loopback address even if the guard were broken.
A positive control shows the tripwire does see a connection that is allowed.
Every test runs on both event loops: asyncio's, and uvloop's, which the fetch engine
runs (udfs/fetcher/engine.py).
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace

import aiohttp
import pytest
import uvloop

from tests.unit.test_frontier_io import FORBIDDEN_LITERALS
from udfs.core.addresses import AddressPolicy
from udfs.core.fetching import DnsCache, FetchLimits
from udfs.core.frontier import Kind, Outcome
from udfs.core.urls import normalize_url
from udfs.fetcher.client import (
    AddressRefused,
    fetch,
    guarded_socket_factory,
    literal_refusal,
    make_session,
)


@pytest.fixture(autouse=True, params=["asyncio", "uvloop"])
def event_loop_kind(request):
    """asyncio.run makes its loop by the policy: the default one, then uvloop's."""
    policy = asyncio.get_event_loop_policy()
    if request.param == "uvloop":
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        yield request.param
    finally:
        asyncio.set_event_loop_policy(policy)


LIMITS = replace(FetchLimits(), connect_timeout_s=2.0, read_timeout_s=2.0, total_timeout_s=5.0)
NO_NETWORKS = AddressPolicy.from_networks([])


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


class Tripwire:
    """TCP listeners on loopback that count every connection they accept."""

    def __init__(self) -> None:
        self.connections = 0
        self.servers: list[asyncio.Server] = []
        self.port = 0

    async def _accept(self, reader, writer) -> None:
        self.connections += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2\r\n"
                     b"Connection: close\r\n\r\nhi")
        await writer.drain()
        writer.close()

    async def start(self) -> None:
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        if _has_ipv6_loopback():
            try:
                self.servers.append(await asyncio.start_server(self._accept, "::1", self.port))
            except OSError:
                pass  # the port is taken on ::1: connections there are still never made

    async def stop(self) -> None:
        for s in self.servers:
            s.close()
            await s.wait_closed()


def loopback_forms(port: int) -> list[str]:
    """Every IP-literal form of 127.0.0.1 and ::1 (and the name localhost) with `port`."""
    return [f"http://127.0.0.1:{port}/x", f"http://2130706433:{port}/",
            f"http://0x7f000001:{port}/", f"http://127.1:{port}/", f"http://0177.0.0.1:{port}/",
            f"http://127.0.0.2:{port}/", f"http://[::1]:{port}/",
            f"http://[::ffff:127.0.0.1]:{port}/", f"http://[0:0:0:0:0:ffff:7f00:1]:{port}/",
            f"http://[::ffff:7f00:1]:{port}/", f"http://localhost:{port}/"]


async def _fetch_each(urls: list[str], policy: AddressPolicy, static=None) -> list:
    cache = DnsCache(policy, LIMITS, static or {})
    async with make_session(cache, LIMITS) as session:
        return [await fetch(session, u, Kind.PAGE, LIMITS, "FlinkCrawler") for u in urls]


def test_no_loopback_form_reaches_a_real_server_by_default():
    async def go():
        wire = Tripwire()
        await wire.start()
        try:
            urls = loopback_forms(wire.port)
            normalized = [normalize_url(u) for u in urls]
            assert all(normalized)
            results = await _fetch_each(urls + normalized, NO_NETWORKS,
                                        static={"alias.test": "127.0.0.1"})
            results += await _fetch_each([f"http://alias.test:{wire.port}/"], NO_NETWORKS,
                                         static={"alias.test": "127.0.0.1"})
            return wire.connections, results, urls + normalized
        finally:
            await wire.stop()

    connections, results, urls = asyncio.run(go())
    for url, r in zip(urls, results, strict=False):
        assert r.outcome is Outcome.ADDRESS_BLOCKED, (url, r)
        assert "loopback" in r.error
    assert connections == 0


def test_positive_control_the_tripwire_sees_an_allowed_connection():
    async def go():
        wire = Tripwire()
        await wire.start()
        try:
            (r,) = await _fetch_each([f"http://127.0.0.1:{wire.port}/"],
                                     AddressPolicy.from_networks(["127.0.0.1/32"]))
            # 127.0.0.2 stays refused under a /32 allowance for 127.0.0.1.
            (other,) = await _fetch_each([f"http://127.0.0.2:{wire.port}/"],
                                         AddressPolicy.from_networks(["127.0.0.1/32"]))
            return wire.connections, r, other
        finally:
            await wire.stop()

    connections, r, other = asyncio.run(go())
    assert r.outcome is Outcome.OK and r.body == b"hi" and connections == 1
    assert other.outcome is Outcome.ADDRESS_BLOCKED


@pytest.fixture
def no_connect(monkeypatch):
    """Make any real connect attempt fail the test (before any packet is sent)."""
    attempts: list = []

    def refuse(self, address, *a):
        attempts.append(address)
        raise AssertionError(f"a connection to {address} was attempted")

    async def refuse_async(self, sock, address):
        attempts.append(address)
        raise AssertionError(f"a connection to {address} was attempted")

    # Both loops' sock_connect call the socket's own connect; asyncio's is refused as
    # well, a second net.
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(asyncio.selector_events.BaseSelectorEventLoop, "sock_connect",
                        refuse_async)
    return attempts


@pytest.mark.parametrize("raw,cls", FORBIDDEN_LITERALS)
def test_other_ranges_are_never_connected_to(raw, cls, no_connect):
    urls = [raw, normalize_url(raw)]
    results = asyncio.run(_fetch_each(urls, NO_NETWORKS))
    for r in results:
        assert r.outcome is Outcome.ADDRESS_BLOCKED and cls in r.error
    assert no_connect == []


def test_names_resolving_to_forbidden_addresses_are_never_connected_to(no_connect):
    static = {"meta.test": "169.254.169.254", "lan.test": "10.1.2.3", "v6.test": "fd00::1",
              "mapped.test": "::ffff:192.168.0.1"}
    results = asyncio.run(_fetch_each([f"http://{n}/" for n in static], NO_NETWORKS, static))
    assert [r.outcome for r in results] == [Outcome.ADDRESS_BLOCKED] * 4
    assert no_connect == []


def test_metadata_needs_its_own_host_network():
    wide = AddressPolicy.from_networks(["169.254.0.0/16"])
    assert literal_refusal("http://169.254.169.254/", wide) is not None
    assert literal_refusal("http://169.254.1.1/", wide) is None
    assert literal_refusal("http://example.com/", NO_NETWORKS) is None  # names: resolver


def test_the_socket_guard_stops_a_path_that_skips_the_resolver(no_connect):
    """A client that resolves by itself (a future helper, a proxy) still cannot connect:
    the socket factory and the socket's own connect check the address."""
    factory = guarded_socket_factory(NO_NETWORKS)
    with pytest.raises(AddressRefused, match="loopback"):
        factory((socket.AF_INET, socket.SOCK_STREAM, 0, "", ("127.0.0.1", 80)))
    allowed = guarded_socket_factory(AddressPolicy.from_networks(["127.0.0.1/32"]))
    sock = allowed((socket.AF_INET, socket.SOCK_STREAM, 0, "", ("127.0.0.1", 80)))
    try:
        with pytest.raises(AddressRefused, match="private"):
            sock.connect(("10.0.0.1", 80))
        with pytest.raises(AddressRefused, match="cloud-metadata"):
            sock.connect_ex(("169.254.169.254", 80))
    finally:
        sock.close()

    class NaiveResolver(aiohttp.abc.AbstractResolver):
        async def resolve(self, host, port=0, family=socket.AF_INET):
            return [{"hostname": host, "host": "10.9.9.9", "port": port,
                     "family": socket.AF_INET, "proto": 0, "flags": 0}]

        async def close(self):
            pass

    async def go():
        connector = aiohttp.TCPConnector(resolver=NaiveResolver(), use_dns_cache=False,
                                         socket_factory=guarded_socket_factory(NO_NETWORKS))
        async with aiohttp.ClientSession(connector=connector) as session:
            return await fetch(session, "http://rebound.example/", Kind.PAGE, LIMITS, "UA")

    r = asyncio.run(go())
    assert r.outcome is Outcome.ADDRESS_BLOCKED and "private" in r.error
    assert no_connect == []
