"""The OpenAI Responses API as NeMo Gym speaks it, read into canonical chats and written
from them: a request (``responses_create_params``: ``instructions``, ``input`` items,
``tools``) and the items a rollout's output holds. The NeMo Gym source reads rollouts with
:class:`ResponsesChat`; the ``grpo`` export reads its rows back with :func:`read_request`;
a source that records no request gets one from :func:`responses_request`.

The turn structure is NeMo Gym's own (``nemo_gym/responses_converter.py``; the rules, and
where we differ, are in ``sources/nemo_gym.py``): everything the model produced between two
items it did not produce is one assistant message.

>>> request = responses_request([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}], None)
>>> request
{'input': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '2+2?'}]}
>>> read_request(request)
([{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '2+2?'}], None)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trajectory_assets.chat.builder import (ChatBuilder, assistant_message, content_from_parts, image_part,
                                            paragraphs, text_part)
from trajectory_assets.chat.hermes_markup import split_inline_reasoning
from trajectory_assets.chat.token_data import TOKEN_KEYS
from trajectory_assets.chat.trajectory import Rejection
from trajectory_assets.jsonutil import dumps

TEXT_PART_TYPES = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})
# parts whose type is known: one without its payload is broken structure, not an unknown part
KNOWN_PART_TYPES = TEXT_PART_TYPES | {"refusal", "input_image"}
CONTEXT_ROLES = {"system": "system", "developer": "system", "user": "user"}


def read_request(request: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """A request (``responses_create_params``) as (canonical messages, tools), by the rules a
    rollout's input is read with (the NeMo Gym source reads its rollouts with them, the
    ``grpo`` export its rows).

    >>> read_request({"instructions": "Be brief.", "input": "2+2?"})
    ([{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '2+2?'}], None)
    """
    input_items, instructions = request_input(request)
    chat = ResponsesChat(instructions)
    chat.add_items(input_items, "responses_create_params.input")
    chat.end_turn()
    return chat.messages, convert_tools(request.get("tools"))[0]


def request_input(request: dict[str, Any]) -> tuple[list[Any], str | None]:
    """(the request's input items, its instructions)."""
    raw_input = request.get("input")
    if isinstance(raw_input, str):
        input_items: list[Any] = [{"type": "message", "role": "user", "content": raw_input}]
    elif isinstance(raw_input, list):
        input_items = raw_input
    else:
        raise Rejection("invalid_structure", "responses_create_params.input is neither a string nor a list")
    instructions = request.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise Rejection("invalid_structure", f"responses_create_params.instructions is a "
                                             f"{type(instructions).__name__}, expected str")
    return input_items, instructions


def responses_request(prompt: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A NeMo Gym ``responses_create_params`` for a chat prompt, so RL rows can come from a
    source that records none: each message's role and text; the Chat Completions tools in the
    Responses API's flat form. A prompt that replays an earlier run's turns (ATIF's copied
    context) keeps their text, not their calls and results: the request replays the context,
    not the tools.

    >>> responses_request([{"role": "user", "content": "Hi"}], [{"type": "function", "function": {"name": "f"}}])
    {'input': [{'role': 'user', 'content': 'Hi'}], 'tools': [{'type': 'function', 'name': 'f'}]}
    """
    request: dict[str, Any] = {"input": [{"role": m["role"], "content": m["content"]} for m in prompt
                                         if m["role"] != "tool"]}
    if tools:
        request["tools"] = [{"type": "function", **tool["function"]} for tool in tools]
    return request


def continues_turn(item: dict[str, Any]) -> bool:
    """Whether ``ResponsesChat._add_item`` keeps the model's turn open for this item: all but
    a message of another role and a tool or environment result (``*_output``)."""
    item_type = item.get("type")
    if item_type in (None, "message"):
        return item.get("role") == "assistant"
    return not (isinstance(item_type, str) and item_type.endswith("_output"))


def convert_tools(tools: Any) -> tuple[list[dict[str, Any]] | None, list[Any]]:
    """Responses-shape tools -> Chat Completions tools. Returns (converted, unconverted)."""
    if tools is None:
        return None, []
    if not isinstance(tools, list):
        raise Rejection("invalid_structure", "responses_create_params.tools is not a list")
    converted: list[dict[str, Any]] = []
    unconverted: list[Any] = []
    for tool in tools:
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            converted.append({"type": "function", "function": tool["function"]})
        elif isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("name"), str):
            function = {"name": tool["name"]}
            for key in ("description", "parameters", "strict"):
                if tool.get(key) is not None:
                    function[key] = tool[key]
            converted.append({"type": "function", "function": function})
        else:
            # built-in tools (web search, MCP, computer use) have no Chat Completions form
            unconverted.append(tool)
    return (converted or None), unconverted


@dataclass
class _Turn:
    """What the model produced since the last item it did not produce."""

    first_item: int  # position of its first item in the item stream
    texts: list[Any] = field(default_factory=list)  # str, or a list of parts when images are present
    reasoning: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    named: list[tuple[str, str]] = field(default_factory=list)  # (named id, message id) per call
    tokens: list[dict[str, Any]] = field(default_factory=list)


class ResponsesChat(ChatBuilder):
    """Folds a stream of Responses-API items into Chat Completions messages, NeMo Gym's way.
    ``origins`` holds, per message, the position in the item stream where it began.
    ``inline_reasoning``: a ``<think>`` block at the start of assistant text is reasoning
    (``ConversionConfig.inline_reasoning``)."""

    def __init__(self, instructions: str | None = None, *, inline_reasoning: bool = True) -> None:
        super().__init__()
        self.inline_reasoning = inline_reasoning
        self.unknown: list[dict[str, Any]] = []  # whole unknown items and content parts, with where/type
        self._turn: _Turn | None = None
        # Calls as (the id the source named, the id the message holds). Agents reuse ids
        # (the first call of every turn, or two calls of one turn): the message ids are made
        # unique, and an output naming an id answers the first open call that named it.
        self._named: set[str] = set()  # every id the source named so far
        self._open: list[tuple[str, str]] = []  # calls of the latest assistant message not answered yet
        self._unanswered: list[tuple[str, str]] = []  # every call not answered yet, oldest first
        if instructions:
            self._context("system", instructions, -1)

    def end_turn(self) -> int:
        """Close the model's turn (if one is open); returns the number of messages."""
        turn, self._turn = self._turn, None
        if turn is not None:
            texts = [text for text in turn.texts if text]
            if any(isinstance(text, list) for text in texts):
                content: Any = [part for text in texts
                                for part in (text if isinstance(text, list) else [text_part(text)])]
            else:
                content = "\n".join(texts)
            for tokens in turn.tokens:
                self.token_data.append({"message_index": len(self.messages), **tokens})
            self.append(assistant_message(content, paragraphs(turn.reasoning), turn.calls), turn.first_item)
            self._open = list(turn.named)
        return len(self.messages)

    def add_items(self, items: list[Any], where: str, *, offset: int = 0, tokens: bool = False) -> None:
        for position, item in enumerate(items):
            if not isinstance(item, dict):
                raise Rejection("invalid_structure", f"{where}[{position}] is not an object")
            self._add_item(item, f"{where}[{position}]", offset + position, tokens)

    def _add_item(self, item: dict[str, Any], where: str, index: int, tokens: bool) -> None:
        item_type = item.get("type")
        if item_type in (None, "message"):
            role = item.get("role")
            if role == "assistant":
                self._assistant_message(item, where, index)
            elif role == "tool":  # a chat-shaped tool result, as NeMo Gym accepts in input
                self._tool_output(item.get("tool_call_id"), item.get("content"), where, index)
            elif isinstance(role, str) and role in CONTEXT_ROLES:
                self._context(CONTEXT_ROLES[role], content_of(item.get("content"), where, self.unknown), index)
            else:
                raise Rejection("unknown_role", f"{where} has role {role!r}")
        elif item_type == "reasoning":
            self._model_turn(index).reasoning.append(reasoning_text(item))
        elif item_type == "function_call":
            self._call(item.get("name"), item.get("arguments"), item.get("call_id") or item.get("id"), where, index)
        elif item_type == "function_call_output":
            self._tool_output(item.get("call_id"), item.get("output"), where, index)
        else:
            self.unknown.append({"where": where, "type": item_type, "item": item})
            if isinstance(item_type, str) and item_type.endswith("_output"):
                self.end_turn()  # an environment result (computer_call_output, ...) ends the turn
            return
        if tokens and item_type != "function_call_output" and item.get("role") in (None, "assistant"):
            self._tokens(item, where, index)

    def _model_turn(self, index: int) -> _Turn:
        if self._turn is None:
            self._turn = _Turn(first_item=index)
        return self._turn

    def _assistant_message(self, item: dict[str, Any], where: str, index: int) -> None:
        content = content_of(item.get("content"), where, self.unknown)
        turn = self._model_turn(index)
        if isinstance(content, str) and self.inline_reasoning:
            reasoning, content = split_inline_reasoning(content)
            if reasoning is not None:
                turn.reasoning.append(reasoning)
        turn.texts.append(content)
        calls = item.get("tool_calls")  # chat-shaped turns carry their calls inline
        if calls is not None:
            if not isinstance(calls, list):
                raise Rejection("invalid_structure", f"{where}.tool_calls is not a list")
            for number, call in enumerate(calls):
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict):
                    raise Rejection("invalid_structure", f"{where}.tool_calls[{number}] has no function")
                self._call(function.get("name"), function.get("arguments"), call.get("id"),
                           f"{where}.tool_calls[{number}]", index)

    def _call(self, name: Any, arguments: Any, call_id: Any, where: str, index: int) -> None:
        if not isinstance(name, str) or not name:
            raise Rejection("invalid_structure", f"{where} is a function call without a name")
        if call_id is not None and not isinstance(call_id, str):
            raise Rejection("invalid_structure", f"{where} has a non-string call id")
        named = call_id or f"call_{len(self._named)}"  # a call naming no id is answered in order
        message_id = self.unique_call_id(named)
        turn = self._model_turn(index)
        turn.calls.append(self.function_call(message_id, name, "{}" if arguments is None else arguments))
        turn.named.append((named, message_id))
        self._named.add(named)
        self._unanswered.append((named, message_id))

    def _tool_output(self, call_id: Any, output: Any, where: str, index: int) -> None:
        self.end_turn()
        if call_id is None:  # no id given: it answers the turn's calls in order
            pending = self._open or self._unanswered
            call_id = pending[0][0] if pending else None
        if call_id not in self._named:
            raise Rejection("orphan_tool_output", f"{where} answers call {call_id!r}, which was never made")
        if isinstance(output, (dict, int, float, bool)):
            content: Any = dumps(output).decode()
        else:
            content = content_of(output, where, self.unknown)
        call = next((c for c in self._open if c[0] == call_id), None)
        if call is not None:
            self._open.remove(call)
            self._unanswered.remove(call)
            self.append({"role": "tool", "tool_call_id": call[1], "content": content}, index)
            return
        call = next((c for c in self._unanswered if c[0] == call_id), None)
        if call is not None:
            # the model went on without this result: a tool message here would claim it saw it
            self._unanswered.remove(call)
            self.keep("late_tool_response", "late_tool_responses",
                      {"where": where, "tool_call_id": call[1], "content": content})
        else:
            self.keep("unmatched_tool_response", "unmatched_tool_responses",
                      {"where": where, "tool_call_id": call_id, "content": content})

    def _context(self, role: str, content: Any, index: int) -> None:
        self.end_turn()
        self._open = []
        if role != "system":
            self.append({"role": role, "content": content}, index)
            return
        text = content if isinstance(content, str) else _text_only(content)
        if not self.add_system(text, index):  # several leading system/developer messages merge into one
            raise Rejection("misplaced_system_message", "a system/developer message follows other turns")

    def _tokens(self, item: dict[str, Any], where: str, index: int) -> None:
        if not any(key in item for key in TOKEN_KEYS) or not item.get("generation_token_ids"):
            return  # no token data, or an empty generation: nothing to train on (NeMo RL skips it)
        call = self.checked_tokens(where, *(item.get(key) for key in TOKEN_KEYS))
        if call is not None:
            self._model_turn(index).tokens.append(call)


def content_of(value: Any, where: str, unknown: list[dict[str, Any]] | None = None) -> Any:
    """Responses content (string or parts) -> Chat content: a string, or a list of parts
    when images are present (text parts are joined with newlines).

    A part of an unknown type is left out and kept whole in ``unknown`` (rejected when no
    list is given)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise Rejection("invalid_structure", f"{where}.content is neither a string nor a list")
    parts: list[dict[str, Any]] = []
    for position, part in enumerate(value):
        if isinstance(part, str):
            parts.append(text_part(part))
            continue
        if not isinstance(part, dict):
            raise Rejection("invalid_structure", f"{where}.content holds a {type(part).__name__}")
        part_type = part.get("type")
        if part_type in TEXT_PART_TYPES and isinstance(part.get("text"), str):
            parts.append(text_part(part["text"]))
        elif part_type == "refusal" and isinstance(part.get("refusal"), str):
            parts.append(text_part(part["refusal"]))
        elif part_type == "input_image":
            url = part.get("image_url") or part.get("file_id") or ""
            parts.append(image_part(url))
        elif part_type in KNOWN_PART_TYPES or unknown is None:
            raise Rejection("invalid_structure", f"{where}.content has an unsupported part {part_type!r}")
        else:
            unknown.append({"where": f"{where}.content[{position}]", "type": part_type, "part": part})
    return content_from_parts(parts)


def reasoning_text(item: dict[str, Any]) -> str:
    """Readable reasoning of a ``reasoning`` item: its summary, else its content."""
    for key in ("summary", "content"):
        pieces = item.get(key)
        if isinstance(pieces, list):
            texts = [p["text"] for p in pieces if isinstance(p, dict) and isinstance(p.get("text"), str)]
            if any(texts):
                return "\n\n".join(t for t in texts if t)
    return ""


def _text_only(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
    return str(content)
