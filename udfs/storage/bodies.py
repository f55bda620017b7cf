"""Raw response bodies in object storage, content-addressed and compressed.

A body is stored gzip-compressed under the SHA-256 of its (decompressed) bytes,
so byte-identical pages share one object and writing the same content twice
is harmless. Backends: a local directory (the default) and S3 (boto3).

These `raw/` objects are the working copy of the bodies (readable at once, decoded,
shared by identical pages); the WARC files (udfs/storage/warc_writer.py) are the source of
truth for a crawl's raw bytes. README, "Every fetch kept as WARC", says why both and
what the copy costs. The fetcher hands `put_body` the WARC writer's SHA-256 and
compressed payload when the payload is the body (udfs/storage/deflate.py), so a page's
payload is hashed and compressed once for both.

Both backends also store plain objects by name (`put_object`, `get_object`,
`list_objects`): the fetch audit trail (udfs/core/audit.py) lives beside the bodies.
A put replaces the object whole or not at all.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from udfs.config import Config
from udfs.storage import deflate


def object_key(sha256_hex: str) -> str:
    return f"raw/{sha256_hex[:2]}/{sha256_hex}.gz"


class ObjectStore(Protocol):
    def put_body(self, body: bytes, tier: str = "standard", sha256_hex: str | None = None,
                 compressed: bytes | None = None) -> tuple[str, str, bool]:
        """Store `body`; (sha256 hex, object key, True if newly written). `tier`: "low"
        for a page found to duplicate another's (a colder storage class where the
        backend has classes). `sha256_hex` and `compressed` (a udfs/storage/deflate.py
        piece), when already computed by the WARC writer, must be of exactly `body`:
        the object's key and bytes are taken from them as given."""

    def get_body(self, key: str) -> bytes:
        """The decompressed body stored under `key`."""

    def put_object(self, key: str, data: bytes) -> None:
        """Store `data` under `key` as it is, replacing any object of that name."""

    def get_object(self, key: str) -> bytes:
        """The bytes stored under `key`."""

    def list_objects(self, prefix: str) -> Iterator[str]:
        """The keys that start with `prefix`, in key order."""

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Store the file at `path` under `key`: the object appears whole or not at all."""

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """`length` bytes of the object `key` from `offset` (a WARC record)."""

    def size(self, key: str) -> int:
        """The object's size in bytes."""


# Temporary names of this process's body writes: unique across processes (the pid),
# threads and calls (a counter; next() on it is atomic under the GIL).
_TMP_SERIAL = itertools.count()


class LocalStore:
    def __init__(self, directory: str | os.PathLike[str], gzip_level: int = 6) -> None:
        self.root = Path(directory)
        self.gzip_level = gzip_level  # of the bodies (storage.gzip_level)
        self._root = os.fspath(self.root)

    def put_body(self, body: bytes, tier: str = "standard", sha256_hex: str | None = None,
                 compressed: bytes | None = None) -> tuple[str, str, bool]:
        # (a directory has no storage classes: every tier is stored alike)
        # Plain os calls on strings, a folder made only when an open finds it missing:
        # each page of a crawl comes here (pathlib and tempfile took about 40 of its
        # 100 us of CPU a page).
        sha = sha256_hex or hashlib.sha256(body).hexdigest()
        key = object_key(sha)
        path = os.path.join(self._root, key)
        if os.path.exists(path):
            return sha, key, False
        folder = os.path.dirname(path)
        data = deflate.gzip_of(body, self.gzip_level, compressed)
        # Write to a temporary file and rename: a crash never leaves a half object.
        tmp = os.path.join(folder, f".tmp-{os.getpid()}-{next(_TMP_SERIAL)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileNotFoundError:  # its folder is not there (yet, or any more)
            os.makedirs(folder, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return sha, key, True

    def get_body(self, key: str) -> bytes:
        return gzip.decompress((self.root / key).read_bytes())

    def put_object(self, key: str, data: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())  # an audit object must outlive a machine crash too
        os.replace(tmp, path)

    def get_object(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        dest = self.root / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as out, open(path, "rb") as src:
            shutil.copyfileobj(src, out, 1024 * 1024)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dest)  # one step: the name holds the whole file or nothing

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        with open(self.root / key, "rb") as fh:
            fh.seek(offset)
            return fh.read(length)

    def size(self, key: str) -> int:
        return (self.root / key).stat().st_size

    def list_objects(self, prefix: str) -> Iterator[str]:
        # The deepest folder the prefix names, then a filter on the full key.
        folder = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        if not folder.is_dir():
            return iter(())
        keys = (p.relative_to(self.root).as_posix() for p in folder.rglob("*")
                if p.is_file() and not p.name.startswith(".tmp-"))
        return iter(sorted(k for k in keys if k.startswith(prefix)))


class S3Store:
    def __init__(self, client: Any, bucket: str, low_tier_class: str = "",
                 gzip_level: int = 6) -> None:
        self.client = client
        self.bucket = bucket
        self.low_tier_class = low_tier_class  # "": the bucket's default for every body
        self.gzip_level = gzip_level  # of the bodies (storage.gzip_level)

    def put_body(self, body: bytes, tier: str = "standard", sha256_hex: str | None = None,
                 compressed: bytes | None = None) -> tuple[str, str, bool]:
        from botocore.exceptions import ClientError

        sha = sha256_hex or hashlib.sha256(body).hexdigest()
        key = object_key(sha)
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
            return sha, key, False
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                raise
        colder = {"StorageClass": self.low_tier_class} \
            if tier == "low" and self.low_tier_class else {}
        self.client.put_object(Bucket=self.bucket, Key=key,
                               Body=deflate.gzip_of(body, self.gzip_level, compressed),
                               ContentType="application/gzip",
                               Metadata={"sha256": sha, "bytes": str(len(body))}, **colder)
        return sha, key, True

    def get_body(self, key: str) -> bytes:
        return gzip.decompress(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def put_object(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def get_object(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        # One PUT, or a multipart upload for a large file: S3 shows the object only once
        # the upload is complete.
        self.client.upload_file(str(path), self.bucket, key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key,
                                      Range=f"bytes={offset}-{offset + length - 1}"
                                      )["Body"].read()

    def size(self, key: str) -> int:
        return int(self.client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])

    def list_objects(self, prefix: str) -> Iterator[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                      Prefix=prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                yield obj["Key"]


def open_store(cfg: Config) -> ObjectStore:
    """The store the configuration names (`storage.backend`)."""
    if cfg["storage.backend"] == "s3":
        from udfs.storage.objectstore import s3_client

        return S3Store(s3_client(cfg), cfg["s3.bucket"], cfg["s3.low_tier_storage_class"],
                       gzip_level=cfg["storage.gzip_level"])
    return LocalStore(cfg["storage.local_dir"], cfg["storage.gzip_level"])
