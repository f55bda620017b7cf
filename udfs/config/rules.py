"""The checks of configuration values beyond their type, each with its one-line message.

A check returns None when a value is acceptable, else what is allowed ("must be
between 1 and 32768"); `rule` turns it into a validator of the schema
(udfs/config/schema.py), and the loader (udfs/config/loader.py) prints it as
"<key>: <message>, got <value> (from <source>)".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from udfs.core.addresses import parse_servers

Check = Callable[[Any], "str | None"]

# The error type the loader recognizes as one of these checks.
RULE_ERROR = "config_rule"


def rule(check: Check) -> AfterValidator:
    """A pydantic validator that runs `check` on a value of the right type."""

    def run(value: Any) -> Any:
        problem = check(value)
        if problem:
            raise PydanticCustomError(RULE_ERROR, "{problem}", {"problem": problem, "value": value})
        return value

    return AfterValidator(run)


def at_least(lo: int | float) -> AfterValidator:
    return rule(lambda v: None if v >= lo else f"must be >= {lo}")


def between(lo: int | float, hi: int | float, why: str = "") -> AfterValidator:
    suffix = f" ({why})" if why else ""
    return rule(lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}{suffix}")


def one_of(*choices: str) -> AfterValidator:
    return rule(lambda v: None if v in choices else f"must be one of {', '.join(choices)}")


def zero_or_between(lo: int, hi: int) -> AfterValidator:
    """0 (off), or a value in [lo, hi]."""
    return rule(lambda v: None if v == 0 or lo <= v <= hi else f"must be between {lo} and {hi}")


def port(v: int) -> str | None:
    return None if 1 <= v <= 65535 else "must be a TCP port (1-65535)"


_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOST_PORT = re.compile(r"^[^\s:,]+:\d{1,5}$|^\[[0-9A-Fa-f:.]+\]:\d{1,5}$")


def port_range(v: str) -> str | None:
    """A port range "first-last" of unprivileged ports (a single port: "first-first")."""
    if v == "":
        return None
    m = re.fullmatch(r"(\d{4,5})-(\d{4,5})", v)
    if m is None or not 1024 <= int(m.group(1)) <= int(m.group(2)) <= 65535:
        return 'must be "" or a port range "first-last" within 1024-65535'
    return None


def topic_name(v: str) -> str | None:
    return None if _TOPIC_NAME.match(v) else "must be 1-249 characters of A-Z a-z 0-9 . _ -"


def optional_topic_name(v: str) -> str | None:
    return None if v == "" else topic_name(v)


def bootstrap(v: str) -> str | None:
    parts = [p.strip() for p in v.split(",")]
    if not v.strip() or not all(_HOST_PORT.match(p) for p in parts):
        return "must be a comma-separated list of host:port"
    return None


def regex(v: str) -> str | None:
    try:
        re.compile(v)
    except re.error as exc:
        return f"must be a regular expression ({exc})"
    return None


def endpoint(v: str) -> str | None:
    if v == "":
        return None
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be empty or an http(s) URL such as http://127.0.0.1:18333"
    return None


def networks(v: list[str]) -> str | None:
    import ipaddress

    for item in v:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            return f"{item!r} is not a network in CIDR notation"
    return None


def static_hosts(v: list[str]) -> str | None:
    import ipaddress

    for item in v:
        name, sep, ip = item.partition("=")
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            return f"{item!r} is not name=address"
        if not sep or not name:
            return f"{item!r} is not name=address"
    return None


def dns_servers(v: list[str]) -> str | None:
    if not v:  # the system's servers: nothing to check
        return None
    try:
        parse_servers(v)
    except ValueError as exc:
        return str(exc)
    return None


def retention(v: int) -> str | None:
    return None if v == -1 or v >= 1 else "must be -1 (forever) or a positive number of ms"


def url_filters(v: list[str]) -> str | None:
    from udfs.core.urlfilters import check_entries

    return check_entries(v)


def parse_filters(v: list[str]) -> str | None:
    from udfs.core.parsefilters import check_entries

    return check_entries(v)


def user_agent(v: str) -> str | None:
    from udfs.core.robots import valid_user_agent

    return None if valid_user_agent(v) else \
        "must be a product token of letters, '_' and '-' (RFC 9309 2.2.1)"


def not_empty(v: str) -> str | None:
    return None if v else "must not be empty"


def warc_prefix(v: str) -> str | None:
    return None if re.fullmatch(r"([A-Za-z0-9_.=-]+/)+", v) else \
        'must be a folder of letters, digits, _ . = - ending in "/" (e.g. "warc/")'


def warc_file_prefix(v: str) -> str | None:
    return None if re.fullmatch(r"[A-Za-z0-9_.]+(-[A-Za-z0-9_.]+)*", v) else \
        "must be letters, digits, _ and . in parts joined by - (e.g. CC-MAIN)"


def bucket(v: str) -> str | None:
    return None if re.match(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", v) else \
        "must be a valid S3 bucket name"
