"""Fingerprints for the three kinds of duplicate (SPEC 6).

1. Same URL: `url_id`, a 64-bit digest of the normalized URL; the durable key
   is checked against the full URL, and on a collision the next probe id is
   used (`url_ids`), so a collision never merges two URLs. "Definitely new" is
   RocksDB's to answer, from the Bloom filter of each SST file
   (flink.rocksdb_bloom_bits_per_key), before it reads a file's blocks.
2. Same bytes: SHA-256 of the raw body (the stored object's key).
3. Near-duplicates: 64-bit SimHash of the extracted text (Charikar; Manku et
   al., WWW 2007) and `SimHashIndex`, a band index for Hamming distance <= k.

`simhash64` is bit-identical to the `simhash` package's `Simhash(text,
hashfunc=...)` given the same feature hash (`feature_hash64`), and computes
the 4-gram features' hashes and their bit majority in one C loop
(udfs/core/_simhash.c), or vectorized with NumPy where that is not built.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

_MASK64 = (1 << 64) - 1
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_PRIME = 0x100000001B3
_SEED = 0xCBF29CE484222325


def _c_loop() -> Callable[[bytes | NDArray[np.uint32]], int] | None:
    """SimHash's C loop (udfs/core/_simhash.c), built in place by ./dev setup
    (setup.py); None where it is not built (no compiler): the NumPy form does the same."""
    try:
        from udfs.core._simhash import simhash_codes
    except ImportError:
        return None
    return simhash_codes


_simhash_codes = _c_loop()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def text_hash(text: str, *, normalized: bool = False) -> str:
    """SHA-256 of whitespace-normalized extracted text (change detection). `normalized`:
    the text is already single-spaced and stripped (as ParsedPage.text is), so it is
    hashed as it is (splitting a page's text again costs ten times the hash)."""
    return hashlib.sha256((text if normalized else " ".join(text.split())).encode("utf-8")
                          ).hexdigest()


def url_id(url: str, probe: int = 0) -> str:
    """16 hex digits identifying a normalized URL; probe > 0 after a collision."""
    data = url.encode("utf-8") if probe == 0 else f"{probe}\x00{url}".encode()
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def url_ids(url: str, max_probes: int = 8) -> Iterator[str]:
    """The ids to try for a URL, in order: the first whose stored URL equals `url` (or
    that is free) is its id."""
    for probe in range(max_probes):
        yield url_id(url, probe)


# ---------------------------------------------------------------------------
# SimHash

def _mix(h: int) -> int:
    h ^= h >> 30
    h = (h * _M1) & _MASK64
    h ^= h >> 27
    h = (h * _M2) & _MASK64
    return h ^ (h >> 31)


def feature_hash64(feature: str) -> int:
    """The 64-bit hash of one feature (a string of at most 4 characters in text mode):
    FNV-1a over code points, then the splitmix64 finalizer. Pure-Python reference of
    the vectorized path."""
    h = _SEED
    for ch in feature:
        h = ((h ^ ord(ch)) * _PRIME) & _MASK64
    h = ((h ^ len(feature)) * _PRIME) & _MASK64
    return _mix(h)


def feature_hash_bytes(data: bytes) -> bytes:
    """`feature_hash64` in the form the `simhash` package's hashfunc returns (8 bytes)."""
    return feature_hash64(data.decode("utf-8")).to_bytes(8, "big")


_LANE_BITS = np.uint64(0x0101010101010101)  # the lowest bit of each of a word's 8 bytes
_SHIFTS = tuple(np.uint64(k) for k in range(8))
_ROW = 255  # hashes summed into one word: a byte of it counts at most 255 ones


def _majority(hashes: NDArray[np.uint64], count: int) -> int:
    """Bit j of the result is set when more than count/2 hashes have bit j set.

    Counted eight bits at a time in one word: `(h >> k) & 0x0101...01` holds bits k,
    k+8, ..., k+56 of h one per byte, and the sum of 255 such words counts each of
    them in its own byte without a carry into the next. 8 shifts, masks and sums over
    the hashes: about half the time of 8 byte histograms (bench/RESULTS.md, standards).
    """
    n = len(hashes)
    full = n - n % _ROW
    tail = np.zeros((1, _ROW), dtype=np.uint64)
    tail[0, :n - full] = hashes[full:]
    blocks = [(hashes[:full].reshape(-1, _ROW), full // _ROW)] if full else []
    blocks.append((tail, 1))
    lanes = np.empty((8, full // _ROW + 1), dtype=np.uint64)  # [k, row]
    for k, shift in enumerate(_SHIFTS):
        start = 0
        for rows, size in blocks:
            tmp = np.right_shift(rows, shift)
            np.bitwise_and(tmp, _LANE_BITS, out=tmp)
            np.add.reduce(tmp, axis=1, out=lanes[k, start:start + size])
            start += size
    # Byte b (little-endian) of lanes[k, row] counts bit 8b + k over the row's hashes.
    per_bit = lanes.astype("<u8").view(np.uint8).reshape(8, -1, 8).sum(axis=1)  # [k, b]
    sums = per_bit.T[::-1, ::-1].ravel()  # bit 63 first, as packbits reads them
    return int.from_bytes(np.packbits(sums > count / 2).tobytes(), "big")


# The ASCII bytes that are not word characters ([A-Za-z0-9_]): an ASCII text's token
# string is its bytes without them, bytes.translate's one C pass (a third of the time of
# a NumPy mask over the code points: 24 against 77 us for a synthetic 19 KB page). Other
# code points are looked up once per distinct character with the package's own pattern.
_ASCII_NON_WORD = bytes(
    c for c in range(128)
    if c not in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_TOKEN_CHAR = re.compile(r"[\w\u4e00-\u9fcc]")


@lru_cache(maxsize=65536)
def _is_token_char(code: int) -> bool:
    return _TOKEN_CHAR.fullmatch(chr(code)) is not None


@lru_cache(maxsize=1)
def _bmp_word_table() -> NDArray[np.bool_]:
    """Word-character flags of every Basic Multilingual Plane code point (built once, ~40 ms)."""
    table: NDArray[np.bool_] = np.array(
        [_TOKEN_CHAR.fullmatch(chr(c)) is not None for c in range(65536)], dtype=bool)
    return table


def _token_string(text: str) -> bytes | NDArray[np.uint32]:
    """The package's token string (lower-cased, word characters only): an ASCII text's as
    bytes, any other's as its code points."""
    low = text.lower()
    if low.isascii():
        return low.encode("ascii").translate(None, _ASCII_NON_WORD)
    codes = np.frombuffer(low.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    table = _bmp_word_table()
    if codes.max() < 65536:
        mask = table[codes]
    else:  # astral characters: rare, looked up one by one
        bmp = codes < 65536
        mask = np.zeros(len(codes), dtype=bool)
        mask[bmp] = table[codes[bmp]]
        idx = np.nonzero(~bmp)[0]
        mask[idx] = [_is_token_char(int(c)) for c in codes[idx]]
    kept: NDArray[np.uint32] = codes[mask]
    return kept


def _token_codes(text: str) -> NDArray[np.uint64]:
    """Code points of the package's token string, as the NumPy form hashes them."""
    string = _token_string(text)
    dtype = np.uint8 if isinstance(string, bytes) else np.uint32
    codes: NDArray[np.uint64] = np.frombuffer(string, dtype=dtype).astype(np.uint64)
    return codes


def _hashes_of_4grams(codes: NDArray[np.uint64]) -> NDArray[np.uint64]:
    n = len(codes) - 3
    h = np.full(n, _SEED, dtype=np.uint64)
    prime = np.uint64(_PRIME)
    with np.errstate(over="ignore"):
        for i in range(4):
            h = (h ^ codes[i:i + n]) * prime
        h = (h ^ np.uint64(4)) * prime
        h ^= h >> np.uint64(30)
        h *= np.uint64(_M1)
        h ^= h >> np.uint64(27)
        h *= np.uint64(_M2)
        h ^= h >> np.uint64(31)
    return h


def simhash64_numpy(text: str) -> int:
    """`simhash64` by NumPy alone: where the C form is not built, and its reference."""
    codes = _token_codes(text)
    if len(codes) < 4:  # the package's single-feature case (also for empty text)
        feature = "".join(map(chr, codes.tolist()))
        return _majority(np.array([feature_hash64(feature)], dtype=np.uint64), 1)
    hashes = _hashes_of_4grams(codes)
    return _majority(hashes, len(hashes))


def simhash64(text: str) -> int:
    """64-bit SimHash of text: lower-cased word characters, sliding 4-grams, each 4-gram
    counted as often as it occurs, `feature_hash64` per 4-gram. The 4-grams' hashes and
    their bit majority in one C loop (udfs/core/_simhash.c) when it is built; else, and
    for fewer than four characters, as `simhash64_numpy` computes them."""
    if _simhash_codes is None:
        return simhash64_numpy(text)
    string = _token_string(text)
    if len(string) < 4:
        return simhash64_numpy(text)
    return _simhash_codes(string)


def hamming(a: int, b: int) -> int:
    return ((a ^ b) & _MASK64).bit_count()


def to_signed64(value: int) -> int:
    """Unsigned 64-bit → Avro long (two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def from_signed64(value: int) -> int:
    return value & _MASK64


@lru_cache(maxsize=8)
def _band_spans(k: int) -> tuple[tuple[int, int], ...]:
    if not 0 <= k < 64:
        raise ValueError("k must be in [0, 63]")
    bands = k + 1
    spans, shift = [], 64
    for i in range(bands):
        width = 64 // bands + (1 if i < 64 % bands else 0)
        shift -= width
        spans.append((shift, (1 << width) - 1))
    return tuple(spans)


def band_keys(fp: int, k: int = 3) -> list[tuple[int, int]]:
    """(band number, band value) of a 64-bit fingerprint split into k + 1 bands: two
    fingerprints within Hamming distance k share at least one (pigeonhole)."""
    return [(i, (fp >> shift) & mask) for i, (shift, mask) in enumerate(_band_spans(k))]


class SimHashIndex:
    """Near-duplicate lookup for Hamming distance <= k: the 64 bits split into k + 1 bands;
    two fingerprints within distance k share at least one whole band (pigeonhole), so
    only documents sharing a band are compared."""

    def __init__(self, k: int = 3) -> None:
        self.k = k
        self._buckets: dict[tuple[int, int], list[tuple[str, int]]] = {}
        band_keys(0, k)  # validates k

    def _keys(self, fp: int) -> list[tuple[int, int]]:
        return band_keys(fp, self.k)

    def add(self, doc_id: str, fp: int) -> None:
        for key in self._keys(fp):
            self._buckets.setdefault(key, []).append((doc_id, fp))

    def near(self, fp: int) -> list[tuple[str, int]]:
        """(doc_id, distance) of indexed documents within distance k, nearest first."""
        seen: dict[str, int] = {}
        for key in self._keys(fp):
            for doc_id, other in self._buckets.get(key, ()):
                if doc_id not in seen:
                    d = hamming(fp, other)
                    if d <= self.k:
                        seen[doc_id] = d
        return sorted(seen.items(), key=lambda t: (t[1], t[0]))
