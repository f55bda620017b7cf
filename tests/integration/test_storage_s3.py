"""Content-addressed raw bodies and plain objects in the local S3 server (real
SeaweedFS, boto3)."""

from __future__ import annotations

import os
import uuid

from udfs.storage.bodies import S3Store
from udfs.storage.objectstore import s3_client


def test_s3_store_put_get_and_reuse(cfg):
    store = S3Store(s3_client(cfg), cfg["s3.bucket"])
    body = os.urandom(64) + b"<html>" * 1000
    sha, key, new = store.put_body(body)
    assert new and store.get_body(key) == body
    assert store.put_body(body) == (sha, key, False)
    store.client.delete_object(Bucket=cfg["s3.bucket"], Key=key)


def test_s3_store_plain_objects(cfg):
    store = S3Store(s3_client(cfg), cfg["s3.bucket"])
    prefix = f"test/{uuid.uuid4().hex}/audit/"
    keys = [f"{prefix}day=2026-12-0{d}/t/p{i:02d}.jsonl.gz" for d in (1, 2) for i in range(3)]
    for i, key in enumerate(keys):
        store.put_object(key, bytes([i]) * 10)
    store.put_object(keys[0], b"replaced")
    assert store.get_object(keys[0]) == b"replaced"
    assert list(store.list_objects(f"{prefix}day=2026-12-02/")) == keys[3:]
    assert list(store.list_objects(prefix)) == keys
    store.client.delete_objects(Bucket=cfg["s3.bucket"],
                                Delete={"Objects": [{"Key": k} for k in keys]})
    assert list(store.list_objects(prefix)) == []
