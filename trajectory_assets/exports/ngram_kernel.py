"""Decontamination's two hot loops, compiled by numba: texts to word hashes, and word hashes
to the first benchmark whose n-gram they hold. ``decontamination.py`` owns the rules and
the index; this module only runs them fast.

Why compiled: done with Arrow's string kernels and numpy, the same work passed over each
text five times (lowercase, a number regex, a punctuation table, a whitespace split, a
vocabulary lookup) and cost about 45% of ingest at 1 GB (``bench.decontamination``). One
pass per byte and one per word does it in a fraction of that.

Imported only where an index is used (numba's own import costs about 0.25 s), and compiled
once per machine (``cache=True`` keeps the machine code beside this file, in
``__pycache__``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# FNV-1a, 64 bits: the hash of a normalised word's UTF-8 bytes
FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)


SIMPLE, SEPARATOR, MAPPED, UNICODE = 0, 1, 2, 3  # the classes of a code point (decontamination.code_points)


@njit(cache=True, inline="always")
def _code_point(data, i):  # pragma: no cover - compiled
    """The code point starting at ``data[i]`` (a lead byte of valid UTF-8) and its length."""
    b = np.int64(data[i])
    if b < 0xE0:
        return ((b & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F), 2
    if b < 0xF0:
        return ((b & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (np.int64(data[i + 2]) & 0x3F), 3
    return (((b & 0x07) << 18) | ((np.int64(data[i + 1]) & 0x3F) << 12) | ((np.int64(data[i + 2]) & 0x3F) << 6)
            | (np.int64(data[i + 3]) & 0x3F)), 4


@njit(cache=True, nogil=True)
def needs_unicode_rules(data, offsets, classes):  # pragma: no cover - compiled
    """Per text, whether it holds a code point of class ``UNICODE`` (or beyond ``classes``):
    one that the Unicode rules would change (``decontamination.unicode_rules``)."""
    texts = len(offsets) - 1
    needed = np.zeros(texts, np.bool_)
    for t in range(texts):
        i = offsets[t]
        end = offsets[t + 1]
        while i < end:
            if data[i] < 0x80:
                i += 1
                continue
            code, length = _code_point(data, i)
            if code >= len(classes) or classes[code] == UNICODE:
                needed[t] = True
                break
            i += length
    return needed


LETTER, UPPER, DIGIT, BREAK, LEAD = 0, 1, 2, 3, 4  # what a byte is to ``normalise`` (``byte_actions``)


def byte_actions(separator: np.ndarray) -> np.ndarray:
    """Per byte value, what ``normalise`` does with it: in a raw text (row 0) and in a text the
    Unicode rules were applied to (row 1, where only ``separator`` bytes still act)."""
    actions = np.full((2, 256), LETTER, np.uint8)
    actions[:, separator] = BREAK
    actions[0, ord("A"):ord("Z") + 1] = UPPER
    actions[0, ord("0"):ord("9") + 1] = DIGIT
    actions[0, 0xC0:] = LEAD  # (continuation bytes 0x80-0xBF never start a code point)
    return actions


@njit(cache=True, nogil=True)
def normalise(data, offsets, raw, actions, classes, mapped_to, mapped_bytes):  # pragma: no cover - compiled
    """Every text's words, normalised, in one pass over the bytes.

    ``data`` holds the UTF-8 texts back to back, text ``t`` in ``data[offsets[t]:offsets[t+1]]``.
    A text with ``raw[t]`` set is ASCII-lowercased, its numbers (ASCII digits, at most one
    ``.`` or ``,`` then digits) become ``0``, and each of its other code points is, by its
    class in ``classes``: a word's letter (``SIMPLE``), a word break (``SEPARATOR``), or
    replaced by what the Unicode rules make of it (``MAPPED``: the bytes
    ``mapped_bytes[mapped_to[code]:mapped_to[code + 1]]``, maybe none); it holds none that
    needs the Unicode rules on the whole text (``needs_unicode_rules``). The other texts had
    the Unicode rules applied already (``decontamination.unicode_rules``), and only their
    ASCII separators are left to break words (``byte_actions``).

    Returns (the words' bytes back to back, where each word ends in them, each text's first
    word, and each word's 64-bit FNV-1a hash)."""
    texts = len(offsets) - 1
    out = np.empty(offsets[texts] - offsets[0], np.uint8)
    ends = np.empty((offsets[texts] - offsets[0]) // 2 + texts + 1, np.int64)
    hashes = np.empty(len(ends), np.uint64)
    first_word = np.empty(texts + 1, np.int64)
    written = 0  # bytes in `out`
    count = 0  # words
    for t in range(texts):
        first_word[t] = count
        table = actions[0] if raw[t] else actions[1]
        i = offsets[t]
        end = offsets[t + 1]
        word_start = written
        h = FNV_OFFSET
        while i <= end:
            action = table[data[i]] if i < end else BREAK  # (the text's end ends its last word)
            if action == LETTER:
                letter = np.uint64(data[i])
                i += 1
            elif action == UPPER:
                letter = np.uint64(data[i]) + np.uint64(32)
                i += 1
            elif action == DIGIT:  # a number, to one `0`
                i += 1
                while i < end and 48 <= data[i] <= 57:
                    i += 1
                if i + 1 < end and (data[i] == 46 or data[i] == 44) and 48 <= data[i + 1] <= 57:
                    i += 2
                    while i < end and 48 <= data[i] <= 57:
                        i += 1
                letter = np.uint64(48)
            elif action == LEAD:
                code, length = _code_point(data, i)
                kind = classes[code]
                if kind == SIMPLE:  # its lead byte now, the rest as letters of their own
                    letter = np.uint64(data[i])
                    i += 1
                else:
                    i += length
                    if kind == MAPPED:
                        for k in range(mapped_to[code], mapped_to[code + 1]):
                            out[written] = mapped_bytes[k]
                            written += 1
                            h = (h ^ np.uint64(mapped_bytes[k])) * FNV_PRIME
                        continue
                    action = BREAK  # a SEPARATOR
            else:
                i += 1
            if action == BREAK:
                if written > word_start:
                    ends[count] = written
                    hashes[count] = h
                    count += 1
                    word_start = written
                    h = FNV_OFFSET
                continue
            out[written] = letter
            written += 1
            h = (h ^ letter) * FNV_PRIME
    first_word[texts] = count
    return out[:written], ends[:count], first_word, hashes[:count]


@njit(cache=True, inline="always")
def _flag(bits, slot):  # pragma: no cover - compiled
    """Whether flag ``slot`` of a packed bitmap (``numpy.packbits``, little bit order) is set."""
    return (bits[slot >> 3] >> (slot & 7)) & 1


@njit(cache=True, nogil=True)
def first_matches(hashes, first_word, pairs, multipliers, lengths, table_starts, table_hashes, table_owners,
                  windows, shift):  # pragma: no cover - compiled
    """Per text, the smallest owner of an indexed window its words hold, else -1.

    Along a text, ``run`` counts the words ending here that are linked, each to the one
    before, by a pair of word hashes that some benchmark text holds (``pairs``, a packed
    bitmap of ``decontamination.pair_slots``). A window of ``lengths[k]`` words ending here
    is hashed only when the run covers it (``decontamination.window_hashes``'s hash), looked
    up in the packed bitmap ``windows`` first, then in the sorted
    ``table_hashes[table_starts[k]:table_starts[k+1]]``. A slot of either bitmap is a hash's
    top bits (``>> shift``)."""
    texts = len(first_word) - 1
    found = np.full(texts, -1, np.int64)
    longest = lengths[len(lengths) - 1]
    recent = np.zeros(longest, np.uint64)  # the last `longest` word hashes, as a ring
    for t in range(texts):
        run = 0
        previous = np.uint64(0)
        seen = 0
        for w in range(first_word[t], first_word[t + 1]):
            word = hashes[w]
            if run > 0 and _flag(pairs, np.int64((previous * multipliers[0] + word * multipliers[1]) >> shift)):
                run += 1
            else:
                run = 1
            previous = word
            recent[seen % longest] = word
            seen += 1
            for k in range(len(lengths)):
                length = lengths[k]
                if run < length:
                    break
                window = np.uint64(0)
                for j in range(length):
                    window += recent[(seen - length + j) % longest] * multipliers[j]
                if not _flag(windows, np.int64(window >> shift)):
                    continue
                low = table_starts[k]
                high = table_starts[k + 1]
                at = low + np.searchsorted(table_hashes[low:high], window)
                if at < high and table_hashes[at] == window:
                    owner = table_owners[at]
                    if found[t] < 0 or owner < found[t]:
                        found[t] = owner
    return found
