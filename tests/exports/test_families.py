"""SFT / DPO / GRPO rules over validated trajectories."""

import json

import numpy as np
import pytest

from tests.conftest import call_item, make_rollout, message_item, output_item, trajectory_frame
from tests.exports.rendering import build, render_family
from trajectory_assets.config import DpoConfig, GrpoConfig, SftConfig, SplitConfig
from trajectory_assets.exports.families.frames import FrameTable, split_of

ALL_TRAIN = SplitConfig(validation_fraction=0.0)


def rows_of(frame):
    return [json.loads(line) for line in frame.lines()]


def prompt_of(grpo_row):
    """A GRPO row's prompt (a task of ``task`` below: the text "task <index>")."""
    return grpo_row["responses_create_params"]["input"]


def task(index, reward, answer="a", **extra):
    return make_rollout([message_item(answer)], request_input=f"task {index}", reward=reward,
                        _ng_task_index=index, agent_ref={"name": "agent"}, **extra)


# ---------- SFT


def test_sft_default_filter_keeps_completed_unmasked_rows_at_or_above_threshold():
    incomplete = task(3, 1.0)
    incomplete["response"]["status"] = "incomplete"
    frame = trajectory_frame([task(0, 1.0), task(1, 0.49), task(2, 0.5), incomplete, task(4, 1.0, mask_sample=True)])
    result = build("sft", frame, SftConfig(), ALL_TRAIN)
    assert [r["reward"] for r in rows_of(result)] == [1.0, 0.5]
    assert dict(result.excluded) == {"below_min_reward": 1, "not_completed": 1, "mask_sample": 1}


def test_sft_threshold_and_filters_are_configurable():
    frame = trajectory_frame([task(0, -5.0), task(1, 0.2, mask_sample=True)])
    config = SftConfig(min_reward=None, exclude_mask_sample=False)
    assert len(build("sft", frame, config, ALL_TRAIN).rows) == 2


def test_sft_rows_are_chat_messages_with_tools_and_lineage():
    row = make_rollout([call_item("f", '{"q": 1}', "c1"), output_item("c1", "r"), message_item("ok")], reward=1.0,
                       metadata={"task_type": "lookup"})
    row["responses_create_params"]["tools"] = [{"type": "function", "name": "f", "parameters": {}}]
    frame = trajectory_frame([row])
    (line,) = rows_of(build("sft", frame, SftConfig(), ALL_TRAIN))
    assert list(line) == ["messages", "tools", "reward", "task_type", "trajectory_id", "task_key"]
    assert [m["role"] for m in line["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert line["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert line["task_type"] == "lookup"
    assert line["trajectory_id"] == frame["trajectory_id"][0]


def test_sft_drops_runs_ending_on_an_unanswered_call_by_default():
    frame = trajectory_frame([make_rollout([call_item("f", "{}", "c1")])])
    result = build("sft", frame, SftConfig(), ALL_TRAIN)
    assert result.rows.empty and result.excluded == {"unanswered_tool_calls": 1}


# ---------- DPO


def test_dpo_pairs_best_against_worst_of_a_task_with_shared_prompt():
    frame = trajectory_frame([task(0, 0.5, "mid"), task(0, 1.0, "best"), task(0, 0.0, "worst")])
    (pair,) = rows_of(build("dpo", frame, DpoConfig(), ALL_TRAIN))
    assert pair["prompt"] == [{"role": "user", "content": "task 0"}]
    assert pair["chosen"] == [{"role": "assistant", "content": "best"}]
    assert pair["rejected"] == [{"role": "assistant", "content": "worst"}]
    assert (pair["reward_chosen"], pair["reward_rejected"], pair["quality_difference"]) == (1.0, 0.0, 1.0)
    id_by_reward = dict(zip(frame["reward"], frame["trajectory_id"]))
    assert (pair["chosen_id"], pair["rejected_id"]) == (id_by_reward[1.0], id_by_reward[0.0])


def test_a_conversation_recorded_in_the_output_gives_dpo_its_shared_prompt_and_grpo_its_request():
    """Harnesses that log the whole conversation in the output (empty input): the system and
    user turns there are the prompt, for the pairing, the DPO prompt and the GRPO request."""
    def logged(answer, reward):
        output = [message_item("You are terse.", role="system"), message_item("Name a prime.", role="user"),
                  message_item(answer)]
        return make_rollout(output, request_input=[], reward=reward, _ng_task_index=0, agent_ref={"name": "a"})

    frame = trajectory_frame([logged("7", 1.0), logged("9", 0.0)])
    assert frame["prompt_key"].nunique() == 1  # the same prompt, so the two rollouts pair
    (pair,) = rows_of(build("dpo", frame, DpoConfig(), ALL_TRAIN))
    assert pair["prompt"] == [{"role": "system", "content": "You are terse."},
                              {"role": "user", "content": "Name a prime."}]
    assert (pair["chosen"], pair["rejected"]) == ([{"role": "assistant", "content": "7"}],
                                                  [{"role": "assistant", "content": "9"}])
    (task_row,) = rows_of(build("grpo", frame, GrpoConfig(), ALL_TRAIN))
    assert [item["role"] for item in task_row["responses_create_params"]["input"]] == ["system", "user"]
    assert task_row["num_rollouts"] == 2


def test_dpo_exactly_two_follows_the_seed_rule():
    frame = trajectory_frame([task(0, 1.0, "a"), task(0, 0.0, "b"), task(1, 1.0, "a"), task(1, 0.5, "b"), task(1, 0.0, "c")])
    result = build("dpo", frame, DpoConfig(pairing="exactly_two"), ALL_TRAIN)
    assert len(result.rows) == 1
    assert result.excluded == {"task_without_exactly_two_rollouts": 1}


def test_dpo_drops_ties_and_pairs_below_margin():
    frame = trajectory_frame([task(0, 1.0, "a"), task(0, 1.0, "b"), task(1, 0.55, "a"), task(1, 0.5, "b")])
    result = build("dpo", frame, DpoConfig(min_margin=0.1), ALL_TRAIN)
    assert result.rows.empty
    assert result.excluded == {"tied_rewards": 1, "below_min_margin": 1}


def test_dpo_ties_are_dropped_even_with_zero_margin():
    frame = trajectory_frame([task(0, 1.0, "a"), task(0, 1.0, "b")])
    assert build("dpo", frame, DpoConfig(min_margin=0.0), ALL_TRAIN).rows.empty


def test_dpo_never_pairs_rollouts_of_different_prompts():
    other = make_rollout([message_item("x")], request_input="different", reward=0.0, _ng_task_index=0)
    frame = trajectory_frame([task(0, 1.0), other])
    result = build("dpo", frame, DpoConfig(), ALL_TRAIN)
    assert result.rows.empty and result.excluded == {"no_shared_prompt": 1}


def test_dpo_single_rollout_tasks_and_ineligible_rows_are_counted():
    masked = task(1, 0.0, "b", mask_sample=True)
    frame = trajectory_frame([task(0, 1.0), task(1, 1.0, "a"), masked])
    result = build("dpo", frame, DpoConfig(), ALL_TRAIN)
    assert result.excluded == {"mask_sample": 1, "single_rollout_task": 2}


# ---------- GRPO


def test_grpo_one_row_per_task_with_request_and_agent_ref():
    frame = trajectory_frame([task(0, 1.0, "a"), task(0, 0.0, "b"), task(1, 1.0)])
    rows = rows_of(build("grpo", frame, GrpoConfig(), ALL_TRAIN))
    assert len(rows) == 2
    assert rows[0]["responses_create_params"] == {"input": "task 0"}
    assert rows[0]["agent_ref"] == {"type": "responses_api_agents", "name": "agent"}  # ng_prepare_data's form
    assert rows[0]["num_rollouts"] == 2 and rows[0]["mean_reward"] == 0.5
    assert len(rows[0]["trajectory_ids"]) == 2


def test_grpo_requests_carry_no_token_data_from_a_prompt_recorded_in_the_output():
    """A conversation recorded in the output becomes the request's input; the token ids a model
    server put on those items stay in the trajectory (on_policy_tokens), not in the RL row."""
    output = [with_tokens(message_item("Fix the bug.", role="user"), [1], [2]),
              with_tokens(message_item("Done."), [1, 2], [3])]
    frame = trajectory_frame([make_rollout(output, request_input=[], _ng_task_index=0, agent_ref={"name": "a"})])
    (row,) = rows_of(build("grpo", frame, GrpoConfig(zero_variance_groups="keep"), ALL_TRAIN))
    (item,) = row["responses_create_params"]["input"]
    assert item["role"] == "user" and not item.keys() & {"prompt_token_ids", "generation_token_ids",
                                                          "generation_log_probs"}
    assert frame["token_data"].notna().all()  # kept in the trajectory table


def test_grpo_without_agent_uses_the_configured_default_or_skips():
    frame = trajectory_frame([make_rollout()])
    skipped = build("grpo", frame, GrpoConfig(), ALL_TRAIN)
    assert skipped.rows.empty and skipped.excluded == {"no_agent_ref": 1}
    (row,) = rows_of(build("grpo", frame, GrpoConfig(default_agent_ref="fallback"), ALL_TRAIN))
    assert row["agent_ref"] == {"type": "responses_api_agents", "name": "fallback"}


def test_grpo_string_agent_ref_becomes_the_dict_form():
    frame = trajectory_frame([make_rollout(agent_ref="named")])
    (row,) = rows_of(build("grpo", frame, GrpoConfig(), ALL_TRAIN))
    assert row["agent_ref"] == {"type": "responses_api_agents", "name": "named"}



def test_grpo_routes_hermes_and_atif_tasks_only_to_the_agents_the_config_names():
    """A Harbor agent's name (terminus-2) names no NeMo Gym agent server: an ATIF task gets
    ``atif_agent_ref`` (none by default: left out), never its harness's name."""
    atif_task = {"schema_version": "ATIF-v1.6", "session_id": "s-1", "agent": {"name": "terminus-2", "version": "1"},
                 "steps": [{"step_id": 1, "source": "user", "message": "Fix the bug."},
                           {"step_id": 2, "source": "agent", "message": "Fixed."}]}
    hermes_task = {"conversations": [{"from": "human", "value": "Fix the test."}, {"from": "gpt", "value": "Fixed."}]}
    frame = trajectory_frame([atif_task, hermes_task])
    assert list(frame["source_format"]) == ["atif", "hermes"] and frame.loc[0, "agent_name"] == "terminus-2"
    keep = GrpoConfig(zero_variance_groups="keep")
    default = build("grpo", frame, keep, ALL_TRAIN)
    assert [row["agent_ref"]["name"] for row in rows_of(default)] == ["hermes_agent"]
    assert default.excluded == {"no_agent_ref": 1}
    named = rows_of(build("grpo", frame, keep.model_copy(update={"atif_agent_ref": "swe_agent"}), ALL_TRAIN))
    assert sorted(row["agent_ref"]["name"] for row in named) == ["hermes_agent", "swe_agent"]



def test_a_source_format_that_names_no_agent_setting_routes_to_the_default_agent():
    """A task of a format whose ``FORMAT`` declares no ``agent_ref_setting`` (here one the
    registry does not know) goes to ``grpo.default_agent_ref``: left out while that is null,
    never a KeyError; its rollout's own agent names no NeMo Gym agent server."""
    hermes_task = {"conversations": [{"from": "human", "value": "Fix the test."}, {"from": "gpt", "value": "Fixed."}]}
    frame = trajectory_frame([hermes_task]).assign(source_format="new_format", agent_name="its_harness")
    keep = GrpoConfig(zero_variance_groups="keep")
    skipped = build("grpo", frame, keep, ALL_TRAIN)
    assert skipped.rows.empty and skipped.excluded == {"no_agent_ref": 1}
    (row,) = rows_of(build("grpo", frame, keep.model_copy(update={"default_agent_ref": "fallback"}), ALL_TRAIN))
    assert row["agent_ref"] == {"type": "responses_api_agents", "name": "fallback"}


def test_a_source_format_must_name_an_agent_setting_the_config_has():
    from trajectory_assets.sources import SOURCES
    from trajectory_assets.sources.format import SourceFormat

    assert all(source.agent_ref_setting in GrpoConfig.model_fields for source in SOURCES)
    with pytest.raises(ValueError, match="grpo.toy_agent_ref is no agent setting of the config"):
        SourceFormat(name="toy", shape="a toy", detect=bool, convert=dict, agent_ref_setting="toy_agent_ref")


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
    rows = build("sft", frame, SftConfig(), SplitConfig(validation_fraction=0.5)).rows
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


@pytest.mark.parametrize("name, config", [
    ("sft", SftConfig()), ("dpo", DpoConfig()), ("grpo", GrpoConfig(zero_variance_groups="keep")),
    ("dpo", DpoConfig(pairing="all_pairs_with_margin")), ("trl_sft", SftConfig()), ("trl_dpo", DpoConfig()),
    ("trl_grpo", GrpoConfig()), ("verl", GrpoConfig()), ("llama_factory", SftConfig()),
    ("sft", SftConfig(dedup="near", max_per_task_type=2, sample_fraction=0.8)),
])
def test_chunked_reading_gives_the_same_rows_as_one_frame(name, config):
    rows = [task(i % 4, reward, f"answer {i}") for i, reward in enumerate([1.0, 0.0, 0.5, 1.0, 0.0, 0.25, 1.0, 0.0])]
    frame = trajectory_frame(rows)
    whole = build(name, FrameTable(frame), config, ALL_TRAIN)
    chunked = build(name, OneRowChunks(frame), config, ALL_TRAIN)
    assert len(whole.rows) > 0
    assert sorted(chunked.lines()) == sorted(whole.lines())
    assert chunked.excluded == whole.excluded


# ---------- DPO pairing strategies


def test_all_pairs_with_margin_keeps_the_widest_pairs_up_to_the_cap():
    rewards = {"r1": 1.0, "r2": 0.6, "r3": 0.0, "r4": 0.55}
    frame = trajectory_frame([task(0, reward, answer) for answer, reward in rewards.items()])
    config = DpoConfig(pairing="all_pairs_with_margin", max_pairs_per_task=4)
    result = build("dpo", frame, config, ALL_TRAIN)
    margins = [round(row["quality_difference"], 6) for row in rows_of(result)]
    # six pairs; 0.6 vs 0.55 is below the margin, and the narrowest of the rest (0.4) is over the cap
    assert margins == [1.0, 0.6, 0.55, 0.45]
    assert result.excluded == {"below_min_margin": 1, "pair_cap": 1}
    assert {row["pairing"] for row in rows_of(result)} == {"all_pairs_with_margin"}
    assert len({(row["chosen_id"], row["rejected_id"]) for row in rows_of(result)}) == 4


def test_all_pairs_counts_ties_once_and_never_pairs_them():
    frame = trajectory_frame([task(0, 1.0, "a"), task(0, 1.0, "b"), task(0, 0.0, "c")])
    result = build("dpo", frame, DpoConfig(pairing="all_pairs_with_margin"), ALL_TRAIN)
    assert len(result.rows) == 2 and result.excluded == {"tied_rewards": 1}


def test_best_vs_worst_breaks_reward_ties_by_trajectory_id_not_file_order():
    rows = [task(0, 1.0, "a"), task(0, 1.0, "b"), task(0, 0.0, "c")]
    first = rows_of(build("dpo", trajectory_frame(rows), DpoConfig(), ALL_TRAIN))
    second = rows_of(build("dpo", trajectory_frame([rows[1], rows[0], rows[2]]), DpoConfig(), ALL_TRAIN))
    assert first[0]["chosen_id"] == second[0]["chosen_id"] == min(first[0]["chosen_id"], second[0]["chosen_id"])


def test_dpo_rows_carry_their_provenance():
    frame = trajectory_frame([task(0, 1.0, "a"), task(0, 0.0, "b")])
    (row,) = rows_of(build("dpo", frame, DpoConfig(), ALL_TRAIN))
    ids = dict(zip(frame["trajectory_id"], frame["reward"]))
    assert ids[row["chosen_id"]] == 1.0 and ids[row["rejected_id"]] == 0.0
    assert row["pairing"] == "best_vs_worst" and row["task_key"] == frame["task_key"][0]


# ---------- GRPO groups


def test_grpo_zero_variance_groups_are_dropped_flagged_or_kept():
    frame = trajectory_frame([task(0, 1.0, "a"), task(0, 1.0, "b"), task(1, 1.0, "a"), task(1, 0.0, "b"),
                              task(2, 0.0)])
    dropped = build("grpo", frame, GrpoConfig(), ALL_TRAIN)
    # task 2 has one rollout: no evidence of zero variance, so it stays
    assert {prompt_of(row): row["num_rollouts"] for row in rows_of(dropped)} == {"task 1": 2, "task 2": 1}
    assert dropped.excluded == {"zero_variance_group": 1}
    flagged = rows_of(build("grpo", frame, GrpoConfig(zero_variance_groups="flag"), ALL_TRAIN))
    assert {prompt_of(row): row["zero_variance"] for row in flagged} == {"task 0": True, "task 1": False,
                                                                         "task 2": False}
    assert len(rows_of(build("grpo", frame, GrpoConfig(zero_variance_groups="keep"), ALL_TRAIN))) == 3


def test_grpo_rows_report_pass_rate_and_reward_spread():
    frame = trajectory_frame([task(0, r, f"x{i}") for i, r in enumerate([1.0, 1.0, 0.0, 0.5])])
    (row,) = rows_of(build("grpo", frame, GrpoConfig(pass_threshold=0.5), ALL_TRAIN))
    assert row["pass_rate"] == 0.75 and row["mean_reward"] == 0.625
    assert abs(row["reward_std"] - 0.414578) < 1e-6


# ---------- split by prompt


def test_the_same_prompt_in_two_collections_never_lands_in_both_splits():
    import pandas as pd

    first = trajectory_frame([task(i, 1.0) for i in range(30)], source_id="a.jsonl")
    second = trajectory_frame([task(i, 0.0, "b") for i in range(30)], source_id="b.jsonl")
    frame = pd.concat([first, second], ignore_index=True)
    assert set(first["task_key"]).isdisjoint(second["task_key"])  # task indices are scoped to their file
    rows = build("sft", frame, SftConfig(min_reward=None), SplitConfig(validation_fraction=0.5)).rows
    assert rows.groupby("prompt_key")["split"].nunique().max() == 1
    assert set(rows["split"]) == {"train", "validation"}


# ---------- trainer flavors


def with_tokens(item, prompt, generation):
    return {**item, "prompt_token_ids": prompt, "generation_token_ids": generation,
            "generation_log_probs": [-0.25] * len(generation)}


def tool_rollout(**extra):
    # served with token capture: each model call's last item carries its token data
    row = make_rollout([with_tokens(call_item("lookup", '{"city": "Paris"}', "c1"), [1, 2], [3, 4]),
                        output_item("c1", "sunny"), with_tokens(message_item("It is sunny."), [1, 2, 3, 4, 5], [6])],
                       reward=1.0, **extra)
    row["responses_create_params"]["tools"] = [
        {"type": "function", "name": "lookup", "description": "weather", "parameters": {"type": "object"}}]
    return row


def test_trl_sft_keeps_tool_calls_with_argument_objects_and_tools_as_objects():
    (row,) = rows_of(build("trl_sft", trajectory_frame([tool_rollout()]), SftConfig(), ALL_TRAIN))
    assert [m["role"] for m in row["messages"]] == ["user", "assistant", "tool", "assistant"]
    call = row["messages"][1]["tool_calls"][0]
    assert call["function"] == {"name": "lookup", "arguments": {"city": "Paris"}}
    assert row["messages"][1]["content"] == "" and row["messages"][2]["tool_call_id"] == "c1"
    assert row["tools"][0]["function"]["name"] == "lookup"


def test_the_seed_sft_keeps_openai_argument_strings():
    (row,) = rows_of(build("sft", trajectory_frame([tool_rollout()]), SftConfig(), ALL_TRAIN))
    assert row["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'


def test_a_call_whose_arguments_are_no_json_object_is_counted_by_template_flavors():
    rows = [make_rollout([call_item("f", arguments, f"c{i}"), output_item(f"c{i}", "r"), message_item("ok")],
                         request_input=f"q{i}") for i, arguments in enumerate(["{oops", "[1, 2]", '"text"', "{}"])]
    config = SftConfig(exclude_quality_flags=[])
    for name in ("trl_sft", "nemo_rl_sft", "llama_factory"):
        result = build(name, trajectory_frame(rows), config, ALL_TRAIN)
        assert len(result.rows) == 1 and result.excluded == {"unparseable_tool_arguments": 3}, name
    assert len(build("sft", trajectory_frame(rows), config, ALL_TRAIN).rows) == 4  # the seed writes them as they are


def test_trl_sft_counts_conversations_with_images_instead_of_writing_them():
    image = make_rollout(request_input=[{"role": "user", "content": [
        {"type": "input_text", "text": "what is this?"}, {"type": "input_image", "image_url": "data:x"}]}])
    result = build("trl_sft", trajectory_frame([image, make_rollout()]), SftConfig(), ALL_TRAIN)
    assert len(result.rows) == 1 and result.excluded == {"non_text_content": 1}


def test_trl_dpo_and_grpo_rows():
    frame = trajectory_frame([task(0, 1.0, "a", expected_answer=42), task(0, 0.0, "b", expected_answer=42)])
    (pair,) = rows_of(build("trl_dpo", frame, DpoConfig(), ALL_TRAIN))
    assert pair["prompt"] == [{"role": "user", "content": "task 0"}] and pair["tools"] is None
    assert pair["chosen"][0]["role"] == "assistant" and pair["rejected"][0]["content"] == "b"
    (prompt_row,) = rows_of(build("trl_grpo", frame, GrpoConfig(), ALL_TRAIN))
    assert prompt_row["prompt"] == [{"role": "user", "content": "task 0"}]
    assert prompt_row["ground_truth"] == "42" and prompt_row["agent_name"] == "agent"


def test_verl_rows_fit_the_parquet_schema_and_carry_ground_truth():
    from trajectory_assets.io.arrow_rows import table_from_records
    from trajectory_assets.exports.verl import SCHEMA as VERL_SCHEMA

    frame = trajectory_frame([task(0, 1.0, "a", expected_answer="yes"), task(0, 0.0, "b", expected_answer="yes"),
                              tool_rollout(agent_ref={"name": "weather"})])
    rows = rows_of(build("verl", frame, GrpoConfig(), ALL_TRAIN))
    table = table_from_records(rows, VERL_SCHEMA)
    assert table.num_rows == 2
    assert [row["extra_info"]["index"] for row in rows] == [0, 1]  # the rows' positions in the export
    by_source = {row["data_source"]: row for row in rows}
    assert by_source["agent"]["reward_model"] == {"style": "rule", "ground_truth": "yes"}
    assert [by_source[name]["agent_name"] for name in ("agent", "weather")] == ["single_turn_agent", "tool_agent"]
    assert by_source["weather"]["extra_info"]["tools_kwargs"] == {"lookup": {}}


def test_nemo_rl_sft_rows_are_openai_format_with_argument_objects():
    (row,) = rows_of(build("nemo_rl_sft", trajectory_frame([tool_rollout()]), SftConfig(), ALL_TRAIN))
    assert list(row)[:2] == ["messages", "tools"]
    assert row["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert row["messages"][-1]["role"] == "assistant"


def test_nemo_rl_sft_counts_conversations_that_do_not_end_with_the_assistant():
    ends_on_result = make_rollout([call_item("f", "{}", "c1"), output_item("c1", "r")], request_input="q")
    frame = trajectory_frame([ends_on_result, make_rollout()])
    config = SftConfig(exclude_unanswered_tool_calls=False)
    result = build("nemo_rl_sft", frame, config, ALL_TRAIN)
    assert len(result.rows) == 1 and result.excluded == {"ends_without_assistant_turn": 1}
    assert len(build("trl_sft", frame, config, ALL_TRAIN).rows) == 2  # TRL trains on it as it is


def test_nemo_rl_dpo_rows_rank_the_chosen_completion_first():
    frame = trajectory_frame([task(0, 0.0, "worse"), task(0, 1.0, "better")])
    (row,) = rows_of(build("nemo_rl_dpo", frame, DpoConfig(), ALL_TRAIN))
    assert list(row)[:3] == ["context", "completions", "tools"]
    assert row["context"] == [{"role": "user", "content": "task 0"}]
    assert row["completions"] == [
        {"rank": 0, "completion": [{"role": "assistant", "content": "better"}]},
        {"rank": 1, "completion": [{"role": "assistant", "content": "worse"}]},
    ]
    assert row["reward_chosen"] > row["reward_rejected"]  # no ties: NeMo RL raises on equal ranks


def test_nemo_rl_dpo_counts_a_completion_that_ends_on_a_tool_result():
    cut_short = make_rollout([call_item("f", "{}", "c1"), output_item("c1", "r")], request_input="task 0",
                             reward=0.0, _ng_task_index=0)
    frame = trajectory_frame([task(0, 1.0, "done"), cut_short])
    result = build("nemo_rl_dpo", frame, DpoConfig(), ALL_TRAIN)
    assert result.rows.empty and result.excluded == {"completion_ends_without_assistant_turn": 1}
    assert len(build("trl_dpo", frame, DpoConfig(), ALL_TRAIN).rows) == 1


def test_llama_factory_rows_alternate_as_sharegpt_requires():
    (row,) = rows_of(build("llama_factory", trajectory_frame([tool_rollout()]), SftConfig(), ALL_TRAIN))
    assert [turn["from"] for turn in row["conversations"]] == ["human", "function_call", "observation", "gpt"]
    assert json.loads(row["conversations"][1]["value"]) == [{"name": "lookup", "arguments": {"city": "Paris"}}]
    assert json.loads(row["tools"])[0]["name"] == "lookup"


def test_every_sft_flavor_follows_the_same_curation():
    rows = [task(i, reward, f"answer {i}") for i, reward in enumerate([1.0, 0.2, 0.9, 0.0])]
    frame = trajectory_frame(rows)
    ids = [set(build(name, frame, SftConfig(), ALL_TRAIN).rows["trajectory_id"])
           for name in ("sft", "trl_sft", "llama_factory", "sft_hermes", "nemo_rl_sft")]
    assert all(ids_of_one == ids[0] for ids_of_one in ids) and len(ids[0]) == 2


@pytest.mark.parametrize("pairing", ["best_vs_worst", "exactly_two", "all_pairs_with_margin"])
def test_tasks_whose_rollouts_all_tie_make_no_pairs(pairing):
    frame = trajectory_frame([task(i, 0.5, f"answer {j}") for i in range(3) for j in range(2)])
    result = build("dpo", frame, DpoConfig(pairing=pairing), ALL_TRAIN)
    assert result.rows.empty and result.excluded == {"tied_rewards": 3}


@pytest.mark.parametrize("family", ["sft", "dpo", "grpo"])
def test_a_family_renders_each_format_as_it_would_alone(family):
    from trajectory_assets.exports.registry import family_exports

    rows = [task(i % 3, reward, f"answer {i}") for i, reward in enumerate([1.0, 0.0, 0.5, 1.0, 0.25, 0.75])]
    rows.append(tool_rollout(agent_ref={"name": "weather"}))
    frame = trajectory_frame(rows)
    specs = family_exports(family)
    config = {"sft": SftConfig(min_reward=None), "dpo": DpoConfig(), "grpo": GrpoConfig()}[family]
    together = render_family(family, FrameTable(frame), config, ALL_TRAIN, specs)
    for spec in specs:
        name = spec.name
        alone = build(name, frame, config, ALL_TRAIN)
        joint = together[name]
        assert len(alone.rows) > 0, name
        assert list(joint.lines()) == list(alone.lines()) and joint.excluded == alone.excluded, name


# ---------- token budgets (a tokenizer built in the test: one token per word)


@pytest.fixture(scope="module")
def words(tmp_path_factory):
    from tests.fixtures.tokenizer import save_word_tokenizer
    from trajectory_assets.exports.token_budget import load_counter

    return load_counter(save_word_tokenizer(tmp_path_factory.mktemp("tokenizer")))


def budget(counter, max_tokens, truncate=False):
    from trajectory_assets.exports.token_budget import TokenBudget

    return TokenBudget(counter, max_tokens, truncate)


def long_and_short():
    """A short answer (user 5 + assistant 5 = 10 tokens) and a tool run of 21 (user 5, call 5,
    result 3, answer 8), with the word tokenizer: one token per word and per role marker. The
    tool run's prompt has the lower bucket: it is exported first (the canonical order)."""
    short = make_rollout([message_item("yes it is")], request_input="is it sunny", reward=1.0)
    tools = make_rollout([call_item("lookup", '{"city": "Paris"}', "c1"), output_item("c1", "sunny"),
                          message_item("It is sunny in Paris today.")], request_input="weather in Paris", reward=1.0)
    return trajectory_frame([short, tools])


def test_every_sft_row_carries_its_token_count(words):
    frames = [build(name, long_and_short(), SftConfig(), ALL_TRAIN, budget(words, None))
              for name in ("sft", "trl_sft", "nemo_rl_sft", "llama_factory", "sft_hermes")]
    for frame in frames:
        assert frame.tokens.tolist() == [21.0, 10.0]
    assert np.isnan(build("sft", long_and_short(), SftConfig(), ALL_TRAIN).tokens).all()  # no tokenizer


def test_over_budget_rows_leave_every_sft_format_alike(words):
    for name in ("sft", "trl_sft", "nemo_rl_sft", "llama_factory", "sft_hermes"):
        result = build(name, long_and_short(), SftConfig(), ALL_TRAIN, budget(words, 20))
        assert result.tokens.tolist() == [10.0] and result.excluded == {"over_token_budget": 1}, name


def test_truncation_cuts_a_conversation_after_its_last_assistant_turn_that_fits(words):
    result = build("trl_sft", long_and_short(), SftConfig(), ALL_TRAIN, budget(words, 12, truncate=True))
    cut, short = rows_of(result)
    assert [m["role"] for m in cut["messages"]] == ["user", "assistant"]  # the call that fits, not its result
    assert result.tokens.tolist() == [10.0, 10.0] and result.truncated == 1 and not result.excluded
    assert result.rows["role_shape"].tolist() == ["uc", "ua"]
    seed = build("sft", long_and_short(), SftConfig(), ALL_TRAIN, budget(words, 12, truncate=True))
    assert [m["role"] for m in rows_of(seed)[0]["messages"]] == ["user", "assistant"]



def test_a_cut_row_keeps_the_targets_its_rule_picked_in_the_whole_conversation(words):
    """Cut to its first call, a tool run has lost its final answer: under ``final_assistant``
    the call is no target, so the per-message export has nothing to train and the exports
    with one switch cannot reproduce the rule; every assistant turn stays a target by default."""
    final = SftConfig(train_on="final_assistant")
    axolotl = build("axolotl", long_and_short(), final, ALL_TRAIN, budget(words, 12, truncate=True))
    (short,) = rows_of(axolotl)
    assert [m["train"] for m in short["messages"]] == [False, True]
    assert axolotl.excluded == {"nothing_to_train": 1}
    assert build("nemo_rl_sft", long_and_short(), final, ALL_TRAIN, budget(words, 12, truncate=True)).excluded == {
        "needs_per_message_mask": 1}
    every = build("axolotl", long_and_short(), SftConfig(), ALL_TRAIN, budget(words, 12, truncate=True))
    assert [[m["train"] for m in row["messages"]] for row in rows_of(every)] == [[False, True], [False, True]]

def test_with_a_tokenizer_the_recorded_usage_does_not_filter(words):
    huge_usage = make_rollout([message_item("yes")], request_input="q", reward=1.0)
    huge_usage["response"]["usage"] = {"total_tokens": 10**6}
    frame = trajectory_frame([huge_usage])
    assert build("sft", frame, SftConfig(max_tokens=100), ALL_TRAIN).excluded == {"too_many_tokens": 1}
    assert len(build("sft", frame, SftConfig(max_tokens=100), ALL_TRAIN, budget(words, 100)).rows) == 1


def test_a_pair_is_measured_by_its_longer_side_and_each_side_is_cut_alone(words):
    long_side = make_rollout([call_item("lookup", '{"city": "Paris"}', "c1"), output_item("c1", "sunny"),
                              message_item("It is sunny.")], request_input="task 0", reward=1.0, _ng_task_index=0)
    frame = trajectory_frame([long_side, task(0, 0.0, "no idea")])
    (tokens,) = build("trl_dpo", frame, DpoConfig(), ALL_TRAIN, budget(words, None)).tokens
    assert tokens == 17.0  # prompt 4 + call 5 + result 3 + answer 5; the other side is 4 + 4
    assert build("dpo", frame, DpoConfig(), ALL_TRAIN, budget(words, 16)).excluded == {"over_token_budget": 1}
    cut = build("nemo_rl_dpo", frame, DpoConfig(), ALL_TRAIN, budget(words, 16, truncate=True))
    (row,) = rows_of(cut)
    assert [m["role"] for m in row["completions"][0]["completion"]] == ["assistant"] and cut.truncated == 1
    assert row["completions"][1]["completion"] == [{"role": "assistant", "content": "no idea"}]


def test_a_task_is_measured_by_its_prompt_with_the_generation_prompt(words):
    frame = trajectory_frame([task(0, 1.0, "a"), task(0, 0.0, "b"), task(1, 1.0, "a"), task(1, 0.5, "b")])
    tokens = build("verl", frame, GrpoConfig(), ALL_TRAIN, budget(words, None)).tokens
    assert tokens.tolist() == [5.0, 5.0]  # "<|im_start|>user task N <|im_end|>" + "<|im_start|>assistant"
    for name in ("grpo", "trl_grpo", "verl"):
        assert build(name, frame, GrpoConfig(), ALL_TRAIN, budget(words, 4)).excluded == {"over_token_budget": 2}


def test_a_format_can_tell_a_cut_row_from_a_whole_one(words):
    """A format that writes more of a trajectory than its messages (token data, say) must not
    write a cut row whole: the item says it was cut."""
    import dataclasses

    from trajectory_assets.exports.registry import EXPORTS_BY_NAME

    def probe(item):
        return {"messages": item.messages, "cut_short": item.cut_short, "trajectory_id": item.row.trajectory_id,
                "task_key": item.row.task_key}

    probe_spec = dataclasses.replace(EXPORTS_BY_NAME["sft"], name="probe", render=probe)
    probed = render_family("sft", FrameTable(long_and_short()), SftConfig(), ALL_TRAIN, [probe_spec],
                           budget(words, 12, truncate=True))["probe"]
    assert [(row["cut_short"], len(row["messages"])) for row in probed.records] == [(True, 2), (False, 2)]


def test_on_policy_tokens_carry_each_model_call_and_leave_out_rows_without_token_data():
    import pyarrow as pa

    from trajectory_assets.exports.on_policy_tokens import SCHEMA as TOKENS_SCHEMA

    frame = trajectory_frame([tool_rollout(), task(0, 1.0, "no tokens here")])
    result = build("on_policy_tokens", frame, SftConfig(), ALL_TRAIN)
    (row,) = rows_of(result)
    assert result.excluded == {"no_token_data": 1}
    assert row["calls"] == [
        {"message_index": 1, "prompt_token_ids": [1, 2], "generation_token_ids": [3, 4],
         "generation_log_probs": [-0.25, -0.25]},
        {"message_index": 3, "prompt_token_ids": [1, 2, 3, 4, 5], "generation_token_ids": [6],
         "generation_log_probs": [-0.25]},
    ]
    assert row["contiguous"] is True and row["reward"] == 1.0
    assert pa.Table.from_pylist([row], schema=TOKENS_SCHEMA).num_rows == 1
    assert list(result.rows[["calls", "generated_tokens", "aligned"]].iloc[0]) == [2, 3, True]
    # the same trajectories as every SFT flavor
    assert set(result.rows["trajectory_id"]) <= set(build("sft", frame, SftConfig(), ALL_TRAIN).rows["trajectory_id"])
