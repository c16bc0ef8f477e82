"""One test per conversion rule of NeMo Gym rollouts -> canonical chat trajectories."""

import doctest
import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import call_item, make_rollout, message_item, output_item
from trajectory_assets.config import ConversionConfig
from schemas.shapes import role_shape
from trajectory_assets.chat.responses import convert_tools
from trajectory_assets.sources.nemo_gym import convert_rollout, task_key_for
from trajectory_assets.chat.trajectory import Rejection
from schemas.shapes import ROLE_SHAPE_PATTERN


def convert(row, source_id="src.jsonl", **options):
    return convert_rollout(row, source_id=source_id, options=ConversionConfig(**options))


def rejection_reason(row) -> str:
    with pytest.raises(Rejection) as caught:
        convert(row)
    return caught.value.reason


def test_current_shape_reads_response_output():
    trajectory = convert(make_rollout([message_item("Hello")]))
    assert trajectory.messages == [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hello"}]
    assert trajectory.prompt_length == 1
    assert trajectory.completed is True


def test_legacy_top_level_output_is_accepted():
    trajectory = convert(make_rollout([message_item("Hello")], legacy=True))
    assert trajectory.messages[-1] == {"role": "assistant", "content": "Hello"}


def test_input_items_without_type_and_content_parts():
    request_input = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "line one"}, {"type": "input_text", "text": "line two"}]},
    ]
    trajectory = convert(make_rollout(request_input=request_input))
    assert trajectory.messages[0] == {"role": "system", "content": "Be brief."}
    assert trajectory.messages[1] == {"role": "user", "content": "line one\nline two"}


def test_developer_maps_to_system_and_leading_system_messages_merge():
    request_input = [
        {"role": "system", "content": "A"},
        {"type": "message", "role": "developer", "content": "B"},
        {"role": "user", "content": "go"},
    ]
    trajectory = convert(make_rollout(request_input=request_input))
    assert trajectory.messages[0] == {"role": "system", "content": "A\n\nB"}
    assert [m["role"] for m in trajectory.messages] == ["system", "user", "assistant"]


def test_instructions_become_the_system_message():
    row = make_rollout()
    row["responses_create_params"]["instructions"] = "You are terse."
    assert convert(row).messages[0] == {"role": "system", "content": "You are terse."}


def test_system_after_a_user_turn_is_rejected():
    request_input = [{"role": "user", "content": "go"}, {"role": "system", "content": "late"}]
    assert rejection_reason(make_rollout(request_input=request_input)) == "misplaced_system_message"


def test_function_calls_become_tool_calls_and_outputs_tool_messages():
    output = [
        call_item("get_weather", '{"city": "Paris"}', "c1"),
        call_item("get_weather", '{"city": "Oslo"}', "c2"),
        output_item("c1", "22C"),
        output_item("c2", "9C"),
        message_item("Done."),
    ]
    messages = convert(make_rollout(output)).messages
    assert messages[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
        ],
    }
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "22C"}
    assert messages[3] == {"role": "tool", "tool_call_id": "c2", "content": "9C"}
    assert messages[4] == {"role": "assistant", "content": "Done."}


def test_object_arguments_are_serialised_to_a_json_string():
    output = [call_item("f", {"x": 1}, "c1"), output_item("c1", "ok"), message_item("fine")]
    call = convert(make_rollout(output)).messages[1]["tool_calls"][0]
    assert call["function"]["arguments"] == '{"x":1}'


def test_reasoning_summary_attaches_to_the_next_assistant_turn():
    output = [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}], "encrypted_content": "x"},
        message_item("answer"),
    ]
    assert convert(make_rollout(output)).messages[-1] == {
        "role": "assistant",
        "content": "answer",
        "reasoning_content": "think",
    }


def test_reasoning_content_used_when_summary_is_empty():
    output = [{"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "deep"}]}, message_item("a")]
    assert convert(make_rollout(output)).messages[-1]["reasoning_content"] == "deep"


def test_reasoning_after_a_tool_result_starts_a_new_assistant_turn():
    output = [
        call_item("f", "{}", "c1"),
        output_item("c1", "r"),
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "now answer"}]},
        message_item("final"),
    ]
    messages = convert(make_rollout(output)).messages
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[-1]["reasoning_content"] == "now answer"


def test_refusal_parts_become_text():
    output = [{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}]
    assert convert(make_rollout(output)).messages[-1]["content"] == "I can't."


def test_images_keep_a_content_part_list():
    request_input = [
        {"role": "user", "content": [{"type": "input_text", "text": "what?"}, {"type": "input_image", "image_url": "data:x"}]}
    ]
    user = convert(make_rollout(request_input=request_input)).messages[0]
    assert user["content"] == [{"type": "text", "text": "what?"}, {"type": "image_url", "image_url": {"url": "data:x"}}]


def test_list_tool_output_is_joined_as_text():
    output = [call_item("f", "{}", "c1"), output_item("c1", [{"type": "output_text", "text": "part"}]), message_item("ok")]
    assert convert(make_rollout(output)).messages[2]["content"] == "part"


def test_unknown_output_items_are_kept_in_metadata_and_counted():
    output = [{"type": "web_search_call", "id": "ws1"}, message_item("found")]
    trajectory = convert(make_rollout(output))
    assert trajectory.unknown_items == 1
    assert trajectory.metadata["unknown_items"] == [
        {"where": "output[0]", "type": "web_search_call", "item": {"type": "web_search_call", "id": "ws1"}}]
    assert trajectory.messages[-1]["content"] == "found"


def test_unknown_content_parts_are_skipped_kept_in_metadata_and_counted():
    file_part = {"type": "input_file", "file_id": "f1", "filename": "a.pdf"}
    request_input = [{"role": "user", "content": [{"type": "input_text", "text": "read this"}, file_part]}]
    output = [{"type": "message", "role": "assistant", "content": [{"type": "mystery"}]}, message_item("done")]
    trajectory = convert(make_rollout(output, request_input=request_input))
    assert trajectory.messages[0] == {"role": "user", "content": "read this"}
    # a message left with no part at all has empty content, as with content []: an empty
    # assistant turn is then filled by the text that follows it
    assert trajectory.messages[1:] == [{"role": "assistant", "content": "done"}]
    assert convert(make_rollout(output[:1])).messages[1:] == [{"role": "assistant", "content": ""}]
    assert trajectory.unknown_items == 2
    assert trajectory.metadata["unknown_items"] == [
        {"where": "responses_create_params.input[0].content[1]", "type": "input_file", "part": file_part},
        {"where": "output[0].content[0]", "type": "mystery", "part": {"type": "mystery"}},
    ]


def test_a_known_part_type_without_its_text_is_still_broken_structure():
    output = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": 5}]}]
    assert rejection_reason(make_rollout(output)) == "invalid_structure"


@pytest.mark.parametrize("arguments, flagged", [
    ('{"city": "Paris"}', False), ("{}", False), ('{"city": "Par', True), ("city=Paris", True), ("", True),
])
def test_unparseable_function_call_arguments_are_kept_and_flagged(arguments, flagged):
    output = [call_item("f", arguments, "c1"), output_item("c1", "r"), message_item("ok")]
    trajectory = convert(make_rollout(output))
    assert trajectory.messages[1]["tool_calls"][0]["function"]["arguments"] == arguments
    assert trajectory.quality_flags == (["unparseable_tool_call"] if flagged else [])


@pytest.mark.parametrize("where", ["input", "output", "reasoning", "arguments", "tool_output", "parts"])
@pytest.mark.parametrize("tag", ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                                 "</tool_response>"])
def test_hermes_markup_in_any_text_is_flagged(where, tag):
    text = f"see {tag} here"
    request_input, output = "q", [message_item("a")]
    if where == "input":
        request_input = text
    elif where == "output":
        output = [message_item(text)]
    elif where == "reasoning":
        output = [{"type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}, message_item("a")]
    elif where == "arguments":
        output = [call_item("f", json.dumps({"x": text}), "c1"), output_item("c1", "r"), message_item("a")]
    elif where == "tool_output":
        output = [call_item("f", "{}", "c1"), output_item("c1", text), message_item("a")]
    else:  # text parts of a content list with an image
        request_input = [{"role": "user", "content": [{"type": "input_text", "text": text},
                                                      {"type": "input_image", "image_url": "data:x"}]}]
    # (inline reasoning would read a </think> in assistant text as the end of reasoning: tested apart)
    row = make_rollout(output, request_input=request_input)
    assert convert(row, inline_reasoning=False).quality_flags == ["hermes_markup_in_content"]


def test_ordinary_angle_brackets_are_not_hermes_markup():
    row = make_rollout([message_item("if a < b and <b>bold</b> or <thinking>")], request_input="<tool> x")
    assert convert(row).quality_flags == []


def test_tool_output_for_a_call_never_made_is_rejected():
    output = [output_item("ghost", "r"), message_item("x")]
    assert rejection_reason(make_rollout(output)) == "orphan_tool_output"


def test_tool_output_without_call_id_answers_the_oldest_open_call():
    output = [call_item("f", "{}", "c1"), {"type": "function_call_output", "output": "r"}, message_item("x")]
    assert convert(make_rollout(output)).messages[2]["tool_call_id"] == "c1"


@pytest.mark.parametrize("reward, expected", [(1, 1.0), (-100, -100.0), (19.4, 19.4), (0.0, 0.0)])
def test_reward_of_any_sign_and_range(reward, expected):
    value = convert(make_rollout(reward=reward)).reward
    assert value == expected and isinstance(value, float)


@pytest.mark.parametrize(
    "reward, reason",
    [(None, "missing_reward"), ("1", "invalid_reward"), (True, "invalid_reward"), (math.nan, "non_finite_reward"),
     (math.inf, "non_finite_reward")],
)
def test_bad_rewards_are_rejected_with_their_reason(reward, reason):
    assert rejection_reason(make_rollout(reward=reward)) == reason


def test_missing_reward_key_is_rejected():
    row = make_rollout()
    del row["reward"]
    assert rejection_reason(row) == "missing_reward"


def test_empty_output_is_rejected_not_a_reward_zero_sample():
    assert rejection_reason(make_rollout([], reward=0.0)) == "no_model_output"


def test_empty_input_is_rejected():
    assert rejection_reason(make_rollout(request_input=[])) == "no_prompt"


@pytest.mark.parametrize(
    "row",
    [
        {"responses_create_params": "x", "response": {"output": []}, "reward": 1},
        {"responses_create_params": {"input": 3}, "response": {"output": [message_item("a")]}, "reward": 1},
        {"responses_create_params": {"input": "hi"}, "response": {"output": "nope"}, "reward": 1},
        {"responses_create_params": {"input": "hi"}, "response": {"output": ["nope"]}, "reward": 1},
        {"responses_create_params": {"input": "hi"}, "response": {"output": [{"type": "function_call"}]}, "reward": 1},
    ],
)
def test_broken_structure_is_rejected(row):
    assert rejection_reason(row) == "invalid_structure"


def test_unknown_role_is_rejected():
    assert rejection_reason(make_rollout(request_input=[{"role": "narrator", "content": "x"}])) == "unknown_role"


def test_collector_fields_agent_and_usage():
    row = make_rollout(
        _ng_task_index=3, _ng_rollout_index=1, agent_ref={"type": "responses_api_agents", "name": "my_agent"},
        mask_sample=True, reward_components={"a": 1.0}, expected_answer="42",
    )
    row["response"]["usage"] = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    trajectory = convert(row)
    assert (trajectory.task_index, trajectory.rollout_index, trajectory.agent_name) == (3, 1, "my_agent")
    assert trajectory.mask_sample is True
    assert trajectory.reward_components == {"a": 1.0}
    assert (trajectory.input_tokens, trajectory.output_tokens, trajectory.total_tokens) == (10, 5, 15)
    assert trajectory.metadata["expected_answer"] == "42"
    assert trajectory.metadata["agent_ref"] == {"type": "responses_api_agents", "name": "my_agent"}


def test_agent_ref_as_a_string_and_chat_completions_usage_names():
    row = make_rollout(agent_ref="plain_agent")
    row["response"]["usage"] = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    trajectory = convert(row)
    assert trajectory.agent_name == "plain_agent"
    assert (trajectory.input_tokens, trajectory.output_tokens) == (7, 2)


def test_incomplete_status_is_not_completed():
    row = make_rollout()
    row["response"]["status"] = "incomplete"
    assert convert(row).completed is False


def test_task_key_uses_task_index_scoped_to_source():
    row = make_rollout(_ng_task_index=0)
    assert convert(row, "a.jsonl").task_key == convert(row, "a.jsonl").task_key
    assert convert(row, "a.jsonl").task_key != convert(row, "b.jsonl").task_key


def test_task_key_without_index_is_the_prompt_content_and_is_stable():
    one = convert(make_rollout([message_item("x")], request_input="Q"), "a.jsonl")
    two = convert(make_rollout([message_item("y")], request_input=[{"role": "user", "content": "Q"}]), "b.jsonl")
    assert one.task_key == two.task_key  # same prompt in string or list form
    # the key is SHA-256 of canonical (sorted-key) JSON, so it is the same in every process
    # and on every machine (Python's hash() is salted per process)
    assert task_key_for("any", None, [{"role": "user", "content": "Q"}], None) == "fe048f15c2a431efa506093b"


def test_tools_convert_from_responses_to_chat_completions_shape():
    tools = [
        {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True},
        {"type": "function", "function": {"name": "g", "parameters": {}}},
        {"type": "web_search"},
    ]
    converted, unconverted = convert_tools(tools)
    assert converted == [
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True}},
        {"type": "function", "function": {"name": "g", "parameters": {}}},
    ]
    assert unconverted == [{"type": "web_search"}]


# ------------------------------------------------------------------ turn structure as NeMo Gym builds it
# NeMo Gym's ResponsesConverter (nemo_gym/responses_converter.py) folds everything the model
# produced between two items it did not produce into one assistant message.


def reasoning_item(text):
    return {"type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}


def roles(trajectory):
    return [m["role"] for m in trajectory.messages]


def test_consecutive_assistant_messages_are_one_turn():
    # a computer-use agent's or a multi-answer turn: several message items in a row
    trajectory = convert(make_rollout([message_item("First part."), message_item("Second part.")]))
    assert trajectory.messages[1:] == [{"role": "assistant", "content": "First part.\nSecond part."}]


def test_reasoning_between_a_call_and_its_output_stays_in_the_turn():
    output = [reasoning_item("plan"), call_item("f", "{}", "c1"), reasoning_item("and then"), output_item("c1", "r"),
              message_item("done")]
    trajectory = convert(make_rollout(output))
    assert roles(trajectory) == ["user", "assistant", "tool", "assistant"]
    assert trajectory.messages[1]["reasoning_content"] == "plan\n\nand then"
    assert trajectory.messages[1]["tool_calls"][0]["id"] == "c1"
    assert trajectory.messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "r"}


def test_reasoning_after_text_is_gathered_and_calls_keep_their_order():
    output = [message_item("Looking."), reasoning_item("which file?"), call_item("a", "{}", "c1"),
              message_item("And this."), call_item("b", "{}", "c2"), output_item("c1", "1"), output_item("c2", "2")]
    assistant = convert(make_rollout(output)).messages[1]
    assert assistant["content"] == "Looking.\nAnd this."
    assert assistant["reasoning_content"] == "which file?"
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]


def test_the_same_rules_apply_to_history_in_the_input():
    request_input = [
        {"role": "user", "content": "go"},
        message_item("one"), message_item("two"), call_item("f", "{}", "c1"), reasoning_item("hm"),
        output_item("c1", "r"),
        {"role": "user", "content": "again"},
    ]
    trajectory = convert(make_rollout([message_item("ok")], request_input=request_input))
    assert roles(trajectory) == ["user", "assistant", "tool", "user", "assistant"]
    assert trajectory.prompt_length == 4
    assert trajectory.messages[1]["content"] == "one\ntwo"
    assert trajectory.messages[1]["reasoning_content"] == "hm"


def test_chat_shaped_assistant_calls_and_tool_messages_in_the_input():
    request_input = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "w", "arguments": '{"c": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "9C"},
    ]
    trajectory = convert(make_rollout([message_item("9C in Oslo.")], request_input=request_input))
    assert trajectory.messages[1]["tool_calls"][0]["function"] == {"name": "w", "arguments": '{"c": "Oslo"}'}
    assert trajectory.messages[2] == {"role": "tool", "tool_call_id": "t1", "content": "9C"}
    assert roles(trajectory) == ["user", "assistant", "tool", "assistant"]


def test_an_unknown_result_item_ends_the_turn_an_unknown_call_does_not():
    output = [message_item("clicking"), {"type": "computer_call", "id": "cc1"}, message_item("and typing"),
              {"type": "computer_call_output", "call_id": "cc1"}, message_item("done")]
    trajectory = convert(make_rollout(output))
    assert trajectory.messages[1:] == [{"role": "assistant", "content": "clicking\nand typing"},
                                       {"role": "assistant", "content": "done"}]
    assert [u["type"] for u in trajectory.metadata["unknown_items"]] == ["computer_call", "computer_call_output"]


def test_a_tool_output_for_an_earlier_turn_is_kept_and_flagged_not_misplaced():
    output = [call_item("f", "{}", "c1"), call_item("g", "{}", "c2"), output_item("c2", "two"),
              message_item("moving on"), output_item("c1", "late one")]
    trajectory = convert(make_rollout(output))
    assert roles(trajectory) == ["user", "assistant", "tool", "assistant"]
    assert trajectory.metadata["late_tool_responses"] == [
        {"where": "output[4]", "tool_call_id": "c1", "content": "late one"}]
    assert "late_tool_response" in trajectory.quality_flags


def test_a_second_output_for_an_answered_call_is_kept_and_flagged():
    output = [call_item("f", "{}", "c1"), output_item("c1", "r"), output_item("c1", "again"), message_item("x")]
    trajectory = convert(make_rollout(output))
    assert [m["role"] for m in trajectory.messages].count("tool") == 1
    assert trajectory.metadata["unmatched_tool_responses"][0]["content"] == "again"
    assert "unmatched_tool_response" in trajectory.quality_flags


def test_ids_reused_across_turns_pair_each_output_with_its_own_turn():
    output = [call_item("f", "{}", "call_0"), output_item("call_0", "first"),
              call_item("f", "{}", "call_0"), output_item("call_0", "second"), message_item("end")]
    trajectory = convert(make_rollout(output))
    assert roles(trajectory) == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [m["content"] for m in trajectory.messages if m["role"] == "tool"] == ["first", "second"]
    assert trajectory.quality_flags == []
    # the messages' ids are made unique (a chat has one call per id); each output names its call's
    assert [m["tool_call_id"] for m in trajectory.messages if m["role"] == "tool"] == ["call_0", "call_0_2"]


def test_a_turn_cut_between_input_and_output_is_one_turn_as_nemo_gym_reads_it():
    """The harness recorded the model's reasoning and first call in the request input and the
    rest of that turn in the output: NeMo Gym's converter reads input then output as one
    stream, so it is one assistant message, the model's (after the prompt)."""
    request = [{"role": "user", "content": "Q"}, reasoning_item("plan"), call_item("f", "{}", "c1")]
    output = [call_item("g", "{}", "c2"), output_item("c1", "one"), output_item("c2", "two"), message_item("done")]
    trajectory = convert(make_rollout(output, request_input=request))
    assert roles(trajectory) == ["user", "assistant", "tool", "tool", "assistant"]
    assert trajectory.prompt_length == 1  # the merged turn is the model's, not the prompt's
    assert trajectory.messages[1]["reasoning_content"] == "plan"
    assert [c["id"] for c in trajectory.messages[1]["tool_calls"]] == ["c1", "c2"]
    assert [m["content"] for m in trajectory.messages[2:4]] == ["one", "two"]
    assert trajectory.quality_flags == [] and "late_tool_responses" not in trajectory.metadata


def test_an_unknown_model_item_at_the_boundary_continues_the_turn_as_it_does_anywhere():
    """An unknown item that is no result (a web search call) keeps the turn open inside the
    output, so it does across the boundary too."""
    request = [{"role": "user", "content": "Q"}, reasoning_item("search first")]
    output = [{"type": "web_search_call", "id": "ws1"}, message_item("found it")]
    merged = convert(make_rollout(output, request_input=request))
    assert roles(merged) == ["user", "assistant"] and merged.prompt_length == 1
    assert merged.messages[1]["reasoning_content"] == "search first" and merged.messages[1]["content"] == "found it"
    in_output = convert(make_rollout([reasoning_item("search first"), *output], request_input=request[:1]))
    assert in_output.messages == merged.messages


def test_request_boundary_split_keeps_the_inputs_model_items_as_a_turn_in_the_prompt():
    request = [{"role": "user", "content": "Q"}, reasoning_item("plan"), call_item("f", "{}", "c1")]
    output = [call_item("g", "{}", "c2"), output_item("c2", "two"), message_item("done")]
    trajectory = convert(make_rollout(output, request_input=request), request_boundary="split")
    assert roles(trajectory) == ["user", "assistant", "assistant", "tool", "assistant"]
    assert trajectory.prompt_length == 2
    assert [c["id"] for c in trajectory.messages[1]["tool_calls"]] == ["c1"]


def test_input_model_items_followed_by_a_tool_output_stay_in_the_prompt():
    """Nothing to merge: the output starts with the result of the input's call."""
    request = [{"role": "user", "content": "Q"}, call_item("f", "{}", "c1")]
    trajectory = convert(make_rollout([output_item("c1", "r"), message_item("done")], request_input=request))
    assert roles(trajectory) == ["user", "assistant", "tool", "assistant"]
    assert trajectory.prompt_length == 2


def test_two_calls_of_one_turn_naming_one_id_are_answered_in_order():
    output = [call_item("f", '{"n": 1}', "dup"), call_item("f", '{"n": 2}', "dup"), output_item("dup", "one"),
              output_item("dup", "two"), message_item("ok")]
    trajectory = convert(make_rollout(output))
    assert [c["id"] for c in trajectory.messages[1]["tool_calls"]] == ["dup", "dup_2"]
    assert [(m["tool_call_id"], m["content"]) for m in trajectory.messages[2:4]] == [("dup", "one"), ("dup_2", "two")]
    assert re.fullmatch(ROLE_SHAPE_PATTERN, role_shape(trajectory.messages))


# ------------------------------------------------------------------ a conversation recorded in the output


def test_a_conversation_recorded_in_the_output_takes_its_prompt_from_there():
    output = [message_item("You are a coder.", role="system"), message_item("Fix the bug.", role="user"),
              message_item("Done.")]
    row = make_rollout(output, request_input=[])
    trajectory = convert(row)
    assert trajectory.messages == [{"role": "system", "content": "You are a coder."},
                                   {"role": "user", "content": "Fix the bug."},
                                   {"role": "assistant", "content": "Done."}]
    assert trajectory.prompt_length == 2
    # the request an RL row replays holds the prompt; the original row is not touched
    assert trajectory.request["input"] == output[:2]
    assert row["responses_create_params"]["input"] == []
    same_prompt_in_input = convert(make_rollout([message_item("Other.")], request_input=[
        {"role": "system", "content": "You are a coder."}, {"role": "user", "content": "Fix the bug."}]))
    assert trajectory.task_key == same_prompt_in_input.task_key  # no task index: the prompt's content


def test_a_system_only_input_and_the_user_turn_in_the_output():
    row = make_rollout([message_item("Fix it.", role="user"), message_item("Fixed.")],
                       request_input=[{"role": "system", "content": "Be careful."}])
    trajectory = convert(row)
    assert trajectory.prompt_length == 2
    assert trajectory.request["input"] == [{"role": "system", "content": "Be careful."},
                                           message_item("Fix it.", role="user")]


def test_an_agent_that_speaks_first_keeps_its_greeting_in_the_prompt():
    output = [message_item("Hi! How can I help?"), message_item("My order is late.", role="user"),
              call_item("lookup", "{}", "c1"), output_item("c1", "shipped"), message_item("It shipped today.")]
    trajectory = convert(make_rollout(output, request_input=[]))
    assert roles(trajectory) == ["assistant", "user", "assistant", "tool", "assistant"]
    assert trajectory.prompt_length == 2


@pytest.mark.parametrize("request_input, output", [
    ([], [message_item("talking to nobody")]),
    ([{"role": "system", "content": "s"}], [message_item("a"), reasoning_item("b"), message_item("c")]),
])
def test_no_user_turn_anywhere_is_no_prompt(request_input, output):
    assert rejection_reason(make_rollout(output, request_input=request_input)) == "no_prompt"


def test_a_user_turn_in_the_output_with_no_answer_is_no_model_output():
    assert rejection_reason(make_rollout([message_item("hello?", role="user")], request_input=[])) == "no_model_output"


# ------------------------------------------------------------------ inline reasoning


@pytest.mark.parametrize("text, reasoning, content", [
    ("<think>\n2+2 is 4\n</think>\n\nThe answer is 4.", "2+2 is 4", "The answer is 4."),
    ("<think>brief reasoning</think>H2O", "brief reasoning", "H2O"),  # frontierscience_judge's shape
    ("The user wants noir.\n</think>\nThe night fell heavy.", "The user wants noir.", "The night fell heavy."),
    ("<think>\nran out of tokens", "ran out of tokens", ""),
])
def test_inline_think_blocks_become_reasoning_content(text, reasoning, content):
    trajectory = convert(make_rollout([message_item(text)]))
    assert trajectory.messages[-1] == {"role": "assistant", "content": content, "reasoning_content": reasoning}
    assert "hermes_markup_in_content" not in trajectory.quality_flags


@pytest.mark.parametrize("text", ["Use <think> and </think> tags.", "x < y and <b>bold</b>", "plain"])
def test_text_that_does_not_open_with_reasoning_is_left_as_it_is(text):
    assert convert(make_rollout([message_item(text)])).messages[-1] == {"role": "assistant", "content": text}


def test_inline_reasoning_can_be_switched_off():
    text = "<think>hm</think>Answer"
    trajectory = convert(make_rollout([message_item(text)]), inline_reasoning=False)
    assert trajectory.messages[-1] == {"role": "assistant", "content": text}
    assert trajectory.quality_flags == ["hermes_markup_in_content"]


def test_inline_reasoning_joins_a_reasoning_item_of_the_same_turn():
    output = [reasoning_item("summary"), message_item("<think>raw</think>Answer")]
    assert convert(make_rollout(output)).messages[-1] == {
        "role": "assistant", "content": "Answer", "reasoning_content": "summary\n\nraw"}


# ------------------------------------------------------------------ per-step transcripts


def aviary_transcripts():
    """Aviary's return_transitions: each step's whole input (the request's, then the steps)."""
    prompt = [{"role": "user", "content": "Solve the maze."}]
    step_one = [*prompt, message_item("start state", role="user"), call_item("move", '{"d": "N"}', "m1"),
                output_item("m1", "moved")]
    step_two = [*step_one, call_item("move", '{"d": "E"}', "m2"), output_item("m2", "exit")]
    return prompt, [step_one, step_two]


def test_per_step_transcripts_take_the_final_one_without_repeating_the_input():
    prompt, transcripts = aviary_transcripts()
    trajectory = convert(make_rollout(transcripts, request_input=prompt))
    assert roles(trajectory) == ["user", "user", "assistant", "tool", "assistant", "tool"]
    assert trajectory.prompt_length == 1
    assert trajectory.metadata["per_step_transcripts"] == 2


def test_a_final_transcript_without_the_input_follows_it():
    _, transcripts = aviary_transcripts()
    transcripts = [step[1:] for step in transcripts]  # the input is not replayed
    trajectory = convert(make_rollout(transcripts, request_input="Solve the maze."))
    assert roles(trajectory) == ["user", "user", "assistant", "tool", "assistant", "tool"]
    assert trajectory.messages[0]["content"] == "Solve the maze."


def test_per_step_transcripts_can_be_quarantined_under_their_own_reason():
    prompt, transcripts = aviary_transcripts()
    with pytest.raises(Rejection) as caught:
        convert(make_rollout(transcripts, request_input=prompt), per_step_output="reject")
    assert caught.value.reason == "per_step_transcripts"


def test_output_mixing_items_and_transcripts_is_broken_structure():
    assert rejection_reason(make_rollout([message_item("a"), [message_item("b")]])) == "invalid_structure"


# ------------------------------------------------------------------ collector fields and token data


def test_rollout_id_is_kept_as_lineage():
    assert convert(make_rollout(_ng_rollout_id="3-1-a2")).rollout_id == "3-1-a2"
    assert convert(make_rollout()).rollout_id is None


def test_materialized_inputs_are_joined_on_task_and_rollout_index():
    inputs = {(3, 1): {"expected_answer": "42", "question_id": "q7"}}
    joined = convert_rollout(make_rollout(_ng_task_index=3, _ng_rollout_index=1), source_id="s", inputs=inputs)
    assert joined.task_inputs == {"expected_answer": "42", "question_id": "q7"}
    other = convert_rollout(make_rollout(_ng_task_index=3, _ng_rollout_index=0), source_id="s", inputs=inputs)
    assert other.task_inputs is None


def tokens(prompt, generation, log_probs=None):
    return {"prompt_token_ids": prompt, "generation_token_ids": generation,
            "generation_log_probs": [-0.5] * len(generation) if log_probs is None else log_probs}


def test_token_data_is_kept_per_model_call_with_its_message():
    output = [{**call_item("f", "{}", "c1"), **tokens([1, 2], [3, 4])}, output_item("c1", "r"),
              {**message_item("done"), **tokens([1, 2, 3, 4, 5], [6])}]
    trajectory = convert(make_rollout(output))
    assert trajectory.token_data == [
        {"message_index": 1, "prompt_token_ids": [1, 2], "generation_token_ids": [3, 4],
         "generation_log_probs": [-0.5, -0.5]},
        {"message_index": 3, "prompt_token_ids": [1, 2, 3, 4, 5], "generation_token_ids": [6],
         "generation_log_probs": [-0.5]},
    ]
    # the chat messages never carry it
    assert all(key not in message for message in trajectory.messages for key in tokens([], []))


def test_empty_token_lists_carry_nothing():
    # hermes_agent's rollouts carry empty lists on every item
    assert convert(make_rollout([{**message_item("a"), **tokens([], [], [])}])).token_data is None


@pytest.mark.parametrize("data", [tokens([1], [2], [-0.1, -0.2]), tokens([1], ["2"]), tokens("1", [2]),
                                  tokens([1], [2], [float("nan")])])
def test_malformed_token_data_is_flagged_and_kept_in_metadata(data):
    trajectory = convert(make_rollout([{**message_item("a"), **data}]))
    assert trajectory.token_data is None
    assert "malformed_token_data" in trajectory.quality_flags
    assert trajectory.metadata["malformed_token_data"][0]["generation_token_ids"] == data["generation_token_ids"]


def test_the_documented_examples_hold():
    from trajectory_assets.sources import nemo_gym

    assert doctest.testmod(nemo_gym).failed == 0


# ------------------------------------------------------------------ property: structure and tool results


MODEL_ITEMS = ("assistant", "reasoning", "call")


@st.composite
def split_streams(draw):
    """An item stream cut anywhere into the request input (after the user's question) and
    the output: NeMo Gym reads the two as one stream."""
    items = draw(item_streams())
    return items, draw(st.integers(min_value=0, max_value=len(items)))


@st.composite
def item_streams(draw):
    """Output streams as agents write them: model items in any order and number, tool
    outputs for calls made (in or out of order, twice, late) or never made, user turns."""
    kinds = draw(st.lists(st.sampled_from([*MODEL_ITEMS, "call", "output", "output", "user"]), min_size=1,
                          max_size=14))
    items, calls = [], []
    for number, kind in enumerate(kinds):
        if kind == "assistant":
            items.append(message_item(f"text {number}"))
        elif kind == "reasoning":
            items.append(reasoning_item(f"thought {number}"))
        elif kind == "call":
            call_id = draw(st.sampled_from([f"c{number}", "c_reused"]))
            calls.append(call_id)
            items.append(call_item("f", "{}", call_id))
        elif kind == "output":
            call_id = draw(st.sampled_from([*calls, "never_made"])) if calls else "never_made"
            items.append(output_item(call_id, f"result {number}"))
        else:
            items.append(message_item(f"user {number}", role="user"))
    return items


def nemo_gym_roles(items, kept_aside=(), cut=0):
    """NeMo Gym's grouping restated: one assistant message per run of items the model
    produced. A tool output kept aside still ends the model's turn, but is no message.
    The first ``cut`` items sit in the request input, after the user's question."""
    roles, buffered = ["user"], False
    for position, item in enumerate(items):
        where = f"responses_create_params.input[{position + 1}]" if position < cut else f"output[{position - cut}]"
        if item["type"] in ("reasoning", "function_call") or item.get("role") == "assistant":
            buffered = True
            continue
        if buffered:
            roles.append("assistant")
            buffered = False
        if where not in kept_aside:
            roles.append("tool" if item["type"] == "function_call_output" else "user")
    return roles + (["assistant"] if buffered else [])


@settings(max_examples=400, deadline=None)
@given(stream=split_streams())
def test_turns_match_nemo_gym_and_every_tool_output_is_a_message_or_counted(stream):
    items, cut = stream
    outputs = sum(item["type"] == "function_call_output" for item in items)
    try:
        trajectory = convert(make_rollout(items[cut:], request_input=[{"role": "user", "content": "Q"}, *items[:cut]]))
    except Rejection as rejection:  # counted with its reason
        assert rejection.reason in ("orphan_tool_output", "no_model_output")
        if rejection.reason == "no_model_output":  # the output holds nothing the model produced
            assert not any(item["type"] in ("reasoning", "function_call") or item.get("role") == "assistant"
                           for item in items[cut:])
        return
    kept = [entry["where"] for key in ("late_tool_responses", "unmatched_tool_responses")
            for entry in trajectory.metadata.get(key, [])]
    assert outputs == roles(trajectory).count("tool") + len(kept)
    # the same turns as NeMo Gym's reading, less the outputs kept aside (they have no valid place)
    assert roles(trajectory) == nemo_gym_roles(items, kept, cut)
    assert re.fullmatch(ROLE_SHAPE_PATTERN, role_shape(trajectory.messages))


# ---------- flags producers write today


def test_a_skipped_verification_leaves_the_rollout_without_a_reward():
    # simple_agent with skip_verification: the reward is skip_verification_reward, a placeholder
    trajectory = convert(make_rollout(reward=0.25, verification_skipped=True))
    assert trajectory.reward is None
    assert "verification_skipped" in trajectory.quality_flags
    assert trajectory.metadata["placeholder_reward"] == 0.25


def test_a_skipped_verification_without_a_reward_is_still_a_rollout():
    row = make_rollout(verification_skipped=True)
    del row["reward"]
    assert convert(row).reward is None


@pytest.mark.parametrize("flags, masked", [
    ({"mask_sample": True}, True),  # token capture, anyterminal, osworld
    ({"instance_config": {"mask_sample": True}}, True),  # swe_agents, the simulation agents (what NeMo RL reads)
    ({"mask_sample": None, "instance_config": {"mask_sample": False}}, False),  # anyswe: may be null
])
def test_mask_sample_is_read_where_each_agent_writes_it(flags, masked):
    assert convert(make_rollout(**flags)).mask_sample is masked
