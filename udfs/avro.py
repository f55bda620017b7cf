"""Avro records on Kafka: the schema registry in `schemas/`, the wire format, compatibility.

Wire format: Avro single-object encoding (Avro specification, "Single object
encoding"): the two bytes C3 01, the 8-byte little-endian CRC-64-AVRO
fingerprint of the writer's schema, then the Avro binary body. The fingerprint
lets a reader find the exact writer version among `schemas/*.avsc` and resolve
it to the newest version, so producers and consumers can be upgraded one at a
time. No schema-registry service is needed.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint as _fingerprint
from fastavro.schema import parse_schema, to_parsing_canonical_form
from fastavro.validation import validate

from schemas import SCHEMA_DIR

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8

# Which schema each stream's records use (keys are the config's topic keys).
TOPIC_SCHEMAS: dict[str, str] = {
    "discovered": "discovered",
    "leases": "lease",
    "completions": "completion",
    "index": "index_event",
    "deadletter": "dead_letter",
    "control": "host_command",
    "replies": "host_reply",
    "shards": "shard_transfer",
}
STATE_SCHEMAS = ("url_state", "host_state", "fetch_lease")

_FILE_NAME = re.compile(r"^(?P<name>[a-z_]+)\.v(?P<version>[1-9][0-9]*)\.avsc$")


class AvroDecodeError(ValueError):
    """Bytes that are not a record this registry can read; the message is a dead-letter reason."""


class AvroEncodeError(ValueError):
    """A record that does not fit its schema."""


@dataclass(frozen=True)
class SchemaVersion:
    name: str
    version: int
    path: Path
    schema: dict[str, Any] = field(repr=False)  # as written in the file
    parsed: Any = field(repr=False)  # fastavro's parsed form
    fingerprint: bytes = b""  # 8 bytes, little-endian CRC-64-AVRO
    content_hash: str = ""  # of the whole file's JSON, defaults and docs included

    @property
    def fingerprint_hex(self) -> str:
        return self.fingerprint.hex()


def crc64_avro(schema: Mapping[str, Any] | str) -> bytes:
    """The 8-byte little-endian CRC-64-AVRO fingerprint of a schema's parsing canonical form."""
    canonical = to_parsing_canonical_form(parse_schema(schema, named_schemas={}))
    # fastavro's hex string already lists the CRC's bytes least significant first.
    return bytes.fromhex(_fingerprint(canonical, "CRC-64-AVRO"))


def load_version(path: Path) -> SchemaVersion:
    match = _FILE_NAME.match(path.name)
    if not match:
        raise ValueError(f"{path.name}: schema files are named <name>.v<N>.avsc")
    schema = json.loads(path.read_text(encoding="utf-8"))
    # Each version is parsed in its own name space: v1 and v2 share record names.
    parsed = parse_schema(schema, named_schemas={})
    content = hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:16]
    return SchemaVersion(match["name"], int(match["version"]), path, schema, parsed,
                         crc64_avro(schema), content)


class SchemaRegistry:
    """Every version of every schema in a directory, by name and by fingerprint."""

    def __init__(self, directory: Path = SCHEMA_DIR) -> None:
        self.directory = directory
        self._by_name: dict[str, list[SchemaVersion]] = {}
        self._by_fp: dict[bytes, SchemaVersion] = {}
        for path in sorted(directory.glob("*.avsc")):
            sv = load_version(path)
            self._by_name.setdefault(sv.name, []).append(sv)
            other = self._by_fp.get(sv.fingerprint)
            if other is not None and other.name != sv.name:
                raise ValueError(f"{path.name} has the same canonical form as {other.path.name}")
            # Versions that differ only in defaults or docs share a fingerprint and a
            # binary layout; any of them decodes the data, the newest is kept.
            if other is None or other.version < sv.version:
                self._by_fp[sv.fingerprint] = sv
        for name, versions in self._by_name.items():
            versions.sort(key=lambda v: v.version)
            numbers = [v.version for v in versions]
            if numbers != list(range(1, len(numbers) + 1)):
                raise ValueError(
                    f"schema {name}: versions must be 1..N without gaps, got {numbers}")

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def versions(self, name: str) -> list[SchemaVersion]:
        try:
            return list(self._by_name[name])
        except KeyError:
            raise KeyError(f"no schema named {name!r} in {self.directory}") from None

    def _version(self, name: str, version: int) -> SchemaVersion:
        for sv in self.versions(name):
            if sv.version == version:
                return sv
        raise KeyError(f"no version {version} of schema {name!r}")

    def latest(self, name: str) -> SchemaVersion:
        return self.versions(name)[-1]

    def by_fingerprint(self, fp: bytes) -> SchemaVersion | None:
        return self._by_fp.get(fp)

    def encode(self, name: str, record: Mapping[str, Any], *, check: bool = True,
               version: int | None = None) -> bytes:
        """Single-object encoding of `record` with the newest version of schema `name` (or
        with `version`: what a producer of an older build writes)."""
        sv = self.latest(name) if version is None else self._version(name, version)
        if check:
            try:
                validate(record, sv.parsed, raise_errors=True)
            except Exception as exc:  # fastavro raises ValidationError or ValueError
                raise AvroEncodeError(f"{name} v{sv.version}: {exc}") from None
        buf = io.BytesIO()
        buf.write(MAGIC)
        buf.write(sv.fingerprint)
        try:
            fastavro.schemaless_writer(buf, sv.parsed, record)
        except Exception as exc:
            raise AvroEncodeError(f"{name} v{sv.version}: {exc}") from None
        return buf.getvalue()

    def decode(self, name: str, data: bytes) -> dict[str, Any]:
        """Read single-object-encoded bytes written with any version of `name`, as the newest."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise AvroDecodeError(f"expected bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) < HEADER_LEN or data[:2] != MAGIC:
            raise AvroDecodeError("not Avro single-object encoding (missing C3 01 marker)")
        writer = self.by_fingerprint(data[2:HEADER_LEN])
        if writer is None:
            raise AvroDecodeError(
                f"unknown writer schema fingerprint {data[2:HEADER_LEN].hex()}")
        reader = self.latest(name)
        if writer.name != name:
            raise AvroDecodeError(
                f"record was written as {writer.name} v{writer.version}, expected {name}")
        buf = io.BytesIO(data[HEADER_LEN:])
        try:
            record = fastavro.schemaless_reader(buf, writer.parsed, reader.parsed)
        except Exception as exc:  # truncated or corrupt bodies raise many kinds
            raise AvroDecodeError(
                f"corrupt {name} v{writer.version} body: {type(exc).__name__}: {exc}") from None
        if buf.tell() != len(data) - HEADER_LEN:
            raise AvroDecodeError(
                f"{len(data) - HEADER_LEN - buf.tell()} trailing bytes after a {name} record")
        return record


@lru_cache(maxsize=1)
def registry() -> SchemaRegistry:
    """The registry of the schemas shipped with this code."""
    return SchemaRegistry()


# ---------------------------------------------------------------------------
# Compatibility: can a reader with schema R read data written with schema W?
# The rules are the Avro specification's "Schema Resolution" section.

_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _expand(schema: Any) -> Any:
    """Inline named-type references so that each node is self-contained."""
    return fastavro.schema.expand_schema(schema)


def _kind(s: Any) -> str:
    if isinstance(s, list):
        return "union"
    if isinstance(s, str):
        return s
    return s["type"] if isinstance(s["type"], str) else _kind(s["type"])


def _unwrap(s: Any) -> Any:
    """{"type": "long", "logicalType": ...} → "long"; named types stay dicts."""
    if isinstance(s, dict) and s.get("type") in _PRIMITIVES:
        return s["type"]
    return s


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _names_match(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    names = {_short(reader["name"])} | {_short(a) for a in reader.get("aliases", [])}
    return _short(writer["name"]) in names


def _problems(reader: Any, writer: Any, path: str) -> list[str]:
    reader, writer = _unwrap(reader), _unwrap(writer)
    rk, wk = _kind(reader), _kind(writer)
    if wk == "union":
        out: list[str] = []
        for branch in writer:
            out += _problems(reader, branch, f"{path}<{_kind(_unwrap(branch))}>")
        return out
    if rk == "union":
        for branch in reader:
            if not _problems(branch, writer, path):
                return []
        return [f"{path}: written as {wk}, which no branch of the reader's union accepts"]
    if rk != wk:
        if wk in _PROMOTIONS and rk in _PROMOTIONS[wk]:
            return []
        return [f"{path}: written as {wk}, read as {rk}"]
    if rk in _PRIMITIVES:
        return []
    if rk in ("record", "error"):
        if not _names_match(reader, writer):
            return [f"{path}: record name {writer['name']} is not {reader['name']} or an alias"]
        wfields = {f["name"]: f for f in writer["fields"]}
        out = []
        for rf in reader["fields"]:
            candidates = [rf["name"], *rf.get("aliases", [])]
            wf = next((wfields[n] for n in candidates if n in wfields), None)
            if wf is None:
                if "default" not in rf:
                    out.append(f"{path}.{rf['name']}: new field without a default")
                continue
            out += _problems(rf["type"], wf["type"], f"{path}.{rf['name']}")
        return out
    if rk == "enum":
        if not _names_match(reader, writer):
            return [f"{path}: enum name {writer['name']} is not {reader['name']} or an alias"]
        missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
        if missing and "default" not in reader:
            return [f"{path}: enum symbols {missing} removed and the reader's enum has no default"]
        return []
    if rk == "array":
        return _problems(reader["items"], writer["items"], f"{path}[]")
    if rk == "map":
        return _problems(reader["values"], writer["values"], f"{path}{{}}")
    if rk == "fixed":
        if not _names_match(reader, writer) or reader["size"] != writer["size"]:
            return [f"{path}: fixed {writer['name']}({writer['size']}) is not "
                    f"{reader['name']}({reader['size']})"]
        return []
    return [f"{path}: unsupported schema kind {rk}"]  # pragma: no cover


def compatibility_problems(reader: Mapping[str, Any], writer: Mapping[str, Any]) -> list[str]:
    """Why data written with `writer` cannot be read with `reader` (empty list: it can)."""
    r = _expand(parse_schema(reader, named_schemas={}))
    w = _expand(parse_schema(writer, named_schemas={}))
    return _problems(r, w, _short(r.get("name", "")) if isinstance(r, dict) else "")


def check_registry(reg: SchemaRegistry) -> list[str]:
    """Every newest version must read data of every earlier version of its name."""
    out: list[str] = []
    for name in reg.names():
        versions = reg.versions(name)
        newest = versions[-1]
        for old in versions[:-1]:
            for p in compatibility_problems(newest.schema, old.schema):
                out.append(f"{name} v{newest.version} cannot read v{old.version}: {p}")
    return out


def load_examples(sv: SchemaVersion) -> list[dict[str, Any]]:
    """Example records of one version from schemas/examples/<name>.v<N>.json.

    JSON has no bytes, so {"__bytes__": "text"} stands for the UTF-8 bytes of text.
    """
    path = sv.path.parent / "examples" / f"{sv.name}.v{sv.version}.json"

    def hook(obj: dict[str, Any]) -> Any:
        if set(obj) == {"__bytes__"}:
            return obj["__bytes__"].encode("utf-8")
        return obj

    return json.loads(path.read_text(encoding="utf-8"), object_hook=hook)


def read_lock(reg: SchemaRegistry) -> dict[tuple[str, int], str]:
    """(name, version) → content hash, from the directory's fingerprints.lock."""
    out: dict[tuple[str, int], str] = {}
    for line in (reg.directory / "fingerprints.lock").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version, fp = line.split()
            out[(name, int(version.removeprefix("v")))] = fp
    return out


def check_lock(reg: SchemaRegistry) -> list[str]:
    """A published version's file must be unchanged and every version must be published."""
    lock = read_lock(reg)
    out: list[str] = []
    present: set[tuple[str, int]] = set()
    for name in reg.names():
        for sv in reg.versions(name):
            present.add((name, sv.version))
            locked = lock.get((name, sv.version))
            if locked is None:
                out.append(f"{sv.path.name} is not in fingerprints.lock: add "
                           f"'{name} v{sv.version} {sv.content_hash}' once it is final")
            elif locked != sv.content_hash:
                out.append(f"{sv.path.name} changed after it was published (lock {locked}, "
                           f"now {sv.content_hash}): add a new version instead")
    for name, version in sorted(set(lock) - present):
        out.append(f"{name}.v{version}.avsc is in fingerprints.lock but missing")
    return out
