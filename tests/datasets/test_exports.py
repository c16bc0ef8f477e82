"""SFT / DPO / GRPO rules over validated trajectories."""

import json

import pytest

from tests.conftest import call_item, make_rollout, message_item, output_item, trajectory_frame
from trajectory_assets.config import DpoConfig, GrpoConfig, SftConfig, SplitConfig
from trajectory_assets.datasets.exports import (
    FrameTable,
    build_dpo,
    build_grpo,
    build_sft,
    collect,
    iter_dpo,
    iter_grpo,
    iter_sft,
    split_of,
)

ALL_TRAIN = SplitConfig(validation_fraction=0.0)


def rows_of(frame):
    return [json.loads(line) for line in frame.rows["line"]]


def task(index, reward, answer="a", **extra):
    return make_rollout([message_item(answer)], request_input=f"task {index}", reward=reward,
                        _ng_task_index=index, agent_ref={"name": "agent"}, **extra)


# ---------- SFT


def test_sft_default_filter_keeps_completed_unmasked_rows_at_or_above_threshold():
    incomplete = task(3, 1.0)
    incomplete["response"]["status"] = "incomplete"
    frame = trajectory_frame([task(0, 1.0), task(1, 0.49), task(2, 0.5), incomplete, task(4, 1.0, mask_sample=True)])
    result = build_sft(frame, SftConfig(), ALL_TRAIN)
    assert [r["reward"] for r in rows_of(result)] == [1.0, 0.5]
    assert dict(result.excluded) == {"below_min_reward": 1, "not_completed": 1, "mask_sample": 1}


def test_sft_threshold_and_filters_are_configurable():
    frame = trajectory_frame([task(0, -5.0), task(1, 0.2, mask_sample=True)])
    config = SftConfig(min_reward=None, exclude_mask_sample=False)
    assert len(build_sft(frame, config, ALL_TRAIN).rows) == 2


def test_sft_rows_are_chat_messages_with_tools_and_lineage():
    row = make_rollout([call_item("f", '{"q": 1}', "c1"), output_item("c1", "r"), message_item("ok")], reward=1.0,
                       metadata={"task_type": "lookup"})
    row["responses_create_params"]["tools"] = [{"type": "function", "name": "f", "parameters": {}}]
    frame = trajectory_frame([row])
    (line,) = rows_of(build_sft(frame, SftConfig(), ALL_TRAIN))
    assert list(line) == ["messages", "tools", "reward", "task_type", "trajectory_id", "task_key"]
    assert [m["role"] for m in line["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert line["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert line["task_type"] == "lookup"
    assert line["trajectory_id"] == frame["trajectory_id"][0]


def test_sft_drops_runs_ending_on_an_unanswered_call_by_default():
    frame = trajectory_frame([make_rollout([call_item("f", "{}", "c1")])])
    result = build_sft(frame, SftConfig(), ALL_TRAIN)
    assert result.rows.empty and result.excluded == {"unanswered_tool_calls": 1}


# ---------- DPO


def test_dpo_pairs_best_against_worst_of_a_task_with_shared_prompt():
    frame = trajectory_frame([task(0, 0.5, "mid"), task(0, 1.0, "best"), task(0, 0.0, "worst")])
    (pair,) = rows_of(build_dpo(frame, DpoConfig(), ALL_TRAIN))
    assert pair["prompt"] == [{"role": "user", "content": "task 0"}]
    assert pair["chosen"] == [{"role": "assistant", "content": "best"}]
    assert pair["rejected"] == [{"role": "assistant", "content": "worst"}]
    assert (pair["reward_chosen"], pair["reward_rejected"], pair["quality_difference"]) == (1.0, 0.0, 1.0)
    id_by_reward = dict(zip(frame["reward"], frame["trajectory_id"]))
    assert (pair["chosen_id"], pair["rejected_id"]) == (id_by_reward[1.0], id_by_reward[0.0])


def test_dpo_exactly_two_follows_the_seed_rule():
    frame = trajectory_frame([task(0, 1.0, "a"), task(0, 0.0, "b"), task(1, 1.0, "a"), task(1, 0.5, "b"), task(1, 0.0, "c")])
    result = build_dpo(frame, DpoConfig(pairing="exactly_two"), ALL_TRAIN)
    assert len(result.rows) == 1
    assert result.excluded == {"task_without_exactly_two_rollouts": 1}


def test_dpo_drops_ties_and_pairs_below_margin():
    frame = trajectory_frame([task(0, 1.0, "a"), task(0, 1.0, "b"), task(1, 0.55, "a"), task(1, 0.5, "b")])
    result = build_dpo(frame, DpoConfig(min_margin=0.1), ALL_TRAIN)
    assert result.rows.empty
    assert result.excluded == {"tied_rewards": 1, "below_min_margin": 1}


def test_dpo_ties_are_dropped_even_with_zero_margin():
    frame = trajectory_frame([task(0, 1.0, "a"), task(0, 1.0, "b")])
    assert build_dpo(frame, DpoConfig(min_margin=0.0), ALL_TRAIN).rows.empty


def test_dpo_never_pairs_rollouts_of_different_prompts():
    other = make_rollout([message_item("x")], request_input="different", reward=0.0, _ng_task_index=0)
    frame = trajectory_frame([task(0, 1.0), other])
    result = build_dpo(frame, DpoConfig(), ALL_TRAIN)
    assert result.rows.empty and result.excluded == {"no_shared_prompt": 1}


def test_dpo_single_rollout_tasks_and_ineligible_rows_are_counted():
    masked = task(1, 0.0, "b", mask_sample=True)
    frame = trajectory_frame([task(0, 1.0), task(1, 1.0, "a"), masked])
    result = build_dpo(frame, DpoConfig(), ALL_TRAIN)
    assert result.excluded == {"ineligible_trajectories": 1, "single_rollout_task": 2}


# ---------- GRPO


def test_grpo_one_row_per_task_with_request_and_agent_ref():
    frame = trajectory_frame([task(0, 1.0, "a"), task(0, 0.0, "b"), task(1, 1.0)])
    rows = rows_of(build_grpo(frame, GrpoConfig(), ALL_TRAIN))
    assert len(rows) == 2
    assert rows[0]["responses_create_params"] == {"input": "task 0"}
    assert rows[0]["agent_ref"] == {"name": "agent"}
    assert rows[0]["num_rollouts"] == 2 and rows[0]["mean_reward"] == 0.5
    assert len(rows[0]["trajectory_ids"]) == 2


def test_grpo_without_agent_uses_the_configured_default_or_skips():
    frame = trajectory_frame([make_rollout()])
    skipped = build_grpo(frame, GrpoConfig(), ALL_TRAIN)
    assert skipped.rows.empty and skipped.excluded == {"no_agent_ref": 1}
    (row,) = rows_of(build_grpo(frame, GrpoConfig(default_agent_ref="fallback"), ALL_TRAIN))
    assert row["agent_ref"] == {"type": "responses_api_agents", "name": "fallback"}


def test_grpo_string_agent_ref_becomes_the_dict_form():
    frame = trajectory_frame([make_rollout(agent_ref="named")])
    (row,) = rows_of(build_grpo(frame, GrpoConfig(), ALL_TRAIN))
    assert row["agent_ref"] == {"type": "responses_api_agents", "name": "named"}


# ---------- split


def test_split_is_deterministic_per_task_and_follows_the_fraction():
    keys = [f"{i:024x}" for i in range(2000)]
    config = SplitConfig(validation_fraction=0.2)
    splits = [split_of(k, config) for k in keys]
    assert splits == [split_of(k, config) for k in keys]
    share = splits.count("validation") / len(splits)
    assert 0.17 < share < 0.23
    assert {split_of(k, SplitConfig(validation_fraction=0.0)) for k in keys} == {"train"}
    assert {split_of(k, SplitConfig(validation_fraction=1.0)) for k in keys} == {"validation"}


def test_all_rollouts_of_a_task_share_a_split():
    frame = trajectory_frame([task(i % 7, 1.0, f"answer {i}") for i in range(40)])
    rows = build_sft(frame, SftConfig(), SplitConfig(validation_fraction=0.5)).rows
    assert rows.groupby("task_key")["split"].nunique().max() == 1


# ---------- streaming


class OneRowChunks:
    """A TrajectoryTable that yields one row per chunk: the worst case for streaming."""

    def __init__(self, frame):
        self.frame = frame

    def scan(self, columns, ids=None):
        chunk = self.frame[columns]
        if ids is not None:
            chunk = chunk.loc[chunk["trajectory_id"].isin(ids)]
        for position in range(len(chunk)):
            yield chunk.iloc[[position]]


@pytest.mark.parametrize("builder, config", [(iter_sft, SftConfig()), (iter_dpo, DpoConfig()), (iter_grpo, GrpoConfig())])
def test_chunked_reading_gives_the_same_rows_as_one_frame(builder, config):
    rows = [task(i % 4, reward, f"answer {i}") for i, reward in enumerate([1.0, 0.0, 0.5, 1.0, 0.0, 0.25, 1.0, 0.0])]
    frame = trajectory_frame(rows)
    whole = collect(builder(FrameTable(frame), config, ALL_TRAIN))
    chunked = collect(builder(OneRowChunks(frame), config, ALL_TRAIN))
    assert len(whole.rows) > 0
    assert sorted(chunked.rows["line"]) == sorted(whole.rows["line"])
    assert chunked.excluded == whole.excluded
