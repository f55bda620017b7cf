"""The core's policy objects, built from the configuration's typed sections.

The core (udfs/core/) keeps plain dataclasses that import nothing from configuration
loading; this module, on the shell side, is the one place that maps a schema section
(udfs/config/schema.py) onto them: each dataclass field takes the section's key of the
same name, and a field the section lacks keeps the dataclass's default (e.g. a host
policy's policy_version). Every function takes the whole configuration: a `Config`, its
`Settings`, or the plain dict the jobs carry (`Config.data`, already validated).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from udfs.config import Config
from udfs.config.schema import Settings
from udfs.core.fetching import FetchLimits
from udfs.core.frontier import FrontierConfig
from udfs.core.parse import ParseLimits
from udfs.core.politeness import HostPolicy
from udfs.core.recrawl import RecrawlPolicy
from udfs.core.robots_state import RobotsPolicy
from udfs.core.traps import TrapPolicy

ConfigLike = Config | Settings | Mapping[str, Any]
T = TypeVar("T")


def _section(cfg: ConfigLike, name: str) -> Mapping[str, Any]:
    if isinstance(cfg, Config):
        return cfg.data[name]
    if isinstance(cfg, BaseModel):
        return getattr(cfg, name).model_dump()
    return cfg[name]


def _build(cls: type[T], section: Mapping[str, Any], **given: Any) -> T:
    """`cls` with each of its fields that `section` has (a list becomes a tuple)."""
    values = {f.name: section[f.name] for f in dataclasses.fields(cls)  # type: ignore[arg-type]
              if f.name in section and f.name not in given}
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()},
               **given)


def host_policy(cfg: ConfigLike) -> HostPolicy:
    """The global per-host policy (the `politeness` section)."""
    return _build(HostPolicy, _section(cfg, "politeness"))


def robots_policy(cfg: ConfigLike) -> RobotsPolicy:
    return _build(RobotsPolicy, _section(cfg, "robots"))


def recrawl_policy(cfg: ConfigLike) -> RecrawlPolicy:
    return _build(RecrawlPolicy, _section(cfg, "recrawl"))


def trap_policy(cfg: ConfigLike) -> TrapPolicy:
    return _build(TrapPolicy, _section(cfg, "traps"))


def fetch_limits(cfg: ConfigLike) -> FetchLimits:
    return _build(FetchLimits, _section(cfg, "fetch"))


def parse_limits(cfg: ConfigLike) -> ParseLimits:
    return _build(ParseLimits, _section(cfg, "parse"))


def frontier_config(cfg: ConfigLike) -> FrontierConfig:
    """Everything the frontier decides with: the `frontier` section and the policies of
    `politeness`, `robots`, `recrawl` and `traps` (the core reads no configuration itself)."""
    return _build(FrontierConfig, _section(cfg, "frontier"), host=host_policy(cfg),
                  robots=robots_policy(cfg), recrawl=recrawl_policy(cfg),
                  traps=trap_policy(cfg))
