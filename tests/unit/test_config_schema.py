"""The typed schema (udfs/config/schema.py) against the defaults file, both ways, and
the one-line messages and typed values it gives for files, CRAWL__ variables and --set."""

from __future__ import annotations

import dataclasses
from typing import Any, get_args, get_origin

import pytest
from pydantic import BaseModel

from crawler.cli import main
from udfs.config import ConfigError, load_config, load_defaults, policies
from udfs.config.schema import Settings
from udfs.core.fetching import FetchLimits
from udfs.core.frontier import FrontierConfig
from udfs.core.parse import ParseLimits
from udfs.core.politeness import HostPolicy
from udfs.core.recrawl import RecrawlPolicy
from udfs.core.robots_state import RobotsPolicy
from udfs.core.traps import TrapPolicy

DEFAULTS = load_defaults()


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _schema_leaves(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if _is_section(info.annotation):
            out.update(_schema_leaves(info.annotation, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = info.annotation
    return out


def _yaml_leaves(node: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(_yaml_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


SCHEMA = _schema_leaves(Settings)
YAML = _yaml_leaves(DEFAULTS)


def test_every_key_of_the_defaults_file_is_in_the_schema_with_the_type_of_its_value():
    """The type of a key is the type of its default, exactly: a key written 90 takes
    integers only, one written 90.0 takes numbers (an integer too)."""
    assert sorted(set(YAML) - set(SCHEMA)) == []
    for key, value in YAML.items():
        annotation = SCHEMA[key]
        if isinstance(value, list):
            assert get_origin(annotation) is list and get_args(annotation) == (str,), key
            assert all(isinstance(x, str) for x in value), key
        else:
            assert annotation is type(value), f"{key}: {annotation} in the schema, " \
                                              f"{type(value).__name__} in the file"


def test_every_schema_field_has_an_entry_in_the_defaults_file_in_the_same_order():
    assert sorted(set(SCHEMA) - set(YAML)) == []
    assert list(SCHEMA) == list(YAML)  # `crawl config show` prints the file's order


def test_the_defaults_pass_the_schema_and_come_back_unchanged():
    assert Settings.model_validate(DEFAULTS).model_dump() == DEFAULTS


def test_no_schema_field_has_a_default_of_its_own():
    """The defaults file is the one place for defaults: a key left out of it fails."""
    def walk(model: type[BaseModel]) -> None:
        for name, info in model.model_fields.items():
            assert info.is_required(), f"{model.__name__}.{name} has a default"
            if _is_section(info.annotation):
                walk(info.annotation)
    walk(Settings)
    broken = {**DEFAULTS, "fetch": {k: v for k, v in DEFAULTS["fetch"].items()
                                    if k != "hold_s"}}
    with pytest.raises(ValueError, match="hold_s"):
        Settings.model_validate(broken)


@pytest.mark.parametrize("cls, build, section", [
    (HostPolicy, policies.host_policy, "politeness"),
    (RobotsPolicy, policies.robots_policy, "robots"),
    (RecrawlPolicy, policies.recrawl_policy, "recrawl"),
    (TrapPolicy, policies.trap_policy, "traps"),
    (FetchLimits, policies.fetch_limits, "fetch"),
    (ParseLimits, policies.parse_limits, "parse"),
    (FrontierConfig, policies.frontier_config, "frontier"),
])
def test_core_dataclass_defaults_agree_with_the_defaults_file(cls, build, section):
    """The core's own defaults (used by its tests) are the file's, and every field of a
    core policy comes from the file (none silently keeps a default of the code)."""
    assert build(DEFAULTS) == cls(), cls.__name__
    own = {f.name for f in dataclasses.fields(cls)} - {
        "policy_version", "host", "robots", "recrawl", "traps"}
    assert own <= set(Settings.model_fields[section].annotation.model_fields), cls.__name__


def test_a_policy_is_built_alike_from_a_config_its_settings_and_its_dict():
    cfg = load_config(env={}, overrides=["politeness.min_gap_s=3", "fetch.dns_servers=[1.1.1.1]",
                                         "frontier.lookahead_s=0.5"])
    for given in (cfg, cfg.settings, dict(cfg.data)):
        assert policies.host_policy(given).min_gap_s == 3.0
        assert policies.fetch_limits(given).dns_servers == ("1.1.1.1",)
        assert policies.frontier_config(given).lookahead_s == 0.5
        assert policies.frontier_config(given).host.min_gap_s == 3.0


def test_env_and_set_values_are_parsed_as_yaml_and_typed_by_the_schema():
    cfg = load_config(env={"CRAWL__FETCH__HOLD_S": "7", "CRAWL__FLINK__JARS": "[a.jar, b.jar]",
                           "CRAWL__S3__PATH_STYLE": "false", "CRAWL__FAULTS__MARKER_DIR": ""},
                      overrides=["politeness.max_in_flight=2", "recrawl.learned_priority=no",
                                 "frontier.clock_topic=", "kafka.group_id_prefix=7x"])
    s = cfg.settings
    assert s.fetch.hold_s == 7.0 and isinstance(s.fetch.hold_s, float)
    assert cfg["fetch.hold_s"] == 7.0 and isinstance(cfg["fetch.hold_s"], float)
    assert s.flink.jars == ["a.jar", "b.jar"]
    assert s.s3.path_style is False and s.recrawl.learned_priority is False
    assert s.politeness.max_in_flight == 2 and s.frontier.clock_topic == ""
    assert s.faults.marker_dir == "" and s.kafka.group_id_prefix == "7x"


@pytest.mark.parametrize("kwargs, line", [
    ({"overrides": ["fetch.hold_s=0"]},
     "fetch.hold_s: must be between 0.1 and 600, got 0.0 (from --set fetch.hold_s=0)"),
    ({"env": {"CRAWL__PARSE__WORKERS": "two"}},
     "parse.workers: expected an integer, got 'two' "
     "(from environment variable CRAWL__PARSE__WORKERS)"),
    ({"overrides": ["flink.jars=[1]"]},
     "flink.jars: expected a list of strings, got [1] (from --set flink.jars=[1])"),
    ({"overrides": ["warc.enabled=yes please"]},
     "warc.enabled: expected a boolean, got 'yes please' (from --set warc.enabled=yes please)"),
    ({"overrides": ["robots.crawl_delay=sometimes"]},
     "robots.crawl_delay: must be one of honor, ignore, got 'sometimes' "
     "(from --set robots.crawl_delay=sometimes)"),
    ({"overrides": ["topics.shards.nope=1"]},
     "unknown configuration key 'topics.shards.nope' (from --set topics.shards.nope=1)"),
    ({"overrides": ["recrawl=1"]}, "recrawl: expected a section, got 1 (from --set recrawl=1)"),
])
def test_a_bad_value_is_one_line_naming_key_value_and_what_is_allowed(kwargs, line):
    with pytest.raises(ConfigError) as exc:
        load_config(**{"env": {}, **kwargs})
    assert str(exc.value) == line


def test_a_bad_value_in_a_file_names_the_file(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("parse:\n  max_links: 0\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_config([f], env={})
    assert str(exc.value) == f"parse.max_links: must be between 1 and 1000000, got 0 (from {f})"


def test_a_bad_typed_value_on_the_command_line_is_one_line_and_exit_2(capsys):
    assert main(["config", "check", "--set", "traps.max_depth=1.5"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        "crawl config: configuration error: traps.max_depth: expected an integer, got 1.5 "
        "(from --set traps.max_depth=1.5)"]


def test_the_core_imports_nothing_from_flink_the_cli_or_configuration_loading():
    """udfs/core/ is pure rules: the policies are built from the configuration in
    udfs/config/policies.py, on the shell side. (yaml is allowed: capacity.py reads its own
    assumptions file, not the configuration.)"""
    import ast
    from pathlib import Path

    core = Path(__file__).resolve().parents[2] / "udfs" / "core"
    banned = ("pyflink", "crawler", "pydantic", "udfs.config", "udfs.config.schema",
              "udfs.config.rules", "udfs.config.policies")
    for path in sorted(core.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not any(name == b or name.startswith(f"{b}.") for b in banned), \
                    f"{path.relative_to(core.parent.parent)} imports {name}"
