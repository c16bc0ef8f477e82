"""The Hermes export writes only what Hermes markup can hold, and never reshapes the rest."""

import pytest

from trajectory_assets.exports.sft_hermes import render_hermes
from trajectory_assets.exports.unrepresentable import Unrepresentable
from trajectory_assets.chat.hermes_markup import read_conversations

USER = {"role": "user", "content": "Count the circles."}


def test_an_image_part_is_refused_not_dropped():
    """Before, the text parts were kept and the image silently left out of the turn."""
    image = {"role": "user", "content": [{"type": "text", "text": "How many?"},
                                         {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}
    with pytest.raises(Unrepresentable) as error:
        render_hermes([image, {"role": "assistant", "content": "3"}], None)
    assert error.value.reason == "non_text_content"


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]"])
def test_arguments_that_are_not_a_json_object_are_refused_not_emptied(arguments):
    """Before, they were written as ``{}``: a call the model never made."""
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "count", "arguments": arguments}}]}
    with pytest.raises(Unrepresentable) as error:
        render_hermes([USER, call], None)
    assert error.value.reason == "unparseable_tool_arguments"


def test_a_json_tool_result_is_embedded_as_its_value_and_reads_back_equal():
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "count", "arguments": '{"color":"yellow"}'}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": '{"circles":3}'}
    turns = render_hermes([USER, call, result, {"role": "assistant", "content": "3"}], None)
    assert '"content": {"circles": 3}' in turns[3]["value"]
    messages, _ = read_conversations(turns)
    assert messages[2]["role"] == "tool" and messages[2]["content"] == '{"circles": 3}'


@pytest.mark.parametrize("name", ["sft_hermes", "llama_factory"])
def test_results_in_another_order_than_the_calls_are_refused(name):
    """ShareGPT has no call ids: a result answering the second call first would read back as
    the first call's result."""
    from trajectory_assets.exports.llama_factory import to_llama_factory

    calls = {"role": "assistant", "content": "", "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "weather", "arguments": f'{{"city": "{i}"}}'}}
        for i in ("oslo", "rome")]}
    messages = [USER, calls, {"role": "tool", "tool_call_id": "rome", "content": "sun"},
                {"role": "tool", "tool_call_id": "oslo", "content": "rain"}, {"role": "assistant", "content": "ok"}]
    render = render_hermes if name == "sft_hermes" else to_llama_factory
    with pytest.raises(Unrepresentable) as error:
        render(messages, None)
    assert error.value.reason == "tool_results_out_of_order"
    render([*messages[:2], messages[3], messages[2], messages[4]], None)  # in call order: written


def test_the_prompt_made_once_per_tool_set_is_the_prompt_of_those_tools():
    """The export formats a tool set's prompt once (``tools_prompt``, by the stored JSON text)
    and hands it to every conversation offered those tools: the same turns as formatting them
    for each conversation."""
    import orjson

    from trajectory_assets.exports.sft_hermes import tools_prompt

    tools = [{"type": "function", "function": {"name": "count", "description": "Count shapes: ✓",
                                               "parameters": {"type": "object", "properties": {}}}}]
    messages = [USER, {"role": "assistant", "content": "3"}]
    stored = orjson.dumps(tools).decode()
    assert render_hermes(messages, None, tools_prompt(stored)) != render_hermes(messages, None)
    assert render_hermes(messages, None, tools_prompt(stored)) == render_hermes(messages, tools)
    assert render_hermes(messages, None)[0]["value"] == tools_prompt(None)
