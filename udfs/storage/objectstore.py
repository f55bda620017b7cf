"""Object storage clients built from the configuration (S3 via boto3)."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from udfs.config import Config

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def s3_client(cfg: Config) -> Any:
    """A boto3 S3 client for `s3.*` settings.

    Credentials come from the environment variables the configuration names,
    else boto3's usual chain. A loopback endpoint without credentials gets a
    fixed local pair: the local server accepts any, and nothing leaves the machine.
    """
    import boto3
    from botocore.config import Config as BotoConfig

    endpoint = cfg["s3.endpoint_url"] or None
    key = os.environ.get(cfg["s3.access_key_env"])
    secret = os.environ.get(cfg["s3.secret_key_env"])
    if endpoint and not (key and secret) and urlsplit(endpoint).hostname in _LOOPBACK:
        key, secret = "local", "local-secret"
    boto_cfg = BotoConfig(
        s3={"addressing_style": "path" if cfg["s3.path_style"] else "auto"},
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=5, read_timeout=30)
    return boto3.client("s3", endpoint_url=endpoint, region_name=cfg["s3.region"],
                        aws_access_key_id=key, aws_secret_access_key=secret, config=boto_cfg)
