"""An independent reading of the export spec, used to check every written line.

Deliberately does not reuse the pipeline's own role-shape code: it re-derives the rules
from the issue / seed text so a bug there cannot hide itself.
"""

from __future__ import annotations

import json
from typing import Any

MESSAGE_KEYS = {
    "system": {"role", "content"},
    "user": {"role", "content"},
    "assistant": {"role", "content", "tool_calls", "reasoning_content"},
    "tool": {"role", "content", "tool_call_id"},
}


def check_messages(messages: list[dict[str, Any]], *, need_assistant: bool = True) -> None:
    assert isinstance(messages, list) and messages, "messages must be a non-empty list"
    open_calls: set[str] = set()
    previous = None
    for position, message in enumerate(messages):
        role = message.get("role")
        assert role in MESSAGE_KEYS, f"unknown role {role!r}"
        assert set(message) <= MESSAGE_KEYS[role], f"unexpected keys {set(message) - MESSAGE_KEYS[role]}"
        assert "type" not in message, "a raw Responses item leaked into messages"
        content = message.get("content")
        assert isinstance(content, (str, list)), "content is a string or a list of parts"
        if role == "system":
            assert position == 0, "system must be first"
        if role == "assistant":
            open_calls = set()
            for call in message.get("tool_calls", []):
                assert call["type"] == "function" and set(call) == {"id", "type", "function"}
                assert isinstance(call["function"]["name"], str) and call["function"]["name"]
                assert isinstance(call["function"]["arguments"], str), "arguments are a JSON string"
                open_calls.add(call["id"])
            if "reasoning_content" in message:
                assert isinstance(message["reasoning_content"], str)
        if role == "tool":
            assert previous in ("assistant", "tool"), "a tool message follows the assistant call"
            assert message["tool_call_id"] in open_calls, "the tool message answers an open call"
            open_calls.discard(message["tool_call_id"])
        if role == "user":
            open_calls = set()
        previous = role
    if need_assistant:
        assert any(m["role"] == "assistant" for m in messages), "at least one assistant turn"


def check_sft_line(line: str) -> dict[str, Any]:
    row = json.loads(line)
    assert set(row) <= {"messages", "tools", "reward", "task_type", "trajectory_id", "task_key"}
    check_messages(row["messages"])
    for tool in row.get("tools", []):
        assert tool["type"] == "function" and isinstance(tool["function"]["name"], str)
    assert isinstance(row["trajectory_id"], str)
    return row


def check_dpo_line(line: str, min_margin: float = 0.1) -> dict[str, Any]:
    row = json.loads(line)
    for key in ("prompt", "chosen", "rejected", "quality_difference", "reward_chosen", "reward_rejected",
                "chosen_id", "rejected_id"):
        assert key in row, f"missing {key}"
    assert row["chosen"][0]["role"] == "assistant" and row["rejected"][0]["role"] == "assistant"
    assert any(m["role"] == "user" for m in row["prompt"])
    check_messages(row["prompt"] + row["chosen"])
    check_messages(row["prompt"] + row["rejected"])
    assert row["reward_chosen"] > row["reward_rejected"]
    assert abs(row["quality_difference"] - (row["reward_chosen"] - row["reward_rejected"])) < 1e-9
    assert row["quality_difference"] >= min_margin
    assert row["chosen_id"] != row["rejected_id"]
    return row


def check_grpo_line(line: str) -> dict[str, Any]:
    row = json.loads(line)
    params = row["responses_create_params"]
    assert isinstance(params, dict) and params.get("input"), "an RL row needs its input"
    assert isinstance(row["agent_ref"], dict) and row["agent_ref"]["name"]
    return row


def check_sft_hermes_line(line: str) -> dict[str, Any]:
    """The seed's Hermes normalization: generated system prompt with a <tools> block first,
    a <think> block on every gpt turn, tool results as <tool_response> JSON blocks."""
    row = json.loads(line)
    turns = row["conversations"]
    assert turns[0]["from"] == "system" and "<tools>\n[" in turns[0]["value"]
    assert {t["from"] for t in turns} <= {"system", "human", "gpt", "tool"}
    for previous, turn in zip(turns, turns[1:]):
        if turn["from"] == "gpt":
            assert turn["value"].startswith("<think>\n") and "</think>\n" in turn["value"]
        if turn["from"] == "tool":
            assert previous["from"] == "gpt" and "<tool_call>" in previous["value"]
            for block in turn["value"].split("</tool_response>")[:-1]:
                response = json.loads(block.split("<tool_response>\n", 1)[1])
                assert set(response) == {"tool_call_id", "name", "content"}
    assert any(t["from"] == "gpt" for t in turns)
    return row


CHECKERS = {"sft": check_sft_line, "dpo": check_dpo_line, "grpo": check_grpo_line, "sft_hermes": check_sft_hermes_line}
