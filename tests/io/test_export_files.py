"""Reading an export back from the files its manifest lists: whole JSON lines, chosen
Parquet columns, and single rows out of many row groups."""

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajectory_assets.io.export_files import StoredExport
from trajectory_assets.io.storage import NotMaterializedError, Storage


def test_json_lines_are_scanned_whole_and_read_back_by_position(tmp_path):
    folder = tmp_path / "exports" / "sft"
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_bytes(b"".join(orjson.dumps({"trajectory_id": f"t{i}", "messages": []}) + b"\n"
                                                  for i in range(5)))
    (folder / "validation.jsonl").write_bytes(b'{"trajectory_id": "v0"}\n')
    export = StoredExport(Storage(str(tmp_path)), "sft", {"format": "jsonl", "files": {"train.jsonl": {},
                                                                                       "validation.jsonl": {}}})
    rows = list(export.scan(("trajectory_id",)))
    assert export.whole_rows and [(split, position) for split, position, _ in rows] == [
        ("train", 0), ("train", 1), ("train", 2), ("train", 3), ("train", 4), ("validation", 0)]
    assert rows[0][2] == {"trajectory_id": "t0", "messages": []}
    assert [row["trajectory_id"] for _, _, row in export.rows_at({"train": {1, 3}, "validation": {0}})] == [
        "t1", "t3", "v0"]


def test_parquet_reads_only_the_asked_columns_and_only_the_row_groups_asked_for(tmp_path):
    folder = tmp_path / "exports" / "trl_sft"
    folder.mkdir(parents=True)
    table = pa.table({"trajectory_id": [f"t{i}" for i in range(10)], "messages": [f"m{i}" for i in range(10)]})
    pq.write_table(table, folder / "train.parquet", row_group_size=3)  # 4 row groups
    pq.write_table(table.slice(0, 0), folder / "validation.parquet")
    export = StoredExport(Storage(str(tmp_path)), "trl_sft", {"format": "parquet", "files": {
        "train.parquet": {}, "validation.parquet": {}}})
    rows = list(export.scan(("trajectory_id", "quality_difference")))
    assert not export.whole_rows and len(rows) == 10 and rows[9] == ("train", 9, {"trajectory_id": "t9"})
    picked = list(export.rows_at({"train": {2, 3, 9}}))
    assert picked == [("train", 2, {"trajectory_id": "t2", "messages": "m2"}),
                      ("train", 3, {"trajectory_id": "t3", "messages": "m3"}),
                      ("train", 9, {"trajectory_id": "t9", "messages": "m9"})]
    # a file without any of the asked columns still gives its row positions
    assert [position for _, position, _ in export.scan(("chosen_id",))] == list(range(10))


def test_a_missing_file_is_not_materialized_naming_it(tmp_path):
    export = StoredExport(Storage(str(tmp_path)), "dpo", {"format": "jsonl", "files": {"train.jsonl": {}}})
    with pytest.raises(NotMaterializedError, match="exports/dpo/train.jsonl does not exist"):
        list(export.scan(()))
