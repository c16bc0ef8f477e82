"""One test per conversion rule of NeMo Gym rollouts -> canonical chat trajectories."""

import json
import math

import pytest

from tests.conftest import call_item, make_rollout, message_item, output_item
from trajectory_assets.formats.nemo_gym import convert_rollout, convert_tools, task_key_for
from trajectory_assets.formats.trajectory import Rejection


def convert(row, source_id="src.jsonl"):
    return convert_rollout(row, source_id=source_id)


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
    assert convert(make_rollout(output, request_input=request_input)).quality_flags == ["hermes_markup_in_content"]


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
