"""The compiled Avro bodies (udfs/wire/avrocodec.py) against fastavro: the same bytes for
every record of every schema, the same records read back, and corrupt bodies refused."""

import io
import struct
from typing import Any

import fastavro
import pytest
from fastavro.schema import parse_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from udfs.wire.avro import HEADER_LEN, MAGIC, AvroDecodeError, AvroEncodeError, registry
from udfs.wire.avrocodec import Unsupported, compile_reader, compile_writer

REG = registry()
NEWEST = [REG.latest(name) for name in REG.names()]

# Every type and edge this module compiles, in one schema: a named type used twice, an
# enum of more than 64 symbols (its index is then a varint of two bytes), a map, a
# fixed, a float, a one-branch union, null first and null second.
ALL_TYPES = parse_schema({
    "type": "record", "name": "All", "namespace": "t", "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "raw", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "n", "type": "null"},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "fx2", "type": ["null", "Four"]},
        {"name": "e", "type": {"type": "enum", "name": "Big",
                               "symbols": [f"S{k}" for k in range(70)]}},
        {"name": "m", "type": {"type": "map", "values": ["long", "null"]}},
        {"name": "a", "type": {"type": "array", "items": {
            "type": "record", "name": "Item", "fields": [
                {"name": "x", "type": ["string"]},
                {"name": "y", "type": ["null", "double"], "default": None}]}}},
        {"name": "nested", "type": ["null", "Item"], "default": None},
        {"name": "dflt", "type": "string", "default": "dflt"},
    ]}, named_schemas={})


def records_of(schema: Any, named: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    """Valid values of a fastavro-parsed schema."""
    named = {} if named is None else named
    if isinstance(schema, str) and schema in named:
        return records_of(named[schema], named)
    if isinstance(schema, list):
        return st.one_of(*[records_of(s, named) for s in schema])
    kind = schema if isinstance(schema, str) else schema["type"]
    if isinstance(schema, dict) and "name" in schema:
        named[schema["name"]] = schema
    simple = {
        "null": st.none(), "boolean": st.booleans(),
        # Small values too: one and two bytes are written and read inline.
        "int": st.one_of(st.integers(-9000, 9000), st.integers(-(1 << 31), (1 << 31) - 1)),
        "long": st.one_of(st.integers(-70, 70), st.integers(-9000, 9000),
                          st.integers(-(1 << 63), (1 << 63) - 1)),
        "float": st.floats(width=32, allow_nan=False),
        "double": st.floats(allow_nan=False),
        "bytes": st.binary(max_size=150), "string": st.text(max_size=80),
    }
    if kind in simple:
        return simple[kind]
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "array":
        return st.lists(records_of(schema["items"], named), max_size=4)
    if kind == "map":
        return st.dictionaries(st.text(max_size=10), records_of(schema["values"], named),
                               max_size=3)
    if kind == "record":
        return st.fixed_dictionaries({f["name"]: records_of(f["type"], named)
                                      for f in schema["fields"]})
    raise AssertionError(f"no strategy for {schema!r}")


def fastavro_bytes(schema: Any, record: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, record)
    return buf.getvalue()


_COMPILED: dict[int, Any] = {}


def compiled(schema: Any) -> Any:
    """(writer, reader) of a schema, compiled once per test session."""
    if id(schema) not in _COMPILED:
        _COMPILED[id(schema)] = (compile_writer(schema), compile_reader(schema))
    return _COMPILED[id(schema)]


def check_same_as_fastavro(schema: Any, record: Any) -> None:
    write, read = compiled(schema)
    expected = fastavro_bytes(schema, record)
    out = bytearray()
    write(out, record)
    assert bytes(out) == expected
    back, end = read(expected, 0)
    assert end == len(expected)
    assert back == fastavro.schemaless_reader(io.BytesIO(expected), schema, schema)
    # Any strict prefix of a body is refused: the reader needs every byte.
    for cut in sorted({0, len(expected) // 2, len(expected) - 1} - {len(expected)}):
        if cut < len(expected):
            with pytest.raises((ValueError, IndexError, struct.error)):
                read(expected[:cut], 0)


@pytest.mark.parametrize("sv", NEWEST, ids=lambda sv: f"{sv.name}.v{sv.version}")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_schema_writes_and_reads_as_fastavro(sv, data):
    record = data.draw(records_of(sv.parsed))
    check_same_as_fastavro(sv.parsed, record)
    # Through the registry: header, then the same body; read back whole.
    encoded = REG.encode(sv.name, record, check=False)
    assert encoded == MAGIC + sv.fingerprint + fastavro_bytes(sv.parsed, record)
    assert REG.decode(sv.name, encoded) == record


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_type_writes_and_reads_as_fastavro(data):
    check_same_as_fastavro(ALL_TYPES, data.draw(records_of(ALL_TYPES)))


def test_missing_fields_take_their_default_or_null_as_in_fastavro():
    schema = parse_schema({"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "long", "default": 7},
        {"name": "b", "type": ["null", "string"]},
        {"name": "c", "type": "string"}]}, named_schemas={})
    out = bytearray()
    compile_writer(schema)(out, {"c": "x"})
    assert bytes(out) == fastavro_bytes(schema, {"c": "x"})
    with pytest.raises(KeyError):
        compile_writer(schema)(bytearray(), {"a": 1})


def test_reads_what_other_writers_may_write():
    """Blocks with a negative count and a byte size, an array in several blocks, and
    overlong varints are legal Avro (Java's block writers produce the first two)."""
    schema = parse_schema({"type": "record", "name": "R", "fields": [
        {"name": "u", "type": ["null", "long"]},
        {"name": "xs", "type": {"type": "array", "items": "string"}},
        {"name": "m", "type": {"type": "map", "values": "int"}}]}, named_schemas={})
    body = bytes([
        0x82, 0x00, 0x0A,             # union index 1 written in two bytes, then 5
        0x03, 0x08, 0x02, 0x61, 0x02, 0x62,  # block of -2 items, 4 bytes: "a", "b"
        0x02, 0x02, 0x63,             # block of 1 item: "c"
        0x00,                         # end of the array
        0x01, 0x04, 0x02, 0x6B, 0x0E,  # map block of -1 entry, 2 bytes... "k": 7
        0x00])
    record, end = compile_reader(schema)(body, 0)
    assert end == len(body)
    assert record == {"u": 5, "xs": ["a", "b", "c"], "m": {"k": 7}}
    assert record == fastavro.schemaless_reader(io.BytesIO(body), schema, schema)
    null_overlong = bytes([0x80, 0x00, 0x00, 0x00])
    assert compile_reader(schema)(null_overlong, 0)[0] == {"u": None, "xs": [], "m": {}}


@pytest.mark.parametrize("body, why", [
    (bytes([0x04]), "union branch 2 of 2"),
    (bytes([0x01]), "union branch -1 of 2"),
    (bytes([0x02, 0x80] + [0xFF] * 10), "varint longer than 10 bytes"),
    (bytes([0x00, 0x02, 0x7F]), "a length of -64"),
    (bytes([0x00, 0x02, 0x10, 0x61]), "a length of 8 at 3 in 4 bytes"),
    (bytes([0x00, 0x7E, 0x00]), "63 items in 1 bytes"),
])
def test_corrupt_bodies_are_refused_with_a_reason(body, why):
    schema = parse_schema({"type": "record", "name": "R", "fields": [
        {"name": "u", "type": ["null", "long"]},
        {"name": "xs", "type": {"type": "array", "items": "string"}}]}, named_schemas={})
    with pytest.raises(ValueError, match=why):
        compile_reader(schema)(body, 0)


def test_registry_reports_corrupt_bodies_and_bad_records_in_its_errors():
    sv = REG.latest("discovered")
    good = REG.encode("discovered", {
        "host_key": "https://a.example", "source": "LINK", "parent_url": None, "depth": 1,
        "redirect_hops": 0, "discovered_at_ms": 5,
        "links": [{"url": "https://a.example/x", "lastmod_ms": None, "priority": 0.5,
                   "changefreq": None}]})
    with pytest.raises(AvroDecodeError, match=f"corrupt discovered v{sv.version} body"):
        REG.decode("discovered", good[:HEADER_LEN] + b"\x09" + good[HEADER_LEN + 1:])
    with pytest.raises(AvroDecodeError, match="trailing bytes"):
        REG.decode("discovered", good + b"\x00")
    for bad in ({"depth": 2.5}, {"depth": None}, {"depth": 1 << 31}, {"source": "NOPE"},
                {"links": [{"url": b"bytes"}]}):
        record = {**REG.decode("discovered", good), **bad}
        with pytest.raises(AvroEncodeError, match=f"discovered v{sv.version}: "):
            REG.encode("discovered", record, check=False)


def test_unsupported_schemas_keep_fastavro():
    multi = parse_schema({"type": "record", "name": "M", "fields": [
        {"name": "v", "type": ["null", "long", "string"]}]}, named_schemas={})
    recursive = parse_schema({"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"]}]}, named_schemas={})
    # Arrays in arrays past Python's limit of nested blocks in one function.
    deep: Any = "long"
    for _ in range(30):
        deep = {"type": "array", "items": deep}
    deep = parse_schema({"type": "record", "name": "Deep", "fields": [
        {"name": "v", "type": deep}]}, named_schemas={})
    for schema in (multi, recursive, deep):
        with pytest.raises(Unsupported):
            compile_writer(schema)
        with pytest.raises(Unsupported):
            compile_reader(schema)


def test_older_versions_are_read_by_schema_resolution():
    """A record of an older version has another fingerprint: it is read by fastavro's
    resolution into the newest version (new fields take their defaults)."""
    from udfs.wire.avro import load_examples

    old = REG.versions("discovered")[0]
    record = load_examples(old)[0]
    data = REG.encode("discovered", record, version=old.version)
    assert data[2:HEADER_LEN] == old.fingerprint != REG.latest("discovered").fingerprint
    read = REG.decode("discovered", data)
    assert read["links"][0]["url"] == record["links"][0]["url"]
    assert read["links"][0]["changefreq"] is None  # a v3 field, absent in v1
