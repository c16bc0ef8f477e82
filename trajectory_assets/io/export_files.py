"""An export's split files, read back row by row for the report.

Which files an export has, their format and row counts come from its manifest, so any
export (a flavor added later included) is read the same way. JSON lines are parsed line
by line; Parquet files are read a batch at a time, only the columns asked for, and
:meth:`StoredExport.rows_at` reads only the row groups that hold the rows asked for.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import orjson
import pyarrow.parquet as pq

from trajectory_assets import layout
from trajectory_assets.io.storage import Storage, StorageError

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
        relative = layout.export_file(self.name, split, extension)
        try:
            return self.store.fs.open(self.store.path(relative), "rb")
        except FileNotFoundError:
            raise StorageError(f"{self.store.uri(relative)} does not exist: materialize its export first") from None

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
