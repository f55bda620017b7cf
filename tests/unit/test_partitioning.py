"""Flink's key-group arithmetic in Python, against vectors Flink 2.2's own classes
printed (KeyGroupRangeAssignment and MathUtils from flink-dist, on a PyFlink key: a
one-field Row holding the host string)."""

import pytest

from udfs.core.partitioning import (
    default_max_parallelism,
    host_key_group,
    host_subtask,
    java_string_hash,
    key_group_range,
    murmur_hash,
    operator_index_for_key_group,
    pyflink_string_key_hash,
)

pytestmark = pytest.mark.unit

# key, Row hashCode, key group (128), subtask (128, 2), key group (32768), subtask (32768, 1000)
FLINK_VECTORS = [
    ("http://site0.test:8080", -1289981985, 17, 0, 10001, 305),
    ("https://example.com", 632849676, 113, 1, 28145, 858),
    ("", 62, 33, 0, 19617, 598),
    ("a", 159, 64, 1, 29120, 888),
    ("http://xn--bcher-kva.example", -1329965105, 118, 1, 29302, 894),
    ("https://ünïcode.example", 1210997941, 32, 0, 7584, 231),
    ("http://127.0.0.1:43125", -884450556, 31, 0, 9375, 286),
    ("https://www.wikipedia.org", -1087825307, 56, 0, 32568, 993),
]


@pytest.mark.parametrize("key,row_hash,kg128,sub2,kg32k,sub1000", FLINK_VECTORS)
def test_host_to_key_group_and_subtask_as_flink(key, row_hash, kg128, sub2, kg32k, sub1000):
    assert pyflink_string_key_hash(key) == row_hash
    assert host_key_group(key, 128) == kg128
    assert host_subtask(key, 128, 2) == sub2
    assert host_key_group(key, 32768) == kg32k
    assert host_subtask(key, 32768, 1000) == sub1000


def test_java_string_hash_and_murmur_edges():
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00  # two UTF-16 units
    assert (murmur_hash(0), murmur_hash(-(1 << 31)), murmur_hash(-1)) == \
        (593689054, 1718298732, 1982413648)


@pytest.mark.parametrize("max_p,p,index,first,last", [
    (128, 2, 0, 0, 63), (128, 2, 1, 64, 127), (128, 3, 1, 43, 85),
    (4096, 1000, 999, 4092, 4095), (32768, 1000, 7, 230, 262), (128, 128, 127, 127, 127)])
def test_key_group_ranges_as_flink(max_p, p, index, first, last):
    groups = key_group_range(max_p, p, index)
    assert (groups[0], groups[-1]) == (first, last)
    assert {operator_index_for_key_group(max_p, p, g) for g in groups} == {index}


def test_ranges_cover_every_key_group_once():
    for max_p, p in [(128, 1), (128, 7), (4096, 1000), (32768, 32768)]:
        covered = [g for i in range(p) for g in key_group_range(max_p, p, i)]
        assert covered == list(range(max_p))


@pytest.mark.parametrize("p,expected", [(1, 128), (2, 128), (100, 256), (128, 256),
                                        (129, 256), (1000, 2048), (30000, 32768)])
def test_default_max_parallelism_as_flink(p, expected):
    assert default_max_parallelism(p) == expected
