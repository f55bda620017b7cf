"""SSRF address classification and the allowlist. No traffic: addresses are only classified."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from udfs.config import ConfigError, load_config, load_defaults
from udfs.core.addresses import AddressClass as C
from udfs.core.addresses import AddressPolicy, classify


@pytest.mark.parametrize("address, cls", [
    ("8.8.8.8", C.PUBLIC), ("1.1.1.1", C.PUBLIC), ("2606:4700:4700::1111", C.PUBLIC),
    ("127.0.0.1", C.LOOPBACK), ("127.255.0.9", C.LOOPBACK), ("::1", C.LOOPBACK),
    ("10.1.2.3", C.PRIVATE), ("172.16.0.1", C.PRIVATE), ("172.31.255.255", C.PRIVATE),
    ("192.168.1.1", C.PRIVATE), ("fd12:3456::1", C.PRIVATE), ("fec0::1", C.PRIVATE),
    ("172.32.0.1", C.PUBLIC), ("169.254.1.1", C.LINK_LOCAL), ("fe80::1", C.LINK_LOCAL),
    ("100.64.0.1", C.CGNAT), ("100.127.255.254", C.CGNAT), ("224.0.0.1", C.MULTICAST),
    ("239.255.255.250", C.MULTICAST), ("ff02::1", C.MULTICAST),
    ("255.255.255.255", C.BROADCAST), ("0.0.0.0", C.UNSPECIFIED), ("0.1.2.3", C.UNSPECIFIED),
    ("::", C.UNSPECIFIED), ("192.0.2.10", C.RESERVED), ("198.51.100.1", C.RESERVED),
    ("203.0.113.5", C.RESERVED), ("198.18.0.1", C.RESERVED), ("240.0.0.1", C.RESERVED),
    ("2001:db8::1", C.RESERVED), ("2001:0::1", C.RESERVED), ("100::1", C.RESERVED),
    ("4000::1", C.RESERVED),
    # cloud metadata, before the ranges it sits in
    ("169.254.169.254", C.CLOUD_METADATA), ("fd00:ec2::254", C.CLOUD_METADATA),
    ("169.254.170.2", C.CLOUD_METADATA), ("100.100.100.200", C.CLOUD_METADATA),
    # IPv6 forms that carry an IPv4 address are judged by it
    ("::ffff:127.0.0.1", C.LOOPBACK), ("::ffff:10.0.0.1", C.PRIVATE),
    ("::ffff:169.254.169.254", C.CLOUD_METADATA), ("::ffff:8.8.8.8", C.PUBLIC),
    ("64:ff9b::a9fe:a9fe", C.CLOUD_METADATA), ("64:ff9b::808:808", C.PUBLIC),
    ("2002:7f00:1::", C.LOOPBACK), ("2002:c0a8:101::1", C.PRIVATE), ("::127.0.0.1", C.LOOPBACK),
    ("[::1]", C.LOOPBACK), ("fe80::1%eth0", C.LINK_LOCAL),
    ("localhost", C.INVALID), ("", C.INVALID), ("1.2.3", C.INVALID), ("999.1.1.1", C.INVALID),
])
def test_classify(address, cls):
    assert classify(address) is cls


def test_default_policy_allows_only_public():
    policy = AddressPolicy.from_networks(load_defaults()["fetch"]["allowed_networks"])
    assert policy.check("8.8.8.8") is None
    for blocked in ("127.0.0.1", "::1", "10.0.0.1", "169.254.169.254", "::ffff:127.0.0.1",
                    "100.64.0.1", "0.0.0.0", "224.0.0.1", "fd00:ec2::254", "not-an-ip"):
        reason = policy.check(blocked)
        assert reason is not None and (classify(blocked).value in reason or "not an IP" in reason)


def test_allowlist_for_tests_allows_loopback_only():
    policy = AddressPolicy.from_networks(["127.0.0.0/8"])
    assert policy.check("127.0.0.1") is None and policy.check("127.3.4.5") is None
    assert policy.check("::ffff:127.0.0.1") is None
    assert policy.check("::1") is not None  # an IPv4 network does not allow IPv6 loopback
    assert policy.check("10.0.0.1") == "address 10.0.0.1 is private"
    assert policy.check("169.254.169.254") is not None


def test_metadata_needs_its_own_entry():
    assert AddressPolicy.from_networks(["169.254.0.0/16"]).check("169.254.169.254") is not None
    assert AddressPolicy.from_networks(["169.254.0.0/16"]).check("169.254.1.1") is None
    assert AddressPolicy.from_networks(["169.254.169.254/32"]).check("169.254.169.254") is None


def test_allowed_networks_are_validated_in_configuration():
    cfg = load_config(env={}, overrides=["fetch.allowed_networks=[127.0.0.0/8, '::1/128']"])
    assert cfg["fetch.allowed_networks"] == ["127.0.0.0/8", "::1/128"]
    with pytest.raises(ConfigError, match="fetch.allowed_networks: 'nope' is not a network"):
        load_config(env={}, overrides=["fetch.allowed_networks=[nope]"])


@given(st.ip_addresses())
def test_every_address_has_a_class_and_public_ones_agree_with_ipaddress(ip):
    cls = classify(ip)
    assert cls is not C.INVALID
    if cls is C.PUBLIC:
        assert ip.is_global or (ip.version == 6 and ip.ipv4_mapped is not None)
    if not ip.is_global and not (ip.version == 6 and (ip.ipv4_mapped or ip.sixtofour)):
        assert cls is not C.PUBLIC


def _ip_by_parsing(host: str):
    """parse_ip without its shortcut for host names: parse whatever the text is."""
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip().strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def _literal_by_parsing(url: str) -> str | None:
    """literal_host without the shortcut for host names: parse whatever the host is."""
    rest = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    if rest.startswith("["):
        host = rest[1:rest.find("]")] if "]" in rest else rest[1:]
    else:
        host = rest.rsplit(":", 1)[0] if ":" in rest else rest
    return host if _ip_by_parsing(host) is not None else None


@given(st.one_of(
    st.ip_addresses().map(lambda ip: f"[{ip}]" if ip.version == 6 else str(ip)),
    st.ip_addresses(v=6).map(str),  # unbracketed: no URL has it, the rule must still hold
    st.from_regex(r"[a-z0-9.\-:]{0,20}", fullmatch=True)),
    st.sampled_from(["", ":8080", ":1"]))
def test_literal_host_takes_a_host_name_for_one_without_parsing_it(host, port):
    from udfs.core.addresses import literal_host

    url = f"http://{host}{port}/p?q=1"
    assert literal_host(url) == _literal_by_parsing(url)


@given(st.one_of(
    st.ip_addresses().map(str),
    st.ip_addresses().map(lambda ip: f" [{ip}]%zone "),
    st.text(max_size=24),
    st.from_regex(r"[a-z0-9.\-:%\[\] ]{0,24}", fullmatch=True)))
def test_parse_ip_takes_a_host_name_for_one_without_parsing_it(host):
    """parse_ip skips the parse where the text cannot be an address: never for one it
    would find (in any form it reads: blanks, brackets, a zone)."""
    from udfs.core.addresses import parse_ip

    assert parse_ip(host) == _ip_by_parsing(host)
    assert parse_ip("s-12.test") is None and parse_ip("example.com.") is None


def test_an_ip_literal_is_refused_by_the_policy_it_was_checked_with():
    from udfs.core.addresses import url_address_refusal

    open_ = AddressPolicy.from_networks(["10.0.0.0/8"])
    closed = AddressPolicy.from_networks([])
    for _ in range(2):  # the second time from the cache
        assert url_address_refusal("http://10.1.2.3:81/x", open_) is None
        assert "private" in (url_address_refusal("http://10.1.2.3:81/x", closed) or "")
        assert url_address_refusal("http://www.10.example/x", closed) is None
