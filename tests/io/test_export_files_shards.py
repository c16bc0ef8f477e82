"""A split written as shard files: Hub names counting the shards with rows, one empty file
for a split without rows, every shard's files committed by whichever process holds their
records, nothing of an earlier build left, and the files read back as one split."""

import hashlib
import multiprocessing

import orjson
import pyarrow.parquet as pq
import pytest

from tests.io.staged_export import commit_export
from trajectory_assets.exports.registry import EXPORTS_BY_NAME
from trajectory_assets.io.export_files import (
    ShardWriter,
    StoredExport,
    WrittenShard,
    commit_shards,
    discard_shards,
)
from trajectory_assets.io.storage import Storage

SPLITS = ("train", "validation")
SFT_SCHEMA = EXPORTS_BY_NAME["sft"].arrow_schema


def sft_row(name: str) -> dict:
    return {"messages": [{"role": "user", "content": name}], "trajectory_id": name, "task_key": "k"}


def rows_named(*names: str) -> list[dict]:
    return [sft_row(name) for name in names]


# shard -> split -> rows: train has rows in shards 0 and 2 only, validation in shard 1 only
SHARDED = {0: {"train": rows_named("a0", "a1")}, 1: {"validation": rows_named("v0")},
           2: {"train": rows_named("c0", "c1", "c2")}}


def staged(store: Storage, rows_by_shard: dict, file_format: str = "jsonl", name: str = "sft",
           shards: int = 3) -> dict:
    files = commit_export(store, name, SPLITS, file_format, EXPORTS_BY_NAME[name].arrow_schema, rows_by_shard, shards)
    return {"format": file_format, "files": files}


def export_files(tmp_path, name: str = "sft") -> list[str]:
    return sorted(path.name for path in (tmp_path / "exports" / name).iterdir())


def test_each_split_is_its_shards_with_rows_in_order_named_as_the_hub_names_them(tmp_path):
    manifest = staged(Storage(str(tmp_path)), SHARDED)
    assert export_files(tmp_path) == ["train-00000-of-00002.jsonl", "train-00001-of-00002.jsonl",
                                      "validation-00000-of-00001.jsonl"]
    assert [(name, described["split"], described["shard"], described["rows"])
            for name, described in manifest["files"].items()] == [
        ("train-00000-of-00002.jsonl", "train", 0, 2), ("train-00001-of-00002.jsonl", "train", 2, 3),
        ("validation-00000-of-00001.jsonl", "validation", 1, 1)]
    # the manifest's hashes and sizes are the files' own
    for name, described in manifest["files"].items():
        data = (tmp_path / "exports" / "sft" / name).read_bytes()
        assert described["sha256"] == hashlib.sha256(data).hexdigest() and described["bytes"] == len(data)
    assert not [path for path in (tmp_path / "staging").rglob("*") if path.is_file()]


@pytest.mark.parametrize("file_format", ["jsonl", "parquet"])
def test_a_split_without_rows_keeps_one_valid_empty_file(tmp_path, file_format):
    name = "sft" if file_format == "jsonl" else "trl_sft"
    manifest = staged(Storage(str(tmp_path)), {1: {"train": rows_named("t0")}}, file_format, name)
    assert export_files(tmp_path, name) == [f"train-00000-of-00001.{file_format}",
                                            f"validation-00000-of-00001.{file_format}"]
    empty = tmp_path / "exports" / name / f"validation-00000-of-00001.{file_format}"
    assert manifest["files"][empty.name] == {"split": "validation", "shard": 0, "rows": 0, "bytes": empty.stat().st_size,
                                             "sha256": hashlib.sha256(empty.read_bytes()).hexdigest()}
    if file_format == "parquet":  # a footer with the schema: readers still get the columns
        assert pq.read_table(empty).schema.names == EXPORTS_BY_NAME[name].arrow_schema.names
    else:
        assert empty.read_bytes() == b""


def test_a_commit_leaves_nothing_of_an_earlier_build(tmp_path):
    store = Storage(str(tmp_path))
    folder, indexes = tmp_path / "exports" / "sft", tmp_path / "indexes" / "sft"
    folder.mkdir(parents=True)
    indexes.mkdir(parents=True)
    # a build before shards, one of seven shards (with the row indexes builds kept before
    # summaries), and another run's build in its staging folder
    earlier = ["train.jsonl", "validation.jsonl", "train.parquet",
               *(f"train-{i:05d}-of-00007.jsonl" for i in range(7))]
    for name in earlier:
        (folder / name).write_bytes(b'{"old": 1}\n')
        (indexes / f"{name.rsplit('.', 1)[0]}.parquet").write_bytes(b"old index")
    other_run = tmp_path / "staging" / "other-run" / "files" / "sft"
    other_run.mkdir(parents=True)
    (other_run / "train-00000.jsonl").write_bytes(b"half")
    # what is not a data file of a split stays: the merge step writes the card and manifest after
    for kept in ("README.md", "manifest.json", "dataset_info.json"):
        (folder / kept).write_bytes(b"kept")
    staged(store, SHARDED)
    assert export_files(tmp_path) == ["README.md", "dataset_info.json", "manifest.json", "train-00000-of-00002.jsonl",
                                      "train-00001-of-00002.jsonl", "validation-00000-of-00001.jsonl"]
    assert not indexes.exists()
    # the commit's own staging is gone; another run's is not its to remove (that run may be live:
    # a later run's plan step removes the staging of runs that are over, defs/staging.py)
    assert [path for path in (tmp_path / "staging").rglob("*") if path.is_file()] == [other_run / "train-00000.jsonl"]
    # a build with fewer files then leaves none of the more files before
    staged(store, {0: {"train": rows_named("only"), "validation": rows_named("v")}}, shards=1)
    assert export_files(tmp_path)[3:] == ["train-00000-of-00001.jsonl", "validation-00000-of-00001.jsonl"]


def write_shard(root: str, shard: int, run: str) -> list[dict]:
    """One shard written by a process of its own; what it hands the committing process (JSON)."""
    writer = ShardWriter(Storage(root), "sft", SPLITS, "jsonl", SFT_SCHEMA, shard, run)
    for split, records in SHARDED.get(shard, {}).items():
        writer.write(split, records)
    return [orjson.loads(orjson.dumps(written.to_json())) for written in writer.finish()]


def test_shards_written_by_separate_processes_are_committed_by_another(tmp_path):
    # fresh interpreters, as shard steps on other machines are. A fork of the test worker
    # inherits its signal handlers: after an in-process Dagster run SIGTERM raises
    # KeyboardInterrupt (dagster._utils.interrupts), so the pool's SIGTERM at exit raised it
    # in copies of the worker, and CI once lost the worker here as "keyboard-interrupt"
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        reported = pool.starmap(write_shard, [(str(tmp_path), shard, "run-1") for shard in (2, 0, 1)])
        pool.close()
        pool.join()  # every worker ends on its own: nothing is sent SIGTERM
    written = [WrittenShard.from_json(record) for records in reported for record in records]
    assert not (tmp_path / "exports" / "sft").exists()  # nothing is visible before the commit
    files = commit_shards(Storage(str(tmp_path)), "sft", SPLITS, "jsonl", 3, written)
    single_process = tmp_path / "single"
    assert files == staged(Storage(str(single_process)), SHARDED)["files"]
    for name in files:
        assert (tmp_path / "exports" / "sft" / name).read_bytes() == (single_process / "exports" / "sft" / name).read_bytes()


def test_a_commit_missing_a_shard_is_an_error_and_changes_nothing(tmp_path):
    store = Storage(str(tmp_path))
    before = staged(store, SHARDED)
    written = [WrittenShard.from_json(record) for shard in (0, 2) for record in write_shard(str(tmp_path), shard, "r")]
    with pytest.raises(ValueError, match="not every split of shards 0-2"):
        commit_shards(store, "sft", SPLITS, "jsonl", 3, written)
    assert export_files(tmp_path) == list(before["files"])


def test_a_discard_leaves_the_previous_export_as_it_was(tmp_path):
    store = Storage(str(tmp_path))
    before = staged(store, SHARDED)
    contents = {name: (tmp_path / "exports" / "sft" / name).read_bytes() for name in before["files"]}
    first = ShardWriter(store, "sft", SPLITS, "jsonl", SFT_SCHEMA, 0, "r")
    first.write("train", rows_named("new"))
    written = first.finish()  # shard 0 is whole in the staging folder
    second = ShardWriter(store, "sft", SPLITS, "jsonl", SFT_SCHEMA, 1, "r")
    second.write("train", rows_named("newer"))
    second.discard()
    discard_shards(store, written)
    assert {name: (tmp_path / "exports" / "sft" / name).read_bytes() for name in export_files(tmp_path)} == contents
    assert not [path for path in (tmp_path / "staging").rglob("*") if path.is_file()]


@pytest.mark.parametrize("file_format", ["jsonl", "parquet"])
def test_a_split_of_several_files_reads_as_one(tmp_path, file_format):
    name = "sft" if file_format == "jsonl" else "trl_sft"
    store = Storage(str(tmp_path))
    manifest = staged(store, SHARDED, file_format, name)
    rows = list(StoredExport(store, name, manifest).rows())
    # positions across the files: the second file's rows follow the first's
    assert [(split, position, row["trajectory_id"]) for split, position, row in rows] == [
        ("train", 0, "a0"), ("train", 1, "a1"), ("train", 2, "c0"), ("train", 3, "c1"), ("train", 4, "c2"),
        ("validation", 0, "v0")]
    assert rows[2][2]["messages"][0]["content"] == "c0"  # whole rows
