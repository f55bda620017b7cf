"""The fetcher's WARC writer: records appended to a local temporary file, published to
object storage whole, under its final name, in one step (udfs/storage/warc.py has the records).

One writer per fetcher subtask. Every call runs on the writer's own thread (`submit`):
the fetch engine's loop hands a fetch over and awaits it without blocking on gzip or
disk; the calls are serialized, so records are never interleaved.

A file is closed and published when it reaches `warc.max_file_bytes` or
`warc.max_file_age_s` (checked at each record and at each tick of the job; the put
then runs on a second thread while the next file fills, one put at a time), and when
the task closes. Publishing: the temporary file is flushed and fsync'd, then put under
its final name with `ObjectStore.put_file` (a local rename, or one S3 upload, which
S3 shows only once complete), then its CDXJ index beside it. So:

* **No half file that looks complete.** A published name only ever holds a whole file:
  until the put ends, there is no object of that name; a crash during writing leaves
  only the temporary file (`.tmp-*` in `warc.temp_dir`, never under the storage prefix;
  not cleaned up by anyone yet). An index is put after its file, so an index never
  points into a file that is not there.
* **No record published twice.** Record ids follow from the fetch (lease id, URL
  version, attempt). A record is written when its fetch ends, once, into the current
  file, which is published once (a name is never reused: it holds the open time, the
  writer's serial and a token of this task incarnation). After a crash, the records of
  the unpublished file are gone with it; the incarnation after does not fetch them
  again, because the fetcher never sends a lease issued before it started
  (udfs/core/backqueue.py); the frontier re-lets such a URL as a new lease (a new
  lease id: a new fetch and new records, not a copy). A replay thus never reproduces
  a record already published.
* **What a crash costs.** Each fetch's records are flushed to the temporary file (the
  OS's page cache) before its completion leaves. A writer whose process dies (kill -9,
  a TaskManager lost and restarted) leaves its temporary file, locked no more (a
  writer holds an flock on its open file while it lives) and tagged with its crawl
  (store and prefix, in `.tmp-<name>.owner`). The next writer of the same crawl that
  starts on the same machine (`recover`, on its thread, at the task's open) cuts the
  file after its last whole record, indexes it again from its records and publishes
  it under the name it was being written as: once, since no published file has a
  temporary file left, and the lock keeps two recoverers (or a recoverer and a live
  writer) apart. What is still lost: the temporary files of a machine (or a container
  disk) that is gone, or where no fetcher of the crawl starts again — their fetches'
  completions may have reached the frontier (the sink is at-least-once), so those
  fetches are in the audit trail and their bodies in content-addressed storage, but
  have no WARC record. Closing that needs the temporary file on storage that outlives
  the machine, or completions held until their file is published (each would wait up
  to max_file_age_s); neither is built.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import io
import os
import socket
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from udfs.storage.warc import (
    SOFTWARE,
    Dedup,
    Fetch,
    IndexEntry,
    Location,
    RollPolicy,
    build_records,
    cdxj,
    file_name,
    index_name,
    read_record,
    sha256_b32,
    warc_date,
    warcinfo_record,
)


def store_identity(cfg: Any) -> str:
    """Which crawl's WARC files a writer writes: its store and prefix (a dead writer's
    temporary file is recovered only by a writer, or `crawl warc recover`, of the same)."""
    store = f"s3:{cfg['s3.endpoint_url']}/{cfg['s3.bucket']}" \
        if cfg["storage.backend"] == "s3" else \
        f"local:{os.path.abspath(cfg['storage.local_dir'])}"
    return f"{store}|{cfg['warc.prefix']}"


def recovering_writer(cfg: Any, store: Any) -> WarcWriter:
    """A writer of the configured crawl that only recovers (`crawl warc recover`)."""
    return WarcWriter(store, prefix=cfg["warc.prefix"], file_prefix=cfg["warc.file_prefix"],
                      policy=RollPolicy(cfg["warc.max_file_bytes"], cfg["warc.max_file_age_s"]),
                      temp_dir=cfg["warc.temp_dir"], store_id=store_identity(cfg))


def _owner_path(path: Path) -> Path:
    return path.with_name(path.name + ".owner")


def gzip_members(fh: io.BufferedIOBase, chunk: int = 1 << 20):
    """(offset, bytes) of each whole gzip member of a file, from its start; stops at the
    first member that is cut short or unreadable."""
    offset, pending = 0, b""
    while True:
        d, member, data = zlib.decompressobj(31), bytearray(), pending
        while True:
            if not data:
                data = fh.read(chunk)
                if not data:
                    return  # the end: of the file, or of a member cut short
            try:
                d.decompress(data)
            except zlib.error:
                return
            if d.eof:
                used = len(data) - len(d.unused_data)
                member += data[:used]
                pending = d.unused_data
                break
            member += data
            data = b""
        yield offset, bytes(member)
        offset += len(member)


def index_members(fh: io.BufferedIOBase, filename: str) -> tuple[list[IndexEntry], int]:
    """The index entries of the whole records at the start of a file, and where they
    end (the length to cut the file to)."""
    fh.seek(0)
    entries, end = [], 0
    for offset, member in gzip_members(fh):
        try:
            rec, _payload = read_record(member)
        except Exception:  # noqa: BLE001 - a member that is no record ends the file
            break
        end = offset + len(member)
        h = rec.rec_headers
        kind = h.get_header("WARC-Type")
        if kind not in ("response", "revisit"):
            continue
        http = rec.http_headers
        mime = "warc/revisit" if kind == "revisit" else \
            ((http.get_header("Content-Type") or "") if http else "").split(";")[0].strip() \
            .lower()
        status = int(http.get_statuscode()) if http and http.get_statuscode() else None
        entries.append(IndexEntry(h.get_header("WARC-Target-URI"), _date_ms(
            h.get_header("WARC-Date")), mime, status, h.get_header("WARC-Payload-Digest"),
            len(member), offset, filename, kind))
    return entries, end


def _date_ms(text: str) -> int:
    import datetime as dt

    t = dt.datetime.strptime(text.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f" if "." in text
                             else "%Y-%m-%dT%H:%M:%S")
    return int(t.replace(tzinfo=dt.UTC).timestamp() * 1000)


class WarcStats:
    """Totals for the fetcher's metrics (read as gauges)."""

    def __init__(self) -> None:
        self.records = 0
        self.revisits = 0
        self.files_published = 0
        self.bytes_published = 0
        self.write_us = 0  # time spent building and writing records, microseconds


class WarcWriter:
    def __init__(self, store: Any, *, prefix: str, file_prefix: str, policy: RollPolicy,
                 temp_dir: str = "", host: str | None = None, dedup_entries: int = 100_000,
                 clock: Callable[[], float] = time.time, operator: str = "",
                 store_id: str = "", gzip_level: int = 6) -> None:
        self.store = store
        self.gzip_level = gzip_level  # of each record's gzip member (storage.gzip_level)
        self.prefix = prefix
        self.file_prefix = file_prefix
        self.policy = policy
        self.temp_dir = Path(temp_dir or os.path.join(tempfile.gettempdir(), "crawl-warc"))
        self.host = host or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.clock = clock
        self.operator = operator
        # Which crawl's files these are (store and prefix): a dead writer's temporary
        # file is recovered only by a writer of the same crawl (`recover`). "": never.
        self.store_id = store_id
        self.dedup = Dedup(dedup_entries)
        self.stats = WarcStats()
        self.serial = 0
        self._fh: io.BufferedWriter | None = None  # the open file, if any
        self._path: Path | None = None
        self._name = ""
        self._opened_s = 0.0
        self._size = 0
        self._entries: list[IndexEntry] = []
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="warc")
        # A rolled file is put on its own thread, so that an upload (a 1 GB file to S3
        # takes a while) does not hold up the records of the fetches that follow; at most
        # one at a time (the next roll waits for it: temporary files never pile up).
        self._uploads = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="warc-put")
        self._upload: concurrent.futures.Future | None = None

    # -- on the writer's thread ------------------------------------------------------------

    def _open(self) -> None:
        now = self.clock()
        self._name = file_name(self.file_prefix, int(now * 1000), self.serial, self.host)
        self.serial += 1
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        self._path = path = self.temp_dir / f".tmp-{self._name}"
        if self.store_id:
            _owner_path(path).write_text(self.store_id)
        # Made and locked under a name `recover` does not look at, then renamed: a
        # `.tmp-` file is never seen unlocked while its writer lives (another task's
        # recovery, in the same temp_dir, would otherwise take a file just opened for
        # a dead writer's and delete it under its writer).
        staging = path.with_name(f".new-{self._name}")
        self._fh = fh = open(staging, "wb")  # noqa: SIM115 - closed on publish
        # Held while this writer lives: the kernel drops it when the process dies, which
        # is how `recover` tells a dead writer's file from a live one's.
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(staging, path)
        self._opened_s, self._size, self._entries = now, 0, []
        info = warcinfo_record(self._name, int(now * 1000), {
            "software": SOFTWARE, "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/"
                          "warc-format/warc-1.1/",
            "hostname": self.host, "operator": self.operator}, self.gzip_level)
        self._append(info)

    def _append(self, rec) -> int:
        offset = self._size
        self._file().write(rec.data)
        self._size += len(rec.data)
        return offset

    def write(self, fetch: Fetch) -> Location:
        """Write one fetch's records (opening a file if none is open); roll if due.
        Returns where its response (or revisit) record is: the key its file is (or will
        be) published under, the record's offset and length there. The location stays
        true when the file is recovered after a crash (`recover` publishes the file
        under the same key, cut only after its last whole record, and this record is
        whole in the file once this returns)."""
        started = time.perf_counter()
        ex = fetch.exchange
        digest_ref = None
        cacheable = ex.status == 200 and not ex.truncated and ex.payload
        fetch.payload_sha256 = hashlib.sha256(ex.payload).hexdigest()  # (once, for all)
        digest = sha256_b32(hex_digest=fetch.payload_sha256) if cacheable else None
        if digest is not None:
            digest_ref = self.dedup.get(digest)
        records = build_records(fetch, digest_ref, self.gzip_level, fetch.payload_sha256)
        if self._fh is None:
            self._open()
        where = None
        for rec in records:
            offset = self._append(rec)
            if where is None:  # the first: the response or revisit
                where = Location(f"{self.prefix}{self._name}", offset, len(rec.data))
            if rec.rec_type in ("response", "revisit"):
                self._entries.append(IndexEntry(rec.url, rec.date_ms, rec.mime, rec.status,
                                                rec.digest, len(rec.data), offset,
                                                self._name, rec.rec_type))
        main = records[0]
        fetch.payload_piece = main.payload_piece
        if main.rec_type == "revisit":
            self.stats.revisits += 1
        elif digest is not None:
            self.dedup.add(digest, (main.record_id, fetch.url, warc_date(fetch.fetched_at_ms)))
        # Out of our buffer before the completion leaves: a task killed after this point
        # leaves the records in the temporary file, for `recover`.
        self._file().flush()
        self.stats.records += len(records)
        self.stats.write_us += int((time.perf_counter() - started) * 1_000_000)
        self.roll_if_due()
        if where is None:
            raise ValueError(f"no WARC records were built for {fetch.url}")
        return where

    def _file(self) -> io.BufferedWriter:
        if self._fh is None:
            raise RuntimeError("no WARC file is open")
        return self._fh

    def roll_if_due(self) -> str | None:
        """Close the open file if it is due and have it put in the background; its key.
        A failed earlier put is raised here (the task fails)."""
        self._wait_upload(done_only=True)
        if self._fh is not None and self.policy.due(self._size, self._opened_s, self.clock()):
            self._wait_upload()
            closed = self._close_file()
            self._upload = self._uploads.submit(self._put, *closed)
            return closed[1]
        return None

    def _wait_upload(self, done_only: bool = False) -> None:
        up = self._upload
        if up is not None and (up.done() or not done_only):
            self._upload = None
            up.result()  # raises the put's error

    def _close_file(self) -> tuple[Path, str, list[IndexEntry], int, Any]:
        """The open file, flushed and fsync'd, still open (and locked) until put."""
        fh, path = self._file(), self._path
        if path is None:
            raise RuntimeError("the open WARC file has no path")
        self._fh = None
        fh.flush()
        os.fsync(fh.fileno())
        return path, f"{self.prefix}{self._name}", self._entries, self._size, fh

    def _put(self, path: Path, key: str, entries: list[IndexEntry], size: int,
             fh: Any = None) -> None:
        """Put the file, then its index; the temporary file goes once both are in the
        store (its lock, held until then, keeps `recover` of another writer off it)."""
        try:
            self.store.put_file(key, path)  # raises: the task fails; nothing is published
            self.store.put_object(index_name(key), cdxj(entries))
            self.stats.files_published += 1
            self.stats.bytes_published += size
            path.unlink(missing_ok=True)
            _owner_path(path).unlink(missing_ok=True)
        finally:
            if fh is not None:
                fh.close()

    def start_recovery(self) -> None:
        """`recover` on the put thread, so that records are written meanwhile (call it
        before the first write; its failure is raised like a failed put's)."""
        self._upload = self._uploads.submit(self.recover)

    def recover(self) -> list[str]:
        """Publish the temporary files that writers of this crawl left when their process
        died (kill -9, a lost TaskManager restarted on this machine): each cut after its
        last whole record, indexed again from its records, put under the name it was
        being written as. A file whose writer lives (it holds its lock) or that belongs
        to another crawl is left alone. Those records were never published (a published
        file's temporary file is gone before its writer moves on), so this publishes
        each once. The keys published."""
        if not self.store_id or not self.temp_dir.is_dir():
            return []
        keys = []
        for path in sorted(self.temp_dir.glob(".tmp-*.warc.gz")):
            owner = _owner_path(path)
            try:
                if owner.read_text() != self.store_id:
                    continue
                fh = open(path, "r+b")  # noqa: SIM115
            except OSError:
                continue  # published (or taken) meanwhile, or no owner file
            with fh:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # its writer is alive, or another writer is recovering it
                name = path.name[len(".tmp-"):]
                entries, end = index_members(fh, name)
                fh.truncate(end)
                fh.flush()
                os.fsync(fh.fileno())
                if not entries:  # nothing but its warcinfo (or not even that)
                    path.unlink(missing_ok=True)
                    owner.unlink(missing_ok=True)
                    continue
                key = f"{self.prefix}{name}"
                self._put(path, key, entries, end)
                keys.append(key)
        return keys

    def publish(self) -> str | None:
        """Close the open file and put it (then its index) under its final name, now,
        after any put under way; the key of the file, None if no file was open."""
        self._wait_upload()
        if self._fh is None:
            return None
        closed = self._close_file()
        self._put(*closed)
        return closed[1]

    # -- from any thread ---------------------------------------------------------------------

    def submit(self, fn: Callable, *args) -> concurrent.futures.Future:
        """Run `fn(*args)` on the writer's thread (e.g. `writer.submit(writer.write, f)`)."""
        return self._pool.submit(fn, *args)

    def close(self) -> None:
        """Publish the open file after every write already handed over."""
        try:
            self._pool.submit(self.publish).result()
        finally:
            self._pool.shutdown(wait=True)
            self._uploads.shutdown(wait=True)
