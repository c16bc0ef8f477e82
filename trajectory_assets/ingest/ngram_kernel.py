"""Decontamination's hot loop, compiled by numba: texts to normalised words and their words to
the first benchmark one of whose n-grams they hold. ``decontamination.py`` owns the
rules and the index; this module only runs them fast.

Why compiled: done with Arrow's string kernels and numpy, the same work passed over each
text five times (lowercase, a number regex, a punctuation table, a whitespace split, a
vocabulary lookup) and cost about 45% of ingest at 1 GB (``bench.decontamination``). One
pass over the bytes does it in a fraction of that. A text holding a code point only the
Unicode rules handle is marked as the pass meets it; only such texts then go through the
rules and, when matching, the pass again (``normalise`` scans them all again, in order).

Imported only where texts are checked (numba's import with the code-point table, and the
pass's first call, when numba initialises its CPU target and loads the pass, cost about
0.4 s: ``bench.decontamination`` times them), and compiled once per machine, about 2 s: numba keeps the
machine code beside this file, in ``__pycache__`` (the image compiles it as it is built, see
the Dockerfile), else in the user's cache folder; where neither can be written (a read-only
install without a home), each process compiles it again rather than fail.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
from numba import njit


def compiled(**options) -> Callable:
    """``numba.njit`` with its machine code cached on disk, or kept in memory where numba finds
    no folder to write it to (it raises as the function is defined), with a warning: every
    process then compiles the pass, about 2 s."""
    def decorate(function: Callable) -> Callable:
        try:
            return njit(cache=True, **options)(function)
        except RuntimeError as error:
            if "no locator available" not in str(error):
                raise
            warnings.warn(f"numba can write no cache for {function.__name__} (set NUMBA_CACHE_DIR to a writable "
                          "folder): it is compiled again in every process", RuntimeWarning, stacklevel=2)
            return njit(**options)(function)
    return decorate


# FNV-1a, 64 bits: the hash of a normalised word's UTF-8 bytes
FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)

SIMPLE, SEPARATOR, MAPPED, UNICODE = 0, 1, 2, 3  # the classes of a code point (decontamination.code_points)


@compiled(inline="always")
def _code_point(data, i):  # pragma: no cover - compiled
    """The code point starting at ``data[i]`` (a lead byte of valid UTF-8) and its length."""
    b = np.int64(data[i])
    if b < 0xE0:
        return ((b & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F), 2
    if b < 0xF0:
        return ((b & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (np.int64(data[i + 2]) & 0x3F), 3
    return (((b & 0x07) << 18) | ((np.int64(data[i + 1]) & 0x3F) << 12) | ((np.int64(data[i + 2]) & 0x3F) << 6)
            | (np.int64(data[i + 3]) & 0x3F)), 4


LETTER, BREAK, DIGIT, LEAD = 0, 1, 2, 3  # what a byte is to ``scan`` (``byte_tables``)


def byte_tables(separator: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per byte value, what ``scan`` does with it, in a raw text (row 0) and in a text the
    Unicode rules were applied to (row 1, where only ``separator`` bytes still act); and the
    byte a letter becomes (ASCII lowercase). One table lookup per byte and the common case
    first: a chain of tests per byte (letter? uppercase? break?) made the pass 1.5 times as slow."""
    actions = np.full((2, 256), LETTER, np.uint8)
    actions[:, separator] = BREAK
    actions[0, ord("0"):ord("9") + 1] = DIGIT
    actions[0, 0xC0:] = LEAD  # (continuation bytes 0x80-0xBF never start a code point)
    lowered = np.arange(256, dtype=np.uint8)
    lowered[ord("A"):ord("Z") + 1] += 32
    return actions, lowered


@compiled(inline="always")
def _flag(bits, slot):  # pragma: no cover - compiled
    """Whether flag ``slot`` of a packed bitmap (``numpy.packbits``, little bit order) is set."""
    return (bits[slot >> 3] >> (slot & 7)) & 1


@compiled(nogil=True)
def scan(data, offsets, raw, rules, emit, index):  # pragma: no cover - compiled
    """Every text's words, normalised, in one pass over the bytes; with ``emit``, the words
    themselves, and with an ``index``, per text the first benchmark one of whose windows it
    holds.

    ``data`` holds the UTF-8 texts back to back, text ``t`` in ``data[offsets[t]:offsets[t+1]]``.
    ``rules`` is (``actions``, ``lowered``, ``classes``, ``mapped_to``, ``mapped_bytes``):
    ``byte_tables`` and ``decontamination.code_points``. A text with ``raw[t]`` set is
    ASCII-lowercased, its numbers (ASCII digits, at most one ``.`` or ``,`` then digits)
    become ``0``, and each of its other code points is, by its class in ``classes``: a word's
    letter (``SIMPLE``), a word break (``SEPARATOR``), or replaced by what the Unicode rules
    make of it (``MAPPED``: the bytes ``mapped_bytes[mapped_to[code]:mapped_to[code + 1]]``,
    maybe none). A raw text holding a code point of class ``UNICODE`` (or beyond the table)
    is marked ``needed`` and left without words or match: the caller
    applies the Unicode rules to it (``decontamination.unicode_rules``) and scans it again
    with ``raw[t]`` unset, where only the ASCII separators are left to break words. A word's
    hash is FNV-1a (64 bits) of its bytes.

    Each text is read in two loops. The first reads its bytes into word hashes. A letter
    or an ASCII break, nearly every byte, is taken without a branch on which it is: the
    hash, the word count and the store are updated with masks. (A branch there mispredicted
    at every word's end: what that saves depends on the texts, docs/exports.md.) The second,
    when matching, goes over the text's words.

    ``index`` is (``pairs``, ``multipliers``, ``lengths``, ``starts``, ``hashes``,
    ``owners``, ``windows``, ``shift``), decontamination's ``NgramTables`` (no lengths: no
    matching). Along a text, ``run`` counts the words ending here that are linked, each to the
    one before, by a pair some benchmark text holds (``pairs``, a packed bitmap of
    ``decontamination.pair_hashes``). A window of ``lengths[k]`` words ending here is hashed
    only when the run covers it (``decontamination.window_hashes``'s hash), looked up in the
    packed bitmap ``windows`` first, then in the sorted ``hashes[starts[k]:starts[k+1]]``. A
    bitmap's slot is a hash's top bits (``>> shift``). A text holding a window of the first
    benchmark (owner 0) is matched no further.

    Returns (with ``emit``: the words' bytes back to back, where each word ends in them, each
    text's first word, each word's hash; else empty arrays), per text the smallest owner of a
    window it holds, else -1, and ``needed``."""
    byte_actions, lowered, classes, mapped_to, mapped_bytes = rules
    pairs, multipliers, lengths, starts, table, owners, windows, shift = index
    texts = len(offsets) - 1
    capacity = offsets[texts] - offsets[0] if emit else 0
    out = np.empty(capacity, np.uint8)
    ends = np.empty(capacity // 2 + texts + 1 if emit else 0, np.int64)  # a word is a byte and a break, or ends a text
    hashes = np.empty(len(ends), np.uint64)
    first_word = np.zeros(texts + 1 if emit else 0, np.int64)
    found = np.full(texts, -1, np.int64)
    needed = np.zeros(texts, np.bool_)
    matching = len(lengths) > 0
    shortest = lengths[0] if matching else 1
    longest_text = 0
    if not emit:
        for t in range(texts):
            longest_text = max(longest_text, offsets[t + 1] - offsets[t])
    # where a text's words go: with emit, after the words before it; else into a scratch
    # array, as long as the longest text's words can be (8 bytes per 2 of that text: an array
    # grown as a text needs, tried, made the pass 8 times as slow, as numba then counts
    # references to it at every byte)
    word_hashes = hashes if emit else np.empty(longest_text // 2 + 2, np.uint64)
    written = 0  # bytes of words
    count = 0  # words
    for t in range(texts):
        if emit:
            first_word[t] = count
        text_written = written  # where this text's words start in `out`
        first = count if emit else 0
        words = first  # one more than the text's last word so far
        actions = byte_actions[0] if raw[t] else byte_actions[1]
        i = offsets[t]
        end = offsets[t + 1]
        h = FNV_OFFSET
        length = 0  # bytes of the word being read
        while i < end:
            c = data[i]
            action = actions[c]
            if action <= BREAK:  # a letter (extends the word) or a break (ends one, if any)
                letter = np.int64(1 - action)
                keep = -letter  # all ones for a letter, else zero
                if emit:
                    out[written] = lowered[c]
                    ends[words] = written
                    written += letter
                word_hashes[words] = h  # kept when a word ends here, else overwritten
                words += (length > 0) & (action == BREAK)
                h = (((h ^ np.uint64(lowered[c])) * FNV_PRIME) & np.uint64(keep)) | (FNV_OFFSET & np.uint64(~keep))
                length = (length + 1) & keep
                i += 1
                continue
            if action == DIGIT:  # a number, to one `0`
                i += 1
                while i < end and 48 <= data[i] <= 57:
                    i += 1
                if i + 1 < end and (data[i] == 46 or data[i] == 44) and 48 <= data[i + 1] <= 57:
                    i += 2
                    while i < end and 48 <= data[i] <= 57:
                        i += 1
                if emit:
                    out[written] = 48
                    written += 1
                h = (h ^ np.uint64(48)) * FNV_PRIME
                length += 1
                continue
            # LEAD: a code point beyond ASCII, by its class
            code, size = _code_point(data, i)
            kind = classes[code] if code < len(classes) else UNICODE
            if kind == SIMPLE:  # its lead byte now, the rest as letters of their own
                if emit:
                    out[written] = c
                    written += 1
                h = (h ^ np.uint64(c)) * FNV_PRIME
                length += 1
                i += 1
            elif kind == MAPPED:  # what the Unicode rules make of it, maybe nothing
                i += size
                for k in range(mapped_to[code], mapped_to[code + 1]):
                    if emit:
                        out[written] = mapped_bytes[k]
                        written += 1
                    h = (h ^ np.uint64(mapped_bytes[k])) * FNV_PRIME
                    length += 1
            elif kind == SEPARATOR:
                i += size
                if length > 0:
                    if emit:
                        ends[words] = written
                    word_hashes[words] = h
                    words += 1
                    h = FNV_OFFSET
                    length = 0
            else:
                needed[t] = True
                break
        if needed[t]:
            if emit:  # its words so far are dropped: they are read again after the rules
                written = text_written
            continue
        if length > 0:  # the word the text ends with
            if emit:
                ends[words] = written
            word_hashes[words] = h
            words += 1
        if emit:
            count = words
        if not matching:
            continue
        run = 0
        previous = np.uint64(0)
        for w in range(first, words):
            h = word_hashes[w]
            # (the first word: run is 0, so it is 1 whatever the flag)
            run = 1 + run * _flag(pairs, np.int64((previous * multipliers[0] + h * multipliers[1]) >> shift))
            previous = h
            if run < shortest:
                continue
            for k in range(len(lengths)):
                n = lengths[k]
                if run < n:
                    break
                window = np.uint64(0)
                for j in range(n):
                    window += word_hashes[w - n + 1 + j] * multipliers[j]
                if not _flag(windows, np.int64(window >> shift)):
                    continue
                at = starts[k] + np.searchsorted(table[starts[k]:starts[k + 1]], window)
                if at < starts[k + 1] and table[at] == window and (found[t] < 0 or owners[at] < found[t]):
                    found[t] = owners[at]
            if found[t] == 0:  # no earlier benchmark to find
                break
    if emit:
        first_word[texts] = count
    return out[:written], ends[:count], first_word, hashes[:count], found, needed
