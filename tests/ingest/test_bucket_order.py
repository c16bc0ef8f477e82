"""A batch's trajectories are stored ordered by bucket (stable), in row groups cut at bucket
changes, with ingest's memory bounded by a budget however large the batch is."""

import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import make_rollout, write_jsonl
from trajectory_assets import layout
from trajectory_assets.buckets import BUCKETS, bucket_of
from trajectory_assets.config import PipelineConfig
from trajectory_assets.ingest import bucket_order
from trajectory_assets.ingest.batch import batch_counts, ingest_batch, nothing_lost, write_source_record
from trajectory_assets.ingest.bucket_order import bucket_ordered
from trajectory_assets.io.source_files import SourceFile
from trajectory_assets.io.storage import Storage


def ingested(tmp_path, rows, key="batch") -> tuple[Storage, pq.ParquetFile]:
    """One batch of ``rows`` ingested as the ingest asset does, and its stored trajectories."""
    source = write_jsonl(tmp_path / "in" / f"{key}.jsonl", rows)
    store = Storage(str(tmp_path / "out"))
    write_source_record(key, store, SourceFile(str(source), source.name))
    ingest_batch(key, store, PipelineConfig())
    return store, pq.ParquetFile(store.path(layout.batch_trajectories(key)))


def rollouts(prompts: int, per_prompt: int) -> list[dict]:
    """``per_prompt`` rollouts (distinct rewards) of each prompt, the prompts interleaved."""
    return [make_rollout(request_input=f"prompt {prompt}", reward=rollout / per_prompt)
            for rollout in range(per_prompt) for prompt in range(prompts)]


def group_buckets(parquet: pq.ParquetFile) -> list[list[int]]:
    return [parquet.read_row_group(group, columns=["bucket"])["bucket"].to_pylist()
            for group in range(parquet.metadata.num_row_groups)]


def test_every_row_is_in_the_bucket_of_its_prompt_key(tmp_path):
    _, parquet = ingested(tmp_path, rollouts(prompts=20, per_prompt=2))
    table = parquet.read(columns=["prompt_key", "bucket"])
    assert table.schema.field("bucket").type == pa.int16()
    assert table["bucket"].to_pylist() == [bucket_of(key) for key in table["prompt_key"].to_pylist()]
    assert len(set(table["bucket"].to_pylist())) > 10  # twenty prompts do not share a few buckets


def test_a_batch_is_stored_ordered_by_bucket_keeping_the_source_order_within_a_bucket(tmp_path):
    store, parquet = ingested(tmp_path, rollouts(prompts=30, per_prompt=3))
    table = parquet.read(columns=["bucket", "prompt_key", "source_line"]).to_pandas()
    assert table["bucket"].is_monotonic_increasing
    for _, rows in table.groupby("bucket"):
        assert rows["source_line"].is_monotonic_increasing
    # the interleaved rollouts of a prompt now sit together, in their source order
    assert table["source_line"].tolist() != sorted(table["source_line"])
    assert nothing_lost(batch_counts("batch", store, store.read_json(layout.batch_summary("batch"))))[0]


def test_row_groups_hold_whole_buckets_and_are_cut_only_where_the_next_bucket_would_not_fit(tmp_path, monkeypatch):
    monkeypatch.setattr(bucket_order, "ROW_GROUP_ROWS", 5)
    _, parquet = ingested(tmp_path, rollouts(prompts=12, per_prompt=2))
    groups = group_buckets(parquet)
    assert len(groups) > 2 and all(len(group) <= 5 for group in groups)
    for group, after in zip(groups, groups[1:]):
        assert group[-1] < after[0]  # no bucket is split between two groups
        first_bucket_after = after.count(after[0])
        assert len(group) + first_bucket_after > 5  # it was cut because the next bucket did not fit
    statistics = [parquet.metadata.row_group(group).column(parquet.schema_arrow.get_field_index("bucket")).statistics
                  for group in range(len(groups))]
    assert [(s.min, s.max) for s in statistics] == [(group[0], group[-1]) for group in groups]


def test_a_bucket_larger_than_a_row_group_is_cut_into_full_groups_of_it_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(bucket_order, "ROW_GROUP_ROWS", 4)
    popular = [make_rollout(request_input="the popular prompt", reward=index / 10) for index in range(10)]
    others = [make_rollout(request_input=f"another {index}") for index in range(6)]
    _, parquet = ingested(tmp_path, [*popular[:5], *others, *popular[5:]])
    groups = group_buckets(parquet)
    lines = parquet.read(columns=["source_line", "bucket", "prompt_key"]).to_pandas()
    bucket = int(lines[lines["source_line"] == 1]["bucket"].iloc[0])
    holding = [group for group in groups if bucket in group]
    # two full groups of it alone, then its last two rows (which the next buckets may join)
    assert [group for group in holding[:2]] == [[bucket] * 4] * 2 and holding[2].count(bucket) == 2
    assert all(len(group) <= 4 for group in groups)
    assert lines[lines["bucket"] == bucket]["source_line"].tolist() == [1, 2, 3, 4, 5, 12, 13, 14, 15, 16]


def ordered_by_budget(tmp_path, blocks: Iterable[pa.Table], budget: int) -> pq.ParquetFile:
    """``blocks`` handed to ``bucket_ordered`` with ``budget``: the file written."""
    path = tmp_path / f"ordered-{budget}.parquet"
    with pq.ParquetWriter(path, BLOCK_SCHEMA) as writer, bucket_ordered(writer, budget=budget) as write:
        for block in blocks:
            write(block)
    return pq.ParquetFile(path)


BLOCK_SCHEMA = pa.schema([("bucket", pa.int16()), ("sequence", pa.int64()), ("payload", pa.string())])


def random_buckets(rows: int, seed: int = 7) -> np.ndarray:
    """Random buckets, a fifth of the rows in three crowded ones (so some bucket outgrows a group)."""
    generator = np.random.default_rng(seed)
    return np.where(generator.random(rows) < 0.2, generator.integers(0, 3, rows),
                    generator.integers(0, BUCKETS, rows)).astype(np.int16)


def random_blocks(rows: int, block_rows: int, payload: int = 200) -> Iterator[pa.Table]:
    """Blocks of rows with random buckets, a sequence number and a payload, each made when
    it is asked for (as ingest converts them), so only what is kept of them stays allocated."""
    buckets = random_buckets(rows)
    for start in range(0, rows, block_rows):
        sequence = np.arange(start, min(start + block_rows, rows))
        yield pa.table([pa.array(buckets[sequence]), pa.array(sequence), pa.array(["x" * payload] * len(sequence))],
                       schema=BLOCK_SCHEMA)


@pytest.mark.parametrize("budget", [1, 50_000, 1 << 30], ids=["spilled-to-single-buckets", "spilled-once", "in-memory"])
def test_a_batch_spilled_to_disk_is_ordered_exactly_as_one_sorted_in_memory(tmp_path, monkeypatch, budget):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    parquet = ordered_by_budget(tmp_path, random_blocks(rows=3000, block_rows=250), budget)
    expected = np.argsort(random_buckets(3000), kind="stable")
    assert parquet.read()["sequence"].to_pylist() == expected.tolist()
    group_rows = [parquet.metadata.row_group(group).num_rows for group in range(parquet.metadata.num_row_groups)]
    assert max(group_rows) <= bucket_order.ROW_GROUP_ROWS
    assert [path.name for path in tmp_path.iterdir()] == [f"ordered-{budget}.parquet"]  # the spill is gone


ARROW_PEAK = """
import sys
import pyarrow as pa
from tests.ingest.test_bucket_order import ordered_by_budget, random_blocks
from pathlib import Path
rows, budget = int(sys.argv[1]), int(sys.argv[2])
ordered_by_budget(Path(sys.argv[3]), random_blocks(rows=rows, block_rows=250, payload=2000), budget=budget)
print(pa.default_memory_pool().max_memory())
"""


def arrow_peak(tmp_path, rows: int, budget: int) -> int:
    """The peak of Arrow's allocations in a new process that orders ``rows`` rows of 2 kB."""
    folder = tmp_path / f"{rows}-{budget}"
    folder.mkdir()
    done = subprocess.run([sys.executable, "-c", ARROW_PEAK, str(rows), str(budget), str(folder)],
                          capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2])
    return int(done.stdout)


def test_ordering_a_batch_holds_a_few_budgets_of_arrow_memory_however_large_the_batch(tmp_path):
    """Ordering a 64 MB batch with a 1 MiB budget peaks at a few MiB of Arrow memory (the
    budget held, one level of spill read back, a row group being written), as an 8 MB batch
    does; sorted in memory, the same batch peaks above its size: the measure sees the batch."""
    budget = 1 << 20
    small, large = arrow_peak(tmp_path, 4_000, budget), arrow_peak(tmp_path, 32_000, budget)
    assert large < 8 * budget and small < 8 * budget, (small, large)
    assert arrow_peak(tmp_path, 32_000, 1 << 30) > 32_000 * 2000
