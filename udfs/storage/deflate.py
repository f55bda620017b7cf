"""Gzip members built from pieces compressed apart, so one compression serves two files.

A page's body is compressed once, and the result goes into two gzip members: the
WARC response record that carries it and the body's own object under raw/. A piece is
raw deflate (RFC 1951) ended by a sync flush: it ends on a byte boundary with no final
block, so pieces compressed apart may follow one another in one member (a back
reference never points outside its own piece, whose bytes the reader has just
produced). A member (RFC 1952) is a header, the pieces, an empty final block, and the
CRC-32 and length of all the uncompressed bytes.

The level scale runs from 1 (fastest) to 9 (smallest), over two libraries that write
the same format: levels 1-3 are ISA-L's (Intel's igzip, its levels 1-3), levels 4-9
zlib-ng's (zlib's API; at 6 zlib's size in 0.6-0.8 of its time). ISA-L's level 3
takes 0.2-0.4 of zlib-ng's level 6 time for 2-6% more bytes on CMS-like pages; zlib-ng's
own level 3 is about as small at 2.3-2.7x ISA-L's time, and its level 1 gives up far
more size than ISA-L's (bench/RESULTS.md, the "deflate level" rows). CRC-32 is
zlib-ng's. Any gzip reader reads the members of either.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from isal import isal_zlib
from zlib_ng import zlib_ng as zlib

# ID1 ID2, deflate, no flags, no modification time (0: none), no extra flags, OS
# unknown (255): the same bytes for the same content, whenever it was written.
HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
FINAL_BLOCK = b"\x03\x00"  # an empty final block (fixed Huffman codes)
SYNC_MARK = b"\x00\x00\xff\xff"  # the empty stored block a sync flush ends with
crc32 = zlib.crc32  # a member's checksum (zlib-ng's: 0.6 against 4.7 us for 20 KB here)
FAST_LEVELS = range(1, 4)  # the levels ISA-L compresses at (its own 1-3); 4-9: zlib-ng


def piece(data: bytes, level: int) -> bytes:
    """`data` as raw deflate at `level` (1-9: ISA-L's 1-3, zlib-ng's 4-9), ended by a
    sync flush."""
    if not 1 <= level <= 9:
        raise ValueError(f"a gzip level is 1 to 9, not {level}")
    return piece_by(isal_zlib if level in FAST_LEVELS else zlib, data, level)


def piece_by(lib: Any, data: bytes, level: int) -> bytes:
    """`data` as raw deflate ended by a sync flush, by `lib` (a module with zlib's API:
    zlib-ng's, ISA-L's or the standard library's) at its own `level`."""
    c = lib.compressobj(level, lib.DEFLATED, -lib.MAX_WBITS)
    return c.compress(data) + c.flush(lib.Z_SYNC_FLUSH)


def stored(data: bytes) -> bytes:
    """`data` (up to 65,535 bytes) as one uncompressed non-final block: a piece for a
    few bytes, where a compressor's set-up would cost more than it saves."""
    if len(data) > 0xFFFF:
        raise ValueError(f"a stored block holds at most 65,535 bytes, not {len(data)}")
    return struct.pack("<BHH", 0, len(data), len(data) ^ 0xFFFF) + data


def member(pieces: Iterable[bytes], crc: int, size: int) -> bytes:
    """One gzip member of `pieces`, whose uncompressed bytes have CRC-32 `crc` and
    `size` bytes in all."""
    return b"".join((HEADER, *pieces, FINAL_BLOCK,
                     struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)))


def gzip_of(data: bytes, level: int, compressed: bytes | None = None) -> bytes:
    """`data` as one gzip member; `compressed`: its piece, if already made (at any
    level; the caller vouches that it is `data`'s: a reader would find out only from
    the CRC-32)."""
    if compressed is None:
        compressed = piece(data, level)
    elif not compressed.endswith(SYNC_MARK):
        raise ValueError("not a piece: a piece ends with a sync flush's empty block")
    return member([compressed], crc32(data), len(data))
