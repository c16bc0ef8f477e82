import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import make_rollout, write_jsonl
from trajectory_assets import layout
from trajectory_assets.ingest import bucket_order
from trajectory_assets.ingest.bucket_order import bucket_ordered
from trajectory_assets.ingest.conversion import ingest
from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA
from trajectory_assets.io.source_files import discover
from trajectory_assets.sources import INPUTS_SUFFIXES
from trajectory_assets.io.storage import NotMaterializedError, Storage
from trajectory_assets.io.trajectory_table import StoredTrajectories, _groups_holding


def ingest_batch(store, key, source):
    """The batch's trajectories stored as ingest stores them (ordered by bucket), converted in
    blocks of two rows."""
    with (store.parquet_writer(layout.batch_trajectories(key), TRAJECTORY_ARROW_SCHEMA) as writer,
          bucket_ordered(writer) as write):
        ingest(discover([str(source)], INPUTS_SUFFIXES), write, lambda rows: None, batch_rows=2)
    store.write_bytes(layout.batch_summary(key), b"{}")


def test_scan_reads_batches_in_order_in_chunks_and_filters_ids(tmp_path):
    store = Storage(str(tmp_path / "out"))
    ingest_batch(store, "b", write_jsonl(tmp_path / "b.jsonl", [make_rollout(request_input=f"b{i}") for i in range(3)]))
    ingest_batch(store, "a", write_jsonl(tmp_path / "a.jsonl", [make_rollout(request_input="a0")]))
    table = StoredTrajectories(store, ["a", "b"], chunk_rows=2)
    chunks = list(table.scan(["trajectory_id", "source_line"]))
    assert [len(c) for c in chunks] == [1, 2, 1]
    all_ids = [i for c in chunks for i in c["trajectory_id"]]
    picked = list(table.scan(["trajectory_id"], ids={all_ids[0], all_ids[3]}))
    assert [i for c in picked for i in c["trajectory_id"]] == [all_ids[0], all_ids[3]]


def test_a_record_found_twice_is_read_once_where_it_first_appears(tmp_path):
    """A line copied into later batches is read once, from the first batch that holds it; a
    chunk left with no row is not yielded. (Ingest keeps one copy of a line repeated in one
    file: a batch written otherwise holds the same id twice in a chunk, and still yields it
    once.)"""
    store = Storage(str(tmp_path / "out"))
    x, y, z = (make_rollout(request_input=text) for text in ("x", "y", "z"))
    ingest_batch(store, "a", write_jsonl(tmp_path / "a.jsonl", [x, y]))
    ingest_batch(store, "b", write_jsonl(tmp_path / "b.jsonl", [y, z]))
    ingest_batch(store, "c", write_jsonl(tmp_path / "c.jsonl", [z, x]))
    table = StoredTrajectories(store, ["a", "b", "c"], chunk_rows=2)
    chunks = [c["source_line"].tolist() for c in table.scan(["trajectory_id", "source_line"])]
    assert chunks == [[1, 2], [2]]
    ids = [i for c in table.scan(["trajectory_id"]) for i in c["trajectory_id"]]
    assert len(ids) == len(set(ids)) == 3
    assert [c["source_line"].tolist() for c in table.scan(["source_line"], ids={ids[2]})] == [[2]]

    with store.open_read(layout.batch_trajectories("a")) as handle:
        twice = pa.concat_tables([pq.read_table(handle)] * 2)
    with store.parquet_writer(layout.batch_trajectories("d"), TRAJECTORY_ARROW_SCHEMA) as writer:
        writer.write_table(twice)
    store.write_bytes(layout.batch_summary("d"), b"{}")
    (chunk,) = StoredTrajectories(store, ["d"], chunk_rows=4).scan(["trajectory_id", "source_line"])
    assert chunk["trajectory_id"].tolist() == ids[:2] and chunk["source_line"].tolist() == [1, 2]


def test_a_scan_for_a_few_ids_reads_only_the_row_groups_holding_them(tmp_path, monkeypatch):
    monkeypatch.setattr(bucket_order, "ROW_GROUP_ROWS", 2)
    store = Storage(str(tmp_path / "out"))
    ingest_batch(store, "a", write_jsonl(tmp_path / "a.jsonl", [make_rollout(request_input=f"a{i}") for i in range(6)]))
    table = StoredTrajectories(store, ["a"])
    (stored,) = table.scan(["trajectory_id", "source_line"])
    ids = stored["trajectory_id"].tolist()
    with store.open_read(layout.batch_trajectories("a")) as handle:
        parquet = pq.ParquetFile(handle)
        assert parquet.metadata.num_row_groups == 3  # six prompts' buckets, two rows a group
        assert _groups_holding(parquet, pa.array([ids[4]])) == [2]
        assert _groups_holding(parquet, pa.array(["not stored"])) == []
    assert [c["source_line"].tolist() for c in table.scan(["source_line"], ids={ids[4]})] == [[stored["source_line"][4]]]
    assert [c["source_line"].tolist() for c in table.scan(["source_line"], ids={"not stored"})] == [[]]


def test_scan_of_nothing_yields_one_typed_empty_chunk(tmp_path):
    (chunk,) = StoredTrajectories(Storage(str(tmp_path)), []).scan(["trajectory_id", "reward"])
    assert list(chunk.columns) == ["trajectory_id", "reward"] and chunk.empty
    assert str(chunk["reward"].dtype) == "float64"


def test_a_registered_batch_that_was_never_ingested_is_a_clear_error(tmp_path):
    with pytest.raises(NotMaterializedError, match="not ingested yet"):
        StoredTrajectories(Storage(str(tmp_path)), ["missing"])
