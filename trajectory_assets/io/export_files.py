"""An export's split files: written shard by shard to a staging folder
(:class:`ShardWriter`), put in place under the Hub's names by one commit of every shard
(:func:`commit_shards`), and read back row by row for the report (:class:`StoredExport`).

Each split is the concatenation of its files in name order, ``train-00000-of-00004.jsonl``
first (what ``datasets`` reads for the card's glob ``train-*.jsonl``); a row's position is its
index in that concatenation. Which files an export has, their split, format and row counts
come from its manifest, so any export (a flavor added later included, or one written before
shards, with one ``train.jsonl`` per split) is read the same way. Parquet files are read a
batch at a time, only the columns asked for, and :meth:`StoredExport.rows_at` reads only the
files and row groups that hold the rows asked for.

A shard can be written by a process of its own: a :class:`ShardWriter` leaves whole files in
the build's staging folder (``layout.export_staging``, deterministic names per shard) and
returns a JSON-serializable :class:`WrittenShard` per split; whichever process then holds every
shard's records commits them. (A ``StagedFile`` itself cannot be committed from another
process: on an object store only the handle that uploads it can complete the upload.)

A JSON line can only be parsed whole, so a JSON-lines file is written with a *row index*
beside it (``layout.export_row_index``): a Parquet file of the few fields the report scans
every row for (``index_fields``: which trajectories a row was made from), one row per
line, with the byte where each line starts, holding the SHA-256 of the data file it
indexes. A scan reads the index instead of parsing every line when that hash is the
manifest's, and :meth:`StoredExport.rows_at` reads only the lines asked for; otherwise (an
export written before indexes, or an index left from another write) they read the lines
from the start, so the answer is the same either way.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from typing import Any

import contextlib
import hashlib
import math
import posixpath
import re
import uuid
from dataclasses import asdict, dataclass
from functools import cached_property

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from trajectory_assets import layout
from trajectory_assets.io.arrow_rows import table_from_records
from trajectory_assets.io.storage import NotMaterializedError, StagedFile, Storage

BATCH_ROWS = 4096

# split, 0-based position in the split (its files' rows one after the other), the row
Row = tuple[str, int, dict[str, Any]]
# the row index's metadata: the SHA-256 of the file it indexes, and the fields it was asked to keep
INDEXED_SHA256, INDEX_FIELDS = b"indexed_sha256", b"index_fields"
# the row index's column of where each line starts in its file (bytes): no export field is named so
LINE_START = "__line_start"


class StoredExport:
    def __init__(self, store: Storage, name: str, manifest: dict[str, Any]) -> None:
        self.store, self.name = store, name
        self.format = manifest.get("format", "jsonl")
        self.manifest_files: dict[str, dict[str, Any]] = manifest.get("files", {})
        # split -> its files in the order of their rows, each with the position of its first row
        self.splits: dict[str, list[tuple[str, int]]] = {}
        for file_name, described in self.manifest_files.items():
            files = self.splits.setdefault(layout.split_of(file_name, described), [])
            first = files[-1][1] + self.manifest_files[files[-1][0]].get("rows", 0) if files else 0
            files.append((file_name, first))

    @cached_property
    def _index_fields(self) -> dict[str, set[str]] | None:
        """Data file -> the fields its row index was asked to keep (a row holds none of them
        but the index's columns), when every file has an index of the bytes the manifest lists."""
        if self.format == "parquet":
            return None
        fields = {}
        for file_name, written in self.manifest_files.items():
            if "sha256" not in written:
                return None
            try:
                with self.store.open_read(layout.export_row_index(self.name, file_name)) as handle:
                    footer = pq.ParquetFile(handle).metadata
            except NotMaterializedError:  # an export written before row indexes
                return None
            metadata = footer.metadata or {}
            if metadata.get(INDEXED_SHA256) != written["sha256"].encode() or footer.num_rows != written.get("rows"):
                return None
            fields[file_name] = set(orjson.loads(metadata[INDEX_FIELDS]))
        return fields

    @property
    def indexed(self) -> bool:
        """Every JSON-lines file has a row index of the file the manifest lists."""
        return self._index_fields is not None

    @property
    def whole_rows(self) -> bool:
        """Whether :meth:`scan` gives every field of a row: JSON lines parsed whole when
        there is no row index to read instead."""
        return self.format != "parquet" and not self.indexed

    def scan(self, fields: Collection[str]) -> Iterator[Row]:
        """Every row, each split's files in order: Parquet rows and indexed JSON lines with only
        ``fields`` (those the file or its index has), other JSON lines whole."""
        for split, files in self.splits.items():
            position = 0
            for file_name, _ in files:
                if self.format == "parquet":
                    rows = self._scan_parquet(self._path(file_name), fields)
                elif self.indexed and set(fields) <= self._index_fields[file_name]:
                    rows = self._scan_parquet(layout.export_row_index(self.name, file_name), fields)
                else:
                    rows = (orjson.loads(line) for line in self._lines(file_name))
                for row in rows:
                    yield split, position, row
                    position += 1

    def rows_at(self, wanted: dict[str, set[int]]) -> Iterator[Row]:
        """Whole rows at the given positions of each split (its files' rows one after the
        other), in file order."""
        for split, files in self.splits.items():
            positions = wanted.get(split)
            if not positions:
                continue
            for number, (file_name, first) in enumerate(files):
                stop = files[number + 1][1] if number + 1 < len(files) else math.inf
                inside = {position - first for position in positions if first <= position < stop}
                if inside:
                    for offset, row in self._rows_of_file(file_name, inside):
                        yield split, first + offset, row

    def _rows_of_file(self, file_name: str, positions: set[int]) -> Iterator[tuple[int, dict[str, Any]]]:
        """The rows of one data file at these positions in it."""
        if self.format == "parquet":
            yield from self._parquet_rows(file_name, positions)
            return
        starts = self._line_starts(file_name)
        if starts is not None:  # at 1 GB the report's samples took 0.59 s reading lines from the start
            with self.store.open_read(self._path(file_name)) as handle:
                for position in sorted(p for p in positions if p < len(starts)):
                    handle.seek(starts[position])
                    yield position, orjson.loads(handle.readline())
            return
        last = max(positions)
        for position, line in enumerate(self._lines(file_name)):
            if position in positions:
                yield position, orjson.loads(line)
            if position >= last:
                break

    def _path(self, file_name: str) -> str:
        return layout.export_split_file(self.name, file_name)

    def _line_starts(self, file_name: str) -> list[int] | None:
        """Where each line of a JSON-lines file starts, from its row index (None: no index of
        this file, or one written before it kept them)."""
        if not self.indexed:
            return None
        with self.store.open_read(layout.export_row_index(self.name, file_name)) as handle:
            parquet = pq.ParquetFile(handle)
            if LINE_START not in parquet.schema_arrow.names:
                return None
            return parquet.read(columns=[LINE_START])[LINE_START].to_pylist()

    def _lines(self, file_name: str) -> Iterator[bytes]:
        with self.store.open_read(self._path(file_name)) as handle:
            for line in handle:
                if line.strip():
                    yield line

    def _scan_parquet(self, path: str, fields: Collection[str]) -> Iterator[dict[str, Any]]:
        with self.store.open_read(path) as handle:
            parquet = pq.ParquetFile(handle)
            columns = [name for name in parquet.schema_arrow.names if name in fields]
            if not columns:  # nothing to read but the row count
                for _ in range(parquet.metadata.num_rows):
                    yield {}
                return
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns):
                yield from batch.to_pylist()

    def _parquet_rows(self, file_name: str, positions: set[int]) -> Iterator[tuple[int, dict[str, Any]]]:
        with self.store.open_read(self._path(file_name)) as handle:
            parquet = pq.ParquetFile(handle)
            start = 0
            for group in range(parquet.metadata.num_row_groups):
                size = parquet.metadata.row_group(group).num_rows
                inside = sorted(p - start for p in positions if start <= p < start + size)
                if inside:
                    table = parquet.read_row_group(group).take(inside)
                    for offset, row in zip(inside, table.to_pylist()):
                        yield start + offset, row
                start += size


class _HashingWriter:
    """Counts and hashes the bytes on their way to the file (what the manifest records)."""

    def __init__(self, handle) -> None:
        self.handle = handle
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        data = bytes(data)
        self.handle.write(data)
        self.sha256.update(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass


class _SplitFile:
    """One split's staged file: records serialized as JSON lines, or Parquet row groups built
    from the records directly (a record's JSON is never made for Parquet)."""

    def __init__(self, staged: StagedFile, arrow_schema: pa.Schema | None) -> None:
        self.staged = staged
        self.out = _HashingWriter(staged.handle)
        self.rows = 0
        self.parquet = pq.ParquetWriter(self.out, arrow_schema, compression="zstd") if arrow_schema else None
        self.arrow_schema = arrow_schema

    def write(self, records: list[dict[str, Any]]) -> tuple[list[int], list[int]] | None:
        """Appends the records; returns each JSON line's length in characters and the byte
        where it starts in the file (None for Parquet)."""
        self.rows += len(records)
        if self.parquet is not None:
            self.parquet.write_table(table_from_records(records, self.arrow_schema))
            return None
        lines = [orjson.dumps(record) for record in records]
        starts = []
        start = self.out.size
        for line in lines:
            starts.append(start)
            start += len(line) + 1
        self.out.write(b"\n".join([*lines, b""]))  # the trailing b"" ends the last line: no extra copy
        # characters, not bytes: a byte that continues a UTF-8 character is not one
        return [len(line) if line.isascii() else len(line.decode()) for line in lines], starts

    def close(self) -> None:
        if self.parquet is not None:
            self.parquet.close()  # writes the footer (an empty split is still a valid file)
            self.parquet = None


class _RowIndex:
    """One JSON-lines split's row index, written beside it (see the module's docstring)."""

    def __init__(self, staged: StagedFile, fields: Collection[str], arrow_schema: pa.Schema) -> None:
        self.staged = staged
        self.fields = list(fields)
        # the fields the export's schema declares; a row holding one of the others cannot be indexed
        self.schema = pa.schema([f for f in arrow_schema if f.name in self.fields])
        self.undeclared = set(self.fields) - set(self.schema.names)
        self.with_starts = self.schema.append(pa.field(LINE_START, pa.int64()))
        self.complete = True
        self.parquet = pq.ParquetWriter(staged.handle, self.with_starts, compression="zstd")

    def write(self, records: list[dict[str, Any]], starts: list[int]) -> None:
        if self.complete and self.undeclared and any(self.undeclared & record.keys() for record in records):
            self.complete = False  # (GRPO rows carry the verifier's inputs, whose keys vary)
        if self.complete:
            fields = table_from_records(records, self.schema)
            self.parquet.write_table(fields.append_column(LINE_START, pa.array(starts, pa.int64())))

    def commit(self, indexed_sha256: str) -> bool:
        """Closes the index as the index of the file with this hash and puts it in place; an
        incomplete index is discarded (the file is then scanned line by line). Whether it was kept."""
        if not self.complete:
            self.discard()
            return False
        self.parquet.add_key_value_metadata({INDEXED_SHA256: indexed_sha256.encode(),
                                             INDEX_FIELDS: orjson.dumps(self.fields)})
        self.parquet.close()
        self.staged.commit()
        return True

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self.parquet.close()
        self.staged.discard()


@dataclass(frozen=True)
class WrittenShard:
    """What one shard's writer left in the staging folder for one split: a small record (JSON
    with :meth:`to_json`) that the process committing every shard reads, so shard k can be
    written by a process of its own."""

    split: str
    shard: int
    staged: str  # the file in the staging folder (storage-relative)
    sha256: str
    bytes: int
    rows: int
    index: str | None  # its row index in the staging folder (None: JSON lines not indexed, or Parquet)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> WrittenShard:
        return cls(**record)


class ShardWriter:
    """Shard ``shard`` of an export's splits: one file per split (empty ones too), and each
    JSON-lines file's row index, written to the staging folder of the build ``run``.

    :meth:`finish` makes them whole files under names that say split and shard
    (``train-00003.jsonl``), and returns what it wrote; nothing is in the export's folder until
    :func:`commit_shards` puts every shard's files there. Each staged file is itself written
    under a temporary name first (``Storage.stage``), so a shard that dies leaves none.
    """

    def __init__(self, store: Storage, name: str, splits: tuple[str, ...], file_format: str,
                 arrow_schema: pa.Schema, index_fields: Collection[str] = (), shard: int = 0,
                 run: str = "") -> None:
        self.store, self.shard = store, shard
        self.staging = layout.export_staging(name, run or uuid.uuid4().hex)
        self.files: dict[str, _SplitFile] = {}
        self.indexes: dict[str, _RowIndex] = {}
        parquet_schema = arrow_schema if file_format == "parquet" else None
        try:
            for split in splits:
                self.files[split] = _SplitFile(store.stage(self._staged(split, file_format)), parquet_schema)
                if index_fields and file_format == "jsonl":
                    self.indexes[split] = _RowIndex(store.stage(self._staged(split, "index.parquet")), index_fields,
                                                    arrow_schema)
        except BaseException:
            self.discard()
            raise

    def _staged(self, split: str, extension: str) -> str:
        return f"{self.staging}/{split}-{self.shard:05d}.{extension}"

    def write(self, split: str, records: list[dict[str, Any]]) -> list[int] | None:
        """Appends ``records`` to the split; returns each JSON line's length in characters
        (None for Parquet, which has no lines)."""
        written = self.files[split].write(records)
        if written is None:
            return None
        chars, starts = written
        if split in self.indexes:
            self.indexes[split].write(records, starts)
        return chars

    def finish(self) -> list[WrittenShard]:
        """Closes every split's file and index in the staging folder; what was written, split by split."""
        written = []
        try:
            for split, file in self.files.items():
                file.close()
                file.staged.commit()
                sha256 = file.out.sha256.hexdigest()
                index = self.indexes.pop(split, None)
                indexed = index is not None and index.commit(sha256)
                written.append(WrittenShard(split, self.shard, file.staged.relative, sha256, file.out.size, file.rows,
                                            index.staged.relative if indexed else None))
        except BaseException:
            self.discard()
            raise
        return written

    def discard(self) -> None:
        for file in self.files.values():
            with contextlib.suppress(Exception):  # a writer left open would write its footer when collected
                file.close()
            file.staged.discard()
        for index in self.indexes.values():
            index.discard()


def restage_committed_shard(store: Storage, name: str, splits: tuple[str, ...], file_format: str,
                            arrow_schema: pa.Schema, index_fields: Collection[str], shard: int, run: str,
                            kept: list[WrittenShard],
                            committed: dict[str, dict[str, Any]]) -> list[WrittenShard] | None:
    """Shard ``shard`` of the build ``run`` staged again from the export's committed files,
    without rendering: ``kept`` is what the committed build's shard wrote (its part), and
    ``committed`` the manifest's ``files``. Each split with rows is a copy of the committed
    file the manifest names for that split and shard, with the SHA-256 and rows the part
    wrote (its row index copied too); a split without rows is written empty, as a render
    writes it. None, with nothing staged, when the committed build does not hold exactly
    those files: the caller then renders the shard."""
    listed = {entry.get("split"): (file_name, entry) for file_name, entry in committed.items()
              if entry.get("shard") == shard}
    for record in kept:
        file_name, entry = listed.get(record.split, (None, {}))
        if record.rows and (entry.get("sha256"), entry.get("rows")) != (record.sha256, record.rows):
            return None
    staged = {record.split: record for record in ShardWriter(store, name, splits, file_format, arrow_schema,
                                                               index_fields, shard, run).finish()}
    indexed_then_not_now = any(record.index is not None and staged[record.split].index is None
                               for record in kept if record.split in staged)
    if sorted(staged) != sorted(record.split for record in kept) or indexed_then_not_now:  # the writer changed
        remove_staged(store, staged.values())
        return None
    written = []
    try:
        for record in kept:
            empty = staged[record.split]
            if not record.rows:
                written.append(empty)
                continue
            file_name = listed[record.split][0]
            store.copy(layout.export_split_file(name, file_name), empty.staged)
            if record.index is not None:
                store.copy(layout.export_row_index(name, file_name), empty.index)
            written.append(WrittenShard(record.split, shard, empty.staged, record.sha256, record.bytes, record.rows,
                                        None if record.index is None else empty.index))
    except NotMaterializedError:  # a committed file or index gone: render instead
        remove_staged(store, staged.values())
        return None
    return written


def remove_staged(store: Storage, written: Iterable[WrittenShard]) -> None:
    """One shard's staged files (other shards of the build share its staging folder)."""
    for record in written:
        store.remove(record.staged)
        if record.index is not None:
            store.remove(record.index)


def commit_shards(store: Storage, name: str, splits: tuple[str, ...], file_format: str, shards: int,
                  written: list[WrittenShard]) -> dict[str, dict[str, Any]]:
    """Puts every shard's staged files in place as the export's files; returns the manifest's
    ``files``: each file's name -> its split, the shard it came from, sha256, bytes and rows.

    A split's files are its shards that have rows, in shard order, under the Hub's names
    (``train-00000-of-00004.jsonl``: ``datasets`` reads an empty Parquet shard among others as
    an error); a split without rows keeps one empty file, so every split has a file.
    ``written`` must hold every split of every shard ``0 .. shards - 1`` (a shard that did not
    report is an error, never a smaller export). Then no other data file, row index or
    staging folder of the export is left (an earlier build's ``train.jsonl``, or its
    ``train-00006-of-00007.jsonl`` when there are now 4 files).
    """
    reported = sorted((shard.split, shard.shard) for shard in written)
    expected = sorted((split, shard) for split in splits for shard in range(shards))
    if reported != expected:
        raise ValueError(f"cannot commit {name}: the shards written ({reported}) are not every split of "
                         f"shards 0-{shards - 1} ({expected})")
    files: dict[str, dict[str, Any]] = {}
    indexes = set()
    for split in splits:
        of_split = sorted((shard for shard in written if shard.split == split), key=lambda shard: shard.shard)
        kept = [shard for shard in of_split if shard.rows] or of_split[:1]
        for number, shard in enumerate(kept):
            file_name = layout.split_file_name(split, number, len(kept), file_format)
            store.move(shard.staged, layout.export_split_file(name, file_name))
            if shard.index is not None:
                store.move(shard.index, layout.export_row_index(name, file_name))
                indexes.add(layout.export_row_index(name, file_name))
            files[file_name] = {"split": split, "shard": shard.shard, "sha256": shard.sha256, "bytes": shard.bytes,
                                "rows": shard.rows}
    _remove_other_files(store, layout.export_folder(name), _split_file_pattern(splits), set(files))
    _remove_other_files(store, layout.export_row_indexes(name), re.compile(".*"),
                        {index.rsplit("/", 1)[1] for index in indexes})
    discard_shards(store, written)  # what is left of them: the shards without rows
    return files


def discard_shards(store: Storage, written: list[WrittenShard]) -> None:
    """Removes the staging folders the shards were written to, with whatever they still hold."""
    for folder in sorted({posixpath.dirname(shard.staged) for shard in written}):
        store.remove_folder(folder)


def _split_file_pattern(splits: tuple[str, ...]) -> re.Pattern:
    """The names a data file of these splits has had: ``train.jsonl`` before shards, then
    ``train-00000-of-00004.parquet`` (either format: an export may change it)."""
    names = "|".join(re.escape(split) for split in splits)
    return re.compile(rf"(?:{names})(?:-\d{{5}}-of-\d{{5}})?\.(?:jsonl|parquet)")


def _remove_other_files(store: Storage, folder: str, pattern: re.Pattern, kept: set[str]) -> None:
    for file_name in store.file_names(folder):
        if pattern.fullmatch(file_name) and file_name not in kept:
            store.remove(f"{folder}/{file_name}")
