"""The hashes of a text's shingles, compiled by numba: per word 5-gram of the text (lowercased,
split on whitespace, as ``near_signatures._shingles`` makes them), datasketch's default
``sha1_hash32`` of its UTF-8 bytes (the first four bytes of its SHA-1 digest, little-endian).

Why compiled: with a ``hashlib.sha1`` call and a joined string per shingle, signing cost
about 0.9 ms a conversation on the benchmark corpus (about 700 shingles each), twice what
ingest spends on it otherwise, and ingest signs every trajectory when a dataset uses
``dedup: near``. Here a text's words are joined once, each shingle is a range of those bytes
(from its first word's start to its fifth word's end: no byte of a UTF-8 word is a space) and
one compiled pass hashes every range. The same numbers as ``hashlib``
(tests/ingest/test_near_signatures.py). Imported only where conversations are signed; its
machine code is cached on disk as ``ngram_kernel``'s is (``compiled``).
"""

from __future__ import annotations

import numpy as np

from trajectory_assets.ingest.ngram_kernel import compiled

MASK = 0xFFFFFFFF


@compiled(inline="always")
def _rotate(value, bits):  # pragma: no cover - compiled
    return ((value << bits) | (value >> (32 - bits))) & MASK


@compiled(nogil=True)
def sha1_words(data, starts, ends):  # pragma: no cover - compiled
    """Per range ``data[starts[i]:ends[i]]``, the first four bytes of its SHA-1 digest read as
    a little-endian unsigned 32-bit number (FIPS 180-4, in 64-bit integers masked to 32 bits)."""
    count = len(starts)
    found = np.empty(count, np.uint32)
    words = np.empty(80, np.int64)
    block = np.zeros(64, np.int64)
    for item in range(count):
        start = starts[item]
        length = ends[item] - start
        h0, h1, h2, h3, h4 = 0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0
        blocks = (length + 8) // 64 + 1  # the bytes, 0x80, zeros and the length in bits fill whole blocks
        for number in range(blocks):
            first = number * 64
            inside = min(max(length - first, 0), 64)  # the text's bytes in this block
            for j in range(inside):
                block[j] = data[start + first + j]
            for j in range(inside, 64):
                block[j] = 0
            if 0 <= length - first < 64:
                block[length - first] = 0x80
            if number == blocks - 1:
                bits = length * 8
                for j in range(8):
                    block[63 - j] = (bits >> (8 * j)) & 0xFF
            for t in range(16):
                words[t] = (block[4 * t] << 24) | (block[4 * t + 1] << 16) | (block[4 * t + 2] << 8) | block[4 * t + 3]
            for t in range(16, 80):
                words[t] = _rotate(words[t - 3] ^ words[t - 8] ^ words[t - 14] ^ words[t - 16], 1)
            a, b, c, d, e = h0, h1, h2, h3, h4
            for t in range(20):  # the four rounds apart: no branch per step
                temp = (_rotate(a, 5) + ((b & c) | ((b ^ MASK) & d)) + e + 0x5A827999 + words[t]) & MASK
                e, d, c, b, a = d, c, _rotate(b, 30), a, temp
            for t in range(20, 40):
                temp = (_rotate(a, 5) + (b ^ c ^ d) + e + 0x6ED9EBA1 + words[t]) & MASK
                e, d, c, b, a = d, c, _rotate(b, 30), a, temp
            for t in range(40, 60):
                temp = (_rotate(a, 5) + ((b & c) | (b & d) | (c & d)) + e + 0x8F1BBCDC + words[t]) & MASK
                e, d, c, b, a = d, c, _rotate(b, 30), a, temp
            for t in range(60, 80):
                temp = (_rotate(a, 5) + (b ^ c ^ d) + e + 0xCA62C1D6 + words[t]) & MASK
                e, d, c, b, a = d, c, _rotate(b, 30), a, temp
            h0, h1, h2, h3, h4 = (h0 + a) & MASK, (h1 + b) & MASK, (h2 + c) & MASK, (h3 + d) & MASK, (h4 + e) & MASK
        # the digest's first four bytes are h0's, most significant first: read little-endian
        found[item] = ((h0 & 0xFF) << 24) | (((h0 >> 8) & 0xFF) << 16) | (((h0 >> 16) & 0xFF) << 8) | (h0 >> 24)
    return found


def shingle_hashes(text: str, width: int) -> np.ndarray:
    """``sha1_hash32`` of each shingle of ``width`` words of ``text``, in order (one of the
    whole text, maybe empty, when it has no more words than that)."""
    words = text.lower().split()
    joined = np.frombuffer(" ".join(words).encode(), np.uint8)
    if len(words) <= width:
        return sha1_words(joined, np.zeros(1, np.int64), np.full(1, len(joined), np.int64))
    spaces = np.flatnonzero(joined == 0x20)
    starts = np.concatenate([np.zeros(1, np.int64), spaces + 1])
    ends = np.concatenate([spaces, np.full(1, len(joined), np.int64)])
    return sha1_words(joined, starts[:len(words) - width + 1], ends[width - 1:])
