"""Hermes Agent ShareGPT trajectories <-> canonical chat messages.

Hermes writes ``{"conversations": [{"from", "value"}, ...]}`` rows (CLI files and the batch
runner's ``batch_N.jsonl``) whose gpt turns carry ``<think>``, ``<tool_call>{json}``
markup and whose tool turns carry ``<tool_response>{json}`` blocks. :func:`convert_hermes`
parses the markup into structure; :func:`render_hermes` writes any canonical trajectory
back in the seed's normalized form. Parsing what was rendered gives the same messages,
tool call ids included.

Quality problems seen in real files are flagged, never fatal (``QUALITY_FLAGS``).

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
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from trajectory_assets.chat.messages import is_context_summary, prompt_key, unanswered_tool_calls
from trajectory_assets.chat.trajectory import Rejection, Trajectory
from trajectory_assets.io.file_layouts import SideFile
from trajectory_assets.sources.format import SourceFormat, responses_request

SOURCE_FORMAT = "hermes"
FROM_ROLE = {"system": "system", "human": "user", "gpt": "assistant", "tool": "tool"}
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

    parser = _parse(conversations)
    messages = parser.messages
    users = [m for m in messages if m["role"] == "user"]
    if not users:
        raise Rejection("no_prompt", "the conversation holds no human turn")
    prompt_length = messages.index(users[0]) + 1
    if not any(m["role"] == "assistant" for m in messages[prompt_length:]):
        raise Rejection("no_model_output", "the conversation holds no gpt turn after the first human turn")

    partial = record.get("partial") is True  # set only on the agent loop's error returns
    completed = record.get("completed") is not False and not partial
    flags = parser.flags | _conversation_flags(messages, completed)
    if partial:
        flags.add("partial_run")
    prompt = messages[:prompt_length]
    tools = parser.tools
    metadata = {key: value for key, value in record.items() if key not in ("conversations", "model", "completed")}
    metadata.update(parser.kept_responses)
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


def read_conversations(conversations: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """ShareGPT turns in Hermes markup -> (canonical messages, tools), by the rules the
    source applies (the ``sft_hermes`` export reads its rows back with them). Raises
    :class:`Rejection` for turns the rules refuse.

    >>> read_conversations([{"from": "human", "value": "Hi"},
    ...                     {"from": "gpt", "value": "<think>greet</think>Hello"}])
    ([{'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello', 'reasoning_content': 'greet'}], None)
    """
    parser = _parse(conversations)
    return parser.messages, parser.tools


def _parse(conversations: list[Any]) -> "_Parser":
    parser = _Parser()
    for position, turn in enumerate(conversations):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise Rejection("invalid_structure", f"conversations[{position}] is not a {{from, value}} object")
        role = FROM_ROLE.get(turn.get("from"))
        if role is None:
            raise Rejection("unknown_role", f"conversations[{position}] is from {turn.get('from')!r}")
        parser.add(role, turn["value"], position)
    return parser


class _Call:
    """A parsed ``<tool_call>`` and what the matching knows about it."""

    def __init__(self, call: dict[str, Any], turn: dict[str, Any], generated_id: bool) -> None:
        self.call = call  # the canonical entry inside the assistant message
        self.turn = turn  # that assistant message
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
        response = _parse_json_or_none(block)
        if isinstance(response, dict) and "content" in response:
            named_id, name, content = response.get("tool_call_id"), response.get("name"), response["content"]
        else:
            named_id, name, content = None, None, block
        self.named_id = named_id if isinstance(named_id, str) and named_id else None
        self.name = name if isinstance(name, str) and name else None
        self.content = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


class _Parser:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] | None = None
        self.flags: set[str] = set()
        self.kept_responses: dict[str, list[dict[str, Any]]] = {}  # late / unmatched, for metadata
        self._calls: list[_Call] = []  # every call of the conversation, in order
        self._latest: list[_Call] = []  # calls of the latest gpt turn, while tool turns may follow it

    def add(self, role: str, value: str, position: int) -> None:
        if role == "system":
            self._system(value)
        elif role == "user":
            self._latest = []
            self.messages.append({"role": "user", "content": value})
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
            self.messages.append({"role": "system", "content": text})

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
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        calls = [self._call(raw_call, position, number, message)
                 for number, raw_call in enumerate(TOOL_CALL_BLOCK.findall(visible))]
        message["content"] = TOOL_CALL_BLOCK.sub("", visible).strip()
        reasoning = "\n\n".join(part for part in reasoning_parts if part)
        if reasoning:
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = [call.call for call in calls]
        self.messages.append(message)
        self._latest = calls

    def _call(self, raw: str, position: int, number: int, turn: dict[str, Any]) -> _Call:
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
        parsed = _Call(entry, turn, generated_id=own_id is None)
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
                self.flags.add("unmatched_tool_response")
                self.kept_responses.setdefault("unmatched_tool_responses", []).append(
                    {"turn": position, "raw": response.raw})
                continue
            call.open = False
            if response.named_id:
                self._adopt(call, response.named_id)
            if call in self._latest:
                self.messages.append({"role": "tool", "tool_call_id": call.id, "content": response.content})
            else:  # answers an earlier gpt turn: no valid place for it in the conversation
                self.flags.add("late_tool_response")
                self.kept_responses.setdefault("late_tool_responses", []).append(
                    {"turn": position, "tool_call_id": call.id, "content": response.content})


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


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {"name": tool["name"]}
    for key in ("description", "parameters"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


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


def _parse_json_or_none(text: str) -> Any:
    """The JSON value of a text a model wrote, or None when it is not JSON. The standard
    library's parser: it also reads the NaN and Infinity Python's json module writes."""
    try:
        return json.loads(text)
    except ValueError:
        return None


# ---------------------------------------------------------------- rendering


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
