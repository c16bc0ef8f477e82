"""Hermes Agent ShareGPT trajectories -> canonical trajectories.

Hermes writes ``{"conversations": [{"from", "value"}, ...]}`` rows (CLI files and the batch
runner's ``batch_N.jsonl``) whose gpt turns carry ``<think>``, ``<tool_call>{json}``
markup and whose tool turns carry ``<tool_response>{json}`` blocks. :func:`convert_hermes`
reads the markup (``chat.hermes_markup``, which the ``sft_hermes`` export writes with) and
adds what a run's record says about it.

Quality problems seen in real files are flagged, never fatal (``QUALITY_FLAGS``).

How ``<tool_response>`` blocks are matched to ``<tool_call>`` blocks, and where a matched
response goes (late and unmatched ones are kept in metadata, flagged), is the Hermes
markup's rule: ``chat/hermes_markup.py``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from trajectory_assets.chat.hermes_markup import read_hermes_chat
from trajectory_assets.chat.messages import is_context_summary, prompt_key, unanswered_tool_calls
from trajectory_assets.chat.responses import responses_request
from trajectory_assets.chat.trajectory import Rejection, Trajectory
from trajectory_assets.io.file_layouts import SideFile
from trajectory_assets.sources.format import SourceFormat

SOURCE_FORMAT = "hermes"
QUALITY_FLAGS = (
    "unbalanced_think_tags",  # a <think> without </think> or a stray </think> in visible text
    "consecutive_assistant_turns",  # gpt -> gpt with no tool result or user turn between
    "unanswered_tool_calls",  # a <tool_call> no <tool_response> answers
    "repeated_first_user_turn",  # the first human turn appears again
    "no_reasoning",  # no gpt turn has any reasoning
    "error_in_final_turn",  # the run says completed, the final turn holds an error message
    "empty_final_turn",  # the run says completed, the final turn is Hermes' "(empty)" (hermes-agent#83869)
    "partial_run",  # the batch runner's partial: true, a run stopped on an error path
    "compressed",  # a compressor replaced turns with a summary (chat/messages.py is_context_summary)
    "context_summary_as_assistant",  # ... written as an assistant turn: not the policy's words
    "unparseable_tool_call",  # a <tool_call> whose JSON does not parse
    "late_tool_response",  # a <tool_response> answering a call of an earlier gpt turn (kept in metadata)
    "unmatched_tool_response",  # a <tool_response> answering no call (kept in metadata)
)

# what an API failure looks like when an agent wrote it into its final turn; the last two are
# the texts Hermes' own conversation loop answers with after repeated errors
ERROR_TEXT = re.compile(
    r"(?i)^\s*(?:error|api error)\b|error code:\s*\d|traceback \(most recent call last\)|"
    r"rate limit(?:ed| exceeded)|internal server error|\bapi(?:connection|status)?error\b|"
    r"^i apologize, but i encountered (?:repeated errors|an error while processing the model response)"
)
# the final turn Hermes saves when the model's reply never came (its retries ended empty)
EMPTY_REPLY = "(empty)"


def looks_like_hermes(record: dict[str, Any]) -> bool:
    return "conversations" in record or ("prompt_index" in record and ("discarded" in record or "failed" in record))


def convert_hermes(record: dict[str, Any], *, source_id: str, **_: Any) -> Trajectory:
    """Convert one parsed Hermes Agent trajectory (a batch runner's line)."""
    if "discarded" in record:
        raise Rejection("hermes_discarded", f"the batch runner discarded prompt {record.get('prompt_index')!r} "
                                            f"({record['discarded']})")
    if record.get("failed") is True:
        raise Rejection("hermes_failed", f"the batch runner marked prompt {record.get('prompt_index')!r} as failed")
    conversations = record.get("conversations")
    if not isinstance(conversations, list):
        raise Rejection("invalid_structure", "conversations is not a list")

    chat = read_hermes_chat(conversations)
    messages = chat.messages
    users = [m for m in messages if m["role"] == "user"]
    if not users:
        raise Rejection("no_prompt", "the conversation holds no human turn")
    prompt_length = messages.index(users[0]) + 1
    if not any(m["role"] == "assistant" for m in messages[prompt_length:]):
        raise Rejection("no_model_output", "the conversation holds no gpt turn after the first human turn")

    partial = record.get("partial") is True  # set only on the agent loop's error returns
    completed = record.get("completed") is not False and not partial
    flags = chat.flags | _conversation_flags(messages, completed)
    if partial:
        flags.add("partial_run")
    prompt = messages[:prompt_length]
    tools = chat.tools
    metadata = {key: value for key, value in record.items() if key not in ("conversations", "model", "completed")}
    metadata.update(chat.kept)
    summaries = [index for index, message in enumerate(messages) if is_context_summary(message)]
    if summaries:
        # the summarizer's words, not the user's: kept as context, never a prompt or a target
        # (compression_metrics, when the compressor wrote it, stays in the metadata too)
        flags.add("compressed")
        metadata["context_summary_messages"] = summaries
        if any(messages[index]["role"] == "assistant" for index in summaries):
            flags.add("context_summary_as_assistant")
    return Trajectory(
        source_format=SOURCE_FORMAT,
        messages=messages,
        prompt_length=prompt_length,
        task_key=prompt_key(prompt, tools),  # no task index: the task is the prompt's content
        tools=tools,
        reward=_supplied_reward(record),
        model=record["model"] if isinstance(record.get("model"), str) and record["model"] else None,
        task_type=_task_type(record),
        completed=completed,
        status="partial" if partial else (None if completed else "incomplete"),
        request=responses_request(prompt, tools),
        quality_flags=sorted(flags),
        metadata=metadata,
    )


def _conversation_flags(messages: list[dict[str, Any]], completed: bool) -> set[str]:
    flags = set()
    roles = [m["role"] for m in messages]
    if any(a == b == "assistant" for a, b in zip(roles, roles[1:])):
        flags.add("consecutive_assistant_turns")
    if unanswered_tool_calls(messages):
        flags.add("unanswered_tool_calls")
    users = [m["content"] for m in messages if m["role"] == "user"]
    if users and users.count(users[0]) > 1:
        flags.add("repeated_first_user_turn")
    if not any(m.get("reasoning_content") for m in messages if m["role"] == "assistant"):
        flags.add("no_reasoning")
    final = messages[-1].get("content")
    if completed and isinstance(final, str) and ERROR_TEXT.search(final):
        flags.add("error_in_final_turn")
    if completed and messages[-1]["role"] == "assistant" and isinstance(final, str) and final.strip() == EMPTY_REPLY:
        flags.add("empty_final_turn")
    return flags


def _supplied_reward(record: dict[str, Any]) -> float | None:
    """Hermes rows carry no reward; one supplied in ``metadata.reward`` (or ``reward``) is used."""
    metadata = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
    for value in (metadata.get("reward"), record.get("reward")):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def _task_type(record: dict[str, Any]) -> str | None:
    metadata = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
    value = metadata.get("task_type") or metadata.get("prompt_source")
    return value if isinstance(value, str) and value else None


FORMAT = SourceFormat(
    name=SOURCE_FORMAT,
    shape="a Hermes trajectory (conversations)",
    detect=looks_like_hermes,
    convert=convert_hermes,
    # a Hermes agent is no NeMo Gym agent server: its tasks go to the one the config names
    agent_ref_setting="hermes_agent_ref",
    # reasoning coverage, quality flags and tool use by the batch runner's failure rule
    report_section="Hermes",
    # agent/trajectory.py writes each trajectory's exploration tree (no conversation in it) to
    # ``Path(file).with_name(f"{path.stem}.exploration.jsonl")``: <stem>.exploration.jsonl beside
    # <stem>.jsonl, <stem>.jsonl.exploration.jsonl beside the gzip files newer versions write by
    # default (a Path's stem drops only ".gz"); without a file name, exploration_trees.jsonl /
    # failed_exploration_trees.jsonl beside trajectory_samples / failed_trajectories
    side_files=(SideFile("{stem}.exploration.jsonl"), SideFile("{stem}.jsonl.exploration.jsonl"),
                SideFile("exploration_trees.jsonl", ("trajectory_samples",)),
                SideFile("failed_exploration_trees.jsonl", ("failed_trajectories",))),
)
