"""Content-addressed raw bodies in the local S3 server (real SeaweedFS, boto3)."""

from __future__ import annotations

import os

from udfs.objectstore import s3_client
from udfs.storage import S3Store


def test_s3_store_put_get_and_reuse(cfg):
    store = S3Store(s3_client(cfg), cfg["s3.bucket"])
    body = os.urandom(64) + b"<html>" * 1000
    sha, key, new = store.put_body(body)
    assert new and store.get_body(key) == body
    assert store.put_body(body) == (sha, key, False)
    store.client.delete_object(Bucket=cfg["s3.bucket"], Key=key)
