"""Hermes ShareGPT markup -> structure, rule by rule, and back."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures import hermes_rows as rows
from trajectory_assets.formats.hermes import convert_hermes, render_hermes, tool_result_failed
from trajectory_assets.formats.trajectory import Rejection

MARKUP = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "<tools>")


def convert(row):
    return convert_hermes(row, source_id="h.jsonl")


def test_tool_run_becomes_structured_messages():
    trajectory = convert(rows.tool_run())
    messages = trajectory.messages
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    first = messages[1]
    assert first["content"] == "Let me look."  # visible text before the calls is kept
    assert first["reasoning_content"] == "Two things to check."
    assert [c["function"]["name"] for c in first["tool_calls"]] == ["terminal", "read_file"]
    assert json.loads(first["tool_calls"][1]["function"]["arguments"]) == {"path": "C:\\Users\\zoë\\notes.txt"}
    # one tool turn answering two parallel calls: two tool messages, matched by position
    assert [m["tool_call_id"] for m in messages[2:4]] == [c["id"] for c in first["tool_calls"]]
    assert messages[2]["content"] == "Python 3.11.6"
    assert json.loads(messages[3]["content"]) == {"text": "buy milk — 牛奶"}
    assert trajectory.tools[0] == {"type": "function", "function": {
        "name": "terminal", "description": "Execute shell commands",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}
    assert trajectory.quality_flags == []
    assert trajectory.prompt_length == 1 and trajectory.reward is None and trajectory.completed
    for message in messages:
        assert not any(tag in (message.get("content") or "") for tag in MARKUP)


def test_the_generated_system_prompt_is_replaced_by_tools_but_a_custom_one_is_kept():
    assert convert(rows.tool_run()).messages[0]["role"] == "user"
    custom = rows.cli_row([{"from": "system", "value": "You are Lucifex.\n\n" + rows.SYSTEM["value"]},
                           rows.human("hi"), rows.gpt("<think>\nx\n</think>\nhey")])
    assert convert(custom).messages[0] == {"role": "system", "content": "You are Lucifex."}
    plain = rows.cli_row([{"from": "system", "value": "You are an AI."}, rows.human("hi"), rows.gpt("hey")])
    trajectory = convert(plain)
    assert trajectory.messages[0] == {"role": "system", "content": "You are an AI."} and trajectory.tools is None


@pytest.mark.parametrize(
    "index, expected_flags, final",
    [
        (0, [], {"role": "assistant", "content": "Hello!", "reasoning_content": "short"}),
        (1, ["no_reasoning"], {"role": "assistant", "content": "Hello!"}),
        (2, ["unbalanced_think_tags"], {"role": "assistant", "content": "Hello there", "reasoning_content": "ok"}),
        (3, ["unbalanced_think_tags"], {"role": "assistant", "content": "", "reasoning_content": "thinking forever"}),
        (4, ["consecutive_assistant_turns", "no_reasoning", "unanswered_tool_calls"],
         {"role": "assistant", "content": "Done."}),
        (5, ["repeated_first_user_turn"], {"role": "assistant", "content": "B", "reasoning_content": "y"}),
        (6, ["error_in_final_turn", "no_reasoning"],
         {"role": "assistant", "content": "Error code: 429 - rate limit exceeded"}),
        (7, ["no_reasoning", "unparseable_tool_call"], {"role": "assistant", "content": "Sorry."}),
    ],
)
def test_anomalies_are_parsed_and_flagged(index, expected_flags, final):
    trajectory = convert(rows.anomalies()[index])
    assert trajectory.quality_flags == expected_flags
    assert trajectory.messages[-1] == final


def test_unparseable_call_keeps_its_raw_text_and_name():
    call = convert(rows.anomalies()[7]).messages[1]["tool_calls"][0]
    assert call["function"]["name"] == "terminal"
    assert call["function"]["arguments"] == "{'name': 'terminal', 'arguments': }"


def test_error_text_is_not_flagged_when_the_run_is_not_completed():
    row = rows.anomalies()[6]
    row["completed"] = False
    trajectory = convert(row)
    assert trajectory.completed is False and "error_in_final_turn" not in trajectory.quality_flags


def test_batch_runner_rows_keep_metadata_and_a_supplied_reward():
    trajectory = convert(rows.batch_runner_rows()[0])
    assert trajectory.reward == 1.0
    assert trajectory.task_type == "gsm8k"
    assert trajectory.metadata["api_calls"] == 2 and trajectory.metadata["prompt_index"] == 0
    assert trajectory.request["input"] == [{"role": "user", "content": trajectory.messages[0]["content"]}]
    assert trajectory.request["tools"][0]["name"] == "terminal"


def test_both_rollouts_of_a_batch_prompt_share_a_task_key():
    first, second, _ = rows.batch_runner_rows()
    assert convert(first).task_key == convert(second).task_key


@pytest.mark.parametrize(
    "row, reason",
    [
        ({"prompt_index": 7, "discarded": "no_reasoning", "prompt": "x"}, "hermes_discarded"),
        ({"prompt_index": 7, "failed": True, "conversations": []}, "hermes_failed"),
        ({"conversations": "nope"}, "invalid_structure"),
        ({"conversations": [{"from": "robot", "value": "x"}]}, "unknown_role"),
        ({"conversations": [{"from": "human"}]}, "invalid_structure"),
        ({"conversations": [rows.SYSTEM, rows.gpt("hi")]}, "no_prompt"),
        ({"conversations": [rows.SYSTEM, rows.human("hi")]}, "no_model_output"),
        ({"conversations": [rows.human("hi"), {"from": "tool", "value": "orphan"}, rows.gpt("x")]}, "orphan_tool_output"),
    ],
)
def test_rows_that_cannot_become_trajectories(row, reason):
    with pytest.raises(Rejection) as caught:
        convert(row)
    assert caught.value.reason == reason


def test_render_follows_the_seed_normalization():
    trajectory = convert(rows.tool_run())
    turns = render_hermes(trajectory.messages, trajectory.tools)
    assert [t["from"] for t in turns] == ["system", "human", "gpt", "tool", "gpt"]
    assert turns[0]["value"] == rows.SYSTEM["value"]
    assert turns[2]["value"].startswith("<think>\nTwo things to check.\n</think>\nLet me look.\n<tool_call>\n")
    assert '"arguments": {"command": "python3 --version"}' in turns[2]["value"]  # an object, not a string
    tool_blocks = turns[3]["value"].split("\n<tool_response>")
    assert len(tool_blocks) == 2
    assert '"content": {"text": "buy milk' in turns[3]["value"]  # JSON content parsed back to an object


def test_a_normalized_hermes_row_round_trips():
    row = rows.tool_run()
    row["conversations"][3]["value"] = (  # ids as the parser names them
        rows.response("call_2_0", "terminal", "Python 3.11.6") + "\n"
        + rows.response("call_2_1", "read_file", {"text": "buy milk — 牛奶"})
    )
    trajectory = convert(row)
    assert render_hermes(trajectory.messages, trajectory.tools) == row["conversations"]


def test_empty_reasoning_renders_an_empty_think_block():
    turns = render_hermes([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], None)
    assert turns[2]["value"] == "<think>\n</think>\na"
    assert "<tools>\n[]\n</tools>" in turns[0]["value"]


text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="<>"), min_size=1,
               max_size=30).map(str.strip).filter(bool)


@settings(max_examples=60, deadline=None)
@given(user=text, answer=text, reasoning=st.one_of(st.none(), text), command=text, output=text)
def test_parse_of_render_gives_back_the_canonical_messages(user, answer, reasoning, command, output):
    call = {"id": "call_2_0", "type": "function",
            "function": {"name": "terminal", "arguments": json.dumps({"command": command}, ensure_ascii=False)}}
    first = {"role": "assistant", "content": "", "tool_calls": [call]}
    final = {"role": "assistant", "content": answer}
    if reasoning:
        final["reasoning_content"] = reasoning
    messages = [{"role": "user", "content": user}, first,
                {"role": "tool", "tool_call_id": "call_2_0", "content": output}, final]
    tools = [{"type": "function", "function": {"name": "terminal", "description": "d", "parameters": {}}}]
    rendered = render_hermes(messages, tools)
    parsed = convert(rows.cli_row(rendered))
    if output.lstrip()[:1] in "{[":  # JSON-looking content is re-serialized, as Hermes does
        return
    assert parsed.messages == messages
    assert parsed.tools == tools


@pytest.mark.parametrize(
    "content, failed",
    [("", True), ("Error: no such file", True), ('{"error": "boom"}', True), ('{"success": false}', True),
     ('{"content": {"error": "x"}}', True), ('{"error": null, "output": "ok"}', False), ("all good", False),
     ('{"content": {"text": "fine"}}', False)],
)
def test_tool_failure_rule_of_the_batch_runner(content, failed):
    assert tool_result_failed(content) is failed
