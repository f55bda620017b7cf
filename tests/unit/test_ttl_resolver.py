"""udfs.fetcher.dns against a real (tiny) DNS server on 127.0.0.1.

The server answers UDP queries from a fixed table; every test configures the
resolver with that server only, so no packet leaves loopback and the system's
resolver is never used.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from udfs.core.addresses import parse_servers
from udfs.fetcher.dns import DnsAnswer, DnsLookupError, TtlResolver

A, AAAA = dns.rdatatype.A, dns.rdatatype.AAAA


def rr(name: str, ttl: int, rdtype: str, *values: str) -> dns.rrset.RRset:
    return dns.rrset.from_text(name, ttl, "IN", rdtype, *values)


SOA = rr("test.", 5, "SOA", "ns.test. admin.test. 1 3600 600 86400 5")

# (name, type) -> sections of the answer; names are compared case-insensitively.
RECORDS: dict[tuple[str, int], list[dns.rrset.RRset]] = {
    ("a.test.", A): [rr("a.test.", 123, "A", "127.0.0.1")],
    ("a.test.", AAAA): [rr("a.test.", 77, "AAAA", "::1")],
    ("v4.test.", A): [rr("v4.test.", 300, "A", "127.0.0.2")],
    ("multi.test.", A): [rr("multi.test.", 60, "A", "127.0.0.3", "127.0.0.4")],
    ("multi.test.", AAAA): [rr("multi.test.", 90, "AAAA", "::3", "::4")],
    # A recursive server's CNAME answer: the chain and the final records.
    ("www.test.", A): [rr("www.test.", 30, "CNAME", "a.test."),
                       rr("a.test.", 123, "A", "127.0.0.1")],
    ("www.test.", AAAA): [rr("www.test.", 30, "CNAME", "a.test."),
                          rr("a.test.", 77, "AAAA", "::1")],
    ("chain.test.", A): [rr("chain.test.", 1000, "CNAME", "mid.test."),
                         rr("mid.test.", 2000, "CNAME", "v4.test."),
                         rr("v4.test.", 300, "A", "127.0.0.2")],
    ("chain.test.", AAAA): [rr("chain.test.", 1000, "CNAME", "mid.test."),
                            rr("mid.test.", 2000, "CNAME", "v4.test.")],
    ("dangling.test.", A): [rr("dangling.test.", 60, "CNAME", "nowhere.example.")],
    ("dangling.test.", AAAA): [rr("dangling.test.", 60, "CNAME", "nowhere.example.")],
    ("intranet.", A): [rr("intranet.", 40, "A", "127.0.0.9")],
    ("intranet.corp.example.", A): [rr("intranet.corp.example.", 40, "A", "127.0.0.99")],
    ("delayed.test.", A): [rr("delayed.test.", 50, "A", "127.0.0.5")],
    ("delayed.test.", AAAA): [rr("delayed.test.", 50, "AAAA", "::5")],
}
# Names that exist (answers without records are NODATA, with the SOA).
EXISTING = {dns.name.from_text(n) for n, _ in RECORDS} | {dns.name.from_text("v4only.test.")}
RECORDS[("v4only.test.", A)] = [rr("v4only.test.", 300, "A", "127.0.0.6")]
RECORDS[("half.test.", A)] = [rr("half.test.", 120, "A", "127.0.0.7")]
SILENT = {(dns.name.from_text("slow.test."), A), (dns.name.from_text("slow.test."), AAAA),
          (dns.name.from_text("half.test."), AAAA)}  # never answered
SERVFAIL = dns.name.from_text("broken.test.")
DELAYED = dns.name.from_text("delayed.test.")
DELAY_S = 0.4
TABLE = {(dns.name.from_text(n), t): v for (n, t), v in RECORDS.items()}


class DnsServer:
    """A UDP DNS responder on 127.0.0.1 (an ephemeral port), in a thread."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.queries: list[tuple[str, str]] = []  # (name as asked, type)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                wire, peer = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            query = dns.message.from_wire(wire)
            question = query.question[0]
            self.queries.append((question.name.to_text(), dns.rdatatype.to_text(question.rdtype)))
            if (question.name, question.rdtype) in SILENT:
                continue
            response = self._answer(query, question.name, question.rdtype)
            if question.name == DELAYED:
                threading.Timer(DELAY_S, self._send, (response, peer)).start()
            else:
                self._send(response, peer)

    def _send(self, response: dns.message.Message, peer) -> None:
        try:
            self.sock.sendto(response.to_wire(), peer)
        except OSError:
            pass  # stopped meanwhile

    @staticmethod
    def _answer(query, name: dns.name.Name, rdtype: int) -> dns.message.Message:
        response = dns.message.make_response(query)
        response.flags |= dns.flags.RA
        if name == SERVFAIL:
            response.set_rcode(dns.rcode.SERVFAIL)
        elif (name, rdtype) in TABLE:
            response.answer.extend(TABLE[(name, rdtype)])
        elif name in EXISTING:
            response.authority.append(SOA)  # NODATA
        else:
            response.set_rcode(dns.rcode.NXDOMAIN)
            response.authority.append(SOA)
        return response

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)
        self.sock.close()


@pytest.fixture
def server():
    srv = DnsServer()
    yield srv
    srv.stop()


def resolver_for(server: DnsServer, timeout_s: float = 1.0) -> TtlResolver:
    return TtlResolver([f"127.0.0.1:{server.port}"], timeout_s=timeout_s)


def lookup(resolver: TtlResolver, host: str) -> DnsAnswer:
    return asyncio.run(resolver.lookup(host))


def test_a_and_aaaa_with_the_smallest_ttl(server):
    answer = lookup(resolver_for(server), "a.test")
    assert answer == DnsAnswer(["127.0.0.1", "::1"], 77.0)
    assert sorted(server.queries) == [("a.test.", "A"), ("a.test.", "AAAA")]


def test_several_addresses_ipv4_first(server):
    answer = lookup(resolver_for(server), "multi.test")
    # An rrset is a set: the order within a family is the server's (dnspython keeps it).
    assert set(answer.addresses[:2]) == {"127.0.0.3", "127.0.0.4"}
    assert set(answer.addresses[2:]) == {"::3", "::4"}
    assert answer.ttl_s == 60.0


def test_one_family_only_uses_its_ttl_not_the_negative_one(server):
    # AAAA is NODATA with an SOA whose TTL (5) is not the address's TTL.
    answer = lookup(resolver_for(server), "v4only.test")
    assert answer == DnsAnswer(["127.0.0.6"], 300.0)


def test_cname_ttl_is_the_minimum_along_the_chain(server):
    assert lookup(resolver_for(server), "www.test") == DnsAnswer(["127.0.0.1", "::1"], 30.0)
    # CNAMEs with longer TTLs than the final record: the final record's TTL wins.
    assert lookup(resolver_for(server), "chain.test") == DnsAnswer(["127.0.0.2"], 300.0)


def test_dangling_cname_is_a_lookup_error(server):
    with pytest.raises(DnsLookupError, match="dangling.test"):
        lookup(resolver_for(server), "dangling.test")


def test_nxdomain(server):
    with pytest.raises(DnsLookupError, match=r"missing\.test.*NXDOMAIN") as err:
        lookup(resolver_for(server), "missing.test")
    assert isinstance(err.value, OSError)


def test_servfail(server):
    with pytest.raises(DnsLookupError, match=r"broken\.test.*NoNameservers"):
        lookup(resolver_for(server), "broken.test")


def test_timeout_within_the_limit(server):
    resolver = resolver_for(server, timeout_s=0.3)
    start = time.monotonic()
    with pytest.raises(DnsLookupError, match=r"slow\.test.*Timeout"):
        lookup(resolver, "slow.test")
    assert 0.3 <= time.monotonic() - start < 0.6
    assert ("slow.test.", "A") in server.queries and ("slow.test.", "AAAA") in server.queries


def test_timeout_is_a_hard_bound(server):
    # dnspython alone would sleep its backoff (0.1 s, 0.2 s, ...) past the lifetime.
    # Here: attempts 0-0.15 s, sleep 0.1, 0.25-0.3, sleep 0.2, give up at 0.5 s.
    resolver = resolver_for(server, timeout_s=0.3)
    resolver._resolver.timeout = 0.15
    start = time.monotonic()
    with pytest.raises(DnsLookupError, match=r"slow\.test.*Timeout"):
        lookup(resolver, "slow.test")
    assert time.monotonic() - start < 0.45


def test_an_unanswered_family_costs_the_timeout_but_keeps_the_other(server):
    resolver = resolver_for(server, timeout_s=0.3)
    start = time.monotonic()
    assert lookup(resolver, "half.test") == DnsAnswer(["127.0.0.7"], 120.0)
    assert 0.3 <= time.monotonic() - start < 0.6


def test_a_and_aaaa_are_asked_concurrently(server):
    start = time.monotonic()
    answer = lookup(resolver_for(server), "delayed.test")
    elapsed = time.monotonic() - start
    assert answer == DnsAnswer(["127.0.0.5", "::5"], 50.0)
    assert DELAY_S <= elapsed < 2 * DELAY_S - 0.05


def test_names_are_absolute_and_never_searched(server):
    resolver = resolver_for(server)
    # Even if a search list were configured, a bare name is asked as itself.
    resolver._resolver.search = [dns.name.from_text("corp.example.")]
    resolver._resolver.use_search_by_default = True
    resolver._resolver.ndots = 5
    assert lookup(resolver, "intranet") == DnsAnswer(["127.0.0.9"], 40.0)
    assert {name for name, _ in server.queries} == {"intranet."}


def test_trailing_dot_and_case(server):
    resolver = resolver_for(server)
    assert lookup(resolver, "a.test.").addresses == ["127.0.0.1", "::1"]
    assert lookup(resolver, "A.Test").addresses == ["127.0.0.1", "::1"]


@pytest.mark.parametrize("literal", ["127.0.0.1", "::1", "[::1]", "2001:db8::1",
                                     "fe80::1%eth0", "[fe80::1%25eth0]"])
def test_ip_literals_are_refused(server, literal):
    with pytest.raises(ValueError, match="IP literal"):
        lookup(resolver_for(server), literal)
    assert server.queries == []


@pytest.mark.parametrize("host", ["", ".", "  "])
def test_empty_names_are_refused(server, host):
    with pytest.raises(ValueError):
        lookup(resolver_for(server), host)
    assert server.queries == []


@pytest.mark.parametrize("host", ["a..test", "x" * 64 + ".test", ("a" * 60 + ".") * 5 + "test"])
def test_invalid_names_are_lookup_errors(server, host):
    with pytest.raises(DnsLookupError, match="invalid name"):
        lookup(resolver_for(server), host)
    assert server.queries == []


def test_resolver_settings(server):
    resolver = TtlResolver([f"127.0.0.1:{server.port}", "[::1]:5353"], timeout_s=3.0)
    assert resolver.nameservers == [f"Do53:127.0.0.1@{server.port}", "Do53:::1@5353"]
    assert resolver._resolver.lifetime == 3.0
    assert resolver._resolver.timeout == 2.0
    assert resolver._resolver.cache is None
    assert TtlResolver(["127.0.0.1"], timeout_s=0.5)._resolver.timeout == 0.5
    with pytest.raises(ValueError):
        TtlResolver(["127.0.0.1"], timeout_s=0)
    with pytest.raises(ValueError, match="dns.google"):
        TtlResolver(["dns.google"])


def test_parse_servers_good():
    assert parse_servers([]) == []
    assert parse_servers(["127.0.0.1", "10.0.0.2:5353", " 8.8.8.8 ", "::1", "[::1]:5353",
                          "[2001:DB8::1]", "fe80::1%eth0", "[fe80::1%eth0]:54"]) == [
        ("127.0.0.1", 53), ("10.0.0.2", 5353), ("8.8.8.8", 53), ("::1", 53), ("::1", 5353),
        ("2001:db8::1", 53), ("fe80::1%eth0", 53), ("fe80::1%eth0", 54)]
    assert parse_servers(("1.1.1.1:65535",)) == [("1.1.1.1", 65535)]


@pytest.mark.parametrize("bad", ["", "  ", "dns.google", "dns.google:53", "127.0.0.1:0",
                                 "127.0.0.1:65536", "127.0.0.1:abc", "127.0.0.1:", "127.0.0.1:-1",
                                 "127.0.0.1:\u0665\u0663", "[127.0.0.1]:53", "[::1", "[::1]x",
                                 "[::1]:", "1.2.3.4:53:1", "256.0.0.1", "[]:53", 53, None])
def test_parse_servers_bad(bad):
    with pytest.raises(ValueError) as err:
        parse_servers(["127.0.0.1", bad])
    assert repr(bad) in str(err.value)


def test_parse_servers_wants_a_list():
    with pytest.raises(ValueError):
        parse_servers("127.0.0.1")
