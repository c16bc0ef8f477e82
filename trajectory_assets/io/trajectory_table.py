"""The validated trajectories of every batch as one table, read in chunks.

Implements ``datasets.families.TrajectoryTable`` over the per-batch Parquet files, so the
cross-batch assets never hold more than one chunk of message payloads at a time.

Batches are ingested one by one, so a record copied into two files (a re-synced bucket,
a gzip appended to again) is valid in both. The table keeps its first occurrence, in
batch order, so no dataset trains on one rollout twice; the report counts the copies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajectory_assets import layout
from trajectory_assets.buckets import BUCKETS, buckets_of
from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA
from trajectory_assets.io.storage import NotMaterializedError, Storage

# rows per chunk of message payloads: an SFT chunk is rendered in four formats at once, so it
# bounds the exports' memory (on the 250 MB benchmark corpus the SFT step peaked at 909 MiB
# with 4096 rows and 620 MiB with 1024, 10% slower)
CHUNK_ROWS = 1024


class StoredTrajectories:
    def __init__(self, store: Storage, batches: list[str], chunk_rows: int | None = None) -> None:
        self.store = store
        self.batches = batches  # in a fixed order: exports follow it
        self.chunk_rows = chunk_rows or CHUNK_ROWS  # read here so a test can shrink it for a whole run
        missing = [key for key in batches if not store.exists(layout.batch_summary(key))]
        if missing:
            raise NotMaterializedError(
                f"{len(missing)} registered batch(es) not ingested yet: {missing[:5]}; "
                "materialize validated_trajectories for them first"
            )

    def decontamination_flags(self, fingerprint: str) -> tuple[dict[str, str], list[str], list | None]:
        """The benchmark matches stored beside each batch under ``fingerprint`` (by ingest, or by
        an export step that scanned the batch), trajectory_id -> benchmark; the batches without
        them (ingested before these benchmarks were configured, or with others); and the
        benchmarks' n-gram counts the flags recorded (None without current flags). Each
        benchmark set has its own file, so the flags of other sets are never read here."""
        found: dict[str, str] = {}
        ngrams = None
        current, stale = self._records_beside(
            lambda key: (layout.batch_decontamination(key, fingerprint), layout.batch_decontamination_before_sets(key)),
            lambda flags: flags.get("fingerprint") == fingerprint)
        for flags in current:
            found.update(flags["contaminated"])
            ngrams = flags.get("ngrams")
        return found, stale, ngrams

    def tool_use_records(self, rule: int) -> tuple[dict[str, dict[str, list[int]]], list[str]]:
        """The tool use stored beside each batch under ``rule`` (``report/tool_use.py``),
        trajectory_id -> tool -> [calls, failed results], the first batch's where several
        hold one; and the batches without a current record."""
        found: dict[str, dict[str, list[int]]] = {}
        current, stale = self._records_beside(lambda key: (layout.batch_tool_use(key),),
                                              lambda record: record.get("rule") == rule)
        for record in current:
            for trajectory_id, used in record["trajectories"].items():
                found.setdefault(trajectory_id, used)
        return found, stale

    def near_signature_files(self) -> Iterator[tuple[str, pa.Table | None]]:
        """Each batch's key and the signatures stored beside it (``layout.batch_near_signatures``,
        with the schema metadata saying which rules made them), None where it has none, in batch order."""
        for key in self.batches:
            path = layout.batch_near_signatures(key)
            if not self.store.exists(path):
                yield key, None
                continue
            with self.store.open_read(path) as handle:
                yield key, pq.read_table(handle)

    def _records_beside(self, paths_of: Callable[[str], tuple[str, ...]],
                        is_current: Callable[[dict], bool]) -> tuple[list[dict], list[str]]:
        """The current records kept beside the batches, in batch order (of a batch's paths,
        the first holding a current one), and the batches without one."""
        current, stale = [], []
        for key in self.batches:
            found = next((record for record in map(self._read_if_stored, paths_of(key))
                          if record is not None and is_current(record)), None)
            if found is not None:
                current.append(found)
            else:
                stale.append(key)
        return current, stale

    def _read_if_stored(self, path: str) -> dict | None:
        return self.store.read_json(path) if self.store.exists(path) else None

    def batch(self, key: str) -> "StoredTrajectories":
        """One batch of the table as a table of its own."""
        return StoredTrajectories(self.store, [key], self.chunk_rows)

    def save_decontamination_flags(self, key: str, flags: dict) -> None:
        """A batch's matches against one benchmark set (``flags["fingerprint"]``), found by
        scanning it, kept for the next steps and runs in that set's own file."""
        self.store.write_bytes(layout.batch_decontamination(key, flags["fingerprint"]), orjson.dumps(flags))

    def save_tool_use(self, key: str, record: dict) -> None:
        """A batch's tool use, counted by reading it, kept for the next reports."""
        self.store.write_bytes(layout.batch_tool_use(key), orjson.dumps(record))

    def scan(self, columns: list[str], ids: set[str] | None = None,
             buckets: tuple[int, int] | None = None) -> Iterator[pd.DataFrame]:
        """The stored rows' ``columns``, in chunks, in batch order then stored order, each
        trajectory_id once (its first occurrence). ``ids``: only those trajectories.
        ``buckets``: ``(first, stop)``, only the rows with ``first <= bucket < stop`` (an
        export shard), reading only the row groups whose buckets overlap it."""
        wanted = pa.array(sorted(ids), type=pa.string()) if ids is not None else None
        read = columns if "trajectory_id" in columns else ["trajectory_id", *columns]
        seen: set[str] = set()
        produced = False
        for table in self._tables(read, wanted, buckets):
            first = self._first_occurrences(table, seen)
            if first.num_rows:
                produced = True
                yield first.select(columns).to_pandas()
        if not produced:  # an empty table still has its columns and types
            yield TRAJECTORY_ARROW_SCHEMA.empty_table().select(columns).to_pandas()

    def _tables(self, columns: list[str], wanted: pa.Array | None,
                buckets: tuple[int, int] | None) -> Iterator[pa.Table]:
        for key in self.batches:
            with self.store.open_read(layout.batch_trajectories(key)) as handle:
                parquet = pq.ParquetFile(handle)
                # a batch ingested before buckets were stored: computed from its prompt keys
                stored = "bucket" in parquet.schema_arrow.names
                groups = _groups_holding(parquet, wanted) if _few(wanted, parquet) else None
                if buckets is not None and stored:
                    overlapping = _groups_in_buckets(parquet, buckets)
                    groups = overlapping if groups is None else [group for group in groups if group in overlapping]
                if groups == []:
                    continue
                bucketed = buckets is not None or "bucket" in columns
                read = [name for name in columns if stored or name != "bucket"]
                needed = "bucket" if stored else "prompt_key"
                if bucketed and needed not in read:
                    read.append(needed)
                for batch in parquet.iter_batches(batch_size=self.chunk_rows, row_groups=groups, columns=read):
                    table = pa.Table.from_batches([batch])
                    if bucketed and not stored:
                        table = table.append_column(
                            "bucket", pa.array(buckets_of(table["prompt_key"].to_pylist()), pa.int16()))
                    if wanted is not None:
                        table = table.filter(pc.is_in(table["trajectory_id"], value_set=wanted))
                    if buckets is not None:
                        table = table.filter(pc.and_(pc.greater_equal(table["bucket"], buckets[0]),
                                                     pc.less(table["bucket"], buckets[1])))
                    if table.num_rows:
                        yield table

    def batch_footprints(self) -> list[tuple[str, str, np.ndarray]]:
        """Each batch, in batch order: its key, its trajectories file's ``Storage.checksum``
        and the buckets its rows may be in (a mask over every bucket, from its row groups'
        statistics: every bucket for a group without them or a batch stored before buckets).
        What a refresh compares a shard's rows by, reading footers only."""
        footprints = []
        for key in self.batches:
            path = layout.batch_trajectories(key)
            checksum = self.store.checksum(path)  # taken first: a file written again meanwhile gets another
            with self.store.open_read(path) as handle:
                metadata = pq.ParquetFile(handle).metadata
            may_hold = np.zeros(BUCKETS, dtype=bool)
            names = [metadata.schema.column(index).path for index in range(metadata.num_columns)]
            for group in range(metadata.num_row_groups):
                statistics = (metadata.row_group(group).column(names.index("bucket")).statistics
                              if "bucket" in names else None)
                if statistics is None or not statistics.has_min_max:
                    may_hold[:] = True
                    break
                may_hold[statistics.min:statistics.max + 1] = True
            footprints.append((key, checksum, may_hold))
        return footprints

    @staticmethod
    def _first_occurrences(table: pa.Table, seen: set[str]) -> pa.Table:
        ids = table["trajectory_id"].to_pylist()
        keep = [trajectory_id not in seen and not seen.add(trajectory_id) for trajectory_id in ids]
        return table if all(keep) else table.filter(pa.array(keep))


def _few(wanted: pa.Array | None, parquet: pq.ParquetFile) -> bool:
    """Whether so few ids are wanted that most row groups of a batch may hold none: fewer
    than a row group holds rows. (For many ids, finding the groups cost 0.25 s more in a
    scan of half the 1 GB benchmark corpus, which reads nearly every group anyway.)"""
    if wanted is None or parquet.metadata.num_row_groups < 2:
        return False
    return len(wanted) < parquet.metadata.num_rows / parquet.metadata.num_row_groups


def _groups_holding(parquet: pq.ParquetFile, wanted: pa.Array) -> list[int]:
    """The row groups of a batch holding one of the ``wanted`` ids: only their payloads are
    read and decompressed. Ids are hashes, so the groups' min/max statistics cannot tell;
    the id column alone is small (the 1 GB benchmark corpus: the report's ten failing-task
    prompts took 0.76 s reading every group's messages, and 0.05 s this way)."""
    return [group for group in range(parquet.metadata.num_row_groups)
            if pc.any(pc.is_in(parquet.read_row_group(group, columns=["trajectory_id"])["trajectory_id"],
                               value_set=wanted)).as_py()]


def _groups_in_buckets(parquet: pq.ParquetFile, buckets: tuple[int, int]) -> list[int]:
    """The row groups of a batch whose buckets (their min/max statistics) overlap ``buckets``,
    ``(first, stop)``: ingest writes a batch's rows ordered by bucket, in groups cut at bucket
    changes (``ingest/bucket_order.py``), so a range reads few groups beyond its own rows. A
    group without statistics is read (and filtered)."""
    first, stop = buckets
    metadata = parquet.metadata
    column = next(index for index in range(metadata.num_columns) if metadata.schema.column(index).path == "bucket")
    groups = []
    for group in range(metadata.num_row_groups):
        statistics = metadata.row_group(group).column(column).statistics
        if statistics is None or not statistics.has_min_max or (statistics.min < stop and statistics.max >= first):
            groups.append(group)
    return groups
