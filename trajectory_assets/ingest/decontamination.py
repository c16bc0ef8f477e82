"""Benchmark decontamination: which trajectories share text or a task id with an evaluation set.

A benchmark (``decontamination.benchmarks`` in the config) is a local JSON-lines or Parquet
file, or a folder written by ``datasets.save_to_disk``. Two tests, either one enough:

- **text**: a trajectory whose user or assistant turns hold one of the benchmark's word
  n-grams (``decontamination.ngram``, 13 words by default, as NeMo Curator's
  ``TaskDecontamination``). Text is normalised as datatrove's ``simplify_text`` does by
  default (lowercase; every number to ``0``; datatrove's punctuation characters to spaces;
  accents stripped) and split on whitespace. A benchmark text shorter than the n-gram but
  of at least ``MIN_WORDS`` (8) words is matched whole, as NeMo Curator does; shorter ones
  are ignored. One n-gram is enough, as datatrove's ``NGramsDecontFilter`` decides: the
  whole trajectory is left out (NeMo Curator cuts the n-gram out of a pretraining
  document instead; a conversation cut in the middle is no training row);
- **id**: a trajectory carrying one of the benchmark's ids (``id_field``, e.g. SWE-bench's
  ``instance_id``) under ``task_id_field`` (by default the same name) in its verifier inputs
  (NeMo Gym's materialized inputs), the rollout's own extra keys (``metadata``) or the
  request's ``metadata``.

Checked, per trajectory: the text of user turns, and of assistant turns their content,
``reasoning_content`` and tool-call arguments. System prompts (the harness's instructions,
the same for every task) and tool results (what the environment returned, never trained
on) are not.

Fast and streaming: the benchmark side is read once per process into sorted arrays of
64-bit window hashes (over 64-bit word hashes, so no n-gram string is ever built);
trajectories are checked a block at a time in one compiled pass over their bytes
(``ngram_kernel.scan``), normalising and hashing each word of a text, then hashing only the
windows whose every pair of neighbouring words some benchmark text holds. The Unicode rules
run in Arrow, and only on a text holding a code point the pass cannot handle alone
(``code_points``): the pass marks it, and scans it again once they ran.

No Dagster here; ``defs/exports.py`` loads the index and reports a ``BenchmarkError``.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajectory_assets.chat.trajectory import Trajectory
from trajectory_assets.config import BenchmarkConfig, DecontaminationConfig

MIN_WORDS = 8  # NeMo Curator's min_ngram_size: shorter benchmark texts are ignored
# the rules' version is this file and its compiled loops: after any edit, the flags stored
# beside batches are recomputed by the export steps (no batch is ingested again: ingest's
# code version follows neither module, see defs/code_versions.py)
RULES_FILES = (Path(__file__), Path(__file__).with_name("ngram_kernel.py"))
RULES_SHA256 = hashlib.sha256(b"".join(path.read_bytes() for path in RULES_FILES)).hexdigest()
REASON_PREFIX = "contaminated:"

# datatrove's PUNCTUATION (src/datatrove/utils/text.py): these characters and the control
# characters other than tab and newline become spaces
PUNCTUATION = "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»" + "".join(
    map(chr, (x for a, b in ((0, 9), (11, 13), (13, 32), (127, 160)) for x in range(a, b))))
# datatrove's NUMBERS_PATTERN: a number, with at most one decimal or thousands separator
_NUMBER_SEPARATORS = ".,،٫⎖⎗⎘"
_NUMBERS = rf"\p{{Nd}}+(?:[{_NUMBER_SEPARATORS}]\p{{Nd}}+)?"
# the Unicode spaces (Python's str.split splits on them)
_SPACES_BEYOND_ASCII = (0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)
# datatrove's punctuation beyond ASCII, and the Unicode spaces
_UNICODE_SPACES = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in dict.fromkeys(PUNCTUATION) if ord(c) >= 128) + "".join(
    f"\\x{{{code:x}}}" for code in _SPACES_BEYOND_ASCII) + "]+"
# per byte, whether it ends a word: the ASCII members of PUNCTUATION and the ASCII whitespace
# (bytes >= 0x80 never do, so UTF-8 sequences stay whole)
_SEPARATORS = np.array([b < 128 and (chr(b) in PUNCTUATION or chr(b).isspace()) for b in range(256)], dtype=np.bool_)
# the bitmaps of word pairs and of windows hold at least 8 flags per distinct entry of the
# larger of the two (a power of two, within these bounds): 1 MiB each for a 10,000-item set,
# where the fixed 2 MiB before fell out of the CPU's cache between ingest's own work more
# (measured once, inside ingest of the 250 MB benchmark corpus: with 2**24 flags each, the
# texts' part took about 10% longer than with 2**22)
_BITMAP_FLAGS_PER_ENTRY = 8
_BITMAP_BITS = (16, 27)  # log2 of the fewest and most flags
# odd 64-bit multipliers of the window hash, one per position in the window (fixed: the
# same n-gram hashes the same in every process)
_MULTIPLIERS = np.random.default_rng(13).integers(0, 2**63, size=256, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
# NgramTables.kernel_index of no benchmark text: normalise only (the same types, so the same compiled code)
_NO_INDEX = (np.zeros(0, np.uint8), _MULTIPLIERS, np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.uint64),
             np.zeros(0, np.int64), np.zeros(0, np.uint8), np.uint64(64 - _BITMAP_BITS[0]))


class BenchmarkError(Exception):
    """A benchmark that cannot be read as configured (missing file, missing field)."""


@cache
def code_points() -> tuple[np.ndarray, ...]:
    """How ``ngram_kernel.scan`` treats each byte (``byte_tables``), and each code point from
    0x80 to 0x1FFFF in a text that needs no ``unicode_rules``: (the bytes' actions, the byte
    each letter becomes, the code points' classes, and for a ``MAPPED`` one where its
    replacement starts in, and the bytes of, the replacements: ``scan``'s ``rules``).

    - ``SEPARATOR``: datatrove's punctuation and the Unicode spaces, and a code point the
      rules make into ASCII punctuation alone (``≠``: ``=`` and a combining mark);
    - ``SIMPLE``: a word's letter that no rule changes;
    - ``MAPPED``: one whose lowercase, in NFD without combining marks, is other letters
      (``É`` -> ``e``, ``Δ`` -> ``δ``, a variation selector -> nothing): what the rules make
      of a text is then what they make of each code point, in order;
    - ``UNICODE``: any other (a decimal digit beyond ASCII, a number separator, a result
      holding a digit, a break or a combining mark that stays, or longer in UTF-8, one
      unassigned in Python's Unicode database, or beyond the Basic Multilingual
      Plane outside the emoji blocks): a text holding one goes through ``unicode_rules`` whole.

    Checked against Arrow's own Unicode rules, code point by code point
    (tests/ingest/test_decontamination.py)."""
    from trajectory_assets.ingest.ngram_kernel import MAPPED, SEPARATOR, SIMPLE, UNICODE, byte_tables

    classes = np.full(0x20000, UNICODE, np.uint8)
    classes[:0x80] = SIMPLE  # (ASCII is never looked up)
    breaks = {c for c in PUNCTUATION} | {chr(code) for code in _SPACES_BEYOND_ASCII}
    replacements: dict[int, bytes] = {}
    for code in (*range(0x80, 0xD800), *range(0xE000, 0x10000), *range(0x1F000, 0x1FC00)):
        char = chr(code)
        if char in _NUMBER_SEPARATORS or unicodedata.category(char) in ("Cn", "Nd"):
            # numbers are replaced before breaks (datatrove's punctuation holds `１`); an
            # unassigned code point in Python's Unicode version may be assigned in Arrow's
            continue
        if char in breaks:
            classes[code] = SEPARATOR
            continue
        if (char.lower() == char and unicodedata.is_normalized("NFD", char) and not unicodedata.combining(char)
                and unicodedata.category(char) != "Mn"):
            classes[code] = SIMPLE  # most of them, told apart first: the test below finds the same, slower
            continue
        result = "".join(c for c in unicodedata.normalize("NFD", char.lower()) if unicodedata.category(c) != "Mn")
        if result and all(c < "\x80" and _SEPARATORS[ord(c)] for c in result):
            # `≠` is `=` and a mark: a break, as the ASCII punctuation is replaced after NFD (the
            # punctuation beyond ASCII before it, so a result holding some is no break)
            classes[code] = SEPARATOR
            continue
        if any(c in breaks or c in _NUMBER_SEPARATORS or unicodedata.category(c) == "Nd" or unicodedata.combining(c)
               or (c < "\x80" and _SEPARATORS[ord(c)]) for c in result):
            continue
        if result == char:
            classes[code] = SIMPLE
        elif len(result.encode()) <= len(char.encode()):  # (normalised text is never longer than the text)
            classes[code] = MAPPED
            replacements[code] = result.encode()
    mapped_to = np.zeros(0x20001, np.int64)
    for code, replacement in replacements.items():
        mapped_to[code + 1] = len(replacement)
    mapped_to = np.cumsum(mapped_to)
    mapped_bytes = np.frombuffer(b"".join(replacements[code] for code in sorted(replacements)), np.uint8)
    return *byte_tables(_SEPARATORS), classes, mapped_to, mapped_bytes


def unicode_rules(texts: pa.Array) -> pa.Array:
    """``texts`` with the rules beyond ASCII applied: lowercase by Unicode rules, every
    ``\\p{Nd}`` number to ``0``, datatrove's punctuation beyond ASCII and the Unicode spaces
    to spaces, accents stripped (NFD without combining marks). Only the ASCII punctuation is
    left (to ``normalise``); numbers are replaced only once (a second pass would turn
    datatrove's ``0,0`` of ``1,000,000`` into ``0``)."""
    ruled = pc.replace_substring_regex(pc.utf8_lower(texts), _NUMBERS, "0")
    ruled = pc.replace_substring_regex(ruled, _UNICODE_SPACES, " ")
    return pc.replace_substring_regex(pc.utf8_normalize(ruled, form="NFD"), r"\p{Mn}+", "")


@dataclass
class Normalised:
    """Texts normalised (``normalise``): their words' bytes back to back, where each word
    ends in them, each text's first word (and the end: one more than the texts), and each
    word's 64-bit hash (of its bytes)."""

    data: np.ndarray
    ends: np.ndarray
    first_word: np.ndarray
    hashes: np.ndarray

    def words(self) -> pa.ListArray:
        """Each text as its list of words."""
        offsets = pa.array(np.concatenate([[0], self.ends]), pa.int64())
        values = pa.LargeStringArray.from_buffers(len(self.ends), offsets.buffers()[1], pa.py_buffer(self.data))
        return pa.LargeListArray.from_arrays(pa.array(self.first_word, pa.int64()), values)


def normalise(texts: pa.Array) -> Normalised:
    """Each text normalised as datatrove's ``simplify_text`` does by default (lowercase; every
    number to ``0``; its punctuation characters, control characters and whitespace to word
    breaks; accents stripped) and split into words: the rules beyond ASCII by
    ``unicode_rules`` (Arrow), the rest in one compiled pass over the bytes (``ngram_kernel``).

    >>> normalise(pa.array(["Q: What's the Capital of France, in 2024?  Café — Paris!"])).words().to_pylist()
    [['q', 'what', 's', 'the', 'capital', 'of', 'france', 'in', '0', 'cafe', 'paris']]
    """
    return Normalised(*_scan(texts, True, _NO_INDEX)[:4])


def _scan(texts: pa.Array, emit: bool, index: tuple) -> tuple[np.ndarray, ...]:
    """``ngram_kernel.scan`` of ``texts``; the texts it marks as needing the Unicode rules go
    through them and are scanned again (with ``emit``, all the texts: their words stay in order)."""
    from trajectory_assets.ingest import ngram_kernel

    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if texts.null_count:
        texts = pc.fill_null(texts, "")
    rules = code_points()
    raw = np.ones(len(texts), np.bool_)
    scanned = ngram_kernel.scan(*_buffers(texts), raw, rules, emit, index)
    needed = scanned[5]
    if not needed.any():
        return scanned
    mask = pa.array(needed)
    ruled = unicode_rules(texts.filter(mask))
    if emit:
        texts = pc.replace_with_mask(texts, mask, ruled)
        return ngram_kernel.scan(*_buffers(texts), ~needed, rules, emit, index)
    found = scanned[4]  # (in place)
    found[needed] = ngram_kernel.scan(*_buffers(ruled), np.zeros(len(ruled), np.bool_), rules, emit, index)[4]
    return scanned


def _buffers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A string array's bytes and its texts' offsets in them, as numpy arrays (no copy of the bytes)."""
    _, offsets, data = texts.buffers()
    width = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    offsets = np.frombuffer(offsets, width, len(texts) + 1, texts.offset * np.dtype(width).itemsize).astype(np.int64)
    return (np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)), offsets


def words(text: str) -> list[str]:
    """One text's normalised words.

    >>> words("The 1,000 cafés—OPEN!")
    ['the', '0', 'cafes', 'open']
    """
    return normalise(pa.array([text], pa.string())).words()[0].as_py()


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (a sort: numpy's hash-based unique is slower on 64-bit hashes).

    >>> _distinct(np.array([3, 1, 3], dtype=np.uint64)).tolist()
    [1, 3]
    """
    values = np.sort(values)
    return values[np.concatenate([[True], values[1:] != values[:-1]])] if len(values) else values


def first_owner(found: np.ndarray, positions: np.ndarray, owners: np.ndarray) -> None:
    """Sets ``found[p]`` to the smallest owner seen at ``p`` (over what ``found`` holds, -1 = none).

    >>> found = np.array([-1, 3, -1]); first_owner(found, np.array([0, 0, 1, 1]), np.array([2, 1, 0, 5])); found.tolist()
    [1, 0, -1]
    """
    if not len(positions):
        return
    order = np.lexsort((owners, positions))
    unique, first = np.unique(positions[order], return_index=True)
    smallest = owners[order][first]
    current = found[unique]
    found[unique] = np.where((current == -1) | (smallest < current), smallest, current)


def pair_hashes(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each pair of word hashes, left then right (``ngram_kernel.scan``
    computes the same; a bitmap's slot is its top bits)."""
    with np.errstate(over="ignore"):
        return left * _MULTIPLIERS[0] + right * _MULTIPLIERS[1]


def window_hashes(words: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
    """A 64-bit hash of the n word hashes from each start: the sum of each times the
    multiplier of its place, in wrapping arithmetic (``ngram_kernel.scan`` computes
    the same).

    >>> words = np.array([5, 7, 5, 7], dtype=np.uint64)
    >>> hashes = window_hashes(words, np.array([0, 1, 2]), 2); bool(hashes[0] == hashes[2] != hashes[1])
    True
    """
    hashes = np.zeros(len(starts), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(n):
            hashes += words[starts + k] * _MULTIPLIERS[k]
    return hashes


def bitmap_shift(entries: int) -> np.uint64:
    """How far a 64-bit hash is shifted to its slot in a bitmap of ``entries`` distinct
    hashes: about ``_BITMAP_FLAGS_PER_ENTRY`` flags each, a power of two within ``_BITMAP_BITS``.

    >>> [64 - int(bitmap_shift(entries)) for entries in (0, 873_400, 10**9)]
    [16, 23, 27]
    """
    fewest, most = _BITMAP_BITS
    bits = min(max(int(entries * _BITMAP_FLAGS_PER_ENTRY - 1).bit_length(), fewest), most)
    return np.uint64(64 - bits)


def _bitmap(hashes: np.ndarray, shift: np.uint64) -> np.ndarray:
    """A packed bitmap of ``2**(64 - shift)`` flags, the slot of each hash (its top bits) set."""
    flags = np.zeros(1 << (64 - int(shift)), dtype=bool)
    flags[hashes >> shift] = True
    return np.packbits(flags, bitorder="little")


@dataclass
class BenchmarkSummary:
    """What the manifest says of one benchmark."""

    name: str
    path: str
    sha256: str  # of the file (of a save_to_disk folder's data files, in name order)
    items: int  # rows read
    ngrams: int | None  # distinct n-grams indexed (text test); None until counted
    ids: int  # distinct ids (id test)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "sha256": self.sha256, "items": self.items,
                "ngrams": self.ngrams, "ids": self.ids}


@dataclass
class BenchmarkIndex:
    """Every configured benchmark's texts and ids, read once per process. The n-gram tables
    (``NgramTables``: the sorted window hashes per length, the pair and window bitmaps) are built on first use:
    an export step whose batches all carry current flags never needs them."""

    ngram: int
    summaries: list[BenchmarkSummary]
    texts: list[pa.Array] = field(default_factory=list)  # per benchmark (config order), its texts
    # (task_id_field, id) -> first benchmark holding it
    ids: dict[tuple[str, str], int] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # the decontamination section it was built from

    @cached_property
    def compares_text(self) -> bool:
        return any(len(texts) for texts in self.texts)

    @cached_property
    def tables(self) -> NgramTables:
        """The n-gram tables, built on first use (and the summaries' n-gram counts with them)."""
        tables = NgramTables.build(self.texts, self.ngram)
        for summary, count in zip(self.summaries, tables.counts):
            summary.ngrams = count
        return tables

    @property
    def names(self) -> list[str]:
        return [summary.name for summary in self.summaries]

    def counted(self) -> list[BenchmarkSummary]:
        """The summaries with their n-gram counts (built now unless flags gave them)."""
        if any(summary.ngrams is None for summary in self.summaries):
            self.tables
        return self.summaries

    @cached_property
    def fingerprint(self) -> str:
        """What the matches depend on: the rules (``RULES_FILES``), the n-gram and every
        benchmark's name, fields and data (its SHA-256)."""
        return hashlib.sha256(orjson.dumps({"rules": RULES_SHA256, "ngram": self.ngram, "min_words": MIN_WORDS,
                                            "benchmarks": [[summary.name, summary.sha256] for summary in self.summaries],
                                            "config": self.config})).hexdigest()[:32]

    @cached_property
    def id_fields(self) -> list[str]:
        return sorted({path for path, _ in self.ids})

    def text_matches(self, texts: pa.Array) -> np.ndarray:
        """Per text, the first benchmark (index) one of whose n-grams it holds, else -1 (no
        text read when the benchmarks hold no window: every text shorter than ``MIN_WORDS``)."""
        if not self.compares_text or len(texts) == 0 or not len(self.tables.lengths):
            return np.full(len(texts), -1, dtype=np.int64)
        return self.tables.first_matches(texts)


def _read_rows(benchmark: BenchmarkConfig) -> tuple[list[dict[str, Any]], str]:
    """The benchmark's rows (only the columns it names) and the SHA-256 of its data."""
    path = Path(benchmark.path).expanduser()
    if not path.exists():
        raise BenchmarkError(f"decontamination benchmark {benchmark.name!r}: {path} does not exist")
    columns = sorted({name.split(".")[0] for name in (*benchmark.text_fields, *([benchmark.id_field] if benchmark.id_field else []))})
    if path.is_dir():
        return _read_saved_dataset(benchmark, path, columns)
    data = path.read_bytes()  # read once: its digest and its rows
    digest = hashlib.sha256(data).hexdigest()
    if path.suffix == ".parquet":
        try:
            table = pq.read_table(pa.BufferReader(data))
        except (pa.ArrowInvalid, OSError) as error:
            raise BenchmarkError(f"decontamination benchmark {benchmark.name!r}: {path} is not Parquet: {error}") from None
        _require_columns(benchmark, path, table.column_names, columns)
        return table.select(columns).to_pylist(), digest
    rows = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise BenchmarkError(f"decontamination benchmark {benchmark.name!r}: {path} line {number} is not JSON "
                                 "(a benchmark is a JSON-lines or .parquet file, or a datasets.save_to_disk folder)"
                                 ) from None
        if not isinstance(row, dict):  # a JSON array file, say: it would compare nothing, silently
            raise BenchmarkError(f"decontamination benchmark {benchmark.name!r}: {path} line {number} is a JSON "
                                 f"{type(row).__name__}, not an object (one benchmark item per line)")
        rows.append(row)
    if rows and not any(all(column in row for column in columns) for row in rows[:1000]):
        _require_columns(benchmark, path, sorted(set().union(*(row.keys() for row in rows[:1000]))), columns)
    return rows, digest


def _read_saved_dataset(benchmark: BenchmarkConfig, path: Path,
                        columns: list[str]) -> tuple[list[dict[str, Any]], str]:
    """A folder written by ``datasets.save_to_disk`` (a Dataset, or a DatasetDict: every split)."""
    try:
        import datasets  # the trainers extra; only needed for a save_to_disk benchmark
    except ImportError:
        raise BenchmarkError(f"decontamination benchmark {benchmark.name!r}: {path} is a folder, read as a "
                             "datasets.save_to_disk dataset, which needs the `datasets` package "
                             "(pip install datasets, or `make trainers`); or export it to JSON lines or Parquet"
                             ) from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as error:
        raise BenchmarkError(f"decontamination benchmark {benchmark.name!r}: {path} is not a "
                             f"datasets.save_to_disk folder: {error}") from None
    parts = list(loaded.values()) if isinstance(loaded, datasets.DatasetDict) else [loaded]
    rows = []
    for part in parts:
        _require_columns(benchmark, path, part.column_names, columns)
        rows += part.select_columns(columns).to_list()
    digest = hashlib.sha256()
    for data in sorted(path.rglob("*.arrow")):
        digest.update(data.read_bytes())
    return rows, digest.hexdigest()


def _require_columns(benchmark: BenchmarkConfig, path: Path, present: Iterable[str], wanted: list[str]) -> None:
    missing = [column for column in wanted if column not in set(present)]
    if missing:
        raise BenchmarkError(f"decontamination benchmark {benchmark.name!r}: {path} has no field "
                             f"{', '.join(missing)} (its fields: {', '.join(sorted(present))})")


def value_at(record: Any, path: str) -> Any:
    """The value at a dotted path of nested dicts, else None.

    >>> value_at({"task": {"id": "50"}}, "task.id"), value_at({"task": 3}, "task.id")
    ('50', None)
    """
    for key in path.split("."):
        if not isinstance(record, dict):
            return None
        record = record.get(key)
    return record


def _texts(value: Any) -> Iterator[str]:
    """A field's texts: a string, or each string of a list (a question's choices)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


def _id_text(value: Any) -> str | None:
    """An id as the string it is compared as (numbers as their JSON text)."""
    if value is None or isinstance(value, (dict, list)):
        return None
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def build_index(config: DecontaminationConfig) -> BenchmarkIndex | None:
    """Every configured benchmark read and indexed; None when none is configured."""
    if not config.benchmarks:
        return None
    n = config.ngram
    texts: list[pa.Array] = []
    summaries = []
    ids: dict[tuple[str, str], int] = {}
    for number, benchmark in enumerate(config.benchmarks):
        rows, digest = _read_rows(benchmark)
        found = [text for row in rows for name in benchmark.text_fields for text in _texts(value_at(row, name))]
        texts.append(pa.array(found, pa.string()))
        benchmark_ids = set()
        if benchmark.id_field:
            for row in rows:
                item_id = _id_text(value_at(row, benchmark.id_field))
                if item_id is not None:
                    benchmark_ids.add(item_id)
                    ids.setdefault((benchmark.task_id_field or benchmark.id_field, item_id), number)
        summaries.append(BenchmarkSummary(benchmark.name, benchmark.path, digest, len(rows), None, len(benchmark_ids)))
    return BenchmarkIndex(n, summaries, texts, ids, config=config.model_dump())


@dataclass
class NgramTables:
    """The benchmarks' texts as the scan looks them up, over word hashes (no word string is
    kept, no n-gram string ever built).

    - ``pairs``: a packed bitmap of the pairs of word hashes some benchmark text holds one
      after the other (``pair_hashes``). A window can match only if each of its pairs of
      neighbours is set: most windows of a text are ruled out by a pair, never hashed;
    - per window length (the n-gram, and the lengths of shorter benchmark texts of at least
      ``MIN_WORDS`` words), the sorted window hashes and the first benchmark (in config
      order) holding each, back to back (``lengths``, ``starts``, ``hashes``, ``owners``);
    - ``windows``: a packed bitmap of the windows' top bits: a window is looked up in the
      sorted hashes only when its bit is set;
    - ``shift``: how far a hash is shifted to its slot in both bitmaps (``bitmap_shift``);
    - ``counts``: distinct n-grams per benchmark."""

    pairs: np.ndarray
    lengths: np.ndarray
    starts: np.ndarray
    hashes: np.ndarray
    owners: np.ndarray
    windows: np.ndarray
    shift: np.uint64
    counts: list[int]

    @classmethod
    def build(cls, texts: list[pa.Array], n: int) -> NgramTables:
        counts = [0] * len(texts)
        pair_parts = []
        by_length: dict[int, list[tuple[np.ndarray, int]]] = {}
        for number, array in enumerate(texts):
            normalised = normalise(array)
            words, offsets = normalised.hashes, normalised.first_word
            text_end = np.repeat(offsets[1:], np.diff(offsets))  # per word, where its text ends
            position = np.arange(len(words))
            linked = np.flatnonzero(position + 1 < text_end)  # the word and the next are in one text
            pair_parts.append(pair_hashes(words[linked], words[linked + 1]))
            starts = np.flatnonzero(text_end - position >= n)
            if len(starts):
                by_length.setdefault(n, []).append((_distinct(window_hashes(words, starts, n)), number))
            # a text shorter than the n-gram but of MIN_WORDS or more is one window of its length
            lengths = np.diff(offsets)
            for length in range(MIN_WORDS, n):
                short = np.flatnonzero(lengths == length)
                if len(short):
                    by_length.setdefault(length, []).append((_distinct(window_hashes(words, offsets[short], length)),
                                                             number))
        table_hashes, table_owners, starts_at = [], [], [0]
        for length in sorted(by_length):
            parts = by_length[length]
            for hashes, number in parts:
                counts[number] += len(hashes)
            hashes = np.concatenate([h for h, _ in parts])
            owners = np.concatenate([np.full(len(h), number, dtype=np.int64) for h, number in parts])
            order = np.lexsort((owners, hashes))  # by hash, the first benchmark first
            hashes, owners = hashes[order], owners[order]
            first = np.concatenate([[True], hashes[1:] != hashes[:-1]])
            table_hashes.append(hashes[first])
            table_owners.append(owners[first])
            starts_at.append(starts_at[-1] + int(first.sum()))
        hashes = np.concatenate(table_hashes) if table_hashes else np.empty(0, np.uint64)
        pairs = _distinct(np.concatenate(pair_parts or [np.empty(0, np.uint64)]))
        shift = bitmap_shift(max(len(pairs), len(hashes)))
        return cls(_bitmap(pairs, shift), np.array(sorted(by_length), dtype=np.int64),
                   np.array(starts_at, dtype=np.int64), hashes,
                   np.concatenate(table_owners) if table_owners else np.empty(0, np.int64),
                   _bitmap(hashes, shift), shift, counts)

    @property
    def kernel_index(self) -> tuple:
        """The tables as ``ngram_kernel.scan`` takes them."""
        return (self.pairs, _MULTIPLIERS, self.lengths, self.starts, self.hashes, self.owners, self.windows,
                self.shift)

    def first_matches(self, texts: pa.Array) -> np.ndarray:
        """Per text, the first benchmark one of whose windows it holds, else -1."""
        return _scan(texts, False, self.kernel_index)[4]


# the trajectory columns the scan reads: messages for the text test; for the id test the
# three places a rollout's task id can be
TEXT_COLUMNS = ["trajectory_id", "messages"]
ID_COLUMNS = ["task_inputs", "metadata", "request"]


def turn_texts(messages: list[dict[str, Any]]) -> Iterator[str]:
    """The texts of a conversation that are compared: user turns; assistant content,
    reasoning and tool-call arguments. Not system prompts, not tool results.

    >>> list(turn_texts([{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
    ...                  {"role": "assistant", "content": None, "reasoning_content": "r",
    ...                   "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
    ...                  {"role": "tool", "content": "t"}]))
    ['q', 'r', '{}']
    """
    for message in messages:
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        content = message.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            yield from (part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
        if role == "assistant":
            if isinstance(message.get("reasoning_content"), str):
                yield message["reasoning_content"]
            for call in message.get("tool_calls") or []:
                arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
                if isinstance(arguments, str):
                    yield arguments


def _id_owner(index: BenchmarkIndex, task_inputs: str | None, metadata: str | None,
              request: str | None) -> int:
    """The first benchmark whose id a trajectory carries, else -1 (its columns as stored: JSON)."""
    request_object = orjson.loads(request) if request is not None else None
    return id_owner(index, None if task_inputs is None else orjson.loads(task_inputs),
                    None if metadata is None else orjson.loads(metadata), request_object)


def id_owner(index: BenchmarkIndex, task_inputs: Any, metadata: Any, request: Any) -> int:
    """The first benchmark whose id a trajectory carries (in its verifier inputs, its extra
    keys or its request's metadata), else -1.

    >>> index = BenchmarkIndex(13, [], ids={("instance_id", "jq-1"): 0})
    >>> id_owner(index, None, {}, {"metadata": {"instance_id": "jq-1"}}), id_owner(index, None, {"instance_id": 2}, None)
    (0, -1)
    """
    places = [place for place in (task_inputs, metadata, (request or {}).get("metadata")) if isinstance(place, dict)]
    owner = -1
    for path in index.id_fields:
        for place in places:
            item_id = _id_text(value_at(place, path))
            number = index.ids.get((path, item_id)) if item_id is not None else None
            if number is not None and (owner == -1 or number < owner):
                owner = number
    return owner


def scan_columns(index: BenchmarkIndex) -> list[str]:
    return [*TEXT_COLUMNS, *(ID_COLUMNS if index.ids else [])]


class CheckedTexts:
    """The texts already checked in one scan, by a 64-bit key of each (Python's string hash):
    the rollouts of one task share their prompt, so a prompt is normalised and hashed once.
    Clean keys are kept sorted in one array (8 bytes a text), matching ones with their
    benchmark. (Two different texts with one key would be taken for the same: about one in
    2**64 per pair.)"""

    def __init__(self) -> None:
        self.clean = np.empty(0, dtype=np.int64)
        self.matching: dict[int, int] = {}

    def owners(self, texts: list[str], index: BenchmarkIndex) -> np.ndarray:
        """Per text, the first benchmark whose n-gram it holds, else -1 (each new distinct text checked once)."""
        keys = np.fromiter(map(hash, texts), dtype=np.int64, count=len(texts))
        distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        owners = np.full(len(distinct), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.clean, distinct), max(len(self.clean) - 1, 0))
        known = (self.clean[at] == distinct) if len(self.clean) else np.zeros(len(distinct), dtype=bool)
        for position in np.flatnonzero(~known):
            owner = self.matching.get(int(distinct[position]))
            if owner is not None:
                owners[position], known[position] = owner, True
        new = np.flatnonzero(~known)
        if len(new):
            checked = index.text_matches(pa.array([texts[first[position]] for position in new], pa.string()))
            owners[new] = checked
            clean = distinct[new[checked < 0]]  # sorted, and none of them in self.clean yet
            self.clean = np.insert(self.clean, np.searchsorted(self.clean, clean), clean)  # (no sort of it all)
            self.matching.update(zip(distinct[new[checked >= 0]].tolist(), checked[checked >= 0].tolist()))
        return owners[inverse]


class Matches:
    """The matches of a stream of trajectories: ``add`` each one's id, the benchmark its task
    id names (-1: none) and its texts, then ``result``. Texts are checked a block of
    trajectories at a time, and only while a text could still name an earlier benchmark than
    the id did: the first benchmark in config order names a match, whichever test found it."""

    BLOCK = 1024

    def __init__(self, index: BenchmarkIndex) -> None:
        self.index = index
        self.checked = CheckedTexts()
        self.found: dict[str, str] = {}
        self.pending: list[tuple[str, int, list[str]]] = []

    def add(self, trajectory_id: str, id_owner: int, texts: Iterable[str]) -> None:
        """``texts`` is read only when it is checked (pass a generator to parse lazily)."""
        if self.index.compares_text and id_owner != 0:
            self.pending.append((trajectory_id, id_owner, list(texts)))
            if len(self.pending) >= self.BLOCK:
                self._check()
        elif id_owner >= 0:
            self.found[trajectory_id] = self.index.names[id_owner]

    def _check(self) -> None:
        owners = np.array([owner for _, owner, _ in self.pending], dtype=np.int64)
        texts = [text for _, _, pieces in self.pending for text in pieces]
        if texts:
            rows = np.repeat(np.arange(len(self.pending)), [len(pieces) for _, _, pieces in self.pending])
            per_text = self.checked.owners(texts, self.index)
            hit = per_text >= 0
            first_owner(owners, rows[hit], per_text[hit])
        for row in np.flatnonzero(owners >= 0):
            self.found[self.pending[row][0]] = self.index.names[owners[row]]
        self.pending.clear()

    def result(self) -> dict[str, str]:
        """trajectory_id -> the name of the benchmark it matches, for every matching one, sorted."""
        self._check()
        return dict(sorted(self.found.items()))


def _stored_texts(messages: str) -> Iterator[str]:
    """The compared texts of a stored conversation (its JSON parsed only when read)."""
    yield from turn_texts(orjson.loads(messages))


def contaminated(chunks: Iterable[Any], index: BenchmarkIndex) -> dict[str, str]:
    """trajectory_id -> the name of the first benchmark (in config order) it matches, for
    every matching trajectory of ``chunks`` (DataFrames of ``scan_columns(index)``)."""
    matches = Matches(index)
    leaves = [f'"{path.split(".")[-1]}"' for path in index.id_fields]
    for chunk in chunks:
        if not len(chunk):
            continue
        columns = [chunk[name].tolist() for name in ID_COLUMNS] if index.ids else []
        for row, (trajectory_id, messages) in enumerate(zip(chunk["trajectory_id"].tolist(),
                                                            chunk["messages"].tolist())):
            values = [column[row] for column in columns]
            # the id columns are parsed only when their raw JSON names one of the id keys
            named = any(value is not None and leaf in value for value in values for leaf in leaves)
            matches.add(trajectory_id, _id_owner(index, *values) if named else -1, _stored_texts(messages))
    return matches.result()


class IngestFlags:
    """The matches of one batch against one benchmark set, found while it is ingested, from
    the conversations ingest has already parsed (no second read of the stored messages):
    ``add`` each valid trajectory, then ``result``, stored under ``fingerprint``."""

    def __init__(self, index: BenchmarkIndex, texts: SharedTexts | None = None) -> None:
        self.index = index
        self.matches = Matches(index)
        self.texts = texts if texts is not None else SharedTexts()

    @property
    def fingerprint(self) -> str:
        return self.index.fingerprint

    def add(self, trajectory_id: str, trajectory: Trajectory) -> None:
        """Checks one trajectory as ingest converts it (``ingest.ingest``'s ``on_trajectory``)."""
        owner = (id_owner(self.index, trajectory.task_inputs, trajectory.metadata, trajectory.request)
                 if self.index.ids else -1)
        self.matches.add(trajectory_id, owner, self.texts.lazily(trajectory))

    def result(self) -> dict[str, Any]:
        """What is stored beside the batch (``flags_record``)."""
        return flags_record(self.index, self.matches.result())


class SharedTexts:
    """The compared texts of the trajectory being ingested, listed once for every benchmark
    set's recorder: the same string objects, so each text's hash (``CheckedTexts``) is
    computed once too."""

    def __init__(self) -> None:
        self.trajectory: Trajectory | None = None  # (kept alive: no later trajectory can be this object)
        self.texts: list[str] = []

    def lazily(self, trajectory: Trajectory) -> Iterator[str]:
        """The texts, listed on first read (a recorder whose id test settles the match reads none)."""
        if trajectory is not self.trajectory:
            self.trajectory, self.texts = trajectory, list(turn_texts(trajectory.messages))
        yield from self.texts


def flags_record(index: BenchmarkIndex, found: dict[str, str]) -> dict[str, Any]:
    """A batch's flags as stored beside it: the index's fingerprint, its n-gram counts and the matches."""
    return {"fingerprint": index.fingerprint, "ngrams": [summary.ngrams for summary in index.counted()],
            "contaminated": found}


# the indexes built in this process, by config and files, the most recently used last: ingest
# checks a batch against every benchmark set of its source's datasets, each export step
# against its dataset's (several sets in one process: the CLI runs its steps in one)
_INDEXES: OrderedDict[Any, BenchmarkIndex] = OrderedDict()
INDEXES_KEPT = 8  # beyond that many sets, the least recently used is read again when next needed


def _files_state(path: str) -> Any:
    """What tells whether a benchmark's files changed: (name, size, mtime) of each."""
    root = Path(path).expanduser()
    files = sorted(root.rglob("*")) if root.is_dir() else [root]
    return tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file())


def cached_index(config: DecontaminationConfig) -> BenchmarkIndex | None:
    """``build_index``, built once per process while the config and the benchmarks' files
    stay the same (the ingest steps of a run, and the family steps run in one process)."""
    if not config.benchmarks:
        return None
    settings = orjson.dumps(config.model_dump())
    key = (settings, tuple(_files_state(b.path) for b in config.benchmarks))
    if key in _INDEXES:
        _INDEXES.move_to_end(key)
        return _INDEXES[key]
    for older in [older for older in _INDEXES if older[0] == settings]:  # its files changed since
        del _INDEXES[older]
    index = build_index(config)
    _INDEXES[key] = index
    while len(_INDEXES) > INDEXES_KEPT:
        _INDEXES.popitem(last=False)
    return index


def ingest_flags(configs: Iterable[DecontaminationConfig]) -> list[IngestFlags]:
    """The recorders of one batch being ingested, one per distinct benchmark set among
    ``configs`` (the datasets reading its source), sharing each trajectory's texts. A config
    without benchmarks gives none, nor does one whose benchmarks cannot be read (that
    dataset's export steps then fail on it, saying why; ingest goes on)."""
    texts = SharedTexts()
    recorders: dict[str, IngestFlags] = {}
    for config in configs:
        try:
            index = cached_index(config)
        except (BenchmarkError, OSError):
            continue
        if index is not None and index.fingerprint not in recorders:
            recorders[index.fingerprint] = IngestFlags(index, texts)
    return list(recorders.values())


def contaminated_trajectories(table: Any, index: BenchmarkIndex, ids: set[str]) -> dict[str, str]:
    """trajectory_id -> benchmark for the trajectories of ``ids`` that match one.

    A table that keeps per-batch flags (``StoredTrajectories``) gives the matches its ingest
    found under the same fingerprint; a batch without them (ingested before these benchmarks
    were configured, or with others) is scanned whole once, and its flags stored for the next
    step and run. Any other table (``FrameTable``) is scanned, only the rows of ``ids``."""
    flags = getattr(table, "decontamination_flags", None)
    if flags is None:
        return contaminated(table.scan(scan_columns(index), ids=ids), index)
    found, stale, ngrams = flags(index.fingerprint)
    if ngrams is not None:  # counted when the flags were made: the n-gram tables need not be built here
        for summary, count in zip(index.summaries, ngrams):
            summary.ngrams = count if summary.ngrams is None else summary.ngrams
    for key in stale:
        batch_found = contaminated(table.batch(key).scan(scan_columns(index)), index)
        table.save_decontamination_flags(key, flags_record(index, batch_found))
        found.update(batch_found)
    return {trajectory_id: name for trajectory_id, name in found.items() if trajectory_id in ids}


def reason(name: str) -> str:
    """The exclusion reason a benchmark's matches are counted under.

    >>> reason("gsm8k")
    'contaminated:gsm8k'
    """
    return f"{REASON_PREFIX}{name}"


def manifest_block(index: BenchmarkIndex, excluded: dict[str, int]) -> dict[str, Any]:
    """What an export's manifest says of decontamination: the n-gram, and per benchmark
    where it was read from and how many of the export's trajectories it left out."""
    return {
        "ngram": index.ngram,
        "benchmarks": [{**summary.as_dict(), "left_out": excluded.get(reason(summary.name), 0)}
                       for summary in index.counted()],
    }
