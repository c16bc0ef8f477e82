"""Hermes ShareGPT markup -> structure, rule by rule, and back."""

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures import hermes_rows as rows
from trajectory_assets.chat.messages import tool_result_failed
from schemas.shapes import role_shape
from trajectory_assets.exports.sft_hermes import render_hermes
from trajectory_assets.sources.hermes import convert_hermes
from trajectory_assets.chat.trajectory import Rejection
from schemas.shapes import ROLE_SHAPE_PATTERN

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
    # one tool turn answering two parallel calls: two tool messages, matched by position;
    # the calls take the ids the responses name
    assert [c["id"] for c in first["tool_calls"]] == ["call_abc", "call_def"]
    assert [m["tool_call_id"] for m in messages[2:4]] == ["call_abc", "call_def"]
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


def tool_call(call_id, name, arguments):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


TOOLS = [{"type": "function", "function": {"name": "terminal", "description": "d", "parameters": {}}},
         {"type": "function", "function": {"name": "read_file", "description": "r", "parameters": {}}}]


@pytest.mark.parametrize("ids", [
    ("call_abc", "toolu_01XYZ", "call_4_0", "call_3_1"),  # one looks like a later turn's generated id
    ("call_2_2", "call_2_1", "call_2_0", "call_4_0"),  # the generated ids of the same turn, swapped
])
def test_canonical_messages_with_any_ids_round_trip_exactly(ids):
    a, b, c, d = ids
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Looking.", "reasoning_content": "plan",
         "tool_calls": [tool_call(a, "terminal", {"command": "ls"}),
                        tool_call(b, "read_file", {"path": "a"}),
                        tool_call(c, "terminal", {"command": "pwd"})]},
        {"role": "tool", "tool_call_id": a, "content": "a b"},
        {"role": "tool", "tool_call_id": b, "content": '{"text": "x"}'},
        {"role": "tool", "tool_call_id": c, "content": "/tmp"},
        {"role": "assistant", "content": "", "tool_calls": [tool_call(d, "terminal", {"command": "w"})]},
        {"role": "tool", "tool_call_id": d, "content": "ok"},
        {"role": "user", "content": "and?"},
        {"role": "assistant", "content": "Done.", "reasoning_content": "r"},
    ]
    trajectory = convert(rows.cli_row(render_hermes(messages, TOOLS)))
    assert trajectory.messages == messages
    assert trajectory.tools == TOOLS
    assert trajectory.quality_flags == []
    assert render_hermes(trajectory.messages, trajectory.tools) == render_hermes(messages, TOOLS)


def test_a_normalized_hermes_row_round_trips():
    row = rows.tool_run()
    trajectory = convert(row)
    assert render_hermes(trajectory.messages, trajectory.tools) == row["conversations"]


def test_a_response_naming_a_known_call_id_is_matched_by_id():
    # a call JSON that carries an id keeps it; responses in another order find their call
    turn = ('<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}, "id": "c1"}\n</tool_call>\n'
            '<tool_call>\n{"name": "terminal", "arguments": {"command": "pwd"}, "id": "c2"}\n</tool_call>')
    trajectory = convert(rows.cli_row([
        rows.human("go"), rows.gpt(turn),
        {"from": "tool", "value": rows.response("c2", "terminal", "/tmp") + "\n" + rows.response("c1", "terminal", "a")},
        rows.gpt("done")]))
    assert [c["id"] for c in trajectory.messages[1]["tool_calls"]] == ["c1", "c2"]
    assert [(m["tool_call_id"], m["content"]) for m in trajectory.messages[2:4]] == [("c2", "/tmp"), ("c1", "a")]


def test_positional_matching_prefers_a_call_of_the_same_name():
    turn = rows.call("terminal", {"command": "ls"}) + "\n" + rows.call("read_file", {"path": "a"})
    trajectory = convert(rows.cli_row([
        rows.human("go"), rows.gpt(turn),
        {"from": "tool", "value": rows.response("r1", "read_file", "text") + "\n" + rows.response("t1", "terminal", "a")},
        rows.gpt("done")]))
    calls = trajectory.messages[1]["tool_calls"]
    assert [(c["id"], c["function"]["name"]) for c in calls] == [("t1", "terminal"), ("r1", "read_file")]


def shape_is_valid(trajectory) -> bool:
    return re.fullmatch(ROLE_SHAPE_PATTERN, role_shape(trajectory.messages)) is not None


def test_more_responses_than_calls_keeps_the_extra_in_metadata():
    trajectory = convert(rows.cli_row([
        rows.human("go"), rows.gpt(rows.call("terminal", {"command": "ls"})),
        {"from": "tool", "value": rows.response("c1", "terminal", "a") + "\n" + rows.response("c9", "terminal", "b")},
        rows.gpt("<think>\nx\n</think>\ndone")]))
    assert [m["role"] for m in trajectory.messages] == ["user", "assistant", "tool", "assistant"]
    assert trajectory.messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "a"}
    assert trajectory.quality_flags == ["unmatched_tool_response"]
    assert trajectory.metadata["unmatched_tool_responses"] == [
        {"turn": 2, "raw": '{"tool_call_id": "c9", "name": "terminal", "content": "b"}'}]
    assert shape_is_valid(trajectory)


@pytest.mark.parametrize("conversation", [
    [rows.human("hi"), {"from": "tool", "value": "orphan"}, rows.gpt("x")],  # a tool turn before any call
    [rows.human("hi"), rows.gpt(rows.call("terminal", {})),  # a second response for an answered call
     {"from": "tool", "value": rows.response("c1", "terminal", "a")},
     {"from": "tool", "value": rows.response("c1", "terminal", "again")}, rows.gpt("x")],
])
def test_a_response_answering_no_call_is_kept_and_flagged_not_rejected(conversation):
    trajectory = convert(rows.cli_row(conversation))
    assert "unmatched_tool_response" in trajectory.quality_flags
    assert len(trajectory.metadata["unmatched_tool_responses"]) == 1
    assert shape_is_valid(trajectory)


def test_a_response_for_a_call_of_an_earlier_gpt_turn_is_kept_as_late():
    # gpt(call A) -> gpt(call B) -> tool(A, B): A's result cannot follow B's turn validly
    trajectory = convert(rows.cli_row([
        rows.human("go"), rows.gpt(rows.call("terminal", {"command": "ls"})),
        rows.gpt(rows.call("read_file", {"path": "a"})),
        {"from": "tool", "value": rows.response("A", "terminal", "files") + "\n" + rows.response("B", "read_file", "text")},
        rows.gpt("<think>\nx\n</think>\ndone")]))
    messages = trajectory.messages
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant", "tool", "assistant"]
    assert messages[1]["tool_calls"][0]["id"] == "A" and messages[2]["tool_calls"][0]["id"] == "B"
    assert messages[3] == {"role": "tool", "tool_call_id": "B", "content": "text"}
    assert trajectory.metadata["late_tool_responses"] == [{"turn": 3, "tool_call_id": "A", "content": "files"}]
    assert trajectory.quality_flags == ["consecutive_assistant_turns", "late_tool_response", "unanswered_tool_calls"]
    assert shape_is_valid(trajectory)


def test_an_abandoned_call_does_not_take_the_next_turns_response():
    trajectory = convert(rows.cli_row([
        rows.human("go"), rows.gpt(rows.call("terminal", {"command": "ls"})),
        rows.gpt(rows.call("terminal", {"command": "pwd"})),
        {"from": "tool", "value": rows.response("B", "terminal", "/tmp")}, rows.gpt("done")]))
    assert trajectory.messages[3] == {"role": "tool", "tool_call_id": "B", "content": "/tmp"}
    assert trajectory.messages[1]["tool_calls"][0]["id"] == "call_1_0"  # unanswered: a generated id
    assert "late_tool_response" not in trajectory.quality_flags and "unanswered_tool_calls" in trajectory.quality_flags


def test_empty_reasoning_renders_an_empty_think_block():
    turns = render_hermes([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], None)
    assert turns[2]["value"] == "<think>\n</think>\na"
    assert "<tools>\n[]\n</tools>" in turns[0]["value"]


MARKUP_TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
# any text but the Hermes tags themselves (a literal tag in content cannot survive the markup:
# NeMo Gym rows holding one are flagged hermes_markup_in_content and kept out of Hermes exports)
any_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30).filter(
    lambda t: not any(tag in t for tag in MARKUP_TAGS))
# assistant text and reasoning are stripped by the parser (the markup puts newlines around them)
stripped = any_text.map(str.strip)
call_ids = st.lists(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12),
                    min_size=6, max_size=6, unique=True)


@st.composite
def conversations(draw):
    ids = iter(draw(call_ids))
    messages = [{"role": "user", "content": draw(any_text)}]
    for _ in range(draw(st.integers(1, 2))):  # rounds of parallel calls, each answered in order
        calls = [tool_call(next(ids), draw(st.sampled_from(["terminal", "read_file"])), {"command": draw(any_text)})
                 for _ in range(draw(st.integers(1, 3)))]
        turn = {"role": "assistant", "content": draw(stripped), "tool_calls": calls}
        reasoning = draw(stripped)
        if reasoning:
            turn["reasoning_content"] = reasoning
        messages.append(turn)
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": draw(any_text)} for c in calls]
    final = {"role": "assistant", "content": draw(stripped)}
    reasoning = draw(stripped)
    if reasoning:
        final["reasoning_content"] = reasoning
    return messages + [final]


def as_parsed(content: str) -> str:
    """JSON-looking tool content is re-serialized, as Hermes does."""
    if content.lstrip()[:1] in ("{", "["):
        try:
            return json.dumps(json.loads(content), ensure_ascii=False)
        except ValueError:
            pass
    return content


@settings(max_examples=150, deadline=None)
@given(messages=conversations())
def test_parse_of_render_gives_back_the_canonical_messages(messages):
    parsed = convert(rows.cli_row(render_hermes(messages, TOOLS)))
    expected = [{**m, "content": as_parsed(m["content"])} if m["role"] == "tool" else m for m in messages]
    assert parsed.messages == expected
    assert parsed.tools == TOOLS


@pytest.mark.parametrize(
    "content, failed",
    [("", True), ("Error: no such file", True), ('{"error": "boom"}', True), ('{"success": false}', True),
     ('{"content": {"error": "x"}}', True), ('{"error": null, "output": "ok"}', False), ("all good", False),
     ('{"content": {"text": "fine"}}', False)],
)
def test_tool_failure_rule_of_the_batch_runner(content, failed):
    assert tool_result_failed(content) is failed


# ------------------------------------------------------------------ tool results of real runs


def tool_turn(*responses):
    return {"from": "tool", "value": "\n".join(responses)}


def tool_messages(trajectory):
    return [(m["tool_call_id"], m["content"]) for m in trajectory.messages if m["role"] == "tool"]


def test_ids_reused_in_every_turn_answer_their_own_turn():
    # Qwen-family runs: the first call of every turn is "qwen_tc_0"
    conversation = [rows.SYSTEM, rows.human("check three things")]
    for n in range(3):
        conversation += [rows.gpt(rows.call("terminal", {"command": f"step {n}"})),
                         tool_turn(rows.response("qwen_tc_0", "terminal", f"out {n}"))]
    trajectory = convert(rows.cli_row(conversation + [rows.gpt("<think>\nok\n</think>\nAll done.")]))
    assert [content for _, content in tool_messages(trajectory)] == ["out 0", "out 1", "out 2"]
    assert trajectory.metadata.get("unmatched_tool_responses") is None
    assert "unanswered_tool_calls" not in trajectory.quality_flags
    assert shape_is_valid(trajectory)
    # the first call keeps the source's id; the id cannot be held twice, so later calls keep theirs
    assert [call_id for call_id, _ in tool_messages(trajectory)] == ["qwen_tc_0", "call_4_0", "call_6_0"]


def test_parallel_calls_answered_in_one_tool_turn_take_the_ids_their_responses_name():
    turn = rows.call("terminal", {"command": "ls"}) + "\n" + rows.call("read_file", {"path": "a"})
    trajectory = convert(rows.cli_row([
        rows.human("go"), rows.gpt(turn),
        tool_turn(rows.response("call_function_x9_1", "terminal", "a b"),
                  rows.response("call_function_x9_2", "read_file", "text")),
        rows.gpt("done")]))
    assert tool_messages(trajectory) == [("call_function_x9_1", "a b"), ("call_function_x9_2", "text")]
    assert [c["id"] for c in trajectory.messages[1]["tool_calls"]] == ["call_function_x9_1", "call_function_x9_2"]


@pytest.mark.parametrize("blocks", [
    # responses without a tool_call_id, and bare text in the blocks
    ['<tool_response>\n{"name": "terminal", "content": "one"}\n</tool_response>',
     '<tool_response>\n{"name": "read_file", "content": "two"}\n</tool_response>'],
    ["<tool_response>\none\n</tool_response>", "<tool_response>\ntwo\n</tool_response>"],
])
def test_responses_without_ids_answer_by_position(blocks):
    turn = rows.call("terminal", {"command": "ls"}) + "\n" + rows.call("read_file", {"path": "a"})
    trajectory = convert(rows.cli_row([rows.human("go"), rows.gpt(turn), tool_turn(*blocks), rows.gpt("done")]))
    calls = trajectory.messages[1]["tool_calls"]
    assert tool_messages(trajectory) == [(calls[0]["id"], "one"), (calls[1]["id"], "two")]
    assert trajectory.quality_flags == ["no_reasoning"]


def test_a_second_human_turn_in_the_middle_of_a_run():
    trajectory = convert(rows.cli_row([
        rows.human("first task"), rows.gpt(rows.call("terminal", {"command": "a"})),
        tool_turn(rows.response("qwen_tc_0", "terminal", "A")), rows.gpt("first done"),
        rows.human("now another"), rows.gpt(rows.call("terminal", {"command": "b"})),
        tool_turn(rows.response("qwen_tc_0", "terminal", "B")), rows.gpt("second done")]))
    assert [m["role"] for m in trajectory.messages] == [
        "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"]
    assert [content for _, content in tool_messages(trajectory)] == ["A", "B"]
    assert shape_is_valid(trajectory) and "unmatched_tool_response" not in trajectory.quality_flags


def test_a_run_whose_calls_are_never_answered():
    trajectory = convert(rows.cli_row([
        rows.human("go"), rows.gpt(rows.call("terminal", {"command": "a"})),
        rows.gpt(rows.call("terminal", {"command": "b"})), rows.gpt("gave up")]))
    assert tool_messages(trajectory) == []
    assert {"unanswered_tool_calls", "consecutive_assistant_turns"} <= set(trajectory.quality_flags)
    assert [len(m.get("tool_calls", [])) for m in trajectory.messages[1:]] == [1, 1, 0]
    assert shape_is_valid(trajectory)


id_schemes = st.sampled_from(["none", "reused", "unique", "qwen_then_unique"])


@st.composite
def hermes_runs(draw):
    """Raw Hermes runs: gpt turns with 0-3 calls, tool turns answering them (all, some, more,
    or none), ids named in any of the schemes real runs use, human turns in between."""
    scheme = draw(id_schemes)
    conversation = [rows.human("task")]
    counter = 0
    for turn in range(draw(st.integers(1, 4))):
        names = draw(st.lists(st.sampled_from(["terminal", "read_file"]), max_size=3))
        conversation.append(rows.gpt("".join(rows.call(name, {"n": turn}) for name in names) or "thinking aloud"))
        answered = draw(st.sampled_from(["all", "some", "extra", "none"])) if names else "none"
        count = {"all": len(names), "some": max(len(names) - 1, 0), "extra": len(names) + 1, "none": 0}[answered]
        responses = []
        for position in range(count):
            counter += 1
            call_id = {"none": None, "reused": f"qwen_tc_{position}", "unique": f"call_{counter}",
                       "qwen_then_unique": "qwen_tc_0" if position == 0 else f"c{counter}"}[scheme]
            name = names[position] if position < len(names) else "terminal"
            body = {"name": name, "content": f"result {counter}"}
            if call_id is not None:
                body = {"tool_call_id": call_id, **body}
            responses.append(f"<tool_response>\n{json.dumps(body)}\n</tool_response>")
        if responses:
            conversation.append(tool_turn(*responses))
        if draw(st.booleans()):
            conversation.append(rows.human("more"))
    conversation.append(rows.gpt("end"))
    return conversation


@settings(max_examples=300, deadline=None)
@given(conversation=hermes_runs())
def test_every_tool_result_is_a_tool_message_or_kept_with_a_reason(conversation):
    trajectory = convert(rows.cli_row(conversation))
    blocks = sum(turn["value"].count("<tool_response>") for turn in conversation if turn["from"] == "tool")
    kept = {key: len(trajectory.metadata.get(key, [])) for key in ("late_tool_responses", "unmatched_tool_responses")}
    assert blocks == len(tool_messages(trajectory)) + sum(kept.values())
    for key, flag in (("late_tool_responses", "late_tool_response"), ("unmatched_tool_responses",
                                                                       "unmatched_tool_response")):
        assert (kept[key] > 0) == (flag in trajectory.quality_flags)
    assert shape_is_valid(trajectory)
    # where every tool turn answers exactly the calls of the gpt turn before it (real runs),
    # every result is a tool message, whatever ids it names
    if all(turn["value"].count("<tool_response>") == previous["value"].count("<tool_call>")
           for previous, turn in zip(conversation, conversation[1:]) if turn["from"] == "tool"):
        assert sum(kept.values()) == 0


# ---------- what the batch runner and the compressor write today


def test_a_partial_run_is_flagged_and_not_completed():
    row = rows.cli_row([rows.human("q"), rows.gpt("<think>\nx\n</think>\nhalf")], completed=False, partial=True,
                       api_calls=3)
    trajectory = convert(row)
    assert trajectory.completed is False and trajectory.status == "partial"
    assert "partial_run" in trajectory.quality_flags
    assert trajectory.metadata["api_calls"] == 3  # the batch runner's fields are kept


@pytest.mark.parametrize("final, flag", [
    ("<think>\n</think>\n(empty)", "empty_final_turn"),  # hermes-agent#83869: a failed reply saved as completed
    ("<think>\n</think>\nI apologize, but I encountered repeated errors: Error during OpenAI-compatible API call #3",
     "error_in_final_turn"),
])
def test_a_failure_saved_as_completed_is_flagged(final, flag):
    trajectory = convert(rows.cli_row([rows.human("q"), rows.gpt(final)], completed=True))
    assert trajectory.completed is True  # what the producer said is kept; the flag says what it was
    assert flag in trajectory.quality_flags


def test_a_compressed_run_keeps_its_summary_as_context_and_its_metrics():
    trajectory = convert(rows.compressed_run())
    assert "compressed" in trajectory.quality_flags
    assert "context_summary_as_assistant" not in trajectory.quality_flags
    summary_index = trajectory.metadata["context_summary_messages"]
    assert [trajectory.messages[i]["content"] for i in summary_index] == [rows.SUMMARY]
    assert trajectory.metadata["compression_metrics"]["turns_removed"] == 8
    # the compressor's notice, appended to the generated tools template, is the system prompt
    assert trajectory.messages[0] == {"role": "system", "content": rows.NOTICE.strip()}
    assert [tool["function"]["name"] for tool in trajectory.tools] == ["terminal", "read_file"]


def test_a_summary_written_as_an_assistant_turn_is_flagged_apart():
    # Hermes' live context compressor puts its handoff in an assistant message when a user
    # message there would break the roles' alternation
    handoff = "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary below."
    trajectory = convert(rows.cli_row([rows.human("q"), rows.gpt("<think>\n</think>\n" + handoff),
                                       rows.human("go on"), rows.gpt("<think>\nok\n</think>\ndone")]))
    assert {"compressed", "context_summary_as_assistant"} <= set(trajectory.quality_flags)
    assert trajectory.metadata["context_summary_messages"] == [1]


def test_text_that_only_mentions_a_summary_is_not_one():
    trajectory = convert(rows.cli_row([rows.human("What does [CONTEXT SUMMARY]: mean in Hermes?"),
                                       rows.gpt("<think>\nx\n</think>\nA compressor's prefix.")]))
    assert "compressed" not in trajectory.quality_flags
