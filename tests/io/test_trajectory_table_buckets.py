"""Range scans: a range of buckets (an export shard) reads its own rows exactly, once, in
batch order then stored order, and only the row groups whose buckets overlap it; a batch
stored before buckets were (no column, source order) is read as correctly."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import make_rollout, write_jsonl
from tests.io.test_trajectory_table import ingest_batch
from trajectory_assets import layout
from trajectory_assets.buckets import BUCKETS, bucket_of, shard_ranges
from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA
from trajectory_assets.ingest import bucket_order
from trajectory_assets.ingest.conversion import ingest
from trajectory_assets.io.source_files import discover
from trajectory_assets.io.storage import Storage
from trajectory_assets.io.trajectory_table import StoredTrajectories
from trajectory_assets.sources import INPUTS_SUFFIXES

COLUMNS = ["trajectory_id", "bucket", "source_uri", "source_line"]
# the trajectories' columns as ingest wrote them before buckets
BEFORE_BUCKETS = pa.schema([field for field in TRAJECTORY_ARROW_SCHEMA if field.name != "bucket"])


class ReadRecordingStorage(Storage):
    """A local storage that records the byte ranges read from each file."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.reads: dict[str, list[tuple[int, int]]] = {}

    def open_read(self, relative):
        return RecordingHandle(super().open_read(relative), self.reads.setdefault(relative, []))


class RecordingHandle:
    def __init__(self, handle, reads: list[tuple[int, int]]) -> None:
        self._handle, self._reads = handle, reads

    def read(self, size=-1):
        start = self._handle.tell()
        data = self._handle.read(size)
        self._reads.append((start, start + len(data)))
        return data

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()


def groups_read(store: ReadRecordingStorage, key: str) -> set[int]:
    """The row groups of a batch some byte of whose column chunks was read."""
    reads = store.reads[layout.batch_trajectories(key)]
    metadata = pq.ParquetFile(store.path(layout.batch_trajectories(key))).metadata
    touched = set()
    for group in range(metadata.num_row_groups):
        for column in range(metadata.num_columns):
            chunk = metadata.row_group(group).column(column)
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            if any(begin < start + chunk.total_compressed_size and end > start for begin, end in reads):
                touched.add(group)
    return touched


def rollouts(prefix: str, prompts: int) -> list[dict]:
    """One to three rollouts of each prompt, the prompts interleaved."""
    return [make_rollout(request_input=f"{prefix} {prompt}", reward=rollout / 3)
            for rollout in range(3) for prompt in range(prompts) if rollout <= prompt % 3]


def ingest_before_buckets(store: Storage, key: str, source) -> None:
    """A batch stored as ingest stored it before buckets: no bucket column, the source's
    order, a row group per block."""
    with store.parquet_writer(layout.batch_trajectories(key), BEFORE_BUCKETS) as writer:
        ingest(discover([str(source)], INPUTS_SUFFIXES), lambda table: writer.write_table(table.drop_columns(["bucket"])),
               lambda rows: None, batch_rows=4)
    store.write_bytes(layout.batch_summary(key), b"{}")


@pytest.fixture
def store(tmp_path, monkeypatch) -> ReadRecordingStorage:
    """Batch "a", batch "old" stored before buckets, and batch "b", which holds copies of
    some of a's and old's lines; row groups of at most four rows."""
    monkeypatch.setattr(bucket_order, "ROW_GROUP_ROWS", 4)
    store = ReadRecordingStorage(str(tmp_path / "out"))
    a, old = rollouts("a", 30), rollouts("old", 20)
    ingest_batch(store, "a", write_jsonl(tmp_path / "a.jsonl", a))
    ingest_before_buckets(store, "old", write_jsonl(tmp_path / "old.jsonl", old))
    ingest_batch(store, "b", write_jsonl(tmp_path / "b.jsonl", [*rollouts("b", 25), *a[::4], *old[::5]]))
    return store


def scanned(table: StoredTrajectories, **kwargs) -> pd.DataFrame:
    return pd.concat(list(table.scan(COLUMNS, **kwargs)), ignore_index=True)


@pytest.mark.parametrize("shards", [1, 2, 7])
def test_every_shard_partition_yields_each_row_once_in_batch_then_stored_order(store, shards):
    table = StoredTrajectories(store, ["a", "old", "b"], chunk_rows=5)
    every = scanned(table)
    assert every["bucket"].tolist() == [bucket_of(key) for key in
                                        scanned_keys(table)]  # the old batch's buckets are computed
    ranges = shard_ranges(np.bincount(every["bucket"], minlength=BUCKETS), -(-len(every) // shards))
    assert len(ranges) == shards
    parts = []
    for first, stop in ranges:
        part = scanned(table, buckets=(first, stop))
        inside = every[(every["bucket"] >= first) & (every["bucket"] < stop)].reset_index(drop=True)
        pd.testing.assert_frame_equal(part, inside)
        parts.append(part)
    together = pd.concat(parts)
    assert sorted(together["trajectory_id"]) == sorted(every["trajectory_id"])
    assert together["trajectory_id"].is_unique
    # b's copies of a's and old's lines are read from where they first appear, in a range too
    assert set(every[every["source_uri"].str.endswith("b.jsonl")]["source_line"]) == set(range(1, 1 + len(rollouts("b", 25))))


def scanned_keys(table: StoredTrajectories) -> list[str]:
    return [key for chunk in table.scan(["prompt_key"]) for key in chunk["prompt_key"]]


def test_a_range_scan_reads_only_the_row_groups_whose_buckets_overlap_it(store):
    parquet = pq.ParquetFile(store.path(layout.batch_trajectories("a")))
    buckets = [parquet.read_row_group(group, columns=["bucket"])["bucket"].to_pylist()
               for group in range(parquet.metadata.num_row_groups)]
    first, stop = buckets[3][0], buckets[5][-1] + 1  # from the first bucket of group 3 through group 5
    store.reads.clear()
    rows = scanned(StoredTrajectories(store, ["a"]), buckets=(first, stop))
    assert groups_read(store, "a") == {3, 4, 5} < set(range(len(buckets)))
    assert sorted(rows["bucket"]) == sorted(b for group in buckets for b in group if first <= b < stop)

    store.reads.clear()
    nothing = scanned(StoredTrajectories(store, ["a"]), buckets=(buckets[4][-1] + 1, buckets[5][0]))
    assert nothing.empty and groups_read(store, "a") == set()


def test_a_batch_stored_before_buckets_is_read_by_range_from_its_prompt_keys(store):
    table = StoredTrajectories(store, ["old"])
    (stored,) = table.scan(["trajectory_id", "prompt_key", "source_line"])
    assert stored["source_line"].is_monotonic_increasing  # stored in the source's order
    buckets = stored["prompt_key"].map(bucket_of)
    first, stop = int(buckets.median()), BUCKETS
    part = scanned(table, buckets=(first, stop))
    assert part["trajectory_id"].tolist() == stored[(buckets >= first) & (buckets < stop)]["trajectory_id"].tolist()
    assert part["bucket"].tolist() == [bucket for bucket in buckets if bucket >= first]
    assert str(part["bucket"].dtype) == "int16"
