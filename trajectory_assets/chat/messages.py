"""Rules over canonical chat messages (OpenAI Chat Completions shape).

A canonical message is a dict with ``role`` in system/user/assistant/tool and ``content``
(a string, or a list of content parts when images are present). Assistant messages may
carry ``tool_calls`` (``{id, type: "function", function: {name, arguments: str}}``) and
``reasoning_content``; tool messages carry ``tool_call_id``.

The *role shape* (``schemas.shapes.role_shape``) is a one-letter-per-message string that
lets the Pandera contracts check the seed's role rules with one vectorized regex.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from trajectory_assets.jsonutil import canonical, sha256_hex


def prompt_key(prompt: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The identity of a prompt by its content (SHA-256 of canonical JSON of the prompt
    messages and tools): the same in every file, process and machine."""
    return sha256_hex(canonical(["prompt", prompt, tools]))[:24]


def count_assistant_turns(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant")


def count_tool_calls(messages: list[dict[str, Any]]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")


def unanswered_tool_calls(messages: list[dict[str, Any]]) -> int:
    """Calls that no tool message answers (a truncated or abandoned turn)."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    return sum(
        1
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
        if call.get("id") not in answered
    )


def divergence_point(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> int:
    """Length of the shared context of two conversations, ending where both continue
    with an assistant turn (so DPO's chosen/rejected each start with the assistant).

    Returns 0 when no such point exists.
    """
    shared = 0
    for a, b in zip(first, second):
        if a != b:
            break
        shared += 1
    while shared > 0:
        continues_with_assistant = (
            shared < len(first)
            and shared < len(second)
            and first[shared].get("role") == "assistant"
            and second[shared].get("role") == "assistant"
        )
        if continues_with_assistant:
            return shared
        shared -= 1
    return 0


def tool_result_failed(content: str) -> bool:
    """A failed tool call, by the Hermes batch runner's rule (FORMATS.md, batch-runner
    statistics): a JSON result with a non-null ``error``, a nested ``content.error`` or
    ``success: false``, or a text that is empty or starts with ``error:``. Applied to both
    source formats, so the tool-error rate means the same thing everywhere."""
    text = content.strip()
    if not text or text.lower().startswith("error:"):
        return True
    result = None
    if text[:1] in "{[":
        try:
            result = orjson.loads(text)  # the same value where it reads the text, several times faster
        except orjson.JSONDecodeError:  # NaN, Infinity, integers past 64 bits: the standard library's
            try:
                result = json.loads(text)
            except ValueError:
                return False
    if isinstance(result, dict):
        if result.get("error") is not None or result.get("success") is False:
            return True
        nested = result.get("content")
        return isinstance(nested, dict) and nested.get("error") is not None
    return False


def tool_result_counts(messages: list[dict[str, Any]]) -> tuple[int, int]:
    """(tool results, failed tool results) of a conversation; non-text results are not judged."""
    results = errors = 0
    for message in messages:
        if message.get("role") == "tool":
            results += 1
            content = message.get("content")
            errors += isinstance(content, str) and tool_result_failed(content)
    return results, errors


def tool_use(messages: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Per tool name, ``[calls, failed results]`` of a conversation: each call counted under
    its function's name, each failed text result (:func:`tool_result_failed`) under the name
    of the call its ``tool_call_id`` answers, or ``"?"`` when no call has that id (or a call
    has no name: ingest counts every conversation, and must not fail on one).

    >>> call = {"id": "c", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    >>> tool_use([{"role": "assistant", "content": "", "tool_calls": [call, {"id": "d", "function": {}}]},
    ...           {"role": "tool", "tool_call_id": "c", "content": "error: timeout"},
    ...           {"role": "tool", "tool_call_id": "x", "content": ""}])
    {'search': [1, 1], '?': [1, 1]}
    """
    used: dict[str, list[int]] = {}
    names: dict[Any, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            name = name if isinstance(name, str) else "?"
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                names[call["id"]] = name
            used.setdefault(name, [0, 0])[0] += 1
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, str) and tool_result_failed(content):
            call_id = message.get("tool_call_id")
            used.setdefault(names.get(call_id, "?") if isinstance(call_id, str) else "?", [0, 0])[1] += 1
    return used


def results_in_call_order(messages: list[dict[str, Any]]) -> bool:
    """Whether the tool messages after each assistant turn answer its calls in the order it
    made them. Formats without call ids (ShareGPT: Hermes, LLaMA-Factory) pair results with
    calls by position, so only such a conversation keeps its pairing there.

    >>> call = lambda i: {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    >>> turn = {"role": "assistant", "content": "", "tool_calls": [call("a"), call("b")]}
    >>> results_in_call_order([turn, {"role": "tool", "tool_call_id": "b"}, {"role": "tool", "tool_call_id": "a"}])
    False
    """
    expected: list[Any] = []
    for message in messages:
        if message.get("role") == "assistant":
            expected = [call.get("id") for call in message.get("tool_calls") or []]
        elif message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if call_id in expected:
                if expected[0] != call_id:
                    return False
                expected.pop(0)
    return True



# How a harness's summary of the turns it compressed begins. Hermes Agent's
# trajectory_compressor.py writes one human turn starting "[CONTEXT SUMMARY]:" (it adds the
# prefix when the summarizer left it out); its live context compressor wrote that too, and now
# writes "[CONTEXT COMPACTION — REFERENCE ONLY] ..." as a user or, where alternation needs it, an
# assistant message, or merges the summary into the next message after a "[PRIOR CONTEXT ..."
# header; when no user turn was left it adds a user turn "Continue from the compressed
# conversation context above." (agent/context_compressor.py). Every one is the summarizer's or
# the harness's words, never the user's or the policy's.
CONTEXT_SUMMARY_PREFIXES = ("[CONTEXT SUMMARY]:", "[CONTEXT COMPACTION", "[PRIOR CONTEXT — for reference only",
                            "Continue from the compressed conversation context above.")


def is_context_summary(message: dict[str, Any]) -> bool:
    """Whether a user or assistant message is a harness's summary of earlier turns (or the
    turn it adds after one).

    >>> is_context_summary({"role": "user", "content": "[CONTEXT SUMMARY]: The agent listed /tmp."})
    True
    >>> is_context_summary({"role": "assistant", "content": "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier ..."})
    True
    >>> is_context_summary({"role": "tool", "content": "[CONTEXT SUMMARY]: quoted by a tool"})
    False
    >>> is_context_summary({"role": "user", "content": "Summarize: [CONTEXT SUMMARY]: is a prefix"})
    False
    """
    content = message.get("content")
    return (message.get("role") in ("user", "assistant") and isinstance(content, str)
            and content.lstrip().startswith(CONTEXT_SUMMARY_PREFIXES))
