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

Fast and streaming: the benchmark side is read once per export step into sorted arrays of
64-bit n-gram hashes (over word ids of the benchmarks' vocabulary, so no n-gram string is
ever built); trajectories are read chunk by chunk, normalised and split with Arrow compute
functions, and every window is hashed and looked up with numpy. A window holding a word
that no benchmark uses cannot match and is never hashed.

No Dagster here; ``defs/exports.py`` loads the index and reports a ``BenchmarkError``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
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
# the rules' version is this file: after any edit, the flags stored beside batches are
# recomputed by the export steps (no batch is ingested again: ingest's code version does
# not follow this module, see defs/code_versions.py)
RULES_SHA256 = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
REASON_PREFIX = "contaminated:"

# datatrove's PUNCTUATION (src/datatrove/utils/text.py): these characters and the control
# characters other than tab and newline become spaces
PUNCTUATION = "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»" + "".join(
    map(chr, (x for a, b in ((0, 9), (11, 13), (13, 32), (127, 160)) for x in range(a, b))))
# datatrove's NUMBERS_PATTERN: a number, with at most one decimal or thousands separator
_NUMBERS = r"\p{Nd}+(?:[.,،٫⎖⎗⎘]\p{Nd}+)?"
# datatrove's punctuation beyond ASCII, and the Unicode spaces (Python's str.split splits on them)
_UNICODE_SPACES = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in dict.fromkeys(PUNCTUATION) if ord(c) >= 128) + "".join(
    f"\\x{{{code:x}}}" for code in (0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)
) + "]+"
_ASCII_NUMBERS = r"[0-9]+(?:[.,][0-9]+)?"
# the ASCII members of PUNCTUATION and the ASCII whitespace, to spaces
_ASCII_SPACES = bytes(32 if (chr(b) in PUNCTUATION or chr(b).isspace()) and b < 128 else b for b in range(256))
# odd 64-bit multipliers of the window hash, one per position in the window (fixed: the
# same n-gram hashes the same in every process)
_BITMAP_SHIFT = np.uint64(40)  # a bitmap of 2**24 flags (16 MiB), of windows and of word pairs
_MULTIPLIERS = np.random.default_rng(13).integers(0, 2**63, size=256, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


class BenchmarkError(Exception):
    """A benchmark that cannot be read as configured (missing file, missing field)."""


def normalized_words(texts: pa.Array) -> pa.ListArray:
    """Each text as its list of normalised words (datatrove's ``simplify_text`` defaults,
    then a whitespace split).

    ASCII text (nearly all of it) takes a fast path: ASCII lowercase, numbers by a regex of
    ASCII digits, punctuation and control characters to spaces by ``bytes.translate``. A
    text with other characters is first normalised whole by Unicode rules (lowercase,
    ``\\p{Nd}`` numbers, datatrove's punctuation, NFD without combining marks, Unicode
    spaces), which leaves nothing for the fast path to change.

    >>> normalized_words(pa.array(["Q: What's the Capital of France, in 2024?  Café — Paris!"])).to_pylist()
    [['q', 'what', 's', 'the', 'capital', 'of', 'france', 'in', '0', 'cafe', 'paris']]
    """
    ascii_only = pc.string_is_ascii(texts)
    text = pc.replace_substring_regex(pc.ascii_lower(texts), _ASCII_NUMBERS, "0")
    if not pc.all(ascii_only).as_py():
        # the other texts by the Unicode rules alone: numbers are replaced once, as in the
        # fast path (a second pass would turn datatrove's `0,0` of `1,000,000` into `0`)
        unicode = pc.invert(ascii_only)
        other = pc.utf8_lower(pc.filter(texts, unicode))
        other = pc.replace_substring_regex(other, _NUMBERS, "0")
        # (the ASCII punctuation is left to the fast path)
        other = pc.replace_substring_regex(other, _UNICODE_SPACES, " ")
        other = pc.replace_substring_regex(pc.utf8_normalize(other, form="NFD"), r"\p{Mn}+", "")
        text = pc.replace_with_mask(text, unicode, other)
    return pc.ascii_split_whitespace(pc.ascii_trim_whitespace(_translate(text)))


def _translate(text: pa.Array) -> pa.Array:
    """ASCII punctuation and control characters to spaces, in one ``bytes.translate`` of the
    array's data (bytes >= 0x80 are left as they are, so UTF-8 stays valid)."""
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    validity, offsets, data = text.buffers()
    if data is None:
        return text
    return pa.StringArray.from_buffers(len(text), offsets, pa.py_buffer(data.to_pybytes().translate(_ASCII_SPACES)),
                                       validity, text.null_count, text.offset)


def words(text: str) -> list[str]:
    """One text's normalised words.

    >>> words("The 1,000 cafés—OPEN!")
    ['the', '0', 'cafes', 'open']
    """
    return normalized_words(pa.array([text], pa.string()))[0].as_py()


def _flat(lists: pa.ListArray) -> tuple[pa.Array, np.ndarray]:
    """The words of every text in one array, and each text's [start, end) as offsets."""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    offsets = lists.offsets.to_numpy().astype(np.int64)
    return lists.values.slice(offsets[0], offsets[-1] - offsets[0]), offsets - offsets[0]


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


def _runs(ok: np.ndarray) -> np.ndarray:
    """Per position, how many positions from it on are ``ok`` in a row, itself included.

    >>> _runs(np.array([True, True, False, True])).tolist()
    [2, 1, 0, 1]
    """
    positions = np.arange(len(ok))
    next_not_ok = np.minimum.accumulate(np.where(ok[::-1], len(ok), positions[::-1]))[::-1]
    return next_not_ok - positions


def _pair_slots(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The bitmap slot of each pair of word ids (left then right)."""
    with np.errstate(over="ignore"):
        return (((left.astype(np.uint64) + np.uint64(1)) * _MULTIPLIERS[0]
                 + (right.astype(np.uint64) + np.uint64(1)) * _MULTIPLIERS[1]) >> _BITMAP_SHIFT)


def _linked(ids: np.ndarray, offsets: np.ndarray, pairs: np.ndarray | None = None) -> np.ndarray:
    """Per word, whether it and the next word are in one text and both known (id >= 0) and,
    given ``pairs`` (the bitmap of the benchmarks' word pairs), whether some benchmark text
    may hold the two in that order. A window of k words can match only if its first k - 1
    words are all linked: most windows of a text are ruled out by a pair, never hashed.

    >>> _linked(np.array([0, 1, 2, -1, 3, 4]), np.array([0, 3, 6])).tolist()
    [True, True, False, False, True, False]
    """
    linked = np.zeros(len(ids), dtype=bool)
    if len(ids) < 2:
        return linked
    linked[:-1] = (ids[:-1] >= 0) & (ids[1:] >= 0)
    linked[offsets[1:-1] - 1] = False  # the last word of a text (an empty first text: the last word, False anyway)
    if pairs is not None:
        candidate = np.flatnonzero(linked)
        linked[candidate] = pairs[_pair_slots(ids[candidate], ids[candidate + 1])]
    return linked


def _spans(ids: np.ndarray, offsets: np.ndarray, pairs: np.ndarray | None = None) -> np.ndarray:
    """Per word, the longest window from it that can match: known words, in its text, each
    pair of neighbours one that ``pairs`` holds (0 at an unknown word).

    >>> _spans(np.array([0, 1, 2, -1, 3, 4]), np.array([0, 3, 6])).tolist()
    [3, 2, 1, 0, 2, 1]
    """
    return np.where(ids >= 0, _runs(_linked(ids, offsets, pairs)) + 1, 0)


def _hashes(ids: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
    """A 64-bit hash of the n word ids from each start (wrapping arithmetic)."""
    hashes = np.zeros(len(starts), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(n):
            hashes += (ids[starts + k].astype(np.uint64) + np.uint64(1)) * _MULTIPLIERS[k]
    return hashes


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
    (the vocabulary, the sorted hashes per window length, the bitmap) are built on first use:
    an export step whose batches all carry current flags never needs them."""

    ngram: int
    summaries: list[BenchmarkSummary]
    texts: list[pa.Array] = field(default_factory=list)  # per benchmark (config order), its texts
    # (task_id_field, id) -> first benchmark holding it
    ids: dict[tuple[str, str], int] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # the decontamination section it was built from

    @property
    def compares_text(self) -> bool:
        return any(len(texts) for texts in self.texts)

    @cached_property
    def _tables(self) -> tuple[pa.Array, dict[int, tuple[np.ndarray, np.ndarray]], np.ndarray, np.ndarray]:
        vocabulary, by_length, counts, pairs = _ngram_tables(self.texts, self.ngram)
        for summary, count in zip(self.summaries, counts):
            summary.ngrams = count
        bitmap = np.zeros(1 << (64 - int(_BITMAP_SHIFT)), dtype=bool)
        for hashes, _ in by_length.values():
            bitmap[hashes >> _BITMAP_SHIFT] = True
        return vocabulary, by_length, bitmap, pairs

    @property
    def vocabulary(self) -> pa.Array:
        """Every normalised word of every benchmark text."""
        return self._tables[0]

    @property
    def by_length(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Window length -> (sorted hashes, the first benchmark, in config order, holding each)."""
        return self._tables[1]

    @property
    def bitmap(self) -> np.ndarray:
        """One flag per value of a hash's top bits: set when some indexed n-gram has them."""
        return self._tables[2]

    @property
    def pairs(self) -> np.ndarray:
        """One flag per bitmap slot of a pair of word ids: set when some benchmark text holds
        the two words one after the other (see ``_linked``)."""
        return self._tables[3]

    @property
    def names(self) -> list[str]:
        return [summary.name for summary in self.summaries]

    def counted(self) -> list[BenchmarkSummary]:
        """The summaries with their n-gram counts (built now unless flags gave them)."""
        if any(summary.ngrams is None for summary in self.summaries):
            self._tables
        return self.summaries

    @cached_property
    def fingerprint(self) -> str:
        """What the matches depend on: the rules (this file), the n-gram and every benchmark's
        name, fields and data (its SHA-256)."""
        return hashlib.sha256(orjson.dumps({"rules": RULES_SHA256, "ngram": self.ngram, "min_words": MIN_WORDS,
                                            "benchmarks": [[summary.name, summary.sha256] for summary in self.summaries],
                                            "config": self.config})).hexdigest()[:32]

    @cached_property
    def id_fields(self) -> list[str]:
        return sorted({path for path, _ in self.ids})

    def text_matches(self, texts: pa.Array) -> np.ndarray:
        """Per text, the first benchmark (index) one of whose n-grams it holds, else -1.

        Every window length the index holds (the n-gram, and the lengths of short benchmark
        texts) is hashed in one pass: the hash of a window of k + 1 words is that of its
        first k plus one term. A window is looked up in a bitmap of the hashes' top bits
        first, and in the sorted hashes only when its bit is set."""
        found = np.full(len(texts), -1, dtype=np.int64)
        if not self.compares_text or len(texts) == 0 or not self.by_length:
            return found
        flat, offsets = _flat(normalized_words(texts))
        ids = pc.fill_null(pc.index_in(flat, value_set=self.vocabulary), -1).to_numpy(zero_copy_only=False)
        lengths = sorted(self.by_length)
        spans = _spans(ids, offsets, self.pairs if lengths[0] > 1 else None)
        starts = np.flatnonzero(spans >= lengths[0])  # every window of the shortest length that can match
        spans = spans[starts]
        hashes = np.zeros(len(starts), dtype=np.uint64)
        hit_texts, hit_owners = [], []
        with np.errstate(over="ignore"):
            for k in range(lengths[-1]):
                if k >= lengths[0]:  # longer windows: those that can still match
                    alive = spans > k
                    starts, spans, hashes = starts[alive], spans[alive], hashes[alive]
                if not len(starts):
                    break
                hashes += (ids[starts + k].astype(np.uint64) + np.uint64(1)) * _MULTIPLIERS[k]
                if k + 1 in self.by_length:
                    sorted_hashes, owners = self.by_length[k + 1]
                    candidate = np.flatnonzero(self.bitmap[hashes >> _BITMAP_SHIFT])
                    if not len(candidate):
                        continue
                    windows = hashes[candidate]
                    at = np.minimum(np.searchsorted(sorted_hashes, windows), len(sorted_hashes) - 1)
                    hit = sorted_hashes[at] == windows
                    if hit.any():
                        hit_texts.append(np.searchsorted(offsets, starts[candidate[hit]], side="right") - 1)
                        hit_owners.append(owners[at[hit]])
        if hit_texts:
            first_owner(found, np.concatenate(hit_texts), np.concatenate(hit_owners))
        return found


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


def _ngram_tables(texts: list[pa.Array], n: int
                  ) -> tuple[pa.Array, dict[int, tuple[np.ndarray, np.ndarray]], list[int], np.ndarray]:
    """(vocabulary, window length -> (sorted hashes, first benchmark holding each), n-grams per
    benchmark, the bitmap of word pairs)."""
    counts = [0] * len(texts)
    pairs = np.zeros(1 << (64 - int(_BITMAP_SHIFT)), dtype=bool)
    word_lists = [_flat(normalized_words(array)) for array in texts]
    vocabulary = pc.unique(pa.concat_arrays([flat for flat, _ in word_lists])) if word_lists else pa.array([], pa.string())
    hashes_by_length: dict[int, list[tuple[np.ndarray, int]]] = {}
    for number, (flat, offsets) in enumerate(word_lists):
        word_ids = pc.index_in(flat, value_set=vocabulary).to_numpy(zero_copy_only=False).astype(np.int64)
        linked = np.flatnonzero(_linked(word_ids, offsets))
        pairs[_pair_slots(word_ids[linked], word_ids[linked + 1])] = True
        starts = np.flatnonzero(_spans(word_ids, offsets) >= n)
        if len(starts):
            hashes = _distinct(_hashes(word_ids, starts, n))
            hashes_by_length.setdefault(n, []).append((hashes, number))
            counts[number] += len(hashes)
        # a text shorter than the n-gram but of MIN_WORDS or more is one n-gram of its length
        lengths = np.diff(offsets)
        for length in range(MIN_WORDS, n):
            short = np.flatnonzero(lengths == length)
            if len(short):
                hashes = _distinct(_hashes(word_ids, offsets[short], length))
                hashes_by_length.setdefault(length, []).append((hashes, number))
                counts[number] += len(hashes)
    by_length = {}
    for length, parts in sorted(hashes_by_length.items(), reverse=True):
        hashes = np.concatenate([h for h, _ in parts])
        owners = np.concatenate([np.full(len(h), number, dtype=np.int64) for h, number in parts])
        order = np.lexsort((owners, hashes))  # by hash, the first benchmark first
        hashes, owners = hashes[order], owners[order]
        first = np.concatenate([[True], hashes[1:] != hashes[:-1]])
        by_length[length] = (hashes[first], owners[first])
    return vocabulary, by_length, counts, pairs


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
        keys = np.fromiter((hash(text) for text in texts), dtype=np.int64, count=len(texts))
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
            self.clean = np.union1d(self.clean, distinct[new[checked < 0]])
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
    """The matches of one batch, found while it is ingested, from the conversations ingest
    has already parsed (no second read of the stored messages): ``add`` each valid
    trajectory, then ``result``."""

    def __init__(self, index: BenchmarkIndex) -> None:
        self.index = index
        self.matches = Matches(index)

    def add(self, trajectory_id: str, trajectory: Trajectory) -> None:
        """Checks one trajectory as ingest converts it (``ingest.ingest``'s ``on_trajectory``)."""
        owner = (id_owner(self.index, trajectory.task_inputs, trajectory.metadata, trajectory.request)
                 if self.index.ids else -1)
        self.matches.add(trajectory_id, owner, turn_texts(trajectory.messages))

    def result(self) -> dict[str, Any]:
        """What is stored beside the batch (``flags_record``)."""
        return flags_record(self.index, self.matches.result())


def flags_record(index: BenchmarkIndex, found: dict[str, str]) -> dict[str, Any]:
    """A batch's flags as stored beside it: the index's fingerprint, its n-gram counts and the matches."""
    return {"fingerprint": index.fingerprint, "ngrams": [summary.ngrams for summary in index.counted()],
            "contaminated": found}


_INDEXES: dict[Any, BenchmarkIndex] = {}  # the last index built in this process, by config and files


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
    key = (orjson.dumps(config.model_dump()), tuple(_files_state(b.path) for b in config.benchmarks))
    if key not in _INDEXES:
        _INDEXES.clear()
        _INDEXES[key] = build_index(config)
    return _INDEXES[key]


def ingest_flags(config: DecontaminationConfig) -> IngestFlags | None:
    """A collector for one batch being ingested, or None: no benchmark configured, or one that
    cannot be read (the export steps then fail on it, saying why; ingest goes on)."""
    try:
        index = cached_index(config)
    except (BenchmarkError, OSError):
        return None
    return None if index is None else IngestFlags(index)


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
