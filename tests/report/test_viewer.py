"""The trajectory viewer's reading of export rows: every shape an export writes, tool
results paired with their calls, reasoning kept apart, bounds on what is shown."""

import orjson

from trajectory_assets.report.viewer import (
    SAMPLE_BUDGET,
    TEXT_LIMIT,
    TrajectoryInfo,
    local_file_href,
    read_back,
    view_sample,
)
from trajectory_assets.exports.export_scan import trajectory_refs
from trajectory_assets.exports.sft_hermes import render_hermes
from trajectory_assets.exports.llama_factory import to_llama_factory

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and Oslo?"},
    {"role": "assistant", "content": "", "reasoning_content": "Two cities: two calls.",
     "tool_calls": [
         {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
         {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
    {"role": "tool", "tool_call_id": "c2", "content": '{"temp_c": 9}'},
    {"role": "tool", "tool_call_id": "c1", "content": "error: city service down"},
    {"role": "assistant", "content": "Oslo is 9 °C; Paris is unknown."},
]
INFOS = {
    "t1": TrajectoryInfo(uri="/data/in/a.jsonl", line=3, reward=1.0, turns=2),
    "t2": TrajectoryInfo(uri="s3://bucket/b.jsonl", line=7, reward=0.0, turns=1),
    "t3": TrajectoryInfo(uri="/data/in/a.jsonl", line=9, reward=0.5, turns=2),
}


def roles(conversation):
    return [turn.role for turn in conversation.turns]


def test_a_chat_row_pairs_each_result_with_its_call_by_id_and_folds_reasoning_apart():
    sample = view_sample("sft", "train", 4, {"messages": MESSAGES, "tools": TOOLS, "reward": 1.0,
                                             "trajectory_id": "t1"}, INFOS)
    chat = sample.conversation
    assert sample.shape == "chat" and roles(chat) == ["system", "user", "assistant", "assistant"]
    assert chat.tools == ["get_weather"]
    calling = chat.turns[2]
    assert calling.reasoning.shown == "Two cities: two calls." and calling.text is None
    paris, oslo = calling.calls
    assert (paris.call_id, paris.result.shown, paris.result_failed) == ("c1", "error: city service down", True)
    assert (oslo.call_id, oslo.result.shown, oslo.result_failed) == ("c2", '{"temp_c": 9}', False)
    assert orjson.loads(paris.arguments.shown) == {"city": "Paris"} and "\n" in paris.arguments.shown  # pretty
    assert sample.facts == [("reward", "1.0")]
    [source] = sample.sources
    assert (source.role, source.uri, source.line, source.href) == ("trajectory", "/data/in/a.jsonl", 3,
                                                                   "file:///data/in/a.jsonl")


def test_arguments_as_objects_strings_and_broken_json_are_all_shown():
    template = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "function": {"name": "f", "arguments": {"x": 1}}}]}]  # an object (a Json-typed flavor)
    calls = view_sample("trl_sft", "train", 0, {"messages": template}, {}).conversation.turns[1].calls
    assert orjson.loads(calls[0].arguments.shown) == {"x": 1} and calls[0].arguments_parse
    assert calls[0].result is None  # no result in the row: shown as unanswered
    wire = [{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "b", "function": {"name": "g", "arguments": "{not json"}}]}]  # as a model wrote it
    calls = view_sample("sft", "train", 0, {"messages": wire}, {}).conversation.turns[1].calls
    assert calls[0].arguments.shown == "{not json" and not calls[0].arguments_parse


def test_parquet_rows_with_null_optional_keys_read_like_json_rows():
    """A TRL Parquet row has every struct key, null where a message has none."""
    nulls = {"reasoning_content": None, "tool_calls": None, "tool_call_id": None}
    messages = [{"role": "user", "content": "hi", **nulls}, {"role": "assistant", "content": "hello", **nulls}]
    chat = view_sample("trl_sft", "train", 0, {"messages": messages, "tools": None}, {}).conversation
    assert [(t.role, t.text.shown, t.reasoning, t.calls) for t in chat.turns] == [
        ("user", "hi", None, []), ("assistant", "hello", None, [])]


def test_a_tool_result_that_answers_no_call_is_its_own_turn():
    messages = [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "zz", "content": "orphan"}]
    chat = view_sample("sft", "train", 0, {"messages": messages}, {}).conversation
    assert roles(chat) == ["user", "tool"] and chat.turns[1].result_of == "zz"


def test_hermes_sharegpt_rows_show_reasoning_calls_and_results_paired():
    """Hermes call markup has no id: a response goes to the open call of its tool's name."""
    messages = [dict(m) for m in MESSAGES]
    messages[2] = {**messages[2], "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": '{"city": "Oslo"}'}}]}
    messages[3], messages[4] = messages[4], messages[3]  # in call order: Hermes pairs by position and name
    conversations = render_hermes(messages, TOOLS)
    sample = view_sample("sft_hermes", "train", 0, {"conversations": conversations, "trajectory_id": "t1"}, INFOS)
    chat = sample.conversation
    assert sample.shape == "chat" and roles(chat) == ["system", "user", "assistant", "assistant"]
    calling = chat.turns[2]
    assert calling.reasoning.shown == "Two cities: two calls."
    assert [c.name.shown for c in calling.calls] == ["get_weather", "get_time"]
    results = {orjson.loads(c.arguments.shown)["city"]: c.result.shown for c in calling.calls}
    assert results == {"Paris": "error: city service down", "Oslo": '{"temp_c": 9}'}
    assert "<tool_call>" not in (calling.text.shown if calling.text else "")


def test_llama_factory_rows_show_function_calls_and_observations_in_order():
    in_call_order = [*MESSAGES[:3], MESSAGES[4], MESSAGES[3], MESSAGES[5]]
    row = to_llama_factory(in_call_order, TOOLS)
    chat = view_sample("llama_factory", "train", 0, row, {}).conversation
    assert roles(chat) == ["system", "user", "assistant", "assistant"]
    calling = chat.turns[2]
    assert calling.reasoning.shown == "Two cities: two calls." and calling.text is None
    # parallel results are joined in the order of the calls and paired by position
    assert [c.result.shown for c in calling.calls] == ["error: city service down", '{"temp_c": 9}']
    assert chat.tools == ["get_weather"]


def test_preference_rows_show_prompt_and_both_sides_with_rewards():
    row = {"prompt": MESSAGES[:2], "chosen": MESSAGES[2:], "rejected": [{"role": "assistant", "content": "No idea."}],
           "quality_difference": 1.0, "reward_chosen": 1.0, "reward_rejected": 0.0,
           "chosen_id": "t1", "rejected_id": "t2", "pairing": "best_vs_worst"}
    sample = view_sample("dpo", "train", 0, row, INFOS)
    assert sample.shape == "preference"
    assert roles(sample.conversation) == ["system", "user"]
    assert roles(sample.chosen) == ["assistant", "assistant"] and sample.chosen.turns[0].calls[0].result
    assert sample.rejected.turns[0].text.shown == "No idea."
    assert (sample.reward_chosen, sample.reward_rejected, sample.margin) == (1.0, 0.0, 1.0)
    assert [(s.role, s.href) for s in sample.sources] == [("chosen", "file:///data/in/a.jsonl"), ("rejected", None)]


def test_nemo_rl_preference_rows_rank_zero_is_chosen_and_rewards_come_from_the_trajectories():
    row = {"context": MESSAGES[:2], "chosen_id": "t1", "rejected_id": "t2",
           "completions": [{"rank": 1, "completion": [{"role": "assistant", "content": "worse"}]},
                           {"rank": 0, "completion": [{"role": "assistant", "content": "better"}]}]}
    sample = view_sample("nemo_rl_dpo", "train", 0, row, INFOS)
    assert sample.chosen.turns[0].text.shown == "better" and sample.rejected.turns[0].text.shown == "worse"
    assert (sample.reward_chosen, sample.reward_rejected, sample.margin) == (1.0, 0.0, 1.0)


def test_a_row_its_export_cannot_read_back_is_shown_as_stored():
    row = {"prompt": "2+2?", "chosen": "4", "rejected": "5"}  # not messages: no DPO writer makes this
    sample = view_sample("dpo", "train", 0, row, {})
    assert sample.shape == "raw" and sample.conversation is None and orjson.loads(sample.raw.shown) == row


def test_a_nemo_gym_task_shows_its_request_and_its_rollouts_best_first():
    row = {"responses_create_params": {"instructions": "Be brief.", "input": [
        {"role": "developer", "content": "Use tools."},
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}, {"type": "input_image"}]}],
        "tools": [{"type": "function", "name": "get_weather"}]},
        "agent_ref": {"type": "responses_api_agents", "name": "w"}, "task_key": "k",
        "trajectory_ids": ["t2", "t1", "missing"], "mean_reward": 0.5}
    sample = view_sample("grpo", "train", 0, row, INFOS)
    # read as a rollout's input is: the instructions and the developer message are one system turn
    assert sample.shape == "task" and roles(sample.conversation) == ["system", "user"]
    assert sample.conversation.turns[0].text.shown == "Be brief.\n\nUse tools."
    assert sample.conversation.turns[1].note == "not shown: image_url"
    assert sample.conversation.tools == ["get_weather"]
    assert [(r.trajectory_id, r.reward) for r in sample.rollouts] == [("t1", 1.0), ("t2", 0.0), ("missing", None)]
    assert ("agent_ref", '{"type":"responses_api_agents","name":"w"}') in sample.facts


def test_verl_rows_name_their_rollouts_inside_extra_info():
    # as Parquet reads it back: each tool a JSON text
    row = {"data_source": "w", "prompt": MESSAGES[:2], "extra_info": {
        "trajectory_ids": ["t1", "t3"], "tools": [orjson.dumps(tool).decode() for tool in TOOLS]}}
    assert trajectory_refs(row) == [("rollout", "t1"), ("rollout", "t3")]
    sample = view_sample("verl", "train", 0, row, INFOS)
    assert [r.reward for r in sample.rollouts] == [1.0, 0.5] and sample.conversation.tools == ["get_weather"]


def test_an_unknown_row_shape_is_shown_as_json():
    assert read_back("future", {"text": "hello"}) == ("raw", None)
    sample = view_sample("future", "train", 0, {"text": "hello"}, {})
    assert sample.conversation is None and orjson.loads(sample.raw.shown) == {"text": "hello"}


def test_long_texts_and_long_conversations_are_cut_and_counted():
    huge = "x" * (20 << 20)
    sample = view_sample("sft", "train", 0, {"messages": [{"role": "user", "content": huge}]}, {})
    text = sample.conversation.turns[0].text
    assert len(text.shown) == TEXT_LIMIT and text.hidden == len(huge) - TEXT_LIMIT
    assert len(sample.raw.shown) < 4_000 and len(sample.raw.shown) + sample.raw.hidden > len(huge)
    many = [{"role": "user" if i % 2 == 0 else "assistant", "content": "y" * 1_000} for i in range(100)]
    chat = view_sample("sft", "train", 0, {"messages": many}, {}).conversation
    shown = sum(len(t.text.shown) for t in chat.turns)
    assert shown <= SAMPLE_BUDGET and chat.hidden_turns == 100 - len(chat.turns) > 0


def test_both_sides_of_a_pair_get_room_when_the_chosen_side_is_long():
    long_side = [{"role": "assistant", "content": "c" * 1_500} for _ in range(40)]
    row = {"prompt": [{"role": "user", "content": "q"}], "chosen": long_side,
           "rejected": [{"role": "assistant", "content": "short answer"}]}
    sample = view_sample("dpo", "train", 0, row, {})
    assert sample.chosen.hidden_turns > 0 and sample.rejected.turns[0].text.shown == "short answer"


def test_only_local_absolute_paths_become_links():
    assert local_file_href("/data/a b#c.jsonl") == "file:///data/a%20b%23c.jsonl"
    for uri in ("s3://bucket/x.jsonl", "javascript:alert(1)", "relative/x.jsonl", None, ""):
        assert local_file_href(uri) is None


def test_a_token_row_shows_one_turn_per_model_call_with_its_counts():
    row = {"trajectory_id": "t1", "task_key": "k", "reward": 1.0, "model": "m", "contiguous": True,
           "calls": [{"message_index": 2, "prompt_token_ids": [1, 2, 3], "generation_token_ids": [4, 5],
                      "generation_log_probs": [-0.5, -1.5]},
                     {"message_index": 5, "prompt_token_ids": list(range(8)), "generation_token_ids": [9],
                      "generation_log_probs": [0.0]}]}
    assert read_back("on_policy_tokens", row)[0] == "tokens"
    sample = view_sample("on_policy_tokens", "train", 0, row, INFOS)
    assert [turn.text.shown for turn in sample.conversation.turns] == [
        "model call 1 (message 2): 3 prompt tokens, 2 generated, mean log prob -1.000",
        "model call 2 (message 5): 8 prompt tokens, 1 generated, mean log prob 0.000"]
    assert [source.line for source in sample.sources] == [3]  # its trajectory's source line
    assert "calls" not in dict(sample.facts)
