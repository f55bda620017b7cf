"""The configuration: one YAML file of defaults with a comment per key
(crawler-default.yaml), its typed schema (schema.py, rules.py), the loader of files,
CRAWL__ variables and --set (loader.py), and the core's policies built from it
(policies.py). `udfs.config` is the loader's face."""

from udfs.config.loader import (
    DEFAULTS_PATH,
    ENV_CONFIG_FILE,
    ENV_PREFIX,
    TOPIC_KEYS,
    Config,
    ConfigError,
    host_policy_settings,
    load_config,
    load_defaults,
)

__all__ = ["DEFAULTS_PATH", "ENV_CONFIG_FILE", "ENV_PREFIX", "TOPIC_KEYS", "Config",
           "ConfigError", "host_policy_settings", "load_config", "load_defaults"]
