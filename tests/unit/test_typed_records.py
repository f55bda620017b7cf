"""The typed topic records (udfs/wire/records.py) against schemas/*.avsc.

Each TypedDict must have the newest schema version's fields, no more and no fewer,
with the Python type of each Avro type, nullable exactly where the schema is, and
enum fields whose symbols are the schema's. Records decoded from every version's
examples must fit the class at run time too.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import pytest

from udfs.wire.avro import TOPIC_SCHEMAS, load_examples, registry
from udfs.wire.records import STREAMS, DeadLetter, Stream

REG = registry()
PRIMITIVES = {"string": str, "long": int, "int": int, "double": float, "float": float,
              "boolean": bool, "bytes": bytes}


def mismatches(avro: Any, hint: Any, where: str) -> list[str]:
    """Where the Python type `hint` does not describe the Avro type `avro`."""
    if isinstance(avro, list):  # a union: here only ["null", X]
        branches = [b for b in avro if b != "null"]
        assert len(branches) == 1 and "null" in avro, f"{where}: union {avro} not handled"
        args = get_args(hint)
        nullable = get_origin(hint) in (Union, types.UnionType) and type(None) in args
        if not nullable:
            return [f"{where}: the schema allows null, the class does not"]
        rest = [a for a in args if a is not type(None)]
        assert len(rest) == 1, f"{where}: {hint} has more than one branch besides None"
        return mismatches(branches[0], rest[0], where)
    if get_origin(hint) in (Union, types.UnionType):
        return [f"{where}: the class allows {hint}, the schema has {avro} (not nullable)"]
    if isinstance(avro, str):
        avro = {"type": avro}
    kind = avro["type"]
    if kind in PRIMITIVES:
        want = PRIMITIVES[kind]
        return [] if hint is want else [f"{where}: {kind} should be {want.__name__}, "
                                         f"the class has {hint}"]
    if kind == "enum":
        symbols = avro["symbols"]
        if get_origin(hint) is Literal:
            got = list(get_args(hint))
        elif get_origin(hint) is Annotated and get_args(hint)[0] is str and \
                isinstance(get_args(hint)[1], type) and issubclass(get_args(hint)[1], enum.Enum):
            got = [m.value for m in get_args(hint)[1]]
        else:
            return [f"{where}: enum {avro['name']} should be a Literal or "
                    f"Annotated[str, Enum], the class has {hint}"]
        return [] if sorted(got) == sorted(symbols) else [
            f"{where}: enum {avro['name']} symbols {symbols}, the class has {got}"]
    if kind == "array":
        if get_origin(hint) is not list:
            return [f"{where}: array should be a list, the class has {hint}"]
        return mismatches(avro["items"], get_args(hint)[0], where + "[]")
    if kind == "map":
        if get_origin(hint) is not dict or get_args(hint)[0] is not str:
            return [f"{where}: map should be dict[str, ...], the class has {hint}"]
        return mismatches(avro["values"], get_args(hint)[1], where + "{}")
    if kind == "record":
        if not typing.is_typeddict(hint):
            return [f"{where}: record {avro['name']} should be a TypedDict, has {hint}"]
        return record_mismatches(avro, hint, where)
    return [f"{where}: Avro type {kind} is not handled by this test"]


def record_mismatches(schema: dict[str, Any], cls: type, where: str) -> list[str]:
    hints = get_type_hints(cls, include_extras=True)
    fields = {f["name"]: f["type"] for f in schema["fields"]}
    out = [f"{where}.{n}: in the schema, not in {cls.__name__}" for n in fields
           if n not in hints]
    out += [f"{where}.{n}: in {cls.__name__}, not in the schema" for n in hints
            if n not in fields]
    if cls.__required_keys__ != frozenset(hints):  # type: ignore[attr-defined]
        out.append(f"{where}: every field of {cls.__name__} is always present (total)")
    for name in fields.keys() & hints.keys():
        out += mismatches(fields[name], hints[name], f"{where}.{name}")
    return out


@pytest.mark.parametrize("topic", sorted(STREAMS))
def test_class_matches_the_newest_schema(topic):
    stream = STREAMS[topic]
    assert stream.schema == TOPIC_SCHEMAS[topic]
    newest = REG.latest(stream.schema)
    assert record_mismatches(newest.schema, stream.record, stream.schema) == []


def test_every_topic_has_a_typed_stream():
    assert set(STREAMS) == set(TOPIC_SCHEMAS)


@pytest.mark.parametrize("topic", sorted(STREAMS))
def test_decoded_examples_fit_the_class(topic):
    """Every version's example records, written by that version and read as the
    newest, have the class's keys and values of its types."""
    stream = STREAMS[topic]
    for sv in REG.versions(stream.schema):
        for example in load_examples(sv):
            record = stream.decode(REG, REG.encode(sv.name, example, version=sv.version))
            assert value_problems(record, stream.record, stream.schema) == []


def value_problems(value: Any, hint: Any, where: str) -> list[str]:
    """Where a decoded value is not of the (resolved) Python type `hint`."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        if any(not value_problems(value, a, where) for a in get_args(hint)):
            return []
        return [f"{where}: {value!r} is none of {hint}"]
    if hint is type(None):
        return [] if value is None else [f"{where}: {value!r} is not None"]
    if origin is Annotated:
        return value_problems(value, get_args(hint)[0], where)
    if origin is Literal:
        return [] if value in get_args(hint) else [f"{where}: {value!r} not in {hint}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {value!r} is not a list"]
        return [p for i, v in enumerate(value)
                for p in value_problems(v, get_args(hint)[0], f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not a dict"]
        return [p for k, v in value.items()
                for p in value_problems(k, str, where) + value_problems(
                    v, get_args(hint)[1], f"{where}{{{k}}}")]
    if typing.is_typeddict(hint):
        hints = get_type_hints(hint, include_extras=True)
        if not isinstance(value, dict) or set(value) != set(hints):
            return [f"{where}: keys {sorted(value)} are not {sorted(hints)}"]
        return [p for k, h in hints.items() for p in value_problems(value[k], h, f"{where}.{k}")]
    if hint is float:
        return [] if isinstance(value, (int, float)) and not isinstance(value, bool) else [
            f"{where}: {value!r} is not a float"]
    if hint is int:
        return [] if isinstance(value, int) and not isinstance(value, bool) else [
            f"{where}: {value!r} is not an int"]
    return [] if isinstance(value, hint) else [f"{where}: {value!r} is not {hint.__name__}"]


def test_the_checks_catch_a_class_that_drifts():
    """The checks above fail for a class one step off its schema."""
    schema = REG.latest("dead_letter").schema
    assert record_mismatches(schema, DeadLetter, "dead_letter") == []

    class Missing(typing.TypedDict):
        stage: str

    class WrongType(DeadLetter):  # type: ignore[misc]
        pass

    WrongType.__annotations__ = {**DeadLetter.__annotations__, "at_ms": "str"}
    assert any("reason: in the schema, not in Missing" in p
               for p in record_mismatches(schema, Missing, "dead_letter"))
    assert record_mismatches(schema, WrongType, "dead_letter") == [
        "dead_letter.at_ms: long should be int, the class has <class 'str'>"]

    class NotNullable(typing.TypedDict):
        url: str

    assert mismatches(["null", "string"], get_type_hints(NotNullable)["url"], "x.url") == [
        "x.url: the schema allows null, the class does not"]
    enum_schema = {"type": "enum", "name": "E", "symbols": ["A", "B"]}
    assert mismatches(enum_schema, Literal["A"], "x.e") == [
        "x.e: enum E symbols ['A', 'B'], the class has ['A']"]
    assert value_problems({"url": 3}, NotNullable, "r") == ["r.url: 3 is not str"]


def test_stream_round_trip():
    record: DeadLetter = {
        "stage": "s", "reason": "r", "error_type": "E", "source_topic": None,
        "source_partition": None, "source_offset": None, "key": None, "payload": b"x",
        "url": None, "host_key": None, "at_ms": 1}
    stream: Stream[DeadLetter] = STREAMS["deadletter"]
    assert stream.decode(REG, stream.encode(REG, record, check=True)) == record


def test_a_hosts_many_links_are_cut_into_records_kafka_takes():
    """A sitemap may list 50,000 URLs of one host: they go in records of at most
    MAX_LINK_BYTES of links, each well under Kafka's default 1 MiB max.request.size
    (a refused record fails the fetcher job, and its lease is fetched again), every
    link kept, in order; worst-case links (long URLs of multi-byte characters, every
    optional field set) too. A few links stay one record."""
    from udfs.wire.records import DISCOVERED, MAX_LINK_BYTES, links_records, page_links

    links = [{"url": f"https://ä.example/{'ü' * (i % 900)}/{i}", "lastmod_ms": 2 ** 62,
              "priority": 0.5, "changefreq": "monthly"} for i in range(50_000)]
    records = links_records("ä.example", "SITEMAP", "https://ä.example/s.xml", 1, 0,
                            links)
    sizes = [len(DISCOVERED.encode(REG, r)) for r in records]
    assert len(records) > 1 and max(sizes) <= MAX_LINK_BYTES + 1024 < 1024 * 1024, sizes
    assert [link for r in records for link in r["links"]] == links
    assert all(r["host_key"] == "ä.example" and r["source"] == "SITEMAP" for r in records)
    few = page_links("https://a.example/", 0, [f"https://a.example/{i}" for i in range(50)], 0)
    assert len(few) == 1 and len(few[0]["links"]) == 50


def test_a_fetchs_urls_go_inside_its_completion_unless_kafka_would_refuse_it():
    """completion v4: a page's links ride inside its completion, and the frontier reads
    them back as the records they stand for (parent = the page, time = the fetch's). A
    sitemap of 50,000 entries would make a completion over Kafka's 1 MiB: those go as
    records of their own, the completion without them, and stays small."""
    from udfs.wire.records import (
        COMPLETIONS,
        DISCOVERED,
        attach_found,
        found_records,
        links_records,
        page_links,
    )

    comp = load_examples(REG.latest("completion"))[0]
    urls = [f"https://a.example/{i}" for i in range(40)] + ["https://b.example/x"]
    found = page_links(comp["url"], 2, urls, comp["fetched_at_ms"])
    assert attach_found(comp, found) == []
    back = COMPLETIONS.decode(REG, COMPLETIONS.encode(REG, comp))
    assert [f["host_key"] for f in back["discovered"]] == ["https://a.example",
                                                           "https://b.example"]
    assert found_records(back) == found
    big = links_records("https://a.example", "SITEMAP", comp["url"], 1,
                        comp["fetched_at_ms"], [{"url": f"https://a.example/{'x' * 60}/{i}",
                                                 "lastmod_ms": None, "priority": None,
                                                 "changefreq": None} for i in range(50_000)])
    assert attach_found(comp, big) == big and comp["discovered"] == []
    assert len(COMPLETIONS.encode(REG, comp)) < 4096
    assert all(len(DISCOVERED.encode(REG, r)) < 1024 * 1024 for r in big)
    assert attach_found(comp, []) == [] and found_records(comp) == []
