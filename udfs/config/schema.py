"""The configuration's schema: every section and key of crawler-default.yaml, typed.

Built on pydantic v2 (chosen over msgspec because its per-field validators carry our
own one-line messages and report the key's path, which msgspec's constraints and
__post_init__ hooks cannot do together; strict mode keeps the file's rules: an integer
is not a boolean, a number is not a string, an integer is accepted for a number).

The defaults file stays the one place for default values and their comments: no field
here has a default, so a key missing from the file fails validation, and
tests/unit/test_config_schema.py checks the file and this schema against each other.
Ranges, choices and formats are in udfs/config/rules.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from pydantic import BaseModel, ConfigDict

from udfs.config import rules as r
from udfs.config.rules import at_least, between, one_of, rule, zero_or_between

DAY = 86400
Port = Annotated[int, rule(r.port)]
UnprivilegedPort = Annotated[int, between(1024, 65535)]
Interval = Annotated[float, between(60, DAY * 365)]
Share = Annotated[float, between(0, 1)]
Strings = list[str]


class Section(BaseModel):
    """A section of the file: strict types, no unknown keys, read-only."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class Kafka(Section):
    bootstrap_servers: Annotated[str, rule(r.bootstrap)]
    group_id_prefix: Annotated[str, rule(r.topic_name)]
    request_timeout_ms: Annotated[int, at_least(100)]
    fetch_min_bytes: Annotated[int, between(1, 52428800)]
    fetch_max_wait_ms: Annotated[int, between(0, 5000)]
    linger_ms: Annotated[int, between(0, 5000)]


class Topic(Section):
    name: Annotated[str, rule(r.topic_name)]
    partitions: Annotated[int, between(1, 10000)]
    retention_ms: Annotated[int, rule(r.retention)]


class Topics(Section):
    """One entry per stream (udfs.config.TOPIC_KEYS)."""

    discovered: Topic
    leases: Topic
    completions: Topic
    index: Topic
    deadletter: Topic
    control: Topic
    replies: Topic
    shards: Topic


class Urls(Section):
    drop_query_params: Strings
    filters: Annotated[Strings, rule(r.url_filters)]


class Robots(Section):
    user_agent: Annotated[str, rule(r.user_agent)]
    cache_ttl_s: Annotated[float, between(60, DAY, "RFC 9309: refresh within 24 h")]
    max_redirects: Annotated[int, between(0, 20)]
    retry_base_s: Annotated[float, between(1, DAY)]
    retry_max_s: Annotated[float, between(1, DAY)]
    crawl_delay: Annotated[str, one_of("honor", "ignore")]
    crawl_delay_cap_s: Annotated[float, between(0, 3600)]


class Politeness(Section):
    """The global host policy; `crawl host set` overrides it per host (policy keys)."""

    max_in_flight: Annotated[int, between(1, 1000)]
    min_gap_s: Annotated[float, between(0, DAY)]
    duration_factor: Annotated[float, between(0, 1000)]
    max_gap_s: Annotated[float, between(0, DAY)]
    backoff_base_s: Annotated[float, between(0, DAY)]
    backoff_max_s: Annotated[float, between(0, DAY * 7)]
    allowance_cut: Annotated[float, between(0.01, 1)]
    allowance_min: Annotated[float, between(0.01, 1)]
    allowance_recovery: Annotated[float, between(1, 10)]
    daily_budget: Annotated[int, at_least(1)]


class Frontier(Section):
    lease_timeout_s: Annotated[float, between(1, DAY)]
    lookahead_s: Annotated[float, between(0, 60)]
    max_lookahead_leases: Annotated[int, between(0, 64)]
    max_grants_per_call: Annotated[int, between(1, 10_000)]
    max_lease_attempts: Annotated[int, between(1, 100)]
    max_retries: Annotated[int, between(0, 100)]
    retry_base_s: Annotated[float, between(0, DAY)]
    max_redirect_hops: Annotated[int, between(0, 20)]
    daily_fetch_budget: Annotated[int, at_least(1)]
    address_block_s: Annotated[float, between(0, DAY * 30)]
    max_resident_urls: Annotated[int, between(16, 10_000_000)]
    cold_bucket_s: Annotated[float, between(1, DAY)]
    clock_idle_ms: Annotated[int, between(100, 60_000)]
    clock_topic: Annotated[str, rule(r.optional_topic_name)]
    cache_urls: Annotated[int, at_least(1000)]
    cache_hosts: Annotated[int, at_least(1)]
    intake_recent_urls: Annotated[int, between(0, 100_000_000)]
    intake_recent_s: Annotated[float, between(1, DAY)]
    near_duplicate_bucket: Annotated[int, between(1, 1_000_000)]
    shard_above_urls: Annotated[int, at_least(0)]
    host_shards: Annotated[int, between(1, 4096)]
    shard_refill_urls: Annotated[int, at_least(1)]
    shard_pull_timeout_s: Annotated[float, between(1, DAY)]


class Recrawl(Section):
    min_interval_s: Interval
    max_interval_s: Interval
    high_value_interval_s: Interval
    high_value_priority: Share
    tombstone_interval_s: Annotated[float, between(60, DAY * 3650)]
    failed_visit_interval_s: Interval
    seed_priority: Share
    link_priority: Share
    depth_decay: Share
    learned_priority: bool
    duplicate_interval_factor: Annotated[float, between(1, 100)]
    duplicate_host_share: Annotated[float, between(0.01, 1)]


class Traps(Section):
    max_depth: Annotated[int, between(0, 1000)]
    max_url_length: Annotated[int, between(64, 65536)]
    max_query_params: Annotated[int, between(0, 1000)]
    max_segment_repeats: Annotated[int, between(1, 1000)]
    template_budget: Annotated[int, at_least(1)]
    template_sample_every: Annotated[int, at_least(1)]
    max_templates_per_host: Annotated[int, at_least(1)]


class Fetch(Section):
    allowed_networks: Annotated[Strings, rule(r.networks)]
    static_hosts: Annotated[Strings, rule(r.static_hosts)]
    ip_min_gap_s: Annotated[float, between(0, 3600)]
    ip_max_in_flight: Annotated[int, between(0, 10000)]
    connect_timeout_s: Annotated[float, between(0.1, 600)]
    read_timeout_s: Annotated[float, between(0.1, 600)]
    total_timeout_s: Annotated[float, between(0.1, 3600)]
    max_body_bytes: Annotated[int, between(1024, 1 << 31)]
    max_decompressed_bytes: Annotated[int, between(1024, 1 << 32)]
    max_robots_bytes: Annotated[int, between(512 * 1024, 1 << 26)]
    max_sitemap_bytes: Annotated[int, between(1 << 20, 50 * 1024 * 1024,
                                              "the sitemaps.org limit is 50 MB uncompressed")]
    dns_ttl_min_s: Annotated[float, between(0, DAY)]
    dns_ttl_max_s: Annotated[float, between(0, DAY * 7)]
    dns_negative_ttl_s: Annotated[float, between(0, DAY)]
    dns_servers: Annotated[Strings, rule(r.dns_servers)]
    dns_timeout_s: Annotated[float, between(0.1, 60)]
    hold_s: Annotated[float, between(0.1, 600)]
    bundle_size: Annotated[int, between(1, 100_000)]
    bundle_time_ms: Annotated[int, between(1, 60_000)]


class Parse(Section):
    workers: Annotated[int, between(1, 64)]
    cpu_limit_s: Annotated[float, between(0.1, 600)]
    memory_limit_mb: Annotated[int, between(128, 65536)]
    max_bytes: Annotated[int, between(1024, 1 << 30)]
    max_links: Annotated[int, between(1, 1_000_000)]
    max_waiting: Annotated[int, between(1, 100_000)]
    filters: Annotated[Strings, rule(r.parse_filters)]


class Faults(Section):
    crash_after_response: Annotated[str, rule(r.regex)]
    drop_completion: Annotated[str, rule(r.regex)]
    parse_delay_s: Annotated[float, between(0, 60)]
    marker_dir: str


class Audit(Section):
    flush_records: Annotated[int, between(1, 1_000_000)]
    # A buffer waits at most this long in state before it is written.
    flush_s: Annotated[float, between(0.1, DAY)]


class Warc(Section):
    enabled: bool
    prefix: Annotated[str, rule(r.warc_prefix)]
    file_prefix: Annotated[str, rule(r.warc_file_prefix)]
    max_file_bytes: Annotated[int, between(1000, 10_000_000_000)]
    max_file_age_s: Annotated[float, between(1, DAY)]
    temp_dir: str
    dedup_entries: Annotated[int, between(0, 10_000_000)]


class Storage(Section):
    backend: Annotated[str, one_of("local", "s3")]
    local_dir: Annotated[str, rule(r.not_empty)]
    gzip_level: Annotated[int, between(1, 9)]


class S3(Section):
    endpoint_url: Annotated[str, rule(r.endpoint)]
    bucket: Annotated[str, rule(r.bucket)]
    region: str
    low_tier_storage_class: Annotated[str, one_of(
        "", "STANDARD", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER_IR",
        "GLACIER", "DEEP_ARCHIVE", "REDUCED_REDUNDANCY")]
    path_style: bool
    access_key_env: str
    secret_key_env: str


class Flink(Section):
    parallelism: Annotated[int, between(1, 32768)]
    # Flink's own bounds on the number of key groups.
    max_parallelism: Annotated[int, between(1, 32768, "Flink allows 1 to 32768 key groups")]
    # SPEC: a discovered URL must be durable within 60 s, and a record is durable only
    # once a checkpoint containing it completes.
    checkpoint_interval_ms: Annotated[int, between(100, 60000,
                                                   "durability within 60 s needs <= 60000")]
    checkpoint_dir: str
    checkpoints_retained: Annotated[int, between(1, 100)]
    state_backend: Annotated[str, one_of("hashmap", "rocksdb")]
    rocksdb_uncompressed_levels: Annotated[int, between(0, 7, "RocksDB has 7 levels")]
    rocksdb_bloom_bits_per_key: Annotated[float, between(0, 64)]
    restart_strategy: Annotated[str, one_of("none", "fixed-delay")]
    restart_attempts: Annotated[int, at_least(0)]
    restart_delay_ms: Annotated[int, at_least(0)]
    jars: Strings
    python_executable: str
    kafka_connector_version: str
    local_rest_port: Annotated[int, zero_or_between(1024, 65535)]


class Cluster(Section):
    rest_port: UnprivilegedPort
    rpc_port: UnprivilegedPort
    taskmanagers: Annotated[int, between(1, 16)]
    task_slots: Annotated[int, between(1, 64)]
    taskmanager_mb: Annotated[int, between(1024, 65536)]
    jobmanager_mb: Annotated[int, between(768, 65536)]
    metrics_ports: Annotated[str, rule(r.port_range)]


class Metrics(Section):
    frontier_port: Annotated[int, zero_or_between(1024, 65535)]
    fetcher_port: Annotated[int, zero_or_between(1024, 65535)]


class Local(Section):
    state_dir: Annotated[str, rule(r.not_empty)]
    kafka_version: str
    kafka_controller_port: Port
    kafka_heap_mb: Annotated[int, at_least(128)]
    s3_master_port: Port
    s3_master_grpc_port: Port
    s3_volume_port: Port
    s3_volume_grpc_port: Port
    s3_filer_port: Port
    s3_filer_grpc_port: Port
    s3_grpc_port: Port
    ready_timeout_s: Annotated[int, between(1, 3600)]


class Settings(Section):
    """The whole configuration, one typed object per section."""

    kafka: Kafka
    topics: Topics
    urls: Urls
    robots: Robots
    politeness: Politeness
    frontier: Frontier
    recrawl: Recrawl
    traps: Traps
    fetch: Fetch
    parse: Parse
    faults: Faults
    audit: Audit
    warc: Warc
    storage: Storage
    s3: S3
    flink: Flink
    cluster: Cluster
    metrics: Metrics
    local: Local


# Rules that relate two keys: (holds, message). Checked once every source is applied.
RELATIONS: list[tuple[Callable[[Settings], bool], str]] = [
    (lambda s: s.fetch.hold_s > s.frontier.lookahead_s,
     "fetch.hold_s must exceed frontier.lookahead_s: leases are granted that far ahead of "
     "their time and the fetcher must be able to hold them until then"),
    (lambda s: s.fetch.total_timeout_s < s.frontier.lease_timeout_s,
     "fetch.total_timeout_s must be below frontier.lease_timeout_s: a fetch that outlives "
     "its lease could run beside the re-let one"),
    (lambda s: s.flink.parallelism <= s.flink.max_parallelism,
     "flink.parallelism must not exceed flink.max_parallelism: a job has no more "
     "subtasks than key groups"),
]


def relation_problem(settings: Settings) -> str | None:
    """The message of the first relation between keys that `settings` breaks, if any."""
    return next((message for holds, message in RELATIONS if not holds(settings)), None)
