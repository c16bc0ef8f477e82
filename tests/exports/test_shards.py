"""Sharded exports (issue 42): a family's plan decides once over small columns, and its units
are rendered shard by shard (contiguous bucket ranges); the rows of N shards, concatenated in
shard order, are the rows of one shard, in the same order, for every export."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.conftest import call_item, make_rollout, message_item, output_item, trajectory_frame
from tests.exports.rendering import render_family
from trajectory_assets.buckets import BUCKETS, shard_ranges
from trajectory_assets.config import DpoConfig, GrpoConfig, PipelineConfig, SftConfig, SplitConfig
from trajectory_assets.exports.families import FAMILIES
from trajectory_assets.exports.families.frames import (
    EVERY_BUCKET,
    SPLITS,
    FrameTable,
    Payloads,
    bucket_column,
)
from trajectory_assets.exports.registry import family_exports
from trajectory_assets.exports.token_budget import TokenBudget
from trajectory_assets.exports.registry import EXPORTS
from trajectory_assets.exports.shard_phase import write_exports
from trajectory_assets.exports.writer import Written
from trajectory_assets.io.storage import Storage

ALL_TRAIN = SplitConfig(validation_fraction=0.0)
# 200 words: two answers differing by one word are near duplicates (Jaccard of 5-word shingles ~0.99)
LONG = " ".join(f"w{i}" for i in range(200))


def rollout(prompt, answer, reward, task=None, **extra):
    """A NeMo Gym rollout of ``prompt``; ``task``: its ``_ng_task_index`` (a task_key scoped to
    its file, so rollouts of different prompts can share one)."""
    return make_rollout([message_item(answer)], request_input=prompt, reward=reward, agent_ref={"name": "agent"},
                        **({} if task is None else {"_ng_task_index": task}), **extra)


def tool_run(prompt, reward, task=None, **extra):
    row = make_rollout([call_item("lookup", '{"city": "Paris"}', "c1"), output_item("c1", "sunny"),
                        message_item("It is sunny in Paris today.")], request_input=prompt, reward=reward,
                       agent_ref={"name": "agent"}, **({} if task is None else {"_ng_task_index": task}), **extra)
    row["responses_create_params"]["tools"] = [{"type": "function", "name": "lookup", "parameters": {}}]
    return row


def prompts_in_bucket_order(count, start=0):
    """``count`` prompts "prompt <n>", sorted by their bucket (lowest first), none sharing one."""
    texts = [f"prompt {n}" for n in range(start, start + count * 3)]
    buckets = bucket_column(trajectory_frame([rollout(text, "a", 1.0) for text in texts]))
    order = sorted({int(bucket): text for bucket, text in zip(buckets, texts)}.items())
    return [text for _, text in order[:count]]


def answers(frame):
    """trajectory_id -> the text of its last message."""
    return {trajectory_id: json.loads(messages)[-1]["content"]
            for trajectory_id, messages in zip(frame["trajectory_id"], frame["messages"])}


def canonical_ids(frame):
    """The trajectory ids in the canonical order: a stable sort by bucket of the table's order."""
    return frame.assign(bucket=bucket_column(frame)).sort_values("bucket", kind="stable")["trajectory_id"].tolist()


class CountingTable(FrameTable):
    """A FrameTable that records each scan's ids and bucket range."""

    def __init__(self, frame):
        super().__init__(frame)
        self.scans: list[tuple[frozenset | None, tuple[int, int] | None]] = []

    def scan(self, columns, ids=None, buckets=None):
        self.scans.append((None if ids is None else frozenset(ids), buckets))
        return super().scan(columns, ids, buckets)


def rendered(family, table, config, shards=(EVERY_BUCKET,), budget=None):
    """Every export of ``family``: (its records in order, its exclusions), by export name, the
    units of each of ``shards`` rendered as its shard step renders them."""
    collected = render_family(family, table, config, ALL_TRAIN, family_exports(family), budget, shards=shards)
    return {name: (frame.records, dict(frame.excluded)) for name, frame in collected.items()}


# ---------- the canonical order


def test_the_plan_orders_trajectories_by_bucket_then_table_order():
    low, mid, high = prompts_in_bucket_order(3)
    # the table's order interleaves the prompts; two rollouts of each keep their order
    frame = trajectory_frame([rollout(high, "h1", 1.0), rollout(low, "l1", 1.0), rollout(mid, "m1", 1.0),
                              rollout(low, "l2", 1.0), rollout(high, "h2", 1.0), rollout(mid, "m2", 1.0)])
    plan = FAMILIES["sft"].plan(FrameTable(frame), SftConfig())
    answer_of = answers(frame)
    assert [answer_of[i] for i in plan.units["trajectory_id"]] == "l1 l2 m1 m2 h1 h2".split()
    assert plan.units["trajectory_id"].tolist() == canonical_ids(frame)
    assert np.all(np.diff(plan.units["bucket"].to_numpy()) >= 0)
    assert plan.rows_per_bucket.sum() == len(frame) and len(plan.rows_per_bucket) == BUCKETS


def test_tasks_and_pairs_follow_their_first_rollout_in_the_canonical_order():
    """A task spanning two prompts belongs to the bucket of its first rollout in the canonical
    order, wherever its rollouts stand in the table."""
    low, mid, high = prompts_in_bucket_order(3)
    frame = trajectory_frame([rollout(high, "h", 1.0, task=0), rollout(mid, "m", 0.0, task=1),
                              rollout(high, "h0", 0.0, task=0), rollout(low, "l", 1.0, task=1),
                              rollout(mid, "m2", 0.5, task=2), rollout(mid, "m3", 0.0, task=2)])
    answer_of = answers(frame)
    buckets = dict(zip(frame["trajectory_id"], bucket_column(frame)))
    tasks = FAMILIES["grpo"].plan(FrameTable(frame), GrpoConfig(zero_variance_groups="keep")).units
    # task 1 (rollouts of mid, then low) starts at low; tasks 2 and 0 at mid and high
    assert [answer_of[i] for i in tasks["trajectory_id"]] == ["l", "m2", "h"]
    assert tasks["bucket"].tolist() == [buckets[i] for i in tasks["trajectory_id"]]
    assert tasks["position"].tolist() == [0, 1, 2]
    assert [sorted(answer_of[i] for i in ids) for ids in tasks["trajectory_ids"]] == [["l", "m"], ["m2", "m3"],
                                                                                       ["h", "h0"]]
    pairs = FAMILIES["dpo"].plan(FrameTable(frame), DpoConfig()).units
    assert [(answer_of[c], answer_of[r]) for c, r in zip(pairs["chosen_id"], pairs["rejected_id"])] == [
        ("l", "m"), ("m2", "m3"), ("h", "h0")]
    # the spanning pair reads its rejected side from another bucket
    first = pairs.iloc[0]
    assert first["bucket"] == first["chosen_bucket"] < first["rejected_bucket"]


# ---------- units whose rows span buckets


def asked(answer, reward, tool=None, prompt="Is it sunny?", **extra):
    """A rollout of one user prompt, with a tool declared or none: two prompt_keys (the tools are
    part of a prompt), so two buckets, for the same conversation's start."""
    row = make_rollout([message_item(answer)], request_input=prompt, reward=reward,
                       agent_ref={"name": "agent"}, **extra)
    if tool is not None:
        row["responses_create_params"]["tools"] = [{"type": "function", "name": tool, "parameters": {}}]
    return row


def test_a_task_whose_rollouts_hold_two_prompts_is_rendered_whole_in_the_shard_of_its_first():
    """A task_key scoped to its file (``_ng_task_index``) holds rollouts of two prompts, so of
    two buckets, cut into two shards: its pair and its GRPO task are rendered in the shard of
    its first rollout's bucket, which reads the other rollout by id, and nothing else by id."""
    frame = trajectory_frame([asked("yes", 1.0, "lookup", _ng_task_index=7), asked("other", 1.0, "lookup"),
                              asked("no", 0.0, _ng_task_index=7), asked("more", 0.5)])
    bucket_of_row = bucket_column(frame)
    buckets = sorted(set(bucket_of_row.tolist()))
    assert len(buckets) == 2
    shards = [(0, buckets[1]), (buckets[1], BUCKETS)]
    yes, no = frame["trajectory_id"][0], frame["trajectory_id"][2]
    in_high_bucket = yes if bucket_of_row[0] == buckets[1] else no
    for family, config in (("sft", SftConfig(min_reward=None)), ("dpo", DpoConfig()),
                           ("grpo", GrpoConfig(zero_variance_groups="keep"))):
        whole = rendered(family, FrameTable(frame), config)
        table = CountingTable(frame)
        assert rendered(family, table, config, shards) == whole, family
        by_id = [ids for ids, buckets in table.scans if buckets is None and ids is not None]
        if family == "dpo":  # the pair (yes over no) is in the low shard, which reads its other side by id
            (pair,) = whole["dpo"][0]
            assert (pair["chosen_id"], pair["rejected_id"]) == (yes, no)
            assert pair["chosen"] == [{"role": "assistant", "content": "yes"}]
            assert by_id == [frozenset({in_high_bucket})]
        else:  # one trajectory per unit, always in the unit's own bucket
            assert by_id == []
        if family == "grpo":  # the spanning task: both rollouts, its first in the low bucket
            task = next(row for row in whole["grpo"][0] if row["num_rollouts"] == 2)
            assert set(task["trajectory_ids"]) == {yes, no} and task["trajectory_ids"][1] == in_high_bucket


def test_a_trajectory_id_reused_under_another_prompt_is_read_where_it_first_appears():
    """The table keeps a trajectory_id's first occurrence (in batch order). A later batch that
    reuses it under another prompt puts a copy in another bucket: the shard of that bucket
    reads the copy in its range, and must still render the first occurrence."""
    first_batch = trajectory_frame([asked("first", 1.0, "lookup", _ng_task_index=3), asked("no", 0.0, _ng_task_index=3)],
                                   source_id="a.jsonl")
    buckets = bucket_column(first_batch)
    low = int(buckets.argmin())
    high = 1 - low
    # the copy: the id of the rollout in the high bucket, under the prompt of the low one
    reused = trajectory_frame([asked("copy", 1.0, *(["lookup"] if low == 0 else []))], source_id="b.jsonl")
    reused["trajectory_id"] = first_batch["trajectory_id"][high]
    frame = pd.concat([first_batch, reused], ignore_index=True)
    assert bucket_column(frame)[2] == buckets[low]
    shards = [(0, int(buckets[high])), (int(buckets[high]), BUCKETS)]
    whole = rendered("dpo", FrameTable(frame), DpoConfig())
    (pair,) = whole["dpo"][0]
    assert {pair["chosen_id"], pair["rejected_id"]} == set(first_batch["trajectory_id"])
    assert pair["chosen"] == [{"role": "assistant", "content": "first"}]
    assert pair["rejected"] == [{"role": "assistant", "content": "no"}]
    table = CountingTable(frame)
    assert rendered("dpo", table, DpoConfig(), shards) == whole
    # the low shard's range holds the copy: the table's first occurrence is read by id instead
    assert (frozenset({first_batch["trajectory_id"][high]}), None) in table.scans


def test_the_stored_table_gives_the_rows_of_one_shard_for_any_shards(tmp_path):
    """The same shapes over batches in storage (the first holds a task spanning two buckets,
    the second reuses the id of its side in the other bucket under the first side's prompt):
    each shard's range read of the stored table, and its reads by id, give one shard's rows."""
    import pyarrow as pa

    from trajectory_assets import layout
    from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA
    from trajectory_assets.io.trajectory_table import StoredTrajectories

    first_batch = trajectory_frame([asked("first", 1.0, "lookup", _ng_task_index=3), asked("no", 0.0, _ng_task_index=3),
                                    *(rollout(f"prompt {n}", f"answer {n}", n / 10, task=n) for n in range(10))],
                                   source_id="a.jsonl")
    buckets = bucket_column(first_batch)
    low, high = (0, 1) if buckets[0] < buckets[1] else (1, 0)
    reused = trajectory_frame([asked("copy", 1.0, *(["lookup"] if low == 0 else []))], source_id="b.jsonl")
    reused["trajectory_id"] = first_batch["trajectory_id"][high]
    store = Storage(str(tmp_path))
    for key, frame in (("a", first_batch), ("b", reused)):
        with store.parquet_writer(layout.batch_trajectories(key), TRAJECTORY_ARROW_SCHEMA) as writer:
            writer.write_table(pa.Table.from_pandas(frame, schema=TRAJECTORY_ARROW_SCHEMA, preserve_index=False))
        store.write_bytes(layout.batch_summary(key), b"{}")
    table = StoredTrajectories(store, ["a", "b"], chunk_rows=2)
    rows_per_bucket = np.bincount(buckets, minlength=BUCKETS)
    for family, config in (("sft", SftConfig(min_reward=None)), ("dpo", DpoConfig()),
                           ("grpo", GrpoConfig(zero_variance_groups="keep"))):
        whole = rendered(family, table, config)
        assert any(records for records, _ in whole.values())
        for target in (7, 3, 1):
            assert rendered(family, table, config, shard_ranges(rows_per_bucket, target)) == whole, (family, target)
    (pair,) = rendered("dpo", table, DpoConfig())["dpo"][0]
    assert pair["chosen"] == [{"role": "assistant", "content": "first"}]


def test_a_shards_payloads_refuse_a_trajectory_they_do_not_hold():
    payloads = Payloads(pd.DataFrame({"trajectory_id": ["a", "b"], "messages": ["[]", "[]"]}))
    assert payloads.rows(["b", "a"])["trajectory_id"].tolist() == ["b", "a"]
    with pytest.raises(LookupError, match="missing from the shard"):
        payloads.rows(["a", "c"])


# ---------- every export, written, for 1, 2 and 7 shards


def dataset():
    """Tasks of many prompts (so many buckets): rewards that pair and fail, task types to cap,
    exact and near duplicates (across prompts), tool runs to cut to the token budget, tasks
    spanning two prompts (one pairs, one has no shared prompt), and the id of a spanning pair's
    side in another bucket reused in a later batch under the prompt of the pair's own bucket."""
    prompts = prompts_in_bucket_order(24, start=100)
    rows = []
    for n, prompt in enumerate(prompts):
        kind = {"task_type": f"type{n % 3}"}
        rows += [rollout(prompt, f"answer {n}", 1.0, task=n, metadata=kind),
                 rollout(prompt, f"wrong {n}", 0.0, task=n, metadata=kind),
                 rollout(prompt, f"answer {n}", 1.0, task=n, metadata=kind, copy=1)]  # an exact duplicate
        if n % 4 == 0:  # near duplicates of each other across prompts: one long answer, one word more
            rows.append(rollout(prompt, LONG + (" more" * (n % 8 == 0)), 0.6, task=n, metadata=kind))
        if n % 3 == 0:
            rows.append(tool_run(prompt, 0.5, task=n, metadata=kind))
    # two tasks whose rollouts hold two prompts: one user prompt with a tool declared or not
    # (the pair shares its prompt), and two prompts of far apart buckets
    rows += [asked("span a", 1.0, prompt=prompts[1], _ng_task_index=90),
             asked("span b", 0.0, "lookup", prompt=prompts[1], _ng_task_index=90),
             rollout(prompts[22], "span c", 0.5, task=91), rollout(prompts[2], "span d", 0.0, task=91)]
    first = trajectory_frame(rows, source_id="a.jsonl")
    span = first.loc[first["task_key"] == first["task_key"].iloc[-4]]
    in_low_bucket = int(bucket_column(span).argmin())
    later = trajectory_frame([asked("reused", 1.0, *(["lookup"] if in_low_bucket else []), prompt=prompts[1])],
                             source_id="b.jsonl")
    later["trajectory_id"] = span["trajectory_id"].iloc[1 - in_low_bucket]
    return pd.concat([first, later], ignore_index=True)


CONFIGS = {
    "near_dedup_caps_and_all_pairs": dict(
        sft=SftConfig(min_reward=None, dedup="near", max_per_task_type=14, max_tokens=14,
                      over_token_budget="truncate"),
        dpo=DpoConfig(pairing="all_pairs_with_margin", sample_fraction=0.8, max_tokens=40),
        grpo=GrpoConfig(zero_variance_groups="keep", max_per_task_type=6, max_tokens=6)),
    "exact_dedup_sample_and_best_vs_worst": dict(
        sft=SftConfig(min_reward=0.5, sample_fraction=0.7),
        dpo=DpoConfig(pairing="best_vs_worst", max_per_task_type=5),
        grpo=GrpoConfig(sample_fraction=0.6, zero_variance_groups="drop")),
}


def read_back(folder, export):
    """Each split's rows, read from its files in file order (a Hub-style shard's files sort in
    shard order), the manifest's exclusions and the rows it says were cut to the token budget."""
    rows = {}
    for split in SPLITS:
        files = sorted(path for path in (folder / "exports" / export.name).glob(f"{split}*")
                       if path.suffix == f".{export.file_format}")
        if export.file_format == "jsonl":
            rows[split] = [json.loads(line) for path in files for line in path.read_text().splitlines()]
        else:
            rows[split] = [row for path in files for row in pq.read_table(path).to_pylist()]
    manifest = json.loads((folder / "exports" / export.name / "manifest.json").read_text())
    return rows, manifest["excluded"], manifest["token_budget"]["truncated"]


@pytest.mark.parametrize("name", CONFIGS)
def test_every_export_has_the_same_rows_in_the_same_order_for_1_2_and_7_shards(tmp_path, name):
    from tests.fixtures.tokenizer import save_word_tokenizer
    from trajectory_assets.exports.token_budget import load_counter

    frame = dataset()
    tokenizer = save_word_tokenizer(tmp_path / "tokenizer")
    counter = load_counter(tokenizer)
    config = PipelineConfig(tokenizer=tokenizer, split=SplitConfig(validation_fraction=0.3), **CONFIGS[name])
    trajectories = int(frame["trajectory_id"].nunique())  # the table reads each id once
    rows_per_bucket = np.bincount(bucket_column(frame.drop_duplicates("trajectory_id")), minlength=BUCKETS)
    outputs = {}
    for shards in (1, 2, 7):
        target = math.ceil(trajectories / shards)
        assert len(shard_ranges(rows_per_bucket, target)) == shards
        sharded = config.model_copy(update={"shards": config.shards.model_copy(
            update={"target_trajectories": target})})
        folder = tmp_path / f"{shards}_shards"
        table = CountingTable(frame)
        budgets = {family: TokenBudget(counter, getattr(sharded, family).max_tokens,
                                       getattr(sharded, family).over_token_budget == "truncate") for family in FAMILIES}
        outcomes = list(write_exports(Storage(str(folder)), table, {}, sharded, list(EXPORTS),
                                      {export.name: "test" for export in EXPORTS}, budgets))
        assert all(isinstance(outcome, Written) for outcome in outcomes), [o.failed for o in outcomes
                                                                          if not isinstance(o, Written)]
        ranges_read = [buckets for _, buckets in table.scans if buckets is not None]
        # each shard's range read once, for every family at once (one shard reads the whole table, no range)
        assert len(ranges_read) == len(set(ranges_read)) == (0 if shards == 1 else shards)
        # the plan's flat columns read once for the three families (one shard reads the whole
        # table once more, with no range)
        assert table.scans.count((None, None)) == (2 if shards == 1 else 1)
        assert not list((folder / "staging").glob("*"))  # the run's staging folder is gone
        outputs[shards] = {export.name: read_back(folder, export)
                           for family in FAMILIES for export in family_exports(family)}
    assert outputs[2] == outputs[1]
    assert outputs[7] == outputs[1]
    # the data exercised what the test is about
    # the data exercised what the test is about: both splits of every export but the token-level
    # one (these rows carry no token data), and the decisions that span shards
    every = outputs[1]
    assert all(rows[split] for export, (rows, _, _) in every.items() if export != "on_policy_tokens" for split in SPLITS)
    excluded = {reason for _, counts, _ in every.values() for reason in counts}
    expected = {"duplicate_content", "sampled_out", "task_type_cap", "no_shared_prompt"}
    if name == "near_dedup_caps_and_all_pairs":
        expected |= {"near_duplicate", "over_token_budget", "pair_cap"}
        assert every["sft"][2] > 0  # rows cut to the token budget
    assert expected <= excluded


def test_a_frame_table_reads_a_range_and_gives_buckets_as_the_stored_table_does():
    low, high = prompts_in_bucket_order(2)
    frame = trajectory_frame([rollout(high, "h", 1.0), rollout(low, "l", 1.0)])
    low_bucket, high_bucket = sorted(bucket_column(frame).tolist())
    table = FrameTable(frame)
    (chunk,) = table.scan(["trajectory_id", "bucket"])
    assert chunk["bucket"].tolist() == [high_bucket, low_bucket]
    (chunk,) = table.scan(["trajectory_id"], buckets=(0, high_bucket))
    assert chunk["trajectory_id"].tolist() == [frame["trajectory_id"][1]]
    (chunk,) = table.scan(["trajectory_id"], buckets=(high_bucket, BUCKETS))
    assert chunk["trajectory_id"].tolist() == [frame["trajectory_id"][0]]


# ---------- near duplicates from the signatures stored beside the batches


def test_the_plan_finds_the_same_near_duplicates_with_or_without_stored_signatures(tmp_path, monkeypatch):
    """The dataset's two batches in storage, with signatures stored beside both, one, none, or
    made by other rules: every export of every family with ``dedup: near`` has the same rows
    and exclusions as the frame table signing every kept conversation; with current
    signatures beside every batch no conversation is read to sign it."""
    import pyarrow as pa

    from trajectory_assets import layout
    from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA
    from trajectory_assets.ingest import near_signatures
    from trajectory_assets.ingest.near_signatures import NearSignatures
    from trajectory_assets.io.trajectory_table import StoredTrajectories

    frame = dataset()
    batches = {"a": frame.loc[frame["source_id"] == "a.jsonl"], "b": frame.loc[frame["source_id"] == "b.jsonl"]}
    configs = {"sft": SftConfig(min_reward=None, dedup="near"), "dpo": DpoConfig(dedup="near"),
               "grpo": GrpoConfig(dedup="near", zero_variance_groups="keep")}
    expected = {family: rendered(family, FrameTable(frame), config) for family, config in configs.items()}
    assert expected["sft"]["sft"][1]["near_duplicate"] > 0
    signed: list[str] = []
    signature = near_signatures.signature

    def counting(messages_json):
        signed.append(messages_json)
        return signature(messages_json)

    monkeypatch.setattr("trajectory_assets.exports.families.frames.signature", counting)
    for beside in ((), ("a", "b"), ("b",), ("stale a", "b")):
        store = Storage(str(tmp_path / "+".join(beside)))
        for key, rows in batches.items():
            stored = pa.Table.from_pandas(rows, schema=TRAJECTORY_ARROW_SCHEMA, preserve_index=False)
            with store.parquet_writer(layout.batch_trajectories(key), TRAJECTORY_ARROW_SCHEMA) as writer:
                writer.write_table(stored)
            store.write_bytes(layout.batch_summary(key), b"{}")
            if key in beside or f"stale {key}" in beside:
                recorder = NearSignatures()
                recorder.add(stored)
                recorder.save(store, key)
            if f"stale {key}" in beside:  # made by other rules: its values must not be read
                table = pq.read_table(tmp_path / "+".join(beside) / layout.batch_near_signatures(key))
                stale = table.replace_schema_metadata({b"near_signature_rule": b"older"})
                with store.parquet_writer(layout.batch_near_signatures(key), stale.schema) as writer:
                    writer.write_table(stale.set_column(1, "minhash", pa.array(
                        [[0] * 64] * stale.num_rows, stale.schema.field("minhash").type)))
        table = StoredTrajectories(store, list(batches), chunk_rows=7)
        for family, config in configs.items():
            signed.clear()
            assert rendered(family, table, config) == expected[family], (beside, family)
            assert bool(signed) == (beside != ("a", "b")), (beside, family)
