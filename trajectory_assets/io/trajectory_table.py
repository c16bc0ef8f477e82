"""The validated trajectories of every batch as one table, read in chunks.

Implements ``datasets.exports.TrajectoryTable`` over the per-batch Parquet files, so the
cross-batch assets never hold more than one chunk of message payloads at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajectory_assets import layout
from trajectory_assets.ingest import TRAJECTORY_ARROW_SCHEMA
from trajectory_assets.io.storage import Storage, StorageError

CHUNK_ROWS = 4096


class StoredTrajectories:
    def __init__(self, store: Storage, batches: list[str], chunk_rows: int = CHUNK_ROWS) -> None:
        self.store = store
        self.batches = batches  # in a fixed order: exports follow it
        self.chunk_rows = chunk_rows
        missing = [key for key in batches if not store.exists(layout.batch_summary(key))]
        if missing:
            raise StorageError(
                f"{len(missing)} registered batch(es) not ingested yet: {missing[:5]}; "
                "materialize validated_trajectories for them first"
            )

    def scan(self, columns: list[str], ids: set[str] | None = None) -> Iterator[pd.DataFrame]:
        wanted = pa.array(sorted(ids), type=pa.string()) if ids is not None else None
        produced = False
        for key in self.batches:
            with self.store.fs.open(self.store.path(layout.batch_trajectories(key)), "rb") as handle:
                for batch in pq.ParquetFile(handle).iter_batches(batch_size=self.chunk_rows, columns=columns):
                    table = pa.Table.from_batches([batch])
                    if wanted is not None:
                        table = table.filter(pc.is_in(table["trajectory_id"], value_set=wanted))
                    if table.num_rows:
                        produced = True
                        yield table.to_pandas()
        if not produced:  # an empty table still has its columns and types
            yield TRAJECTORY_ARROW_SCHEMA.empty_table().select(columns).to_pandas()
