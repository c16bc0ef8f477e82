"""An export's split files: written shard by shard to a staging folder
(:class:`ShardWriter`), put in place under the Hub's names by one commit of every shard
(:func:`commit_shards`), and read back row by row (:class:`StoredExport`: the report's scan
of an export written before summaries).

Each split is the concatenation of its files in name order, ``train-00000-of-00004.jsonl``
first (what ``datasets`` reads for the card's glob ``train-*.jsonl``); a row's position is its
index in that concatenation. Which files an export has, their split, format and row counts
come from its manifest, so any export (a flavor added later included, or one written before
shards, with one ``train.jsonl`` per split) is read the same way.

A shard can be written by a process of its own: a :class:`ShardWriter` leaves whole files in
the build's staging folder (``layout.export_staging``, deterministic names per shard) and
returns a JSON-serializable :class:`WrittenShard` per split; whichever process then holds every
shard's records commits them. (A ``StagedFile`` itself cannot be committed from another
process: on an object store only the handle that uploads it can complete the upload.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import contextlib
import hashlib
import posixpath
import re
import uuid
from dataclasses import asdict, dataclass

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from trajectory_assets import layout
from trajectory_assets.io.arrow_rows import table_from_records
from trajectory_assets.io.storage import NotMaterializedError, StagedFile, Storage

BATCH_ROWS = 4096

# split, 0-based position in the split (its files' rows one after the other), the row
Row = tuple[str, int, dict[str, Any]]


class StoredExport:
    def __init__(self, store: Storage, name: str, manifest: dict[str, Any]) -> None:
        self.store, self.name = store, name
        self.format = manifest.get("format", "jsonl")
        # split -> its files in the order of their rows
        self.splits: dict[str, list[str]] = {}
        for file_name, described in manifest.get("files", {}).items():
            self.splits.setdefault(layout.split_of(file_name, described), []).append(file_name)

    def rows(self) -> Iterator[Row]:
        """Every row whole, each split's files in order: JSON lines parsed, Parquet rows with
        Arrow's types."""
        for split, files in self.splits.items():
            position = 0
            for file_name in files:
                rows = self._parquet_rows(file_name) if self.format == "parquet" else self._json_rows(file_name)
                for row in rows:
                    yield split, position, row
                    position += 1

    def _path(self, file_name: str) -> str:
        return layout.export_split_file(self.name, file_name)

    def _json_rows(self, file_name: str) -> Iterator[dict[str, Any]]:
        with self.store.open_read(self._path(file_name)) as handle:
            for line in handle:
                if line.strip():
                    yield orjson.loads(line)

    def _parquet_rows(self, file_name: str) -> Iterator[dict[str, Any]]:
        with self.store.open_read(self._path(file_name)) as handle:
            for batch in pq.ParquetFile(handle).iter_batches(batch_size=BATCH_ROWS):
                yield from batch.to_pylist()


# bytes gathered before a write to the staged file: Parquet's writer hands over every page
# and header on its own (about 40 writes per row group), and each write goes through fsspec's
# file object. A shard step holds one buffer per split file (26 with every export): 256 KiB
# each bounds them to 6.5 MiB, and a row group is still about one write
WRITE_BUFFER_BYTES = 1 << 18


class _HashingWriter:
    """Counts and hashes the bytes on their way to the file (what the manifest records),
    handing them over in writes of at least ``WRITE_BUFFER_BYTES`` (the last one excepted)."""

    def __init__(self, handle) -> None:
        self.handle = handle
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.buffer = bytearray()
        self.closed = False

    def write(self, data) -> int:
        view = memoryview(data)
        self.size += view.nbytes
        if self.buffer or view.nbytes < WRITE_BUFFER_BYTES:
            self.buffer += view
            if len(self.buffer) >= WRITE_BUFFER_BYTES:
                self.flush()
        else:  # already large: no copy into the buffer
            self._send(view)
        return view.nbytes

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        """Hands the buffered bytes to the file (Parquet's writer calls it too, and it stays cheap)."""
        if self.buffer:
            self._send(self.buffer)
            self.buffer = bytearray()

    def _send(self, data) -> None:
        self.handle.write(data)
        self.sha256.update(data)


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
        """Writes what is left (a Parquet file's footer: an empty split is still a valid file)."""
        if self.parquet is not None:
            self.parquet.close()
            self.parquet = None
        self.out.flush()


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> WrittenShard:
        return cls(**record)


class ShardWriter:
    """Shard ``shard`` of an export's splits: one file per split (empty ones too), written to
    the staging folder of the build ``run``.

    :meth:`finish` makes them whole files under names that say split and shard
    (``train-00003.jsonl``), and returns what it wrote; nothing is in the export's folder until
    :func:`commit_shards` puts every shard's files there. Each staged file is itself written
    under a temporary name first (``Storage.stage``), so a shard that dies leaves none.
    """

    def __init__(self, store: Storage, name: str, splits: tuple[str, ...], file_format: str,
                 arrow_schema: pa.Schema, shard: int = 0, run: str = "") -> None:
        self.store, self.shard = store, shard
        self.staging = layout.export_staging(name, run or uuid.uuid4().hex)
        self.files: dict[str, _SplitFile] = {}
        parquet_schema = arrow_schema if file_format == "parquet" else None
        try:
            for split in splits:
                self.files[split] = _SplitFile(store.stage(f"{self.staging}/{split}-{shard:05d}.{file_format}"),
                                               parquet_schema)
        except BaseException:
            self.discard()
            raise

    def write(self, split: str, records: list[dict[str, Any]]) -> list[int] | None:
        """Appends ``records`` to the split; returns each JSON line's length in characters
        (None for Parquet, which has no lines)."""
        return self.files[split].write(records)

    def finish(self) -> list[WrittenShard]:
        """Closes every split's file in the staging folder; what was written, split by split."""
        written = []
        try:
            for split, file in self.files.items():
                file.close()
                file.staged.commit()
                written.append(WrittenShard(split, self.shard, file.staged.relative, file.out.sha256.hexdigest(),
                                            file.out.size, file.rows))
        except BaseException:
            self.discard()
            raise
        return written

    def discard(self) -> None:
        for file in self.files.values():
            with contextlib.suppress(Exception):  # a writer left open would write its footer when collected
                file.close()
            file.staged.discard()


def restage_committed_shard(store: Storage, name: str, splits: tuple[str, ...], file_format: str,
                            arrow_schema: pa.Schema, shard: int, run: str, kept: list[WrittenShard],
                            committed: dict[str, dict[str, Any]]) -> list[WrittenShard] | None:
    """Shard ``shard`` of the build ``run`` staged again from the export's committed files,
    without rendering: ``kept`` is what the committed build's shard wrote (its part), and
    ``committed`` the manifest's ``files``. Each split with rows is a copy of the committed
    file the manifest names for that split and shard, with the SHA-256 and rows the part
    wrote; a split without rows is written empty, as a render writes it. None, with nothing
    staged, when the committed build does not hold exactly those files: the caller then
    renders the shard."""
    listed = {entry.get("split"): (file_name, entry) for file_name, entry in committed.items()
              if entry.get("shard") == shard}
    for record in kept:
        file_name, entry = listed.get(record.split, (None, {}))
        if record.rows and (entry.get("sha256"), entry.get("rows")) != (record.sha256, record.rows):
            return None
    staged = {record.split: record
              for record in ShardWriter(store, name, splits, file_format, arrow_schema, shard, run).finish()}
    if sorted(staged) != sorted(record.split for record in kept):  # the writer changed
        remove_staged(store, staged.values())
        return None
    written = []
    try:
        for record in kept:
            empty = staged[record.split]
            if not record.rows:
                written.append(empty)
                continue
            store.copy(layout.export_split_file(name, listed[record.split][0]), empty.staged)
            written.append(WrittenShard(record.split, shard, empty.staged, record.sha256, record.bytes, record.rows))
    except NotMaterializedError:  # a committed file gone: render instead
        remove_staged(store, staged.values())
        return None
    return written


def remove_staged(store: Storage, written: Iterable[WrittenShard]) -> None:
    """One shard's staged files (other shards of the build share its staging folder)."""
    for record in written:
        store.remove(record.staged)


def commit_shards(store: Storage, name: str, splits: tuple[str, ...], file_format: str, shards: int,
                  written: list[WrittenShard]) -> dict[str, dict[str, Any]]:
    """Puts every shard's staged files in place as the export's files; returns the manifest's
    ``files``: each file's name -> its split, the shard it came from, sha256, bytes and rows.

    A split's files are its shards that have rows, in shard order, under the Hub's names
    (``train-00000-of-00004.jsonl``: ``datasets`` reads an empty Parquet shard among others as
    an error); a split without rows keeps one empty file, so every split has a file.
    ``written`` must hold every split of every shard ``0 .. shards - 1`` (a shard that did not
    report is an error, never a smaller export). Then no other data file or staging folder
    of the export is left (an earlier build's ``train.jsonl``, or its
    ``train-00006-of-00007.jsonl`` when there are now 4 files), nor the row indexes earlier
    builds kept (``layout.legacy_row_indexes``).
    """
    reported = sorted((shard.split, shard.shard) for shard in written)
    expected = sorted((split, shard) for split in splits for shard in range(shards))
    if reported != expected:
        raise ValueError(f"cannot commit {name}: the shards written ({reported}) are not every split of "
                         f"shards 0-{shards - 1} ({expected})")
    files: dict[str, dict[str, Any]] = {}
    for split in splits:
        of_split = sorted((shard for shard in written if shard.split == split), key=lambda shard: shard.shard)
        kept = [shard for shard in of_split if shard.rows] or of_split[:1]
        for number, shard in enumerate(kept):
            file_name = layout.split_file_name(split, number, len(kept), file_format)
            store.move(shard.staged, layout.export_split_file(name, file_name))
            files[file_name] = {"split": split, "shard": shard.shard, "sha256": shard.sha256, "bytes": shard.bytes,
                                "rows": shard.rows}
    _remove_other_files(store, layout.export_folder(name), _split_file_pattern(splits), set(files))
    store.remove_folder(layout.legacy_row_indexes(name))
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
