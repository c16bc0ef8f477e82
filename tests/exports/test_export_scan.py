"""What the report needs of an export, gathered by the shards as they write it (issue 42: the
report is built from the shards' summaries, no row read twice): the same, for any number of
shards, as a scan of the committed files."""

from __future__ import annotations

import math
import random

import numpy as np
import orjson
import pytest

from tests.exports.test_shards import dataset
from trajectory_assets import layout
from trajectory_assets.buckets import BUCKETS, shard_ranges
from trajectory_assets.config import PipelineConfig, ReportConfig, SplitConfig
from trajectory_assets.exports.export_scan import ExportScan, rank, stored_scan, trajectory_refs
from trajectory_assets.exports.families.frames import FrameTable, bucket_column
from trajectory_assets.exports.registry import EXPORTS
from trajectory_assets.exports.shard_phase import write_exports
from trajectory_assets.exports.writer import Written
from trajectory_assets.io.export_files import StoredExport
from trajectory_assets.io.storage import Storage
from trajectory_assets.report.report import scan_stored_export


def described(scan: ExportScan) -> dict:
    """Everything a scan holds, in a comparable form (the picked rows lowest rank first)."""
    value = scan.to_json()
    return {**value, "picked": scan.picked()}


def rows_of(count: int) -> list[tuple[str, dict]]:
    """(split, row): SFT rows, DPO pairs, GRPO tasks, and verl rows naming theirs in extra_info."""
    rows = []
    for n in range(count):
        split = "validation" if n % 5 == 0 else "train"
        shape = n % 4
        if shape == 0:
            row = {"trajectory_id": f"t{n}"}
        elif shape == 1:
            row = {"chosen_id": f"c{n}", "rejected_id": f"r{n}", "quality_difference": n / 10}
        elif shape == 2:
            row = {"trajectory_ids": [f"a{n}", f"b{n}"], "extra_info": {"task_key": f"task{n}"}}
        else:
            row = {"extra_info": {"trajectory_id": f"v{n}"}}
        rows.append((split, row))
    return rows


@pytest.mark.parametrize("cuts", [[], [1], [7, 8, 30], [0, 40], [13, 26, 39]])
def test_shards_scans_absorbed_in_order_are_the_scan_of_every_row(cuts):
    rows = rows_of(50)
    whole = ExportScan("x", "sft", samples=4, seed="s")
    positions = {"train": 0, "validation": 0}
    for split, row in rows:
        whole.add(split, positions[split], row)
        positions[split] += 1
    parts = []
    for index, (start, stop) in enumerate(zip([0, *cuts], [*cuts, len(rows)])):
        part = ExportScan("x", "sft", samples=4, seed="s", shard=index)
        for split, row in rows[start:stop]:
            part.add(split, part.rows[split], row)
        parts.append(part)
    merged = parts[0]
    for later in parts[1:]:
        merged.absorb(later)
    assert described(merged) == described(whole)
    assert len(whole.picked()) == 4 and len(whole.pairs) and len(whole.tasks)  # the rows exercised it


@pytest.mark.parametrize("chunk", [1, 3, 50])
def test_rows_added_a_chunk_at_a_time_are_scanned_as_one_by_one(chunk):
    """A shard step hands each chunk's rows at once: the same scan, sample included, as
    adding them one by one (rows sharing a trajectory share a rank: ties exercised too)."""
    rows = rows_of(40) + [("train", {"trajectory_id": "t0"})] * 3 + [("train", {"text": "no reference"})]
    one_by_one, chunked = (ExportScan("x", "dpo", samples=5, seed="s", shard=2) for _ in range(2))
    for start in range(0, len(rows), chunk):
        for split in ("train", "validation"):  # as PartWriter hands them: each split of a chunk in turn
            of_split = [row for row_split, row in rows[start:start + chunk] if row_split == split]
            for row in of_split:
                one_by_one.add(split, one_by_one.rows[split], row)
            if of_split:
                chunked.add_rows(split, chunked.rows[split], of_split)
    assert orjson.dumps(chunked.to_json()) == orjson.dumps(one_by_one.to_json())
    # the sample is the rows of lowest seeded rank (the later place breaks a tie, as the heap does)
    ranked = []
    for split in ("train", "validation"):
        for position, row in enumerate(row for row_split, row in rows if row_split == split):
            ids = [trajectory_id for _, trajectory_id in trajectory_refs(row)]
            key = "|".join(ids) if ids else f"x:{split}:2:{position}"
            ranked.append((int(rank("s", key)[:16], 16), tuple(-ord(c) for c in split), -position, (split, position)))
    assert {(split, position) for split, position, _ in chunked.picked()} == {place for *_, place in sorted(ranked)[:5]}


def test_a_row_naming_no_trajectory_is_ranked_by_its_shard_and_place():
    # its place in the split is not known to a shard: the shard and its place there rank it
    first, second = (ExportScan("x", "sft", samples=1, seed="s", shard=shard) for shard in (0, 1))
    first.add("train", 0, {"text": "a"})
    second.add("train", 0, {"text": "b"})
    assert first.picked()[0][2] == {"text": "a"} and second.picked()[0][2] == {"text": "b"}
    first.absorb(second)
    (split, position, row), = first.picked()
    assert (split, position) == (("train", 0) if row == {"text": "a"} else ("train", 1))


def test_a_scan_survives_json_as_it_was():
    scan = ExportScan("x", "dpo", samples=3, seed="s")
    for position, (split, row) in enumerate(rows_of(12)):
        scan.add(split, position, row)
    again = ExportScan.from_json(orjson.loads(orjson.dumps(scan.to_json())))
    assert described(again) == described(scan)


@pytest.fixture(scope="module")
def written_in_shards(tmp_path_factory):
    """Every export of the sharding test's dataset written in 1 and in 3 shards."""
    frame = dataset()
    trajectories = int(frame["trajectory_id"].nunique())
    rows_per_bucket = np.bincount(bucket_column(frame.drop_duplicates("trajectory_id")), minlength=BUCKETS)
    folders = {}
    for shards in (1, 3):
        target = math.ceil(trajectories / shards)
        assert len(shard_ranges(rows_per_bucket, target)) == shards
        config = PipelineConfig(split=SplitConfig(validation_fraction=0.3), shards={"target_trajectories": target},
                                report=ReportConfig(samples_per_export=4, seed="scan"))
        folder = tmp_path_factory.mktemp(f"{shards}_shards")
        outcomes = list(write_exports(Storage(str(folder)), FrameTable(frame), {}, config, list(EXPORTS),
                                      {export.name: "test" for export in EXPORTS}, {}))
        assert all(isinstance(outcome, Written) for outcome in outcomes)
        folders[shards] = (Storage(str(folder)), config)
    return folders


@pytest.mark.parametrize("export", [export.name for export in EXPORTS])
def test_the_merged_summary_is_the_scan_of_the_committed_files(written_in_shards, export):
    summaries = {}
    for shards, (store, config) in written_in_shards.items():
        manifest = store.read_json(layout.export_manifest(export))
        summary = stored_scan(store, export, manifest, 4, "scan")
        assert summary is not None
        from_files = scan_stored_export(export, manifest, StoredExport(store, export, manifest), config)
        assert described(summary) == described(from_files)
        summaries[shards] = described(summary)
    assert summaries[3] == summaries[1]
    if export != "on_policy_tokens":  # these rows carry no token data: that export is empty
        assert summaries[1]["picked"] and sum(summaries[1]["rows"].values()) > 4


def test_a_summary_of_other_files_or_other_sample_settings_is_not_used(written_in_shards):
    store, _ = written_in_shards[3]
    manifest = store.read_json(layout.export_manifest("sft"))
    assert stored_scan(store, "sft", manifest, 4, "scan") is not None
    assert stored_scan(store, "sft", manifest, 3, "scan") is None  # the report shows 3 rows now
    assert stored_scan(store, "sft", manifest, 4, "other seed") is None
    name = next(iter(manifest["files"]))
    changed = {**manifest, "files": {**manifest["files"], name: {**manifest["files"][name], "sha256": "0" * 64}}}
    assert stored_scan(store, "sft", changed, 4, "scan") is None  # the files were written again since
    assert stored_scan(store, "dpo_missing", manifest, 4, "scan") is None  # no summary: an older export


def test_any_cuts_give_the_same_scan():
    generator = random.Random(7)
    rows = rows_of(200)
    for _ in range(20):
        cuts = sorted(generator.sample(range(1, 200), generator.randint(1, 6)))
        whole = ExportScan("x", "sft", samples=5, seed="r")
        merged = None
        for index, (start, stop) in enumerate(zip([0, *cuts], [*cuts, 200])):
            part = ExportScan("x", "sft", samples=5, seed="r", shard=index)
            for split, row in rows[start:stop]:
                whole.add(split, whole.rows[split], row)
                part.add(split, part.rows[split], row)
            if merged is None:
                merged = part
            else:
                merged.absorb(part)
        assert described(merged) == described(whole), cuts
