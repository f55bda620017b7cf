"""The relay job's function and arguments (jobs/relay.py, udfs/relay/operator.py)."""

from __future__ import annotations

import pytest
from pyflink.common import Row

import jobs.relay
from udfs.relay.operator import DEAD_LETTERS, RelayFunction
from udfs.wire.avro import load_examples, registry
from udfs.wire.records import links_record, plain_link

REG = registry()


def relay(schemas: list[str], values: list[bytes]) -> tuple[list[bytes], list[dict]]:
    """What the function sends on, and the dead letters it writes."""
    fn = RelayFunction(schemas)
    fn.open(None)
    sent, dead = [], []
    for i, value in enumerate(values):
        for out in fn.process_element(Row(b"k", value, "in.topic", 0, i), None):
            if isinstance(out, tuple):
                assert out[0] == DEAD_LETTERS
                dead.append(REG.decode("dead_letter", bytes(out[1][1])))
            else:
                sent.append(bytes(out[1]))
    return sent, dead


def test_a_topic_of_two_kinds_is_relayed_whole_when_both_are_named():
    """crawl.completions holds completions and, before each, the URLs its page gave:
    relayed with --schema completion,discovered, each is kept as its own kind;
    with completion alone the URLs would be dead-lettered (never crawled)."""
    completion = REG.encode("completion", load_examples(REG.latest("completion"))[0])
    links = REG.encode("discovered", links_record(
        "a.example", "LINK", "https://a.example/", 1, 0, [plain_link("https://a.example/x")]))
    sent, dead = relay(["completion", "discovered"], [links, completion, b"garbage"])
    assert [REG.writer_name(v) for v in sent] == ["discovered", "completion"]
    assert REG.decode("discovered", sent[0])["links"][0]["url"] == "https://a.example/x"
    assert [d["payload"] for d in dead] == [b"garbage"]
    sent, dead = relay(["completion"], [links, completion])
    assert [REG.writer_name(v) for v in sent] == ["completion"]
    assert "written as discovered" in dead[0]["reason"]


def test_an_unknown_schema_name_is_one_line_and_exit_2_before_anything_starts(
        monkeypatch, capsys):
    def started(*args, **kwargs):
        raise AssertionError("the job was started")

    monkeypatch.setattr(jobs.relay, "make_env", started)
    with pytest.raises(SystemExit) as exc:
        jobs.relay.main(["--from", "a", "--to", "b", "--schema", "completion,nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("relay: error: --schema: no schema named nope"), err
