"""The storage root where every asset writes (a local folder or an fsspec URL).

Writes never leave a half-written file under its final name: on a local disk the data
goes to a temporary sibling that is renamed into place; object stores (s3fs) only make an
object visible once its upload completes, and a write that fails is discarded (its
multipart upload aborted), so the previous object stays whole.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import uuid
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

import orjson
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

if TYPE_CHECKING:  # imported where they are used: the CLI reads JSON here without Arrow
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq


class StorageError(Exception):
    """Storage cannot be written or read (a fault of the disk, the network or the object
    store, worth retrying); the message names the path."""


class NotMaterializedError(Exception):
    """A stored file that is not there: the asset that writes it has not been materialized
    (yet). Not a storage fault: retrying the step would not write it."""


class Storage:
    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/") or root
        self.fs, self._base = url_to_fs(self.root)
        self._local = isinstance(self.fs, LocalFileSystem)
        self._prefix = root.split("://", 1)[0] + "://" if "://" in root else ""

    def path(self, relative: str) -> str:
        parts = relative.split("/")
        if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise StorageError(f"refusing a path outside the storage root: {relative!r}")
        return posixpath.join(self._base, relative)

    def uri(self, relative: str) -> str:
        """The user-facing location of a stored file (for metadata and messages)."""
        return self._prefix + self.path(relative)

    def exists(self, relative: str) -> bool:
        return self.fs.exists(self.path(relative))

    def stage(self, relative: str) -> StagedFile:
        """A file being written to ``relative``, made visible only by its ``commit()``."""
        return StagedFile(self, relative)

    @contextlib.contextmanager
    def open_write(self, relative: str) -> Iterator[IO[bytes]]:
        """A binary handle whose bytes replace ``relative`` only if the ``with`` block ends
        normally; on an exception the previous file or object stays as it was."""
        staged = self.stage(relative)
        try:
            yield staged.handle
        except BaseException as error:
            staged.discard()
            if isinstance(error, OSError):
                raise StorageError(f"cannot write {self.uri(relative)}: {error}") from error
            raise
        staged.commit()

    def open_read(self, relative: str) -> IO[bytes]:
        """A binary handle on a stored file (for readers that stream it)."""
        try:
            return self.fs.open(self.path(relative), "rb")
        except FileNotFoundError:
            raise NotMaterializedError(f"{self.uri(relative)} does not exist: materialize its asset first") from None

    def write_bytes(self, relative: str, data: bytes) -> None:
        with self.open_write(relative) as handle:
            handle.write(data)

    def remove(self, relative: str) -> None:
        """Delete a stored file; one that is not there is fine."""
        self._remove(relative, self.fs.rm_file)

    def remove_folder(self, relative: str) -> None:
        """Delete a stored folder and every file in it; one that is not there is fine."""
        self._remove(relative, lambda path: self.fs.rm(path, recursive=True))

    def _remove(self, relative: str, rm: Callable[[str], None]) -> None:
        try:
            rm(self.path(relative))
        except FileNotFoundError:
            pass
        except OSError as error:
            raise StorageError(f"cannot remove {self.uri(relative)}: {error}") from error
        if not self._local:
            self.fs.invalidate_cache(self.path(relative))

    def move(self, source: str, destination: str) -> None:
        """Put a stored file under another name, replacing what is there: a rename on a local
        disk, a server-side copy then a delete on an object store (no bytes pass through here).
        So a file written by one process can be put in place by another."""
        self._transfer(source, destination, self.fs.mv, "move", "moved")
        if not self._local:
            self.fs.invalidate_cache(self.path(source))

    def copy(self, source: str, destination: str) -> None:
        """Write a copy of a stored file under another name, replacing what is there: a
        server-side copy on an object store (no bytes pass through here). What a refresh
        does with the files of a shard it did not have to render again."""
        self._transfer(source, destination, self.fs.copy, "copy", "copied")

    def _transfer(self, source: str, destination: str, operation: Callable[[str, str], None], verb: str,
                  done: str) -> None:
        try:
            self.fs.makedirs(posixpath.dirname(self.path(destination)), exist_ok=True)
            operation(self.path(source), self.path(destination))
        except FileNotFoundError:
            raise NotMaterializedError(f"{self.uri(source)} does not exist: it cannot be {done}") from None
        except OSError as error:
            raise StorageError(f"cannot {verb} {self.uri(source)} to {self.uri(destination)}: {error}") from error
        if not self._local:
            self.fs.invalidate_cache(self.path(destination))

    def checksum(self, relative: str) -> str:
        """A value that changes whenever the stored file is written again (fsspec's
        ``checksum``: a token of its size and modification time or inode on a local disk,
        its ETag on S3): equal values mean the same bytes, a new one only that they may
        differ. Read from the file's metadata, not its bytes."""
        if not self._local:  # another process may have written it since this one looked
            self.fs.invalidate_cache(self.path(relative))
        try:
            return str(self.fs.checksum(self.path(relative)))
        except FileNotFoundError:
            raise NotMaterializedError(f"{self.uri(relative)} does not exist: materialize its asset first") from None

    def file_names(self, folder: str) -> list[str]:
        """The names of the files directly in a stored folder, sorted (none when it is absent)."""
        return self._names(folder, "file")

    def folder_names(self, folder: str) -> list[str]:
        """The names of the folders directly in a stored folder, sorted (none when it is absent)."""
        return self._names(folder, "directory")

    def _names(self, folder: str, kind: str) -> list[str]:
        path = self.path(folder)
        if not self._local:  # another process may have written since this one listed it
            self.fs.invalidate_cache(path)
        try:
            listing = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return []
        return sorted(posixpath.basename(entry["name"].rstrip("/")) for entry in listing if entry["type"] == kind)

    def total_size(self, relatives: list[str]) -> int:
        """The bytes of those of the stored files that exist (one listing per folder)."""
        by_folder: dict[str, set[str]] = {}
        for relative in relatives:
            path = self.path(relative)
            by_folder.setdefault(posixpath.dirname(path), set()).add(path)
        total = 0
        for folder, wanted in by_folder.items():
            try:
                listing = self.fs.ls(folder, detail=True)
            except FileNotFoundError:
                continue
            total += sum(int(entry["size"] or 0) for entry in listing
                         if entry["name"].rstrip("/") in wanted)
        return total

    def read_bytes(self, relative: str) -> bytes:
        with self.open_read(relative) as handle:
            return handle.read()

    def read_json(self, relative: str) -> Any:
        return orjson.loads(self.read_bytes(relative))

    def read_jsonl(self, relative: str) -> list:
        return [orjson.loads(line) for line in self.read_bytes(relative).split(b"\n") if line]

    @contextlib.contextmanager
    def parquet_writer(self, relative: str, schema: pa.Schema) -> Iterator[pq.ParquetWriter]:
        import pyarrow.parquet as pq

        with self.open_write(relative) as handle:
            writer = pq.ParquetWriter(handle, schema, compression="zstd")
            try:
                yield writer
            finally:
                writer.close()

    def iter_parquet(self, relative: str, columns: list[str] | None, batch_rows: int) -> Iterator[pd.DataFrame]:
        """The file's rows as frames of at most ``batch_rows`` rows, each indexed from 0, so a
        file of any size is read in bounded memory. An empty file gives one empty frame: it
        still has the columns and their types."""
        import pyarrow.parquet as pq

        with self.open_read(relative) as handle:
            parquet = pq.ParquetFile(handle)
            empty = True
            for batch in parquet.iter_batches(batch_size=batch_rows, columns=columns):
                empty = False
                yield batch.to_pandas()
            if empty:
                table = parquet.schema_arrow.empty_table()
                yield (table.select(columns) if columns is not None else table).to_pandas()


class StagedFile:
    """A file being written. Its bytes replace the stored file only on :meth:`commit`;
    :meth:`discard` (or a failed commit) leaves the previous file or object as it was.

    On a local disk the bytes go to a temporary sibling that ``commit`` renames into place;
    an object store (s3fs) makes an object visible only once its upload completes, so
    ``commit`` completes it and ``discard`` aborts it, as fsspec's own ``__exit__`` would.
    """

    def __init__(self, store: Storage, relative: str) -> None:
        self.store, self.relative = store, relative
        self.final = store.path(relative)
        self.temporary = f"{self.final}.tmp-{uuid.uuid4().hex}" if store._local else None
        try:
            store.fs.makedirs(posixpath.dirname(self.final), exist_ok=True)
            self.handle: IO[bytes] = store.fs.open(self.temporary or self.final, "wb")
        except OSError as error:
            raise StorageError(f"cannot write {store.uri(relative)}: {error}") from error

    def commit(self) -> None:
        try:
            self.handle.close()  # an object upload completes (the object appears) only here
            if self.temporary is not None:
                os.replace(self.temporary, self.final)
        except BaseException as error:
            self.discard()  # e.g. completing a multipart upload failed: abort it
            if isinstance(error, OSError):
                raise StorageError(f"cannot write {self.store.uri(self.relative)}: {error}") from error
            raise

    def discard(self) -> None:
        if self.temporary is None:
            _discard(self.handle)
            return
        with contextlib.suppress(OSError):
            self.handle.close()
        with contextlib.suppress(OSError):
            os.remove(self.temporary)


def _discard(handle: IO[bytes]) -> None:
    """Drop an unfinished object write without committing it (s3fs aborts its multipart
    upload), and mark the handle closed so neither ``close()`` nor garbage collection can
    upload what was buffered."""
    discard = getattr(handle, "discard", None)
    try:
        if callable(discard):
            with contextlib.suppress(Exception):  # best effort: the original error matters more
                discard()
    finally:
        with contextlib.suppress(Exception):
            handle.closed = True  # type: ignore[misc]
