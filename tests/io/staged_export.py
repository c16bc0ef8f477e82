"""An export's split files written and committed in one process, for tests that need an
export on disk: a ``ShardWriter`` per shard, then ``commit_shards``, as the shard steps and
the merge of a run do (``exports/writer.py``)."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa

from trajectory_assets import layout
from trajectory_assets.io.export_files import ShardWriter, WrittenShard, commit_shards, discard_shards
from trajectory_assets.io.storage import Storage


def commit_export(store: Storage, name: str, splits: tuple[str, ...], file_format: str, arrow_schema: pa.Schema,
                  rows: dict[int, dict[str, list[dict[str, Any]]]], shards: int = 1) -> dict[str, dict]:
    """Shards ``0 .. shards - 1`` of the export written (``rows``: shard -> split -> its
    records; a shard or split not there is written empty) and committed; returns the
    manifest's ``files``. Nothing is left in the staging folder, whatever happens."""
    if not set(rows) <= set(range(shards)):
        raise ValueError(f"{name} has shards 0-{shards - 1}, not {sorted(set(rows) - set(range(shards)))}")
    run = uuid.uuid4().hex
    written: list[WrittenShard] = []
    try:
        for shard in range(shards):
            writer = ShardWriter(store, name, splits, file_format, arrow_schema, shard, run)
            try:
                for split, records in rows.get(shard, {}).items():
                    writer.write(split, records)
            except BaseException:
                writer.discard()
                raise
            written += writer.finish()
        return commit_shards(store, name, splits, file_format, shards, written)
    except BaseException:
        discard_shards(store, written)
        raise
    finally:
        store.remove_folder(layout.staging_run(run))
