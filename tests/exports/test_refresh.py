"""Refreshes (issue 42, item 6): a shard is rendered again only when its input changed (its
rows' batches, a decision about one of its rows, its range, the configuration or code its
render reads); every other shard's part is the committed build's, and the result is, byte
for byte, what a build from scratch writes."""

from __future__ import annotations

import pickle

import numpy as np
import orjson
import pytest

from tests.conftest import make_rollout, message_item, trajectory_frame, write_jsonl
from tests.exports.test_shards import prompts_in_bucket_order
from trajectory_assets import layout
from trajectory_assets.buckets import BUCKETS, shard_of, shard_ranges
from trajectory_assets.config import PipelineConfig
from trajectory_assets.exports.families import FAMILIES
from trajectory_assets.exports.families.frames import bucket_column
from trajectory_assets.exports.registry import EXPORTS
from trajectory_assets.exports.shard_phase import write_exports
from trajectory_assets.exports.writer import PART_FORMAT, Written, dump_part, load_part
from trajectory_assets.ingest.bucket_order import bucket_ordered
from trajectory_assets.ingest.conversion import ingest
from trajectory_assets.io.source_files import discover
from trajectory_assets.io.storage import Storage
from trajectory_assets.io.trajectory_table import StoredTrajectories
from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA
from trajectory_assets.sources import INPUTS_SUFFIXES


EVERY_EXPORT = sorted(export.name for export in EXPORTS)
GRPO_EXPORTS = sorted(export.name for export in EXPORTS if export.family == "grpo")
# the exports whose rows hold nothing that spans shards (a GRPO row holds its task's position)
SFT_AND_DPO = [export for export in EXPORTS if export.family != "grpo"]
# every family, JSON lines and Parquet: for the tests of what makes a shard render (faster)
SOME = [export for export in EXPORTS if export.name in ("sft", "trl_sft", "dpo", "grpo")]


def rollouts(prompts, start=0):
    """Three rollouts of each prompt (a pair, a GRPO task, two SFT rows), of three task types;
    every fourth prompt six more (prompts of unequal sizes leave the shards' cuts some room)."""
    rows = []
    for n, prompt in enumerate(prompts, start=start):
        kind = {"task_type": f"type{n % 3}"}
        answers = [("right", 1.0), ("wrong", 0.0), ("close", 0.5)]
        if n % 4 == 3:
            answers += [(f"more{k}", 0.25 * (k % 4)) for k in range(6)]
        rows += [make_rollout([message_item(f"{word} {n}")], request_input=prompt, reward=reward,
                              agent_ref={"name": "agent"}, _ng_task_index=n, metadata=kind)
                 for word, reward in answers]
    return rows


def store_batch(store, folder, key, rows):
    """A batch stored as ingest stores it: its rows ordered by bucket, and its summary."""
    source = write_jsonl(folder / f"{key}.jsonl", rows)
    with (store.parquet_writer(layout.batch_trajectories(key), TRAJECTORY_ARROW_SCHEMA) as writer,
          bucket_ordered(writer) as write):
        summary = ingest(discover([str(source)], INPUTS_SUFFIXES), write, lambda rejected: None)
    store.write_bytes(layout.batch_summary(key), orjson.dumps(summary.as_dict()))


class CountingTrajectories(StoredTrajectories):
    """The stored table, recording the bucket range of every range scan: a shard step that
    renders reads its range once; one that reuses every export reads nothing."""

    def __init__(self, store, batches):
        super().__init__(store, batches)
        self.ranges_read: list[tuple[int, int]] = []

    def scan(self, columns, ids=None, buckets=None):
        if buckets is not None:
            self.ranges_read.append(tuple(buckets))
        return super().scan(columns, ids, buckets)


def build(store, batches, config, exports=EXPORTS):
    """The ``exports`` written through the three steps. Returns the ranges the shard steps read
    (a shard reusing every export reads none) and, per shard range, the exports rendered."""
    table = CountingTrajectories(store, batches)
    steps = []
    outcomes = list(write_exports(store, table, {key: "" for key in batches}, config, list(exports),
                                  {export.name: "test" for export in exports}, {}, on_shard=steps.append))
    assert all(isinstance(outcome, Written) for outcome in outcomes)
    rendered = {tuple(step["buckets"]): sorted(set(step["rows"]) - set(step["reused"])) for step in steps}
    return sorted(table.ranges_read), rendered


def outputs(root, exports=EXPORTS):
    """Every file a build of ``exports`` leaves for loaders: the exports."""
    return {str(path.relative_to(root)): path.read_bytes()
            for export in exports for path in sorted((root / "exports" / export.name).rglob("*")) if path.is_file()}


def from_scratch(store, root, batches, config, exports=EXPORTS):
    """What a build with no earlier build beside it writes, in the same storage (the same
    batch files, so the same fingerprints)."""
    for folder in ("exports", "parts"):
        store.remove_folder(folder)
    ranges, _ = build(store, batches, config, exports)
    return outputs(root, exports), ranges


def with_target(target, **sections):
    config = PipelineConfig(**sections)
    return config.model_copy(update={"shards": config.shards.model_copy(update={"target_trajectories": target})})


def refreshed(tmp_path, landing, exports=EXPORTS):
    """A dataset of 24 prompts built in shards; then two new prompts stored as a second batch,
    whose buckets are in the shard ``landing`` (an index) and leave every shard's range as it
    was (the test's premise: a range that moves re-renders the shards it bounds, as it must)."""
    root = tmp_path / "dataset"
    store = Storage(str(root))
    prompts = prompts_in_bucket_order(24)
    before = np.bincount(bucket_column(trajectory_frame(rollouts(prompts))), minlength=BUCKETS)
    candidates = [text for text in prompts_in_bucket_order(60, start=1000) if text not in prompts]
    buckets_of = dict(zip(candidates, bucket_column(trajectory_frame(rollouts(candidates)))[::3]))
    for target in range(10, 40):
        ranges = shard_ranges(before, target)
        for low, high in zip(candidates, candidates[1:]):
            after = before.copy()
            np.add.at(after, [buckets_of[low], buckets_of[high]], 3)
            lands = {shard_of(buckets_of[low], ranges), shard_of(buckets_of[high], ranges)}
            if len(ranges) >= 5 and lands == {landing % len(ranges)} and shard_ranges(after, target) == ranges:
                store_batch(store, tmp_path, "a", rollouts(prompts))
                config = with_target(target)
                assert build(store, ["a"], config, exports)[0] == ranges  # the first build renders every shard
                store_batch(store, tmp_path, "b", rollouts([low, high], start=100))
                return store, root, config, ranges
    raise AssertionError("no shard size leaves the ranges as they were")


def test_new_prompts_re_render_only_the_shard_they_land_in(tmp_path):
    store, root, config, ranges = refreshed(tmp_path, landing=0)
    ranges_read, rendered = build(store, ["a", "b"], config, SFT_AND_DPO)
    assert ranges_read == [ranges[0]]
    assert rendered == {shard: sorted(e.name for e in SFT_AND_DPO) if shard == ranges[0] else [] for shard in ranges}
    refreshed_files = outputs(root, SFT_AND_DPO)
    # a refresh with nothing new renders nothing and reads no payload
    assert build(store, ["a", "b"], config, SFT_AND_DPO) == ([], {shard: [] for shard in ranges})
    assert outputs(root, SFT_AND_DPO) == refreshed_files
    scratch, every_range = from_scratch(store, root, ["a", "b"], config, SFT_AND_DPO)
    assert every_range == ranges
    assert scratch == refreshed_files  # every file, byte for byte, the manifests and cards included


def test_new_prompts_in_the_first_shard_move_the_later_grpo_tasks_positions(tmp_path):
    """A GRPO row holds its task's position among every task (verl's ``index``): new tasks in
    the first shard move those of every later shard, whose GRPO exports are rendered again;
    their SFT and DPO exports are reused."""
    store, root, config, ranges = refreshed(tmp_path, landing=0)
    ranges_read, rendered = build(store, ["a", "b"], config)
    assert ranges_read == ranges
    assert rendered == {shard: EVERY_EXPORT if shard == ranges[0] else GRPO_EXPORTS for shard in ranges}
    refreshed_files = outputs(root)
    assert from_scratch(store, root, ["a", "b"], config)[0] == refreshed_files


def test_a_configuration_change_re_renders_every_shard(tmp_path):
    store, root, config, ranges = refreshed(tmp_path, landing=0, exports=SOME)
    build(store, ["a", "b"], config, SOME)
    final_only = config.model_copy(update={"sft": config.sft.model_copy(update={"train_on": "final_assistant"})})
    ranges_read, rendered = build(store, ["a", "b"], final_only, SOME)
    assert ranges_read == ranges
    sft_exports = sorted(export.name for export in SOME if export.family == "sft")
    assert rendered == {shard: sft_exports for shard in ranges}  # the other families read nothing of it
    refreshed_files = outputs(root, SOME)
    assert from_scratch(store, root, ["a", "b"], final_only, SOME)[0] == refreshed_files


def test_a_cap_re_renders_exactly_the_shards_whose_units_it_changed(tmp_path):
    store, root, config, ranges = refreshed(tmp_path, landing=0, exports=SOME)
    build(store, ["a", "b"], config, SOME)
    table = StoredTrajectories(store, ["a", "b"])
    uncapped = FAMILIES["sft"].plan(table, config.sft)
    per_type = uncapped.units.merge(next(table.scan(["trajectory_id", "task_type"])), on="trajectory_id")
    # one row fewer of the largest task type: a decision over the whole dataset that changes a few shards
    capped_config = config.model_copy(update={"sft": config.sft.model_copy(
        update={"max_per_task_type": int(per_type["task_type"].value_counts().max()) - 1})})
    capped = FAMILIES["sft"].plan(table, capped_config.sft)
    changed = [shard for shard in ranges if not uncapped.units_in(shard).reset_index(drop=True).equals(
        capped.units_in(shard).reset_index(drop=True))]
    assert 0 < len(changed) < len(ranges)
    assert build(store, ["a", "b"], capped_config, SOME)[0] == changed
    refreshed_files = outputs(root, SOME)
    assert from_scratch(store, root, ["a", "b"], capped_config, SOME)[0] == refreshed_files


def test_a_shard_whose_committed_file_changed_is_rendered_again(tmp_path):
    """A committed file whose bytes are not the ones its kept part wrote (edited by hand, or
    from another build) is never reused: the shard is rendered."""
    store, root, config, ranges = refreshed(tmp_path, landing=0, exports=SOME)
    build(store, ["a", "b"], config, SOME)
    manifest = orjson.loads((root / "exports" / "sft" / "manifest.json").read_bytes())
    file_name, described = next(item for item in manifest["files"].items() if item[1]["rows"])
    described["sha256"] = "0" * 64
    store.write_bytes(layout.export_manifest("sft"), orjson.dumps(manifest))
    edited = ranges[described["shard"]]
    assert build(store, ["a", "b"], config, SOME)[1] == {shard: ["sft"] if shard == edited else [] for shard in ranges}
    # and a kept part gone: that shard too
    part = load_part(store.read_bytes(layout.export_part("dpo", 0)))
    assert part.fingerprint
    store.remove(layout.export_part("dpo", 0))
    assert build(store, ["a", "b"], config, SOME)[1] == {shard: ["dpo"] if shard == ranges[0] else [] for shard in ranges}


def test_a_part_kept_by_code_of_another_format_is_rendered_again(tmp_path):
    """A kept part of another format than this code's is never loaded into today's classes:
    an older ``PART_FORMAT``, a pickle from before the format was written, one cut short, one
    naming a module renamed since. Its shard is rendered, as from scratch."""
    import sys
    import types

    store, root, config, ranges = refreshed(tmp_path, landing=0, exports=SOME)
    build(store, ["a", "b"], config, SOME)
    part = load_part(store.read_bytes(layout.export_part("sft", 0)))
    header = b"trajectory-assets export part %d\n"
    assert dump_part(part).startswith(header % PART_FORMAT)
    store.write_bytes(layout.export_part("sft", 0), header % (PART_FORMAT - 1) + pickle.dumps(part))
    store.write_bytes(layout.export_part("dpo", 1), pickle.dumps(part))  # as the kept parts of e9ded74 were
    store.write_bytes(layout.export_part("grpo", 2), dump_part(part)[:-20])
    module = sys.modules["renamed_since"] = types.ModuleType("renamed_since")
    module.Part = type("Part", (), {"__module__": "renamed_since"})
    try:
        store.write_bytes(layout.export_part("trl_sft", 3), header % PART_FORMAT + pickle.dumps(module.Part()))
    finally:
        del sys.modules["renamed_since"]
    before = outputs(root, SOME)
    rendered_again = {ranges[0]: ["sft"], ranges[1]: ["dpo"], ranges[2]: ["grpo"], ranges[3]: ["trl_sft"]}
    assert build(store, ["a", "b"], config, SOME)[1] == {shard: rendered_again.get(shard, []) for shard in ranges}
    assert outputs(root, SOME) == before
    # kept again as this code keeps them: the next build reuses every part
    assert build(store, ["a", "b"], config, SOME)[1] == {shard: [] for shard in ranges}


def test_a_storage_error_reading_a_kept_part_fails_the_step(tmp_path):
    """A kept part that is there but cannot be read is a storage error, raised: never taken
    for a stale part and silently rendered again."""
    store, root, config, ranges = refreshed(tmp_path, landing=0, exports=SOME)
    build(store, ["a", "b"], config, SOME)
    kept = root / layout.export_part("sft", 0)
    kept.unlink()
    kept.mkdir()  # a path the storage lists but cannot read (IsADirectoryError: an OSError, as a failing disk gives)
    with pytest.raises(IsADirectoryError):
        build(store, ["a", "b"], config, SOME)


def test_a_units_digest_reads_every_value_of_a_long_list_cell():
    """A GRPO task's trajectory ids are a list per cell: numpy shortens a long array's repr
    ("..."), which would let two tasks differing in the middle of their lists look alike."""
    import pandas as pd

    from trajectory_assets.exports.shard_phase import frame_digest

    ids = np.array([f"t{n}" for n in range(3000)], dtype=object)
    other = ids.copy()
    other[1500] = "changed"
    assert frame_digest(pd.DataFrame({"trajectory_ids": [ids]})) != frame_digest(pd.DataFrame({"trajectory_ids": [other]}))
    assert frame_digest(pd.DataFrame({"trajectory_ids": [ids]})) == frame_digest(pd.DataFrame({"trajectory_ids": [ids.copy()]}))
    assert frame_digest(pd.DataFrame({"n": [1, 2]})) != frame_digest(pd.DataFrame({"n": [1.0, 2.0]}))  # the types too
