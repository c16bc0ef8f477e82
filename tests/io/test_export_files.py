"""Reading an export back from the files its manifest lists, whole rows in split order
(the report's scan of an export written before summaries), and the bytes a staged file gets.
(Writing a split as shard files and committing them: test_export_files_shards.py.)"""

import hashlib
import io

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajectory_assets.io import export_files
from trajectory_assets.io.export_files import StoredExport
from trajectory_assets.io.storage import NotMaterializedError, Storage


def test_json_lines_are_read_whole_in_split_order(tmp_path):
    folder = tmp_path / "exports" / "sft"
    folder.mkdir(parents=True)
    (folder / "train-00000-of-00001.jsonl").write_bytes(b"".join(orjson.dumps({"trajectory_id": f"t{i}", "messages": []}) + b"\n"
                                                  for i in range(5)))
    (folder / "validation-00000-of-00001.jsonl").write_bytes(b'{"trajectory_id": "v0"}\n')
    export = StoredExport(Storage(str(tmp_path)), "sft", {"format": "jsonl", "files": {
        "train-00000-of-00001.jsonl": {"split": "train"}, "validation-00000-of-00001.jsonl": {"split": "validation"}}})
    rows = list(export.rows())
    assert [(split, position) for split, position, _ in rows] == [
        ("train", 0), ("train", 1), ("train", 2), ("train", 3), ("train", 4), ("validation", 0)]
    assert rows[0][2] == {"trajectory_id": "t0", "messages": []}


def test_parquet_rows_are_read_whole_across_row_groups(tmp_path):
    folder = tmp_path / "exports" / "trl_sft"
    folder.mkdir(parents=True)
    table = pa.table({"trajectory_id": [f"t{i}" for i in range(10)], "messages": [f"m{i}" for i in range(10)]})
    pq.write_table(table, folder / "train-00000-of-00001.parquet", row_group_size=3)  # 4 row groups
    pq.write_table(table.slice(0, 0), folder / "validation-00000-of-00001.parquet")
    export = StoredExport(Storage(str(tmp_path)), "trl_sft", {"format": "parquet", "files": {
        "train-00000-of-00001.parquet": {"split": "train"}, "validation-00000-of-00001.parquet": {"split": "validation"}}})
    rows = list(export.rows())
    assert len(rows) == 10 and rows[9] == ("train", 9, {"trajectory_id": "t9", "messages": "m9"})


def test_a_missing_file_is_not_materialized_naming_it(tmp_path):
    export = StoredExport(Storage(str(tmp_path)), "dpo", {"format": "jsonl", "files": {
        "train-00000-of-00001.jsonl": {"split": "train"}}})
    with pytest.raises(NotMaterializedError, match="exports/dpo/train-00000-of-00001.jsonl does not exist"):
        list(export.rows())


def test_a_manifest_written_before_shards_is_read_from_its_one_file_per_split(tmp_path):
    folder = tmp_path / "exports" / "sft"
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_bytes(b'{"trajectory_id": "t0"}\n{"trajectory_id": "t1"}\n')
    export = StoredExport(Storage(str(tmp_path)), "sft", {"format": "jsonl", "files": {"train.jsonl": {"rows": 2}}})
    assert list(export.rows()) == [("train", 0, {"trajectory_id": "t0"}), ("train", 1, {"trajectory_id": "t1"})]


def test_the_hashing_writer_hands_every_byte_over_once_in_large_writes(monkeypatch):
    """Small writes are gathered, a large one goes straight through: the file, its size and
    its SHA-256 are those of the bytes written, in order."""
    monkeypatch.setattr(export_files, "WRITE_BUFFER_BYTES", 10)

    class Counting(io.BytesIO):
        writes = 0

        def write(self, data):
            Counting.writes += 1
            return super().write(data)

    pieces = [b"ab", b"cde", b"", b"0123456789abcdef", b"f", b"x" * 9, b"y" * 25, b"z"]
    handle = Counting()
    out = export_files._HashingWriter(handle)
    for piece in pieces:
        assert out.write(memoryview(piece)) == len(piece)
    out.flush()
    data = b"".join(pieces)
    assert handle.getvalue() == data and out.tell() == len(data)
    assert out.sha256.hexdigest() == hashlib.sha256(data).hexdigest()
    assert Counting.writes < len(pieces)
