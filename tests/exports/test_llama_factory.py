"""Canonical messages -> LLaMA-Factory ShareGPT rows follow the converter's rules."""

import orjson
import pytest

from schemas.shapes import LLAMA_FACTORY_LETTER, turn_shape
from trajectory_assets.exports.llama_factory import dataset_info, to_llama_factory
from trajectory_assets.exports.unrepresentable import Unrepresentable

TOOLS = [{"type": "function", "function": {"name": "search", "description": "Web search",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


def user(text="q"):
    return {"role": "user", "content": text}


def assistant(text="a", **extra):
    return {"role": "assistant", "content": text, **extra}


def call(call_id, name="search", arguments='{"q": "x"}'):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool(call_id, text):
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def reason(error):
    return error.value.reason


def test_leading_system_message_becomes_the_system_column():
    row = to_llama_factory([{"role": "system", "content": "be brief"}, user(), assistant()], None)
    assert row["system"] == "be brief"
    assert [turn["from"] for turn in row["conversations"]] == ["human", "gpt"]


def test_no_system_message_gives_an_empty_system_column():
    assert to_llama_factory([user(), assistant()], None)["system"] == ""


def test_reasoning_is_prefixed_as_a_think_block():
    row = to_llama_factory([user(), assistant("42", reasoning_content="add it up")], None)
    assert row["conversations"][1] == {"from": "gpt", "value": "<think>\nadd it up\n</think>\n\n42"}


def test_parallel_calls_become_one_function_call_list_and_one_joined_observation():
    messages = [
        user(),
        assistant("", tool_calls=[call("c1", arguments='{"q": "a"}'), call("c2", "fetch", '{"url": "u", "n": 2}')]),
        tool("c1", "first"),
        tool("c2", "second"),
        assistant("done"),
    ]
    conversations = to_llama_factory(messages, TOOLS)["conversations"]
    assert turn_shape(conversations, LLAMA_FACTORY_LETTER) == "hfog"
    assert orjson.loads(conversations[1]["value"]) == [
        {"name": "search", "arguments": {"q": "a"}},
        {"name": "fetch", "arguments": {"url": "u", "n": 2}},
    ]
    assert conversations[2]["value"] == "first\n</tool_response>\n<tool_response>\nsecond"


def test_single_call_is_a_list_of_one_and_single_result_is_unchanged():
    messages = [user(), assistant(None, tool_calls=[call("c1")]), tool("c1", '{"hits": 3}'), assistant("ok")]
    conversations = to_llama_factory(messages, None)["conversations"]
    assert orjson.loads(conversations[1]["value"]) == [{"name": "search", "arguments": {"q": "x"}}]
    assert conversations[2] == {"from": "observation", "value": '{"hits": 3}'}


def test_reasoning_on_a_tool_calling_turn_prefixes_the_json():
    messages = [user(), assistant("", reasoning_content="look it up", tool_calls=[call("c1")]),
                tool("c1", "r"), assistant("ok")]
    value = to_llama_factory(messages, None)["conversations"][1]["value"]
    prefix = "<think>\nlook it up\n</think>\n\n"
    assert value.startswith(prefix)
    assert orjson.loads(value[len(prefix):]) == [{"name": "search", "arguments": {"q": "x"}}]


def test_text_with_tool_calls_is_unrepresentable():
    messages = [user(), assistant("let me check", tool_calls=[call("c1")]), tool("c1", "r"), assistant()]
    with pytest.raises(Unrepresentable) as error:
        to_llama_factory(messages, None)
    assert reason(error) == "text_with_tool_calls"


@pytest.mark.parametrize("arguments", ["not json", "[1, 2]", '"text"'])
def test_tool_arguments_must_parse_to_an_object(arguments):
    messages = [user(), assistant("", tool_calls=[call("c1", arguments=arguments)]), tool("c1", "r"), assistant()]
    with pytest.raises(Unrepresentable) as error:
        to_llama_factory(messages, None)
    assert reason(error) == "unparseable_tool_arguments"


def test_two_user_turns_in_a_row_break_alternation():
    with pytest.raises(Unrepresentable) as error:
        to_llama_factory([user("a"), user("b"), assistant()], None)
    assert reason(error) == "breaks_turn_alternation"


def test_ending_on_an_observation_breaks_alternation():
    with pytest.raises(Unrepresentable) as error:
        to_llama_factory([user(), assistant("", tool_calls=[call("c1")]), tool("c1", "r")], None)
    assert reason(error) == "breaks_turn_alternation"


def test_ending_on_a_human_turn_breaks_alternation():
    with pytest.raises(Unrepresentable) as error:
        to_llama_factory([user(), assistant(), user()], None)
    assert reason(error) == "breaks_turn_alternation"


def test_image_parts_are_unrepresentable():
    parts = [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    with pytest.raises(Unrepresentable) as error:
        to_llama_factory([{"role": "user", "content": parts}, assistant()], None)
    assert reason(error) == "non_text_content"


def test_tools_column_is_a_json_list_of_function_objects():
    row = to_llama_factory([user(), assistant()], TOOLS)
    assert isinstance(row["tools"], str)
    assert orjson.loads(row["tools"]) == [TOOLS[0]["function"]]
    assert to_llama_factory([user(), assistant()], None)["tools"] == ""
    assert to_llama_factory([user(), assistant()], [])["tools"] == ""


def test_dataset_info_registers_one_sharegpt_dataset_per_split_loaded_through_the_card():
    info = dataset_info("trajectory_assets_sft", ("train", "validation"))
    assert set(info) == {"trajectory_assets_sft_train", "trajectory_assets_sft_validation"}
    train = info["trajectory_assets_sft_train"]
    assert train == {
        "script_url": ".",  # the folder itself: datasets reads the card's glob of the split's files
        "split": "train",
        "formatting": "sharegpt",
        "columns": {"messages": "conversations", "system": "system", "tools": "tools"},
        "tags": {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
                 "observation_tag": "observation", "function_tag": "function_call", "system_tag": "system"},
    }
    assert info["trajectory_assets_sft_validation"]["split"] == "validation"


VARIED = [
    [user(), assistant()],
    [{"role": "system", "content": "s"}, user(), assistant(reasoning_content="r")],
    [user(), assistant("", tool_calls=[call("c1")]), tool("c1", "r"), assistant("x")],
    [user(), assistant("", tool_calls=[call("c1")]), tool("c1", "r"),
     assistant(None, tool_calls=[call("c2"), call("c3")]), tool("c2", "a"), tool("c3", "b"), assistant("y"),
     user("more"), assistant("z")],
    [user(), assistant("", tool_calls=[call("c1")]), user("never mind"), assistant("ok")],
]


@pytest.mark.parametrize("messages", VARIED)
def test_every_rendered_conversation_satisfies_the_sharegpt_converter(messages):
    conversations = to_llama_factory(messages, TOOLS)["conversations"]
    assert conversations and len(conversations) % 2 == 0
    for position, turn in enumerate(conversations):
        allowed = ("human", "observation") if position % 2 == 0 else ("gpt", "function_call")
        assert turn["from"] in allowed, (position, turn)
        assert isinstance(turn["value"], str)
    assert all(turn["from"] != "system" for turn in conversations)
