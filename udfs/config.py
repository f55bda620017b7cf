"""The crawler's configuration: one defaults file, overridden by file, environment and flags.

`crawler-default.yaml` beside this module holds every key with its default and a
comment. The type of each key is the type of its default; `_RULES` adds ranges
and choices. Unknown keys and bad values raise `ConfigError` naming the key and
where the value came from, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from udfs.core.robots import valid_user_agent

DEFAULTS_PATH = Path(__file__).with_name("crawler-default.yaml")
ENV_PREFIX = "CRAWL__"
ENV_CONFIG_FILE = "CRAWL_CONFIG"

TOPIC_KEYS = ("discovered", "leases", "completions", "index", "deadletter", "control",
              "replies", "shards")


class ConfigError(ValueError):
    """A configuration key or value is not acceptable; the message names the key."""


def _port(v: Any) -> str | None:
    return None if 1 <= v <= 65535 else "must be a TCP port (1-65535)"


def _at_least(lo: int | float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= lo else f"must be >= {lo}"


def _between(lo: int | float, hi: int | float, why: str = "") -> Callable[[Any], str | None]:
    suffix = f" ({why})" if why else ""
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}{suffix}"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOST_PORT = re.compile(r"^[^\s:,]+:\d{1,5}$|^\[[0-9A-Fa-f:.]+\]:\d{1,5}$")


def _port_range(v: str) -> str | None:
    """A port range "first-last" of unprivileged ports (a single port: "first-first")."""
    m = re.fullmatch(r"(\d{4,5})-(\d{4,5})", v)
    if m is None or not 1024 <= int(m.group(1)) <= int(m.group(2)) <= 65535:
        return 'must be "" or a port range "first-last" within 1024-65535'
    return None


def _topic_name(v: str) -> str | None:
    return None if _TOPIC_NAME.match(v) else "must be 1-249 characters of A-Z a-z 0-9 . _ -"


def _bootstrap(v: str) -> str | None:
    parts = [p.strip() for p in v.split(",")]
    if not v.strip() or not all(_HOST_PORT.match(p) for p in parts):
        return "must be a comma-separated list of host:port"
    return None


def _regex(v: str) -> str | None:
    try:
        re.compile(v)
    except re.error as exc:
        return f"must be a regular expression ({exc})"
    return None


def _endpoint(v: str) -> str | None:
    if v == "":
        return None
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be empty or an http(s) URL such as http://127.0.0.1:18333"
    return None


def _networks(v: list[str]) -> str | None:
    import ipaddress

    for item in v:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            return f"{item!r} is not a network in CIDR notation"
    return None


def _static_hosts(v: list[str]) -> str | None:
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


def _dns_servers(v: list[str]) -> str | None:
    from udfs.ttl_resolver import parse_servers

    try:
        parse_servers(v)
    except ValueError as exc:
        return str(exc)
    return None


def _retention(v: int) -> str | None:
    return None if v == -1 or v >= 1 else "must be -1 (forever) or a positive number of ms"


def _url_filters(v: list[str]) -> str | None:
    from udfs.core.urlfilters import check_entries

    return check_entries(v)


def _parse_filters(v: list[str]) -> str | None:
    from udfs.core.parsefilters import check_entries

    return check_entries(v)


# Checks beyond the type of the default. "*" matches one path segment.
_RULES: dict[str, Callable[[Any], str | None]] = {
    "kafka.bootstrap_servers": _bootstrap,
    "kafka.group_id_prefix": _topic_name,
    "kafka.request_timeout_ms": _at_least(100),
    "topics.*.name": _topic_name,
    "topics.*.partitions": _between(1, 10000),
    "topics.*.retention_ms": _retention,
    "urls.filters": _url_filters,
    "parse.filters": _parse_filters,
    "robots.user_agent": lambda v: None if valid_user_agent(v)
    else "must be a product token of letters, '_' and '-' (RFC 9309 2.2.1)",
    "robots.cache_ttl_s": _between(60, 86400, "RFC 9309: refresh within 24 h"),
    "robots.max_redirects": _between(0, 20),
    "robots.retry_base_s": _between(1, 86400),
    "robots.retry_max_s": _between(1, 86400),
    "robots.crawl_delay": _one_of("honor", "ignore"),
    "robots.crawl_delay_cap_s": _between(0, 3600),
    "fetch.ip_min_gap_s": _between(0, 3600),
    "fetch.ip_max_in_flight": _between(0, 10000),
    "politeness.max_in_flight": _between(1, 1000),
    "politeness.min_gap_s": _between(0, 86400),
    "politeness.duration_factor": _between(0, 1000),
    "politeness.max_gap_s": _between(0, 86400),
    "politeness.backoff_base_s": _between(0, 86400),
    "politeness.backoff_max_s": _between(0, 86400 * 7),
    "politeness.allowance_cut": _between(0.01, 1),
    "politeness.allowance_min": _between(0.01, 1),
    "politeness.allowance_recovery": _between(1, 10),
    "politeness.daily_budget": _at_least(1),
    "frontier.lease_timeout_s": _between(1, 86400),
    "frontier.lookahead_s": _between(0, 60),
    "frontier.max_lookahead_leases": _between(0, 64),
    "frontier.max_lease_attempts": _between(1, 100),
    "frontier.max_retries": _between(0, 100),
    "frontier.retry_base_s": _between(0, 86400),
    "frontier.max_redirect_hops": _between(0, 20),
    "frontier.daily_fetch_budget": _at_least(1),
    "frontier.address_block_s": _between(0, 86400 * 30),
    "frontier.max_resident_urls": _between(16, 10_000_000),
    "frontier.cold_bucket_s": _between(1, 86400),
    "frontier.cache_urls": _at_least(1000),
    "frontier.shard_above_urls": _at_least(0),
    "frontier.host_shards": _between(1, 4096),
    "frontier.shard_refill_urls": _at_least(1),
    "frontier.shard_pull_timeout_s": _between(1, 86400),
    "frontier.clock_idle_ms": _between(100, 60_000),
    "s3.low_tier_storage_class": _one_of(
        "", "STANDARD", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER_IR",
        "GLACIER", "DEEP_ARCHIVE", "REDUCED_REDUNDANCY"),
    "metrics.frontier_port": lambda v: None if v == 0 else _between(1024, 65535)(v),
    "metrics.fetcher_port": lambda v: None if v == 0 else _between(1024, 65535)(v),
    "cluster.rest_port": _between(1024, 65535),
    "cluster.rpc_port": _between(1024, 65535),
    "cluster.taskmanagers": _between(1, 16),
    "cluster.task_slots": _between(1, 64),
    "cluster.taskmanager_mb": _between(1024, 65536),
    "cluster.jobmanager_mb": _between(768, 65536),
    "cluster.metrics_ports": lambda v: None if v == "" else _port_range(v),
    "frontier.clock_topic": lambda v: None if v == "" else _topic_name(v),
    "recrawl.min_interval_s": _between(60, 86400 * 365),
    "recrawl.max_interval_s": _between(60, 86400 * 365),
    "recrawl.high_value_interval_s": _between(60, 86400 * 365),
    "recrawl.high_value_priority": _between(0, 1),
    "recrawl.tombstone_interval_s": _between(60, 86400 * 3650),
    "recrawl.failed_visit_interval_s": _between(60, 86400 * 365),
    "recrawl.seed_priority": _between(0, 1),
    "recrawl.link_priority": _between(0, 1),
    "recrawl.depth_decay": _between(0, 1),
    "recrawl.duplicate_interval_factor": _between(1, 100),
    "recrawl.duplicate_host_share": _between(0.01, 1),
    "traps.max_depth": _between(0, 1000),
    "traps.max_url_length": _between(64, 65536),
    "traps.max_query_params": _between(0, 1000),
    "traps.max_segment_repeats": _between(1, 1000),
    "traps.template_budget": _at_least(1),
    "traps.template_sample_every": _at_least(1),
    "traps.max_templates_per_host": _at_least(1),
    "fetch.allowed_networks": _networks,
    "fetch.static_hosts": _static_hosts,
    "fetch.connect_timeout_s": _between(0.1, 600),
    "fetch.read_timeout_s": _between(0.1, 600),
    "fetch.total_timeout_s": _between(0.1, 3600),
    "fetch.max_body_bytes": _between(1024, 1 << 31),
    "fetch.max_decompressed_bytes": _between(1024, 1 << 32),
    "fetch.max_robots_bytes": _between(512 * 1024, 1 << 26),
    "fetch.max_sitemap_bytes": _between(1 << 20, 50 * 1024 * 1024,
                                        "the sitemaps.org limit is 50 MB uncompressed"),
    "fetch.dns_servers": _dns_servers,
    "fetch.dns_timeout_s": _between(0.1, 60),
    "fetch.dns_ttl_min_s": _between(0, 86400),
    "fetch.dns_ttl_max_s": _between(0, 86400 * 7),
    "fetch.dns_negative_ttl_s": _between(0, 86400),
    "fetch.bundle_size": _between(1, 100_000),
    "fetch.hold_s": _between(0.1, 600),
    "fetch.bundle_time_ms": _between(1, 60_000),
    "faults.crash_after_response": _regex,
    "faults.drop_completion": _regex,
    "faults.parse_delay_s": _between(0, 60),
    "parse.workers": _between(1, 64),
    "parse.cpu_limit_s": _between(0.1, 600),
    "parse.memory_limit_mb": _between(128, 65536),
    "parse.max_bytes": _between(1024, 1 << 30),
    "parse.max_links": _between(1, 1_000_000),
    "parse.max_waiting": _between(1, 100_000),
    "audit.flush_records": _between(1, 1_000_000),
    # A buffer waits at most this long in state before it is written.
    "audit.flush_s": _between(0.1, 86400),
    "warc.prefix": lambda v: None if re.fullmatch(r"([A-Za-z0-9_.=-]+/)+", v) else
    'must be a folder of letters, digits, _ . = - ending in "/" (e.g. "warc/")',
    "warc.file_prefix": lambda v: None if re.fullmatch(r"[A-Za-z0-9_.]+(-[A-Za-z0-9_.]+)*", v)
    else "must be letters, digits, _ and . in parts joined by - (e.g. CC-MAIN)",
    "warc.max_file_bytes": _between(1000, 10_000_000_000),
    "warc.max_file_age_s": _between(1, 86400),
    "warc.dedup_entries": _between(0, 10_000_000),
    "storage.backend": _one_of("local", "s3"),
    "storage.local_dir": lambda v: None if v else "must not be empty",
    "s3.endpoint_url": _endpoint,
    "s3.bucket": lambda v: None if re.match(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", v)
    else "must be a valid S3 bucket name",
    "flink.parallelism": _between(1, 32768),
    # Flink's own bounds on the number of key groups.
    "flink.max_parallelism": _between(1, 32768, "Flink allows 1 to 32768 key groups"),
    # SPEC: a discovered URL must be durable within 60 s, and a record is
    # durable only once a checkpoint containing it completes.
    "flink.checkpoint_interval_ms": _between(100, 60000, "durability within 60 s needs <= 60000"),
    "flink.restart_strategy": _one_of("none", "fixed-delay"),
    "flink.state_backend": _one_of("hashmap", "rocksdb"),
    "flink.rocksdb_uncompressed_levels": _between(0, 7, "RocksDB has 7 levels"),
    "flink.checkpoints_retained": _between(1, 100),
    "flink.restart_attempts": _at_least(0),
    "flink.restart_delay_ms": _at_least(0),
    "flink.local_rest_port": lambda v: None if v == 0 else _between(1024, 65535)(v),
    "local.kafka_controller_port": _port,
    "local.kafka_heap_mb": _at_least(128),
    "local.s3_master_port": _port,
    "local.s3_master_grpc_port": _port,
    "local.s3_volume_port": _port,
    "local.s3_volume_grpc_port": _port,
    "local.s3_filer_port": _port,
    "local.s3_filer_grpc_port": _port,
    "local.s3_grpc_port": _port,
    "local.ready_timeout_s": _between(1, 3600),
    "local.state_dir": lambda v: None if v else "must not be empty",
}


# Rules that relate two keys: (check, message). Checked after every override is applied.
_CROSS_RULES: list[tuple[Callable[[dict[str, Any]], bool], str]] = [
    (lambda d: d["fetch"]["hold_s"] > d["frontier"]["lookahead_s"],
     "fetch.hold_s must exceed frontier.lookahead_s: leases are granted that far ahead of "
     "their time and the fetcher must be able to hold them until then"),
    (lambda d: d["fetch"]["total_timeout_s"] < d["frontier"]["lease_timeout_s"],
     "fetch.total_timeout_s must be below frontier.lease_timeout_s: a fetch that outlives "
     "its lease could run beside the re-let one"),
    (lambda d: d["flink"]["parallelism"] <= d["flink"]["max_parallelism"],
     "flink.parallelism must not exceed flink.max_parallelism: a job has no more "
     "subtasks than key groups"),
]


def _rule_for(path: str) -> Callable[[Any], str | None] | None:
    if path in _RULES:
        return _RULES[path]
    segments = path.split(".")
    for pattern, rule in _RULES.items():
        p = pattern.split(".")
        if len(p) == len(segments) and all(a in ("*", b) for a, b in zip(p, segments, strict=True)):
            return rule
    return None


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list of strings", dict: "a section"}.get(type(value), type(value).__name__)


def _check_value(path: str, default: Any, value: Any, source: str) -> Any:
    """Return `value` coerced to the default's type, or raise ConfigError."""
    where = f" (from {source})"
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif isinstance(default, list):
        ok = isinstance(value, list) and all(isinstance(x, str) for x in value)
    else:  # pragma: no cover - the defaults file only holds the types above
        raise ConfigError(f"{path}: unsupported default type {type(default).__name__}")
    if not ok:
        raise ConfigError(
            f"{path}: expected {_type_name(default)}, got {value!r}{where}")
    rule = _rule_for(path)
    if rule is not None:
        problem = rule(value)
        if problem:
            raise ConfigError(f"{path}: {problem}, got {value!r}{where}")
    return value


def _merge(base: dict[str, Any], update: Mapping[str, Any], source: str, prefix: str = "") -> None:
    if not isinstance(update, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or 'the configuration'}: expected a section, "
                          f"got {update!r} (from {source})")
    for key, value in update.items():
        path = f"{prefix}{key}"
        if not isinstance(key, str) or key not in base:
            raise ConfigError(f"unknown configuration key {path!r} (from {source})")
        if isinstance(base[key], dict):
            _merge(base[key], value, source, prefix=f"{path}.")
        else:
            base[key] = _check_value(path, base[key], value, source)


def _nest(path: str, value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return out


def _parse_scalar(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot parse value {text!r} (from {source}): {exc}") from None


@dataclass(frozen=True)
class Config:
    """A validated configuration. Read keys with `cfg["kafka.bootstrap_servers"]`."""

    data: Mapping[str, Any]

    def __getitem__(self, path: str) -> Any:
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                raise KeyError(f"no configuration key {path!r}")
            node = node[part]
        return copy.deepcopy(node) if isinstance(node, (dict, list)) else node

    def topic(self, key: str) -> str:
        """The Kafka topic name of one stream (discovered, leases, ...)."""
        if key not in TOPIC_KEYS:
            raise KeyError(f"no stream {key!r}; streams are {', '.join(TOPIC_KEYS)}")
        return self[f"topics.{key}.name"]

    def to_yaml(self) -> str:
        return yaml.safe_dump(copy.deepcopy(dict(self.data)), sort_keys=False)

    def changed(self) -> dict[str, Any]:
        """Every key whose value differs from the defaults file, as {"section.key": value}:
        what a process was configured with, whichever way (file, environment, flag)."""
        out: dict[str, Any] = {}

        def walk(node: Mapping[str, Any], default: Mapping[str, Any], prefix: str) -> None:
            for key, value in node.items():
                if isinstance(value, Mapping):
                    walk(value, default.get(key, {}), f"{prefix}{key}.")
                elif default.get(key) != value:
                    out[f"{prefix}{key}"] = value

        walk(self.data, load_defaults(), "")
        return out

    def log_line(self, job: str) -> str:
        """One JSON line a job prints at start: its name and the settings it was given."""
        import json

        return json.dumps({"event": "settings", "job": job, "changed": self.changed()},
                          default=str)


def load_defaults() -> dict[str, Any]:
    with DEFAULTS_PATH.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def load_config(
    files: Sequence[str | os.PathLike[str]] = (),
    env: Mapping[str, str] | None = None,
    overrides: Iterable[str] = (),
) -> Config:
    """Defaults, then each file, then CRAWL__ environment variables, then `key=value` overrides.

    `env` defaults to os.environ; its CRAWL_CONFIG names one more file, read before `files`.
    """
    env = os.environ if env is None else env
    data = load_defaults()
    paths = ([env[ENV_CONFIG_FILE]] if env.get(ENV_CONFIG_FILE) else []) + [str(f) for f in files]
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"configuration file {path} is not valid YAML: {exc}") from None
        if loaded is not None:
            _merge(data, loaded, path)
    for name in sorted(env):
        if name.startswith(ENV_PREFIX):
            path = ".".join(part.lower() for part in name[len(ENV_PREFIX):].split("__"))
            source = f"environment variable {name}"
            _merge(data, _nest(path, _parse_scalar(env[name], source)), source)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        path, _, text = item.partition("=")
        source = f"--set {item}"
        _merge(data, _nest(path.strip(), _parse_scalar(text, source)), source)
    for check, message in _CROSS_RULES:
        if not check(data):
            raise ConfigError(message)
    return Config(data)


def host_policy_settings(pairs: Mapping[str, str], source: str = "a host command"
                         ) -> dict[str, Any]:
    """One host's policy overrides (`crawl host set HOST politeness.min_gap_s=3 ...`, and
    the frontier reading the command back): `politeness.<key>` (or `<key>`) to a value
    written as in YAML, checked by the same type and range rules as the configuration
    file. Returns {key: typed value}; ConfigError names the first bad one."""
    defaults = load_defaults()["politeness"]
    out: dict[str, Any] = {}
    for raw_key, text in pairs.items():
        key = raw_key.removeprefix("politeness.")
        if key not in defaults or key == "policy_version":
            raise ConfigError(f"{raw_key}: not a per-host policy key; those are "
                              + ", ".join(f"politeness.{k}" for k in defaults))
        out[key] = _check_value(f"politeness.{key}", defaults[key],
                                _parse_scalar(str(text), source), source)
    return out
