import pyarrow as pa
import pytest

from trajectory_assets.io.storage import NotMaterializedError, Storage, StorageError


def test_write_is_atomic_and_leaves_no_temporary_files(tmp_path):
    store = Storage(str(tmp_path))
    store.write_bytes("a/b.txt", b"one")
    store.write_bytes("a/b.txt", b"two")
    assert (tmp_path / "a" / "b.txt").read_bytes() == b"two"
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["b.txt"]


def test_failed_write_keeps_the_previous_file_and_removes_the_partial_one(tmp_path):
    store = Storage(str(tmp_path))
    store.write_bytes("f.txt", b"old")
    with pytest.raises(RuntimeError):
        with store.open_write("f.txt") as handle:
            handle.write(b"half")
            raise RuntimeError("killed mid-write")
    assert (tmp_path / "f.txt").read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_json_is_read_back_as_written_and_a_missing_file_is_not_materialized(tmp_path):
    store = Storage(str(tmp_path))
    store.write_bytes("s.json", b'{"sources": [{"uri": "a.jsonl", "records": 2}]}')
    store.write_bytes("r.jsonl", b'{"n": 1}\n{"n": 2}\n')
    assert store.read_json("s.json") == {"sources": [{"uri": "a.jsonl", "records": 2}]}
    assert store.read_jsonl("r.jsonl") == [{"n": 1}, {"n": 2}]
    with pytest.raises(NotMaterializedError):
        store.read_json("absent.json")


@pytest.mark.parametrize("bad", ["../escape", "/abs/path", "a/../../b", "a//b", ""])
def test_paths_cannot_leave_the_storage_root(tmp_path, bad):
    with pytest.raises(StorageError, match="outside the storage root"):
        Storage(str(tmp_path)).path(bad)


def test_unwritable_storage_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match="cannot write"):
        Storage(str(blocker)).write_bytes("sub/out.txt", b"x")


def test_parquet_round_trip_and_missing_file_message(tmp_path):
    store = Storage(str(tmp_path))
    schema = pa.schema([("x", pa.int64())])
    with store.parquet_writer("t.parquet", schema) as writer:
        writer.write_table(pa.table({"x": [1, 2]}, schema=schema))
        writer.write_table(pa.table({"x": [3]}, schema=schema))
    chunks = list(store.iter_parquet("t.parquet", columns=None, batch_rows=2))
    assert [chunk["x"].tolist() for chunk in chunks] == [[1, 2], [3]]
    assert [chunk.index.tolist() for chunk in chunks] == [[0, 1], [0]]  # each counts from 0
    with pytest.raises(NotMaterializedError, match="materialize its asset first"):
        next(store.iter_parquet("missing.parquet", columns=None, batch_rows=2))


def test_an_empty_parquet_file_reads_as_one_empty_frame_with_its_columns(tmp_path):
    store = Storage(str(tmp_path))
    schema = pa.schema([("x", pa.int64()), ("y", pa.string())])
    with store.parquet_writer("t.parquet", schema):
        pass
    [chunk] = list(store.iter_parquet("t.parquet", columns=["x"], batch_rows=2))
    assert list(chunk.columns) == ["x"] and len(chunk) == 0 and str(chunk["x"].dtype) == "int64"


def test_remove_deletes_a_file_and_accepts_a_missing_one(tmp_path):
    store = Storage(str(tmp_path))
    store.write_bytes("a/manifest.json", b"{}")
    store.remove("a/manifest.json")
    assert not store.exists("a/manifest.json")
    store.remove("a/manifest.json")  # already gone: fine
    with pytest.raises(StorageError, match="outside the storage root"):
        store.remove("../x")


def test_remove_folder_deletes_every_file_in_it_and_accepts_a_missing_one(tmp_path):
    store = Storage(str(tmp_path))
    store.write_bytes("a/b/1.json", b"{}")
    store.write_bytes("a/b/2.json", b"{}")
    store.write_bytes("a/b.json", b"{}")  # beside the folder, not in it
    store.remove_folder("a/b")
    assert not store.exists("a/b/1.json") and not store.exists("a/b/2.json") and store.exists("a/b.json")
    store.remove_folder("a/b")  # already gone: fine
    with pytest.raises(StorageError, match="outside the storage root"):
        store.remove_folder("../x")


def test_move_replaces_the_destination_and_file_names_lists_only_files(tmp_path):
    store = Storage(str(tmp_path))
    store.write_bytes("staging/run/a.jsonl", b"new")
    store.write_bytes("out/a.jsonl", b"old")
    store.write_bytes("out/sub/inner.txt", b"x")
    store.move("staging/run/a.jsonl", "out/a.jsonl")
    store.move("out/sub/inner.txt", "elsewhere/deeper/inner.txt")  # the destination's folder is made
    assert (tmp_path / "out" / "a.jsonl").read_bytes() == b"new" and not (tmp_path / "staging" / "run" / "a.jsonl").exists()
    assert (tmp_path / "elsewhere" / "deeper" / "inner.txt").read_bytes() == b"x"
    assert store.file_names("out") == ["a.jsonl"] and store.file_names("absent") == []
    with pytest.raises(NotMaterializedError, match="cannot be moved"):
        store.move("staging/run/a.jsonl", "out/b.jsonl")


def test_copy_replaces_the_destination_and_keeps_the_source(tmp_path):
    store = Storage(str(tmp_path))
    store.write_bytes("out/a.jsonl", b"committed")
    store.write_bytes("staging/run/a.jsonl", b"stale")
    store.copy("out/a.jsonl", "staging/run/a.jsonl")
    store.copy("out/a.jsonl", "staging/other/deeper/a.jsonl")  # the destination's folder is made
    assert store.read_bytes("staging/run/a.jsonl") == store.read_bytes("out/a.jsonl") == b"committed"
    assert store.read_bytes("staging/other/deeper/a.jsonl") == b"committed"
    with pytest.raises(NotMaterializedError, match="cannot be copied"):
        store.copy("out/absent.jsonl", "staging/run/b.jsonl")


def test_a_checksum_changes_when_a_file_is_written_again(tmp_path):
    store = Storage(str(tmp_path))
    store.write_bytes("batch.parquet", b"one")
    first = store.checksum("batch.parquet")
    assert store.checksum("batch.parquet") == first  # read from metadata: stable while the file is
    store.write_bytes("batch.parquet", b"two")
    assert store.checksum("batch.parquet") != first
    with pytest.raises(NotMaterializedError):
        store.checksum("absent.parquet")
