"""Gzip members from pieces compressed apart (udfs/storage/deflate.py), and the one
compression of a page's body shared by its WARC response record and its raw/ object."""

from __future__ import annotations

import gzip
import hashlib
import io
import zlib

import pytest
from warcio.archiveiterator import ArchiveIterator

from udfs.storage import deflate
from udfs.storage.bodies import LocalStore
from udfs.storage.warc import Exchange, Fetch, build_records, read_record

BODY = b"".join(b"<p>word %d of a page</p>" % (i % 97) for i in range(2000))


def test_pieces_compressed_apart_make_one_member_any_gzip_reader_reads():
    parts = [b"WARC/1.1\r\nhead\r\n\r\n", BODY, b"", b"\r\n\r\n"]
    pieces = [deflate.piece(parts[0], 6), deflate.piece(parts[1], 1),
              deflate.piece(parts[2], 9), deflate.stored(parts[3])]
    whole = b"".join(parts)
    member = deflate.member(pieces, zlib.crc32(whole), len(whole))
    assert gzip.decompress(member) == whole
    assert gzip.GzipFile(fileobj=io.BytesIO(member)).read() == whole
    assert zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(member) == whole
    # A wrong CRC or length is caught by the reader: they are not decoration.
    with pytest.raises(gzip.BadGzipFile):
        gzip.decompress(deflate.member(pieces, zlib.crc32(whole) ^ 1, len(whole)))
    with pytest.raises(ValueError):
        deflate.stored(bytes(65536))


def test_gzip_of_is_the_same_bytes_whenever_written_and_reads_back():
    a = deflate.gzip_of(BODY, 6)
    assert a == deflate.gzip_of(BODY, 6, deflate.piece(BODY, 6))  # given its piece
    assert gzip.decompress(a) == BODY and gzip.decompress(deflate.gzip_of(b"", 6)) == b""
    assert len(deflate.gzip_of(BODY, 1)) > len(a)  # the level reaches the bytes
    with pytest.raises(ValueError):  # a whole gzip member is no piece
        deflate.gzip_of(BODY, 6, a)


def _fetch(payload: bytes) -> Fetch:
    ex = Exchange("GET", "/p/1", [("Host", "a.test")], "HTTP/1.1", 200, "OK",
                  [("Content-Type", "text/html")], payload)
    return Fetch("http://a.test/p/1", "L-1", 1, 1, 1_764_567_890_123, ex)


def test_a_response_record_holds_its_payload_as_a_piece_the_body_store_reuses(tmp_path):
    sha = hashlib.sha256(BODY).hexdigest()
    response = build_records(_fetch(BODY), gzip_level=6, payload_sha256=sha)[0]
    assert response.payload_piece is not None
    assert response.payload_piece in response.data  # the record's own compression
    assert response.digest == build_records(_fetch(BODY))[0].digest  # given or computed
    # The record reads back whole, by warcio, record by record from a file of them.
    assert read_record(response.data)[1] == BODY
    recs = list(ArchiveIterator(io.BytesIO(response.data * 2)))
    assert len(recs) == 2
    # The raw/ object made from the piece is the one made without it, byte for byte.
    reused, fresh = LocalStore(tmp_path / "a"), LocalStore(tmp_path / "b")
    _, key, _ = reused.put_body(BODY, sha256_hex=sha, compressed=response.payload_piece)
    assert (sha, key) == fresh.put_body(BODY)[:2]
    assert (tmp_path / "a" / key).read_bytes() == (tmp_path / "b" / key).read_bytes()
    assert response.payload_piece in (tmp_path / "a" / key).read_bytes()
    assert reused.get_body(key) == BODY


def test_records_without_a_payload_have_no_piece():
    assert build_records(_fetch(b""))[0].payload_piece is None


def test_pieces_of_every_level_read_with_the_standard_zlib_and_zlib_ngs_at_its_size():
    """Levels 1-3 are ISA-L's, 4-9 zlib-ng's: the standard library reads both back,
    the CRC-32 is zlib's, and at level 6 the pieces are within 1% of zlib's own size."""
    from isal import isal_zlib

    page = b"".join(b"<p>%d %s</p>" % (i, b"lorem ipsum dolor sit amet "[: i % 27])
                    for i in range(1500))
    for level in range(1, 10):
        got = deflate.piece(page, level)
        assert zlib.decompressobj(-zlib.MAX_WBITS).decompress(got) == page
        assert got.endswith(deflate.SYNC_MARK)
        assert gzip.decompress(deflate.gzip_of(b"", level)) == b""
    for level in (1, 2, 3):  # ISA-L's own levels, byte for byte
        c = isal_zlib.compressobj(level, isal_zlib.DEFLATED, -isal_zlib.MAX_WBITS)
        assert deflate.piece(page, level) == c.compress(page) + c.flush(isal_zlib.Z_SYNC_FLUSH)
    assert deflate.piece(page, 1) != deflate.piece(page, 4)
    assert deflate.crc32(page) == zlib.crc32(page) and deflate.crc32(b"") == 0
    c = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    theirs = len(c.compress(page) + c.flush(zlib.Z_SYNC_FLUSH))
    assert len(deflate.piece(page, 6)) <= theirs * 1.01
    for bad in (0, 10):
        with pytest.raises(ValueError, match="gzip level is 1 to 9"):
            deflate.piece(page, bad)
