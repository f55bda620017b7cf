"""The frontier's pinned operator ids (udfs.flink.runtime.pin_operator_ids): a Kafka sink's
writer and committer found by the name KafkaIO gives its table, whatever the topic."""

from __future__ import annotations

import pytest

from jobs.frontier import PINNED_IDS
from udfs.flink.runtime import pin_operator_ids, pinned_name


class Node:
    """What pin_operator_ids reads and sets of a Java StreamNode."""

    def __init__(self, name: str, uid: str | None = None) -> None:
        self.name, self.uid, self.user_hash = name, uid, None

    def getOperatorName(self) -> str:  # noqa: N802 (the Java API's names)
        return self.name

    def getTransformationUID(self) -> str | None:  # noqa: N802
        return self.uid

    def setUserHash(self, value: str) -> None:  # noqa: N802
        self.user_hash = value


class Graph:
    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes

    def getStreamNodes(self):  # noqa: N802
        nodes = self.nodes

        class Collection:
            def toArray(self):  # noqa: N802
                return nodes
        return Collection()


def test_a_sink_operator_is_named_by_its_number_not_its_topic():
    assert pinned_name("sink5_crawl_index[35]: Writer") == "sink5: Writer"
    assert pinned_name("sink5_bench_1a2b_crawl_index[41]: Committer") == "sink5: Committer"
    for other in ("Source: src_crawl_index[7]", "Calc[2]", "frontier", "sink5_x: Map"):
        assert pinned_name(other) is None


def test_pins_go_to_the_sinks_and_nothing_else():
    nodes = [Node(f"sink{n}_t_{n}[{20 + n}]: {part}") for n in range(1, 7)
             for part in ("Writer", "Committer")]
    others = [Node("Source: src_t[1]"), Node("frontier", uid="frontier-hosts")]
    pin_operator_ids(Graph(nodes + others), PINNED_IDS)
    assert {pinned_name(n.name): n.user_hash for n in nodes} == PINNED_IDS
    assert [n.user_hash for n in others] == [None, None]


def test_a_pin_that_finds_no_single_operator_stops_the_job():
    with pytest.raises(RuntimeError, match=r"sink2: Writer"):
        pin_operator_ids(Graph([Node("sink1_t[1]: Writer")]),
                         {"sink1: Writer": "0" * 32, "sink2: Writer": "1" * 32})
    with pytest.raises(RuntimeError, match=r"sink1: Writer"):
        pin_operator_ids(Graph([Node("sink1_a[1]: Writer"), Node("sink1_b[2]: Writer")]),
                         {"sink1: Writer": "0" * 32})
