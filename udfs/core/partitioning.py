"""Which subtask owns a key: Flink's key-group arithmetic, in plain Python.

Flink hashes a key's Java ``hashCode()`` with murmur, takes it modulo the job's maximum
parallelism (the number of key groups, fixed by the first savepoint), and gives each
subtask a contiguous range of key groups. PyFlink's ``key_by(..., key_type=STRING)``
keys the Java side by a one-field ``Row`` holding the string, whose hash is not the
string's own. Every function here mirrors a Flink method (named in its docstring); the
unit tests hold vectors that Flink 2.2's own classes produced.

Used to tell which frontier subtask owns a host (tests of a rescale, the skew
benchmark) without asking a running cluster.
"""

from __future__ import annotations

MASK32 = 0xFFFFFFFF
# KeyGroupRangeAssignment.DEFAULT_LOWER_BOUND_MAX_PARALLELISM / UPPER_BOUND_MAX_PARALLELISM
DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7
UPPER_BOUND_MAX_PARALLELISM = 1 << 15


def _int32(x: int) -> int:
    x &= MASK32
    return x - (1 << 32) if x & 0x80000000 else x


def _rotl32(x: int, r: int) -> int:
    x &= MASK32
    return ((x << r) | (x >> (32 - r))) & MASK32


def java_string_hash(s: str) -> int:
    """java.lang.String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, int32."""
    data = s.encode("utf-16-le")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] | data[i + 1] << 8)) & MASK32
    return _int32(h)


def pyflink_string_key_hash(key: str) -> int:
    """hashCode of the key PyFlink's KeyByKeySelector builds for a STRING key: a Row of
    kind INSERT (byte value 0) with one field. RowUtils.deepHashCodeRow gives
    31*0 + (31*1 + (31*1 + key.hashCode())) = 62 + key.hashCode() (int32)."""
    return _int32(62 + java_string_hash(key))


def murmur_hash(code: int) -> int:
    """org.apache.flink.util.MathUtils.murmurHash(int): non-negative."""
    h = (code * 0xCC9E2D51) & MASK32
    h = _rotl32(h, 15)
    h = (h * 0x1B873593) & MASK32
    h = _rotl32(h, 13)
    h = (h * 5 + 0xE6546B64) & MASK32
    h ^= 4
    # bitMix (the murmur3 finalizer)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & MASK32
    h ^= h >> 16
    h = _int32(h)
    if h >= 0:
        return h
    return -h if h != -(1 << 31) else 0


def key_group_for_hash(key_hash: int, max_parallelism: int) -> int:
    """KeyGroupRangeAssignment.computeKeyGroupForKeyHash."""
    return murmur_hash(key_hash) % max_parallelism


def operator_index_for_key_group(max_parallelism: int, parallelism: int,
                                 key_group: int) -> int:
    """KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup."""
    return key_group * parallelism // max_parallelism


def key_group_range(max_parallelism: int, parallelism: int,
                    operator_index: int) -> range:
    """KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex, as a range."""
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return range(start, end + 1)


def default_max_parallelism(parallelism: int) -> int:
    """KeyGroupRangeAssignment.computeDefaultMaxParallelism: what a job gets when it
    sets none (then fixed by its first savepoint)."""
    rounded = 1 << max(0, (parallelism + parallelism // 2 - 1).bit_length())
    return min(max(rounded, DEFAULT_LOWER_BOUND_MAX_PARALLELISM),
               UPPER_BOUND_MAX_PARALLELISM)


def host_key_group(host_key: str, max_parallelism: int) -> int:
    """The key group of a host in a job keyed by ``key_by(..., key_type=STRING)``."""
    return key_group_for_hash(pyflink_string_key_hash(host_key), max_parallelism)


def host_subtask(host_key: str, max_parallelism: int, parallelism: int) -> int:
    """The subtask index that owns a host (KeyGroupRangeAssignment
    .assignKeyToParallelOperator on PyFlink's key)."""
    return operator_index_for_key_group(max_parallelism, parallelism,
                                        host_key_group(host_key, max_parallelism))
