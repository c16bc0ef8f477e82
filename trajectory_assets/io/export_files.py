"""An export's split files: written as one staged set (:class:`StagedExport`), read back row
by row for the report (:class:`StoredExport`).

Which files an export has, their format and row counts come from its manifest, so any
export (a flavor added later included) is read the same way. Parquet files are read a
batch at a time, only the columns asked for, and :meth:`StoredExport.rows_at` reads only
the row groups that hold the rows asked for.

A JSON line can only be parsed whole, so a JSON-lines split is written with a *row index*
beside it (``layout.export_row_index``): a Parquet file of the few fields the report scans
every row for (``index_fields``: which trajectories a row was made from), one row per
line, with the byte where each line starts, holding the SHA-256 of the split file it
indexes. A scan reads the index instead of parsing every line when that hash is the
manifest's, and :meth:`StoredExport.rows_at` reads only the lines asked for; otherwise (an
export written before indexes, or an index left from another write) they read the lines
from the start, so the answer is the same either way.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import contextlib
import hashlib
from functools import cached_property

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from trajectory_assets import layout
from trajectory_assets.io.arrow_rows import table_from_records
from trajectory_assets.io.storage import NotMaterializedError, StagedFile, Storage

BATCH_ROWS = 4096

Row = tuple[str, int, dict[str, Any]]  # split, 0-based position in the split's file, the row
# the row index's metadata: the SHA-256 of the file it indexes, and the fields it was asked to keep
INDEXED_SHA256, INDEX_FIELDS = b"indexed_sha256", b"index_fields"
# the row index's column of where each line starts in its file (bytes): no export field is named so
LINE_START = "__line_start"


class StoredExport:
    def __init__(self, store: Storage, name: str, manifest: dict[str, Any]) -> None:
        self.store, self.name = store, name
        self.format = manifest.get("format", "jsonl")
        self.manifest_files: dict[str, dict[str, Any]] = manifest.get("files", {})
        # "train.jsonl" -> ("train", "jsonl"), in the manifest's order
        self.files = [tuple(file_name.rsplit(".", 1)) for file_name in self.manifest_files]

    @cached_property
    def _index_fields(self) -> dict[str, set[str]] | None:
        """Split -> the fields its row index was asked to keep (a row holds none of them but
        the index's columns), when every split has an index of the file the manifest lists."""
        if self.format == "parquet":
            return None
        fields = {}
        for split, extension in self.files:
            written = self.manifest_files.get(f"{split}.{extension}", {})
            if "sha256" not in written:
                return None
            try:
                with self.store.open_read(layout.export_row_index(self.name, split)) as handle:
                    footer = pq.ParquetFile(handle).metadata
            except NotMaterializedError:  # an export written before row indexes
                return None
            metadata = footer.metadata or {}
            if metadata.get(INDEXED_SHA256) != written["sha256"].encode() or footer.num_rows != written.get("rows"):
                return None
            fields[split] = set(orjson.loads(metadata[INDEX_FIELDS]))
        return fields

    @property
    def indexed(self) -> bool:
        """Every JSON-lines split has a row index of the file the manifest lists."""
        return self._index_fields is not None

    @property
    def whole_rows(self) -> bool:
        """Whether :meth:`scan` gives every field of a row: JSON lines parsed whole when
        there is no row index to read instead."""
        return self.format != "parquet" and not self.indexed

    def scan(self, fields: Collection[str]) -> Iterator[Row]:
        """Every row: Parquet rows and indexed JSON lines with only ``fields`` (those the file
        or its index has), other JSON lines whole."""
        for split, extension in self.files:
            if self.format == "parquet":
                yield from self._scan_parquet(layout.export_file(self.name, split, extension), split, fields)
            elif self.indexed and set(fields) <= self._index_fields[split]:
                yield from self._scan_parquet(layout.export_row_index(self.name, split), split, fields)
            else:
                for position, line in enumerate(self._lines(split, extension)):
                    yield split, position, orjson.loads(line)

    def rows_at(self, wanted: dict[str, set[int]]) -> Iterator[Row]:
        """Whole rows at the given positions of each split, in file order."""
        for split, extension in self.files:
            positions = wanted.get(split)
            if not positions:
                continue
            if self.format == "parquet":
                yield from self._parquet_rows(split, positions)
                continue
            starts = self._line_starts(split)
            if starts is not None:  # at 1 GB the report's samples took 0.59 s reading lines from the start
                with self._open(split, extension) as handle:
                    for position in sorted(p for p in positions if p < len(starts)):
                        handle.seek(starts[position])
                        yield split, position, orjson.loads(handle.readline())
                continue
            last = max(positions)
            for position, line in enumerate(self._lines(split, extension)):
                if position in positions:
                    yield split, position, orjson.loads(line)
                if position >= last:
                    break

    def _line_starts(self, split: str) -> list[int] | None:
        """Where each line of a JSON-lines split starts, from its row index (None: no index of
        this file, or one written before it kept them)."""
        if not self.indexed:
            return None
        with self.store.open_read(layout.export_row_index(self.name, split)) as handle:
            parquet = pq.ParquetFile(handle)
            if LINE_START not in parquet.schema_arrow.names:
                return None
            return parquet.read(columns=[LINE_START])[LINE_START].to_pylist()

    def _open(self, split: str, extension: str):
        return self.store.open_read(layout.export_file(self.name, split, extension))

    def _lines(self, split: str, extension: str) -> Iterator[bytes]:
        with self._open(split, extension) as handle:
            for line in handle:
                if line.strip():
                    yield line

    def _scan_parquet(self, path: str, split: str, fields: Collection[str]) -> Iterator[Row]:
        with self.store.open_read(path) as handle:
            parquet = pq.ParquetFile(handle)
            columns = [name for name in parquet.schema_arrow.names if name in fields]
            position = 0
            if not columns:  # nothing to read but the row count
                for position in range(parquet.metadata.num_rows):
                    yield split, position, {}
                return
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns):
                for row in batch.to_pylist():
                    yield split, position, row
                    position += 1

    def _parquet_rows(self, split: str, positions: set[int]) -> Iterator[Row]:
        with self._open(split, "parquet") as handle:
            parquet = pq.ParquetFile(handle)
            start = 0
            for group in range(parquet.metadata.num_row_groups):
                size = parquet.metadata.row_group(group).num_rows
                inside = sorted(p - start for p in positions if start <= p < start + size)
                if inside:
                    table = parquet.read_row_group(group).take(inside)
                    for offset, row in zip(inside, table.to_pylist()):
                        yield split, start + offset, row
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

    def commit(self, indexed_sha256: str) -> None:
        """Closes the index as the index of the file with this hash and puts it in place; an
        incomplete index is discarded (the file is then scanned line by line)."""
        if not self.complete:
            self.discard()
            return
        self.parquet.add_key_value_metadata({INDEXED_SHA256: indexed_sha256.encode(),
                                             INDEX_FIELDS: orjson.dumps(self.fields)})
        self.parquet.close()
        self.staged.commit()

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self.parquet.close()
        self.staged.discard()


class StagedExport:
    """One export's split files, written chunk by chunk under temporary names.

    Nothing is visible until :meth:`commit` puts every split in place; :meth:`discard`
    leaves the previous export untouched (a failed check writes nothing). A JSON-lines
    export given ``index_fields`` also writes each split's row index.
    """

    def __init__(self, store: Storage, name: str, splits: tuple[str, ...], file_format: str,
                 arrow_schema: pa.Schema, index_fields: Collection[str] = ()) -> None:
        self.file_format = file_format
        self.splits: dict[str, _SplitFile] = {}
        self.indexes: dict[str, _RowIndex] = {}
        parquet_schema = arrow_schema if file_format == "parquet" else None
        try:
            for split in splits:
                staged = store.stage(layout.export_file(name, split, file_format))
                self.splits[split] = _SplitFile(staged, parquet_schema)
                if index_fields and file_format == "jsonl":
                    self.indexes[split] = _RowIndex(store.stage(layout.export_row_index(name, split)), index_fields,
                                                    arrow_schema)
        except BaseException:
            self.discard()
            raise

    def write(self, split: str, records: list[dict[str, Any]]) -> list[int] | None:
        """Appends ``records`` to the split; returns each JSON line's length in characters
        (None for Parquet, which has no lines)."""
        written = self.splits[split].write(records)
        if written is None:
            return None
        chars, starts = written
        if split in self.indexes:
            self.indexes[split].write(records, starts)
        return chars

    @property
    def rows(self) -> dict[str, int]:
        return {split: file.rows for split, file in self.splits.items()}

    def commit(self) -> dict[str, dict]:
        """Puts every split in place, then its row index; returns file name -> its sha256,
        bytes and rows (for the manifest)."""
        try:
            for split, file in self.splits.items():
                file.close()
                file.staged.commit()
                if split in self.indexes:
                    self.indexes.pop(split).commit(file.out.sha256.hexdigest())
        except BaseException:
            self.discard()  # the splits not committed yet
            raise
        return {f"{split}.{self.file_format}": {"sha256": file.out.sha256.hexdigest(), "bytes": file.out.size,
                                                "rows": file.rows}
                for split, file in self.splits.items()}

    def discard(self) -> None:
        for file in self.splits.values():
            with contextlib.suppress(Exception):  # a writer left open would write its footer when collected
                file.close()
            file.staged.discard()
        for index in self.indexes.values():
            index.discard()
