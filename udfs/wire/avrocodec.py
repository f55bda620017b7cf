"""Avro binary bodies by code made for one schema: the same bytes as fastavro, faster.

fastavro's schemaless writer and reader walk the parsed schema for every datum: a
DiscoveredLink (a string and three nullable fields) costs ~5 us to write and ~4 us to
read, a page's links record ~100 us, and every page crosses four such records (lease,
completion, links, index event) in both jobs. Here a schema is turned once into the
source of two plain Python functions that do only that schema's steps (no lookups of
the schema, unions of null and one type resolved by `is None`), and compiled.

Only a record written with the very schema it is read with is read here (the registry
checks the fingerprints); a record of an older version goes through fastavro's schema
resolution. Unions other than null-and-one-type and recursive types are not compiled
(`Unsupported`): the registry then keeps fastavro for that schema.

The bytes written are fastavro's (Avro specification, "Binary encoding": zig-zag
varints, length-prefixed strings and bytes, an array or map as one block of items then
0, a union as its branch's index then the value), checked byte for byte against it by
tests/unit/test_avro_codec.py on generated records of every schema in `schemas/`.
Reading also takes what other writers may produce: blocks with a negative count and
a byte size, several blocks per array or map.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

Writer = Callable[[bytearray, Mapping[str, Any]], None]
Reader = Callable[[bytes, int], tuple[dict[str, Any], int]]

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


class Unsupported(ValueError):
    """A schema this module does not compile (fastavro is used for it)."""


class CorruptBody(ValueError):
    """Bytes that are not a body of the schema."""


def _write_varint(out: bytearray, n: int, lo: int, hi: int) -> None:
    """A zig-zag varint of `n` (an int between lo and hi) appended to `out`."""
    if not lo <= n <= hi:
        raise ValueError(f"{n} is out of range of an Avro {'int' if hi == _INT_MAX else 'long'}")
    z = (n << 1) ^ (n >> 63)
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag varint at `pos`: its value and the position after it."""
    shift = 0
    z = 0
    while True:
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptBody("a varint longer than 10 bytes")


def _union_index(data: bytes, pos: int, branches: int) -> tuple[int, int]:
    """A union's branch index not written as one byte 0 or 2: twice its value (as the
    one byte would be) and the position after it."""
    i, pos = _read_varint(data, pos)
    if not 0 <= i < branches:
        raise CorruptBody(f"union branch {i} of {branches}")
    return 2 * i, pos


_PACK_F = struct.Struct("<f")
_PACK_D = struct.Struct("<d")


class _Source:
    """The lines of a generated function and its constants."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self._n = 0

    def var(self, stem: str) -> str:
        self._n += 1
        return f"{stem}{self._n}"

    def const(self, stem: str, value: Any) -> str:
        name = self.var("_" + stem)
        self.consts[name] = value
        return name

    def add(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)


def _kind(schema: Any) -> str:
    """A parsed schema's type: a primitive's name, "union", or a complex type's "type"."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return str(schema.get("type"))


def _name_of(schema: Any) -> str | None:
    return schema.get("name") if isinstance(schema, dict) else None


class _Compiler:
    def __init__(self, schema: Any) -> None:
        self.named: dict[str, Any] = {}
        self.active: set[str] = set()
        self.schema = schema

    def resolve(self, schema: Any) -> Any:
        """A named type's definition for a reference to it by name."""
        if isinstance(schema, str) and schema in self.named:
            if schema in self.active:
                raise Unsupported(f"recursive type {schema}")
            return self.named[schema]
        if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed"):
            name = schema["name"]
            if name in self.active:
                raise Unsupported(f"recursive type {name}")
            self.named[name] = schema
        return schema

    @staticmethod
    def nullable(branches: list[Any]) -> tuple[int, Any]:
        """(index of null, the other branch) of a union of null and one type."""
        if len(branches) == 2 and "null" in branches:
            i = branches.index("null")
            return i, branches[1 - i]
        raise Unsupported(f"union {branches!r} (only unions of null and one type)")

    # -- writing -----------------------------------------------------------------------
    def write(self, src: _Source, schema: Any, value: str, depth: int) -> None:
        """Lines appending `value` (an expression read once) in `schema` to `out`."""
        schema = self.resolve(schema)
        kind = _kind(schema)
        if kind == "union":
            if len(schema) == 1:
                src.add(depth, "out.append(0)")
                self.write(src, schema[0], value, depth)
                return
            null_at, other = self.nullable(schema)
            v = src.var("u")
            src.add(depth, f"{v} = {value}")
            src.add(depth, f"if {v} is None:")
            src.add(depth + 1, f"out.append({2 * null_at})")
            src.add(depth, "else:")
            src.add(depth + 1, f"out.append({2 * (1 - null_at)})")
            self.write(src, other, v, depth + 1)
        elif kind == "null":
            src.add(depth, f"if {value} is not None:")
            src.add(depth + 1, "raise ValueError('a value for a null field')")
        elif kind == "boolean":
            src.add(depth, f"out.append(1 if {value} else 0)")
        elif kind in ("int", "long"):
            lo, hi = (_INT_MIN, _INT_MAX) if kind == "int" else (_LONG_MIN, _LONG_MAX)
            v = src.var("n")
            src.add(depth, f"{v} = {value}")
            # Inline: one byte for -64..63 (flags, depths), two for -8192..8191 (statuses,
            # durations, counts); the general case checks the range. A float or None
            # raises either way (<< and < are not defined for them).
            z = src.var("z")
            src.add(depth, f"if -64 <= {v} < 64:")
            src.add(depth + 1, f"out.append(({v} << 1) ^ ({v} >> 63))")
            src.add(depth, f"elif -8192 <= {v} < 8192:")
            src.add(depth + 1, f"{z} = ({v} << 1) ^ ({v} >> 63)")
            src.add(depth + 1, f"out.append(({z} & 0x7F) | 0x80)")
            src.add(depth + 1, f"out.append({z} >> 7)")
            src.add(depth, "else:")
            src.add(depth + 1, f"_write_varint(out, {v}, {lo}, {hi})")
        elif kind == "float":
            src.add(depth, f"out += _PACK_F.pack({value})")
        elif kind == "double":
            src.add(depth, f"out += _PACK_D.pack({value})")
        elif kind in ("string", "bytes"):
            b = src.var("b")
            n = src.var("n")
            if kind == "string":
                src.add(depth, f"{b} = {value}.encode()")
            else:
                src.add(depth, f"{b} = {value}")
                src.add(depth, f"if {b}.__class__ is str:")
                src.add(depth + 1, "raise TypeError('str for an Avro bytes field')")
            src.add(depth, f"{n} = len({b})")
            src.add(depth, f"if {n} < 64:")
            src.add(depth + 1, f"out.append({n} << 1)")
            src.add(depth, "else:")
            src.add(depth + 1, f"_write_varint(out, {n}, 0, {_LONG_MAX})")
            src.add(depth, f"out += {b}")
        elif kind == "fixed":
            b = src.var("b")
            src.add(depth, f"{b} = {value}")
            src.add(depth, f"if len({b}) != {int(schema['size'])}:")
            src.add(depth + 1, f"raise ValueError('fixed {schema['name']} is "
                               f"{int(schema['size'])} bytes')")
            src.add(depth, f"out += {b}")
        elif kind == "enum":
            table = src.const("enum", {s: i for i, s in enumerate(schema["symbols"])})
            src.add(depth, f"_write_varint(out, {table}[{value}], 0, {_INT_MAX})"
                    if len(schema["symbols"]) > 64 else
                    f"out.append({table}[{value}] << 1)")
        elif kind == "record":
            name = schema["name"]
            self.active.add(name)
            r = src.var("r")
            src.add(depth, f"{r} = {value}")
            for f in schema["fields"]:
                self.write(src, f["type"], self.field_value(src, r, f), depth)
            self.active.discard(name)
        elif kind in ("array", "map"):
            seq = src.var("a")
            n = src.var("n")
            item = src.var("i")
            src.add(depth, f"{seq} = {value}")
            src.add(depth, f"{n} = len({seq})")
            src.add(depth, f"if {n}:")
            src.add(depth + 1, f"_write_varint(out, {n}, 0, {_LONG_MAX})")
            if kind == "array":
                src.add(depth + 1, f"for {item} in {seq}:")
                self.write(src, schema["items"], item, depth + 2)
            else:
                key = src.var("k")
                src.add(depth + 1, f"for {key}, {item} in {seq}.items():")
                self.write(src, "string", key, depth + 2)
                self.write(src, schema["values"], item, depth + 2)
            src.add(depth, "out.append(0)")
        else:
            raise Unsupported(f"type {schema!r}")

    def field_value(self, src: _Source, record: str, f: Mapping[str, Any]) -> str:
        """How a field is taken from a record: as fastavro does, a missing field is its
        default, or null where its type allows null; otherwise a KeyError."""
        name = f["name"]
        t = f["type"]
        if "default" in f:
            return f"{record}.get({name!r}, {src.const('default', f['default'])})"
        if t == "null" or (isinstance(t, list) and "null" in t):
            return f"{record}.get({name!r})"
        return f"{record}[{name!r}]"

    # -- reading -----------------------------------------------------------------------
    def read_long(self, src: _Source, target: str, depth: int) -> None:
        """A zig-zag varint: one and two bytes (-8192..8191: statuses, durations,
        counts) inline, longer ones by _read_varint (a call costs as much as a byte)."""
        b = src.var("c")
        b2 = src.var("c")
        src.add(depth, f"{b} = data[pos]")
        src.add(depth, f"if {b} < 0x80:")
        src.add(depth + 1, "pos += 1")
        src.add(depth + 1, f"{target} = ({b} >> 1) ^ -({b} & 1)")
        src.add(depth, "else:")
        src.add(depth + 1, f"{b2} = data[pos + 1]")
        src.add(depth + 1, f"if {b2} < 0x80:")
        src.add(depth + 2, "pos += 2")
        src.add(depth + 2, f"{b} = ({b} & 0x7F) | ({b2} << 7)")
        src.add(depth + 2, f"{target} = ({b} >> 1) ^ -({b} & 1)")
        src.add(depth + 1, "else:")
        src.add(depth + 2, f"{target}, pos = _read_varint(data, pos)")

    def read_size(self, src: _Source, target: str, depth: int) -> None:
        """A length (of a string, bytes) that must lie within the data."""
        src.add(depth, f"{target} = data[pos]")
        src.add(depth, f"if {target} < 0x80 and not {target} & 1:")  # 0..63 in one byte
        src.add(depth + 1, "pos += 1")
        src.add(depth + 1, f"{target} >>= 1")
        src.add(depth, "else:")
        src.add(depth + 1, f"{target}, pos = _read_varint(data, pos)")
        src.add(depth + 1, f"if {target} < 0:")
        src.add(depth + 2, f"raise _CorruptBody(f'a length of {{{target}}}')")
        src.add(depth, f"if pos + {target} > end:")
        src.add(depth + 1, f"raise _CorruptBody(f'a length of {{{target}}} at {{pos}} "
                           f"in {{end}} bytes')")

    def min_size(self, schema: Any) -> int:
        """The fewest bytes a value of `schema` takes (0 for null and empty records)."""
        schema = self.named.get(schema, schema) if isinstance(schema, str) else schema
        kind = _kind(schema)
        if kind == "union" or kind in ("boolean", "int", "long", "string", "bytes",
                                                "enum", "array", "map"):
            return 1
        if kind == "float":
            return 4
        if kind == "double":
            return 8
        if kind == "fixed":
            return int(schema["size"])
        if kind == "record":
            if schema["name"] in self.active:
                return 0
            return sum(self.min_size(f["type"]) for f in schema["fields"])
        return 0

    def read(self, src: _Source, schema: Any, target: str, depth: int) -> None:
        """Lines reading a value of `schema` at `pos` into the variable `target`."""
        schema = self.resolve(schema)
        kind = _kind(schema)
        if kind == "union":
            # The branch's index is one byte, 0 or 2, as writers encode 0 and 1; any other
            # byte goes to _union_index (an overlong varint is legal, a wrong index not).
            if len(schema) == 1:
                null_at, other = -1, schema[0]
            else:
                null_at, other = self.nullable(schema)
            b = src.var("c")
            src.add(depth, f"{b} = data[pos]")
            src.add(depth, "pos += 1")
            src.add(depth, f"if {b} != 0 and {b} != 2:")
            src.add(depth + 1, f"{b}, pos = _union_index(data, pos - 1, {len(schema)})")
            if null_at >= 0:
                src.add(depth, f"if {b} == {2 * null_at}:")
                src.add(depth + 1, f"{target} = None")
                src.add(depth, "else:")
                depth += 1
            self.read(src, other, target, depth)
        elif kind == "null":
            src.add(depth, f"{target} = None")
        elif kind == "boolean":
            b = src.var("c")
            src.add(depth, f"{b} = data[pos]")
            src.add(depth, "pos += 1")
            src.add(depth, f"if {b} > 1:")
            src.add(depth + 1, f"raise _CorruptBody(f'boolean byte {{{b}}}')")
            src.add(depth, f"{target} = {b} == 1")
        elif kind in ("int", "long"):
            self.read_long(src, target, depth)
        elif kind in ("float", "double"):
            width, unpack = (4, "_PACK_F") if kind == "float" else (8, "_PACK_D")
            src.add(depth, f"{target} = {unpack}.unpack_from(data, pos)[0]")
            src.add(depth, f"pos += {width}")
        elif kind in ("string", "bytes"):
            n = src.var("n")
            self.read_size(src, n, depth)
            conv = ".decode()" if kind == "string" else ""
            src.add(depth, f"{target} = data[pos:pos + {n}]{conv}")
            src.add(depth, f"pos += {n}")
        elif kind == "fixed":
            size = int(schema["size"])
            src.add(depth, f"if pos + {size} > end:")
            src.add(depth + 1, "raise _CorruptBody('a fixed value past the end')")
            src.add(depth, f"{target} = data[pos:pos + {size}]")
            src.add(depth, f"pos += {size}")
        elif kind == "enum":
            symbols = src.const("symbols", tuple(schema["symbols"]))
            i = src.var("x")
            self.read_long(src, i, depth)
            src.add(depth, f"if not 0 <= {i} < {len(schema['symbols'])}:")
            src.add(depth + 1, f"raise _CorruptBody(f'enum index {{{i}}}')")
            src.add(depth, f"{target} = {symbols}[{i}]")
        elif kind == "record":
            name = schema["name"]
            self.active.add(name)
            names = []
            for f in schema["fields"]:
                v = src.var("f")
                self.read(src, f["type"], v, depth)
                names.append(f"{f['name']!r}: {v}")
            src.add(depth, f"{target} = {{{', '.join(names)}}}")
            self.active.discard(name)
        elif kind in ("array", "map"):
            item_schema = schema["items"] if kind == "array" else schema["values"]
            count = src.var("n")
            item = src.var("i")
            key = src.var("k")
            src.add(depth, f"{target} = {'[]' if kind == 'array' else '{}'}")
            src.add(depth, "while True:")
            self.read_long(src, count, depth + 1)
            src.add(depth + 1, f"if {count} == 0:")
            src.add(depth + 2, "break")
            src.add(depth + 1, f"if {count} < 0:")  # a block with its size in bytes
            src.add(depth + 2, f"{count} = -{count}")
            skip = src.var("s")
            self.read_long(src, skip, depth + 2)
            per_item = self.min_size(item_schema) + (1 if kind == "map" else 0)
            if per_item:
                src.add(depth + 1, f"if {count} * {per_item} > end - pos:")
                src.add(depth + 2, f"raise _CorruptBody(f'{{{count}}} items in "
                                   f"{{end - pos}} bytes')")
            src.add(depth + 1, f"for _ in range({count}):")
            if kind == "map":
                self.read(src, "string", key, depth + 2)
            self.read(src, item_schema, item, depth + 2)
            src.add(depth + 2, f"{target}.append({item})" if kind == "array"
                    else f"{target}[{key}] = {item}")
        else:
            raise Unsupported(f"type {schema!r}")


def _build(src: _Source, header: str, footer: str, name: str) -> Any:
    text = "\n".join([header, *src.lines, footer])
    scope: dict[str, Any] = {"_write_varint": _write_varint, "_read_varint": _read_varint,
                             "_union_index": _union_index,
                             "_PACK_F": _PACK_F, "_PACK_D": _PACK_D,
                             "_CorruptBody": CorruptBody, **src.consts}
    try:
        code = compile(text, f"<avro {name}>", "exec")
    except (SyntaxError, RecursionError, MemoryError) as exc:  # nested past Python's limits
        raise Unsupported(f"{name}: too deeply nested to compile ({exc})") from None
    exec(code, scope)  # noqa: S102 - our own source
    return scope["fn"]


def compile_writer(schema: Any) -> Writer:
    """fn(out, record): appends the Avro binary body of `record` to `out`. `schema` is
    fastavro's parsed form. Raises Unsupported for what this module does not compile."""
    src = _Source()
    _Compiler(schema).write(src, schema, "record", 1)
    fn: Writer = _build(src, "def fn(out, record):", "", str(_name_of(schema)))
    return fn


def compile_reader(schema: Any) -> Reader:
    """fn(data, pos) -> (record, position after it): reads one body of `schema` written
    with that same schema. Truncated or corrupt data raises (CorruptBody, IndexError,
    struct.error, UnicodeDecodeError)."""
    src = _Source()
    _Compiler(schema).read(src, schema, "result", 1)
    fn: Reader = _build(src, "def fn(data, pos):\n    end = len(data)",
                        "    return result, pos", str(_name_of(schema)))
    return fn
