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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import fastavro
from fastavro.schema import fingerprint as _fingerprint
from fastavro.schema import parse_schema, to_parsing_canonical_form
from fastavro.validation import validate

from schemas import SCHEMA_DIR
from udfs.wire.avrocodec import Reader, Unsupported, Writer, compile_reader, compile_writer

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
    plain = schema if isinstance(schema, str) else dict(schema)
    canonical = to_parsing_canonical_form(parse_schema(plain, named_schemas={}))
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
        # Compiled bodies (udfs/wire/avrocodec.py) by fingerprint, made on first use;
        # None: not compilable, fastavro's writer or reader is used.
        self._writers: dict[bytes, Writer | None] = {}
        self._readers: dict[bytes, Reader | None] = {}
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
        self._latest: dict[str, SchemaVersion] = {}
        for name, versions in self._by_name.items():
            versions.sort(key=lambda v: v.version)
            self._latest[name] = versions[-1]
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
        try:
            return self._latest[name]
        except KeyError:
            raise KeyError(f"no schema named {name!r} in {self.directory}") from None

    def by_fingerprint(self, fp: bytes) -> SchemaVersion | None:
        return self._by_fp.get(fp)

    def writer_name(self, data: bytes) -> str | None:
        """The name of the schema `data` was written with, read from its header alone
        (None if it is not single-object encoding of a known schema)."""
        if len(data) < HEADER_LEN or data[:2] != MAGIC:
            return None
        writer = self._by_fp.get(bytes(data[2:HEADER_LEN]))
        return None if writer is None else writer.name

    def encode(self, name: str, record: Mapping[str, Any], *, check: bool = True,
               version: int | None = None) -> bytes:
        """Single-object encoding of `record` with the newest version of schema `name` (or
        with `version`: what a producer of an older build writes)."""
        sv = self.latest(name) if version is None else self._version(name, version)
        # The yes/no check first: with raise_errors=True fastavro renders the schema of
        # every union branch it tries as JSON for its message, valid record or not
        # (about 450 us for a completion against 25 us); the message only when invalid.
        if check:
            try:
                valid = validate(record, sv.parsed, raise_errors=False)
                if not valid:
                    validate(record, sv.parsed, raise_errors=True)
            except Exception as exc:  # fastavro raises ValidationError or ValueError
                raise AvroEncodeError(f"{name} v{sv.version}: {exc}") from None
            if not valid:
                raise AvroEncodeError(f"{name} v{sv.version}: does not match the schema")
        write = self._writer(sv)
        if write is None:
            buf = io.BytesIO()
            buf.write(MAGIC)
            buf.write(sv.fingerprint)
            try:
                fastavro.schemaless_writer(buf, sv.parsed, record)
            except Exception as exc:
                raise AvroEncodeError(f"{name} v{sv.version}: {exc}") from None
            return buf.getvalue()
        out = bytearray(MAGIC)
        out += sv.fingerprint
        try:
            write(out, record)
        except Exception as exc:  # KeyError, TypeError, ValueError... of a bad record
            raise AvroEncodeError(f"{name} v{sv.version}: {type(exc).__name__}: {exc}"
                                  ) from None
        return bytes(out)

    def _writer(self, sv: SchemaVersion) -> Writer | None:
        if sv.fingerprint not in self._writers:
            self._writers[sv.fingerprint] = _compiled(compile_writer, sv)
        return self._writers[sv.fingerprint]

    def _reader(self, sv: SchemaVersion) -> Reader | None:
        if sv.fingerprint not in self._readers:
            self._readers[sv.fingerprint] = _compiled(compile_reader, sv)
        return self._readers[sv.fingerprint]

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
        read = self._reader(writer) if writer is reader else None
        if read is not None:  # written with the newest version: no resolution needed
            try:
                fast, end = read(data, HEADER_LEN)
            except Exception as exc:
                raise AvroDecodeError(f"corrupt {name} v{writer.version} body: "
                                      f"{type(exc).__name__}: {exc}") from None
            if end != len(data):
                raise AvroDecodeError(f"{len(data) - end} trailing bytes after a {name} record")
            return fast
        buf = io.BytesIO(data[HEADER_LEN:])
        try:
            record = fastavro.schemaless_reader(buf, writer.parsed, reader.parsed)
        except Exception as exc:  # truncated or corrupt bodies raise many kinds
            raise AvroDecodeError(
                f"corrupt {name} v{writer.version} body: {type(exc).__name__}: {exc}") from None
        if not isinstance(record, dict):  # every schema here is a record
            raise AvroDecodeError(f"a {name} body that is not a record")
        if buf.tell() != len(data) - HEADER_LEN:
            raise AvroDecodeError(
                f"{len(data) - HEADER_LEN - buf.tell()} trailing bytes after a {name} record")
        return record


C = TypeVar("C")


def _compiled(make: Callable[[Any], C], sv: SchemaVersion) -> C | None:
    """A schema's compiled writer or reader; None where avrocodec does not compile it."""
    try:
        return make(sv.parsed)
    except Unsupported:
        return None


@lru_cache(maxsize=1)
def registry() -> SchemaRegistry:
    """The registry of the schemas shipped with this code."""
    return SchemaRegistry()


# ---------------------------------------------------------------------------
# Compatibility: can a reader with schema R read data written with schema W?
# The rules are the Avro specification's "Schema Resolution" section, as the
# `avro` package's checker (avro.compatibility, a port of Java's SchemaCompatibility)
# applies them. Two things are added around it here:
# - a named type's aliases may be short names, relative to the type's namespace
#   (specification, "Aliases"); the checker compares them with the writer's full name
#   as they are written, so they are qualified first;
# - the checker loses the place of a problem inside a writer's union (it starts the
#   path again at the root), so the path of the enclosing check is carried on.

_KINDS = {
    "reader_field_missing_default_value": "new field without a default",
    "missing_enum_symbols": "enum symbols removed and the reader's enum has no default",
    "type_mismatch": "type mismatch",
    "missing_union_branch": "no branch of the reader's union accepts the written type",
    "name_mismatch": "name is not the writer's name nor one of the reader's aliases",
    "fixed_size_mismatch": "fixed size differs",
}


def _avro_schema(schema: Mapping[str, Any], qualify_aliases: bool) -> Any:
    """The `avro` package's parsed form of a schema (whose aliases, if asked, are full names)."""
    import avro.schema  # here, not at the top: this module is named avro too

    parsed = avro.schema.parse(json.dumps(schema))
    if qualify_aliases:
        seen: set[int] = set()

        def walk(s: Any) -> None:
            if id(s) in seen:
                return
            seen.add(id(s))
            if isinstance(s, avro.schema.NamedSchema):
                aliases = s.props.get("aliases")
                if isinstance(aliases, list) and s.namespace:
                    s.set_prop("aliases", [a if "." in a else f"{s.namespace}.{a}"
                                           for a in aliases])
            if isinstance(s, avro.schema.RecordSchema):
                for f in s.fields:
                    walk(f.type)
            elif isinstance(s, avro.schema.ArraySchema):
                walk(s.items)
            elif isinstance(s, avro.schema.MapSchema):
                walk(s.values)
            elif isinstance(s, avro.schema.UnionSchema):
                for b in s.schemas:
                    walk(b)

        walk(parsed)
    return parsed


def _readable_path(reader: Any, location: str) -> str:
    """/fields/1/type/items → R.n[] (the reader's field names; the pointer where unsure)."""
    import avro.schema

    out = getattr(reader, "name", "") or ""
    node = reader
    tokens = [t for t in location.split("/") if t]
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t == "fields" and i + 1 < len(tokens) and isinstance(node, avro.schema.RecordSchema):
            field = node.fields[int(tokens[i + 1])]
            out += f".{field.name}"
            node = field.type
            i += 2
            if i < len(tokens) and tokens[i] == "type":
                i += 1
            continue
        if t == "items" and isinstance(node, avro.schema.ArraySchema):
            out, node = out + "[]", node.items
        elif t == "values" and isinstance(node, avro.schema.MapSchema):
            out, node = out + "{}", node.values
        elif t.isdigit():
            out += f"<writer's union branch {t}>"
        else:  # name, symbols, size: a property of the node reached
            out += f" ({t})"
        i += 1
    return out


def compatibility_problems(reader: Mapping[str, Any], writer: Mapping[str, Any]) -> list[str]:
    """Why data written with `writer` cannot be read with `reader` (empty list: it can)."""
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

    class Checker(ReaderWriterCompatibilityChecker):
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.here: list[str] = []

        def calculate_compatibility(self, reader: Any, writer: Any, location: list[str]
                                    ) -> Any:
            outer, self.here = self.here, location
            try:
                return super().calculate_compatibility(reader, writer, location)
            finally:
                self.here = outer

        def get_compatibility(self, reader: Any, writer: Any, reference_token: str = "/",
                              location: list[str] | None = None) -> Any:
            if location is None and len(self.here) > 1:  # a writer's union branch
                return super().get_compatibility(reader, writer, self.here[-1], self.here[:-1])
            return super().get_compatibility(reader, writer, reference_token, location)

    r = _avro_schema(reader, qualify_aliases=True)
    w = _avro_schema(writer, qualify_aliases=False)
    result = Checker().get_compatibility(r, w)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    # The result keeps the messages and the places as two sets (the root, "/", among the
    # places as soon as a check passed somewhere): paired only when there is one problem.
    places = sorted(result.locations - {"/"}) or ["/"]
    kinds = sorted({k.value for k in result.incompatibilities})
    if len(result.messages) == 1 and len(places) == 1 and len(kinds) == 1:
        (message,) = result.messages
        return [f"{_readable_path(r, places[0])}: {_KINDS.get(kinds[0], kinds[0])}: {message}"]
    where = ", ".join(_readable_path(r, p) for p in places)
    return [f"{', '.join(_KINDS.get(k, k) for k in kinds)}: {m} (at one of: {where})"
            for m in sorted(result.messages)]


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

    examples: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"),
                                                 object_hook=hook)
    return examples


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
