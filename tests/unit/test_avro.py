import json
import shutil

import pytest

from udfs.config import TOPIC_KEYS
from udfs.wire.avro import (
    MAGIC,
    STATE_SCHEMAS,
    TOPIC_SCHEMAS,
    AvroDecodeError,
    AvroEncodeError,
    SchemaRegistry,
    check_lock,
    check_registry,
    compatibility_problems,
    crc64_avro,
    load_examples,
    registry,
)
from udfs.wire.deadletter import upgrade_record

REG = registry()
ALL_VERSIONS = [sv for name in REG.names() for sv in REG.versions(name)]


def test_every_topic_and_state_record_has_a_schema():
    assert set(TOPIC_SCHEMAS) == set(TOPIC_KEYS)
    assert set(REG.names()) == set(TOPIC_SCHEMAS.values()) | set(STATE_SCHEMAS)


@pytest.mark.parametrize("sv", ALL_VERSIONS, ids=lambda sv: f"{sv.name}.v{sv.version}")
def test_examples_round_trip(sv):
    examples = load_examples(sv)
    assert examples, f"{sv.name}.v{sv.version} needs example records"
    for record in examples:
        data = REG.encode(sv.name, record, version=sv.version)
        assert data[:2] == MAGIC and data[2:10] == sv.fingerprint
        decoded = REG.decode(sv.name, data)  # read as the newest version
        assert _as_written(decoded, record) == record


def _as_written(decoded, written):
    """`decoded` cut to the fields of `written`, at every level: a newer reader adds
    fields (with their defaults), it must not change the ones written."""
    if isinstance(written, dict):
        return {k: _as_written(decoded[k], v) for k, v in written.items()}
    if isinstance(written, list):
        return [_as_written(d, w) for d, w in zip(decoded, written, strict=True)]
    return decoded


def test_published_schemas_are_locked_and_compatible():
    assert check_lock(REG) == []
    assert check_registry(REG) == []


def test_fingerprint_is_crc64_avro_of_the_canonical_form():
    # Whitespace, field order of JSON attributes and doc strings do not change it.
    a = {"type": "record", "name": "R", "fields": [{"name": "x", "type": "int"}]}
    b = {"fields": [{"type": "int", "name": "x", "doc": "d"}], "name": "R", "type": "record"}
    assert crc64_avro(a) == crc64_avro(b)
    assert crc64_avro(a) != crc64_avro({**a, "name": "S"})
    # The Avro project's test vector: the schema "null" has fingerprint
    # 7195948357588979594 (as Java's signed long); the header stores it little-endian.
    assert int.from_bytes(crc64_avro("null"), "little", signed=True) == 7195948357588979594


@pytest.mark.parametrize("data, reason", [
    (b"", "missing C3 01 marker"),
    (b"{json}", "missing C3 01 marker"),
    (MAGIC + b"\x00" * 8 + b"\x02", "unknown writer schema fingerprint"),
])
def test_decode_rejects_with_a_reason(data, reason):
    with pytest.raises(AvroDecodeError, match=reason):
        REG.decode("discovered", data)


def test_decode_rejects_wrong_schema_truncation_and_trailing_bytes():
    record = load_examples(REG.latest("dead_letter"))[0]
    data = REG.encode("dead_letter", record)
    with pytest.raises(AvroDecodeError, match="written as dead_letter v1, expected discovered"):
        REG.decode("discovered", data)
    with pytest.raises(AvroDecodeError, match="corrupt dead_letter v1 body"):
        REG.decode("dead_letter", data[:-5])
    with pytest.raises(AvroDecodeError, match="trailing bytes"):
        REG.decode("dead_letter", data + b"\x00")
    with pytest.raises(AvroDecodeError, match="expected bytes"):
        REG.decode("dead_letter", "text")


def test_encode_validates():
    with pytest.raises(AvroEncodeError, match="discovered v3"):
        REG.encode("discovered", {"source": "LINK", "links": []})  # discovered_at_ms missing
    with pytest.raises(AvroEncodeError):
        REG.encode("lease", {**load_examples(REG.latest("lease"))[0], "kind": "VIDEO"})


# Values no field of any schema here accepts in place of its own type (one per field kind).
_WRONG = (object(), "text", 3, 2.5, None, True, b"raw", [], {})


@pytest.mark.parametrize("name", sorted(TOPIC_SCHEMAS.values()))
def test_encode_refuses_exactly_what_fastavro_refuses(name):
    """encode checks with fastavro's quick yes/no validation and asks for the message only
    when a record fails: every record the raising validation refuses is still refused, with
    its message, and every record it accepts is still encoded."""
    from fastavro.validation import ValidationError, validate

    sv = REG.latest(name)
    base = load_examples(sv)[0]
    refused = 0
    for field in sv.parsed["fields"]:
        for wrong in (*_WRONG, "missing"):
            record = dict(base)
            if wrong == "missing":
                del record[field["name"]]
            else:
                record[field["name"]] = wrong
            try:
                validate(record, sv.parsed, raise_errors=True)
            except (ValidationError, ValueError) as exc:
                refused += 1
                with pytest.raises(AvroEncodeError, match=f"v{sv.version}: ") as got:
                    REG.encode(name, record)
                assert str(exc) in str(got.value)
            else:
                assert REG.encode(name, record)[:2] == MAGIC
    assert refused >= len(sv.parsed["fields"])  # the check is exercised on every field


def test_upgrade_record_routes_bad_input_to_a_dead_letter():
    good = REG.encode("discovered", load_examples(REG.latest("discovered"))[0])
    ok, out = upgrade_record(REG, "discovered", good, stage="s", source_topic="t", now_ms=5)
    assert ok and REG.decode("discovered", out) == REG.decode("discovered", good)
    ok, out = upgrade_record(REG, "discovered", b"junk", stage="s", source_topic="t", now_ms=5)
    letter = REG.decode("dead_letter", out)
    assert not ok
    assert letter["payload"] == b"junk" and letter["source_topic"] == "t" and letter["at_ms"] == 5
    assert "C3 01" in letter["reason"] and letter["error_type"] == "AvroDecodeError"


# --- compatibility rules -------------------------------------------------------------

BASE = {"type": "record", "name": "R", "namespace": "crawl", "fields": [
    {"name": "id", "type": "string"},
    {"name": "n", "type": "int"},
    {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
]}


def _with(fields_change):
    s = json.loads(json.dumps(BASE))
    fields_change(s["fields"])
    return s


@pytest.mark.parametrize("change", [
    lambda f: f.append({"name": "extra", "type": ["null", "string"], "default": None}),
    lambda f: f.__setitem__(1, {"name": "n", "type": "long"}),  # int → long promotion
    lambda f: f.__setitem__(1, {"name": "n", "type": ["null", "int"]}),  # widened to a union
    lambda f: f.pop(3),  # a field the reader no longer wants
    lambda f: f.__setitem__(2, {"name": "kind", "type": {"type": "enum", "name": "K",
                                                         "symbols": ["A", "B", "C"]}}),
    lambda f: f.__setitem__(0, {"name": "ident", "aliases": ["id"], "type": "string"}),
])
def test_compatible_changes(change):
    assert compatibility_problems(_with(change), BASE) == []


@pytest.mark.parametrize("change, problem", [
    (lambda f: f.append({"name": "extra", "type": "string"}), "new field without a default"),
    (lambda f: f.__setitem__(1, {"name": "n", "type": "string"}),
     "R.n: type mismatch: reader type: string not compatible with writer type: int"),
    (lambda f: f.__setitem__(2, {"name": "kind", "type": {"type": "enum", "name": "K",
                                                          "symbols": ["A"]}}),
     "R.kind (symbols): enum symbols removed and the reader's enum has no default: {'B'}"),
    (lambda f: f.__setitem__(0, {"name": "ident", "type": "string"}), "R.ident: new field"),
    (lambda f: f.__setitem__(3, {"name": "tags", "type": {"type": "array", "items": "int"}}),
     "R.tags[]: type mismatch: reader type: int not compatible with writer type: string"),
])
def test_incompatible_changes_are_named(change, problem):
    problems = compatibility_problems(_with(change), BASE)
    assert problems and problem in " ".join(problems)


def test_narrowing_a_union_is_incompatible():
    wide = _with(lambda f: f.__setitem__(1, {"name": "n", "type": ["null", "int"]}))
    # The place is the reader's field, though the problem is one branch of the writer's union.
    assert compatibility_problems(BASE, wide) == [
        "R.n: type mismatch: reader type: int not compatible with writer type: null"]
    union_reader = _with(lambda f: f.__setitem__(1, {"name": "n", "type": ["null", "long"]}))
    string_writer = _with(lambda f: f.__setitem__(1, {"name": "n", "type": "boolean"}))
    assert "no branch" in " ".join(compatibility_problems(union_reader, string_writer))


def test_record_rename_needs_an_alias():
    renamed = {**BASE, "name": "Other"}
    assert compatibility_problems(renamed, BASE)
    # An alias without a namespace is in the namespace of the type it names (spec, "Aliases").
    assert compatibility_problems({**renamed, "aliases": ["R"]}, BASE) == []
    assert compatibility_problems({**renamed, "aliases": ["crawl.R"]}, BASE) == []
    assert compatibility_problems({**renamed, "aliases": ["elsewhere.R"]}, BASE)


def test_several_problems_name_every_place():
    two = _with(lambda f: (f.append({"name": "x", "type": "int"}),
                           f.__setitem__(1, {"name": "n", "type": "string"})))
    text = " ".join(compatibility_problems(two, BASE))
    assert "reader type: string not compatible with writer type: int" in text
    assert "new field without a default" in text and "R.n" in text and "R.x" in text


# --- a registry with two versions: the evolution path a future change will take ---------

@pytest.fixture
def evolved(tmp_path):
    src = REG.latest("lease")
    shutil.copy(src.path, tmp_path / "lease.v1.avsc")
    v2 = json.loads(src.path.read_text())
    v2["fields"].append({"name": "policy_version", "type": "long", "default": 0})
    (tmp_path / "lease.v2.avsc").write_text(json.dumps(v2))
    reg = SchemaRegistry(tmp_path)
    lock = [f"lease v{sv.version} {sv.content_hash}" for sv in reg.versions("lease")]
    (tmp_path / "fingerprints.lock").write_text("\n".join(lock) + "\n")
    return reg


def test_new_version_reads_old_data(evolved):
    old = load_examples(REG.latest("lease"))[0]
    v1 = evolved.versions("lease")[0]
    import io

    import fastavro

    buf = io.BytesIO()
    buf.write(MAGIC + v1.fingerprint)
    fastavro.schemaless_writer(buf, v1.parsed, old)
    read = evolved.decode("lease", buf.getvalue())
    assert read == {**old, "policy_version": 0}
    assert check_registry(evolved) == [] and check_lock(evolved) == []


def test_incompatible_new_version_and_edited_published_version_are_caught(evolved, tmp_path):
    v2 = json.loads((tmp_path / "lease.v2.avsc").read_text())
    v2["fields"][-1].pop("default")
    (tmp_path / "lease.v2.avsc").write_text(json.dumps(v2))
    reg = SchemaRegistry(tmp_path)
    assert any("policy_version: new field without a default" in p for p in check_registry(reg))
    assert any("changed after it was published" in p for p in check_lock(reg))


def test_unlocked_version_and_version_gaps(tmp_path):
    shutil.copy(REG.latest("lease").path, tmp_path / "lease.v1.avsc")
    (tmp_path / "fingerprints.lock").write_text("")
    assert "not in fingerprints.lock" in check_lock(SchemaRegistry(tmp_path))[0]
    shutil.move(tmp_path / "lease.v1.avsc", tmp_path / "lease.v2.avsc")
    with pytest.raises(ValueError, match="without gaps"):
        SchemaRegistry(tmp_path)
