import re

import pytest
import yaml

from udfs.config import DEFAULTS_PATH, TOPIC_KEYS, ConfigError, load_config, load_defaults


def _leaves(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}"


def test_defaults_load_and_pass_their_own_validation():
    cfg = load_config(env={})
    assert cfg["kafka.bootstrap_servers"] == "127.0.0.1:19092"
    assert cfg.topic("deadletter") == "crawl.deadletter"
    # Feeding the defaults back as an override file validates every default value.
    assert load_config([DEFAULTS_PATH], env={}).data == cfg.data


def test_every_key_has_a_comment():
    """Each leaf key has a comment above it, or shares one with the run of keys it ends."""
    lines = DEFAULTS_PATH.read_text().splitlines()
    leaf = re.compile(r"^(\s+)[a-z_0-9]+:\s*\S")
    for i, line in enumerate(lines):
        m = leaf.match(line)
        if not m:
            continue
        j = i - 1
        while j >= 0 and (n := leaf.match(lines[j])) and n.group(1) == m.group(1):
            j -= 1
        assert j >= 0 and lines[j].strip().startswith("#"), (
            f"line {i + 1} ({line.strip()}) has no comment above it")


def test_all_topics_configured():
    d = load_defaults()
    assert set(d["topics"]) == set(TOPIC_KEYS)


def test_file_env_and_flag_overrides_in_order(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("flink:\n  parallelism: 3\nkafka:\n  group_id_prefix: fromfile\n")
    env = {"CRAWL__FLINK__PARALLELISM": "5", "CRAWL__KAFKA__REQUEST_TIMEOUT_MS": "1234"}
    cfg = load_config([f], env=env, overrides=["flink.parallelism=7"])
    assert cfg["flink.parallelism"] == 7  # flag beats env beats file
    assert cfg["kafka.request_timeout_ms"] == 1234
    assert cfg["kafka.group_id_prefix"] == "fromfile"
    assert load_config([f], env=env)["flink.parallelism"] == 5
    assert load_config([f], env={})["flink.parallelism"] == 3


def test_crawl_config_env_names_a_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("topics:\n  index:\n    partitions: 12\n")
    assert load_config(env={"CRAWL_CONFIG": str(f)})["topics.index.partitions"] == 12


@pytest.mark.parametrize("source", ["file", "env", "flag"])
def test_unknown_key_is_rejected_with_its_name_and_source(tmp_path, source):
    f = tmp_path / "bad.yaml"
    f.write_text("kafka:\n  bootstrap_server: x:1\n")
    kwargs = {
        "file": {"files": [f], "env": {}},
        "env": {"env": {"CRAWL__KAFKA__BOOTSTRAP_SERVER": "x:1"}},
        "flag": {"env": {}, "overrides": ["kafka.bootstrap_server=x:1"]},
    }[source]
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap_server'") as exc:
        load_config(**kwargs)
    assert {"file": str(f), "env": "CRAWL__KAFKA__BOOTSTRAP_SERVER",
            "flag": "--set"}[source] in str(exc.value)


@pytest.mark.parametrize("override, message", [
    ("flink.parallelism=0", r"flink\.parallelism: must be between 1"),
    ("flink.parallelism=two", r"flink\.parallelism: expected an integer"),
    ("flink.parallelism=true", r"flink\.parallelism: expected an integer"),
    ("s3.path_style=1", r"s3\.path_style: expected a boolean"),
    ("storage.backend=ftp", r"storage\.backend: must be one of local, s3"),
    ("topics.leases.name=bad name", r"topics\.leases\.name: must be"),
    ("topics.leases.partitions=0", r"topics\.leases\.partitions"),
    ("topics.index.retention_ms=0", r"topics\.index\.retention_ms: must be -1"),
    ("kafka.bootstrap_servers=nohost", r"kafka\.bootstrap_servers: must be"),
    ("s3.endpoint_url=ftp://x", r"s3\.endpoint_url: must be empty or an http"),
    ("local.kafka_controller_port=70000", r"local\.kafka_controller_port: must be a TCP port"),
    ("flink.checkpoint_interval_ms=120000", r"durability within 60 s"),
    ("flink.jars=notalist", r"flink\.jars: expected a list"),
    ("topics=3", r"topics: expected a section"),
    ("flink.parallelism", r"must look like section\.key=value"),
    ("cluster.metrics_ports=\"9260\"", r'cluster\.metrics_ports: must be "" or a port range'),
    ("cluster.metrics_ports=9279-9260", r"cluster\.metrics_ports: must be"),
    ("cluster.metrics_ports=80-90", r"cluster\.metrics_ports: must be"),
])
def test_bad_values_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(env={}, overrides=[override])


def test_good_values_of_each_type_are_accepted():
    cfg = load_config(env={}, overrides=[
        "flink.jars=[a.jar, /b/c.jar]", "s3.path_style=false", "s3.endpoint_url=",
        "kafka.bootstrap_servers=b1:9092,b2:9092", "topics.deadletter.retention_ms=-1"])
    assert cfg["flink.jars"] == ["a.jar", "/b/c.jar"]
    assert cfg["s3.path_style"] is False
    assert cfg["s3.endpoint_url"] == ""


def test_invalid_yaml_and_missing_file(tmp_path):
    f = tmp_path / "broken.yaml"
    f.write_text("kafka: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config([f], env={})
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        load_config([tmp_path / "absent.yaml"], env={})


def test_reading_is_a_copy_and_to_yaml_round_trips():
    cfg = load_config(env={}, overrides=["flink.parallelism=9"])
    jars = cfg["flink.jars"]
    jars.append("x")
    assert cfg["flink.jars"] == []
    assert yaml.safe_load(cfg.to_yaml())["flink"]["parallelism"] == 9
    with pytest.raises(KeyError):
        cfg["flink.nope"]
    with pytest.raises(KeyError):
        cfg.topic("nope")


def test_keys_that_depend_on_each_other_are_checked_together():
    with pytest.raises(ConfigError, match="fetch.total_timeout_s must be below "
                                          "frontier.lease_timeout_s"):
        load_config(env={}, overrides=["fetch.total_timeout_s=400"])
    cfg = load_config(env={}, overrides=["fetch.total_timeout_s=400",
                                         "frontier.lease_timeout_s=600"])
    assert cfg["fetch.total_timeout_s"] == 400.0
    with pytest.raises(ConfigError, match="flink.parallelism must not exceed "
                                          "flink.max_parallelism"):
        load_config(env={}, overrides=["flink.parallelism=200", "flink.max_parallelism=128"])
    with pytest.raises(ConfigError, match="flink.max_parallelism: must be between 1 and 32768"):
        load_config(env={}, overrides=["flink.max_parallelism=65536"])


def test_changed_lists_what_every_source_set(tmp_path):
    import json

    from udfs.config import load_config

    f = tmp_path / "mine.yaml"
    f.write_text("politeness:\n  max_gap_s: 111\n", encoding="utf-8")
    env_file = tmp_path / "env.yaml"
    env_file.write_text("fetch:\n  dns_timeout_s: 7.5\n", encoding="utf-8")
    cfg = load_config([f], env={"CRAWL_CONFIG": str(env_file),
                                "CRAWL__RECRAWL__SEED_PRIORITY": "0.9"},
                      overrides=["frontier.clock_idle_ms=1500"])
    assert cfg.changed() == {"politeness.max_gap_s": 111.0, "fetch.dns_timeout_s": 7.5,
                             "recrawl.seed_priority": 0.9, "frontier.clock_idle_ms": 1500}
    line = json.loads(cfg.log_line("frontier"))
    assert line["job"] == "frontier" and line["changed"]["frontier.clock_idle_ms"] == 1500
    assert load_config(env={}).changed() == {}
