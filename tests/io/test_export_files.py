"""Reading an export back from the files its manifest lists: whole JSON lines, chosen
Parquet columns, single rows out of many row groups, and a JSON-lines file's row index.
(Writing a split as shard files and committing them: test_export_files_shards.py.)"""

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.io.staged_export import commit_export
from trajectory_assets.io.export_files import ShardWriter, StoredExport
from trajectory_assets.io.storage import NotMaterializedError, Storage


def test_json_lines_are_scanned_whole_and_read_back_by_position(tmp_path):
    folder = tmp_path / "exports" / "sft"
    folder.mkdir(parents=True)
    (folder / "train-00000-of-00001.jsonl").write_bytes(b"".join(orjson.dumps({"trajectory_id": f"t{i}", "messages": []}) + b"\n"
                                                  for i in range(5)))
    (folder / "validation-00000-of-00001.jsonl").write_bytes(b'{"trajectory_id": "v0"}\n')
    export = StoredExport(Storage(str(tmp_path)), "sft", {"format": "jsonl", "files": {
        "train-00000-of-00001.jsonl": {"split": "train"}, "validation-00000-of-00001.jsonl": {"split": "validation"}}})
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
    pq.write_table(table, folder / "train-00000-of-00001.parquet", row_group_size=3)  # 4 row groups
    pq.write_table(table.slice(0, 0), folder / "validation-00000-of-00001.parquet")
    export = StoredExport(Storage(str(tmp_path)), "trl_sft", {"format": "parquet", "files": {
        "train-00000-of-00001.parquet": {"split": "train"}, "validation-00000-of-00001.parquet": {"split": "validation"}}})
    rows = list(export.scan(("trajectory_id", "quality_difference")))
    assert not export.whole_rows and len(rows) == 10 and rows[9] == ("train", 9, {"trajectory_id": "t9"})
    picked = list(export.rows_at({"train": {2, 3, 9}}))
    assert picked == [("train", 2, {"trajectory_id": "t2", "messages": "m2"}),
                      ("train", 3, {"trajectory_id": "t3", "messages": "m3"}),
                      ("train", 9, {"trajectory_id": "t9", "messages": "m9"})]
    # a file without any of the asked columns still gives its row positions
    assert [position for _, position, _ in export.scan(("chosen_id",))] == list(range(10))


def test_a_missing_file_is_not_materialized_naming_it(tmp_path):
    export = StoredExport(Storage(str(tmp_path)), "dpo", {"format": "jsonl", "files": {
        "train-00000-of-00001.jsonl": {"split": "train"}}})
    with pytest.raises(NotMaterializedError, match="exports/dpo/train-00000-of-00001.jsonl does not exist"):
        list(export.scan(()))


def test_a_manifest_written_before_shards_is_read_from_its_one_file_per_split(tmp_path):
    folder = tmp_path / "exports" / "sft"
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_bytes(b'{"trajectory_id": "t0"}\n{"trajectory_id": "t1"}\n')
    export = StoredExport(Storage(str(tmp_path)), "sft", {"format": "jsonl", "files": {"train.jsonl": {"rows": 2}}})
    assert list(export.scan(("trajectory_id",))) == [("train", 0, {"trajectory_id": "t0"}),
                                                     ("train", 1, {"trajectory_id": "t1"})]
    assert list(export.rows_at({"train": {1}})) == [("train", 1, {"trajectory_id": "t1"})]


def staged_sft(store, records_by_split, index_fields=("trajectory_id", "chosen_id", "trajectory_ids")):
    from trajectory_assets.exports.registry import EXPORTS_BY_NAME

    files = commit_export(store, "sft", ("train", "validation"), "jsonl", EXPORTS_BY_NAME["sft"].arrow_schema,
                          {0: records_by_split}, index_fields)
    return {"format": "jsonl", "files": files}


SFT_ROWS = {"train": [{"messages": [{"role": "user", "content": "q"}], "trajectory_id": f"t{i}", "task_key": "k"}
                      for i in range(5)],
            "validation": [{"messages": [], "trajectory_id": "v0", "task_key": "k"}]}


def test_a_json_lines_export_is_scanned_from_its_row_index_with_the_same_answer(tmp_path):
    store = Storage(str(tmp_path))
    manifest = staged_sft(store, SFT_ROWS)
    assert (tmp_path / "indexes" / "sft" / "train-00000-of-00001.parquet").exists()
    indexed = StoredExport(store, "sft", manifest)
    fields = ("trajectory_id", "chosen_id", "trajectory_ids")
    scanned = list(indexed.scan(fields))
    assert indexed.indexed and not indexed.whole_rows
    assert scanned == [("train", i, {"trajectory_id": f"t{i}"}) for i in range(5)] + [
        ("validation", 0, {"trajectory_id": "v0"})]
    # a field the index was not asked to keep is read from the lines
    assert [row["task_key"] for _, _, row in indexed.scan(("task_key",))] == ["k"] * 6
    # the same rows as parsing every line, but only the fields asked for (a field the schema lacks is absent)
    (tmp_path / "indexes" / "sft" / "train-00000-of-00001.parquet").unlink()
    parsed = StoredExport(store, "sft", manifest)
    assert not parsed.indexed and parsed.whole_rows
    assert [(split, position, {k: v for k, v in row.items() if k in fields})
            for split, position, row in parsed.scan(fields)] == scanned


def test_rows_at_reads_only_the_lines_asked_for_where_the_index_says_they_start(tmp_path):
    store = Storage(str(tmp_path))
    rows = {"train": [{**SFT_ROWS["train"][0], "trajectory_id": f"t{i}", "note": "é" * i} for i in range(6)],
            "validation": SFT_ROWS["validation"]}
    manifest = staged_sft(store, rows)
    export = StoredExport(store, "sft", manifest)
    wanted = {"train": {1, 4}, "validation": {0}}
    expected = [("train", 1, rows["train"][1]), ("train", 4, rows["train"][4]), ("validation", 0, rows["validation"][0])]
    assert list(export.rows_at(wanted)) == expected
    # the lines before a wanted one are not read: a newline written into line 0 (same length, same
    # file for the index) would shift every position of a read from the start
    train = tmp_path / "exports" / "sft" / "train-00000-of-00001.jsonl"
    data = bytearray(train.read_bytes())
    data[1] = ord("\n")
    train.write_bytes(bytes(data))
    assert list(StoredExport(store, "sft", manifest).rows_at(wanted)) == expected
    # an index written before it kept where lines start: read from the start, the same rows
    staged_sft(store, rows)
    index = tmp_path / "indexes" / "sft" / "train-00000-of-00001.parquet"
    footer = pq.ParquetFile(index).metadata.metadata
    older = pq.read_table(index).drop_columns(["__line_start"])
    with pq.ParquetWriter(index, older.schema) as writer:
        writer.write_table(older)
        writer.add_key_value_metadata({key: value for key, value in footer.items() if key != b"ARROW:schema"})
    fallback = StoredExport(store, "sft", manifest)
    assert fallback.indexed and list(fallback.rows_at(wanted)) == expected


def test_an_index_of_another_write_is_not_used(tmp_path):
    store = Storage(str(tmp_path))
    staged_sft(store, SFT_ROWS)
    old_index = (tmp_path / "indexes" / "sft" / "train-00000-of-00001.parquet").read_bytes()
    changed = {"train": [{**row, "trajectory_id": f"new{i}"} for i, row in enumerate(SFT_ROWS["train"])],
               "validation": SFT_ROWS["validation"]}
    manifest = staged_sft(store, changed)
    (tmp_path / "indexes" / "sft" / "train-00000-of-00001.parquet").write_bytes(old_index)  # e.g. left by an older write
    export = StoredExport(store, "sft", manifest)
    assert not export.indexed
    assert [row["trajectory_id"] for _, _, row in export.scan(("trajectory_id",))][:2] == ["new0", "new1"]


def test_rows_holding_an_undeclared_index_field_leave_no_index_and_a_discard_leaves_nothing(tmp_path):
    store = Storage(str(tmp_path))
    # a GRPO row may carry verifier inputs of any name, one of them a field the scan reads
    rows = {"train": [{**SFT_ROWS["train"][0], "trajectory_ids": ["x"]}], "validation": []}
    manifest = staged_sft(store, rows)
    assert not (tmp_path / "indexes" / "sft" / "train-00000-of-00001.parquet").exists()
    assert (tmp_path / "indexes" / "sft" / "validation-00000-of-00001.parquet").exists()
    export = StoredExport(store, "sft", manifest)
    assert not export.indexed and list(export.scan(("trajectory_ids",)))[0][2]["trajectory_ids"] == ["x"]

    from trajectory_assets.exports.registry import EXPORTS_BY_NAME

    staged = ShardWriter(store, "dpo", ("train",), "jsonl", EXPORTS_BY_NAME["dpo"].arrow_schema, ("chosen_id",))
    staged.write("train", [{"prompt": [], "chosen_id": "c"}])
    staged.discard()
    assert not (tmp_path / "indexes" / "dpo").exists() or not any((tmp_path / "indexes" / "dpo").iterdir())
    assert not (tmp_path / "exports" / "dpo").exists()
    assert not [path for path in (tmp_path / "staging").rglob("*") if path.is_file()]
