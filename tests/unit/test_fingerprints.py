"""Dedup fingerprints: URL ids with collision probing, SHA-256, SimHash, band index."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simhash import Simhash

from udfs.core.fingerprints import (
    SimHashIndex,
    feature_hash64,
    feature_hash_bytes,
    from_signed64,
    hamming,
    sha256_hex,
    simhash64,
    text_hash,
    to_signed64,
    url_id,
    url_ids,
)
from udfs.core.frontier import FrontierConfig, HostFrontier

WORDS = ("crawler politeness frontier lease robots sitemap index flink kafka bloom "
         "hash page host queue fetch parse link depth budget").split()


def document(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def reference(text: str) -> int:
    """The `simhash` package with our feature hash."""
    return Simhash(text, hashfunc=feature_hash_bytes).value


@pytest.mark.parametrize("text", ["", "a", "ab", "abc", "abcd", "Hello, World!", "日本語のテキスト",
                                  "ÄÖÜ straße", "x" * 50, "a b c d e f g h",
                                  "𝔘𝔫𝔦 emoji 😀 text İstanbul", "ΣΊΣΥΦΟΣ Ⅻ ⅻ ½"])
def test_simhash_is_bit_identical_to_the_package_on_edge_cases(text):
    assert simhash64(text) == reference(text)


def test_simhash_is_bit_identical_on_10kb_documents():
    rng = random.Random(5)
    for _ in range(5):
        text = document(rng, 1700)
        assert len(text) >= 10_000
        assert simhash64(text) == reference(text)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400))
def test_simhash_is_bit_identical_on_arbitrary_text(text):
    assert simhash64(text) == reference(text)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=400))
def test_simhash_is_bit_identical_on_ascii_text(text):
    """ASCII text takes its own path to the token string (bytes.translate)."""
    assert simhash64(text) == reference(text)


def test_feature_hash_is_the_packages_hashfunc_form():
    assert feature_hash_bytes(b"abcd") == feature_hash64("abcd").to_bytes(8, "big")
    assert feature_hash64("abcd") != feature_hash64("abce")


def test_near_duplicates_are_close_and_different_pages_are_far():
    rng = random.Random(9)
    base = document(rng, 1500)
    words = base.split()
    words[100] = "changed"
    near = " ".join(words)
    other = document(random.Random(10), 1500)
    assert hamming(simhash64(base), simhash64(near)) <= 3
    assert hamming(simhash64(base), simhash64(other)) > 3


def test_band_index_finds_everything_within_k_and_nothing_beyond():
    rng = random.Random(1)
    index = SimHashIndex(k=3)
    stored = {}
    for i in range(2000):
        fp = rng.getrandbits(64)
        stored[f"d{i}"] = fp
        index.add(f"d{i}", fp)
    for _ in range(200):
        target_id, target = rng.choice(list(stored.items()))
        flips = rng.sample(range(64), rng.randint(0, 5))
        probe = target
        for bit in flips:
            probe ^= 1 << bit
        found = dict(index.near(probe))
        expected = {d for d, fp in stored.items() if hamming(fp, probe) <= 3}
        assert set(found) == expected
        assert (target_id in found) == (len(flips) <= 3)


def test_url_ids_and_collision_probing():
    assert url_id("http://a/") == url_id("http://a/") and len(url_id("http://a/")) == 16
    assert list(url_ids("http://a/"))[1] != url_id("http://a/")
    # Force a 64-bit collision: /a's state sits under /b's first id.
    h = HostFrontier("http://h.example", FrontierConfig())
    adm_a = h.discover("http://h.example/a", 0.0)
    h.urls[url_id("http://h.example/b")] = h.urls.pop(adm_a.url_id)
    adm_b = h.discover("http://h.example/b", 0.0)
    assert adm_b.accepted and adm_b.url_id == url_id("http://h.example/b", 1)
    assert h.stats["url_id_collisions"] == 1
    # Found again through the same probe, never merged with the squatter.
    assert h.discover("http://h.example/b", 1.0).reason == "known"
    assert h.urls[adm_b.url_id].url == "http://h.example/b"


def test_content_hashes():
    assert sha256_hex(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert text_hash("a  b\n c") == text_hash("a b c") != text_hash("a b d")


@given(st.text())
def test_text_hash_of_normalized_text_skips_the_split_and_agrees(text):
    """The parser hashes its single-spaced text as it is: the same hash as of the raw
    text (normalizing twice changes nothing), and a different one where it is not."""
    normalized = " ".join(text.split())
    assert text_hash(normalized, normalized=True) == text_hash(text)
    if normalized != text:
        assert text_hash(text, normalized=True) != text_hash(text)


def test_signed_conversion_for_avro_longs():
    for v in (0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1):
        s = to_signed64(v)
        assert -(1 << 63) <= s < (1 << 63) and from_signed64(s) == v


@pytest.mark.parametrize("n", [1, 2, 254, 255, 256, 511, 3000])
def test_majority_counts_each_bit_without_a_carry_between_bits(n):
    """Bits are counted eight to a word, one per byte, up to 255 hashes a word: with
    every hash alike each byte reaches its most, and a carry would flip a neighbour."""
    from udfs.core.fingerprints import _majority

    def plain(values: list[int]) -> int:
        return sum(1 << j for j in range(64)
                   if sum(v >> j & 1 for v in values) > len(values) / 2)

    rng = random.Random(n)
    for values in ([(1 << 64) - 1] * n, [0x8000_0000_0000_0001] * n,
                   [rng.getrandbits(64) for _ in range(n)],
                   [(1 << 64) - 1] * (n // 2 + 1) + [0] * (n - n // 2 - 1)):
        got = _majority(np.array(values, dtype=np.uint64), len(values))
        assert got == plain(values)


def test_the_c_form_of_simhash_is_built():
    """./dev setup builds udfs/core/_simhash.c in place (setup.py); without it every
    parse takes the NumPy form, about 2.5 times its time."""
    from udfs.core import fingerprints

    assert fingerprints._simhash_codes is not None, \
        "udfs/core/_simhash.c is not built: run ./dev setup (it needs a C compiler)"


@pytest.mark.parametrize("n", [1, 2, 254, 255, 256, 511, 3000])
@pytest.mark.parametrize("char", ["a", "ä", "😀"])
def test_c_simhash_counts_each_bit_without_a_carry_between_bits(n, char):
    """n alike 4-grams: every bit count reaches n, across the C loop's emptying of its
    lanes every 255 hashes (1-, 4-byte code points: ASCII, other, astral)."""
    from udfs.core.fingerprints import simhash64_numpy

    for text in (char * (n + 3), "ab" * n + "cd", char * (n + 3) + "bcde" * n):
        assert simhash64(text) == simhash64_numpy(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=2000))
def test_c_and_numpy_simhash_agree(text):
    from udfs.core.fingerprints import simhash64_numpy

    assert simhash64(text) == simhash64_numpy(text)


def test_simhash_without_the_c_form_is_the_same(monkeypatch):
    from udfs.core import fingerprints

    texts = [document(random.Random(seed), 400) for seed in range(3)] + ["", "abc", "日本語"]
    expected = [simhash64(t) for t in texts]
    monkeypatch.setattr(fingerprints, "_simhash_codes", None)
    assert [simhash64(t) for t in texts] == expected


def test_c_simhash_refuses_what_is_not_a_token_string():
    from udfs.core import _simhash

    with pytest.raises(ValueError, match="1 or 4 bytes"):
        _simhash.simhash_codes(np.arange(8, dtype=np.uint64))
    with pytest.raises(ValueError, match="at least 4"):
        _simhash.simhash_codes(b"abc")
