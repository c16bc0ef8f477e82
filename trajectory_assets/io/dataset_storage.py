"""A dataset's storage: its own root, and each batch's files where the batch's source keeps them.

A source is ingested once, into its own storage, whatever datasets read it; a dataset writes
its exports and report under its own root. Its steps read and write through one ``Storage``
that sends a batch's files (``layout.BATCH_FOLDERS``) to its source's storage and every other
file to the dataset's root, so the export and report code need not know where each batch
lives. (Decontamination flags an export step finds are saved beside the batch, for every
dataset that reads it.)
"""

from __future__ import annotations

from collections.abc import Mapping

from trajectory_assets import layout
from trajectory_assets.io.storage import StagedFile, Storage, StorageError


# the methods built only on the routed ones above them (open_read, stage), so routed as well
BUILT_ON_ROUTED = ("open_write", "write_bytes", "read_bytes", "read_json", "read_jsonl", "parquet_writer",
                   "iter_parquet")


class DatasetStorage(Storage):
    def __init__(self, root: str, batch_stores: Mapping[str, Storage]) -> None:
        """``batch_stores``: batch key -> its source's storage (a batch absent from it is read
        under ``root``, as when the source writes where the dataset does)."""
        super().__init__(root)
        self._own = Storage(root)
        self._batch_stores = batch_stores

    @classmethod
    def reading(cls, root: str, batch_roots: Mapping[str, str]) -> "DatasetStorage":
        """The storage of a dataset under ``root`` whose batches (key -> the storage root of its
        source) are read where their sources keep them: one ``Storage`` per source root."""
        own = root.rstrip("/")
        stores = {source_root: Storage(source_root) for source_root in set(batch_roots.values())
                  if source_root.rstrip("/") != own}
        return cls(root, {key: stores[source_root] for key, source_root in batch_roots.items()
                          if source_root in stores})

    def _store_for(self, relative: str) -> Storage:
        for folder in layout.BATCH_FOLDERS:
            if relative.startswith(folder):
                name = relative[len(folder):]
                dot = name.find(".")
                while dot != -1:  # a key may hold dots itself: try each prefix ending before one
                    store = self._batch_stores.get(name[:dot])
                    if store is not None:
                        return store
                    dot = name.find(".", dot + 1)
        return self._own

    def path(self, relative: str) -> str:
        return self._store_for(relative).path(relative)

    def uri(self, relative: str) -> str:
        return self._store_for(relative).uri(relative)

    def exists(self, relative: str) -> bool:
        return self._store_for(relative).exists(relative)

    def stage(self, relative: str) -> StagedFile:
        return self._store_for(relative).stage(relative)

    def open_read(self, relative: str):
        return self._store_for(relative).open_read(relative)

    def remove(self, relative: str) -> None:
        self._store_for(relative).remove(relative)

    def remove_folder(self, relative: str) -> None:
        self._store_for(relative).remove_folder(relative)

    def move(self, source: str, destination: str) -> None:
        self._same_store(source, destination, "move").move(source, destination)

    def copy(self, source: str, destination: str) -> None:
        self._same_store(source, destination, "copy").copy(source, destination)

    def _same_store(self, source: str, destination: str, verb: str) -> Storage:
        store = self._store_for(source)
        if self._store_for(destination) is not store:  # only ever a dataset's own files: never across roots
            raise StorageError(f"cannot {verb} {self.uri(source)} to {self.uri(destination)}: another storage")
        return store

    def checksum(self, relative: str) -> str:
        return self._store_for(relative).checksum(relative)

    def file_names(self, folder: str) -> list[str]:
        return self._store_for(folder).file_names(folder)

    def folder_names(self, folder: str) -> list[str]:
        return self._store_for(folder).folder_names(folder)

    def total_size(self, relatives: list[str]) -> int:
        by_store: dict[int, tuple[Storage, list[str]]] = {}
        for relative in relatives:
            store = self._store_for(relative)
            by_store.setdefault(id(store), (store, []))[1].append(relative)
        return sum(store.total_size(paths) for store, paths in by_store.values())
