"""An export's split files: written as one staged set (:class:`StagedExport`), read back row
by row for the report (:class:`StoredExport`).

Which files an export has, their format and row counts come from its manifest, so any
export (a flavor added later included) is read the same way. JSON lines are parsed line
by line; Parquet files are read a batch at a time, only the columns asked for, and
:meth:`StoredExport.rows_at` reads only the row groups that hold the rows asked for.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import contextlib
import hashlib

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from trajectory_assets import layout
from trajectory_assets.formats.arrow_rows import table_from_records
from trajectory_assets.io.storage import StagedFile, Storage

BATCH_ROWS = 4096

Row = tuple[str, int, dict[str, Any]]  # split, 0-based position in the split's file, the row


class StoredExport:
    def __init__(self, store: Storage, name: str, manifest: dict[str, Any]) -> None:
        self.store, self.name = store, name
        self.format = manifest.get("format", "jsonl")
        self.whole_rows = self.format != "parquet"  # a JSON line is parsed whole anyway: scan() keeps it so
        # "train.jsonl" -> ("train", "jsonl"), in the manifest's order
        self.files = [tuple(file_name.rsplit(".", 1)) for file_name in manifest.get("files", {})]

    def scan(self, fields: Collection[str]) -> Iterator[Row]:
        """Every row: Parquet rows with only ``fields`` (those the file has), JSON lines whole."""
        for split, extension in self.files:
            if self.format == "parquet":
                yield from self._scan_parquet(split, fields)
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
            last = max(positions)
            for position, line in enumerate(self._lines(split, extension)):
                if position in positions:
                    yield split, position, orjson.loads(line)
                if position >= last:
                    break

    def _open(self, split: str, extension: str):
        return self.store.open_read(layout.export_file(self.name, split, extension))

    def _lines(self, split: str, extension: str) -> Iterator[bytes]:
        with self._open(split, extension) as handle:
            for line in handle:
                if line.strip():
                    yield line

    def _scan_parquet(self, split: str, fields: Collection[str]) -> Iterator[Row]:
        with self._open(split, "parquet") as handle:
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

    def write(self, records: list[dict[str, Any]]) -> list[int] | None:
        """Appends the records; returns each JSON line's length in characters (None for Parquet)."""
        self.rows += len(records)
        if self.parquet is not None:
            self.parquet.write_table(table_from_records(records, self.arrow_schema))
            return None
        lines = [orjson.dumps(record) for record in records]
        self.out.write(b"\n".join([*lines, b""]))  # the trailing b"" ends the last line: no extra copy
        # characters, not bytes: a byte that continues a UTF-8 character is not one
        return [len(line) if line.isascii() else len(line.decode()) for line in lines]

    def close(self) -> None:
        if self.parquet is not None:
            self.parquet.close()  # writes the footer (an empty split is still a valid file)
            self.parquet = None


class StagedExport:
    """One export's split files, written chunk by chunk under temporary names.

    Nothing is visible until :meth:`commit` puts every split in place; :meth:`discard`
    leaves the previous export untouched (a failed check writes nothing).
    """

    def __init__(self, store: Storage, name: str, splits: tuple[str, ...], file_format: str,
                 arrow_schema: pa.Schema) -> None:
        self.file_format = file_format
        self.splits: dict[str, _SplitFile] = {}
        parquet_schema = arrow_schema if file_format == "parquet" else None
        try:
            for split in splits:
                staged = store.stage(layout.export_file(name, split, file_format))
                self.splits[split] = _SplitFile(staged, parquet_schema)
        except BaseException:
            self.discard()
            raise

    def write(self, split: str, records: list[dict[str, Any]]) -> list[int] | None:
        """Appends ``records`` to the split; returns each JSON line's length in characters
        (None for Parquet, which has no lines)."""
        return self.splits[split].write(records)

    @property
    def rows(self) -> dict[str, int]:
        return {split: file.rows for split, file in self.splits.items()}

    def commit(self) -> dict[str, dict]:
        """Puts every split in place; returns file name -> its sha256, bytes and rows (for the manifest)."""
        try:
            for file in self.splits.values():
                file.close()
                file.staged.commit()
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
