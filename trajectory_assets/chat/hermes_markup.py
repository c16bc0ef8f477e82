"""The Hermes markup, read and written: ShareGPT turns (``{"from", "value"}``) whose gpt turns
carry ``<think>`` and ``<tool_call>{json}`` blocks, whose tool turns carry
``<tool_response>{json}`` blocks, and whose system turn carries the function-calling prompt
with the tools in a ``<tools>`` block (the Hermes seed; Hermes Agent's ``agent/trajectory.py``
writes it). The Hermes source reads its files with :func:`read_hermes_chat`; the
``sft_hermes`` export writes with :func:`write_conversation` and reads its rows back with
:func:`read_conversations`, so both sides apply the same rules. Reading what was written
gives the same messages, tool call ids included.

Other sources ask :func:`has_hermes_markup` whether a text holds a literal Hermes tag
(``HERMES_MARKUP_FLAG``: rendered, it would read back as structure the model never made),
and read an inline ``<think>`` block with :func:`split_inline_reasoning`.

Matching ``<tool_response>`` blocks to ``<tool_call>`` blocks. The seed's markup gives a
call no id (a call JSON that carries an ``id`` keeps it); a response names a
``tool_call_id``. Real runs reuse ids: Qwen-family models write ``qwen_tc_0`` for the first
call of *every* turn, and in every such file a tool turn answers the calls of the gpt turn
right before it, in order. So the responses of one tool turn are matched:

1. by id, only when the response names an open call of the gpt turn right before, whose
   id the source gave (an id named in an earlier turn says nothing about this one);
2. by position otherwise, when the rest of the responses and the open calls of that turn
   are as many: Hermes writes them in call order (and names each response after the call
   in its place);
3. by name, when they are fewer (some calls went unanswered) or name the turn's calls in
   another order: a response goes to the first open call of its name, one without a known
   name to the first open call left;
4. when they are more, they answer the last unanswered calls of the conversation in order
   (so gpt(call A) -> gpt(call B) -> tool(A, B) pairs A with A).

A call matched by position or name takes the response's ``tool_call_id`` as its id unless
another call already holds it; a call that no response answers keeps a generated id
``call_<turn>_<n>``.

Where a matched response goes:

- answering a call of the latest gpt turn: its own ``tool`` message, right after that
  turn's calls (the canonical role rules, ``schemas.shapes.ROLE_SHAPE_PATTERN``);
- answering a call of an earlier gpt turn (the model went on without the result): a tool
  message there would break the role rules and moving it would claim the model saw a
  result it did not, so it is kept in ``metadata["late_tool_responses"]`` (``turn``,
  ``tool_call_id``, ``content``), the call stays unanswered and the record is flagged
  ``late_tool_response``;
- matching no call at all (more responses than unanswered calls, a tool turn before any
  call): kept in
  ``metadata["unmatched_tool_responses"]`` (``turn``, ``raw`` text) and flagged
  ``unmatched_tool_response``. The record stays valid.

>>> turns = write_conversation([{"role": "user", "content": "Hi"},
...                             {"role": "assistant", "content": "Hello", "reasoning_content": "greet"}],
...                            function_calling_prompt(None))
>>> turns[1:]
[{'from': 'human', 'value': 'Hi'}, {'from': 'gpt', 'value': '<think>\\ngreet\\n</think>\\nHello'}]
>>> read_conversations(turns)
([{'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello', 'reasoning_content': 'greet'}], None)
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from trajectory_assets.chat.builder import ChatBuilder, assistant_message, paragraphs
from trajectory_assets.chat.trajectory import Rejection

FROM_ROLE = {"system": "system", "human": "user", "gpt": "assistant", "tool": "tool"}
# literal <think>/<tool_call>/<tool_response> tags in the text: a Hermes rendering of it
# would parse back into calls the model never made
HERMES_MARKUP_FLAG = "hermes_markup_in_content"
HERMES_TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
# any of them, found in one pass over a text (six substring searches took twice as long)
HERMES_TAG = re.compile("|".join(map(re.escape, HERMES_TAGS)))
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

# The Hermes function-calling system prompt (seed doc, "Complete Example"); {tools} is the
# JSON list of {name, description, parameters, required: null}.
SYSTEM_TEMPLATE = (
    "You are a function calling AI model. You are provided with function signatures within <tools> </tools> "
    "XML tags. You may call one or more functions to assist with the user query. If available tools are not "
    "relevant in assisting with user query, just respond in natural conversational language. Don't make "
    "assumptions about what values to plug into functions. After calling & executing the functions, you will "
    "be provided with function results within <tool_response> </tool_response> XML tags. Here are the "
    "available tools:\n<tools>\n{tools}\n</tools>\nFor each function call return a JSON object, with the "
    "following pydantic model json schema for each:\n{{'title': 'FunctionCall', 'type': 'object', "
    "'properties': {{'name': {{'title': 'Name', 'type': 'string'}}, 'arguments': {{'title': 'Arguments', "
    "'type': 'object'}}}}, 'required': ['name', 'arguments']}}\nEach function call should be enclosed within "
    "<tool_call> </tool_call> XML tags.\nExample:\n<tool_call>\n{{'name': <function-name>,'arguments': "
    "<args-dict>}}\n</tool_call>"
)
TEMPLATE_START = "You are a function calling AI model."
TEMPLATE_END = "<args-dict>}\n</tool_call>"  # how the template ends, once formatted

# the template itself mentions "<tools> </tools>": the block is the one holding a JSON list
TOOLS_BLOCK = re.compile(r"<tools>\s*(\[.*?\])\s*</tools>", re.S)
THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.S)
TOOL_CALL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
TOOL_RESPONSE_BLOCK = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.S)
CALL_NAME = re.compile(r"""["']name["']\s*:\s*["']([^"']+)["']""")


# ---------------------------------------------------------------- reading


def read_conversations(conversations: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """ShareGPT turns in Hermes markup -> (canonical messages, tools), by the rules the
    source applies (the ``sft_hermes`` export reads its rows back with them). Raises
    :class:`Rejection` for turns the rules refuse.

    >>> read_conversations([{"from": "human", "value": "Hi"},
    ...                     {"from": "gpt", "value": "<think>greet</think>Hello"}])
    ([{'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello', 'reasoning_content': 'greet'}], None)
    """
    chat = read_hermes_chat(conversations)
    return chat.messages, chat.tools


def read_hermes_chat(conversations: list[Any]) -> HermesChat:
    """ShareGPT turns in Hermes markup -> the chat they hold, with its flags and kept responses."""
    chat = HermesChat()
    for position, turn in enumerate(conversations):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise Rejection("invalid_structure", f"conversations[{position}] is not a {{from, value}} object")
        role = FROM_ROLE.get(turn.get("from"))
        if role is None:
            raise Rejection("unknown_role", f"conversations[{position}] is from {turn.get('from')!r}")
        chat.add(role, turn["value"], position)
    return chat


class _Call:
    """A parsed ``<tool_call>`` and what the matching knows about it."""

    def __init__(self, call: dict[str, Any], generated_id: bool) -> None:
        self.call = call  # the canonical entry inside the assistant message
        self.generated_id = generated_id  # True until a response (or the markup) names its id
        self.open = True  # no response matched yet

    @property
    def id(self) -> str:
        return self.call["id"]

    @property
    def name(self) -> str:
        return self.call["function"]["name"]


class _Response:
    def __init__(self, block: str) -> None:
        self.raw = block
        response = _json_or_none(block)
        if isinstance(response, dict) and "content" in response:
            named_id, name, content = response.get("tool_call_id"), response.get("name"), response["content"]
        else:
            named_id, name, content = None, None, block
        self.named_id = named_id if isinstance(named_id, str) and named_id else None
        self.name = name if isinstance(name, str) and name else None
        self.content = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


class HermesChat(ChatBuilder):
    """The chat ShareGPT turns in Hermes markup read as: messages, tools, the quality flags
    the markup gave and the responses kept in metadata (late / unmatched)."""

    def __init__(self) -> None:
        super().__init__()
        self.tools: list[dict[str, Any]] | None = None
        self._calls: list[_Call] = []  # every call of the conversation, in order
        self._latest: list[_Call] = []  # calls of the latest gpt turn, while tool turns may follow it

    def add(self, role: str, value: str, position: int) -> None:
        if role == "system":
            self._system(value)
        elif role == "user":
            self._latest = []
            self.append({"role": "user", "content": value})
        elif role == "assistant":
            self._assistant(value, position)
        else:
            self._tool(value, position)

    def _system(self, value: str) -> None:
        block = TOOLS_BLOCK.search(value)
        if block:
            try:
                self.tools = [_chat_tool(tool) for tool in json.loads(block.group(1))] or None
            except (ValueError, TypeError, AttributeError):
                raise Rejection("invalid_structure", "the <tools> block of the system prompt is not a JSON list "
                                                     "of tools") from None
        # the generated function-calling template carries nothing but the tools; text an
        # agent put before it is its own system prompt, and so is text after it (the notice
        # trajectory_compressor.py appends to a compressed run's system turn)
        start = value.find(TEMPLATE_START) if block else -1
        if start >= 0:
            end = value.find(TEMPLATE_END, start)
            after = value[end + len(TEMPLATE_END):] if end >= 0 else ""
            text = (value[:start].strip() + "\n\n" + after.strip()).strip()
        else:
            text = TOOLS_BLOCK.sub("", value).strip()
        if text:
            if self.messages:
                raise Rejection("misplaced_system_message", "a system turn follows other turns")
            self.append({"role": "system", "content": text})

    def _assistant(self, value: str, position: int) -> None:
        reasoning_parts = [part.strip() for part in THINK_BLOCK.findall(value)]
        visible = THINK_BLOCK.sub("", value)
        if "<think>" in visible:  # opened, never closed: the rest of the turn is reasoning
            self.flags.add("unbalanced_think_tags")
            visible, _, unclosed = visible.partition("<think>")
            reasoning_parts.append(unclosed.strip())
        if "</think>" in visible:  # stray closing tag in visible text
            self.flags.add("unbalanced_think_tags")
            visible = visible.replace("</think>", "")
        calls = [self._call(raw_call, position, number)
                 for number, raw_call in enumerate(TOOL_CALL_BLOCK.findall(visible))]
        self.append(assistant_message(TOOL_CALL_BLOCK.sub("", visible).strip(), paragraphs(reasoning_parts),
                                      [call.call for call in calls]))
        self._latest = calls

    def _call(self, raw: str, position: int, number: int) -> _Call:
        own_id = None
        try:
            call = json.loads(raw)
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise ValueError("not a {name, arguments} object")
            arguments = call.get("arguments", {})
            arguments = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
            name = call["name"]
            if isinstance(call.get("id"), str) and call["id"] and not self._holder(call["id"]):
                own_id = call["id"]
        except ValueError:
            # kept, with its raw text as the arguments, so nothing is lost; flagged for filters
            self.flags.add("unparseable_tool_call")
            found = CALL_NAME.search(raw)
            name, arguments = (found.group(1) if found else "unknown"), raw
        call_id = own_id or self._fresh_id(f"call_{position}_{number}")
        entry = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        parsed = _Call(entry, generated_id=own_id is None)
        self._calls.append(parsed)
        return parsed

    def _holder(self, call_id: str) -> _Call | None:
        return next((c for c in self._calls if c.id == call_id), None)

    def _fresh_id(self, base: str) -> str:
        call_id, suffix = base, 0
        while self._holder(call_id) is not None:
            suffix += 1
            call_id = f"{base}_{suffix}"
        return call_id

    def _adopt(self, call: _Call, named_id: str) -> None:
        """A call matched by position takes the id its response names, when it can."""
        if not call.generated_id or call.id == named_id:
            return
        holder = self._holder(named_id)
        if holder is not None:
            if not (holder.generated_id and holder.open):
                return  # the id is taken for good: keep the generated one
            holder.call["id"] = self._fresh_id(f"{named_id}_")  # a generated id steps aside
        call.call["id"] = named_id
        call.generated_id = False

    def _tool(self, value: str, position: int) -> None:
        responses = [_Response(block) for block in TOOL_RESPONSE_BLOCK.findall(value) or [value]]
        matched: dict[int, _Call | None] = {}
        latest = [c for c in self._latest if c.open]
        # 1. by id, only when it names an open call of the gpt turn right before whose id
        #    the source gave (in the call's JSON): Qwen-family runs name "qwen_tc_0" for the
        #    first call of every turn, so an id seen before says nothing about a later turn
        for index, response in enumerate(responses):
            call = next((c for c in latest if not c.generated_id and c.id == response.named_id), None)
            if call is not None:
                matched[index] = call
                latest.remove(call)
        rest = [index for index in range(len(responses)) if index not in matched]
        names = [responses[index].name for index in rest]
        reordered = (all(names) and sorted(names) == sorted(c.name for c in latest)
                     and names != [c.name for c in latest])
        if len(rest) == len(latest) and not reordered:
            # 2. by position: Hermes writes a turn's responses in the order of its calls
            #    (and names each response after the call in its place)
            matched.update(zip(rest, latest))
        elif len(rest) <= len(latest):
            # 3. some calls went unanswered, or the responses name the turn's calls in
            #    another order: a response goes to the first open call of its name, one
            #    without a known name to the first open call left
            for index in rest:
                name = responses[index].name
                call = next((c for c in latest if name and c.name == name), None)
                matched[index] = call
                if call is not None:
                    latest.remove(call)
            for index in rest:
                if matched[index] is None and latest:
                    matched[index] = latest.pop(0)
        else:
            # 4. more responses than the turn has open calls: they answer the last unanswered
            #    calls of the conversation in order (gpt(A) -> gpt(B) -> tool(A, B) pairs A
            #    with A, a late response), and what is left answers nothing
            unanswered = [c for c in self._calls if c.open and c not in matched.values()]
            candidates = unanswered[-len(rest):]
            for index in rest:
                matched[index] = candidates.pop(0) if candidates else None
        for index, response in enumerate(responses):
            call = matched[index]
            if call is None:
                self.keep("unmatched_tool_response", "unmatched_tool_responses",
                          {"turn": position, "raw": response.raw})
                continue
            call.open = False
            if response.named_id:
                self._adopt(call, response.named_id)
            if call in self._latest:
                self.append({"role": "tool", "tool_call_id": call.id, "content": response.content})
            else:  # answers an earlier gpt turn: no valid place for it in the conversation
                self.keep("late_tool_response", "late_tool_responses",
                          {"turn": position, "tool_call_id": call.id, "content": response.content})


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {"name": tool["name"]}
    for key in ("description", "parameters"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}




# ---------------------------------------------------------------- writing


# json.dumps(value, ensure_ascii=False), without making an encoder for each value
_to_json = json.JSONEncoder(ensure_ascii=False).encode


def function_calling_prompt(tools: list[dict[str, Any]] | None) -> str:
    """The Hermes function-calling system prompt, the tools (``{name, description, parameters,
    required: null}`` each) in its ``<tools>`` block: what :func:`write_conversation` puts in
    the system turn, after the conversation's own system prompt if it has one."""
    hermes_tools = [
        {"name": t["function"]["name"], "description": t["function"].get("description", ""),
         "parameters": t["function"].get("parameters", {}), "required": None}
        for t in tools or []
    ]
    return SYSTEM_TEMPLATE.format(tools=_to_json(hermes_tools))


def write_conversation(messages: list[dict[str, Any]], prompt: str) -> list[dict[str, str]]:
    """Canonical messages -> Hermes ShareGPT turns, normalized as the seed describes, with
    ``prompt`` (:func:`function_calling_prompt` of the conversation's tools: the same for every
    conversation offered the same tools, so a caller can make it once). The messages must have
    a Hermes form (the ``sft_hermes`` export checks it): text content, calls whose arguments
    are a JSON object, tool results in the order of their calls."""
    turns: list[dict[str, str]] = []
    own_system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    turns.append({"from": "system", "value": f"{own_system}\n\n{prompt}" if own_system else prompt})
    call_names: dict[str, str] = {}
    pending_responses: list[str] = []
    for message in messages[1:] if own_system else messages:
        role = message["role"]
        if role != "tool" and pending_responses:
            turns.append({"from": "tool", "value": "\n".join(pending_responses)})
            pending_responses = []
        if role == "user":
            turns.append({"from": "human", "value": message["content"]})
        elif role == "assistant":
            turns.append({"from": "gpt", "value": _write_assistant(message, call_names)})
        elif role == "tool":
            content = message["content"]
            # a JSON result is embedded as its value, as Hermes Agent writes tool responses
            parsed = _json_or_none(content) if content.lstrip()[:1] in ("{", "[") else None
            response = {"tool_call_id": message["tool_call_id"], "name": call_names.get(message["tool_call_id"], ""),
                        "content": parsed if parsed is not None else content}
            pending_responses.append(f"<tool_response>\n{_to_json(response)}\n</tool_response>")
    if pending_responses:
        turns.append({"from": "tool", "value": "\n".join(pending_responses)})
    return turns


def _write_assistant(message: dict[str, Any], call_names: dict[str, str]) -> str:
    value = f"<think>\n{message.get('reasoning_content', '')}\n</think>\n" if message.get("reasoning_content") \
        else "<think>\n</think>\n"
    parts = [message["content"]] if message.get("content") else []
    for call in message.get("tool_calls", []):
        call_names[call["id"]] = call["function"]["name"]
        arguments = call["function"]["arguments"]
        body = {"name": call["function"]["name"], "arguments": arguments if isinstance(arguments, dict)
                else orjson.loads(arguments)}
        parts.append(f"<tool_call>\n{_to_json(body)}\n</tool_call>")
    return value + "\n".join(parts)


# ---------------------------------------------------------------- markup in other sources' text


def has_hermes_markup(message: dict[str, Any]) -> bool:
    """Whether a canonical message's text (content, reasoning, call arguments) holds a
    literal Hermes tag.

    >>> has_hermes_markup({"role": "user", "content": "Wrap it in <tool_call> tags."})
    True
    """
    texts = [message.get("content"), message.get("reasoning_content")]
    texts += [call["function"]["arguments"] for call in message.get("tool_calls") or []]
    for text in texts:
        if isinstance(text, list):  # content parts
            text = "\n".join(p["text"] for p in text if isinstance(p, dict) and isinstance(p.get("text"), str))
        if isinstance(text, str) and "<" in text and HERMES_TAG.search(text):
            return True
    return False


def split_inline_reasoning(text: str) -> tuple[str | None, str]:
    """(reasoning, visible text) of assistant text from a reasoning model served without a
    reasoning parser, as vLLM's ``deepseek_r1`` parser splits it.

    >>> split_inline_reasoning("<think>2+2=4</think>\\nIt is 4.")
    ('2+2=4', 'It is 4.')
    >>> split_inline_reasoning("2+2=4\\n</think>\\n\\nIt is 4.")  # template opened <think>
    ('2+2=4', 'It is 4.')
    >>> split_inline_reasoning("<think>cut off mid-thought")  # never closed: all reasoning
    ('cut off mid-thought', '')
    >>> split_inline_reasoning("Use <think> tags.")  # not at the start: plain text
    (None, 'Use <think> tags.')
    """
    stripped = text.lstrip()
    if stripped.startswith(THINK_OPEN):
        reasoning, closed, rest = stripped[len(THINK_OPEN):].partition(THINK_CLOSE)
    else:
        # R1-style chat templates put <think> into the prompt, so the text opens inside it
        reasoning, closed, rest = text.partition(THINK_CLOSE)
        if not closed or THINK_OPEN in reasoning:
            return None, text
    return reasoning.strip(), rest.lstrip() if closed else ""



def _json_or_none(text: str) -> Any:
    """The JSON value of a text a model wrote, or None when it is not JSON. The standard
    library's parser: it also reads the NaN and Infinity Python's json module writes."""
    try:
        return json.loads(text)
    except ValueError:
        return None
