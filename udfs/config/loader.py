"""The crawler's configuration: one defaults file, overridden by file, environment and flags.

`crawler-default.yaml` beside this module holds every key with its default and a
comment; `udfs/config/schema.py` is its typed schema (types, ranges, choices). Unknown
keys and bad values raise `ConfigError` naming the key and where the value came from,
so a typo never silently falls back to a default.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from udfs.config.rules import RULE_ERROR
from udfs.config.schema import Politeness, Settings, relation_problem

DEFAULTS_PATH = Path(__file__).with_name("crawler-default.yaml")
ENV_PREFIX = "CRAWL__"
ENV_CONFIG_FILE = "CRAWL_CONFIG"

TOPIC_KEYS = ("discovered", "leases", "completions", "index", "deadletter", "control",
              "replies", "shards")


class ConfigError(ValueError):
    """A configuration key or value is not acceptable; the message names the key."""


_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
               list: "a list of strings"}


def _expected(model: type[BaseModel], keys: Sequence[str]) -> str:
    """What the schema accepts at `keys` below `model`: "an integer", "a section", ..."""
    annotation: Any = model
    for key in keys:
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            break
        annotation = annotation.model_fields[key].annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "a section"
    return _TYPE_NAMES.get(get_origin(annotation) or annotation, str(annotation))


def _lookup(data: Any, keys: Sequence[str]) -> Any:
    for key in keys:
        data = data[key]
    return data


def _one_line(exc: ValidationError, model: type[BaseModel], data: Mapping[str, Any],
              source: str, prefix: tuple[str, ...] = ()) -> ConfigError:
    """The first problem `exc` found, as one line naming the key, the value and what is
    allowed: "<key>: <what is allowed>, got <value> (from <source>)"."""
    err = exc.errors(include_url=False)[0]
    loc = list(err["loc"])
    where = f" (from {source})"
    if err["type"] == "extra_forbidden":
        path = ".".join(prefix + tuple(str(p) for p in loc))
        return ConfigError(f"unknown configuration key {path!r}{where}")
    # A list's item is reported as the whole list ("expected a list of strings, got ...").
    keys = [str(p) for p in loc[:next((i for i, p in enumerate(loc) if isinstance(p, int)),
                                      len(loc))]]
    path = ".".join(prefix + tuple(keys)) or "the configuration"
    if err["type"] == RULE_ERROR:  # the value as typed (an integer given for a number: 1.0)
        return ConfigError(f"{path}: {err['ctx']['problem']}, got {err['ctx']['value']!r}{where}")
    return ConfigError(f"{path}: expected {_expected(model, keys)}, "
                       f"got {_lookup(data, keys)!r}{where}")


def _validated(data: dict[str, Any], source: str) -> Settings:
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise _one_line(exc, Settings, data, source) from None


def _merge(base: dict[str, Any], update: Any, source: str, prefix: str = "") -> None:
    """Put `update`'s keys into `base` (sections key by key); the schema checks them."""
    if not isinstance(update, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or 'the configuration'}: expected a section, "
                          f"got {update!r} (from {source})")
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value, source, prefix=f"{prefix}{key}.")
        else:
            base[key] = copy.deepcopy(value)


def _apply(data: dict[str, Any], update: Any, source: str) -> dict[str, Any]:
    """`data` (valid) with `update` from `source` merged in and checked: the first
    problem is `update`'s, since everything before it was valid."""
    merged = copy.deepcopy(data)
    _merge(merged, update, source)
    return _validated(merged, source).model_dump()


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
    """A validated configuration. Read keys with `cfg["kafka.bootstrap_servers"]`, or
    typed, one object per section, with `cfg.settings.kafka.bootstrap_servers`."""

    data: Mapping[str, Any]

    def __getitem__(self, path: str) -> Any:
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                raise KeyError(f"no configuration key {path!r}")
            node = node[part]
        return copy.deepcopy(node) if isinstance(node, (dict, list)) else node

    @cached_property
    def settings(self) -> Settings:
        """The configuration as typed, read-only sections (udfs/config/schema.py)."""
        return _validated(dict(self.data), "the configuration")

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
    """The defaults file as written (plain YAML values, not checked)."""
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
    data = _validated(load_defaults(), f"the defaults file {DEFAULTS_PATH}").model_dump()
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
            data = _apply(data, loaded, path)
    for name in sorted(env):
        if name.startswith(ENV_PREFIX):
            path = ".".join(part.lower() for part in name[len(ENV_PREFIX):].split("__"))
            source = f"environment variable {name}"
            data = _apply(data, _nest(path, _parse_scalar(env[name], source)), source)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        path, _, text = item.partition("=")
        source = f"--set {item}"
        data = _apply(data, _nest(path.strip(), _parse_scalar(text, source)), source)
    problem = relation_problem(Settings.model_validate(data))
    if problem:
        raise ConfigError(problem)
    return Config(data)


def host_policy_settings(pairs: Mapping[str, str], source: str = "a host command"
                         ) -> dict[str, Any]:
    """One host's policy overrides (`crawl host set HOST politeness.min_gap_s=3 ...`, and
    the frontier reading the command back): `politeness.<key>` (or `<key>`) to a value
    written as in YAML, checked by the schema's `politeness` section like the
    configuration file. Returns {key: typed value}; ConfigError names the first bad one."""
    defaults = load_defaults()["politeness"]
    out: dict[str, Any] = {}
    for raw_key, text in pairs.items():
        key = raw_key.removeprefix("politeness.")
        if key not in Politeness.model_fields:
            raise ConfigError(f"{raw_key}: not a per-host policy key; those are "
                              + ", ".join(f"politeness.{k}" for k in Politeness.model_fields))
        section = {**defaults, key: _parse_scalar(str(text), source)}
        try:
            out[key] = getattr(Politeness.model_validate(section), key)
        except ValidationError as exc:
            raise _one_line(exc, Politeness, section, source, ("politeness",)) from None
    return out
