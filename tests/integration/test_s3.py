"""boto3 against the local S3-compatible server."""

from __future__ import annotations

import hashlib
import os
import uuid

import pytest
from botocore.exceptions import ClientError

from udfs.storage.objectstore import s3_client


def test_put_get_list_delete(cfg):
    s3 = s3_client(cfg)
    bucket = cfg["s3.bucket"]
    prefix = f"test/{uuid.uuid4().hex}/"
    bodies = {f"{prefix}raw/{i:02d}": os.urandom(100 + i) for i in range(12)}
    bodies[f"{prefix}big"] = os.urandom(6 * 1024 * 1024)
    for key, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    for key, body in bodies.items():
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest(), key

    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{prefix}raw/", PaginationConfig={"PageSize": 5})
    listed = [o["Key"] for page in pages for o in page.get("Contents", [])]
    assert sorted(listed) == sorted(k for k in bodies if "/raw/" in k)

    # Writing the same content under the same key again is harmless.
    key = f"{prefix}raw/00"
    s3.put_object(Bucket=bucket, Key=key, Body=bodies[key])
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == bodies[key]

    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in bodies]})
    assert s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("KeyCount", 0) == 0
    with pytest.raises(ClientError):
        s3.get_object(Bucket=bucket, Key=key)
